/* The worker pool: host threads that run queue drains and async host
 * functions.  A job never waits for a thread: when no thread is idle a new
 * one starts, because jobs may block (a queue gated on a flag, a host
 * function waiting for another queue) and every blocked job must not stop
 * the others.  Idle threads linger briefly, then exit, so creating and
 * dropping many queues does not grow the thread count. */
#ifndef MXD_POOL_H
#define MXD_POOL_H

#include "mxd.h"

typedef struct mxd_job mxd_job;
struct mxd_job {
    mxd_job *next;
    void (*run)(mxd_job *job);
};

/* Hands job to an idle thread or a new one.  Fails only when no thread is
 * idle and none can be started. */
mxd_status mxd_pool_submit(mxd_job *job, mxd_error *err);

/* memcpy of n bytes split across `threads` threads (the caller and pool
 * workers), for copies large enough that one thread's memory bandwidth is
 * the limit (staging, where the DMA outruns a single host thread).  Runs
 * in the caller alone when no worker can start. */
void mxd_memcpy_parallel(void *dst, const void *src, size_t n, int threads);

#endif /* MXD_POOL_H */
