/* Devices: the CPU device and the accelerators of the selected backend.
 * Device objects live for the whole process. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "select.h"
#include "virtual.h"

static mxd_device cpu_device = {
    .ops = &mxd_cpu_backend,
    .id = 0,
    .mu = PTHREAD_MUTEX_INITIALIZER,
};

mxd_device *mxd_cpu(void)
{
    return &cpu_device;
}

mxd_status mxd_accelerator(int id, mxd_device **out, mxd_error *err)
{
    int count = mxd_accelerator_count();
    if (count == 0)
        return mxd_fail(err, MXD_INVALID,
                        "failed to create device: no accelerator is "
                        "available (%s)",
                        mxd_selection_summary());
    if (id == -1)
        id = 0;
    if (mxd_gpu_forked())
        return mxd_fail(err, MXD_UNAVAILABLE,
                        "failed to create device: the %s driver was "
                        "initialised before os.fork(), and GPU drivers cannot "
                        "be used in a forked child; start worker processes "
                        "with multiprocessing's 'spawn' method instead",
                        mxd_accelerator_api());
    if (id < 0 || id >= count)
        return mxd_fail(err, MXD_INVALID,
                        "failed to create device: accelerator id %d is out "
                        "of range; %d %s device%s found",
                        id, count, mxd_accelerator_api(),
                        count == 1 ? " was" : "s were");
    mxd_status st = mxd_selected_device(id, out, err);
    if (st != MXD_OK && err) { /* keep the driver's reason, say what failed */
        char reason[sizeof err->message];
        memcpy(reason, err->message, sizeof reason);
        snprintf(err->message, sizeof err->message,
                 "failed to create device: %.480s", reason);
    }
    return st;
}

mxd_status mxd_device_check(const mxd_device *dev, mxd_error *err)
{
    /* A virtual device has no driver state for a fork to lose: what it
     * refuses, it refuses itself. */
    if (dev == &cpu_device || mxd_device_is_virtual(dev) || !mxd_gpu_forked())
        return MXD_OK;
    return mxd_fail(err, MXD_UNAVAILABLE,
                    "this %s device cannot be used here: its driver was "
                    "initialised before os.fork(), and GPU drivers cannot be "
                    "used in a forked child; start worker processes with "
                    "multiprocessing's 'spawn' method instead",
                    mxd_accelerator_api());
}

const char *mxd_device_api(const mxd_device *dev)
{
    if (mxd_device_is_virtual(dev)) /* the API it was made for */
        return mxd_virtual_target_of(dev)->api;
    return dev->ops->api;
}

int mxd_device_id(const mxd_device *dev)
{
    return dev->id;
}

bool mxd_device_is_host(const mxd_device *dev)
{
    return dev == &cpu_device;
}

bool mxd_device_is_host_unified(const mxd_device *dev)
{
    return dev->ops->is_host_unified(dev);
}

mxd_status mxd_device_architecture(const mxd_device *dev, char *buf,
                                   size_t size, mxd_error *err)
{
    if (mxd_device_check(dev, err) != MXD_OK)
        return MXD_UNAVAILABLE;
    return dev->ops->architecture(dev, buf, size, err);
}

mxd_status mxd_device_model_name(const mxd_device *dev, char *buf, size_t size,
                                 mxd_error *err)
{
    return dev->ops->model_name(dev, buf, size, err);
}

mxd_status mxd_device_memory(const mxd_device *dev, mxd_memory_stats *out,
                             mxd_error *err)
{
    memset(out, 0, sizeof *out);
    if (mxd_device_check(dev, err) != MXD_OK)
        return MXD_UNAVAILABLE;
    return dev->ops->memory(dev, out, err);
}

mxd_status mxd_device_max_alloc(const mxd_device *dev, uint64_t *out,
                                mxd_error *err)
{
    /* No driver reports a single-allocation limit below the device's
     * memory, so the total is the largest request that can succeed. */
    mxd_memory_stats stats;
    mxd_status st = mxd_device_memory(dev, &stats, err);
    if (st == MXD_OK)
        *out = stats.total_memory;
    return st;
}

mxd_status mxd_device_features_of(const mxd_device *dev,
                                  mxd_device_features *out, mxd_error *err)
{
    memset(out, 0, sizeof *out);
    if (mxd_device_check(dev, err) != MXD_OK)
        return MXD_UNAVAILABLE;
    return dev->ops->features(dev, out, err);
}

mxd_status mxd_device_can_access(const mxd_device *dev, const mxd_device *peer,
                                 bool *out, mxd_error *err)
{
    /* As MAX reports it: no peer access involving the host, and none of a
     * device with itself. */
    if (dev == peer || mxd_device_is_host(dev) || mxd_device_is_host(peer) ||
        dev->ops != peer->ops) {
        *out = false;
        return MXD_OK;
    }
    if (mxd_device_check(dev, err) != MXD_OK)
        return MXD_UNAVAILABLE;
    return dev->ops->can_access(dev, peer, out, err);
}

/* Lets accelerator `from` reach accelerator `to`'s memory where the driver
 * allows it; a failure names the pair. */
static mxd_status enable_peer(int from, int to, mxd_error *err)
{
    mxd_device *dev, *peer;
    bool can = false;
    mxd_status st = mxd_accelerator(from, &dev, err);
    if (st == MXD_OK)
        st = mxd_accelerator(to, &peer, err);
    if (st == MXD_OK)
        st = mxd_device_can_access(dev, peer, &can, err);
    if (st != MXD_OK || !can || !dev->ops->enable_peer)
        return st;
    st = dev->ops->enable_peer(dev, peer, err);
    if (st != MXD_OK && err) {
        char reason[sizeof err->message];
        memcpy(reason, err->message, sizeof reason);
        snprintf(err->message, sizeof err->message,
                 "failed to enable peer access from %s accelerator %d to "
                 "accelerator %d: %.400s",
                 dev->ops->api, from, to, reason);
    }
    return st;
}

mxd_status mxd_enable_all_peer_access(mxd_error *err)
{
    /* The hardware's accelerators, in virtual device mode too: devices
     * opened before the mode keep driving them (virtual devices themselves
     * cannot access each other). */
    int count = mxd_accelerator_count();
    for (int from = 0; from < count; from++)
        for (int to = 0; to < count; to++) {
            mxd_status st = from == to ? MXD_OK : enable_peer(from, to, err);
            if (st != MXD_OK)
                return st;
        }
    return MXD_OK;
}

static void devices_fork_prepare(void)
{
    pthread_mutex_lock(&cpu_device.mu);
}

static void devices_fork_parent(void)
{
    pthread_mutex_unlock(&cpu_device.mu);
}

static void devices_fork_child(void)
{
    /* The CPU device's queues are stale in the child: it starts afresh,
     * with a new default queue made on first use. */
    cpu_device.queues = NULL;
    cpu_device.default_queue = NULL;
    pthread_mutex_unlock(&cpu_device.mu);
}

const mxd_fork_hooks mxd_devices_fork_hooks = {
    devices_fork_prepare,
    devices_fork_parent,
    devices_fork_child,
};
