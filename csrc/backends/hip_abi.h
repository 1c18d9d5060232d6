/* Our own declarations of the few HIP runtime types, constants and entry
 * points the HIP backend uses, so that no ROCm SDK is needed to build.
 * Names and types mirror <hip/hip_runtime_api.h>; tests/abi/check_abi.c
 * compiles them against the real header (Debian's libamdhip64-dev, when
 * installed) and fails on any difference. */
#ifndef MXD_HIP_ABI_H
#define MXD_HIP_ABI_H

#include <stddef.h>
#include <stdint.h>

typedef unsigned int hip_result; /* enum hipError_t */
typedef int hip_device;
typedef struct ihipStream_t *hip_stream;
typedef struct ihipEvent_t *hip_event;
typedef unsigned int hip_device_attribute; /* enum hipDeviceAttribute_t */
typedef unsigned int
    hip_graph_mem_attribute;                /* enum hipGraphMemAttributeType */
typedef unsigned int hip_memcpy_kind;       /* enum hipMemcpyKind */
typedef unsigned int hip_pointer_attribute; /* enum hipPointer_attribute */
typedef struct ihipMemPoolHandle_t *hip_mempool;
typedef struct ihipGraph *hip_graph;
typedef struct hipGraphExec *hip_graph_exec;
typedef unsigned int hip_stream_capture_mode; /* enum hipStreamCaptureMode */
typedef unsigned int hip_mempool_attribute;   /* enum hipMemPoolAttr */
typedef void (*hip_host_fn)(void *user_data);
typedef void (*hip_stream_callback)(hip_stream stream, hip_result status,
                                    void *user_data);

/* Prefixed so that they can sit beside the real header's in the ABI
 * check. */
enum {
    MXD_HIP_SUCCESS = 0,
    MXD_HIP_ERROR_INVALID_VALUE = 1,
    MXD_HIP_ERROR_OUT_OF_MEMORY = 2,
    MXD_HIP_ERROR_NOT_READY = 600,
    MXD_HIP_ERROR_PEER_ACCESS_ALREADY_ENABLED = 704,
    MXD_HIP_ERROR_NOT_SUPPORTED = 801,
    MXD_HIP_STREAM_NON_BLOCKING = 0x1,
    MXD_HIP_EVENT_BLOCKING_SYNC = 0x1,
    MXD_HIP_EVENT_DISABLE_TIMING = 0x2,
    MXD_HIP_HOST_MALLOC_PORTABLE = 0x1,
    MXD_HIP_HOST_MALLOC_MAPPED = 0x2,
    MXD_HIP_STREAM_WAIT_VALUE_GTE = 0x0,
    MXD_HIP_STREAM_WAIT_VALUE_EQ = 0x1,
    MXD_HIP_DEVICE_ATTRIBUTE_INTEGRATED = 16,
    MXD_HIP_DEVICE_ATTRIBUTE_MAX_PITCH = 58,
    MXD_HIP_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED = 88,
    /* In the AMD-specific range, the same value in ROCm 5 and 6. */
    MXD_HIP_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE = 10013,
    MXD_HIP_MEMCPY_HOST_TO_DEVICE = 1,
    MXD_HIP_MEMCPY_DEVICE_TO_HOST = 2,
    MXD_HIP_MEMCPY_DEVICE_TO_DEVICE = 3,
    MXD_HIP_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9,
    MXD_HIP_GRAPH_MEM_ATTR_USED_MEM_CURRENT = 0,
    MXD_HIP_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT = 2,
    MXD_HIP_MEMPOOL_ATTR_RELEASE_THRESHOLD = 4,
    MXD_HIP_MEM_LOCATION_TYPE_DEVICE = 1,
    MXD_HIP_MEM_ACCESS_FLAGS_PROT_READWRITE = 3,
    MXD_HIP_STREAM_CAPTURE_MODE_RELAXED = 2,
};

/* hipMemLocation and hipMemAccessDesc for hipMemPoolSetAccess. */
typedef struct hip_mem_location {
    unsigned int type; /* hipMemLocationType */
    int id;
} hip_mem_location;
typedef struct hip_mem_access_desc {
    hip_mem_location location;
    unsigned int flags; /* hipMemAccessFlags */
} hip_mem_access_desc;

/* hipGetDeviceProperties takes the runtime's own structure, incomplete
 * here: we read it through the prefix below. */
struct hipDeviceProp_t;

/* The leading fields of hipDeviceProp_t as ROCm 5 lays it out (and as
 * ROCm 6 keeps it for hipGetDevicePropertiesR0000), up to gcnArchName:
 * the only field we read.  The runtime writes the whole structure, so
 * callers pass a buffer of HIP_DEVICE_PROP_BUFFER bytes. */
typedef struct hip_device_prop_r0000 {
    char name[256];
    size_t totalGlobalMem;
    size_t sharedMemPerBlock;
    int regsPerBlock;
    int warpSize;
    int maxThreadsPerBlock;
    int maxThreadsDim[3];
    int maxGridSize[3];
    int clockRate;
    int memoryClockRate;
    int memoryBusWidth;
    size_t totalConstMem;
    int major;
    int minor;
    int multiProcessorCount;
    int l2CacheSize;
    int maxThreadsPerMultiProcessor;
    int computeMode;
    int clockInstructionRate;
    unsigned int arch; /* hipDeviceArch_t: a 32-bit set of flags */
    int concurrentKernels;
    int pciDomainID;
    int pciBusID;
    int pciDeviceID;
    size_t maxSharedMemoryPerMultiProcessor;
    int isMultiGpuBoard;
    int canMapHostMemory;
    int gcnArch;
    char gcnArchName[256];
} hip_device_prop_r0000;

enum { HIP_DEVICE_PROP_BUFFER = 8192 };

/* The entry points: X(name, kind, return, parameters); kind is REQUIRED or
 * OPTIONAL as for CUDA.  hipLaunchHostFunc is missing from ROCm 5.2, whose
 * hipStreamAddCallback serves instead.  Entry points newer than ROCm 5.2
 * (the headers the ABI check has) are listed apart. */
#define HIP_ENTRY_POINTS(X) HIP_ENTRY_POINTS_5_2(X) HIP_ENTRY_POINTS_5_3(X)

#define HIP_ENTRY_POINTS_5_2(X)                                                \
    X(hipInit, REQUIRED, hip_result, (unsigned int flags))                     \
    X(hipGetErrorName, REQUIRED, const char *, (hip_result error))             \
    X(hipGetErrorString, OPTIONAL, const char *, (hip_result error))           \
    X(hipGetDeviceCount, REQUIRED, hip_result, (int *count))                   \
    X(hipGetDevice, REQUIRED, hip_result, (int *device))                       \
    X(hipSetDevice, REQUIRED, hip_result, (int device))                        \
    X(hipDeviceGetName, REQUIRED, hip_result,                                  \
      (char *name, int len, hip_device dev))                                   \
    X(hipDeviceGetAttribute, REQUIRED, hip_result,                             \
      (int *value, hip_device_attribute attrib, int dev))                      \
    X(hipGetDeviceProperties, REQUIRED, hip_result,                            \
      (struct hipDeviceProp_t * prop, int dev))                                \
    X(hipDeviceCanAccessPeer, REQUIRED, hip_result,                            \
      (int *can_access, int dev, int peer))                                    \
    X(hipMemGetInfo, REQUIRED, hip_result,                                     \
      (size_t * free_bytes, size_t * total_bytes))                             \
    X(hipStreamCreateWithFlags, REQUIRED, hip_result,                          \
      (hip_stream * stream, unsigned int flags))                               \
    X(hipStreamDestroy, REQUIRED, hip_result, (hip_stream stream))             \
    X(hipStreamQuery, REQUIRED, hip_result, (hip_stream stream))               \
    X(hipStreamWaitEvent, REQUIRED, hip_result,                                \
      (hip_stream stream, hip_event event, unsigned int flags))                \
    X(hipEventCreateWithFlags, REQUIRED, hip_result,                           \
      (hip_event * event, unsigned int flags))                                 \
    X(hipEventDestroy, REQUIRED, hip_result, (hip_event event))                \
    X(hipEventRecord, REQUIRED, hip_result,                                    \
      (hip_event event, hip_stream stream))                                    \
    X(hipEventQuery, REQUIRED, hip_result, (hip_event event))                  \
    X(hipEventSynchronize, REQUIRED, hip_result, (hip_event event))            \
    X(hipEventElapsedTime, REQUIRED, hip_result,                               \
      (float *ms, hip_event start, hip_event end))                             \
    X(hipHostMalloc, REQUIRED, hip_result,                                     \
      (void **host, size_t bytes, unsigned int flags))                         \
    X(hipHostGetDevicePointer, REQUIRED, hip_result,                           \
      (void **device, void *host, unsigned int flags))                         \
    X(hipHostFree, REQUIRED, hip_result, (void *host))                         \
    X(hipStreamWaitValue64, OPTIONAL, hip_result,                              \
      (hip_stream stream, void *ptr, uint64_t value, unsigned int flags,       \
       uint64_t mask))                                                         \
    X(hipLaunchHostFunc, OPTIONAL, hip_result,                                 \
      (hip_stream stream, hip_host_fn fn, void *user_data))                    \
    X(hipStreamAddCallback, OPTIONAL, hip_result,                              \
      (hip_stream stream, hip_stream_callback callback, void *user_data,       \
       unsigned int flags))                                                    \
    HIP_MEMORY_ENTRY_POINTS(X)                                                 \
    HIP_CAPTURE_ENTRY_POINTS(X)

/* Device memory, copies and fills (the Buffer type). */
#define HIP_MEMORY_ENTRY_POINTS(X)                                             \
    X(hipMalloc, REQUIRED, hip_result, (void **ptr, size_t bytes))             \
    X(hipFree, REQUIRED, hip_result, (void *ptr))                              \
    X(hipMallocAsync, OPTIONAL, hip_result,                                    \
      (void **ptr, size_t bytes, hip_stream stream))                           \
    X(hipFreeAsync, OPTIONAL, hip_result, (void *ptr, hip_stream stream))      \
    X(hipMemcpyHtoDAsync, REQUIRED, hip_result,                                \
      (void *dst, void *src, size_t bytes, hip_stream stream))                 \
    X(hipMemcpyDtoHAsync, REQUIRED, hip_result,                                \
      (void *dst, void *src, size_t bytes, hip_stream stream))                 \
    X(hipMemcpyDtoDAsync, REQUIRED, hip_result,                                \
      (void *dst, void *src, size_t bytes, hip_stream stream))                 \
    X(hipMemcpyPeerAsync, REQUIRED, hip_result,                                \
      (void *dst, int dst_device, const void *src, int src_device,             \
       size_t bytes, hip_stream stream))                                       \
    X(hipMemcpy2DAsync, REQUIRED, hip_result,                                  \
      (void *dst, size_t dst_pitch, const void *src, size_t src_pitch,         \
       size_t width, size_t height, hip_memcpy_kind kind, hip_stream stream))  \
    X(hipMemsetD8Async, REQUIRED, hip_result,                                  \
      (void *dst, unsigned char value, size_t count, hip_stream stream))       \
    X(hipMemsetD16Async, REQUIRED, hip_result,                                 \
      (void *dst, unsigned short value, size_t count, hip_stream stream))      \
    X(hipMemsetD32Async, REQUIRED, hip_result,                                 \
      (void *dst, int value, size_t count, hip_stream stream))                 \
    X(hipPointerGetAttribute, OPTIONAL, hip_result,                            \
      (void *data, hip_pointer_attribute attribute, void *ptr))                \
    X(hipDeviceEnablePeerAccess, OPTIONAL, hip_result,                         \
      (int peer, unsigned int flags))                                          \
    X(hipDeviceGetDefaultMemPool, OPTIONAL, hip_result,                        \
      (hip_mempool * pool, int device))                                        \
    X(hipMemPoolSetAttribute, OPTIONAL, hip_result,                            \
      (hip_mempool pool, hip_mempool_attribute attr, void *value))             \
    X(hipMemPoolSetAccess, OPTIONAL, hip_result,                               \
      (hip_mempool pool, const hip_mem_access_desc *desc, size_t count))

/* Stream capture and graphs (DeviceQueue.begin_capture, DeviceGraph). */
#define HIP_CAPTURE_ENTRY_POINTS(X)                                            \
    X(hipStreamBeginCapture, OPTIONAL, hip_result,                             \
      (hip_stream stream, hip_stream_capture_mode mode))                       \
    X(hipStreamEndCapture, OPTIONAL, hip_result,                               \
      (hip_stream stream, hip_graph * graph))                                  \
    X(hipGraphInstantiateWithFlags, OPTIONAL, hip_result,                      \
      (hip_graph_exec * exec, hip_graph graph, unsigned long long flags))      \
    X(hipGraphLaunch, OPTIONAL, hip_result,                                    \
      (hip_graph_exec exec, hip_stream stream))                                \
    X(hipGraphExecDestroy, OPTIONAL, hip_result, (hip_graph_exec exec))        \
    X(hipGraphDestroy, OPTIONAL, hip_result, (hip_graph graph))

#define HIP_ENTRY_POINTS_5_3(X)                                                \
    X(hipDeviceGetGraphMemAttribute, OPTIONAL, hip_result,                     \
      (int dev, hip_graph_mem_attribute attr, void *value))

#endif /* MXD_HIP_ABI_H */
