/* Watches: a C function run once a point in a queue's work completes, for
 * waiters that must not block a thread of their own (asyncio's `await
 * event` and `await queue`, SPEC §15).
 *
 * A watch is armed on a core-level point: the point an event is recorded
 * at, or the current end of a queue (everything enqueued on it so far).
 * When the point completes, the watch's function runs once, on a thread of
 * the core:
 *   - on CPU queues, the worker that completes the point runs it, right
 *     after publishing the completion (no polling, no extra thread);
 *   - on accelerators, one watcher per process (a job of the core's worker
 *     pool, running while watches are armed) queries the events
 *     of the pending watches, backing off from 20 us to 250 us between
 *     passes while nothing completes (the style of every other GPU wait
 *     here).  It never runs on a driver callback thread and adds nothing
 *     to any stream (DESIGN.md decision 11); a queue's watches are
 *     completed in stream order, so a pass queries only the oldest pending
 *     watch of each queue.
 * The function runs with a core lock held: it may only hand the news on (a
 * store, a write to an eventfd).  It must not block, call a driver or
 * Python, or call back into this interface.
 *
 * Who arms a watch owns it: after the function ran, or after a cancel that
 * returned true, the owner reads the result and frees the watch. */
#ifndef MXD_WATCH_H
#define MXD_WATCH_H

#include "mxd.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mxd_watch mxd_watch;
typedef void (*mxd_watch_fn)(void *ctx);

/* Arms a watch on the point `ev` is recorded at.  On the CPU that point is
 * taken now (re-recording ev later does not move the watch); on an
 * accelerator the watcher queries the driver event, as ev.synchronize()
 * waits for it.  *out is NULL (and the status MXD_OK) when the point is
 * complete already or ev is unrecorded; a driver error the event reports
 * is returned as mxd_event_query returns it.  ev must stay initialised
 * until the watch fired or was cancelled. */
mxd_status mxd_watch_event(mxd_event *ev, mxd_watch_fn fn, void *ctx,
                           mxd_watch **out, mxd_error *err);
/* Arms a watch on the current end of q (on an accelerator: an event the
 * watch records there, as queue.synchronize() does). */
mxd_status mxd_watch_queue(mxd_queue *q, mxd_watch_fn fn, void *ctx,
                           mxd_watch **out, mxd_error *err);
/* Arms a watch on a completion's point (HostHazardCompletion, hazard.h);
 * *out NULL when it is complete or poisoned already.  A completion
 * poisoned while the watch is armed fires it when its point completes. */
mxd_status mxd_watch_completion(mxd_completion *c, mxd_watch_fn fn, void *ctx,
                                mxd_watch **out, mxd_error *err);
/* Disarms w: true when it had not fired (its function will never run);
 * false when it fired (the function returned before this call did). */
bool mxd_watch_cancel(mxd_watch *w);
/* After w fired: MXD_OK, or the driver error its point reported (err is
 * filled). */
mxd_status mxd_watch_result(const mxd_watch *w, mxd_error *err);
/* Frees a watch that fired or was cancelled.  May release a queue: call
 * it where mxd_queue_release may be called. */
void mxd_watch_free(mxd_watch *w);

/* Watches armed and not yet fired or cancelled, process-wide; and whether
 * the accelerators' watcher runs now, on a thread of the worker pool (it
 * ends 2 s after the last watch went).  For tests: a cancelled wait
 * leaves nothing armed. */
long mxd_watch_armed(void);
bool mxd_watch_thread_running(void);

#ifdef __cplusplus
}
#endif
#endif /* MXD_WATCH_H */
