/* The CPU backend: real asynchronous queues on host threads.
 *
 * A queue is a timeline.  Enqueueing appends an item and takes the next
 * ticket (`submitted`); the queue's drain job, running on a pool thread,
 * runs items in order and publishes each finished ticket in `completed`.
 * An event is a point (queue, ticket) on a timeline: it is complete when
 * the queue's `completed` reaches the ticket, so is_ready is one atomic
 * load.  At most one thread drains a queue at a time, which keeps each
 * queue in order; different queues drain on different threads, so they run
 * concurrently and may block on each other. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "backend.h"
#include "pool.h"
#include "watch_backend.h"

/* How often a queue gated on a flag re-reads the slot even without a
 * signal() (the slot may be written through its address, e.g. by ctypes). */
#define FLAG_RECHECK_NS (50 * MXD_MS)
/* How often a host wait wakes to poll for signals (Ctrl-C). */
#define POLL_SLICE_NS (20 * MXD_MS)

typedef enum item_kind {
    ITEM_HOST,            /* a user host function */
    ITEM_WAIT_POINT,      /* wait until another timeline reaches a ticket */
    ITEM_WAIT_VALUE,      /* wait until a flag holds a value */
    ITEM_WAIT_COMPLETION, /* wait for another backend's completion */
    ITEM_STAMP,           /* write the time into a timing stamp */
    ITEM_KICKOFF,         /* reset a flag, hand a host function to the pool */
    ITEM_TRANSFER,        /* write a buffer: a staged copy or a fill */
    ITEM_GRAPH,           /* a launch of a captured graph (cpu_graph.inc) */
} item_kind;

typedef struct cpu_queue cpu_queue;
typedef struct cpu_transfer cpu_transfer; /* cpu_memory.inc */

/* Completion time of a timed event's point, shared between the event and
 * the item that writes it (the event may be re-recorded or destroyed before
 * the item runs). */
typedef struct cpu_stamp {
    atomic_long refs;
    int64_t ns;
} cpu_stamp;

typedef struct cpu_item {
    struct cpu_item *next;
    item_kind kind;
    uint64_t ticket;
    union {
        mxd_host_fn host;
        struct {
            cpu_queue *queue;
            uint64_t ticket;
        } point;
        struct {
            mxd_flag *flag;
            uint64_t value;
        } wait;
        cpu_stamp *stamp;
        cpu_transfer *transfer;
        mxd_completion *completion;
        mxd_graph *graph; /* retained */
        struct {
            mxd_job job; /* the item itself becomes the pool job */
            mxd_host_fn fn;
            mxd_flag *flag;
            uint64_t value;
        } kickoff;
    } u;
} cpu_item;

struct cpu_queue {
    mxd_queue base;
    pthread_mutex_t mu; /* guards head, tail, draining; orders submitted */
    cpu_item *head, *tail;
    bool draining; /* a drain job owns the queue */
    mxd_job drain;
    _Atomic uint64_t submitted;
    _Atomic uint64_t completed;
    mxd_notifier done; /* notified whenever `completed` moves */
    /* Armed watches (cpu_watch.inc), in ticket order, under mu; `watched`
     * counts them, so that completing a ticket costs one load without. */
    mxd_watch *watch_head, *watch_tail;
    atomic_long watched;
};

typedef struct cpu_event {
    mxd_event base;
    mxd_spinlock lock; /* guards the point below (a few loads and stores) */
    cpu_queue *queue;  /* NULL: unrecorded, or recorded and complete */
    uint64_t ticket;
    bool recorded;
    cpu_stamp *stamp; /* timing events: when the point completed */
} cpu_event;

/* A point on a timeline, copied out of an event under its lock. */
typedef struct cpu_point {
    cpu_queue *queue; /* retained; NULL when already complete */
    uint64_t ticket;
} cpu_point;

static cpu_queue *as_cpu_queue(mxd_queue *q)
{
    return (cpu_queue *)q;
}

static cpu_event *as_cpu_event(mxd_event *ev)
{
    return (cpu_event *)ev;
}

/* ---- Stamps ------------------------------------------------------------- */

static cpu_stamp *stamp_new(void)
{
    cpu_stamp *stamp = malloc(sizeof *stamp);
    if (stamp) {
        atomic_init(&stamp->refs, 1);
        stamp->ns = 0;
    }
    return stamp;
}

static void stamp_release(cpu_stamp *stamp)
{
    if (stamp && atomic_fetch_sub(&stamp->refs, 1) == 1)
        free(stamp);
}

/* ---- Timelines ---------------------------------------------------------- */

static bool point_reached(const cpu_queue *q, uint64_t ticket)
{
    return atomic_load_explicit(&q->completed, memory_order_acquire) >= ticket;
}

typedef struct point_arg {
    const cpu_queue *queue;
    uint64_t ticket;
} point_arg;

static bool point_arg_reached(const void *arg)
{
    const point_arg *p = arg;
    return point_reached(p->queue, p->ticket);
}

/* The queue and ticket of the item this thread is running, if any: a
 * host function that waited for its own queue's later work would wait
 * forever, so such a wait fails instead. */
static _Thread_local const cpu_queue *running_queue;
static _Thread_local uint64_t running_ticket;

static mxd_status wait_point(cpu_queue *q, uint64_t ticket,
                             const mxd_wait *wait, mxd_error *err)
{
    if (point_reached(q, ticket))
        return MXD_OK;
    if (q == running_queue && ticket >= running_ticket)
        return mxd_fail(err, MXD_INVALID,
                        "a host function cannot wait for work enqueued on "
                        "its own queue after it: that work cannot start "
                        "until the host function returns");
    point_arg arg = {q, ticket};
    return mxd_park(&q->done, point_arg_reached, &arg, wait,
                    wait ? POLL_SLICE_NS : INT64_MAX, err);
}

typedef struct value_arg {
    const mxd_flag *flag;
    uint64_t value;
} value_arg;

static bool value_arg_reached(const void *arg)
{
    const value_arg *v = arg;
    return mxd_flag_load(v->flag) == v->value;
}

/* Blocks the drain thread until flag holds value. */
static void park_for_value(mxd_flag *flag, uint64_t value)
{
    value_arg arg = {flag, value};
    mxd_park(&flag->changed, value_arg_reached, &arg, NULL, FLAG_RECHECK_NS,
             NULL);
}

/* ---- Running items (on the drain thread) -------------------------------- */

static void run_kickoff_job(mxd_job *job);
static void run_transfer(cpu_transfer *t);
static void park_for_value(mxd_flag *flag, uint64_t value);

/* Runs one item that is not a host function; it may block. */
static void run_item(cpu_item *item)
{
    switch (item->kind) {
    case ITEM_WAIT_POINT:
        wait_point(item->u.point.queue, item->u.point.ticket, NULL, NULL);
        mxd_queue_release(&item->u.point.queue->base);
        break;
    case ITEM_WAIT_VALUE:
        park_for_value(item->u.wait.flag, item->u.wait.value);
        mxd_flag_release(item->u.wait.flag);
        break;
    case ITEM_WAIT_COMPLETION: {
        /* On a pool thread, never a driver's callback thread: the other
         * backend's blocking wait is allowed here.  A failure (the device's
         * error, a poison) only ends the wait: it stays with the memory the
         * failed operation wrote. */
        mxd_error ignored;
        mxd_completion_wait(item->u.completion, NULL, &ignored);
        mxd_completion_release(item->u.completion);
        break;
    }
    case ITEM_STAMP:
        item->u.stamp->ns = mxd_now_ns();
        stamp_release(item->u.stamp);
        break;
    case ITEM_KICKOFF:
        mxd_flag_signal(item->u.kickoff.flag, 0);
        item->u.kickoff.job.run = run_kickoff_job;
        if (mxd_pool_submit(&item->u.kickoff.job, NULL) != MXD_OK)
            run_kickoff_job(&item->u.kickoff.job); /* no thread: run here */
        return;                                    /* the job owns the item */
    case ITEM_TRANSFER: run_transfer(item->u.transfer); break;
    case ITEM_HOST:
    case ITEM_GRAPH: break; /* run by drain() inside a host batch */
    }
    free(item);
}

static void run_kickoff_job(mxd_job *job)
{
    cpu_item *item =
        (cpu_item *)((char *)job - offsetof(cpu_item, u.kickoff.job));
    mxd_host_fn_run_alone(item->u.kickoff.fn);
    /* Signalled also when fn raised: the waiting queue must go on. */
    mxd_flag_signal(item->u.kickoff.flag, item->u.kickoff.value);
    mxd_flag_release(item->u.kickoff.flag);
    free(item);
}

/* Takes the next item, or ends the drain when the queue is empty. */
static cpu_item *pop_item(cpu_queue *q)
{
    pthread_mutex_lock(&q->mu);
    cpu_item *item = q->head;
    if (item) {
        q->head = item->next;
        if (!q->head)
            q->tail = NULL;
    } else {
        q->draining = false;
    }
    pthread_mutex_unlock(&q->mu);
    return item;
}

static void fire_watches(cpu_queue *q);

static void complete(cpu_queue *q, uint64_t ticket)
{
    atomic_store(&q->completed, ticket);
    mxd_notify_all(&q->done);
    /* Sequentially consistent, like the store: pairs with arm_at. */
    if (atomic_load(&q->watched))
        fire_watches(q);
}

static void run_graph(cpu_queue *q, cpu_item *item, mxd_host_batch *batch);

static void drain(mxd_job *job)
{
    cpu_queue *q = (cpu_queue *)((char *)job - offsetof(cpu_queue, drain));
    /* Consecutive host functions share one runner entry (one GIL
     * acquisition); anything that may block leaves the runner first. */
    mxd_host_batch batch = {0};
    for (cpu_item *item; (item = pop_item(q));) {
        uint64_t ticket = item->ticket;
        if (item->kind == ITEM_HOST) {
            running_queue = q;
            running_ticket = ticket;
            mxd_host_batch_run(&batch, item->u.host);
            running_queue = NULL;
            free(item);
        } else if (item->kind == ITEM_GRAPH) {
            run_graph(q, item, &batch);
        } else {
            mxd_host_batch_end(&batch);
            run_item(item);
        }
        complete(q, ticket);
    }
    mxd_host_batch_end(&batch);
    mxd_queue_release(&q->base); /* taken when the drain was submitted */
}

/* ---- Enqueueing --------------------------------------------------------- */

static cpu_item *item_new(item_kind kind, mxd_error *err)
{
    cpu_item *item = malloc(sizeof *item);
    if (!item) {
        mxd_fail(err, MXD_NO_MEMORY, "out of memory");
        return NULL;
    }
    item->next = NULL;
    item->kind = kind;
    return item;
}

/* Appends item, starting a drain when the queue was idle.  On failure
 * nothing is enqueued and the caller still owns the item.  `ticket` (may
 * be NULL) receives the item's ticket, read under the lock: once it is
 * released the worker may run and free the item at any time. */
static mxd_status enqueue_ticket(cpu_queue *q, cpu_item *item, uint64_t *ticket,
                                 mxd_error *err)
{
    pthread_mutex_lock(&q->mu);
    if (!q->draining) {
        mxd_queue_retain(&q->base); /* released when the drain ends */
        mxd_status st = mxd_pool_submit(&q->drain, err);
        if (st != MXD_OK) {
            pthread_mutex_unlock(&q->mu);
            mxd_queue_release(&q->base);
            return st;
        }
        q->draining = true;
    }
    item->ticket = atomic_load(&q->submitted) + 1;
    atomic_store(&q->submitted, item->ticket);
    if (q->tail)
        q->tail->next = item;
    else
        q->head = item;
    q->tail = item;
    if (ticket)
        *ticket = item->ticket;
    pthread_mutex_unlock(&q->mu);
    return MXD_OK;
}

static mxd_status enqueue(cpu_queue *q, cpu_item *item, mxd_error *err)
{
    return enqueue_ticket(q, item, NULL, err);
}

/* Makes later work on q wait for `point`; consumes the point's
 * reference. */
static mxd_status enqueue_wait_point(cpu_queue *q, cpu_point point,
                                     mxd_error *err)
{
    if (!point.queue)
        return MXD_OK;
    if (point.queue == q || point_reached(point.queue, point.ticket)) {
        mxd_queue_release(&point.queue->base); /* already ordered */
        return MXD_OK;
    }
    cpu_item *item = item_new(ITEM_WAIT_POINT, err);
    mxd_status st = item ? MXD_OK : MXD_NO_MEMORY;
    if (item) {
        item->u.point.queue = point.queue;
        item->u.point.ticket = point.ticket;
        st = enqueue(q, item, err);
        if (st != MXD_OK)
            free(item);
    }
    if (st != MXD_OK)
        mxd_queue_release(&point.queue->base);
    return st;
}

/* The current end of q's timeline, retained; NULL queue when complete. */
static cpu_point current_point(cpu_queue *q)
{
    uint64_t ticket = atomic_load(&q->submitted);
    if (point_reached(q, ticket))
        return (cpu_point){NULL, 0};
    mxd_queue_retain(&q->base);
    return (cpu_point){q, ticket};
}

/* ---- Queue operations --------------------------------------------------- */

static mxd_status cpu_queue_create(mxd_device *dev, mxd_queue **out,
                                   mxd_error *err)
{
    (void)dev;
    cpu_queue *q = calloc(1, sizeof *q);
    if (!q)
        return mxd_fail(err, MXD_NO_MEMORY, "out of memory");
    if (mxd_notifier_init(&q->done)) {
        free(q);
        return mxd_fail(err, MXD_NO_MEMORY, "out of synchronization objects");
    }
    pthread_mutex_init(&q->mu, NULL);
    q->drain.run = drain;
    atomic_init(&q->submitted, 0);
    atomic_init(&q->completed, 0);
    atomic_init(&q->watched, 0);
    *out = &q->base;
    return MXD_OK;
}

static void cpu_queue_destroy(mxd_queue *base)
{
    /* The last reference is gone, so no drain runs and no item waits. */
    cpu_queue *q = as_cpu_queue(base);
    mxd_notifier_destroy(&q->done);
    pthread_mutex_destroy(&q->mu);
    free(q);
}

static uintptr_t cpu_queue_native(const mxd_queue *q)
{
    (void)q;
    return 0; /* CPU queues have no driver stream */
}

static bool cpu_queue_is_idle(const mxd_queue *base)
{
    const cpu_queue *q = (const cpu_queue *)base;
    return point_reached(q, atomic_load(&q->submitted));
}

static mxd_status cpu_queue_synchronize(mxd_queue *base, const mxd_wait *wait,
                                        mxd_error *err)
{
    cpu_queue *q = as_cpu_queue(base);
    return wait_point(q, atomic_load(&q->submitted), wait, err);
}

static mxd_status cpu_queue_wait_queue(mxd_queue *q, mxd_queue *other,
                                       mxd_error *err)
{
    return enqueue_wait_point(as_cpu_queue(q),
                              current_point(as_cpu_queue(other)), err);
}

/* Where ev was recorded, retained; NULL queue when unrecorded or complete
 * (the common case of a wait: no reference taken and dropped). */
static cpu_point event_point(cpu_event *ev)
{
    mxd_spin_lock(&ev->lock);
    cpu_point point = {ev->queue, ev->ticket};
    if (point.queue && point_reached(point.queue, point.ticket))
        point.queue = NULL;
    else if (point.queue)
        mxd_queue_retain(&point.queue->base);
    mxd_spin_unlock(&ev->lock);
    return point;
}

static mxd_status cpu_queue_wait_event(mxd_queue *q, mxd_event *ev,
                                       mxd_error *err)
{
    return enqueue_wait_point(as_cpu_queue(q), event_point(as_cpu_event(ev)),
                              err);
}

static mxd_status cpu_queue_wait_value(mxd_queue *base, mxd_flag *flag,
                                       uint64_t value, mxd_error *err)
{
    cpu_queue *q = as_cpu_queue(base);
    /* Equal already and nothing pending that could change it first: there
     * is nothing to wait for. */
    if (cpu_queue_is_idle(base) && mxd_flag_load(flag) == value)
        return MXD_OK;
    cpu_item *item = item_new(ITEM_WAIT_VALUE, err);
    if (!item)
        return MXD_NO_MEMORY;
    mxd_flag_retain(flag);
    item->u.wait.flag = flag;
    item->u.wait.value = value;
    mxd_status st = enqueue(q, item, err);
    if (st != MXD_OK) {
        mxd_flag_release(flag);
        free(item);
    }
    return st;
}

static mxd_status cpu_queue_host_fn(mxd_queue *q, mxd_host_fn fn,
                                    mxd_error *err)
{
    cpu_item *item = item_new(ITEM_HOST, err);
    if (!item)
        return MXD_NO_MEMORY;
    item->u.host = fn;
    mxd_status st = enqueue(as_cpu_queue(q), item, err);
    if (st != MXD_OK)
        free(item);
    return st;
}

static mxd_status cpu_queue_async_kickoff(mxd_queue *q, mxd_host_fn fn,
                                          mxd_flag *flag, uint64_t value,
                                          mxd_error *err)
{
    cpu_item *item = item_new(ITEM_KICKOFF, err);
    if (!item)
        return MXD_NO_MEMORY;
    mxd_flag_retain(flag);
    item->u.kickoff.fn = fn;
    item->u.kickoff.flag = flag;
    item->u.kickoff.value = value;
    mxd_status st = enqueue(as_cpu_queue(q), item, err);
    if (st != MXD_OK) {
        mxd_flag_release(flag);
        free(item);
    }
    return st;
}

/* ---- Events ------------------------------------------------------------- */

_Static_assert(sizeof(cpu_event) <= MXD_EVENT_STORAGE_SIZE,
               "a CPU event must fit in mxd_event_storage");

static mxd_status cpu_event_init(mxd_event *base, mxd_error *err)
{
    (void)err;
    cpu_event *ev = as_cpu_event(base);
    mxd_spin_init(&ev->lock);
    ev->queue = NULL;
    ev->ticket = 0;
    ev->recorded = false;
    ev->stamp = NULL;
    return MXD_OK;
}

static void cpu_event_fini(mxd_event *base)
{
    cpu_event *ev = as_cpu_event(base);
    if (ev->queue)
        mxd_queue_release(&ev->queue->base);
    stamp_release(ev->stamp);
}

/* For a timing event: the point is a stamp item at the end of q, which
 * writes the time when the worker reaches it; on an idle queue the point
 * is complete already, so it is stamped now. */
static mxd_status stamp_point(cpu_queue *q, cpu_stamp *stamp, cpu_point *point,
                              mxd_error *err)
{
    if (cpu_queue_is_idle(&q->base)) {
        stamp->ns = mxd_now_ns();
        *point = (cpu_point){NULL, 0};
        return MXD_OK;
    }
    cpu_item *item = item_new(ITEM_STAMP, err);
    if (!item)
        return MXD_NO_MEMORY;
    atomic_fetch_add(&stamp->refs, 1);
    item->u.stamp = stamp;
    uint64_t ticket;
    mxd_status st = enqueue_ticket(q, item, &ticket, err);
    if (st != MXD_OK) {
        atomic_fetch_sub(&stamp->refs, 1);
        free(item);
        return st;
    }
    mxd_queue_retain(&q->base);
    *point = (cpu_point){q, ticket};
    return MXD_OK;
}

static mxd_status cpu_event_record(mxd_event *base, mxd_queue *qbase,
                                   mxd_error *err)
{
    cpu_event *ev = as_cpu_event(base);
    cpu_queue *q = as_cpu_queue(qbase);
    cpu_point point;
    cpu_stamp *stamp = NULL;
    if (base->timing) {
        stamp = stamp_new();
        if (!stamp)
            return mxd_fail(err, MXD_NO_MEMORY, "out of memory");
        mxd_status st = stamp_point(q, stamp, &point, err);
        if (st != MXD_OK) {
            stamp_release(stamp);
            return st;
        }
    } else {
        point = current_point(q);
    }
    mxd_spin_lock(&ev->lock);
    cpu_queue *old_queue = ev->queue;
    cpu_stamp *old_stamp = ev->stamp;
    ev->queue = point.queue;
    ev->ticket = point.ticket;
    ev->stamp = stamp;
    ev->recorded = true;
    mxd_spin_unlock(&ev->lock);
    if (old_queue)
        mxd_queue_release(&old_queue->base);
    stamp_release(old_stamp);
    return MXD_OK;
}

static bool event_ready(cpu_event *ev)
{
    mxd_spin_lock(&ev->lock);
    bool ready = !ev->queue || point_reached(ev->queue, ev->ticket);
    mxd_spin_unlock(&ev->lock);
    return ready;
}

static mxd_status cpu_event_query(mxd_event *ev, bool *ready, mxd_error *err)
{
    (void)err;
    *ready = event_ready(as_cpu_event(ev));
    return MXD_OK;
}

static mxd_status cpu_event_synchronize(mxd_event *ev, const mxd_wait *wait,
                                        mxd_error *err)
{
    cpu_point point = event_point(as_cpu_event(ev));
    if (!point.queue)
        return MXD_OK;
    mxd_status st = wait_point(point.queue, point.ticket, wait, err);
    mxd_queue_release(&point.queue->base);
    return st;
}

/* The completion time of a timing event, or a reason why there is none. */
static mxd_status completed_stamp(cpu_event *ev, const char *which, int64_t *ns,
                                  mxd_error *err)
{
    mxd_spin_lock(&ev->lock);
    bool recorded = ev->recorded;
    bool ready = !ev->queue || point_reached(ev->queue, ev->ticket);
    /* The worker writes the stamp before it publishes the point as
     * reached: read it only after seeing that. */
    *ns = ready && ev->stamp ? ev->stamp->ns : 0;
    mxd_spin_unlock(&ev->lock);
    if (!recorded)
        return mxd_fail(err, MXD_UNAVAILABLE,
                        "elapsed_time(): the %s event has not been recorded",
                        which);
    if (!ready)
        return mxd_fail(err, MXD_UNAVAILABLE,
                        "elapsed_time(): the %s event has not completed yet; "
                        "synchronize it first",
                        which);
    return MXD_OK;
}

static mxd_status cpu_event_elapsed(mxd_event *start, mxd_event *end,
                                    double *ms, mxd_error *err)
{
    int64_t start_ns, end_ns;
    mxd_status st =
        completed_stamp(as_cpu_event(start), "start", &start_ns, err);
    if (st == MXD_OK)
        st = completed_stamp(as_cpu_event(end), "end", &end_ns, err);
    if (st == MXD_OK)
        *ms = (double)(end_ns - start_ns) / (double)MXD_MS;
    return st;
}

/* ---- Completions -------------------------------------------------------- */

/* A CPU completion is a ticket of its queue's timeline: ticket 0 (a
 * poisoned completion's) is the start, always reached. */
static const cpu_queue *completion_queue(const mxd_completion *c)
{
    return (const cpu_queue *)c->queue;
}

static mxd_status cpu_completion_record(mxd_queue *q, mxd_completion *c,
                                        mxd_error *err)
{
    (void)err;
    c->ticket = c->seq = atomic_load(&as_cpu_queue(q)->submitted);
    return MXD_OK;
}

static void cpu_completion_fini(mxd_completion *c)
{
    (void)c; /* a ticket holds nothing */
}

static bool cpu_completion_known_done(const mxd_completion *c)
{
    return point_reached(completion_queue(c), c->ticket);
}

static mxd_status cpu_completion_query(mxd_completion *c, mxd_error *err)
{
    (void)err;
    return cpu_completion_known_done(c) ? MXD_OK : MXD_TIMEOUT;
}

static mxd_status cpu_completion_wait(mxd_completion *c, const mxd_wait *wait,
                                      mxd_error *err)
{
    return wait_point(as_cpu_queue(c->queue), c->ticket, wait, err);
}

static bool cpu_completion_behind_caller(const mxd_completion *c)
{
    return completion_queue(c) == running_queue && c->ticket >= running_ticket;
}

static mxd_status cpu_queue_wait_completion(mxd_queue *base, mxd_completion *c,
                                            mxd_error *err)
{
    cpu_queue *q = as_cpu_queue(base);
    if (c->ops == &mxd_cpu_backend) {
        mxd_queue_retain(c->queue);
        return enqueue_wait_point(
            q, (cpu_point){as_cpu_queue(c->queue), c->ticket}, err);
    }
    cpu_item *item = item_new(ITEM_WAIT_COMPLETION, err);
    if (!item)
        return MXD_NO_MEMORY;
    mxd_completion_retain(c);
    item->u.completion = c;
    mxd_status st = enqueue(q, item, err);
    if (st != MXD_OK) {
        mxd_completion_release(c);
        free(item);
    }
    return st;
}

/* ---- Flags -------------------------------------------------------------- */

static mxd_status cpu_flag_slot_alloc(mxd_flag *flag, mxd_error *err)
{
    flag->slot = aligned_alloc(sizeof(uint64_t), sizeof(uint64_t));
    if (!flag->slot)
        return mxd_fail(err, MXD_NO_MEMORY, "out of memory");
    flag->device_ptr = (uintptr_t)flag->slot;
    return MXD_OK;
}

static void cpu_flag_slot_free(mxd_flag *flag)
{
    free((void *)flag->slot);
}

/* ---- The CPU device ----------------------------------------------------- */

static bool cpu_is_host_unified(const mxd_device *dev)
{
    (void)dev;
    return true;
}

static mxd_status cpu_architecture(const mxd_device *dev, char *buf,
                                   size_t size, mxd_error *err)
{
    (void)dev;
    (void)buf;
    (void)size;
    return mxd_fail(err, MXD_UNAVAILABLE,
                    "failed to get device architecture name: the CPU device "
                    "has no accelerator architecture");
}

/* The value of the first "key : value" line of a /proc file, or false. */
static bool proc_field(const char *path, const char *key, char *out,
                       size_t size)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    char line[512];
    size_t key_len = strlen(key);
    bool found = false;
    while (!found && fgets(line, sizeof line, f)) {
        if (strncmp(line, key, key_len) != 0)
            continue;
        const char *value = line + key_len;
        while (*value == ' ' || *value == '\t')
            value++;
        if (*value != ':')
            continue;
        value++;
        while (*value == ' ' || *value == '\t')
            value++;
        snprintf(out, size, "%s", value);
        out[strcspn(out, "\n")] = '\0';
        found = true;
    }
    fclose(f);
    return found;
}

static mxd_status cpu_model_name(const mxd_device *dev, char *buf, size_t size,
                                 mxd_error *err)
{
    (void)dev;
    (void)err;
    if (proc_field("/proc/cpuinfo", "model name", buf, size))
        return MXD_OK;
    struct utsname name; /* e.g. some ARM kernels report no model name */
    snprintf(buf, size, "%s", uname(&name) == 0 ? name.machine : "unknown");
    return MXD_OK;
}

/* A /proc/meminfo size in bytes (the file reports kB). */
static bool meminfo_bytes(const char *key, uint64_t *out)
{
    char value[64];
    if (!proc_field("/proc/meminfo", key, value, sizeof value))
        return false;
    *out = strtoull(value, NULL, 10) * 1024;
    return true;
}

static mxd_status cpu_memory(const mxd_device *dev, mxd_memory_stats *out,
                             mxd_error *err)
{
    (void)dev;
    if (meminfo_bytes("MemTotal", &out->total_memory) &&
        meminfo_bytes("MemAvailable", &out->free_memory))
        return MXD_OK;
    long page = sysconf(_SC_PAGESIZE);
    long total = sysconf(_SC_PHYS_PAGES);
    long avail = sysconf(_SC_AVPHYS_PAGES);
    if (page <= 0 || total <= 0 || avail < 0)
        return mxd_fail(err, MXD_UNAVAILABLE,
                        "cannot read the host's memory size");
    out->total_memory = (uint64_t)total * (uint64_t)page;
    out->free_memory = (uint64_t)avail * (uint64_t)page;
    return MXD_OK;
}

static mxd_status cpu_can_access(const mxd_device *dev, const mxd_device *peer,
                                 bool *out, mxd_error *err)
{
    (void)dev;
    (void)peer;
    (void)err;
    *out = false;
    return MXD_OK;
}

/* Gates and host functions are the CPU queues' own work items. */
static mxd_status cpu_features(const mxd_device *dev, mxd_device_features *out,
                               mxd_error *err)
{
    (void)dev;
    (void)err;
    out->stream_memory_ops = true;
    out->host_fns_on_workers = true;
    out->capture = true;
    return MXD_OK;
}

#include "cpu_graph.inc"
#include "cpu_memory.inc"
#include "cpu_watch.inc"

static bool cpu_runs_host_fn_of(const mxd_queue *q)
{
    return running_queue == (const cpu_queue *)q;
}

const mxd_backend mxd_cpu_backend = {
    .api = "cpu",
    .is_host_unified = cpu_is_host_unified,
    .architecture = cpu_architecture,
    .model_name = cpu_model_name,
    .memory = cpu_memory,
    .can_access = cpu_can_access,
    .features = cpu_features,
    .queue_create = cpu_queue_create,
    .queue_destroy = cpu_queue_destroy,
    .queue_native = cpu_queue_native,
    .queue_is_idle = cpu_queue_is_idle,
    .queue_synchronize = cpu_queue_synchronize,
    .queue_wait_queue = cpu_queue_wait_queue,
    .queue_wait_event = cpu_queue_wait_event,
    .queue_wait_value = cpu_queue_wait_value,
    .queue_host_fn = cpu_queue_host_fn,
    .queue_async_kickoff = cpu_queue_async_kickoff,
    .event_init = cpu_event_init,
    .event_fini = cpu_event_fini,
    .event_record = cpu_event_record,
    .event_query = cpu_event_query,
    .event_synchronize = cpu_event_synchronize,
    .event_elapsed = cpu_event_elapsed,
    .completion_record = cpu_completion_record,
    .completion_fini = cpu_completion_fini,
    .completion_query = cpu_completion_query,
    .completion_known_done = cpu_completion_known_done,
    .completion_wait = cpu_completion_wait,
    .completion_behind_caller = cpu_completion_behind_caller,
    .queue_wait_completion = cpu_queue_wait_completion,
    .flag_slot_alloc = cpu_flag_slot_alloc,
    .flag_slot_free = cpu_flag_slot_free,
    .runs_host_fn_of = cpu_runs_host_fn_of,
    .memory_alloc = cpu_memory_alloc,
    .memory_free = cpu_memory_free,
    .copy = cpu_copy,
    .fill = cpu_fill,
    .watch_arm = cpu_watch_arm,
    .watch_cancel = cpu_watch_cancel,
    .graph_launch = cpu_graph_launch,
    .graph_free = cpu_graph_free,
};
