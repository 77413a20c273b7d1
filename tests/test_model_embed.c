/*
 * test_model_embed.c — sentence embeddings end to end: text -> stof tokenizer ->
 * encoder -> pooled, normalised vectors, against sentence-transformers.
 *
 * The reference is tests/data/embed_golden.jsonl (gen_embed_golden.py: the real
 * all-MiniLM-L6-v2, CPU fp32). One binary, three ctest entries:
 *   (no argument)  the CPU backend, through the public API and through `stof embed`
 *                  (cmd_embed linked in, its stdout captured): cosine >= 0.9999 on
 *                  every sentence; skipped (77) when models/all-MiniLM-L6-v2 is absent;
 *   --gpu          the GPU backend in f16 (cosine >= 0.999) and bf16, and a sparse
 *                  mask against the CPU with the same mask; skipped without a GPU;
 *   --errors       bad input through the CLI and the API on small folders built from
 *                  tests/data/tiny_bert (no real model needed): missing files, wrong
 *                  dims, unknown activation, over-long --max-length, bad options.
 */
#include "cli.h"
#include "testlib.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

int cmd_embed(cli_args *a);

#ifndef STOF_TEST_DATA_DIR
#error "STOF_TEST_DATA_DIR must name tests/data"
#endif

#define GOLDEN STOF_TEST_DATA_DIR "/embed_golden.jsonl"
#define TINY_DIR STOF_TEST_DATA_DIR "/tiny_bert"
#define BIG_VOCAB STOF_TEST_DATA_DIR "/tokens_golden_vocab/vocab.txt"
#define MODEL_DIR STOF_MODELS_DIR "/all-MiniLM-L6-v2"

#define CPU_MIN_COS 0.9999
#define F16_MIN_COS 0.999
#define BF16_MIN_COS 0.99

static char tmp_root[512];

/* ------------------------------------------------------------------ files */

#define MAX_CREATED 256
static char *created[MAX_CREATED]; /* removed in reverse order at the end */
static int n_created;

static void remember(const char *path)
{
    if (n_created < MAX_CREATED) created[n_created++] = strdup(path);
}

static void remove_created(void)
{
    while (n_created > 0) {
        char *p = created[--n_created];
        remove(p);
        free(p);
    }
    remove(tmp_root);
}

static void path_join(char *out, size_t cap, const char *a, const char *b)
{
    int n = snprintf(out, cap, "%s/%s", a, b);
    if (n < 0 || (size_t)n >= cap) {
        fprintf(stderr, "path %s/%s too long\n", a, b);
        exit(1);
    }
}

static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    while (buf) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap) break;
        char *bigger = realloc(buf, 2 * cap + 1);
        if (!bigger) free(buf);
        buf = bigger;
        cap *= 2;
    }
    fclose(f);
    if (!buf) return NULL;
    buf[n] = '\0';
    *len = n;
    return buf;
}

static void write_file(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    if (!f || (len && fwrite(data, 1, len, f) != len)) {
        fprintf(stderr, "cannot write %s: %s\n", path, strerror(errno));
        exit(1);
    }
    fclose(f);
    remember(path);
}

static void write_string(const char *path, const char *text)
{
    write_file(path, text, strlen(text));
}

/* A fresh folder tmp_root/name (or dir/name). */
static void make_dir(char *out, size_t cap, const char *parent, const char *name)
{
    path_join(out, cap, parent, name);
    if (mkdir(out, 0700) != 0) {
        fprintf(stderr, "cannot create %s: %s\n", out, strerror(errno));
        exit(1);
    }
    remember(out);
}

static void copy_file(const char *src, const char *dst, size_t keep)
{
    size_t len;
    char *data = read_file(src, &len);
    if (!data) {
        fprintf(stderr, "cannot read %s\n", src);
        exit(1);
    }
    write_file(dst, data, keep && keep < len ? keep : len);
    free(data);
}

/* text with the first occurrence of from replaced by to (heap). */
static char *replace(const char *text, const char *from, const char *to)
{
    const char *at = strstr(text, from);
    if (!at) {
        fprintf(stderr, "'%s' not found\n", from);
        exit(1);
    }
    size_t head = (size_t)(at - text), n = strlen(text) - strlen(from) + strlen(to);
    char *out = malloc(n + 1);
    memcpy(out, text, head);
    strcpy(out + head, to);
    strcat(out, at + strlen(from));
    return out;
}

/* ------------------------------------------------------------------ the CLI in process */

typedef struct cli_result {
    int rc;
    char *out, *err;
    size_t out_len;
} cli_result;

static void free_result(cli_result *r)
{
    free(r->out);
    free(r->err);
}

/* Runs `stof embed ARGS...` through cmd_embed with stdout and stderr captured. */
static cli_result run_embed(int nargs, char **args)
{
    char out_path[600], err_path[600];
    path_join(out_path, sizeof out_path, tmp_root, "stdout.txt");
    path_join(err_path, sizeof err_path, tmp_root, "stderr.txt");
    char **argv = calloc((size_t)nargs + 3, sizeof *argv);
    argv[0] = "stof";
    argv[1] = "embed";
    memcpy(argv + 2, args, (size_t)nargs * sizeof *argv);
    cli_args a = {.argc = nargs + 2, .argv = argv, .pos = 2, .cmd = "embed"};

    fflush(stdout);
    fflush(stderr);
    int saved_out = dup(1), saved_err = dup(2);
    FILE *fo = fopen(out_path, "wb"), *fe = fopen(err_path, "wb");
    if (saved_out < 0 || saved_err < 0 || !fo || !fe) {
        fprintf(stderr, "cannot capture the output\n");
        exit(1);
    }
    dup2(fileno(fo), 1);
    dup2(fileno(fe), 2);
    cli_result r = {0};
    r.rc = cmd_embed(&a);
    fflush(stdout);
    fflush(stderr);
    dup2(saved_out, 1);
    dup2(saved_err, 2);
    close(saved_out);
    close(saved_err);
    fclose(fo);
    fclose(fe);
    size_t err_len;
    r.out = read_file(out_path, &r.out_len);
    r.err = read_file(err_path, &err_len);
    remove(out_path);
    remove(err_path);
    free(argv);
    if (!r.out || !r.err) {
        fprintf(stderr, "cannot read the captured output\n");
        exit(1);
    }
    return r;
}

/* A CLI run that must fail with exit code rc and a message holding needle. */
static void expect_cli_error(int nargs, char **args, int rc, const char *needle, const char *what)
{
    cli_result r = run_embed(nargs, args);
    CHECK(r.rc == rc && strstr(r.err, needle) != NULL && r.out_len == 0,
          "%s: exit %d (want %d), stdout %zu bytes, stderr \"%s\" should contain \"%s\"", what,
          r.rc, rc, r.out_len, r.err, needle);
    free_result(&r);
}

/* One output line of `stof embed`. */
typedef struct embed_line {
    char *text;
    float *emb;
    int dim;
} embed_line;

static void free_lines(embed_line *l, int n)
{
    for (int i = 0; i < n; i++) {
        free(l[i].text);
        free(l[i].emb);
    }
    free(l);
}

/* Parses the JSON lines of out; *n gets the count, -1 when a line is malformed. */
static embed_line *parse_lines(const char *out, size_t len, int *n)
{
    int cap = 16;
    embed_line *lines = calloc((size_t)cap, sizeof *lines);
    *n = 0;
    for (const char *p = out; p < out + len;) {
        const char *nl = memchr(p, '\n', (size_t)(out + len - p));
        size_t l = nl ? (size_t)(nl - p) : (size_t)(out + len - p);
        cJSON *j = cJSON_ParseWithLength(p, l);
        const cJSON *text = cJSON_GetObjectItemCaseSensitive(j, "text");
        const cJSON *emb = cJSON_GetObjectItemCaseSensitive(j, "embedding");
        if (!cJSON_IsString(text) || !cJSON_IsArray(emb) || !nl) {
            cJSON_Delete(j);
            free_lines(lines, *n);
            *n = -1;
            return NULL;
        }
        if (*n == cap) {
            cap *= 2;
            lines = realloc(lines, (size_t)cap * sizeof *lines);
        }
        embed_line *e = &lines[(*n)++];
        e->text = strdup(text->valuestring);
        e->dim = cJSON_GetArraySize(emb);
        e->emb = malloc(((size_t)e->dim + 1) * sizeof *e->emb);
        int i = 0;
        const cJSON *v;
        cJSON_ArrayForEach(v, emb) e->emb[i++] = cJSON_IsNumber(v) ? (float)v->valuedouble : NAN;
        cJSON_Delete(j);
        p += l + 1;
    }
    return lines;
}

/* ------------------------------------------------------------------ vectors */

/* Cosine similarity; NaN anywhere gives -2 so that no threshold passes. */
static double cosine(const float *a, const float *b, int n)
{
    double ab = 0, aa = 0, bb = 0;
    for (int i = 0; i < n; i++) {
        ab += (double)a[i] * b[i];
        aa += (double)a[i] * a[i];
        bb += (double)b[i] * b[i];
    }
    double c = ab / sqrt(aa * bb);
    return isnan(c) ? -2.0 : c;
}

static double norm2(const float *a, int n)
{
    double s = 0;
    for (int i = 0; i < n; i++)
        s += (double)a[i] * a[i];
    return sqrt(s);
}

/* ------------------------------------------------------------------ golden data */

typedef struct golden {
    char *text;
    int tokens; /* ids sentence-transformers fed the model */
    float *emb;
} golden;

static golden *goldens;
static int n_goldens, golden_dim, golden_max_len;

static bool parse_golden_line(const char *line, size_t len)
{
    cJSON *j = cJSON_ParseWithLength(line, len);
    const cJSON *meta = cJSON_GetObjectItemCaseSensitive(j, "meta");
    if (meta) {
        const cJSON *ml = cJSON_GetObjectItemCaseSensitive(meta, "max_seq_length");
        golden_max_len = cJSON_IsNumber(ml) ? ml->valueint : 0;
        cJSON_Delete(j);
        return true;
    }
    const cJSON *text = cJSON_GetObjectItemCaseSensitive(j, "text");
    const cJSON *tokens = cJSON_GetObjectItemCaseSensitive(j, "tokens");
    const cJSON *emb = cJSON_GetObjectItemCaseSensitive(j, "embedding");
    bool ok = cJSON_IsString(text) && cJSON_IsNumber(tokens) && cJSON_IsArray(emb) &&
              cJSON_GetArraySize(emb) > 0 &&
              (golden_dim == 0 || cJSON_GetArraySize(emb) == golden_dim);
    if (ok) {
        golden *g = &goldens[n_goldens++];
        golden_dim = cJSON_GetArraySize(emb);
        g->text = strdup(text->valuestring);
        g->tokens = tokens->valueint;
        g->emb = malloc((size_t)golden_dim * sizeof *g->emb);
        int i = 0;
        const cJSON *v;
        cJSON_ArrayForEach(v, emb) g->emb[i++] = (float)v->valuedouble;
    }
    cJSON_Delete(j);
    return ok;
}

static bool load_goldens(void)
{
    size_t len;
    char *buf = read_file(GOLDEN, &len);
    if (!buf) return false;
    goldens = calloc(len / 64 + 1, sizeof *goldens); /* a line is far longer than 64 bytes */
    bool ok = true;
    for (char *p = buf; p < buf + len && ok;) {
        char *nl = memchr(p, '\n', (size_t)(buf + len - p));
        size_t l = nl ? (size_t)(nl - p) : (size_t)(buf + len - p);
        if (l) ok = parse_golden_line(p, l);
        p += l + 1;
    }
    free(buf);
    CHECK(ok && n_goldens >= 50 && golden_max_len > 0,
          "%s: %d embeddings of dim %d, max_seq_length %d (malformed line: %s)", GOLDEN, n_goldens,
          golden_dim, golden_max_len, ok ? "no" : "yes");
    return ok && n_goldens > 0;
}

static void free_goldens(void)
{
    for (int i = 0; i < n_goldens; i++) {
        free(goldens[i].text);
        free(goldens[i].emb);
    }
    free(goldens);
}

/* ------------------------------------------------------------------ the API path */

/* Pooled embeddings of texts[0..n), batch texts per forward, through the public
 * tokenizer and model calls; lengths (optional) gets the ids per text. */
static stof_status embed_api(stof_model *m, const stof_tokenizer *tok, int max_len,
                             const stof_mask_spec *mask, char **texts, int n, int batch, float *out,
                             int32_t *lengths)
{
    stof_model_info info;
    stof_status st = stof_model_get_info(m, &info);
    if (st != STOF_OK) return st;
    int32_t *ids = malloc((size_t)batch * (size_t)max_len * sizeof *ids);
    int32_t *lens = malloc((size_t)batch * sizeof *lens);
    stof_forward_params fp = stof_forward_default_params();
    fp.mask = mask;
    if (!ids || !lens) st = STOF_ERR_OOM;
    for (int first = 0; first < n && st == STOF_OK; first += batch) {
        int count = n - first < batch ? n - first : batch, L = 0;
        st = stof_tokenize_batch(tok, (const char *const *)texts + first, NULL, count, max_len, ids,
                                 (size_t)batch * (size_t)max_len, lens, &L);
        if (st != STOF_OK) break;
        if (lengths) memcpy(lengths + first, lens, (size_t)count * sizeof *lens);
        int64_t sh_ids[2] = {count, L}, sh_len[1] = {count}, sh_out[2] = {count, info.hidden};
        stof_tensor t_ids = stof_tensor_make(ids, STOF_I32, STOF_MEM_HOST, 2, sh_ids);
        stof_tensor t_len = stof_tensor_make(lens, STOF_I32, STOF_MEM_HOST, 1, sh_len);
        float *dst = out + (size_t)first * (size_t)info.hidden;
        test_poison_f32(dst, (int64_t)count * info.hidden);
        stof_tensor t_out = stof_tensor_make(dst, STOF_F32, STOF_MEM_HOST, 2, sh_out);
        st = stof_model_forward(m, &fp, &t_ids, &t_len, NULL, NULL, &t_out);
    }
    free(ids);
    free(lens);
    return st;
}

static char **golden_texts(void)
{
    char **t = malloc((size_t)n_goldens * sizeof *t);
    for (int i = 0; i < n_goldens; i++)
        t[i] = goldens[i].text;
    return t;
}

/* Every golden sentence through the API on ctx in dtype; the worst cosine. */
static double check_golden_api(stof_ctx *ctx, stof_dtype dtype, double min_cos, const char *what)
{
    stof_model_params mp = stof_model_default_params();
    mp.dtype = dtype;
    stof_model *m = NULL;
    stof_tokenizer *tok = NULL;
    stof_model_info info;
    CHECK_OK(stof_model_load(ctx, MODEL_DIR, &mp, &m));
    CHECK_OK(stof_tokenizer_open(MODEL_DIR, &tok));
    if (!m || !tok || stof_model_get_info(m, &info) != STOF_OK) {
        stof_model_destroy(m);
        stof_tokenizer_destroy(tok);
        return -2;
    }
    int max_len = stof_tokenizer_max_length(tok, info.max_positions);
    CHECK(max_len == golden_max_len, "max length %d, sentence-transformers used %d", max_len,
          golden_max_len);
    CHECK(info.hidden == golden_dim && info.normalize == 1 && info.pooling == STOF_POOL_MEAN,
          "hidden %d (golden %d), normalize %d, pooling %d", info.hidden, golden_dim,
          info.normalize, (int)info.pooling);
    float *out = malloc((size_t)n_goldens * (size_t)info.hidden * sizeof *out);
    int32_t *lens = malloc((size_t)n_goldens * sizeof *lens);
    char **texts = golden_texts();
    double worst = 2;
    CHECK_OK(embed_api(m, tok, max_len, NULL, texts, n_goldens, 8, out, lens));
    for (int i = 0; i < n_goldens && info.hidden == golden_dim; i++) {
        const float *e = out + (size_t)i * (size_t)info.hidden;
        double c = cosine(e, goldens[i].emb, golden_dim);
        if (c < worst) worst = c;
        CHECK(c >= min_cos, "%s: sentence %d (\"%.60s\"): cosine %.7f < %.4f", what, i,
              goldens[i].text, c, min_cos);
        CHECK(lens[i] == goldens[i].tokens, "%s: sentence %d: %d ids, sentence-transformers %d",
              what, i, lens[i], goldens[i].tokens);
        CHECK(fabs(norm2(e, golden_dim) - 1.0) < 1e-3, "%s: sentence %d: norm %.6f", what, i,
              norm2(e, golden_dim));
    }
    printf("%s: %d sentences, worst cosine %.9f\n", what, n_goldens, worst);
    free(texts);
    free(out);
    free(lens);
    stof_model_destroy(m);
    stof_tokenizer_destroy(tok);
    return worst;
}

/* ------------------------------------------------------------------ the CLI path */

/* `stof embed` on every golden sentence; lines in input order, cosine >= min_cos. */
static void check_golden_cli(const char *device, const char *batch, double min_cos)
{
    int nargs = 7 + n_goldens;
    char **args = malloc((size_t)nargs * sizeof *args);
    char *fixed[] = {"--model", MODEL_DIR,     "--device", (char *)device,
                     "--batch", (char *)batch, "--"};
    memcpy(args, fixed, sizeof fixed);
    for (int i = 0; i < n_goldens; i++)
        args[7 + i] = goldens[i].text;
    cli_result r = run_embed(nargs, args);
    CHECK(r.rc == 0, "stof embed --device %s: exit %d: %s", device, r.rc, r.err);
    int n;
    embed_line *lines = parse_lines(r.out, r.out_len, &n);
    CHECK(n == n_goldens, "stof embed --device %s: %d lines for %d texts", device, n, n_goldens);
    double worst = 2;
    for (int i = 0; i < n && n == n_goldens; i++) {
        CHECK(strcmp(lines[i].text, goldens[i].text) == 0, "line %d is \"%.40s\", want \"%.40s\"",
              i, lines[i].text, goldens[i].text);
        double c =
            lines[i].dim == golden_dim ? cosine(lines[i].emb, goldens[i].emb, golden_dim) : -2;
        if (c < worst) worst = c;
        CHECK(c >= min_cos, "stof embed --device %s --batch %s: sentence %d: cosine %.7f", device,
              batch, i, c);
    }
    printf("stof embed --device %s --batch %s: worst cosine %.9f\n", device, batch, worst);
    if (n > 0) free_lines(lines, n);
    free_result(&r);
    free(args);
}

/* --file: blank lines skipped, CRLF accepted, order kept. */
static void check_cli_file(void)
{
    int pick[] = {0, 5, 6, 12}; /* single-line sentences */
    char *text = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&text, &len);
    fprintf(mem, "\n   \n");
    for (size_t i = 0; i < sizeof pick / sizeof pick[0]; i++)
        fprintf(mem, "%s%s\n\t\n", goldens[pick[i]].text, i % 2 ? "\r" : "");
    fclose(mem);
    char path[600];
    path_join(path, sizeof path, tmp_root, "texts.txt");
    write_file(path, text, len);
    free(text);
    char *args[] = {"--model", MODEL_DIR, "--device", "cpu", "--file", path};
    cli_result r = run_embed(6, args);
    CHECK(r.rc == 0, "--file: exit %d: %s", r.rc, r.err);
    int n;
    embed_line *lines = parse_lines(r.out, r.out_len, &n);
    CHECK(n == 4, "--file: %d lines for 4 non-blank ones", n);
    for (int i = 0; i < n && n == 4; i++) {
        const golden *g = &goldens[pick[i]];
        CHECK(strcmp(lines[i].text, g->text) == 0, "--file line %d: \"%s\"", i, lines[i].text);
        CHECK(cosine(lines[i].emb, g->emb, golden_dim) >= CPU_MIN_COS,
              "--file line %d: cosine %.7f", i, cosine(lines[i].emb, g->emb, golden_dim));
    }
    if (n > 0) free_lines(lines, n);
    free_result(&r);
}

/* Embeddings of a few texts through the CLI with extra options; NULL on failure. */
static embed_line *cli_embed(char **extra, int n_extra, char **texts, int n_texts)
{
    char *args[64];
    int nargs = 0;
    args[nargs++] = "--model";
    args[nargs++] = MODEL_DIR;
    for (int i = 0; i < n_extra; i++)
        args[nargs++] = extra[i];
    args[nargs++] = "--";
    for (int i = 0; i < n_texts; i++)
        args[nargs++] = texts[i];
    cli_result r = run_embed(nargs, args);
    int n;
    embed_line *lines = parse_lines(r.out, r.out_len, &n);
    CHECK(r.rc == 0 && n == n_texts, "stof embed %s ...: exit %d, %d lines for %d texts: %s",
          n_extra ? extra[0] : "", r.rc, n, n_texts, r.err);
    free_result(&r);
    if (lines && n != n_texts) {
        free_lines(lines, n);
        lines = NULL;
    }
    return lines;
}

/* A wide window equals dense attention; a narrow one changes long texts but
 * still gives unit vectors. */
static void check_cli_mask(const char *device)
{
    int longest = 0;
    for (int i = 0; i < n_goldens; i++)
        if (goldens[i].tokens > goldens[longest].tokens) longest = i;
    char *texts[] = {goldens[1].text, goldens[longest].text};
    char *wide[] = {"--device", (char *)device, "--mask", "window:512"};
    char *narrow[] = {"--device", (char *)device, "--mask", "window:2,global:1"};
    embed_line *w = cli_embed(wide, 4, texts, 2), *nr = cli_embed(narrow, 4, texts, 2);
    if (w && nr) {
        double min_cos = strcmp(device, "cpu") == 0 ? CPU_MIN_COS : F16_MIN_COS;
        CHECK(cosine(w[1].emb, goldens[longest].emb, golden_dim) >= min_cos,
              "--mask window:512 on %s: cosine %.7f with dense", device,
              cosine(w[1].emb, goldens[longest].emb, golden_dim));
        double c = cosine(nr[1].emb, goldens[longest].emb, golden_dim);
        CHECK(c < 0.999 && c > 0.0,
              "--mask window:2,global:1 on %s: cosine %.7f with dense "
              "(the mask seems ignored)",
              device, c);
        CHECK(fabs(norm2(nr[1].emb, golden_dim) - 1.0) < 1e-3, "masked embedding norm %.6f",
              norm2(nr[1].emb, golden_dim));
    }
    if (w) free_lines(w, 2);
    if (nr) free_lines(nr, 2);
}

/* Invalid UTF-8 reads as replacement characters, which clean-up drops: the JSON
 * stays valid and the embedding is that of the text without them. */
static void check_cli_invalid_utf8(void)
{
    char *texts[] = {"caf\xc3\xa9 \xff\xfe\xc3 ok \xed\xa0\x80!", "caf\xc3\xa9  ok !"};
    char *opts[] = {"--device", "cpu"};
    embed_line *l = cli_embed(opts, 2, texts, 2);
    if (l) {
        CHECK(strstr(l[0].text, "\xef\xbf\xbd") != NULL, "invalid bytes print as U+FFFD: \"%s\"",
              l[0].text);
        CHECK(cosine(l[0].emb, l[1].emb, l[0].dim) > 0.999999,
              "invalid UTF-8 changed the embedding (cosine %.7f)",
              cosine(l[0].emb, l[1].emb, l[0].dim));
        free_lines(l, 2);
    }
}

/* --max-length truncates like the API with the same length; --batch does not matter. */
static void check_cli_max_length(void)
{
    int longest = 0;
    for (int i = 0; i < n_goldens; i++)
        if (goldens[i].tokens > goldens[longest].tokens) longest = i;
    char *texts[] = {goldens[longest].text, goldens[2].text, goldens[n_goldens - 1].text};
    char *opts16[] = {"--device", "cpu", "--max-length", "16", "--batch", "2"};
    char *opts16b[] = {"--device", "cpu", "--max-length", "16", "--batch", "1"};
    embed_line *a = cli_embed(opts16, 6, texts, 3), *b = cli_embed(opts16b, 6, texts, 3);
    stof_ctx_params cp = stof_ctx_default_params();
    cp.device = STOF_DEVICE_CPU;
    stof_ctx *ctx = NULL;
    stof_model *m = NULL;
    stof_tokenizer *tok = NULL;
    float ref[3 * 1024];
    CHECK_OK(stof_ctx_create(&cp, &ctx));
    CHECK_OK(stof_model_load(ctx, MODEL_DIR, NULL, &m));
    CHECK_OK(stof_tokenizer_open(MODEL_DIR, &tok));
    if (a && b && m && tok && golden_dim <= 1024 &&
        embed_api(m, tok, 16, NULL, texts, 3, 3, ref, NULL) == STOF_OK) {
        for (int i = 0; i < 3; i++) {
            const float *r = ref + (size_t)i * (size_t)golden_dim;
            CHECK(cosine(a[i].emb, r, golden_dim) > 0.999999 &&
                      cosine(b[i].emb, r, golden_dim) > 0.999999,
                  "--max-length 16, text %d: cosines %.7f %.7f with the API", i,
                  cosine(a[i].emb, r, golden_dim), cosine(b[i].emb, r, golden_dim));
        }
        CHECK(cosine(a[0].emb, goldens[longest].emb, golden_dim) < 0.999,
              "--max-length 16 did not truncate (cosine %.7f with 256 tokens)",
              cosine(a[0].emb, goldens[longest].emb, golden_dim));
    }
    if (a) free_lines(a, 3);
    if (b) free_lines(b, 3);
    stof_tokenizer_destroy(tok);
    stof_model_destroy(m);
    stof_ctx_destroy(ctx);
}

static int run_cpu(void)
{
    stof_ctx_params cp = stof_ctx_default_params();
    cp.device = STOF_DEVICE_CPU;
    stof_ctx *ctx = NULL;
    CHECK_OK(stof_ctx_create(&cp, &ctx));
    if (ctx) check_golden_api(ctx, STOF_F32, CPU_MIN_COS, "API cpu f32");
    stof_ctx_destroy(ctx);
    check_golden_cli("cpu", "5", CPU_MIN_COS);
    check_cli_file();
    check_cli_mask("cpu");
    check_cli_invalid_utf8();
    check_cli_max_length();
    return test_finish("test_model_embed");
}

/* The GPU with a sparse mask against the CPU with the same mask. */
static void check_gpu_mask_vs_cpu(void)
{
    const char *spec_text = "window:8,global:2";
    stof_mask_spec *spec = NULL;
    CHECK_OK(stof_mask_spec_parse(spec_text, &spec));
    float *out[2] = {NULL, NULL};
    char **texts = golden_texts();
    for (int d = 0; d < 2 && spec; d++) {
        stof_ctx_params cp = stof_ctx_default_params();
        cp.device = d ? STOF_DEVICE_GPU : STOF_DEVICE_CPU;
        stof_ctx *ctx = NULL;
        stof_model *m = NULL;
        stof_tokenizer *tok = NULL;
        CHECK_OK(stof_ctx_create(&cp, &ctx));
        if (ctx) CHECK_OK(stof_model_load(ctx, MODEL_DIR, NULL, &m));
        CHECK_OK(stof_tokenizer_open(MODEL_DIR, &tok));
        out[d] = malloc((size_t)n_goldens * (size_t)golden_dim * sizeof *out[d]);
        if (m && tok)
            CHECK_OK(embed_api(m, tok, golden_max_len, spec, texts, n_goldens, 16, out[d], NULL));
        stof_tokenizer_destroy(tok);
        stof_model_destroy(m);
        stof_ctx_destroy(ctx);
    }
    double worst = 2;
    for (int i = 0; i < n_goldens && out[0] && out[1]; i++) {
        size_t off = (size_t)i * (size_t)golden_dim;
        double c = cosine(out[1] + off, out[0] + off, golden_dim);
        if (c < worst) worst = c;
        CHECK(c >= F16_MIN_COS, "mask %s, sentence %d: GPU f16 vs CPU cosine %.7f", spec_text, i,
              c);
    }
    printf("mask %s: GPU f16 vs CPU worst cosine %.9f\n", spec_text, worst);
    free(out[0]);
    free(out[1]);
    free(texts);
    stof_mask_spec_destroy(spec);
}

static int run_gpu(void)
{
    stof_ctx_params cp = stof_ctx_default_params();
    cp.device = STOF_DEVICE_GPU;
    stof_ctx *ctx = NULL;
    CHECK_OK(stof_ctx_create(&cp, &ctx));
    if (ctx) {
        check_golden_api(ctx, STOF_F16, F16_MIN_COS, "API gpu f16");
        check_golden_api(ctx, STOF_BF16, BF16_MIN_COS, "API gpu bf16");
    }
    stof_ctx_destroy(ctx);
    check_golden_cli("gpu", "32", F16_MIN_COS);
    check_golden_cli("gpu", "3", F16_MIN_COS);
    check_cli_mask("gpu");
    check_gpu_mask_vs_cpu();
    return test_finish("test_model_embed_gpu");
}

/* ------------------------------------------------------------------ bad input */

enum {
    TINY_WEIGHTS = 1,
    TINY_TRUNCATED = 2,
    TINY_VOCAB = 4,
    TINY_BIG_VOCAB = 8,
    TINY_NORMALIZE = 16
};

/* A vocabulary of exactly the tiny model's 100 entries. */
static void write_tiny_vocab(const char *path)
{
    static const char *const words[] = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the",
                                        "cat",   "sat",   "on",    "mat",   "a",      "dog",
                                        "is",    "long",  "text",  ".",     ",",      "!",
                                        "?",     "##s",   "##ing", "run",   "word"};
    char buf[4096];
    size_t n = 0;
    for (int i = 0; i < 100; i++) {
        int w = (int)(sizeof words / sizeof words[0]);
        n += (size_t)(i < w ? snprintf(buf + n, sizeof buf - n, "%s\n", words[i])
                            : snprintf(buf + n, sizeof buf - n, "w%d\n", i));
    }
    write_file(path, buf, n);
}

/* tmp_root/name: the tiny BERT's config (or config_text) with the parts asked for. */
static void make_tiny(char *dir, size_t cap, const char *name, const char *config_text, int parts)
{
    char p[700], src[700];
    make_dir(dir, cap, tmp_root, name);
    path_join(p, sizeof p, dir, "config.json");
    path_join(src, sizeof src, TINY_DIR, "config.json");
    if (config_text)
        write_string(p, config_text);
    else
        copy_file(src, p, 0);
    path_join(src, sizeof src, TINY_DIR, "model.safetensors");
    path_join(p, sizeof p, dir, "model.safetensors");
    if (parts & TINY_WEIGHTS) copy_file(src, p, 0);
    if (parts & TINY_TRUNCATED) copy_file(src, p, 5000);
    path_join(p, sizeof p, dir, "vocab.txt");
    if (parts & TINY_VOCAB) write_tiny_vocab(p);
    if (parts & TINY_BIG_VOCAB) copy_file(BIG_VOCAB, p, 0);
    if (parts & TINY_NORMALIZE) {
        char pool[700];
        path_join(p, sizeof p, dir, "modules.json");
        write_string(p, "[{\"idx\": 0, \"name\": \"0\", \"path\": \"\", \"type\": "
                        "\"sentence_transformers.models.Transformer\"},\n"
                        " {\"idx\": 1, \"name\": \"1\", \"path\": \"1_Pooling\", \"type\": "
                        "\"sentence_transformers.models.Pooling\"},\n"
                        " {\"idx\": 2, \"name\": \"2\", \"path\": \"2_Normalize\", \"type\": "
                        "\"sentence_transformers.models.Normalize\"}]\n");
        make_dir(pool, sizeof pool, dir, "1_Pooling");
        path_join(p, sizeof p, pool, "config.json");
        write_string(p, "{\"word_embedding_dimension\": 64, \"pooling_mode_mean_tokens\": true}\n");
    }
}

/* A call that must fail with status and a message holding needle. */
#define CHECK_FAIL(call, status, needle)                                                           \
    do {                                                                                           \
        stof_status cf_st_ = (call);                                                               \
        CHECK(cf_st_ == (status) && strstr(stof_last_error(), (needle)) != NULL,                   \
              "%s -> %s (want %s), message \"%s\" should contain \"%s\"", #call,                   \
              stof_status_str(cf_st_), stof_status_str(status), stof_last_error(), (needle));      \
    } while (0)

static void check_option_errors(const char *good)
{
    char missing[600];
    path_join(missing, sizeof missing, tmp_root, "no_such_model");
    char *a1[] = {"--model", missing, "--device", "cpu", "hello"};
    expect_cli_error(5, a1, 1, "no_such_model", "a missing model folder");
    char *a2[] = {"--model", (char *)good};
    expect_cli_error(2, a2, 2, "no text", "no text");
    char *a3[] = {"hello"};
    expect_cli_error(1, a3, 2, "--model", "no --model");
    char *a4[] = {"--model", (char *)good, "--batch", "0", "hi"};
    expect_cli_error(5, a4, 2, "--batch", "--batch 0");
    char *a5[] = {"--model", (char *)good, "--max-length", "1", "hi"};
    expect_cli_error(5, a5, 2, "--max-length", "--max-length 1");
    char *a6[] = {"--model", (char *)good, "--frobnicate", "hi"};
    expect_cli_error(4, a6, 2, "unknown option", "an unknown option");
    char *a7[] = {"--model", (char *)good, "--device", "tpu", "hi"};
    expect_cli_error(5, a7, 2, "tpu", "an unknown device");
    char *a8[] = {"--model", (char *)good, "--file", "x.txt", "hi"};
    expect_cli_error(5, a8, 2, "not both", "TEXT and --file");
    char *a9[] = {"--model", (char *)good, "--file", missing};
    expect_cli_error(4, a9, 1, "no_such_model", "a missing --file");
    char blank[600];
    path_join(blank, sizeof blank, tmp_root, "blank.txt");
    write_string(blank, "\n  \n\t\r\n");
    char *a10[] = {"--model", (char *)good, "--device", "cpu", "--file", blank};
    expect_cli_error(6, a10, 1, "no text", "a --file of blank lines");
    char *a11[] = {"--model", (char *)good, "--device", "cpu", "--mask", "window:", "hi"};
    expect_cli_error(7, a11, 2, "--mask", "a malformed --mask");
    char *a12[] = {"--model", (char *)good, "--device", "cpu", "--max-length", "33", "hi"};
    expect_cli_error(7, a12, 2, "exceeds the model's 32 positions", "--max-length over positions");
    char *a13[] = {"--model", (char *)good, "--batch"};
    expect_cli_error(3, a13, 2, "needs a value", "an option without its value");
    if (!test_have_gpu()) {
        char *a14[] = {"--model", (char *)good, "--device", "gpu", "hi"};
        expect_cli_error(5, a14, 1, "STOF_ERR", "--device gpu without a GPU");
    }
}

static void check_folder_errors(void)
{
    char dir[600];
    stof_ctx_params cp = stof_ctx_default_params();
    cp.device = STOF_DEVICE_CPU;
    stof_ctx *ctx = NULL;
    stof_model *m = NULL;
    stof_tokenizer *tok = NULL;
    CHECK_OK(stof_ctx_create(&cp, &ctx));

    make_tiny(dir, sizeof dir, "no_vocab", NULL, TINY_WEIGHTS);
    char *a1[] = {"--model", dir, "--device", "cpu", "hello"};
    expect_cli_error(5, a1, 1, "vocab.txt", "a folder without vocabulary");
    CHECK_FAIL(stof_tokenizer_open(dir, &tok), STOF_ERR_IO, "vocab.txt");

    make_tiny(dir, sizeof dir, "no_weights", NULL, TINY_VOCAB);
    expect_cli_error(5, a1, 1, "model.safetensors", "a folder without weights");
    CHECK_FAIL(stof_model_load(ctx, dir, NULL, &m), STOF_ERR_IO, "model.safetensors");

    make_tiny(dir, sizeof dir, "truncated", NULL, TINY_TRUNCATED | TINY_VOCAB);
    expect_cli_error(5, a1, 1, "STOF_ERR_FORMAT", "truncated weights");
    CHECK(stof_model_load(ctx, dir, NULL, &m) == STOF_ERR_FORMAT && m == NULL,
          "truncated weights: %s", stof_last_error());

    size_t len;
    char *config = read_file(TINY_DIR "/config.json", &len);
    CHECK(config != NULL, "cannot read %s", TINY_DIR "/config.json");
    if (config) {
        char *wide = replace(config, "\"hidden_size\": 64", "\"hidden_size\": 96");
        make_tiny(dir, sizeof dir, "wrong_dims", wide, TINY_WEIGHTS | TINY_VOCAB);
        expect_cli_error(5, a1, 1, "expected", "a config whose hidden size disagrees");
        CHECK_FAIL(stof_model_load(ctx, dir, NULL, &m), STOF_ERR_FORMAT, "has shape");
        free(wide);

        char *act = replace(config, "\"hidden_act\": \"gelu\"", "\"hidden_act\": \"swishy\"");
        make_tiny(dir, sizeof dir, "bad_act", act, TINY_WEIGHTS | TINY_VOCAB);
        expect_cli_error(5, a1, 1, "swishy", "an unknown activation");
        CHECK_FAIL(stof_model_load(ctx, dir, NULL, &m), STOF_ERR_UNSUPPORTED, "swishy");
        free(act);
        free(config);
    }

    /* A vocabulary larger than the model's embedding table: the ids are caught. */
    make_tiny(dir, sizeof dir, "big_vocab", NULL, TINY_WEIGHTS | TINY_BIG_VOCAB);
    char *a2[] = {"--model", dir, "--device", "cpu", "zebra crossing"};
    expect_cli_error(5, a2, 1, "outside the vocabulary", "ids beyond the model's vocabulary");
    stof_ctx_destroy(ctx);
}

/* A working tiny folder: text longer than the 32 positions is truncated, mean
 * pooling without Normalize is not unit length, with Normalize it is. */
static void check_tiny_runs(const char *plain, const char *normed)
{
    static char long_text[4096];
    long_text[0] = '\0';
    for (int i = 0; i < 60; i++)
        strcat(long_text, i % 3 ? "the cat sat on the mat . " : "a dog is running ! ");
    char *texts[] = {long_text, "the cat", "", "w42 w77 w99 unknownword"};
    char *ap[] = {"--model", (char *)plain, "--device", "cpu",    "--batch", "3",
                  "--",      texts[0],      texts[1],   texts[2], texts[3]};
    char *an[] = {"--model", (char *)normed, "--device", "cpu",   "--",
                  texts[0],  texts[1],       texts[2],   texts[3]};
    cli_result rp = run_embed(11, ap), rn = run_embed(9, an);
    int np, nn;
    embed_line *lp = parse_lines(rp.out, rp.out_len, &np);
    embed_line *ln = parse_lines(rn.out, rn.out_len, &nn);
    CHECK(rp.rc == 0 && np == 4, "tiny folder: exit %d, %d lines: %s", rp.rc, np, rp.err);
    CHECK(rn.rc == 0 && nn == 4, "tiny folder with Normalize: exit %d, %d lines: %s", rn.rc, nn,
          rn.err);
    for (int i = 0; i < 4 && np == 4 && nn == 4; i++) {
        double n = norm2(lp[i].emb, lp[i].dim);
        CHECK(lp[i].dim == 64 && isfinite(n) && fabs(n - 1.0) > 1e-2,
              "tiny text %d: dim %d, norm %.6f (no Normalize module: not unit length)", i,
              lp[i].dim, n);
        CHECK(fabs(norm2(ln[i].emb, ln[i].dim) - 1.0) < 1e-5,
              "tiny text %d with Normalize: norm %.7f", i, norm2(ln[i].emb, ln[i].dim));
        CHECK(cosine(lp[i].emb, ln[i].emb, 64) > 0.999999,
              "tiny text %d: Normalize changed the "
              "direction (cosine %.7f)",
              i, cosine(lp[i].emb, ln[i].emb, 64));
    }
    if (np > 0) free_lines(lp, np);
    if (nn > 0) free_lines(ln, nn);
    free_result(&rp);
    free_result(&rn);
}

static int run_errors(void)
{
    char plain[600], normed[600];
    make_tiny(plain, sizeof plain, "tiny", NULL, TINY_WEIGHTS | TINY_VOCAB);
    make_tiny(normed, sizeof normed, "tiny_normalized", NULL,
              TINY_WEIGHTS | TINY_VOCAB | TINY_NORMALIZE);
    check_tiny_runs(plain, normed);
    check_option_errors(plain);
    check_folder_errors();
    stof_tokenizer *tok = NULL;
    CHECK_FAIL(stof_tokenizer_open(NULL, &tok), STOF_ERR_INVALID_ARG, "no model folder");
    CHECK(stof_tokenizer_max_length(NULL, 512) == 0, "max length of no tokenizer");
    CHECK_OK(stof_tokenizer_open(plain, &tok));
    if (tok) {
        const char *texts[] = {"the cat sat", "a"};
        int32_t ids[10], lens[2];
        int L = 0;
        CHECK(stof_tokenizer_max_length(tok, 32) == 32 && stof_tokenizer_max_length(tok, 0) == 512,
              "tiny max lengths %d, %d", stof_tokenizer_max_length(tok, 32),
              stof_tokenizer_max_length(tok, 0));
        CHECK_FAIL(stof_tokenize_batch(tok, texts, NULL, 2, 8, ids, 9, lens, &L),
                   STOF_ERR_INVALID_ARG, "ids holds 9");
        CHECK_FAIL(stof_tokenize_batch(tok, texts, NULL, 2, 1, ids, 8, lens, &L),
                   STOF_ERR_INVALID_ARG, "max_len 1");
        CHECK_FAIL(stof_tokenize_batch(tok, texts, NULL, 0, 8, ids, 8, lens, &L),
                   STOF_ERR_INVALID_ARG, "batch 0");
        CHECK_OK(stof_tokenize_batch(tok, texts, NULL, 2, 8, ids, 10, lens, &L));
        /* [CLS]=2 the=5 cat=6 sat=7 [SEP]=3 / [CLS] a=10 [SEP] [PAD]=0 [PAD] */
        static const int32_t want[10] = {2, 5, 6, 7, 3, 2, 10, 3, 0, 0};
        CHECK(L == 5 && lens[0] == 5 && lens[1] == 3 && memcmp(ids, want, sizeof want) == 0,
              "tiny batch: L %d, lengths %d %d, ids %d %d %d %d %d / %d %d %d %d %d", L, lens[0],
              lens[1], ids[0], ids[1], ids[2], ids[3], ids[4], ids[5], ids[6], ids[7], ids[8],
              ids[9]);
        stof_tokenizer_destroy(tok);
    }
    return test_finish("test_model_embed_errors");
}

/* ------------------------------------------------------------------ main */

static bool model_present(void)
{
    struct stat st;
    return stat(MODEL_DIR "/model.safetensors", &st) == 0 && stat(MODEL_DIR "/vocab.txt", &st) == 0;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "--cpu";
    if (strcmp(mode, "--cpu") && strcmp(mode, "--gpu") && strcmp(mode, "--errors")) {
        fprintf(stderr, "usage: test_model_embed [--cpu | --gpu | --errors]\n");
        return 2;
    }
    if (strcmp(mode, "--gpu") == 0) test_require_gpu("test_model_embed_gpu");
    if (strcmp(mode, "--gpu") == 0) setenv("STOF_CPU_REFERENCE", "1", 1); /* the exact oracle */
    const char *base = getenv("TMPDIR");
    snprintf(tmp_root, sizeof tmp_root, "%s/stof_model_embed_XXXXXX",
             base && *base ? base : "/tmp");
    if (!mkdtemp(tmp_root)) {
        fprintf(stderr, "mkdtemp %s failed\n", tmp_root);
        return 1;
    }
    int rc;
    if (strcmp(mode, "--errors") == 0) {
        rc = run_errors();
    } else if (!model_present()) {
        printf("test_model_embed %s skipped: %s is missing (run scripts/fetch_model.sh)\n", mode,
               MODEL_DIR);
        rc = TEST_SKIP_CODE;
    } else if (!load_goldens()) {
        rc = test_finish("test_model_embed");
    } else {
        rc = strcmp(mode, "--gpu") == 0 ? run_gpu() : run_cpu();
    }
    free_goldens();
    remove_created();
    return rc;
}
