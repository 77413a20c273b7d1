/*
 * cache.c — the tuner's persistent cache: keys (token buckets, mask
 * signatures), where the file lives, reading it without trusting a byte, and
 * storing an entry so that concurrent writers never lose each other's work.
 *
 * Writers serialise on flock(path.lock) and re-read the file under the lock
 * before they replace it with write + fsync + rename; readers take no lock,
 * since rename makes every version of the file complete. Nothing in the file
 * is trusted: each field is checked for type and range and anything that
 * fails is skipped with a warning, so a damaged cache costs a re-tune, never
 * a crash.
 */
#include "tune/tune.h"

#include <cjson/cJSON.h>

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#define TUNE_FILE_MAX ((size_t)64 << 20)      /* a larger file is not a cache we wrote */
#define TUNE_MAX_EXACT_INT ((int64_t)1 << 53) /* largest integer a JSON double holds exactly */
#define TUNE_WARN_ENTRIES 5                   /* invalid entries named one by one */

typedef struct tune_entry {
    tune_key key;
    tune_plan plan;
} tune_entry;

/* Entries in file order, indexed by an open-addressing table of key hashes. */
struct tune_cache {
    tune_entry *entries;
    int count, capacity;
    int *slots; /* entry index + 1, 0 = empty; nslots a power of two > 2 * capacity */
    size_t nslots;
};

static const char *const seg_names[TUNE_NSEG] = {"qkv", "out-proj", "ffn1", "ffn2"};

const char *tune_segment_name(tune_segment s)
{
    return (int)s >= 0 && (int)s < TUNE_NSEG ? seg_names[s] : "?";
}

void tune_plan_default(tune_plan *p)
{
    if (!p) return;
    memset(p, 0, sizeof *p);
    p->attn_kernel = p->attn2_kernel = STOF_ATTN_AUTO;
}

/* ------------------------------------------------------------------ keys */

int64_t tune_token_bucket(int64_t tokens)
{
    if (tokens <= 8) return tokens < 1 ? 1 : tokens;
    int k = 63;
    while (k > 0 && !(((uint64_t)(tokens - 1) >> k) & 1u))
        k--;
    /* tokens lies in (2^k, 2^(k+1)], k >= 3; eight steps of 2^(k-3) per octave */
    uint64_t step = (uint64_t)1 << (k - 3);
    uint64_t edge = ((uint64_t)tokens + step - 1) / step * step;
    return edge > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)edge;
}

static uint64_t fnv1a64(const char *s)
{
    return stof_fnv1a(STOF_FNV_BASIS, s, strlen(s));
}

void tune_mask_signature(const char *canonical_text, char *out, size_t cap)
{
    if (!out || cap == 0) return;
    const char *text = canonical_text && canonical_text[0] ? canonical_text : "full";
    size_t len = strlen(text);
    if (len < cap) {
        memcpy(out, text, len + 1);
        return;
    }
    char hash[17];
    snprintf(hash, sizeof hash, "%016llx", (unsigned long long)fnv1a64(text));
    if (cap < 18) {
        snprintf(out, cap, "%s", hash);
        return;
    }
    size_t prefix = cap - 18;
    /* never cut a UTF-8 sequence in two */
    while (prefix > 0 && ((unsigned char)text[prefix] & 0xc0) == 0x80)
        prefix--;
    memcpy(out, text, prefix);
    snprintf(out + prefix, cap - prefix, "#%s", hash);
}

bool tune_key_equal(const tune_key *a, const tune_key *b)
{
    if (!a || !b) return a == b;
    return strncmp(a->gpu, b->gpu, sizeof a->gpu) == 0 && a->sm_count == b->sm_count &&
           a->cc == b->cc && strncmp(a->version, b->version, sizeof a->version) == 0 &&
           a->hidden == b->hidden && a->layers == b->layers && a->heads == b->heads &&
           a->intermediate == b->intermediate && a->dtype == b->dtype && a->batch == b->batch &&
           a->len == b->len && a->token_bucket == b->token_bucket &&
           strncmp(a->mask, b->mask, sizeof a->mask) == 0 &&
           strncmp(a->family, b->family, sizeof a->family) == 0 &&
           strncmp(a->desc_hash, b->desc_hash, sizeof a->desc_hash) == 0;
}

stof_status tune_cache_path(const char *override_path, char *buf, size_t cap)
{
    STOF_REQUIRE(buf && cap > 0, STOF_ERR_INVALID_ARG, "tune cache path: no output buffer");
    buf[0] = '\0';
    const char *env = getenv("STOF_TUNE_CACHE");
    const char *xdg = getenv("XDG_CACHE_HOME");
    const char *home = getenv("HOME");
    int n;
    if (override_path && override_path[0])
        n = snprintf(buf, cap, "%s", override_path);
    else if (env && env[0])
        n = snprintf(buf, cap, "%s", env);
    else if (xdg && xdg[0] == '/')
        n = snprintf(buf, cap, "%s/stof/tune.json", xdg);
    else if (home && home[0])
        n = snprintf(buf, cap, "%s/.cache/stof/tune.json", home);
    else
        return stof_error(STOF_ERR_INVALID_ARG,
                          "tune cache path: no override, and none of STOF_TUNE_CACHE, "
                          "XDG_CACHE_HOME, HOME is set");
    if (n < 0 || (size_t)n >= cap) {
        buf[0] = '\0';
        return stof_error(STOF_ERR_INVALID_ARG,
                          "tune cache path: %d bytes do not fit a buffer of %zu", n, cap);
    }
    return STOF_OK;
}

/* ----------------------------------------------------- validating structs */

static bool terminated(const char *s, size_t size)
{
    return memchr(s, '\0', size) != NULL;
}

/* The one range check shared by the reader and the writer. */
static bool key_valid(const tune_key *k, char *why, size_t cap)
{
    const char *bad = NULL;
    if (!terminated(k->gpu, sizeof k->gpu))
        bad = "key.gpu is not terminated";
    else if (!terminated(k->version, sizeof k->version))
        bad = "key.version is not terminated";
    else if (!terminated(k->mask, sizeof k->mask))
        bad = "key.mask is not terminated";
    else if (!terminated(k->family, sizeof k->family) ||
             !terminated(k->desc_hash, sizeof k->desc_hash))
        bad = "key.family or key.desc_hash is not terminated";
    else if (k->sm_count < 0)
        bad = "key.sm_count is negative";
    else if (k->cc < 0)
        bad = "key.cc is negative";
    else if (k->hidden < 0 || k->layers < 0 || k->heads < 0 || k->intermediate < 0)
        bad = "a key model dimension is negative";
    else if (k->dtype < 0)
        bad = "key.dtype is negative";
    else if (k->batch < 0 || k->len < 0)
        bad = "key.batch or key.len is negative";
    else if (k->token_bucket < 0 || k->token_bucket > TUNE_MAX_EXACT_INT)
        bad = "key.token_bucket is outside [0, 2^53]";
    if (bad) snprintf(why, cap, "%s", bad);
    return bad == NULL;
}

static bool attn_kernel_valid(int k)
{
    return k >= STOF_ATTN_AUTO && k != STOF_ATTN_CPU && k <= STOF_ATTN_BLOCKWISE_SM90;
}

static bool plan_valid(const tune_plan *p, char *why, size_t cap)
{
    for (int s = 0; s < TUNE_NSEG; s++) {
        const tune_seg *g = &p->seg[s];
        if (g->path != 0 && g->path != 1) {
            snprintf(why, cap, "segment %s: path %d is not 0 or 1", seg_names[s], g->path);
            return false;
        }
        if (g->algo < 0 || g->tpl < 0 || g->block_m < 0 || g->block_n < 0 || g->block_k < 0 ||
            g->warps_m < 0 || g->warps_n < 0 || g->stages < 0) {
            snprintf(why, cap, "segment %s: a negative number", seg_names[s]);
            return false;
        }
    }
    const char *bad = NULL;
    if (p->ffn_chain != 0 && p->ffn_chain != 1)
        bad = "ffn_chain is not 0 or 1";
    else if (!attn_kernel_valid(p->attn_kernel) || !attn_kernel_valid(p->attn2_kernel))
        bad = "attention.kernel is not AUTO, BLOCKWISE, ROWWISE or BLOCKWISE_SM90";
    else if (p->attn_warps < 0 || p->attn_block_m < 0 || p->attn2_warps < 0 ||
             p->attn2_block_m < 0)
        bad = "attention: a negative number";
    else if (!(isfinite(p->default_ms) && p->default_ms >= 0) ||
             !(isfinite(p->tuned_ms) && p->tuned_ms >= 0) ||
             !(isfinite(p->tune_s) && p->tune_s >= 0))
        bad = "a time is negative or not finite";
    if (bad) snprintf(why, cap, "%s", bad);
    return bad == NULL;
}

/* ------------------------------------------------------------ JSON -> structs */

static bool json_int(const cJSON *obj, const char *name, int64_t hi, int64_t *out, char *why,
                     size_t cap)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, name);
    if (!v) {
        snprintf(why, cap, "\"%s\" is missing", name);
        return false;
    }
    double d = cJSON_IsNumber(v) ? v->valuedouble : -1;
    if (!cJSON_IsNumber(v) || !isfinite(d) || d != floor(d) || d < 0 || d > (double)hi) {
        snprintf(why, cap, "\"%s\" must be an integer in [0, %lld]", name, (long long)hi);
        return false;
    }
    *out = (int64_t)d;
    return true;
}

static bool json_int32(const cJSON *obj, const char *name, int *out, char *why, size_t cap)
{
    int64_t v;
    if (!json_int(obj, name, INT32_MAX, &v, why, cap)) return false;
    *out = (int)v;
    return true;
}

static bool json_time(const cJSON *obj, const char *name, double *out, char *why, size_t cap)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, name);
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble < 0) {
        snprintf(why, cap, "\"%s\" must be a non-negative number", name);
        return false;
    }
    *out = v->valuedouble;
    return true;
}

static bool json_string(const cJSON *obj, const char *name, char *out, size_t size, char *why,
                        size_t cap)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, name);
    const char *s = cJSON_GetStringValue(v);
    if (!s || strlen(s) >= size) {
        snprintf(why, cap, "\"%s\" must be a string shorter than %zu bytes", name, size);
        return false;
    }
    memcpy(out, s, strlen(s) + 1);
    return true;
}

/* A string field entries written before it existed lack: "" then. */
static bool json_opt_string(const cJSON *obj, const char *name, char *out, size_t size, char *why,
                            size_t cap)
{
    if (!cJSON_GetObjectItemCaseSensitive(obj, name)) {
        out[0] = '\0';
        return true;
    }
    return json_string(obj, name, out, size, why, cap);
}

static bool key_from_json(const cJSON *o, tune_key *k, char *why, size_t cap)
{
    memset(k, 0, sizeof *k);
    if (!cJSON_IsObject(o)) {
        snprintf(why, cap, "\"key\" must be an object");
        return false;
    }
    return json_string(o, "gpu", k->gpu, sizeof k->gpu, why, cap) &&
           json_int32(o, "sm_count", &k->sm_count, why, cap) &&
           json_int32(o, "cc", &k->cc, why, cap) &&
           json_string(o, "version", k->version, sizeof k->version, why, cap) &&
           json_int32(o, "hidden", &k->hidden, why, cap) &&
           json_int32(o, "layers", &k->layers, why, cap) &&
           json_int32(o, "heads", &k->heads, why, cap) &&
           json_int32(o, "intermediate", &k->intermediate, why, cap) &&
           json_int32(o, "dtype", &k->dtype, why, cap) &&
           json_int32(o, "batch", &k->batch, why, cap) && json_int32(o, "len", &k->len, why, cap) &&
           json_int(o, "token_bucket", TUNE_MAX_EXACT_INT, &k->token_bucket, why, cap) &&
           json_string(o, "mask", k->mask, sizeof k->mask, why, cap) &&
           json_opt_string(o, "family", k->family, sizeof k->family, why, cap) &&
           json_opt_string(o, "desc_hash", k->desc_hash, sizeof k->desc_hash, why, cap) &&
           key_valid(k, why, cap);
}

static bool seg_from_json(const cJSON *o, int s, tune_seg *g, char *why, size_t cap)
{
    if (!cJSON_IsObject(o)) {
        snprintf(why, cap, "segment %d must be an object", s);
        return false;
    }
    const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, "name"));
    if (!name || strcmp(name, seg_names[s]) != 0) {
        snprintf(why, cap, "segment %d must be named \"%s\"", s, seg_names[s]);
        return false;
    }
    const char *path = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, "path"));
    if (path && strcmp(path, "cublaslt") == 0)
        g->path = 0;
    else if (path && strcmp(path, "stof") == 0)
        g->path = 1;
    else {
        snprintf(why, cap, "segment %s: \"path\" must be \"cublaslt\" or \"stof\"", seg_names[s]);
        return false;
    }
    return json_int32(o, "algo", &g->algo, why, cap) && json_int32(o, "tpl", &g->tpl, why, cap) &&
           json_int32(o, "block_m", &g->block_m, why, cap) &&
           json_int32(o, "block_n", &g->block_n, why, cap) &&
           json_int32(o, "block_k", &g->block_k, why, cap) &&
           json_int32(o, "warps_m", &g->warps_m, why, cap) &&
           json_int32(o, "warps_n", &g->warps_n, why, cap) &&
           json_int32(o, "stages", &g->stages, why, cap);
}

static bool plan_from_json(const cJSON *o, tune_plan *p, char *why, size_t cap)
{
    tune_plan_default(p);
    if (!cJSON_IsObject(o)) {
        snprintf(why, cap, "\"plan\" must be an object");
        return false;
    }
    const cJSON *segs = cJSON_GetObjectItemCaseSensitive(o, "segments");
    if (!cJSON_IsArray(segs) || cJSON_GetArraySize(segs) != TUNE_NSEG) {
        snprintf(why, cap, "\"segments\" must be an array of %d objects", TUNE_NSEG);
        return false;
    }
    int s = 0;
    const cJSON *g;
    cJSON_ArrayForEach(g, segs)
    {
        if (!seg_from_json(g, s, &p->seg[s], why, cap)) return false;
        s++;
    }
    const cJSON *chain = cJSON_GetObjectItemCaseSensitive(o, "ffn_chain");
    if (cJSON_IsBool(chain))
        p->ffn_chain = cJSON_IsTrue(chain) ? 1 : 0;
    else if (!json_int32(o, "ffn_chain", &p->ffn_chain, why, cap))
        return false;
    const cJSON *attn = cJSON_GetObjectItemCaseSensitive(o, "attention");
    if (!cJSON_IsObject(attn)) {
        snprintf(why, cap, "\"attention\" must be an object");
        return false;
    }
    /* "attention2" (the second mask kind's) is absent from entries older than it */
    const cJSON *attn2 = cJSON_GetObjectItemCaseSensitive(o, "attention2");
    if (attn2 && !cJSON_IsObject(attn2)) {
        snprintf(why, cap, "\"attention2\" must be an object");
        return false;
    }
    return json_int32(attn, "kernel", &p->attn_kernel, why, cap) &&
           json_int32(attn, "warps", &p->attn_warps, why, cap) &&
           json_int32(attn, "block_m", &p->attn_block_m, why, cap) &&
           (!attn2 || (json_int32(attn2, "kernel", &p->attn2_kernel, why, cap) &&
                       json_int32(attn2, "warps", &p->attn2_warps, why, cap) &&
                       json_int32(attn2, "block_m", &p->attn2_block_m, why, cap))) &&
           json_time(o, "default_ms", &p->default_ms, why, cap) &&
           json_time(o, "tuned_ms", &p->tuned_ms, why, cap) &&
           json_time(o, "tune_s", &p->tune_s, why, cap) && plan_valid(p, why, cap);
}

/* ------------------------------------------------------------ structs -> JSON */

static bool add_num(cJSON *o, const char *name, double v)
{
    return cJSON_AddNumberToObject(o, name, v) != NULL;
}

/*
 * cJSON prints 15 significant digits when they come within an epsilon of the
 * value, which loses the last bits of measured times and of integers past
 * 2^50; these are written as raw text that reads back exactly.
 */
static bool add_exact(cJSON *o, const char *name, double v)
{
    char buf[40];
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, v);
        for (char *c = buf; *c; c++)
            if (*c == ',') *c = '.'; /* a locale's decimal comma */
        if (strtod(buf, NULL) == v) break;
    }
    return cJSON_AddRawToObject(o, name, buf) != NULL;
}

static bool add_int64(cJSON *o, const char *name, int64_t v)
{
    char buf[24];
    snprintf(buf, sizeof buf, "%lld", (long long)v);
    return cJSON_AddRawToObject(o, name, buf) != NULL;
}

static cJSON *entry_to_json(const tune_key *k, const tune_plan *p)
{
    cJSON *e = cJSON_CreateObject();
    cJSON *key = cJSON_AddObjectToObject(e, "key");
    cJSON *plan = cJSON_AddObjectToObject(e, "plan");
    bool ok = key && plan && cJSON_AddStringToObject(key, "gpu", k->gpu) &&
              add_num(key, "sm_count", k->sm_count) && add_num(key, "cc", k->cc) &&
              cJSON_AddStringToObject(key, "version", k->version) &&
              add_num(key, "hidden", k->hidden) && add_num(key, "layers", k->layers) &&
              add_num(key, "heads", k->heads) && add_num(key, "intermediate", k->intermediate) &&
              add_num(key, "dtype", k->dtype) && add_num(key, "batch", k->batch) &&
              add_num(key, "len", k->len) && add_int64(key, "token_bucket", k->token_bucket) &&
              cJSON_AddStringToObject(key, "mask", k->mask) &&
              cJSON_AddStringToObject(key, "family", k->family) &&
              cJSON_AddStringToObject(key, "desc_hash", k->desc_hash);
    cJSON *segs = ok ? cJSON_AddArrayToObject(plan, "segments") : NULL;
    ok = ok && segs;
    for (int s = 0; ok && s < TUNE_NSEG; s++) {
        const tune_seg *g = &p->seg[s];
        cJSON *o = cJSON_CreateObject();
        ok = o && cJSON_AddItemToArray(segs, o);
        if (!ok) {
            cJSON_Delete(o);
            break;
        }
        ok = cJSON_AddStringToObject(o, "name", seg_names[s]) &&
             cJSON_AddStringToObject(o, "path", g->path ? "stof" : "cublaslt") &&
             add_num(o, "algo", g->algo) && add_num(o, "tpl", g->tpl) &&
             add_num(o, "block_m", g->block_m) && add_num(o, "block_n", g->block_n) &&
             add_num(o, "block_k", g->block_k) && add_num(o, "warps_m", g->warps_m) &&
             add_num(o, "warps_n", g->warps_n) && add_num(o, "stages", g->stages);
    }
    cJSON *attn = NULL, *attn2 = NULL;
    ok = ok && cJSON_AddBoolToObject(plan, "ffn_chain", p->ffn_chain != 0) &&
         (attn = cJSON_AddObjectToObject(plan, "attention")) &&
         add_num(attn, "kernel", p->attn_kernel) && add_num(attn, "warps", p->attn_warps) &&
         add_num(attn, "block_m", p->attn_block_m) &&
         (attn2 = cJSON_AddObjectToObject(plan, "attention2")) &&
         add_num(attn2, "kernel", p->attn2_kernel) && add_num(attn2, "warps", p->attn2_warps) &&
         add_num(attn2, "block_m", p->attn2_block_m) &&
         add_exact(plan, "default_ms", p->default_ms) && add_exact(plan, "tuned_ms", p->tuned_ms) &&
         add_exact(plan, "tune_s", p->tune_s);
    if (!ok) {
        cJSON_Delete(e);
        return NULL;
    }
    return e;
}

/* ------------------------------------------------------------ in memory */


static uint64_t key_hash(const tune_key *k)
{
    uint64_t h = STOF_FNV_BASIS;
    h = stof_fnv1a(h, k->gpu, strnlen(k->gpu, sizeof k->gpu));
    h = stof_fnv1a(h, k->version, strnlen(k->version, sizeof k->version));
    h = stof_fnv1a(h, k->mask, strnlen(k->mask, sizeof k->mask));
    h = stof_fnv1a(h, k->family, strnlen(k->family, sizeof k->family));
    h = stof_fnv1a(h, k->desc_hash, strnlen(k->desc_hash, sizeof k->desc_hash));
    const int64_t nums[] = {k->sm_count,     k->cc,    k->hidden, k->layers, k->heads,
                            k->intermediate, k->dtype, k->batch,  k->len,    k->token_bucket};
    return stof_fnv1a(h, nums, sizeof nums);
}

/* The slot holding key, or the empty slot where it would go. */
static size_t find_slot(const tune_cache *c, const tune_key *key)
{
    size_t mask = c->nslots - 1, i = (size_t)key_hash(key) & mask;
    while (c->slots[i] && !tune_key_equal(&c->entries[c->slots[i] - 1].key, key))
        i = (i + 1) & mask;
    return i;
}

static stof_status cache_grow(tune_cache *c)
{
    int grown = c->capacity ? 2 * c->capacity : 16;
    STOF_REQUIRE(grown > c->capacity && grown < (1 << 28), STOF_ERR_OOM,
                 "tune cache: too many entries (%d)", c->capacity);
    tune_entry *e = realloc(c->entries, sizeof *e * (size_t)grown);
    STOF_REQUIRE(e, STOF_ERR_OOM, "tune cache: out of memory for %d entries", grown);
    c->entries = e;
    c->capacity = grown;
    size_t nslots = 4 * (size_t)grown;
    int *slots = calloc(nslots, sizeof *slots);
    STOF_REQUIRE(slots, STOF_ERR_OOM, "tune cache: out of memory for %d entries", grown);
    free(c->slots);
    c->slots = slots;
    c->nslots = nslots;
    for (int i = 0; i < c->count; i++)
        c->slots[find_slot(c, &c->entries[i].key)] = i + 1;
    return STOF_OK;
}

/* Replaces key's plan, or appends the entry. */
static stof_status cache_put(tune_cache *c, const tune_key *key, const tune_plan *plan)
{
    if (c->count == c->capacity) STOF_TRY(cache_grow(c));
    size_t slot = find_slot(c, key);
    if (c->slots[slot]) {
        c->entries[c->slots[slot] - 1].plan = *plan;
        return STOF_OK;
    }
    c->entries[c->count].key = *key;
    c->entries[c->count].plan = *plan;
    c->count++;
    c->slots[slot] = c->count;
    return STOF_OK;
}

static void cache_clear(tune_cache *c)
{
    free(c->entries);
    free(c->slots);
}

void tune_cache_free(tune_cache *c)
{
    if (!c) return;
    cache_clear(c);
    free(c);
}

int tune_cache_count(const tune_cache *c)
{
    return c ? c->count : 0;
}

bool tune_cache_find(const tune_cache *c, const tune_key *key, tune_plan *out)
{
    if (!c || !key || c->count == 0) return false;
    size_t slot = find_slot(c, key);
    if (!c->slots[slot]) return false;
    if (out) *out = c->entries[c->slots[slot] - 1].plan;
    return true;
}

/* ------------------------------------------------------------ reading the file */

/*
 * The whole file, NUL-terminated. *text NULL with OK: the file is missing, or
 * too large to be ours (warned). IO: it exists but cannot be read as a file.
 */
static stof_status read_file(const char *path, char **text, size_t *len)
{
    *text = NULL;
    *len = 0;
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT) return STOF_OK;
        return stof_error(STOF_ERR_IO, "tune cache %s: cannot open: %s", path, strerror(errno));
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int err = errno;
        close(fd);
        return stof_error(STOF_ERR_IO, "tune cache %s: cannot stat: %s", path, strerror(err));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return stof_error(STOF_ERR_IO, "tune cache %s: not a regular file", path);
    }
    size_t cap = (size_t)st.st_size < TUNE_FILE_MAX ? (size_t)st.st_size + 1 : TUNE_FILE_MAX + 1;
    char *buf = malloc(cap + 1);
    if (!buf) {
        close(fd);
        return stof_error(STOF_ERR_OOM, "tune cache %s: out of memory for %zu bytes", path, cap);
    }
    size_t used = 0;
    for (;;) {
        if (used == cap) {
            if (cap > TUNE_FILE_MAX) break; /* grown past the limit while we read */
            size_t grown = cap * 2 > TUNE_FILE_MAX + 1 ? TUNE_FILE_MAX + 1 : cap * 2;
            char *b = realloc(buf, grown + 1);
            if (!b) {
                free(buf);
                close(fd);
                return stof_error(STOF_ERR_OOM, "tune cache %s: out of memory", path);
            }
            buf = b;
            cap = grown;
        }
        ssize_t got = read(fd, buf + used, cap - used);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) {
            int err = errno;
            free(buf);
            close(fd);
            return stof_error(STOF_ERR_IO, "tune cache %s: read failed: %s", path, strerror(err));
        }
        if (got == 0) break;
        used += (size_t)got;
    }
    close(fd);
    if (used > TUNE_FILE_MAX) {
        stof_log(STOF_LOG_WARN, "tune cache %s: larger than %zu bytes; the file is ignored", path,
                 TUNE_FILE_MAX);
        free(buf);
        return STOF_OK;
    }
    buf[used] = '\0';
    *text = buf;
    *len = used;
    return STOF_OK;
}

static bool is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/* Parsed root with a usable "entries" array, or NULL after a warning. */
static cJSON *parse_root(const char *path, const char *text, size_t len, const cJSON **entries)
{
    const char *stop = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &stop, 0);
    size_t at = stop && stop >= text ? (size_t)(stop - text) : 0;
    if (!root) {
        stof_log(STOF_LOG_WARN,
                 "tune cache %s: not valid JSON (near byte %zu); the file is ignored", path, at);
        return NULL;
    }
    while (at < len && is_space(text[at]))
        at++;
    const char *bad = NULL;
    const cJSON *format = cJSON_GetObjectItemCaseSensitive(root, "format");
    *entries = cJSON_GetObjectItemCaseSensitive(root, "entries");
    if (at != len)
        bad = "bytes after the JSON";
    else if (!cJSON_IsObject(root))
        bad = "the top level is not an object";
    else if (!cJSON_IsNumber(format))
        bad = "\"format\" is missing or not a number";
    else if (format->valuedouble != TUNE_FILE_FORMAT)
        bad = "unknown \"format\" number";
    else if (!cJSON_IsArray(*entries))
        bad = "\"entries\" is missing or not an array";
    if (bad) {
        stof_log(STOF_LOG_WARN, "tune cache %s: %s (format %d expected); the file is ignored", path,
                 bad, TUNE_FILE_FORMAT);
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}

/* Adds the file's valid entries of `version` to c; stale ones are reported at stale_level. */
static stof_status load_into(const char *path, const char *version, int stale_level, tune_cache *c)
{
    char *text;
    size_t len;
    STOF_TRY(read_file(path, &text, &len));
    if (!text) return STOF_OK;
    const cJSON *entries = NULL;
    cJSON *root = parse_root(path, text, len, &entries);
    free(text);
    if (!root) return STOF_OK;

    int index = 0, invalid = 0, stale = 0;
    stof_status st = STOF_OK;
    const cJSON *e;
    cJSON_ArrayForEach(e, entries)
    {
        tune_key key;
        tune_plan plan;
        char why[160] = "\"key\" and \"plan\" objects expected";
        bool ok =
            cJSON_IsObject(e) &&
            key_from_json(cJSON_GetObjectItemCaseSensitive(e, "key"), &key, why, sizeof why) &&
            plan_from_json(cJSON_GetObjectItemCaseSensitive(e, "plan"), &plan, why, sizeof why);
        if (!ok) {
            if (invalid < TUNE_WARN_ENTRIES)
                stof_log(STOF_LOG_WARN, "tune cache %s: entry %d: %s; the entry is ignored", path,
                         index, why);
            invalid++;
        } else if (strcmp(key.version, version) != 0) {
            stale++;
        } else if ((st = cache_put(c, &key, &plan)) != STOF_OK) {
            break;
        }
        index++;
    }
    cJSON_Delete(root);
    if (invalid > TUNE_WARN_ENTRIES)
        stof_log(STOF_LOG_WARN, "tune cache %s: %d more invalid entries ignored", path,
                 invalid - TUNE_WARN_ENTRIES);
    if (stale)
        stof_log(stale_level, "tune cache %s: %d entr%s of a version other than %s skipped", path,
                 stale, stale == 1 ? "y" : "ies", version);
    return st;
}

stof_status tune_cache_load(const char *path, const char *version, tune_cache **out)
{
    STOF_REQUIRE(out, STOF_ERR_INVALID_ARG, "tune_cache_load: out is NULL");
    *out = NULL;
    STOF_REQUIRE(path && path[0], STOF_ERR_INVALID_ARG, "tune_cache_load: no path");
    STOF_REQUIRE(version, STOF_ERR_INVALID_ARG, "tune_cache_load: version is NULL");
    tune_cache *c = calloc(1, sizeof *c);
    STOF_REQUIRE(c, STOF_ERR_OOM, "tune_cache_load: out of memory");
    stof_status st = load_into(path, version, STOF_LOG_WARN, c);
    if (st != STOF_OK) {
        tune_cache_free(c);
        return st;
    }
    *out = c;
    return STOF_OK;
}

/* ------------------------------------------------------------ writing the file */

/* mkdir -p of path's folder. */
static stof_status make_parents(const char *path)
{
    size_t n = strlen(path);
    char *dir = malloc(n + 1);
    STOF_REQUIRE(dir, STOF_ERR_OOM, "tune cache: out of memory");
    memcpy(dir, path, n + 1);
    for (size_t i = 1; i < n; i++) {
        if (dir[i] != '/' || dir[i - 1] == '/') continue;
        dir[i] = '\0';
        if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
            stof_status st = stof_error(STOF_ERR_IO, "tune cache %s: cannot create folder %s: %s",
                                        path, dir, strerror(errno));
            free(dir);
            return st;
        }
        struct stat st;
        if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
            stof_status s = stof_error(STOF_ERR_IO, "tune cache %s: %s is not a folder", path, dir);
            free(dir);
            return s;
        }
        dir[i] = '/';
    }
    free(dir);
    return STOF_OK;
}

static stof_status write_all(int fd, const char *data, size_t len, const char *name)
{
    while (len > 0) {
        ssize_t put = write(fd, data, len);
        if (put < 0 && errno == EINTR) continue;
        if (put <= 0)
            return stof_error(STOF_ERR_IO, "tune cache %s: write failed: %s", name,
                              put < 0 ? strerror(errno) : "no progress");
        data += put;
        len -= (size_t)put;
    }
    return STOF_OK;
}

/* Makes the rename durable; a failure here loses nothing already renamed. */
static void sync_folder(const char *path)
{
    const char *slash = strrchr(path, '/');
    char dir[4096];
    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else if (slash == path)
        snprintf(dir, sizeof dir, "/");
    else if ((size_t)(slash - path) < sizeof dir)
        snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    else
        return;
    int fd = open(dir, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    (void)fsync(fd);
    close(fd);
}

/* Writes text to tmp, fsyncs and renames it over path. */
static stof_status replace_file(const char *path, const char *tmp, const char *text)
{
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return stof_error(STOF_ERR_IO, "tune cache %s: cannot create: %s", tmp, strerror(errno));
    stof_status st = write_all(fd, text, strlen(text), tmp);
    if (st == STOF_OK && fsync(fd) != 0)
        st = stof_error(STOF_ERR_IO, "tune cache %s: fsync failed: %s", tmp, strerror(errno));
    if (close(fd) != 0 && st == STOF_OK)
        st = stof_error(STOF_ERR_IO, "tune cache %s: close failed: %s", tmp, strerror(errno));
    if (st == STOF_OK && rename(tmp, path) != 0)
        st = stof_error(STOF_ERR_IO, "tune cache %s: cannot replace with %s: %s", path, tmp,
                        strerror(errno));
    if (st != STOF_OK) {
        unlink(tmp);
        return st;
    }
    sync_folder(path);
    return STOF_OK;
}

static char *cache_to_text(const tune_cache *c)
{
    cJSON *root = cJSON_CreateObject();
    cJSON *entries = NULL;
    bool ok = root && add_num(root, "format", TUNE_FILE_FORMAT) &&
              (entries = cJSON_AddArrayToObject(root, "entries"));
    for (int i = 0; ok && i < c->count; i++) {
        cJSON *e = entry_to_json(&c->entries[i].key, &c->entries[i].plan);
        ok = e && cJSON_AddItemToArray(entries, e);
        if (!ok) cJSON_Delete(e);
    }
    char *text = ok ? cJSON_Print(root) : NULL;
    cJSON_Delete(root);
    if (!text) return NULL;
    size_t n = strlen(text);
    char *with_newline = malloc(n + 2);
    if (with_newline) {
        memcpy(with_newline, text, n);
        memcpy(with_newline + n, "\n", 2);
    }
    cJSON_free(text);
    return with_newline;
}

stof_status tune_cache_store(const char *path, const tune_key *key, const tune_plan *plan)
{
    STOF_REQUIRE(path && path[0], STOF_ERR_INVALID_ARG, "tune_cache_store: no path");
    STOF_REQUIRE(key && plan, STOF_ERR_INVALID_ARG, "tune_cache_store: key or plan is NULL");
    char why[160];
    STOF_REQUIRE(key_valid(key, why, sizeof why), STOF_ERR_INVALID_ARG, "tune_cache_store: %s",
                 why);
    STOF_REQUIRE(plan_valid(plan, why, sizeof why), STOF_ERR_INVALID_ARG, "tune_cache_store: %s",
                 why);
    STOF_TRY(make_parents(path));

    size_t n = strlen(path);
    char *lock_path = malloc(n + 32), *tmp_path = malloc(n + 32);
    tune_cache c = {0};
    char *text = NULL;
    int lock_fd = -1;
    stof_status st = STOF_OK;
    if (!lock_path || !tmp_path) {
        st = stof_error(STOF_ERR_OOM, "tune_cache_store: out of memory");
        goto done;
    }
    snprintf(lock_path, n + 32, "%s.lock", path);
    snprintf(tmp_path, n + 32, "%s.tmp.%ld", path, (long)getpid());

    lock_fd = open(lock_path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (lock_fd < 0) {
        st = stof_error(STOF_ERR_IO, "tune cache %s: cannot open lock: %s", lock_path,
                        strerror(errno));
        goto done;
    }
    int r;
    while ((r = flock(lock_fd, LOCK_EX)) != 0 && errno == EINTR) {
    }
    if (r != 0) {
        st = stof_error(STOF_ERR_IO, "tune cache %s: cannot lock: %s", lock_path, strerror(errno));
        goto done;
    }

    /* Under the lock: the file as it is now, plus ours. */
    if ((st = load_into(path, key->version, STOF_LOG_INFO, &c)) != STOF_OK) goto done;
    if ((st = cache_put(&c, key, plan)) != STOF_OK) goto done;
    text = cache_to_text(&c);
    if (!text) {
        st = stof_error(STOF_ERR_OOM, "tune cache %s: out of memory writing JSON", path);
        goto done;
    }
    st = replace_file(path, tmp_path, text);

done:
    if (lock_fd >= 0) close(lock_fd); /* releases the lock */
    free(text);
    cache_clear(&c);
    free(lock_path);
    free(tmp_path);
    return st;
}
