# WordPiece tokenizer: ids identical to Hugging Face's on tests/data/tokens_golden.jsonl
# (with the committed vocabulary; also with models/all-MiniLM-L6-v2 when fetched), error
# cases, invalid UTF-8, truncation and batch padding.
stof_add_test(test_tok_wordpiece SOURCES test_tok_wordpiece.c PARTS core io tok)
target_compile_definitions(test_tok_wordpiece PRIVATE
                           STOF_TEST_DATA_DIR="${CMAKE_CURRENT_SOURCE_DIR}/data"
                           STOF_MODELS_DIR="${CMAKE_SOURCE_DIR}/models")

# Every family's tokenizer.json (BPE byte-level and SentencePiece-style, Unigram) against
# Hugging Face on tests/data/tok/*/golden.jsonl: ids, truncation, decode, batch, streaming.
stof_add_test(test_tok_golden SOURCES test_tok_golden.c PARTS core io tok)
target_compile_definitions(test_tok_golden PRIVATE
                           STOF_TOK_DATA_DIR="${CMAKE_CURRENT_SOURCE_DIR}/data/tok")
