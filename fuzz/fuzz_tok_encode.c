/*
 * fuzz_tok_encode.c — libFuzzer harness for encoding and decoding under one model type,
 * compiled once per type: STOF_FUZZ_TOK_DIR names the committed tokenizer folder
 * (tests/data/tok/gpt2 for byte-level BPE, llama2 for SentencePiece-style BPE with byte
 * fallback, t5 for Unigram).
 *
 * Input: one byte of options (max_length, special tokens, decode flags), then arbitrary
 * bytes of text. Beside the sanitizers' checks, the harness aborts when an invariant
 * breaks: ids inside the vocabulary, at most max_length ids, the batch call equal to
 * the single call, a decode that fits what it reports, and for byte-level BPE (which
 * loses nothing) decode(encode(text)), special tokens kept, equal to the text read as
 * UTF-8 with U+FFFD for invalid bytes.
 */
#include "stof.h"
#include "tok/tok.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef STOF_FUZZ_TOK_DIR
#error STOF_FUZZ_TOK_DIR must name a tokenizer folder
#endif

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static stof_tokenizer *tok;
static stof_tokenizer_info info;

#define REQUIRE(cond, ...)                                                                         \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_tok_encode: %s: ", #cond);                                       \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    const char *dir = getenv("STOF_FUZZ_TOK_DIR");
    if (!dir) dir = STOF_FUZZ_TOK_DIR;
    REQUIRE(stof_tokenizer_open(dir, &tok) == STOF_OK, "%s: %s", dir, stof_last_error());
    REQUIRE(stof_tokenizer_get_info(tok, &info) == STOF_OK, "%s", stof_last_error());
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0) return 0;
    uint8_t opt = data[0];
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    stof_encode_params ep = stof_encode_default_params();
    ep.add_special_tokens = opt & 1;
    ep.max_length = (opt & 2) ? 1 + (opt >> 3) : 0;
    size_t cap = 4 * len + 64, n = 0;
    int32_t *ids = malloc(cap * sizeof *ids);
    REQUIRE(stof_tokenizer_encode(tok, text, len, &ep, ids, cap, &n) == STOF_OK, "%s",
            stof_last_error());
    for (size_t i = 0; i < n; i++)
        REQUIRE(ids[i] >= 0 && ids[i] < info.vocab_size, "id %d outside [0, %d)", ids[i],
                info.vocab_size);
    if (ep.max_length > 0) REQUIRE(n <= (size_t)ep.max_length, "%zu ids > %d", n, ep.max_length);

    stof_token_lists lists;
    const char *texts[2] = {text, text};
    size_t lens[2] = {len, len};
    REQUIRE(stof_tokenizer_encode_batch(tok, texts, lens, 2, &ep, 2, &lists) == STOF_OK, "%s",
            stof_last_error());
    for (int b = 0; b < 2; b++) {
        size_t m = (size_t)(lists.offsets[b + 1] - lists.offsets[b]);
        REQUIRE(m == n && (n == 0 || !memcmp(lists.ids + lists.offsets[b], ids, n * sizeof *ids)),
                "batch row %d differs", b);
    }
    stof_token_lists_free(&lists);

    stof_decode_params dp = stof_decode_default_params();
    dp.skip_special_tokens = (opt >> 2) & 1;
    dp.stream = (opt >> 7) & 1;
    size_t tcap = 16 * n + 64, tlen = 0, held = 0;
    char *out = malloc(tcap);
    REQUIRE(stof_tokenizer_decode(tok, ids, n, &dp, out, tcap, &tlen, &held) == STOF_OK, "%s",
            stof_last_error());
    REQUIRE(strlen(out) <= tlen && tlen < tcap, "decode length %zu", tlen);
#ifdef STOF_FUZZ_LOSSLESS
    if (ep.max_length == 0 && !dp.stream && !dp.skip_special_tokens) {
        tok_buf want = {0};
        REQUIRE(tok_utf8_sanitize(text, len, false, &want, NULL) == STOF_OK, "sanitize");
        REQUIRE(want.n == tlen && (tlen == 0 || !memcmp(want.p, out, tlen)),
                "decode(encode(text)) is not the text");
        free(want.p);
    }
#endif
    free(out);
    free(ids);
    return 0;
}
