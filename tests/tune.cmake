# Tuner tests: the persistent cache (keys, file format, damaged files,
# concurrent writers) and the stage-2 budget arithmetic. CPU only.
stof_add_test(test_tune_cache SOURCES test_tune_cache.c PARTS core tune)
# The two-stage search on synthetic plans whose best is known. CPU only.
stof_add_test(test_tune_search SOURCES test_tune_search.c PARTS core tune)
