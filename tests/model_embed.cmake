# Sentence embeddings end to end (tokenizer -> encoder -> pooling) against
# sentence-transformers (tests/data/embed_golden.jsonl, gen_embed_golden.py), through the
# public API and through `stof embed` (tools/cmd_embed.c linked into the test, its output
# captured). One binary, three entries: the CPU golden check (skipped without
# models/all-MiniLM-L6-v2: run scripts/fetch_model.sh), the GPU fp16/bf16 golden check,
# and bad input on small folders built from tests/data/tiny_bert (needs no real model).
stof_add_test(test_model_embed
              SOURCES test_model_embed.c ${CMAKE_SOURCE_DIR}/tools/cmd_embed.c
                      ${CMAKE_SOURCE_DIR}/tools/cli.c
              PARTS core cpu mask attn fuse tune io tok model)
target_include_directories(test_model_embed PRIVATE ${CMAKE_SOURCE_DIR}/tools)
target_compile_definitions(test_model_embed PRIVATE
                           STOF_TEST_DATA_DIR="${CMAKE_CURRENT_SOURCE_DIR}/data"
                           STOF_MODELS_DIR="${CMAKE_SOURCE_DIR}/models")
add_test(NAME test_model_embed_gpu COMMAND test_model_embed --gpu)
set_tests_properties(test_model_embed_gpu PROPERTIES LABELS gpu SKIP_RETURN_CODE 77 TIMEOUT 900)
add_test(NAME test_model_embed_errors COMMAND test_model_embed --errors)
set_tests_properties(test_model_embed_errors PROPERTIES LABELS cpu SKIP_RETURN_CODE 77
                                                       TIMEOUT 600)
