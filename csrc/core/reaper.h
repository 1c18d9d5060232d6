/* The reaper: one thread that finishes what must wait for a GPU to pass a
 * point and must run where driver calls are allowed.
 *
 * Real drivers forbid driver calls on their callback threads and make
 * frees synchronize, so nothing may be destroyed or released from a
 * callback, and nothing should be destroyed while the caller holds the
 * GIL.  Instead the GPU backend hands such work to the reaper: an entry
 * whose done() the reaper polls (e.g. "has the event after the wait
 * completed?") and whose finish() it then runs on its own thread (destroy
 * a stream, release a flag, return an event to its pool).  Polls back off
 * from 50 us to 5 ms while nothing completes, so an idle reaper costs
 * nothing and a busy one a query per entry every few milliseconds.
 *
 * The reaper never runs Python: finish() may call the driver and release
 * core objects, nothing else. */
#ifndef MXD_REAPER_H
#define MXD_REAPER_H

#include <stdbool.h>

#include "mxd.h"

typedef struct mxd_reap mxd_reap;
struct mxd_reap {
    mxd_reap *next;
    /* On the reaper thread: true once finish() may run (the guarded work
     * completed, or failed and never will). */
    bool (*done)(mxd_reap *entry);
    /* On the reaper thread, once: does the work and frees the entry. */
    void (*finish)(mxd_reap *entry);
};

/* Hands `entry` to the reaper, starting its thread on first use.  Never
 * blocks on the reaper's work and never calls the driver, so it may be
 * called anywhere, driver callback threads included.  Fails only when the
 * thread cannot be started; the caller still owns the entry then. */
mxd_status mxd_reaper_add(mxd_reap *entry, mxd_error *err);

/* Cleanup failures (a destroy or free the driver refused): they cannot be
 * raised to anyone, so they are counted and the last one kept, for
 * `python -m max.driver` and the test suites. */
void mxd_cleanup_failed(const mxd_error *err);

#endif /* MXD_REAPER_H */
