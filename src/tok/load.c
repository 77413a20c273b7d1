/*
 * load.c — tokenizer.json into a tok_pipe: the model (BPE or Unigram), added tokens,
 * normalizers, pre-tokenizers, post-processor and decoders. The file is untrusted:
 * every value is type-checked, Sequences may nest only TOK_MAX_NESTING deep and hold
 * TOK_MAX_COMPONENTS members in all, merges must name tokens of the vocabulary, and a
 * component this code does not implement is STOF_ERR_UNSUPPORTED by name rather than
 * silently skipped (a skipped normalizer would give wrong ids).
 */
#include "tok/tok.h"
#include "io/json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GPT2_REGEX "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"
#define WHITESPACE_REGEX "\\w+|[^\\w\\s]+"

typedef struct loader {
    tok_pipe *p;
    const char *file;
} loader;

static const char *type_of(const cJSON *c)
{
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(c, "type");
    return cJSON_IsString(t) ? t->valuestring : NULL;
}

static stof_status dup_string(const char *s, size_t n, char **out, size_t *out_len)
{
    *out = malloc(n + 1);
    STOF_REQUIRE(*out, STOF_ERR_OOM, "out of memory reading tokenizer.json");
    memcpy(*out, s, n);
    (*out)[n] = '\0';
    if (out_len) *out_len = n;
    return STOF_OK;
}

static stof_status get_string(const loader *L, const cJSON *obj, const char *key, const char *what,
                              const char **out)
{
    STOF_TRY(io_json_string(obj, key, false, out, L->file));
    STOF_REQUIRE(*out, STOF_ERR_FORMAT, "%s: %s has no \"%s\" string", L->file, what, key);
    return STOF_OK;
}

/* {"String": "..."} or {"Regex": "..."} into a compiled pattern. */
static stof_status get_pattern(const loader *L, const cJSON *obj, const char *what, tok_pattern *out,
                               const char **literal)
{
    const cJSON *pat = cJSON_GetObjectItemCaseSensitive(obj, "pattern");
    STOF_REQUIRE(cJSON_IsObject(pat), STOF_ERR_FORMAT, "%s: %s has no \"pattern\" object", L->file,
                 what);
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(pat, "String");
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(pat, "Regex");
    if (literal) *literal = NULL;
    if (cJSON_IsString(s)) {
        if (literal) *literal = s->valuestring;
        return tok_regex_compile(s->valuestring, strlen(s->valuestring), true, L->file, out);
    }
    STOF_REQUIRE(cJSON_IsString(r), STOF_ERR_FORMAT,
                 "%s: %s pattern must be {\"String\": ...} or {\"Regex\": ...}", L->file, what);
    return tok_regex_compile(r->valuestring, strlen(r->valuestring), false, L->file, out);
}

static stof_status get_behavior(const loader *L, const cJSON *obj, tok_split_behavior dflt,
                                tok_split_behavior *out)
{
    static const char *const names[] = {"Removed", "Isolated", "MergedWithPrevious",
                                        "MergedWithNext", "Contiguous"};
    const char *b;
    *out = dflt;
    STOF_TRY(io_json_string(obj, "behavior", false, &b, L->file));
    if (!b) return STOF_OK;
    for (int i = 0; i < 5; i++)
        if (strcmp(b, names[i]) == 0) {
            *out = (tok_split_behavior)i;
            return STOF_OK;
        }
    return stof_error(STOF_ERR_FORMAT, "%s: split behavior \"%.40s\" is not one of Removed, "
                      "Isolated, MergedWithPrevious, MergedWithNext, Contiguous", L->file, b);
}

static stof_status get_replacement(const loader *L, const cJSON *obj, char *dst, size_t *len)
{
    const char *r = "\xE2\x96\x81"; /* U+2581, SentencePiece's space */
    STOF_TRY(io_json_string(obj, "replacement", false, &r, L->file));
    if (!r) r = "\xE2\x96\x81";
    size_t n = strlen(r);
    STOF_REQUIRE(n >= 1 && n <= 4 && (size_t)tok_utf8_len((unsigned char)r[0]) == n,
                 STOF_ERR_FORMAT, "%s: Metaspace replacement must be one character", L->file);
    memcpy(dst, r, n);
    *len = n;
    return STOF_OK;
}

static stof_status get_prepend(const loader *L, const cJSON *obj, tok_prepend *out)
{
    const char *s;
    int add = -1;
    *out = TOK_PREPEND_ALWAYS;
    STOF_TRY(io_json_string(obj, "prepend_scheme", false, &s, L->file));
    STOF_TRY(io_json_bool(obj, "add_prefix_space", false, &add, L->file));
    if (!s) {
        if (add == 0) *out = TOK_PREPEND_NEVER; /* files older than prepend_scheme */
        return STOF_OK;
    }
    if (strcmp(s, "always") == 0) *out = TOK_PREPEND_ALWAYS;
    else if (strcmp(s, "first") == 0) *out = TOK_PREPEND_FIRST;
    else if (strcmp(s, "never") == 0) *out = TOK_PREPEND_NEVER;
    else return stof_error(STOF_ERR_FORMAT, "%s: prepend_scheme \"%.40s\"", L->file, s);
    return STOF_OK;
}

/* The members of a Sequence component: obj[key] must be an array. */
static stof_status get_members(const loader *L, const cJSON *obj, const char *key, int depth,
                               const cJSON **out)
{
    STOF_REQUIRE(depth < TOK_MAX_NESTING, STOF_ERR_FORMAT, "%s: Sequences nest deeper than %d",
                 L->file, TOK_MAX_NESTING);
    *out = cJSON_GetObjectItemCaseSensitive(obj, key);
    STOF_REQUIRE(cJSON_IsArray(*out), STOF_ERR_FORMAT, "%s: Sequence has no \"%s\" array", L->file,
                 key);
    return STOF_OK;
}

/* ------------------------------------------------------------------ normalizers */

static int base64_value(unsigned char c)
{
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
}

/* Standard base64 (padding optional) into a new buffer. */
static stof_status base64_decode(const loader *L, const char *s, unsigned char **out, size_t *n)
{
    size_t len = strlen(s);
    while (len && s[len - 1] == '=') len--;
    *out = malloc(len * 3 / 4 + 4);
    STOF_REQUIRE(*out, STOF_ERR_OOM, "out of memory decoding precompiled_charsmap");
    *n = 0;
    uint32_t acc = 0;
    int bits = 0;
    *n = 0;
    for (size_t i = 0; i < len; i++) {
        int v = base64_value((unsigned char)s[i]);
        if (v < 0) {
            free(*out);
            *out = NULL;
            return stof_error(STOF_ERR_FORMAT, "%s: precompiled_charsmap is not base64 (byte %zu)",
                              L->file, i);
        }
        acc = acc << 6 | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            (*out)[(*n)++] = (unsigned char)(acc >> bits);
        }
    }
    return STOF_OK;
}

/* SentencePiece's charsmap: a u32 (little-endian) byte size of the trie, the trie's
 * u32 units, then the NUL-separated replacement strings the trie's values point into. */
static stof_status load_precompiled(const loader *L, const cJSON *c, tok_norm *n)
{
    const char *b64;
    STOF_TRY(io_json_string(c, "precompiled_charsmap", true, &b64, L->file));
    if (!b64 || !*b64) return STOF_OK; /* no map: nothing to replace */
    unsigned char *raw = NULL;
    size_t len = 0;
    STOF_TRY(base64_decode(L, b64, &raw, &len));
    uint32_t trie_bytes = len >= 4 ? (uint32_t)raw[0] | (uint32_t)raw[1] << 8 |
                                         (uint32_t)raw[2] << 16 | (uint32_t)raw[3] << 24
                                   : 0;
    stof_status st = STOF_OK;
    if (len < 4 || trie_bytes % 4 || trie_bytes > len - 4 || trie_bytes == 0)
        st = stof_error(STOF_ERR_FORMAT, "%s: precompiled_charsmap's trie size %u does not fit "
                        "its %zu bytes", L->file, trie_bytes, len);
    if (st == STOF_OK) {
        n->trie_n = trie_bytes / 4;
        n->trie = malloc(trie_bytes);
        n->text_len = len - 4 - trie_bytes;
        n->text = malloc(n->text_len + 1);
        if (!n->trie || !n->text) st = stof_error(STOF_ERR_OOM, "out of memory for the charsmap");
    }
    if (st == STOF_OK) {
        for (size_t i = 0; i < n->trie_n; i++) {
            const unsigned char *u = raw + 4 + 4 * i;
            n->trie[i] = (uint32_t)u[0] | (uint32_t)u[1] << 8 | (uint32_t)u[2] << 16 |
                         (uint32_t)u[3] << 24;
        }
        memcpy(n->text, raw + 4 + trie_bytes, n->text_len);
        n->text[n->text_len] = '\0';
    }
    free(raw);
    return st;
}

static stof_status add_normalizer(loader *L, const cJSON *c, int depth)
{
    tok_pipe *p = L->p;
    const char *t = type_of(c);
    STOF_REQUIRE(cJSON_IsObject(c) && t, STOF_ERR_FORMAT, "%s: a normalizer without a type", L->file);
    if (strcmp(t, "Sequence") == 0) {
        const cJSON *m = NULL;
        STOF_TRY(get_members(L, c, "normalizers", depth, &m));
        for (const cJSON *e = m->child; e; e = e->next) STOF_TRY(add_normalizer(L, e, depth + 1));
        return STOF_OK;
    }
    STOF_REQUIRE(p->n_norms < TOK_MAX_COMPONENTS, STOF_ERR_FORMAT, "%s: more than %d normalizers",
                 L->file, TOK_MAX_COMPONENTS);
    tok_norm *n = &p->norms[p->n_norms];
    memset(n, 0, sizeof *n);
    static const struct {
        const char *name;
        tok_norm_kind kind;
    } plain[] = {{"NFC", TOK_NORM_NFC},           {"NFD", TOK_NORM_NFD},
                 {"NFKC", TOK_NORM_NFKC},         {"NFKD", TOK_NORM_NFKD},
                 {"Lowercase", TOK_NORM_LOWERCASE}, {"StripAccents", TOK_NORM_STRIP_ACCENTS}};
    for (size_t i = 0; i < sizeof plain / sizeof plain[0]; i++)
        if (strcmp(t, plain[i].name) == 0) {
            n->kind = plain[i].kind;
            p->n_norms++;
            return STOF_OK;
        }
    if (strcmp(t, "Replace") == 0) {
        const char *content;
        n->kind = TOK_NORM_REPLACE;
        STOF_TRY(get_string(L, c, "content", "Replace", &content));
        STOF_TRY(dup_string(content, strlen(content), &n->text, &n->text_len));
        p->n_norms++; /* counted now so that tok_pipe_free releases it */
        return get_pattern(L, c, "Replace", &n->pat, NULL);
    }
    if (strcmp(t, "Prepend") == 0) {
        const char *pre;
        n->kind = TOK_NORM_PREPEND;
        STOF_TRY(get_string(L, c, "prepend", "Prepend", &pre));
        p->n_norms++;
        return dup_string(pre, strlen(pre), &n->text, &n->text_len);
    }
    if (strcmp(t, "Precompiled") == 0) {
        n->kind = TOK_NORM_PRECOMPILED;
        p->n_norms++;
        return load_precompiled(L, c, n);
    }
    if (strcmp(t, "Strip") == 0) {
        int left = 1, right = 1;
        n->kind = TOK_NORM_STRIP;
        STOF_TRY(io_json_bool(c, "strip_left", false, &left, L->file));
        STOF_TRY(io_json_bool(c, "strip_right", false, &right, L->file));
        n->left = left;
        n->right = right;
        p->n_norms++;
        return STOF_OK;
    }
    return stof_error(STOF_ERR_UNSUPPORTED, "%s: normalizer \"%.40s\" is not supported", L->file, t);
}

/* ------------------------------------------------------------------ pre-tokenizers */

static stof_status add_pretokenizer(loader *L, const cJSON *c, int depth)
{
    tok_pipe *p = L->p;
    const char *t = type_of(c);
    STOF_REQUIRE(cJSON_IsObject(c) && t, STOF_ERR_FORMAT, "%s: a pre-tokenizer without a type",
                 L->file);
    if (strcmp(t, "Sequence") == 0) {
        const cJSON *m = NULL;
        STOF_TRY(get_members(L, c, "pretokenizers", depth, &m));
        for (const cJSON *e = m->child; e; e = e->next) STOF_TRY(add_pretokenizer(L, e, depth + 1));
        return STOF_OK;
    }
    STOF_REQUIRE(p->n_pres < TOK_MAX_COMPONENTS, STOF_ERR_FORMAT,
                 "%s: more than %d pre-tokenizers", L->file, TOK_MAX_COMPONENTS);
    tok_pre *r = &p->pres[p->n_pres];
    memset(r, 0, sizeof *r);
    if (strcmp(t, "ByteLevel") == 0) {
        int add = 1, use = 1;
        r->kind = TOK_PRE_BYTE_LEVEL;
        STOF_TRY(io_json_bool(c, "add_prefix_space", false, &add, L->file));
        STOF_TRY(io_json_bool(c, "use_regex", false, &use, L->file));
        r->add_prefix_space = add;
        r->use_regex = use;
        p->n_pres++;
        return use ? tok_regex_compile(GPT2_REGEX, strlen(GPT2_REGEX), false, L->file, &r->pat)
                   : STOF_OK;
    }
    if (strcmp(t, "Split") == 0) {
        int invert = 0;
        r->kind = TOK_PRE_SPLIT;
        STOF_TRY(get_behavior(L, c, TOK_SPLIT_ISOLATED, &r->behavior));
        STOF_TRY(io_json_bool(c, "invert", false, &invert, L->file));
        r->invert = invert;
        p->n_pres++;
        return get_pattern(L, c, "Split", &r->pat, NULL);
    }
    if (strcmp(t, "Metaspace") == 0) {
        int split = 1;
        r->kind = TOK_PRE_METASPACE;
        STOF_TRY(get_replacement(L, c, r->replacement, &r->replacement_len));
        STOF_TRY(get_prepend(L, c, &r->prepend));
        STOF_TRY(io_json_bool(c, "split", false, &split, L->file));
        r->split = split;
        p->n_pres++;
        return STOF_OK;
    }
    if (strcmp(t, "Whitespace") == 0) {
        r->kind = TOK_PRE_WHITESPACE;
        p->n_pres++;
        return tok_regex_compile(WHITESPACE_REGEX, strlen(WHITESPACE_REGEX), false, L->file, &r->pat);
    }
    if (strcmp(t, "WhitespaceSplit") == 0 || strcmp(t, "BertPreTokenizer") == 0) {
        r->kind = t[0] == 'W' ? TOK_PRE_WHITESPACE_SPLIT : TOK_PRE_BERT;
        p->n_pres++;
        return STOF_OK;
    }
    if (strcmp(t, "Digits") == 0) {
        int individual = 0;
        r->kind = TOK_PRE_DIGITS;
        STOF_TRY(io_json_bool(c, "individual_digits", false, &individual, L->file));
        r->behavior = individual ? TOK_SPLIT_ISOLATED : TOK_SPLIT_CONTIGUOUS;
        p->n_pres++;
        return STOF_OK;
    }
    if (strcmp(t, "Punctuation") == 0) {
        r->kind = TOK_PRE_PUNCTUATION;
        STOF_TRY(get_behavior(L, c, TOK_SPLIT_ISOLATED, &r->behavior));
        p->n_pres++;
        return STOF_OK;
    }
    return stof_error(STOF_ERR_UNSUPPORTED, "%s: pre-tokenizer \"%.40s\" is not supported", L->file,
                      t);
}

/* ------------------------------------------------------------------ decoders */

static stof_status add_decoder(loader *L, const cJSON *c, int depth)
{
    tok_pipe *p = L->p;
    const char *t = type_of(c);
    STOF_REQUIRE(cJSON_IsObject(c) && t, STOF_ERR_FORMAT, "%s: a decoder without a type", L->file);
    if (strcmp(t, "Sequence") == 0) {
        const cJSON *m = NULL;
        STOF_TRY(get_members(L, c, "decoders", depth, &m));
        for (const cJSON *e = m->child; e; e = e->next) STOF_TRY(add_decoder(L, e, depth + 1));
        return STOF_OK;
    }
    STOF_REQUIRE(p->n_decs < TOK_MAX_COMPONENTS, STOF_ERR_FORMAT, "%s: more than %d decoders",
                 L->file, TOK_MAX_COMPONENTS);
    tok_dec *d = &p->decs[p->n_decs];
    memset(d, 0, sizeof *d);
    if (strcmp(t, "ByteLevel") == 0 || strcmp(t, "ByteFallback") == 0 || strcmp(t, "Fuse") == 0) {
        d->kind = t[4] == 'L' ? TOK_DEC_BYTE_LEVEL : t[0] == 'B' ? TOK_DEC_BYTE_FALLBACK : TOK_DEC_FUSE;
        p->n_decs++;
        return STOF_OK;
    }
    if (strcmp(t, "Metaspace") == 0) {
        d->kind = TOK_DEC_METASPACE;
        STOF_TRY(get_replacement(L, c, d->replacement, &d->replacement_len));
        STOF_TRY(get_prepend(L, c, &d->prepend));
        p->n_decs++;
        return STOF_OK;
    }
    if (strcmp(t, "Replace") == 0) {
        const char *content, *lit;
        tok_pattern pat;
        STOF_TRY(get_pattern(L, c, "Replace decoder", &pat, &lit));
        pcre2_code_free(pat.re);
        STOF_REQUIRE(lit, STOF_ERR_UNSUPPORTED,
                     "%s: a Replace decoder with a Regex pattern is not supported", L->file);
        STOF_TRY(get_string(L, c, "content", "Replace decoder", &content));
        d->kind = TOK_DEC_REPLACE;
        p->n_decs++;
        STOF_REQUIRE(*lit, STOF_ERR_FORMAT, "%s: Replace decoder with an empty pattern", L->file);
        STOF_TRY(dup_string(lit, strlen(lit), &d->from, &d->from_len));
        return dup_string(content, strlen(content), &d->to, &d->to_len);
    }
    if (strcmp(t, "Strip") == 0) {
        const char *content;
        d->kind = TOK_DEC_STRIP;
        STOF_TRY(get_string(L, c, "content", "Strip decoder", &content));
        STOF_REQUIRE(*content && (size_t)tok_utf8_len((unsigned char)content[0]) == strlen(content),
                     STOF_ERR_FORMAT, "%s: Strip decoder content must be one character", L->file);
        STOF_TRY(io_json_int(c, "start", 0, 1 << 20, &d->start, L->file));
        STOF_TRY(io_json_int(c, "stop", 0, 1 << 20, &d->stop, L->file));
        p->n_decs++;
        return dup_string(content, strlen(content), &d->from, &d->from_len);
    }
    if (strcmp(t, "WordPiece") == 0) {
        const char *prefix = "##";
        int cleanup = 1;
        d->kind = TOK_DEC_WORDPIECE;
        STOF_TRY(io_json_string(c, "prefix", false, &prefix, L->file));
        STOF_TRY(io_json_bool(c, "cleanup", false, &cleanup, L->file));
        d->cleanup = cleanup;
        p->n_decs++;
        prefix = prefix ? prefix : "##";
        return dup_string(prefix, strlen(prefix), &d->from, &d->from_len);
    }
    if (strcmp(t, "BPEDecoder") == 0) {
        const char *suffix = "</w>";
        d->kind = TOK_DEC_BPE_SUFFIX;
        STOF_TRY(io_json_string(c, "suffix", false, &suffix, L->file));
        p->n_decs++;
        suffix = suffix ? suffix : "</w>";
        return dup_string(suffix, strlen(suffix), &d->from, &d->from_len);
    }
    return stof_error(STOF_ERR_UNSUPPORTED, "%s: decoder \"%.40s\" is not supported", L->file, t);
}

/* ------------------------------------------------------------------ post-processor */

static stof_status tpl_special(loader *L, const int32_t *ids, int n)
{
    tok_pipe *p = L->p;
    STOF_REQUIRE(p->n_tpl < TOK_MAX_TEMPLATE, STOF_ERR_FORMAT, "%s: template longer than %d",
                 L->file, TOK_MAX_TEMPLATE);
    STOF_REQUIRE(n <= 8, STOF_ERR_UNSUPPORTED, "%s: a template token of %d ids", L->file, n);
    tok_tpl_item *it = &p->tpl[p->n_tpl++];
    memset(it, 0, sizeof *it);
    memcpy(it->ids, ids, (size_t)n * sizeof *ids);
    it->n_ids = n;
    p->n_special_added += n;
    return STOF_OK;
}

static stof_status tpl_sequence(loader *L)
{
    tok_pipe *p = L->p;
    STOF_REQUIRE(p->n_tpl < TOK_MAX_TEMPLATE, STOF_ERR_FORMAT, "%s: template longer than %d",
                 L->file, TOK_MAX_TEMPLATE);
    p->tpl[p->n_tpl++] = (tok_tpl_item){.is_sequence = true};
    return STOF_OK;
}

/* ["[CLS]", 101] of BertProcessing / RobertaProcessing. */
static stof_status pair_id(loader *L, const cJSON *c, const char *key, int32_t *id)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(c, key);
    const cJSON *num = cJSON_IsArray(v) ? cJSON_GetArrayItem(v, 1) : NULL;
    STOF_REQUIRE(cJSON_IsNumber(num) && num->valuedouble >= 0 &&
                     num->valuedouble < TOK_MAX_ENTRIES,
                 STOF_ERR_FORMAT, "%s: post_processor %s must be [token, id]", L->file, key);
    *id = (int32_t)num->valuedouble;
    return STOF_OK;
}

static stof_status template_special(loader *L, const cJSON *specials, const char *name)
{
    const cJSON *sp = cJSON_GetObjectItemCaseSensitive(specials, name);
    const cJSON *ids = cJSON_GetObjectItemCaseSensitive(sp, "ids");
    STOF_REQUIRE(cJSON_IsArray(ids), STOF_ERR_FORMAT,
                 "%s: template token \"%.60s\" is not in special_tokens", L->file, name);
    int32_t v[8];
    int n = 0;
    for (const cJSON *e = ids->child; e; e = e->next) {
        STOF_REQUIRE(n < 8, STOF_ERR_UNSUPPORTED, "%s: \"%.60s\" has more than 8 ids", L->file, name);
        STOF_REQUIRE(cJSON_IsNumber(e) && e->valuedouble >= 0 && e->valuedouble < TOK_MAX_ENTRIES,
                     STOF_ERR_FORMAT, "%s: \"%.60s\" has a bad id", L->file, name);
        v[n++] = (int32_t)e->valuedouble;
    }
    return tpl_special(L, v, n);
}

static stof_status set_post(loader *L, const cJSON *c, int depth)
{
    const char *t = type_of(c);
    STOF_REQUIRE(cJSON_IsObject(c) && t, STOF_ERR_FORMAT, "%s: a post_processor without a type",
                 L->file);
    if (strcmp(t, "ByteLevel") == 0) return STOF_OK; /* offsets only */
    if (strcmp(t, "Sequence") == 0) {
        const cJSON *m = NULL;
        STOF_TRY(get_members(L, c, "processors", depth, &m));
        for (const cJSON *e = m->child; e; e = e->next) STOF_TRY(set_post(L, e, depth + 1));
        return STOF_OK;
    }
    STOF_REQUIRE(L->p->n_tpl == 0, STOF_ERR_UNSUPPORTED,
                 "%s: more than one post-processor adds special tokens", L->file);
    if (strcmp(t, "BertProcessing") == 0 || strcmp(t, "RobertaProcessing") == 0) {
        int32_t cls = 0, sep = 0;
        STOF_TRY(pair_id(L, c, "cls", &cls));
        STOF_TRY(pair_id(L, c, "sep", &sep));
        STOF_TRY(tpl_special(L, &cls, 1));
        STOF_TRY(tpl_sequence(L));
        return tpl_special(L, &sep, 1);
    }
    if (strcmp(t, "TemplateProcessing") == 0) {
        const cJSON *single = cJSON_GetObjectItemCaseSensitive(c, "single");
        const cJSON *specials = cJSON_GetObjectItemCaseSensitive(c, "special_tokens");
        STOF_REQUIRE(cJSON_IsArray(single), STOF_ERR_FORMAT,
                     "%s: TemplateProcessing has no \"single\" array", L->file);
        for (const cJSON *e = single->child; e; e = e->next) {
            const cJSON *sp = cJSON_GetObjectItemCaseSensitive(e, "SpecialToken");
            const cJSON *seq = cJSON_GetObjectItemCaseSensitive(e, "Sequence");
            if (cJSON_IsObject(seq)) {
                STOF_TRY(tpl_sequence(L));
                continue;
            }
            const char *name;
            STOF_REQUIRE(cJSON_IsObject(sp), STOF_ERR_FORMAT,
                         "%s: a template piece is neither SpecialToken nor Sequence", L->file);
            STOF_TRY(get_string(L, sp, "id", "SpecialToken", &name));
            STOF_TRY(template_special(L, specials, name));
        }
        return STOF_OK;
    }
    return stof_error(STOF_ERR_UNSUPPORTED, "%s: post_processor \"%.40s\" is not supported",
                      L->file, t);
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

static stof_status collect_vocab(loader *L, const cJSON *vocab, bool unigram)
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
                st = stof_error(STOF_ERR_FORMAT, "%s: vocab entry \"%.60s\" is not an id in [0, %d)",
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
static stof_status merge_ids(loader *L, const cJSON *e, int rank, char *buf, int32_t out[3])
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
                     STOF_ERR_FORMAT, "%s: merge %d is not [\"a\", \"b\"] or \"a b\"", L->file, rank);
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

static stof_status get_affix(loader *L, const cJSON *m, const char *key, char **out, size_t *len)
{
    const char *s;
    STOF_TRY(io_json_string(m, key, true, &s, L->file));
    if (!s || !*s) return STOF_OK;
    STOF_REQUIRE(strlen(s) <= 64, STOF_ERR_FORMAT, "%s: %s is longer than 64 bytes", L->file, key);
    return dup_string(s, strlen(s), out, len);
}

static stof_status load_bpe(loader *L, const cJSON *m)
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

static stof_status load_unigram(loader *L, const cJSON *m)
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

static stof_status load_model(loader *L, const cJSON *m)
{
    tok_pipe *p = L->p;
    STOF_REQUIRE(cJSON_IsObject(m), STOF_ERR_FORMAT, "%s: no \"model\" object", L->file);
    const char *t = type_of(m);
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(m, "vocab");
    if (!t) /* files older than the "type" key: the shape of the vocab tells */
        t = cJSON_IsArray(vocab) ? "Unigram"
            : cJSON_GetObjectItemCaseSensitive(m, "merges") ? "BPE" : "";
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

static stof_status load_added(loader *L, const cJSON *list)
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
        STOF_TRY(get_string(L, e, "content", "an added token", &content));
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
        STOF_TRY(dup_string(content, strlen(content), &a->content, &a->len));
        p->n_added++;
        a->id = id;
        a->special = special;
        a->lstrip = lstrip;
        a->rstrip = rstrip;
        a->single_word = single;
        a->normalized = normalized && !special;
        if (a->normalized) p->added_any_normalized = true;
    }
    return STOF_OK;
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
    for (int i = 0; i < p->n_added; i++) p->added_of_id[p->added[i].id] = i;
    /* Matching index: bucketed by first byte (a counting sort), longest first within a
     * bucket (insertion sort: buckets are small), so leftmost-longest needs no search. */
    p->added_order = malloc(((size_t)p->n_added + 1) * sizeof *p->added_order);
    STOF_REQUIRE(p->added_order, STOF_ERR_OOM, "out of memory indexing added tokens");
    memset(p->added_first, 0, sizeof p->added_first);
    for (int i = 0; i < p->n_added; i++)
        if (p->added[i].len) p->added_first[(unsigned char)p->added[i].content[0] + 1]++;
    for (int b = 0; b < 256; b++) p->added_first[b + 1] += p->added_first[b];
    int32_t fill[256];
    memcpy(fill, p->added_first, sizeof fill);
    for (int i = 0; i < p->n_added; i++) {
        if (!p->added[i].len) continue;
        int b = (unsigned char)p->added[i].content[0];
        int32_t at = fill[b]++;
        while (at > p->added_first[b] && p->added[p->added_order[at - 1]].len < p->added[i].len) {
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
    loader L = {p, file};
    memset(p, 0, sizeof *p);
    p->unk_id = -1;
    STOF_REQUIRE(cJSON_IsObject(root), STOF_ERR_FORMAT, "%s is not a JSON object", file);
    STOF_TRY(load_model(&L, cJSON_GetObjectItemCaseSensitive(root, "model")));
    STOF_TRY(load_added(&L, cJSON_GetObjectItemCaseSensitive(root, "added_tokens")));
    const cJSON *c;
    if ((c = component(root, "normalizer"))) STOF_TRY(add_normalizer(&L, c, 0));
    if ((c = component(root, "pre_tokenizer"))) STOF_TRY(add_pretokenizer(&L, c, 0));
    if ((c = component(root, "post_processor"))) STOF_TRY(set_post(&L, c, 0));
    if ((c = component(root, "decoder"))) {
        p->has_decoder = true;
        STOF_TRY(add_decoder(&L, c, 0));
    }
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
    for (int i = 0; i < p->n_pres; i++) pcre2_code_free(p->pres[i].pat.re);
    for (int i = 0; i < p->n_decs; i++) {
        free(p->decs[i].from);
        free(p->decs[i].to);
    }
    for (int i = 0; i < p->n_added; i++) free(p->added[i].content);
    free(p->added);
    free(p->added_of_id);
    free(p->added_order);
    memset(p, 0, sizeof *p);
}
