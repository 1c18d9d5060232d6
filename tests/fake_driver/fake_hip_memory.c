/* The HIP front of device memory, copies and fills: argument checks and
 * the current device; the work is fake_devmem.c's and fake_copy.c's. */
#include "fake_front.h"

HIP_MEMORY_ENTRY_POINTS(FAKE_DECLARE_HIP)

enum {
    FAKE_HIP_MEMCPY_DEFAULT = 4,           /* hipMemcpyDefault */
    FAKE_HIP_INVALID_MEMCPY_DIRECTION = 21 /* hipErrorInvalidMemcpyDirection */
};

static fake_side fake_device_side(const void *ptr, size_t pitch)
{
    return (fake_side){(uintptr_t)ptr, pitch, FAKE_ROLE_DEVICE, -1};
}

static fake_side fake_host_side(const void *ptr, size_t pitch)
{
    return (fake_side){(uintptr_t)ptr, pitch, FAKE_ROLE_HOST, -1};
}

/* ---- Allocation ----------------------------------------------------- */

/* In the current device.  0 bytes give NULL and hipSuccess, as in HIP. */
hip_result hipMalloc(void **ptr, size_t bytes)
{
    int dev;
    uintptr_t p;
    FAKE_HIP_BEGIN(hipMalloc);
    FAKE_CAPTURE_SAFE();
    if (ptr == NULL)
        return FAKE_E_INVALID_VALUE;
    if (bytes == 0) {
        *ptr = NULL;
        return FAKE_E_OK;
    }
    unsigned rc = fake_hip_current_device(&dev);
    if (rc == FAKE_E_OK)
        rc = fake_dmem_alloc(dev, bytes, &p);
    if (rc == FAKE_E_OK)
        *ptr = (void *)p;
    return rc;
}

/* hipFree(NULL) is a successful no-op, as in HIP. */
hip_result hipFree(void *ptr)
{
    FAKE_HIP_BEGIN(hipFree);
    FAKE_CAPTURE_SAFE();
    return ptr == NULL ? FAKE_E_OK : fake_dmem_free((uintptr_t)ptr);
}

hip_result hipMallocAsync(void **ptr, size_t bytes, hip_stream stream)
{
    uintptr_t p;
    FAKE_HIP_BEGIN(hipMallocAsync);
    FAKE_HIP_STREAM(stream);
    FAKE_CAPTURE_UNSUPPORTED(stream, "allocated in stream order");
    if (!fake_cfg()->memory_pools)
        return FAKE_E_NOT_SUPPORTED;
    if (ptr == NULL)
        return FAKE_E_INVALID_VALUE;
    if (bytes == 0) {
        *ptr = NULL;
        return FAKE_E_OK;
    }
    unsigned rc = fake_dmem_alloc_async(stream, bytes, &p);
    if (rc == FAKE_E_OK)
        *ptr = (void *)p;
    return rc;
}

hip_result hipFreeAsync(void *ptr, hip_stream stream)
{
    FAKE_HIP_BEGIN(hipFreeAsync);
    FAKE_HIP_STREAM(stream);
    FAKE_CAPTURE_UNSUPPORTED(stream, "freed in stream order");
    if (!fake_cfg()->memory_pools)
        return FAKE_E_NOT_SUPPORTED;
    return ptr == NULL ? FAKE_E_OK
                       : fake_dmem_free_async(stream, (uintptr_t)ptr);
}

hip_result hipPointerGetAttribute(void *data, hip_pointer_attribute attribute,
                                  void *ptr)
{
    int dev;
    FAKE_HIP_BEGIN(hipPointerGetAttribute);
    if (data == NULL || attribute != FAKE_POINTER_DEVICE_ORDINAL)
        return FAKE_E_INVALID_VALUE;
    unsigned rc = fake_pointer_device((uintptr_t)ptr, &dev);
    if (rc == FAKE_E_OK)
        *(int *)data = dev;
    return rc;
}

/* ---- Copies --------------------------------------------------------- */

hip_result hipMemcpyHtoDAsync(void *dst, void *src, size_t bytes,
                              hip_stream stream)
{
    FAKE_HIP_BEGIN(hipMemcpyHtoDAsync);
    FAKE_HIP_STREAM(stream);
    fake_side d = fake_device_side(dst, bytes), s = fake_host_side(src, bytes);
    return fake_copy(stream, &d, &s, bytes, 1);
}

hip_result hipMemcpyDtoHAsync(void *dst, void *src, size_t bytes,
                              hip_stream stream)
{
    FAKE_HIP_BEGIN(hipMemcpyDtoHAsync);
    FAKE_HIP_STREAM(stream);
    fake_side d = fake_host_side(dst, bytes), s = fake_device_side(src, bytes);
    return fake_copy(stream, &d, &s, bytes, 1);
}

hip_result hipMemcpyDtoDAsync(void *dst, void *src, size_t bytes,
                              hip_stream stream)
{
    FAKE_HIP_BEGIN(hipMemcpyDtoDAsync);
    FAKE_HIP_STREAM(stream);
    fake_side d = fake_device_side(dst, bytes);
    fake_side s = fake_device_side(src, bytes);
    return fake_copy(stream, &d, &s, bytes, 1);
}

/* Each side must be memory of the device named for it. */
hip_result hipMemcpyPeerAsync(void *dst, int dst_device, const void *src,
                              int src_device, size_t bytes, hip_stream stream)
{
    FAKE_HIP_BEGIN(hipMemcpyPeerAsync);
    FAKE_HIP_STREAM(stream);
    if (!fake_valid_device(dst_device) || !fake_valid_device(src_device))
        return FAKE_E_INVALID_DEVICE;
    fake_side d = fake_device_side(dst, bytes);
    fake_side s = fake_device_side(src, bytes);
    d.device = dst_device;
    s.device = src_device;
    return fake_copy(stream, &d, &s, bytes, 1);
}

/* hipMemcpyKind: HostToHost 0, HostToDevice 1, DeviceToHost 2,
 * DeviceToDevice 3, Default 4 (each side by its address). */
hip_result hipMemcpy2DAsync(void *dst, size_t dst_pitch, const void *src,
                            size_t src_pitch, size_t width, size_t height,
                            hip_memcpy_kind kind, hip_stream stream)
{
    FAKE_HIP_BEGIN(hipMemcpy2DAsync);
    FAKE_HIP_STREAM(stream);
    if (kind > FAKE_HIP_MEMCPY_DEFAULT)
        return FAKE_HIP_INVALID_MEMCPY_DIRECTION;
    fake_side d = fake_host_side(dst, dst_pitch);
    fake_side s = fake_host_side(src, src_pitch);
    if (kind == FAKE_HIP_MEMCPY_DEFAULT) {
        d.role = s.role = FAKE_ROLE_ANY;
    } else {
        d.role = kind & 1 ? FAKE_ROLE_DEVICE : FAKE_ROLE_HOST; /* 1, 3 */
        s.role = kind & 2 ? FAKE_ROLE_DEVICE : FAKE_ROLE_HOST; /* 2, 3 */
    }
    return fake_copy_2d(stream, &d, &s, width, height);
}

/* ---- Fills ---------------------------------------------------------- */

hip_result hipMemsetD8Async(void *dst, unsigned char value, size_t count,
                            hip_stream stream)
{
    FAKE_HIP_BEGIN(hipMemsetD8Async);
    FAKE_HIP_STREAM(stream);
    return fake_fill(stream, (uintptr_t)dst, 1, value, count);
}

hip_result hipMemsetD16Async(void *dst, unsigned short value, size_t count,
                             hip_stream stream)
{
    FAKE_HIP_BEGIN(hipMemsetD16Async);
    FAKE_HIP_STREAM(stream);
    return fake_fill(stream, (uintptr_t)dst, 2, value, count);
}

hip_result hipMemsetD32Async(void *dst, int value, size_t count,
                             hip_stream stream)
{
    FAKE_HIP_BEGIN(hipMemsetD32Async);
    FAKE_HIP_STREAM(stream);
    return fake_fill(stream, (uintptr_t)dst, 4, (uint32_t)value, count);
}
