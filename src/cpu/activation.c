/*
 * activation.c — the elementwise activations of the encoder: exact (erf) GELU,
 * its tanh approximation, ReLU and SiLU. Each is evaluated in double and rounded
 * once, so the float result is the correctly rounded value of the formula
 * up to libm's erf/tanh accuracy.
 */
#include "cpu/cpu_ref.h"

#include <math.h>

float cpu_gelu(float x)
{
    double xd = x;
    return (float)(0.5 * xd * (1.0 + erf(xd * 0.70710678118654752440)));
}

float cpu_gelu_tanh(float x)
{
    const double sqrt_2_over_pi = 0.79788456080286535588;
    double xd = x;
    double inner = sqrt_2_over_pi * (xd + 0.044715 * xd * xd * xd);
    return (float)(0.5 * xd * (1.0 + tanh(inner)));
}

/* NaN passes through (x < 0 is false for NaN), as torch.relu does. */
static float relu(float x)
{
    return x < 0.0f ? 0.0f : x;
}

static float silu(float x)
{
    double xd = x;
    return (float)(xd / (1.0 + exp(-xd)));
}

void cpu_activation(float *x, int64_t n, stof_act act)
{
    switch (act) {
    case ACT_NONE: return;
    case ACT_GELU:
        for (int64_t i = 0; i < n; i++)
            x[i] = cpu_gelu(x[i]);
        return;
    case ACT_GELU_TANH:
        for (int64_t i = 0; i < n; i++)
            x[i] = cpu_gelu_tanh(x[i]);
        return;
    case ACT_RELU:
        for (int64_t i = 0; i < n; i++)
            x[i] = relu(x[i]);
        return;
    case ACT_SILU:
        for (int64_t i = 0; i < n; i++)
            x[i] = silu(x[i]);
        return;
    }
}
