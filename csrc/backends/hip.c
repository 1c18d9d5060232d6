/* The HIP backend: the HIP runtime (libamdhip64.so) under the shared GPU
 * backend of gpu_backend.inc.  This file holds what is HIP's own: loading
 * the entry points, the runtime's per-thread current device instead of
 * contexts, gcnArchName, and the void* device pointers and mask of
 * hipStreamWaitValue64.  Every HIP entry point the project calls is named
 * in this file. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "gpu_api.h"
#include "hip_abi.h"

#define GPU_API "hip"
#define GPU_DRIVER "HIP runtime"
#define GPU_BACKEND mxd_hip_backend
#define GPU_PROBE mxd_hip_probe

typedef hip_stream gpu_stream;
typedef hip_event gpu_event;
typedef hip_result gpu_result;
typedef hip_mempool gpu_mempool;
typedef hip_mem_access_desc gpu_mem_access_desc;
typedef hip_graph gpu_graph;
typedef hip_graph_exec gpu_graph_exec;

typedef struct api_device {
    int handle; /* HIP names devices by their ordinal */
} api_device;

#define DECLARE_ENTRY(name, kind, ret, params) ret(*name) params;
static struct {
    HIP_ENTRY_POINTS(DECLARE_ENTRY)
} drv;

/* Defined in gpu_backend.inc (included last): a result turned into an
 * mxd_status naming the entry point, and a missing-feature error. */
static mxd_status check(gpu_result rc, const char *call, mxd_error *err);
static mxd_status missing(const char *what, mxd_error *err);

/* The entry point of each operation of gpu_backend.inc. */
#define API_init hipInit
#define API_device_count hipGetDeviceCount
#define API_stream_create hipStreamCreateWithFlags
#define API_stream_destroy hipStreamDestroy
#define API_stream_query hipStreamQuery
#define API_stream_wait_event hipStreamWaitEvent
#define API_event_create hipEventCreateWithFlags
#define API_event_destroy hipEventDestroy
#define API_event_record hipEventRecord
#define API_event_query hipEventQuery
#define API_event_synchronize hipEventSynchronize
#define API_event_elapsed hipEventElapsedTime
#define API_host_alloc hipHostMalloc
#define API_device_attribute hipDeviceGetAttribute
#define API_device_name hipDeviceGetName
#define API_mem_info hipMemGetInfo
#define API_graph_mem_attribute hipDeviceGetGraphMemAttribute
#define API_can_access_peer hipDeviceCanAccessPeer
#define API_launch_host_fn hipLaunchHostFunc
#define API_add_callback hipStreamAddCallback
#define API_wait_value hipStreamWaitValue64
#define API_enable_peer hipDeviceEnablePeerAccess
#define API_default_mem_pool hipDeviceGetDefaultMemPool
#define API_mem_pool_set_attribute hipMemPoolSetAttribute
#define API_mem_pool_set_access hipMemPoolSetAccess
#define API_begin_capture hipStreamBeginCapture
#define API_end_capture hipStreamEndCapture
#define API_graph_instantiate hipGraphInstantiateWithFlags
#define API_graph_launch hipGraphLaunch
#define API_graph_exec_destroy hipGraphExecDestroy
#define API_graph_destroy hipGraphDestroy
#define API_CAPTURE_MODE_RELAXED MXD_HIP_STREAM_CAPTURE_MODE_RELAXED
#define API_MEM_OPS_ATTRIBUTE "hipDeviceAttributeCanUseStreamWaitValue"
/* api_wait_value's conditions: equal; at least (wrap-safe:
 * (int64_t)(*addr - value) >= 0). */
#define API_WAIT_EQ MXD_HIP_STREAM_WAIT_VALUE_EQ
#define API_WAIT_GEQ MXD_HIP_STREAM_WAIT_VALUE_GTE

/* The entry points copies and fills use, by name (the launch trace). */
#define API_NAME_HTOD "hipMemcpyHtoDAsync"
#define API_NAME_DTOH "hipMemcpyDtoHAsync"
#define API_NAME_DTOD "hipMemcpyDtoDAsync"
#define API_NAME_PEER "hipMemcpyPeerAsync"
#define API_NAME_2D "hipMemcpy2DAsync"
#define API_NAME_MEMSET(width)                                                 \
    ((width) == 1   ? "hipMemsetD8Async"                                       \
     : (width) == 2 ? "hipMemsetD16Async"                                      \
                    : "hipMemsetD32Async")

#define API_SUCCESS MXD_HIP_SUCCESS
#define API_NOT_READY MXD_HIP_ERROR_NOT_READY
#define API_STREAM_NON_BLOCKING MXD_HIP_STREAM_NON_BLOCKING
#define API_EVENT_BLOCKING_SYNC MXD_HIP_EVENT_BLOCKING_SYNC
#define API_EVENT_DISABLE_TIMING MXD_HIP_EVENT_DISABLE_TIMING
#define API_HOST_ALLOC_MAPPED                                                  \
    (MXD_HIP_HOST_MALLOC_PORTABLE | MXD_HIP_HOST_MALLOC_MAPPED)
#define API_ATTRIBUTE_INTEGRATED MXD_HIP_DEVICE_ATTRIBUTE_INTEGRATED
#define API_GRAPH_MEM_USED MXD_HIP_GRAPH_MEM_ATTR_USED_MEM_CURRENT
#define API_GRAPH_MEM_RESERVED MXD_HIP_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT
#define API_PEER_ACCESS_ALREADY_ENABLED                                        \
    MXD_HIP_ERROR_PEER_ACCESS_ALREADY_ENABLED
#define API_MEMPOOL_ATTR_RELEASE_THRESHOLD                                     \
    MXD_HIP_MEMPOOL_ATTR_RELEASE_THRESHOLD
#define API_MEM_LOCATION_TYPE_DEVICE MXD_HIP_MEM_LOCATION_TYPE_DEVICE
#define API_MEM_ACCESS_READWRITE MXD_HIP_MEM_ACCESS_FLAGS_PROT_READWRITE

/* ---- Results ------------------------------------------------------------ */

static const char *error_name(hip_result rc)
{
    const char *name = drv.hipGetErrorName(rc);
    return name ? name : "hipErrorUnknown";
}

static const char *error_text(hip_result rc)
{
    return drv.hipGetErrorString ? drv.hipGetErrorString(rc) : NULL;
}

/* ---- Loading ------------------------------------------------------------ */

/* ROCm 6 renamed the ABI of hipGetDeviceProperties and kept the ROCm 5
 * layout we declare as hipGetDevicePropertiesR0000: prefer that name. */
static void *resolve(void *lib, const char *name)
{
    void *fn = strcmp(name, "hipGetDeviceProperties") == 0
                   ? dlsym(lib, "hipGetDevicePropertiesR0000")
                   : NULL;
    return fn ? fn : dlsym(lib, name);
}

static bool api_resolve(void *lib, char *reason, size_t size)
{
#define RESOLVE(name, kind, ret, params)                                       \
    drv.name = (ret(*) params)(uintptr_t)resolve(lib, #name);                  \
    if (!drv.name && MXD_##kind) {                                             \
        snprintf(reason, size, "the runtime lacks the entry point %s", #name); \
        return false;                                                          \
    }
    HIP_ENTRY_POINTS(RESOLVE)
#undef RESOLVE
    return true;
}

/* The HIP runtime has no CUDA-style driver version to report. */
static int api_driver_version(void)
{
    return 0;
}

/* ---- Devices ------------------------------------------------------------ */

static mxd_status api_open_device(int id, api_device *d, mxd_error *err)
{
    (void)err;
    d->handle = id;
    return MXD_OK;
}

/* HIP's creation calls act on the calling thread's current device: switch
 * to ours and back, leaving the caller's choice as it was. */
static _Thread_local int entered_from;

static mxd_status api_enter(api_device *d, mxd_error *err)
{
    mxd_status st = check(drv.hipGetDevice(&entered_from), "hipGetDevice", err);
    if (st == MXD_OK && entered_from != d->handle)
        st = check(drv.hipSetDevice(d->handle), "hipSetDevice", err);
    return st;
}

static void api_leave(api_device *d)
{
    if (entered_from != d->handle)
        drv.hipSetDevice(entered_from);
}

/* HIP's stream work runs on the stream's device whatever device is
 * current: queue_lock needs nothing. */
static bool api_bind(api_device *d)
{
    (void)d;
    return false;
}

static void api_unbind(api_device *d)
{
    (void)d;
}

/* The largest pitch 2-D copies take (2**31 - 1 where the runtime does not
 * say). */
static int64_t api_max_pitch(api_device *d)
{
    int value = 0;
    if (drv.hipDeviceGetAttribute(&value, MXD_HIP_DEVICE_ATTRIBUTE_MAX_PITCH,
                                  d->handle) != MXD_HIP_SUCCESS ||
        value <= 0)
        value = INT32_MAX;
    return value;
}

static mxd_status api_device_architecture(api_device *d, char *buf, size_t size,
                                          mxd_error *err)
{
    /* The runtime writes its whole (version-dependent) structure: give it
     * room beyond the prefix we declare. */
    union {
        hip_device_prop_r0000 prop;
        char room[HIP_DEVICE_PROP_BUFFER];
    } *props = calloc(1, sizeof *props);
    if (!props)
        return mxd_fail(err, MXD_NO_MEMORY, "out of memory");
    mxd_status st =
        check(drv.hipGetDeviceProperties((struct hipDeviceProp_t *)&props->prop,
                                         d->handle),
              "hipGetDeviceProperties", err);
    if (st == MXD_OK) {
        /* "gfx90a:sramecc+:xnack-": the architecture is before the ':'. */
        char *arch = props->prop.gcnArchName;
        arch[sizeof props->prop.gcnArchName - 1] = '\0';
        arch[strcspn(arch, ":")] = '\0';
        snprintf(buf, size, "%s", arch);
    }
    free(props);
    return st;
}

/* Under api_enter(d): the current device, d, may reach peer's memory from
 * now on.  The runtime's result as it is (PeerAccessAlreadyEnabled
 * included). */
static hip_result api_enable_peer(api_device *peer)
{
    return drv.hipDeviceEnablePeerAccess(peer->handle, 0);
}

/* ---- Mapped memory and stream memory operations ------------------------- */

static mxd_status api_host_device_ptr(uintptr_t *device, void *host,
                                      mxd_error *err)
{
    void *ptr = NULL;
    mxd_status st = check(drv.hipHostGetDevicePointer(&ptr, host, 0),
                          "hipHostGetDevicePointer", err);
    *device = (uintptr_t)ptr;
    return st;
}

static bool api_can_wait_value(api_device *d)
{
    int value = 0;
    return drv.hipStreamWaitValue64 &&
           drv.hipDeviceGetAttribute(
               &value, MXD_HIP_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE,
               d->handle) == MXD_HIP_SUCCESS &&
           value != 0;
}

static mxd_status api_wait_value(gpu_stream s, uintptr_t device_ptr,
                                 uint64_t value, unsigned flags, mxd_error *err)
{
    if (!drv.hipStreamWaitValue64)
        return missing("hipStreamWaitValue64 (stream memory operations)", err);
    return check(drv.hipStreamWaitValue64(s, (void *)device_ptr, value, flags,
                                          UINT64_MAX),
                 "hipStreamWaitValue64", err);
}

/* ---- Device memory, copies and fills ------------------------------------ */

static bool api_has_memory_pools(api_device *d)
{
    int value = 0;
    return drv.hipMallocAsync && drv.hipFreeAsync &&
           drv.hipDeviceGetAttribute(
               &value, MXD_HIP_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED,
               d->handle) == MXD_HIP_SUCCESS &&
           value != 0;
}

static mxd_status api_mem_alloc_async(uintptr_t *ptr, size_t bytes,
                                      gpu_stream s, mxd_error *err)
{
    void *p = NULL;
    mxd_status st =
        check(drv.hipMallocAsync(&p, bytes, s), "hipMallocAsync", err);
    *ptr = (uintptr_t)p;
    return st;
}

static mxd_status api_mem_free_async(uintptr_t ptr, gpu_stream s,
                                     mxd_error *err)
{
    return check(drv.hipFreeAsync((void *)ptr, s), "hipFreeAsync", err);
}

/* Under api_enter: allocates on the current device. */
static mxd_status api_mem_alloc(uintptr_t *ptr, size_t bytes, mxd_error *err)
{
    void *p = NULL;
    mxd_status st = check(drv.hipMalloc(&p, bytes), "hipMalloc", err);
    *ptr = (uintptr_t)p;
    return st;
}

static mxd_status api_mem_free(uintptr_t ptr, mxd_error *err)
{
    return check(drv.hipFree((void *)ptr), "hipFree", err);
}

static mxd_status api_copy_htod(gpu_stream s, uintptr_t dst, const void *src,
                                size_t bytes, mxd_error *err)
{
    return check(drv.hipMemcpyHtoDAsync((void *)dst, (void *)src, bytes, s),
                 "hipMemcpyHtoDAsync", err);
}

static mxd_status api_copy_dtoh(gpu_stream s, void *dst, uintptr_t src,
                                size_t bytes, mxd_error *err)
{
    return check(drv.hipMemcpyDtoHAsync(dst, (void *)src, bytes, s),
                 "hipMemcpyDtoHAsync", err);
}

static mxd_status api_copy_dtod(gpu_stream s, uintptr_t dst, uintptr_t src,
                                size_t bytes, mxd_error *err)
{
    return check(drv.hipMemcpyDtoDAsync((void *)dst, (void *)src, bytes, s),
                 "hipMemcpyDtoDAsync", err);
}

static mxd_status api_copy_peer(gpu_stream s, uintptr_t dst, api_device *dd,
                                uintptr_t src, api_device *sd, size_t bytes,
                                mxd_error *err)
{
    return check(drv.hipMemcpyPeerAsync((void *)dst, dd->handle,
                                        (const void *)src, sd->handle, bytes,
                                        s),
                 "hipMemcpyPeerAsync", err);
}

static mxd_status api_copy_2d(gpu_stream s, const gpu_copy2d *c, mxd_error *err)
{
    hip_memcpy_kind kind =
        c->src_device ? (c->dst_device ? MXD_HIP_MEMCPY_DEVICE_TO_DEVICE
                                       : MXD_HIP_MEMCPY_DEVICE_TO_HOST)
                      : MXD_HIP_MEMCPY_HOST_TO_DEVICE;
    return check(drv.hipMemcpy2DAsync((void *)c->dst, c->dst_pitch,
                                      (const void *)c->src, c->src_pitch,
                                      c->width, c->height, kind, s),
                 "hipMemcpy2DAsync", err);
}

static mxd_status api_memset(gpu_stream s, uintptr_t dst, unsigned size,
                             uint32_t value, size_t count, mxd_error *err)
{
    void *p = (void *)dst;
    switch (size) {
    case 1:
        return check(drv.hipMemsetD8Async(p, (unsigned char)value, count, s),
                     "hipMemsetD8Async", err);
    case 2:
        return check(drv.hipMemsetD16Async(p, (unsigned short)value, count, s),
                     "hipMemsetD16Async", err);
    default:
        return check(drv.hipMemsetD32Async(p, (int)value, count, s),
                     "hipMemsetD32Async", err);
    }
}

/* ---- Multicast objects (SymmetricPool) ---------------------------------- */

/* HIP has no multicast objects (CUDA's cuMulticast* have no HIP twins). */
static bool api_multicast_supported(api_device *d)
{
    (void)d;
    return false;
}

static mxd_status api_symmetric_alloc(api_device *const *devs, int n,
                                      size_t bytes, size_t *size,
                                      uintptr_t *unicast, uintptr_t *multicast,
                                      mxd_error *err)
{
    (void)devs, (void)n, (void)bytes, (void)size, (void)unicast;
    (void)multicast;
    return missing("multicast objects (HIP has none)", err);
}

#include "gpu_backend.inc"
