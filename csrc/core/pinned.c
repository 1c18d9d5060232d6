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
        pool->alloc(pool->ctx, MXD_PINNED_SLAB_SIZE, &host, &device_ptr, err);
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
        if (block->fence.release)
            block->fence.release(block->fence.ctx);
        block->fence = (mxd_fence){NULL, NULL, NULL};
        *out = block;
        return MXD_OK;
    }
    block = calloc(1, sizeof *block);
    if (!block)
        return mxd_fail(err, MXD_NO_MEMORY, "out of memory");
    block->size = (size_t)MIN_BLOCK << k;
    mxd_status st = pool->alloc(pool->ctx, block->size, &block->host,
                                &block->device_ptr, err);
    if (st != MXD_OK) {
        free(block);
        return st;
    }
    pthread_mutex_lock(&pool->mu);
    pool->blocks++;
    pthread_mutex_unlock(&pool->mu);
    *out = block;
    return MXD_OK;
}

void mxd_pinned_block_put(mxd_pinned_pool *pool, mxd_pinned_block *block,
                          const mxd_fence *fence)
{
    block->fence = fence ? *fence : (mxd_fence){NULL, NULL, NULL};
    int k = block_class(block->size);
    pthread_mutex_lock(&pool->mu);
    block->next_free = pool->free_blocks[k];
    pool->free_blocks[k] = block;
    pthread_mutex_unlock(&pool->mu);
}
