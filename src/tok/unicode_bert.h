/*
 * unicode_bert.h — the per-code-point Unicode properties BERT's normalisation needs:
 * clean-up classes, CJK ideographs, non-spacing marks, pre-tokenizer whitespace and
 * punctuation, canonical combining classes, canonical decomposition and lower-casing.
 * The data (unicode_tables.h) is generated to match Hugging Face's tokenizers library
 * code point for code point, which is not quite any one Unicode version: see
 * unicode_tables_gen.py.
 */
#ifndef STOF_UNICODE_BERT_H
#define STOF_UNICODE_BERT_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum {
    STOF_UNI_DROP = 1,   /* removed by clean-up: NUL, U+FFFD, controls, format, private use */
    STOF_UNI_SPACE = 2,  /* turned into ' ' by clean-up */
    STOF_UNI_CJK = 4,    /* CJK ideograph: gets spaces around it */
    STOF_UNI_MN = 8,     /* non-spacing mark: removed when accents are stripped */
    STOF_UNI_WS = 16,    /* the pre-tokenizer splits here and drops the character */
    STOF_UNI_PUNCT = 32, /* the pre-tokenizer makes the character a word of its own */
};

/* A full canonical decomposition is at most this long. */
#define STOF_UNI_MAX_DECOMP 4

/* STOF_UNI_* flags of cp (0 beyond U+10FFFF). */
unsigned stof_uni_flags(uint32_t cp);
/* Canonical combining class (0 for starters). */
unsigned stof_uni_ccc(uint32_t cp);
/* Full canonical decomposition of cp into out; returns its length (1, cp itself, when
 * cp does not decompose). */
int stof_uni_decompose(uint32_t cp, uint32_t out[STOF_UNI_MAX_DECOMP]);
/* Lower-case mapping of cp into out; returns its length (1 or 2). */
int stof_uni_lower(uint32_t cp, uint32_t out[2]);

#ifdef __cplusplus
}
#endif

#endif /* STOF_UNICODE_BERT_H */
