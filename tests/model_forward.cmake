# Encoder forward: the CPU forward against an independent numpy BertModel
# (tests/data/gen_tiny_bert_golden.py) plus API misuse; the GPU forward against
# the CPU one.
stof_add_test(test_model_forward_cpu SOURCES test_model_forward_cpu.c
              PARTS core cpu mask attn fuse tune io tok model)
target_compile_definitions(test_model_forward_cpu PRIVATE
                           STOF_TEST_DATA_DIR="${CMAKE_CURRENT_SOURCE_DIR}/data")
stof_add_test(test_model_forward_gpu SOURCES test_model_forward_gpu.c ckpt_writer.c
              PARTS core cpu mask attn fuse tune io tok model LABELS gpu TIMEOUT 900)
target_compile_definitions(test_model_forward_gpu PRIVATE
                           STOF_TEST_DATA_DIR="${CMAKE_CURRENT_SOURCE_DIR}/data")
