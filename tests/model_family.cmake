# Every model family on the CPU executor against Hugging Face's fp32 outputs
# (tests/data/families, written by gen_family_golden.py): padded, packed and
# mask-intersected batches, logits, and the loader's named errors.
stof_add_test(test_model_family SOURCES test_model_family.c family_golden.c
              PARTS core cpu mask attn fuse tune io tok model)
target_compile_definitions(test_model_family PRIVATE
                           STOF_TEST_DATA_DIR="${CMAKE_CURRENT_SOURCE_DIR}/data")
# The CPU ops those families add (RMSNorm, RoPE, GLU) against formulas in double.
stof_add_test(test_cpu_family_ops SOURCES test_cpu_family_ops.c PARTS cpu)
