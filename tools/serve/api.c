/*
 * api.c — the server's routes, JSON in and JSON out.
 *
 *   POST /v1/embeddings  OpenAI's shape: input (string, strings, token ids, lists
 *                        of token ids), model, encoding_format float|base64,
 *                        dimensions (shortened and renormalised, Matryoshka
 *                        models only), usage
 *   POST /embed          text-embeddings-inference's: {"inputs": str|[str],
 *                        "normalize": bool, "truncate": bool} -> [[floats]]
 *   GET  /health, /v1/models, /metrics
 *
 * Token ids are taken as the model's sequence, special tokens included. Every
 * error is {"error": {"message", "type", "code"}} with the status that names it;
 * a bad request never reaches the batcher, so it cannot disturb the others.
 */
#include "serve.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define API_MAX_INPUTS 2048 /* OpenAI's limit on inputs per request */

void serve_api_error(serve_reply *r, int status, const char *code, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    cJSON *root = cJSON_CreateObject(), *err = cJSON_AddObjectToObject(root, "error");
    cJSON_AddStringToObject(err, "message", msg);
    cJSON_AddStringToObject(err, "type", status >= 500 ? "server_error" : "invalid_request_error");
    cJSON_AddStringToObject(err, "code", code);
    free(r->body);
    r->body = cJSON_PrintUnformatted(root);
    r->len = r->body ? strlen(r->body) : 0;
    r->status = status;
    r->content_type = "application/json";
    r->retry_after_s = status == 503 ? 1 : 0;
    cJSON_Delete(root);
}

/* ---------------------------------------------------------------- input */

/* A request's embedding work: its job and what the reply needs. */
typedef struct api_work {
    serve_job job;
    int dims;       /* components returned: the model's hidden size or fewer */
    bool normalize; /* L2-normalise the returned components */
    bool base64;
} api_work;

static void api_work_free(api_work *w)
{
    free(w->job.ids);
    free(w->job.offset);
    free(w->job.out);
}

static bool api_is_int(const cJSON *x)
{
    return cJSON_IsNumber(x) && x->valuedouble == floor(x->valuedouble);
}

/* Token-id input: ids as given, each within the vocabulary. */
static bool api_add_ids(const serve_model *m, const cJSON *list, int i, bool truncate, api_work *w,
                        serve_reply *r)
{
    int len = cJSON_GetArraySize(list);
    if (len == 0) {
        serve_api_error(r, 400, "empty_input", "input %d is an empty list of token ids", i);
        return false;
    }
    if (len > m->max_len && !truncate) {
        serve_api_error(r, 413, "input_too_long",
                        "input %d has %d tokens; the model takes at most %d", i, len, m->max_len);
        return false;
    }
    if (len > m->max_len) len = m->max_len;
    int32_t *dst = w->job.ids + w->job.offset[i];
    const cJSON *x = list->child;
    for (int t = 0; t < len; t++, x = x->next) {
        if (!api_is_int(x) || x->valuedouble < 0 || x->valuedouble >= m->info.vocab) {
            serve_api_error(r, 400, "invalid_token",
                            "input %d, token %d: not an integer id in [0, %d)", i, t,
                            m->info.vocab);
            return false;
        }
        dst[t] = (int32_t)x->valuedouble;
    }
    w->job.offset[i + 1] = w->job.offset[i] + len;
    return true;
}

/* Text input: tokenized one token past the model's length, so that a text
 * over it is seen; cut to the length (tokenized again, as stof embed does) or refused. */
static bool api_add_text(const serve_model *m, const char *text, int i, bool truncate, api_work *w,
                         serve_reply *r)
{
    size_t tlen = strlen(text);
    if (tlen == 0) {
        serve_api_error(r, 400, "empty_input", "input %d is an empty string", i);
        return false;
    }
    int32_t *dst = w->job.ids + w->job.offset[i], len = 0;
    stof_status st = stof_tokenize_batch(m->tok, &text, &tlen, 1, m->max_len + 1, dst,
                                         (size_t)m->max_len + 1, &len, NULL);
    if (!st && len > m->max_len) {
        if (!truncate) {
            serve_api_error(r, 413, "input_too_long",
                            "input %d is over the model's %d tokens (truncate it, or ask for "
                            "truncation)",
                            i, m->max_len);
            return false;
        }
        st = stof_tokenize_batch(m->tok, &text, &tlen, 1, m->max_len, dst, (size_t)m->max_len, &len,
                                 NULL);
    }
    if (st) {
        serve_api_error(r, 500, "tokenizer_error", "input %d: %s", i, stof_last_error());
        return false;
    }
    w->job.offset[i + 1] = w->job.offset[i] + len;
    return true;
}

/* Fills w->job from a string, a list of strings, a list of ids or a list of id lists. */
static bool api_parse_input(const serve_model *m, const cJSON *in, const char *field, bool truncate,
                            bool ids_ok, api_work *w, serve_reply *r)
{
    int n = 1;
    bool one_id_list = false;
    if (!in) {
        serve_api_error(r, 400, "missing_input", "the request has no \"%s\"", field);
        return false;
    }
    if (cJSON_IsArray(in)) {
        n = cJSON_GetArraySize(in);
        one_id_list = ids_ok && n > 0 && cJSON_IsNumber(in->child);
        if (one_id_list) n = 1;
    } else if (!cJSON_IsString(in)) {
        serve_api_error(r, 400, "invalid_type", "\"%s\" must be a string or a list of %s", field,
                        ids_ok ? "strings or of token ids" : "strings");
        return false;
    }
    if (n == 0) {
        serve_api_error(r, 400, "empty_input", "\"%s\" is an empty list", field);
        return false;
    }
    if (n > API_MAX_INPUTS) {
        serve_api_error(r, 400, "too_many_inputs", "\"%s\" has %d items; at most %d", field, n,
                        API_MAX_INPUTS);
        return false;
    }
    w->job.n = n;
    w->job.offset = calloc((size_t)n + 1, sizeof *w->job.offset);
    w->job.ids = malloc((size_t)n * ((size_t)m->max_len + 1) * sizeof *w->job.ids);
    if (!w->job.offset || !w->job.ids) {
        serve_api_error(r, 503, "out_of_memory", "no memory for %d inputs", n);
        return false;
    }
    bool whole = one_id_list || !cJSON_IsArray(in); /* the input is one sequence */
    const cJSON *x = whole ? in : in->child;
    for (int i = 0; i < n; i++, x = x->next) {
        bool kind_ok = whole || cJSON_IsString(x) == cJSON_IsString(in->child);
        if (kind_ok && cJSON_IsString(x)) {
            if (!api_add_text(m, x->valuestring, i, truncate, w, r)) return false;
        } else if (kind_ok && ids_ok && cJSON_IsArray(x)) {
            if (!api_add_ids(m, x, i, truncate, w, r)) return false;
        } else {
            serve_api_error(r, 400, "invalid_type",
                            "\"%s\" item %d must be %s, like the first item", field, i,
                            ids_ok ? "a string or a list of token ids" : "a string");
            return false;
        }
    }
    /* a queued request holds its real tokens only, not n x the model's length */
    int32_t *fit = realloc(w->job.ids, ((size_t)w->job.offset[n] + 1) * sizeof *fit);
    if (fit) w->job.ids = fit;
    return true;
}

/* A field that must be a boolean when present. */
static bool api_bool(const cJSON *root, const char *name, bool *out, serve_reply *r)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(root, name);
    if (!x) return true;
    if (!cJSON_IsBool(x)) {
        serve_api_error(r, 400, "invalid_type", "\"%s\" must be true or false", name);
        return false;
    }
    *out = cJSON_IsTrue(x);
    return true;
}

/* ---------------------------------------------------------------- output */

static void api_normalize(float *v, int n)
{
    double s = 0;
    for (int i = 0; i < n; i++)
        s += (double)v[i] * v[i];
    if (s <= 0) return;
    float inv = (float)(1.0 / sqrt(s));
    for (int i = 0; i < n; i++)
        v[i] *= inv;
}

/* v as base64 (little-endian floats, as OpenAI's), encoded a chunk at a time into a
 * buffer and written with one fwrite each: a character per fputc, each taking the
 * stream's lock, cost 4096 locked calls per BERT-base row: 22 against 4 us a row
 * in responses of 32 rows on one core. */
static void api_put_base64(FILE *f, const float *v, int n)
{
    static const char digits[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const unsigned char *p = (const unsigned char *)v;
    size_t len = (size_t)n * sizeof *v, whole = len - len % 3;
    char out[1024]; /* 256 groups of 3 bytes */
    size_t k = 0;
    for (size_t i = 0; i < whole; i += 3) {
        unsigned x = (unsigned)p[i] << 16 | (unsigned)p[i + 1] << 8 | p[i + 2];
        out[k] = digits[x >> 18];
        out[k + 1] = digits[x >> 12 & 63];
        out[k + 2] = digits[x >> 6 & 63];
        out[k + 3] = digits[x & 63];
        if ((k += 4) == sizeof out) {
            fwrite(out, 1, k, f);
            k = 0;
        }
    }
    if (whole < len) { /* one or two bytes left: padded with '=' */
        unsigned x = (unsigned)p[whole] << 16 | (whole + 1 < len ? (unsigned)p[whole + 1] << 8 : 0);
        out[k++] = digits[x >> 18];
        out[k++] = digits[x >> 12 & 63];
        out[k++] = whole + 1 < len ? digits[x >> 6 & 63] : '=';
        out[k++] = '=';
    }
    fwrite(out, 1, k, f);
}

static void api_put_floats(FILE *f, const float *v, int n)
{
    fputc('[', f);
    for (int i = 0; i < n; i++)
        fprintf(f, i ? ",%.9g" : "%.9g", (double)v[i]);
    fputc(']', f);
}

/* The job's rows as the request asked: cut to dims, normalised when asked. */
static void api_shape_rows(const serve_model *m, api_work *w)
{
    for (int i = 0; i < w->job.n; i++) {
        float *row = w->job.out + (size_t)i * (size_t)m->info.hidden;
        if (w->normalize && (w->dims < m->info.hidden || !m->info.normalize))
            api_normalize(row, w->dims);
    }
}

static void api_reply_openai(const serve_model *m, api_work *w, serve_reply *r)
{
    FILE *f = open_memstream(&r->body, &r->len);
    if (!f) {
        serve_api_error(r, 503, "out_of_memory", "no memory for the reply");
        return;
    }
    cJSON *name = cJSON_CreateString(m->name);
    char *quoted = cJSON_PrintUnformatted(name);
    fputs("{\"object\":\"list\",\"data\":[", f);
    for (int i = 0; i < w->job.n; i++) {
        const float *row = w->job.out + (size_t)i * (size_t)m->info.hidden;
        fprintf(f, "%s{\"object\":\"embedding\",\"index\":%d,\"embedding\":", i ? "," : "", i);
        if (w->base64) {
            fputc('"', f);
            api_put_base64(f, row, w->dims);
            fputc('"', f);
        } else
            api_put_floats(f, row, w->dims);
        fputc('}', f);
    }
    fprintf(f, "],\"model\":%s,\"usage\":{\"prompt_tokens\":%d,\"total_tokens\":%d}}",
            quoted ? quoted : "\"\"", w->job.offset[w->job.n], w->job.offset[w->job.n]);
    fclose(f);
    free(quoted);
    cJSON_Delete(name);
    r->status = 200;
}

static void api_reply_tei(const serve_model *m, api_work *w, serve_reply *r)
{
    FILE *f = open_memstream(&r->body, &r->len);
    if (!f) {
        serve_api_error(r, 503, "out_of_memory", "no memory for the reply");
        return;
    }
    fputc('[', f);
    for (int i = 0; i < w->job.n; i++) {
        if (i) fputc(',', f);
        api_put_floats(f, w->job.out + (size_t)i * (size_t)m->info.hidden, w->dims);
    }
    fputc(']', f);
    fclose(f);
    r->status = 200;
}

/* ---------------------------------------------------------------- routes */

/* Runs the job through the batcher; false with the error reply set when it did not run. */
static bool api_embed(serve_app *app, api_work *w, serve_reply *r)
{
    size_t out = (size_t)w->job.n * (size_t)app->model->info.hidden;
    if (!(w->job.out = malloc(out * sizeof *w->job.out))) {
        serve_api_error(r, 503, "out_of_memory", "no memory for %d embeddings", w->job.n);
        return false;
    }
    if (!serve_batcher_run(app->batcher, &w->job)) {
        serve_api_error(r, 503, "queue_full",
                        "the server has %d requests queued, its limit; retry shortly",
                        app->cfg->max_queue);
        return false;
    }
    if (w->job.status) {
        serve_api_error(r, 500, "embedding_failed", "%s", w->job.error);
        return false;
    }
    api_shape_rows(app->model, w);
    return true;
}

static void api_openai(serve_app *app, const cJSON *root, serve_reply *r)
{
    const serve_model *m = app->model;
    api_work w = {.dims = m->info.hidden, .normalize = true};
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(root, "encoding_format");
    const cJSON *dims = cJSON_GetObjectItemCaseSensitive(root, "dimensions");
    if (model && !cJSON_IsString(model)) {
        serve_api_error(r, 400, "invalid_type", "\"model\" must be a string");
        return;
    }
    if (fmt && !(cJSON_IsString(fmt) &&
                 (!strcmp(fmt->valuestring, "float") || !strcmp(fmt->valuestring, "base64")))) {
        serve_api_error(r, 400, "invalid_encoding_format",
                        "\"encoding_format\" must be \"float\" or \"base64\"");
        return;
    }
    w.base64 = fmt && !strcmp(fmt->valuestring, "base64");
    if (dims && !cJSON_IsNull(dims)) {
        if (!api_is_int(dims) || dims->valuedouble < 1 || dims->valuedouble > m->info.hidden) {
            serve_api_error(r, 400, "invalid_dimensions",
                            "\"dimensions\" must be an integer in [1, %d]", m->info.hidden);
            return;
        }
        w.dims = (int)dims->valuedouble;
        if (w.dims < m->info.hidden && !app->cfg->matryoshka) {
            serve_api_error(r, 400, "invalid_dimensions",
                            "model %s gives %d dimensions and was not served as "
                            "Matryoshka-trained (stof serve --matryoshka), so it cannot "
                            "shorten them to %d",
                            m->name, m->info.hidden, w.dims);
            return;
        }
    }
    w.normalize = m->info.normalize || w.dims < m->info.hidden;
    if (api_parse_input(m, cJSON_GetObjectItemCaseSensitive(root, "input"), "input",
                        app->cfg->truncate, true, &w, r) &&
        api_embed(app, &w, r))
        api_reply_openai(m, &w, r);
    api_work_free(&w);
}

static void api_tei(serve_app *app, const cJSON *root, serve_reply *r)
{
    const serve_model *m = app->model;
    api_work w = {.dims = m->info.hidden, .normalize = true};
    bool truncate = app->cfg->truncate;
    if (!api_bool(root, "normalize", &w.normalize, r) || !api_bool(root, "truncate", &truncate, r))
        return;
    w.job.raw = !w.normalize;
    if (w.job.raw && m->info.normalize && stof_ctx_device(m->ctx) == STOF_DEVICE_GPU) {
        /* the pooling before the model's Normalize needs the hidden states on the host */
        serve_api_error(r, 400, "unsupported",
                        "\"normalize\": false on model %s, which normalises, is served on the "
                        "CPU only",
                        m->name);
        return;
    }
    if (api_parse_input(m, cJSON_GetObjectItemCaseSensitive(root, "inputs"), "inputs", truncate,
                        false, &w, r) &&
        api_embed(app, &w, r))
        api_reply_tei(m, &w, r);
    api_work_free(&w);
}

static void api_models(serve_app *app, serve_reply *r)
{
    cJSON *root = cJSON_CreateObject(), *data = cJSON_AddArrayToObject(root, "data");
    cJSON *one = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "object", "list");
    cJSON_AddStringToObject(one, "id", app->model->name);
    cJSON_AddStringToObject(one, "object", "model");
    cJSON_AddStringToObject(one, "owned_by", "stof");
    cJSON_AddNumberToObject(one, "dimensions", app->model->info.hidden);
    cJSON_AddNumberToObject(one, "max_input_tokens", app->model->max_len);
    cJSON_AddItemToArray(data, one);
    r->body = cJSON_PrintUnformatted(root);
    r->len = r->body ? strlen(r->body) : 0;
    r->status = 200;
    cJSON_Delete(root);
}

/* POST routes take a JSON object; its parse errors are answered here. */
static void api_post(serve_app *app, const char *url, const char *body, size_t len, serve_reply *r)
{
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(body, len, &end, 0);
    if (root && end)
        while (end < body + len && *end && strchr(" \t\r\n", *end))
            end++;
    if (!root || end != body + len) {
        /* cJSON's error pointer is global; its parse end is this call's own */
        size_t at = end && end >= body && end <= body + len ? (size_t)(end - body) : len;
        serve_api_error(r, 400, "invalid_json", "the body is not valid JSON (at byte %zu of %zu)",
                        at, len);
    } else if (!cJSON_IsObject(root))
        serve_api_error(r, 400, "invalid_type", "the body must be a JSON object");
    else if (!strcmp(url, "/v1/embeddings"))
        api_openai(app, root, r);
    else
        api_tei(app, root, r);
    cJSON_Delete(root);
}

void serve_api_handle(serve_app *app, const char *method, const char *url, const char *body,
                      size_t len, serve_reply *r)
{
    bool post = !strcmp(url, "/v1/embeddings") || !strcmp(url, "/embed");
    bool get = !strcmp(url, "/health") || !strcmp(url, "/v1/models") || !strcmp(url, "/metrics");
    r->content_type = "application/json";
    if (!post && !get) {
        serve_api_error(r, 404, "not_found", "no route %s", url);
        return;
    }
    if (strcmp(method, post ? "POST" : "GET") != 0) {
        serve_api_error(r, 405, "method_not_allowed", "%s takes %s, not %s", url,
                        post ? "POST" : "GET", method);
        return;
    }
    if (post) {
        api_post(app, url, body, len, r);
        return;
    }
    if (!strcmp(url, "/v1/models")) {
        api_models(app, r);
        return;
    }
    if (!strcmp(url, "/metrics")) {
        r->content_type = "text/plain; version=0.0.4";
        r->body = serve_metrics_text(app, &r->len);
        r->status = r->body ? 200 : 503;
        return;
    }
    r->body = strdup("{\"status\":\"ok\"}");
    r->len = r->body ? strlen(r->body) : 0;
    r->status = 200;
}
