/* Host access to memory (SPEC §12.6 "Host access"): the host reads or writes
 * a buffer after what its hazard record says, and nothing else.  Host-
 * visible memory (CPU, pinned) is touched here directly; accelerator memory
 * through the backend's host_read / host_write, which copy on a queue of
 * the module's own so that no unrelated work on the buffer's queue is in
 * the way. */
#include <string.h>

#include "backend.h"

/* A host read of device memory moves the bytes: it is traced as a copy
 * (SPEC §14), under the entry point and queue the backend reports. */
static void trace_download(const mxd_trace_note *note, int64_t bytes)
{
    if (mxd_trace_active())
        mxd_trace_copy(note, MXD_MEMCPY_DTOH, (uint64_t)bytes);
}

static void trace_upload(const mxd_trace_note *note, int64_t bytes)
{
    if (mxd_trace_active())
        mxd_trace_copy(note, MXD_MEMCPY_HTOD, (uint64_t)bytes);
}

/* A view the host may access: checked, and untouched by active captures. */
static mxd_status check_access(const mxd_view *v, mxd_error *err)
{
    mxd_status st = mxd_view_check(v, "", NULL, err);
    if (st == MXD_OK && atomic_load(&v->memory->captures) > 0)
        st = mxd_capture_refuse_access(v->memory, err);
    return st;
}

bool mxd_host_access_idle(const mxd_view *v, mxd_host_access kind)
{
    mxd_memory *m = v->memory;
    if (!m->host || mxd_stale(m->epoch) || atomic_load(&m->captures) > 0)
        return false;
    if (!m->tracked)
        return kind != MXD_ACCESS_ITEM || mxd_queue_is_idle(v->queue);
    mxd_record *r = &m->record;
    return !atomic_load_explicit(&r->has_write, memory_order_acquire) &&
           (kind != MXD_ACCESS_WRITE ||
            !atomic_load_explicit(&r->has_reads, memory_order_acquire));
}

mxd_status mxd_host_read_wait(const mxd_view *v, const mxd_wait *wait,
                              mxd_error *err)
{
    mxd_status st = check_access(v, err);
    if (st != MXD_OK)
        return st;
    mxd_memory *m = v->memory;
    /* The common case costs one load: nothing was ever left pending. */
    if (!m->tracked ||
        !atomic_load_explicit(&m->record.has_write, memory_order_acquire))
        return MXD_OK;
    st = mxd_hazard_lock_settled(v, NULL, NULL, wait, err);
    if (st == MXD_OK)
        mxd_hazard_unlock(m, NULL);
    return st;
}

/* Locks v's record for a host read of host-visible memory: after what
 * the settled lock says (untracked memory: after its queue so far, the
 * item() rule), or with `unordered` after nothing. */
static mxd_status lock_for_read(const mxd_view *v, bool unordered,
                                const mxd_wait *wait, mxd_error *err)
{
    if (unordered) {
        mxd_hazard_lock(v->memory, NULL);
        return MXD_OK;
    }
    return mxd_hazard_lock_settled(v, NULL, NULL, wait, err);
}

/* The bytes of v, gathered into packed host memory at `dst`.  `unordered`:
 * untracked host-visible memory that waits for nothing (a download). */
static mxd_status read_bytes(const mxd_view *v, void *dst, bool unordered,
                             const mxd_wait *wait, mxd_error *err)
{
    mxd_copy_plan plan;
    mxd_status st = mxd_packed_plan(&v->layout, true, &plan, err);
    if (st != MXD_OK || plan.blocks == 0)
        return st;
    mxd_memory *m = v->memory;
    if (m->host) {
        if ((st = lock_for_read(v, unordered, wait, err)) != MXD_OK)
            return st;
        st = mxd_copy_host(&plan, dst, m->host, err);
        mxd_hazard_unlock(m, NULL);
        return st;
    }
    mxd_trace_note note = {"memcpy", v->queue, 0, 0};
    st = m->ops->host_read(v, &plan, dst, wait, &note, err);
    if (st == MXD_OK)
        trace_download(&note, plan.bytes);
    return st;
}

mxd_status mxd_read_host(const mxd_view *v, void *dst, const mxd_wait *wait,
                         mxd_error *err)
{
    mxd_status st = check_access(v, err);
    return st == MXD_OK ? read_bytes(v, dst, false, wait, err) : st;
}

mxd_status mxd_download(const mxd_view *v, mxd_queue *cpu_queue,
                        mxd_memory **out, const mxd_wait *wait, mxd_error *err)
{
    mxd_status st = check_access(v, err);
    int64_t bytes = 0;
    if (st == MXD_OK)
        st = mxd_shape_size(v->layout.rank, v->layout.shape,
                            v->layout.element_size, NULL, &bytes, err);
    mxd_memory *host = NULL;
    if (st == MXD_OK)
        st = mxd_memory_alloc(cpu_queue, bytes, 0, &host, err);
    if (st == MXD_OK)
        st = read_bytes(v, host->host, !v->memory->tracked, wait, err);
    if (st != MXD_OK) {
        if (host)
            mxd_memory_release(host);
        return st;
    }
    *out = host;
    return MXD_OK;
}

mxd_status mxd_write_host(const mxd_view *v, const void *src,
                          const mxd_wait *wait, mxd_error *err)
{
    mxd_status st = check_access(v, err);
    if (st != MXD_OK)
        return st;
    mxd_memory *m = v->memory;
    if (m->readonly)
        return mxd_fail(err, MXD_INVALID, "the buffer is read-only");
    mxd_copy_plan plan;
    if ((st = mxd_packed_plan(&v->layout, false, &plan, err)) != MXD_OK ||
        plan.blocks == 0)
        return st;
    if (!m->host) {
        mxd_trace_note note = {"memcpy", v->queue, 0, 0};
        st = m->ops->host_write(v, &plan, src, wait, &note, err);
        if (st == MXD_OK)
            trace_upload(&note, plan.bytes);
        return st;
    }
    if ((st = mxd_hazard_lock_settled(NULL, v, NULL, wait, err)) != MXD_OK)
        return st;
    st = mxd_copy_host(&plan, m->host, src, err);
    if (st == MXD_OK)
        mxd_hazard_note(NULL, m, NULL); /* complete: the record starts anew */
    mxd_hazard_unlock(m, NULL);
    return st;
}

/* How many pending last writes a consumer's stream is ordered after at
 * once: one but for write stamps of several queues. */
enum { MAX_CONSUMER_WAITS = 8 };

/* What a consumer's stream must follow (retained into out[0..*count)). */
static mxd_status consumer_points(const mxd_view *v, mxd_completion **out,
                                  int *count, mxd_error *err)
{
    *count = 0;
    if (v->memory->tracked)
        return mxd_hazard_pending_writes(v->memory, out, MAX_CONSUMER_WAITS,
                                         count, err);
    if (mxd_queue_is_idle(v->queue))
        return MXD_OK;
    mxd_status st = mxd_completion_record_on(v->queue, out, err);
    *count = st == MXD_OK;
    return st;
}

mxd_status mxd_memory_consumer_done(mxd_memory *m, uintptr_t native,
                                    mxd_error *err)
{
    if (!m->ops->consumer_done || mxd_stale(m->epoch))
        return MXD_OK;
    return m->ops->consumer_done(m, native, err);
}

mxd_status mxd_order_native(const mxd_view *v, uintptr_t native, mxd_error *err)
{
    mxd_status st = check_access(v, err);
    if (st != MXD_OK)
        return st;
    const mxd_backend *ops = v->memory->ops;
    if (!ops->native_wait_completion)
        return mxd_fail(err, MXD_UNAVAILABLE,
                        "%s queues have no native streams to order", ops->api);
    mxd_completion *points[MAX_CONSUMER_WAITS];
    int count;
    if ((st = consumer_points(v, points, &count, err)) != MXD_OK)
        return st;
    for (int i = 0; i < count; i++) {
        mxd_completion *c = points[i];
        /* A point of a CPU queue (a user's stamp) cannot be waited for by
         * a stream we do not own: the host waits for it instead. */
        if (st == MXD_OK)
            st = c->ops == ops ? ops->native_wait_completion(v->memory->device,
                                                             native, c, err)
                               : mxd_completion_wait_host(c, NULL, err);
        mxd_completion_release(c);
    }
    return st;
}
