/* Streams run by host threads, events and the object-level control API
 * (fake_engine.h describes the locking).
 *
 * Each stream owns a detached thread that runs its items in FIFO order and
 * exits once the stream is destroyed and drained, so streams run
 * concurrently and any item may block.  Host functions and stream
 * callbacks run on the device's callback thread (fake_callbacks.c). */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fake_engine.h"

pthread_mutex_t fake_lock = PTHREAD_MUTEX_INITIALIZER;
pthread_cond_t fake_changed = PTHREAD_COND_INITIALIZER;

/* Counters for fake_gpu_live and fake_gpu_threads; under fake_lock. */
static int fake_live_streams, fake_live_events;
static int fake_live_threads;

/* Every stream not yet freed, destroyed ones still draining included. */
static fake_stream *fake_all_streams;

static uint64_t fake_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ---- Handle registry ------------------------------------------------
 * An open-addressing set of live object pointers, so that a destroyed or
 * made-up handle is reported as INVALID_HANDLE without dereferencing it. */

enum { FAKE_KIND_STREAM = 0x5354524d, FAKE_KIND_EVENT = 0x45564e54 };
#define FAKE_TOMBSTONE ((uintptr_t)1)

static struct {
    uintptr_t *slots;
    size_t cap, used; /* used counts tombstones too */
    size_t live;
} fake_handles;

static size_t fake_hash(uintptr_t p)
{
    uint64_t h = p;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    return (size_t)h;
}

/* The slot holding p, or the first free one on its probe path. */
static size_t fake_probe(uintptr_t p)
{
    size_t mask = fake_handles.cap - 1, i = fake_hash(p) & mask;
    size_t reuse = SIZE_MAX;
    for (;; i = (i + 1) & mask) {
        uintptr_t s = fake_handles.slots[i];
        if (s == p)
            return i;
        if (s == FAKE_TOMBSTONE && reuse == SIZE_MAX)
            reuse = i;
        if (s == 0)
            return reuse != SIZE_MAX ? reuse : i;
    }
}

/* Handles 0 and 1 are never objects, and 1 marks a tombstone: looking it
 * up would find one (HIP is given 1, CU_STREAM_LEGACY's value, as a
 * made-up handle). */
static bool fake_registered(const void *h)
{
    return fake_handles.cap != 0 && (uintptr_t)h > FAKE_TOMBSTONE &&
           fake_handles.slots[fake_probe((uintptr_t)h)] == (uintptr_t)h;
}

/* Rehashes into a table sized for the live handles (dropping tombstones),
 * so that creating and destroying handles forever does not grow it. */
static bool fake_grow(void)
{
    size_t cap = 64;
    while (cap < (fake_handles.live + 1) * 4)
        cap *= 2;
    uintptr_t *old = fake_handles.slots;
    size_t old_cap = fake_handles.cap;
    fake_handles.slots = calloc(cap, sizeof *old);
    if (fake_handles.slots == NULL) {
        fake_handles.slots = old;
        return false;
    }
    fake_handles.cap = cap;
    fake_handles.used = 0;
    for (size_t i = 0; i < old_cap; i++)
        if (old[i] > FAKE_TOMBSTONE) {
            fake_handles.slots[fake_probe(old[i])] = old[i];
            fake_handles.used++;
        }
    free(old);
    return true;
}

static bool fake_register(const void *h)
{
    if ((fake_handles.used + 1) * 2 > fake_handles.cap && !fake_grow())
        return false;
    size_t i = fake_probe((uintptr_t)h);
    if (fake_handles.slots[i] == 0)
        fake_handles.used++;
    fake_handles.slots[i] = (uintptr_t)h;
    fake_handles.live++;
    return true;
}

static void fake_unregister(const void *h)
{
    fake_handles.slots[fake_probe((uintptr_t)h)] = FAKE_TOMBSTONE;
    fake_handles.live--;
}

bool fake_handle_add(const void *h)
{
    return fake_register(h);
}

void fake_handle_remove(const void *h)
{
    fake_unregister(h);
}

bool fake_handle_valid(const void *h)
{
    return fake_registered(h);
}

/* ---- Objects -------------------------------------------------------- */

typedef struct fake_event {
    int kind;
    int device;
    unsigned flags;
    fake_mark *mark;        /* NULL until recorded */
    fake_event_capture cap; /* its last record, when inside a capture */
} fake_event;

fake_stream *fake_find_stream(void *h)
{
    return fake_registered(h) && ((fake_stream *)h)->kind == FAKE_KIND_STREAM
               ? h
               : NULL;
}

static fake_event *fake_find_event(void *h)
{
    return fake_registered(h) && ((fake_event *)h)->kind == FAKE_KIND_EVENT
               ? h
               : NULL;
}

void fake_mark_unref(fake_mark *m)
{
    if (m != NULL && --m->refs == 0)
        free(m);
}

void fake_stream_unref(fake_stream *s)
{
    if (--s->refs > 0)
        return;
    fake_stream **p = &fake_all_streams;
    while (*p != s)
        p = &(*p)->next_all;
    *p = s->next_all;
    pthread_cond_destroy(&s->wake);
    free(s);
}

void fake_item_free(fake_item *it)
{
    fake_access_leave(it);
    if (it->type == FAKE_ITEM_RECORD || it->type == FAKE_ITEM_WAIT_MARK)
        fake_mark_unref(it->u.mark);
    else if (it->type == FAKE_ITEM_WAIT_VALUE)
        fake_alloc_unref(it->u.wait.alloc);
    else if (it->type == FAKE_ITEM_TRANSFER)
        fake_transfer_release(&it->u.xfer);
    else if (it->type == FAKE_ITEM_ALLOC || it->type == FAKE_ITEM_FREE)
        fake_dmem_unref(it->u.dmem);
    else if (it->type == FAKE_ITEM_WAIT_STREAM)
        fake_stream_unref(it->u.behind.stream);
    free(it);
}

/* Only the kinds of items a capture takes: copies and fills, host
 * functions, callbacks and value waits. */
fake_item *fake_item_clone(const fake_item *it)
{
    fake_item *copy = malloc(sizeof *copy);
    if (copy == NULL)
        return NULL;
    *copy = *it;
    copy->next = NULL;
    if (it->type == FAKE_ITEM_WAIT_VALUE) {
        it->u.wait.alloc->refs++;
    } else if (it->type == FAKE_ITEM_TRANSFER) {
        if (it->u.xfer.dst.pinned != NULL)
            it->u.xfer.dst.pinned->refs++;
        if (it->u.xfer.src.pinned != NULL)
            it->u.xfer.src.pinned->refs++;
    }
    return copy;
}

/* ---- Running items (worker thread, fake_lock held) ------------------ */

static bool fake_compare(uint64_t current, uint64_t value, unsigned op,
                         uint64_t mask)
{
    current &= mask;
    switch (op) {
    case 0: return (int64_t)(current - value) >= 0; /* GEQ, wrap-safe */
    case 1: return current == value;
    case 2: return (current & value) != 0;
    default: return ~(current | value) != 0; /* NOR */
    }
}

bool fake_wait_value_met(const fake_item *it)
{
    uint64_t v = __atomic_load_n(it->u.wait.addr, __ATOMIC_ACQUIRE);
    return fake_compare(v, it->u.wait.value, it->u.wait.op, it->u.wait.mask);
}

/* Polls the mapped word: host stores do not notify the device, so the
 * fake looks again every 20 µs, backing off to 1 ms while nothing moves. */
static void fake_poll_value(fake_stream *s, fake_item *it)
{
    long delay_us = 20;
    for (;;) {
        if (it->u.wait.alloc->freed) {
            /* The host freed memory the device was reading. */
            s->sticky = FAKE_E_ILLEGAL_ADDRESS;
            return;
        }
        if (fake_wait_value_met(it))
            return;
        pthread_mutex_unlock(&fake_lock);
        struct timespec ts = {0, delay_us * 1000};
        nanosleep(&ts, NULL);
        pthread_mutex_lock(&fake_lock);
        delay_us = delay_us * 2 > 1000 ? 1000 : delay_us * 2;
    }
}

/* After an asynchronous error a stream does no more work, as a CUDA
 * context does after a kernel fault: records complete carrying the error,
 * waits do not wait, host functions are skipped (cuLaunchHostFunc: "will
 * not be called in the event of an error in the CUDA context") and stream
 * callbacks run with the error as their status. */
static void fake_run(fake_stream *s, fake_item *it)
{
    if (s->pending_fault != 0) {
        s->sticky = s->pending_fault;
        s->pending_fault = 0;
    }
    unsigned err = s->sticky;
    switch (it->type) {
    case FAKE_ITEM_RECORD:
        it->u.mark->done = true;
        it->u.mark->error = err;
        it->u.mark->time_ns = fake_now_ns();
        break;
    case FAKE_ITEM_WAIT_MARK:
        while (err == 0 && !it->u.mark->done)
            pthread_cond_wait(&fake_changed, &fake_lock);
        break;
    case FAKE_ITEM_WAIT_STREAM:
        while (err == 0 && it->u.behind.stream->completed < it->u.behind.target)
            pthread_cond_wait(&fake_changed, &fake_lock);
        break;
    case FAKE_ITEM_WAIT_VALUE:
        if (err == 0)
            fake_poll_value(s, it);
        break;
    case FAKE_ITEM_HOST_FN:
        if (err == 0)
            fake_callback_run(s, it, 0);
        break;
    case FAKE_ITEM_CALLBACK: fake_callback_run(s, it, err); break;
    case FAKE_ITEM_TRANSFER:
        if (err == 0)
            fake_access_check(it);
        fake_transfer_run(s, it, err);
        break;
    /* Bookkeeping, done even after an error, so that memory is accounted
     * for and freed as the program says. */
    case FAKE_ITEM_ALLOC:
    case FAKE_ITEM_FREE:
        fake_access_check(it);
        fake_dmem_run(s, it);
        break;
    }
}

static void *fake_worker(void *arg)
{
    fake_stream *s = arg;
    pthread_mutex_lock(&fake_lock);
    for (;;) {
        /* (running: an item the enqueuing thread runs, FAKE_GPU_INSTANT) */
        while ((s->head == NULL || s->running != NULL) && !s->destroyed)
            pthread_cond_wait(&s->wake, &fake_lock);
        fake_item *it = s->head;
        if (it == NULL)
            break; /* destroyed and drained */
        s->head = it->next;
        if (s->head == NULL)
            s->tail = NULL;
        s->running = it;
        fake_run(s, it);
        s->running = NULL;
        fake_item_free(it);
        s->completed++;
        pthread_cond_broadcast(&fake_changed);
    }
    if ((s->flags & FAKE_STREAM_SPECIAL) == 0)
        fake_live_threads--;
    fake_stream_unref(s);
    pthread_mutex_unlock(&fake_lock);
    return NULL;
}

/* ---- Streams -------------------------------------------------------- */

bool fake_start_thread(void *(*main)(void *), void *arg)
{
    pthread_attr_t attr;
    pthread_t thread;
    sigset_t all, old;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&thread, &attr, main, arg);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&attr);
    return rc == 0;
}

unsigned fake_stream_create(int device, unsigned flags, void **out)
{
    if (out == NULL)
        return FAKE_E_INVALID_VALUE;
    fake_stream *s = calloc(1, sizeof *s);
    if (s == NULL)
        return FAKE_E_OUT_OF_MEMORY;
    s->kind = FAKE_KIND_STREAM;
    s->device = device;
    s->flags = flags;
    s->handle = s;
    s->refs = 1; /* the worker's */
    pthread_cond_init(&s->wake, NULL);
    pthread_mutex_lock(&fake_lock);
    if (!fake_callback_thread_start(device) || !fake_register(s) ||
        !fake_start_thread(fake_worker, s)) {
        if (fake_registered(s))
            fake_unregister(s);
        pthread_mutex_unlock(&fake_lock);
        pthread_cond_destroy(&s->wake);
        free(s);
        return FAKE_E_OUT_OF_MEMORY;
    }
    s->next_all = fake_all_streams;
    fake_all_streams = s;
    /* The counters are the application's streams: the special ones live
     * as long as the driver (or their thread) does. */
    if ((flags & FAKE_STREAM_SPECIAL) == 0) {
        fake_live_threads++;
        fake_live_streams++;
    }
    pthread_mutex_unlock(&fake_lock);
    *out = s;
    return FAKE_E_OK;
}

/* As CUDA documents: work still pending completes, then the resources go. */
static void fake_stream_end(fake_stream *s)
{
    fake_capture_stream_gone(s);
    fake_unregister(s);
    if ((s->flags & FAKE_STREAM_SPECIAL) == 0)
        fake_live_streams--;
    s->destroyed = true;
    pthread_cond_signal(&s->wake);
}

unsigned fake_stream_destroy(void *h)
{
    pthread_mutex_lock(&fake_lock);
    fake_stream *s = fake_find_stream(h);
    if (s != NULL && (s->flags & FAKE_STREAM_SPECIAL) != 0)
        s = NULL; /* the driver's own: nobody destroys it through the API */
    if (s != NULL)
        fake_stream_end(s);
    pthread_mutex_unlock(&fake_lock);
    return s != NULL ? FAKE_E_OK : FAKE_E_INVALID_HANDLE;
}

void fake_stream_retire(void *h)
{
    pthread_mutex_lock(&fake_lock);
    fake_stream *s = fake_find_stream(h);
    if (s != NULL)
        fake_stream_end(s);
    pthread_mutex_unlock(&fake_lock);
}

bool fake_stream_device(void *h, int *device)
{
    pthread_mutex_lock(&fake_lock);
    fake_stream *s = fake_find_stream(h);
    if (s != NULL)
        *device = s->device;
    pthread_mutex_unlock(&fake_lock);
    return s != NULL;
}

unsigned fake_stream_query(void *h)
{
    pthread_mutex_lock(&fake_lock);
    fake_stream *s = fake_find_stream(h);
    unsigned rc = s == NULL ? FAKE_E_INVALID_HANDLE
                  : s->capture
                      ? fake_capture_illegal(s, FAKE_E_CAPTURE_UNSUPPORTED,
                                             "queried a capturing stream")
                  : s->sticky != 0               ? s->sticky
                  : s->completed == s->submitted ? FAKE_E_OK
                                                 : FAKE_E_NOT_READY;
    pthread_mutex_unlock(&fake_lock);
    return rc;
}

unsigned fake_stream_synchronize(void *h)
{
    pthread_mutex_lock(&fake_lock);
    fake_stream *s = fake_find_stream(h);
    if (s == NULL || s->capture != NULL) {
        unsigned rc =
            s == NULL ? FAKE_E_INVALID_HANDLE
                      : fake_capture_illegal(s, FAKE_E_CAPTURE_UNSUPPORTED,
                                             "synchronized a capturing stream");
        pthread_mutex_unlock(&fake_lock);
        return rc;
    }
    uint64_t target = s->submitted; /* work enqueued before this call */
    s->refs++; /* the stream may be destroyed and drained meanwhile */
    while (s->completed < target)
        pthread_cond_wait(&fake_changed, &fake_lock);
    unsigned rc = s->sticky;
    fake_stream_unref(s);
    pthread_mutex_unlock(&fake_lock);
    return rc;
}

/* ---- Waits a real driver could hang in ------------------------------ */

void fake_deadline(struct timespec *deadline)
{
    clock_gettime(CLOCK_REALTIME, deadline); /* fake_changed's clock */
    deadline->tv_sec += fake_cfg()->hang_seconds;
}

bool fake_wait_until(const struct timespec *deadline)
{
    return pthread_cond_timedwait(&fake_changed, &fake_lock, deadline) !=
           ETIMEDOUT;
}

typedef struct fake_sync_target {
    fake_stream *stream;
    uint64_t target;
} fake_sync_target;

void fake_sync_device(int device)
{
    size_t n = 0, i = 0;
    for (fake_stream *s = fake_all_streams; s != NULL; s = s->next_all)
        n += s->device == device && s->completed < s->submitted;
    fake_sync_target *targets = n > 0 ? calloc(n, sizeof *targets) : NULL;
    if (targets == NULL)
        return; /* idle (or no memory to wait with: then do not wait) */
    for (fake_stream *s = fake_all_streams; s != NULL; s = s->next_all)
        if (s->device == device && s->completed < s->submitted) {
            targets[i++] = (fake_sync_target){s, s->submitted};
            s->refs++; /* it may be destroyed and drained meanwhile */
        }
    struct timespec deadline;
    fake_deadline(&deadline);
    bool hung = false;
    for (i = 0; i < n; i++) {
        while (!hung && targets[i].stream->completed < targets[i].target)
            hung = !fake_wait_until(&deadline);
        fake_stream_unref(targets[i].stream);
    }
    free(targets);
    if (hung)
        fake_violation("%s would deadlock: device %d still busy after %d s; "
                       "a real driver hangs here",
                       fake_current_entry_name(), device,
                       fake_cfg()->hang_seconds);
}

bool fake_drain_stream(fake_stream *s)
{
    uint64_t target = s->submitted;
    struct timespec deadline;
    fake_deadline(&deadline);
    bool hung = false;
    s->refs++;
    while (!hung && s->completed < target)
        hung = !fake_wait_until(&deadline);
    fake_stream_unref(s);
    return !hung;
}

/* A real driver's submission queue is finite: a call that enqueues on a
 * stream with FAKE_GPU_QUEUE_DEPTH items pending blocks until one
 * completes (bounded here by FAKE_GPU_HANG_SECONDS, then a violation).
 * False when the stream was destroyed meanwhile. */
static bool fake_wait_for_room(fake_stream *s)
{
    long long depth = fake_cfg()->queue_depth;
    if ((long long)(s->submitted - s->completed) < depth)
        return true;
    struct timespec deadline;
    fake_deadline(&deadline);
    bool hung = false;
    s->refs++;
    while (!hung && !s->destroyed &&
           (long long)(s->submitted - s->completed) >= depth)
        hung = !fake_wait_until(&deadline);
    bool alive = !s->destroyed;
    fake_stream_unref(s);
    if (hung && alive)
        fake_violation("%s blocked %d s on a full stream; a real driver "
                       "would deadlock",
                       fake_current_entry_name(), fake_cfg()->hang_seconds);
    return alive;
}

/* ---- Enqueueing ----------------------------------------------------- */

static bool fake_is_legacy(const fake_stream *s)
{
    return (s->flags & (FAKE_STREAM_LEGACY | FAKE_STREAM_NULL)) != 0;
}

static bool fake_is_blocking(const fake_stream *s)
{
    return (s->flags & FAKE_STREAM_NON_BLOCKING) == 0 && !fake_is_legacy(s);
}

/* The worker waits only while the stream is empty: waking it once, on the
 * first item, spares a graph launch a wake-up per node. */
static void fake_append(fake_stream *s, fake_item *it)
{
    it->next = NULL;
    bool was_empty = s->head == NULL;
    if (s->tail != NULL)
        s->tail->next = it;
    else
        s->head = it;
    s->tail = it;
    s->submitted++;
    if (was_empty && !s->quiet)
        pthread_cond_signal(&s->wake);
}

/* Waits on `s` until `other` has completed what was submitted to it so
 * far; nothing when it has (or there is no memory to wait with). */
static void fake_wait_behind(fake_stream *s, fake_stream *other)
{
    if (other->completed == other->submitted)
        return;
    fake_item *w = calloc(1, sizeof *w);
    if (w == NULL)
        return;
    w->type = FAKE_ITEM_WAIT_STREAM;
    w->entry = fake_current_entry_name();
    w->u.behind.stream = other;
    w->u.behind.target = other->submitted;
    other->refs++;
    fake_append(s, w);
}

void fake_implicit_waits(fake_stream *s)
{
    if ((s->flags & FAKE_STREAM_NON_BLOCKING) != 0)
        return; /* every stream of the project's backends */
    for (fake_stream *o = fake_all_streams; o != NULL; o = o->next_all)
        if (o != s && o->device == s->device &&
            (fake_is_legacy(s) ? fake_is_blocking(o) : fake_is_legacy(o)))
            fake_wait_behind(s, o);
}

/* Whether `it` completes without waiting for anything (FAKE_GPU_INSTANT). */
static bool fake_item_instant(const fake_item *it)
{
    switch (it->type) {
    case FAKE_ITEM_RECORD:
    case FAKE_ITEM_TRANSFER:
    case FAKE_ITEM_ALLOC:
    case FAKE_ITEM_FREE: return true;
    case FAKE_ITEM_WAIT_MARK: return it->u.mark->done;
    default: return false;
    }
}

/* FAKE_GPU_INSTANT: `it` run in the call on the idle stream `s`, as its
 * worker would (fake_worker), without waking the worker. */
static void fake_run_inline(fake_stream *s, fake_item *it)
{
    s->submitted++;
    fake_access_enter(s, it);
    s->running = it;
    fake_run(s, it);
    s->running = NULL;
    fake_item_free(it);
    s->completed++;
    if (s->head != NULL) /* enqueued meanwhile, by another thread */
        pthread_cond_signal(&s->wake);
    pthread_cond_broadcast(&fake_changed);
}

void fake_enqueue(fake_stream *s, fake_item *it)
{
    if (fake_capture_take(s, it))
        return; /* captured: runs when a graph of it is launched */
    fake_implicit_waits(s);
    if (fake_cfg()->instant && s->head == NULL && s->running == NULL &&
        fake_item_instant(it)) {
        fake_run_inline(s, it);
        return;
    }
    fake_append(s, it);
    fake_access_enter(s, it);
}

unsigned fake_begin_item(void *h, fake_stream **s, fake_item **it)
{
    *it = calloc(1, sizeof **it);
    if (*it == NULL)
        return FAKE_E_OUT_OF_MEMORY;
    pthread_mutex_lock(&fake_lock);
    *s = fake_find_stream(h);
    unsigned rc = *s == NULL ? FAKE_E_INVALID_HANDLE : fake_capture_admit(*s);
    if (rc == FAKE_E_OK && (*s)->capture == NULL && !fake_wait_for_room(*s))
        rc = FAKE_E_INVALID_HANDLE;
    if (rc != FAKE_E_OK) {
        pthread_mutex_unlock(&fake_lock);
        free(*it);
        return rc;
    }
    (*it)->entry = fake_current_entry_name();
    return FAKE_E_OK;
}

unsigned fake_stream_host_fn(void *h, void (*fn)(void *), void *data)
{
    if (fn == NULL)
        return FAKE_E_INVALID_VALUE;
    fake_stream *s;
    fake_item *it;
    unsigned rc = fake_begin_item(h, &s, &it);
    if (rc != FAKE_E_OK)
        return rc;
    it->type = FAKE_ITEM_HOST_FN;
    it->u.host.fn = fn;
    it->u.host.data = data;
    fake_enqueue(s, it);
    pthread_mutex_unlock(&fake_lock);
    return FAKE_E_OK;
}

unsigned fake_stream_callback(void *h, enum fake_callback_api api,
                              void (*callback)(void), void *data)
{
    if (callback == NULL)
        return FAKE_E_INVALID_VALUE;
    fake_stream *s;
    fake_item *it;
    unsigned rc = fake_begin_item(h, &s, &it);
    if (rc != FAKE_E_OK)
        return rc;
    it->type = FAKE_ITEM_CALLBACK;
    it->u.callback.api = api;
    it->u.callback.fn = callback;
    it->u.callback.data = data;
    fake_enqueue(s, it);
    pthread_mutex_unlock(&fake_lock);
    return FAKE_E_OK;
}

/* Only a device address is accepted: the host address of the same memory
 * (or any other) is INVALID_VALUE, as a real driver without unified
 * addressing of that memory reports. */
unsigned fake_stream_wait_value(void *h, uintptr_t device_addr, uint64_t value,
                                unsigned op, uint64_t mask)
{
    if (op > 3 || device_addr % 8 != 0)
        return FAKE_E_INVALID_VALUE;
    fake_stream *s;
    fake_item *it;
    unsigned rc = fake_begin_item(h, &s, &it);
    if (rc != FAKE_E_OK)
        return rc;
    fake_alloc *a = fake_find_device_word(device_addr);
    if (a == NULL) {
        pthread_mutex_unlock(&fake_lock);
        free(it);
        return FAKE_E_INVALID_VALUE;
    }
    a->refs++;
    it->type = FAKE_ITEM_WAIT_VALUE;
    it->u.wait.alloc = a;
    it->u.wait.addr = (const uint64_t *)device_addr;
    it->u.wait.value = value;
    it->u.wait.mask = mask;
    it->u.wait.op = op;
    fake_enqueue(s, it);
    pthread_mutex_unlock(&fake_lock);
    return FAKE_E_OK;
}

/* Waits for the record in effect now; a later re-record changes nothing
 * for this wait, and an unrecorded event is no wait at all. */
unsigned fake_stream_wait_event(void *sh, void *eh)
{
    fake_stream *s;
    fake_item *it;
    unsigned rc = fake_begin_item(sh, &s, &it);
    if (rc != FAKE_E_OK)
        return rc;
    fake_event *e = fake_find_event(eh);
    rc = e == NULL ? FAKE_E_INVALID_HANDLE : fake_capture_wait(s, &e->cap);
    if (rc != FAKE_CAPTURE_PASS || e->mark == NULL) {
        pthread_mutex_unlock(&fake_lock);
        free(it);
        return rc == FAKE_CAPTURE_PASS ? FAKE_E_OK : rc;
    }
    e->mark->refs++;
    it->type = FAKE_ITEM_WAIT_MARK;
    it->u.mark = e->mark;
    fake_enqueue(s, it);
    pthread_mutex_unlock(&fake_lock);
    return FAKE_E_OK;
}

/* ---- Events --------------------------------------------------------- */

unsigned fake_event_create(int device, unsigned flags, void **out)
{
    if (out == NULL)
        return FAKE_E_INVALID_VALUE;
    fake_event *e = calloc(1, sizeof *e);
    if (e == NULL)
        return FAKE_E_OUT_OF_MEMORY;
    e->kind = FAKE_KIND_EVENT;
    e->device = device;
    e->flags = flags;
    pthread_mutex_lock(&fake_lock);
    bool ok = fake_register(e);
    fake_live_events += ok;
    pthread_mutex_unlock(&fake_lock);
    if (!ok) {
        free(e);
        return FAKE_E_OUT_OF_MEMORY;
    }
    *out = e;
    return FAKE_E_OK;
}

/* A pending record still completes (the record item holds the mark). */
unsigned fake_event_destroy(void *h)
{
    pthread_mutex_lock(&fake_lock);
    fake_event *e = fake_find_event(h);
    if (e != NULL) {
        fake_unregister(e);
        fake_live_events--;
        fake_capture_forget(&e->cap);
        fake_mark_unref(e->mark);
        free(e);
    }
    pthread_mutex_unlock(&fake_lock);
    return e != NULL ? FAKE_E_OK : FAKE_E_INVALID_HANDLE;
}

unsigned fake_event_record(void *eh, void *sh)
{
    fake_stream *s;
    fake_item *it;
    fake_mark *m = calloc(1, sizeof *m);
    if (m == NULL)
        return FAKE_E_OUT_OF_MEMORY;
    unsigned rc = fake_begin_item(sh, &s, &it);
    if (rc != FAKE_E_OK) {
        free(m);
        return rc;
    }
    fake_event *e = fake_find_event(eh);
    if (e == NULL || e->device != s->device) {
        /* Event and stream must belong to the same context (CUDA) or
         * device (HIP): a backend that does this has lost track of a
         * device, so it is a violation too. */
        if (e != NULL && fake_cfg()->cross_device_events)
            fake_violation("%s: an event of device %d recorded on a stream "
                           "of device %d; real drivers refuse it "
                           "(CUDA_ERROR_INVALID_HANDLE / "
                           "hipErrorInvalidHandle)",
                           it->entry, e->device, s->device);
        pthread_mutex_unlock(&fake_lock);
        free(it);
        free(m);
        return FAKE_E_INVALID_HANDLE;
    }
    fake_mark_unref(e->mark);
    if (s->capture != NULL) { /* a point of the capture, not a node */
        e->mark = NULL;
        fake_capture_record(&e->cap, s);
        pthread_mutex_unlock(&fake_lock);
        free(it);
        free(m);
        return FAKE_E_OK;
    }
    fake_capture_forget(&e->cap);
    m->refs = 2; /* the event's and the record item's */
    m->stream = s;
    e->mark = m;
    it->type = FAKE_ITEM_RECORD;
    it->u.mark = m;
    fake_enqueue(s, it);
    pthread_mutex_unlock(&fake_lock);
    return FAKE_E_OK;
}

unsigned fake_event_query(void *h)
{
    pthread_mutex_lock(&fake_lock);
    fake_event *e = fake_find_event(h);
    unsigned rc = e == NULL                ? FAKE_E_INVALID_HANDLE
                  : e->cap.capture != NULL ? fake_capture_event_use(&e->cap)
                  : e->mark == NULL        ? FAKE_E_OK
                  : e->mark->done          ? e->mark->error
                                           : FAKE_E_NOT_READY;
    pthread_mutex_unlock(&fake_lock);
    return rc;
}

unsigned fake_event_synchronize(void *h)
{
    pthread_mutex_lock(&fake_lock);
    fake_event *e = fake_find_event(h);
    if (e == NULL || e->mark == NULL || e->cap.capture != NULL) {
        unsigned rc = e == NULL                ? FAKE_E_INVALID_HANDLE
                      : e->cap.capture != NULL ? fake_capture_event_use(&e->cap)
                                               : FAKE_E_OK;
        pthread_mutex_unlock(&fake_lock);
        return rc;
    }
    fake_mark *m = e->mark; /* the event may be destroyed meanwhile */
    m->refs++;
    while (!m->done)
        pthread_cond_wait(&fake_changed, &fake_lock);
    unsigned rc = m->error;
    fake_mark_unref(m);
    pthread_mutex_unlock(&fake_lock);
    return rc;
}

static unsigned fake_timing_mark(fake_event *e, fake_mark **m)
{
    if (e != NULL && e->cap.capture != NULL)
        return fake_capture_event_use(&e->cap);
    if (e == NULL || e->mark == NULL ||
        (e->flags & FAKE_EVENT_DISABLE_TIMING) != 0)
        return FAKE_E_INVALID_HANDLE;
    *m = e->mark;
    return !e->mark->done ? FAKE_E_NOT_READY : e->mark->error;
}

unsigned fake_event_elapsed(float *ms, void *start, void *end)
{
    if (ms == NULL)
        return FAKE_E_INVALID_VALUE;
    fake_mark *a = NULL, *b = NULL;
    pthread_mutex_lock(&fake_lock);
    unsigned rc = fake_timing_mark(fake_find_event(start), &a);
    unsigned rc_end = fake_timing_mark(fake_find_event(end), &b);
    /* A bad handle outranks "not ready", which outranks a stream error. */
    if (rc == FAKE_E_OK || rc_end == FAKE_E_INVALID_HANDLE ||
        (rc_end == FAKE_E_NOT_READY && rc != FAKE_E_INVALID_HANDLE))
        rc = rc_end;
    if (rc == FAKE_E_OK)
        *ms = (float)((double)((int64_t)(b->time_ns - a->time_ns)) / 1e6);
    pthread_mutex_unlock(&fake_lock);
    return rc;
}

/* Never waits: a lock held elsewhere (even by a thread that did not
 * survive a fork) counts as alive. */
bool fake_streams_alive(void)
{
    if (pthread_mutex_trylock(&fake_lock) != 0)
        return true;
    bool alive = fake_all_streams != NULL;
    pthread_mutex_unlock(&fake_lock);
    return alive;
}

/* ---- Control API (objects) ------------------------------------------ */

FAKE_EXPORT int fake_gpu_live(const char *kind)
{
    if (kind == NULL)
        return -1;
    if (strcmp(kind, "context_push") == 0)
        return fake_cuda_push_depth();
    int n = -1;
    pthread_mutex_lock(&fake_lock);
    if (strcmp(kind, "stream") == 0)
        n = fake_live_streams;
    else if (strcmp(kind, "event") == 0)
        n = fake_live_events;
    else if (strcmp(kind, "host_alloc") == 0)
        n = fake_host_allocs();
    else if (strcmp(kind, "thread") == 0)
        n = fake_live_threads;
    else if (strcmp(kind, "callback_thread") == 0)
        n = fake_callback_threads();
    else if (strcmp(kind, "proc_too_new") == 0)
        n = fake_cuda_proc_too_new();
    else if (strcmp(kind, "device_alloc") == 0)
        n = fake_device_allocs();
    else if (strcmp(kind, "device_bytes") == 0)
        n = fake_device_bytes() > INT_MAX ? INT_MAX : (int)fake_device_bytes();
    else if (strcmp(kind, "graph") == 0 || strcmp(kind, "graph_exec") == 0)
        n = fake_graphs_live(kind[5] != '\0');
    pthread_mutex_unlock(&fake_lock);
    return n;
}

FAKE_EXPORT int fake_gpu_async_error(void *stream, int error_code)
{
    if (error_code <= 0)
        return -1;
    pthread_mutex_lock(&fake_lock);
    fake_stream *s = fake_find_stream(stream);
    if (s != NULL)
        s->pending_fault = (unsigned)error_code;
    pthread_mutex_unlock(&fake_lock);
    return s != NULL ? 0 : -1;
}

FAKE_EXPORT unsigned fake_gpu_stream_flags(void *stream)
{
    pthread_mutex_lock(&fake_lock);
    fake_stream *s = fake_find_stream(stream);
    unsigned flags = s != NULL ? s->flags : ~0u;
    pthread_mutex_unlock(&fake_lock);
    return flags;
}

FAKE_EXPORT void *fake_gpu_special_stream(const char *which, int device)
{
    static const char *const names[] = {"legacy", "per_thread", "null"};
    void *s = NULL;
    for (int i = 0; which != NULL && i < 3; i++)
        if (strcmp(which, names[i]) == 0 &&
            fake_special_stream((enum fake_special)i, device, &s) != FAKE_E_OK)
            s = NULL;
    return s;
}

FAKE_EXPORT int fake_gpu_threads(void)
{
    return fake_gpu_live("thread");
}
