#include "pool.h"

#include <pthread.h>
#include <string.h>
#include <time.h>

#include "backend.h"

/* How long an idle worker waits for a job before it exits. */
#define IDLE_EXIT_NS (2 * MXD_SECOND)

static struct {
    pthread_mutex_t mu;
    pthread_cond_t has_job; /* on CLOCK_MONOTONIC */
    pthread_once_t once;
    mxd_job *head, *tail;
    size_t idle;    /* threads waiting for a job */
    size_t pending; /* jobs not yet taken */
} pool = {.mu = PTHREAD_MUTEX_INITIALIZER, .once = PTHREAD_ONCE_INIT};

static void pool_init(void)
{
    pthread_condattr_t attr;
    /* Also run in a forked child, over the parent's condition variable:
     * its waiters are threads that did not survive the fork. */
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&pool.has_job, &attr);
    pthread_condattr_destroy(&attr);
}

/* Under pool.mu: the next job, waiting up to IDLE_EXIT_NS; NULL to exit. */
static mxd_job *take_job(void)
{
    int64_t until_ns = mxd_now_ns() + IDLE_EXIT_NS;
    struct timespec until = {.tv_sec = until_ns / MXD_SECOND,
                             .tv_nsec = until_ns % MXD_SECOND};
    pool.idle++;
    while (!pool.head) {
        if (pthread_cond_timedwait(&pool.has_job, &pool.mu, &until) &&
            !pool.head) {
            pool.idle--;
            return NULL;
        }
    }
    pool.idle--;
    mxd_job *job = pool.head;
    pool.head = job->next;
    if (!pool.head)
        pool.tail = NULL;
    pool.pending--;
    return job;
}

static void *worker_main(void *unused)
{
    (void)unused;
    pthread_mutex_lock(&pool.mu);
    for (mxd_job *job; (job = take_job());) {
        pthread_mutex_unlock(&pool.mu);
        job->run(job);
        pthread_mutex_lock(&pool.mu);
    }
    pthread_mutex_unlock(&pool.mu);
    mxd_host_thread_exit();
    return NULL;
}

static int start_worker(void)
{
    pthread_attr_t attr;
    pthread_t thread;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    int rc = pthread_create(&thread, &attr, worker_main, NULL);
    pthread_attr_destroy(&attr);
    return rc;
}

mxd_status mxd_pool_submit(mxd_job *job, mxd_error *err)
{
    pthread_once(&pool.once, pool_init);
    job->next = NULL;
    pthread_mutex_lock(&pool.mu);
    bool need_thread = pool.idle <= pool.pending;
    if (need_thread) {
        int rc = start_worker();
        if (rc) {
            pthread_mutex_unlock(&pool.mu);
            return mxd_fail(err, MXD_NO_MEMORY,
                            "cannot start a worker thread: %s", strerror(rc));
        }
    }
    if (pool.tail)
        pool.tail->next = job;
    else
        pool.head = job;
    pool.tail = job;
    pool.pending++;
    if (!need_thread)
        pthread_cond_signal(&pool.has_job);
    pthread_mutex_unlock(&pool.mu);
    return MXD_OK;
}

static void pool_fork_prepare(void)
{
    pthread_once(&pool.once, pool_init);
    pthread_mutex_lock(&pool.mu);
}

static void pool_fork_parent(void)
{
    pthread_mutex_unlock(&pool.mu);
}

static void pool_fork_child(void)
{
    /* No worker survived the fork; their jobs belong to stale objects. */
    pool.head = pool.tail = NULL;
    pool.idle = pool.pending = 0;
    pool_init();
    pthread_mutex_unlock(&pool.mu);
}

/* ---- Parallel memcpy ---------------------------------------------------- */

enum { MAX_COPY_PARTS = 16 };

typedef struct copy_part {
    mxd_job job;
    struct copy_parts *all;
    char *dst;
    const char *src;
    size_t n;
} copy_part;

typedef struct copy_parts {
    pthread_mutex_t mu;
    pthread_cond_t done;
    int pending;
    copy_part part[MAX_COPY_PARTS];
} copy_parts;

static void copy_part_run(mxd_job *job)
{
    copy_part *p = (copy_part *)job;
    memcpy(p->dst, p->src, p->n);
    copy_parts *all = p->all;
    pthread_mutex_lock(&all->mu);
    if (--all->pending == 0)
        pthread_cond_signal(&all->done);
    pthread_mutex_unlock(&all->mu);
}

void mxd_memcpy_parallel(void *dst, const void *src, size_t n, int threads)
{
    if (threads > MAX_COPY_PARTS)
        threads = MAX_COPY_PARTS;
    if (threads < 2 || n < (size_t)threads * 4096) {
        memcpy(dst, src, n);
        return;
    }
    copy_parts all = {.pending = 0};
    pthread_mutex_init(&all.mu, NULL);
    pthread_cond_init(&all.done, NULL);
    /* Parts of whole cache lines; the caller takes the first. */
    size_t part = (n / (size_t)threads + 63) & ~(size_t)63;
    pthread_mutex_lock(&all.mu);
    for (int i = 1; i < threads && (size_t)i * part < n; i++) {
        size_t at = (size_t)i * part;
        all.part[i] = (copy_part){{NULL, copy_part_run},
                                  &all,
                                  (char *)dst + at,
                                  (const char *)src + at,
                                  n - at < part ? n - at : part};
        if (mxd_pool_submit(&all.part[i].job, NULL) == MXD_OK)
            all.pending++;
        else /* no thread: here */
            memcpy(all.part[i].dst, all.part[i].src, all.part[i].n);
    }
    pthread_mutex_unlock(&all.mu);
    memcpy(dst, src, n < part ? n : part);
    pthread_mutex_lock(&all.mu);
    while (all.pending > 0)
        pthread_cond_wait(&all.done, &all.mu);
    pthread_mutex_unlock(&all.mu);
    pthread_cond_destroy(&all.done);
    pthread_mutex_destroy(&all.mu);
}

const mxd_fork_hooks mxd_pool_fork_hooks = {
    pool_fork_prepare,
    pool_fork_parent,
    pool_fork_child,
};
