/* The virtual backend: the devices of MAX's virtual device mode (mxd.h).
 *
 * A virtual device answers what a device is asked about (its API,
 * architecture, model) from the settings it was made with, and refuses to
 * make a queue, an event or a completion flag, with an error naming
 * virtual device mode.  Memory, copies, fills and host work all need a
 * queue, so nothing of a virtual device ever exists to reach the other
 * entries of the table: they stay NULL. */
#include <stdio.h>

#include "virtual.h"

static bool virtual_is_host_unified(const mxd_device *dev)
{
    (void)dev;
    return false;
}

static mxd_status virtual_architecture(const mxd_device *dev, char *buf,
                                       size_t size, mxd_error *err)
{
    const mxd_virtual_target *t = mxd_virtual_target_of(dev);
    if (!t->arch[0])
        return mxd_fail(err, MXD_UNAVAILABLE,
                        "virtual accelerator %d has no target architecture: "
                        "call set_virtual_device_target_arch() before asking "
                        "for the device",
                        dev->id);
    snprintf(buf, size, "%s", t->arch);
    return MXD_OK;
}

static mxd_status virtual_model_name(const mxd_device *dev, char *buf,
                                     size_t size, mxd_error *err)
{
    (void)err;
    const mxd_virtual_target *t = mxd_virtual_target_of(dev);
    snprintf(buf, size, "virtual %s device%s%s%s", t->api,
             t->arch[0] ? " (" : "", t->arch, t->arch[0] ? ")" : "");
    return MXD_OK;
}

static mxd_status virtual_memory(const mxd_device *dev, mxd_memory_stats *out,
                                 mxd_error *err)
{
    (void)out;
    return mxd_virtual_refuse(dev, "report memory statistics", err);
}

static mxd_status virtual_can_access(const mxd_device *dev,
                                     const mxd_device *peer, bool *out,
                                     mxd_error *err)
{
    (void)dev;
    (void)peer;
    (void)err;
    *out = false;
    return MXD_OK;
}

/* No driver: no feature (the caller zeroed *out). */
static mxd_status virtual_features(const mxd_device *dev,
                                   mxd_device_features *out, mxd_error *err)
{
    (void)dev;
    (void)out;
    (void)err;
    return MXD_OK;
}

static mxd_status virtual_queue_create(mxd_device *dev, mxd_queue **out,
                                       mxd_error *err)
{
    (void)out;
    return mxd_virtual_refuse(
        dev,
        "have a queue (DeviceQueue, default_queue, buffers and host "
        "functions need one)",
        err);
}

static mxd_status virtual_event_init(mxd_event *ev, mxd_error *err)
{
    return mxd_virtual_refuse(ev->device, "record events (DeviceEvent)", err);
}

static mxd_status virtual_flag_slot_alloc(mxd_flag *flag, mxd_error *err)
{
    return mxd_virtual_refuse(flag->device, "hold a CompletionFlag", err);
}

const mxd_backend mxd_virtual_backend = {
    .api = "virtual", /* mxd_device_api() reports the device's own API */
    .is_host_unified = virtual_is_host_unified,
    .architecture = virtual_architecture,
    .model_name = virtual_model_name,
    .memory = virtual_memory,
    .can_access = virtual_can_access,
    .features = virtual_features,
    .queue_create = virtual_queue_create,
    .event_init = virtual_event_init,
    .flag_slot_alloc = virtual_flag_slot_alloc,
};
