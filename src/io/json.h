/*
 * json.h — reading the small JSON and text files of a model folder (untrusted input):
 * whole-file reads with a size bound, parsing with cJSON (whose nesting limit keeps a
 * deeply nested file from exhausting the stack), and typed getters whose errors name
 * the file, the key and what was found instead.
 */
#ifndef STOF_IO_JSON_H
#define STOF_IO_JSON_H

#include "core/core.h"

#include <cjson/cJSON.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Files above this are refused (STOF_ERR_FORMAT) before they are read whole. */
#define IO_MAX_FILE_BYTES ((size_t)1 << 30)

/* Whether anything is at path: a folder or FIFO where a file belongs is then named by
 * the reader (io_read_file) rather than taken for a missing file. */
bool io_file_exists(const char *path);
bool io_dir_exists(const char *path);
/* out = dir/name; STOF_ERR_INVALID_ARG when it does not fit in cap bytes. */
stof_status io_join_path(char *out, size_t cap, const char *dir, const char *name);
/* Whole file, NUL-terminated (the terminator is not counted in *len); free() it. */
stof_status io_read_file(const char *path, char **out, size_t *len);
/* Parses text (len bytes) into *root; STOF_ERR_PARSE names the byte where it failed. */
stof_status io_json_parse(const char *text, size_t len, const char *name, cJSON **root);
/* Parses dir/name, which must hold a JSON object, into *root; *root stays NULL when the
 * file does not exist. */
stof_status io_json_load_if_present(const char *dir, const char *name, cJSON **root);

/* The JSON type of v in words ("a string", "null", ...), for error messages. */
const char *io_json_type_name(const cJSON *v);
/* obj[key] as a string: *out = NULL when absent (or null and null_ok). */
stof_status io_json_string(const cJSON *obj, const char *key, bool null_ok, const char **out,
                           const char *file);
/* obj[key] as a bool into *dst (0/1), left alone when absent or null (null_ok). */
stof_status io_json_bool(const cJSON *obj, const char *key, bool null_ok, int *dst,
                         const char *file);
/* obj[key] as an integer in [lo, hi] into *dst, left alone when absent or null. */
stof_status io_json_int(const cJSON *obj, const char *key, double lo, double hi, int *dst,
                        const char *file);

#ifdef __cplusplus
}
#endif

#endif /* STOF_IO_JSON_H */
