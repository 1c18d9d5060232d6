/* Watches (watch.h): arming, cancelling and, for backends that cannot fire
 * them themselves (the accelerators), the watcher that polls their events
 * on a thread of the core's worker pool. */
#include "watch_backend.h"

#include <stdlib.h>
#include <time.h>

#include "pool.h"

/* The watcher's pause between passes while nothing completes: from MIN,
 * doubling to MAX (as the GPU backend's polling waits do). */
#define MIN_PAUSE_NS (20 * 1000LL)
#define MAX_PAUSE_NS (250 * 1000LL)
/* How long the watcher's job waits for a new watch before it ends. */
#define IDLE_EXIT_NS (2 * MXD_SECOND)
/* Queues a pass remembers as not done yet (more only costs queries). */
enum { BLOCKED_QUEUES = 32 };

static atomic_long armed_count;

void mxd_watch_count(long delta)
{
    atomic_fetch_add_explicit(&armed_count, delta, memory_order_relaxed);
}

long mxd_watch_armed(void)
{
    return atomic_load_explicit(&armed_count, memory_order_relaxed);
}

void mxd_watch_fire(mxd_watch *w, mxd_status status, const mxd_error *err)
{
    w->status = status;
    if (status != MXD_OK && (w->error = malloc(sizeof *w->error)))
        *w->error = *err;
    w->state = MXD_WATCH_FIRED;
    mxd_watch_count(-1);
    w->fn(w->ctx); /* last: w may be freed once it ran */
}

/* ---- The watcher thread (accelerators) ---------------------------------- */

static struct {
    pthread_mutex_t mu; /* guards everything below and each watch on it;
                           held by every pass (its driver calls) */
    pthread_cond_t wake;
    pthread_once_t once;
    mxd_watch *head, *tail; /* armed, oldest first */
    bool running;           /* `job` is submitted or runs */
    atomic_bool stopped;    /* for good: the process exits */
    mxd_job job;
} watcher = {.mu = PTHREAD_MUTEX_INITIALIZER, .once = PTHREAD_ONCE_INIT};

static void watcher_init(void)
{
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&watcher.wake, &attr);
    pthread_condattr_destroy(&attr);
}

/* Under watcher.mu. */
static void unlink_watch(mxd_watch *w)
{
    if (w->prev)
        w->prev->next = w->next;
    else
        watcher.head = w->next;
    if (w->next)
        w->next->prev = w->prev;
    else
        watcher.tail = w->prev;
    w->prev = w->next = NULL;
}

static bool blocked(mxd_queue *const *queues, int count, const mxd_queue *q)
{
    for (int i = 0; i < count; i++)
        if (queues[i] == q)
            return true;
    return false;
}

/* Under watcher.mu: queries every pending watch once, except the later
 * watches of a queue whose older one is not done (a stream completes in
 * order); fires those done.  True when any fired. */
static bool poll_pass(void)
{
    mxd_queue *waiting[BLOCKED_QUEUES];
    int nwaiting = 0;
    bool progress = false;
    for (mxd_watch *w = watcher.head, *next; w; w = next) {
        next = w->next;
        if (w->storage && blocked(waiting, nwaiting, w->queue))
            continue;
        bool ready = false;
        mxd_error err;
        mxd_status st = w->completion
                            ? mxd_completion_query(w->completion, &ready, &err)
                            : mxd_event_query(w->event, &ready, &err);
        if (st == MXD_OK && !ready) {
            if (w->storage && nwaiting < BLOCKED_QUEUES)
                waiting[nwaiting++] = w->queue;
            continue;
        }
        unlink_watch(w);
        mxd_watch_fire(w, st, &err);
        progress = true;
    }
    return progress;
}

/* Under watcher.mu: waits up to IDLE_EXIT_NS for a watch; false when none
 * came (the job then ends). */
static bool wait_for_watches(void)
{
    int64_t until_ns = mxd_now_ns() + IDLE_EXIT_NS;
    struct timespec until = {until_ns / MXD_SECOND, until_ns % MXD_SECOND};
    while (!watcher.head)
        if (pthread_cond_timedwait(&watcher.wake, &watcher.mu, &until) &&
            !watcher.head)
            return false;
    return true;
}

/* The watcher: a job of the core's worker pool (pool.h), which runs while
 * watches are armed and ends once none was for IDLE_EXIT_NS. */
static void watcher_run(mxd_job *job)
{
    (void)job;
    int64_t pause = MIN_PAUSE_NS;
    pthread_mutex_lock(&watcher.mu);
    while (!atomic_load(&watcher.stopped)) {
        if (!watcher.head) {
            if (!wait_for_watches())
                break;
            pause = MIN_PAUSE_NS;
        }
        if (atomic_load(&watcher.stopped))
            break; /* the watches stay armed: the process exits */
        if (poll_pass())
            pause = MIN_PAUSE_NS;
        else if (pause < MAX_PAUSE_NS)
            pause = pause * 2 < MAX_PAUSE_NS ? pause * 2 : MAX_PAUSE_NS;
        if (!watcher.head)
            continue;
        int64_t until_ns = mxd_now_ns() + pause;
        struct timespec until = {until_ns / MXD_SECOND, until_ns % MXD_SECOND};
        pthread_cond_timedwait(&watcher.wake, &watcher.mu, &until);
    }
    watcher.running = false; /* the job is not touched after this */
    pthread_mutex_unlock(&watcher.mu);
}

static mxd_status watcher_add(mxd_watch *w, mxd_error *err)
{
    pthread_once(&watcher.once, watcher_init);
    pthread_mutex_lock(&watcher.mu);
    if (!watcher.running) {
        watcher.job.run = watcher_run;
        if (mxd_pool_submit(&watcher.job, err) != MXD_OK) {
            pthread_mutex_unlock(&watcher.mu);
            return MXD_NO_MEMORY;
        }
        watcher.running = true;
    }
    w->firer = NULL;
    w->state = MXD_WATCH_ARMED;
    w->prev = watcher.tail;
    w->next = NULL;
    if (watcher.tail)
        watcher.tail->next = w;
    else
        watcher.head = w;
    watcher.tail = w;
    mxd_watch_count(1);
    pthread_mutex_unlock(&watcher.mu);
    pthread_cond_signal(&watcher.wake); /* query the new one now */
    return MXD_OK;
}

static bool watcher_cancel(mxd_watch *w)
{
    pthread_mutex_lock(&watcher.mu);
    bool armed = w->state == MXD_WATCH_ARMED;
    if (armed) {
        unlink_watch(w);
        w->state = MXD_WATCH_CANCELLED;
        mxd_watch_count(-1);
    }
    pthread_mutex_unlock(&watcher.mu);
    return armed;
}

void mxd_watch_stop(const struct timespec *until)
{
    atomic_store(&watcher.stopped, true);
    mxd_wait_for_mutex(&watcher.mu, until); /* the pass in progress */
}

bool mxd_watch_thread_running(void)
{
    pthread_mutex_lock(&watcher.mu);
    bool running = watcher.running;
    pthread_mutex_unlock(&watcher.mu);
    return running;
}

/* The fork handlers (process.c): the child has no watcher thread, and the
 * watches of the parent's are the parent's (their objects are stale). */
static void watch_fork_prepare(void)
{
    pthread_once(&watcher.once, watcher_init);
    pthread_mutex_lock(&watcher.mu);
}

static void watch_fork_parent(void)
{
    pthread_mutex_unlock(&watcher.mu);
}

static void watch_fork_child(void)
{
    watcher.head = watcher.tail = NULL;
    watcher.running = false;
    atomic_store(&armed_count, 0);
    watcher_init(); /* over the parent's: its waiter did not survive */
    pthread_mutex_unlock(&watcher.mu);
}

/* ---- Arming ------------------------------------------------------------- */

static mxd_watch *new_watch(mxd_watch_fn fn, void *ctx, mxd_error *err)
{
    mxd_watch *w = calloc(1, sizeof *w);
    if (!w) {
        mxd_fail(err, MXD_NO_MEMORY, "out of memory");
        return NULL;
    }
    w->fn = fn;
    w->ctx = ctx;
    return w;
}

/* Arms w with the backend, or (when it cannot fire watches itself) with
 * the watcher after a first query; *out stays w only when armed. */
static mxd_status arm(mxd_watch *w, mxd_queue *q, mxd_event *ev,
                      mxd_watch **out, mxd_error *err)
{
    const mxd_backend *ops = ev ? ev->ops : q ? q->ops : w->completion->ops;
    bool armed = false;
    mxd_status st;
    if (ops->watch_arm) {
        st = ops->watch_arm(w, q, ev, &armed, err);
    } else {
        st = w->completion ? mxd_completion_query(w->completion, &armed, err)
                           : mxd_event_query(w->event, &armed, err);
        armed = !armed; /* not ready yet */
        if (st == MXD_OK && armed)
            st = watcher_add(w, err);
    }
    if (st != MXD_OK || !armed) {
        mxd_watch_free(w);
        *out = NULL;
    }
    return st;
}

mxd_status mxd_watch_event(mxd_event *ev, mxd_watch_fn fn, void *ctx,
                           mxd_watch **out, mxd_error *err)
{
    *out = NULL;
    if (mxd_stale(ev->epoch))
        return mxd_fail_stale(err, "DeviceEvent");
    bool active;
    if (mxd_event_in_capture(ev, &active))
        return active ? mxd_capture_refuse_event(ev, "awaiting", err)
                      : MXD_OK; /* never recorded, as far as one can see */
    mxd_watch *w = new_watch(fn, ctx, err);
    if (!w)
        return MXD_NO_MEMORY;
    w->event = ev;
    *out = w;
    return arm(w, NULL, ev, out, err);
}

mxd_status mxd_watch_queue(mxd_queue *q, mxd_watch_fn fn, void *ctx,
                           mxd_watch **out, mxd_error *err)
{
    *out = NULL;
    if (mxd_queue_is_stale(q))
        return mxd_fail_stale(err, "DeviceQueue");
    mxd_status refused = mxd_queue_check_wait(q, "await", err);
    if (refused != MXD_OK)
        return refused;
    mxd_watch *w = new_watch(fn, ctx, err);
    if (!w)
        return MXD_NO_MEMORY;
    *out = w;
    if (!q->ops->watch_arm) {
        /* The watcher needs an event at the end of the stream, as
         * synchronize() records one; the queue gives the stream order. */
        if (mxd_queue_is_idle(q)) {
            mxd_watch_free(w);
            *out = NULL;
            return MXD_OK;
        }
        mxd_status st = MXD_NO_MEMORY;
        if (!(w->storage = malloc(sizeof *w->storage)))
            mxd_fail(err, st, "out of memory");
        else
            st = mxd_event_init(w->storage, q->device, false, &w->event, err);
        if (st == MXD_OK) {
            mxd_queue_retain(q);
            w->queue = q;
            st = mxd_queue_record(q, w->event, err);
        }
        if (st != MXD_OK) {
            mxd_watch_free(w);
            *out = NULL;
            return st;
        }
    }
    return arm(w, q, NULL, out, err);
}

mxd_status mxd_watch_completion(mxd_completion *c, mxd_watch_fn fn, void *ctx,
                                mxd_watch **out, mxd_error *err)
{
    *out = NULL;
    bool ready;
    /* Poisoned, complete, or (GPU) its event recorded now, for the
     * watcher to query. */
    mxd_status st = mxd_completion_query(c, &ready, err);
    if (st != MXD_OK || ready)
        return st;
    mxd_watch *w = new_watch(fn, ctx, err);
    if (!w)
        return MXD_NO_MEMORY;
    mxd_completion_retain(c);
    w->completion = c;
    *out = w;
    return arm(w, NULL, NULL, out, err);
}

bool mxd_watch_cancel(mxd_watch *w)
{
    return w->firer ? w->firer->watch_cancel(w) : watcher_cancel(w);
}

mxd_status mxd_watch_result(const mxd_watch *w, mxd_error *err)
{
    if (w->status != MXD_OK) {
        if (w->error)
            *err = *w->error;
        else
            mxd_fail(err, w->status,
                     "the awaited work failed (out of "
                     "memory for the driver's message)");
    }
    return w->status;
}

void mxd_watch_free(mxd_watch *w)
{
    if (!w)
        return;
    if (w->event && w->storage)
        mxd_event_fini(w->event);
    free(w->storage);
    if (w->queue)
        mxd_queue_release(w->queue);
    mxd_completion_release(w->completion);
    free(w->error);
    free(w);
}

const mxd_fork_hooks mxd_watch_fork_hooks = {
    watch_fork_prepare,
    watch_fork_parent,
    watch_fork_child,
};
