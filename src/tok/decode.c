/*
 * decode.c — ids to text: the ids' tokens (added tokens by their content, special ones
 * dropped on request) run through the decoders, each turning a list of tokens into a
 * new list, as the library's decode_chain does. Decoders work on bytes; the final text
 * is made valid UTF-8 only at the end (invalid sequences become U+FFFD, as Rust's
 * from_utf8_lossy does), so that in streaming mode an incomplete character at the end
 * can be held back for the next call instead of being replaced.
 */
#include "tok/tok.h"

#include <stdlib.h>
#include <string.h>

typedef struct toklist {
    tok_buf *b;
    tok_spans *s;
} toklist;

static stof_status push(toklist *l, const char *s, size_t n)
{
    size_t at = l->b->n;
    STOF_TRY(tok_buf_put(l->b, s, n));
    return tok_spans_put(l->s, at, l->b->n);
}

/* Appends s to the last token of l. */
static stof_status extend(toklist *l, const char *s, size_t n)
{
    STOF_TRY(tok_buf_put(l->b, s, n));
    l->s->p[l->s->n - 1].end = l->b->n;
    return STOF_OK;
}

static stof_status put_replaced(tok_buf *b, const char *s, size_t n, const char *from,
                                size_t from_len, const char *to, size_t to_len)
{
    size_t run = 0;
    for (size_t i = 0; i + from_len <= n;) {
        if (memcmp(s + i, from, from_len) == 0) {
            STOF_TRY(tok_buf_put(b, s + run, i - run));
            STOF_TRY(tok_buf_put(b, to, to_len));
            i += from_len;
            run = i;
        } else {
            i++;
        }
    }
    return tok_buf_put(b, s + run, n - run);
}

static bool byte_token(const char *s, size_t n, unsigned char *out)
{
    if (n != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>') return false;
    int v = 0;
    for (int i = 3; i < 5; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                       : -1;
        if (d < 0) return false;
        v = v * 16 + d;
    }
    *out = (unsigned char)v;
    return true;
}

/* Byte tokens gathered so far become their text, or one U+FFFD per byte when they are
 * not valid UTF-8 (the library's ByteFallback). At the end of a streamed decode, bytes
 * that are only cut short stay bytes, for the final step to hold back. */
static stof_status flush_bytes(toklist *out, tok_buf *bytes, bool stream_end)
{
    if (!bytes->n) return STOF_OK;
    tok_buf check = {0};
    size_t tail = 0;
    stof_status st = tok_utf8_sanitize(bytes->p, bytes->n, stream_end, &check, &tail);
    bool valid = st == STOF_OK && check.n + tail == bytes->n &&
                 (check.n == 0 || memcmp(check.p, bytes->p, check.n) == 0);
    free(check.p);
    STOF_TRY(st);
    if (valid) {
        STOF_TRY(push(out, bytes->p, bytes->n));
    } else {
        for (size_t i = 0; i < bytes->n; i++)
            STOF_TRY(push(out, "\xEF\xBF\xBD", 3));
    }
    bytes->n = 0;
    return STOF_OK;
}

static stof_status wordpiece_cleanup(tok_buf *b, const char *s, size_t n)
{
    static const char *const pairs[][2] = {{" .", "."},     {" ?", "?"},           {" !", "!"},
                                           {" ,", ","},     {" ' ", "'"},          {" n't", "n't"},
                                           {" 'm", "'m"},   {" do not", " don't"}, {" 's", "'s"},
                                           {" 've", "'ve"}, {" 're", "'re"}};
    tok_buf cur = {0}, next = {0};
    stof_status st = tok_buf_put(&cur, s, n);
    for (size_t k = 0; st == STOF_OK && k < sizeof pairs / sizeof pairs[0]; k++) {
        next.n = 0;
        st = put_replaced(&next, cur.p, cur.n, pairs[k][0], strlen(pairs[k][0]), pairs[k][1],
                          strlen(pairs[k][1]));
        tok_buf t = cur;
        cur = next;
        next = t;
    }
    if (st == STOF_OK) st = tok_buf_put(b, cur.p, cur.n);
    free(cur.p);
    free(next.p);
    return st;
}

static stof_status dec_one(const tok_dec *d, const toklist *in, toklist *out, bool stream)
{
    size_t count = in->s->n;
    tok_buf bytes = {0};
    stof_status st = STOF_OK;
    if (d->kind == TOK_DEC_BYTE_LEVEL || d->kind == TOK_DEC_FUSE) st = push(out, "", 0);
    for (size_t i = 0; st == STOF_OK && i < count; i++) {
        const char *s = in->b->p + in->s->p[i].start;
        size_t n = in->s->p[i].end - in->s->p[i].start;
        switch (d->kind) {
        case TOK_DEC_BYTE_LEVEL: {
            size_t pos = 0, at = out->b->n;
            bool all = true;
            while (all && pos < n) {
                int b = tok_byte_of_char(tok_utf8_get(s, &pos));
                if (b < 0)
                    all = false;
                else {
                    char c = (char)b;
                    st = extend(out, &c, 1);
                }
            }
            if (!all) { /* a token outside the byte alphabet stays as it is */
                out->b->n = at;
                st = extend(out, s, n);
            }
            break;
        }
        case TOK_DEC_FUSE: st = extend(out, s, n); break;
        case TOK_DEC_METASPACE: {
            bool drop = i == 0 && d->prepend != TOK_PREPEND_NEVER;
            st = push(out, "", 0);
            if (st == STOF_OK)
                st = put_replaced(out->b, s, n, d->replacement, d->replacement_len, " ",
                                  drop ? 0 : 1);
            out->s->p[out->s->n - 1].end = out->b->n;
            break;
        }
        case TOK_DEC_REPLACE:
            st = push(out, "", 0);
            if (st == STOF_OK)
                st = put_replaced(out->b, s, n, d->from, d->from_len, d->to, d->to_len);
            out->s->p[out->s->n - 1].end = out->b->n;
            break;
        case TOK_DEC_BYTE_FALLBACK: {
            unsigned char b;
            if (byte_token(s, n, &b)) {
                st = tok_buf_put(&bytes, &b, 1);
            } else {
                st = flush_bytes(out, &bytes, false);
                if (st == STOF_OK) st = push(out, s, n);
            }
            break;
        }
        case TOK_DEC_STRIP: {
            size_t a = 0, z = n, c = d->from_len;
            for (int k = 0; k < d->start && a + c <= z && memcmp(s + a, d->from, c) == 0; k++)
                a += c;
            for (int k = 0; k < d->stop && z >= a + c && memcmp(s + z - c, d->from, c) == 0; k++)
                z -= c;
            st = push(out, s + a, z - a);
            break;
        }
        case TOK_DEC_WORDPIECE: {
            st = push(out, "", 0);
            tok_buf piece = {0};
            if (n >= d->from_len && memcmp(s, d->from, d->from_len) == 0) {
                st = tok_buf_put(&piece, s + d->from_len, n - d->from_len);
            } else {
                if (i > 0) st = tok_buf_put(&piece, " ", 1);
                if (st == STOF_OK) st = tok_buf_put(&piece, s, n);
            }
            if (st == STOF_OK)
                st = d->cleanup ? wordpiece_cleanup(out->b, piece.p, piece.n)
                                : tok_buf_put(out->b, piece.p, piece.n);
            free(piece.p);
            out->s->p[out->s->n - 1].end = out->b->n;
            break;
        }
        case TOK_DEC_BPE_SUFFIX:
            st = push(out, "", 0);
            if (st == STOF_OK)
                st = put_replaced(out->b, s, n, d->from, d->from_len, " ", i + 1 == count ? 0 : 1);
            out->s->p[out->s->n - 1].end = out->b->n;
            break;
        }
    }
    if (st == STOF_OK && d->kind == TOK_DEC_BYTE_FALLBACK) st = flush_bytes(out, &bytes, stream);
    free(bytes.p);
    return st;
}

stof_status tok_decode_tokens(const tok_dec *decs, int n_decs, bool has_decoder, tok_buf *toks,
                              tok_spans *spans, bool stream, tok_buf *out, size_t *held)
{
    tok_buf b2 = {0};
    tok_spans s2 = {0};
    toklist cur = {toks, spans}, nxt = {&b2, &s2};
    stof_status st = STOF_OK;
    for (int k = 0; st == STOF_OK && k < n_decs; k++) {
        nxt.b->n = 0;
        nxt.s->n = 0;
        st = dec_one(&decs[k], &cur, &nxt, stream);
        toklist t = cur;
        cur = nxt;
        nxt = t;
    }
    tok_buf joined = {0};
    for (size_t i = 0; st == STOF_OK && i < cur.s->n; i++) {
        if (!has_decoder && i > 0) st = tok_buf_put(&joined, " ", 1);
        if (st == STOF_OK)
            st = tok_buf_put(&joined, cur.b->p + cur.s->p[i].start,
                             cur.s->p[i].end - cur.s->p[i].start);
    }
    out->n = 0;
    if (st == STOF_OK) st = tok_utf8_sanitize(joined.p, joined.n, stream, out, held);
    if (st == STOF_OK) st = tok_buf_put(out, "", 0); /* NUL-terminated even when empty */
    free(joined.p);
    free(b2.p);
    free(s2.p);
    return st;
}

stof_status tok_pipe_decode(const tok_pipe *p, const int32_t *ids, size_t n, bool skip_special,
                            bool stream, tok_buf *out, size_t *held)
{
    tok_buf toks = {0};
    tok_spans spans = {0};
    stof_status st = STOF_OK;
    if (held) *held = 0;
    for (size_t i = 0; st == STOF_OK && i < n; i++) {
        int32_t id = ids[i];
        if (id < 0 || id >= p->n_ids) continue; /* as the library: unknown ids give nothing */
        int32_t a = p->added_of_id[id];
        const char *s;
        size_t len = 0;
        if (a >= 0) {
            /* The library names a normalized added token by its normalized form, and
             * tells special tokens by name: one whose name normalization changed is not
             * recognised as special, and stays. */
            const tok_added *t = &p->added[a];
            bool renamed = t->match_len != t->len || memcmp(t->match, t->content, t->len) != 0;
            if (skip_special && t->special && !renamed) continue;
            s = t->match;
            len = t->match_len;
        } else if (!(s = tok_vocab_str(&p->vocab, id, &len))) {
            continue;
        }
        size_t at = toks.n;
        st = tok_buf_put(&toks, s, len);
        if (st == STOF_OK) st = tok_spans_put(&spans, at, toks.n);
    }
    if (st == STOF_OK)
        st =
            tok_decode_tokens(p->decs, p->n_decs, p->has_decoder, &toks, &spans, stream, out, held);
    free(toks.p);
    free(spans.p);
    return st;
}
