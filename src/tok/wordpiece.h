/*
 * wordpiece.h — BERT WordPiece tokenizer, giving the ids Hugging Face's BertTokenizerFast
 * gives for uncased BERT models (all-MiniLM-L6-v2 and its kin).
 *
 * Pipeline, in Hugging Face's order:
 *   1. UTF-8 decoding. Invalid input is not an error: every maximal invalid subsequence
 *      becomes U+FFFD, exactly as Python's bytes.decode("utf-8", errors="replace"), and
 *      clean-up then removes U+FFFD, so "a\xffb" tokenizes as "ab".
 *   2. Special tokens written literally in the text ("[SEP]", "[MASK]", ...) are matched
 *      first (leftmost, longest) and become their ids untouched.
 *   3. Normalisation (BertNormalizer): clean-up (drop NUL, U+FFFD, control, format and
 *      private-use characters; whitespace -> ' '), spaces around CJK ideographs, accent
 *      stripping (NFD with canonical reordering, then drop non-spacing marks),
 *      lower-casing.
 *   4. Pre-tokenization (BertPreTokenizer): split at whitespace, every punctuation
 *      character (ASCII symbols and Unicode P*) is a word of its own.
 *   5. WordPiece: greedy longest-match-first with the "##" continuation prefix; a word
 *      with an unmatchable piece, or longer than max_input_chars_per_word (100)
 *      characters, is one [UNK].
 *   6. [CLS] tokens [SEP], truncated to max_len (the tokens are cut, [SEP] is kept).
 * The Unicode data matches the tokenizers library code point for code point (see
 * unicode_tables_gen.py), including where the library departs from current Unicode.
 *
 * A loaded tokenizer is immutable: encoding from several threads at once is safe.
 */
#ifndef STOF_TOK_WORDPIECE_H
#define STOF_TOK_WORDPIECE_H

#include "core/core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tok_wp tok_wp;

typedef struct tok_wp_info {
    int vocab_size;
    int32_t pad_id, unk_id, cls_id, sep_id;
    int32_t mask_id;       /* -1 when the vocabulary has no mask token */
    int model_max_length;  /* tokenizer_config.json, 512 when absent */
    int st_max_seq_length; /* sentence_bert_config.json max_seq_length, 0 when absent */
    int max_input_chars_per_word;
    bool clean_text, handle_chinese_chars, strip_accents, lowercase;
    bool vocab_from_tokenizer_json; /* vocab.txt was absent */
} tok_wp_info;

/*
 * Loads the tokenizer of a Hugging Face model folder. The vocabulary comes from vocab.txt
 * or, when that is absent, from tokenizer.json's model.vocab. Settings come from
 * tokenizer.json (normalizer, model, added_tokens), then from tokenizer_config.json
 * (special token names, model_max_length, and do_lower_case / strip_accents /
 * tokenize_chinese_chars, which replace the normalizer's switches with BertTokenizer's
 * defaults for absent keys, as transformers does); without either file, uncased BERT.
 * tokenizer.json's own truncation and padding sections are ignored, as transformers
 * ignores them.
 * Errors: STOF_ERR_IO (folder or files missing, unreadable), STOF_ERR_PARSE (bad JSON),
 * STOF_ERR_FORMAT (empty vocabulary, [UNK]/[CLS]/[SEP]/[PAD] missing, bad values),
 * STOF_ERR_UNSUPPORTED (a tokenizer.json that is not BERT WordPiece).
 */
stof_status tok_wp_load(const char *model_dir, tok_wp **out);
void tok_wp_destroy(tok_wp *tok);

const tok_wp_info *tok_wp_get_info(const tok_wp *tok);

/*
 * Token ids of text (len bytes, need not be NUL-terminated; NUL bytes are dropped by
 * clean-up): [CLS] ... [SEP], at most max_len ids (max_len <= 0: model_max_length;
 * max_len must leave room for [CLS] and [SEP]). Writes *n ids to ids[0..cap);
 * STOF_ERR_INVALID_ARG when cap is smaller than *n (and *n still says how many).
 */
stof_status tok_wp_encode(const tok_wp *tok, const char *text, size_t len,
                                  int max_len, int32_t *ids, int cap, int *n);

/* Number of ids text gives without truncation, [CLS] and [SEP] included: lets a caller
 * reject text over the model's positions instead of truncating it. */
stof_status tok_wp_count(const tok_wp *tok, const char *text, size_t len,
                                 int64_t *n);

/* A padded batch, row-major, allocated by tok_wp_encode_batch. */
typedef struct tok_wp_batch {
    int batch;               /* sequences */
    int seq_len;             /* L: the longest sequence of the batch, after truncation */
    int32_t *ids;            /* [batch, L]; [PAD] after each sequence's end */
    int32_t *attention_mask; /* [batch, L]; 1 on tokens, 0 on padding */
    int32_t *lengths;        /* [batch]; tokens per sequence, [CLS] and [SEP] included */
} tok_wp_batch;

/* Encodes texts[0..batch) (lens NULL: NUL-terminated texts) as encode does and pads them
 * to the longest. *out is overwritten; free it with tok_wp_batch_free. */
stof_status tok_wp_encode_batch(const tok_wp *tok, const char *const *texts,
                                        const size_t *lens, int batch, int max_len,
                                        tok_wp_batch *out);
void tok_wp_batch_free(tok_wp_batch *b);

/* The vocabulary entry of id (NUL-terminated), or NULL when id is out of range. */
const char *tok_wp_id_to_token(const tok_wp *tok, int32_t id);
/* The id of a vocabulary entry, or -1. */
int32_t tok_wp_token_to_id(const tok_wp *tok, const char *token);

#ifdef __cplusplus
}
#endif

#endif /* STOF_TOK_WORDPIECE_H */
