/* Our own declarations of the few CUDA driver API types, constants and
 * entry points the CUDA backend uses, so that no CUDA SDK is needed to
 * build.  Names and types mirror <cuda.h>; tests/abi/check_abi.c compiles
 * them against the real header (when installed) and fails on any
 * difference. */
#ifndef MXD_CUDA_ABI_H
#define MXD_CUDA_ABI_H

#include <stddef.h>
#include <stdint.h>

typedef unsigned int cu_result; /* enum cudaError_enum */
typedef int cu_device;
typedef unsigned long long cu_deviceptr;
typedef struct CUctx_st *cu_context;
typedef struct CUstream_st *cu_stream;
typedef struct CUevent_st *cu_event;
typedef unsigned int cu_device_attribute;    /* enum CUdevice_attribute */
typedef unsigned int cu_graph_mem_attribute; /* enum CUgraphMem_attribute */
typedef unsigned int cu_memorytype;          /* enum CUmemorytype_enum */
typedef unsigned int cu_pointer_attribute;   /* enum CUpointer_attribute */
typedef struct CUmemPoolHandle_st *cu_mempool;
typedef struct CUgraph_st *cu_graph;
typedef struct CUgraphExec_st *cu_graph_exec;
typedef unsigned int cu_stream_capture_mode; /* enum CUstreamCaptureMode */
typedef unsigned int cu_mempool_attribute;   /* enum CUmemPool_attribute */
typedef void (*cu_host_fn)(void *user_data);
typedef void (*cu_stream_callback)(cu_stream stream, cu_result status,
                                   void *user_data);

/* Prefixed so that they can sit beside <cuda.h>'s own in the ABI check. */
enum {
    MXD_CU_SUCCESS = 0,
    MXD_CU_ERROR_INVALID_VALUE = 1,
    MXD_CU_ERROR_OUT_OF_MEMORY = 2,
    MXD_CU_ERROR_INVALID_CONTEXT = 201,
    MXD_CU_ERROR_PEER_ACCESS_ALREADY_ENABLED = 704,
    MXD_CU_ERROR_NOT_READY = 600,
    MXD_CU_ERROR_NOT_PERMITTED = 800,
    MXD_CU_STREAM_NON_BLOCKING = 0x1,
    MXD_CU_EVENT_BLOCKING_SYNC = 0x1,
    MXD_CU_EVENT_DISABLE_TIMING = 0x2,
    MXD_CU_MEMHOSTALLOC_PORTABLE = 0x1,
    MXD_CU_MEMHOSTALLOC_DEVICEMAP = 0x2,
    MXD_CU_STREAM_WAIT_VALUE_GEQ = 0x0,
    MXD_CU_STREAM_WAIT_VALUE_EQ = 0x1,
    MXD_CU_DEVICE_ATTRIBUTE_MAX_PITCH = 11,
    MXD_CU_DEVICE_ATTRIBUTE_INTEGRATED = 18,
    MXD_CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING = 41,
    MXD_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75,
    MXD_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76,
    /* Drivers before CUDA 12 report 64-bit stream memory operations under
     * the attribute that CUDA 12 renamed ..._V1. */
    MXD_CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS_V1 = 93,
    MXD_CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED = 115,
    MXD_CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS = 122,
    MXD_CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT = 0,
    MXD_CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT = 2,
    MXD_CU_MEMORYTYPE_HOST = 0x1,
    MXD_CU_MEMORYTYPE_DEVICE = 0x2,
    MXD_CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9,
    MXD_CU_MEMPOOL_ATTR_RELEASE_THRESHOLD = 4,
    MXD_CU_MEM_LOCATION_TYPE_DEVICE = 1,
    MXD_CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 3,
    MXD_CU_STREAM_CAPTURE_MODE_RELAXED = 2,
    MXD_CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED = 132,
    MXD_CU_MEM_ALLOCATION_TYPE_PINNED = 0x1,
    MXD_CU_MEM_ALLOC_GRANULARITY_MINIMUM = 0x0,
    MXD_CU_MULTICAST_GRANULARITY_RECOMMENDED = 0x1,
};

/* CUmemLocation and CUmemAccessDesc for cuMemPoolSetAccess. */
typedef struct cu_mem_location {
    unsigned int type; /* CUmemLocationType */
    int id;
} cu_mem_location;
typedef struct cu_mem_access_desc {
    cu_mem_location location;
    unsigned int flags; /* CUmemAccess_flags */
} cu_mem_access_desc;

/* Virtual memory management and multicast objects (SymmetricPool). */
typedef unsigned long long cu_mem_handle; /* CUmemGenericAllocationHandle */
/* CUmemAllocationProp (CUDA 10.2) for cuMemCreate. */
typedef struct cu_mem_alloc_prop {
    unsigned int type;                 /* CUmemAllocationType */
    unsigned int requestedHandleTypes; /* CUmemAllocationHandleType */
    cu_mem_location location;
    void *win32HandleMetaData;
    struct {
        unsigned char compressionType;
        unsigned char gpuDirectRDMACapable;
        unsigned short usage;
        unsigned char reserved[4];
    } allocFlags;
} cu_mem_alloc_prop;
/* CUmulticastObjectProp (CUDA 12.1) for cuMulticastCreate. */
typedef struct cu_multicast_prop {
    unsigned int numDevices;
    size_t size;
    unsigned long long handleTypes; /* CUmemAllocationHandleType bits */
    unsigned long long flags;
} cu_multicast_prop;

/* CUDA_MEMCPY2D (the _v2 layout, CUDA 3.2 and later) for cuMemcpy2DAsync. */
typedef struct cu_memcpy2d {
    size_t srcXInBytes, srcY;
    cu_memorytype srcMemoryType;
    const void *srcHost;
    cu_deviceptr srcDevice;
    struct CUarray_st *srcArray;
    size_t srcPitch;
    size_t dstXInBytes, dstY;
    cu_memorytype dstMemoryType;
    void *dstHost;
    cu_deviceptr dstDevice;
    struct CUarray_st *dstArray;
    size_t dstPitch;
    size_t WidthInBytes, Height;
} cu_memcpy2d;

/* The entry points: X(name, version, kind, return, parameters).
 *   name     the base name given to cuGetProcAddress
 *   version  the CUDA version whose ABI of `name` we declare (selects the
 *            _v2 variants); a driver older than that is asked for its own
 *            version, whose function has the same signature for every
 *            entry point below.  dlsym falls back to the versioned symbol
 *            names listed in cuda.c
 *   kind     REQUIRED (the backend cannot work without it) or OPTIONAL (its
 *            absence disables one feature, named in the error) */
#define CUDA_ENTRY_POINTS(X)                                                   \
    X(cuInit, 2000, REQUIRED, cu_result, (unsigned int flags))                 \
    X(cuDriverGetVersion, 2020, REQUIRED, cu_result, (int *version))           \
    X(cuGetErrorName, 6000, REQUIRED, cu_result,                               \
      (cu_result error, const char **name))                                    \
    X(cuGetErrorString, 6000, OPTIONAL, cu_result,                             \
      (cu_result error, const char **text))                                    \
    X(cuDeviceGetCount, 2000, REQUIRED, cu_result, (int *count))               \
    X(cuDeviceGet, 2000, REQUIRED, cu_result,                                  \
      (cu_device * device, int ordinal))                                       \
    X(cuDeviceGetName, 2000, REQUIRED, cu_result,                              \
      (char *name, int len, cu_device dev))                                    \
    X(cuDeviceGetAttribute, 2000, REQUIRED, cu_result,                         \
      (int *value, cu_device_attribute attrib, cu_device dev))                 \
    X(cuDeviceCanAccessPeer, 4000, REQUIRED, cu_result,                        \
      (int *can_access, cu_device dev, cu_device peer))                        \
    X(cuDevicePrimaryCtxRetain, 7000, REQUIRED, cu_result,                     \
      (cu_context * ctx, cu_device dev))                                       \
    X(cuCtxPushCurrent, 4000, REQUIRED, cu_result, (cu_context ctx))           \
    X(cuCtxPopCurrent, 4000, REQUIRED, cu_result, (cu_context * ctx))          \
    X(cuCtxGetCurrent, 4000, REQUIRED, cu_result, (cu_context * ctx))          \
    X(cuCtxEnablePeerAccess, 4000, OPTIONAL, cu_result,                        \
      (cu_context peer, unsigned int flags))                                   \
    X(cuMemGetInfo, 3020, REQUIRED, cu_result,                                 \
      (size_t * free_bytes, size_t * total_bytes))                             \
    X(cuDeviceGetGraphMemAttribute, 11040, OPTIONAL, cu_result,                \
      (cu_device dev, cu_graph_mem_attribute attr, void *value))               \
    X(cuStreamCreate, 2000, REQUIRED, cu_result,                               \
      (cu_stream * stream, unsigned int flags))                                \
    X(cuStreamDestroy, 4000, REQUIRED, cu_result, (cu_stream stream))          \
    X(cuStreamQuery, 2000, REQUIRED, cu_result, (cu_stream stream))            \
    X(cuStreamWaitEvent, 3020, REQUIRED, cu_result,                            \
      (cu_stream stream, cu_event event, unsigned int flags))                  \
    X(cuEventCreate, 2000, REQUIRED, cu_result,                                \
      (cu_event * event, unsigned int flags))                                  \
    X(cuEventDestroy, 4000, REQUIRED, cu_result, (cu_event event))             \
    X(cuEventRecord, 2000, REQUIRED, cu_result,                                \
      (cu_event event, cu_stream stream))                                      \
    X(cuEventQuery, 2000, REQUIRED, cu_result, (cu_event event))               \
    X(cuEventSynchronize, 2000, REQUIRED, cu_result, (cu_event event))         \
    X(cuEventElapsedTime, 12080, REQUIRED, cu_result,                          \
      (float *ms, cu_event start, cu_event end))                               \
    X(cuMemHostAlloc, 3020, REQUIRED, cu_result,                               \
      (void **host, size_t bytes, unsigned int flags))                         \
    X(cuMemHostGetDevicePointer, 3020, REQUIRED, cu_result,                    \
      (cu_deviceptr * device, void *host, unsigned int flags))                 \
    X(cuMemFreeHost, 2000, REQUIRED, cu_result, (void *host))                  \
    X(cuStreamWaitValue64, 11070, OPTIONAL, cu_result,                         \
      (cu_stream stream, cu_deviceptr addr, uint64_t value,                    \
       unsigned int flags))                                                    \
    X(cuLaunchHostFunc, 10000, OPTIONAL, cu_result,                            \
      (cu_stream stream, cu_host_fn fn, void *user_data))                      \
    X(cuStreamAddCallback, 5000, OPTIONAL, cu_result,                          \
      (cu_stream stream, cu_stream_callback callback, void *user_data,         \
       unsigned int flags))                                                    \
    CUDA_MEMORY_ENTRY_POINTS(X)                                                \
    CUDA_CAPTURE_ENTRY_POINTS(X)                                               \
    CUDA_MULTICAST_ENTRY_POINTS(X)

/* Device memory, copies and fills (the Buffer type). */
#define CUDA_MEMORY_ENTRY_POINTS(X)                                            \
    X(cuMemAlloc, 3020, REQUIRED, cu_result,                                   \
      (cu_deviceptr * ptr, size_t bytes))                                      \
    X(cuMemFree, 3020, REQUIRED, cu_result, (cu_deviceptr ptr))                \
    X(cuMemAllocAsync, 11020, OPTIONAL, cu_result,                             \
      (cu_deviceptr * ptr, size_t bytes, cu_stream stream))                    \
    X(cuMemFreeAsync, 11020, OPTIONAL, cu_result,                              \
      (cu_deviceptr ptr, cu_stream stream))                                    \
    X(cuMemcpyHtoDAsync, 3020, REQUIRED, cu_result,                            \
      (cu_deviceptr dst, const void *src, size_t bytes, cu_stream stream))     \
    X(cuMemcpyDtoHAsync, 3020, REQUIRED, cu_result,                            \
      (void *dst, cu_deviceptr src, size_t bytes, cu_stream stream))           \
    X(cuMemcpyDtoDAsync, 3020, REQUIRED, cu_result,                            \
      (cu_deviceptr dst, cu_deviceptr src, size_t bytes, cu_stream stream))    \
    X(cuMemcpyPeerAsync, 4000, REQUIRED, cu_result,                            \
      (cu_deviceptr dst, cu_context dst_ctx, cu_deviceptr src,                 \
       cu_context src_ctx, size_t bytes, cu_stream stream))                    \
    X(cuMemcpy2DAsync, 3020, REQUIRED, cu_result,                              \
      (const cu_memcpy2d *copy, cu_stream stream))                             \
    X(cuMemsetD8Async, 3020, REQUIRED, cu_result,                              \
      (cu_deviceptr dst, unsigned char value, size_t count, cu_stream stream)) \
    X(cuMemsetD16Async, 3020, REQUIRED, cu_result,                             \
      (cu_deviceptr dst, unsigned short value, size_t count,                   \
       cu_stream stream))                                                      \
    X(cuMemsetD32Async, 3020, REQUIRED, cu_result,                             \
      (cu_deviceptr dst, unsigned int value, size_t count, cu_stream stream))  \
    X(cuPointerGetAttribute, 4000, OPTIONAL, cu_result,                        \
      (void *data, cu_pointer_attribute attribute, cu_deviceptr ptr))          \
    X(cuDeviceGetDefaultMemPool, 11020, OPTIONAL, cu_result,                   \
      (cu_mempool * pool, cu_device dev))                                      \
    X(cuMemPoolSetAttribute, 11020, OPTIONAL, cu_result,                       \
      (cu_mempool pool, cu_mempool_attribute attr, void *value))               \
    X(cuMemPoolSetAccess, 11020, OPTIONAL, cu_result,                          \
      (cu_mempool pool, const cu_mem_access_desc *map, size_t count))

/* Stream capture and graphs (DeviceQueue.begin_capture, DeviceGraph):
 * optional, since a driver without them only lacks capture. */
#define CUDA_CAPTURE_ENTRY_POINTS(X)                                           \
    X(cuStreamBeginCapture, 10010, OPTIONAL, cu_result,                        \
      (cu_stream stream, cu_stream_capture_mode mode))                         \
    X(cuStreamEndCapture, 10000, OPTIONAL, cu_result,                          \
      (cu_stream stream, cu_graph * graph))                                    \
    X(cuGraphInstantiateWithFlags, 11040, OPTIONAL, cu_result,                 \
      (cu_graph_exec * exec, cu_graph graph, unsigned long long flags))        \
    X(cuGraphLaunch, 10000, OPTIONAL, cu_result,                               \
      (cu_graph_exec exec, cu_stream stream))                                  \
    X(cuGraphExecDestroy, 10000, OPTIONAL, cu_result, (cu_graph_exec exec))    \
    X(cuGraphDestroy, 10000, OPTIONAL, cu_result, (cu_graph graph))

/* Memory mapped by hand and multicast objects (SymmetricPool); a driver
 * without them has no multicast support. */
#define CUDA_MULTICAST_ENTRY_POINTS(X)                                         \
    X(cuMemGetAllocationGranularity, 10020, OPTIONAL, cu_result,               \
      (size_t * granularity, const cu_mem_alloc_prop *prop,                    \
       unsigned int option))                                                   \
    X(cuMemCreate, 10020, OPTIONAL, cu_result,                                 \
      (cu_mem_handle * handle, size_t size, const cu_mem_alloc_prop *prop,     \
       unsigned long long flags))                                              \
    X(cuMemRelease, 10020, OPTIONAL, cu_result, (cu_mem_handle handle))        \
    X(cuMemAddressReserve, 10020, OPTIONAL, cu_result,                         \
      (cu_deviceptr * ptr, size_t size, size_t alignment, cu_deviceptr addr,   \
       unsigned long long flags))                                              \
    X(cuMemAddressFree, 10020, OPTIONAL, cu_result,                            \
      (cu_deviceptr ptr, size_t size))                                         \
    X(cuMemMap, 10020, OPTIONAL, cu_result,                                    \
      (cu_deviceptr ptr, size_t size, size_t offset, cu_mem_handle handle,     \
       unsigned long long flags))                                              \
    X(cuMemUnmap, 10020, OPTIONAL, cu_result, (cu_deviceptr ptr, size_t size)) \
    X(cuMemSetAccess, 10020, OPTIONAL, cu_result,                              \
      (cu_deviceptr ptr, size_t size, const cu_mem_access_desc *desc,          \
       size_t count))                                                          \
    X(cuMulticastGetGranularity, 12010, OPTIONAL, cu_result,                   \
      (size_t * granularity, const cu_multicast_prop *prop,                    \
       unsigned int option))                                                   \
    X(cuMulticastCreate, 12010, OPTIONAL, cu_result,                           \
      (cu_mem_handle * handle, const cu_multicast_prop *prop))                 \
    X(cuMulticastAddDevice, 12010, OPTIONAL, cu_result,                        \
      (cu_mem_handle handle, cu_device dev))                                   \
    X(cuMulticastBindMem, 12010, OPTIONAL, cu_result,                          \
      (cu_mem_handle handle, size_t offset, cu_mem_handle memory,              \
       size_t memory_offset, size_t size, unsigned long long flags))

/* cuGetProcAddress_v2 (CUDA 12.0+); `status` may be NULL. */
typedef cu_result (*cu_get_proc_address_fn)(const char *symbol, void **pfn,
                                            int cuda_version, uint64_t flags,
                                            int *status);

#endif /* MXD_CUDA_ABI_H */
