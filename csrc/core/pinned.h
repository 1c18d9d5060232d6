/* Pinned host memory mapped into a device, from per-device caching pools.
 *
 * Real drivers make every free of pinned memory a device-wide
 * synchronization (HIP's hipHostFree waits for every stream; CUDA
 * documents page-locked (de)allocation as an implicit synchronization
 * point), so a free can deadlock against a queue gated on the host, and
 * it costs a round trip in any case.  The pool therefore allocates pinned
 * memory in slabs through the backend and never frees it while the
 * process runs: a slab is carved into 64-byte slots (one cache line each,
 * so flags written by different threads never share one) for completion
 * flags and host-function gates, and freed slots are reused at once,
 * because their owners release them only after the device stopped reading
 * them.  (PyTorch's CachingHostAllocator and CuPy's PinnedMemoryPool work
 * the same way.) */
#ifndef MXD_PINNED_H
#define MXD_PINNED_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "mxd.h"

enum { MXD_PINNED_SLOT_SIZE = 64, MXD_PINNED_SLAB_SIZE = 64 * 1024 };

/* Allocates `bytes` of pinned memory mapped into the device: its host
 * address and the address the device reads it at. */
typedef mxd_status (*mxd_pinned_alloc_fn)(void *ctx, size_t bytes, void **host,
                                          uintptr_t *device_ptr,
                                          mxd_error *err);

typedef struct mxd_pinned_pool mxd_pinned_pool;

/* One slot: 8 bytes the host writes and the device reads (the rest of the
 * cache line is padding).  Reference counted, so that a gate outlives the
 * host functions that still have to write it. */
typedef struct mxd_pinned_slot {
    _Atomic uint64_t *host;
    uintptr_t device_ptr;
    atomic_int refs;
    struct mxd_pinned_slot *next_free; /* under pool->mu */
    mxd_pinned_pool *pool;
} mxd_pinned_slot;

struct mxd_pinned_pool {
    pthread_mutex_t mu;
    mxd_pinned_alloc_fn alloc;
    void *ctx;
    mxd_pinned_slot *free_slots;
    size_t slabs; /* slabs allocated so far */
};

void mxd_pinned_pool_init(mxd_pinned_pool *pool, mxd_pinned_alloc_fn alloc,
                          void *ctx);
/* A slot holding 0, with one reference; allocates a slab when none is
 * free (the only call that may reach the driver). */
mxd_status mxd_pinned_slot_get(mxd_pinned_pool *pool, mxd_pinned_slot **out,
                               mxd_error *err);
void mxd_pinned_slot_retain(mxd_pinned_slot *slot);
/* The last release returns the slot to its pool: only once the device no
 * longer reads it. */
void mxd_pinned_slot_release(mxd_pinned_slot *slot);

#endif /* MXD_PINNED_H */
