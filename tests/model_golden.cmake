# Every family against Hugging Face's fp32 golden outputs on the GPU (f16 and
# bf16; tests/data/families/<family>_hd32), the tuner on families beside BERT,
# and the tuning cache's key of a model (CPU).
stof_add_test(test_model_golden_gpu SOURCES test_model_golden_gpu.c family_golden.c
              PARTS core cpu mask attn fuse tune io tok model LABELS gpu TIMEOUT 600)
stof_add_test(test_model_tune_gpu SOURCES test_model_tune_gpu.c family_golden.c
              PARTS core cpu mask attn fuse tune io tok model LABELS gpu TIMEOUT 600)
stof_add_test(test_model_tune_key SOURCES test_model_tune_key.c
              PARTS core cpu mask attn fuse tune io tok model)
foreach(t test_model_golden_gpu test_model_tune_gpu test_model_tune_key)
  if(TARGET ${t})
    target_compile_definitions(${t} PRIVATE STOF_TEST_DATA_DIR="${CMAKE_CURRENT_SOURCE_DIR}/data")
  endif()
endforeach()
