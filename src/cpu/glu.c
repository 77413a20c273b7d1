/*
 * glu.c — the gated linear unit of SwiGLU (LLaMA) and GeGLU (ModernBERT):
 * the first half of each row goes through the activation and multiplies the
 * second half. The canonical layout (src/model/engine.h) puts the activated
 * half first whatever the checkpoint's order.
 */
#include "cpu/cpu_ref.h"

#include <string.h>

void cpu_glu(const float *x, float *y, int64_t rows, int64_t inter, stof_act act)
{
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * 2 * inter;
        float *yr = y + r * inter;
        /* y may alias x's first half: copy forward, then read only the second half. */
        memmove(yr, xr, (size_t)inter * sizeof(float));
        cpu_activation(yr, inter, act);
        for (int64_t i = 0; i < inter; i++)
            yr[i] *= xr[inter + i];
    }
}
