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

void mxd_pool_fork_prepare(void)
{
    pthread_once(&pool.once, pool_init);
    pthread_mutex_lock(&pool.mu);
}

void mxd_pool_fork_parent(void)
{
    pthread_mutex_unlock(&pool.mu);
}

void mxd_pool_fork_child(void)
{
    /* No worker survived the fork; their jobs belong to stale objects. */
    pool.head = pool.tail = NULL;
    pool.idle = pool.pending = 0;
    pool_init();
    pthread_mutex_unlock(&pool.mu);
}
