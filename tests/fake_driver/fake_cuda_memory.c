/* The CUDA front of device memory, copies and fills: argument checks and
 * contexts; the work is fake_devmem.c's and fake_copy.c's. */
#include "fake_front.h"

CUDA_MEMORY_ENTRY_POINTS(FAKE_DECLARE_CU)

/* The versioned symbols libcuda exports (cuda.h maps the plain names). */
FAKE_ALIAS(cuMemAlloc, cuMemAlloc_v2, cu_result,
           (cu_deviceptr * ptr, size_t bytes));
FAKE_ALIAS(cuMemFree, cuMemFree_v2, cu_result, (cu_deviceptr ptr));
FAKE_ALIAS(cuMemcpyHtoDAsync, cuMemcpyHtoDAsync_v2, cu_result,
           (cu_deviceptr dst, const void *src, size_t bytes, cu_stream stream));
FAKE_ALIAS(cuMemcpyDtoHAsync, cuMemcpyDtoHAsync_v2, cu_result,
           (void *dst, cu_deviceptr src, size_t bytes, cu_stream stream));
FAKE_ALIAS(cuMemcpyDtoDAsync, cuMemcpyDtoDAsync_v2, cu_result,
           (cu_deviceptr dst, cu_deviceptr src, size_t bytes,
            cu_stream stream));
FAKE_ALIAS(cuMemcpy2DAsync, cuMemcpy2DAsync_v2, cu_result,
           (const cu_memcpy2d *copy, cu_stream stream));

enum { FAKE_CU_MEMORYTYPE_HOST = 1, FAKE_CU_MEMORYTYPE_DEVICE = 2 };

static fake_side fake_device_side(cu_deviceptr ptr, size_t pitch)
{
    return (fake_side){(uintptr_t)ptr, pitch, FAKE_ROLE_DEVICE, -1};
}

static fake_side fake_host_side(const void *ptr, size_t pitch)
{
    return (fake_side){(uintptr_t)ptr, pitch, FAKE_ROLE_HOST, -1};
}

/* ---- Allocation ----------------------------------------------------- */

/* In the current context's device. */
cu_result cuMemAlloc(cu_deviceptr *ptr, size_t bytes)
{
    int dev;
    uintptr_t p;
    FAKE_CU_BEGIN(cuMemAlloc);
    FAKE_CAPTURE_SAFE();
    unsigned rc = fake_cuda_current_device(&dev);
    if (rc != FAKE_E_OK)
        return rc;
    if (ptr == NULL)
        return FAKE_E_INVALID_VALUE;
    rc = fake_dmem_alloc(dev, bytes, &p); /* 0 bytes: INVALID_VALUE */
    if (rc == FAKE_E_OK)
        *ptr = p;
    return rc;
}

cu_result cuMemFree(cu_deviceptr ptr)
{
    int dev;
    FAKE_CU_BEGIN(cuMemFree);
    FAKE_CAPTURE_SAFE();
    unsigned rc = fake_cuda_current_device(&dev);
    return rc != FAKE_E_OK ? rc : fake_dmem_free((uintptr_t)ptr);
}

cu_result cuMemAllocAsync(cu_deviceptr *ptr, size_t bytes, cu_stream stream)
{
    uintptr_t p;
    FAKE_CU_BEGIN(cuMemAllocAsync);
    FAKE_CU_ENQUEUE(stream);
    FAKE_CAPTURE_UNSUPPORTED(stream, "allocated in stream order");
    if (!fake_cfg()->memory_pools)
        return FAKE_E_NOT_SUPPORTED;
    if (ptr == NULL)
        return FAKE_E_INVALID_VALUE;
    unsigned rc = fake_dmem_alloc_async(stream, bytes, &p);
    if (rc == FAKE_E_OK)
        *ptr = p;
    return rc;
}

cu_result cuMemFreeAsync(cu_deviceptr ptr, cu_stream stream)
{
    FAKE_CU_BEGIN(cuMemFreeAsync);
    FAKE_CU_ENQUEUE(stream);
    FAKE_CAPTURE_UNSUPPORTED(stream, "freed in stream order");
    if (!fake_cfg()->memory_pools)
        return FAKE_E_NOT_SUPPORTED;
    return fake_dmem_free_async(stream, (uintptr_t)ptr);
}

cu_result cuPointerGetAttribute(void *data, cu_pointer_attribute attribute,
                                cu_deviceptr ptr)
{
    int dev;
    FAKE_CU_BEGIN(cuPointerGetAttribute);
    if (data == NULL || attribute != FAKE_POINTER_DEVICE_ORDINAL)
        return FAKE_E_INVALID_VALUE;
    unsigned rc = fake_pointer_device((uintptr_t)ptr, &dev);
    if (rc == FAKE_E_OK)
        *(int *)data = dev;
    return rc;
}

/* ---- Copies --------------------------------------------------------- */

cu_result cuMemcpyHtoDAsync(cu_deviceptr dst, const void *src, size_t bytes,
                            cu_stream stream)
{
    FAKE_CU_BEGIN(cuMemcpyHtoDAsync);
    FAKE_CU_ENQUEUE(stream);
    fake_side d = fake_device_side(dst, bytes), s = fake_host_side(src, bytes);
    return fake_copy(stream, &d, &s, bytes, 1);
}

cu_result cuMemcpyDtoHAsync(void *dst, cu_deviceptr src, size_t bytes,
                            cu_stream stream)
{
    FAKE_CU_BEGIN(cuMemcpyDtoHAsync);
    FAKE_CU_ENQUEUE(stream);
    fake_side d = fake_host_side(dst, bytes), s = fake_device_side(src, bytes);
    return fake_copy(stream, &d, &s, bytes, 1);
}

cu_result cuMemcpyDtoDAsync(cu_deviceptr dst, cu_deviceptr src, size_t bytes,
                            cu_stream stream)
{
    FAKE_CU_BEGIN(cuMemcpyDtoDAsync);
    FAKE_CU_ENQUEUE(stream);
    fake_side d = fake_device_side(dst, bytes);
    fake_side s = fake_device_side(src, bytes);
    return fake_copy(stream, &d, &s, bytes, 1);
}

/* Each side must be memory of its context's device. */
cu_result cuMemcpyPeerAsync(cu_deviceptr dst, cu_context dst_ctx,
                            cu_deviceptr src, cu_context src_ctx, size_t bytes,
                            cu_stream stream)
{
    FAKE_CU_BEGIN(cuMemcpyPeerAsync);
    FAKE_CU_ENQUEUE(stream);
    fake_side d = fake_device_side(dst, bytes);
    fake_side s = fake_device_side(src, bytes);
    if (!fake_cuda_context_device(dst_ctx, &d.device) ||
        !fake_cuda_context_device(src_ctx, &s.device))
        return FAKE_E_INVALID_CONTEXT;
    return fake_copy(stream, &d, &s, bytes, 1);
}

/* One side of a CUDA_MEMCPY2D: host or device memory by its type (arrays,
 * and the unified type, which needs unified addressing the fake does not
 * report, are INVALID_VALUE), starting at row y, byte x. */
static unsigned fake_side_2d(cu_memorytype type, const void *host,
                             cu_deviceptr device, size_t x, size_t y,
                             size_t pitch, fake_side *side)
{
    size_t offset;
    if (__builtin_mul_overflow(y, pitch, &offset) ||
        __builtin_add_overflow(offset, x, &offset))
        return FAKE_E_INVALID_VALUE;
    if (type == FAKE_CU_MEMORYTYPE_HOST && host != NULL)
        *side = fake_host_side((const char *)host + offset, pitch);
    else if (type == FAKE_CU_MEMORYTYPE_DEVICE && device != 0)
        *side = fake_device_side(device + offset, pitch);
    else
        return FAKE_E_INVALID_VALUE;
    return FAKE_E_OK;
}

cu_result cuMemcpy2DAsync(const cu_memcpy2d *copy, cu_stream stream)
{
    fake_side d, s;
    FAKE_CU_BEGIN(cuMemcpy2DAsync);
    FAKE_CU_ENQUEUE(stream);
    if (copy == NULL)
        return FAKE_E_INVALID_VALUE;
    unsigned rc =
        fake_side_2d(copy->dstMemoryType, copy->dstHost, copy->dstDevice,
                     copy->dstXInBytes, copy->dstY, copy->dstPitch, &d);
    if (rc == FAKE_E_OK)
        rc = fake_side_2d(copy->srcMemoryType, copy->srcHost, copy->srcDevice,
                          copy->srcXInBytes, copy->srcY, copy->srcPitch, &s);
    if (rc != FAKE_E_OK)
        return rc;
    return fake_copy_2d(stream, &d, &s, copy->WidthInBytes, copy->Height);
}

/* ---- Fills ---------------------------------------------------------- */

cu_result cuMemsetD8Async(cu_deviceptr dst, unsigned char value, size_t count,
                          cu_stream stream)
{
    FAKE_CU_BEGIN(cuMemsetD8Async);
    FAKE_CU_ENQUEUE(stream);
    return fake_fill(stream, (uintptr_t)dst, 1, value, count);
}

cu_result cuMemsetD16Async(cu_deviceptr dst, unsigned short value, size_t count,
                           cu_stream stream)
{
    FAKE_CU_BEGIN(cuMemsetD16Async);
    FAKE_CU_ENQUEUE(stream);
    return fake_fill(stream, (uintptr_t)dst, 2, value, count);
}

cu_result cuMemsetD32Async(cu_deviceptr dst, unsigned int value, size_t count,
                           cu_stream stream)
{
    FAKE_CU_BEGIN(cuMemsetD32Async);
    FAKE_CU_ENQUEUE(stream);
    return fake_fill(stream, (uintptr_t)dst, 4, value, count);
}
