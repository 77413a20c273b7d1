/*
 * test_tok_wordpiece.c — the WordPiece tokenizer against Hugging Face.
 *
 * The reference is tests/data/tokens_golden.jsonl: ids from transformers'
 * BertTokenizerFast for a few hundred strings (gen_tokens_golden.py), read with the
 * model's vocabulary copied to tests/data/tokens_golden_vocab so that the test never
 * needs the model; when models/all-MiniLM-L6-v2 is present (scripts/fetch_model.sh) the
 * same strings also run through its vocab.txt and its tokenizer.json alone. Beside the
 * golden ids: error cases, invalid UTF-8, truncation, batch padding, and a small
 * synthetic tokenizer.json whose expected ids are worked out by hand.
 */
#include "tok/wordpiece.h"
#include "testlib.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#define VOCAB_DIR STOF_TEST_DATA_DIR "/tokens_golden_vocab"
#define GOLDEN STOF_TEST_DATA_DIR "/tokens_golden.jsonl"
#define MODEL_DIR STOF_MODELS_DIR "/all-MiniLM-L6-v2"

/* ------------------------------------------------------------------ helpers */

typedef struct golden {
    char *text; /* bytes fed to the tokenizer */
    size_t len;
    int max_len;
    int32_t *ids;
    int n;
} golden;

static golden *goldens;
static int n_goldens;

/* The whole file (NUL-terminated), or NULL when it cannot be read. */
static char *read_text_file(const char *path, size_t *len)
{
    char *buf = NULL;
    return stof_read_file(path, (size_t)1 << 30, &buf, len) == STOF_OK ? buf : NULL;
}

static int hex_value(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

/* Parses one line of tokens_golden.jsonl into g; false when malformed. */
static bool parse_golden(const char *line, size_t len, golden *g)
{
    cJSON *r = cJSON_ParseWithLength(line, len);
    const cJSON *text = cJSON_GetObjectItemCaseSensitive(r, "text");
    const cJSON *hex = cJSON_GetObjectItemCaseSensitive(r, "hex");
    const cJSON *ids = cJSON_GetObjectItemCaseSensitive(r, "ids");
    const cJSON *ml = cJSON_GetObjectItemCaseSensitive(r, "max_len");
    bool ok = cJSON_IsString(text) && cJSON_IsArray(ids);
    if (ok && cJSON_IsString(hex)) {
        size_t h = strlen(hex->valuestring);
        g->text = malloc(h / 2 + 1);
        g->len = h / 2;
        for (size_t i = 0; ok && i < g->len; i++) {
            int hi = hex_value(hex->valuestring[2 * i]),
                lo = hex_value(hex->valuestring[2 * i + 1]);
            ok = hi >= 0 && lo >= 0;
            g->text[i] = (char)(hi * 16 + lo);
        }
    } else if (ok) {
        g->len = strlen(text->valuestring);
        g->text = malloc(g->len + 1);
        memcpy(g->text, text->valuestring, g->len + 1);
    }
    g->max_len = cJSON_IsNumber(ml) ? ml->valueint : 512;
    g->n = ok ? cJSON_GetArraySize(ids) : 0;
    g->ids = malloc(((size_t)g->n + 1) * sizeof *g->ids);
    int i = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, ids) g->ids[i++] = (int32_t)v->valueint;
    cJSON_Delete(r);
    return ok;
}

static bool load_goldens(void)
{
    size_t len;
    char *buf = read_text_file(GOLDEN, &len);
    if (!buf) return false;
    int cap = 64;
    goldens = calloc((size_t)cap, sizeof *goldens);
    for (char *p = buf; p < buf + len;) {
        char *nl = memchr(p, '\n', (size_t)(buf + len - p));
        size_t l = nl ? (size_t)(nl - p) : (size_t)(buf + len - p);
        if (l > 0) {
            if (n_goldens == cap) {
                cap *= 2;
                goldens = realloc(goldens, (size_t)cap * sizeof *goldens);
            }
            golden *g = &goldens[n_goldens];
            memset(g, 0, sizeof *g);
            CHECK(parse_golden(p, l, g), "line %d of %s is malformed", n_goldens + 1, GOLDEN);
            n_goldens++;
        }
        p += l + 1;
    }
    free(buf);
    return true;
}

static void free_goldens(void)
{
    for (int i = 0; i < n_goldens; i++) {
        free(goldens[i].text);
        free(goldens[i].ids);
    }
    free(goldens);
}

/* A fresh empty folder under the temporary directory. */
static void make_temp_dir(char *path, size_t cap)
{
    const char *base = getenv("TMPDIR");
    snprintf(path, cap, "%s/stof_tok_XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(path)) {
        fprintf(stderr, "cannot create a temporary folder %s\n", path);
        exit(1);
    }
}

static void write_file(const char *dir, const char *name, const char *content, size_t len)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(content, 1, len, f) != len) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(1);
    }
    fclose(f);
}

static void write_str(const char *dir, const char *name, const char *content)
{
    write_file(dir, name, content, strlen(content));
}

static void remove_file(const char *dir, const char *name)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    unlink(path);
}

static void remove_temp_dir(const char *dir)
{
    const char *names[] = {"vocab.txt", "tokenizer.json", "tokenizer_config.json",
                           "sentence_bert_config.json", "plain_file"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        remove_file(dir, names[i]);
    rmdir(dir);
}

/* Printable excerpt of a golden text for failure messages. */
static const char *excerpt(const golden *g)
{
    static char buf[100];
    size_t k = 0;
    for (size_t i = 0; i < g->len && k + 5 < sizeof buf; i++) {
        unsigned char c = (unsigned char)g->text[i];
        if (c >= 0x20 && c != 0x7f) {
            buf[k++] = (char)c;
        } else {
            k += (size_t)snprintf(buf + k, sizeof buf - k, "\\x%02x", c);
        }
    }
    buf[k] = '\0';
    return buf;
}

static int32_t *encode_alloc(const tok_wp *tok, const char *text, size_t len, int max_len,
                             int *n)
{
    int cap = max_len > 0 ? max_len : 512;
    int32_t *ids = malloc((size_t)cap * sizeof *ids);
    CHECK_OK(tok_wp_encode(tok, text, len, max_len, ids, cap, n));
    return ids;
}

/* ------------------------------------------------------------------ golden ids */

static void check_goldens(const tok_wp *tok, const char *label)
{
    int failed = 0;
    for (int i = 0; i < n_goldens; i++) {
        const golden *g = &goldens[i];
        int32_t *ids = malloc((size_t)g->max_len * sizeof *ids);
        int n = -1;
        stof_status st =
            tok_wp_encode(tok, g->text, g->len, g->max_len, ids, g->max_len, &n);
        int diff = -1;
        for (int j = 0; st == STOF_OK && j < n && j < g->n && diff < 0; j++)
            if (ids[j] != g->ids[j]) diff = j;
        bool same = st == STOF_OK && n == g->n && diff < 0;
        CHECK(same,
              "%s, golden %d \"%s\" (max_len %d): status %s, %d ids (want %d), first "
              "difference at %d: got %d \"%s\", want %d \"%s\"",
              label, i, excerpt(g), g->max_len, stof_status_str(st), n, g->n, diff,
              diff >= 0 ? ids[diff] : -1,
              diff >= 0 ? tok_wp_id_to_token(tok, ids[diff]) : "",
              diff >= 0 ? g->ids[diff] : -1,
              diff >= 0 ? tok_wp_id_to_token(tok, g->ids[diff]) : "");
        failed += !same;
        /* Untruncated count: equal when nothing was cut, larger when the limit was hit. */
        int64_t full = -1;
        CHECK_OK(tok_wp_count(tok, g->text, g->len, &full));
        CHECK(n < g->max_len ? full == n : full >= n, "%s, golden %d: count %lld, encode %d", label,
              i, (long long)full, n);
        free(ids);
    }
    fprintf(stderr, "%s: %d of %d golden strings identical\n", label, n_goldens - failed,
            n_goldens);
}

static void test_golden_committed_vocab(void)
{
    tok_wp *tok = NULL;
    CHECK_OK(tok_wp_load(VOCAB_DIR, &tok));
    if (!tok) return;
    check_goldens(tok, "committed vocab.txt");
    tok_wp_destroy(tok);
}

/* The model folder itself, and its tokenizer.json alone (the vocabulary then comes from
 * model.vocab, the settings from the normalizer). */
static void test_golden_model(void)
{
    struct stat s;
    if (stat(MODEL_DIR "/tokenizer.json", &s) != 0) {
        fprintf(stderr,
                "note: %s is absent (scripts/fetch_model.sh fetches it): golden ids "
                "checked with the committed vocabulary only\n",
                MODEL_DIR);
        return;
    }
    tok_wp *tok = NULL;
    CHECK_OK(tok_wp_load(MODEL_DIR, &tok));
    if (tok) {
        const tok_wp_info *in = tok_wp_get_info(tok);
        CHECK(in->st_max_seq_length == 256, "sentence_bert_config max_seq_length %d",
              in->st_max_seq_length);
        CHECK(!in->vocab_from_tokenizer_json, "the model folder has vocab.txt");
        check_goldens(tok, "model folder");
        tok_wp_destroy(tok);
    }
    char dir[4096];
    make_temp_dir(dir, sizeof dir);
    char link_path[4200];
    snprintf(link_path, sizeof link_path, "%s/tokenizer.json", dir);
    CHECK(symlink(MODEL_DIR "/tokenizer.json", link_path) == 0, "symlink %s", link_path);
    tok = NULL;
    CHECK_OK(tok_wp_load(dir, &tok));
    if (tok) {
        CHECK(tok_wp_get_info(tok)->vocab_from_tokenizer_json, "vocab from json");
        check_goldens(tok, "tokenizer.json alone");
        tok_wp_destroy(tok);
    }
    remove_temp_dir(dir);
}

/* ------------------------------------------------------------------ settings and lookups */

static void test_info_and_lookups(void)
{
    tok_wp *tok = NULL;
    CHECK_OK(tok_wp_load(VOCAB_DIR, &tok));
    if (!tok) return;
    const tok_wp_info *in = tok_wp_get_info(tok);
    CHECK(in->vocab_size == 30522, "vocab size %d", in->vocab_size);
    CHECK(in->pad_id == 0 && in->unk_id == 100 && in->cls_id == 101 && in->sep_id == 102 &&
              in->mask_id == 103,
          "special ids %d %d %d %d %d", in->pad_id, in->unk_id, in->cls_id, in->sep_id,
          in->mask_id);
    CHECK(in->model_max_length == 512, "model_max_length %d", in->model_max_length);
    CHECK(in->st_max_seq_length == 0, "no sentence_bert_config.json here");
    CHECK(in->lowercase && in->strip_accents && in->handle_chinese_chars && in->clean_text,
          "uncased BERT settings");
    CHECK(in->max_input_chars_per_word == 100, "max chars %d", in->max_input_chars_per_word);
    const char *cls = tok_wp_id_to_token(tok, 101);
    CHECK(cls && strcmp(cls, "[CLS]") == 0, "id 101 -> %s", cls ? cls : "(null)");
    CHECK(tok_wp_token_to_id(tok, "hello") == 7592, "hello -> %d",
          tok_wp_token_to_id(tok, "hello"));
    CHECK(tok_wp_token_to_id(tok, "##ing") == 2075, "##ing");
    CHECK(tok_wp_token_to_id(tok, "no-such-entry") == -1, "absent entry");
    CHECK(tok_wp_id_to_token(tok, -1) == NULL &&
              tok_wp_id_to_token(tok, 30522) == NULL,
          "out-of-range ids");
    for (int32_t id = 0; id < in->vocab_size; id += 97) {
        const char *t = tok_wp_id_to_token(tok, id);
        int32_t back = tok_wp_token_to_id(tok, t);
        /* [unused*] entries are unique, so every entry maps back to its own id. */
        CHECK(back == id, "id %d -> \"%s\" -> %d", id, t, back);
    }
    tok_wp_destroy(tok);
}

/* ------------------------------------------------------------------ errors */

static const char small_vocab[] = "[PAD]\n[UNK]\n[CLS]\n[SEP]\nhello\n";

static void expect_load_error(const char *dir, stof_status want, const char *needle,
                              const char *what)
{
    tok_wp *tok = (tok_wp *)&tok; /* must come back NULL */
    stof_status st = tok_wp_load(dir, &tok);
    CHECK(st == want && tok == NULL && strstr(stof_last_error(), needle),
          "%s: got %s \"%s\", want %s mentioning \"%s\"", what, stof_status_str(st),
          stof_last_error(), stof_status_str(want), needle);
}

static void test_load_errors(void)
{
    tok_wp *tok = NULL;
    CHECK_STATUS(tok_wp_load(NULL, &tok), STOF_ERR_INVALID_ARG);
    CHECK_STATUS(tok_wp_load(VOCAB_DIR, NULL), STOF_ERR_INVALID_ARG);
    expect_load_error("/nonexistent/stof-model", STOF_ERR_IO, "/nonexistent/stof-model",
                      "missing folder");

    char dir[4096];
    make_temp_dir(dir, sizeof dir);
    expect_load_error(dir, STOF_ERR_IO, "no vocab.txt or tokenizer.json", "empty folder");

    write_str(dir, "plain_file", "x");
    char file_path[4200];
    snprintf(file_path, sizeof file_path, "%s/plain_file", dir);
    expect_load_error(file_path, STOF_ERR_IO, "not a folder", "a file for a folder");

    write_str(dir, "vocab.txt", "");
    expect_load_error(dir, STOF_ERR_FORMAT, "empty vocabulary", "empty vocab.txt");

    write_str(dir, "vocab.txt", "[PAD]\n[CLS]\n[SEP]\nhello\n");
    expect_load_error(dir, STOF_ERR_FORMAT, "[UNK]", "vocab without [UNK]");
    write_str(dir, "vocab.txt", "[UNK]\n[CLS]\n[SEP]\nhello\n");
    expect_load_error(dir, STOF_ERR_FORMAT, "[PAD]", "vocab without [PAD]");
    write_str(dir, "vocab.txt", "[PAD]\n[UNK]\n[SEP]\n");
    expect_load_error(dir, STOF_ERR_FORMAT, "[CLS]", "vocab without [CLS]");
    write_str(dir, "vocab.txt", "[PAD]\n[UNK]\n[CLS]\n");
    expect_load_error(dir, STOF_ERR_FORMAT, "[SEP]", "vocab without [SEP]");

    write_str(dir, "vocab.txt", small_vocab);
    write_str(dir, "tokenizer_config.json", "{\"do_lower_case\": tru");
    expect_load_error(dir, STOF_ERR_PARSE, "not valid JSON", "truncated JSON");
    write_str(dir, "tokenizer_config.json", "[1, 2]");
    expect_load_error(dir, STOF_ERR_FORMAT, "not a JSON object", "JSON array");
    write_str(dir, "tokenizer_config.json", "{\"do_lower_case\": \"yes\"}");
    expect_load_error(dir, STOF_ERR_FORMAT, "do_lower_case", "string for a boolean");
    write_str(dir, "tokenizer_config.json", "{\"model_max_length\": 1}");
    expect_load_error(dir, STOF_ERR_FORMAT, "model_max_length", "model_max_length 1");
    write_str(dir, "tokenizer_config.json", "{\"unk_token\": \"[NOPE]\"}");
    expect_load_error(dir, STOF_ERR_FORMAT, "[NOPE]", "renamed unknown token absent");
    write_str(dir, "tokenizer_config.json",
              "{\"model_max_length\": 1000000000000000019884624838656}");
    CHECK_OK(tok_wp_load(dir, &tok)); /* transformers' "no limit": default 512 */
    CHECK(tok && tok_wp_get_info(tok)->model_max_length == 512, "huge model_max_length");
    tok_wp_destroy(tok);
    remove_file(dir, "tokenizer_config.json");

    write_str(dir, "tokenizer.json", "{\"normalizer\": {\"type\": \"Lowercase\"}}");
    expect_load_error(dir, STOF_ERR_UNSUPPORTED, "Lowercase", "foreign normalizer");
    write_str(dir, "tokenizer.json", "{\"model\": {\"type\": \"BPE\"}}");
    expect_load_error(dir, STOF_ERR_UNSUPPORTED, "BPE", "BPE model");
    remove_file(dir, "vocab.txt");
    write_str(dir, "tokenizer.json",
              "{\"model\": {\"type\": \"WordPiece\", \"vocab\": "
              "{\"[PAD]\": 0, \"[UNK]\": 1, \"[CLS]\": 1, \"[SEP]\": 3}}}");
    expect_load_error(dir, STOF_ERR_FORMAT, "twice", "duplicate id");
    write_str(dir, "tokenizer.json",
              "{\"model\": {\"type\": \"WordPiece\", \"vocab\": "
              "{\"[PAD]\": 0, \"[UNK]\": 1, \"[CLS]\": 2, \"[SEP]\": 7}}}");
    expect_load_error(dir, STOF_ERR_FORMAT, "[SEP]", "id out of range");
    write_str(dir, "tokenizer.json", "{\"model\": {\"type\": \"WordPiece\", \"vocab\": {}}}");
    expect_load_error(dir, STOF_ERR_FORMAT, "empty vocabulary", "empty JSON vocabulary");
    write_str(dir, "tokenizer.json", "{\"model\": {\"type\": \"WordPiece\"}}");
    expect_load_error(dir, STOF_ERR_FORMAT, "model.vocab", "no vocab anywhere");
    remove_temp_dir(dir);
}

static void test_call_errors(void)
{
    tok_wp *tok = NULL;
    CHECK_OK(tok_wp_load(VOCAB_DIR, &tok));
    if (!tok) return;
    int32_t ids[8];
    int n = -1;
    CHECK_STATUS(tok_wp_encode(tok, "hello", 5, 1, ids, 8, &n), STOF_ERR_INVALID_ARG);
    CHECK_STATUS(tok_wp_encode(tok, NULL, 5, 8, ids, 8, &n), STOF_ERR_INVALID_ARG);
    CHECK_STATUS(tok_wp_encode(NULL, "hello", 5, 8, ids, 8, &n), STOF_ERR_INVALID_ARG);
    CHECK_STATUS(tok_wp_encode(tok, "hello", 5, 8, NULL, 8, &n), STOF_ERR_INVALID_ARG);
    /* Too small a buffer: an error, but n says how many ids there are. */
    CHECK_STATUS(tok_wp_encode(tok, "hello world again", 17, 0, ids, 3, &n),
                 STOF_ERR_INVALID_ARG);
    CHECK(n == 5, "needed %d ids, want 5", n);
    CHECK_OK(tok_wp_encode(tok, NULL, 0, 8, ids, 8, &n));
    CHECK(n == 2 && ids[0] == 101 && ids[1] == 102, "NULL empty text -> %d ids", n);

    tok_wp_batch b;
    const char *texts[] = {"a", NULL};
    CHECK_STATUS(tok_wp_encode_batch(tok, texts, NULL, 0, 8, &b), STOF_ERR_INVALID_ARG);
    CHECK_STATUS(tok_wp_encode_batch(tok, texts, NULL, 2, 8, &b), STOF_ERR_INVALID_ARG);
    CHECK(b.ids == NULL && b.lengths == NULL, "failed batch left nothing allocated");
    CHECK_STATUS(tok_wp_encode_batch(tok, texts, NULL, 1, 1, &b), STOF_ERR_INVALID_ARG);
    tok_wp_destroy(tok);
}

/* ------------------------------------------------------------------ synthetic tokenizer.json */

static const char synthetic_json[] =
    "{\"version\": \"1.0\", \"truncation\": {\"max_length\": 4}, \"added_tokens\": ["
    "{\"id\": 3, \"content\": \"<s>\", \"special\": true, \"normalized\": false},"
    "{\"id\": 4, \"content\": \"<s>x\", \"special\": true, \"normalized\": false}],"
    "\"normalizer\": {\"type\": \"BertNormalizer\", \"clean_text\": true, "
    "\"handle_chinese_chars\": true, \"strip_accents\": false, \"lowercase\": false},"
    "\"pre_tokenizer\": {\"type\": \"BertPreTokenizer\"},"
    "\"model\": {\"type\": \"WordPiece\", \"unk_token\": \"<unk>\", "
    "\"continuing_subword_prefix\": \"@@\", \"max_input_chars_per_word\": 9, \"vocab\": {"
    "\"<pad>\": 0, \"<unk>\": 1, \"<cls>\": 2, \"<s>\": 3, \"<s>x\": 4, \"a\": 5, \"ab\": 6, "
    "\"@@c\": 7, \"@@bc\": 8, \"@@b\": 9, \"un\": 10, \"@@aff\": 11, \"@@able\": 12, "
    "\"Hello\": 13, \"hello\": 14, \",\": 15, \"!\": 16, \"\xc3\x96\": 17, \"o\": 18, "
    "\"\xe4\xbd\xa0\": 19, \"@@a\": 20, \"\xc3\xa9\": 21, \"e\": 22, "
    "\"@@\xf0\x9d\x85\xa5\": 23, \"@@\xf0\x9d\x85\xad\": 24, \"i\": 25, \"@@\xcc\x87\": 26}}}";
static const char synthetic_config[] =
    "{\"do_lower_case\": false, \"cls_token\": \"<cls>\", \"sep_token\": \"<s>\", \"pad_token\": "
    "\"<pad>\", "
    "\"unk_token\": {\"content\": \"<unk>\", \"lstrip\": false}, \"model_max_length\": 64}";

static void expect_ids(const tok_wp *tok, const char *text, int max_len,
                       const int32_t *want, int n_want)
{
    int n = -1;
    int32_t *ids = encode_alloc(tok, text, strlen(text), max_len, &n);
    bool same = n == n_want;
    for (int i = 0; same && i < n; i++)
        same = ids[i] == want[i];
    char got[256] = "";
    for (int i = 0, k = 0; i < n && k < 240; i++)
        k += snprintf(got + k, sizeof got - (size_t)k, " %d", ids[i]);
    CHECK(same, "\"%s\" (max_len %d) -> [%s ]", text, max_len, got);
    free(ids);
}

#define EXPECT(tok, text, max_len, ...)                                                            \
    do {                                                                                           \
        const int32_t want_[] = {__VA_ARGS__};                                                     \
        expect_ids(tok, text, max_len, want_, (int)(sizeof want_ / sizeof *want_));                \
    } while (0)

static void test_synthetic(void)
{
    char dir[4096];
    make_temp_dir(dir, sizeof dir);
    write_str(dir, "tokenizer.json", synthetic_json);
    write_str(dir, "tokenizer_config.json", synthetic_config);
    tok_wp *tok = NULL;
    CHECK_OK(tok_wp_load(dir, &tok));
    if (tok) {
        const tok_wp_info *in = tok_wp_get_info(tok);
        CHECK(in->vocab_size == 27 && in->vocab_from_tokenizer_json, "vocab %d", in->vocab_size);
        CHECK(in->cls_id == 2 && in->sep_id == 3 && in->pad_id == 0 && in->unk_id == 1 &&
                  in->mask_id == -1,
              "renamed special tokens");
        CHECK(in->model_max_length == 64 && in->max_input_chars_per_word == 9, "limits");
        CHECK(!in->lowercase && !in->strip_accents, "cased settings from the config");
        /* Greedy longest match first: ab + @@c, never a + @@bc. */
        EXPECT(tok, "abc", 0, 2, 6, 7, 3);
        EXPECT(tok, "unaffable", 0, 2, 10, 11, 12, 3);
        EXPECT(tok, "abx", 0, 2, 1, 3); /* unmatchable piece: the word is <unk> */
        EXPECT(tok, "Hello, hello!", 0, 2, 13, 15, 14, 16, 3); /* cased */
        EXPECT(tok, "HELLO", 0, 2, 1, 3);
        EXPECT(tok, "\xc3\x96 o\xcc\x88", 0, 2, 17, 1, 3); /* no accent stripping */
        EXPECT(tok, "aaaaaaaaa", 0, 2, 5, 20, 20, 20, 20, 20, 20, 20, 20, 3);
        EXPECT(tok, "aaaaaaaaaa", 0, 2, 1, 3);         /* 10 > max_input_chars_per_word */
        EXPECT(tok, "x<s>x<s>y", 0, 2, 1, 4, 3, 1, 3); /* literal tokens, longest first */
        EXPECT(tok, "\xe4\xbd\xa0\xe4\xbd\xa0", 0, 2, 19, 19, 3); /* CJK split */
        EXPECT(tok, "abc abc abc", 5, 2, 6, 7, 6, 3); /* truncation keeps the separator */
        tok_wp_destroy(tok);
    }
    /* tokenizer_config.json overrides the normalizer, as in transformers. */
    write_str(dir, "tokenizer_config.json",
              "{\"do_lower_case\": true, \"cls_token\": \"<cls>\","
              " \"sep_token\": \"<s>\", \"pad_token\": \"<pad>\", \"unk_token\": \"<unk>\"}");
    tok = NULL;
    CHECK_OK(tok_wp_load(dir, &tok));
    if (tok) {
        CHECK(tok_wp_get_info(tok)->lowercase &&
                  tok_wp_get_info(tok)->strip_accents,
              "lower-casing from the config");
        EXPECT(tok, "HELLO", 0, 2, 14, 3);
        EXPECT(tok, "\xc3\x89", 0, 2, 22, 3); /* É -> e */
        /* Canonical reordering: U+1D165 (class 216) before U+1D16D (226), also across
         * stripped marks; a stripped starter (U+0902, class 0) still ends the run. */
        EXPECT(tok, "a\xf0\x9d\x85\xad\xf0\x9d\x85\xa5", 0, 2, 5, 23, 24, 3);
        EXPECT(tok, "a\xcc\x81\xf0\x9d\x85\xad\xcc\x96\xf0\x9d\x85\xa5", 0, 2, 5, 23, 24, 3);
        EXPECT(tok, "a\xf0\x9d\x85\xad\xe0\xa4\x82\xf0\x9d\x85\xa5", 0, 2, 5, 24, 23, 3);
        tok_wp_destroy(tok);
    }
    write_str(dir, "tokenizer_config.json",
              "{\"do_lower_case\": true, \"strip_accents\": false,"
              " \"cls_token\": \"<cls>\", \"sep_token\": \"<s>\", \"pad_token\": \"<pad>\","
              " \"unk_token\": \"<unk>\", \"tokenize_chinese_chars\": false}");
    tok = NULL;
    CHECK_OK(tok_wp_load(dir, &tok));
    if (tok) {
        EXPECT(tok, "\xc3\x89", 0, 2, 21, 3);     /* É -> é: lower-cased, accent kept */
        EXPECT(tok, "\xc4\xb0", 0, 2, 25, 26, 3); /* İ -> i + U+0307 */
        EXPECT(tok, "\xe4\xbd\xa0\xe4\xbd\xa0", 0, 2, 1, 3); /* one word, no @@你 entry */
        tok_wp_destroy(tok);
    }
    /* Without tokenizer_config.json, tokenizer.json's normalizer decides. */
    remove_file(dir, "tokenizer_config.json");
    write_str(dir, "tokenizer.json",
              "{\"normalizer\": {\"type\": \"BertNormalizer\", \"lowercase\": false, "
              "\"strip_accents\": null}, \"model\": {\"type\": \"WordPiece\", \"vocab\": "
              "{\"[PAD]\": 0, \"[UNK]\": 1, \"[CLS]\": 2, \"[SEP]\": 3, \"Hello\": 4, "
              "\"hello\": 5}}}");
    tok = NULL;
    CHECK_OK(tok_wp_load(dir, &tok));
    if (tok) {
        EXPECT(tok, "Hello hello", 0, 2, 4, 5, 3);
        EXPECT(tok, "[SEP]Hello", 0, 2, 3, 4, 3); /* special tokens matched without a list */
        tok_wp_destroy(tok);
    }
    remove_temp_dir(dir);
}

/* ------------------------------------------------------------------ invalid UTF-8 */

static void expect_same(const tok_wp *tok, const char *a, size_t la, const char *b)
{
    int na = -1, nb = -1;
    int32_t *ia = encode_alloc(tok, a, la, 64, &na);
    int32_t *ib = encode_alloc(tok, b, strlen(b), 64, &nb);
    bool same = na == nb && memcmp(ia, ib, (size_t)(na > 0 ? na : 0) * sizeof *ia) == 0;
    CHECK(same, "invalid UTF-8 case for \"%s\": %d ids vs %d", b, na, nb);
    free(ia);
    free(ib);
}

static void test_invalid_utf8(const tok_wp *tok)
{
    expect_same(tok,
                "a\xff"
                "b",
                3, "ab");
    expect_same(tok,
                "\xe2\x82"
                "A",
                3, "A"); /* the A is not swallowed */
    expect_same(tok,
                "\xf0\x9f\x98"
                "x",
                4, "x");
    expect_same(tok,
                "\xc0\xaf"
                "b",
                3, "b"); /* overlong */
    expect_same(tok,
                "\xed\xa0\x80"
                "c",
                4, "c"); /* surrogate */
    expect_same(tok,
                "\xf4\x90\x80\x80"
                "d",
                5, "d");                        /* beyond U+10FFFF */
    expect_same(tok, "caf\xc3", 4, "caf");      /* cut at the end */
    expect_same(tok, "caf\xc3\xa9", 5, "cafe"); /* and the valid form */
    expect_same(tok, "a\0b", 3, "ab");          /* NUL is dropped */
    for (int b = 0x80; b <= 0xff; b++) {
        char s[1] = {(char)b};
        expect_same(tok, s, 1, "");
    }
    /* Random bytes: never an error, ids in range, framed by [CLS] and [SEP]. */
    test_rng rng;
    test_rng_init(&rng, test_seed());
    const tok_wp_info *in = tok_wp_get_info(tok);
    int bad = 0;
    for (int it = 0; it < 3000; it++) {
        char buf[300];
        size_t len = (size_t)test_rng_int(&rng, 0, (int64_t)sizeof buf);
        bool ascii = it % 3 == 0;
        for (size_t i = 0; i < len; i++)
            buf[i] = (char)(ascii ? test_rng_int(&rng, 0, 127) : test_rng_int(&rng, 0, 255));
        int32_t ids[128];
        int n = -1;
        stof_status st = tok_wp_encode(tok, buf, len, 128, ids, 128, &n);
        bool ok =
            st == STOF_OK && n >= 2 && n <= 128 && ids[0] == in->cls_id && ids[n - 1] == in->sep_id;
        for (int i = 0; ok && i < n; i++)
            ok = ids[i] >= 0 && ids[i] < in->vocab_size;
        bad += !ok;
    }
    CHECK(bad == 0, "%d of 3000 random byte strings gave a bad encoding", bad);
}

/* ------------------------------------------------------------------ truncation and batches */

static const char lorem[] =
    "Sentence embeddings map text to vectors so that similar meanings land close together; "
    "transformers compute them by pooling the last hidden states. ";

static void test_truncation(const tok_wp *tok)
{
    size_t len = 20 * strlen(lorem);
    char *text = malloc(len + 1);
    for (int i = 0; i < 20; i++)
        memcpy(text + (size_t)i * strlen(lorem), lorem, strlen(lorem));
    int64_t full = 0;
    CHECK_OK(tok_wp_count(tok, text, len, &full));
    CHECK(full > 512, "%lld ids untruncated", (long long)full);
    int32_t *all = malloc((size_t)full * sizeof *all);
    int n_all = 0;
    CHECK_OK(tok_wp_encode(tok, text, len, (int)full, all, (int)full, &n_all));
    CHECK(n_all == full, "encode with max_len = count gives %d of %lld", n_all, (long long)full);
    const int limits[] = {2, 3, 5, 17, 128, 512, 0};
    for (size_t k = 0; k < sizeof limits / sizeof *limits; k++) {
        int ml = limits[k], n = -1;
        int want = ml ? ml : 512;
        int32_t *ids = encode_alloc(tok, text, len, ml, &n);
        bool prefix = n == want && ids[0] == 101 && ids[n - 1] == 102;
        for (int i = 1; prefix && i < n - 1; i++)
            prefix = ids[i] == all[i];
        CHECK(prefix, "max_len %d: %d ids, want the first %d tokens + [SEP]", ml, n, want - 2);
        free(ids);
    }
    free(all);
    free(text);
}

static void test_batch(const tok_wp *tok)
{
    const char *texts[] = {"hello world", "", lorem, "caf\xc3\xa9 \xff!", "[CLS] x [MASK]"};
    const int B = 5;
    size_t lens[5];
    for (int b = 0; b < B; b++)
        lens[b] = strlen(texts[b]);
    for (int pass = 0; pass < 3; pass++) {
        int ml = pass == 2 ? 12 : 64;
        tok_wp_batch batch;
        CHECK_OK(tok_wp_encode_batch(tok, texts, pass ? lens : NULL, B, ml, &batch));
        if (!batch.ids) continue;
        CHECK(batch.batch == B, "batch %d", batch.batch);
        int longest = 0;
        for (int b = 0; b < B; b++) {
            int n = -1;
            int32_t *ids = encode_alloc(tok, texts[b], lens[b], ml, &n);
            CHECK(batch.lengths[b] == n, "row %d: length %d, single encode %d", b, batch.lengths[b],
                  n);
            if (n > longest) longest = n;
            bool ok = true;
            for (int j = 0; j < batch.seq_len; j++) {
                int32_t id = batch.ids[(size_t)b * batch.seq_len + j];
                int32_t m = batch.attention_mask[(size_t)b * batch.seq_len + j];
                ok &= j < n ? id == ids[j] && m == 1 : id == 0 && m == 0;
            }
            CHECK(ok, "row %d of the batch (max_len %d) differs from its single encoding", b, ml);
            free(ids);
        }
        CHECK(batch.seq_len == longest, "seq_len %d, longest %d", batch.seq_len, longest);
        tok_wp_batch_free(&batch);
        CHECK(batch.ids == NULL && batch.seq_len == 0, "free resets the batch");
    }
}

int main(void)
{
    bool have_goldens = load_goldens();
    CHECK(have_goldens, "cannot read %s", GOLDEN);
    CHECK(n_goldens >= 200, "%d golden strings, want at least 200", n_goldens);
    test_golden_committed_vocab();
    test_golden_model();
    test_info_and_lookups();
    test_load_errors();
    test_call_errors();
    test_synthetic();
    tok_wp *tok = NULL;
    CHECK_OK(tok_wp_load(VOCAB_DIR, &tok));
    if (tok) {
        test_invalid_utf8(tok);
        test_truncation(tok);
        test_batch(tok);
    }
    tok_wp_destroy(tok);
    free_goldens();
    return test_finish("test_tok_wordpiece");
}
