/*
 * batcher.c — token-budget dynamic batching, as text-embeddings-inference does
 * it: concurrent requests queue as jobs; one worker thread takes their
 * sequences, one of each job in turn, into a batch whose padded ids (sequences
 * x the longest) stay within max_batch_tokens, sorts the batch by length, runs
 * one forward and scatters the pooled rows back to each job in its own order.
 * A request larger than the budget spans several batches; a batch holds
 * sequences of many requests.
 *
 * The worker waits for more work while the queue is short of a full batch,
 * but never past max_wait_ms after the oldest waiting sequence arrived. The
 * batch's buffers only grow, to the largest batch seen, so memory stays flat
 * under steady load.
 *
 * Latency. Under load a request waits for the batch in flight and then runs
 * in the next one, so a short request's latency is about two batch times,
 * and a budget in tokens sets that time only through the model's speed. With
 * max_batch_ms the worker steers the budget instead: after each forward that
 * the budget limited (or that ran over the time), the budget moves by the
 * ratio of the time aimed at to the time taken, within [1/2, 5/4] a step,
 * never above max_batch_tokens. Since a forward's time grows with its
 * tokens, the budget settles where a forward takes about max_batch_ms; a
 * batch's fixed cost (launches, copies) makes the steps undershoot, never
 * diverge. One sequence always fits, whatever the budget.
 */
#include "serve.h"

#include "../cli.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* One sequence of a batch: which job, which of its sequences. */
typedef struct batch_seq {
    serve_job *job;
    int index, len;
} batch_seq;

struct serve_batcher {
    serve_model *m;
    const serve_config *cfg;
    serve_metrics *metrics;
    pthread_t worker;
    pthread_mutex_t mu;
    pthread_cond_t work_cv;
    serve_job *head, *tail; /* jobs with sequences not yet in a batch, oldest first */
    int jobs;               /* queued or running */
    int waiting_seqs;       /* sequences not yet in a batch */
    int64_t waiting_tokens; /* and their tokens */
    int64_t budget;         /* padded tokens a batch may take: max_batch_tokens, or less */
    bool stopping;
    /* the worker's own */
    batch_seq *seqs;
    int32_t *ids, *lens;
    float *pooled, *hidden;
    size_t cap_seqs, cap_ids, cap_lens, cap_pooled, cap_hidden;
};

/* Grows *p to hold n elements of size sz (never shrinks); false when out of memory. */
static bool batcher_reserve(void **p, size_t *cap, size_t n, size_t sz)
{
    if (n <= *cap) return true;
    void *q = realloc(*p, n * sz);
    if (!q) return false;
    *p = q;
    *cap = n;
    return true;
}

static int batcher_longer_first(const void *x, const void *y)
{
    const batch_seq *a = x, *b = y;
    if (a->len != b->len) return b->len - a->len;
    return (a > b) - (a < b);
}

/* Takes one sequence of each waiting job in turn, oldest job first, while the
 * padded batch fits the budget: a short request finishes in the next batch
 * however large the requests queued before it. Called under the lock; returns
 * how many were taken (at least one when any wait), and in *full whether the
 * budget stopped it. */
static int batcher_take(serve_batcher *b, bool *full_out)
{
    int n = 0, longest = 0;
    bool full = false;
    while (b->head && !full) {
        serve_job **link = &b->head, *prev = NULL;
        while (*link) {
            serve_job *j = *link;
            int len = j->offset[j->next_seq + 1] - j->offset[j->next_seq];
            int wider = len > longest ? len : longest;
            full =
                (n && (int64_t)(n + 1) * wider > b->budget) ||
                !batcher_reserve((void **)&b->seqs, &b->cap_seqs, (size_t)n + 1, sizeof *b->seqs);
            if (full) break;
            b->seqs[n++] = (batch_seq){.job = j, .index = j->next_seq, .len = len};
            longest = wider;
            b->waiting_seqs--;
            b->waiting_tokens -= len;
            if (++j->next_seq < j->n) {
                prev = j;
                link = &j->next;
                continue;
            }
            *link = j->next; /* every sequence taken: off the queue */
            if (b->tail == j) b->tail = prev;
        }
    }
    *full_out = full;
    return n;
}

/* Steers the budget towards forwards of max_batch_ms (the file's comment):
 * padded tokens took ms; full: the budget, not the queue, ended the batch. */
static void batcher_adapt(serve_batcher *b, int64_t padded, double ms, bool full)
{
    double aim = b->cfg->max_batch_ms;
    if (aim <= 0 || ms <= 0 || (!full && ms <= aim)) return; /* a short queue tells nothing */
    double ratio = aim / ms;
    ratio = ratio < 0.5 ? 0.5 : ratio > 1.25 ? 1.25 : ratio;
    int64_t from = full || padded > b->budget ? b->budget : padded;
    int64_t next = (int64_t)((double)from * ratio), most = b->cfg->max_batch_tokens;
    int64_t least = most < 64 ? most : 64;
    b->budget = next < least ? least : next > most ? most : next;
}

/* Mean (or first-token) pooling of one sequence's hidden rows, before any normalisation. */
static void batcher_pool_raw(const serve_model *m, const float *hidden, int len, float *out)
{
    int h = m->info.hidden;
    int rows = m->info.pooling == STOF_POOL_CLS ? 1 : len;
    for (int d = 0; d < h; d++) {
        double s = 0;
        for (int t = 0; t < rows; t++)
            s += hidden[(size_t)t * (size_t)h + (size_t)d];
        out[d] = (float)(s / rows);
    }
}

/* One forward over seqs[0 .. n); fills each job's rows or records the error. */
static stof_status batcher_forward(serve_batcher *b, int n, char *error, size_t error_len)
{
    const serve_model *m = b->m;
    int h = m->info.hidden, L = b->seqs[0].len;
    bool raw = false;
    for (int i = 0; i < n; i++)
        raw |= b->seqs[i].job->raw && m->info.normalize;
    size_t nh = (size_t)n * (size_t)h;
    if (!batcher_reserve((void **)&b->ids, &b->cap_ids, (size_t)n * (size_t)L, sizeof *b->ids) ||
        !batcher_reserve((void **)&b->lens, &b->cap_lens, (size_t)n, sizeof *b->lens) ||
        !batcher_reserve((void **)&b->pooled, &b->cap_pooled, nh, sizeof *b->pooled) ||
        (raw && !batcher_reserve((void **)&b->hidden, &b->cap_hidden, nh * (size_t)L,
                                 sizeof *b->hidden))) {
        snprintf(error, error_len, "out of memory for a batch of %d x %d tokens", n, L);
        return STOF_ERR_OOM;
    }
    for (int i = 0; i < n; i++) {
        const serve_job *j = b->seqs[i].job;
        int32_t *row = b->ids + (size_t)i * (size_t)L;
        b->lens[i] = b->seqs[i].len;
        memcpy(row, j->ids + j->offset[b->seqs[i].index], (size_t)b->lens[i] * sizeof *row);
        memset(row + b->lens[i], 0, (size_t)(L - b->lens[i]) * sizeof *row);
    }
    int64_t sh_ids[2] = {n, L}, sh_len[1] = {n}, sh_pool[2] = {n, h}, sh_hid[3] = {n, L, h};
    stof_tensor ids = stof_tensor_make(b->ids, STOF_I32, STOF_MEM_HOST, 2, sh_ids);
    stof_tensor lens = stof_tensor_make(b->lens, STOF_I32, STOF_MEM_HOST, 1, sh_len);
    stof_tensor pooled = stof_tensor_make(b->pooled, STOF_F32, STOF_MEM_HOST, 2, sh_pool);
    stof_tensor hid = stof_tensor_make(b->hidden, STOF_F32, STOF_MEM_HOST, 3, sh_hid);
    stof_forward_params fp = stof_forward_default_params();
    stof_status st =
        stof_model_forward(m->model, &fp, &ids, &lens, NULL, raw ? &hid : NULL, &pooled);
    if (st) {
        snprintf(error, error_len, "the forward failed: %s", stof_last_error());
        return st;
    }
    for (int i = 0; i < n; i++) {
        serve_job *j = b->seqs[i].job;
        float *dst = j->out + (size_t)b->seqs[i].index * (size_t)h;
        if (j->raw && m->info.normalize)
            batcher_pool_raw(m, b->hidden + (size_t)i * (size_t)L * (size_t)h, b->seqs[i].len, dst);
        else
            memcpy(dst, b->pooled + (size_t)i * (size_t)h, (size_t)h * sizeof *dst);
        for (int d = 0; d < h; d++)
            if (!isfinite(dst[d])) {
                snprintf(error, error_len, "embedding component %d is not finite", d);
                return STOF_ERR_INTERNAL;
            }
    }
    return STOF_OK;
}

static void batcher_finish(serve_batcher *b, int n, stof_status st, const char *error)
{
    int64_t tokens = 0;
    for (int i = 0; i < n; i++) {
        serve_job *j = b->seqs[i].job;
        tokens += b->seqs[i].len;
        if (st && !j->status) {
            j->status = st;
            snprintf(j->error, sizeof j->error, "%s", error);
        }
        if (++j->done_seq == j->n) {
            j->finished = true;
            b->jobs--;
            pthread_cond_signal(&j->cv);
        }
    }
    pthread_mutex_lock(&b->metrics->mu);
    b->metrics->batches++;
    b->metrics->sequences += (uint64_t)n;
    b->metrics->tokens += (uint64_t)tokens;
    serve_histo_observe(&b->metrics->batch_sequences, n);
    serve_histo_observe(&b->metrics->batch_tokens, (double)tokens);
    pthread_mutex_unlock(&b->metrics->mu);
}

/* Waits until a batch is worth running: the budget's worth queued, the oldest
 * sequence waited max_wait_ms, or shutdown. Under the lock. */
static void batcher_wait_for_batch(serve_batcher *b)
{
    while (!b->head && !b->stopping)
        pthread_cond_wait(&b->work_cv, &b->mu);
    while (b->head && !b->stopping && b->waiting_tokens < b->budget) {
        double due = b->head->enqueued_ms + b->cfg->max_wait_ms, now = cli_now_ms();
        if (now >= due) break;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        double wait_ns = (due - now) * 1e6 + (double)ts.tv_nsec;
        ts.tv_sec += (time_t)(wait_ns / 1e9);
        ts.tv_nsec = (long)fmod(wait_ns, 1e9);
        pthread_cond_timedwait(&b->work_cv, &b->mu, &ts);
    }
}

static void *batcher_main(void *arg)
{
    serve_batcher *b = arg;
    pthread_mutex_lock(&b->mu);
    for (;;) {
        batcher_wait_for_batch(b);
        if (!b->head) break; /* stopping and drained */
        bool full;
        int n = batcher_take(b, &full);
        pthread_mutex_unlock(&b->mu);
        char error[256] = "";
        qsort(b->seqs, (size_t)n, sizeof *b->seqs, batcher_longer_first);
        double start = cli_now_ms();
        stof_status st = batcher_forward(b, n, error, sizeof error);
        double ms = cli_now_ms() - start;
        pthread_mutex_lock(&b->mu);
        if (!st) batcher_adapt(b, (int64_t)n * b->seqs[0].len, ms, full);
        batcher_finish(b, n, st, error);
    }
    pthread_mutex_unlock(&b->mu);
    return NULL;
}

stof_status serve_batcher_start(serve_model *m, const serve_config *cfg, serve_metrics *metrics,
                                serve_batcher **out)
{
    serve_batcher *b = calloc(1, sizeof *b);
    if (!b) return STOF_ERR_OOM;
    b->m = m;
    b->cfg = cfg;
    b->metrics = metrics;
    b->budget = cfg->max_batch_tokens;
    pthread_mutex_init(&b->mu, NULL);
    pthread_cond_init(&b->work_cv, NULL);
    if (pthread_create(&b->worker, NULL, batcher_main, b)) {
        free(b);
        return STOF_ERR_INTERNAL;
    }
    *out = b;
    return STOF_OK;
}

bool serve_batcher_run(serve_batcher *b, serve_job *job)
{
    job->next_seq = job->done_seq = 0;
    job->finished = false;
    job->status = STOF_OK;
    job->error[0] = '\0';
    job->next = NULL;
    pthread_cond_init(&job->cv, NULL);
    pthread_mutex_lock(&b->mu);
    if (b->jobs >= b->cfg->max_queue || b->stopping) {
        pthread_mutex_unlock(&b->mu);
        pthread_cond_destroy(&job->cv);
        return false;
    }
    job->enqueued_ms = cli_now_ms();
    if (b->tail)
        b->tail->next = job;
    else
        b->head = job;
    b->tail = job;
    b->jobs++;
    b->waiting_seqs += job->n;
    b->waiting_tokens += job->offset[job->n];
    pthread_cond_signal(&b->work_cv);
    while (!job->finished)
        pthread_cond_wait(&job->cv, &b->mu);
    pthread_mutex_unlock(&b->mu);
    pthread_cond_destroy(&job->cv);
    return true;
}

void serve_batcher_depth(serve_batcher *b, int *jobs, int *sequences, int64_t *budget)
{
    pthread_mutex_lock(&b->mu);
    *jobs = b->jobs;
    *sequences = b->waiting_seqs;
    *budget = b->budget;
    pthread_mutex_unlock(&b->mu);
}

void serve_batcher_stop(serve_batcher *b)
{
    if (!b) return;
    pthread_mutex_lock(&b->mu);
    b->stopping = true;
    pthread_cond_signal(&b->work_cv);
    pthread_mutex_unlock(&b->mu);
    pthread_join(b->worker, NULL);
    pthread_cond_destroy(&b->work_cv);
    pthread_mutex_destroy(&b->mu);
    free(b->seqs);
    free(b->ids);
    free(b->lens);
    free(b->pooled);
    free(b->hidden);
    free(b);
}
