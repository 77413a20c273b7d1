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

# Malformed and hostile tokenizer.json files give named errors; call errors.
stof_add_test(test_tok_errors SOURCES test_tok_errors.c PARTS core io tok)

# stof tokenize: ids of a text and text of ids, as Hugging Face gives them.
if(TARGET stof_cli)
  add_test(NAME test_tok_cli_encode COMMAND stof_cli tokenize --model
           ${CMAKE_CURRENT_SOURCE_DIR}/data/tok/gpt2 "Hello world, naïve")
  set_tests_properties(test_tok_cli_encode PROPERTIES LABELS cpu
                       PASS_REGULAR_EXPRESSION "^{\"ids\":\\[40,69,301,79,721,12,468\\]}")
  add_test(NAME test_tok_cli_decode COMMAND stof_cli tokenize --decode --model
           ${CMAKE_CURRENT_SOURCE_DIR}/data/tok/t5 "[3, 102, 103, 8, 12, 23, 325, 1]")
  set_tests_properties(test_tok_cli_decode PROPERTIES LABELS cpu
                       PASS_REGULAR_EXPRESSION "^{\"text\":\"Zürich 42\"}")
  add_test(NAME test_tok_cli_errors COMMAND stof_cli tokenize --model /nonexistent x)
  set_tests_properties(test_tok_cli_errors PROPERTIES LABELS cpu WILL_FAIL TRUE)
endif()
