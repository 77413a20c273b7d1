/*
 * load.c — tokenizer.json into a tok_pipe: the model (BPE or Unigram) and the added
 * tokens here, the components (normalizers, pre-tokenizers, post-processor, decoders)
 * in load_components.c. The file is untrusted: every value is type-checked, sizes are
 * bounded (tok.h), Sequences may nest only TOK_MAX_NESTING deep, merges must name
 * tokens of the vocabulary, and a component this code does not implement is
 * STOF_ERR_UNSUPPORTED by name rather than silently skipped (a skipped normalizer would
 * give wrong ids).
 */
#include "tok/load.h"
#include "io/json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *tok_load_type(const cJSON *c)
{
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(c, "type");
    return cJSON_IsString(t) ? t->valuestring : NULL;
}

bool tok_load_utf8_ok(const char *s, size_t n)
{
    tok_buf check = {0};
    bool ok = tok_utf8_sanitize(s, n, false, &check, NULL) == STOF_OK && check.n == n;
    free(check.p);
    return ok;
}

stof_status tok_load_dup(const char *s, size_t n, char **out, size_t *out_len)
{
    *out = NULL;
    /* Text that joins the text being tokenized must be UTF-8, as the regexes assume it
     * is (a "\ud800" escape in the file would give invalid bytes). */
    STOF_REQUIRE(tok_load_utf8_ok(s, n), STOF_ERR_FORMAT,
                 "tokenizer.json: a string is not valid UTF-8 (\"%.40s\")", s);
    *out = malloc(n + 1);
    STOF_REQUIRE(*out, STOF_ERR_OOM, "out of memory reading tokenizer.json");
    memcpy(*out, s, n);
    (*out)[n] = '\0';
    if (out_len) *out_len = n;
    return STOF_OK;
}

stof_status tok_load_string(const tok_loader *L, const cJSON *obj, const char *key,
                            const char *what, const char **out)
{
    STOF_TRY(io_json_string(obj, key, false, out, L->file));
    STOF_REQUIRE(*out, STOF_ERR_FORMAT, "%s: %s has no \"%s\" string", L->file, what, key);
    return STOF_OK;
}

/* The members of a Sequence component: obj[key] must be an array. */
stof_status tok_load_members(const tok_loader *L, const cJSON *obj, const char *key, int depth,
                             const cJSON **out)
{
    STOF_REQUIRE(depth < TOK_MAX_NESTING, STOF_ERR_FORMAT, "%s: Sequences nest deeper than %d",
                 L->file, TOK_MAX_NESTING);
    *out = cJSON_GetObjectItemCaseSensitive(obj, key);
    STOF_REQUIRE(cJSON_IsArray(*out), STOF_ERR_FORMAT, "%s: Sequence has no \"%s\" array", L->file,
                 key);
    return STOF_OK;
}

/* ------------------------------------------------------------------ model */

/* A score as the tokenizers library holds it. Its JSON reader (serde_json without
 * float_roundtrip) turns "d.ddd" into the digits as an integer, rounded to a double,
 * then divided by a power of ten: two roundings, so a 17-digit score can land one ulp
 * away from the correctly rounded value cJSON gives. Unigram's Viterbi compares sums of
 * scores, and a one-ulp difference flips ties, so the library's value is rebuilt: from
 * the shortest decimal that reads back as v (what the file holds, being written by a
 * shortest-round-trip printer), through the same two steps. */
static double library_f64(double v)
{
    if (v == 0 || v != v || v - v != 0) return v;
    char buf[40];
    for (int prec = 0; prec < 17; prec++) {
        snprintf(buf, sizeof buf, "%.*e", prec, v);
        if (strtod(buf, NULL) == v) break;
    }
    uint64_t sig = 0;
    int digits = 0;
    const char *c = buf + (buf[0] == '-');
    for (; *c && *c != 'e'; c++)
        if (*c >= '0' && *c <= '9') {
            sig = sig * 10 + (uint64_t)(*c - '0');
            digits++;
        }
    int exp10 = (int)strtol(c + 1, NULL, 10) - (digits - 1);
    double f = (double)sig;
    while (exp10 < -308) { /* the library divides by 1e308 until the table reaches */
        f /= 1e308;
        exp10 += 308;
    }
    char pw[16];
    snprintf(pw, sizeof pw, "1e%d", exp10 < 0 ? -exp10 : exp10);
    double p10 = strtod(pw, NULL);
    f = exp10 < 0 ? f / p10 : f * p10;
    return v < 0 ? -f : f;
}

static stof_status collect_vocab(tok_loader *L, const cJSON *vocab, bool unigram)
{
    tok_pipe *p = L->p;
    int count = cJSON_GetArraySize(vocab);
    STOF_REQUIRE(count > 0 && count <= TOK_MAX_ENTRIES, STOF_ERR_FORMAT,
                 "%s: model vocab has %d entries, expected 1..%d", L->file, count, TOK_MAX_ENTRIES);
    const char **strs = malloc((size_t)count * sizeof *strs);
    size_t *lens = malloc((size_t)count * sizeof *lens);
    int32_t *ids = malloc((size_t)count * sizeof *ids);
    if (unigram) p->scores = malloc((size_t)count * sizeof *p->scores);
    stof_status st = strs && lens && ids && (!unigram || p->scores)
                         ? STOF_OK
                         : stof_error(STOF_ERR_OOM, "%s: out of memory for the vocab", L->file);
    int i = 0;
    double min_score = 0;
    for (const cJSON *e = vocab->child; st == STOF_OK && e; e = e->next, i++) {
        if (unigram) {
            const cJSON *piece = cJSON_GetArrayItem(e, 0), *score = cJSON_GetArrayItem(e, 1);
            if (!cJSON_IsArray(e) || !cJSON_IsString(piece) || !cJSON_IsNumber(score)) {
                st = stof_error(STOF_ERR_FORMAT, "%s: Unigram vocab entry %d is not [piece, score]",
                                L->file, i);
                break;
            }
            strs[i] = piece->valuestring;
            ids[i] = i;
            p->scores[i] = library_f64(score->valuedouble);
            if (i == 0 || p->scores[i] < min_score) min_score = p->scores[i];
        } else {
            if (!cJSON_IsNumber(e) || e->valuedouble < 0 || e->valuedouble >= TOK_MAX_ENTRIES ||
                e->valuedouble != (double)(int32_t)e->valuedouble) {
                st =
                    stof_error(STOF_ERR_FORMAT, "%s: vocab entry \"%.60s\" is not an id in [0, %d)",
                               L->file, e->string ? e->string : "", TOK_MAX_ENTRIES);
                break;
            }
            strs[i] = e->string;
            ids[i] = (int32_t)e->valuedouble;
        }
        lens[i] = strlen(strs[i]);
    }
    if (st == STOF_OK) st = tok_vocab_build(&p->vocab, count, strs, lens, ids, L->file);
    if (st == STOF_OK && unigram) {
        p->unk_score = min_score - 10.0;
        for (int k = 0; k < count; k++)
            if ((int)lens[k] > p->max_piece_bytes) p->max_piece_bytes = (int)lens[k];
    }
    free(strs);
    free(lens);
    free(ids);
    return st;
}

/* One merge, "a b" or ["a", "b"], into its ids and the merged token's id. */
static stof_status merge_ids(tok_loader *L, const cJSON *e, int rank, char *buf, int32_t out[3])
{
    const char *a, *b;
    size_t la, lb;
    if (cJSON_IsString(e)) {
        const char *sp = strchr(e->valuestring, ' ');
        STOF_REQUIRE(sp && !strchr(sp + 1, ' '), STOF_ERR_FORMAT,
                     "%s: merge %d \"%.60s\" is not two tokens separated by a space", L->file, rank,
                     e->valuestring);
        a = e->valuestring;
        la = (size_t)(sp - a);
        b = sp + 1;
        lb = strlen(b);
    } else {
        const cJSON *x = cJSON_GetArrayItem(e, 0), *y = cJSON_GetArrayItem(e, 1);
        STOF_REQUIRE(cJSON_IsArray(e) && cJSON_GetArraySize(e) == 2 && cJSON_IsString(x) &&
                         cJSON_IsString(y),
                     STOF_ERR_FORMAT, "%s: merge %d is not [\"a\", \"b\"] or \"a b\"", L->file,
                     rank);
        a = x->valuestring;
        la = strlen(a);
        b = y->valuestring;
        lb = strlen(b);
    }
    STOF_REQUIRE(la + lb <= TOK_MAX_TOKEN_BYTES, STOF_ERR_FORMAT, "%s: merge %d is too long",
                 L->file, rank);
    STOF_REQUIRE(la > 0 && lb > 0, STOF_ERR_FORMAT, "%s: merge %d has an empty token", L->file,
                 rank);
    out[0] = tok_vocab_find(&L->p->vocab, a, la);
    out[1] = tok_vocab_find(&L->p->vocab, b, lb);
    memcpy(buf, a, la);
    memcpy(buf + la, b, lb);
    out[2] = tok_vocab_find(&L->p->vocab, buf, la + lb);
    STOF_REQUIRE(out[0] >= 0 && out[1] >= 0 && out[2] >= 0, STOF_ERR_FORMAT,
                 "%s: merge %d (\"%.40s\" + \"%.40s\") names a token outside the vocab", L->file,
                 rank, a, b);
    return STOF_OK;
}

static stof_status get_affix(tok_loader *L, const cJSON *m, const char *key, char **out,
                             size_t *len)
{
    const char *s;
    STOF_TRY(io_json_string(m, key, true, &s, L->file));
    if (!s || !*s) return STOF_OK;
    STOF_REQUIRE(strlen(s) <= 64, STOF_ERR_FORMAT, "%s: %s is longer than 64 bytes", L->file, key);
    return tok_load_dup(s, strlen(s), out, len);
}

static stof_status load_bpe(tok_loader *L, const cJSON *m)
{
    tok_pipe *p = L->p;
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(m, "vocab");
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(m, "merges");
    STOF_REQUIRE(cJSON_IsObject(vocab) && cJSON_IsArray(merges), STOF_ERR_FORMAT,
                 "%s: a BPE model needs a \"vocab\" object and a \"merges\" array", L->file);
    const cJSON *dropout = cJSON_GetObjectItemCaseSensitive(m, "dropout");
    STOF_REQUIRE(!dropout || cJSON_IsNull(dropout) ||
                     (cJSON_IsNumber(dropout) && dropout->valuedouble == 0.0),
                 STOF_ERR_UNSUPPORTED, "%s: BPE dropout is not supported", L->file);
    int fuse = 0, fallback = 0, ignore = 0;
    STOF_TRY(io_json_bool(m, "fuse_unk", false, &fuse, L->file));
    STOF_TRY(io_json_bool(m, "byte_fallback", false, &fallback, L->file));
    STOF_TRY(io_json_bool(m, "ignore_merges", false, &ignore, L->file));
    p->fuse_unk = fuse;
    p->byte_fallback = fallback;
    p->ignore_merges = ignore;
    STOF_TRY(get_affix(L, m, "continuing_subword_prefix", &p->cont_prefix, &p->cont_prefix_len));
    STOF_TRY(get_affix(L, m, "end_of_word_suffix", &p->eow_suffix, &p->eow_suffix_len));
    STOF_TRY(collect_vocab(L, vocab, false));
    const char *unk;
    STOF_TRY(io_json_string(m, "unk_token", true, &unk, L->file));
    if (unk) p->unk_id = tok_vocab_find(&p->vocab, unk, strlen(unk));
    int count = cJSON_GetArraySize(merges);
    STOF_REQUIRE(count <= TOK_MAX_ENTRIES, STOF_ERR_FORMAT, "%s: %d merges (at most %d)", L->file,
                 count, TOK_MAX_ENTRIES);
    STOF_TRY(tok_merges_init(&p->merges, (size_t)count));
    char *buf = malloc(TOK_MAX_TOKEN_BYTES + 1);
    STOF_REQUIRE(buf, STOF_ERR_OOM, "out of memory reading merges");
    int rank = 0;
    stof_status st = STOF_OK;
    for (const cJSON *e = merges->child; st == STOF_OK && e; e = e->next, rank++) {
        int32_t t[3] = {0, 0, 0};
        st = merge_ids(L, e, rank, buf, t);
        if (st == STOF_OK) tok_merges_add(&p->merges, t[0], t[1], rank, t[2]);
    }
    free(buf);
    return st;
}

static stof_status load_unigram(tok_loader *L, const cJSON *m)
{
    tok_pipe *p = L->p;
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(m, "vocab");
    STOF_REQUIRE(cJSON_IsArray(vocab), STOF_ERR_FORMAT,
                 "%s: a Unigram model needs a \"vocab\" array", L->file);
    int fallback = 0, unk = -1;
    STOF_TRY(io_json_bool(m, "byte_fallback", false, &fallback, L->file));
    p->byte_fallback = fallback;
    STOF_TRY(collect_vocab(L, vocab, true));
    STOF_TRY(io_json_int(m, "unk_id", 0, p->vocab.n - 1, &unk, L->file));
    p->unk_id = unk;
    p->fuse_unk = true;
    return STOF_OK;
}

static stof_status load_model(tok_loader *L, const cJSON *m)
{
    tok_pipe *p = L->p;
    STOF_REQUIRE(cJSON_IsObject(m), STOF_ERR_FORMAT, "%s: no \"model\" object", L->file);
    const char *t = tok_load_type(m);
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(m, "vocab");
    if (!t) /* files older than the "type" key: the shape of the vocab tells */
        t = cJSON_IsArray(vocab)                            ? "Unigram"
            : cJSON_GetObjectItemCaseSensitive(m, "merges") ? "BPE"
                                                            : "";
    p->unk_id = -1;
    if (strcmp(t, "BPE") == 0) {
        p->model = TOK_MODEL_BPE;
        STOF_TRY(load_bpe(L, m));
    } else if (strcmp(t, "Unigram") == 0) {
        p->model = TOK_MODEL_UNIGRAM;
        STOF_TRY(load_unigram(L, m));
    } else {
        return stof_error(STOF_ERR_UNSUPPORTED, "%s: model type \"%.40s\" is not supported",
                          L->file, t);
    }
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        p->byte_ids[b] = tok_vocab_find(&p->vocab, name, 6);
    }
    return STOF_OK;
}

/* ------------------------------------------------------------------ added tokens */

static stof_status load_added(tok_loader *L, const cJSON *list)
{
    tok_pipe *p = L->p;
    if (!list || cJSON_IsNull(list)) return STOF_OK;
    STOF_REQUIRE(cJSON_IsArray(list), STOF_ERR_FORMAT, "%s: added_tokens must be an array",
                 L->file);
    int count = cJSON_GetArraySize(list);
    STOF_REQUIRE(count <= TOK_MAX_ADDED_TOKENS, STOF_ERR_FORMAT, "%s: %d added tokens (at most %d)",
                 L->file, count, TOK_MAX_ADDED_TOKENS);
    if (count == 0) return STOF_OK;
    p->added = calloc((size_t)count, sizeof *p->added);
    STOF_REQUIRE(p->added, STOF_ERR_OOM, "out of memory for added tokens");
    for (const cJSON *e = list->child; e; e = e->next) {
        tok_added *a = &p->added[p->n_added];
        const char *content;
        int id = -1, special = 0, lstrip = 0, rstrip = 0, single = 0, normalized = 1;
        STOF_REQUIRE(cJSON_IsObject(e), STOF_ERR_FORMAT, "%s: an added token is not an object",
                     L->file);
        STOF_TRY(tok_load_string(L, e, "content", "an added token", &content));
        STOF_TRY(io_json_int(e, "id", 0, TOK_MAX_ENTRIES - 1, &id, L->file));
        STOF_REQUIRE(id >= 0, STOF_ERR_FORMAT, "%s: added token \"%.60s\" has no id", L->file,
                     content);
        STOF_REQUIRE(strlen(content) <= TOK_MAX_TOKEN_BYTES, STOF_ERR_FORMAT,
                     "%s: an added token is longer than %d bytes", L->file, TOK_MAX_TOKEN_BYTES);
        STOF_TRY(io_json_bool(e, "special", false, &special, L->file));
        STOF_TRY(io_json_bool(e, "lstrip", false, &lstrip, L->file));
        STOF_TRY(io_json_bool(e, "rstrip", false, &rstrip, L->file));
        STOF_TRY(io_json_bool(e, "single_word", false, &single, L->file));
        STOF_TRY(io_json_bool(e, "normalized", false, &normalized, L->file));
        STOF_TRY(tok_load_dup(content, strlen(content), &a->content, &a->len));
        p->n_added++;
        a->id = id;
        a->special = special;
        a->lstrip = lstrip;
        a->rstrip = rstrip;
        a->single_word = single;
        a->normalized = normalized; /* special or not: the library splits by this flag */
        a->match = a->content;
        a->match_len = a->len;
        if (a->normalized) p->added_any_normalized = true;
    }
    return STOF_OK;
}

/* A normalized added token is looked for in normalized text as the normalizer writes
 * it (lower-cased under Lowercase, say), as the library builds its matcher. */
static stof_status normalize_added(tok_pipe *p)
{
    if (!p->added_any_normalized || p->n_norms == 0) return STOF_OK;
    tok_work *w;
    STOF_TRY(tok_work_new(p, &w));
    tok_buf out = {0};
    stof_status st = STOF_OK;
    for (int i = 0; st == STOF_OK && i < p->n_added; i++) {
        tok_added *a = &p->added[i];
        if (!a->normalized) continue;
        st = tok_normalize(p, w, a->content, a->len, &out);
        if (st == STOF_OK) st = tok_load_dup(out.p ? out.p : "", out.n, &a->match, &a->match_len);
    }
    free(out.p);
    tok_work_free(w);
    return st;
}

static stof_status index_ids(tok_pipe *p)
{
    int32_t n = p->vocab.n;
    for (int i = 0; i < p->n_added; i++)
        if (p->added[i].id + 1 > n) n = p->added[i].id + 1;
    p->n_ids = n;
    p->added_of_id = malloc((size_t)n * sizeof *p->added_of_id);
    STOF_REQUIRE(p->added_of_id, STOF_ERR_OOM, "out of memory indexing %d ids", n);
    memset(p->added_of_id, 0xff, (size_t)n * sizeof *p->added_of_id);
    for (int i = 0; i < p->n_added; i++)
        p->added_of_id[p->added[i].id] = i;
    /* Matching index: bucketed by first byte (a counting sort), longest first within a
     * bucket (insertion sort: buckets are small), so leftmost-longest needs no search. */
    p->added_order = malloc(((size_t)p->n_added + 1) * sizeof *p->added_order);
    STOF_REQUIRE(p->added_order, STOF_ERR_OOM, "out of memory indexing added tokens");
    memset(p->added_first, 0, sizeof p->added_first);
    for (int i = 0; i < p->n_added; i++)
        if (p->added[i].match_len) p->added_first[(unsigned char)p->added[i].match[0] + 1]++;
    for (int b = 0; b < 256; b++)
        p->added_first[b + 1] += p->added_first[b];
    int32_t fill[256];
    memcpy(fill, p->added_first, sizeof fill);
    for (int i = 0; i < p->n_added; i++) {
        if (!p->added[i].match_len) continue;
        int b = (unsigned char)p->added[i].match[0];
        int32_t at = fill[b]++;
        while (at > p->added_first[b] &&
               p->added[p->added_order[at - 1]].match_len < p->added[i].match_len) {
            p->added_order[at] = p->added_order[at - 1];
            at--;
        }
        p->added_order[at] = i;
    }
    return STOF_OK;
}

/* ------------------------------------------------------------------ entry */

static const cJSON *component(const cJSON *root, const char *key)
{
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(root, key);
    return c && !cJSON_IsNull(c) ? c : NULL;
}

stof_status tok_pipe_load(tok_pipe *p, const void *json, const char *file)
{
    const cJSON *root = json;
    tok_loader L = {p, file};
    memset(p, 0, sizeof *p);
    p->unk_id = -1;
    STOF_REQUIRE(cJSON_IsObject(root), STOF_ERR_FORMAT, "%s is not a JSON object", file);
    STOF_TRY(load_model(&L, cJSON_GetObjectItemCaseSensitive(root, "model")));
    STOF_TRY(load_added(&L, cJSON_GetObjectItemCaseSensitive(root, "added_tokens")));
    const cJSON *c;
    if ((c = component(root, "normalizer"))) STOF_TRY(tok_load_normalizer(&L, c, 0));
    if ((c = component(root, "pre_tokenizer"))) STOF_TRY(tok_load_pretokenizer(&L, c, 0));
    if ((c = component(root, "post_processor"))) STOF_TRY(tok_load_post(&L, c, 0));
    if ((c = component(root, "decoder"))) {
        p->has_decoder = true;
        STOF_TRY(tok_load_decoder(&L, c, 0));
    }
    STOF_TRY(normalize_added(p));
    return index_ids(p);
}

void tok_pipe_free(tok_pipe *p)
{
    if (!p) return;
    tok_vocab_free(&p->vocab);
    free(p->merges.slots);
    free(p->cont_prefix);
    free(p->eow_suffix);
    free(p->scores);
    for (int i = 0; i < p->n_norms; i++) {
        pcre2_code_free(p->norms[i].pat.re);
        free(p->norms[i].text);
        free(p->norms[i].trie);
    }
    for (int i = 0; i < p->n_pres; i++)
        pcre2_code_free(p->pres[i].pat.re);
    for (int i = 0; i < p->n_decs; i++) {
        free(p->decs[i].from);
        free(p->decs[i].to);
    }
    for (int i = 0; i < p->n_added; i++) {
        if (p->added[i].match != p->added[i].content) free(p->added[i].match);
        free(p->added[i].content);
    }
    free(p->added);
    free(p->added_of_id);
    free(p->added_order);
    memset(p, 0, sizeof *p);
}
