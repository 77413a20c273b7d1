/*
 * fuzz_tok_load.c — libFuzzer harness for reading tokenizer.json (src/tok/load.c).
 *
 * Input: the bytes of a tokenizer.json. Whatever they hold, loading must return a status
 * (never crash, leak or hang); when it succeeds, a few fixed texts are encoded and
 * decoded, and every id must lie inside the tokenizer's id range. A seed corpus of the
 * committed family tokenizers (fuzz/seeds/fuzz_tok_load, made from tests/data/tok) lets
 * the mutations start from real structure.
 */
#include "io/json.h"
#include "tok/tok.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const texts[] = {"", "Hello world, it's 2024!",
                                    "  naïve café 👍🏽 中文\n\t",
                                    "<s> [CLS] <|endoftext|> a\xff\xfe b"};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    cJSON *root = NULL;
    if (io_json_parse((const char *)data, size, "fuzz", &root) != STOF_OK) return 0;
    tok_pipe *p = calloc(1, sizeof *p);
    if (p && tok_pipe_load(p, root, "fuzz") == STOF_OK) {
        tok_work *w = NULL;
        tok_work_new(p, &w);
        for (size_t i = 0; w && i < sizeof texts / sizeof texts[0]; i++) {
            tok_ids ids = {0};
            tok_buf out = {0};
            if (tok_pipe_encode(p, w, texts[i], strlen(texts[i]), true, 0, false, &ids) ==
                STOF_OK) {
                for (size_t k = 0; k < ids.n; k++)
                    if (ids.p[k] < 0 || ids.p[k] >= p->n_ids) {
                        fprintf(stderr, "fuzz_tok_load: id %d outside [0, %d)\n", ids.p[k],
                                p->n_ids);
                        abort();
                    }
                size_t held;
                (void)tok_pipe_decode(p, ids.p, ids.n, i % 2 == 0, i == 3, &out, &held);
            }
            free(ids.p);
            free(out.p);
        }
        tok_work_free(w);
    }
    tok_pipe_free(p);
    free(p);
    cJSON_Delete(root);
    return 0;
}
