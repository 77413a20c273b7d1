/*
 * load.h — what load.c (model, added tokens) and load_components.c (normalizers,
 * pre-tokenizers, post-processor, decoders) share while reading tokenizer.json.
 */
#ifndef STOF_TOK_LOAD_H
#define STOF_TOK_LOAD_H

#include "tok/tok.h"

#include <cjson/cJSON.h>

typedef struct tok_loader {
    tok_pipe *p;
    const char *file; /* names the file in messages */
} tok_loader;

/* c's "type" string, or NULL. */
const char *tok_load_type(const cJSON *c);
/* Whether s[0..n) is valid UTF-8. */
bool tok_load_utf8_ok(const char *s, size_t n);
/* A NUL-terminated copy of s[0..n) into *out (and its length into *out_len if given);
 * STOF_ERR_FORMAT when s is not valid UTF-8. */
stof_status tok_load_dup(const char *s, size_t n, char **out, size_t *out_len);
/* obj[key], which must be a string (what names obj in the message). */
stof_status tok_load_string(const tok_loader *L, const cJSON *obj, const char *key,
                            const char *what, const char **out);
/* The members of a Sequence component: obj[key] must be an array, depth in bounds. */
stof_status tok_load_members(const tok_loader *L, const cJSON *obj, const char *key, int depth,
                             const cJSON **out);

/* One component (a Sequence flattened into the pipe), depth levels of Sequence deep. */
stof_status tok_load_normalizer(tok_loader *L, const cJSON *c, int depth);
stof_status tok_load_pretokenizer(tok_loader *L, const cJSON *c, int depth);
stof_status tok_load_decoder(tok_loader *L, const cJSON *c, int depth);
stof_status tok_load_post(tok_loader *L, const cJSON *c, int depth);

#endif /* STOF_TOK_LOAD_H */
