/*
 * json.c — whole-file reads and typed JSON getters for the files of a model folder
 * (see json.h). Every error names the file and the key, since these files come from
 * wherever the user downloaded the model.
 */
#include "io/json.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

bool io_file_exists(const char *path)
{
    return stof_file_exists(path);
}

bool io_dir_exists(const char *path)
{
    struct stat s;
    return stat(path, &s) == 0 && S_ISDIR(s.st_mode);
}

stof_status io_join_path(char *out, size_t cap, const char *dir, const char *name)
{
    int w = snprintf(out, cap, "%s/%s", dir, name);
    STOF_REQUIRE(w > 0 && (size_t)w < cap, STOF_ERR_INVALID_ARG, "path too long: %s/%s", dir, name);
    return STOF_OK;
}

stof_status io_read_file(const char *path, char **out, size_t *len)
{
    return stof_read_file(path, IO_MAX_FILE_BYTES, out, len);
}

stof_status io_json_parse(const char *text, size_t len, const char *name, cJSON **root)
{
    *root = cJSON_ParseWithLength(text, len);
    if (*root) return STOF_OK;
    const char *at = cJSON_GetErrorPtr();
    long off = at && at >= text && at <= text + len ? (long)(at - text) : -1;
    return stof_error(STOF_ERR_PARSE, "%s is not valid JSON (near byte %ld)", name, off);
}

stof_status io_json_load_if_present(const char *dir, const char *name, cJSON **root)
{
    char path[4096];
    *root = NULL;
    STOF_TRY(io_join_path(path, sizeof path, dir, name));
    if (!io_file_exists(path)) return STOF_OK;
    char *text;
    size_t len;
    STOF_TRY(io_read_file(path, &text, &len));
    stof_status st = io_json_parse(text, len, path, root);
    free(text);
    STOF_TRY(st);
    STOF_REQUIRE(cJSON_IsObject(*root), STOF_ERR_FORMAT, "%s is not a JSON object", path);
    return STOF_OK;
}

const char *io_json_type_name(const cJSON *v)
{
    if (!v) return "absent";
    if (cJSON_IsBool(v)) return "a boolean";
    if (cJSON_IsNumber(v)) return "a number";
    if (cJSON_IsString(v)) return "a string";
    if (cJSON_IsNull(v)) return "null";
    if (cJSON_IsArray(v)) return "an array";
    return "an object";
}

stof_status io_json_string(const cJSON *obj, const char *key, bool null_ok, const char **out,
                           const char *file)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    *out = NULL;
    if (!v || (null_ok && cJSON_IsNull(v))) return STOF_OK;
    STOF_REQUIRE(cJSON_IsString(v), STOF_ERR_FORMAT, "%s: %s must be a string, not %s", file, key,
                 io_json_type_name(v));
    *out = v->valuestring;
    return STOF_OK;
}

/* obj.key as a boolean into *dst when present; null gives -1 where allowed. */
stof_status io_json_bool(const cJSON *obj, const char *key, bool null_ok, int *dst,
                         const char *file)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v) return STOF_OK;
    if (cJSON_IsBool(v)) {
        *dst = cJSON_IsTrue(v);
        return STOF_OK;
    }
    if (null_ok && cJSON_IsNull(v)) {
        *dst = -1;
        return STOF_OK;
    }
    return stof_error(STOF_ERR_FORMAT, "%s: %s must be true or false%s, not %s", file, key,
                      null_ok ? " or null" : "", io_json_type_name(v));
}

stof_status io_json_int(const cJSON *obj, const char *key, double lo, double hi, int *dst,
                        const char *file)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v || cJSON_IsNull(v)) return STOF_OK;
    STOF_REQUIRE(cJSON_IsNumber(v), STOF_ERR_FORMAT, "%s: %s must be a number, not %s", file, key,
                 io_json_type_name(v));
    double d = v->valuedouble;
    STOF_REQUIRE(d >= lo && d <= hi && d == (double)(long long)d, STOF_ERR_FORMAT,
                 "%s: %s = %.17g, expected an integer in [%.0f, %.0f]", file, key, d, lo, hi);
    *dst = (int)d;
    return STOF_OK;
}
