/* The CUDA driver API front of the fake: argument checks, cuInit state,
 * primary contexts and the thread-local context stack; the work itself is
 * the engine's (fake_engine.c). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "fake_front.h"

CUDA_ENTRY_POINTS(FAKE_DECLARE_CU)

#define FAKE_PROC_V1_PARAMS                                                    \
    (const char *symbol, void **pfn, int cuda_version, uint64_t flags)
#define FAKE_PROC_V2_PARAMS                                                    \
    (const char *symbol, void **pfn, int cuda_version, uint64_t flags,         \
     int *status)
FAKE_VISIBILITY(cuGetProcAddress)
cu_result cuGetProcAddress_v2 FAKE_PROC_V2_PARAMS;
FAKE_VISIBILITY(cuGetProcAddress)
cu_result cuGetProcAddress FAKE_PROC_V1_PARAMS;
/* Type check against the project's pointer type. */
static const cu_get_proc_address_fn fake_proc_check __attribute__((unused)) =
    cuGetProcAddress_v2;

/* The versioned symbols the real libcuda exports next to the plain ones. */
FAKE_ALIAS(cuDeviceTotalMem, cuDeviceTotalMem_v2, cu_result,
           (size_t * bytes, cu_device dev));
FAKE_ALIAS(cuCtxPushCurrent, cuCtxPushCurrent_v2, cu_result, (cu_context ctx));
FAKE_ALIAS(cuCtxPopCurrent, cuCtxPopCurrent_v2, cu_result, (cu_context * ctx));
FAKE_ALIAS(cuMemGetInfo, cuMemGetInfo_v2, cu_result,
           (size_t * free_bytes, size_t *total_bytes));
FAKE_ALIAS(cuStreamDestroy, cuStreamDestroy_v2, cu_result, (cu_stream stream));
FAKE_ALIAS(cuEventDestroy, cuEventDestroy_v2, cu_result, (cu_event event));
FAKE_ALIAS(cuMemHostGetDevicePointer, cuMemHostGetDevicePointer_v2, cu_result,
           (cu_deviceptr * device, void *host, unsigned int flags));
FAKE_ALIAS(cuStreamWaitValue64, cuStreamWaitValue64_v2, cu_result,
           (cu_stream stream, cu_deviceptr addr, uint64_t value,
            unsigned int flags));
FAKE_ALIAS(cuEventElapsedTime, cuEventElapsedTime_v2, cu_result,
           (float *ms, cu_event start, cu_event end));

static atomic_bool fake_initialized;

bool fake_cuda_initialized(void)
{
    return atomic_load(&fake_initialized);
}

/* ---- Contexts ------------------------------------------------------- */

struct CUctx_st {
    int device;
    atomic_int retains;
};

static struct CUctx_st *fake_primary; /* one per device, made by cuInit */

enum { FAKE_MAX_PUSH = 128 };
static _Thread_local cu_context fake_ctx_stack[FAKE_MAX_PUSH];
static _Thread_local int fake_ctx_depth;

int fake_cuda_push_depth(void)
{
    return fake_ctx_depth;
}

static bool fake_valid_context(cu_context ctx)
{
    int n = fake_cfg()->devices;
    return fake_primary != NULL && ctx >= fake_primary &&
           ctx < fake_primary + n;
}

bool fake_cuda_context_device(cu_context ctx, int *device)
{
    if (!fake_valid_context(ctx))
        return false;
    *device = ctx->device;
    return true;
}

unsigned fake_cuda_current_device(int *device)
{
    if (fake_ctx_depth == 0)
        return FAKE_E_INVALID_CONTEXT;
    *device = fake_ctx_stack[fake_ctx_depth - 1]->device;
    return FAKE_E_OK;
}

static void fake_make_primary(void)
{
    int n = fake_cfg()->devices;
    fake_primary = calloc((size_t)n + 1, sizeof *fake_primary);
    for (int i = 0; fake_primary != NULL && i < n; i++)
        fake_primary[i].device = i;
}

cu_result cuInit(unsigned int flags)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    FAKE_CU_ENTER(cuInit);
    if (fake_cfg()->init_error != 0)
        return fake_cfg()->init_error;
    if (flags != 0)
        return FAKE_E_INVALID_VALUE;
    pthread_once(&once, fake_make_primary);
    if (fake_primary == NULL)
        return FAKE_E_OUT_OF_MEMORY;
    atomic_store(&fake_initialized, true);
    return FAKE_E_OK;
}

/* Like the real one, it needs no cuInit. */
cu_result cuDriverGetVersion(int *version)
{
    FAKE_CU_ENTER(cuDriverGetVersion);
    if (version == NULL)
        return FAKE_E_INVALID_VALUE;
    *version = fake_cfg()->driver_version;
    return FAKE_E_OK;
}

cu_result cuDevicePrimaryCtxRetain(cu_context *ctx, cu_device dev)
{
    FAKE_CU_BEGIN(cuDevicePrimaryCtxRetain);
    if (ctx == NULL)
        return FAKE_E_INVALID_VALUE;
    if (!fake_valid_device(dev))
        return FAKE_E_INVALID_DEVICE;
    atomic_fetch_add(&fake_primary[dev].retains, 1);
    *ctx = &fake_primary[dev];
    return FAKE_E_OK;
}

cu_result cuCtxPushCurrent(cu_context ctx)
{
    FAKE_CU_BEGIN(cuCtxPushCurrent);
    if (!fake_valid_context(ctx))
        return FAKE_E_INVALID_CONTEXT;
    if (fake_ctx_depth == FAKE_MAX_PUSH)
        return FAKE_E_OUT_OF_MEMORY; /* surely a push/pop imbalance */
    fake_ctx_stack[fake_ctx_depth++] = ctx;
    return FAKE_E_OK;
}

cu_result cuCtxPopCurrent(cu_context *ctx)
{
    FAKE_CU_BEGIN(cuCtxPopCurrent);
    if (fake_ctx_depth == 0)
        return FAKE_E_INVALID_CONTEXT;
    cu_context top = fake_ctx_stack[--fake_ctx_depth];
    if (ctx != NULL)
        *ctx = top;
    return FAKE_E_OK;
}

cu_result cuCtxGetCurrent(cu_context *ctx)
{
    FAKE_CU_BEGIN(cuCtxGetCurrent);
    if (ctx == NULL)
        return FAKE_E_INVALID_VALUE;
    *ctx = fake_ctx_depth > 0 ? fake_ctx_stack[fake_ctx_depth - 1] : NULL;
    return FAKE_E_OK;
}

/* ---- Errors --------------------------------------------------------- */

cu_result cuGetErrorName(cu_result error, const char **name)
{
    FAKE_CU_ENTER(cuGetErrorName);
    if (name == NULL)
        return FAKE_E_INVALID_VALUE;
    *name = fake_error_name(error, false);
    return *name != NULL ? FAKE_E_OK : FAKE_E_INVALID_VALUE;
}

cu_result cuGetErrorString(cu_result error, const char **text)
{
    FAKE_CU_ENTER(cuGetErrorString);
    if (text == NULL)
        return FAKE_E_INVALID_VALUE;
    *text = fake_error_string(error, false);
    return *text != NULL ? FAKE_E_OK : FAKE_E_INVALID_VALUE;
}

/* ---- Devices -------------------------------------------------------- */

cu_result cuDeviceGetCount(int *count)
{
    FAKE_CU_BEGIN(cuDeviceGetCount);
    if (count == NULL)
        return FAKE_E_INVALID_VALUE;
    *count = fake_cfg()->devices;
    return FAKE_E_OK;
}

cu_result cuDeviceGet(cu_device *device, int ordinal)
{
    FAKE_CU_BEGIN(cuDeviceGet);
    if (device == NULL)
        return FAKE_E_INVALID_VALUE;
    if (!fake_valid_device(ordinal))
        return FAKE_E_INVALID_DEVICE;
    *device = ordinal;
    return FAKE_E_OK;
}

cu_result cuDeviceGetName(char *name, int len, cu_device dev)
{
    FAKE_CU_BEGIN(cuDeviceGetName);
    if (name == NULL || len <= 0)
        return FAKE_E_INVALID_VALUE;
    if (!fake_valid_device(dev))
        return FAKE_E_INVALID_DEVICE;
    fake_device_name(dev, name, len);
    return FAKE_E_OK;
}

/* A few attributes beyond those in cuda_abi.h, with H100-like values, so a
 * backend that asks for more gets plausible answers. */
static bool fake_attribute(cu_device_attribute attrib, int *value)
{
    const fake_config *cfg = fake_cfg();
    switch (attrib) {
    case 1: *value = 1024; return true; /* MAX_THREADS_PER_BLOCK */
    case 10: *value = 32; return true;  /* WARP_SIZE */
    case FAKE_CU_ATTR_MAX_PITCH:
        *value = fake_max_pitch_attribute();
        return true;
    case 16: *value = 132; return true; /* MULTIPROCESSOR_COUNT */
    case FAKE_CU_ATTR_INTEGRATED: *value = cfg->integrated; return true;
    case 19:
        *value = 1;
        return true; /* CAN_MAP_HOST_MEMORY */
    /* UNIFIED_ADDRESSING: no, since mapped host memory has a device
     * address of its own here (cuMemHostGetDevicePointer is needed). */
    case 41: *value = 0; return true;
    case FAKE_CU_ATTR_CC_MAJOR: *value = cfg->cc_major; return true;
    case FAKE_CU_ATTR_CC_MINOR: *value = cfg->cc_minor; return true;
    case FAKE_CU_ATTR_MEMORY_POOLS: *value = cfg->memory_pools; return true;
    case FAKE_CU_ATTR_MULTICAST_SUPPORTED:
        *value = cfg->multicast;
        return cfg->driver_version >= 12010;
    case FAKE_CU_ATTR_STREAM_MEM_OPS_V1:
    case FAKE_CU_ATTR_64_BIT_STREAM_MEM_OPS_V1:
        *value = cfg->stream_mem_ops;
        return true;
    /* CUDA 12 added this name; older drivers reject it, and answer under
     * the one CUDA 12 renamed ..._V1. */
    case FAKE_CU_ATTR_64_BIT_STREAM_MEM_OPS:
        *value = cfg->stream_mem_ops;
        return cfg->driver_version >= 12000;
    default: return false;
    }
}

cu_result cuDeviceGetAttribute(int *value, cu_device_attribute attrib,
                               cu_device dev)
{
    FAKE_CU_BEGIN(cuDeviceGetAttribute);
    if (value == NULL)
        return FAKE_E_INVALID_VALUE;
    if (!fake_valid_device(dev))
        return FAKE_E_INVALID_DEVICE;
    return fake_attribute(attrib, value) ? FAKE_E_OK : FAKE_E_INVALID_VALUE;
}

cu_result cuDeviceTotalMem(size_t *bytes, cu_device dev)
{
    FAKE_CU_BEGIN(cuDeviceTotalMem);
    if (bytes == NULL)
        return FAKE_E_INVALID_VALUE;
    if (!fake_valid_device(dev))
        return FAKE_E_INVALID_DEVICE;
    *bytes = fake_cfg()->total_mem;
    return FAKE_E_OK;
}

cu_result cuDeviceCanAccessPeer(int *can_access, cu_device dev, cu_device peer)
{
    FAKE_CU_BEGIN(cuDeviceCanAccessPeer);
    if (can_access == NULL)
        return FAKE_E_INVALID_VALUE;
    if (!fake_valid_device(dev) || !fake_valid_device(peer))
        return FAKE_E_INVALID_DEVICE;
    *can_access = dev != peer && fake_cfg()->peer;
    return FAKE_E_OK;
}

cu_result cuMemGetInfo(size_t *free_bytes, size_t *total_bytes)
{
    int dev;
    FAKE_CU_BEGIN(cuMemGetInfo);
    unsigned rc = fake_cuda_current_device(&dev);
    if (rc != FAKE_E_OK)
        return rc;
    if (free_bytes == NULL || total_bytes == NULL)
        return FAKE_E_INVALID_VALUE;
    *free_bytes = fake_free_mem(dev);
    *total_bytes = fake_cfg()->total_mem;
    return FAKE_E_OK;
}

cu_result cuDeviceGetGraphMemAttribute(cu_device dev,
                                       cu_graph_mem_attribute attr, void *value)
{
    FAKE_CU_BEGIN(cuDeviceGetGraphMemAttribute);
    if (value == NULL || attr > 3) /* USED/RESERVED x CURRENT/HIGH */
        return FAKE_E_INVALID_VALUE;
    if (!fake_valid_device(dev))
        return FAKE_E_INVALID_DEVICE;
    *(uint64_t *)value = 0; /* the fake never allocates graph memory */
    return FAKE_E_OK;
}

/* ---- Streams -------------------------------------------------------- */

cu_result cuStreamCreate(cu_stream *stream, unsigned int flags)
{
    int dev;
    FAKE_CU_BEGIN(cuStreamCreate);
    unsigned rc = fake_cuda_current_device(&dev);
    if (rc != FAKE_E_OK)
        return rc;
    if (stream == NULL || (flags & ~(unsigned)FAKE_STREAM_NON_BLOCKING) != 0)
        return FAKE_E_INVALID_VALUE;
    return fake_stream_create(dev, flags, (void **)stream);
}

unsigned fake_cuda_stream(cu_stream handle, void **stream)
{
    uintptr_t value = (uintptr_t)handle;
    int dev;
    if (value != 0x1 && value != 0x2) {
        *stream = handle;
        return FAKE_E_OK;
    }
    unsigned rc = fake_cuda_current_device(&dev);
    if (rc != FAKE_E_OK)
        return rc;
    return fake_special_stream(value == 0x1 ? FAKE_SPECIAL_LEGACY
                                            : FAKE_SPECIAL_PER_THREAD,
                               dev, stream);
}

unsigned fake_cuda_enqueue_context(void *stream)
{
    int device, current;
    if (!fake_cfg()->context_check || !fake_stream_device(stream, &device))
        return FAKE_E_OK;
    if (fake_cuda_current_device(&current) != FAKE_E_OK) {
        fake_violation("%s enqueued work on a stream of device %d with no "
                       "current context; real drivers refuse it "
                       "(CUDA_ERROR_INVALID_CONTEXT)",
                       fake_current_entry_name(), device);
        return FAKE_E_INVALID_CONTEXT;
    }
    if (current != device) {
        fake_violation("%s enqueued work on a stream of device %d while the "
                       "context of device %d is current; real drivers refuse "
                       "it (CUDA_ERROR_INVALID_CONTEXT)",
                       fake_current_entry_name(), device, current);
        return FAKE_E_INVALID_CONTEXT;
    }
    return FAKE_E_OK;
}

/* The fake refuses the NULL stream: passing 0 is INVALID_HANDLE, so a
 * backend that uses it (SPEC: every queue is a stream of its own) fails.
 * The special streams cannot be destroyed either (INVALID_HANDLE). */
cu_result cuStreamDestroy(cu_stream stream)
{
    FAKE_CU_BEGIN(cuStreamDestroy);
    return fake_stream_destroy(stream);
}

cu_result cuStreamQuery(cu_stream stream)
{
    FAKE_CU_BEGIN(cuStreamQuery);
    FAKE_CU_STREAM(stream);
    return fake_stream_query(stream);
}

cu_result cuStreamSynchronize(cu_stream stream)
{
    FAKE_CU_BEGIN(cuStreamSynchronize);
    FAKE_CU_STREAM(stream);
    return fake_stream_synchronize(stream);
}

cu_result cuStreamWaitEvent(cu_stream stream, cu_event event,
                            unsigned int flags)
{
    FAKE_CU_BEGIN(cuStreamWaitEvent);
    FAKE_CU_ENQUEUE(stream);
    if (flags != 0)
        return FAKE_E_INVALID_VALUE;
    return fake_stream_wait_event(stream, event);
}

cu_result cuStreamWaitValue64(cu_stream stream, cu_deviceptr addr,
                              uint64_t value, unsigned int flags)
{
    enum { FLUSH = 1u << 30 };
    FAKE_CU_BEGIN(cuStreamWaitValue64);
    FAKE_CU_ENQUEUE(stream);
    if (!fake_cfg()->stream_mem_ops)
        return FAKE_E_NOT_SUPPORTED; /* a device or driver without them */
    if ((flags & ~(3u | FLUSH)) != 0)
        return FAKE_E_INVALID_VALUE;
    return fake_stream_wait_value(stream, (uintptr_t)addr, value, flags & 3u,
                                  UINT64_MAX);
}

cu_result cuLaunchHostFunc(cu_stream stream, cu_host_fn fn, void *user_data)
{
    FAKE_CU_BEGIN(cuLaunchHostFunc);
    FAKE_CU_ENQUEUE(stream);
    return fake_stream_host_fn(stream, fn, user_data);
}

cu_result cuStreamAddCallback(cu_stream stream, cu_stream_callback callback,
                              void *user_data, unsigned int flags)
{
    FAKE_CU_BEGIN(cuStreamAddCallback);
    FAKE_CU_ENQUEUE(stream);
    if (flags != 0)
        return FAKE_E_INVALID_VALUE;
    return fake_stream_callback(stream, FAKE_CB_CUDA, (void (*)(void))callback,
                                user_data);
}

/* ---- Events --------------------------------------------------------- */

cu_result cuEventCreate(cu_event *event, unsigned int flags)
{
    int dev;
    FAKE_CU_BEGIN(cuEventCreate);
    unsigned rc = fake_cuda_current_device(&dev);
    if (rc != FAKE_E_OK)
        return rc;
    /* DEFAULT, BLOCKING_SYNC, DISABLE_TIMING, INTERPROCESS */
    if (event == NULL || (flags & ~7u) != 0)
        return FAKE_E_INVALID_VALUE;
    return fake_event_create(dev, flags, (void **)event);
}

cu_result cuEventDestroy(cu_event event)
{
    FAKE_CU_BEGIN(cuEventDestroy);
    return fake_event_destroy(event);
}

cu_result cuEventRecord(cu_event event, cu_stream stream)
{
    FAKE_CU_BEGIN(cuEventRecord);
    FAKE_CU_ENQUEUE(stream);
    return fake_event_record(event, stream);
}

cu_result cuEventQuery(cu_event event)
{
    FAKE_CU_BEGIN(cuEventQuery);
    return fake_event_query(event);
}

cu_result cuEventSynchronize(cu_event event)
{
    FAKE_CU_BEGIN(cuEventSynchronize);
    return fake_event_synchronize(event);
}

cu_result cuEventElapsedTime(float *ms, cu_event start, cu_event end)
{
    FAKE_CU_BEGIN(cuEventElapsedTime);
    return fake_event_elapsed(ms, start, end);
}

/* ---- Pinned host memory --------------------------------------------- */

cu_result cuMemHostAlloc(void **host, size_t bytes, unsigned int flags)
{
    int dev;
    FAKE_CU_BEGIN(cuMemHostAlloc);
    FAKE_CAPTURE_SAFE();
    unsigned rc = fake_cuda_current_device(&dev);
    if (rc != FAKE_E_OK)
        return rc;
    /* PORTABLE, DEVICEMAP, WRITECOMBINED */
    if ((flags & ~7u) != 0)
        return FAKE_E_INVALID_VALUE;
    return fake_host_alloc(dev, bytes,
                           (flags & FAKE_CU_MEMHOSTALLOC_DEVICEMAP) != 0, host);
}

/* Like the real driver this needs a current context and fails for memory
 * allocated without CU_MEMHOSTALLOC_DEVICEMAP. */
cu_result cuMemHostGetDevicePointer(cu_deviceptr *device, void *host,
                                    unsigned int flags)
{
    int dev;
    void *ptr;
    FAKE_CU_BEGIN(cuMemHostGetDevicePointer);
    unsigned rc = fake_cuda_current_device(&dev);
    if (rc != FAKE_E_OK)
        return rc;
    if (device == NULL || flags != 0)
        return FAKE_E_INVALID_VALUE;
    rc = fake_host_device_pointer(host, &ptr);
    if (rc == FAKE_E_OK)
        *device = (cu_deviceptr)(uintptr_t)ptr;
    return rc;
}

/* Needs a current context, as documented (the freed memory need not be
 * the context's), and synchronises the allocation's device. */
cu_result cuMemFreeHost(void *host)
{
    int dev;
    FAKE_CU_BEGIN(cuMemFreeHost);
    FAKE_CAPTURE_SAFE();
    unsigned rc = fake_cuda_current_device(&dev);
    return rc != FAKE_E_OK ? rc : fake_host_free(host);
}

/* ---- cuGetProcAddress ----------------------------------------------- */

typedef struct fake_proc {
    const char *name;
    int version; /* the ABI version cuda_abi.h declares */
    void *fn;    /* NULL when omitted */
} fake_proc;

#define FAKE_PROC(name, version, kind, ret, params)                            \
    {#name, version, FAKE_PICK(name, NULL, (void *)&name)},
static const fake_proc fake_procs[] = {CUDA_ENTRY_POINTS(FAKE_PROC)};
#undef FAKE_PROC

/* Entry points older than the ABI version cuda_abi.h declares for them:
 * the CUDA version since which a function of the declared signature
 * exists.  The _v2 variants of these kept the signature (cuStreamDestroy,
 * cuEventElapsedTime), or the function is older than its _v2 name
 * (cuStreamWaitValue64: 9.0).  Every other entry point first existed at
 * its declared version: the genuinely new APIs, and the _v2 variants of
 * CUDA 3.2 whose v1 took 32-bit sizes or device pointers. */
static const struct {
    const char *name;
    int version;
} fake_introduced[] = {
    {"cuCtxPushCurrent", 2000},   {"cuCtxPopCurrent", 2000},
    {"cuStreamDestroy", 2000},    {"cuEventDestroy", 2000},
    {"cuEventElapsedTime", 2000}, {"cuStreamWaitValue64", 9000},
};

static int fake_introduced_version(const fake_proc *p)
{
    for (size_t i = 0; i < sizeof fake_introduced / sizeof *fake_introduced;
         i++)
        if (strcmp(fake_introduced[i].name, p->name) == 0)
            return fake_introduced[i].version;
    return p->version;
}

enum { FAKE_PROC_FOUND = 0, FAKE_PROC_NOT_FOUND = 1, FAKE_PROC_OLD = 2 };

static atomic_int fake_proc_refusals;

int fake_cuda_proc_too_new(void)
{
    return atomic_load(&fake_proc_refusals);
}

static void *fake_self_proc(int cuda_version)
{
    if (FAKE_OMITTED(cuGetProcAddress))
        return NULL;
    return cuda_version >= 12000 ? (void *)&cuGetProcAddress_v2
                                 : (void *)&cuGetProcAddress;
}

/* The status of a lookup of entry point p: absent from this driver (it is
 * newer, or the library was built without it), not in the CUDA version
 * asked for, or found. */
static int fake_proc_status(const fake_proc *p, int cuda_version)
{
    int introduced = fake_introduced_version(p);
    if (p->fn == NULL || introduced > fake_cfg()->driver_version)
        return FAKE_PROC_NOT_FOUND;
    if (cuda_version < 2000 || cuda_version < introduced)
        return FAKE_PROC_OLD;
    return FAKE_PROC_FOUND;
}

/* Resolves BASE names.  Between an entry point's introduction and its
 * declared ABI version the fake hands out the declared function: the
 * versions in fake_introduced share its signature. */
static unsigned fake_get_proc(const char *symbol, void **pfn, int cuda_version,
                              uint64_t flags, int *status)
{
    int st = FAKE_PROC_NOT_FOUND;
    if (symbol == NULL || pfn == NULL || flags > 2)
        return FAKE_E_INVALID_VALUE;
    /* Documented: "If the specified CUDA version is greater than the
     * driver version, the API will return CUDA_ERROR_INVALID_VALUE". */
    if (cuda_version > fake_cfg()->driver_version) {
        atomic_fetch_add(&fake_proc_refusals, 1);
        return FAKE_E_INVALID_VALUE;
    }
    *pfn = NULL;
    if (strcmp(symbol, "cuGetProcAddress") == 0) {
        *pfn = fake_self_proc(cuda_version);
        st = *pfn != NULL ? FAKE_PROC_FOUND : FAKE_PROC_NOT_FOUND;
    }
    for (size_t i = 0; i < sizeof fake_procs / sizeof *fake_procs; i++) {
        const fake_proc *p = &fake_procs[i];
        if (strcmp(p->name, symbol) != 0)
            continue;
        st = fake_proc_status(p, cuda_version);
        if (st == FAKE_PROC_FOUND)
            *pfn = p->fn;
    }
    if (status != NULL)
        *status = st;
    return st == FAKE_PROC_FOUND ? FAKE_E_OK : FAKE_E_NOT_FOUND;
}

cu_result cuGetProcAddress_v2(const char *symbol, void **pfn, int cuda_version,
                              uint64_t flags, int *status)
{
    FAKE_CU_ENTER(cuGetProcAddress);
    return fake_get_proc(symbol, pfn, cuda_version, flags, status);
}

cu_result cuGetProcAddress(const char *symbol, void **pfn, int cuda_version,
                           uint64_t flags)
{
    FAKE_CU_ENTER(cuGetProcAddress);
    return fake_get_proc(symbol, pfn, cuda_version, flags, NULL);
}
