/*
 * tokenize_api.c — the public tokenizer calls of stof.h (open, max length, padded
 * batches) over the WordPiece tokenizer of tokenizer.h, for callers outside the
 * library: the Python binding and the stof command.
 *
 * The folder is resolved as sentence-transformers resolves it: its tokenizer lives
 * with the Transformer module (often the root, 0_Transformer in older layouts), so
 * the layout is read with stof_bert_locate before falling back to the folder itself.
 */
#include "model/config.h"
#include "model/tokenizer.h"

#include <stdlib.h>
#include <string.h>

/* The Transformer module's folder, or dir when the layout does not resolve (a
 * folder holding only a tokenizer, say). */
static stof_status tokenizer_dir(const char *dir, char *out, size_t cap)
{
    bert_files *files;
    STOF_TRY(stof_host_calloc(1, sizeof *files, (void **)&files));
    const char *pick = dir;
    if (stof_bert_locate(dir, files) == STOF_OK)
        pick = files->dir;
    else
        stof_clear_error();
    size_t n = strlen(pick);
    stof_status st = STOF_OK;
    if (n >= cap)
        st = stof_error(STOF_ERR_INVALID_ARG, "model folder path is too long (%zu bytes)", n);
    else
        memcpy(out, pick, n + 1);
    free(files);
    return st;
}

stof_status stof_tokenizer_open(const char *dir, stof_tokenizer **out)
{
    STOF_REQUIRE(out, STOF_ERR_INVALID_ARG, "stof_tokenizer_open: out is NULL");
    *out = NULL;
    STOF_REQUIRE(dir && *dir, STOF_ERR_INVALID_ARG, "stof_tokenizer_open: no model folder given");
    char *path;
    STOF_TRY(stof_host_alloc(BERT_PATH_MAX, (void **)&path));
    stof_status st = tokenizer_dir(dir, path, BERT_PATH_MAX);
    if (st == STOF_OK) st = stof_tokenizer_load(path, out);
    free(path);
    return st;
}

int stof_tokenizer_max_length(const stof_tokenizer *tok, int max_positions)
{
    if (!tok) return 0;
    const stof_tokenizer_info *info = stof_tokenizer_get_info(tok);
    int n = info->st_max_seq_length > 0 ? info->st_max_seq_length : info->model_max_length;
    if (max_positions > 0 && n > max_positions) n = max_positions;
    return n;
}

stof_status stof_tokenize_batch(const stof_tokenizer *tok, const char *const *texts,
                                const size_t *lens, int batch, int max_len, int32_t *ids,
                                size_t ids_cap, int32_t *lengths, int *seq_len)
{
    STOF_REQUIRE(tok && texts && ids && lengths, STOF_ERR_INVALID_ARG,
                 "stof_tokenize_batch: tok, texts, ids and lengths must be given");
    STOF_REQUIRE(batch >= 1, STOF_ERR_INVALID_ARG, "stof_tokenize_batch: batch %d < 1", batch);
    STOF_REQUIRE(max_len >= 2, STOF_ERR_INVALID_ARG,
                 "stof_tokenize_batch: max_len %d leaves no room for [CLS] and [SEP] (at least 2)",
                 max_len);
    stof_token_batch b;
    STOF_TRY(stof_tokenizer_encode_batch(tok, texts, lens, batch, max_len, &b));
    size_t cells = (size_t)b.batch * (size_t)b.seq_len;
    stof_status st = STOF_OK;
    if (cells > ids_cap)
        st = stof_error(STOF_ERR_INVALID_ARG,
                        "stof_tokenize_batch: the batch is %d x %d ids but ids holds %zu", b.batch,
                        b.seq_len, ids_cap);
    if (st == STOF_OK) {
        memcpy(ids, b.ids, cells * sizeof *ids);
        memcpy(lengths, b.lengths, (size_t)batch * sizeof *lengths);
        if (seq_len) *seq_len = b.seq_len;
    }
    stof_token_batch_free(&b);
    return st;
}
