/* Events: the generic entry points; the timeline logic is the backend's. */
#include "backend.h"

mxd_status mxd_event_init(mxd_event_storage *storage, mxd_device *dev,
                          bool enable_timing, mxd_event **out, mxd_error *err)
{
    if (mxd_device_check(dev, err) != MXD_OK)
        return MXD_UNAVAILABLE;
    mxd_event *ev = (mxd_event *)storage;
    ev->epoch = mxd_epoch_now();
    ev->device = dev;
    ev->ops = dev->ops;
    ev->timing = enable_timing;
    atomic_init(&ev->point, NULL);
    mxd_status st = dev->ops->event_init(ev, err);
    if (st == MXD_OK)
        *out = ev;
    return st;
}

void mxd_event_fini(mxd_event *ev)
{
    if (ev && !mxd_stale(ev->epoch)) { /* a stale event's state is leaked */
        mxd_event_leave_capture(ev);
        ev->ops->event_fini(ev);
    }
}

mxd_device *mxd_event_device(const mxd_event *ev)
{
    return ev->device;
}

/* An event recorded in a capture: refused while it runs (`what`); once it
 * ended, the event counts as never recorded (*in true). */
static mxd_status check_captured(const mxd_event *ev, const char *what,
                                 bool *in, mxd_error *err)
{
    bool active;
    *in = mxd_event_in_capture(ev, &active);
    return active ? mxd_capture_refuse_event(ev, what, err) : MXD_OK;
}

mxd_status mxd_event_query(mxd_event *ev, bool *ready, mxd_error *err)
{
    if (mxd_stale(ev->epoch))
        return mxd_fail_stale(err, "DeviceEvent");
    bool captured;
    mxd_status st = check_captured(ev, "querying", &captured, err);
    *ready = true;
    if (st != MXD_OK || captured)
        return st;
    return ev->ops->event_query(ev, ready, err);
}

mxd_status mxd_event_synchronize(mxd_event *ev, const mxd_wait *wait,
                                 mxd_error *err)
{
    if (mxd_stale(ev->epoch))
        return mxd_fail_stale(err, "DeviceEvent");
    bool captured;
    mxd_status st = check_captured(ev, "waiting for", &captured, err);
    if (st != MXD_OK || captured)
        return st;
    return ev->ops->event_synchronize(ev, wait, err);
}

mxd_status mxd_event_elapsed(mxd_event *start, mxd_event *end, double *ms,
                             mxd_error *err)
{
    if (mxd_stale(start->epoch) || mxd_stale(end->epoch))
        return mxd_fail_stale(err, "DeviceEvent");
    if (!start->timing || !end->timing)
        return mxd_fail(err, MXD_UNAVAILABLE,
                        "elapsed_time() needs two events created with "
                        "enable_timing=True; timing is disabled on the %s "
                        "event",
                        !start->timing ? "start" : "end");
    if (start->ops != end->ops)
        return mxd_fail(err, MXD_UNAVAILABLE,
                        "elapsed_time() cannot compare a %s event with a %s "
                        "event",
                        start->ops->api, end->ops->api);
    bool captured[2];
    mxd_status st = check_captured(start, "timing", &captured[0], err);
    if (st == MXD_OK)
        st = check_captured(end, "timing", &captured[1], err);
    if (st == MXD_OK && (captured[0] || captured[1]))
        st = mxd_fail(err, MXD_UNAVAILABLE,
                      "elapsed_time(): the %s event has not been recorded "
                      "(its last record was in a capture, which ended)",
                      captured[0] ? "start" : "end");
    return st != MXD_OK ? st : start->ops->event_elapsed(start, end, ms, err);
}
