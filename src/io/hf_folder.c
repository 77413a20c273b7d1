/*
 * hf_folder.c — the tokenizer folder of a model folder (see hf_folder.h).
 */
#include "io/hf_folder.h"
#include "io/json.h"

#include <stdlib.h>
#include <string.h>

static bool has_tokenizer_files(const char *dir)
{
    static const char *const names[] = {"tokenizer.json", "vocab.txt"};
    char path[IO_PATH_MAX];
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (io_join_path(path, sizeof path, dir, names[i]) == STOF_OK && io_file_exists(path))
            return true;
    return false;
}

static const char *type_suffix(const char *type)
{
    const char *dot = strrchr(type, '.');
    return dot ? dot + 1 : type;
}

/* modules.json's Transformer path into *path (NULL when it names none). The path is
 * relative and may not climb out of the folder. */
static stof_status transformer_path(const cJSON *root, const char *file, const char **path)
{
    *path = NULL;
    STOF_REQUIRE(cJSON_IsArray(root), STOF_ERR_FORMAT, "%s: must be a JSON array, not %s", file,
                 io_json_type_name(root));
    for (const cJSON *m = root->child; m; m = m->next) {
        const char *type, *p;
        STOF_REQUIRE(cJSON_IsObject(m), STOF_ERR_FORMAT, "%s: a module is %s, not an object", file,
                     io_json_type_name(m));
        STOF_TRY(io_json_string(m, "type", false, &type, file));
        STOF_TRY(io_json_string(m, "path", true, &p, file));
        if (!type || strcmp(type_suffix(type), "Transformer") != 0) continue;
        p = p ? p : "";
        STOF_REQUIRE(p[0] != '/' && strstr(p, "..") == NULL, STOF_ERR_FORMAT,
                     "%s: module path \"%.200s\" leaves the model folder", file, p);
        *path = p;
        return STOF_OK;
    }
    return STOF_OK;
}

static stof_status copy_out(char *out, size_t cap, const char *dir, const char *sub)
{
    if (!sub || !*sub) {
        size_t n = strlen(dir);
        STOF_REQUIRE(n < cap, STOF_ERR_INVALID_ARG, "model folder path is too long (%zu bytes)", n);
        memcpy(out, dir, n + 1);
        return STOF_OK;
    }
    return io_join_path(out, cap, dir, sub);
}

stof_status io_hf_tokenizer_dir(const char *dir, char *out, size_t cap)
{
    STOF_REQUIRE(dir && *dir && out, STOF_ERR_INVALID_ARG, "no model folder given");
    STOF_REQUIRE(io_dir_exists(dir), STOF_ERR_IO, "%s: not a folder", dir);
    char path[IO_PATH_MAX];
    STOF_TRY(io_join_path(path, sizeof path, dir, "modules.json"));
    if (io_file_exists(path)) {
        char *text;
        size_t len;
        cJSON *root;
        STOF_TRY(io_read_file(path, &text, &len));
        stof_status st = io_json_parse(text, len, path, &root);
        free(text);
        STOF_TRY(st);
        const char *sub = NULL;
        st = transformer_path(root, path, &sub);
        if (st == STOF_OK && sub) st = copy_out(out, cap, dir, sub);
        cJSON_Delete(root);
        if (st != STOF_OK || sub) return st;
    }
    if (!has_tokenizer_files(dir)) {
        STOF_TRY(io_join_path(path, sizeof path, dir, "0_Transformer"));
        if (has_tokenizer_files(path)) return copy_out(out, cap, path, NULL);
    }
    return copy_out(out, cap, dir, NULL);
}
