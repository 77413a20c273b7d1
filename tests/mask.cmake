# Mask tests: spec parsing and API misuse, the CPU compiler against the dense
# oracle, and the GPU compiler against the CPU one (byte for byte).
stof_add_test(test_mask_parse SOURCES test_mask_parse.c PARTS core mask)
stof_add_test(test_mask_compile SOURCES test_mask_compile.c PARTS core mask TIMEOUT 900)
stof_add_test(test_mask_gpu SOURCES test_mask_gpu.c PARTS core mask LABELS gpu TIMEOUT 900)
stof_add_test(test_mask_tile SOURCES test_mask_tile.c PARTS core mask)
# Specs within a model's own masks on the CPU executor (tests/data/families):
# the family's band written by the user changes nothing, sparse specs under
# causal and local layers match the reference on the fast path.
stof_add_test(test_mask_model SOURCES test_mask_model.c
              PARTS core cpu mask attn fuse tune io tok model)
target_compile_definitions(test_mask_model PRIVATE
                           STOF_TEST_DATA_DIR="${CMAKE_CURRENT_SOURCE_DIR}/data")
