/*
 * test_cpu_pool.c — the CPU backend's thread pool: every item runs exactly
 * once and on a worker index below the thread count, for many thread counts
 * and item counts; a nested call and calls from two user threads at once
 * complete (inline) instead of deadlocking; thread counts resolve as
 * documented (STOF_CPU_THREADS included).
 */
#include "cpu/pool.h"
#include "testlib.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

typedef struct visits {
    atomic_int *count;
    int threads;
    atomic_int bad_worker;
    int nested; /* items that start a nested pool call */
} visits;

static void visit(void *arg, int64_t item, int worker)
{
    visits *v = arg;
    atomic_fetch_add(&v->count[item], 1);
    if (worker < 0 || worker >= v->threads) atomic_fetch_add(&v->bad_worker, 1);
    if (v->nested && item % 7 == 0) {
        visits inner = {calloc(5, sizeof(atomic_int)), v->threads, 0, 0};
        cpu_pool_for(v->threads, 5, visit, &inner);
        for (int i = 0; i < 5; i++)
            if (atomic_load(&inner.count[i]) != 1) atomic_fetch_add(&v->bad_worker, 1000);
        free(inner.count);
    }
}

/* Problems of one run (0: every item ran once, on a valid worker); printed.
 * Counted by the caller, because testlib's counters are not atomic and
 * user_thread runs this beside the main thread. */
static int run_problems(int threads, int64_t n, int nested)
{
    visits v = {calloc((size_t)n + 1, sizeof(atomic_int)), cpu_threads_resolve(threads), 0, nested};
    cpu_pool_for(threads, n, visit, &v);
    int64_t wrong = 0;
    for (int64_t i = 0; i < n; i++)
        wrong += atomic_load(&v.count[i]) != 1;
    int bad = atomic_load(&v.bad_worker);
    if (wrong)
        fprintf(stderr, "threads %d, %lld items%s: %lld items not run exactly once\n", threads,
                (long long)n, nested ? " (nested)" : "", (long long)wrong);
    if (bad)
        fprintf(stderr, "threads %d, %lld items: bad worker index or nested run (%d)\n", threads,
                (long long)n, bad);
    free(v.count);
    return (wrong != 0) + (bad != 0);
}

static void check_run(int threads, int64_t n, int nested)
{
    CHECK(run_problems(threads, n, nested) == 0, "threads %d, %lld items%s", threads, (long long)n,
          nested ? " (nested)" : "");
}

/* 50 runs of 1000 items on 3 threads; *arg counts the runs with problems. */
static void *user_thread(void *arg)
{
    int *problems = arg;
    for (int r = 0; r < 50; r++)
        *problems += run_problems(3, 1000, 0) != 0;
    return NULL;
}

int main(void)
{
    unsetenv("STOF_CPU_THREADS");
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    CHECK(cpu_threads_resolve(0) == (online < 1 ? 1 : online), "0 threads resolve to %ld cores",
          online);
    CHECK(cpu_threads_resolve(3) == 3, "3 threads stay 3");
    setenv("STOF_CPU_THREADS", "5", 1);
    CHECK(cpu_threads_resolve(0) == 5, "STOF_CPU_THREADS=5 gives 5 for 0");
    CHECK(cpu_threads_resolve(2) == 2, "an explicit count wins over STOF_CPU_THREADS");
    setenv("STOF_CPU_THREADS", "x", 1);
    CHECK(cpu_threads_resolve(0) == (online < 1 ? 1 : online),
          "a malformed STOF_CPU_THREADS is ignored");
    unsetenv("STOF_CPU_THREADS");
    const int threads[] = {1, 2, 3, 5, 8};
    const int64_t items[] = {0, 1, 2, 7, 64, 1001};
    for (int t = 0; t < 5; t++)
        for (int i = 0; i < 6; i++)
            for (int rep = 0; rep < 20; rep++)
                check_run(threads[t], items[i], 0);
    check_run(4, 300, 1);
    pthread_t other;
    int problems_other = 0, problems_main = 0;
    int started = pthread_create(&other, NULL, user_thread, &problems_other) == 0;
    CHECK(started, "pthread_create");
    user_thread(&problems_main);
    if (started) pthread_join(other, NULL);
    CHECK(problems_other == 0 && problems_main == 0,
          "two user threads at once: %d and %d runs with problems", problems_other, problems_main);
    return test_finish("test_cpu_pool");
}
