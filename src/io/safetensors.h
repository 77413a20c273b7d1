/*
 * safetensors.h — a reader for .safetensors files (Hugging Face's tensor
 * container) that treats every byte as untrusted.
 *
 * Layout: 8-byte little-endian header length N, N bytes of JSON mapping tensor
 * names to {"dtype", "shape", "data_offsets": [begin, end]} (plus an optional
 * "__metadata__" object of strings), then the data section; offsets are
 * relative to the start of the data section. A parsed file keeps pointers into
 * the caller's buffer or its own read-only mapping: tensor data is never copied.
 */
#ifndef STOF_IO_SAFETENSORS_H
#define STOF_IO_SAFETENSORS_H

#include "core/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Largest header accepted (the reference implementation's bound). */
#define SAFETENSORS_MAX_HEADER 100000000u
/* Largest rank accepted; real checkpoints stay far below it. */
#define SAFETENSORS_MAX_DIMS 8

/* Every byte-sized dtype the format defines. Sub-byte ones (F4, F6_*) are
 * rejected as unknown. */
typedef enum safetensors_dtype {
    ST_BOOL = 0,
    ST_U8,
    ST_I8,
    ST_F8_E5M2,
    ST_F8_E4M3,
    ST_I16,
    ST_U16,
    ST_F16,
    ST_BF16,
    ST_I32,
    ST_U32,
    ST_F32,
    ST_I64,
    ST_U64,
    ST_F64,
    ST_DTYPE_COUNT
} safetensors_dtype;

typedef struct safetensors_tensor {
    char *name;
    safetensors_dtype dtype;
    int ndim;
    int64_t shape[SAFETENSORS_MAX_DIMS];
    int64_t numel;
    uint64_t begin, end; /* byte range inside the data section */
    const void *data;    /* start of the bytes (no alignment promised) */
} safetensors_tensor;

typedef struct safetensors_file {
    char *name; /* path or caller label, used in messages */
    int n_tensors;
    safetensors_tensor *tensors; /* sorted by name */
    const uint8_t *data;         /* start of the data section */
    uint64_t data_bytes;
    void *map; /* owned mapping or heap copy (NULL when borrowed) */
    size_t map_bytes;
    int map_is_mmap;
} safetensors_file;

/* Open and validate path. On failure *out is NULL and the message names the
 * file, the tensor and the offending value (STOF_ERR_IO when the file cannot
 * be read, STOF_ERR_FORMAT when its content is malformed). */
stof_status stof_safetensors_open(const char *path, safetensors_file **out);
/* Validate an in-memory file of size bytes. The buffer is borrowed: it must
 * outlive *out. name labels messages. */
stof_status stof_safetensors_parse(const void *buf, size_t size, const char *name,
                                   safetensors_file **out);
void stof_safetensors_close(safetensors_file *f);

/* The tensor called name, or NULL. */
const safetensors_tensor *stof_safetensors_find(const safetensors_file *f, const char *name);

/* "F32", "BF16", ... and bytes per element. */
const char *stof_safetensors_dtype_name(safetensors_dtype dtype);
size_t stof_safetensors_dtype_size(safetensors_dtype dtype);
/* Shape as text, "[768, 3072]", into buf (always NUL-terminated). */
void stof_safetensors_shape_str(const int64_t *shape, int ndim, char *buf, size_t cap);

#ifdef __cplusplus
}
#endif

#endif /* STOF_IO_SAFETENSORS_H */
