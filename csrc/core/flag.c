/* Completion flags: an 8-byte slot the host writes and queues wait on. */
#include <stdlib.h>

#include "backend.h"

mxd_status mxd_flag_create(mxd_device *dev, mxd_flag **out, mxd_error *err)
{
    if (mxd_device_check(dev, err) != MXD_OK)
        return MXD_UNAVAILABLE;
    mxd_flag *flag = calloc(1, sizeof *flag);
    if (!flag)
        return mxd_fail(err, MXD_NO_MEMORY, "out of memory");
    if (mxd_notifier_init(&flag->changed)) {
        free(flag);
        return mxd_fail(err, MXD_NO_MEMORY, "out of synchronization objects");
    }
    atomic_init(&flag->refs, 1);
    flag->epoch = mxd_epoch_now();
    flag->device = dev;
    flag->ops = dev->ops;
    mxd_status st = dev->ops->flag_slot_alloc(flag, err);
    if (st != MXD_OK) {
        mxd_notifier_destroy(&flag->changed);
        free(flag);
        return st;
    }
    atomic_store(flag->slot, 0);
    *out = flag;
    return MXD_OK;
}

void mxd_flag_retain(mxd_flag *flag)
{
    atomic_fetch_add_explicit(&flag->refs, 1, memory_order_relaxed);
}

void mxd_flag_release(mxd_flag *flag)
{
    if (atomic_fetch_sub_explicit(&flag->refs, 1, memory_order_acq_rel) != 1)
        return;
    if (mxd_stale(flag->epoch))
        return; /* freeing its slot may need the parent's driver: leak it */
    flag->ops->flag_slot_free(flag);
    mxd_notifier_destroy(&flag->changed);
    free(flag);
}

mxd_device *mxd_flag_device(const mxd_flag *flag)
{
    return flag->device;
}

uintptr_t mxd_flag_device_ptr(const mxd_flag *flag)
{
    return flag->device_ptr;
}

void mxd_flag_signal(mxd_flag *flag, uint64_t value)
{
    /* Sequentially consistent (hence also release): orders the store
     * before the check for parked waiters in mxd_notify_all. */
    atomic_store(flag->slot, value);
    /* After a fork the waiters counted here are the parent's threads, and
     * the notifier's lock may be held by one: the store is all that is
     * left to do. */
    if (!mxd_stale(flag->epoch))
        mxd_notify_all(&flag->changed);
}

uint64_t mxd_flag_load(const mxd_flag *flag)
{
    return atomic_load_explicit(flag->slot, memory_order_acquire);
}
