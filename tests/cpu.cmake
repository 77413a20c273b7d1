# CPU reference tests: each op against an independently written formula.
stof_add_test(test_cpu_linear SOURCES test_cpu_linear.c PARTS cpu)
stof_add_test(test_cpu_norm SOURCES test_cpu_norm.c PARTS cpu)
stof_add_test(test_cpu_attention SOURCES test_cpu_attention.c PARTS cpu)
stof_add_test(test_cpu_batch SOURCES test_cpu_batch.c PARTS cpu)
stof_add_test(test_cpu_pool SOURCES test_cpu_pool.c PARTS cpu)
# The CPU backend's attention (tile lists, threads, every ISA) against cpu_attention.
stof_add_test(test_attn_cpu_fast SOURCES test_attn_cpu_fast.c PARTS core cpu mask attn)
# The fast row ops (src/cpu/rows_fast.c) against their exact twins.
stof_add_test(test_cpu_fast SOURCES test_cpu_fast.c PARTS core cpu)
# Models opened, run and closed from 8 threads on one context (the close-while-
# encoding finding); scripts/sanitize_cpu.sh runs it under ThreadSanitizer.
stof_add_test(test_cpu_close_race SOURCES test_cpu_close_race.c
              PARTS core cpu mask attn fuse tune io tok model)
target_compile_definitions(test_cpu_close_race PRIVATE
                           STOF_TEST_DATA_DIR="${CMAKE_CURRENT_SOURCE_DIR}/data")
find_package(Threads REQUIRED)
target_link_libraries(test_cpu_close_race PRIVATE Threads::Threads)
