/*
 * tune.h — the tuner's persistent cache and its budget arithmetic.
 *
 * A tune_plan says, for one forward shape, which fusion path runs each layer
 * segment (cuBLASLt or a stof template with its tile config) and which
 * attention kernel runs for each of the model's (at most two) layer mask
 * kinds. Plans are remembered in a JSON file keyed by a
 * tune_key (GPU, library version, model dims, padded shape, token-count bucket
 * and mask signature) so that a search runs once per shape and machine.
 *
 * The file is shared by every process of a user: writers serialise on a
 * lock file and replace the cache atomically (write, fsync, rename), so a
 * reader never sees a half-written file and no writer loses another's entry.
 * Readers trust nothing in the file: whatever does not validate is skipped
 * with a warning.
 */
#ifndef STOF_TUNE_H
#define STOF_TUNE_H

#include "core/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 2: a pre-norm GLU's FFN1 at cuBLASLt's first algorithm runs gemm_sm90 on a
 * Hopper, and the templates' FFN1 writes the GLU's product: plans measured
 * before are not comparable. */
#define TUNE_FILE_FORMAT 2
/* Parameter-search measurements when stof_tune_params.budget is 0 (stof.h). */
#define TUNE_DEFAULT_BUDGET 32

typedef enum tune_segment {
    TUNE_SEG_QKV = 0,
    TUNE_SEG_OUT = 1,
    TUNE_SEG_FFN1 = 2,
    TUNE_SEG_FFN2 = 3,
    TUNE_NSEG = 4
} tune_segment;

/* "qkv", "out-proj", "ffn1", "ffn2"; "?" out of range. */
const char *tune_segment_name(tune_segment s);

typedef struct tune_seg {
    int path; /* 0: cuBLASLt path, 1: stof template */
    int algo; /* cuBLASLt: index into its heuristic list, 0 = the first */
    /* path 1: the template config (numbers of fuse_config in src/fuse/fuse.h) */
    int tpl, block_m, block_n, block_k, warps_m, warps_n, stages;
} tune_seg;

typedef struct tune_plan {
    tune_seg seg[TUNE_NSEG];
    /* 1: FFN1 and FFN2 run as one chain template whose config is seg[TUNE_SEG_FFN1] */
    int ffn_chain;
    int attn_kernel; /* stof_attn_kernel; 0 (AUTO): the selector */
    int attn_warps, attn_block_m;
    double default_ms, tuned_ms, tune_s; /* what the search measured */
    /* The same for the layers of the model's second mask kind (ModernBERT's
     * local layers, Qwen2's sliding ones beside full ones); attn_* is the
     * first kind's, layer 0's. Entries older than it read as AUTO. */
    int attn2_kernel, attn2_warps, attn2_block_m;
} tune_plan;

/* Every segment cuBLASLt algo 0, no chain, attention AUTO (both kinds), times 0. */
void tune_plan_default(tune_plan *p);

typedef struct tune_key {
    char gpu[96];                                   /* device name */
    int sm_count;                                   /* SM count */
    int cc;                                         /* compute capability major*10+minor */
    char version[24];                               /* library version string */
    int hidden, layers, heads, intermediate, dtype; /* model dims, run dtype (stof_dtype) */
    int batch, len;                                 /* padded shape B, L */
    int64_t token_bucket; /* tune_token_bucket(tokens); at most 2^53 (exact in JSON) */
    char mask[128];       /* mask signature (tune_mask_signature) */
    char family[16];      /* model family ("bert", "llama", ...); "" in entries older than it */
    char desc_hash[20];   /* desc_hash of the model description, 16 hex digits (or "") */
} tune_key;

/*
 * Upper edge of the bucket holding tokens. 1..8 are their own buckets; above,
 * each octave (2^k, 2^(k+1)] (k >= 3) splits into 8 equal steps of 2^(k-3),
 * so a bucket's edge is at most 12.5% above any count it holds. Monotone,
 * t <= bucket(t), bucket(bucket(t)) == bucket(t). tokens < 1 give 1; counts
 * whose edge would pass INT64_MAX give INT64_MAX.
 */
int64_t tune_token_bucket(int64_t tokens);

/*
 * Mask signature of a canonical mask text into out[cap]: the text itself when
 * it fits, else its longest fitting prefix + "#" + 16 hex digits of the 64-bit
 * FNV-1a hash of the whole text (only the hash digits that fit when cap < 18);
 * "full" for NULL or "".
 */
void tune_mask_signature(const char *canonical_text, char *out, size_t cap);

/* Field-by-field equality (strings compared up to their NUL). */
bool tune_key_equal(const tune_key *a, const tune_key *b);

/*
 * Cache path: override if non-NULL and non-empty, else $STOF_TUNE_CACHE, else
 * $XDG_CACHE_HOME/stof/tune.json (an absolute XDG_CACHE_HOME only, as the XDG
 * spec asks), else $HOME/.cache/stof/tune.json. INVALID_ARG when none can be
 * formed or it does not fit cap.
 */
stof_status tune_cache_path(const char *override_path, char *buf, size_t cap);

typedef struct tune_cache tune_cache; /* in-memory entries of one file */

/*
 * Loads path. A missing file gives an empty cache and OK. A file that cannot
 * be parsed, is truncated, has the wrong format number, or entries with
 * missing/invalid fields: a warning naming the path and the problem, those
 * entries (or the whole file) ignored, OK. Entries whose key.version differs
 * from `version` are stale: skipped (one warning with their count). Two
 * entries with equal keys: the later wins. Only real I/O errors on an
 * existing file (a directory or other non-regular file at that path,
 * permission, read errors) return STOF_ERR_IO.
 */
stof_status tune_cache_load(const char *path, const char *version, tune_cache **out);
void tune_cache_free(tune_cache *c);
int tune_cache_count(const tune_cache *c);
/* True and *out set (out may be NULL) when key has an entry. */
bool tune_cache_find(const tune_cache *c, const tune_key *key, tune_plan *out);

/*
 * Inserts or replaces key's entry in the FILE: takes an exclusive lock (flock
 * on path + ".lock", creating parent directories as needed, mode 0755 dirs /
 * 0644 files), re-reads the current file (same tolerance as load; entries
 * whose version != key->version dropped), replaces or appends the entry,
 * writes path.tmp.<pid> fully, fsyncs, renames over path, unlocks. Safe with
 * several processes writing at once. INVALID_ARG for a key or plan that would
 * not validate when read back (unterminated strings, negative numbers, path
 * not 0/1, ...); IO for file-system failures.
 */
stof_status tune_cache_store(const char *path, const tune_key *key, const tune_plan *plan);

/*
 * Stage 2 of the search: a sampling budget of `total` measurements over n
 * segments. First round: round(total * explore) (explore clamped to [0, 1])
 * split as evenly as possible, earlier segments taking the remainder.
 */
void tune_budget_first(int total, double explore, int n, int *out);

/*
 * Second round: `remaining` measurements moved toward the segments that gained
 * most: proportional to gain_ms[i] (<= 0 or NaN counts as 0) with
 * largest-remainder rounding (ties to the earlier segment); when no segment
 * gained, split evenly. A segment never gets more than cap[i] (its untried
 * candidates); the excess goes to the others by the same rule, and once only
 * segments without gain are left below their cap they share it evenly.
 * Sum of out == min(remaining, sum of cap). gain_ms NULL: no gains; cap NULL:
 * no caps.
 */
void tune_budget_second(int remaining, int n, const double *gain_ms, const int *cap, int *out);

#ifdef __cplusplus
}
#endif

#endif /* STOF_TUNE_H */
