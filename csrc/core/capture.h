/* Graph capture (SPEC §16, DESIGN.md decision 13): a state of a queue in
 * the core.  Not part of the public interface; the generic layer and the
 * backends use it.
 *
 * While a queue captures, the generic layer sends what is enqueued on it
 * (by the thread that began the capture; any other thread is refused) to
 * the recorder here instead of the backend's run path, after checking
 * everything the capture refuses, so that a refused call changes nothing
 * and never reaches a driver.  The recorder makes one node per operation
 * and hands it to the backend's capture hooks: on CUDA and HIP the
 * driver's stream capture records it, on the CPU the node list is the
 * graph.  Each queue taking part is a *lane* (the one that began it is
 * lane 0; others join by waiting for an event recorded in the capture, or
 * for a capturing queue); a vector clock per lane says how much of every
 * lane's work it is ordered after, which finds the lanes not joined back
 * at the end.  The graph keeps what its nodes use (memory, flags, host
 * functions, queues, and what the binding asks it to keep) and the set of
 * storages they read and write; a launch is one operation of the hazard
 * records (hazard.h) over that set.  Capturing itself changes no record. */
#ifndef MXD_CAPTURE_H
#define MXD_CAPTURE_H

#include <pthread.h>
#include <stdatomic.h>

#include "layout.h"
#include "memory.h"
#include "mxd.h"

typedef struct mxd_capture mxd_capture;

typedef enum mxd_node_kind {
    MXD_NODE_COPY,
    MXD_NODE_HOST_FN,
    MXD_NODE_ASYNC_HOST_FN, /* kickoff: reset flag, fn on the pool, signal */
    MXD_NODE_WAIT_VALUE,
    MXD_NODE_RECORD, /* an event marks a point of the capture */
    MXD_NODE_JOIN,   /* a lane waits for a point of another lane */
    /* A wait for a queue or an event outside the capture, made at the
     * start of every launch. */
    MXD_NODE_WAIT_OUTSIDE,
} mxd_node_kind;

typedef struct mxd_node {
    mxd_node_kind kind;
    int lane;
    int after; /* JOIN: the last node of the other lane it waits for; -1 */
    /* COPY: the memory (retained), the plan between them (host copies
     * replay it), the entry point that moves the bytes (the launch trace)
     * and the memcpy kind (mxd_trace.h). */
    mxd_memory *dst, *src;
    mxd_copy_plan plan;
    const char *name;
    int memcpy_kind;
    /* HOST_FN, ASYNC_HOST_FN: fn.call at every launch, fn.discard once
     * the graph is gone. */
    mxd_host_fn fn;
    mxd_flag *flag; /* WAIT_VALUE, ASYNC_HOST_FN (retained) */
    uint64_t value;
    /* WAIT_OUTSIDE: the queue (retained), or the event (the binding keeps
     * its owner alive: mxd_queue_capture_keep). */
    mxd_queue *queue;
    mxd_event *event;
    void *backend; /* the backend's state of the node (freed in graph_free) */
} mxd_node;

/* A storage the graph's nodes touch, and the queue the view that touched
 * it was bound to (retained; untracked memory is ordered by it). */
typedef struct mxd_graph_use {
    mxd_memory *memory; /* retained */
    mxd_queue *queue;
    bool write;
} mxd_graph_use;

struct mxd_graph {
    atomic_long refs;
    mxd_device *device;
    const struct mxd_backend *ops;
    mxd_queue *queue; /* captured on (retained): launch()'s default */
    mxd_node *nodes;
    int node_count, node_cap;
    mxd_graph_use *uses;
    int use_count, use_cap;
    mxd_host_fn *keeps; /* discarded once the graph is gone */
    int keep_count, keep_cap;
    int lane_count;
    /* A node may hold its launch queue behind the host (host functions,
     * waits for a host value). */
    bool holds_host;
    pthread_mutex_t mu;   /* serializes launches (last) */
    mxd_completion *last; /* the last launch's completion, or NULL */
    void *backend;        /* e.g. the driver's executable graph */
};

typedef struct mxd_lane {
    mxd_queue *queue; /* retained */
    /* clock[i]: how many nodes of lane i this lane is ordered after. */
    uint64_t *clock;
    int last;         /* its last node, -1 */
    uintptr_t native; /* the backend's (GPU: the stream capturing it) */
} mxd_lane;

struct mxd_capture {
    atomic_long refs;  /* the queues in it and the events recorded in it */
    pthread_t thread;  /* that began it: the only one that may use it */
    mxd_queue *origin; /* that began it (lane 0's; for other threads) */
    atomic_bool active;
    mxd_lane *lanes;
    int lane_count, lane_cap;
    mxd_graph *graph; /* what it builds; NULL once handed out */
    void *backend;
    /* A backend hook failed halfway through an operation, leaving part of
     * it in the driver's capture: the capture can only be discarded. */
    bool broken;
};

/* Where an event was last recorded inside a capture (mxd_event.point). */
typedef struct mxd_capture_point {
    atomic_int refs;      /* the event's, and readers' (capture.c) */
    mxd_capture *capture; /* retained */
    int node;             /* the RECORD node */
    int count;
    uint64_t clock[]; /* the recording lane's clock then */
} mxd_capture_point;

/* ---- The generic layer's routes (capture.c) ----------------------------
 * Each is called for a queue that captures (or, for the waits, when either
 * side is in a capture) and either records the operation or refuses it
 * with a RuntimeError that says the capture is intact.  The generic layer
 * (queue.c, memory.c) reaches them through the table mxd_recorder, which
 * init.c sets, as it reaches a backend through its operations: the
 * recorder sits above the queues and memory it records, and calls them. */
typedef struct mxd_recorder {
    mxd_status (*wait_queue)(mxd_queue *q, mxd_queue *other, mxd_error *err);
    /* ev recorded in a capture (active or not), or q capturing. */
    mxd_status (*wait_event)(mxd_queue *q, mxd_event *ev, mxd_error *err);
    mxd_status (*record)(mxd_queue *q, mxd_event *ev, mxd_error *err);
    /* A host function; with `flag`, the kickoff of an async one. */
    mxd_status (*host_fn)(mxd_queue *q, mxd_host_fn fn, mxd_flag *flag,
                          uint64_t value, mxd_error *err);
    mxd_status (*wait_value)(mxd_queue *q, mxd_flag *flag, uint64_t value,
                             mxd_error *err);
    mxd_status (*copy)(const mxd_view *dst, const mxd_view *src,
                       const mxd_copy_plan *plan, mxd_error *err);
    /* ev was recorded outside any capture: it forgets its capture point. */
    void (*recorded_outside)(mxd_event *ev);
} mxd_recorder;

/* capture.c's routes; and the table the generic layer calls (queue.c). */
extern const mxd_recorder mxd_capture_recorder;
extern const mxd_recorder *mxd_recorder_in_use;

/* "cpu[0]:queue@0x...", as the queue's repr names it (queue.c). */
void mxd_queue_name(const mxd_queue *q, char *buf, size_t size);
/* RuntimeError: `what` is not allowed on a capturing queue (`hint` says
 * what to do instead); queue.c. */
mxd_status mxd_capture_refuse(const mxd_queue *q, const char *what,
                              const char *hint, mxd_error *err);
/* MXD_OK when the calling thread may enqueue on q (capturing): the one
 * that began its capture; `what` names the operation otherwise. */
mxd_status mxd_capture_check_thread(const mxd_queue *q, const char *what,
                                    mxd_error *err);
/* Host access to memory an active capture touched: RuntimeError. */
mxd_status mxd_capture_refuse_access(const mxd_memory *m, mxd_error *err);

/* ---- Events ------------------------------------------------------------ */

/* Whether ev's last record is in a capture: `active` says whether that
 * capture still runs (ev may not be waited on then); once it ended, ev
 * counts as never recorded. */
bool mxd_event_in_capture(const mxd_event *ev, bool *active);
/* RuntimeError for waiting on an event recorded in an active capture. */
mxd_status mxd_capture_refuse_event(const mxd_event *ev, const char *what,
                                    mxd_error *err);
/* Forgets ev's capture point (re-recorded outside, or destroyed). */
void mxd_event_leave_capture(mxd_event *ev);

/* ---- For the backends --------------------------------------------------- */

/* The backend's graph_free is done: frees the generic part. */
void mxd_graph_finish(mxd_graph *g);
/* Runs fn.call inside the host runner (a node of a launched graph). */
void mxd_host_fn_call_alone(mxd_host_fn fn);

#endif /* MXD_CAPTURE_H */
