/*
 * test_tune_cache.c — the tuner's cache and budget: token buckets and mask
 * signatures, where the file lives, round trips of every field, damaged files
 * (each loads as OK with the entries that are still valid, never a crash),
 * stale versions, I/O errors, eight processes storing at once, and the
 * budget split rules.
 */
#include "tune/tune.h"
#include "testlib.h"

#include <cjson/cJSON.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char tmpdir[256];

static void path_in_tmp(char *buf, size_t cap, const char *name)
{
    snprintf(buf, cap, "%s/%s", tmpdir, name);
}

static void remove_tree(const char *path)
{
    struct stat st;
    if (lstat(path, &st) != 0) return;
    if (S_ISDIR(st.st_mode)) {
        chmod(path, 0755);
        DIR *d = opendir(path);
        if (d) {
            struct dirent *e;
            while ((e = readdir(d)) != NULL) {
                if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
                char child[1024];
                snprintf(child, sizeof child, "%s/%s", path, e->d_name);
                remove_tree(child);
            }
            closedir(d);
        }
        rmdir(path);
    } else {
        unlink(path);
    }
}

/* Warnings go to stderr: tests send them to a file (or /dev/null) to read or silence them. */
static int saved_stderr = -1;

static void stderr_to(const char *file)
{
    fflush(stderr);
    saved_stderr = dup(2);
    int fd = open(file, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
        dup2(fd, 2);
        close(fd);
    }
}

static void stderr_restore(void)
{
    fflush(stderr);
    if (saved_stderr >= 0) {
        dup2(saved_stderr, 2);
        close(saved_stderr);
        saved_stderr = -1;
    }
}

static bool write_text(const char *path, const char *text, size_t len)
{
    FILE *f = fopen(path, "wb");
    if (!f) return false;
    bool ok = fwrite(text, 1, len, f) == len;
    return fclose(f) == 0 && ok;
}

static char *read_text(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    size_t got;
    while (buf && (got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) {
            cap *= 2;
            char *b = realloc(buf, cap + 1);
            if (!b) free(buf);
            buf = b;
        }
    }
    fclose(f);
    if (buf) buf[n] = '\0';
    if (len) *len = n;
    return buf;
}

/* Entries of the file at path for version, -1 on a failed load. */
static int load_count(const char *path, const char *version)
{
    tune_cache *c = NULL;
    stof_status st = tune_cache_load(path, version, &c);
    if (st != STOF_OK) return -1;
    int n = tune_cache_count(c);
    tune_cache_free(c);
    return n;
}

/* ---- reference values built independently of the code under test */

static uint64_t ref_fnv1a64(const char *s)
{
    uint64_t h = 14695981039346656037ull;
    for (size_t i = 0; s[i]; i++)
        h = (h ^ (uint8_t)s[i]) * 1099511628211ull;
    return h;
}

static tune_key make_key(int i, const char *version)
{
    tune_key k;
    memset(&k, 0, sizeof k);
    snprintf(k.gpu, sizeof k.gpu, "NVIDIA H100 80GB HBM3 #%d", i % 3);
    k.sm_count = 132 - (i % 2);
    k.cc = 90;
    snprintf(k.version, sizeof k.version, "%s", version);
    k.hidden = 768 + 64 * (i % 4);
    k.layers = 12;
    k.heads = 12;
    k.intermediate = 3072;
    k.dtype = 1 + (i % 2);
    k.batch = 1 + i;
    k.len = 128 << (i % 3);
    k.token_bucket = tune_token_bucket(1000 + 37 * i);
    tune_mask_signature(i % 2 ? "window:128,global:32" : NULL, k.mask, sizeof k.mask);
    return k;
}

static tune_plan make_plan(test_rng *r)
{
    tune_plan p;
    tune_plan_default(&p);
    for (int s = 0; s < TUNE_NSEG; s++) {
        tune_seg *g = &p.seg[s];
        g->path = (int)test_rng_int(r, 0, 1);
        g->algo = (int)test_rng_int(r, 0, 20);
        g->tpl = (int)test_rng_int(r, 0, 3);
        g->block_m = 16 << test_rng_int(r, 0, 3);
        g->block_n = 32 << test_rng_int(r, 0, 2);
        g->block_k = 32 << test_rng_int(r, 0, 1);
        g->warps_m = (int)test_rng_int(r, 1, 4);
        g->warps_n = (int)test_rng_int(r, 1, 4);
        g->stages = (int)test_rng_int(r, 2, 4);
    }
    p.ffn_chain = (int)test_rng_int(r, 0, 1);
    static const int kernels[4] = {STOF_ATTN_AUTO, STOF_ATTN_BLOCKWISE, STOF_ATTN_ROWWISE,
                                   STOF_ATTN_BLOCKWISE_SM90};
    p.attn_kernel = kernels[test_rng_int(r, 0, 3)];
    p.attn_warps = (int)test_rng_int(r, 1, 8);
    p.attn_block_m = 16 << test_rng_int(r, 0, 3);
    p.attn2_kernel = kernels[test_rng_int(r, 0, 3)];
    p.attn2_warps = (int)test_rng_int(r, 1, 8);
    p.attn2_block_m = 16 << test_rng_int(r, 0, 3);
    p.default_ms = test_rng_float(r, 0.1f, 50.0f) + 1.0 / 3.0;
    p.tuned_ms = p.default_ms * 0.7123456789012345;
    p.tune_s = test_rng_float(r, 1.0f, 900.0f) / 7.0;
    return p;
}

static bool plan_equal(const tune_plan *a, const tune_plan *b)
{
    for (int s = 0; s < TUNE_NSEG; s++) {
        const tune_seg *x = &a->seg[s], *y = &b->seg[s];
        if (x->path != y->path || x->algo != y->algo || x->tpl != y->tpl ||
            x->block_m != y->block_m || x->block_n != y->block_n || x->block_k != y->block_k ||
            x->warps_m != y->warps_m || x->warps_n != y->warps_n || x->stages != y->stages)
            return false;
    }
    return a->ffn_chain == b->ffn_chain && a->attn_kernel == b->attn_kernel &&
           a->attn_warps == b->attn_warps && a->attn_block_m == b->attn_block_m &&
           a->attn2_kernel == b->attn2_kernel && a->attn2_warps == b->attn2_warps &&
           a->attn2_block_m == b->attn2_block_m && a->default_ms == b->default_ms && a->tuned_ms == b->tuned_ms && a->tune_s == b->tune_s;
}

/* ---------------------------------------------------------------- keys */

static void test_buckets(test_rng *r)
{
    for (int64_t t = 1; t <= 8; t++)
        CHECK(tune_token_bucket(t) == t, "small %lld exact", (long long)t);
    CHECK(tune_token_bucket(0) == 1 && tune_token_bucket(-7) == 1, "non-positive -> 1");
    CHECK(tune_token_bucket(INT64_MAX) == INT64_MAX, "top %lld",
          (long long)tune_token_bucket(INT64_MAX));
    CHECK(tune_token_bucket(9) == 9 && tune_token_bucket(17) == 18 &&
              tune_token_bucket(1000) == 1024 && tune_token_bucket(1025) == 1152,
          "examples %lld %lld %lld", (long long)tune_token_bucket(17),
          (long long)tune_token_bucket(1000), (long long)tune_token_bucket(1025));
    int bad_mono = 0, bad_idem = 0, bad_spread = 0, distinct = 0;
    int64_t prev = 0;
    for (int64_t t = 1; t <= 1 << 20; t++) {
        int64_t b = tune_token_bucket(t);
        if (b < prev) bad_mono++;
        if (b != prev) distinct++;
        if (tune_token_bucket(b) != b) bad_idem++;
        if (b < t || (b - t) * 8 >= t) bad_spread++; /* (b-t)/t < 1/8 */
        prev = b;
    }
    CHECK(bad_mono == 0 && bad_idem == 0 && bad_spread == 0,
          "dense: %d non-monotone, %d non-idempotent, %d over 12.5%%", bad_mono, bad_idem,
          bad_spread);
    /* 8 exact buckets + 8 per octave from 2^3 to 2^20 */
    CHECK(distinct == 8 + 8 * 17, "%d buckets up to 2^20", distinct);
    for (int k = 0; k < 62; k++) {
        int64_t p2 = (int64_t)1 << k;
        if (tune_token_bucket(p2) != p2) {
            CHECK(false, "2^%d is an edge", k);
            break;
        }
    }
    bad_mono = bad_idem = bad_spread = 0;
    for (int i = 0; i < 200000; i++) {
        int64_t t = (int64_t)(test_rng_next(r) >> test_rng_int(r, 2, 63));
        if (t < 1) t = 1;
        int64_t u = t + test_rng_int(r, 0, 1000);
        int64_t bt = tune_token_bucket(t), bu = tune_token_bucket(u);
        if (bt > bu) bad_mono++;
        if (tune_token_bucket(bt) != bt) bad_idem++;
        if (bt < t || (bt - t) * 8 >= t) bad_spread++;
    }
    CHECK(bad_mono == 0 && bad_idem == 0 && bad_spread == 0,
          "random: %d non-monotone, %d non-idempotent, %d over 12.5%%", bad_mono, bad_idem,
          bad_spread);
}

static void test_signature(void)
{
    CHECK(ref_fnv1a64("") == 0xcbf29ce484222325ull && ref_fnv1a64("a") == 0xaf63dc4c8601ec8cull &&
              ref_fnv1a64("foobar") == 0x85944171f73967e8ull,
          "reference FNV-1a vectors");
    char out[128];
    memset(out, 'x', sizeof out);
    tune_mask_signature("window:128,global:32", out, sizeof out);
    CHECK(strcmp(out, "window:128,global:32") == 0, "short text kept: %s", out);
    tune_mask_signature(NULL, out, sizeof out);
    CHECK(strcmp(out, "full") == 0, "NULL -> %s", out);
    tune_mask_signature("", out, sizeof out);
    CHECK(strcmp(out, "full") == 0, "empty -> %s", out);

    char text[600];
    for (int i = 0; i < 599; i++)
        text[i] = (char)('a' + i % 26);
    text[599] = '\0';
    tune_mask_signature(text, out, sizeof out);
    char want[128];
    snprintf(want, sizeof want, "%.*s#%016llx", 127 - 17, text,
             (unsigned long long)ref_fnv1a64(text));
    CHECK(strlen(out) == 127 && strcmp(out, want) == 0, "long text: %s", out);
    /* a change past the prefix still changes the signature */
    char other[128];
    text[590] = 'Z';
    tune_mask_signature(text, other, sizeof other);
    CHECK(strlen(other) == 127 && strcmp(out, other) != 0 && strncmp(out, other, 110) == 0,
          "long texts differing at the end: %s", other);
    /* exactly cap - 1 fits, cap does not */
    memset(text, 'q', 127);
    text[127] = '\0';
    tune_mask_signature(text, out, sizeof out);
    CHECK(strcmp(out, text) == 0, "127 bytes fit a 128 buffer");
    text[127] = 'q';
    text[128] = '\0';
    tune_mask_signature(text, out, sizeof out);
    CHECK(strlen(out) == 127 && out[110] == '#', "128 bytes are hashed: %s", out);
    char tiny[8];
    tune_mask_signature("window:128,global:32", tiny, sizeof tiny);
    CHECK(strlen(tiny) == 7 && strchr(tiny, '#') == NULL, "tiny buffer: %s", tiny);
}

static void test_key_equal(void)
{
    tune_key a = make_key(5, "1.0.0"), b = a;
    CHECK(tune_key_equal(&a, &b), "equal");
    for (int f = 0; f < 13; f++) {
        b = a;
        switch (f) {
        case 0: b.gpu[0] = 'X'; break;
        case 1: b.sm_count++; break;
        case 2: b.cc = 80; break;
        case 3: b.version[0] = '2'; break;
        case 4: b.hidden += 8; break;
        case 5: b.layers--; break;
        case 6: b.heads = 16; break;
        case 7: b.intermediate += 8; break;
        case 8: b.dtype = 0; break;
        case 9: b.batch++; break;
        case 10: b.len++; break;
        case 11: b.token_bucket = tune_token_bucket(b.token_bucket + 1); break;
        case 12: b.mask[0] = 'W'; break;
        }
        CHECK(!tune_key_equal(&a, &b), "field %d changed still equal", f);
    }
}

static void test_path(void)
{
    char *home = getenv("HOME") ? strdup(getenv("HOME")) : NULL;
    char buf[512];
    setenv("STOF_TUNE_CACHE", "/env/tune.json", 1);
    setenv("XDG_CACHE_HOME", "/xdg", 1);
    setenv("HOME", "/home/u", 1);
    CHECK_OK(tune_cache_path("/over/x.json", buf, sizeof buf));
    CHECK(strcmp(buf, "/over/x.json") == 0, "override: %s", buf);
    CHECK_OK(tune_cache_path("", buf, sizeof buf));
    CHECK(strcmp(buf, "/env/tune.json") == 0, "env: %s", buf);
    unsetenv("STOF_TUNE_CACHE");
    CHECK_OK(tune_cache_path(NULL, buf, sizeof buf));
    CHECK(strcmp(buf, "/xdg/stof/tune.json") == 0, "xdg: %s", buf);
    setenv("XDG_CACHE_HOME", "relative", 1);
    CHECK_OK(tune_cache_path(NULL, buf, sizeof buf));
    CHECK(strcmp(buf, "/home/u/.cache/stof/tune.json") == 0, "relative xdg ignored: %s", buf);
    setenv("XDG_CACHE_HOME", "", 1);
    CHECK_OK(tune_cache_path(NULL, buf, sizeof buf));
    CHECK(strcmp(buf, "/home/u/.cache/stof/tune.json") == 0, "home: %s", buf);
    CHECK_STATUS(tune_cache_path(NULL, buf, 10), STOF_ERR_INVALID_ARG);
    CHECK_STATUS(tune_cache_path("/over/x.json", buf, 12), STOF_ERR_INVALID_ARG);
    CHECK_OK(tune_cache_path("/over/x.json", buf, 13));
    CHECK_STATUS(tune_cache_path(NULL, NULL, 10), STOF_ERR_INVALID_ARG);
    unsetenv("XDG_CACHE_HOME");
    unsetenv("HOME");
    CHECK_STATUS(tune_cache_path(NULL, buf, sizeof buf), STOF_ERR_INVALID_ARG);
    CHECK_OK(tune_cache_path("/o", buf, sizeof buf));
    if (home) {
        setenv("HOME", home, 1);
        free(home);
    }
}

/* ---------------------------------------------------------------- the file */

static void test_round_trip(test_rng *r)
{
    char path[512];
    path_in_tmp(path, sizeof path, "deep/er/tune.json");
    CHECK(load_count(path, "1.0.0") == 0, "missing file loads empty");
    struct stat st;
    CHECK(stat(path, &st) != 0, "load creates nothing");

    enum { N = 6 };
    tune_key keys[N];
    tune_plan plans[N];
    for (int i = 0; i < N; i++) {
        keys[i] = make_key(i, "1.0.0");
        plans[i] = make_plan(r);
        if (i == N - 1) {
            /* the extremes of exactness: 2^53 - 1 tokens, decimal fractions, zero */
            keys[i].token_bucket = ((int64_t)1 << 53) - 1;
            plans[i].default_ms = 0.1;
            plans[i].tuned_ms = 1e-300;
            plans[i].tune_s = 0;
        }
        CHECK_OK(tune_cache_store(path, &keys[i], &plans[i]));
    }
    char folder[512];
    path_in_tmp(folder, sizeof folder, "deep/er");
    mode_t mask = umask(022);
    umask(mask);
    CHECK(stat(folder, &st) == 0 && S_ISDIR(st.st_mode) && (st.st_mode & 0777) == (0755 & ~mask),
          "parent folders created with mode 0755");
    CHECK(stat(path, &st) == 0 && (st.st_mode & 0777) == (0644 & ~mask), "file mode 0644");

    tune_cache *c = NULL;
    CHECK_OK(tune_cache_load(path, "1.0.0", &c));
    CHECK(tune_cache_count(c) == N, "count %d", tune_cache_count(c));
    for (int i = 0; i < N; i++) {
        tune_plan got;
        memset(&got, 0x5a, sizeof got);
        CHECK(tune_cache_find(c, &keys[i], &got), "entry %d found", i);
        CHECK(plan_equal(&got, &plans[i]), "entry %d round trip", i);
    }
    tune_cache_free(c);

    /* replace one entry: same count, new plan */
    tune_plan repl = make_plan(r);
    repl.seg[TUNE_SEG_FFN2].algo = 99;
    CHECK_OK(tune_cache_store(path, &keys[2], &repl));
    CHECK_OK(tune_cache_load(path, "1.0.0", &c));
    tune_plan got;
    CHECK(tune_cache_count(c) == N, "count after replace %d", tune_cache_count(c));
    CHECK(tune_cache_find(c, &keys[2], &got) && plan_equal(&got, &repl), "replaced plan");
    CHECK(tune_cache_find(c, &keys[3], &got) && plan_equal(&got, &plans[3]), "neighbour kept");
    /* a miss on every key field */
    for (int f = 0; f < 13; f++) {
        tune_key k = keys[1];
        switch (f) {
        case 0: k.gpu[1]++; break;
        case 1: k.sm_count += 2; break;
        case 2: k.cc = 89; break;
        case 3: k.version[0] = '9'; break;
        case 4: k.hidden = 1; break;
        case 5: k.layers = 24; break;
        case 6: k.heads = 1; break;
        case 7: k.intermediate = 4096; break;
        case 8: k.dtype = 7; break;
        case 9: k.batch = 1000; break;
        case 10: k.len = 7; break;
        case 11: k.token_bucket = 1; break;
        case 12: snprintf(k.mask, sizeof k.mask, "causal"); break;
        }
        CHECK(!tune_cache_find(c, &k, NULL), "miss on field %d", f);
    }
    CHECK(!tune_cache_find(NULL, &keys[0], NULL) && tune_cache_count(NULL) == 0, "NULL cache");
    tune_cache_free(c);

    /* the file reads as intended: format, names, paths */
    char *text = read_text(path, NULL);
    cJSON *root = text ? cJSON_Parse(text) : NULL;
    const cJSON *e0 = cJSON_GetArrayItem(cJSON_GetObjectItem(root, "entries"), 0);
    const cJSON *seg =
        cJSON_GetArrayItem(cJSON_GetObjectItem(cJSON_GetObjectItem(e0, "plan"), "segments"), 1);
    CHECK(root && cJSON_GetNumberValue(cJSON_GetObjectItem(root, "format")) == TUNE_FILE_FORMAT,
          "format %d", TUNE_FILE_FORMAT);
    CHECK(seg && strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(seg, "name")), "out-proj") == 0 &&
              strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(seg, "path")),
                     plans[0].seg[1].path ? "stof" : "cublaslt") == 0,
          "segment 1 named out-proj with its path");
    CHECK(text && strchr(text, '\n') != NULL, "indented over lines");
    cJSON_Delete(root);
    free(text);

    /* no temporary left behind */
    DIR *d = opendir(folder);
    int others = 0;
    struct dirent *de;
    while (d && (de = readdir(d)) != NULL)
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..") &&
            strcmp(de->d_name, "tune.json") && strcmp(de->d_name, "tune.json.lock"))
            others++;
    if (d) closedir(d);
    CHECK(others == 0, "%d stray files", others);

    /* invalid arguments */
    tune_key bad = keys[0];
    CHECK_STATUS(tune_cache_store(path, &bad, NULL), STOF_ERR_INVALID_ARG);
    CHECK_STATUS(tune_cache_store(NULL, &bad, &plans[0]), STOF_ERR_INVALID_ARG);
    bad.hidden = -1;
    CHECK_STATUS(tune_cache_store(path, &bad, &plans[0]), STOF_ERR_INVALID_ARG);
    bad = keys[0];
    memset(bad.gpu, 'g', sizeof bad.gpu);
    CHECK_STATUS(tune_cache_store(path, &bad, &plans[0]), STOF_ERR_INVALID_ARG);
    tune_plan bp = plans[0];
    bp.seg[3].path = 2;
    CHECK_STATUS(tune_cache_store(path, &keys[0], &bp), STOF_ERR_INVALID_ARG);
    bp = plans[0];
    bp.tuned_ms = NAN;
    CHECK_STATUS(tune_cache_store(path, &keys[0], &bp), STOF_ERR_INVALID_ARG);
    CHECK_STATUS(tune_cache_load(path, NULL, &c), STOF_ERR_INVALID_ARG);
    CHECK_STATUS(tune_cache_load(path, "1.0.0", NULL), STOF_ERR_INVALID_ARG);
    CHECK(load_count(path, "1.0.0") == N, "file untouched by refused stores");
}

/* Writes a valid file of three entries and returns its text (caller frees). */
static char *valid_file(const char *path, test_rng *r)
{
    remove(path);
    for (int i = 0; i < 3; i++) {
        tune_key k = make_key(10 + i, "1.0.0");
        tune_plan p = make_plan(r);
        CHECK_OK(tune_cache_store(path, &k, &p));
    }
    return read_text(path, NULL);
}

typedef struct mutation {
    const char *what;
    int entry; /* entry to change */
    const char *object,
        *field; /* "key", "plan", "attention", "attention2", "seg0".."seg3" or "" (entry) */
    const char *json; /* new value; NULL removes the field */
} mutation;

static const mutation mutations[] = {
    {"hidden as string", 1, "key", "hidden", "\"768\""},
    {"hidden negative", 1, "key", "hidden", "-768"},
    {"hidden fractional", 1, "key", "hidden", "768.5"},
    {"hidden huge", 1, "key", "hidden", "1e300"},
    {"gpu missing", 1, "key", "gpu", NULL},
    {"gpu a number", 1, "key", "gpu", "5"},
    {"gpu too long", 1, "key", "gpu",
     "\"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
     "xxxxxxxxxx\""},
    {"token bucket past 2^53", 1, "key", "token_bucket", "18014398509481984"},
    {"key an array", 1, "", "key", "[]"},
    {"plan missing", 1, "", "plan", NULL},
    {"segments short", 1, "plan", "segments", "[{}]"},
    {"segments a string", 1, "plan", "segments", "\"qkv\""},
    {"segment name out of order", 1, "seg1", "name", "\"ffn1\""},
    {"segment path unknown", 1, "seg2", "path", "\"cutlass\""},
    {"segment path a number", 1, "seg2", "path", "1"},
    {"segment stages negative", 1, "seg3", "stages", "-2"},
    {"segment algo null", 1, "seg0", "algo", "null"},
    {"ffn_chain 2", 1, "plan", "ffn_chain", "2"},
    {"ffn_chain a string", 1, "plan", "ffn_chain", "\"yes\""},
    {"attention kernel 9", 1, "attention", "kernel", "9"},
    {"attention kernel 3 (the CPU)", 1, "attention", "kernel", "3"},
    {"attention missing", 1, "plan", "attention", NULL},
    {"attention2 kernel 9", 1, "attention2", "kernel", "9"},
    {"attention2 warps negative", 1, "attention2", "warps", "-4"},
    {"attention2 a number", 1, "plan", "attention2", "5"},
    {"tuned_ms negative", 1, "plan", "tuned_ms", "-1"},
    {"tune_s a bool", 1, "plan", "tune_s", "true"},
    {"entry a number", 1, NULL, NULL, "42"},
};

/* Applies m to the parsed file; the entry is replaced by json when object is NULL. */
static char *mutate(const char *text, const mutation *m)
{
    cJSON *root = cJSON_Parse(text);
    cJSON *entries = cJSON_GetObjectItem(root, "entries");
    cJSON *e = cJSON_GetArrayItem(entries, m->entry);
    cJSON *value = m->json ? cJSON_Parse(m->json) : NULL;
    if (!m->object) {
        cJSON_ReplaceItemInArray(entries, m->entry, value);
    } else {
        cJSON *o = e;
        if (strcmp(m->object, "key") == 0 || strcmp(m->object, "plan") == 0)
            o = cJSON_GetObjectItem(e, m->object);
        else if (strncmp(m->object, "attention", 9) == 0)
            o = cJSON_GetObjectItem(cJSON_GetObjectItem(e, "plan"), m->object);
        else if (strncmp(m->object, "seg", 3) == 0)
            o = cJSON_GetArrayItem(cJSON_GetObjectItem(cJSON_GetObjectItem(e, "plan"), "segments"),
                                   m->object[3] - '0');
        if (value)
            cJSON_ReplaceItemInObject(o, m->field, value);
        else
            cJSON_DeleteItemFromObject(o, m->field);
    }
    char *out = cJSON_Print(root);
    cJSON_Delete(root);
    return out;
}

static void test_corrupt(test_rng *r)
{
    char path[512];
    path_in_tmp(path, sizeof path, "corrupt.json");
    char log[512];
    path_in_tmp(log, sizeof log, "warnings.txt");
    char *good = valid_file(path, r);
    CHECK(good && load_count(path, "1.0.0") == 3, "valid file");
    if (!good) return;
    size_t len = strlen(good);

    /* truncated at every offset: nothing loads until the closing brace */
    size_t end = len;
    while (end > 0 && good[end - 1] != '}')
        end--;
    int bad_trunc = 0;
    stderr_to("/dev/null");
    for (size_t cut = 0; cut <= len; cut++) {
        write_text(path, good, cut);
        int n = load_count(path, "1.0.0");
        if (n != (cut >= end ? 3 : 0)) bad_trunc++;
    }
    stderr_restore();
    CHECK(bad_trunc == 0, "%d truncations gave the wrong count", bad_trunc);

    /* whole-file problems */
    static const char *const whole[] = {
        "",
        "garbage \x01\x02\xff",
        "[]",
        "null",
        "{\"format\":1}",
        "{\"format\":99,\"entries\":[]}",
        "{\"format\":\"1\",\"entries\":[]}",
        "{\"entries\":[]}",
        "{\"format\":1,\"entries\":{}}",
        "{\"format\":1,\"entries\":[]} x",
    };
    for (size_t i = 0; i < sizeof whole / sizeof whole[0]; i++) {
        write_text(path, whole[i], strlen(whole[i]));
        stderr_to(log);
        int n = load_count(path, "1.0.0");
        stderr_restore();
        char *said = read_text(log, NULL);
        CHECK(n == 0 && (i == 0 || (said && strstr(said, path) && strstr(said, "ignored"))),
              "whole-file case %zu: %d entries, warning \"%s\"", i, n, said ? said : "");
        free(said);
    }
    /* a right file under the wrong format number */
    char *wrong = malloc(len + 1);
    memcpy(wrong, good, len + 1);
    char *fmt = strstr(wrong, "\"format\":");
    if (fmt) {
        char *digit = fmt + strlen("\"format\":");
        while (*digit == ' ' || *digit == '\t')
            digit++;
        *digit = '7';
    }
    write_text(path, wrong, len);
    stderr_to("/dev/null");
    int nwrong = load_count(path, "1.0.0");
    stderr_restore();
    CHECK(fmt && nwrong == 0, "format 7 ignored");
    free(wrong);

    /* random bytes */
    char junk[4096];
    int bad_junk = 0;
    stderr_to("/dev/null");
    for (int i = 0; i < 50; i++) {
        size_t n = (size_t)test_rng_int(r, 1, sizeof junk);
        for (size_t j = 0; j < n; j++)
            junk[j] = (char)test_rng_int(r, 0, 255);
        write_text(path, junk, n);
        if (load_count(path, "1.0.0") != 0) bad_junk++;
    }
    stderr_restore();
    CHECK(bad_junk == 0, "%d random files loaded entries", bad_junk);

    /* one bad entry among good ones: the others still load */
    for (size_t i = 0; i < sizeof mutations / sizeof mutations[0]; i++) {
        char *text = mutate(good, &mutations[i]);
        write_text(path, text, strlen(text));
        tune_cache *c = NULL;
        stderr_to(log);
        stof_status st = tune_cache_load(path, "1.0.0", &c);
        stderr_restore();
        char *said = read_text(log, NULL);
        CHECK(st == STOF_OK && said && strstr(said, path) && strstr(said, "entry 1:"),
              "%s: warning \"%s\"", mutations[i].what, said ? said : "");
        free(said);
        tune_key k0 = make_key(10, "1.0.0"), k1 = make_key(11, "1.0.0"), k2 = make_key(12, "1.0.0");
        CHECK(tune_cache_count(c) == 2 && tune_cache_find(c, &k0, NULL) &&
                  !tune_cache_find(c, &k1, NULL) && tune_cache_find(c, &k2, NULL),
              "%s: count %d", mutations[i].what, tune_cache_count(c));
        tune_cache_free(c);
        free(text);
    }

    /* an entry written before "attention2" existed loads, its second kind on the selector */
    {
        static const mutation older = {"attention2 absent", 1, "plan", "attention2", NULL};
        char *text = mutate(good, &older);
        write_text(path, text, strlen(text));
        tune_cache *c = NULL;
        CHECK_OK(tune_cache_load(path, "1.0.0", &c));
        tune_key k1 = make_key(11, "1.0.0");
        tune_plan p;
        CHECK(tune_cache_count(c) == 3 && tune_cache_find(c, &k1, &p) &&
                  p.attn2_kernel == STOF_ATTN_AUTO && p.attn2_warps == 0 && p.attn2_block_m == 0,
              "an entry without attention2: count %d", tune_cache_count(c));
        tune_cache_free(c);
        free(text);
    }

    /* flipped bytes anywhere: OK and never more than there were */
    int bad_flip = 0;
    char *copy = malloc(len + 1);
    stderr_to("/dev/null");
    for (int i = 0; i < 400; i++) {
        memcpy(copy, good, len + 1);
        int flips = (int)test_rng_int(r, 1, 3);
        for (int f = 0; f < flips; f++)
            copy[test_rng_int(r, 0, (int64_t)len - 1)] = (char)test_rng_int(r, 1, 255);
        write_text(path, copy, len);
        int n = load_count(path, "1.0.0");
        if (n < 0 || n > 3) bad_flip++;
    }
    stderr_restore();
    CHECK(bad_flip == 0, "%d flipped files gave a bad count", bad_flip);
    free(copy);

    /* a store over a damaged file keeps going */
    write_text(path, "{\"format\":1,\"entries\":[", 23);
    tune_key k = make_key(1, "1.0.0");
    tune_plan p = make_plan(r);
    stderr_to("/dev/null");
    CHECK_OK(tune_cache_store(path, &k, &p));
    stderr_restore();
    CHECK(load_count(path, "1.0.0") == 1, "store over a damaged file");
    free(good);
}

static void test_stale(test_rng *r)
{
    char path[512];
    path_in_tmp(path, sizeof path, "stale.json");
    for (int i = 0; i < 4; i++) {
        tune_key k = make_key(i, "0.9.0");
        tune_plan p = make_plan(r);
        CHECK_OK(tune_cache_store(path, &k, &p));
    }
    CHECK(load_count(path, "0.9.0") == 4, "old version loads under its own version");
    char log[512];
    path_in_tmp(log, sizeof log, "stale-warnings.txt");
    stderr_to(log);
    int n = load_count(path, "1.0.0");
    stderr_restore();
    char *said = read_text(log, NULL);
    CHECK(n == 0 && said && strstr(said, path) && strstr(said, "4 entries"),
          "old entries skipped under a new version, warning \"%s\"", said ? said : "");
    free(said);
    tune_key k = make_key(7, "1.0.0");
    tune_plan p = make_plan(r);
    CHECK_OK(tune_cache_store(path, &k, &p));
    CHECK(load_count(path, "1.0.0") == 1, "new entry");
    CHECK(load_count(path, "0.9.0") == 0, "old entries dropped by the store");
}

static void test_io_errors(test_rng *r)
{
    char path[512];
    path_in_tmp(path, sizeof path, "adir");
    mkdir(path, 0755);
    tune_cache *c = (tune_cache *)path;
    CHECK_STATUS(tune_cache_load(path, "1.0.0", &c), STOF_ERR_IO);
    CHECK(c == NULL, "no cache on error");
    tune_key k = make_key(0, "1.0.0");
    tune_plan p = make_plan(r);
    CHECK_STATUS(tune_cache_store(path, &k, &p), STOF_ERR_IO);
    /* a file where a folder should be */
    char file[512], below[600];
    path_in_tmp(file, sizeof file, "plainfile");
    write_text(file, "x", 1);
    snprintf(below, sizeof below, "%s/sub/tune.json", file);
    CHECK_STATUS(tune_cache_store(below, &k, &p), STOF_ERR_IO);
    if (geteuid() != 0) {
        char locked[512];
        path_in_tmp(locked, sizeof locked, "noperm.json");
        CHECK_OK(tune_cache_store(locked, &k, &p));
        chmod(locked, 0);
        CHECK_STATUS(tune_cache_load(locked, "1.0.0", &c), STOF_ERR_IO);
        chmod(locked, 0644);
    }
}

/* ---------------------------------------------------------------- concurrency */

static void test_concurrent(void)
{
    enum { PROCS = 8, EACH = 10 };
    char path[512];
    path_in_tmp(path, sizeof path, "shared/tune.json");
    int gate[2];
    CHECK(pipe(gate) == 0, "pipe");
    pid_t pids[PROCS];
    fflush(NULL);
    for (int p = 0; p < PROCS; p++) {
        pids[p] = fork();
        if (pids[p] == 0) {
            close(gate[1]);
            char b;
            while (read(gate[0], &b, 1) < 0 && errno == EINTR) {
            }
            int failed = 0;
            test_rng r;
            test_rng_init(&r, 1000 + (uint64_t)p);
            for (int i = 0; i < EACH; i++) {
                tune_key k = make_key(p * EACH + i, "1.0.0");
                tune_plan plan = make_plan(&r);
                plan.seg[0].algo = p * EACH + i;
                if (tune_cache_store(path, &k, &plan) != STOF_OK) failed++;
            }
            _exit(failed ? 1 : 0);
        }
        CHECK(pids[p] > 0, "fork %d", p);
    }
    close(gate[0]);
    close(gate[1]); /* all children start now */

    /* read while they write: every version of the file is complete */
    int prev = 0, shrunk = 0, unparsable = 0;
    for (int i = 0; i < 200; i++) {
        size_t n;
        char *text = read_text(path, &n);
        if (text) {
            cJSON *root = cJSON_Parse(text);
            if (!root) unparsable++;
            cJSON_Delete(root);
            free(text);
        }
        int c = load_count(path, "1.0.0");
        if (c < prev) shrunk++;
        if (c > prev) prev = c;
        if (c == PROCS * EACH) break;
        nanosleep(&(struct timespec){0, 1000000}, NULL);
    }
    int bad_exit = 0;
    for (int p = 0; p < PROCS; p++) {
        int status = 0;
        if (pids[p] <= 0 || waitpid(pids[p], &status, 0) != pids[p] || !WIFEXITED(status) ||
            WEXITSTATUS(status) != 0)
            bad_exit++;
    }
    CHECK(bad_exit == 0, "%d writers failed", bad_exit);
    CHECK(unparsable == 0 && shrunk == 0, "readers saw %d broken files, %d shrinks", unparsable,
          shrunk);
    tune_cache *c = NULL;
    CHECK_OK(tune_cache_load(path, "1.0.0", &c));
    CHECK(tune_cache_count(c) == PROCS * EACH, "%d of %d entries", tune_cache_count(c),
          PROCS * EACH);
    int missing = 0;
    for (int i = 0; i < PROCS * EACH; i++) {
        tune_key k = make_key(i, "1.0.0");
        tune_plan got;
        if (!tune_cache_find(c, &k, &got) || got.seg[0].algo != i) missing++;
    }
    CHECK(missing == 0, "%d entries missing or wrong", missing);
    tune_cache_free(c);
}

/* ---------------------------------------------------------------- budgets */

static bool same(const int *a, const int *b, int n)
{
    return memcmp(a, b, sizeof(int) * (size_t)n) == 0;
}

static void test_budget_first(test_rng *r)
{
    int out[8];
    tune_budget_first(100, 0.3, 4, out);
    CHECK(same(out, (int[]){8, 8, 7, 7}, 4), "100*0.3 over 4: %d %d %d %d", out[0], out[1], out[2],
          out[3]);
    tune_budget_first(10, 0.25, 4, out);
    CHECK(same(out, (int[]){1, 1, 1, 0}, 4), "round(2.5) = 3 over 4");
    tune_budget_first(0, 0.5, 4, out);
    CHECK(same(out, (int[]){0, 0, 0, 0}, 4), "nothing to spread");
    tune_budget_first(7, 2.0, 3, out);
    CHECK(same(out, (int[]){3, 2, 2}, 3), "explore clamped to 1");
    int bad = 0;
    for (int i = 0; i < 2000; i++) {
        int total = (int)test_rng_int(r, 0, 5000), n = (int)test_rng_int(r, 1, 8);
        double explore = test_rng_float(r, 0, 1);
        tune_budget_first(total, explore, n, out);
        long want = lround(total * explore), sum = 0;
        for (int s = 0; s < n; s++) {
            sum += out[s];
            if (s > 0 && (out[s] > out[s - 1] || out[0] - out[s] > 1)) bad++;
        }
        if (sum != want) bad++;
    }
    CHECK(bad == 0, "%d first-round splits not even or not summing", bad);
}

static void test_budget_second(test_rng *r)
{
    int out[8];
    int big[4] = {1000, 1000, 1000, 1000};
    tune_budget_second(10, 4, (double[]){0, 0, 0, 0}, big, out);
    CHECK(same(out, (int[]){3, 3, 2, 2}, 4), "no gain: even %d %d %d %d", out[0], out[1], out[2],
          out[3]);
    tune_budget_second(10, 4, (double[]){-1, -3, 0, -0.5}, big, out);
    CHECK(same(out, (int[]){3, 3, 2, 2}, 4), "negative gains count as none");
    tune_budget_second(8, 4, (double[]){3, 1, 0, 0}, big, out);
    CHECK(same(out, (int[]){6, 2, 0, 0}, 4), "proportional %d %d %d %d", out[0], out[1], out[2],
          out[3]);
    tune_budget_second(10, 3, (double[]){2, 1, 1}, big, out);
    CHECK(same(out, (int[]){5, 3, 2}, 3), "largest remainder, tie to the earlier: %d %d %d", out[0],
          out[1], out[2]);
    tune_budget_second(10, 3, (double[]){0.2, 0.7, 0.1}, big, out);
    CHECK(same(out, (int[]){2, 7, 1}, 3), "exact proportions");
    tune_budget_second(11, 4, (double[]){10, 1, 1, 1}, (int[]){2, 100, 100, 100}, out);
    CHECK(same(out, (int[]){2, 3, 3, 3}, 4), "cap passes the excess on: %d %d %d %d", out[0],
          out[1], out[2], out[3]);
    tune_budget_second(12, 3, (double[]){6, 3, 1}, (int[]){100, 2, 100}, out);
    CHECK(same(out, (int[]){9, 2, 1}, 3), "excess by the same rule: %d %d %d", out[0], out[1],
          out[2]);
    tune_budget_second(9, 3, (double[]){5, 0, 0}, (int[]){3, 10, 10}, out);
    CHECK(same(out, (int[]){3, 3, 3}, 3), "gainers capped, rest even: %d %d %d", out[0], out[1],
          out[2]);
    tune_budget_second(100, 3, (double[]){1, 2, 3}, (int[]){1, 2, 3}, out);
    CHECK(same(out, (int[]){1, 2, 3}, 3), "budget beyond the caps");
    tune_budget_second(5, 3, (double[]){100, 1, 1}, (int[]){0, 10, 10}, out);
    CHECK(same(out, (int[]){0, 3, 2}, 3), "nothing left to try: %d %d %d", out[0], out[1], out[2]);
    tune_budget_second(0, 3, (double[]){1, 1, 1}, big, out);
    CHECK(same(out, (int[]){0, 0, 0}, 3), "no budget");
    tune_budget_second(6, 2, NULL, NULL, out);
    CHECK(same(out, (int[]){3, 3}, 2), "no gains, no caps");
    int many[100];
    int bad_many = 0;
    tune_budget_second(250, 100, NULL, NULL, many);
    for (int s = 0; s < 100; s++)
        bad_many += many[s] != (s < 50 ? 3 : 2);
    tune_budget_first(250, 1.0, 100, many);
    for (int s = 0; s < 100; s++)
        bad_many += many[s] != (s < 50 ? 3 : 2);
    CHECK(bad_many == 0, "100 segments: %d wrong", bad_many);

    int bad_sum = 0, bad_cap = 0, bad_prop = 0, bad_order = 0;
    for (int i = 0; i < 20000; i++) {
        int n = (int)test_rng_int(r, 1, 8), remaining = (int)test_rng_int(r, 0, 300);
        double gain[8];
        int cap[8];
        long sum_cap = 0, sum = 0;
        double gsum = 0;
        for (int s = 0; s < n; s++) {
            gain[s] =
                test_rng_int(r, 0, 3) == 0 ? -test_rng_float(r, 0, 2) : test_rng_float(r, 0, 10);
            if (test_rng_int(r, 0, 9) == 0) gain[s] = 0;
            cap[s] = (int)test_rng_int(r, 0, 80);
            sum_cap += cap[s];
            if (gain[s] > 0) gsum += gain[s];
        }
        tune_budget_second(remaining, n, gain, cap, out);
        for (int s = 0; s < n; s++) {
            sum += out[s];
            if (out[s] < 0 || out[s] > cap[s]) bad_cap++;
        }
        if (sum != (remaining < sum_cap ? remaining : sum_cap)) bad_sum++;
        for (int s = 0; s < n; s++) {
            if (out[s] >= cap[s]) continue;
            double g = gain[s] > 0 ? gain[s] : 0;
            /* capping only moves budget toward the uncapped: never below the first share */
            if (gsum > 0 && out[s] < (int)floor(remaining * g / gsum - 1e-9)) bad_prop++;
            for (int t = 0; t < n; t++) {
                double h = gain[t] > 0 ? gain[t] : 0;
                if (t != s && out[t] < cap[t] && g >= h && out[s] < out[t] - 1) bad_order++;
            }
        }
    }
    CHECK(bad_sum == 0 && bad_cap == 0, "%d wrong sums, %d past a cap", bad_sum, bad_cap);
    CHECK(bad_prop == 0 && bad_order == 0, "%d below their share, %d out of order", bad_prop,
          bad_order);
}

int main(void)
{
    uint64_t seed = test_seed();
    test_rng r;
    test_rng_init(&r, seed);
    snprintf(tmpdir, sizeof tmpdir, "%s/stof_tune_XXXXXX",
             getenv("TMPDIR") && getenv("TMPDIR")[0] ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(tmpdir)) {
        fprintf(stderr, "mkdtemp %s: %s\n", tmpdir, strerror(errno));
        return 1;
    }
    CHECK(strcmp(tune_segment_name(TUNE_SEG_OUT), "out-proj") == 0 &&
              strcmp(tune_segment_name(TUNE_SEG_FFN2), "ffn2") == 0 &&
              strcmp(tune_segment_name((tune_segment)9), "?") == 0,
          "segment names");
    tune_plan d;
    memset(&d, 0x7f, sizeof d);
    tune_plan_default(&d);
    CHECK(d.seg[3].path == 0 && d.seg[2].algo == 0 && d.ffn_chain == 0 && d.attn_kernel == 0 &&
              d.tuned_ms == 0,
          "default plan");

    test_buckets(&r);
    test_signature();
    test_key_equal();
    test_path();
    test_round_trip(&r);
    test_corrupt(&r);
    test_stale(&r);
    test_io_errors(&r);
    test_concurrent();
    test_budget_first(&r);
    test_budget_second(&r);

    remove_tree(tmpdir);
    return test_finish("test_tune_cache");
}
