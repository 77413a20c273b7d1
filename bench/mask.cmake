# bench_mask_compile: GPU mask compile time of the BENCH.md longformer and
# bigbird masks at (4, 16, 4096); --json FILE for the results (exits 77 without a GPU).
add_executable(bench_mask_compile ${CMAKE_CURRENT_SOURCE_DIR}/bench_mask_compile.c)
target_compile_options(bench_mask_compile PRIVATE ${STOF_C_WARNINGS})
target_link_libraries(bench_mask_compile PRIVATE stof_mask stof_core CUDA::cudart)
set_target_properties(bench_mask_compile PROPERTIES CUDA_RESOLVE_DEVICE_SYMBOLS ON)
