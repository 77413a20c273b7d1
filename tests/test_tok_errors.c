/*
 * test_tok_errors.c — malformed and hostile tokenizer.json files: each must fail to
 * open with the named status (STOF_ERR_FORMAT for a wrong structure or value,
 * STOF_ERR_PARSE for text that is not JSON, STOF_ERR_UNSUPPORTED for a component
 * stof does not implement), never crash or hang; a catastrophically backtracking
 * regex fails the encode call instead of running for ever; and the call errors of
 * encode / decode (NULL arguments, too small buffers) are reported.
 */
#include "testlib.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static char dir[256];

static void write_file(const char *name, const char *text)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    fwrite(text, 1, strlen(text), f);
    fclose(f);
}

/* A small valid byte-level BPE with the given parts swapped in. */
static char *tokenizer_json(const char *model, const char *normalizer, const char *pre,
                            const char *post, const char *decoder, const char *added)
{
    size_t cap = 1 << 16;
    char *s = malloc(cap);
    snprintf(s, cap,
             "{\"version\": \"1.0\", \"added_tokens\": %s, \"normalizer\": %s, "
             "\"pre_tokenizer\": %s, \"post_processor\": %s, \"decoder\": %s, \"model\": %s}",
             added, normalizer, pre, post, decoder, model);
    return s;
}

#define GOOD_MODEL                                                                                 \
    "{\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \"ab\": 2, \"<unk>\": 3}, "               \
    "\"merges\": [\"a b\"], \"unk_token\": \"<unk>\"}"

static void expect_open(const char *what, const char *json, stof_status want)
{
    write_file("tokenizer.json", json);
    stof_tokenizer *tok = NULL;
    stof_status st = stof_tokenizer_open(dir, &tok);
    CHECK(st == want, "%s: got %s (%s), want %s", what, stof_status_str(st),
          st ? stof_last_error() : "", stof_status_str(want));
    CHECK(st != STOF_OK || tok, "%s: no tokenizer", what);
    stof_tokenizer_destroy(tok);
}

static void expect_model(const char *what, const char *model, stof_status want)
{
    char *j = tokenizer_json(model, "null", "null", "null", "null", "[]");
    expect_open(what, j, want);
    free(j);
}

static void expect_part(const char *what, const char *norm, const char *pre, const char *post,
                        const char *dec, const char *added, stof_status want)
{
    char *j = tokenizer_json(GOOD_MODEL, norm, pre, post, dec, added);
    expect_open(what, j, want);
    free(j);
}

static void test_models(void)
{
    expect_model("valid", GOOD_MODEL, STOF_OK);
    expect_open("not JSON", "{\"model\": {\"type\": \"BPE\", ", STOF_ERR_PARSE);
    expect_open("an array", "[1, 2, 3]", STOF_ERR_FORMAT);
    expect_open("no model", "{\"normalizer\": null}", STOF_ERR_FORMAT);
    expect_model("model a string", "\"BPE\"", STOF_ERR_FORMAT);
    expect_model("unknown type", "{\"type\": \"Magic\", \"vocab\": {}}", STOF_ERR_UNSUPPORTED);
    expect_model("vocab an array", "{\"type\": \"BPE\", \"vocab\": [1], \"merges\": []}",
                 STOF_ERR_FORMAT);
    expect_model("empty vocab", "{\"type\": \"BPE\", \"vocab\": {}, \"merges\": []}",
                 STOF_ERR_FORMAT);
    expect_model("negative id", "{\"type\": \"BPE\", \"vocab\": {\"a\": -1}, \"merges\": []}",
                 STOF_ERR_FORMAT);
    expect_model("huge id", "{\"type\": \"BPE\", \"vocab\": {\"a\": 1e12}, \"merges\": []}",
                 STOF_ERR_FORMAT);
    expect_model("fractional id", "{\"type\": \"BPE\", \"vocab\": {\"a\": 0.5}, \"merges\": []}",
                 STOF_ERR_FORMAT);
    expect_model("id a string", "{\"type\": \"BPE\", \"vocab\": {\"a\": \"0\"}, \"merges\": []}",
                 STOF_ERR_FORMAT);
    expect_model("merges an object",
                 "{\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": {\"a\": 1}}",
                 STOF_ERR_FORMAT);
    expect_model("merge of unknown tokens",
                 "{\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1}, \"merges\": [\"a c\"]}",
                 STOF_ERR_FORMAT);
    expect_model("merge without its result",
                 "{\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1}, \"merges\": [\"a b\"]}",
                 STOF_ERR_FORMAT);
    expect_model("merge of three",
                 "{\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1}, \"merges\": [\"a b a\"]}",
                 STOF_ERR_FORMAT);
    expect_model("merge of an empty token",
                 "{\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"\": 1}, \"merges\": [[\"a\", \"\"]]}",
                 STOF_ERR_FORMAT);
    expect_model("merge a number", "{\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [7]}",
                 STOF_ERR_FORMAT);
    expect_model("dropout",
                 "{\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [], "
                 "\"dropout\": 0.1}",
                 STOF_ERR_UNSUPPORTED);
    expect_model("flag a string",
                 "{\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [], "
                 "\"byte_fallback\": \"yes\"}",
                 STOF_ERR_FORMAT);
    /* A merge "cycle": ab is made from a+b and listed again from itself: still a DAG of
     * concatenations, so it loads (the duplicate keeps its first rank) and terminates. */
    expect_model("repeated merges",
                 "{\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \"ab\": 2}, "
                 "\"merges\": [\"a b\", \"a b\", [\"a\", \"b\"]]}",
                 STOF_OK);
    expect_model("unigram entry not a pair",
                 "{\"type\": \"Unigram\", \"vocab\": [[\"a\", -1.0], \"b\"], \"unk_id\": 0}",
                 STOF_ERR_FORMAT);
    expect_model("unigram score a string",
                 "{\"type\": \"Unigram\", \"vocab\": [[\"a\", \"x\"]], \"unk_id\": 0}",
                 STOF_ERR_FORMAT);
    expect_model("unigram unk_id out of range",
                 "{\"type\": \"Unigram\", \"vocab\": [[\"a\", -1.0]], \"unk_id\": 5}",
                 STOF_ERR_FORMAT);
    expect_model("unigram vocab an object", "{\"type\": \"Unigram\", \"vocab\": {\"a\": 1}}",
                 STOF_ERR_FORMAT);
}

static void test_components(void)
{
    const char *n = "null";
    expect_part("bad regex", n,
                "{\"type\": \"Split\", \"pattern\": {\"Regex\": \"(a\"}, "
                "\"behavior\": \"Isolated\"}",
                n, n, "[]", STOF_ERR_FORMAT);
    expect_part("bad behavior", n,
                "{\"type\": \"Split\", \"pattern\": {\"Regex\": \"a\"}, "
                "\"behavior\": \"Sideways\"}",
                n, n, "[]", STOF_ERR_FORMAT);
    expect_part("pattern a string", n, "{\"type\": \"Split\", \"pattern\": \"a\"}", n, n, "[]",
                STOF_ERR_FORMAT);
    expect_part("no type", "{\"lowercase\": true}", n, n, n, "[]", STOF_ERR_FORMAT);
    expect_part("type a number", "{\"type\": 3}", n, n, n, "[]", STOF_ERR_FORMAT);
    expect_part("unknown normalizer", "{\"type\": \"Nmt\"}", n, n, n, "[]", STOF_ERR_UNSUPPORTED);
    expect_part("charsmap not base64",
                "{\"type\": \"Precompiled\", \"precompiled_charsmap\": "
                "\"@@@@\"}",
                n, n, n, "[]", STOF_ERR_FORMAT);
    /* "/////w==": a trie size of 0xffffffff bytes in a 4-byte map. */
    expect_part("charsmap trie too big",
                "{\"type\": \"Precompiled\", \"precompiled_charsmap\": "
                "\"/////w==\"}",
                n, n, n, "[]", STOF_ERR_FORMAT);
    /* "CAAAAP////8AAAAAYQ==": a trie of two units that point far outside it, then "a". */
    expect_part("charsmap trie pointing outside",
                "{\"type\": \"Precompiled\", "
                "\"precompiled_charsmap\": \"CAAAAP////8AAAAAYQ==\"}",
                n, n, n, "[]", STOF_OK);
    /* "BAAAAAAAAAD/AA==": a trie of one unit, then the replacement "\xff": text the
     * normalizer would insert must be UTF-8 like every other string (the segmenters
     * step through normalized text by its UTF-8 lead bytes). */
    expect_part("charsmap replacements not UTF-8",
                "{\"type\": \"Precompiled\", "
                "\"precompiled_charsmap\": \"BAAAAAAAAAD/AA==\"}",
                n, n, n, "[]", STOF_ERR_FORMAT);
    expect_part("Sequence without members", "{\"type\": \"Sequence\"}", n, n, n, "[]",
                STOF_ERR_FORMAT);
    expect_part("Replace without content",
                "{\"type\": \"Replace\", \"pattern\": "
                "{\"String\": \"a\"}}",
                n, n, n, "[]", STOF_ERR_FORMAT);
    expect_part("Replace content not UTF-8 (raw bytes)",
                "{\"type\": \"Replace\", "
                "\"pattern\": {\"String\": \"a\"}, \"content\": \"\xff\"}",
                n, n, n, "[]", STOF_ERR_FORMAT);
    expect_part("added token not UTF-8", n, n, n, n, "[{\"id\": 4, \"content\": \"x\xc3\"}]",
                STOF_ERR_FORMAT);
    expect_model("Unigram without unk_id loads",
                 "{\"type\": \"Unigram\", \"vocab\": [[\"a\", -1.0]]}", STOF_OK);
    expect_part("Metaspace of two characters", n,
                "{\"type\": \"Metaspace\", \"replacement\": "
                "\"ab\"}",
                n, n, "[]", STOF_ERR_FORMAT);
    expect_part("template token not listed", n, n,
                "{\"type\": \"TemplateProcessing\", "
                "\"single\": [{\"SpecialToken\": {\"id\": \"<s>\", \"type_id\": 0}}], "
                "\"special_tokens\": {}}",
                n, "[]", STOF_ERR_FORMAT);
    expect_part("Bert processing without ids", n, n,
                "{\"type\": \"BertProcessing\", "
                "\"cls\": \"[CLS]\", \"sep\": [\"[SEP]\", 1]}",
                n, "[]", STOF_ERR_FORMAT);
    expect_part("Strip decoder of a string", n, n, n,
                "{\"type\": \"Strip\", \"content\": "
                "\"ab\", \"start\": 1, \"stop\": 0}",
                "[]", STOF_ERR_FORMAT);
    expect_part("added tokens an object", n, n, n, n, "{}", STOF_ERR_FORMAT);
    expect_part("added token id a string", n, n, n, n, "[{\"id\": \"4\", \"content\": \"<s>\"}]",
                STOF_ERR_FORMAT);
    expect_part("added token without content", n, n, n, n, "[{\"id\": 4}]", STOF_ERR_FORMAT);
    expect_part("added token flag a number", n, n, n, n,
                "[{\"id\": 4, \"content\": \"<s>\", \"lstrip\": 1}]", STOF_ERR_FORMAT);

    /* Sequences nested past the limit, and JSON nested past the parser's. */
    size_t cap = 1 << 20;
    char *deep = malloc(cap), *j;
    strcpy(deep, "{\"type\": \"Lowercase\"}");
    for (int i = 0; i < 12; i++) {
        char *w = malloc(cap);
        snprintf(w, cap, "{\"type\": \"Sequence\", \"normalizers\": [%s]}", deep);
        free(deep);
        deep = w;
    }
    expect_part("deep Sequences", deep, n, n, n, "[]", STOF_ERR_FORMAT);
    size_t k = 0;
    for (int i = 0; i < 20000; i++)
        deep[k++] = '[';
    deep[k] = '\0';
    j = tokenizer_json(GOOD_MODEL, deep, n, n, n, "[]");
    expect_open("JSON nested 20000 deep", j, STOF_ERR_PARSE);
    free(j);
    free(deep);
}

/* A regex that backtracks exponentially stops at PCRE2's match limit. */
static void test_hostile_regex(void)
{
    char *j = tokenizer_json(GOOD_MODEL, "null",
                             "{\"type\": \"Split\", \"pattern\": "
                             "{\"Regex\": \"(a|aa)+$\"}, \"behavior\": \"Isolated\"}",
                             "null", "null", "[]");
    write_file("tokenizer.json", j);
    free(j);
    stof_tokenizer *tok = NULL;
    CHECK_OK(stof_tokenizer_open(dir, &tok));
    if (!tok) return;
    char text[200];
    memset(text, 'a', sizeof text);
    text[sizeof text - 1] = 'b';
    int32_t ids[256];
    size_t n;
    time_t t0 = time(NULL);
    stof_status st = stof_tokenizer_encode(tok, text, sizeof text, NULL, ids, 256, &n);
    CHECK(st == STOF_ERR_FORMAT, "a runaway regex gives %s, want STOF_ERR_FORMAT",
          stof_status_str(st));
    CHECK(time(NULL) - t0 < 30, "the runaway regex ran %lds", (long)(time(NULL) - t0));
    stof_tokenizer_destroy(tok);
}

/* A charsmap trie whose units point outside it: lookups stop at the bound. */
static void test_hostile_charsmap(void)
{
    char *j = tokenizer_json(GOOD_MODEL,
                             "{\"type\": \"Precompiled\", \"precompiled_charsmap\": "
                             "\"CAAAAP////8AAAAAYQ==\"}",
                             "null", "null", "null", "[]");
    write_file("tokenizer.json", j);
    free(j);
    stof_tokenizer *tok = NULL;
    CHECK_OK(stof_tokenizer_open(dir, &tok));
    if (!tok) return;
    int32_t ids[64];
    size_t n;
    CHECK_OK(stof_tokenizer_encode(tok, "ab\xff\x01 \xe4\xb8\xad", 8, NULL, ids, 64, &n));
    CHECK(n >= 1 && ids[0] == 2, "ab through a broken charsmap: %zu ids", n);
    stof_tokenizer_destroy(tok);
}

/* A Unigram model without unk_id cannot tokenize what its vocabulary lacks: a named
 * error, not an id of -1. */
static void test_unigram_without_unk(void)
{
    char *j = tokenizer_json("{\"type\": \"Unigram\", \"vocab\": [[\"a\", -1.0]]}", "null", "null",
                             "null", "null", "[]");
    write_file("tokenizer.json", j);
    free(j);
    stof_tokenizer *tok = NULL;
    CHECK_OK(stof_tokenizer_open(dir, &tok));
    if (!tok) return;
    int32_t ids[8];
    size_t n;
    CHECK_OK(stof_tokenizer_encode(tok, "aa", 2, NULL, ids, 8, &n));
    CHECK(n == 2 && ids[0] == 0 && ids[1] == 0, "aa: %zu ids", n);
    CHECK(stof_tokenizer_encode(tok, "ab", 2, NULL, ids, 8, &n) == STOF_ERR_FORMAT,
          "a piece outside a Unigram vocabulary without unk_id");
    stof_tokenizer_destroy(tok);
}

static void test_call_errors(void)
{
    char *j = tokenizer_json(GOOD_MODEL, "null", "null", "null", "null", "[]");
    write_file("tokenizer.json", j);
    free(j);
    stof_tokenizer *tok = NULL;
    CHECK_OK(stof_tokenizer_open(dir, &tok));
    if (!tok) return;
    int32_t ids[8];
    size_t n = 0, len = 0;
    CHECK(stof_tokenizer_encode(tok, "abab", 4, NULL, ids, 1, &n) == STOF_ERR_INVALID_ARG && n == 2,
          "a too small ids buffer: n = %zu", n);
    CHECK_OK(stof_tokenizer_encode(tok, "abxab", 5, NULL, ids, 8, &n));
    CHECK(n == 3 && ids[0] == 2 && ids[1] == 3 && ids[2] == 2, "abxab: %zu ids", n);
    CHECK(stof_tokenizer_encode(tok, NULL, 3, NULL, ids, 8, &n) == STOF_ERR_INVALID_ARG,
          "NULL text accepted");
    char text[4];
    CHECK(stof_tokenizer_decode(tok, ids, 3, NULL, text, sizeof text, &len, NULL) ==
                  STOF_ERR_INVALID_ARG &&
              len == 11, /* "ab <unk> ab": no decoder joins with spaces */
          "a too small text buffer: len = %zu", len);
    int32_t odd[] = {-5, 99999, 0};
    char big[64];
    CHECK_OK(stof_tokenizer_decode(tok, odd, 3, NULL, big, sizeof big, &len, NULL));
    CHECK(strcmp(big, "a") == 0, "ids outside the vocabulary decode to '%s'", big);
    CHECK(stof_tokenizer_open("/nonexistent/folder", &tok) == STOF_ERR_IO, "missing folder");
    stof_tokenizer_destroy(tok);
}

int main(void)
{
    snprintf(dir, sizeof dir, "/tmp/stof_tok_errors_%ld", (long)getpid());
    mkdir(dir, 0700);
    test_models();
    test_components();
    test_hostile_regex();
    test_hostile_charsmap();
    test_unigram_without_unk();
    test_call_errors();
    char path[512];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    unlink(path);
    rmdir(dir);
    return test_finish("test_tok_errors");
}
