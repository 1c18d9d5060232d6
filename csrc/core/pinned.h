/* Pinned host memory mapped into a device, from per-device caching pools.
 *
 * Real drivers make every free of pinned memory a device-wide
 * synchronization (HIP's hipHostFree waits for every stream; CUDA
 * documents page-locked (de)allocation as an implicit synchronization
 * point), so a free can deadlock against a queue gated on the host, and
 * it costs a round trip in any case; an allocation may synchronize too.
 * The pool therefore never frees pinned memory while the process runs,
 * and takes what it can from a *reserve* allocated when the device opens
 * (when no queue of it can be gated yet): slabs carved into 64-byte slots
 * (one cache line each, so flags written by different threads never share
 * one) for completion flags and host-function gates, reused at once
 * because their owners release them only after the device stopped reading
 * them; and blocks for pinned Buffers, in power-of-two size classes from 4
 * KiB, each released with a fence (an event recorded after its last use)
 * and reused once the fence has passed.  Only what the reserve cannot hold
 * is allocated on demand.  (PyTorch's CachingHostAllocator and CuPy's
 * PinnedMemoryPool cache blocks the same way.)
 *
 * Copies stage through a *ring*: a fixed number of equal chunks, also
 * allocated when the device opens and never grown.  A chunk is used by one
 * copy at a time, only by transfers on the backend's own streams (which
 * never wait for the host), so its fence always passes: a copy that takes
 * a chunk may wait for its fence, never for a user's gate. */
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
 * recorded after its last use).  `done` may be called often, `wait` (block
 * until it passed) and then `release` once, on any thread but a driver
 * callback thread. */
typedef struct mxd_fence {
    bool (*done)(void *ctx);
    void (*wait)(void *ctx);
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
    /* The reserve: [used, size) of it is still to carve. */
    char *reserve;
    uintptr_t reserve_device;
    size_t reserve_size, reserve_used;
    mxd_pinned_slot *free_slots;
    size_t slabs; /* slabs allocated so far */
    mxd_pinned_block *free_blocks[MXD_PINNED_CLASSES];
    size_t blocks; /* blocks allocated so far */
};

void mxd_pinned_pool_init(mxd_pinned_pool *pool, mxd_pinned_alloc_fn alloc,
                          void *ctx);
/* Allocates the reserve (`bytes`, rounded up to a slab) and carves the
 * first slab of slots from it. */
mxd_status mxd_pinned_pool_reserve(mxd_pinned_pool *pool, size_t bytes,
                                   mxd_error *err);
/* A slot holding 0, with one reference; takes a new slab from the reserve,
 * or from the driver when that is spent, when none is free. */
mxd_status mxd_pinned_slot_get(mxd_pinned_pool *pool, mxd_pinned_slot **out,
                               mxd_error *err);
void mxd_pinned_slot_retain(mxd_pinned_slot *slot);
/* The last release returns the slot to its pool: only once the device no
 * longer reads it. */
void mxd_pinned_slot_release(mxd_pinned_slot *slot);

/* A block of at least `bytes` (at least 1), reused when one of its class
 * has passed its fence, else carved from the reserve, else allocated (the
 * driver call). */
mxd_status mxd_pinned_block_get(mxd_pinned_pool *pool, size_t bytes,
                                mxd_pinned_block **out, mxd_error *err);
/* Gives the block back, to be reused once `fence` (NULL: none) passed. */
void mxd_pinned_block_put(mxd_pinned_pool *pool, mxd_pinned_block *block,
                          const mxd_fence *fence);

/* ---- The staging ring ---------------------------------------------------- */

typedef struct mxd_ring_chunk {
    void *host;
    uintptr_t device_ptr;
    mxd_fence fence; /* its last transfer; `done` NULL: none pending */
    struct mxd_ring_chunk *next_free;
} mxd_ring_chunk;

typedef struct mxd_ring {
    pthread_mutex_t mu;
    pthread_cond_t returned;
    size_t chunk_size;
    int count;
    mxd_ring_chunk *chunks; /* count of them; NULL before init */
    mxd_ring_chunk *free;
} mxd_ring;

/* Allocates `count` chunks of `chunk_size` bytes (one allocation). */
mxd_status mxd_ring_init(mxd_ring *ring, mxd_pinned_alloc_fn alloc, void *ctx,
                         int count, size_t chunk_size, mxd_error *err);
/* A chunk whose last transfer has passed (its fence waited for and
 * released here).  With `wait`, blocks until one is returned; else NULL
 * when none is free.  A caller never waits here while it holds a chunk, so
 * copies cannot hold each other's. */
mxd_ring_chunk *mxd_ring_take(mxd_ring *ring, bool wait);
/* Gives a chunk back, its fence (chunk->fence) that of its last transfer. */
void mxd_ring_give(mxd_ring *ring, mxd_ring_chunk *chunk);
/* Waits for a fence to pass and releases it; nothing when there is none. */
void mxd_fence_pass(mxd_fence *fence);

#endif /* MXD_PINNED_H */
