/* Symmetric multicast pools: the registry and the memory of their views
 * (symmetric.h).  The driver work is the backend's (symmetric_alloc). */
#include "symmetric.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"

struct mxd_symmetric {
    int n;
    mxd_device *devices[MXD_MAX_SYMMETRIC_DEVICES]; /* in the key's order */
    uintptr_t unicast[MXD_MAX_SYMMETRIC_DEVICES];
    uintptr_t multicast[MXD_MAX_SYMMETRIC_DEVICES];
    uint64_t byte_size; /* what was asked for: the views' length */
    mxd_symmetric *next;
};

/* Every pool of the process; pools are never freed. */
static pthread_mutex_t registry_mu = PTHREAD_MUTEX_INITIALIZER;
static mxd_symmetric *registry;

/* Held across a pool's allocation, which checks its devices: taken
 * first before fork() (init.c), so the child finds it free. */
static void registry_lock(void)
{
    pthread_mutex_lock(&registry_mu);
}

static void registry_unlock(void)
{
    pthread_mutex_unlock(&registry_mu);
}

const mxd_fork_hooks mxd_symmetric_fork_hooks = {registry_lock, registry_unlock,
                                                 registry_unlock};

/* Devices are one object per (backend, id) for the process. */
static int by_device(const void *a, const void *b)
{
    const mxd_device *x = *(mxd_device *const *)a, *y = *(mxd_device *const *)b;
    if (x->ops != y->ops)
        return (uintptr_t)x->ops < (uintptr_t)y->ops ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

/* devs[0..n) sorted into key; false when n is out of range. */
static bool make_key(mxd_device *const *devs, int n, mxd_device **key)
{
    if (n < 1 || n > MXD_MAX_SYMMETRIC_DEVICES)
        return false;
    memcpy(key, devs, (size_t)n * sizeof *key);
    qsort(key, (size_t)n, sizeof *key, by_device);
    return true;
}

static mxd_symmetric *find(mxd_device *const *key, int n)
{
    for (mxd_symmetric *p = registry; p != NULL; p = p->next)
        if (p->n == n && memcmp(p->devices, key, (size_t)n * sizeof *key) == 0)
            return p;
    return NULL;
}

bool mxd_symmetric_supported(mxd_device *const *devs, int n)
{
    if (n < 1)
        return false;
    for (int i = 0; i < n; i++)
        if (devs[i]->ops->multicast == NULL ||
            !devs[i]->ops->multicast(devs[i]))
            return false;
    return true;
}

static mxd_status check_devices(mxd_device *const *key, int n, mxd_error *err)
{
    if (n < 2)
        return mxd_fail(
            err, MXD_UNAVAILABLE,
            "a symmetric pool spans at least two devices (%d given)", n);
    for (int i = 0; i < n; i++) {
        if (i > 0 && key[i] == key[i - 1])
            return mxd_fail(err, MXD_UNAVAILABLE,
                            "%s[%d] appears twice among the devices",
                            key[i]->ops->api, key[i]->id);
        if (key[i]->ops != key[0]->ops)
            return mxd_fail(err, MXD_UNAVAILABLE,
                            "the devices of a symmetric pool must be of one "
                            "backend (%s and %s given)",
                            key[0]->ops->api, key[i]->ops->api);
        if (!mxd_symmetric_supported(&key[i], 1))
            return mxd_fail(err, MXD_UNAVAILABLE,
                            "%s[%d] lacks multicast support", key[i]->ops->api,
                            key[i]->id);
    }
    return MXD_OK;
}

mxd_status mxd_symmetric_allocate(mxd_device *const *devs, int n,
                                  uint64_t bytes, mxd_symmetric **out,
                                  mxd_error *err)
{
    mxd_symmetric *pool = calloc(1, sizeof *pool);
    if (pool == NULL)
        return mxd_fail(err, MXD_NO_MEMORY, "out of memory");
    if (!make_key(devs, n, pool->devices)) {
        free(pool);
        return mxd_fail(err, MXD_UNAVAILABLE,
                        "a symmetric pool spans 2 to %d devices (%d given)",
                        MXD_MAX_SYMMETRIC_DEVICES, n);
    }
    pool->n = n;
    pool->byte_size = bytes;
    size_t size;
    pthread_mutex_lock(&registry_mu);
    mxd_status st = check_devices(pool->devices, n, err);
    if (st == MXD_OK && find(pool->devices, n) != NULL)
        st = mxd_fail(err, MXD_UNAVAILABLE,
                      "a symmetric pool is registered for these devices "
                      "already: use SymmetricPool.lookup");
    if (st == MXD_OK && bytes > SIZE_MAX)
        st = mxd_fail(err, MXD_UNAVAILABLE, "%llu bytes do not fit in memory",
                      (unsigned long long)bytes);
    if (st == MXD_OK)
        st = pool->devices[0]->ops->symmetric_alloc(
            pool->devices, n, (size_t)bytes, &size, pool->unicast,
            pool->multicast, err);
    if (st == MXD_OK) {
        pool->next = registry;
        registry = pool;
    }
    pthread_mutex_unlock(&registry_mu);
    if (st != MXD_OK) {
        if (st != MXD_NO_MEMORY)
            err->status = MXD_UNAVAILABLE; /* driver failures included */
        free(pool);
        return st == MXD_NO_MEMORY ? st : MXD_UNAVAILABLE;
    }
    *out = pool;
    return MXD_OK;
}

mxd_symmetric *mxd_symmetric_lookup(mxd_device *const *devs, int n)
{
    mxd_device *key[MXD_MAX_SYMMETRIC_DEVICES];
    if (!make_key(devs, n, key))
        return NULL;
    pthread_mutex_lock(&registry_mu);
    mxd_symmetric *pool = find(key, n);
    pthread_mutex_unlock(&registry_mu);
    return pool;
}

uint64_t mxd_symmetric_byte_size(const mxd_symmetric *pool)
{
    return pool->byte_size;
}

/* The pool's memory is the driver's for the process: nothing to give
 * back when a view's last user is gone. */
static void keep(void *data)
{
    (void)data;
}

mxd_status mxd_symmetric_memory(mxd_symmetric *pool, mxd_device *dev,
                                bool multicast, mxd_memory **out,
                                mxd_error *err)
{
    int i = 0;
    while (i < pool->n && pool->devices[i] != dev)
        i++;
    if (i == pool->n)
        return mxd_fail(err, MXD_UNAVAILABLE,
                        "the symmetric pool does not span %s[%d]",
                        dev->ops->api, dev->id);
    mxd_queue *q = mxd_device_default_queue(dev, err);
    if (q == NULL)
        return err->status;
    mxd_foreign foreign = {
        .device_ptr = multicast ? pool->multicast[i] : pool->unicast[i],
        .size = (int64_t)pool->byte_size,
        .release = {keep, keep, NULL},
    };
    return mxd_memory_wrap(q, &foreign, out, err);
}
