/* The CUDA backend: the CUDA driver API (libcuda.so.1) under the shared GPU
 * backend of gpu_backend.inc.  This file holds what is CUDA's own: loading
 * the entry points (cuGetProcAddress with explicit versions, else dlsym of
 * the ABI-stable names), primary contexts, error names and argument
 * shapes.  Every CUDA call of the project is in this file. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "cuda_abi.h"

#define GPU_API "cuda"
#define GPU_BACKEND mxd_cuda_backend
#define GPU_PROBE mxd_cuda_probe

typedef cu_stream gpu_stream;
typedef cu_event gpu_event;

typedef struct api_device {
    cu_device device;
    cu_context context; /* the primary context, retained for good */
} api_device;

#define DECLARE_ENTRY(name, version, kind, ret, params) ret(*name) params;
static struct {
    CUDA_ENTRY_POINTS(DECLARE_ENTRY)
} drv;

/* ---- Results ------------------------------------------------------------- */

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

static mxd_status driver_error(cu_result rc, const char *call, mxd_error *err)
{
    const char *text = NULL;
    if (!drv.cuGetErrorString || drv.cuGetErrorString(rc, &text) != 0)
        text = NULL;
    const char *name = error_name(rc);
    return mxd_fail_driver(err, (int)rc, name, "%s failed: %s (%u)%s%s", call,
                           name, rc, text ? ": " : "", text ? text : "");
}

/* MXD_OK, or a driver error naming `call`. */
static mxd_status check(cu_result rc, const char *call, mxd_error *err)
{
    return rc == MXD_CU_SUCCESS ? MXD_OK : driver_error(rc, call, err);
}

/* For queries: MXD_TIMEOUT means "not ready yet". */
static mxd_status check_query(cu_result rc, const char *call, mxd_error *err)
{
    return rc == MXD_CU_ERROR_NOT_READY ? MXD_TIMEOUT : check(rc, call, err);
}

static mxd_status missing(const char *what, mxd_error *err)
{
    return mxd_fail(err, MXD_UNAVAILABLE,
                    "the CUDA driver in use lacks %s, which this operation "
                    "needs",
                    what);
}

/* ---- Loading ---------------------------------------------------------------
 */

/* With cuGetProcAddress_v2, ask for each entry point at the CUDA version
 * whose ABI we declare; otherwise (or when it fails) take the ABI-stable
 * exported name: the _v2 variant where one exists, else the plain one. */
static void *resolve(void *lib, cu_get_proc_address_fn get_proc,
                     const char *name, int version)
{
    void *fn = NULL;
    if (get_proc && get_proc(name, &fn, version, 0, NULL) == MXD_CU_SUCCESS &&
        fn)
        return fn;
    char versioned[128];
    snprintf(versioned, sizeof versioned, "%s_v2", name);
    fn = dlsym(lib, versioned);
    return fn ? fn : dlsym(lib, name);
}

static bool resolve_all(void *lib, char *reason, size_t size)
{
    cu_get_proc_address_fn get_proc =
        (cu_get_proc_address_fn)(uintptr_t)dlsym(lib, "cuGetProcAddress_v2");
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

static bool api_load(void *lib, int *device_count, char *reason, size_t size)
{
    if (!resolve_all(lib, reason, size))
        return false;
    const char *call = "cuInit";
    cu_result rc = drv.cuInit(0);
    if (rc == MXD_CU_SUCCESS) {
        call = "cuDeviceGetCount";
        rc = drv.cuDeviceGetCount(device_count);
    }
    if (rc != MXD_CU_SUCCESS) {
        snprintf(reason, size, "%s failed: %s (%u)", call, error_name(rc), rc);
        *device_count = 0;
        return false;
    }
    return true;
}

/* ---- Devices and contexts ------------------------------------------------ */

static mxd_status api_open_device(int id, api_device *d, mxd_error *err)
{
    mxd_status st = check(drv.cuDeviceGet(&d->device, id), "cuDeviceGet", err);
    if (st == MXD_OK)
        st = check(drv.cuDevicePrimaryCtxRetain(&d->context, d->device),
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

static int attribute(const api_device *d, cu_device_attribute attrib,
                     int fallback)
{
    int value;
    return drv.cuDeviceGetAttribute(&value, attrib, d->device) == MXD_CU_SUCCESS
               ? value
               : fallback;
}

static bool api_device_integrated(api_device *d)
{
    return attribute(d, MXD_CU_DEVICE_ATTRIBUTE_INTEGRATED, 0) != 0;
}

static mxd_status api_device_architecture(api_device *d, char *buf, size_t size,
                                          mxd_error *err)
{
    int major, minor;
    mxd_status st =
        check(drv.cuDeviceGetAttribute(
                  &major, MXD_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                  d->device),
              "cuDeviceGetAttribute", err);
    if (st == MXD_OK)
        st = check(drv.cuDeviceGetAttribute(
                       &minor, MXD_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
                       d->device),
                   "cuDeviceGetAttribute", err);
    if (st == MXD_OK)
        snprintf(buf, size, "sm_%d%d", major, minor);
    return st;
}

static mxd_status api_device_name(api_device *d, char *buf, size_t size,
                                  mxd_error *err)
{
    return check(drv.cuDeviceGetName(buf, (int)size, d->device),
                 "cuDeviceGetName", err);
}

static uint64_t graph_memory(const api_device *d, cu_graph_mem_attribute attr)
{
    uint64_t value = 0;
    drv.cuDeviceGetGraphMemAttribute(d->device, attr, &value);
    return value;
}

static mxd_status api_memory(api_device *d, mxd_memory_stats *out,
                             mxd_error *err)
{
    size_t free_bytes, total_bytes;
    mxd_status st =
        check(drv.cuMemGetInfo(&free_bytes, &total_bytes), "cuMemGetInfo", err);
    if (st != MXD_OK)
        return st;
    out->free_memory = free_bytes;
    out->total_memory = total_bytes;
    out->has_graph_memory = drv.cuDeviceGetGraphMemAttribute != NULL;
    if (out->has_graph_memory) {
        out->graph_mem_reserved =
            graph_memory(d, MXD_CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT);
        out->graph_mem_used =
            graph_memory(d, MXD_CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT);
    }
    return MXD_OK;
}

static mxd_status api_can_access(api_device *d, api_device *peer, bool *out,
                                 mxd_error *err)
{
    int can = 0;
    mxd_status st =
        check(drv.cuDeviceCanAccessPeer(&can, d->device, peer->device),
              "cuDeviceCanAccessPeer", err);
    *out = st == MXD_OK && can;
    return st;
}

/* ---- Streams and events -----------------------------------------------------
 */

static mxd_status api_stream_create(gpu_stream *s, mxd_error *err)
{
    /* Non-blocking: never synchronizes with the legacy NULL stream. */
    return check(drv.cuStreamCreate(s, MXD_CU_STREAM_NON_BLOCKING),
                 "cuStreamCreate", err);
}

static void api_stream_destroy(gpu_stream s)
{
    drv.cuStreamDestroy(s);
}

static mxd_status api_stream_query(gpu_stream s, mxd_error *err)
{
    return check_query(drv.cuStreamQuery(s), "cuStreamQuery", err);
}

static mxd_status api_stream_wait_event(gpu_stream s, gpu_event e,
                                        mxd_error *err)
{
    return check(drv.cuStreamWaitEvent(s, e, 0), "cuStreamWaitEvent", err);
}

static mxd_status api_event_create(gpu_event *e, bool timing, mxd_error *err)
{
    return check(drv.cuEventCreate(e, timing ? 0 : MXD_CU_EVENT_DISABLE_TIMING),
                 "cuEventCreate", err);
}

static void api_event_destroy(gpu_event e)
{
    drv.cuEventDestroy(e);
}

static mxd_status api_event_record(gpu_event e, gpu_stream s, mxd_error *err)
{
    return check(drv.cuEventRecord(e, s), "cuEventRecord", err);
}

static mxd_status api_event_query(gpu_event e, mxd_error *err)
{
    return check_query(drv.cuEventQuery(e), "cuEventQuery", err);
}

static mxd_status api_event_elapsed(float *ms, gpu_event a, gpu_event b,
                                    mxd_error *err)
{
    return check(drv.cuEventElapsedTime(ms, a, b), "cuEventElapsedTime", err);
}

/* ---- Host memory, stream memory operations, host functions ----------------
 */

static mxd_status api_host_alloc(void **host, size_t size, mxd_error *err)
{
    return check(drv.cuMemHostAlloc(host, size,
                                    MXD_CU_MEMHOSTALLOC_PORTABLE |
                                        MXD_CU_MEMHOSTALLOC_DEVICEMAP),
                 "cuMemHostAlloc", err);
}

static mxd_status api_host_device_ptr(uintptr_t *device, void *host,
                                      mxd_error *err)
{
    cu_deviceptr ptr = 0;
    mxd_status st = check(drv.cuMemHostGetDevicePointer(&ptr, host, 0),
                          "cuMemHostGetDevicePointer", err);
    *device = (uintptr_t)ptr;
    return st;
}

static void api_host_free(void *host)
{
    drv.cuMemFreeHost(host);
}

static mxd_status api_wait_value_eq(gpu_stream s, uintptr_t device_ptr,
                                    uint64_t value, mxd_error *err)
{
    if (!drv.cuStreamWaitValue64)
        return missing("cuStreamWaitValue64 (stream memory operations)", err);
    return check(drv.cuStreamWaitValue64(s, device_ptr, value,
                                         MXD_CU_STREAM_WAIT_VALUE_EQ),
                 "cuStreamWaitValue64", err);
}

/* cuStreamAddCallback, for drivers older than cuLaunchHostFunc: the same
 * ordering, with a callback signature of its own. */
typedef struct callback_call {
    void (*fn)(void *);
    void *data;
} callback_call;

static void callback_adapter(cu_stream s, cu_result status, void *data)
{
    (void)s;
    (void)status; /* the work before it failed: the stream reports that */
    callback_call call = *(callback_call *)data;
    free(data);
    call.fn(call.data);
}

static mxd_status add_callback(gpu_stream s, void (*fn)(void *), void *data,
                               mxd_error *err)
{
    callback_call *call = malloc(sizeof *call);
    if (!call)
        return mxd_fail(err, MXD_NO_MEMORY, "out of memory");
    *call = (callback_call){fn, data};
    mxd_status st = check(drv.cuStreamAddCallback(s, callback_adapter, call, 0),
                          "cuStreamAddCallback", err);
    if (st != MXD_OK)
        free(call);
    return st;
}

/* The user's host functions: cuLaunchHostFunc, else the older callback. */
static mxd_status api_launch_host_fn(gpu_stream s, void (*fn)(void *),
                                     void *data, mxd_error *err)
{
    if (drv.cuLaunchHostFunc)
        return check(drv.cuLaunchHostFunc(s, fn, data), "cuLaunchHostFunc",
                     err);
    if (!drv.cuStreamAddCallback)
        return missing("cuLaunchHostFunc and cuStreamAddCallback", err);
    return add_callback(s, fn, data, err);
}

/* Our own bookkeeping behind a stream's work (wakers, releases): the
 * callback first, because the driver still calls it after an asynchronous
 * error, where it skips cuLaunchHostFunc. */
static mxd_status api_launch_cleanup(gpu_stream s, void (*fn)(void *),
                                     void *data, mxd_error *err)
{
    if (drv.cuStreamAddCallback)
        return add_callback(s, fn, data, err);
    return api_launch_host_fn(s, fn, data, err);
}

#include "gpu_backend.inc"
