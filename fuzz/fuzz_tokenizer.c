/*
 * fuzz_tokenizer.c — libFuzzer harness for the WordPiece tokenizer.
 *
 * Input: one byte of options, then arbitrary bytes of text (any encoding, invalid UTF-8,
 * NULs). The options pick max_len and one of three tokenizers built at start-up over the
 * committed BERT vocabulary (tests/data/tokens_golden_vocab): uncased BERT, cased (no
 * lower-casing, no accent stripping, no CJK spacing) and accent stripping without
 * lower-casing, so every stage of the pipeline runs. Beside the sanitizers' checks, the
 * harness aborts when an encoding breaks an invariant: [CLS] first, [SEP] last, ids
 * inside the vocabulary, at most max_len ids, truncation a prefix of the full encoding,
 * the count consistent with the ids, and a padded batch identical to single encodings.
 *
 * The vocabulary folder is $STOF_FUZZ_VOCAB_DIR, else STOF_FUZZ_VOCAB_DIR as compiled
 * in, else tests/data/tokens_golden_vocab under the working folder.
 */
#include "tok/wordpiece.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef STOF_FUZZ_VOCAB_DIR
#define STOF_FUZZ_VOCAB_DIR "tests/data/tokens_golden_vocab"
#endif

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum { N_TOKENIZERS = 3 };
static tok_wp *tokenizers[N_TOKENIZERS];
static char variant_dirs[N_TOKENIZERS][4096];

#define REQUIRE(cond, ...)                                                                         \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_tokenizer: %s: ", #cond);                                        \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

static void remove_variant_dirs(void)
{
    for (int i = 1; i < N_TOKENIZERS; i++) {
        char path[4200];
        snprintf(path, sizeof path, "%s/vocab.txt", variant_dirs[i]);
        unlink(path);
        snprintf(path, sizeof path, "%s/tokenizer_config.json", variant_dirs[i]);
        unlink(path);
        rmdir(variant_dirs[i]);
    }
}

/* A temporary folder with the vocabulary (linked) and the given tokenizer_config.json. */
static void make_variant(int i, const char *vocab_dir, const char *config)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(variant_dirs[i], sizeof variant_dirs[i], "%s/stof_fuzz_tok_XXXXXX",
             tmp && *tmp ? tmp : "/tmp");
    REQUIRE(mkdtemp(variant_dirs[i]), "cannot create %s", variant_dirs[i]);
    char target[4200], path[4200];
    if (vocab_dir[0] == '/') {
        snprintf(target, sizeof target, "%s/vocab.txt", vocab_dir);
    } else {
        char cwd[4096];
        REQUIRE(getcwd(cwd, sizeof cwd), "getcwd failed");
        snprintf(target, sizeof target, "%s/%s/vocab.txt", cwd, vocab_dir);
    }
    snprintf(path, sizeof path, "%s/vocab.txt", variant_dirs[i]);
    REQUIRE(symlink(target, path) == 0, "cannot link %s", path);
    snprintf(path, sizeof path, "%s/tokenizer_config.json", variant_dirs[i]);
    FILE *f = fopen(path, "w");
    REQUIRE(f && fputs(config, f) >= 0, "cannot write %s", path);
    fclose(f);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    const char *dir = getenv("STOF_FUZZ_VOCAB_DIR");
    if (!dir || !*dir) dir = STOF_FUZZ_VOCAB_DIR;
    make_variant(1, dir, "{\"do_lower_case\": false, \"tokenize_chinese_chars\": false}");
    make_variant(2, dir, "{\"do_lower_case\": false, \"strip_accents\": true}");
    atexit(remove_variant_dirs);
    const char *dirs[N_TOKENIZERS] = {dir, variant_dirs[1], variant_dirs[2]};
    for (int i = 0; i < N_TOKENIZERS; i++) {
        stof_status st = tok_wp_load(dirs[i], &tokenizers[i]);
        REQUIRE(st == STOF_OK, "cannot load the vocabulary in %s: %s (set STOF_FUZZ_VOCAB_DIR)",
                dirs[i], stof_last_error());
    }
    return 0;
}

static void check_framing(const tok_wp *tok, const int32_t *ids, int n, int max_len)
{
    const tok_wp_info *in = tok_wp_get_info(tok);
    REQUIRE(n >= 2 && n <= max_len, "%d ids for max_len %d", n, max_len);
    REQUIRE(ids[0] == in->cls_id && ids[n - 1] == in->sep_id, "not framed by [CLS] [SEP]");
    for (int i = 0; i < n; i++) {
        REQUIRE(ids[i] >= 0 && ids[i] < in->vocab_size, "id %d at %d", ids[i], i);
        REQUIRE(tok_wp_id_to_token(tok, ids[i]) != NULL, "id %d has no entry", ids[i]);
    }
}

/* A padded batch of the text split in up to three parts must hold the single encodings. */
static void check_batch(const tok_wp *tok, const char *text, size_t size, int max_len)
{
    const char *texts[3] = {text, text + size / 3, text + 2 * (size / 3)};
    size_t lens[3] = {size / 3, size / 3, size - 2 * (size / 3)};
    tok_wp_batch b;
    REQUIRE(tok_wp_encode_batch(tok, texts, lens, 3, max_len, &b) == STOF_OK, "%s",
            stof_last_error());
    int32_t *ids = malloc((size_t)max_len * sizeof *ids);
    REQUIRE(ids, "out of memory");
    for (int r = 0; r < 3; r++) {
        int n = 0;
        REQUIRE(tok_wp_encode(tok, texts[r], lens[r], max_len, ids, max_len, &n) == STOF_OK,
                "%s", stof_last_error());
        REQUIRE(b.lengths[r] == n && n <= b.seq_len, "row %d: %d vs %d", r, b.lengths[r], n);
        const int32_t *row = b.ids + (size_t)r * b.seq_len;
        const int32_t *mask = b.attention_mask + (size_t)r * b.seq_len;
        for (int j = 0; j < b.seq_len; j++) {
            REQUIRE(j < n ? row[j] == ids[j] && mask[j] == 1
                          : row[j] == tok_wp_get_info(tok)->pad_id && mask[j] == 0,
                    "row %d, position %d", r, j);
        }
    }
    free(ids);
    tok_wp_batch_free(&b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    const tok_wp *tok = tokenizers[data[0] % N_TOKENIZERS];
    /* max_len from 2 to 65, or the default 512 */
    int opt = data[0] / N_TOKENIZERS;
    int max_len = opt < 64 ? 2 + opt : 512;
    const char *text = (const char *)data + 1;
    size--;

    int32_t *ids = malloc((size_t)max_len * sizeof *ids);
    REQUIRE(ids, "out of memory");
    int n = 0;
    REQUIRE(tok_wp_encode(tok, text, size, max_len, ids, max_len, &n) == STOF_OK, "%s",
            stof_last_error());
    check_framing(tok, ids, n, max_len);

    int64_t full = 0;
    REQUIRE(tok_wp_count(tok, text, size, &full) == STOF_OK, "%s", stof_last_error());
    REQUIRE(n < max_len ? full == n : full >= n, "count %lld, encode %d (max_len %d)",
            (long long)full, n, max_len);
    if (full > n && full <= 4096) {
        int32_t *all = malloc((size_t)full * sizeof *all);
        int n_all = 0;
        REQUIRE(all, "out of memory");
        REQUIRE(tok_wp_encode(tok, text, size, (int)full, all, (int)full, &n_all) ==
                        STOF_OK &&
                    n_all == full,
                "untruncated encode");
        check_framing(tok, all, n_all, (int)full);
        REQUIRE(memcmp(ids, all, (size_t)(n - 1) * sizeof *ids) == 0, "truncation is not a prefix");
        free(all);
    }
    free(ids);
    check_batch(tok, text, size, max_len);
    return 0;
}
