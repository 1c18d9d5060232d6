/* Internals shared by the engine's files: fake_engine.c (streams, events,
 * the worker threads), fake_callbacks.c (the callback thread of each
 * device), fake_hostmem.c (pinned host memory), fake_devmem.c (device
 * memory) and fake_copy.c (copies and fills).
 *
 * One global mutex, fake_lock, guards all of their state, and one
 * condition variable, fake_changed, broadcast whenever a stream item or a
 * callback completes, serves every waiter.  Functions here expect
 * fake_lock held unless they say otherwise. */
#ifndef FAKE_ENGINE_H
#define FAKE_ENGINE_H

#include <pthread.h>
#include <time.h>

#include "fake_gpu.h"

#pragma GCC visibility push(hidden)

extern pthread_mutex_t fake_lock;
extern pthread_cond_t fake_changed;

/* One record of an event: completes when the stream reaches it.  Shared by
 * the event (until re-recorded), the record item and any wait item taken
 * while it was the event's record, hence the reference count. */
typedef struct fake_mark {
    int refs;
    bool done;
    struct fake_stream *stream; /* where its record item is, until done */
    unsigned error; /* the stream's sticky error when it completed */
    uint64_t time_ns;
} fake_mark;

/* Pinned host memory mapped twice: `host` for the CPU and `dev`, a
 * different address of the same pages, standing in for the device's view. */
typedef struct fake_alloc {
    struct fake_alloc *next;
    char *host, *dev;
    size_t size, map_size;
    int device;
    bool mapped; /* has a device pointer (CU_MEMHOSTALLOC_DEVICEMAP) */
    bool freed;  /* freed by the host while an item still refers to it */
    int refs;
} fake_alloc;

/* Device memory: an address in the device's own range, which the host
 * cannot dereference, and host storage holding the bytes. */
typedef enum fake_dmem_state {
    FAKE_DMEM_PENDING, /* stream-ordered, its stream has not reached it */
    FAKE_DMEM_LIVE,
    FAKE_DMEM_FREED,
} fake_dmem_state;

typedef struct fake_dmem {
    uintptr_t base;
    size_t size;
    int device;
    char *backing;
    fake_dmem_state state;
    bool free_enqueued; /* a stream-ordered free is on its way */
    bool pooled;        /* from the device's pool (stream-ordered) */
    int refs;           /* the device's table, items, copies in flight */
} fake_dmem;

/* One side of a copy or fill, classified when the call is made. */
enum fake_span_kind {
    FAKE_SPAN_DEVICE,   /* in a device's range: checked when it runs */
    FAKE_SPAN_PINNED,   /* inside a pinned allocation (either view) */
    FAKE_SPAN_PAGEABLE, /* other host memory: the call runs it at once */
};

typedef struct fake_span {
    enum fake_span_kind kind;
    uintptr_t addr;
    size_t pitch;
    int device;         /* DEVICE: the device the call names, or -1: the
                           stream's */
    fake_alloc *pinned; /* PINNED: held */
} fake_span;

typedef struct fake_transfer {
    fake_span dst, src;   /* src unused by fills */
    size_t width, height; /* bytes per row, rows */
    unsigned fill_size;   /* 0: a copy; 1, 2, 4: a fill of that element */
    uint32_t fill_value;
} fake_transfer;

enum fake_item_type {
    FAKE_ITEM_RECORD,
    FAKE_ITEM_WAIT_MARK,
    FAKE_ITEM_WAIT_VALUE,
    FAKE_ITEM_HOST_FN,
    FAKE_ITEM_CALLBACK,
    FAKE_ITEM_TRANSFER,
    FAKE_ITEM_ALLOC,       /* a stream-ordered allocation takes effect */
    FAKE_ITEM_FREE,        /* a stream-ordered free takes effect */
    FAKE_ITEM_WAIT_STREAM, /* the implicit wait of a legacy stream */
};

/* A byte range an item reads or writes: device addresses, or the host
 * view's addresses for pinned memory (both views alias them). */
typedef struct fake_range {
    uintptr_t lo, hi;
    bool write;
} fake_range;

/* What a memory item touches, from its enqueue until it completes
 * (fake_races.c): listed among the pending accesses of every stream. */
typedef struct fake_access {
    struct fake_access *prev, *next;
    struct fake_stream *stream;
    uint64_t seq; /* enqueue order, over every stream */
    const char *entry;
    fake_range range[2];
    int ranges;
} fake_access;

typedef struct fake_item {
    struct fake_item *next;
    enum fake_item_type type;
    const char *entry;  /* the entry point that enqueued it, for messages */
    fake_access access; /* transfers, stream-ordered allocations and frees */
    union {
        fake_mark *mark;
        struct {
            fake_alloc *alloc;
            const uint64_t *addr;
            uint64_t value, mask;
            unsigned op;
        } wait;
        struct {
            void (*fn)(void *);
            void *data;
        } host;
        struct {
            enum fake_callback_api api;
            void (*fn)(void);
            void *data;
        } callback;
        fake_transfer xfer;
        fake_dmem *dmem;
        struct {
            struct fake_stream *stream; /* held */
            uint64_t target; /* until it has completed this many items */
        } behind;
    } u;
} fake_item;

/* The nodes a stream's (or an event's) next captured node depends on. */
typedef struct fake_deps {
    int *ids;
    int n;
} fake_deps;

struct fake_capture; /* fake_graph.c */

typedef struct fake_stream {
    int kind;
    int device;
    unsigned flags; /* FAKE_STREAM_SPECIAL bits for the special streams */
    void *handle;   /* what callbacks are told: the API's handle of it */
    int refs;       /* the worker thread + host threads waiting on it */
    pthread_cond_t wake;
    fake_item *head, *tail;
    fake_item *running; /* taken off the queue and running, or NULL */
    uint64_t submitted, completed;
    unsigned sticky;        /* asynchronous error, reported from then on */
    unsigned pending_fault; /* fails the next item (fake_gpu_async_error) */
    bool destroyed;         /* by the user; the worker drains, then frees */
    struct fake_stream *next_all; /* every stream not yet freed */
    /* Stream capture (fake_graph.c): the capture the stream takes part in
     * (held), NULL when none, and what its next node depends on. */
    struct fake_capture *capture;
    fake_deps deps;
    /* A graph launch appends its nodes without waking the worker, which
     * it wakes once at the end (fake_graph.c). */
    bool quiet;
} fake_stream;

/* What an event's last record inside a capture left (fake_graph.c). */
typedef struct fake_event_capture {
    struct fake_capture *capture; /* held; NULL: last recorded outside */
    fake_deps deps;
} fake_event_capture;

/* ---- fake_engine.c -------------------------------------------------- */

/* The handle registry, for the graph objects of fake_graph.c too. */
bool fake_handle_add(const void *h);
void fake_handle_remove(const void *h);
bool fake_handle_valid(const void *h);
/* Drops an item and the references it holds. */
void fake_item_free(fake_item *it);
/* A copy of a captured item with references of its own (graph launch);
 * NULL when out of memory. */
fake_item *fake_item_clone(const fake_item *it);
void fake_mark_unref(fake_mark *m);

/* The stream a handle names, or NULL (stale or foreign handle). */
fake_stream *fake_find_stream(void *h);
/* Finds the stream, waits for room in its queue and allocates an item for
 * it, or fails with fake_lock released.  On success fake_lock is held. */
unsigned fake_begin_item(void *h, fake_stream **s, fake_item **it);
/* Appends an item to the valid stream `s`, after the implicit waits. */
void fake_enqueue(fake_stream *s, fake_item *it);
/* The legacy default stream's implicit synchronisation (CUDA's legacy
 * stream, HIP's null stream): work submitted to it waits for the work
 * already submitted to every blocking stream of its device, and work
 * submitted to a blocking stream (created without NON_BLOCKING; the
 * per-thread default stream is one) waits for the work already submitted
 * to it.  Appends those waits to `s`; fake_enqueue calls it. */
void fake_implicit_waits(fake_stream *s);
void fake_stream_unref(fake_stream *s);
/* Whether a FAKE_ITEM_WAIT_VALUE item's condition holds now. */
bool fake_wait_value_met(const fake_item *it);

/* Starts a detached thread with every signal blocked, so that signals keep
 * going to the application's threads (Python handles them on its main
 * thread).  Needs no lock. */
bool fake_start_thread(void *(*main)(void *), void *arg);

/* The absolute time FAKE_GPU_HANG_SECONDS from now, and a wait on
 * fake_changed until then: false once the deadline has passed. */
void fake_deadline(struct timespec *deadline);
bool fake_wait_until(const struct timespec *deadline);

/* Waits until every stream of `device` has finished the work submitted
 * before the call, as a real driver's implicit device synchronisation
 * does; where that would hang (after FAKE_GPU_HANG_SECONDS) it records a
 * violation naming the calling entry point and returns. */
void fake_sync_device(int device);
/* Waits until `s` has finished the work submitted before the call; false
 * when that would hang (after FAKE_GPU_HANG_SECONDS). */
bool fake_drain_stream(fake_stream *s);

/* ---- fake_graph.c ---------------------------------------------------
 * Stream capture with the real drivers' rules (README, "Stream capture
 * and graphs").  An illegal call returns its error, records a violation
 * and invalidates the captures it conflicts with. */

/* For an item about to be enqueued on s: 0, or the error that refuses it
 * (its capture was invalidated; an enqueue on the legacy stream while a
 * blocking stream of its device captures). */
unsigned fake_capture_admit(fake_stream *s);
/* When s captures: adds `it` as a node (taking it over) and returns true. */
bool fake_capture_take(fake_stream *s, fake_item *it);
/* The call named by the current entry point did something a capture of
 * s forbids (`why`): invalidates it, records the violation, returns code. */
unsigned fake_capture_illegal(fake_stream *s, unsigned code, const char *why);
/* Event records, waits and queries against captures. */
void fake_capture_record(fake_event_capture *ec, fake_stream *s);
void fake_capture_forget(fake_event_capture *ec);
/* A wait of s for an event: FAKE_CAPTURE_PASS when no capture is
 * involved (an ordinary wait), else its outcome: 0 (a dependency of the
 * capture) or an error. */
enum { FAKE_CAPTURE_PASS = 0x7fffffff };
unsigned fake_capture_wait(fake_stream *s, fake_event_capture *ec);
/* An operation on an event whose last record is in a capture: 907. */
unsigned fake_capture_event_use(fake_event_capture *ec);
/* A destroyed stream leaves its capture, which is invalidated. */
void fake_capture_stream_gone(fake_stream *s);

/* ---- fake_callbacks.c ----------------------------------------------- */

/* Starts the callback thread of `device` unless it runs already. */
bool fake_callback_thread_start(int device);
/* Runs a host function or stream callback item of stream `s` on its
 * device's callback thread and waits until it has returned. */
void fake_callback_run(fake_stream *s, fake_item *it, unsigned status);
int fake_callback_threads(void);

/* ---- fake_hostmem.c ------------------------------------------------- */

void fake_alloc_unref(fake_alloc *a);
/* The live mapped allocation whose device view holds [addr, addr + 8). */
fake_alloc *fake_find_device_word(uintptr_t addr);
/* The live pinned allocation whose host view, or device view if mapped,
 * holds addr; *device_view says which. */
fake_alloc *fake_find_pinned(uintptr_t addr, bool *device_view);
int fake_host_allocs(void);
/* Device memory accounting (pinned and device allocations). */
bool fake_charge(int device, size_t bytes);
void fake_uncharge(int device, size_t bytes);

/* ---- fake_devmem.c -------------------------------------------------- */

/* The device whose address range holds addr, or -1. */
int fake_device_of(uintptr_t addr);
/* The allocation (pending or live) whose bytes include addr, or NULL. */
fake_dmem *fake_dmem_at(uintptr_t addr);
/* fake_vmm.c: memory mapped by hand (a range mapped and granted access),
 * as the device memory it is; NULL / -1 outside such ranges. */
fake_dmem *fake_vmm_at(uintptr_t addr);
int fake_vmm_device_of(uintptr_t addr);
void fake_dmem_unref(fake_dmem *m);
/* Runs a FAKE_ITEM_ALLOC or FAKE_ITEM_FREE item. */
void fake_dmem_run(fake_stream *s, fake_item *it);
int fake_device_allocs(void);
size_t fake_device_bytes(void);

/* ---- fake_peer.c ---------------------------------------------------- */

/* Whether a copy on a stream of `device` may touch memory of `owner`
 * directly: its own, or a peer's whose access it enabled (and, for memory
 * of the peer's pool, was granted pool access to). */
bool fake_peer_reachable(int device, int owner, bool pool_memory);

/* ---- fake_races.c --------------------------------------------------- */

/* Unordered accesses.  A stream item that touches memory (a copy, a fill,
 * a stream-ordered allocation or free) is pending from its enqueue until
 * it completes.  When one starts, a pending item of another stream that
 * was enqueued before it and touches the same bytes (one of them writing)
 * is ordered neither way: events and stream waits only order work after
 * work enqueued before them, so nothing can make the earlier item wait
 * for the later one.  On a GPU they would run in any order (stale data, a
 * lost write, a use after free), so the fake records a violation whatever
 * the timing happens to be here. */
void fake_access_enter(fake_stream *s, fake_item *it);
void fake_access_leave(fake_item *it);
void fake_access_check(const fake_item *it);
/* A transfer run in the call (fake_copy.c's synchronous copies), after
 * every item enqueued before it. */
void fake_access_check_now(fake_stream *s, const char *entry,
                           const fake_transfer *x);
/* A free that takes effect in the call (cuMemFree, cuMemFreeHost): of
 * bytes [lo, hi). */
void fake_access_check_free(const char *entry, uintptr_t lo, uintptr_t hi);
/* The ranges a transfer touches (pageable host memory is not tracked):
 * their count. */
int fake_transfer_ranges(const fake_transfer *x, fake_range out[2]);

/* ---- fake_copy.c ---------------------------------------------------- */

/* Runs a FAKE_ITEM_TRANSFER item (err: the stream's sticky error). */
void fake_transfer_run(fake_stream *s, fake_item *it, unsigned err);
/* Drops the references a transfer holds. */
void fake_transfer_release(fake_transfer *x);

#pragma GCC visibility pop

#endif /* FAKE_ENGINE_H */
