/*
 * safetensors.c — validating reader for .safetensors files.
 *
 * Every value read from the file is checked before it is used: header length
 * (non-zero, bounded, inside the file), JSON that parses with nothing but
 * padding after it, known dtypes, shapes whose element count does not
 * overflow, integer-valued offsets inside the data section that match the
 * shape and dtype, no duplicate names and no two tensors sharing bytes. The
 * header is copied into a NUL-terminated buffer before parsing so the JSON
 * library can never read past it, whatever the input.
 */
#include "io/safetensors.h"

#include <cjson/cJSON.h>

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* Largest integer a JSON number (a double) holds exactly. */
#define JSON_MAX_EXACT_INT 9007199254740992.0

static const struct {
    const char *name;
    size_t size;
} dtype_table[ST_DTYPE_COUNT] = {
    [ST_BOOL] = {"BOOL", 1},       [ST_U8] = {"U8", 1},           [ST_I8] = {"I8", 1},
    [ST_F8_E5M2] = {"F8_E5M2", 1}, [ST_F8_E4M3] = {"F8_E4M3", 1}, [ST_I16] = {"I16", 2},
    [ST_U16] = {"U16", 2},         [ST_F16] = {"F16", 2},         [ST_BF16] = {"BF16", 2},
    [ST_I32] = {"I32", 4},         [ST_U32] = {"U32", 4},         [ST_F32] = {"F32", 4},
    [ST_I64] = {"I64", 8},         [ST_U64] = {"U64", 8},         [ST_F64] = {"F64", 8},
};

const char *stof_safetensors_dtype_name(safetensors_dtype dtype)
{
    return (unsigned)dtype < ST_DTYPE_COUNT ? dtype_table[dtype].name : "unknown";
}

size_t stof_safetensors_dtype_size(safetensors_dtype dtype)
{
    return (unsigned)dtype < ST_DTYPE_COUNT ? dtype_table[dtype].size : 0;
}

void stof_safetensors_shape_str(const int64_t *shape, int ndim, char *buf, size_t cap)
{
    if (!cap) return;
    size_t used = 0;
    buf[0] = '\0';
    for (int d = -1; d <= ndim && used < cap; d++) {
        int n;
        if (d < 0)
            n = snprintf(buf + used, cap - used, "[");
        else if (d == ndim)
            n = snprintf(buf + used, cap - used, "]");
        else
            n = snprintf(buf + used, cap - used, "%s%lld", d ? ", " : "", (long long)shape[d]);
        if (n < 0) break;
        used += (size_t)n;
    }
}

/* ---- messages: names come from the file, so they are shortened and
 * stripped of control bytes before they reach a message. */

static void printable_name(const char *s, char *out, size_t cap)
{
    size_t n = 0, limit = cap - 4;
    for (; s[n] && n < limit; n++) {
        unsigned char c = (unsigned char)s[n];
        out[n] = c < 0x20 || c == 0x7f ? '?' : (char)c;
    }
    if (s[n]) {
        memcpy(out + n, "...", 3);
        n += 3;
    }
    out[n] = '\0';
}

static stof_status format_error(const char *file, const char *tensor, const char *fmt, ...)
    STOF_PRINTF(3, 4);

static stof_status format_error(const char *file, const char *tensor, const char *fmt, ...)
{
    char detail[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    if (!tensor) return stof_error(STOF_ERR_FORMAT, "%s: %s", file, detail);
    char shown[160];
    printable_name(tensor, shown, sizeof shown);
    return stof_error(STOF_ERR_FORMAT, "%s: tensor '%s': %s", file, shown, detail);
}

/* A JSON value in a few words, for messages. */
static void describe_json(const cJSON *v, char *buf, size_t cap)
{
    if (!v)
        snprintf(buf, cap, "missing");
    else if (cJSON_IsNumber(v))
        snprintf(buf, cap, "%.17g", v->valuedouble);
    else if (cJSON_IsString(v)) {
        char shown[48];
        printable_name(v->valuestring, shown, sizeof shown);
        snprintf(buf, cap, "\"%s\"", shown);
    } else if (cJSON_IsArray(v))
        snprintf(buf, cap, "an array");
    else if (cJSON_IsObject(v))
        snprintf(buf, cap, "an object");
    else if (cJSON_IsBool(v))
        snprintf(buf, cap, "%s", cJSON_IsTrue(v) ? "true" : "false");
    else
        snprintf(buf, cap, "null");
}

/* A non-negative integer-valued number that a double holds exactly. */
static bool json_exact_uint(const cJSON *v, uint64_t *out)
{
    if (!cJSON_IsNumber(v)) return false;
    double d = v->valuedouble;
    if (!(d >= 0.0 && d <= JSON_MAX_EXACT_INT) || d != floor(d)) return false;
    *out = (uint64_t)d;
    return true;
}

static bool dtype_from_name(const char *s, safetensors_dtype *out)
{
    for (int i = 0; i < ST_DTYPE_COUNT; i++) {
        if (strcmp(s, dtype_table[i].name) == 0) {
            *out = (safetensors_dtype)i;
            return true;
        }
    }
    return false;
}

/* ---- header entries */

static stof_status parse_metadata(const char *file, const cJSON *meta)
{
    if (!cJSON_IsObject(meta)) {
        char got[64];
        describe_json(meta, got, sizeof got);
        return format_error(file, NULL, "\"__metadata__\" must be an object of strings, got %s",
                            got);
    }
    for (const cJSON *m = meta->child; m; m = m->next) {
        if (!cJSON_IsString(m)) {
            char key[80], got[64];
            printable_name(m->string ? m->string : "", key, sizeof key);
            describe_json(m, got, sizeof got);
            return format_error(file, NULL, "\"__metadata__\" entry '%s' must be a string, got %s",
                                key, got);
        }
    }
    return STOF_OK;
}

static stof_status parse_shape(const char *file, const char *name, const cJSON *shape,
                               safetensors_tensor *t)
{
    char got[64];
    if (!cJSON_IsArray(shape)) {
        describe_json(shape, got, sizeof got);
        return format_error(file, name, "\"shape\" must be an array of integers, got %s", got);
    }
    int ndim = cJSON_GetArraySize(shape);
    if (ndim > SAFETENSORS_MAX_DIMS)
        return format_error(file, name, "rank %d exceeds the supported %d", ndim,
                            SAFETENSORS_MAX_DIMS);
    t->ndim = ndim;
    bool has_zero = false;
    int d = 0;
    for (const cJSON *e = shape->child; e; e = e->next, d++) {
        uint64_t v;
        if (!json_exact_uint(e, &v)) {
            describe_json(e, got, sizeof got);
            return format_error(file, name, "shape[%d] = %s is not an integer in [0, 2^53]", d,
                                got);
        }
        t->shape[d] = (int64_t)v;
        has_zero |= v == 0;
    }
    /* With a zero dimension the count is 0 however large the others are. */
    int64_t numel = 1;
    for (d = 0; d < ndim && !has_zero; d++) {
        if (numel > INT64_MAX / t->shape[d]) {
            char s[256];
            stof_safetensors_shape_str(t->shape, ndim, s, sizeof s);
            return format_error(file, name, "shape %s has an element count that overflows 64 bits",
                                s);
        }
        numel *= t->shape[d];
    }
    t->numel = has_zero ? 0 : numel;
    return STOF_OK;
}

static stof_status parse_offsets(const char *file, const char *name, const cJSON *offs,
                                 uint64_t data_bytes, safetensors_tensor *t)
{
    char got[64];
    if (!cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2) {
        describe_json(offs, got, sizeof got);
        if (cJSON_IsArray(offs))
            snprintf(got, sizeof got, "an array of %d values", cJSON_GetArraySize(offs));
        return format_error(file, name, "\"data_offsets\" must be [begin, end], got %s", got);
    }
    const cJSON *b = offs->child, *e = b->next;
    uint64_t begin, end;
    if (!json_exact_uint(b, &begin)) {
        describe_json(b, got, sizeof got);
        return format_error(file, name, "data_offsets begin = %s is not an integer in [0, 2^53]",
                            got);
    }
    if (!json_exact_uint(e, &end)) {
        describe_json(e, got, sizeof got);
        return format_error(file, name, "data_offsets end = %s is not an integer in [0, 2^53]",
                            got);
    }
    if (begin > end)
        return format_error(file, name, "data_offsets [%llu, %llu]: begin is past end",
                            (unsigned long long)begin, (unsigned long long)end);
    if (end > data_bytes)
        return format_error(
            file, name, "data_offsets [%llu, %llu] run past the data section (%llu bytes)",
            (unsigned long long)begin, (unsigned long long)end, (unsigned long long)data_bytes);
    uint64_t esize = dtype_table[t->dtype].size;
    /* numel <= 2^63 and esize <= 8, so compare without forming the product. */
    uint64_t span = end - begin;
    if (span % esize != 0 || span / esize != (uint64_t)t->numel) {
        char s[256];
        stof_safetensors_shape_str(t->shape, t->ndim, s, sizeof s);
        return format_error(file, name,
                            "data_offsets [%llu, %llu] hold %llu bytes, but shape %s of %s needs "
                            "%lld x %llu bytes",
                            (unsigned long long)begin, (unsigned long long)end,
                            (unsigned long long)span, s, dtype_table[t->dtype].name,
                            (long long)t->numel, (unsigned long long)esize);
    }
    t->begin = begin;
    t->end = end;
    return STOF_OK;
}

static stof_status parse_tensor(const char *file, const cJSON *entry, uint64_t data_bytes,
                                safetensors_tensor *t)
{
    const char *name = entry->string;
    char got[64];
    if (!cJSON_IsObject(entry)) {
        describe_json(entry, got, sizeof got);
        return format_error(file, name, "entry must be an object, got %s", got);
    }
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(entry, "dtype");
    if (!cJSON_IsString(dt)) {
        describe_json(dt, got, sizeof got);
        return format_error(file, name, "\"dtype\" must be a string, got %s", got);
    }
    if (!dtype_from_name(dt->valuestring, &t->dtype)) {
        describe_json(dt, got, sizeof got);
        return format_error(file, name, "unknown dtype %s", got);
    }
    STOF_TRY(parse_shape(file, name, cJSON_GetObjectItemCaseSensitive(entry, "shape"), t));
    STOF_TRY(parse_offsets(file, name, cJSON_GetObjectItemCaseSensitive(entry, "data_offsets"),
                           data_bytes, t));
    t->name = strdup(name);
    if (!t->name) return stof_error(STOF_ERR_OOM, "%s: out of memory copying a tensor name", file);
    return STOF_OK;
}

/* ---- whole-file checks */

static int cmp_by_name(const void *a, const void *b)
{
    return strcmp(((const safetensors_tensor *)a)->name, ((const safetensors_tensor *)b)->name);
}

static int cmp_by_begin(const void *a, const void *b)
{
    const safetensors_tensor *x = *(const safetensors_tensor *const *)a;
    const safetensors_tensor *y = *(const safetensors_tensor *const *)b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

static stof_status check_unique_names(const safetensors_file *f)
{
    for (int i = 1; i < f->n_tensors; i++)
        if (strcmp(f->tensors[i - 1].name, f->tensors[i].name) == 0)
            return format_error(f->name, f->tensors[i].name, "appears more than once");
    return STOF_OK;
}

/* Empty tensors own no bytes, so they never overlap anything. */
static stof_status check_no_overlap(const safetensors_file *f)
{
    if (f->n_tensors < 2) return STOF_OK;
    safetensors_tensor **order;
    STOF_TRY(stof_host_alloc((size_t)f->n_tensors * sizeof *order, (void **)&order));
    for (int i = 0; i < f->n_tensors; i++)
        order[i] = &f->tensors[i];
    qsort(order, (size_t)f->n_tensors, sizeof *order, cmp_by_begin);
    const safetensors_tensor *last = NULL; /* non-empty tensor reaching furthest so far */
    stof_status st = STOF_OK;
    for (int i = 0; i < f->n_tensors && st == STOF_OK; i++) {
        const safetensors_tensor *t = order[i];
        if (t->begin == t->end) continue;
        if (last && t->begin < last->end) {
            char other[160];
            printable_name(last->name, other, sizeof other);
            st = format_error(f->name, t->name,
                              "data_offsets [%llu, %llu] overlap tensor '%s' at [%llu, %llu]",
                              (unsigned long long)t->begin, (unsigned long long)t->end, other,
                              (unsigned long long)last->begin, (unsigned long long)last->end);
        }
        if (!last || t->end > last->end) last = t;
    }
    free(order);
    return st;
}

static bool all_json_space(const char *p, const char *end)
{
    for (; p < end; p++)
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') return false;
    return true;
}

static stof_status read_header_length(const uint8_t *buf, size_t size, const char *name,
                                      uint64_t *out)
{
    if (size < 8)
        return format_error(name, NULL, "file is %zu bytes, too short for the 8-byte header length",
                            size);
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = n << 8 | buf[i];
    if (n == 0) return format_error(name, NULL, "header length is 0");
    if (n > SAFETENSORS_MAX_HEADER)
        return format_error(name, NULL, "header length %llu exceeds the limit of %u bytes",
                            (unsigned long long)n, SAFETENSORS_MAX_HEADER);
    if (n > size - 8)
        return format_error(name, NULL,
                            "header length %llu runs past the end of the file (%zu bytes follow "
                            "the length field)",
                            (unsigned long long)n, size - 8);
    *out = n;
    return STOF_OK;
}

/* Parses the JSON header into a tree; the caller frees it with cJSON_Delete. */
static stof_status parse_header_json(const uint8_t *hdr, size_t n, const char *name, cJSON **out)
{
    const void *nul = memchr(hdr, '\0', n);
    if (nul)
        return format_error(name, NULL, "header holds a NUL byte at offset %zu",
                            (size_t)((const uint8_t *)nul - hdr) + 8);
    char *text;
    STOF_TRY(stof_host_alloc(n + 1, (void **)&text));
    memcpy(text, hdr, n);
    text[n] = '\0';
    const char *stop = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, n, &stop, 0);
    stof_status st = STOF_OK;
    if (!root) {
        size_t at = stop && stop >= text ? (size_t)(stop - text) : 0;
        st = format_error(name, NULL, "header is not valid JSON (error near header byte %zu)", at);
    } else if (!all_json_space(stop, text + n)) {
        st = format_error(name, NULL, "header has non-space bytes after the JSON at byte %zu",
                          (size_t)(stop - text));
    } else if (!cJSON_IsObject(root)) {
        char got[64];
        describe_json(root, got, sizeof got);
        st = format_error(name, NULL, "header must be a JSON object, got %s", got);
    }
    free(text);
    if (st != STOF_OK) {
        cJSON_Delete(root);
        return st;
    }
    *out = root;
    return STOF_OK;
}

static stof_status fill_tensors(safetensors_file *f, const cJSON *root)
{
    int count = 0;
    for (const cJSON *e = root->child; e; e = e->next)
        if (strcmp(e->string, "__metadata__") != 0) count++;
    if (count > 0)
        STOF_TRY(stof_host_calloc((size_t)count, sizeof *f->tensors, (void **)&f->tensors));
    for (const cJSON *e = root->child; e; e = e->next) {
        if (strcmp(e->string, "__metadata__") == 0) {
            STOF_TRY(parse_metadata(f->name, e));
            continue;
        }
        /* Counted as it fills so that close frees exactly the names made. */
        safetensors_tensor *t = &f->tensors[f->n_tensors];
        stof_status st = parse_tensor(f->name, e, f->data_bytes, t);
        if (t->name) f->n_tensors++;
        STOF_TRY(st);
    }
    for (int i = 0; i < f->n_tensors; i++)
        f->tensors[i].data = f->data + f->tensors[i].begin;
    if (f->n_tensors > 1) qsort(f->tensors, (size_t)f->n_tensors, sizeof *f->tensors, cmp_by_name);
    STOF_TRY(check_unique_names(f));
    return check_no_overlap(f);
}

stof_status stof_safetensors_parse(const void *buf, size_t size, const char *name,
                                   safetensors_file **out)
{
    STOF_REQUIRE(out, STOF_ERR_INVALID_ARG, "safetensors: out is NULL");
    *out = NULL;
    STOF_REQUIRE(buf || size == 0, STOF_ERR_INVALID_ARG, "safetensors: buffer is NULL");
    if (!name) name = "safetensors";
    const uint8_t *bytes = buf;
    uint64_t hlen = 0;
    STOF_TRY(read_header_length(bytes, size, name, &hlen));
    cJSON *root = NULL;
    STOF_TRY(parse_header_json(bytes + 8, (size_t)hlen, name, &root));

    safetensors_file *f = NULL;
    stof_status st = stof_host_calloc(1, sizeof *f, (void **)&f);
    if (st == STOF_OK) {
        f->name = strdup(name);
        f->data = bytes + 8 + hlen;
        f->data_bytes = (uint64_t)size - 8 - hlen;
        st = f->name ? fill_tensors(f, root)
                     : stof_error(STOF_ERR_OOM, "%s: out of memory copying the name", name);
    }
    cJSON_Delete(root);
    if (st != STOF_OK) {
        stof_safetensors_close(f);
        return st;
    }
    *out = f;
    return STOF_OK;
}

/* Maps the file read-only; falls back to reading it when it cannot be mapped. */
static stof_status load_file_bytes(const char *path, int fd, size_t size, void **data, int *is_mmap)
{
    *is_mmap = 0;
    *data = NULL;
    if (size == 0) return STOF_OK;
    void *m = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m != MAP_FAILED) {
        *data = m;
        *is_mmap = 1;
        return STOF_OK;
    }
    uint8_t *p;
    STOF_TRY(stof_host_alloc(size, (void **)&p));
    size_t got = 0;
    while (got < size) {
        ssize_t r = read(fd, p + got, size - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            free(p);
            return stof_error(STOF_ERR_IO, "%s: read failed after %zu of %zu bytes: %s", path, got,
                              size, r < 0 ? strerror(errno) : "unexpected end of file");
        }
        got += (size_t)r;
    }
    *data = p;
    return STOF_OK;
}

stof_status stof_safetensors_open(const char *path, safetensors_file **out)
{
    STOF_REQUIRE(out, STOF_ERR_INVALID_ARG, "safetensors: out is NULL");
    *out = NULL;
    STOF_REQUIRE(path, STOF_ERR_INVALID_ARG, "safetensors: path is NULL");
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    STOF_REQUIRE(fd >= 0, STOF_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        int err = errno;
        close(fd);
        return stof_error(STOF_ERR_IO, "%s: not a readable regular file%s%s", path, err ? ": " : "",
                          err ? strerror(err) : "");
    }
    if ((uint64_t)sb.st_size > (uint64_t)SIZE_MAX) {
        close(fd);
        return stof_error(STOF_ERR_IO, "%s: %lld bytes do not fit in memory", path,
                          (long long)sb.st_size);
    }
    size_t size = (size_t)sb.st_size;
    void *bytes;
    int is_mmap;
    stof_status st = load_file_bytes(path, fd, size, &bytes, &is_mmap);
    close(fd);
    STOF_TRY(st);
    st = stof_safetensors_parse(bytes ? bytes : "", size, path, out);
    if (st != STOF_OK) {
        if (is_mmap)
            munmap(bytes, size);
        else
            free(bytes);
        return st;
    }
    (*out)->map = bytes;
    (*out)->map_bytes = size;
    (*out)->map_is_mmap = is_mmap;
    return STOF_OK;
}

void stof_safetensors_close(safetensors_file *f)
{
    if (!f) return;
    for (int i = 0; i < f->n_tensors; i++)
        free(f->tensors[i].name);
    free(f->tensors);
    free(f->name);
    if (f->map) {
        if (f->map_is_mmap)
            munmap(f->map, f->map_bytes);
        else
            free(f->map);
    }
    free(f);
}

const safetensors_tensor *stof_safetensors_find(const safetensors_file *f, const char *name)
{
    if (!f || !name || f->n_tensors == 0) return NULL;
    safetensors_tensor key;
    memset(&key, 0, sizeof key);
    key.name = (char *)name;
    return bsearch(&key, f->tensors, (size_t)f->n_tensors, sizeof key, cmp_by_name);
}
