/* A minimal parallel-for over items for the kernels in this folder: the calling thread and up to threads - 1
 * helper threads take items from a shared counter.
 *
 * Why not OpenMP: libgomp's idle workers spin for a long while after every parallel region. On a 2-core machine
 * that competes with the Python threads around the kernels (the event loop, the GIL holder) and sometimes
 * halved a whole decode step. Here a helper polls for at most SPIN_NS after its last job, then sleeps on a
 * condition variable; the caller never waits for a helper to wake: it takes items itself from the start, and
 * waits at the end only for helpers that joined the job (each finishing the item it holds).
 * Fork-safe in the sense that a child process has no helpers and runs every item itself.
 */
#ifndef NATIVE_ENGINE_WORK_POOL_H
#define NATIVE_ENGINE_WORK_POOL_H

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#define POOL_MAX_HELPERS 15
#define POOL_CLOSED (1 << 30) /* in `state`: no job open; the low bits count helpers inside the job */
#define SPIN_NS 50000

typedef void (*pool_item_fn)(void *ctx, int64_t item);

static struct {
    pthread_mutex_t job_lock; /* one job at a time, whichever thread calls */
    pthread_mutex_t lock;
    pthread_cond_t wake;
    int helpers;                 /* helper threads started (guarded by `lock`) */
    atomic_uint_fast64_t generation; /* bumped when a job opens */
    atomic_int state;
    atomic_int_fast64_t next;    /* next item of the open job */
    int64_t count;
    pool_item_fn fn;
    void *ctx;
} pool = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, POOL_CLOSED, 0, 0, 0, 0};

static inline void pool_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static inline int64_t pool_now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static void pool_take_items(void) {
    for (;;) {
        const int64_t item = atomic_fetch_add(&pool.next, 1);
        if (item >= pool.count) return;
        pool.fn(pool.ctx, item);
    }
}

/* Waits (polling, then sleeping) until the generation moves past `seen`; returns the new one. */
static uint_fast64_t pool_wait_job(uint_fast64_t seen) {
    const int64_t until = pool_now_ns() + SPIN_NS;
    for (int i = 0; atomic_load_explicit(&pool.generation, memory_order_acquire) == seen; i++) {
        if ((i & 63) != 63 || pool_now_ns() < until) {
            pool_relax();
            continue;
        }
        pthread_mutex_lock(&pool.lock);
        while (atomic_load(&pool.generation) == seen) pthread_cond_wait(&pool.wake, &pool.lock);
        pthread_mutex_unlock(&pool.lock);
    }
    return atomic_load(&pool.generation);
}

static void *pool_helper(void *unused) {
    (void)unused;
    uint_fast64_t seen = atomic_load(&pool.generation);
    for (;;) {
        seen = pool_wait_job(seen);
        int s = atomic_load(&pool.state);
        while (!(s & POOL_CLOSED) && !atomic_compare_exchange_weak(&pool.state, &s, s + 1)) {
        }
        if (s & POOL_CLOSED) continue; /* the job ended before this helper got to it */
        pool_take_items();
        atomic_fetch_sub(&pool.state, 1);
    }
    return 0;
}

static void pool_after_fork_in_child(void) { pool.helpers = 0; }

/* Starts helpers until there are `wanted` (best effort: a failed pthread_create leaves fewer). */
static void pool_grow(int wanted) {
    if (wanted > POOL_MAX_HELPERS) wanted = POOL_MAX_HELPERS;
    pthread_mutex_lock(&pool.lock);
    if (pool.helpers == 0) pthread_atfork(0, 0, pool_after_fork_in_child);
    while (pool.helpers < wanted) {
        pthread_t t;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        const int failed = pthread_create(&t, &attr, pool_helper, 0);
        pthread_attr_destroy(&attr);
        if (failed) break;
        pool.helpers++;
    }
    pthread_mutex_unlock(&pool.lock);
}

/* fn(ctx, i) for i in [0, count), on the caller and up to threads - 1 helpers; returns when all are done.
 * Concurrent callers take turns. */
static void pool_parallel_for(pool_item_fn fn, void *ctx, int64_t count, int64_t threads) {
    if (threads <= 1 || count <= 1) {
        for (int64_t i = 0; i < count; i++) fn(ctx, i);
        return;
    }
    pool_grow((int)(threads - 1));
    pthread_mutex_lock(&pool.job_lock);
    pool.fn = fn;
    pool.ctx = ctx;
    pool.count = count;
    atomic_store(&pool.next, 0);
    atomic_store(&pool.state, 0); /* open: publishes fn, ctx, count to helpers that join */
    pthread_mutex_lock(&pool.lock);
    atomic_fetch_add(&pool.generation, 1);
    pthread_cond_broadcast(&pool.wake);
    pthread_mutex_unlock(&pool.lock);
    pool_take_items();
    atomic_fetch_or(&pool.state, POOL_CLOSED);
    for (int i = 0; atomic_load(&pool.state) != POOL_CLOSED; i++) {
        if (i < 1000) pool_relax();
        else sched_yield(); /* a helper may share this core */
    }
    pthread_mutex_unlock(&pool.job_lock);
}

/* A per-thread scratch buffer of at least `floats` floats (kept for the thread's next calls); NULL if out of
 * memory. */
static float *pool_scratch(int64_t floats) {
    static __thread float *buffer;
    static __thread int64_t capacity;
    if (floats > capacity) {
        float *grown = realloc(buffer, sizeof(float) * floats);
        if (!grown) return 0;
        buffer = grown;
        capacity = floats;
    }
    return buffer;
}

#endif
