/*
 * pool.c — the CPU backend's thread pool: threads are created on first need
 * and then sleep on a condition variable between jobs; a job is a range of
 * items handed out one at a time through an atomic counter, so uneven items
 * (causal attention rows, global-token rows) balance themselves.
 *
 * The one non-obvious choice: one job at a time, taken with a try-lock. A
 * second caller (another user thread, or a job item that itself calls
 * cpu_pool_for) does not wait for the pool but runs its items inline, so
 * nesting cannot deadlock and two user threads never block each other.
 */
#include "cpu/pool.h"

#include <cblas.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { POOL_MAX_THREADS = 256 };

static struct {
    pthread_mutex_t submit; /* held by the caller the pool is serving */
    pthread_mutex_t lock;   /* guards everything below */
    pthread_cond_t wake, done;
    int started;         /* pool threads created (workers 1 .. started) */
    uint64_t generation; /* bumped once per job */
    cpu_pool_fn fn;
    void *arg;
    int64_t n;
    int helpers;       /* pool threads taking part in the current job */
    int active;        /* of those, still working */
    atomic_llong next; /* next item to hand out */
} pool = {.submit = PTHREAD_MUTEX_INITIALIZER,
          .lock = PTHREAD_MUTEX_INITIALIZER,
          .wake = PTHREAD_COND_INITIALIZER,
          .done = PTHREAD_COND_INITIALIZER};

int cpu_threads_resolve(int requested)
{
    if (requested <= 0) {
        const char *env = getenv("STOF_CPU_THREADS");
        char *end = NULL;
        long n = env ? strtol(env, &end, 10) : 0;
        if (env && end != env && *end == '\0' && n > 0) requested = n < INT_MAX ? (int)n : INT_MAX;
    }
    if (requested > 0) return requested < POOL_MAX_THREADS ? requested : POOL_MAX_THREADS;
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    if (online < 1) return 1;
    return online < POOL_MAX_THREADS ? (int)online : POOL_MAX_THREADS;
}

static void run_items(int worker)
{
    for (;;) {
        long long i = atomic_fetch_add_explicit(&pool.next, 1, memory_order_relaxed);
        if (i >= pool.n) return;
        pool.fn(pool.arg, (int64_t)i, worker);
    }
}

static void *pool_worker(void *p)
{
    int id = (int)(intptr_t)p;
    uint64_t seen = 0;
    for (;;) {
        pthread_mutex_lock(&pool.lock);
        while (pool.generation == seen)
            pthread_cond_wait(&pool.wake, &pool.lock);
        seen = pool.generation;
        int mine = id <= pool.helpers;
        pthread_mutex_unlock(&pool.lock);
        if (!mine) continue;
        run_items(id);
        pthread_mutex_lock(&pool.lock);
        if (--pool.active == 0) pthread_cond_signal(&pool.done);
        pthread_mutex_unlock(&pool.lock);
    }
    return NULL;
}

/* Pool threads up to `want`; returns how many exist (fewer if creation fails). */
static int grow(int want)
{
    while (pool.started < want) {
        pthread_t t;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        int rc = pthread_create(&t, &attr, pool_worker, (void *)(intptr_t)(pool.started + 1));
        pthread_attr_destroy(&attr);
        if (rc != 0) break;
        pool.started++;
    }
    return pool.started;
}

void cpu_pool_for(int threads, int64_t n, cpu_pool_fn fn, void *arg)
{
    if (n <= 0) return;
    threads = cpu_threads_resolve(threads);
    if (threads > n) threads = (int)n;
    if (threads <= 1 || pthread_mutex_trylock(&pool.submit) != 0) {
        for (int64_t i = 0; i < n; i++)
            fn(arg, i, 0);
        return;
    }
    pthread_mutex_lock(&pool.lock);
    int helpers = grow(threads - 1);
    if (helpers > threads - 1) helpers = threads - 1;
    pool.fn = fn;
    pool.arg = arg;
    pool.n = n;
    pool.helpers = helpers;
    pool.active = helpers;
    atomic_store_explicit(&pool.next, 0, memory_order_relaxed);
    pool.generation++;
    pthread_cond_broadcast(&pool.wake);
    pthread_mutex_unlock(&pool.lock);

    run_items(0);

    pthread_mutex_lock(&pool.lock);
    while (pool.active > 0)
        pthread_cond_wait(&pool.done, &pool.lock);
    pthread_mutex_unlock(&pool.lock);
    pthread_mutex_unlock(&pool.submit);
}

int cpu_blas_threads_enter(int threads)
{
    int previous = openblas_get_num_threads();
    int want = cpu_threads_resolve(threads);
    if (want != previous) openblas_set_num_threads(want);
    return previous;
}

void cpu_blas_threads_restore(int previous)
{
    if (previous > 0 && previous != openblas_get_num_threads()) openblas_set_num_threads(previous);
}

bool cpu_use_reference(void)
{
    const char *v = getenv("STOF_CPU_REFERENCE");
    return v && strcmp(v, "1") == 0;
}
