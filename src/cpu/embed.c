/*
 * embed.c — BERT input embeddings for packed tokens: word + token type +
 * position rows summed in float in Hugging Face's order ((word + type) + pos),
 * then LayerNorm in place through cpu_layernorm.
 */
#include "cpu/cpu_ref.h"

#include <stddef.h>

void cpu_embeddings(const int32_t *ids, const int32_t *positions, const int32_t *types, int64_t T,
                    const float *word, const float *pos, const float *type, const float *gamma,
                    const float *beta, int64_t hidden, float eps, float *out)
{
    for (int64_t t = 0; t < T; t++) {
        const float *w = word + (int64_t)ids[t] * hidden;
        const float *p = pos + (int64_t)positions[t] * hidden;
        const float *ty = type + (int64_t)(types ? types[t] : 0) * hidden;
        float *row = out + t * hidden;
        for (int64_t c = 0; c < hidden; c++)
            row[c] = (w[c] + ty[c]) + p[c];
        cpu_layernorm(row, NULL, gamma, beta, row, 1, hidden, eps);
    }
}
