/*
 * rope.c — rotary position embeddings as Hugging Face computes them: the
 * inverse frequencies of the rope init functions (default, linear, llama3),
 * then q * cos + rotate_half(q) * sin on the leading rot_dim dims of a head.
 *
 * The frequencies and the angle position * inv_freq are formed in float,
 * in HF's order of operations, because HF forms them in fp32 and an angle of
 * a few thousand radians carries its rounding into cos and sin; cos and sin
 * themselves are taken in double and rounded once.
 */
#include "cpu/cpu_ref.h"

#include <math.h>
#include <stdbool.h>

/* desc_rope_scaling's values (src/model/desc.h); the CPU part sits below the
 * model part and does not include it. */
enum { ROPE_NONE = 0, ROPE_LINEAR = 1, ROPE_LLAMA3 = 2 };

/* LLaMA 3.1: long wavelengths slow down by factor, short ones stay, and the
 * band between is interpolated (transformers' _compute_llama3_parameters). */
static float llama3_scale(float inv_freq, float factor, float low_freq_factor,
                          float high_freq_factor, float old_context)
{
    const float two_pi = 6.283185307179586f;
    float low_freq_wavelen = old_context / low_freq_factor;
    float high_freq_wavelen = old_context / high_freq_factor;
    float wavelen = two_pi / inv_freq;
    float scaled = wavelen > low_freq_wavelen ? inv_freq / factor : inv_freq;
    bool medium = !(wavelen < high_freq_wavelen) && !(wavelen > low_freq_wavelen);
    if (!medium) return scaled;
    float smooth = (old_context / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor);
    return (1.0f - smooth) * scaled / factor + smooth * scaled;
}

void cpu_rope_freqs(float theta, int rot_dim, int scaling, float factor, float low_freq_factor,
                    float high_freq_factor, int original_max_positions, float *inv_freq)
{
    for (int i = 0; i < rot_dim / 2; i++) {
        float exponent = (float)(2 * i) / (float)rot_dim;
        float f = 1.0f / powf(theta, exponent);
        if (scaling == ROPE_LINEAR) f = f / factor;
        if (scaling == ROPE_LLAMA3)
            f = llama3_scale(f, factor, low_freq_factor, high_freq_factor,
                             (float)original_max_positions);
        inv_freq[i] = f;
    }
}

static void rope_head(float *x, int32_t position, const float *inv_freq, int rot_dim)
{
    int half = rot_dim / 2;
    for (int i = 0; i < half; i++) {
        float angle = (float)position * inv_freq[i];
        float c = (float)cos((double)angle), s = (float)sin((double)angle);
        float a = x[i], b = x[i + half];
        x[i] = a * c - b * s;
        x[i + half] = b * c + a * s;
    }
}

void cpu_rope(float *x, int64_t tokens, int heads, int head_dim, int64_t row_stride,
              const int32_t *positions, const float *inv_freq, int rot_dim)
{
    for (int64_t t = 0; t < tokens; t++)
        for (int h = 0; h < heads; h++)
            rope_head(x + t * row_stride + (int64_t)h * head_dim, positions[t], inv_freq,
                      rot_dim);
}
