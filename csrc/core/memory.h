/* Memory on a device, and the copies, fills and host accesses that move
 * data between buffers, ordered by the memory they touch (SPEC §12).
 *
 * An mxd_memory is reference counted: every view of it (a Buffer and its
 * slices), every exported alias and every enqueued operation that needs it
 * holds a reference, and the last release frees it in the order of the
 * queue that owns it, after every operation in its hazard record.  Memory
 * is one of:
 *   host     CPU memory we allocated, 64-byte aligned;
 *   device   accelerator memory, allocated in the owning queue's order;
 *   pinned   host memory pinned and mapped into an accelerator, from the
 *            device's pinned pool;
 *   foreign  someone else's memory (a NumPy array, a DLPack producer's
 *            tensor, a mapped file), given back through its release
 *            function once nothing of ours uses it any more.
 *
 * Hazard records (hazard.c, SPEC §12.6): each memory (the storage all its
 * views share) records the completion of the last write this module
 * enqueued into it and the completions of the reads since.  A read of a
 * view runs after the storage's last write; a write after the last write
 * and every read since; nothing else orders buffer work, so a copy never
 * holds back unrelated work on either queue.  What a caller may rely on
 * when mxd_copy returns depends on the kinds of memory: a pageable (CPU)
 * source has been read; a pageable destination written from an accelerator
 * is complete; the rest is enqueued.  Untracked memory (MXD_ALLOC_UNTRACKED)
 * is ordered by queue order only, and host access to it waits for nothing
 * (SPEC §12.6, Usage.UNTRACKED). */
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

enum {
    MXD_ALLOC_PINNED = 1,    /* host memory mapped into an accelerator */
    MXD_ALLOC_UNTRACKED = 2, /* no hazard tracking (Usage.UNTRACKED) */
};

/* `bytes` of new memory on q's device, owned by q (allocated and later
 * freed in its order): device memory on an accelerator, or with
 * MXD_ALLOC_PINNED host memory mapped into it; host memory on the CPU
 * (MXD_ALLOC_PINNED changes nothing there).  MXD_NO_MEMORY names the size,
 * the device and the driver's error.  0 bytes is allowed. */
mxd_status mxd_memory_alloc(mxd_queue *q, int64_t bytes, unsigned flags,
                            mxd_memory **out, mxd_error *err);

/* Someone else's memory, used on q's device and owned by q. */
typedef struct mxd_foreign {
    void *host;           /* host address, or NULL for device memory */
    uintptr_t device_ptr; /* device address; 0 for host memory (pinned:
                             the driver's mapping of it) */
    int64_t size;
    bool pinned;   /* host memory mapped into the accelerator */
    bool readonly; /* nothing of ours may write it */
    /* The producer ordered its pending writes before the work enqueued on
     * q from now on (q's stream was its DLPack consumer stream): the
     * record starts with a write at q's current end, so host access and
     * other queues' copies wait for the producer too (SPEC §13). */
    bool written_before_queue;
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

mxd_device *mxd_memory_device(const mxd_memory *m);
mxd_memory_kind mxd_memory_kind_of(const mxd_memory *m);
/* Host memory pinned and mapped into an accelerator (ours or foreign). */
bool mxd_memory_is_pinned(const mxd_memory *m);
bool mxd_memory_is_readonly(const mxd_memory *m);
/* False for MXD_ALLOC_UNTRACKED memory. */
bool mxd_memory_is_tracked(const mxd_memory *m);
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
 * source's last write, for a copy into pageable memory) honour `wait`;
 * MXD_HAZARD when the calling thread would read a source whose producer
 * failed. */
mxd_status mxd_copy(const mxd_view *dst, const mxd_view *src,
                    const mxd_wait *wait, mxd_error *err);

/* True when mxd_copy(dst, src) only enqueues work and never waits on the
 * host: device memory on one side, device or pinned memory on the other,
 * both views contiguous (one block: never through the host).  The caller
 * may then keep the GIL unless the enqueue itself may block
 * (mxd_queue_enqueue_may_block). */
bool mxd_copy_only_enqueues(const mxd_view *dst, const mxd_view *src);

/* Fills every element of dst with `element` (layout.element_size bytes),
 * in the order of dst's queue. */
mxd_status mxd_fill(const mxd_view *dst, const void *element,
                    const mxd_wait *wait, mxd_error *err);

/* ---- Host access (SPEC §12.6) ------------------------------------------ */

typedef enum mxd_host_access {
    MXD_ACCESS_READ,  /* through an alias (mxd_host_read_wait) */
    MXD_ACCESS_ITEM,  /* one element (mxd_read_host) */
    MXD_ACCESS_WRITE, /* mxd_write_host */
} mxd_host_access;

/* True when host-visible memory could be touched by the host right now
 * without waiting for anything: its record holds nothing (untracked memory:
 * always, except that ITEM needs its queue idle).  A load or two, no lock:
 * the caller may then skip releasing the GIL.  False for device memory and
 * memory from before a fork. */
bool mxd_host_access_idle(const mxd_view *v, mxd_host_access kind);

/* Before the host reads host-visible memory (CPU or pinned) through an
 * alias (to_numpy, DLPack with stream=None, str): waits for the storage's
 * last write, and for nothing else.  Untracked memory waits for nothing.
 * MXD_HAZARD when the last write failed.  A host function of the queue
 * that holds that write, running before it, does not wait (it would wait
 * for itself): it sees the memory as its queue's earlier work left it. */
mxd_status mxd_host_read_wait(const mxd_view *v, const mxd_wait *wait,
                              mxd_error *err);
/* Reads the view's elements into `dst` (packed, row-major) as a host read
 * of any memory: after the storage's last write only; accelerator memory
 * through a device-to-host copy on a queue of the module's own, complete on
 * return.  Untracked memory (item(), SPEC §12.6) waits for the view's queue
 * instead; untracked device memory is read on the view's queue. */
mxd_status mxd_read_host(const mxd_view *v, void *dst, const mxd_wait *wait,
                         mxd_error *err);
/* Writes `src` (packed, row-major) into the view's elements as a host write
 * (element writes, SPEC §12.5): after the storage's last write and every
 * read since; accelerator memory through a host-to-device copy, complete on
 * return.  Untracked memory waits for nothing. */
mxd_status mxd_write_host(const mxd_view *v, const void *src,
                          const mxd_wait *wait, mxd_error *err);
/* New host memory owned by the CPU queue `cpu_queue` holding the view's
 * elements (packed, row-major), read as mxd_read_host reads them (but
 * untracked host-visible memory waits for nothing): the host's copy of a
 * buffer (to_numpy of device memory, a DLPack export to the CPU). */
mxd_status mxd_download(const mxd_view *v, mxd_queue *cpu_queue,
                        mxd_memory **out, const mxd_wait *wait, mxd_error *err);
/* Work enqueued afterwards on `native` (a CUstream / hipStream_t of the
 * view's device, not necessarily ours, or the drivers' special handles)
 * waits for the storage's last write (untracked memory: for the view's
 * queue so far), without blocking the host.  RuntimeError on the CPU, which
 * has no native streams. */
mxd_status mxd_order_native(const mxd_view *v, uintptr_t native,
                            mxd_error *err);

/* A consumer that was handed m's memory with its stream `native` (a DLPack
 * export, SPEC 12.7) let go of it: the memory is freed only after the work
 * enqueued on that stream so far.  Nothing on the CPU. */
mxd_status mxd_memory_consumer_done(mxd_memory *m, uintptr_t native,
                                    mxd_error *err);

/* Adds c to m's record as its last write (`write`; the reads are cleared)
 * or as a read: work the module does not see, declared by the user
 * (Buffer._stamp_write / _stamp_read).  No-op on untracked memory. */
void mxd_memory_stamp(mxd_memory *m, mxd_completion *c, bool write);

#ifdef __cplusplus
}
#endif
#endif /* MXD_MEMORY_H */
