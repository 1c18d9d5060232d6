/* Memory on a device, and the copies and fills that move data between
 * buffers in the order of their queues (SPEC §12).
 *
 * An mxd_memory is reference counted: every view of it (a Buffer and its
 * slices), every exported alias and every enqueued operation that uses it
 * holds a reference, and the last release frees it in the order of the
 * queue that owns it, after the work of every other queue it was handed to
 * (mxd_memory_use_on).  Memory is one of:
 *   host     CPU memory we allocated, 64-byte aligned;
 *   device   accelerator memory, allocated in the owning queue's order;
 *   pinned   host memory pinned and mapped into an accelerator, from the
 *            device's pinned pool;
 *   foreign  someone else's memory (a NumPy array, a DLPack producer's
 *            tensor, a mapped file), given back through its release
 *            function once nothing of ours uses it any more.
 *
 * A copy joins the queues of its source and destination: it runs after
 * everything enqueued on either so far, and later work on either runs
 * after it.  What a caller may rely on when mxd_copy returns depends on the
 * kinds of memory (SPEC §12.6): a pageable (CPU) source has been read; a
 * pageable destination written from an accelerator is complete; the rest
 * is enqueued. */
#ifndef MXD_MEMORY_H
#define MXD_MEMORY_H

#include "layout.h"
#include "mxd.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mxd_memory mxd_memory;

typedef enum mxd_memory_kind {
    MXD_MEMORY_HOST,
    MXD_MEMORY_DEVICE,
    MXD_MEMORY_PINNED,
    MXD_MEMORY_FOREIGN,
} mxd_memory_kind;

/* CPU memory is aligned to this many bytes [beyond MAX]. */
enum { MXD_HOST_ALIGNMENT = 64 };

/* `bytes` of new memory on q's device, owned by q (allocated and later
 * freed in its order): device memory on an accelerator, or with `pinned`
 * host memory mapped into it; host memory on the CPU (`pinned` changes
 * nothing there).  MXD_NO_MEMORY names the size, the device and the
 * driver's error.  0 bytes is allowed. */
mxd_status mxd_memory_alloc(mxd_queue *q, int64_t bytes, bool pinned,
                            mxd_memory **out, mxd_error *err);

/* Someone else's memory, used on q's device and owned by q. */
typedef struct mxd_foreign {
    void *host;           /* host address, or NULL for device memory */
    uintptr_t device_ptr; /* device address; 0 for host memory (pinned:
                             the driver's mapping of it) */
    int64_t size;
    bool pinned;   /* host memory mapped into the accelerator */
    bool readonly; /* nothing of ours may write it */
    /* Called once, when nothing of ours uses the memory any more: `run`
     * on a thread that may run user code (inside the host runner), or
     * `discard` when that is no longer possible (interpreter exit). */
    mxd_host_fn release;
} mxd_foreign;

/* On failure the caller keeps `release` (it is not called). */
mxd_status mxd_memory_wrap(mxd_queue *q, const mxd_foreign *foreign,
                           mxd_memory **out, mxd_error *err);

void mxd_memory_retain(mxd_memory *m);
void mxd_memory_release(mxd_memory *m);

/* Queue q (of m's device) now uses m too: m is freed only once q has
 * also done the work enqueued on it so far (Buffer.to(stream)). */
mxd_status mxd_memory_use_on(mxd_memory *m, mxd_queue *q, mxd_error *err);

mxd_device *mxd_memory_device(const mxd_memory *m);
mxd_memory_kind mxd_memory_kind_of(const mxd_memory *m);
/* Host memory pinned and mapped into an accelerator (ours or foreign). */
bool mxd_memory_is_pinned(const mxd_memory *m);
bool mxd_memory_is_readonly(const mxd_memory *m);
/* The host address, or NULL for device memory. */
void *mxd_memory_host(const mxd_memory *m);
/* The address the device uses: device memory's, a pinned mapping's, and
 * on the CPU the host address. */
uintptr_t mxd_memory_device_ptr(const mxd_memory *m);
int64_t mxd_memory_size(const mxd_memory *m);

/* One side of a copy: a view of memory, bound to a queue of its device. */
typedef struct mxd_view {
    mxd_memory *memory;
    mxd_queue *queue;
    mxd_layout layout; /* its memory_size is memory's size */
} mxd_view;

/* The view's strides in bytes (out: v->rank entries). */
void mxd_byte_strides(const mxd_layout *v, int64_t *out);

/* Plans copying between the view and a row-major packed buffer of its
 * shape at offset 0: into it (gather) or out of it (scatter). */
mxd_status mxd_packed_plan(const mxd_layout *v, bool gather,
                           mxd_copy_plan *plan, mxd_error *err);

/* Copies src's elements into dst, ordered as SPEC §12.6 says.  The views
 * have the same element size and count (MXD_INVALID otherwise); with
 * different shapes both must be contiguous.  Waits (for a pageable
 * source's queue, for a copy into pageable memory) honour `wait`. */
mxd_status mxd_copy(const mxd_view *dst, const mxd_view *src,
                    const mxd_wait *wait, mxd_error *err);

/* Work enqueued on q afterwards waits for the work on `other` so far, also
 * when the two are of different backends (a CPU queue after an
 * accelerator's): how a copy joins its queues (SPEC §12.6).  Users cannot
 * ask for this across backends (mxd_queue_wait_queue refuses): it exists
 * for copies, whose contract needs it. */
mxd_status mxd_queue_join(mxd_queue *q, mxd_queue *other, mxd_error *err);

/* Fills every element of dst with `element` (layout.element_size bytes),
 * in the order of dst's queue. */
mxd_status mxd_fill(const mxd_view *dst, const void *element,
                    const mxd_wait *wait, mxd_error *err);

#ifdef __cplusplus
}
#endif
#endif /* MXD_MEMORY_H */
