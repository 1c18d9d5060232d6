/* Memory mapped by hand (cuMemCreate, cuMemAddressReserve, cuMemMap,
 * cuMemSetAccess) and multicast objects (cuMulticast*), as CUDA 12.1 has
 * them, for the project's SymmetricPool.
 *
 * A physical allocation is a device's memory with bytes of its own; a
 * multicast object is bound, per device of its team, to one such
 * allocation.  Address ranges are reserved in a range of their own that
 * the host cannot dereference; mapping an allocation (or a multicast
 * object) there makes the range device memory for the copy engine
 * (fake_devmem.c asks fake_vmm_at / fake_vmm_device_of), of the device
 * cuMemSetAccess grants: before that, nothing may use it.
 *
 * What a real driver refuses, the fake refuses: sizes that are not
 * multiples of the granularity, a multicast object used before every
 * device of its team was added, memory bound twice for one device, a
 * mapping over an unreserved range or a range mapped already.  A copy
 * through a multicast mapping reaches the mapping device's own bound memory
 * (the multimem reductions are a kernel's, which the fake does not run).
 * FAKE_GPU_MULTICAST=0 makes devices report no multicast support and
 * cuMulticastCreate fail with NOT_SUPPORTED. */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "fake_engine.h"
#include "fake_front.h"

CUDA_MULTICAST_ENTRY_POINTS(FAKE_DECLARE_CU)

enum {
    FAKE_MAX_TEAM = 128,                 /* devices of a multicast object */
    FAKE_VMM_GRANULARITY = 2 << 20,      /* allocation granularity */
    FAKE_MULTICAST_RECOMMENDED = 4 << 20 /* the multicast one, recommended */
};
#define FAKE_VMM_RANGE ((size_t)1 << 38) /* the reservable address space */

typedef struct fake_handle {
    bool multicast;
    int device; /* physical memory: its device */
    size_t size;
    char *backing;            /* physical memory: its bytes */
    unsigned team;            /* multicast: numDevices */
    int added[FAKE_MAX_TEAM]; /* multicast: devices added, in order */
    struct fake_handle *bound[FAKE_MAX_TEAM]; /* per added device */
    unsigned n_added;
    int mappings;
    bool released;
    struct fake_handle *next;
} fake_handle;

typedef struct vmm_range {
    uintptr_t base;
    size_t size;
    fake_handle *mapped; /* NULL while reserved only */
    fake_dmem *dmem;     /* once access is set: what the copy engine sees */
    struct vmm_range *next;
} vmm_range;

static fake_handle *fake_handles;
static vmm_range *vmm_ranges;
static uintptr_t fake_vmm_base, fake_vmm_cursor;

/* ---- Lookups (under fake_lock) ------------------------------------------- */

static fake_handle *fake_handle_of(cu_mem_handle h)
{
    for (fake_handle *x = fake_handles; x != NULL; x = x->next)
        if ((cu_mem_handle)(uintptr_t)x == h && !x->released)
            return x;
    return NULL;
}

static vmm_range *vmm_range_at(uintptr_t addr)
{
    for (vmm_range *r = vmm_ranges; r != NULL; r = r->next)
        if (addr - r->base < r->size)
            return r;
    return NULL;
}

fake_dmem *fake_vmm_at(uintptr_t addr)
{
    if (fake_vmm_base == 0 || addr - fake_vmm_base >= FAKE_VMM_RANGE)
        return NULL;
    vmm_range *r = vmm_range_at(addr);
    return r != NULL ? r->dmem : NULL;
}

/* Any address of the reservable range is device memory to the copy
 * engine, accessible or not: one that nothing maps (or no device may use
 * yet) lies in no live allocation, a violation, as a real device faults on
 * it (never a host access to a range the host cannot touch). */
int fake_vmm_device_of(uintptr_t addr)
{
    if (fake_vmm_base == 0 || addr - fake_vmm_base >= FAKE_VMM_RANGE)
        return -1;
    fake_dmem *m = fake_vmm_at(addr);
    return m != NULL ? m->device : 0;
}

static bool fake_multiple(size_t size, size_t unit)
{
    return size != 0 && size % unit == 0;
}

/* ---- Granularity and physical memory ------------------------------------- */

static bool fake_valid_prop(const cu_mem_alloc_prop *prop)
{
    return prop != NULL && prop->type == 1 /* PINNED */ &&
           prop->location.type == 1 /* DEVICE */ &&
           fake_valid_device(prop->location.id);
}

cu_result cuMemGetAllocationGranularity(size_t *granularity,
                                        const cu_mem_alloc_prop *prop,
                                        unsigned int option)
{
    FAKE_CU_BEGIN(cuMemGetAllocationGranularity);
    if (granularity == NULL || !fake_valid_prop(prop) || option > 1)
        return FAKE_E_INVALID_VALUE;
    *granularity = FAKE_VMM_GRANULARITY;
    return FAKE_E_OK;
}

cu_result cuMemCreate(cu_mem_handle *handle, size_t size,
                      const cu_mem_alloc_prop *prop, unsigned long long flags)
{
    FAKE_CU_BEGIN(cuMemCreate);
    if (handle == NULL || !fake_valid_prop(prop) || flags != 0 ||
        !fake_multiple(size, FAKE_VMM_GRANULARITY))
        return FAKE_E_INVALID_VALUE;
    fake_handle *x = calloc(1, sizeof *x);
    if (x == NULL)
        return FAKE_E_OUT_OF_MEMORY;
    x->device = prop->location.id;
    x->size = size;
    x->backing = mmap(NULL, size, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    pthread_mutex_lock(&fake_lock);
    bool ok = x->backing != MAP_FAILED && fake_charge(x->device, size);
    if (ok) {
        x->next = fake_handles;
        fake_handles = x;
    }
    pthread_mutex_unlock(&fake_lock);
    if (!ok) {
        if (x->backing != MAP_FAILED)
            munmap(x->backing, size);
        free(x);
        return FAKE_E_OUT_OF_MEMORY;
    }
    *handle = (cu_mem_handle)(uintptr_t)x;
    return FAKE_E_OK;
}

/* As CUDA: a handle still mapped somewhere lives on until unmapped; its
 * memory is not given back here (the fake keeps it: mappings may still
 * name it). */
cu_result cuMemRelease(cu_mem_handle handle)
{
    FAKE_CU_BEGIN(cuMemRelease);
    pthread_mutex_lock(&fake_lock);
    fake_handle *x = fake_handle_of(handle);
    if (x != NULL) {
        x->released = true;
        if (!x->multicast)
            fake_uncharge(x->device, x->size);
    }
    pthread_mutex_unlock(&fake_lock);
    return x != NULL ? FAKE_E_OK : FAKE_E_INVALID_VALUE;
}

/* ---- Address ranges -------------------------------------------------------
 */

cu_result cuMemAddressReserve(cu_deviceptr *ptr, size_t size, size_t alignment,
                              cu_deviceptr addr, unsigned long long flags)
{
    FAKE_CU_BEGIN(cuMemAddressReserve);
    (void)addr; /* only a hint */
    if (ptr == NULL || flags != 0 ||
        !fake_multiple(size, FAKE_VMM_GRANULARITY) ||
        (alignment & (alignment - 1)) != 0)
        return FAKE_E_INVALID_VALUE;
    size_t align =
        alignment > FAKE_VMM_GRANULARITY ? alignment : FAKE_VMM_GRANULARITY;
    vmm_range *r = calloc(1, sizeof *r);
    if (r == NULL)
        return FAKE_E_OUT_OF_MEMORY;
    pthread_mutex_lock(&fake_lock);
    if (fake_vmm_base == 0) {
        void *p = mmap(NULL, FAKE_VMM_RANGE, PROT_NONE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (p != MAP_FAILED)
            fake_vmm_base = fake_vmm_cursor = (uintptr_t)p;
    }
    uintptr_t base = (fake_vmm_cursor + align - 1) / align * align;
    bool ok =
        fake_vmm_base != 0 && base + size <= fake_vmm_base + FAKE_VMM_RANGE;
    if (ok) { /* never reused: a stale pointer lies in no range */
        fake_vmm_cursor = base + size;
        *r = (vmm_range){base, size, NULL, NULL, vmm_ranges};
        vmm_ranges = r;
        *ptr = base;
    }
    pthread_mutex_unlock(&fake_lock);
    if (!ok)
        free(r);
    return ok ? FAKE_E_OK : FAKE_E_OUT_OF_MEMORY;
}

static vmm_range *vmm_whole_range(cu_deviceptr ptr, size_t size)
{
    vmm_range *r = vmm_range_at((uintptr_t)ptr);
    return r != NULL && r->base == ptr && r->size == size ? r : NULL;
}

cu_result cuMemAddressFree(cu_deviceptr ptr, size_t size)
{
    FAKE_CU_BEGIN(cuMemAddressFree);
    pthread_mutex_lock(&fake_lock);
    vmm_range *r = vmm_whole_range(ptr, size);
    bool ok = r != NULL && r->mapped == NULL;
    if (ok)
        for (vmm_range **p = &vmm_ranges; *p != NULL; p = &(*p)->next)
            if (*p == r) {
                *p = r->next;
                break;
            }
    pthread_mutex_unlock(&fake_lock);
    if (ok)
        free(r);
    return ok ? FAKE_E_OK : FAKE_E_INVALID_VALUE;
}

cu_result cuMemMap(cu_deviceptr ptr, size_t size, size_t offset,
                   cu_mem_handle handle, unsigned long long flags)
{
    FAKE_CU_BEGIN(cuMemMap);
    pthread_mutex_lock(&fake_lock);
    vmm_range *r = vmm_whole_range(ptr, size);
    fake_handle *x = fake_handle_of(handle);
    bool ok = r != NULL && r->mapped == NULL && x != NULL && flags == 0 &&
              offset == 0 && size <= x->size;
    if (ok) {
        r->mapped = x;
        x->mappings++;
    }
    pthread_mutex_unlock(&fake_lock);
    return ok ? FAKE_E_OK : FAKE_E_INVALID_VALUE;
}

cu_result cuMemUnmap(cu_deviceptr ptr, size_t size)
{
    FAKE_CU_BEGIN(cuMemUnmap);
    pthread_mutex_lock(&fake_lock);
    vmm_range *r = vmm_whole_range(ptr, size);
    bool ok = r != NULL && r->mapped != NULL;
    if (ok) {
        r->mapped->mappings--;
        r->mapped = NULL;
        if (r->dmem != NULL)
            r->dmem->state =
                FAKE_DMEM_FREED; /* copies in flight still hold it */
        r->dmem = NULL;
    }
    pthread_mutex_unlock(&fake_lock);
    return ok ? FAKE_E_OK : FAKE_E_INVALID_VALUE;
}

/* The bytes a mapping on `device` reaches: the memory itself, or the
 * memory bound to the multicast object for that device. */
static char *fake_mapping_bytes(const fake_handle *x, int device)
{
    if (!x->multicast)
        return x->device == device ? x->backing : NULL;
    for (unsigned i = 0; i < x->n_added; i++)
        if (x->added[i] == device && x->bound[i] != NULL)
            return x->bound[i]->backing;
    return NULL;
}

/* Access for one device (the fake models the one-device case the project
 * uses): the range becomes that device's memory for the copy engine. */
cu_result cuMemSetAccess(cu_deviceptr ptr, size_t size,
                         const cu_mem_access_desc *desc, size_t count)
{
    FAKE_CU_BEGIN(cuMemSetAccess);
    if (desc == NULL || count != 1 || desc->location.type != 1 ||
        !fake_valid_device(desc->location.id) || desc->flags != 3)
        return FAKE_E_INVALID_VALUE;
    pthread_mutex_lock(&fake_lock);
    vmm_range *r = vmm_whole_range(ptr, size);
    char *bytes = r != NULL && r->mapped != NULL
                      ? fake_mapping_bytes(r->mapped, desc->location.id)
                      : NULL;
    fake_dmem *m =
        bytes != NULL && r->dmem == NULL ? calloc(1, sizeof *m) : NULL;
    if (m != NULL) {
        /* Never freed: a mapping is the driver's, and copies that took a
         * reference must not free its (shared) bytes. */
        *m = (fake_dmem){.base = r->base,
                         .size = size,
                         .device = desc->location.id,
                         .backing = bytes,
                         .state = FAKE_DMEM_LIVE,
                         .refs = 2};
        r->dmem = m;
    }
    pthread_mutex_unlock(&fake_lock);
    return m != NULL ? FAKE_E_OK : FAKE_E_INVALID_VALUE;
}

/* ---- Multicast objects ----------------------------------------------------
 */

static bool fake_valid_multicast_prop(const cu_multicast_prop *prop)
{
    return prop != NULL && prop->numDevices >= 1 &&
           prop->numDevices <= FAKE_MAX_TEAM && prop->flags == 0 &&
           fake_multiple(prop->size, FAKE_VMM_GRANULARITY);
}

cu_result cuMulticastGetGranularity(size_t *granularity,
                                    const cu_multicast_prop *prop,
                                    unsigned int option)
{
    FAKE_CU_BEGIN(cuMulticastGetGranularity);
    if (granularity == NULL || prop == NULL || option > 1)
        return FAKE_E_INVALID_VALUE;
    if (!fake_cfg()->multicast)
        return FAKE_E_NOT_SUPPORTED;
    *granularity =
        option == 1 ? FAKE_MULTICAST_RECOMMENDED : FAKE_VMM_GRANULARITY;
    return FAKE_E_OK;
}

cu_result cuMulticastCreate(cu_mem_handle *handle,
                            const cu_multicast_prop *prop)
{
    FAKE_CU_BEGIN(cuMulticastCreate);
    if (!fake_cfg()->multicast)
        return FAKE_E_NOT_SUPPORTED;
    if (handle == NULL || !fake_valid_multicast_prop(prop))
        return FAKE_E_INVALID_VALUE;
    fake_handle *x = calloc(1, sizeof *x);
    if (x == NULL)
        return FAKE_E_OUT_OF_MEMORY;
    *x = (fake_handle){.multicast = true,
                       .device = -1,
                       .size = prop->size,
                       .team = prop->numDevices};
    pthread_mutex_lock(&fake_lock);
    x->next = fake_handles;
    fake_handles = x;
    pthread_mutex_unlock(&fake_lock);
    *handle = (cu_mem_handle)(uintptr_t)x;
    return FAKE_E_OK;
}

static bool fake_team_has(const fake_handle *x, int device, unsigned *at)
{
    for (unsigned i = 0; i < x->n_added; i++)
        if (x->added[i] == device) {
            *at = i;
            return true;
        }
    return false;
}

/* Every device joins before any memory is bound (CUDA's rule). */
cu_result cuMulticastAddDevice(cu_mem_handle handle, cu_device dev)
{
    unsigned at;
    FAKE_CU_BEGIN(cuMulticastAddDevice);
    if (!fake_valid_device(dev))
        return FAKE_E_INVALID_DEVICE;
    pthread_mutex_lock(&fake_lock);
    fake_handle *x = fake_handle_of(handle);
    bool ok = x != NULL && x->multicast && x->n_added < x->team &&
              !fake_team_has(x, dev, &at);
    for (unsigned i = 0; ok && i < x->n_added; i++)
        ok = x->bound[i] == NULL;
    if (ok)
        x->added[x->n_added++] = dev;
    pthread_mutex_unlock(&fake_lock);
    return ok ? FAKE_E_OK : FAKE_E_INVALID_VALUE;
}

cu_result cuMulticastBindMem(cu_mem_handle handle, size_t offset,
                             cu_mem_handle memory, size_t memory_offset,
                             size_t size, unsigned long long flags)
{
    unsigned at = 0;
    FAKE_CU_BEGIN(cuMulticastBindMem);
    pthread_mutex_lock(&fake_lock);
    fake_handle *x = fake_handle_of(handle), *m = fake_handle_of(memory);
    bool ok = x != NULL && x->multicast && m != NULL && !m->multicast &&
              x->n_added == x->team && flags == 0 && offset == 0 &&
              memory_offset == 0 && size == x->size && size <= m->size &&
              fake_team_has(x, m->device, &at) && x->bound[at] == NULL;
    if (ok)
        x->bound[at] = m;
    pthread_mutex_unlock(&fake_lock);
    return ok ? FAKE_E_OK : FAKE_E_INVALID_VALUE;
}
