# fuse: descriptor logic and argument checks run anywhere; the kernels are
# checked against the CPU reference on a GPU.
stof_add_test(test_fuse_config SOURCES test_fuse_config.c PARTS core fuse)
stof_add_test(test_fuse_rows SOURCES test_fuse_rows.c test_fuse_dev.cu PARTS core cpu fuse
              LABELS gpu)
stof_add_test(test_fuse_gemm SOURCES test_fuse_gemm.c test_fuse_dev.cu PARTS core cpu fuse
              LABELS gpu TIMEOUT 300)
stof_add_test(test_fuse_decoder SOURCES test_fuse_decoder.c test_fuse_dev.cu PARTS core cpu fuse
              LABELS gpu)
stof_add_test(test_fuse_epilogues SOURCES test_fuse_epilogues.c test_fuse_dev.cu
              PARTS core cpu fuse LABELS gpu TIMEOUT 300)
stof_add_test(test_fuse_rope_epi SOURCES test_fuse_rope_epi.c test_fuse_dev.cu
              PARTS core cpu fuse LABELS gpu TIMEOUT 300)
