/*
 * tokenize_api.c — the public tokenizer calls of stof.h: open (which picks WordPiece,
 * BPE or Unigram from the folder), encode, decode, info, and the batch calls, which
 * spread texts over worker threads (each with its own tok_work) and keep input order.
 *
 * The folder is resolved as sentence-transformers resolves it (io/hf_folder.h). BERT
 * WordPiece folders keep their streaming tokenizer (wordpiece.h); every other
 * tokenizer.json runs through the pipeline of tok.h.
 */
#include "tok/tok.h"
#include "io/hf_folder.h"
#include "io/json.h"

#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TOK_MAX_THREADS 256
#define TOK_BATCH_CHUNK 32 /* texts a worker takes at a time */

/* ------------------------------------------------------------------ open */

/* A special token's id from tokenizer_config.json ("<s>" or {"content": "<s>"}), -1. */
static int32_t config_token(const stof_tokenizer *t, const cJSON *cfg, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, key);
    if (cJSON_IsObject(v)) v = cJSON_GetObjectItemCaseSensitive(v, "content");
    if (!cJSON_IsString(v)) return -1;
    const char *s = v->valuestring;
    size_t n = strlen(s);
    if (t->wp) return tok_wp_token_to_id(t->wp, s);
    for (int i = 0; i < t->pipe->n_added; i++)
        if (t->pipe->added[i].len == n && memcmp(t->pipe->added[i].content, s, n) == 0)
            return t->pipe->added[i].id;
    return tok_vocab_find(&t->pipe->vocab, s, n);
}

static stof_status read_config(stof_tokenizer *t, const char *dir)
{
    cJSON *cfg = NULL, *sb = NULL;
    stof_status st = io_json_load_if_present(dir, "tokenizer_config.json", &cfg);
    if (st == STOF_OK) st = io_json_load_if_present(dir, "sentence_bert_config.json", &sb);
    if (st == STOF_OK && sb)
        st = io_json_int(sb, "max_seq_length", 1, INT_MAX, &t->st_max_seq_length,
                         "sentence_bert_config.json");
    if (st == STOF_OK && cfg) {
        const cJSON *m = cJSON_GetObjectItemCaseSensitive(cfg, "model_max_length");
        /* transformers writes int(1e30) for "no limit". */
        if (cJSON_IsNumber(m) && m->valuedouble < (double)INT_MAX)
            st = io_json_int(cfg, "model_max_length", 1, INT_MAX, &t->model_max_length,
                             "tokenizer_config.json");
        const char *side = NULL;
        if (st == STOF_OK)
            st = io_json_string(cfg, "padding_side", true, &side, "tokenizer_config.json");
        t->pad_left = side && strcmp(side, "left") == 0;
        if (st == STOF_OK)
            st = io_json_string(cfg, "truncation_side", true, &side, "tokenizer_config.json");
        t->truncate_left = side && strcmp(side, "left") == 0;
        t->pad_id = config_token(t, cfg, "pad_token");
        t->bos_id = config_token(t, cfg, "bos_token");
        t->eos_id = config_token(t, cfg, "eos_token");
        int32_t unk = config_token(t, cfg, "unk_token");
        if (unk >= 0) t->unk_id = unk;
    }
    cJSON_Delete(cfg);
    cJSON_Delete(sb);
    return st;
}

static stof_status open_pipe(stof_tokenizer *t, const char *dir, const cJSON *root)
{
    STOF_TRY(stof_host_calloc(1, sizeof *t->pipe, (void **)&t->pipe));
    STOF_TRY(tok_pipe_load(t->pipe, root, "tokenizer.json"));
    t->kind = t->pipe->model == TOK_MODEL_BPE ? TOK_KIND_BPE : TOK_KIND_UNIGRAM;
    t->vocab_size = t->pipe->n_ids;
    t->unk_id = t->pipe->unk_id;
    return read_config(t, dir);
}

static stof_status open_wordpiece(stof_tokenizer *t, const char *dir)
{
    t->kind = TOK_KIND_WORDPIECE;
    STOF_TRY(tok_wp_load(dir, &t->wp));
    const tok_wp_info *info = tok_wp_get_info(t->wp);
    t->vocab_size = info->vocab_size;
    t->model_max_length = info->model_max_length;
    t->st_max_seq_length = info->st_max_seq_length;
    t->pad_id = info->pad_id;
    t->bos_id = info->cls_id;
    t->eos_id = info->sep_id;
    t->unk_id = info->unk_id;
    return STOF_OK;
}

static bool is_wordpiece(const cJSON *root)
{
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(root, "model");
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(m, "type");
    return cJSON_IsString(type) && strcmp(type->valuestring, "WordPiece") == 0;
}

static stof_status open_dir(stof_tokenizer *t, const char *dir)
{
    cJSON *root = NULL;
    STOF_TRY(io_json_load_if_present(dir, "tokenizer.json", &root));
    stof_status st;
    if (!root || is_wordpiece(root))
        st = open_wordpiece(t, dir);
    else
        st = open_pipe(t, dir, root);
    cJSON_Delete(root);
    return st;
}

stof_status stof_tokenizer_open(const char *dir, stof_tokenizer **out)
{
    STOF_REQUIRE(out, STOF_ERR_INVALID_ARG, "stof_tokenizer_open: out is NULL");
    *out = NULL;
    STOF_REQUIRE(dir && *dir, STOF_ERR_INVALID_ARG, "stof_tokenizer_open: no model folder given");
    char *path;
    STOF_TRY(stof_host_alloc(IO_PATH_MAX, (void **)&path));
    stof_tokenizer *t = NULL;
    stof_status st = io_hf_tokenizer_dir(dir, path, IO_PATH_MAX);
    if (st == STOF_OK) st = stof_host_calloc(1, sizeof *t, (void **)&t);
    if (st == STOF_OK) {
        t->pad_id = t->bos_id = t->eos_id = t->unk_id = -1;
        pthread_mutex_init(&t->pool_lock, NULL);
        st = open_dir(t, path);
    }
    free(path);
    if (st != STOF_OK) {
        stof_tokenizer_destroy(t);
        return st;
    }
    *out = t;
    return STOF_OK;
}

void stof_tokenizer_destroy(stof_tokenizer *tok)
{
    if (!tok) return;
    for (int i = 0; i < tok->n_pool; i++)
        tok_work_free(tok->pool[i]);
    pthread_mutex_destroy(&tok->pool_lock);
    tok_wp_destroy(tok->wp);
    tok_pipe_free(tok->pipe);
    free(tok->pipe);
    free(tok);
}

int stof_tokenizer_max_length(const stof_tokenizer *tok, int max_positions)
{
    if (!tok) return 0;
    int n = tok->st_max_seq_length > 0 ? tok->st_max_seq_length : tok->model_max_length;
    if (n <= 0 || (max_positions > 0 && n > max_positions)) n = max_positions;
    return n;
}

stof_encode_params stof_encode_default_params(void)
{
    return (stof_encode_params){.add_special_tokens = 1, .max_length = 0};
}

stof_decode_params stof_decode_default_params(void)
{
    return (stof_decode_params){.skip_special_tokens = 1, .stream = 0};
}

stof_status stof_tokenizer_get_info(const stof_tokenizer *tok, stof_tokenizer_info *out)
{
    STOF_REQUIRE(tok && out, STOF_ERR_INVALID_ARG, "stof_tokenizer_get_info: NULL argument");
    *out = (stof_tokenizer_info){
        .model = tok->kind == TOK_KIND_WORDPIECE ? STOF_TOKENIZER_WORDPIECE
                 : tok->kind == TOK_KIND_BPE     ? STOF_TOKENIZER_BPE
                                                 : STOF_TOKENIZER_UNIGRAM,
        .vocab_size = tok->vocab_size,
        .max_length = stof_tokenizer_max_length(tok, 0),
        .pad_id = tok->pad_id,
        .bos_id = tok->bos_id,
        .eos_id = tok->eos_id,
        .unk_id = tok->unk_id,
    };
    return STOF_OK;
}

/* ------------------------------------------------------------------ encode */

/* A work space from the tokenizer's pool, or a new one. */
static stof_status work_take(const stof_tokenizer *t, tok_work **w)
{
    stof_tokenizer *m = (stof_tokenizer *)t; /* the pool is the one mutable part */
    *w = NULL;
    pthread_mutex_lock(&m->pool_lock);
    if (m->n_pool > 0) *w = m->pool[--m->n_pool];
    pthread_mutex_unlock(&m->pool_lock);
    return *w ? STOF_OK : tok_work_new(t->pipe, w);
}

static void work_give(const stof_tokenizer *t, tok_work *w)
{
    stof_tokenizer *m = (stof_tokenizer *)t;
    if (!w) return;
    pthread_mutex_lock(&m->pool_lock);
    if (m->n_pool < TOK_POOL) {
        m->pool[m->n_pool++] = w;
        w = NULL;
    }
    pthread_mutex_unlock(&m->pool_lock);
    tok_work_free(w);
}

/* One text's ids appended to out; w is the caller's work space (pipeline only). */
static stof_status encode_one(const stof_tokenizer *t, tok_work *w, const char *text, size_t len,
                              const stof_encode_params *ep, tok_ids *out)
{
    int max_len = ep->max_length < 0 ? stof_tokenizer_max_length(t, 0) : ep->max_length;
    if (t->kind != TOK_KIND_WORDPIECE)
        return tok_pipe_encode(t->pipe, w, text, len, ep->add_special_tokens != 0, max_len,
                               t->truncate_left, out);
    /* WordPiece frames every sequence with [CLS] and [SEP]: count, then cut. */
    int64_t count;
    STOF_TRY(tok_wp_count(t->wp, text, len, &count));
    int64_t want = count;
    if (max_len > 0) want = ep->add_special_tokens ? max_len : (int64_t)max_len + 2;
    if (want > count) want = count;
    STOF_REQUIRE(want >= 2 && want <= INT_MAX, STOF_ERR_INVALID_ARG,
                 "max_length %d leaves no room for [CLS] and [SEP]", max_len);
    size_t at = out->n;
    for (int64_t i = 0; i < want; i++)
        STOF_TRY(tok_ids_put(out, 0));
    int n;
    STOF_TRY(tok_wp_encode(t->wp, text, len, (int)want, out->p + at, (int)want, &n));
    if (!ep->add_special_tokens) {
        memmove(out->p + at, out->p + at + 1, (size_t)(n - 2) * sizeof *out->p);
        out->n = at + (size_t)n - 2;
    }
    return STOF_OK;
}

stof_status stof_tokenizer_encode(const stof_tokenizer *tok, const char *text, size_t len,
                                  const stof_encode_params *params, int32_t *ids, size_t cap,
                                  size_t *n)
{
    STOF_REQUIRE(tok && n && (text || len == 0) && (ids || cap == 0), STOF_ERR_INVALID_ARG,
                 "stof_tokenizer_encode: tok, text, ids and n must be given");
    stof_encode_params ep = params ? *params : stof_encode_default_params();
    tok_work *w = NULL;
    tok_ids out = {0};
    stof_status st = work_take(tok, &w);
    if (st == STOF_OK) st = encode_one(tok, w, text ? text : "", len, &ep, &out);
    if (st == STOF_OK) {
        *n = out.n;
        if (out.n > cap)
            st = stof_error(STOF_ERR_INVALID_ARG,
                            "stof_tokenizer_encode: %zu ids do not fit in %zu", out.n, cap);
        else if (out.n)
            memcpy(ids, out.p, out.n * sizeof *ids);
    }
    free(out.p);
    work_give(tok, w);
    return st;
}

/* ------------------------------------------------------------------ batch */

typedef struct batch_job {
    const stof_tokenizer *tok;
    const char *const *texts;
    const size_t *lens;
    int batch;
    const stof_encode_params *ep;
    int next; /* the next unclaimed text, under lock */
    int workers;
    pthread_mutex_t lock;
    int *owner;       /* [batch] worker that encoded the text */
    size_t *start;    /* [batch] its first id in that worker's buffer */
    size_t *count;    /* [batch] */
    tok_ids *results; /* [workers] */
    stof_status *status;
} batch_job;

typedef struct batch_worker {
    batch_job *job;
    int index;
} batch_worker;

static void *batch_run(void *arg)
{
    batch_worker *me = arg;
    batch_job *j = me->job;
    tok_work *w = NULL;
    stof_status st = work_take(j->tok, &w);
    tok_ids *out = &j->results[me->index];
    while (st == STOF_OK) {
        pthread_mutex_lock(&j->lock);
        int first = j->next;
        j->next = first + TOK_BATCH_CHUNK < j->batch ? first + TOK_BATCH_CHUNK : j->batch;
        int last = j->next;
        pthread_mutex_unlock(&j->lock);
        if (first >= last) break;
        for (int i = first; st == STOF_OK && i < last; i++) {
            const char *s = j->texts[i] ? j->texts[i] : "";
            size_t len = j->lens ? j->lens[i] : strlen(s);
            j->owner[i] = me->index;
            j->start[i] = out->n;
            st = encode_one(j->tok, w, s, len, j->ep, out);
            j->count[i] = out->n - j->start[i];
        }
    }
    work_give(j->tok, w);
    j->status[me->index] = st;
    return NULL;
}

static int thread_count(int threads, int batch)
{
    if (threads <= 0) {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        threads = cores > 0 ? (int)cores : 1;
    }
    if (threads > TOK_MAX_THREADS) threads = TOK_MAX_THREADS;
    int useful = (batch + TOK_BATCH_CHUNK - 1) / TOK_BATCH_CHUNK;
    return threads < useful ? threads : (useful > 0 ? useful : 1);
}

/* Encodes every text; on success the caller gathers job->results, then batch_done. */
static stof_status batch_encode(batch_job *j, int threads)
{
    int nt = thread_count(threads, j->batch);
    size_t b = (size_t)j->batch;
    j->owner = calloc(b, sizeof *j->owner);
    j->start = calloc(b, sizeof *j->start);
    j->count = calloc(b, sizeof *j->count);
    j->results = calloc((size_t)nt, sizeof *j->results);
    j->status = calloc((size_t)nt, sizeof *j->status);
    batch_worker *ws = calloc((size_t)nt, sizeof *ws);
    pthread_t *tids = calloc((size_t)nt, sizeof *tids);
    stof_status st =
        j->owner && j->start && j->count && j->results && j->status && ws && tids
            ? STOF_OK
            : stof_error(STOF_ERR_OOM, "out of memory for a batch of %d texts", j->batch);
    bool *created = calloc((size_t)nt, sizeof *created);
    if (st == STOF_OK && !created)
        st = stof_error(STOF_ERR_OOM, "out of memory for a batch of %d texts", j->batch);
    if (st == STOF_OK) {
        pthread_mutex_init(&j->lock, NULL);
        /* A worker that cannot be started leaves its share to the others. */
        for (int i = 0; i < nt; i++) {
            ws[i] = (batch_worker){j, i};
            if (i > 0) created[i] = pthread_create(&tids[i], NULL, batch_run, &ws[i]) == 0;
        }
        batch_run(&ws[0]); /* the calling thread works too */
        for (int i = 1; i < nt; i++)
            if (created[i]) pthread_join(tids[i], NULL);
        pthread_mutex_destroy(&j->lock);
        for (int i = 0; i < nt && st == STOF_OK; i++)
            st = j->status[i];
    }
    free(created);
    free(ws);
    free(tids);
    j->workers = nt;
    return st;
}

static void batch_done(batch_job *j)
{
    if (j->results)
        for (int i = 0; i < j->workers; i++)
            free(j->results[i].p);
    free(j->owner);
    free(j->start);
    free(j->count);
    free(j->results);
    free(j->status);
}

stof_status stof_tokenizer_encode_batch(const stof_tokenizer *tok, const char *const *texts,
                                        const size_t *lens, int batch,
                                        const stof_encode_params *params, int threads,
                                        stof_token_lists *out)
{
    STOF_REQUIRE(tok && texts && out && batch >= 0, STOF_ERR_INVALID_ARG,
                 "stof_tokenizer_encode_batch: tok, texts and out must be given, batch >= 0");
    memset(out, 0, sizeof *out);
    stof_encode_params ep = params ? *params : stof_encode_default_params();
    batch_job j = {.tok = tok, .texts = texts, .lens = lens, .batch = batch, .ep = &ep};
    stof_status st = batch_encode(&j, threads);
    size_t total = 0;
    for (int i = 0; st == STOF_OK && i < batch; i++)
        total += j.count[i];
    if (st == STOF_OK) {
        out->ids = malloc((total ? total : 1) * sizeof *out->ids);
        out->offsets = malloc(((size_t)batch + 1) * sizeof *out->offsets);
        if (!out->ids || !out->offsets)
            st = stof_error(STOF_ERR_OOM, "out of memory for %zu ids", total);
    }
    if (st == STOF_OK) {
        size_t at = 0;
        for (int i = 0; i < batch; i++) {
            out->offsets[i] = (int64_t)at;
            if (j.count[i])
                memcpy(out->ids + at, j.results[j.owner[i]].p + j.start[i],
                       j.count[i] * sizeof *out->ids);
            at += j.count[i];
        }
        out->offsets[batch] = (int64_t)at;
        out->batch = batch;
    }
    batch_done(&j);
    if (st != STOF_OK) stof_token_lists_free(out);
    return st;
}

void stof_token_lists_free(stof_token_lists *l)
{
    if (!l) return;
    free(l->ids);
    free(l->offsets);
    memset(l, 0, sizeof *l);
}

stof_status stof_tokenize_batch(const stof_tokenizer *tok, const char *const *texts,
                                const size_t *lens, int batch, int max_len, int32_t *ids,
                                size_t ids_cap, int32_t *lengths, int *seq_len)
{
    STOF_REQUIRE(tok && texts && ids && lengths, STOF_ERR_INVALID_ARG,
                 "stof_tokenize_batch: tok, texts, ids and lengths must be given");
    STOF_REQUIRE(batch >= 1, STOF_ERR_INVALID_ARG, "stof_tokenize_batch: batch %d < 1", batch);
    STOF_REQUIRE(max_len >= 2, STOF_ERR_INVALID_ARG,
                 "stof_tokenize_batch: max_len %d leaves no room for [CLS] and [SEP] (at least 2)",
                 max_len);
    stof_encode_params ep = stof_encode_default_params();
    ep.max_length = max_len;
    stof_token_lists l;
    STOF_TRY(stof_tokenizer_encode_batch(tok, texts, lens, batch, &ep, 1, &l));
    int L = 0;
    for (int b = 0; b < batch; b++) {
        int n = (int)(l.offsets[b + 1] - l.offsets[b]);
        if (n > L) L = n;
    }
    size_t cells = (size_t)batch * (size_t)L;
    stof_status st = STOF_OK;
    if (cells > ids_cap)
        st = stof_error(STOF_ERR_INVALID_ARG,
                        "stof_tokenize_batch: the batch is %d x %d ids but ids holds %zu", batch, L,
                        ids_cap);
    int32_t pad = tok->pad_id >= 0 ? tok->pad_id : 0;
    for (int b = 0; st == STOF_OK && b < batch; b++) {
        int n = (int)(l.offsets[b + 1] - l.offsets[b]);
        int32_t *row = ids + (size_t)b * L;
        int lead = tok->pad_left ? L - n : 0;
        for (int k = 0; k < L; k++)
            row[k] = pad;
        memcpy(row + lead, l.ids + l.offsets[b], (size_t)n * sizeof *row);
        lengths[b] = n;
    }
    if (st == STOF_OK && seq_len) *seq_len = L;
    stof_token_lists_free(&l);
    return st;
}

/* ------------------------------------------------------------------ decode */

/* WordPiece folders decode as the library's WordPiece decoder ("##", cleanup). */
static stof_status decode_wordpiece(const tok_wp *wp, const int32_t *ids, size_t n,
                                    bool skip_special, bool stream, tok_buf *out, size_t *held)
{
    const tok_wp_info *info = tok_wp_get_info(wp);
    tok_buf toks = {0};
    tok_spans spans = {0};
    stof_status st = STOF_OK;
    for (size_t i = 0; st == STOF_OK && i < n; i++) {
        int32_t id = ids[i];
        if (skip_special && (id == info->pad_id || id == info->unk_id || id == info->cls_id ||
                             id == info->sep_id || id == info->mask_id))
            continue;
        const char *s = tok_wp_id_to_token(wp, id);
        if (!s) continue;
        size_t at = toks.n;
        st = tok_buf_put(&toks, s, strlen(s));
        if (st == STOF_OK) st = tok_spans_put(&spans, at, toks.n);
    }
    tok_dec d = {.kind = TOK_DEC_WORDPIECE, .from = "##", .from_len = 2, .cleanup = true};
    if (st == STOF_OK) st = tok_decode_tokens(&d, 1, true, &toks, &spans, stream, out, held);
    free(toks.p);
    free(spans.p);
    return st;
}

stof_status stof_tokenizer_decode(const stof_tokenizer *tok, const int32_t *ids, size_t n,
                                  const stof_decode_params *params, char *text, size_t cap,
                                  size_t *len, size_t *held)
{
    STOF_REQUIRE(tok && (ids || n == 0) && len && (text || cap == 0), STOF_ERR_INVALID_ARG,
                 "stof_tokenizer_decode: tok, ids, text and len must be given");
    stof_decode_params dp = params ? *params : stof_decode_default_params();
    tok_buf out = {0};
    size_t h = 0;
    stof_status st = tok->kind == TOK_KIND_WORDPIECE
                         ? decode_wordpiece(tok->wp, ids, n, dp.skip_special_tokens != 0,
                                            dp.stream != 0, &out, &h)
                         : tok_pipe_decode(tok->pipe, ids, n, dp.skip_special_tokens != 0,
                                           dp.stream != 0, &out, &h);
    if (st == STOF_OK) {
        *len = out.n;
        if (held) *held = h;
        if (out.n + 1 > cap)
            st = stof_error(STOF_ERR_INVALID_ARG,
                            "stof_tokenizer_decode: %zu bytes of text do not fit in %zu", out.n + 1,
                            cap);
        else
            memcpy(text, out.p, out.n + 1);
    }
    free(out.p);
    return st;
}
