/* Queues: reference counting, the device's list of queues (with its
 * default queue and the device-wide synchronize over them), and the checks
 * every backend shares before it enqueues anything. */
#include <stdio.h>
#include <stdlib.h>

#include "backend.h"

/* The recorder that takes the work of capturing queues (capture.h); init.c
 * sets it before any queue exists. */
const mxd_recorder *mxd_recorder_in_use;

void mxd_queue_name(const mxd_queue *q, char *buf, size_t size)
{
    snprintf(buf, size, "%s[%d]:queue@%p", q->ops->api, q->device->id,
             (const void *)q);
}

mxd_status mxd_capture_refuse(const mxd_queue *q, const char *what,
                              const char *hint, mxd_error *err)
{
    char name[64];
    mxd_queue_name(q, name, sizeof name);
    return mxd_fail(err, MXD_UNAVAILABLE,
                    "%s is not allowed while %s captures (%s); nothing was "
                    "recorded and the capture is still intact",
                    what, name, hint);
}

static void link_queue(mxd_device *dev, mxd_queue *q)
{
    pthread_mutex_lock(&dev->mu);
    q->next = dev->queues;
    if (dev->queues)
        dev->queues->prev = q;
    dev->queues = q;
    pthread_mutex_unlock(&dev->mu);
}

static void unlink_queue(mxd_device *dev, mxd_queue *q)
{
    pthread_mutex_lock(&dev->mu);
    if (q->prev)
        q->prev->next = q->next;
    else
        dev->queues = q->next;
    if (q->next)
        q->next->prev = q->prev;
    pthread_mutex_unlock(&dev->mu);
}

mxd_status mxd_queue_create(mxd_device *dev, mxd_queue **out, mxd_error *err)
{
    if (mxd_device_check(dev, err) != MXD_OK)
        return MXD_UNAVAILABLE;
    mxd_queue *q;
    mxd_status st = dev->ops->queue_create(dev, &q, err);
    if (st != MXD_OK)
        return st;
    atomic_init(&q->refs, 1);
    q->epoch = mxd_epoch_now();
    q->device = dev;
    q->ops = dev->ops;
    q->is_default = false;
    q->prev = q->next = NULL;
    atomic_init(&q->capture, NULL);
    q->lane = 0;
    link_queue(dev, q);
    *out = q;
    return MXD_OK;
}

mxd_queue *mxd_device_default_queue(mxd_device *dev, mxd_error *err)
{
    if (mxd_device_check(dev, err) != MXD_OK)
        return NULL;
    pthread_mutex_lock(&dev->mu);
    mxd_queue *q = dev->default_queue;
    pthread_mutex_unlock(&dev->mu);
    if (q)
        return q;
    if (mxd_queue_create(dev, &q, err) != MXD_OK)
        return NULL;
    q->is_default = true;
    pthread_mutex_lock(&dev->mu);
    if (!dev->default_queue) {
        dev->default_queue = q; /* the device keeps this reference */
        q = NULL;
    }
    mxd_queue *result = dev->default_queue;
    pthread_mutex_unlock(&dev->mu);
    if (q) /* another thread won the race */
        mxd_queue_release(q);
    return result;
}

/* Retains every live queue of dev into *out (malloc'd); returns the count
 * or -1 when out of memory. */
static long retain_queues(mxd_device *dev, mxd_queue ***out)
{
    pthread_mutex_lock(&dev->mu);
    long count = 0;
    for (mxd_queue *q = dev->queues; q; q = q->next)
        count++;
    mxd_queue **queues = malloc((size_t)(count ? count : 1) * sizeof *queues);
    long kept = 0;
    for (mxd_queue *q = queues ? dev->queues : NULL; q; q = q->next) {
        /* A queue whose count reached zero is being destroyed and has no
         * pending work: skip it rather than resurrect it. */
        long refs = atomic_load(&q->refs);
        while (refs > 0 &&
               !atomic_compare_exchange_weak(&q->refs, &refs, refs + 1))
            ;
        if (refs > 0)
            queues[kept++] = q;
    }
    pthread_mutex_unlock(&dev->mu);
    *out = queues;
    return queues ? kept : -1;
}

bool mxd_device_is_idle(mxd_device *dev)
{
    mxd_error ignored; /* an unusable device is "busy": its wait reports */
    if (mxd_device_check(dev, &ignored) != MXD_OK)
        return false;
    pthread_mutex_lock(&dev->mu);
    bool idle = true;
    /* A capturing queue is not idle: its synchronize refuses (SPEC 16). */
    for (mxd_queue *q = dev->queues; idle && q; q = q->next)
        idle = mxd_queue_is_idle(q) && !mxd_capture_of(q);
    pthread_mutex_unlock(&dev->mu);
    return idle;
}

mxd_status mxd_device_synchronize(mxd_device *dev, const mxd_wait *wait,
                                  mxd_error *err)
{
    if (mxd_device_check(dev, err) != MXD_OK)
        return MXD_UNAVAILABLE;
    mxd_queue **queues;
    long count = retain_queues(dev, &queues);
    if (count < 0)
        return mxd_fail(err, MXD_NO_MEMORY, "out of memory");
    mxd_status refused = MXD_OK; /* before waiting for anything */
    for (long i = 0; refused == MXD_OK && i < count; i++)
        refused =
            mxd_queue_check_wait(queues[i], "synchronize() of its device", err);
    if (refused != MXD_OK) {
        for (long i = 0; i < count; i++)
            mxd_queue_release(queues[i]);
        free(queues);
        return refused;
    }
    /* One deadline for the whole device: each queue gets what is left. */
    int64_t start = mxd_now_ns();
    mxd_wait left = wait ? *wait : (mxd_wait){.timeout = -1};
    mxd_status st = MXD_OK;
    for (long i = 0; i < count; i++) {
        if (st == MXD_OK && left.timeout >= 0) {
            double spent = (double)(mxd_now_ns() - start) / MXD_SECOND;
            left.timeout = spent < wait->timeout ? wait->timeout - spent : 0;
        }
        if (st == MXD_OK)
            st = mxd_queue_synchronize(queues[i], &left, err);
        mxd_queue_release(queues[i]);
    }
    free(queues);
    return st;
}

void mxd_queue_retain(mxd_queue *q)
{
    atomic_fetch_add_explicit(&q->refs, 1, memory_order_relaxed);
}

void mxd_queue_release(mxd_queue *q)
{
    if (atomic_fetch_sub_explicit(&q->refs, 1, memory_order_acq_rel) != 1)
        return;
    if (mxd_stale(q->epoch))
        return; /* its locks and threads are the parent's: leak it */
    if (q->ops->queue_retire && q->ops->queue_retire(q))
        return; /* the backend finishes it once its work completed */
    mxd_queue_finish_retire(q);
}

void mxd_queue_finish_retire(mxd_queue *q)
{
    unlink_queue(q->device, q);
    q->ops->queue_destroy(q);
}

bool mxd_queue_enqueue_may_block(const mxd_queue *q)
{
    return q->ops->enqueue_may_block && q->ops->enqueue_may_block(q);
}

mxd_device *mxd_queue_device(const mxd_queue *q)
{
    return q->device;
}

bool mxd_queue_is_default(const mxd_queue *q)
{
    return q->is_default;
}

uintptr_t mxd_queue_native_handle(const mxd_queue *q)
{
    return q->ops->queue_native(q);
}

bool mxd_queue_is_stale(const mxd_queue *q)
{
    return mxd_stale(q->epoch);
}

bool mxd_queue_is_idle(const mxd_queue *q)
{
    /* A stale queue is never "idle": its synchronize reports why. */
    return !mxd_stale(q->epoch) && q->ops->queue_is_idle(q);
}

/* MXD_OK when every object is from this process (not from before a
 * fork); NULL entries are skipped. */
static mxd_status check_fresh(mxd_error *err, const mxd_queue *q,
                              const mxd_queue *other, const mxd_event *ev,
                              const mxd_flag *flag)
{
    if (mxd_stale(q->epoch) || (other && mxd_stale(other->epoch)))
        return mxd_fail_stale(err, "DeviceQueue");
    if (ev && mxd_stale(ev->epoch))
        return mxd_fail_stale(err, "DeviceEvent");
    if (flag && mxd_stale(flag->epoch))
        return mxd_fail_stale(err, "CompletionFlag");
    return MXD_OK;
}

/* What a capturing queue says to a wait on the host for it. */
static mxd_status refuse_sync(const mxd_queue *q, const char *what,
                              mxd_error *err)
{
    return mxd_capture_refuse(q, what,
                              "its captured work runs only when the graph is "
                              "launched; end_capture() first",
                              err);
}

mxd_status mxd_queue_synchronize(mxd_queue *q, const mxd_wait *wait,
                                 mxd_error *err)
{
    mxd_status st = check_fresh(err, q, NULL, NULL, NULL);
    if (st == MXD_OK && mxd_capture_of(q))
        st = refuse_sync(q, "synchronize()", err);
    return st != MXD_OK ? st : q->ops->queue_synchronize(q, wait, err);
}

mxd_status mxd_queue_check_wait(const mxd_queue *q, const char *what,
                                mxd_error *err)
{
    return mxd_capture_of(q) ? refuse_sync(q, what, err) : MXD_OK;
}

static mxd_status cross_backend(mxd_error *err, const mxd_queue *q,
                                const char *what, const mxd_device *other)
{
    return mxd_fail(err, MXD_INVALID,
                    "a %s queue cannot wait for %s on a %s device; "
                    "synchronize on the host instead (call its "
                    "synchronize() before enqueueing the dependent work)",
                    q->ops->api, what, other->ops->api);
}

mxd_status mxd_queue_wait_queue(mxd_queue *q, mxd_queue *other, mxd_error *err)
{
    mxd_status st = check_fresh(err, q, other, NULL, NULL);
    if (st != MXD_OK)
        return st;
    if (q == other)
        return MXD_OK; /* a queue is always ordered after itself */
    if (q->ops != other->ops)
        return cross_backend(err, q, "a queue", other->device);
    if (mxd_capture_of(q) || mxd_capture_of(other))
        return mxd_recorder_in_use->wait_queue(q, other, err);
    return q->ops->queue_wait_queue(q, other, err);
}

mxd_status mxd_queue_wait_event(mxd_queue *q, mxd_event *ev, mxd_error *err)
{
    mxd_status st = check_fresh(err, q, NULL, ev, NULL);
    if (st != MXD_OK)
        return st;
    if (q->ops != ev->ops)
        return cross_backend(err, q, "an event", ev->device);
    if (mxd_capture_of(q) || atomic_load(&ev->point))
        return mxd_recorder_in_use->wait_event(q, ev, err);
    return q->ops->queue_wait_event(q, ev, err);
}

mxd_status mxd_queue_wait_value(mxd_queue *q, mxd_flag *flag, uint64_t value,
                                mxd_error *err)
{
    mxd_status st = check_fresh(err, q, NULL, NULL, flag);
    if (st != MXD_OK)
        return st;
    if (flag->device != q->device)
        return mxd_fail(err, MXD_INVALID,
                        "the completion flag belongs to %s device %d, but "
                        "the queue runs on %s device %d",
                        flag->ops->api, flag->device->id, q->ops->api,
                        q->device->id);
    if (mxd_capture_of(q))
        return mxd_recorder_in_use->wait_value(q, flag, value, err);
    return q->ops->queue_wait_value(q, flag, value, err);
}

mxd_status mxd_queue_host_fn(mxd_queue *q, mxd_host_fn fn, mxd_error *err)
{
    mxd_status st = check_fresh(err, q, NULL, NULL, NULL);
    if (st == MXD_OK && mxd_capture_of(q))
        return mxd_recorder_in_use->host_fn(q, fn, NULL, 0, err);
    return st != MXD_OK ? st : q->ops->queue_host_fn(q, fn, err);
}

mxd_status mxd_queue_async_host_fn(mxd_queue *q, mxd_host_fn fn, mxd_flag *flag,
                                   uint64_t value, mxd_error *err)
{
    mxd_status st = check_fresh(err, q, NULL, NULL, flag);
    if (st == MXD_OK && mxd_capture_of(q))
        return mxd_recorder_in_use->host_fn(q, fn, flag, value, err);
    return st != MXD_OK ? st
                        : q->ops->queue_async_kickoff(q, fn, flag, value, err);
}

mxd_status mxd_queue_record(mxd_queue *q, mxd_event *ev, mxd_error *err)
{
    mxd_status st = check_fresh(err, q, NULL, ev, NULL);
    if (st != MXD_OK)
        return st;
    if (ev->device != q->device)
        return mxd_fail(err, MXD_INVALID,
                        "the event belongs to %s device %d, but the queue "
                        "runs on %s device %d; record it on a queue of its "
                        "own device",
                        ev->ops->api, ev->device->id, q->ops->api,
                        q->device->id);
    if (mxd_capture_of(q))
        return mxd_recorder_in_use->record(q, ev, err);
    st = q->ops->event_record(ev, q, err);
    /* Recorded outside a capture: it forgets a capture point it had (one
     * load for an event that was never recorded in a capture). */
    if (st == MXD_OK && atomic_load_explicit(&ev->point, memory_order_relaxed))
        mxd_recorder_in_use->recorded_outside(ev);
    return st;
}
