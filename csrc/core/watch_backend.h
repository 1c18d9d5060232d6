/* The inside of a watch (watch.h), for watch.c and for backends that fire
 * watches themselves (the CPU backend: cpu_watch.inc).  Not part of the
 * public interface. */
#ifndef MXD_WATCH_BACKEND_H
#define MXD_WATCH_BACKEND_H

#include "backend.h"
#include "watch.h"

typedef enum mxd_watch_state {
    MXD_WATCH_ARMED,
    MXD_WATCH_FIRED,
    MXD_WATCH_CANCELLED,
} mxd_watch_state;

struct mxd_watch {
    /* In the list of whoever fires it (a CPU queue, the watcher thread),
     * under that list's lock, as is `state`. */
    mxd_watch *prev, *next;
    mxd_watch_state state;
    mxd_watch_fn fn;
    void *ctx;
    /* Who fires it: the backend's watch_cancel disarms it; NULL for the
     * watcher thread of watch.c. */
    const mxd_backend *firer;
    /* Retained until the watch is freed (a cancel may race with the fire,
     * so the queue must outlive both): on the CPU the timeline `ticket`
     * is on; for an accelerator queue watch, the queue whose stream order
     * lets the watcher skip later watches of it. */
    mxd_queue *queue;
    uint64_t ticket;
    /* Accelerators: the event the watcher queries; for a queue watch it
     * lives in `storage`, allocated for it (a CPU watch is small: there may
     * be many thousands armed). */
    mxd_event *event;
    mxd_event_storage *storage;
    /* A completion's watch: its point instead of an event's (retained). */
    mxd_completion *completion;
    mxd_status status; /* once fired */
    mxd_error *error;  /* malloc'ed when status is not MXD_OK */
};

/* Under the lock of the list w was on, after unlinking it: records the
 * result, marks w fired and runs its function.  w may be freed by its
 * owner as soon as this returns. */
void mxd_watch_fire(mxd_watch *w, mxd_status status, const mxd_error *err);
/* The count mxd_watch_armed() reports. */
void mxd_watch_count(long delta);

#endif /* MXD_WATCH_BACKEND_H */
