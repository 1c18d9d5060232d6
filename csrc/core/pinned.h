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
 * them.  Larger blocks (staging buffers of copies, pinned Buffers) come in
 * power-of-two size classes from 4 KiB; a released block carries a fence
 * (an event recorded after its last use) and is reused once the fence has
 * passed.  (PyTorch's CachingHostAllocator and CuPy's PinnedMemoryPool work
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

/* Something that passes once the device stopped using a block (an event
 * recorded after its last use).  `done` may be called often, `release`
 * once, both on any thread but a driver callback thread. */
typedef struct mxd_fence {
    bool (*done)(void *ctx);
    void (*release)(void *ctx);
    void *ctx;
} mxd_fence;

typedef struct mxd_pinned_block {
    void *host;
    uintptr_t device_ptr;
    size_t size; /* the class size: at least what was asked for */
    struct mxd_pinned_block *next_free;
    mxd_fence fence; /* `done` NULL: free to reuse */
} mxd_pinned_block;

enum { MXD_PINNED_CLASSES = 48 }; /* 4 KiB << 0 .. 4 KiB << 47 */

struct mxd_pinned_pool {
    pthread_mutex_t mu;
    mxd_pinned_alloc_fn alloc;
    void *ctx;
    mxd_pinned_slot *free_slots;
    size_t slabs; /* slabs allocated so far */
    mxd_pinned_block *free_blocks[MXD_PINNED_CLASSES];
    size_t blocks; /* blocks allocated so far */
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

/* A block of at least `bytes` (at least 1), reused when one of its class
 * has passed its fence, else allocated (the driver call). */
mxd_status mxd_pinned_block_get(mxd_pinned_pool *pool, size_t bytes,
                                mxd_pinned_block **out, mxd_error *err);
/* Gives the block back, to be reused once `fence` (NULL: none) passed. */
void mxd_pinned_block_put(mxd_pinned_pool *pool, mxd_pinned_block *block,
                          const mxd_fence *fence);

#endif /* MXD_PINNED_H */
