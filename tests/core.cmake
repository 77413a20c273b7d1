stof_add_test(test_core SOURCES test_core.c PARTS core)
stof_add_test(test_core_file SOURCES test_core_file.c PARTS core)
