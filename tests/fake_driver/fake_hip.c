/* The HIP runtime front of the fake: argument checks and the per-thread
 * current device; the work itself is the engine's (fake_engine.c).  Unlike
 * CUDA, HIP initialises itself on first use, so no call needs hipInit. */
#include <stdio.h>
#include <string.h>

#include "fake_front.h"

HIP_ENTRY_POINTS(FAKE_DECLARE_HIP)

/* ROCm 6 keeps the ROCm 5 layout of hipDeviceProp_t under this name. */
FAKE_ALIAS(hipGetDeviceProperties, hipGetDevicePropertiesR0000, hip_result,
           (struct hipDeviceProp_t * prop, int dev));

static _Thread_local int fake_current; /* hipSetDevice; 0 by default */

unsigned fake_hip_current_device(int *device)
{
    if (!fake_valid_device(fake_current))
        return FAKE_E_NO_DEVICE;
    *device = fake_current;
    return FAKE_E_OK;
}

hip_result hipInit(unsigned int flags)
{
    FAKE_HIP_BEGIN(hipInit);
    return flags == 0 ? FAKE_E_OK : FAKE_E_INVALID_VALUE;
}

/* ---- Errors --------------------------------------------------------- */

const char *hipGetErrorName(hip_result error)
{
    (void)fake_enter(FAKE_ID_hipGetErrorName); /* counted; cannot fail */
    const char *name = fake_error_name(error, true);
    return name != NULL ? name : "hipErrorUnknown";
}

const char *hipGetErrorString(hip_result error)
{
    (void)fake_enter(FAKE_ID_hipGetErrorString);
    const char *text = fake_error_string(error, true);
    return text != NULL ? text : "unknown error";
}

/* ---- Devices -------------------------------------------------------- */

/* Like ROCm, no device (or an unusable runtime) is an error that still
 * reports a count of 0. */
hip_result hipGetDeviceCount(int *count)
{
    unsigned rc = fake_enter(FAKE_ID_hipGetDeviceCount);
    if (rc != 0)
        return rc; /* an injected fault touches nothing */
    if (count == NULL)
        return FAKE_E_INVALID_VALUE;
    rc = fake_cfg()->init_error;
    *count = rc != 0 ? 0 : fake_cfg()->devices;
    return rc != 0 ? rc : *count > 0 ? FAKE_E_OK : FAKE_E_NO_DEVICE;
}

hip_result hipGetDevice(int *device)
{
    FAKE_HIP_BEGIN(hipGetDevice);
    if (device == NULL)
        return FAKE_E_INVALID_VALUE;
    return fake_hip_current_device(device);
}

hip_result hipSetDevice(int device)
{
    FAKE_HIP_BEGIN(hipSetDevice);
    if (!fake_valid_device(device))
        return FAKE_E_INVALID_DEVICE;
    fake_current = device;
    return FAKE_E_OK;
}

hip_result hipDeviceGetName(char *name, int len, hip_device dev)
{
    FAKE_HIP_BEGIN(hipDeviceGetName);
    if (name == NULL || len <= 0)
        return FAKE_E_INVALID_VALUE;
    if (!fake_valid_device(dev))
        return FAKE_E_INVALID_DEVICE;
    fake_device_name(dev, name, len);
    return FAKE_E_OK;
}

/* Only the attributes the fake knows; INVALID_VALUE for the others. */
static bool fake_attribute(hip_device_attribute attrib, int *value)
{
    switch (attrib) {
    case FAKE_HIP_ATTR_INTEGRATED: *value = fake_cfg()->integrated; return true;
    case FAKE_HIP_ATTR_MAX_PITCH:
        *value = fake_max_pitch_attribute();
        return true;
    case FAKE_HIP_ATTR_MEMORY_POOLS:
        *value = fake_cfg()->memory_pools;
        return true;
    case FAKE_HIP_ATTR_STREAM_WAIT_VALUE:
        *value = fake_cfg()->stream_mem_ops;
        return true;
    default: return false;
    }
}

hip_result hipDeviceGetAttribute(int *value, hip_device_attribute attrib,
                                 int dev)
{
    int v;
    FAKE_HIP_BEGIN(hipDeviceGetAttribute);
    if (value == NULL || !fake_attribute(attrib, &v))
        return FAKE_E_INVALID_VALUE;
    if (!fake_valid_device(dev))
        return FAKE_E_INVALID_DEVICE;
    *value = v;
    return FAKE_E_OK;
}

/* Writes only the ROCm 5 prefix the project declares (callers pass a
 * larger buffer); values other than the configured ones look like an
 * MI300X. */
hip_result hipGetDeviceProperties(struct hipDeviceProp_t *prop, int dev)
{
    FAKE_HIP_BEGIN(hipGetDeviceProperties);
    if (prop == NULL)
        return FAKE_E_INVALID_VALUE;
    if (!fake_valid_device(dev))
        return FAKE_E_INVALID_DEVICE;
    const fake_config *cfg = fake_cfg();
    hip_device_prop_r0000 *p = (hip_device_prop_r0000 *)(void *)prop;
    memset(p, 0, sizeof *p);
    fake_device_name(dev, p->name, (int)sizeof p->name);
    p->totalGlobalMem = cfg->total_mem;
    p->sharedMemPerBlock = 64 << 10;
    p->warpSize = 64;
    p->maxThreadsPerBlock = 1024;
    p->major = cfg->cc_major;
    p->minor = cfg->cc_minor;
    p->multiProcessorCount = 304;
    p->concurrentKernels = 1;
    p->pciBusID = dev + 1;
    p->canMapHostMemory = 1;
    snprintf(p->gcnArchName, sizeof p->gcnArchName, "%s", cfg->gcn_arch);
    return FAKE_E_OK;
}

hip_result hipDeviceTotalMem(size_t *bytes, hip_device dev)
{
    FAKE_HIP_BEGIN(hipDeviceTotalMem);
    if (bytes == NULL)
        return FAKE_E_INVALID_VALUE;
    if (!fake_valid_device(dev))
        return FAKE_E_INVALID_DEVICE;
    *bytes = fake_cfg()->total_mem;
    return FAKE_E_OK;
}

hip_result hipDeviceCanAccessPeer(int *can_access, int dev, int peer)
{
    FAKE_HIP_BEGIN(hipDeviceCanAccessPeer);
    if (can_access == NULL)
        return FAKE_E_INVALID_VALUE;
    if (!fake_valid_device(dev) || !fake_valid_device(peer))
        return FAKE_E_INVALID_DEVICE;
    *can_access = dev != peer && fake_cfg()->peer;
    return FAKE_E_OK;
}

hip_result hipMemGetInfo(size_t *free_bytes, size_t *total_bytes)
{
    int dev;
    FAKE_HIP_BEGIN(hipMemGetInfo);
    if (free_bytes == NULL || total_bytes == NULL)
        return FAKE_E_INVALID_VALUE;
    unsigned rc = fake_hip_current_device(&dev);
    if (rc != FAKE_E_OK)
        return rc;
    *free_bytes = fake_free_mem(dev);
    *total_bytes = fake_cfg()->total_mem;
    return FAKE_E_OK;
}

hip_result hipDeviceGetGraphMemAttribute(int dev, hip_graph_mem_attribute attr,
                                         void *value)
{
    FAKE_HIP_BEGIN(hipDeviceGetGraphMemAttribute);
    if (value == NULL || attr > 3) /* USED/RESERVED x CURRENT/HIGH */
        return FAKE_E_INVALID_VALUE;
    if (!fake_valid_device(dev))
        return FAKE_E_INVALID_DEVICE;
    *(uint64_t *)value = 0; /* the fake never allocates graph memory */
    return FAKE_E_OK;
}

/* ---- Streams -------------------------------------------------------- */

hip_result hipStreamCreateWithFlags(hip_stream *stream, unsigned int flags)
{
    int dev;
    FAKE_HIP_BEGIN(hipStreamCreateWithFlags);
    if (stream == NULL || (flags & ~(unsigned)FAKE_STREAM_NON_BLOCKING) != 0)
        return FAKE_E_INVALID_VALUE;
    unsigned rc = fake_hip_current_device(&dev);
    return rc != FAKE_E_OK ? rc
                           : fake_stream_create(dev, flags, (void **)stream);
}

unsigned fake_hip_stream(hip_stream handle, void **stream)
{
    int dev;
    if (handle != NULL) {
        *stream = handle;
        return FAKE_E_OK;
    }
    unsigned rc = fake_hip_current_device(&dev);
    return rc != FAKE_E_OK
               ? rc
               : fake_special_stream(FAKE_SPECIAL_NULL, dev, stream);
}

/* The null stream cannot be destroyed (hipErrorInvalidHandle). */
hip_result hipStreamDestroy(hip_stream stream)
{
    FAKE_HIP_BEGIN(hipStreamDestroy);
    return fake_stream_destroy(stream);
}

hip_result hipStreamQuery(hip_stream stream)
{
    FAKE_HIP_BEGIN(hipStreamQuery);
    FAKE_HIP_STREAM(stream);
    return fake_stream_query(stream);
}

hip_result hipStreamSynchronize(hip_stream stream)
{
    FAKE_HIP_BEGIN(hipStreamSynchronize);
    FAKE_HIP_STREAM(stream);
    return fake_stream_synchronize(stream);
}

hip_result hipStreamWaitEvent(hip_stream stream, hip_event event,
                              unsigned int flags)
{
    FAKE_HIP_BEGIN(hipStreamWaitEvent);
    FAKE_HIP_STREAM(stream);
    if (flags != 0)
        return FAKE_E_INVALID_VALUE;
    return fake_stream_wait_event(stream, event);
}

/* The condition is (*ptr & mask) <op> value, op one of hipStreamWaitValue
 * Gte (0), Eq (1), And (2), Nor (3). */
hip_result hipStreamWaitValue64(hip_stream stream, void *ptr, uint64_t value,
                                unsigned int flags, uint64_t mask)
{
    FAKE_HIP_BEGIN(hipStreamWaitValue64);
    FAKE_HIP_STREAM(stream);
    if (!fake_cfg()->stream_mem_ops)
        return FAKE_E_NOT_SUPPORTED; /* a device without them */
    if (flags > 3)
        return FAKE_E_INVALID_VALUE;
    return fake_stream_wait_value(stream, (uintptr_t)ptr, value, flags, mask);
}

hip_result hipLaunchHostFunc(hip_stream stream, hip_host_fn fn, void *user_data)
{
    FAKE_HIP_BEGIN(hipLaunchHostFunc);
    FAKE_HIP_STREAM(stream);
    return fake_stream_host_fn(stream, fn, user_data);
}

hip_result hipStreamAddCallback(hip_stream stream, hip_stream_callback callback,
                                void *user_data, unsigned int flags)
{
    FAKE_HIP_BEGIN(hipStreamAddCallback);
    FAKE_HIP_STREAM(stream);
    if (flags != 0)
        return FAKE_E_INVALID_VALUE;
    return fake_stream_callback(stream, FAKE_CB_HIP, (void (*)(void))callback,
                                user_data);
}

/* ---- Events --------------------------------------------------------- */

hip_result hipEventCreateWithFlags(hip_event *event, unsigned int flags)
{
    /* Default, BlockingSync, DisableTiming, Interprocess, and the
     * release-to-device/system and disable-system-fence bits. */
    const unsigned known = 0x7u | 0xE0000000u;
    int dev;
    FAKE_HIP_BEGIN(hipEventCreateWithFlags);
    if (event == NULL || (flags & ~known) != 0)
        return FAKE_E_INVALID_VALUE;
    unsigned rc = fake_hip_current_device(&dev);
    return rc != FAKE_E_OK ? rc : fake_event_create(dev, flags, (void **)event);
}

hip_result hipEventDestroy(hip_event event)
{
    FAKE_HIP_BEGIN(hipEventDestroy);
    return fake_event_destroy(event);
}

hip_result hipEventRecord(hip_event event, hip_stream stream)
{
    FAKE_HIP_BEGIN(hipEventRecord);
    FAKE_HIP_STREAM(stream);
    return fake_event_record(event, stream);
}

hip_result hipEventQuery(hip_event event)
{
    FAKE_HIP_BEGIN(hipEventQuery);
    return fake_event_query(event);
}

hip_result hipEventSynchronize(hip_event event)
{
    FAKE_HIP_BEGIN(hipEventSynchronize);
    return fake_event_synchronize(event);
}

hip_result hipEventElapsedTime(float *ms, hip_event start, hip_event end)
{
    FAKE_HIP_BEGIN(hipEventElapsedTime);
    return fake_event_elapsed(ms, start, end);
}

/* ---- Pinned host memory --------------------------------------------- */

/* Every hipHostMalloc allocation is mapped (hipHostMallocDefault is
 * "mapped and portable" in HIP), so any flags give a device pointer. */
hip_result hipHostMalloc(void **host, size_t bytes, unsigned int flags)
{
    /* Portable, Mapped, WriteCombined; Uncached, NumaUser, Coherent,
     * NonCoherent (the last two exclusive). */
    const unsigned known = 0x7u | 0xF0000000u, both = 0xC0000000u;
    int dev;
    FAKE_HIP_BEGIN(hipHostMalloc);
    FAKE_CAPTURE_SAFE();
    if ((flags & ~known) != 0 || (flags & both) == both)
        return FAKE_E_INVALID_VALUE;
    unsigned rc = fake_hip_current_device(&dev);
    return rc != FAKE_E_OK ? rc : fake_host_alloc(dev, bytes, true, host);
}

hip_result hipHostGetDevicePointer(void **device, void *host,
                                   unsigned int flags)
{
    FAKE_HIP_BEGIN(hipHostGetDevicePointer);
    if (flags != 0)
        return FAKE_E_INVALID_VALUE;
    return fake_host_device_pointer(host, device);
}

/* hipHostFree(NULL) is a successful no-op, as in HIP. */
hip_result hipHostFree(void *host)
{
    FAKE_HIP_BEGIN(hipHostFree);
    FAKE_CAPTURE_SAFE();
    return host == NULL ? FAKE_E_OK : fake_host_free(host);
}
