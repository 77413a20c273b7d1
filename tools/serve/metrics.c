/*
 * metrics.c — what /metrics reports, in Prometheus' text format: requests by
 * status, tokens, sequences and batches run, the queue's depth, and histograms
 * of request latency and batch sizes. Every part counts under one mutex; the
 * counts are few and the lock is held for a few additions.
 */
#include "serve.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void metrics_histo_init(serve_histo *h, const double *bounds, int n)
{
    memset(h, 0, sizeof *h);
    h->n = n;
    memcpy(h->bound, bounds, (size_t)n * sizeof *bounds);
}

void serve_metrics_init(serve_metrics *m)
{
    static const double latency[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                     0.25,  0.5,    1,     2.5,  5,     10};
    static const double seqs[] = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024};
    static const double tokens[] = {16, 64, 256, 1024, 2048, 4096, 8192, 16384, 32768, 65536};
    memset(m->requests, 0, sizeof m->requests);
    m->tokens = m->sequences = m->batches = 0;
    metrics_histo_init(&m->latency_s, latency, (int)(sizeof latency / sizeof *latency));
    metrics_histo_init(&m->batch_sequences, seqs, (int)(sizeof seqs / sizeof *seqs));
    metrics_histo_init(&m->batch_tokens, tokens, (int)(sizeof tokens / sizeof *tokens));
    pthread_mutex_init(&m->mu, NULL);
}

void serve_histo_observe(serve_histo *h, double v)
{
    int i = 0;
    while (i < h->n && v > h->bound[i])
        i++;
    h->count[i]++;
    h->sum += v;
}

static const char *const metrics_classes[6] = {"2xx", "400", "413", "503", "4xx", "5xx"};

void serve_metrics_request(serve_metrics *m, int status, double seconds)
{
    int c = status < 400    ? 0
            : status == 400 ? 1
            : status == 413 ? 2
            : status == 503 ? 3
            : status < 500  ? 4
                            : 5;
    pthread_mutex_lock(&m->mu);
    m->requests[c]++;
    if (seconds >= 0) serve_histo_observe(&m->latency_s, seconds);
    pthread_mutex_unlock(&m->mu);
}

static void metrics_put_histo(FILE *f, const char *name, const char *help, const serve_histo *h)
{
    fprintf(f, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    uint64_t total = 0;
    for (int i = 0; i <= h->n; i++) {
        total += h->count[i];
        if (i < h->n)
            fprintf(f, "%s_bucket{le=\"%g\"} %llu\n", name, h->bound[i], (unsigned long long)total);
        else
            fprintf(f, "%s_bucket{le=\"+Inf\"} %llu\n", name, (unsigned long long)total);
    }
    fprintf(f, "%s_sum %.9g\n%s_count %llu\n", name, h->sum, name, (unsigned long long)total);
}

static void metrics_put_counter(FILE *f, const char *name, const char *help, uint64_t v)
{
    fprintf(f, "# HELP %s %s\n# TYPE %s counter\n%s %llu\n", name, help, name, name,
            (unsigned long long)v);
}

char *serve_metrics_text(serve_app *app, size_t *len)
{
    char *text = NULL;
    FILE *f = open_memstream(&text, len);
    if (!f) return NULL;
    int jobs, seqs;
    int64_t budget;
    serve_batcher_depth(app->batcher, &jobs, &seqs, &budget);
    serve_metrics *m = app->metrics;
    pthread_mutex_lock(&m->mu);
    fputs("# HELP stof_serve_requests_total HTTP requests answered, by status\n"
          "# TYPE stof_serve_requests_total counter\n",
          f);
    for (int c = 0; c < 6; c++)
        fprintf(f, "stof_serve_requests_total{status=\"%s\"} %llu\n", metrics_classes[c],
                (unsigned long long)m->requests[c]);
    metrics_put_counter(f, "stof_serve_tokens_total", "tokens embedded", m->tokens);
    metrics_put_counter(f, "stof_serve_sequences_total", "sequences embedded", m->sequences);
    metrics_put_counter(f, "stof_serve_batches_total", "forwards run", m->batches);
    fprintf(f,
            "# HELP stof_serve_queue_requests embedding requests queued or running\n"
            "# TYPE stof_serve_queue_requests gauge\nstof_serve_queue_requests %d\n"
            "# HELP stof_serve_queue_sequences sequences waiting for a batch\n"
            "# TYPE stof_serve_queue_sequences gauge\nstof_serve_queue_sequences %d\n"
            "# HELP stof_serve_batch_token_budget padded tokens a forward may take now\n"
            "# TYPE stof_serve_batch_token_budget gauge\nstof_serve_batch_token_budget %lld\n",
            jobs, seqs, (long long)budget);
    metrics_put_histo(f, "stof_serve_request_duration_seconds",
                      "embedding requests, from their headers to the reply", &m->latency_s);
    metrics_put_histo(f, "stof_serve_batch_sequences", "sequences per forward",
                      &m->batch_sequences);
    metrics_put_histo(f, "stof_serve_batch_tokens", "real tokens per forward", &m->batch_tokens);
    pthread_mutex_unlock(&m->mu);
    if (fclose(f) != 0) {
        free(text);
        return NULL;
    }
    return text;
}
