/*
 * load_components.c — the components of tokenizer.json into a tok_pipe: normalizers
 * (SentencePiece's Precompiled character map included), pre-tokenizers, the
 * post-processor (as a template of special ids around the sequence) and decoders.
 * Sequences are flattened into the pipe's arrays, nesting at most TOK_MAX_NESTING deep;
 * a type this code does not implement is STOF_ERR_UNSUPPORTED by name.
 */
#include "tok/load.h"
#include "io/json.h"

#include <stdlib.h>
#include <string.h>

#define GPT2_REGEX                                                                                 \
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"
#define WHITESPACE_REGEX "\\w+|[^\\w\\s]+"

/* {"String": "..."} or {"Regex": "..."} into a compiled pattern. */
static stof_status get_pattern(const tok_loader *L, const cJSON *obj, const char *what,
                               tok_pattern *out, const char **literal)
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

static stof_status get_behavior(const tok_loader *L, const cJSON *obj, tok_split_behavior dflt,
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
    return stof_error(STOF_ERR_FORMAT,
                      "%s: split behavior \"%.40s\" is not one of Removed, "
                      "Isolated, MergedWithPrevious, MergedWithNext, Contiguous",
                      L->file, b);
}

static stof_status get_replacement(const tok_loader *L, const cJSON *obj, char *dst, size_t *len)
{
    const char *r = "\xE2\x96\x81"; /* U+2581, SentencePiece's space */
    STOF_TRY(io_json_string(obj, "replacement", false, &r, L->file));
    if (!r) r = "\xE2\x96\x81";
    size_t n = strlen(r);
    STOF_REQUIRE(n >= 1 && n <= 4 && (size_t)tok_utf8_len((unsigned char)r[0]) == n &&
                     tok_load_utf8_ok(r, n),
                 STOF_ERR_FORMAT, "%s: Metaspace replacement must be one character", L->file);
    memcpy(dst, r, n);
    *len = n;
    return STOF_OK;
}

static stof_status get_prepend(const tok_loader *L, const cJSON *obj, tok_prepend *out)
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
    if (strcmp(s, "always") == 0)
        *out = TOK_PREPEND_ALWAYS;
    else if (strcmp(s, "first") == 0)
        *out = TOK_PREPEND_FIRST;
    else if (strcmp(s, "never") == 0)
        *out = TOK_PREPEND_NEVER;
    else
        return stof_error(STOF_ERR_FORMAT, "%s: prepend_scheme \"%.40s\"", L->file, s);
    return STOF_OK;
}

/* The head every component shares: c must be an object with a type; a Sequence is
 * flattened, each member read by load one level deeper (*done then says so). */
typedef stof_status (*component_loader)(tok_loader *L, const cJSON *c, int depth);

static stof_status component_head(tok_loader *L, const cJSON *c, const char *what,
                                  const char *members, int depth, component_loader load,
                                  const char **type, bool *done)
{
    *type = tok_load_type(c);
    *done = false;
    STOF_REQUIRE(cJSON_IsObject(c) && *type, STOF_ERR_FORMAT, "%s: %s without a type", L->file,
                 what);
    if (strcmp(*type, "Sequence") != 0) return STOF_OK;
    const cJSON *m = NULL;
    STOF_TRY(tok_load_members(L, c, members, depth, &m));
    for (const cJSON *e = m->child; e; e = e->next)
        STOF_TRY(load(L, e, depth + 1));
    *done = true;
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
static stof_status base64_decode(const tok_loader *L, const char *s, unsigned char **out, size_t *n)
{
    size_t len = strlen(s);
    while (len && s[len - 1] == '=')
        len--;
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
static stof_status load_precompiled(const tok_loader *L, const cJSON *c, tok_norm *n)
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
        st = stof_error(STOF_ERR_FORMAT,
                        "%s: precompiled_charsmap's trie size %u does not fit "
                        "its %zu bytes",
                        L->file, trie_bytes, len);
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
            n->trie[i] =
                (uint32_t)u[0] | (uint32_t)u[1] << 8 | (uint32_t)u[2] << 16 | (uint32_t)u[3] << 24;
        }
        memcpy(n->text, raw + 4 + trie_bytes, n->text_len);
        n->text[n->text_len] = '\0';
        if (!tok_load_utf8_ok(n->text, n->text_len))
            st = stof_error(STOF_ERR_FORMAT,
                            "%s: precompiled_charsmap's replacement strings are not valid UTF-8",
                            L->file);
    }
    free(raw);
    return st;
}

stof_status tok_load_normalizer(tok_loader *L, const cJSON *c, int depth)
{
    tok_pipe *p = L->p;
    const char *t;
    bool done;
    STOF_TRY(
        component_head(L, c, "a normalizer", "normalizers", depth, tok_load_normalizer, &t, &done));
    if (done) return STOF_OK;
    STOF_REQUIRE(p->n_norms < TOK_MAX_COMPONENTS, STOF_ERR_FORMAT, "%s: more than %d normalizers",
                 L->file, TOK_MAX_COMPONENTS);
    tok_norm *n = &p->norms[p->n_norms];
    memset(n, 0, sizeof *n);
    static const struct {
        const char *name;
        tok_norm_kind kind;
    } plain[] = {{"NFC", TOK_NORM_NFC},
                 {"NFD", TOK_NORM_NFD},
                 {"NFKC", TOK_NORM_NFKC},
                 {"NFKD", TOK_NORM_NFKD},
                 {"Lowercase", TOK_NORM_LOWERCASE},
                 {"StripAccents", TOK_NORM_STRIP_ACCENTS}};
    for (size_t i = 0; i < sizeof plain / sizeof plain[0]; i++)
        if (strcmp(t, plain[i].name) == 0) {
            n->kind = plain[i].kind;
            p->n_norms++;
            return STOF_OK;
        }
    if (strcmp(t, "Replace") == 0) {
        const char *content;
        n->kind = TOK_NORM_REPLACE;
        STOF_TRY(tok_load_string(L, c, "content", "Replace", &content));
        STOF_TRY(tok_load_dup(content, strlen(content), &n->text, &n->text_len));
        p->n_norms++; /* counted now so that tok_pipe_free releases it */
        return get_pattern(L, c, "Replace", &n->pat, NULL);
    }
    if (strcmp(t, "Prepend") == 0) {
        const char *pre;
        n->kind = TOK_NORM_PREPEND;
        STOF_TRY(tok_load_string(L, c, "prepend", "Prepend", &pre));
        p->n_norms++;
        return tok_load_dup(pre, strlen(pre), &n->text, &n->text_len);
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
    return stof_error(STOF_ERR_UNSUPPORTED, "%s: normalizer \"%.40s\" is not supported", L->file,
                      t);
}

/* ------------------------------------------------------------------ pre-tokenizers */

stof_status tok_load_pretokenizer(tok_loader *L, const cJSON *c, int depth)
{
    tok_pipe *p = L->p;
    const char *t;
    bool done;
    STOF_TRY(component_head(L, c, "a pre-tokenizer", "pretokenizers", depth, tok_load_pretokenizer,
                            &t, &done));
    if (done) return STOF_OK;
    STOF_REQUIRE(p->n_pres < TOK_MAX_COMPONENTS, STOF_ERR_FORMAT, "%s: more than %d pre-tokenizers",
                 L->file, TOK_MAX_COMPONENTS);
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
        return tok_regex_compile(WHITESPACE_REGEX, strlen(WHITESPACE_REGEX), false, L->file,
                                 &r->pat);
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

stof_status tok_load_decoder(tok_loader *L, const cJSON *c, int depth)
{
    tok_pipe *p = L->p;
    const char *t;
    bool done;
    STOF_TRY(component_head(L, c, "a decoder", "decoders", depth, tok_load_decoder, &t, &done));
    if (done) return STOF_OK;
    STOF_REQUIRE(p->n_decs < TOK_MAX_COMPONENTS, STOF_ERR_FORMAT, "%s: more than %d decoders",
                 L->file, TOK_MAX_COMPONENTS);
    tok_dec *d = &p->decs[p->n_decs];
    memset(d, 0, sizeof *d);
    if (strcmp(t, "ByteLevel") == 0 || strcmp(t, "ByteFallback") == 0 || strcmp(t, "Fuse") == 0) {
        d->kind = t[4] == 'L'   ? TOK_DEC_BYTE_LEVEL
                  : t[0] == 'B' ? TOK_DEC_BYTE_FALLBACK
                                : TOK_DEC_FUSE;
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
        STOF_TRY(tok_load_string(L, c, "content", "Replace decoder", &content));
        d->kind = TOK_DEC_REPLACE;
        p->n_decs++;
        STOF_REQUIRE(*lit, STOF_ERR_FORMAT, "%s: Replace decoder with an empty pattern", L->file);
        STOF_TRY(tok_load_dup(lit, strlen(lit), &d->from, &d->from_len));
        return tok_load_dup(content, strlen(content), &d->to, &d->to_len);
    }
    if (strcmp(t, "Strip") == 0) {
        const char *content;
        d->kind = TOK_DEC_STRIP;
        STOF_TRY(tok_load_string(L, c, "content", "Strip decoder", &content));
        STOF_REQUIRE(*content && (size_t)tok_utf8_len((unsigned char)content[0]) == strlen(content),
                     STOF_ERR_FORMAT, "%s: Strip decoder content must be one character", L->file);
        STOF_TRY(io_json_int(c, "start", 0, 1 << 20, &d->start, L->file));
        STOF_TRY(io_json_int(c, "stop", 0, 1 << 20, &d->stop, L->file));
        p->n_decs++;
        return tok_load_dup(content, strlen(content), &d->from, &d->from_len);
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
        return tok_load_dup(prefix, strlen(prefix), &d->from, &d->from_len);
    }
    if (strcmp(t, "BPEDecoder") == 0) {
        const char *suffix = "</w>";
        d->kind = TOK_DEC_BPE_SUFFIX;
        STOF_TRY(io_json_string(c, "suffix", false, &suffix, L->file));
        p->n_decs++;
        suffix = suffix ? suffix : "</w>";
        return tok_load_dup(suffix, strlen(suffix), &d->from, &d->from_len);
    }
    return stof_error(STOF_ERR_UNSUPPORTED, "%s: decoder \"%.40s\" is not supported", L->file, t);
}

/* ------------------------------------------------------------------ post-processor */

static stof_status tpl_special(tok_loader *L, const int32_t *ids, int n)
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

static stof_status tpl_sequence(tok_loader *L)
{
    tok_pipe *p = L->p;
    STOF_REQUIRE(p->n_tpl < TOK_MAX_TEMPLATE, STOF_ERR_FORMAT, "%s: template longer than %d",
                 L->file, TOK_MAX_TEMPLATE);
    p->tpl[p->n_tpl++] = (tok_tpl_item){.is_sequence = true};
    return STOF_OK;
}

/* ["[CLS]", 101] of BertProcessing / RobertaProcessing. */
static stof_status pair_id(tok_loader *L, const cJSON *c, const char *key, int32_t *id)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(c, key);
    const cJSON *num = cJSON_IsArray(v) ? cJSON_GetArrayItem(v, 1) : NULL;
    STOF_REQUIRE(cJSON_IsNumber(num) && num->valuedouble >= 0 && num->valuedouble < TOK_MAX_ENTRIES,
                 STOF_ERR_FORMAT, "%s: post_processor %s must be [token, id]", L->file, key);
    *id = (int32_t)num->valuedouble;
    return STOF_OK;
}

static stof_status template_special(tok_loader *L, const cJSON *specials, const char *name)
{
    const cJSON *sp = cJSON_GetObjectItemCaseSensitive(specials, name);
    const cJSON *ids = cJSON_GetObjectItemCaseSensitive(sp, "ids");
    STOF_REQUIRE(cJSON_IsArray(ids), STOF_ERR_FORMAT,
                 "%s: template token \"%.60s\" is not in special_tokens", L->file, name);
    int32_t v[8];
    int n = 0;
    for (const cJSON *e = ids->child; e; e = e->next) {
        STOF_REQUIRE(n < 8, STOF_ERR_UNSUPPORTED, "%s: \"%.60s\" has more than 8 ids", L->file,
                     name);
        STOF_REQUIRE(cJSON_IsNumber(e) && e->valuedouble >= 0 && e->valuedouble < TOK_MAX_ENTRIES,
                     STOF_ERR_FORMAT, "%s: \"%.60s\" has a bad id", L->file, name);
        v[n++] = (int32_t)e->valuedouble;
    }
    return tpl_special(L, v, n);
}

stof_status tok_load_post(tok_loader *L, const cJSON *c, int depth)
{
    const char *t = tok_load_type(c);
    STOF_REQUIRE(cJSON_IsObject(c) && t, STOF_ERR_FORMAT, "%s: a post_processor without a type",
                 L->file);
    if (strcmp(t, "ByteLevel") == 0) return STOF_OK; /* offsets only */
    if (strcmp(t, "Sequence") == 0) {
        const cJSON *m = NULL;
        STOF_TRY(tok_load_members(L, c, "processors", depth, &m));
        for (const cJSON *e = m->child; e; e = e->next)
            STOF_TRY(tok_load_post(L, e, depth + 1));
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
            STOF_TRY(tok_load_string(L, sp, "id", "SpecialToken", &name));
            STOF_TRY(template_special(L, specials, name));
        }
        return STOF_OK;
    }
    return stof_error(STOF_ERR_UNSUPPORTED, "%s: post_processor \"%.40s\" is not supported",
                      L->file, t);
}
