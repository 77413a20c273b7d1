stof_add_test(test_core SOURCES test_core.c PARTS core)
