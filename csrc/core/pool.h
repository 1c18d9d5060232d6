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

#endif /* MXD_POOL_H */
