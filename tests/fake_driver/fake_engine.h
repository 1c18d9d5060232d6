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

typedef struct fake_item {
    struct fake_item *next;
    enum fake_item_type type;
    const char *entry; /* the entry point that enqueued it, for messages */
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

typedef struct fake_stream {
    int kind;
    int device;
    unsigned flags; /* FAKE_STREAM_SPECIAL bits for the special streams */
    void *handle;   /* what callbacks are told: the API's handle of it */
    int refs;       /* the worker thread + host threads waiting on it */
    pthread_cond_t wake;
    fake_item *head, *tail;
    uint64_t submitted, completed;
    unsigned sticky;        /* asynchronous error, reported from then on */
    unsigned pending_fault; /* fails the next item (fake_gpu_async_error) */
    bool destroyed;         /* by the user; the worker drains, then frees */
    struct fake_stream *next_all; /* every stream not yet freed */
} fake_stream;

/* ---- fake_engine.c -------------------------------------------------- */

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

/* ---- fake_copy.c ---------------------------------------------------- */

/* Runs a FAKE_ITEM_TRANSFER item (err: the stream's sticky error). */
void fake_transfer_run(fake_stream *s, fake_item *it, unsigned err);
/* Drops the references a transfer holds. */
void fake_transfer_release(fake_transfer *x);

#pragma GCC visibility pop

#endif /* FAKE_ENGINE_H */
