/*
 * tok.h — the tokenizer.json pipeline, as Hugging Face's tokenizers library defines it:
 *
 *   text -> added tokens split out -> normalizers -> pre-tokenizers -> model (BPE or
 *   Unigram) -> truncation -> post-processor (special tokens) -> ids
 *   ids -> tokens -> decoders -> text
 *
 * Components are read once (load.c) into flat arrays: a Sequence of normalizers,
 * pre-tokenizers or decoders is the same as its members applied in order, so nesting
 * is flattened away. Encoding state lives in a tok_work (one per thread), which keeps
 * the loaded tokenizer immutable and shareable. BERT's WordPiece keeps its own
 * streaming implementation (wordpiece.h); struct stof_tokenizer holds one or the other.
 */
#ifndef STOF_TOK_TOK_H
#define STOF_TOK_TOK_H

#include "core/core.h"
#include "tok/wordpiece.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <pthread.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bounds that turn a hostile tokenizer.json into STOF_ERR_FORMAT before it costs much. */
#define TOK_MAX_COMPONENTS 64     /* normalizers, pre-tokenizers or decoders, flattened */
#define TOK_MAX_NESTING 8         /* Sequence inside Sequence */
#define TOK_MAX_TOKEN_BYTES 4096  /* one vocabulary entry */
#define TOK_MAX_ENTRIES (1 << 24) /* vocabulary entries or merges */
#define TOK_MAX_ADDED_TOKENS 65536
#define TOK_MAX_TEMPLATE 64 /* pieces of a post-processor template */
#define TOK_REGEX_MATCH_LIMIT 10000000u
#define TOK_POOL 16 /* idle work spaces a tokenizer keeps */

/* ------------------------------------------------------------------ small containers */

typedef struct tok_buf { /* bytes */
    char *p;
    size_t n, cap;
} tok_buf;

typedef struct tok_ids {
    int32_t *p;
    size_t n, cap;
} tok_ids;

stof_status tok_buf_put(tok_buf *b, const void *s, size_t n);
stof_status tok_ids_put(tok_ids *v, int32_t id);

/* String -> id, built once. Entries are copied into one arena. */
typedef struct tok_vocab {
    char *arena;
    size_t *off;    /* [n] */
    uint32_t *len;  /* [n] */
    int32_t *slots; /* open addressing, -1 empty */
    size_t mask;    /* slots - 1 */
    int32_t n;      /* ids 0..n-1; holes (ids never given) have len 0 and are not found */
    bool *present;  /* [n] */
} tok_vocab;

/* Entry i maps strs[i] (lens[i] bytes) to ids[i] (ids NULL: i). A string given twice
 * maps to its last id, as the library's maps do; an id given twice keeps its first
 * string for decoding. */
stof_status tok_vocab_build(tok_vocab *v, int32_t n, const char *const *strs, const size_t *lens,
                            const int32_t *ids, const char *file);
int32_t tok_vocab_find(const tok_vocab *v, const char *s, size_t len);
void tok_vocab_free(tok_vocab *v);
static inline const char *tok_vocab_str(const tok_vocab *v, int32_t id, size_t *len)
{
    if (id < 0 || id >= v->n || !v->present[id]) return NULL;
    *len = v->len[id];
    return v->arena + v->off[id];
}

/* (left id, right id) -> (rank, merged id). */
typedef struct tok_merge {
    uint64_t key; /* left << 32 | right; UINT64_MAX: empty */
    int32_t rank, id;
} tok_merge;
typedef struct tok_merges {
    tok_merge *slots;
    size_t mask;
    size_t n;
} tok_merges;
stof_status tok_merges_init(tok_merges *m, size_t n);
void tok_merges_add(tok_merges *m, int32_t a, int32_t b, int32_t rank, int32_t id);
const tok_merge *tok_merges_find(const tok_merges *m, int32_t a, int32_t b);

/* ------------------------------------------------------------------ components */

typedef enum tok_norm_kind {
    TOK_NORM_NFC,
    TOK_NORM_NFD,
    TOK_NORM_NFKC,
    TOK_NORM_NFKD,
    TOK_NORM_LOWERCASE,
    TOK_NORM_STRIP_ACCENTS,
    TOK_NORM_REPLACE,
    TOK_NORM_PREPEND,
    TOK_NORM_STRIP,
    TOK_NORM_PRECOMPILED,
} tok_norm_kind;

/* A String or Regex pattern of Replace / Split. */
typedef struct tok_pattern {
    pcre2_code *re; /* both kinds compile (a String with PCRE2_LITERAL) */
} tok_pattern;

typedef struct tok_norm {
    tok_norm_kind kind;
    tok_pattern pat; /* Replace */
    char *text;      /* Replace content, Prepend prefix, Precompiled's replacements */
    size_t text_len;
    bool left, right; /* Strip */
    uint32_t *trie;   /* Precompiled: SentencePiece's double-array trie (darts-clone) */
    size_t trie_n;
} tok_norm;

typedef enum tok_split_behavior {
    TOK_SPLIT_REMOVED,
    TOK_SPLIT_ISOLATED,
    TOK_SPLIT_MERGED_PREV,
    TOK_SPLIT_MERGED_NEXT,
    TOK_SPLIT_CONTIGUOUS,
} tok_split_behavior;

typedef enum tok_pre_kind {
    TOK_PRE_BYTE_LEVEL,
    TOK_PRE_SPLIT,
    TOK_PRE_METASPACE,
    TOK_PRE_WHITESPACE,
    TOK_PRE_WHITESPACE_SPLIT,
    TOK_PRE_DIGITS,
    TOK_PRE_PUNCTUATION,
    TOK_PRE_BERT,
} tok_pre_kind;

typedef enum tok_prepend { TOK_PREPEND_ALWAYS, TOK_PREPEND_FIRST, TOK_PREPEND_NEVER } tok_prepend;

typedef struct tok_pre {
    tok_pre_kind kind;
    tok_pattern pat;             /* Split; ByteLevel's and Whitespace's built-in regex */
    tok_split_behavior behavior; /* Split, Punctuation, Digits */
    bool invert;                 /* Split */
    bool add_prefix_space;       /* ByteLevel */
    bool use_regex;              /* ByteLevel */
    char replacement[8];         /* Metaspace, UTF-8 */
    size_t replacement_len;
    tok_prepend prepend; /* Metaspace */
    bool split;          /* Metaspace */
} tok_pre;

typedef enum tok_dec_kind {
    TOK_DEC_BYTE_LEVEL,
    TOK_DEC_METASPACE,
    TOK_DEC_REPLACE,
    TOK_DEC_BYTE_FALLBACK,
    TOK_DEC_FUSE,
    TOK_DEC_STRIP,
    TOK_DEC_WORDPIECE,
    TOK_DEC_BPE_SUFFIX,
} tok_dec_kind;

typedef struct tok_dec {
    tok_dec_kind kind;
    char *from, *to; /* Replace (a String pattern); WordPiece prefix; BPE suffix in from */
    size_t from_len, to_len;
    char replacement[8]; /* Metaspace */
    size_t replacement_len;
    tok_prepend prepend;
    int start, stop; /* Strip: characters equal to from[0..from_len) */
    bool cleanup;    /* WordPiece */
} tok_dec;

typedef struct tok_added {
    char *content; /* what decoding gives */
    size_t len;
    char *match; /* what encoding looks for: content, normalized when the token is */
    size_t match_len;
    int32_t id;
    bool special, lstrip, rstrip, single_word, normalized;
} tok_added;

/* One piece of a post-processor template: a special token's ids, or the sequence. */
typedef struct tok_tpl_item {
    bool is_sequence;
    int32_t ids[8];
    int n_ids;
} tok_tpl_item;

typedef enum tok_model_kind { TOK_MODEL_BPE, TOK_MODEL_UNIGRAM } tok_model_kind;

typedef struct tok_pipe {
    tok_model_kind model;
    tok_vocab vocab;
    /* BPE */
    tok_merges merges;
    char *cont_prefix, *eow_suffix; /* continuing_subword_prefix, end_of_word_suffix */
    size_t cont_prefix_len, eow_suffix_len;
    bool fuse_unk, byte_fallback, ignore_merges;
    int32_t byte_ids[256]; /* "<0xXX>" ids, -1 when absent */
    /* Unigram */
    double *scores;
    double unk_score;
    int max_piece_bytes;
    int32_t unk_id; /* -1: none */

    tok_norm norms[TOK_MAX_COMPONENTS];
    int n_norms;
    tok_pre pres[TOK_MAX_COMPONENTS];
    int n_pres;
    tok_dec decs[TOK_MAX_COMPONENTS];
    int n_decs;
    bool has_decoder;
    tok_added *added;
    int n_added;
    bool added_any_normalized;
    int32_t *added_order;     /* added indices by first byte, longest first */
    int32_t added_first[257]; /* added_order[added_first[b] .. added_first[b+1]) */
    int32_t *added_of_id;     /* [n_ids]: index into added, or -1 */
    int32_t n_ids;            /* one past the largest id, model or added */
    tok_tpl_item tpl[TOK_MAX_TEMPLATE];
    int n_tpl;
    int n_special_added; /* ids the template adds */
} tok_pipe;

/* ------------------------------------------------------------------ the tokenizer */

typedef struct tok_work tok_work;

typedef enum tok_kind { TOK_KIND_WORDPIECE, TOK_KIND_BPE, TOK_KIND_UNIGRAM } tok_kind;

struct stof_tokenizer {
    tok_kind kind;
    tok_wp *wp;     /* TOK_KIND_WORDPIECE */
    tok_pipe *pipe; /* the others */
    int vocab_size;
    int model_max_length;                   /* tokenizer_config.json; 0 when absent or unbounded */
    int st_max_seq_length;                  /* sentence_bert_config.json; 0 when absent */
    int32_t pad_id, bos_id, eos_id, unk_id; /* -1 when absent */
    bool pad_left, truncate_left;           /* padding_side / truncation_side "left" */
    /* Work spaces of finished calls, reused by the next ones (their buffers and BPE
     * cache stay warm); the only mutable state, behind its lock. */
    pthread_mutex_t pool_lock;
    tok_work *pool[TOK_POOL];
    int n_pool;
};

/* A piece of text: [start, end) in a buffer. */
typedef struct tok_span {
    size_t start, end;
} tok_span;

typedef struct tok_spans {
    tok_span *p;
    size_t n, cap;
} tok_spans;
stof_status tok_spans_put(tok_spans *v, size_t start, size_t end);

typedef struct tok_split { /* a piece of a pre-token and whether the pattern matched it */
    size_t start, end;
    bool match;
} tok_split;

typedef struct tok_bpe_sym { /* a symbol of the word being merged: a doubly linked list */
    int32_t id;
    int32_t prev, next;
    uint32_t len; /* bytes; 0 once merged away */
} tok_bpe_sym;

typedef struct tok_bpe_cand { /* a merge waiting in the heap */
    int32_t rank, pos, id;
} tok_bpe_cand;

typedef struct tok_cache tok_cache; /* word -> ids, per thread (bpe.c) */

/* Per-thread encoding state (buffers reused from call to call). */
struct tok_work {
    tok_buf text, norm, tmp, words; /* sanitized input, normalized, scratch, pre-tokens */
    tok_buf meta;                   /* Metaspace's and the normalizers' scratch */
    tok_spans segs, pieces, next, matches;
    tok_ids word_ids, content; /* Unigram's path; the model's ids before the template */
    tok_split *splits;
    size_t splits_n, splits_cap;
    pcre2_match_data *md;
    pcre2_match_context *mctx;
    pcre2_jit_stack *jit;
    tok_bpe_sym *syms;
    tok_bpe_cand *heap;
    size_t syms_cap, heap_cap;
    double *best; /* Unigram: best score ending at each byte */
    int32_t *best_id, *best_start;
    size_t best_cap;
    tok_cache *cache;
};
stof_status tok_work_new(const tok_pipe *p, tok_work **out);
void tok_work_free(tok_work *w);

/* Reads tokenizer.json's parsed root (file names messages) into p. */
stof_status tok_pipe_load(tok_pipe *p, const void *root, const char *file);
void tok_pipe_free(tok_pipe *p);

/* Ids of text (len bytes; invalid UTF-8 reads as U+FFFD, as Python's
 * decode(errors="replace")), appended to out. add_special: the post-processor's
 * template; max_len > 0 truncates (the template's tokens kept), left or right. */
stof_status tok_pipe_encode(const tok_pipe *p, tok_work *w, const char *text, size_t len,
                            bool add_special, int max_len, bool truncate_left, tok_ids *out);

/* Text of ids[0..n) into out (replacing its content). skip_special drops special added
 * tokens; stream holds back an incomplete UTF-8 sequence at the end (*held gets its
 * byte count) instead of writing U+FFFD for it. */
stof_status tok_pipe_decode(const tok_pipe *p, const int32_t *ids, size_t n, bool skip_special,
                            bool stream, tok_buf *out, size_t *held);

/* Components, one file each. */
stof_status tok_normalize(const tok_pipe *p, tok_work *w, const char *s, size_t n, tok_buf *out);
/* Pre-tokenizes s into w->words (the pre-tokens' bytes) and w->pieces (their spans in
 * w->words); first: s starts the text (Metaspace's "first"). */
stof_status tok_pretokenize(const tok_pipe *p, tok_work *w, const char *s, size_t n, bool first);
stof_status tok_bpe_word(const tok_pipe *p, tok_work *w, const char *s, size_t n, tok_ids *out);
stof_status tok_unigram_word(const tok_pipe *p, tok_work *w, const char *s, size_t n, tok_ids *out);

stof_status tok_regex_compile(const char *pattern, size_t len, bool literal, const char *file,
                              tok_pattern *out);
/* All non-overlapping matches of pat in s, left to right, into out (cleared first). */
stof_status tok_regex_find_all(tok_work *w, const tok_pattern *pat, const char *s, size_t n,
                               tok_spans *out);

/* The byte GPT-2's byte-level alphabet maps to character cp, or -1. */
int tok_byte_of_char(uint32_t cp);

/* Runs decoders decs[0..n_decs) over the tokens (spans into toks) and writes the text
 * into out as tok_pipe_decode does; without decoders the tokens are joined by spaces. */
stof_status tok_decode_tokens(const tok_dec *decs, int n_decs, bool has_decoder, tok_buf *toks,
                              tok_spans *spans, bool stream, tok_buf *out, size_t *held);

/* UTF-8 helpers. */
/* Length of the UTF-8 sequence starting with byte c (1 for a continuation byte). */
static inline int tok_utf8_len(unsigned char c)
{
    return c < 0x80 ? 1 : c < 0xC0 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
}
/* The same for the character at s[at] of an n-byte string, cut at its end: the
 * segmenters step by it, so that text a hostile normalizer left invalid (a
 * charsmap or Replace content is raw bytes from tokenizer.json) is never read
 * or indexed past its end. at < n. */
static inline size_t tok_utf8_len_in(const char *s, size_t at, size_t n)
{
    size_t k = (size_t)tok_utf8_len((unsigned char)s[at]);
    return k < n - at ? k : n - at;
}
/* Writes s (n bytes) to out with every maximal invalid subsequence replaced by U+FFFD,
 * as Python's decode(errors="replace") and Rust's from_utf8_lossy do. When keep_tail,
 * an incomplete sequence at the very end is left out and *tail gets its length. */
stof_status tok_utf8_sanitize(const char *s, size_t n, bool keep_tail, tok_buf *out, size_t *tail);
size_t tok_utf8_put(char *dst, uint32_t cp);
/* Rust's char::is_whitespace (the White_Space property), which the library splits on. */
bool tok_is_whitespace(uint32_t cp);
uint32_t tok_utf8_get(const char *s, size_t *pos); /* s valid UTF-8 */

#ifdef __cplusplus
}
#endif

#endif /* STOF_TOK_TOK_H */
