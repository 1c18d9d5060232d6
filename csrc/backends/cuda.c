/* The CUDA backend: the CUDA driver API (libcuda.so.1) under the shared GPU
 * backend of gpu_backend.inc.  This file holds what is CUDA's own: loading
 * the entry points (cuGetProcAddress with explicit versions, else dlsym of
 * the ABI-stable names), primary contexts, error names, the compute
 * capability, and the device pointer type.  Every CUDA entry point the
 * project calls is named in this file. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "gpu_api.h"
#include "cuda_abi.h"

#define GPU_API "cuda"
#define GPU_DRIVER "CUDA driver"
#define GPU_BACKEND mxd_cuda_backend
#define GPU_PROBE mxd_cuda_probe

typedef cu_stream gpu_stream;
typedef cu_event gpu_event;
typedef cu_result gpu_result;
typedef cu_mempool gpu_mempool;
typedef cu_mem_access_desc gpu_mem_access_desc;
typedef cu_graph gpu_graph;
typedef cu_graph_exec gpu_graph_exec;

typedef struct api_device {
    cu_device handle;
    cu_context context; /* the primary context, retained for good */
} api_device;

#define DECLARE_ENTRY(name, version, kind, ret, params) ret(*name) params;
static struct {
    CUDA_ENTRY_POINTS(DECLARE_ENTRY)
} drv;

/* Defined in gpu_backend.inc (included last): a result turned into an
 * mxd_status naming the entry point, and a missing-feature error. */
static mxd_status check(gpu_result rc, const char *call, mxd_error *err);
static mxd_status missing(const char *what, mxd_error *err);

/* The entry point of each operation of gpu_backend.inc. */
#define API_init cuInit
#define API_device_count cuDeviceGetCount
#define API_stream_create cuStreamCreate
#define API_stream_destroy cuStreamDestroy
#define API_stream_query cuStreamQuery
#define API_stream_wait_event cuStreamWaitEvent
#define API_event_create cuEventCreate
#define API_event_destroy cuEventDestroy
#define API_event_record cuEventRecord
#define API_event_query cuEventQuery
#define API_event_synchronize cuEventSynchronize
#define API_event_elapsed cuEventElapsedTime
#define API_host_alloc cuMemHostAlloc
#define API_device_attribute cuDeviceGetAttribute
#define API_device_name cuDeviceGetName
#define API_mem_info cuMemGetInfo
#define API_graph_mem_attribute cuDeviceGetGraphMemAttribute
#define API_can_access_peer cuDeviceCanAccessPeer
#define API_launch_host_fn cuLaunchHostFunc
#define API_add_callback cuStreamAddCallback
#define API_wait_value cuStreamWaitValue64
#define API_enable_peer cuCtxEnablePeerAccess
#define API_default_mem_pool cuDeviceGetDefaultMemPool
#define API_mem_pool_set_attribute cuMemPoolSetAttribute
#define API_mem_pool_set_access cuMemPoolSetAccess
#define API_begin_capture cuStreamBeginCapture
#define API_end_capture cuStreamEndCapture
#define API_graph_instantiate cuGraphInstantiateWithFlags
#define API_graph_launch cuGraphLaunch
#define API_graph_exec_destroy cuGraphExecDestroy
#define API_graph_destroy cuGraphDestroy
#define API_CAPTURE_MODE_RELAXED MXD_CU_STREAM_CAPTURE_MODE_RELAXED
#define API_MEM_OPS_ATTRIBUTE                                                  \
    "CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS"

/* api_wait_value's conditions: equal; at least (wrap-safe:
 * (int64_t)(*addr - value) >= 0). */
#define API_WAIT_EQ MXD_CU_STREAM_WAIT_VALUE_EQ
#define API_WAIT_GEQ MXD_CU_STREAM_WAIT_VALUE_GEQ

/* The entry points copies and fills use, by name (the launch trace). */
#define API_NAME_HTOD "cuMemcpyHtoDAsync"
#define API_NAME_DTOH "cuMemcpyDtoHAsync"
#define API_NAME_DTOD "cuMemcpyDtoDAsync"
#define API_NAME_PEER "cuMemcpyPeerAsync"
#define API_NAME_2D "cuMemcpy2DAsync"
#define API_NAME_MEMSET(width)                                                 \
    ((width) == 1   ? "cuMemsetD8Async"                                        \
     : (width) == 2 ? "cuMemsetD16Async"                                       \
                    : "cuMemsetD32Async")

#define API_SUCCESS MXD_CU_SUCCESS
#define API_NOT_READY MXD_CU_ERROR_NOT_READY
#define API_STREAM_NON_BLOCKING MXD_CU_STREAM_NON_BLOCKING
#define API_EVENT_BLOCKING_SYNC MXD_CU_EVENT_BLOCKING_SYNC
#define API_EVENT_DISABLE_TIMING MXD_CU_EVENT_DISABLE_TIMING
#define API_HOST_ALLOC_MAPPED                                                  \
    (MXD_CU_MEMHOSTALLOC_PORTABLE | MXD_CU_MEMHOSTALLOC_DEVICEMAP)
#define API_ATTRIBUTE_INTEGRATED MXD_CU_DEVICE_ATTRIBUTE_INTEGRATED
#define API_GRAPH_MEM_USED MXD_CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT
#define API_GRAPH_MEM_RESERVED MXD_CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT
#define API_PEER_ACCESS_ALREADY_ENABLED MXD_CU_ERROR_PEER_ACCESS_ALREADY_ENABLED
#define API_MEMPOOL_ATTR_RELEASE_THRESHOLD MXD_CU_MEMPOOL_ATTR_RELEASE_THRESHOLD
#define API_MEM_LOCATION_TYPE_DEVICE MXD_CU_MEM_LOCATION_TYPE_DEVICE
#define API_MEM_ACCESS_READWRITE MXD_CU_MEM_ACCESS_FLAGS_PROT_READWRITE

/* ---- Results ------------------------------------------------------------ */

/* Names for results that drivers whose cuGetErrorName fails too (such as
 * the CUDA Toolkit's stub library) return at initialisation. */
static const char *known_name(cu_result rc)
{
    switch (rc) {
    case 3: return "CUDA_ERROR_NOT_INITIALIZED";
    case 34: return "CUDA_ERROR_STUB_LIBRARY";
    case 35: return "CUDA_ERROR_INSUFFICIENT_DRIVER";
    case 36: return "CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER";
    case 100: return "CUDA_ERROR_NO_DEVICE";
    case 304: return "CUDA_ERROR_OPERATING_SYSTEM";
    case 800: return "CUDA_ERROR_NOT_PERMITTED";
    case 999: return "CUDA_ERROR_UNKNOWN";
    default: return "CUDA_ERROR_UNRECOGNIZED";
    }
}

static const char *error_name(cu_result rc)
{
    const char *name = NULL;
    if (drv.cuGetErrorName(rc, &name) != MXD_CU_SUCCESS || !name)
        return known_name(rc);
    return name;
}

static const char *error_text(cu_result rc)
{
    const char *text = NULL;
    if (!drv.cuGetErrorString || drv.cuGetErrorString(rc, &text) != 0)
        return NULL;
    return text;
}

/* ---- Loading ------------------------------------------------------------ */

/* The driver's CUDA version (cuDriverGetVersion needs no cuInit), or 0. */
static int driver_version;

/* With cuGetProcAddress_v2, ask for each entry point at the CUDA version
 * whose ABI we declare, or at the driver's own version when that is older
 * (the driver refuses a newer one with CUDA_ERROR_INVALID_VALUE; the older
 * functions we may get have the signatures we declare); otherwise (or
 * when it fails) take the ABI-stable exported name: the _v2 variant where
 * one exists, else the plain one. */
static void *resolve(void *lib, cu_get_proc_address_fn get_proc,
                     const char *name, int version)
{
    void *fn = NULL;
    if (driver_version > 0 && version > driver_version)
        version = driver_version;
    if (get_proc && get_proc(name, &fn, version, 0, NULL) == MXD_CU_SUCCESS &&
        fn)
        return fn;
    char versioned[128];
    snprintf(versioned, sizeof versioned, "%s_v2", name);
    fn = dlsym(lib, versioned);
    return fn ? fn : dlsym(lib, name);
}

static bool api_resolve(void *lib, char *reason, size_t size)
{
    cu_get_proc_address_fn get_proc =
        (cu_get_proc_address_fn)(uintptr_t)dlsym(lib, "cuGetProcAddress_v2");
    cu_result (*get_version)(int *) =
        (cu_result(*)(int *))(uintptr_t)dlsym(lib, "cuDriverGetVersion");
    if (!get_version || get_version(&driver_version) != MXD_CU_SUCCESS)
        driver_version = 0;
#define RESOLVE(name, version, kind, ret, params)                              \
    drv.name =                                                                 \
        (ret(*) params)(uintptr_t)resolve(lib, get_proc, #name, version);      \
    if (!drv.name && MXD_##kind) {                                             \
        snprintf(reason, size, "the driver lacks the entry point %s", #name);  \
        return false;                                                          \
    }
    CUDA_ENTRY_POINTS(RESOLVE)
#undef RESOLVE
    return true;
}

static int api_driver_version(void)
{
    return driver_version;
}

/* ---- Devices and contexts ----------------------------------------------- */

static mxd_status api_open_device(int id, api_device *d, mxd_error *err)
{
    mxd_status st = check(drv.cuDeviceGet(&d->handle, id), "cuDeviceGet", err);
    if (st == MXD_OK)
        st = check(drv.cuDevicePrimaryCtxRetain(&d->context, d->handle),
                   "cuDevicePrimaryCtxRetain", err);
    return st;
}

/* Calls that act on "the current context" run between api_enter and
 * api_leave, which push and pop the device's primary context so that the
 * calling thread's own current context (PyTorch's, say) is left as it was.
 * Calls that take a stream or an event need no current context. */
static mxd_status api_enter(api_device *d, mxd_error *err)
{
    return check(drv.cuCtxPushCurrent(d->context), "cuCtxPushCurrent", err);
}

static void api_leave(api_device *d)
{
    cu_context popped;
    (void)d;
    drv.cuCtxPopCurrent(&popped);
}

/* Makes d's context current for the stream work that follows unless it is
 * already (queue_lock): true when it pushed it. */
static bool api_bind(api_device *d)
{
    cu_context current = NULL;
    if (drv.cuCtxGetCurrent(&current) == MXD_CU_SUCCESS &&
        current == d->context)
        return false;
    return drv.cuCtxPushCurrent(d->context) == MXD_CU_SUCCESS;
}

static void api_unbind(api_device *d)
{
    api_leave(d);
}

/* The largest pitch 2-D copies take (2**31 - 1 where the driver does not
 * say: every NVIDIA GPU so far). */
static int64_t api_max_pitch(api_device *d)
{
    int value = 0;
    if (drv.cuDeviceGetAttribute(&value, MXD_CU_DEVICE_ATTRIBUTE_MAX_PITCH,
                                 d->handle) != MXD_CU_SUCCESS ||
        value <= 0)
        value = INT32_MAX;
    return value;
}

static mxd_status api_device_architecture(api_device *d, char *buf, size_t size,
                                          mxd_error *err)
{
    int major, minor;
    mxd_status st =
        check(drv.cuDeviceGetAttribute(
                  &major, MXD_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                  d->handle),
              "cuDeviceGetAttribute", err);
    if (st == MXD_OK)
        st = check(drv.cuDeviceGetAttribute(
                       &minor, MXD_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
                       d->handle),
                   "cuDeviceGetAttribute", err);
    if (st == MXD_OK)
        snprintf(buf, size, "sm_%d%d", major, minor);
    return st;
}

/* Under api_enter(d): d's primary context may reach the memory of peer's
 * from now on (peer access is a property of the context, not the device).
 * The driver's result as it is (PEER_ACCESS_ALREADY_ENABLED included). */
static cu_result api_enable_peer(api_device *peer)
{
    return drv.cuCtxEnablePeerAccess(peer->context, 0);
}

/* ---- Mapped memory and stream memory operations ------------------------- */

static mxd_status api_host_device_ptr(uintptr_t *device, void *host,
                                      mxd_error *err)
{
    cu_deviceptr ptr = 0;
    mxd_status st = check(drv.cuMemHostGetDevicePointer(&ptr, host, 0),
                          "cuMemHostGetDevicePointer", err);
    *device = (uintptr_t)ptr;
    return st;
}

/* Whether cuStreamWaitValue64 works on this device: CUDA 12 reports it
 * under a new attribute, older drivers under the one CUDA 12 renamed _V1. */
static bool api_can_wait_value(api_device *d)
{
    int value = 0;
    if (!drv.cuStreamWaitValue64)
        return false;
    if (drv.cuDeviceGetAttribute(
            &value, MXD_CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS,
            d->handle) != MXD_CU_SUCCESS &&
        drv.cuDeviceGetAttribute(
            &value, MXD_CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS_V1,
            d->handle) != MXD_CU_SUCCESS)
        value = 0;
    return value != 0;
}

static mxd_status api_wait_value(gpu_stream s, uintptr_t device_ptr,
                                 uint64_t value, unsigned flags, mxd_error *err)
{
    if (!drv.cuStreamWaitValue64)
        return missing("cuStreamWaitValue64 (stream memory operations)", err);
    return check(drv.cuStreamWaitValue64(s, device_ptr, value, flags),
                 "cuStreamWaitValue64", err);
}

/* ---- Device memory, copies and fills ------------------------------------ */

/* Stream-ordered allocation needs the entry points and the device's
 * memory pools. */
static bool api_has_memory_pools(api_device *d)
{
    int value = 0;
    return drv.cuMemAllocAsync && drv.cuMemFreeAsync &&
           drv.cuDeviceGetAttribute(
               &value, MXD_CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED,
               d->handle) == MXD_CU_SUCCESS &&
           value != 0;
}

static mxd_status api_mem_alloc_async(uintptr_t *ptr, size_t bytes,
                                      gpu_stream s, mxd_error *err)
{
    cu_deviceptr p = 0;
    mxd_status st =
        check(drv.cuMemAllocAsync(&p, bytes, s), "cuMemAllocAsync", err);
    *ptr = (uintptr_t)p;
    return st;
}

static mxd_status api_mem_free_async(uintptr_t ptr, gpu_stream s,
                                     mxd_error *err)
{
    return check(drv.cuMemFreeAsync((cu_deviceptr)ptr, s), "cuMemFreeAsync",
                 err);
}

/* Under api_enter: allocates in the current context. */
static mxd_status api_mem_alloc(uintptr_t *ptr, size_t bytes, mxd_error *err)
{
    cu_deviceptr p = 0;
    mxd_status st = check(drv.cuMemAlloc(&p, bytes), "cuMemAlloc", err);
    *ptr = (uintptr_t)p;
    return st;
}

static mxd_status api_mem_free(uintptr_t ptr, mxd_error *err)
{
    return check(drv.cuMemFree((cu_deviceptr)ptr), "cuMemFree", err);
}

static mxd_status api_copy_htod(gpu_stream s, uintptr_t dst, const void *src,
                                size_t bytes, mxd_error *err)
{
    return check(drv.cuMemcpyHtoDAsync((cu_deviceptr)dst, src, bytes, s),
                 "cuMemcpyHtoDAsync", err);
}

static mxd_status api_copy_dtoh(gpu_stream s, void *dst, uintptr_t src,
                                size_t bytes, mxd_error *err)
{
    return check(drv.cuMemcpyDtoHAsync(dst, (cu_deviceptr)src, bytes, s),
                 "cuMemcpyDtoHAsync", err);
}

static mxd_status api_copy_dtod(gpu_stream s, uintptr_t dst, uintptr_t src,
                                size_t bytes, mxd_error *err)
{
    return check(
        drv.cuMemcpyDtoDAsync((cu_deviceptr)dst, (cu_deviceptr)src, bytes, s),
        "cuMemcpyDtoDAsync", err);
}

static mxd_status api_copy_peer(gpu_stream s, uintptr_t dst, api_device *dd,
                                uintptr_t src, api_device *sd, size_t bytes,
                                mxd_error *err)
{
    return check(drv.cuMemcpyPeerAsync((cu_deviceptr)dst, dd->context,
                                       (cu_deviceptr)src, sd->context, bytes,
                                       s),
                 "cuMemcpyPeerAsync", err);
}

static mxd_status api_copy_2d(gpu_stream s, const gpu_copy2d *c, mxd_error *err)
{
    cu_memcpy2d p = {
        .srcMemoryType =
            c->src_device ? MXD_CU_MEMORYTYPE_DEVICE : MXD_CU_MEMORYTYPE_HOST,
        .srcHost = c->src_device ? NULL : (const void *)c->src,
        .srcDevice = c->src_device ? (cu_deviceptr)c->src : 0,
        .srcPitch = c->src_pitch,
        .dstMemoryType =
            c->dst_device ? MXD_CU_MEMORYTYPE_DEVICE : MXD_CU_MEMORYTYPE_HOST,
        .dstHost = c->dst_device ? NULL : (void *)c->dst,
        .dstDevice = c->dst_device ? (cu_deviceptr)c->dst : 0,
        .dstPitch = c->dst_pitch,
        .WidthInBytes = c->width,
        .Height = c->height,
    };
    return check(drv.cuMemcpy2DAsync(&p, s), "cuMemcpy2DAsync", err);
}

/* count elements of 1, 2 or 4 bytes, each `value`. */
static mxd_status api_memset(gpu_stream s, uintptr_t dst, unsigned size,
                             uint32_t value, size_t count, mxd_error *err)
{
    cu_deviceptr p = (cu_deviceptr)dst;
    switch (size) {
    case 1:
        return check(drv.cuMemsetD8Async(p, (unsigned char)value, count, s),
                     "cuMemsetD8Async", err);
    case 2:
        return check(drv.cuMemsetD16Async(p, (unsigned short)value, count, s),
                     "cuMemsetD16Async", err);
    default:
        return check(drv.cuMemsetD32Async(p, value, count, s),
                     "cuMemsetD32Async", err);
    }
}

/* ---- Multicast objects (SymmetricPool) ---------------------------------- */

/* The entry points of memory mapped by hand and of multicast objects, and
 * the device's own answer (CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED). */
static bool api_multicast_supported(api_device *d)
{
    int value = 0;
    return drv.cuMemGetAllocationGranularity && drv.cuMemCreate &&
           drv.cuMemRelease && drv.cuMemAddressReserve &&
           drv.cuMemAddressFree && drv.cuMemMap && drv.cuMemUnmap &&
           drv.cuMemSetAccess && drv.cuMulticastGetGranularity &&
           drv.cuMulticastCreate && drv.cuMulticastAddDevice &&
           drv.cuMulticastBindMem &&
           drv.cuDeviceGetAttribute(&value,
                                    MXD_CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED,
                                    d->handle) == MXD_CU_SUCCESS &&
           value != 0;
}

static cu_mem_alloc_prop device_memory_prop(const api_device *d)
{
    return (cu_mem_alloc_prop){
        .type = MXD_CU_MEM_ALLOCATION_TYPE_PINNED,
        .location = {MXD_CU_MEM_LOCATION_TYPE_DEVICE, d->handle},
    };
}

/* `bytes` rounded up to what both a multicast object of `n` devices and
 * each device's memory are allocated in. */
static mxd_status symmetric_size(api_device *const *devs, int n, size_t bytes,
                                 size_t *size, mxd_error *err)
{
    cu_multicast_prop mc = {.numDevices = (unsigned)n, .size = bytes};
    size_t unit = 1, g = 0;
    mxd_status st =
        check(drv.cuMulticastGetGranularity(
                  &g, &mc, MXD_CU_MULTICAST_GRANULARITY_RECOMMENDED),
              "cuMulticastGetGranularity", err);
    unit = g > unit ? g : unit;
    for (int i = 0; st == MXD_OK && i < n; i++) {
        cu_mem_alloc_prop prop = device_memory_prop(devs[i]);
        st = check(drv.cuMemGetAllocationGranularity(
                       &g, &prop, MXD_CU_MEM_ALLOC_GRANULARITY_MINIMUM),
                   "cuMemGetAllocationGranularity", err);
        /* Granularities are powers of two: the largest is a multiple of
         * the others. */
        unit = g > unit ? g : unit;
    }
    if (st == MXD_OK && bytes > SIZE_MAX - unit)
        return mxd_fail(err, MXD_INVALID, "%zu bytes overflow", bytes);
    *size = (bytes + unit - 1) / unit * unit;
    return st;
}

/* Reserves an address range of `size` on `d`, maps `handle` there and lets
 * `d` read and write it. */
static mxd_status map_on(api_device *d, cu_mem_handle handle, size_t size,
                         uintptr_t *out, mxd_error *err)
{
    cu_deviceptr ptr = 0;
    cu_mem_access_desc access = {{MXD_CU_MEM_LOCATION_TYPE_DEVICE, d->handle},
                                 MXD_CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    mxd_status st = check(drv.cuMemAddressReserve(&ptr, size, 0, 0, 0),
                          "cuMemAddressReserve", err);
    if (st != MXD_OK)
        return st;
    st = check(drv.cuMemMap(ptr, size, 0, handle, 0), "cuMemMap", err);
    if (st == MXD_OK)
        st = check(drv.cuMemSetAccess(ptr, size, &access, 1), "cuMemSetAccess",
                   err);
    if (st == MXD_OK) {
        *out = (uintptr_t)ptr;
        return MXD_OK;
    }
    drv.cuMemUnmap(ptr, size); /* fails harmlessly when nothing is mapped */
    drv.cuMemAddressFree(ptr, size);
    return st;
}

/* What a symmetric allocation made before it failed, given back. */
typedef struct symmetric_parts {
    cu_mem_handle mc, *memory;
    uintptr_t *unicast, *multicast;
    size_t size;
    int n;
} symmetric_parts;

static void symmetric_undo(const symmetric_parts *p)
{
    for (int i = 0; i < p->n; i++) {
        uintptr_t *ptrs[2] = {&p->unicast[i], &p->multicast[i]};
        for (int k = 0; k < 2; k++)
            if (*ptrs[k] != 0) {
                drv.cuMemUnmap((cu_deviceptr)*ptrs[k], p->size);
                drv.cuMemAddressFree((cu_deviceptr)*ptrs[k], p->size);
                *ptrs[k] = 0;
            }
        if (p->memory[i] != 0)
            drv.cuMemRelease(p->memory[i]);
    }
    if (p->mc != 0)
        drv.cuMemRelease(p->mc); /* a multicast handle is released so too */
}

/* One multicast object over `n` devices, each binding `bytes` (rounded up,
 * *size) of its own memory to it; unicast[i] and multicast[i] are where
 * device i reaches its own memory and the multicast object.  As NCCL and
 * PyTorch's symmetric memory build it: every device is added to the
 * object before any memory is bound. */
static mxd_status api_symmetric_alloc(api_device *const *devs, int n,
                                      size_t bytes, size_t *size,
                                      uintptr_t *unicast, uintptr_t *multicast,
                                      mxd_error *err)
{
    cu_mem_handle memory[MXD_MAX_SYMMETRIC_DEVICES] = {0};
    symmetric_parts parts = {0, memory, unicast, multicast, 0, n};
    mxd_status st = symmetric_size(devs, n, bytes, &parts.size, err);
    cu_multicast_prop prop = {.numDevices = (unsigned)n, .size = parts.size};
    if (st == MXD_OK)
        st = check(drv.cuMulticastCreate(&parts.mc, &prop), "cuMulticastCreate",
                   err);
    for (int i = 0; st == MXD_OK && i < n; i++)
        st = check(drv.cuMulticastAddDevice(parts.mc, devs[i]->handle),
                   "cuMulticastAddDevice", err);
    for (int i = 0; st == MXD_OK && i < n; i++) {
        cu_mem_alloc_prop mem = device_memory_prop(devs[i]);
        st = check(drv.cuMemCreate(&memory[i], parts.size, &mem, 0),
                   "cuMemCreate", err);
        if (st == MXD_OK)
            st = check(drv.cuMulticastBindMem(parts.mc, 0, memory[i], 0,
                                              parts.size, 0),
                       "cuMulticastBindMem", err);
        if (st == MXD_OK)
            st = map_on(devs[i], memory[i], parts.size, &unicast[i], err);
        if (st == MXD_OK)
            st = map_on(devs[i], parts.mc, parts.size, &multicast[i], err);
    }
    if (st != MXD_OK) {
        symmetric_undo(&parts);
        return st;
    }
    *size = parts.size;
    return MXD_OK;
}

#include "gpu_backend.inc"
