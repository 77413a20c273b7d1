/*
 * http.c — `stof serve`'s HTTP side on libmicrohttpd: a thread per connection
 * (a request blocks its own thread while its batch runs, so concurrency comes
 * from connections), bodies gathered up to --max-body-bytes (413 past it,
 * before reading it when Content-Length says so), every request handed to
 * api.c and counted into the metrics.
 *
 * Priority: every request waits for the one batch worker, so a worker kept
 * off a core by connection threads delays them all, a single sentence by
 * whole batch times. The connection threads therefore run --connection-nice
 * levels below it: the daemon's threads inherit the nice value of the thread
 * that starts it (Linux keeps it per thread), which lowers its own just
 * before, once the worker runs (threads the worker starts, the CPU backend's
 * pool among them, keep the worker's value). Lowering a thread's priority
 * needs no privilege; raising the worker's would.
 *
 * Shutdown: SIGTERM or SIGINT closes the listening socket, waits for the
 * requests in flight to be answered, then stops the daemon. The signal's
 * handler only posts a semaphore; it must be a handler, not sigwait alone,
 * since threads started before main (OpenBLAS's pool) do not block the signal
 * and its default action there would end the process at once.
 */
#include "serve.h"

#include "../cli.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <semaphore.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define HTTP_DRAIN_MS 30000 /* the longest a shutdown waits for requests in flight */
#define HTTP_MAX_CONNECTIONS 1024

typedef struct http_server {
    serve_app *app;
    pthread_mutex_t mu;
    pthread_cond_t idle_cv;
    int in_flight;
} http_server;

static sem_t http_stop;
static volatile sig_atomic_t http_signal;

static void http_on_signal(int sig)
{
    http_signal = sig;
    sem_post(&http_stop); /* async-signal-safe */
}

/* Until SIGTERM or SIGINT; returns which. */
static int http_wait_for_signal(void)
{
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGTERM);
    sigaddset(&stop, SIGINT);
    pthread_sigmask(SIG_UNBLOCK, &stop, NULL); /* the caller blocked them for its threads */
    while (sem_wait(&http_stop) != 0)          /* EINTR: the handler ran on this thread */
        ;
    return http_signal;
}

/* One request's state, from its headers to its reply. */
typedef struct http_request {
    char *body;
    size_t len, cap;
    bool too_large, replied;
    double start_ms;
} http_request;

static enum MHD_Result http_send(struct MHD_Connection *c, serve_reply *r)
{
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(r->len, r->body, MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        free(r->body);
        return MHD_NO;
    }
    r->body = NULL; /* the response owns it now */
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, r->content_type);
    if (r->retry_after_s > 0) {
        char s[16];
        snprintf(s, sizeof s, "%d", r->retry_after_s);
        MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, s);
    }
    enum MHD_Result ok = MHD_queue_response(c, (unsigned)r->status, resp);
    MHD_destroy_response(resp);
    return ok;
}

static enum MHD_Result http_too_large(http_server *s, struct MHD_Connection *c, http_request *q)
{
    serve_reply r = {0};
    serve_api_error(&r, 413, "body_too_large", "the body is over the server's %d bytes",
                    s->app->cfg->max_body_bytes);
    q->replied = true;
    serve_metrics_request(s->app->metrics, r.status, -1);
    return http_send(c, &r);
}

/* Appends upload data, or marks the body too large and drops what it has. */
static void http_gather(http_server *s, http_request *q, const char *data, size_t n)
{
    size_t limit = (size_t)s->app->cfg->max_body_bytes;
    if (q->too_large) return;
    if (q->len + n > limit) {
        q->too_large = true;
        free(q->body);
        q->body = NULL;
        return;
    }
    if (q->len + n + 1 > q->cap) {
        size_t cap = q->cap ? q->cap : 4096;
        while (cap < q->len + n + 1)
            cap *= 2;
        char *body = realloc(q->body, cap < limit + 1 ? cap : limit + 1);
        if (!body) {
            q->too_large = true; /* answered the same way: the body cannot be held */
            return;
        }
        q->body = body;
        q->cap = cap < limit + 1 ? cap : limit + 1;
    }
    memcpy(q->body + q->len, data, n);
    q->len += n;
    q->body[q->len] = '\0';
}

static enum MHD_Result http_on_request(void *cls, struct MHD_Connection *c, const char *url,
                                       const char *method, const char *version,
                                       const char *upload_data, size_t *upload_data_size,
                                       void **con_cls)
{
    http_server *s = cls;
    http_request *q = *con_cls;
    if (!q) { /* the headers are in; the body (if any) comes next */
        if (!(q = calloc(1, sizeof *q))) return MHD_NO;
        q->start_ms = cli_now_ms();
        *con_cls = q;
        pthread_mutex_lock(&s->mu);
        s->in_flight++;
        pthread_mutex_unlock(&s->mu);
        const char *cl =
            MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl && strtoull(cl, NULL, 10) > (unsigned long long)s->app->cfg->max_body_bytes)
            return http_too_large(s, c, q);
        return MHD_YES;
    }
    if (q->replied) {
        *upload_data_size = 0;
        return MHD_YES;
    }
    if (*upload_data_size) {
        http_gather(s, q, upload_data, *upload_data_size);
        *upload_data_size = 0;
        return MHD_YES;
    }
    if (q->too_large) return http_too_large(s, c, q);
    serve_reply r = {0};
    serve_api_handle(s->app, method, url, q->body ? q->body : "", q->len, &r);
    q->replied = true;
    bool embedding = !strcmp(method, "POST");
    serve_metrics_request(s->app->metrics, r.status,
                          embedding ? (cli_now_ms() - q->start_ms) / 1e3 : -1);
    return http_send(c, &r);
}

static void http_on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                              enum MHD_RequestTerminationCode why)
{
    http_server *s = cls;
    http_request *q = *con_cls;
    if (!q) return;
    free(q->body);
    free(q);
    *con_cls = NULL;
    pthread_mutex_lock(&s->mu);
    if (--s->in_flight == 0) pthread_cond_broadcast(&s->idle_cv);
    pthread_mutex_unlock(&s->mu);
}

/* Waits for the requests in flight, at most HTTP_DRAIN_MS; returns how many remain. */
static int http_drain(http_server *s)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += HTTP_DRAIN_MS / 1000;
    pthread_mutex_lock(&s->mu);
    while (s->in_flight > 0)
        if (pthread_cond_timedwait(&s->idle_cv, &s->mu, &until)) break;
    int left = s->in_flight;
    pthread_mutex_unlock(&s->mu);
    return left;
}

/* The calling thread's nice value up by k, so that the threads it starts
 * from now on inherit it (the file's comment). */
static void http_lower_priority(int k)
{
    if (k <= 0) return;
    errno = 0; /* who 0: on Linux, the calling thread alone */
    int now = getpriority(PRIO_PROCESS, 0);
    if ((now == -1 && errno) || setpriority(PRIO_PROCESS, 0, now + k))
        fprintf(stderr, "stof serve: the connection threads keep the worker's priority: %s\n",
                strerror(errno));
}

static struct MHD_Daemon *http_start(http_server *s, const serve_config *cfg)
{
    struct sockaddr_in v4 = {.sin_family = AF_INET, .sin_port = htons((uint16_t)cfg->port)};
    struct sockaddr_in6 v6 = {.sin6_family = AF_INET6, .sin6_port = htons((uint16_t)cfg->port)};
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
                     MHD_USE_POLL | MHD_USE_ITC;
    const struct sockaddr *addr = (const struct sockaddr *)&v4;
    if (inet_pton(AF_INET6, cfg->host, &v6.sin6_addr) == 1) {
        flags |= MHD_USE_IPv6;
        addr = (const struct sockaddr *)&v6;
    } else if (inet_pton(AF_INET, cfg->host, &v4.sin_addr) != 1) {
        fprintf(stderr, "stof serve: --host %s is not an IPv4 or IPv6 address\n", cfg->host);
        return NULL;
    }
    http_lower_priority(cfg->connection_nice);
    struct MHD_Daemon *d = MHD_start_daemon(
        flags, (uint16_t)cfg->port, NULL, NULL, http_on_request, s, MHD_OPTION_SOCK_ADDR, addr,
        MHD_OPTION_NOTIFY_COMPLETED, http_on_completed, s, MHD_OPTION_CONNECTION_LIMIT,
        (unsigned)HTTP_MAX_CONNECTIONS, MHD_OPTION_CONNECTION_TIMEOUT, 120u, MHD_OPTION_END);
    if (!d) fprintf(stderr, "stof serve: cannot listen on %s port %d\n", cfg->host, cfg->port);
    return d;
}

int serve_http_run(serve_app *app)
{
    http_server s = {.app = app};
    struct sigaction on_stop = {.sa_handler = http_on_signal, .sa_flags = SA_RESTART};
    sigemptyset(&on_stop.sa_mask);
    sem_init(&http_stop, 0, 0);
    sigaction(SIGTERM, &on_stop, NULL);
    sigaction(SIGINT, &on_stop, NULL);
    pthread_mutex_init(&s.mu, NULL);
    pthread_cond_init(&s.idle_cv, NULL);
    struct MHD_Daemon *d = http_start(&s, app->cfg);
    if (!d) return 1;
    const union MHD_DaemonInfo *port = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    fprintf(stderr, "stof serve: listening on http://%s:%u (model %s, %d dimensions, %s)\n",
            app->cfg->host, port ? port->port : (unsigned)app->cfg->port, app->model->name,
            app->model->info.hidden, stof_ctx_device_name(app->model->ctx));
    fflush(stderr);
    int sig = http_wait_for_signal();
    /* The daemon's polling thread may still hold the listening socket in a
     * poll() it has not yet woken from (its threads run at a lower priority),
     * and a socket lives while anything holds it: close() alone would leave
     * it listening, and a client connecting now would be queued and then
     * reset rather than refused. shutdown() stops it listening at once. */
    MHD_socket listener = MHD_quiesce_daemon(d);
    if (listener != MHD_INVALID_SOCKET) {
        shutdown(listener, SHUT_RDWR);
        close(listener);
    }
    fprintf(stderr, "stof serve: %s: no new connections; answering the requests in flight\n",
            sig == SIGTERM ? "SIGTERM" : "SIGINT");
    int left = http_drain(&s);
    if (left)
        fprintf(stderr, "stof serve: %d requests still running after %d s\n", left,
                HTTP_DRAIN_MS / 1000);
    MHD_stop_daemon(d);
    pthread_cond_destroy(&s.idle_cv);
    pthread_mutex_destroy(&s.mu);
    fprintf(stderr, "stof serve: stopped\n");
    return left ? 1 : 0;
}
