# CPU reference tests: each op against an independently written formula.
stof_add_test(test_cpu_linear SOURCES test_cpu_linear.c PARTS cpu)
stof_add_test(test_cpu_norm SOURCES test_cpu_norm.c PARTS cpu)
stof_add_test(test_cpu_attention SOURCES test_cpu_attention.c PARTS cpu)
stof_add_test(test_cpu_batch SOURCES test_cpu_batch.c PARTS cpu)
