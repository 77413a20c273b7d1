/*
 * test_tok_golden.c — every tokenizer family (BERT WordPiece included) against Hugging
 * Face's tokenizers on tests/data/tok/<family>/golden.jsonl (gen_tok_golden.py): for each string,
 * the ids (special tokens added), the ids truncated to 16, the decode with and without
 * special tokens, and decode(encode(s)) equal to the library's. Also the batch call on
 * several threads against the single-text call, and streaming decode: decoding the
 * ids one prefix at a time never shows U+FFFD for a character still being completed,
 * and the final text is the full decode.
 */
#include "testlib.h"

#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#ifndef STOF_TOK_DATA_DIR
#error STOF_TOK_DATA_DIR must name tests/data/tok
#endif

typedef struct golden {
    char *text;
    size_t len;
    int32_t *ids, *ids16;
    int n_ids, n_ids16; /* n_ids16 < 0: not recorded */
    char *dec, *dec_all;
} golden;

static int hexval(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

static int32_t *read_ids(const cJSON *a, int *n)
{
    *n = cJSON_GetArraySize(a);
    int32_t *ids = malloc(((size_t)*n + 1) * sizeof *ids);
    int i = 0;
    for (const cJSON *e = a ? a->child : NULL; e; e = e->next)
        ids[i++] = (int32_t)e->valuedouble;
    return ids;
}

static char *dup_str(const cJSON *s)
{
    const char *v = cJSON_IsString(s) ? s->valuestring : "";
    char *d = malloc(strlen(v) + 1);
    strcpy(d, v);
    return d;
}

static golden *load(const char *path, int *count)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    golden *g = NULL;
    int n = 0, cap = 0;
    size_t lcap = 1 << 20;
    char *line = malloc(lcap);
    while (fgets(line, (int)lcap, f)) {
        cJSON *o = cJSON_Parse(line);
        if (!o) continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 1024;
            g = realloc(g, (size_t)cap * sizeof *g);
        }
        golden *x = &g[n++];
        const char *hex = cJSON_GetObjectItem(o, "hex")->valuestring;
        x->len = strlen(hex) / 2;
        x->text = malloc(x->len + 1);
        for (size_t i = 0; i < x->len; i++)
            x->text[i] = (char)(hexval(hex[2 * i]) * 16 + hexval(hex[2 * i + 1]));
        x->ids = read_ids(cJSON_GetObjectItem(o, "ids"), &x->n_ids);
        const cJSON *t16 = cJSON_GetObjectItem(o, "ids16");
        x->ids16 = t16 ? read_ids(t16, &x->n_ids16) : NULL;
        if (!t16) x->n_ids16 = -1;
        x->dec = dup_str(cJSON_GetObjectItem(o, "dec"));
        x->dec_all = dup_str(cJSON_GetObjectItem(o, "dec_all"));
        cJSON_Delete(o);
    }
    free(line);
    fclose(f);
    *count = n;
    return g;
}

static void print_ids(const char *what, const int32_t *ids, size_t n)
{
    fprintf(stderr, "  %s (%zu):", what, n);
    for (size_t i = 0; i < n && i < 40; i++)
        fprintf(stderr, " %d", ids[i]);
    fprintf(stderr, n > 40 ? " ...\n" : "\n");
}

static bool same_ids(const int32_t *a, size_t na, const int32_t *b, size_t nb)
{
    return na == nb && (na == 0 || memcmp(a, b, na * sizeof *a) == 0);
}

/* Decodes ids[0..n) with the given settings into a fresh string. */
static char *decode(const stof_tokenizer *tok, const int32_t *ids, size_t n, int skip, int stream,
                    size_t *held)
{
    stof_decode_params dp = stof_decode_default_params();
    dp.skip_special_tokens = skip;
    dp.stream = stream;
    size_t len = 0, cap = 64;
    char *out = malloc(cap);
    stof_status st = stof_tokenizer_decode(tok, ids, n, &dp, out, cap, &len, held);
    if (st == STOF_ERR_INVALID_ARG && len + 1 > cap) {
        cap = len + 1;
        out = realloc(out, cap);
        st = stof_tokenizer_decode(tok, ids, n, &dp, out, cap, &len, held);
    }
    if (st != STOF_OK) {
        fprintf(stderr, "  decode failed: %s\n", stof_last_error());
        free(out);
        return NULL;
    }
    return out;
}

static bool has_replacement_tail(const char *s) /* ends in U+FFFD */
{
    size_t n = strlen(s);
    return n >= 3 && memcmp(s + n - 3, "\xEF\xBF\xBD", 3) == 0;
}

static void check_family(const char *name)
{
    char dir[1024], path[1100];
    snprintf(dir, sizeof dir, "%s/%s", STOF_TOK_DATA_DIR, name);
    snprintf(path, sizeof path, "%s/golden.jsonl", dir);
    /* BERT's golden comes from the real all-MiniLM-L6-v2 tokenizer.json, whose
     * vocabulary is committed once, in tests/data/tokens_golden_vocab. */
    if (strcmp(name, "bert") == 0)
        snprintf(dir, sizeof dir, "%s/../tokens_golden_vocab", STOF_TOK_DATA_DIR);
    int n = 0;
    golden *g = load(path, &n);
    CHECK(g && n >= 2000, "%s: %d golden strings, want at least 2000", path, n);
    stof_tokenizer *tok = NULL;
    CHECK_OK(stof_tokenizer_open(dir, &tok));
    if (!tok || !g) return;
    size_t cap = 1 << 16;
    int32_t *ids = malloc(cap * sizeof *ids);
    int bad_ids = 0, bad_trunc = 0, bad_dec = 0, bad_dec_all = 0, shown = 0;
    stof_encode_params ep = stof_encode_default_params();
    for (int i = 0; i < n; i++) {
        size_t got = 0;
        ep.max_length = 0;
        stof_status st = stof_tokenizer_encode(tok, g[i].text, g[i].len, &ep, ids, cap, &got);
        if (st != STOF_OK || !same_ids(ids, got, g[i].ids, (size_t)g[i].n_ids)) {
            if (shown++ < 5) {
                fprintf(stderr, "%s string %d (%zu bytes) '%.*s': %s\n", name, i, g[i].len,
                        (int)(g[i].len < 80 ? g[i].len : 80), g[i].text,
                        st ? stof_last_error() : "ids differ");
                print_ids("stof", ids, st ? 0 : got);
                print_ids("HF  ", g[i].ids, (size_t)g[i].n_ids);
            }
            bad_ids++;
        }
        if (g[i].n_ids16 >= 0) {
            ep.max_length = 16;
            st = stof_tokenizer_encode(tok, g[i].text, g[i].len, &ep, ids, cap, &got);
            if (st != STOF_OK || !same_ids(ids, got, g[i].ids16, (size_t)g[i].n_ids16)) bad_trunc++;
        }
        char *d = decode(tok, g[i].ids, (size_t)g[i].n_ids, 1, 0, NULL);
        if (!d || strcmp(d, g[i].dec) != 0) {
            if (shown++ < 5)
                fprintf(stderr, "%s string %d decode:\n  stof '%s'\n  HF   '%s'\n", name, i,
                        d ? d : "(failed)", g[i].dec);
            bad_dec++;
        }
        free(d);
        d = decode(tok, g[i].ids, (size_t)g[i].n_ids, 0, 0, NULL);
        if (!d || strcmp(d, g[i].dec_all) != 0) {
            if (shown++ < 5)
                fprintf(stderr, "%s string %d decode (specials kept):\n  stof '%s'\n  HF   '%s'\n",
                        name, i, d ? d : "(failed)", g[i].dec_all);
            bad_dec_all++;
        }
        free(d);
    }
    CHECK(bad_ids == 0, "%s: ids differ from Hugging Face on %d of %d strings", name, bad_ids, n);
    CHECK(bad_trunc == 0, "%s: truncated ids differ on %d strings", name, bad_trunc);
    CHECK(bad_dec == 0, "%s: decode (skip special) differs on %d of %d strings", name, bad_dec, n);
    CHECK(bad_dec_all == 0, "%s: decode (specials kept) differs on %d of %d strings", name,
          bad_dec_all, n);

    /* The batch call on 3 threads gives, text for text, the single-text ids. */
    const char **texts = malloc((size_t)n * sizeof *texts);
    size_t *lens = malloc((size_t)n * sizeof *lens);
    for (int i = 0; i < n; i++) {
        texts[i] = g[i].text;
        lens[i] = g[i].len;
    }
    stof_token_lists lists;
    CHECK_OK(stof_tokenizer_encode_batch(tok, texts, lens, n, NULL, 3, &lists));
    int bad_batch = 0;
    for (int i = 0; i < n && lists.ids; i++)
        if (!same_ids(lists.ids + lists.offsets[i],
                      (size_t)(lists.offsets[i + 1] - lists.offsets[i]), g[i].ids,
                      (size_t)g[i].n_ids))
            bad_batch++;
    CHECK(lists.batch == n && bad_batch == 0, "%s: batch ids differ on %d strings", name,
          bad_batch);
    stof_token_lists_free(&lists);

    /* Streaming: every prefix's text is a prefix of the next one's, with no U+FFFD at
     * the end unless the full decode has it there too. Strings with invalid input are
     * excluded: their U+FFFD is real. */
    int bad_stream = 0, streamed = 0;
    for (int i = 0; i < n && streamed < 300; i++) {
        char *full = decode(tok, g[i].ids, (size_t)g[i].n_ids, 1, 0, NULL);
        if (!full || strstr(full, "\xEF\xBF\xBD")) {
            free(full);
            continue;
        }
        streamed++;
        char *prev = calloc(1, 1);
        for (int k = 1; k <= g[i].n_ids; k++) {
            size_t held = 0;
            char *part = decode(tok, g[i].ids, (size_t)k, 1, 1, &held);
            bool ok = part && !has_replacement_tail(part) && strncmp(part, prev, strlen(prev)) == 0;
            if (k == g[i].n_ids) ok = ok && held == 0 && strcmp(part, full) == 0;
            if (!ok) {
                bad_stream++;
                free(part);
                break;
            }
            free(prev);
            prev = part;
        }
        free(prev);
        free(full);
    }
    CHECK(bad_stream == 0, "%s: streaming decode misbehaves on %d of %d strings", name, bad_stream,
          streamed);

    stof_tokenizer_info info;
    CHECK_OK(stof_tokenizer_get_info(tok, &info));
    CHECK(info.vocab_size > 256, "%s: vocab_size %d", name, info.vocab_size);
    CHECK((info.model == STOF_TOKENIZER_WORDPIECE) == (strcmp(name, "bert") == 0) &&
              (info.model == STOF_TOKENIZER_UNIGRAM) == (strcmp(name, "t5") == 0),
          "%s: model type %d", name, (int)info.model);
    fprintf(stderr, "%s: %d strings checked\n", name, n);
    free(texts);
    free(lens);
    free(ids);
    for (int i = 0; i < n; i++) {
        free(g[i].text);
        free(g[i].ids);
        free(g[i].ids16);
        free(g[i].dec);
        free(g[i].dec_all);
    }
    free(g);
    stof_tokenizer_destroy(tok);
}

int main(int argc, char **argv)
{
    static const char *const families[] = {"bert",       "gpt2",   "llama3",  "qwen2",
                                           "modernbert", "llama2", "mistral", "t5"};
    for (size_t i = 0; i < sizeof families / sizeof families[0]; i++)
        if (argc < 2 || strcmp(argv[1], families[i]) == 0) check_family(families[i]);
    return test_finish("test_tok_golden");
}
