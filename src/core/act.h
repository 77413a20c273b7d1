/*
 * act.h — the one activation enum of stof. The CPU reference, the GPU
 * templates, the model descriptions and the tuner all speak it; HF config
 * names map onto it in one place (act_from_hf).
 */
#ifndef STOF_CORE_ACT_H
#define STOF_CORE_ACT_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum stof_act {
    ACT_NONE = 0,
    ACT_GELU = 1,      /* exact: 0.5 x (1 + erf(x / sqrt 2)) (HF "gelu") */
    ACT_GELU_TANH = 2, /* tanh approximation (HF "gelu_new", "gelu_pytorch_tanh", "gelu_fast") */
    ACT_RELU = 3,
    ACT_SILU = 4 /* x * sigmoid(x) (HF "silu", "swish") */
} stof_act;

#ifdef __cplusplus
}
#endif

#endif /* STOF_CORE_ACT_H */
