/* Internals shared by the engine's files: fake_engine.c (streams, events,
 * the worker threads), fake_callbacks.c (the callback thread of each
 * device) and fake_hostmem.c (pinned host memory).
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

enum fake_item_type {
    FAKE_ITEM_RECORD,
    FAKE_ITEM_WAIT_MARK,
    FAKE_ITEM_WAIT_VALUE,
    FAKE_ITEM_HOST_FN,
    FAKE_ITEM_CALLBACK,
};

typedef struct fake_item {
    struct fake_item *next;
    enum fake_item_type type;
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
    } u;
} fake_item;

typedef struct fake_stream {
    int kind;
    int device;
    unsigned flags;
    int refs; /* the worker thread + host threads waiting on it */
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
/* Appends an item to the valid stream `s`. */
void fake_enqueue(fake_stream *s, fake_item *it);

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
int fake_host_allocs(void);

#pragma GCC visibility pop

#endif /* FAKE_ENGINE_H */
