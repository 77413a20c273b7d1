# WordPiece tokenizer: ids identical to Hugging Face's on tests/data/tokens_golden.jsonl
# (with the committed vocabulary; also with models/all-MiniLM-L6-v2 when fetched), error
# cases, invalid UTF-8, truncation and batch padding.
stof_add_test(test_model_tokenizer SOURCES test_model_tokenizer.c PARTS core cpu mask attn fuse tune io model)
target_compile_definitions(test_model_tokenizer PRIVATE
                           STOF_TEST_DATA_DIR="${CMAKE_CURRENT_SOURCE_DIR}/data"
                           STOF_MODELS_DIR="${CMAKE_SOURCE_DIR}/models")
