/*
 * wordpiece.c — BERT WordPiece tokenizer (see wordpiece.h for the pipeline).
 *
 * Text streams through the stages one code point at a time, so no stage needs a buffer
 * as long as the text: the only state is the current word (bounded by
 * max_input_chars_per_word, since a longer word is [UNK] whatever it holds) and the run
 * of combining marks awaiting canonical reordering. Encoding stops as soon as truncation
 * makes the rest of the text irrelevant.
 */
#include "tok/wordpiece.h"
#include "tok/unicode_bert.h"
#include "io/json.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#define TOK_NAME_MAX 128
#define TOK_PREFIX_MAX 32
#define TOK_MAX_ADDED 4096
#define TOK_MAX_WORD_CHARS 65536
#define TOK_MAX_VOCAB (1 << 24)
#define TOK_MAX_FILE_BYTES ((size_t)1 << 30)
#define TOK_DEFAULT_MAX_LENGTH 512

typedef struct added_token {
    char *text;
    size_t len;
    int32_t id;
} added_token;

struct tok_wp {
    tok_wp_info info;
    char *arena;       /* every vocabulary entry, NUL-terminated, in id order */
    size_t *tok_off;   /* [vocab_size] offsets into arena */
    uint32_t *tok_len; /* [vocab_size] byte lengths */
    int32_t *slots;    /* open-addressing hash of entry -> id; -1 = empty */
    size_t slot_mask;
    int max_token_chars; /* longest entry in characters: bounds the WordPiece search */
    char prefix[TOK_PREFIX_MAX];
    size_t prefix_len;
    added_token *added; /* literal special tokens, matched on the raw text */
    int n_added;
    bool added_first[256]; /* first bytes of added tokens: a quick filter */
};

/* ------------------------------------------------------------------ vocabulary */

static uint64_t hash_bytes(const char *s, size_t len)
{
    return stof_fnv1a(STOF_FNV_BASIS, s, len);
}

static int32_t vocab_lookup(const tok_wp *t, const char *s, size_t len)
{
    size_t i = (size_t)hash_bytes(s, len) & t->slot_mask;
    for (;;) {
        int32_t id = t->slots[i];
        if (id < 0) return -1;
        if (t->tok_len[id] == len && memcmp(t->arena + t->tok_off[id], s, len) == 0) return id;
        i = (i + 1) & t->slot_mask;
    }
}

/* Characters in a UTF-8 string: bytes that are not continuation bytes. */
static int utf8_chars(const char *s, size_t len)
{
    int n = 0;
    for (size_t i = 0; i < len; i++)
        n += ((unsigned char)s[i] & 0xC0) != 0x80;
    return n;
}

/* Allocates the arrays for n entries of total_bytes bytes (NULs not counted). */
static stof_status vocab_alloc(tok_wp *t, size_t n, size_t total_bytes)
{
    size_t slots = 16;
    while (slots < 2 * n)
        slots *= 2;
    t->arena = malloc(total_bytes + n);
    t->tok_off = malloc(n * sizeof *t->tok_off);
    t->tok_len = malloc(n * sizeof *t->tok_len);
    t->slots = malloc(slots * sizeof *t->slots);
    if (!t->arena || !t->tok_off || !t->tok_len || !t->slots)
        return stof_error(STOF_ERR_OOM, "out of memory for a vocabulary of %zu entries", n);
    memset(t->slots, 0xff, slots * sizeof *t->slots);
    t->slot_mask = slots - 1;
    t->info.vocab_size = (int)n;
    return STOF_OK;
}

/* Stores entry id (ids are filled in increasing order) and indexes it. A later duplicate
 * takes over the entry's lookup, as a Python dict or a Rust HashMap would. */
static void vocab_set(tok_wp *t, int32_t id, size_t *arena_used, const char *s, size_t len)
{
    t->tok_off[id] = *arena_used;
    t->tok_len[id] = (uint32_t)len;
    memcpy(t->arena + *arena_used, s, len);
    t->arena[*arena_used + len] = '\0';
    *arena_used += len + 1;
    int chars = utf8_chars(s, len);
    if (chars > t->max_token_chars) t->max_token_chars = chars;
    size_t i = (size_t)hash_bytes(s, len) & t->slot_mask;
    while (t->slots[i] >= 0) {
        int32_t other = t->slots[i];
        if (t->tok_len[other] == len && memcmp(t->arena + t->tok_off[other], s, len) == 0) break;
        i = (i + 1) & t->slot_mask;
    }
    t->slots[i] = id;
}

/* Lines of vocab.txt: one entry per line, id = line number; "\n" or "\r\n" ends a line and
 * nothing else is trimmed; a final newline adds no entry. */
static stof_status vocab_from_txt(tok_wp *t, const char *buf, size_t len, const char *path)
{
    size_t n = 0, bytes = 0;
    for (size_t i = 0; i < len;) {
        const char *nl = memchr(buf + i, '\n', len - i);
        size_t end = nl ? (size_t)(nl - buf) : len;
        bytes += end - i;
        n++;
        i = end + 1;
    }
    STOF_REQUIRE(n > 0, STOF_ERR_FORMAT, "%s: empty vocabulary", path);
    STOF_REQUIRE(n <= TOK_MAX_VOCAB, STOF_ERR_FORMAT, "%s: %zu entries, more than %d", path, n,
                 TOK_MAX_VOCAB);
    STOF_TRY(vocab_alloc(t, n, bytes));
    size_t used = 0;
    int32_t id = 0;
    for (size_t i = 0; i < len;) {
        const char *nl = memchr(buf + i, '\n', len - i);
        size_t end = nl ? (size_t)(nl - buf) : len;
        size_t l = end - i;
        if (nl && l > 0 && buf[end - 1] == '\r') l--;
        vocab_set(t, id++, &used, buf + i, l);
        i = end + 1;
    }
    return STOF_OK;
}

/* tokenizer.json's model.vocab: {"entry": id, ...} with ids 0..n-1, each once. */
static stof_status vocab_from_json(tok_wp *t, const cJSON *vocab, const char *path)
{
    STOF_REQUIRE(cJSON_IsObject(vocab), STOF_ERR_FORMAT, "%s: model.vocab is not an object", path);
    int n = cJSON_GetArraySize(vocab);
    STOF_REQUIRE(n > 0, STOF_ERR_FORMAT, "%s: empty vocabulary", path);
    STOF_REQUIRE(n <= TOK_MAX_VOCAB, STOF_ERR_FORMAT, "%s: %d entries, more than %d", path, n,
                 TOK_MAX_VOCAB);
    const cJSON **by_id = calloc((size_t)n, sizeof *by_id);
    STOF_REQUIRE(by_id, STOF_ERR_OOM, "out of memory for a vocabulary of %d entries", n);
    size_t bytes = 0;
    stof_status st = STOF_OK;
    const cJSON *e;
    cJSON_ArrayForEach(e, vocab)
    {
        double v = cJSON_IsNumber(e) ? e->valuedouble : -1;
        if (!(v >= 0 && v < n && v == (double)(int)v)) {
            st = stof_error(STOF_ERR_FORMAT,
                            "%s: vocabulary entry \"%.64s\" has id %.17g; ids "
                            "must be the integers 0..%d",
                            path, e->string, cJSON_IsNumber(e) ? v : -1.0, n - 1);
            break;
        }
        if (by_id[(int)v]) {
            st = stof_error(STOF_ERR_FORMAT,
                            "%s: vocabulary id %d is given twice (\"%.64s\" and "
                            "\"%.64s\")",
                            path, (int)v, by_id[(int)v]->string, e->string);
            break;
        }
        by_id[(int)v] = e;
        bytes += strlen(e->string);
    }
    if (st == STOF_OK) st = vocab_alloc(t, (size_t)n, bytes);
    size_t used = 0;
    for (int id = 0; st == STOF_OK && id < n; id++)
        vocab_set(t, id, &used, by_id[id]->string, strlen(by_id[id]->string));
    free(by_id);
    return st;
}

/* ------------------------------------------------------------------ settings */

typedef struct tok_settings {
    int clean_text, handle_chinese_chars, lowercase;
    int strip_accents; /* -1: follow lowercase, as BERT does */
    char unk[TOK_NAME_MAX], cls[TOK_NAME_MAX], sep[TOK_NAME_MAX], pad[TOK_NAME_MAX],
        mask[TOK_NAME_MAX];
} tok_settings;

/* A token name: "[UNK]" or {"content": "[UNK]", ...} (newer transformers). */
static stof_status json_token_name(const cJSON *obj, const char *key, char *dst, const char *file)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v || cJSON_IsNull(v)) return STOF_OK;
    if (cJSON_IsObject(v)) v = cJSON_GetObjectItemCaseSensitive(v, "content");
    STOF_REQUIRE(cJSON_IsString(v), STOF_ERR_FORMAT, "%s: %s must be a string", file, key);
    size_t len = strlen(v->valuestring);
    STOF_REQUIRE(len > 0 && len < TOK_NAME_MAX, STOF_ERR_FORMAT,
                 "%s: %s has %zu bytes, expected 1..%d", file, key, len, TOK_NAME_MAX - 1);
    memcpy(dst, v->valuestring, len + 1);
    return STOF_OK;
}

/* Checks that component key of tokenizer.json, when given, is of the expected type. */
static stof_status require_type(const cJSON *root, const char *key, const char *want,
                                const char *file, const cJSON **out)
{
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(root, key);
    *out = NULL;
    if (!c || cJSON_IsNull(c)) return STOF_OK;
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(c, "type");
    const char *got = cJSON_IsString(type) ? type->valuestring : "(none)";
    STOF_REQUIRE(strcmp(got, want) == 0, STOF_ERR_UNSUPPORTED,
                 "%s: %s type \"%.64s\" is not supported (only %s, as BERT uses)", file, key, got,
                 want);
    *out = c;
    return STOF_OK;
}

static stof_status settings_from_tokenizer_json(tok_wp *t, tok_settings *s,
                                                const cJSON *root, const char *file)
{
    const cJSON *norm, *pre, *model;
    STOF_TRY(require_type(root, "normalizer", "BertNormalizer", file, &norm));
    STOF_TRY(require_type(root, "pre_tokenizer", "BertPreTokenizer", file, &pre));
    STOF_TRY(require_type(root, "model", "WordPiece", file, &model));
    if (norm) {
        STOF_TRY(io_json_bool(norm, "clean_text", false, &s->clean_text, file));
        STOF_TRY(io_json_bool(norm, "handle_chinese_chars", false, &s->handle_chinese_chars, file));
        STOF_TRY(io_json_bool(norm, "strip_accents", true, &s->strip_accents, file));
        STOF_TRY(io_json_bool(norm, "lowercase", false, &s->lowercase, file));
    }
    if (model) {
        STOF_TRY(json_token_name(model, "unk_token", s->unk, file));
        STOF_TRY(io_json_int(model, "max_input_chars_per_word", 1, TOK_MAX_WORD_CHARS,
                          &t->info.max_input_chars_per_word, file));
        const cJSON *p = cJSON_GetObjectItemCaseSensitive(model, "continuing_subword_prefix");
        if (p && !cJSON_IsNull(p)) {
            STOF_REQUIRE(cJSON_IsString(p) && strlen(p->valuestring) < TOK_PREFIX_MAX,
                         STOF_ERR_FORMAT,
                         "%s: continuing_subword_prefix must be a string of at most %d bytes", file,
                         TOK_PREFIX_MAX - 1);
            t->prefix_len = strlen(p->valuestring);
            memcpy(t->prefix, p->valuestring, t->prefix_len + 1);
        }
    }
    return STOF_OK;
}

/* When tokenizer_config.json exists, transformers rebuilds the normalizer from its three
 * switches, absent ones taking BertTokenizer's defaults, whatever tokenizer.json says. */
static stof_status settings_from_tokenizer_config(tok_wp *t, tok_settings *s,
                                                  const cJSON *root, const char *file)
{
    s->lowercase = 1;
    s->strip_accents = -1;
    s->handle_chinese_chars = 1;
    STOF_TRY(io_json_bool(root, "do_lower_case", false, &s->lowercase, file));
    STOF_TRY(io_json_bool(root, "strip_accents", true, &s->strip_accents, file));
    STOF_TRY(io_json_bool(root, "tokenize_chinese_chars", false, &s->handle_chinese_chars, file));
    STOF_TRY(json_token_name(root, "unk_token", s->unk, file));
    STOF_TRY(json_token_name(root, "cls_token", s->cls, file));
    STOF_TRY(json_token_name(root, "sep_token", s->sep, file));
    STOF_TRY(json_token_name(root, "pad_token", s->pad, file));
    STOF_TRY(json_token_name(root, "mask_token", s->mask, file));
    /* transformers writes int(1e30) for "no limit": keep the default then. */
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(root, "model_max_length");
    if (cJSON_IsNumber(m) && m->valuedouble >= (double)INT_MAX) return STOF_OK;
    return io_json_int(root, "model_max_length", 2, INT_MAX, &t->info.model_max_length, file);
}

/* ------------------------------------------------------------------ special tokens */

static stof_status special_id(const tok_wp *t, const char *name, const char *role,
                              const char *dir, int32_t *id)
{
    *id = vocab_lookup(t, name, strlen(name));
    STOF_REQUIRE(*id >= 0, STOF_ERR_FORMAT, "the vocabulary in %s has no %s token \"%s\"", dir,
                 role, name);
    return STOF_OK;
}

static stof_status add_literal(tok_wp *t, const char *text, int32_t id)
{
    size_t len = strlen(text);
    if (len == 0) return STOF_OK;
    for (int i = 0; i < t->n_added; i++)
        if (t->added[i].len == len && memcmp(t->added[i].text, text, len) == 0) return STOF_OK;
    STOF_REQUIRE(t->n_added < TOK_MAX_ADDED, STOF_ERR_UNSUPPORTED, "more than %d added tokens",
                 TOK_MAX_ADDED);
    char *copy = malloc(len + 1);
    STOF_REQUIRE(copy, STOF_ERR_OOM, "out of memory for added tokens");
    memcpy(copy, text, len + 1);
    t->added[t->n_added++] = (added_token){copy, len, id};
    t->added_first[(unsigned char)text[0]] = true;
    return STOF_OK;
}

/* tokenizer.json's added_tokens; their ids must lie inside the vocabulary. */
static stof_status added_from_json(tok_wp *t, const cJSON *list, const char *file)
{
    const cJSON *a;
    cJSON_ArrayForEach(a, list)
    {
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(a, "content");
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(a, "id");
        STOF_REQUIRE(cJSON_IsString(content) && cJSON_IsNumber(id), STOF_ERR_FORMAT,
                     "%s: an added token lacks its content or id", file);
        double v = id->valuedouble;
        STOF_REQUIRE(v >= 0 && v < t->info.vocab_size, STOF_ERR_UNSUPPORTED,
                     "%s: added token \"%.64s\" has id %.17g outside the vocabulary (%d entries)",
                     file, content->valuestring, v, t->info.vocab_size);
        STOF_REQUIRE(v == (double)(int32_t)v, STOF_ERR_FORMAT,
                     "%s: added token \"%.64s\" has id %.17g, not an integer", file,
                     content->valuestring, v);
        if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(a, "normalized")) ||
            cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(a, "single_word")))
            stof_log(STOF_LOG_WARN,
                     "%s: added token \"%.64s\" is matched literally on the raw "
                     "text (normalized / single_word are not supported)",
                     file, content->valuestring);
        STOF_TRY(add_literal(t, content->valuestring, (int32_t)v));
    }
    return STOF_OK;
}

/* Without tokenizer.json, the special tokens are the added tokens (as transformers'
 * conversion of a slow BertTokenizer makes them). */
static stof_status added_from_specials(tok_wp *t, const tok_settings *s)
{
    const char *names[] = {s->pad, s->unk, s->cls, s->sep, s->mask};
    for (int i = 0; i < 5; i++) {
        int32_t id = vocab_lookup(t, names[i], strlen(names[i]));
        if (id >= 0) STOF_TRY(add_literal(t, names[i], id));
    }
    return STOF_OK;
}

/* ------------------------------------------------------------------ loading */

static stof_status load_vocab(tok_wp *t, const char *dir, const cJSON *tj)
{
    char path[4096];
    STOF_TRY(io_join_path(path, sizeof path, dir, "vocab.txt"));
    if (io_file_exists(path)) {
        char *buf;
        size_t len;
        STOF_TRY(io_read_file(path, &buf, &len));
        stof_status st = vocab_from_txt(t, buf, len, path);
        free(buf);
        return st;
    }
    STOF_REQUIRE(tj, STOF_ERR_IO, "no vocab.txt or tokenizer.json in %s", dir);
    STOF_TRY(io_join_path(path, sizeof path, dir, "tokenizer.json"));
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(tj, "model");
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    STOF_REQUIRE(vocab, STOF_ERR_FORMAT, "%s has no model.vocab", path);
    t->info.vocab_from_tokenizer_json = true;
    return vocab_from_json(t, vocab, path);
}

static stof_status load_into(tok_wp *t, const char *dir, cJSON **tj, cJSON **tc, cJSON **sb)
{
    struct stat st;
    STOF_REQUIRE(stat(dir, &st) == 0, STOF_ERR_IO, "model folder %s: %s", dir, strerror(errno));
    STOF_REQUIRE(S_ISDIR(st.st_mode), STOF_ERR_IO, "model folder %s is not a folder", dir);

    tok_settings s = {.clean_text = 1,
                      .handle_chinese_chars = 1,
                      .lowercase = 1,
                      .strip_accents = -1,
                      .unk = "[UNK]",
                      .cls = "[CLS]",
                      .sep = "[SEP]",
                      .pad = "[PAD]",
                      .mask = "[MASK]"};
    t->info.model_max_length = TOK_DEFAULT_MAX_LENGTH;
    t->info.max_input_chars_per_word = 100;
    memcpy(t->prefix, "##", 3);
    t->prefix_len = 2;

    STOF_TRY(io_json_load_if_present(dir, "tokenizer.json", tj));
    STOF_TRY(io_json_load_if_present(dir, "tokenizer_config.json", tc));
    STOF_TRY(io_json_load_if_present(dir, "sentence_bert_config.json", sb));
    if (*tj) STOF_TRY(settings_from_tokenizer_json(t, &s, *tj, "tokenizer.json"));
    if (*tc) STOF_TRY(settings_from_tokenizer_config(t, &s, *tc, "tokenizer_config.json"));
    if (*sb)
        STOF_TRY(io_json_int(*sb, "max_seq_length", 1, INT_MAX, &t->info.st_max_seq_length,
                          "sentence_bert_config.json"));
    t->info.clean_text = s.clean_text;
    t->info.handle_chinese_chars = s.handle_chinese_chars;
    t->info.lowercase = s.lowercase;
    t->info.strip_accents = s.strip_accents < 0 ? s.lowercase : s.strip_accents;

    STOF_TRY(load_vocab(t, dir, *tj));
    STOF_TRY(special_id(t, s.unk, "unknown", dir, &t->info.unk_id));
    STOF_TRY(special_id(t, s.cls, "classifier", dir, &t->info.cls_id));
    STOF_TRY(special_id(t, s.sep, "separator", dir, &t->info.sep_id));
    STOF_TRY(special_id(t, s.pad, "padding", dir, &t->info.pad_id));
    t->info.mask_id = vocab_lookup(t, s.mask, strlen(s.mask));

    t->added = calloc(TOK_MAX_ADDED, sizeof *t->added);
    STOF_REQUIRE(t->added, STOF_ERR_OOM, "out of memory for added tokens");
    const cJSON *list = *tj ? cJSON_GetObjectItemCaseSensitive(*tj, "added_tokens") : NULL;
    if (cJSON_IsArray(list)) return added_from_json(t, list, "tokenizer.json");
    return added_from_specials(t, &s);
}

stof_status tok_wp_load(const char *model_dir, tok_wp **out)
{
    STOF_REQUIRE(out, STOF_ERR_INVALID_ARG, "tok_wp_load: out is NULL");
    *out = NULL;
    STOF_REQUIRE(model_dir && *model_dir, STOF_ERR_INVALID_ARG,
                 "tok_wp_load: no model folder given");
    tok_wp *t = calloc(1, sizeof *t);
    STOF_REQUIRE(t, STOF_ERR_OOM, "out of memory for a tokenizer");
    cJSON *tj = NULL, *tc = NULL, *sb = NULL;
    stof_status st = load_into(t, model_dir, &tj, &tc, &sb);
    cJSON_Delete(tj);
    cJSON_Delete(tc);
    cJSON_Delete(sb);
    if (st != STOF_OK) {
        tok_wp_destroy(t);
        return st;
    }
    *out = t;
    return STOF_OK;
}

void tok_wp_destroy(tok_wp *tok)
{
    if (!tok) return;
    for (int i = 0; i < tok->n_added; i++)
        free(tok->added[i].text);
    free(tok->added);
    free(tok->arena);
    free(tok->tok_off);
    free(tok->tok_len);
    free(tok->slots);
    free(tok);
}

const tok_wp_info *tok_wp_get_info(const tok_wp *tok)
{
    return tok ? &tok->info : NULL;
}

const char *tok_wp_id_to_token(const tok_wp *tok, int32_t id)
{
    if (!tok || id < 0 || id >= tok->info.vocab_size) return NULL;
    return tok->arena + tok->tok_off[id];
}

int32_t tok_wp_token_to_id(const tok_wp *tok, const char *token)
{
    if (!tok || !token) return -1;
    return vocab_lookup(tok, token, strlen(token));
}

/* ------------------------------------------------------------------ encoding */

typedef struct encoder {
    const tok_wp *tok;
    int32_t *out; /* ids after [CLS] go to out[1 + n] while inside cap; NULL: count only */
    int64_t cap;
    int64_t n;      /* ids produced from the text */
    int64_t limit;  /* ids the text may produce (truncation) */
    uint32_t *word; /* the current word, up to max_input_chars_per_word characters */
    int64_t word_chars;
    char *utf8;      /* the word in UTF-8 */
    int *char_start; /* byte offset of each character, and the end */
    char *key;       /* prefix + piece for lookups */
    int32_t *pieces;
    uint32_t *run; /* marks awaiting canonical reordering: ccc << 24 | code point */
    uint32_t *run_sorted;
    size_t run_len, run_cap;
    stof_status status;
} encoder;

static bool enc_full(const encoder *e)
{
    return e->n >= e->limit || e->status != STOF_OK;
}

static void emit(encoder *e, int32_t id)
{
    if (e->n >= e->limit) return;
    if (e->out && 1 + e->n < e->cap) e->out[1 + e->n] = id;
    e->n++;
}

static size_t utf8_put(char *dst, uint32_t cp)
{
    if (cp < 0x80) {
        dst[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        dst[0] = (char)(0xC0 | cp >> 6);
        dst[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        dst[0] = (char)(0xE0 | cp >> 12);
        dst[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        dst[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    dst[0] = (char)(0xF0 | cp >> 18);
    dst[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    dst[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    dst[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Greedy longest-match-first WordPiece over the current word (at most
 * max_input_chars_per_word characters); any unmatchable piece makes the word [UNK]. */
static void wordpiece(encoder *e, int nch)
{
    const tok_wp *t = e->tok;
    size_t bytes = 0;
    for (int i = 0; i < nch; i++) {
        e->char_start[i] = (int)bytes;
        bytes += utf8_put(e->utf8 + bytes, e->word[i]);
    }
    e->char_start[nch] = (int)bytes;
    memcpy(e->key, t->prefix, t->prefix_len);
    int np = 0;
    for (int start = 0; start < nch;) {
        int end = nch - start > t->max_token_chars ? start + t->max_token_chars : nch;
        int32_t id = -1;
        for (; end > start; end--) {
            const char *piece = e->utf8 + e->char_start[start];
            size_t plen = (size_t)(e->char_start[end] - e->char_start[start]);
            if (start == 0) {
                id = vocab_lookup(t, piece, plen);
            } else {
                memcpy(e->key + t->prefix_len, piece, plen);
                id = vocab_lookup(t, e->key, t->prefix_len + plen);
            }
            if (id >= 0) break;
        }
        if (id < 0) {
            emit(e, t->info.unk_id);
            return;
        }
        e->pieces[np++] = id;
        start = end;
    }
    for (int i = 0; i < np; i++)
        emit(e, e->pieces[i]);
}

static void flush_word(encoder *e)
{
    if (e->word_chars == 0) return;
    if (e->word_chars > e->tok->info.max_input_chars_per_word)
        emit(e, e->tok->info.unk_id);
    else
        wordpiece(e, (int)e->word_chars);
    e->word_chars = 0;
}

/* Pre-tokenizer: whitespace ends a word, punctuation is a word of its own. */
static void pretokenize(encoder *e, uint32_t cp)
{
    unsigned f = stof_uni_flags(cp);
    if (f & (STOF_UNI_WS | STOF_UNI_PUNCT)) flush_word(e);
    if (f & STOF_UNI_WS) return;
    if (e->word_chars < e->tok->info.max_input_chars_per_word) e->word[e->word_chars] = cp;
    e->word_chars++;
    if (f & STOF_UNI_PUNCT) flush_word(e);
}

static void lowercase(encoder *e, uint32_t cp)
{
    if (!e->tok->info.lowercase) {
        pretokenize(e, cp);
    } else if (cp < 0x80) {
        pretokenize(e, cp >= 'A' && cp <= 'Z' ? cp + 32 : cp);
    } else {
        uint32_t low[2];
        int k = stof_uni_lower(cp, low);
        for (int i = 0; i < k; i++)
            pretokenize(e, low[i]);
    }
}

/* Canonical reordering: a stable sort of the pending marks by combining class
 * (counting sort: runs can be arbitrarily long in hostile text). */
static void flush_run(encoder *e)
{
    if (e->run_len == 0) return;
    const uint32_t *src = e->run;
    if (e->run_len > 1) {
        size_t count[257] = {0};
        for (size_t i = 0; i < e->run_len; i++)
            count[(e->run[i] >> 24) + 1]++;
        for (int c = 0; c < 256; c++)
            count[c + 1] += count[c];
        for (size_t i = 0; i < e->run_len; i++)
            e->run_sorted[count[e->run[i] >> 24]++] = e->run[i];
        src = e->run_sorted;
    }
    size_t n = e->run_len;
    e->run_len = 0;
    for (size_t i = 0; i < n; i++)
        lowercase(e, src[i] & 0xFFFFFF);
}

static void run_push(encoder *e, uint32_t cp, unsigned ccc)
{
    if (e->run_len == e->run_cap) {
        size_t cap = e->run_cap ? 2 * e->run_cap : 64;
        uint32_t *a = realloc(e->run, cap * sizeof *a);
        if (a) e->run = a;
        uint32_t *b = a ? realloc(e->run_sorted, cap * sizeof *b) : NULL;
        if (b) e->run_sorted = b;
        if (!a || !b) {
            e->status = stof_error(STOF_ERR_OOM, "out of memory reordering combining marks");
            return;
        }
        e->run_cap = cap;
    }
    e->run[e->run_len++] = ccc << 24 | cp;
}

/* NFD (decomposition + canonical reordering), then non-spacing marks dropped. Marks that
 * are dropped anyway never need reordering; starters (class 0) end a run even when they
 * are dropped themselves. */
static void strip_accents(encoder *e, uint32_t cp)
{
    if (!e->tok->info.strip_accents) {
        lowercase(e, cp);
        return;
    }
    if (cp < 0xC0) { /* nothing below U+00C0 decomposes or combines */
        flush_run(e);
        lowercase(e, cp);
        return;
    }
    uint32_t d[STOF_UNI_MAX_DECOMP];
    int k = stof_uni_decompose(cp, d);
    for (int i = 0; i < k; i++) {
        unsigned ccc = stof_uni_ccc(d[i]);
        bool mark = stof_uni_flags(d[i]) & STOF_UNI_MN;
        if (ccc == 0) {
            flush_run(e);
            if (!mark) lowercase(e, d[i]);
        } else if (!mark) {
            run_push(e, d[i], ccc);
        }
    }
}

/* Clean-up and CJK spacing, the first steps of BertNormalizer. */
static void normalize(encoder *e, uint32_t cp)
{
    const tok_wp_info *in = &e->tok->info;
    unsigned f = stof_uni_flags(cp);
    if (in->clean_text && (f & STOF_UNI_DROP)) return;
    if (in->clean_text && (f & STOF_UNI_SPACE)) {
        strip_accents(e, ' ');
    } else if (in->handle_chinese_chars && (f & STOF_UNI_CJK)) {
        strip_accents(e, ' ');
        strip_accents(e, cp);
        strip_accents(e, ' ');
    } else {
        strip_accents(e, cp);
    }
}

/* Next code point of s; an ill-formed sequence yields U+FFFD and advances over its maximal
 * well-formed prefix (at least one byte), as Python's "replace" error handler does. */
static uint32_t utf8_next(const unsigned char *s, size_t len, size_t *pos)
{
    size_t i = *pos;
    unsigned b = s[i++];
    if (b < 0x80) {
        *pos = i;
        return b;
    }
    int need;
    uint32_t cp;
    unsigned lo = 0x80, hi = 0xBF; /* allowed range of the next byte */
    if (b >= 0xC2 && b <= 0xDF) {
        need = 1;
        cp = b & 0x1F;
    } else if (b >= 0xE0 && b <= 0xEF) {
        need = 2;
        cp = b & 0x0F;
        if (b == 0xE0) lo = 0xA0; /* no overlong forms */
        if (b == 0xED) hi = 0x9F; /* no surrogates */
    } else if (b >= 0xF0 && b <= 0xF4) {
        need = 3;
        cp = b & 0x07;
        if (b == 0xF0) lo = 0x90;
        if (b == 0xF4) hi = 0x8F; /* nothing above U+10FFFF */
    } else {
        *pos = i;
        return 0xFFFD;
    }
    for (int k = 0; k < need; k++, i++) {
        if (i >= len || s[i] < lo || s[i] > hi) {
            *pos = i;
            return 0xFFFD;
        }
        cp = cp << 6 | (s[i] & 0x3F);
        lo = 0x80;
        hi = 0xBF;
    }
    *pos = i;
    return cp;
}

/* Longest added token starting at s, or -1. */
static int match_added(const tok_wp *t, const unsigned char *s, size_t len)
{
    int best = -1;
    for (int i = 0; i < t->n_added; i++) {
        const added_token *a = &t->added[i];
        if (a->len <= len && memcmp(a->text, s, a->len) == 0 &&
            (best < 0 || a->len > t->added[best].len))
            best = i;
    }
    return best;
}

static void encode_text(encoder *e, const unsigned char *s, size_t len)
{
    const tok_wp *t = e->tok;
    size_t pos = 0;
    while (pos < len && !enc_full(e)) {
        int a = t->added_first[s[pos]] ? match_added(t, s + pos, len - pos) : -1;
        if (a >= 0) {
            flush_run(e);
            flush_word(e);
            emit(e, t->added[a].id);
            pos += t->added[a].len;
        } else {
            normalize(e, utf8_next(s, len, &pos));
        }
    }
    flush_run(e);
    flush_word(e);
}

static stof_status encoder_init(encoder *e, const tok_wp *t)
{
    int w = t->info.max_input_chars_per_word;
    *e = (encoder){.tok = t};
    e->word = malloc((size_t)w * sizeof *e->word);
    e->utf8 = malloc((size_t)w * 4);
    e->char_start = malloc(((size_t)w + 1) * sizeof *e->char_start);
    e->key = malloc(TOK_PREFIX_MAX + (size_t)w * 4);
    e->pieces = malloc((size_t)w * sizeof *e->pieces);
    if (!e->word || !e->utf8 || !e->char_start || !e->key || !e->pieces)
        return stof_error(STOF_ERR_OOM, "out of memory for the tokenizer's buffers");
    return STOF_OK;
}

static void encoder_free(encoder *e)
{
    free(e->word);
    free(e->utf8);
    free(e->char_start);
    free(e->key);
    free(e->pieces);
    free(e->run);
    free(e->run_sorted);
}

/* Encodes text with at most limit ids between [CLS] and [SEP]; *n counts all ids. out
 * (cap entries) receives them while they fit. */
static stof_status encode_ids(const tok_wp *t, const char *text, size_t len, int64_t limit,
                              int32_t *out, int64_t cap, int64_t *n)
{
    encoder e;
    stof_status st = encoder_init(&e, t);
    if (st == STOF_OK) {
        e.out = out;
        e.cap = cap;
        e.limit = limit;
        encode_text(&e, (const unsigned char *)text, len);
        st = e.status;
    }
    if (st == STOF_OK) {
        if (out && cap > 0) out[0] = t->info.cls_id;
        if (out && e.n + 1 < cap) out[e.n + 1] = t->info.sep_id;
        *n = e.n + 2;
    }
    encoder_free(&e);
    return st;
}

static stof_status resolve_max_len(const tok_wp *tok, int max_len, int *out)
{
    *out = max_len > 0 ? max_len : tok->info.model_max_length;
    STOF_REQUIRE(*out >= 2, STOF_ERR_INVALID_ARG,
                 "max_len %d leaves no room for the [CLS] and [SEP] tokens (at least 2)", *out);
    return STOF_OK;
}

stof_status tok_wp_encode(const tok_wp *tok, const char *text, size_t len,
                                  int max_len, int32_t *ids, int cap, int *n)
{
    STOF_REQUIRE(tok && n, STOF_ERR_INVALID_ARG, "tok_wp_encode: tok and n must be given");
    STOF_REQUIRE(text || len == 0, STOF_ERR_INVALID_ARG,
                 "tok_wp_encode: text is NULL with len %zu", len);
    STOF_REQUIRE(ids || cap == 0, STOF_ERR_INVALID_ARG,
                 "tok_wp_encode: ids is NULL with cap %d", cap);
    STOF_REQUIRE(cap >= 0, STOF_ERR_INVALID_ARG, "tok_wp_encode: cap %d < 0", cap);
    int ml;
    STOF_TRY(resolve_max_len(tok, max_len, &ml));
    int64_t count;
    STOF_TRY(encode_ids(tok, text ? text : "", len, ml - 2, ids, cap, &count));
    *n = (int)count;
    STOF_REQUIRE(count <= cap, STOF_ERR_INVALID_ARG,
                 "tok_wp_encode: %lld ids do not fit in cap %d", (long long)count, cap);
    return STOF_OK;
}

stof_status tok_wp_count(const tok_wp *tok, const char *text, size_t len,
                                 int64_t *n)
{
    STOF_REQUIRE(tok && n, STOF_ERR_INVALID_ARG, "tok_wp_count: tok and n must be given");
    STOF_REQUIRE(text || len == 0, STOF_ERR_INVALID_ARG,
                 "tok_wp_count: text is NULL with len %zu", len);
    return encode_ids(tok, text ? text : "", len, INT64_MAX, NULL, 0, n);
}

void tok_wp_batch_free(tok_wp_batch *b)
{
    if (!b) return;
    free(b->ids);
    free(b->attention_mask);
    free(b->lengths);
    *b = (tok_wp_batch){0};
}

/* Fills out from the concatenated sequences all[] of the given lengths. */
static stof_status pad_batch(const tok_wp *tok, const int32_t *all, int batch,
                             tok_wp_batch *out)
{
    int L = 0;
    for (int b = 0; b < batch; b++)
        if (out->lengths[b] > L) L = out->lengths[b];
    size_t cells = (size_t)batch * (size_t)L;
    out->seq_len = L;
    out->ids = malloc(cells * sizeof *out->ids);
    out->attention_mask = malloc(cells * sizeof *out->attention_mask);
    STOF_REQUIRE(out->ids && out->attention_mask, STOF_ERR_OOM,
                 "out of memory for a token batch of %d x %d", batch, L);
    for (int b = 0; b < batch; b++) {
        int32_t *row = out->ids + (size_t)b * L, *mask = out->attention_mask + (size_t)b * L;
        int len = out->lengths[b];
        memcpy(row, all, (size_t)len * sizeof *row);
        all += len;
        for (int j = 0; j < L; j++)
            mask[j] = j < len;
        for (int j = len; j < L; j++)
            row[j] = tok->info.pad_id;
    }
    return STOF_OK;
}

static stof_status encode_batch_into(const tok_wp *tok, const char *const *texts,
                                     const size_t *lens, int batch, int ml, tok_wp_batch *out)
{
    out->batch = batch;
    out->lengths = malloc((size_t)batch * sizeof *out->lengths);
    STOF_REQUIRE(out->lengths, STOF_ERR_OOM, "out of memory for %d sequence lengths", batch);
    size_t used = 0, cap = 0;
    int32_t *all = NULL; /* every sequence, back to back */
    stof_status st = STOF_OK;
    for (int b = 0; b < batch && st == STOF_OK; b++) {
        if (!texts[b]) {
            st = stof_error(STOF_ERR_INVALID_ARG, "encode_batch: text %d is NULL", b);
            break;
        }
        if (cap - used < (size_t)ml) {
            size_t grow = cap ? 2 * cap : 4096;
            while (grow - used < (size_t)ml)
                grow *= 2;
            int32_t *bigger = realloc(all, grow * sizeof *all);
            if (!bigger) {
                st = stof_error(STOF_ERR_OOM, "out of memory for a token batch");
                break;
            }
            all = bigger;
            cap = grow;
        }
        size_t len = lens ? lens[b] : strlen(texts[b]);
        int64_t n;
        st = encode_ids(tok, texts[b], len, ml - 2, all + used, ml, &n);
        out->lengths[b] = (int32_t)n;
        used += (size_t)n;
    }
    if (st == STOF_OK) st = pad_batch(tok, all, batch, out);
    free(all);
    return st;
}

stof_status tok_wp_encode_batch(const tok_wp *tok, const char *const *texts,
                                        const size_t *lens, int batch, int max_len,
                                        tok_wp_batch *out)
{
    STOF_REQUIRE(out, STOF_ERR_INVALID_ARG, "encode_batch: out is NULL");
    *out = (tok_wp_batch){0};
    STOF_REQUIRE(tok && texts, STOF_ERR_INVALID_ARG, "encode_batch: tok and texts must be given");
    STOF_REQUIRE(batch >= 1, STOF_ERR_INVALID_ARG, "encode_batch: batch %d < 1", batch);
    int ml;
    STOF_TRY(resolve_max_len(tok, max_len, &ml));
    stof_status st = encode_batch_into(tok, texts, lens, batch, ml, out);
    if (st != STOF_OK) tok_wp_batch_free(out);
    return st;
}
