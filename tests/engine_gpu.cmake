# The GPU engine: every family's GPU forward against the CPU executor on
# random-weight checkpoints the test writes (tests/ckpt_writer.c).
stof_add_test(test_engine_gpu SOURCES test_engine_gpu.c ckpt_writer.c
              PARTS core cpu mask attn fuse tune io tok model LABELS gpu TIMEOUT 600)
