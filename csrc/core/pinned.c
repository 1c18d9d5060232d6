#include "pinned.h"

#include <stdlib.h>
#include <string.h>

#include "backend.h"

enum { SLOTS_PER_SLAB = MXD_PINNED_SLAB_SIZE / MXD_PINNED_SLOT_SIZE };

void mxd_pinned_pool_init(mxd_pinned_pool *pool, mxd_pinned_alloc_fn alloc,
                          void *ctx)
{
    memset(pool, 0, sizeof *pool);
    pthread_mutex_init(&pool->mu, NULL);
    pool->alloc = alloc;
    pool->ctx = ctx;
}

/* Under pool->mu (or before the pool is shared): `bytes` (a multiple of
 * MIN_BLOCK) carved from the reserve while it lasts, else from the
 * driver. */
static mxd_status pool_alloc(mxd_pinned_pool *pool, size_t bytes, void **host,
                             uintptr_t *device_ptr, mxd_error *err)
{
    if (pool->reserve_size - pool->reserve_used >= bytes) {
        *host = pool->reserve + pool->reserve_used;
        *device_ptr = pool->reserve_device + pool->reserve_used;
        pool->reserve_used += bytes;
        return MXD_OK;
    }
    return pool->alloc(pool->ctx, bytes, host, device_ptr, err);
}

/* Under pool->mu: carves a new slab into free slots.  The bookkeeping
 * lives in ordinary memory; the device only ever sees the slab. */
static mxd_status add_slab(mxd_pinned_pool *pool, mxd_error *err)
{
    mxd_pinned_slot *slots = calloc(SLOTS_PER_SLAB, sizeof *slots);
    if (!slots)
        return mxd_fail(err, MXD_NO_MEMORY, "out of memory");
    void *host;
    uintptr_t device_ptr;
    mxd_status st =
        pool_alloc(pool, MXD_PINNED_SLAB_SIZE, &host, &device_ptr, err);
    if (st != MXD_OK) {
        free(slots);
        return st;
    }
    for (size_t i = 0; i < SLOTS_PER_SLAB; i++) {
        size_t offset = i * MXD_PINNED_SLOT_SIZE;
        slots[i].host = (_Atomic uint64_t *)((char *)host + offset);
        slots[i].device_ptr = device_ptr + offset;
        slots[i].pool = pool;
        slots[i].next_free = i + 1 < SLOTS_PER_SLAB ? &slots[i + 1] : NULL;
    }
    slots[SLOTS_PER_SLAB - 1].next_free = pool->free_slots;
    pool->free_slots = slots;
    pool->slabs++;
    return MXD_OK;
}

mxd_status mxd_pinned_pool_reserve(mxd_pinned_pool *pool, size_t bytes,
                                   mxd_error *err)
{
    size_t size = (bytes + MXD_PINNED_SLAB_SIZE - 1) / MXD_PINNED_SLAB_SIZE *
                  MXD_PINNED_SLAB_SIZE;
    if (size < MXD_PINNED_SLAB_SIZE)
        size = MXD_PINNED_SLAB_SIZE;
    void *host;
    mxd_status st =
        pool->alloc(pool->ctx, size, &host, &pool->reserve_device, err);
    if (st != MXD_OK)
        return st;
    pthread_mutex_lock(&pool->mu);
    pool->reserve = host;
    pool->reserve_size = size;
    pool->reserve_used = 0;
    st = add_slab(pool, err);
    pthread_mutex_unlock(&pool->mu);
    return st;
}

mxd_status mxd_pinned_slot_get(mxd_pinned_pool *pool, mxd_pinned_slot **out,
                               mxd_error *err)
{
    pthread_mutex_lock(&pool->mu);
    mxd_status st = pool->free_slots ? MXD_OK : add_slab(pool, err);
    mxd_pinned_slot *slot = st == MXD_OK ? pool->free_slots : NULL;
    if (slot)
        pool->free_slots = slot->next_free;
    pthread_mutex_unlock(&pool->mu);
    if (!slot)
        return st;
    atomic_init(&slot->refs, 1);
    atomic_store(slot->host, 0);
    *out = slot;
    return MXD_OK;
}

void mxd_pinned_slot_retain(mxd_pinned_slot *slot)
{
    atomic_fetch_add_explicit(&slot->refs, 1, memory_order_relaxed);
}

void mxd_pinned_slot_release(mxd_pinned_slot *slot)
{
    if (atomic_fetch_sub_explicit(&slot->refs, 1, memory_order_acq_rel) != 1)
        return;
    mxd_pinned_pool *pool = slot->pool;
    pthread_mutex_lock(&pool->mu);
    slot->next_free = pool->free_slots;
    pool->free_slots = slot;
    pthread_mutex_unlock(&pool->mu);
}

/* ---- Blocks ------------------------------------------------------------- */

enum { MIN_BLOCK = 4096 };

/* The class of `bytes`: the smallest k with MIN_BLOCK << k >= bytes, or
 * -1 when even the largest class is too small. */
static int block_class(size_t bytes)
{
    size_t size = MIN_BLOCK;
    for (int k = 0; k < MXD_PINNED_CLASSES; k++, size <<= 1)
        if (size >= bytes)
            return k;
    return -1;
}

static bool fence_passed(const mxd_fence *fence)
{
    return !fence->done || fence->done(fence->ctx);
}

static void fence_drop(mxd_fence *fence)
{
    if (fence->release)
        fence->release(fence->ctx);
    *fence = (mxd_fence){NULL, NULL, NULL, NULL};
}

/* Under pool->mu: unlinks and returns a block of class k whose fence has
 * passed, or NULL. */
static mxd_pinned_block *take_block(mxd_pinned_pool *pool, int k)
{
    for (mxd_pinned_block **p = &pool->free_blocks[k]; *p;
         p = &(*p)->next_free) {
        mxd_pinned_block *block = *p;
        if (!fence_passed(&block->fence))
            continue;
        *p = block->next_free;
        return block;
    }
    return NULL;
}

mxd_status mxd_pinned_block_get(mxd_pinned_pool *pool, size_t bytes,
                                mxd_pinned_block **out, mxd_error *err)
{
    int k = block_class(bytes ? bytes : 1);
    if (k < 0)
        return mxd_fail(err, MXD_NO_MEMORY,
                        "cannot allocate %zu bytes of pinned memory", bytes);
    pthread_mutex_lock(&pool->mu);
    mxd_pinned_block *block = take_block(pool, k);
    pthread_mutex_unlock(&pool->mu);
    if (block) {
        fence_drop(&block->fence);
        *out = block;
        return MXD_OK;
    }
    block = calloc(1, sizeof *block);
    if (!block)
        return mxd_fail(err, MXD_NO_MEMORY, "out of memory");
    block->size = (size_t)MIN_BLOCK << k;
    pthread_mutex_lock(&pool->mu);
    mxd_status st =
        pool_alloc(pool, block->size, &block->host, &block->device_ptr, err);
    if (st == MXD_OK)
        pool->blocks++;
    pthread_mutex_unlock(&pool->mu);
    if (st != MXD_OK) {
        free(block);
        return st;
    }
    *out = block;
    return MXD_OK;
}

void mxd_pinned_block_put(mxd_pinned_pool *pool, mxd_pinned_block *block,
                          const mxd_fence *fence)
{
    block->fence = fence ? *fence : (mxd_fence){NULL, NULL, NULL, NULL};
    int k = block_class(block->size);
    pthread_mutex_lock(&pool->mu);
    block->next_free = pool->free_blocks[k];
    pool->free_blocks[k] = block;
    pthread_mutex_unlock(&pool->mu);
}

/* ---- The staging ring --------------------------------------------------- */

mxd_status mxd_ring_init(mxd_ring *ring, mxd_pinned_alloc_fn alloc, void *ctx,
                         int count, size_t chunk_size, mxd_error *err)
{
    memset(ring, 0, sizeof *ring);
    pthread_mutex_init(&ring->mu, NULL);
    pthread_cond_init(&ring->returned, NULL);
    mxd_ring_chunk *chunks = calloc((size_t)count, sizeof *chunks);
    if (!chunks)
        return mxd_fail(err, MXD_NO_MEMORY, "out of memory");
    void *host;
    uintptr_t device_ptr;
    mxd_status st =
        alloc(ctx, (size_t)count * chunk_size, &host, &device_ptr, err);
    if (st != MXD_OK) {
        free(chunks);
        return st;
    }
    for (int i = 0; i < count; i++) {
        chunks[i].host = (char *)host + (size_t)i * chunk_size;
        chunks[i].device_ptr = device_ptr + (size_t)i * chunk_size;
        chunks[i].next_free = i + 1 < count ? &chunks[i + 1] : NULL;
    }
    ring->chunk_size = chunk_size;
    ring->count = count;
    ring->chunks = chunks;
    ring->free = chunks;
    return MXD_OK;
}

void mxd_fence_pass(mxd_fence *fence)
{
    if (fence->wait)
        fence->wait(fence->ctx);
    fence_drop(fence);
}

/* Under ring->mu: unlinks a free chunk, one whose fence has passed when
 * there is one; NULL when none is free. */
static mxd_ring_chunk *unlink_chunk(mxd_ring *ring)
{
    mxd_ring_chunk **best = ring->free ? &ring->free : NULL;
    for (mxd_ring_chunk **p = &ring->free; *p; p = &(*p)->next_free)
        if (fence_passed(&(*p)->fence)) {
            best = p;
            break;
        }
    if (!best)
        return NULL;
    mxd_ring_chunk *chunk = *best;
    *best = chunk->next_free;
    return chunk;
}

mxd_ring_chunk *mxd_ring_take(mxd_ring *ring, bool wait)
{
    pthread_mutex_lock(&ring->mu);
    while (!ring->free && wait)
        pthread_cond_wait(&ring->returned, &ring->mu);
    mxd_ring_chunk *chunk = unlink_chunk(ring);
    pthread_mutex_unlock(&ring->mu);
    if (chunk) /* a transfer of ours: it passes */
        mxd_fence_pass(&chunk->fence);
    return chunk;
}

void mxd_ring_give(mxd_ring *ring, mxd_ring_chunk *chunk)
{
    pthread_mutex_lock(&ring->mu);
    chunk->next_free = ring->free;
    ring->free = chunk;
    pthread_cond_signal(&ring->returned);
    pthread_mutex_unlock(&ring->mu);
}
