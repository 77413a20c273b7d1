# bench_fuse: fusion templates vs the cuBLASLt path per encoder segment.
add_executable(bench_fuse ${CMAKE_CURRENT_SOURCE_DIR}/bench_fuse.c)
target_compile_options(bench_fuse PRIVATE ${STOF_C_WARNINGS})
target_link_libraries(bench_fuse PRIVATE stof_fuse stof_cpu stof_core)
