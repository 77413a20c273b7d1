/*
 * serve.h — what the parts of `stof serve` share: the server's settings, the
 * loaded model, the batcher (one worker thread running every forward), the
 * metrics every part counts into, and the request handlers.
 *
 *   http.c     libmicrohttpd glue: bodies and their size limit, routing,
 *              request metrics, draining in-flight requests at shutdown
 *   api.c      JSON in and out: /v1/embeddings, /embed, /health, /v1/models,
 *              /metrics; a request becomes a serve_job of token sequences
 *   metrics.c  counters and histograms, and their Prometheus text
 *   batcher.c  the queue: sequences of concurrent jobs merged into batches under
 *              a token budget (adapted to max-batch-ms), sorted by length,
 *              flushed after max-wait-ms
 *
 * Tokenizing and formatting run on the connection threads (the tokenizer may
 * be shared); only the batcher's worker touches the model.
 */
#ifndef STOF_SERVE_H
#define STOF_SERVE_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "stof.h"

typedef struct serve_config {
    const char *model_dir, *host;
    int port;
    stof_device device;
    int max_batch_tokens; /* a batch's ids, padded: sequences x the longest */
    int max_wait_ms;      /* how long a batch that is not full may wait for more */
    int max_batch_ms;     /* a forward's time, aimed at: the token budget adapts (0: off) */
    int max_queue;        /* requests queued or running; more get 503 */
    int connection_nice;  /* the connection threads' nice value above the batcher's */
    int max_body_bytes;
    bool truncate;   /* texts over the model's length: cut (true) or 413 */
    bool matryoshka; /* `dimensions` may shorten embeddings (the model was trained for it) */
} serve_config;

typedef struct serve_model {
    stof_ctx *ctx;
    stof_model *model;
    stof_tokenizer *tok;
    stof_model_info info;
    int max_len;      /* tokens per sequence, [CLS] and [SEP] included */
    const char *name; /* what /v1/models and responses call it: the folder's last component */
} serve_model;

/* ---------------------------------------------------------------- metrics */

#define SERVE_HISTO_MAX 16

/* A Prometheus histogram: counts per upper bound (cumulative when printed). */
typedef struct serve_histo {
    int n;
    double bound[SERVE_HISTO_MAX];
    uint64_t count[SERVE_HISTO_MAX + 1]; /* the last: above every bound */
    double sum;
} serve_histo;

typedef struct serve_metrics {
    pthread_mutex_t mu;
    uint64_t requests[6]; /* by status class: 2xx, 400, 413, 503, other 4xx, 5xx */
    uint64_t tokens, sequences, batches;
    serve_histo latency_s, batch_sequences, batch_tokens;
} serve_metrics;

void serve_metrics_init(serve_metrics *m);
void serve_metrics_request(serve_metrics *m, int status, double seconds);
void serve_histo_observe(serve_histo *h, double v);

/* ---------------------------------------------------------------- batcher */

/* One request's sequences: ids of sequence i at ids[offset[i] .. offset[i + 1]).
 * out receives n x hidden floats: the model's pooled embeddings, or with raw set
 * the pooling before the model's normalisation. */
typedef struct serve_job {
    int n;
    int32_t *ids, *offset;
    float *out;
    bool raw;
    /* the batcher's, under its lock */
    int next_seq, done_seq;
    bool finished;
    stof_status status;
    char error[256];
    double enqueued_ms;
    pthread_cond_t cv;
    struct serve_job *next;
} serve_job;

typedef struct serve_batcher serve_batcher;

/* Starts the worker thread. */
stof_status serve_batcher_start(serve_model *m, const serve_config *cfg, serve_metrics *metrics,
                                serve_batcher **out);
/* Queues the job and waits for its embeddings. false: the queue holds
 * max_queue jobs already (nothing was queued). job->status tells the outcome. */
bool serve_batcher_run(serve_batcher *b, serve_job *job);
/* Jobs queued or running, their sequences not yet in a batch, and the
 * batch's token budget now (max_batch_tokens, or less under max_batch_ms). */
void serve_batcher_depth(serve_batcher *b, int *jobs, int *sequences, int64_t *budget);
/* Runs what is queued, then stops the worker and frees the batcher. */
void serve_batcher_stop(serve_batcher *b);

/* ---------------------------------------------------------------- handlers */

typedef struct serve_app {
    const serve_config *cfg;
    serve_model *model;
    serve_batcher *batcher;
    serve_metrics *metrics;
} serve_app;

typedef struct serve_reply {
    int status;
    const char *content_type;
    char *body; /* malloc'ed */
    size_t len;
    int retry_after_s; /* > 0: a Retry-After header */
} serve_reply;

/* Routes one request; the reply is always set, errors as {"error": {...}}. */
void serve_api_handle(serve_app *app, const char *method, const char *url, const char *body,
                      size_t len, serve_reply *r);
/* An error reply: {"error": {"message", "type", "code"}}. */
void serve_api_error(serve_reply *r, int status, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* The Prometheus text of /metrics (malloc'ed; NULL when out of memory). */
char *serve_metrics_text(serve_app *app, size_t *len);

/* Serves until SIGTERM or SIGINT (blocked by the caller before it started its threads), then
 * stops taking connections, waits for the requests in flight and returns. */
int serve_http_run(serve_app *app);

#endif
