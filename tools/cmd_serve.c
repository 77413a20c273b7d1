/*
 * cmd_serve.c — `stof serve`: an embeddings server for one model folder
 * (OpenAI's /v1/embeddings, text-embeddings-inference's /embed), batching
 * concurrent requests dynamically. The server itself is in tools/serve/; this
 * file reads the options, loads the model and runs it until SIGTERM or SIGINT.
 * Without libmicrohttpd at build time the command exists and says so.
 */
#include "cli.h"

#include <stdio.h>
#include <string.h>

#if STOF_HAVE_MHD
#include "serve/serve.h"

#include <signal.h>
#endif

static void serve_usage(void)
{
    printf(
        "usage: stof serve --model DIR [--host 127.0.0.1] [--port 8080] [--device auto|cpu|gpu]\n"
        "                  [--max-batch-tokens N] [--max-batch-ms T] [--max-wait-ms M]\n"
        "                  [--max-queue Q] [--connection-nice K]\n"
        "                  [--max-body-bytes B] [--truncate|--no-truncate] [--matryoshka]\n"
        "Serves sentence embeddings of the model over HTTP until SIGTERM or SIGINT, which\n"
        "stop new connections and let the requests in flight finish.\n"
        "  POST /v1/embeddings  OpenAI's API: input string, strings or token ids; model;\n"
        "                       encoding_format float|base64; dimensions; usage\n"
        "  POST /embed          text-embeddings-inference's: {\"inputs\", \"normalize\", "
        "\"truncate\"}\n"
        "  GET  /health, /v1/models, /metrics (Prometheus)\n"
        "  --port P               0 picks a free port (printed when listening)\n"
        "  --max-batch-tokens N   a forward's ids, padded, at most N (default 16384)\n"
        "  --max-batch-ms T       aim at forwards of about T ms: the token budget adapts,\n"
        "                         at most N, so that a short request under load waits\n"
        "                         about 2T (default 3 on a GPU; 0, off, on the CPU)\n"
        "  --max-wait-ms M        a batch short of N waits at most M ms for more (default 2)\n"
        "  --max-queue Q          requests queued or running; more get 503 (default 1024)\n"
        "  --connection-nice K    the connection threads (parsing, tokenizing, encoding)\n"
        "                         run K nice levels below the batch worker, which every\n"
        "                         request waits on (default 10; 0: same priority)\n"
        "  --max-body-bytes B     larger bodies get 413 (default 8388608)\n"
        "  --truncate             cut texts over the model's length (the default)\n"
        "  --no-truncate          answer them with 413 (/embed's \"truncate\" overrides)\n"
        "  --matryoshka           the model was trained Matryoshka-style: `dimensions` may\n"
        "                         shorten its embeddings (renormalised)\n"
#if !STOF_HAVE_MHD
        "This stof was built without libmicrohttpd (Debian: libmicrohttpd-dev), so it\n"
        "cannot serve: install it and build again.\n"
#endif
    );
}

#if !STOF_HAVE_MHD
int cmd_serve(cli_args *a)
{
    for (int i = a->pos; i < a->argc; i++)
        if (strcmp(a->argv[i], "--help") == 0) {
            serve_usage();
            return 0;
        }
    fprintf(stderr, "stof serve: this stof was built without libmicrohttpd "
                    "(Debian: libmicrohttpd-dev); install it and build again\n");
    return 1;
}
#else

/* The folder's last component: what clients call the model. */
static const char *serve_model_name(const char *dir, char *buf, size_t cap)
{
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/')
        n--;
    size_t start = n;
    while (start > 0 && dir[start - 1] != '/')
        start--;
    snprintf(buf, cap, "%.*s", (int)(n - start), dir + start);
    return buf;
}

static int serve_load(const cli_args *a, const serve_config *cfg, serve_model *m)
{
    stof_ctx_params cp = stof_ctx_default_params();
    cp.device = cfg->device;
    stof_model_params mp = stof_model_default_params();
    stof_status st;
    if ((st = stof_ctx_create(&cp, &m->ctx))) return cli_fail(a, "creating the context", st);
    if ((st = stof_tokenizer_open(cfg->model_dir, &m->tok)))
        return cli_fail(a, "loading the tokenizer", st);
    if ((st = stof_model_load(m->ctx, cfg->model_dir, &mp, &m->model)) ||
        (st = stof_model_get_info(m->model, &m->info)))
        return cli_fail(a, "loading the model", st);
    m->max_len = stof_tokenizer_max_length(m->tok, m->info.max_positions);
    if (m->max_len < 2) {
        fprintf(stderr, "stof serve: the model's %d positions leave no room for [CLS] and [SEP]\n",
                m->info.max_positions);
        return 1;
    }
    if (cfg->max_batch_tokens < m->max_len) {
        fprintf(stderr,
                "stof serve: --max-batch-tokens %d is below the model's %d tokens per text\n",
                cfg->max_batch_tokens, m->max_len);
        return 2;
    }
    return 0;
}

int cmd_serve(cli_args *a)
{
    serve_config cfg = {.host = "127.0.0.1",
                        .port = 8080,
                        .device = STOF_DEVICE_AUTO,
                        .max_batch_tokens = 16384,
                        .max_wait_ms = 2,
                        .max_queue = 1024,
                        .connection_nice = 10,
                        .max_body_bytes = 8 << 20,
                        .truncate = true};
    bool truncate = false, no_truncate = false, batch_ms_set = false;
    const cli_opt opts[] = {
        CLI_OPT_STRING("--model", &cfg.model_dir),
        CLI_OPT_STRING("--host", &cfg.host),
        CLI_OPT_INT("--port", &cfg.port, 0, 65535),
        CLI_OPT_DEVICE("--device", &cfg.device),
        CLI_OPT_INT("--max-batch-tokens", &cfg.max_batch_tokens, 2, 1 << 24),
        CLI_OPT_INT_SET("--max-batch-ms", &cfg.max_batch_ms, 0, 60000, &batch_ms_set),
        CLI_OPT_INT("--max-wait-ms", &cfg.max_wait_ms, 0, 60000),
        CLI_OPT_INT("--max-queue", &cfg.max_queue, 1, 1 << 20),
        CLI_OPT_INT("--connection-nice", &cfg.connection_nice, 0, 19),
        CLI_OPT_INT("--max-body-bytes", &cfg.max_body_bytes, 64, 1 << 30),
        CLI_OPT_FLAG("--truncate", &truncate),
        CLI_OPT_FLAG("--no-truncate", &no_truncate),
        CLI_OPT_FLAG("--matryoshka", &cfg.matryoshka),
    };
    if (!cli_parse(a, opts, CLI_COUNT(opts), serve_usage)) return 2;
    if (!cfg.model_dir) {
        fprintf(stderr, "stof serve: --model DIR is required (see stof serve --help)\n");
        return 2;
    }
    if (truncate && no_truncate) {
        fprintf(stderr, "stof serve: give --truncate or --no-truncate, not both\n");
        return 2;
    }
    cfg.truncate = !no_truncate;
    /* Kept off the threads started from here on (the batcher's, the HTTP
     * daemon's), so that their system calls are not interrupted; the main
     * thread takes them in serve_http_run. */
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGTERM);
    sigaddset(&stop, SIGINT);
    pthread_sigmask(SIG_BLOCK, &stop, NULL);
    signal(SIGPIPE, SIG_IGN);

    char name[256];
    serve_model m = {.name = serve_model_name(cfg.model_dir, name, sizeof name)};
    serve_metrics metrics;
    serve_metrics_init(&metrics);
    serve_app app = {.cfg = &cfg, .model = &m, .metrics = &metrics};
    int rc = serve_load(a, &cfg, &m);
    if (!rc && !batch_ms_set) /* a CPU forward's time is its tokens': batches only gain there */
        cfg.max_batch_ms = stof_ctx_device(m.ctx) == STOF_DEVICE_GPU ? 3 : 0;
    stof_status st;
    if (!rc && (st = serve_batcher_start(&m, &cfg, &metrics, &app.batcher)))
        rc = cli_fail(a, "starting the batcher", st);
    if (!rc) rc = serve_http_run(&app);
    serve_batcher_stop(app.batcher);
    stof_model_destroy(m.model);
    stof_tokenizer_destroy(m.tok);
    stof_ctx_destroy(m.ctx);
    pthread_mutex_destroy(&metrics.mu);
    return rc;
}
#endif
