# Model loading: safetensors parser, config.json, folder layouts, BERT weights (CPU only).
stof_add_test(test_model_load SOURCES test_model_load.c PARTS core cpu mask attn fuse tune io tok model)
target_compile_definitions(test_model_load PRIVATE
                           STOF_TEST_DATA_DIR="${CMAKE_CURRENT_SOURCE_DIR}/data")
