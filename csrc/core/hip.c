/* The HIP backend: the HIP runtime (libamdhip64.so) under the shared GPU
 * backend of gpu_backend.inc.  This file holds what is HIP's own: the
 * runtime's per-thread current device instead of contexts, its error
 * names, gcnArchName, and the mask of hipStreamWaitValue64.  Every HIP call
 * of the project is in this file. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "hip_abi.h"

#define GPU_API "hip"
#define GPU_BACKEND mxd_hip_backend
#define GPU_PROBE mxd_hip_probe

typedef hip_stream gpu_stream;
typedef hip_event gpu_event;

typedef struct api_device {
    int id;
} api_device;

#define DECLARE_ENTRY(name, kind, ret, params) ret(*name) params;
static struct {
    HIP_ENTRY_POINTS(DECLARE_ENTRY)
} drv;

/* ---- Results ------------------------------------------------------------- */

static const char *error_name(hip_result rc)
{
    const char *name = drv.hipGetErrorName(rc);
    return name ? name : "hipErrorUnknown";
}

static mxd_status check(hip_result rc, const char *call, mxd_error *err)
{
    if (rc == MXD_HIP_SUCCESS)
        return MXD_OK;
    const char *text = drv.hipGetErrorString ? drv.hipGetErrorString(rc) : 0;
    const char *name = error_name(rc);
    return mxd_fail_driver(err, (int)rc, name, "%s failed: %s (%u)%s%s", call,
                           name, rc, text ? ": " : "", text ? text : "");
}

/* For queries: MXD_TIMEOUT means "not ready yet". */
static mxd_status check_query(hip_result rc, const char *call, mxd_error *err)
{
    return rc == MXD_HIP_ERROR_NOT_READY ? MXD_TIMEOUT : check(rc, call, err);
}

static mxd_status missing(const char *what, mxd_error *err)
{
    return mxd_fail(err, MXD_UNAVAILABLE,
                    "the HIP runtime in use lacks %s, which this operation "
                    "needs",
                    what);
}

/* ---- Loading ---------------------------------------------------------------
 */

/* ROCm 6 renamed the ABI of hipGetDeviceProperties and kept the ROCm 5
 * layout we declare as hipGetDevicePropertiesR0000: prefer that name. */
static void *resolve(void *lib, const char *name)
{
    char legacy[128];
    snprintf(legacy, sizeof legacy, "%sR0000", name);
    void *fn =
        strcmp(name, "hipGetDeviceProperties") == 0 ? dlsym(lib, legacy) : NULL;
    return fn ? fn : dlsym(lib, name);
}

static bool api_load(void *lib, int *device_count, char *reason, size_t size)
{
#define RESOLVE(name, kind, ret, params)                                       \
    drv.name = (ret(*) params)(uintptr_t)resolve(lib, #name);                  \
    if (!drv.name && MXD_##kind) {                                             \
        snprintf(reason, size, "the runtime lacks the entry point %s", #name); \
        return false;                                                          \
    }
    HIP_ENTRY_POINTS(RESOLVE)
#undef RESOLVE
    const char *call = "hipInit";
    hip_result rc = drv.hipInit(0);
    if (rc == MXD_HIP_SUCCESS) {
        call = "hipGetDeviceCount";
        rc = drv.hipGetDeviceCount(device_count);
    }
    if (rc != MXD_HIP_SUCCESS) {
        snprintf(reason, size, "%s failed: %s (%u)", call, error_name(rc), rc);
        *device_count = 0;
        return false;
    }
    return true;
}

/* ---- Devices
 * ------------------------------------------------------------------ */

static mxd_status api_open_device(int id, api_device *d, mxd_error *err)
{
    (void)err;
    d->id = id;
    return MXD_OK;
}

/* HIP's creation calls act on the calling thread's current device: switch
 * to ours and back, leaving the caller's choice as it was. */
static _Thread_local int entered_from;

static mxd_status api_enter(api_device *d, mxd_error *err)
{
    mxd_status st = check(drv.hipGetDevice(&entered_from), "hipGetDevice", err);
    if (st == MXD_OK && entered_from != d->id)
        st = check(drv.hipSetDevice(d->id), "hipSetDevice", err);
    return st;
}

static void api_leave(api_device *d)
{
    if (entered_from != d->id)
        drv.hipSetDevice(entered_from);
}

static bool api_device_integrated(api_device *d)
{
    int value = 0;
    return drv.hipDeviceGetAttribute(&value,
                                     MXD_HIP_DEVICE_ATTRIBUTE_INTEGRATED,
                                     d->id) == MXD_HIP_SUCCESS &&
           value != 0;
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
    mxd_status st = check(drv.hipGetDeviceProperties(
                              (struct hipDeviceProp_t *)&props->prop, d->id),
                          "hipGetDeviceProperties", err);
    if (st == MXD_OK) {
        /* "gfx90a:sramecc+:xnack-": the architecture is before the ':'. */
        props->prop.gcnArchName[sizeof props->prop.gcnArchName - 1] = '\0';
        props->prop.gcnArchName[strcspn(props->prop.gcnArchName, ":")] = '\0';
        snprintf(buf, size, "%s", props->prop.gcnArchName);
    }
    free(props);
    return st;
}

static mxd_status api_device_name(api_device *d, char *buf, size_t size,
                                  mxd_error *err)
{
    return check(drv.hipDeviceGetName(buf, (int)size, d->id),
                 "hipDeviceGetName", err);
}

static uint64_t graph_memory(const api_device *d, hip_graph_mem_attribute attr)
{
    uint64_t value = 0;
    drv.hipDeviceGetGraphMemAttribute(d->id, attr, &value);
    return value;
}

static mxd_status api_memory(api_device *d, mxd_memory_stats *out,
                             mxd_error *err)
{
    size_t free_bytes, total_bytes;
    mxd_status st = check(drv.hipMemGetInfo(&free_bytes, &total_bytes),
                          "hipMemGetInfo", err);
    if (st != MXD_OK)
        return st;
    out->free_memory = free_bytes;
    out->total_memory = total_bytes;
    out->has_graph_memory = drv.hipDeviceGetGraphMemAttribute != NULL;
    if (out->has_graph_memory) {
        out->graph_mem_reserved =
            graph_memory(d, MXD_HIP_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT);
        out->graph_mem_used =
            graph_memory(d, MXD_HIP_GRAPH_MEM_ATTR_USED_MEM_CURRENT);
    }
    return MXD_OK;
}

static mxd_status api_can_access(api_device *d, api_device *peer, bool *out,
                                 mxd_error *err)
{
    int can = 0;
    mxd_status st = check(drv.hipDeviceCanAccessPeer(&can, d->id, peer->id),
                          "hipDeviceCanAccessPeer", err);
    *out = st == MXD_OK && can;
    return st;
}

/* ---- Streams and events -----------------------------------------------------
 */

static mxd_status api_stream_create(gpu_stream *s, mxd_error *err)
{
    /* Non-blocking: never synchronizes with the legacy NULL stream. */
    return check(drv.hipStreamCreateWithFlags(s, MXD_HIP_STREAM_NON_BLOCKING),
                 "hipStreamCreateWithFlags", err);
}

static void api_stream_destroy(gpu_stream s)
{
    drv.hipStreamDestroy(s);
}

static mxd_status api_stream_query(gpu_stream s, mxd_error *err)
{
    return check_query(drv.hipStreamQuery(s), "hipStreamQuery", err);
}

static mxd_status api_stream_wait_event(gpu_stream s, gpu_event e,
                                        mxd_error *err)
{
    return check(drv.hipStreamWaitEvent(s, e, 0), "hipStreamWaitEvent", err);
}

static mxd_status api_event_create(gpu_event *e, bool timing, mxd_error *err)
{
    unsigned flags = timing ? 0 : MXD_HIP_EVENT_DISABLE_TIMING;
    return check(drv.hipEventCreateWithFlags(e, flags),
                 "hipEventCreateWithFlags", err);
}

static void api_event_destroy(gpu_event e)
{
    drv.hipEventDestroy(e);
}

static mxd_status api_event_record(gpu_event e, gpu_stream s, mxd_error *err)
{
    return check(drv.hipEventRecord(e, s), "hipEventRecord", err);
}

static mxd_status api_event_query(gpu_event e, mxd_error *err)
{
    return check_query(drv.hipEventQuery(e), "hipEventQuery", err);
}

static mxd_status api_event_elapsed(float *ms, gpu_event a, gpu_event b,
                                    mxd_error *err)
{
    return check(drv.hipEventElapsedTime(ms, a, b), "hipEventElapsedTime", err);
}

/* ---- Host memory, stream memory operations, host functions ----------------
 */

static mxd_status api_host_alloc(void **host, size_t size, mxd_error *err)
{
    unsigned flags = MXD_HIP_HOST_MALLOC_PORTABLE | MXD_HIP_HOST_MALLOC_MAPPED;
    return check(drv.hipHostMalloc(host, size, flags), "hipHostMalloc", err);
}

static mxd_status api_host_device_ptr(uintptr_t *device, void *host,
                                      mxd_error *err)
{
    void *ptr = NULL;
    mxd_status st = check(drv.hipHostGetDevicePointer(&ptr, host, 0),
                          "hipHostGetDevicePointer", err);
    *device = (uintptr_t)ptr;
    return st;
}

static void api_host_free(void *host)
{
    drv.hipHostFree(host);
}

static mxd_status api_wait_value_eq(gpu_stream s, uintptr_t device_ptr,
                                    uint64_t value, mxd_error *err)
{
    if (!drv.hipStreamWaitValue64)
        return missing("hipStreamWaitValue64 (stream memory operations)", err);
    return check(drv.hipStreamWaitValue64(s, (void *)device_ptr, value,
                                          MXD_HIP_STREAM_WAIT_VALUE_EQ,
                                          UINT64_MAX),
                 "hipStreamWaitValue64", err);
}

/* hipStreamAddCallback, for runtimes without hipLaunchHostFunc (ROCm 5.2):
 * the same ordering, with a callback signature of its own. */
typedef struct callback_call {
    void (*fn)(void *);
    void *data;
} callback_call;

static void callback_adapter(hip_stream s, hip_result status, void *data)
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
    mxd_status st =
        check(drv.hipStreamAddCallback(s, callback_adapter, call, 0),
              "hipStreamAddCallback", err);
    if (st != MXD_OK)
        free(call);
    return st;
}

/* The user's host functions: hipLaunchHostFunc, else the older callback. */
static mxd_status api_launch_host_fn(gpu_stream s, void (*fn)(void *),
                                     void *data, mxd_error *err)
{
    if (drv.hipLaunchHostFunc)
        return check(drv.hipLaunchHostFunc(s, fn, data), "hipLaunchHostFunc",
                     err);
    if (!drv.hipStreamAddCallback)
        return missing("hipLaunchHostFunc and hipStreamAddCallback", err);
    return add_callback(s, fn, data, err);
}

/* Our own bookkeeping behind a stream's work (wakers, releases): the
 * callback first, because the driver still calls it after an asynchronous
 * error, where it skips hipLaunchHostFunc. */
static mxd_status api_launch_cleanup(gpu_stream s, void (*fn)(void *),
                                     void *data, mxd_error *err)
{
    if (drv.hipStreamAddCallback)
        return add_callback(s, fn, data, err);
    return api_launch_host_fn(s, fn, data, err);
}

#include "gpu_backend.inc"
