/* Compiles our own driver declarations (csrc/backends/cuda_abi.h, hip_abi.h)
 * against the real SDK headers and fails to compile on any difference: a
 * wrong parameter type, return type or constant cannot hide.  Built by
 * tests/test_abi.py with -DCHECK_CUDA (cuda.h) and/or -DCHECK_HIP
 * (hip/hip_runtime_api.h). */
#include <stddef.h>

#define SAME_TYPE(a, b) __builtin_types_compatible_p(a, b)

#ifdef CHECK_CUDA
#include <cuda.h>

#include "cuda_abi.h"

/* Our cu_memcpy2d is CUDA_MEMCPY2D field for field. */
#define CHECK_MEMCPY2D_FIELD(field)                                            \
    _Static_assert(offsetof(cu_memcpy2d, field) ==                             \
                       offsetof(CUDA_MEMCPY2D, field),                         \
                   "cu_memcpy2d." #field);                                     \
    _Static_assert(sizeof(((cu_memcpy2d *)0)->field) ==                        \
                       sizeof(((CUDA_MEMCPY2D *)0)->field),                    \
                   "sizeof cu_memcpy2d." #field);
CHECK_MEMCPY2D_FIELD(srcXInBytes)
CHECK_MEMCPY2D_FIELD(srcY)
CHECK_MEMCPY2D_FIELD(srcMemoryType)
CHECK_MEMCPY2D_FIELD(srcHost)
CHECK_MEMCPY2D_FIELD(srcDevice)
CHECK_MEMCPY2D_FIELD(srcArray)
CHECK_MEMCPY2D_FIELD(srcPitch)
CHECK_MEMCPY2D_FIELD(dstXInBytes)
CHECK_MEMCPY2D_FIELD(dstY)
CHECK_MEMCPY2D_FIELD(dstMemoryType)
CHECK_MEMCPY2D_FIELD(dstHost)
CHECK_MEMCPY2D_FIELD(dstDevice)
CHECK_MEMCPY2D_FIELD(dstArray)
CHECK_MEMCPY2D_FIELD(dstPitch)
CHECK_MEMCPY2D_FIELD(WidthInBytes)
CHECK_MEMCPY2D_FIELD(Height)
#undef CHECK_MEMCPY2D_FIELD
_Static_assert(sizeof(cu_memcpy2d) == sizeof(CUDA_MEMCPY2D),
               "sizeof CUDA_MEMCPY2D");
_Static_assert(SAME_TYPE(__typeof__(((cu_memcpy2d *)0)->srcArray), CUarray),
               "CUarray");

/* Each entry point's real prototype (after cuda.h maps names such as
 * cuStreamDestroy to cuStreamDestroy_v2) must match our declaration.  Our
 * cu_memcpy2d is a distinct struct type with the layout checked above, so
 * the prototypes are compared with CUDA_MEMCPY2D in its place (a macro
 * defined here only, after the header's own use of the name). */
#define cu_memcpy2d CUDA_MEMCPY2D
#define cu_mem_access_desc CUmemAccessDesc
#define cu_mem_alloc_prop CUmemAllocationProp
#define cu_multicast_prop CUmulticastObjectProp
#define CHECK_CUDA_ENTRY(name, version, kind, ret, params)                     \
    _Static_assert(SAME_TYPE(__typeof__(&name), ret(*) params),                \
                   #name " differs from cuda.h");
CUDA_ENTRY_POINTS(CHECK_CUDA_ENTRY)
#undef cu_memcpy2d
#undef cu_mem_access_desc
#undef cu_mem_alloc_prop
#undef cu_multicast_prop

/* Our cu_mem_alloc_prop and cu_multicast_prop (compared as the SDK's types
 * in the prototypes above) have the SDK's layouts. */
#define CHECK_LAYOUT(ours, theirs, field)                                      \
    _Static_assert(offsetof(ours, field) == offsetof(theirs, field) &&         \
                       sizeof(((ours *)0)->field) ==                           \
                           sizeof(((theirs *)0)->field),                       \
                   #theirs "." #field);
CHECK_LAYOUT(cu_mem_alloc_prop, CUmemAllocationProp, type)
CHECK_LAYOUT(cu_mem_alloc_prop, CUmemAllocationProp, requestedHandleTypes)
CHECK_LAYOUT(cu_mem_alloc_prop, CUmemAllocationProp, location)
CHECK_LAYOUT(cu_mem_alloc_prop, CUmemAllocationProp, win32HandleMetaData)
CHECK_LAYOUT(cu_mem_alloc_prop, CUmemAllocationProp, allocFlags)
CHECK_LAYOUT(cu_multicast_prop, CUmulticastObjectProp, numDevices)
CHECK_LAYOUT(cu_multicast_prop, CUmulticastObjectProp, size)
CHECK_LAYOUT(cu_multicast_prop, CUmulticastObjectProp, handleTypes)
CHECK_LAYOUT(cu_multicast_prop, CUmulticastObjectProp, flags)
#undef CHECK_LAYOUT
_Static_assert(sizeof(cu_mem_alloc_prop) == sizeof(CUmemAllocationProp),
               "sizeof CUmemAllocationProp");
_Static_assert(sizeof(cu_multicast_prop) == sizeof(CUmulticastObjectProp),
               "sizeof CUmulticastObjectProp");
_Static_assert(SAME_TYPE(cu_mem_handle, CUmemGenericAllocationHandle),
               "CUmemGenericAllocationHandle");

/* Our cu_mem_access_desc (in cuMemPoolSetAccess, compared as
 * CUmemAccessDesc above) is CUmemAccessDesc field for field. */
_Static_assert(offsetof(cu_mem_access_desc, location.type) ==
                       offsetof(CUmemAccessDesc, location.type) &&
                   offsetof(cu_mem_access_desc, location.id) ==
                       offsetof(CUmemAccessDesc, location.id) &&
                   offsetof(cu_mem_access_desc, flags) ==
                       offsetof(CUmemAccessDesc, flags) &&
                   sizeof(cu_mem_access_desc) == sizeof(CUmemAccessDesc),
               "CUmemAccessDesc layout");
_Static_assert(SAME_TYPE(cu_mempool, CUmemoryPool), "CUmemoryPool");
_Static_assert(SAME_TYPE(cu_mempool_attribute, CUmemPool_attribute),
               "CUmemPool_attribute");

_Static_assert(SAME_TYPE(cu_result, CUresult), "CUresult");
_Static_assert(SAME_TYPE(cu_graph, CUgraph), "CUgraph");
_Static_assert(SAME_TYPE(cu_graph_exec, CUgraphExec), "CUgraphExec");
_Static_assert(SAME_TYPE(cu_stream_capture_mode, CUstreamCaptureMode),
               "CUstreamCaptureMode");
_Static_assert(SAME_TYPE(cu_device, CUdevice), "CUdevice");
_Static_assert(SAME_TYPE(cu_deviceptr, CUdeviceptr), "CUdeviceptr");
_Static_assert(SAME_TYPE(cu_stream, CUstream), "CUstream");
_Static_assert(SAME_TYPE(cu_event, CUevent), "CUevent");
_Static_assert(SAME_TYPE(cu_context, CUcontext), "CUcontext");
_Static_assert(SAME_TYPE(cu_host_fn, CUhostFn), "CUhostFn");
_Static_assert(SAME_TYPE(cu_stream_callback, CUstreamCallback),
               "CUstreamCallback");
_Static_assert(SAME_TYPE(cu_device_attribute, CUdevice_attribute),
               "CUdevice_attribute");
_Static_assert(SAME_TYPE(cu_graph_mem_attribute, CUgraphMem_attribute),
               "CUgraphMem_attribute");
_Static_assert(SAME_TYPE(cu_memorytype, CUmemorytype), "CUmemorytype");
_Static_assert(SAME_TYPE(cu_pointer_attribute, CUpointer_attribute),
               "CUpointer_attribute");
#define CHECK_CONSTANT(name) _Static_assert(MXD_##name == name, #name);
_Static_assert(MXD_CU_SUCCESS == CUDA_SUCCESS, "CUDA_SUCCESS");
_Static_assert(MXD_CU_ERROR_INVALID_VALUE == CUDA_ERROR_INVALID_VALUE,
               "CUDA_ERROR_INVALID_VALUE");
_Static_assert(MXD_CU_ERROR_OUT_OF_MEMORY == CUDA_ERROR_OUT_OF_MEMORY,
               "CUDA_ERROR_OUT_OF_MEMORY");
_Static_assert(MXD_CU_ERROR_INVALID_CONTEXT == CUDA_ERROR_INVALID_CONTEXT,
               "CUDA_ERROR_INVALID_CONTEXT");
_Static_assert(MXD_CU_ERROR_PEER_ACCESS_ALREADY_ENABLED ==
                   CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED,
               "CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED");
_Static_assert(MXD_CU_ERROR_NOT_READY == CUDA_ERROR_NOT_READY,
               "CUDA_ERROR_NOT_READY");
_Static_assert(MXD_CU_ERROR_NOT_PERMITTED == CUDA_ERROR_NOT_PERMITTED,
               "CUDA_ERROR_NOT_PERMITTED");
CHECK_CONSTANT(CU_STREAM_NON_BLOCKING)
CHECK_CONSTANT(CU_EVENT_BLOCKING_SYNC)
CHECK_CONSTANT(CU_EVENT_DISABLE_TIMING)
CHECK_CONSTANT(CU_MEMHOSTALLOC_PORTABLE)
CHECK_CONSTANT(CU_MEMHOSTALLOC_DEVICEMAP)
CHECK_CONSTANT(CU_STREAM_WAIT_VALUE_GEQ)
CHECK_CONSTANT(CU_STREAM_WAIT_VALUE_EQ)
CHECK_CONSTANT(CU_DEVICE_ATTRIBUTE_INTEGRATED)
CHECK_CONSTANT(CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING)
CHECK_CONSTANT(CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED)
CHECK_CONSTANT(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)
CHECK_CONSTANT(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)
CHECK_CONSTANT(CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS_V1)
CHECK_CONSTANT(CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS)
CHECK_CONSTANT(CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT)
CHECK_CONSTANT(CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT)
CHECK_CONSTANT(CU_MEMORYTYPE_HOST)
CHECK_CONSTANT(CU_MEMORYTYPE_DEVICE)
CHECK_CONSTANT(CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL)
CHECK_CONSTANT(CU_DEVICE_ATTRIBUTE_MAX_PITCH)
CHECK_CONSTANT(CU_MEMPOOL_ATTR_RELEASE_THRESHOLD)
CHECK_CONSTANT(CU_MEM_LOCATION_TYPE_DEVICE)
CHECK_CONSTANT(CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
CHECK_CONSTANT(CU_STREAM_CAPTURE_MODE_RELAXED)
CHECK_CONSTANT(CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED)
CHECK_CONSTANT(CU_MEM_ALLOCATION_TYPE_PINNED)
CHECK_CONSTANT(CU_MEM_ALLOC_GRANULARITY_MINIMUM)
CHECK_CONSTANT(CU_MULTICAST_GRANULARITY_RECOMMENDED)
#undef CHECK_CONSTANT
#endif

#ifdef CHECK_HIP
#include <hip/hip_runtime_api.h>

#include "hip_abi.h"

#define CHECK_HIP_ENTRY(name, kind, ret, params)                               \
    _Static_assert(SAME_TYPE(__typeof__(&name), ret(*) params),                \
                   #name " differs from hip_runtime_api.h");
#define hip_mem_access_desc hipMemAccessDesc
HIP_ENTRY_POINTS_5_2(CHECK_HIP_ENTRY)
#if HIP_VERSION >= 50300000
HIP_ENTRY_POINTS_5_3(CHECK_HIP_ENTRY)
#endif
#undef hip_mem_access_desc

_Static_assert(offsetof(hip_mem_access_desc, location.type) ==
                       offsetof(hipMemAccessDesc, location.type) &&
                   offsetof(hip_mem_access_desc, location.id) ==
                       offsetof(hipMemAccessDesc, location.id) &&
                   offsetof(hip_mem_access_desc, flags) ==
                       offsetof(hipMemAccessDesc, flags) &&
                   sizeof(hip_mem_access_desc) == sizeof(hipMemAccessDesc),
               "hipMemAccessDesc layout");
_Static_assert(SAME_TYPE(hip_mempool, hipMemPool_t), "hipMemPool_t");
_Static_assert(SAME_TYPE(hip_mempool_attribute, hipMemPoolAttr),
               "hipMemPoolAttr");

_Static_assert(SAME_TYPE(hip_result, hipError_t), "hipError_t");
_Static_assert(SAME_TYPE(hip_graph, hipGraph_t), "hipGraph_t");
_Static_assert(SAME_TYPE(hip_graph_exec, hipGraphExec_t), "hipGraphExec_t");
_Static_assert(SAME_TYPE(hip_stream_capture_mode, hipStreamCaptureMode),
               "hipStreamCaptureMode");
_Static_assert(SAME_TYPE(hip_stream, hipStream_t), "hipStream_t");
_Static_assert(SAME_TYPE(hip_event, hipEvent_t), "hipEvent_t");
_Static_assert(SAME_TYPE(hip_host_fn, hipHostFn_t), "hipHostFn_t");
_Static_assert(SAME_TYPE(hip_stream_callback, hipStreamCallback_t),
               "hipStreamCallback_t");
_Static_assert(SAME_TYPE(hip_device_attribute, hipDeviceAttribute_t),
               "hipDeviceAttribute_t");
_Static_assert(SAME_TYPE(hip_memcpy_kind, hipMemcpyKind), "hipMemcpyKind");
_Static_assert(SAME_TYPE(hip_pointer_attribute, hipPointer_attribute),
               "hipPointer_attribute");
#define CHECK_CONSTANT(ours, theirs) _Static_assert(ours == theirs, #theirs);
CHECK_CONSTANT(MXD_HIP_SUCCESS, hipSuccess)
CHECK_CONSTANT(MXD_HIP_ERROR_INVALID_VALUE, hipErrorInvalidValue)
CHECK_CONSTANT(MXD_HIP_ERROR_OUT_OF_MEMORY, hipErrorOutOfMemory)
CHECK_CONSTANT(MXD_HIP_ERROR_NOT_READY, hipErrorNotReady)
CHECK_CONSTANT(MXD_HIP_ERROR_NOT_SUPPORTED, hipErrorNotSupported)
CHECK_CONSTANT(MXD_HIP_STREAM_NON_BLOCKING, hipStreamNonBlocking)
CHECK_CONSTANT(MXD_HIP_EVENT_BLOCKING_SYNC, hipEventBlockingSync)
CHECK_CONSTANT(MXD_HIP_EVENT_DISABLE_TIMING, hipEventDisableTiming)
CHECK_CONSTANT(MXD_HIP_HOST_MALLOC_PORTABLE, hipHostMallocPortable)
CHECK_CONSTANT(MXD_HIP_HOST_MALLOC_MAPPED, hipHostMallocMapped)
CHECK_CONSTANT(MXD_HIP_STREAM_WAIT_VALUE_GTE, hipStreamWaitValueGte)
CHECK_CONSTANT(MXD_HIP_STREAM_WAIT_VALUE_EQ, hipStreamWaitValueEq)
CHECK_CONSTANT(MXD_HIP_DEVICE_ATTRIBUTE_INTEGRATED,
               hipDeviceAttributeIntegrated)
CHECK_CONSTANT(MXD_HIP_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE,
               hipDeviceAttributeCanUseStreamWaitValue)
CHECK_CONSTANT(MXD_HIP_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED,
               hipDeviceAttributeMemoryPoolsSupported)
CHECK_CONSTANT(MXD_HIP_MEMCPY_HOST_TO_DEVICE, hipMemcpyHostToDevice)
CHECK_CONSTANT(MXD_HIP_MEMCPY_DEVICE_TO_HOST, hipMemcpyDeviceToHost)
CHECK_CONSTANT(MXD_HIP_MEMCPY_DEVICE_TO_DEVICE, hipMemcpyDeviceToDevice)
CHECK_CONSTANT(MXD_HIP_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
               HIP_POINTER_ATTRIBUTE_DEVICE_ORDINAL)
CHECK_CONSTANT(MXD_HIP_ERROR_PEER_ACCESS_ALREADY_ENABLED,
               hipErrorPeerAccessAlreadyEnabled)
CHECK_CONSTANT(MXD_HIP_DEVICE_ATTRIBUTE_MAX_PITCH, hipDeviceAttributeMaxPitch)
CHECK_CONSTANT(MXD_HIP_MEMPOOL_ATTR_RELEASE_THRESHOLD,
               hipMemPoolAttrReleaseThreshold)
CHECK_CONSTANT(MXD_HIP_MEM_LOCATION_TYPE_DEVICE, hipMemLocationTypeDevice)
CHECK_CONSTANT(MXD_HIP_MEM_ACCESS_FLAGS_PROT_READWRITE,
               hipMemAccessFlagsProtReadWrite)
CHECK_CONSTANT(MXD_HIP_STREAM_CAPTURE_MODE_RELAXED, hipStreamCaptureModeRelaxed)
#if HIP_VERSION >= 50300000
_Static_assert(SAME_TYPE(hip_graph_mem_attribute, hipGraphMemAttributeType),
               "hipGraphMemAttributeType");
CHECK_CONSTANT(MXD_HIP_GRAPH_MEM_ATTR_USED_MEM_CURRENT,
               hipGraphMemAttrUsedMemCurrent)
CHECK_CONSTANT(MXD_HIP_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT,
               hipGraphMemAttrReservedMemCurrent)
#endif
#undef CHECK_CONSTANT
_Static_assert(offsetof(hip_device_prop_r0000, gcnArchName) ==
                   offsetof(hipDeviceProp_t, gcnArchName),
               "hipDeviceProp_t layout up to gcnArchName");
_Static_assert(sizeof(hipDeviceProp_t) <= HIP_DEVICE_PROP_BUFFER,
               "room for the runtime's hipDeviceProp_t");
#endif

int main(void)
{
    return 0;
}
