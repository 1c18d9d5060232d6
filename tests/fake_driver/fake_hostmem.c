/* Pinned host memory: allocation and free, which synchronise the device,
 * device views, and the pinned bytes of the control API (fake_engine.h
 * describes the locking). */
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fake_engine.h"

static fake_alloc *fake_allocs;
static size_t *fake_allocated; /* bytes per device */
static int fake_live_allocs;
/* Bytes of live pinned allocations, and their peak since load or the last
 * fake_gpu_reset_pinned_peak. */
static size_t fake_pinned_now, fake_pinned_peak;

int fake_host_allocs(void)
{
    return fake_live_allocs;
}

void fake_alloc_unref(fake_alloc *a)
{
    if (--a->refs > 0)
        return;
    munmap(a->host, a->map_size);
    munmap(a->dev, a->map_size);
    free(a);
}

size_t fake_free_mem(int device)
{
    size_t total = fake_cfg()->total_mem, used;
    pthread_mutex_lock(&fake_lock);
    used = fake_allocated != NULL ? fake_allocated[device] : 0;
    pthread_mutex_unlock(&fake_lock);
    return used < total ? total - used : 0;
}

/* Charges `bytes` to the device, or fails when they do not fit. */
bool fake_charge(int device, size_t bytes)
{
    if (fake_allocated == NULL)
        fake_allocated =
            calloc((size_t)fake_cfg()->devices + 1, sizeof *fake_allocated);
    if (fake_allocated == NULL ||
        bytes > fake_cfg()->total_mem - fake_allocated[device])
        return false;
    fake_allocated[device] += bytes;
    return true;
}

void fake_uncharge(int device, size_t bytes)
{
    fake_allocated[device] -= bytes;
}

/* Maps one memfd twice so that the "device" address differs from the host
 * one yet aliases it: a backend that hands the host address to a device
 * call is caught, and a store through either view shows in the other. */
static bool fake_map_twice(fake_alloc *a)
{
    long page = sysconf(_SC_PAGESIZE);
    a->map_size = (a->size + (size_t)page - 1) / (size_t)page * (size_t)page;
    int fd = memfd_create("fake_gpu_pinned", MFD_CLOEXEC);
    if (fd < 0)
        return false;
    bool ok = ftruncate(fd, (off_t)a->map_size) == 0;
    a->host = a->dev = MAP_FAILED;
    if (ok)
        a->host =
            mmap(NULL, a->map_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (ok && a->host != MAP_FAILED)
        a->dev =
            mmap(NULL, a->map_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (a->dev != MAP_FAILED)
        return true;
    if (a->host != MAP_FAILED)
        munmap(a->host, a->map_size);
    return false;
}

unsigned fake_host_alloc(int device, size_t bytes, bool mapped, void **host)
{
    if (host == NULL || bytes == 0)
        return FAKE_E_INVALID_VALUE;
    fake_alloc *a = calloc(1, sizeof *a);
    if (a != NULL) {
        a->size = bytes;
        a->device = device;
        a->mapped = mapped;
        a->refs = 1;
    }
    pthread_mutex_lock(&fake_lock);
    /* Page-locking synchronises the device as freeing does (CUDA documents
     * both as implicit synchronisation). */
    if (a != NULL && fake_cfg()->pinned_alloc_sync)
        fake_sync_device(device);
    if (a == NULL || !fake_charge(device, bytes)) {
        pthread_mutex_unlock(&fake_lock);
        free(a);
        return FAKE_E_OUT_OF_MEMORY;
    }
    if (!fake_map_twice(a)) {
        fake_uncharge(device, bytes);
        pthread_mutex_unlock(&fake_lock);
        free(a);
        return FAKE_E_OUT_OF_MEMORY;
    }
    a->next = fake_allocs;
    fake_allocs = a;
    fake_live_allocs++;
    fake_pinned_now += bytes;
    if (fake_pinned_now > fake_pinned_peak)
        fake_pinned_peak = fake_pinned_now;
    pthread_mutex_unlock(&fake_lock);
    *host = a->host;
    return FAKE_E_OK;
}

unsigned fake_host_device_pointer(void *host, void **device)
{
    if (device == NULL)
        return FAKE_E_INVALID_VALUE;
    unsigned rc = FAKE_E_INVALID_VALUE;
    pthread_mutex_lock(&fake_lock);
    for (fake_alloc *a = fake_allocs; a != NULL; a = a->next) {
        size_t offset = (size_t)((uintptr_t)host - (uintptr_t)a->host);
        if ((uintptr_t)host >= (uintptr_t)a->host && offset < a->size) {
            if (a->mapped) {
                *device = a->dev + offset;
                rc = FAKE_E_OK;
            }
            break;
        }
    }
    pthread_mutex_unlock(&fake_lock);
    return rc;
}

fake_alloc *fake_find_device_word(uintptr_t addr)
{
    for (fake_alloc *a = fake_allocs; a != NULL; a = a->next) {
        uintptr_t base = (uintptr_t)a->dev;
        if (a->mapped && addr >= base && addr - base + 8 <= a->size)
            return a;
    }
    return NULL;
}

fake_alloc *fake_find_pinned(uintptr_t addr, bool *device_view)
{
    for (fake_alloc *a = fake_allocs; a != NULL; a = a->next) {
        if (addr - (uintptr_t)a->host < a->size) {
            *device_view = false;
            return a;
        }
        if (a->mapped && addr - (uintptr_t)a->dev < a->size) {
            *device_view = true;
            return a;
        }
    }
    return NULL;
}

/* The link that points at the allocation whose host address is `host`. */
static fake_alloc **fake_find_host(void *host)
{
    fake_alloc **p = &fake_allocs;
    while (*p != NULL && (*p)->host != host)
        p = &(*p)->next;
    return *p != NULL ? p : NULL;
}

/* Freeing page-locked memory synchronises its device, as in the real
 * drivers (HIP's ihipFree syncs all streams; CUDA documents pinned
 * (de)allocation as an implicit synchronisation), so a free while a stream
 * waits on a flag the host has yet to set deadlocks there; here it is a
 * violation after FAKE_GPU_HANG_SECONDS.  A wait item still polling the
 * memory then keeps the pages mapped and fails its stream with
 * ILLEGAL_ADDRESS instead of reading freed memory. */
unsigned fake_host_free(void *host)
{
    pthread_mutex_lock(&fake_lock);
    fake_alloc **p = fake_find_host(host);
    if (p != NULL) {
        fake_sync_device((*p)->device);
        p = fake_find_host(host); /* another thread may have freed it */
    }
    if (p == NULL) {
        pthread_mutex_unlock(&fake_lock);
        return FAKE_E_INVALID_VALUE;
    }
    fake_alloc *a = *p;
    fake_access_check_free(fake_current_entry_name(), (uintptr_t)a->host,
                           (uintptr_t)a->host + a->size);
    *p = a->next;
    a->freed = true;
    fake_uncharge(a->device, a->size);
    fake_live_allocs--;
    fake_pinned_now -= a->size;
    fake_alloc_unref(a);
    pthread_mutex_unlock(&fake_lock);
    return FAKE_E_OK;
}

/* ---- Control API (pinned bytes) ------------------------------------- */

FAKE_EXPORT unsigned long long fake_gpu_pinned_bytes(int peak)
{
    pthread_mutex_lock(&fake_lock);
    size_t n = peak ? fake_pinned_peak : fake_pinned_now;
    pthread_mutex_unlock(&fake_lock);
    return n;
}

FAKE_EXPORT void fake_gpu_reset_pinned_peak(void)
{
    pthread_mutex_lock(&fake_lock);
    fake_pinned_peak = fake_pinned_now;
    pthread_mutex_unlock(&fake_lock);
}
