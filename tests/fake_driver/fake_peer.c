/* Peer access and the devices' default memory pools, for both fronts.
 *
 * Peer access (cuCtxEnablePeerAccess / hipDeviceEnablePeerAccess) is a
 * one-way grant: device d may touch device p's memory once d enabled p.
 * Each device has one default memory pool (the one cuMemAllocAsync /
 * hipMallocAsync allocate from); its release threshold and the devices
 * granted access to it (cuMemPoolSetAccess / hipMemPoolSetAccess) are kept
 * for the control API (fake_gpu_peer_access, fake_gpu_pool_access,
 * fake_gpu_pool_release_threshold) and for the copy checks: a copy that
 * reaches another device's memory directly needs peer access, and for
 * memory of that device's pool also pool access (fake_peer_reachable). */
#include <pthread.h>
#include <stdlib.h>

#include "fake_engine.h"
#include "fake_front.h"

CUDA_ENTRY_POINTS(FAKE_DECLARE_CU)
HIP_ENTRY_POINTS(FAKE_DECLARE_HIP)

enum {
    FAKE_E_PEER_ACCESS_UNSUPPORTED = 217, /* CUDA and HIP agree */
    FAKE_E_PEER_ACCESS_ALREADY_ENABLED = 704,
    FAKE_MEMPOOL_ATTR_RELEASE_THRESHOLD = 4,
    FAKE_MEM_LOCATION_TYPE_DEVICE = 1,
    FAKE_MEM_ACCESS_NONE = 0,
    FAKE_MEM_ACCESS_READWRITE = 3,
};

/* A default memory pool; the handle the APIs hand out is its address. */
struct CUmemPoolHandle_st {
    int device;
    uint64_t release_threshold;
    bool *access; /* [device]: granted (the owner always is) */
};

static pthread_mutex_t fake_peer_mu = PTHREAD_MUTEX_INITIALIZER;
static bool *fake_peer;                       /* [dev * n + peer] */
static struct CUmemPoolHandle_st *fake_pools; /* [dev] */

/* Makes the tables on first use (false: out of memory, nothing made). */
static bool fake_peer_tables(void)
{
    int n = fake_cfg()->devices;
    if (fake_peer != NULL)
        return true;
    bool *peer = calloc((size_t)n * (size_t)n + 1, sizeof *peer);
    struct CUmemPoolHandle_st *pools = calloc((size_t)n + 1, sizeof *pools);
    bool ok = peer != NULL && pools != NULL;
    for (int d = 0; ok && d < n; d++) {
        pools[d].device = d;
        pools[d].access = calloc((size_t)n + 1, sizeof(bool));
        ok = pools[d].access != NULL;
        if (ok)
            pools[d].access[d] = true;
    }
    if (!ok) {
        for (int d = 0; pools != NULL && d < n; d++)
            free(pools[d].access);
        free(pools);
        free(peer);
        return false;
    }
    fake_pools = pools;
    fake_peer = peer;
    return true;
}

static unsigned fake_enable_peer(int dev, int peer)
{
    if (!fake_valid_device(peer))
        return FAKE_E_INVALID_DEVICE;
    if (peer == dev || !fake_cfg()->peer)
        return FAKE_E_PEER_ACCESS_UNSUPPORTED;
    pthread_mutex_lock(&fake_peer_mu);
    unsigned rc = FAKE_E_OK;
    int n = fake_cfg()->devices;
    if (!fake_peer_tables())
        rc = FAKE_E_OUT_OF_MEMORY;
    else if (fake_peer[dev * n + peer])
        rc = FAKE_E_PEER_ACCESS_ALREADY_ENABLED;
    else
        fake_peer[dev * n + peer] = true;
    pthread_mutex_unlock(&fake_peer_mu);
    return rc;
}

static unsigned fake_default_pool(int dev, struct CUmemPoolHandle_st **out)
{
    if (out == NULL)
        return FAKE_E_INVALID_VALUE;
    if (!fake_valid_device(dev))
        return FAKE_E_INVALID_DEVICE;
    if (!fake_cfg()->memory_pools)
        return FAKE_E_NOT_SUPPORTED;
    pthread_mutex_lock(&fake_peer_mu);
    bool ok = fake_peer_tables();
    pthread_mutex_unlock(&fake_peer_mu);
    if (!ok)
        return FAKE_E_OUT_OF_MEMORY;
    *out = &fake_pools[dev];
    return FAKE_E_OK;
}

static bool fake_valid_pool(const struct CUmemPoolHandle_st *pool)
{
    return fake_pools != NULL && pool >= fake_pools &&
           pool < fake_pools + fake_cfg()->devices;
}

/* Attributes 1-3 (reuse policies, int) and 4 (release threshold, u64) are
 * settable, and 6 and 8 (the high watermarks, reset to 0); 5 and 7 are
 * read-only counters. */
static unsigned fake_pool_set_attribute(struct CUmemPoolHandle_st *pool,
                                        unsigned attr, const void *value)
{
    if (!fake_valid_pool(pool) || value == NULL)
        return FAKE_E_INVALID_VALUE;
    if (attr == FAKE_MEMPOOL_ATTR_RELEASE_THRESHOLD) {
        pthread_mutex_lock(&fake_peer_mu);
        pool->release_threshold = *(const uint64_t *)value;
        pthread_mutex_unlock(&fake_peer_mu);
        return FAKE_E_OK;
    }
    bool settable = (attr >= 1 && attr <= 3) || attr == 6 || attr == 8;
    return settable ? FAKE_E_OK : FAKE_E_INVALID_VALUE;
}

/* cu_mem_access_desc and hip_mem_access_desc have one layout (the ABI
 * check compares both with the real headers). */
_Static_assert(sizeof(cu_mem_access_desc) == sizeof(hip_mem_access_desc),
               "one access descriptor layout");

static unsigned fake_pool_set_access(struct CUmemPoolHandle_st *pool,
                                     const cu_mem_access_desc *map,
                                     size_t count)
{
    if (!fake_valid_pool(pool) || (map == NULL && count > 0))
        return FAKE_E_INVALID_VALUE;
    for (size_t i = 0; i < count; i++) {
        const cu_mem_access_desc *d = &map[i];
        /* Pools know no read-only access; their own device keeps its. */
        if (d->location.type != FAKE_MEM_LOCATION_TYPE_DEVICE ||
            !fake_valid_device(d->location.id) ||
            (d->flags != FAKE_MEM_ACCESS_NONE &&
             d->flags != FAKE_MEM_ACCESS_READWRITE) ||
            (d->location.id == pool->device &&
             d->flags != FAKE_MEM_ACCESS_READWRITE))
            return FAKE_E_INVALID_VALUE;
    }
    pthread_mutex_lock(&fake_peer_mu);
    for (size_t i = 0; i < count; i++)
        pool->access[map[i].location.id] =
            map[i].flags == FAKE_MEM_ACCESS_READWRITE;
    pthread_mutex_unlock(&fake_peer_mu);
    return FAKE_E_OK;
}

bool fake_peer_reachable(int device, int owner, bool pool_memory)
{
    if (device == owner)
        return true;
    pthread_mutex_lock(&fake_peer_mu);
    int n = fake_cfg()->devices;
    bool ok = fake_peer != NULL && fake_peer[device * n + owner] &&
              (!pool_memory || fake_pools[owner].access[device]);
    pthread_mutex_unlock(&fake_peer_mu);
    return ok;
}

/* ---- CUDA ------------------------------------------------------------ */

cu_result cuCtxEnablePeerAccess(cu_context peer, unsigned int flags)
{
    int dev, peer_dev;
    FAKE_CU_BEGIN(cuCtxEnablePeerAccess);
    unsigned rc = fake_cuda_current_device(&dev);
    if (rc != FAKE_E_OK)
        return rc;
    if (flags != 0)
        return FAKE_E_INVALID_VALUE;
    if (!fake_cuda_context_device(peer, &peer_dev))
        return FAKE_E_INVALID_CONTEXT;
    return fake_enable_peer(dev, peer_dev);
}

cu_result cuDeviceGetDefaultMemPool(cu_mempool *pool, cu_device dev)
{
    FAKE_CU_BEGIN(cuDeviceGetDefaultMemPool);
    return fake_default_pool(dev, (struct CUmemPoolHandle_st **)pool);
}

cu_result cuMemPoolSetAttribute(cu_mempool pool, cu_mempool_attribute attr,
                                void *value)
{
    FAKE_CU_BEGIN(cuMemPoolSetAttribute);
    return fake_pool_set_attribute(pool, attr, value);
}

cu_result cuMemPoolSetAccess(cu_mempool pool, const cu_mem_access_desc *map,
                             size_t count)
{
    FAKE_CU_BEGIN(cuMemPoolSetAccess);
    return fake_pool_set_access(pool, map, count);
}

/* ---- HIP ------------------------------------------------------------- */

hip_result hipDeviceEnablePeerAccess(int peer, unsigned int flags)
{
    int dev;
    FAKE_HIP_BEGIN(hipDeviceEnablePeerAccess);
    unsigned rc = fake_hip_current_device(&dev);
    if (rc != FAKE_E_OK)
        return rc;
    if (flags != 0)
        return FAKE_E_INVALID_VALUE;
    return fake_enable_peer(dev, peer);
}

hip_result hipDeviceGetDefaultMemPool(hip_mempool *pool, int device)
{
    FAKE_HIP_BEGIN(hipDeviceGetDefaultMemPool);
    return fake_default_pool(device, (struct CUmemPoolHandle_st **)pool);
}

hip_result hipMemPoolSetAttribute(hip_mempool pool, hip_mempool_attribute attr,
                                  void *value)
{
    FAKE_HIP_BEGIN(hipMemPoolSetAttribute);
    return fake_pool_set_attribute((struct CUmemPoolHandle_st *)pool, attr,
                                   value);
}

hip_result hipMemPoolSetAccess(hip_mempool pool,
                               const hip_mem_access_desc *desc, size_t count)
{
    FAKE_HIP_BEGIN(hipMemPoolSetAccess);
    return fake_pool_set_access((struct CUmemPoolHandle_st *)pool,
                                (const cu_mem_access_desc *)desc, count);
}

/* ---- Control API ----------------------------------------------------- */

int fake_gpu_peer_access(int device, int peer)
{
    if (!fake_valid_device(device) || !fake_valid_device(peer))
        return -1;
    pthread_mutex_lock(&fake_peer_mu);
    int n = fake_cfg()->devices;
    int on = fake_peer != NULL && fake_peer[device * n + peer];
    pthread_mutex_unlock(&fake_peer_mu);
    return on;
}

int fake_gpu_pool_access(int owner, int device)
{
    if (!fake_valid_device(owner) || !fake_valid_device(device))
        return -1;
    pthread_mutex_lock(&fake_peer_mu);
    int on =
        fake_pools != NULL ? fake_pools[owner].access[device] : owner == device;
    pthread_mutex_unlock(&fake_peer_mu);
    return on;
}

unsigned long long fake_gpu_pool_release_threshold(int device)
{
    if (!fake_valid_device(device))
        return 0;
    pthread_mutex_lock(&fake_peer_mu);
    unsigned long long t =
        fake_pools != NULL ? fake_pools[device].release_threshold : 0;
    pthread_mutex_unlock(&fake_peer_mu);
    return t;
}
