# Sparse attention benchmark over the BENCH.md shapes and masks (exits 77 without a GPU).
add_executable(bench_attention bench_attention.c)
target_compile_options(bench_attention PRIVATE ${STOF_C_WARNINGS})
target_link_libraries(bench_attention PRIVATE stof_core stof_cpu stof_mask stof_attn)
set_target_properties(bench_attention PROPERTIES CUDA_RESOLVE_DEVICE_SYMBOLS ON)
