# Sparse attention: the selector and the row-wise bit tricks (CPU, no mask part
# needed), the CPU backend against the reference, the GPU kernels against it.
stof_add_test(test_attn_select SOURCES test_attn_select.c ${CMAKE_SOURCE_DIR}/src/attn/select.c
              PARTS core)
stof_add_test(test_attn_cpu SOURCES test_attn_cpu.c PARTS core cpu mask attn)
stof_add_test(test_attn_gpu SOURCES test_attn_gpu.c PARTS core cpu mask attn LABELS gpu
              TIMEOUT 900)
# Decoder and T5 features on the GPU (GQA, offsets, biases, soft cap, head dims 32-256).
stof_add_test(test_attn_gpu_decoder SOURCES test_attn_gpu_decoder.c PARTS core cpu mask attn
              LABELS gpu TIMEOUT 900)
