/* Memory: reference counting, and the checks and plans every backend's
 * copies and fills share. */
#include <stdlib.h>
#include <string.h>

#include "backend.h"

/* Every field but the backend's (host, device_ptr, backend_data): the
 * allocation did not zero the rest (a buffer's creation is on the hot
 * path, and this is one pass over the header). */
static void init_generic(mxd_memory *m, mxd_queue *q, mxd_memory_kind kind,
                         int64_t size)
{
    void *host = m->host, *backend_data = m->backend_data;
    uintptr_t device_ptr = m->device_ptr;
    memset(m, 0, sizeof *m);
    m->record = (mxd_record)MXD_RECORD_INIT;
    atomic_init(&m->refs, 1);
    m->epoch = mxd_epoch_now();
    m->device = q->device;
    m->ops = q->ops;
    m->kind = kind;
    m->tracked = true;
    m->host = host;
    m->device_ptr = device_ptr;
    m->size = size;
    m->queue = q;
    m->backend_data = backend_data;
    mxd_queue_retain(q);
}

static mxd_status check_queue(const mxd_queue *q, mxd_error *err)
{
    if (mxd_queue_is_stale(q))
        return mxd_fail_stale(err, "DeviceQueue");
    return mxd_device_check(q->device, err);
}

mxd_status mxd_memory_alloc(mxd_queue *q, int64_t bytes, unsigned flags,
                            mxd_memory **out, mxd_error *err)
{
    mxd_status st = check_queue(q, err);
    if (st != MXD_OK)
        return st;
    if (bytes < 0)
        return mxd_fail(err, MXD_INVALID, "cannot allocate %lld bytes",
                        (long long)bytes);
    if (mxd_capture_of(q))
        return mxd_capture_refuse(q, "allocating a buffer on the queue",
                                  "allocate its buffers before the capture",
                                  err);
    bool pinned = (flags & MXD_ALLOC_PINNED) && !mxd_device_is_host(q->device);
    mxd_memory *m;
    mxd_completion *born = NULL;
    /* Zero bytes still get an address of their own (a non-null pointer). */
    st = q->ops->memory_alloc(q, bytes > 0 ? bytes : 1, pinned, &m, &born, err);
    if (st != MXD_OK)
        return st;
    mxd_memory_kind kind = mxd_device_is_host(q->device) ? MXD_MEMORY_HOST
                           : pinned                      ? MXD_MEMORY_PINNED
                                                         : MXD_MEMORY_DEVICE;
    init_generic(m, q, kind, bytes);
    m->pinned = pinned;
    m->tracked = !(flags & MXD_ALLOC_UNTRACKED);
    if (born) { /* nobody else can reach the record yet: no lock */
        mxd_hazard_note(NULL, m, born);
        mxd_completion_release(born);
    }
    *out = m;
    return MXD_OK;
}

mxd_status mxd_memory_wrap(mxd_queue *q, const mxd_foreign *foreign,
                           mxd_memory **out, mxd_error *err)
{
    mxd_status st = check_queue(q, err);
    if (st != MXD_OK)
        return st;
    if (foreign->size < 0)
        return mxd_fail(err, MXD_INVALID, "foreign memory of %lld bytes",
                        (long long)foreign->size);
    /* Mapped host memory has a device address of its own where the
     * driver says so (not every system maps it at the host address). */
    uintptr_t device_ptr =
        foreign->device_ptr ? foreign->device_ptr : (uintptr_t)foreign->host;
    if (foreign->pinned && !foreign->device_ptr && q->ops->host_device_ptr) {
        st =
            q->ops->host_device_ptr(q->device, foreign->host, &device_ptr, err);
        if (st != MXD_OK)
            return st;
    }
    mxd_completion *written = NULL;
    if (foreign->written_before_queue &&
        (st = mxd_completion_record_on(q, &written, err)) != MXD_OK)
        return st;
    mxd_memory *m = calloc(1, sizeof *m);
    if (!m) {
        mxd_completion_release(written);
        return mxd_fail(err, MXD_NO_MEMORY, "out of memory");
    }
    init_generic(m, q, MXD_MEMORY_FOREIGN, foreign->size);
    m->host = foreign->host;
    m->device_ptr = device_ptr;
    m->pinned = foreign->pinned;
    m->readonly = foreign->readonly;
    m->release = foreign->release;
    if (written) { /* nobody else can reach the record yet: no lock */
        mxd_hazard_note(NULL, m, written);
        mxd_completion_release(written);
    }
    *out = m;
    return MXD_OK;
}

void mxd_memory_retain(mxd_memory *m)
{
    atomic_fetch_add_explicit(&m->refs, 1, memory_order_relaxed);
}

void mxd_memory_release(mxd_memory *m)
{
    if (atomic_fetch_sub_explicit(&m->refs, 1, memory_order_acq_rel) != 1)
        return;
    if (mxd_stale(m->epoch))
        return; /* its queue and driver state are the parent's: leak it */
    m->ops->memory_free(m);
}

void mxd_memory_drop_queues(mxd_memory *m)
{
    mxd_record_fini(&m->record);
    mxd_queue_release(m->queue);
}

void mxd_memory_release_foreign(mxd_memory *m)
{
    mxd_host_fn release = m->release;
    mxd_memory_drop_queues(m);
    free(m);
    mxd_host_fn_run_alone(release);
}

mxd_device *mxd_memory_device(const mxd_memory *m)
{
    return m->device;
}

mxd_memory_kind mxd_memory_kind_of(const mxd_memory *m)
{
    return m->kind;
}

bool mxd_memory_is_pinned(const mxd_memory *m)
{
    return m->pinned;
}

bool mxd_memory_is_readonly(const mxd_memory *m)
{
    return m->readonly;
}

bool mxd_memory_is_tracked(const mxd_memory *m)
{
    return m->tracked;
}

void *mxd_memory_host(const mxd_memory *m)
{
    return m->host;
}

uintptr_t mxd_memory_device_ptr(const mxd_memory *m)
{
    return m->device_ptr;
}

int64_t mxd_memory_size(const mxd_memory *m)
{
    return m->size;
}

/* ---- Copies and fills --------------------------------------------------- */

mxd_status mxd_view_check(const mxd_view *v, const char *which, int64_t *count,
                          mxd_error *err)
{
    if (mxd_stale(v->memory->epoch) || mxd_queue_is_stale(v->queue))
        return mxd_fail_stale(err, "Buffer");
    if (v->queue->device != v->memory->device)
        return mxd_fail(err, MXD_INVALID,
                        "the %sbuffer is bound to a queue of another device",
                        which);
    return mxd_layout_check(&v->layout, count, err);
}

void mxd_byte_strides(const mxd_layout *v, int64_t *out)
{
    for (int i = 0; i < v->rank; i++)
        out[i] = v->strides[i] * v->element_size;
}

mxd_status mxd_packed_plan(const mxd_layout *v, bool gather,
                           mxd_copy_plan *plan, mxd_error *err)
{
    int64_t strides[MXD_MAX_RANK], packed[MXD_MAX_RANK];
    mxd_byte_strides(v, strides);
    mxd_contiguous_strides(v->rank, v->shape, packed);
    for (int i = 0; i < v->rank; i++)
        packed[i] *= v->element_size;
    if (gather)
        return mxd_copy_plan_init(plan, v->rank, v->shape, v->element_size,
                                  v->offset, strides, 0, packed, err);
    return mxd_copy_plan_init(plan, v->rank, v->shape, v->element_size, 0,
                              packed, v->offset, strides, err);
}

/* A contiguous view as one dimension of `count` elements, for copies
 * between contiguous views of different shapes. */
static mxd_status flat_plan(mxd_copy_plan *plan, const mxd_layout *dst,
                            const mxd_layout *src, int64_t count,
                            mxd_error *err)
{
    int64_t shape[1] = {count}, stride[1] = {dst->element_size};
    return mxd_copy_plan_init(plan, 1, shape, dst->element_size, src->offset,
                              stride, dst->offset, stride, err);
}

static bool same_shape(const mxd_layout *a, const mxd_layout *b)
{
    return a->rank == b->rank &&
           (a->rank == 0 || /* rank 0: the shapes may be NULL */
            memcmp(a->shape, b->shape, (size_t)a->rank * sizeof *a->shape) ==
                0);
}

/* SPEC §14: pinned memory counts as host, and a copy between two host
 * buffers (CPU or pinned) is DTOD. */
static int memcpy_kind(const mxd_view *dst, const mxd_view *src)
{
    bool from_host = src->memory->host != NULL;
    bool to_host = dst->memory->host != NULL;
    return from_host && !to_host   ? MXD_MEMCPY_HTOD
           : !from_host && to_host ? MXD_MEMCPY_DTOH
                                   : MXD_MEMCPY_DTOD;
}

/* The backend that moves the data: an accelerator's when either side is
 * on one (a process drives one GPU backend), else the CPU's. */
static const mxd_backend *copier(const mxd_view *dst, const mxd_view *src)
{
    return mxd_device_is_host(dst->memory->device) ? src->memory->ops
                                                   : dst->memory->ops;
}

/* Device memory, or pinned memory mapped into an accelerator. */
static bool device_side(const mxd_memory *m)
{
    return m->kind == MXD_MEMORY_DEVICE || m->kind == MXD_MEMORY_PINNED ||
           (m->kind == MXD_MEMORY_FOREIGN && (!m->host || m->pinned));
}

bool mxd_copy_only_enqueues(const mxd_view *dst, const mxd_view *src)
{
    bool device_memory = !dst->memory->host || !src->memory->host;
    return device_memory && device_side(dst->memory) &&
           device_side(src->memory) && mxd_layout_is_contiguous(&dst->layout) &&
           mxd_layout_is_contiguous(&src->layout);
}

mxd_status mxd_copy(const mxd_view *dst, const mxd_view *src,
                    const mxd_wait *wait, mxd_error *err)
{
    int64_t dst_count, src_count;
    mxd_status st = mxd_view_check(dst, "destination ", &dst_count, err);
    if (st == MXD_OK)
        st = mxd_view_check(src, "source ", &src_count, err);
    if (st != MXD_OK)
        return st;
    if (dst->memory->readonly)
        return mxd_fail(err, MXD_INVALID, "the destination is read-only");
    if (dst->layout.element_size != src->layout.element_size)
        return mxd_fail(err, MXD_INVALID,
                        "cannot copy %lld-byte elements into %lld-byte ones",
                        (long long)src->layout.element_size,
                        (long long)dst->layout.element_size);
    if (dst_count != src_count)
        return mxd_fail(err, MXD_INVALID,
                        "cannot copy %lld elements into %lld elements",
                        (long long)src_count, (long long)dst_count);
    if (dst_count == 0)
        return MXD_OK;
    bool captured = mxd_capture_of(dst->queue) != NULL;
    mxd_copy_plan plan;
    bool contiguous = mxd_layout_is_contiguous(&dst->layout) &&
                      mxd_layout_is_contiguous(&src->layout);
    if (contiguous) /* one block, whatever the shapes */
        st = flat_plan(&plan, &dst->layout, &src->layout, dst_count, err);
    else if (same_shape(&dst->layout, &src->layout))
        st = mxd_copy_plan_layouts(&plan, &dst->layout, &src->layout, err);
    else
        st = mxd_fail(err, MXD_INVALID,
                      "views of different shapes must both be contiguous to "
                      "be copied");
    if (st != MXD_OK)
        return st;
    if (captured)
        return mxd_recorder_in_use->copy(dst, src, &plan, err);
    mxd_trace_note note = {"memcpy", dst->queue, 0, 0};
    st = copier(dst, src)->copy(dst, src, &plan, wait, &note, err);
    if (st == MXD_OK && mxd_trace_active())
        mxd_trace_copy(&note, memcpy_kind(dst, src), (uint64_t)plan.bytes);
    return st;
}

mxd_status mxd_fill(const mxd_view *dst, const void *element,
                    const mxd_wait *wait, mxd_error *err)
{
    mxd_status st = mxd_view_check(dst, "destination ", NULL, err);
    if (st != MXD_OK)
        return st;
    if (dst->memory->readonly)
        return mxd_fail(err, MXD_INVALID, "the destination is read-only");
    if (mxd_capture_of(dst->queue))
        return mxd_capture_refuse(dst->queue, "a fill",
                                  "fill the buffer before the capture", err);
    int64_t strides[MXD_MAX_RANK];
    mxd_byte_strides(&dst->layout, strides);
    mxd_copy_plan plan;
    st = mxd_fill_plan_init(&plan, dst->layout.rank, dst->layout.shape,
                            dst->layout.element_size, dst->layout.offset,
                            strides, err);
    if (st != MXD_OK || plan.blocks == 0)
        return st;
    mxd_trace_note note = {"memset", dst->queue, 0,
                           (int)dst->layout.element_size};
    memcpy(&note.value, element,
           dst->layout.element_size < 4 ? (size_t)dst->layout.element_size : 4);
    st = dst->memory->ops->fill(dst, &plan, element, wait, &note, err);
    if (st == MXD_OK && mxd_trace_active())
        mxd_trace_fill(&note, (uint64_t)plan.bytes);
    return st;
}
