/* Our own declaration of the DLPack ABI (dmlc/dlpack's dlpack.h, versions
 * 0.8 and 1.x), the one bridge to NumPy and every other array library: no
 * NumPy or DLPack header is needed to build.  The layouts below are the
 * ABI; names are prefixed so that they can sit beside the real header.
 * tests/test_dlpack_abi.py compiles them against a copy of the real header
 * when one is installed. */
#ifndef MXD_DLPACK_H
#define MXD_DLPACK_H

#include <stdint.h>

/* The version we produce in versioned capsules. */
enum { MXD_DLPACK_MAJOR = 1, MXD_DLPACK_MINOR = 1 };

typedef struct mxd_dl_version {
    uint32_t major, minor;
} mxd_dl_version;

/* DLDeviceType: the values we produce or accept. */
enum {
    MXD_DL_CPU = 1,
    MXD_DL_CUDA = 2,
    MXD_DL_CUDA_HOST = 3,
    MXD_DL_ROCM = 10,
    MXD_DL_ROCM_HOST = 11,
    MXD_DL_CUDA_MANAGED = 13,
};

typedef struct mxd_dl_device {
    int32_t device_type; /* DLDeviceType (a C enum: int-sized) */
    int32_t device_id;
} mxd_dl_device;

typedef struct mxd_dl_dtype {
    uint8_t code; /* DLDataTypeCode, see dtype.h's mxd_dlpack_code */
    uint8_t bits;
    uint16_t lanes;
} mxd_dl_dtype;

typedef struct mxd_dl_tensor {
    void *data;
    mxd_dl_device device;
    int32_t ndim;
    mxd_dl_dtype dtype;
    int64_t *shape;
    int64_t *strides; /* in elements; NULL: row-major contiguous */
    uint64_t byte_offset;
} mxd_dl_tensor;

/* DLManagedTensor: the legacy ("dltensor") capsule's payload. */
typedef struct mxd_dl_managed {
    mxd_dl_tensor dl_tensor;
    void *manager_ctx;
    void (*deleter)(struct mxd_dl_managed *self);
} mxd_dl_managed;

/* DLManagedTensorVersioned flags. */
#define MXD_DL_FLAG_READ_ONLY (UINT64_C(1) << 0)
#define MXD_DL_FLAG_IS_COPIED (UINT64_C(1) << 1)
#define MXD_DL_FLAG_IS_SUBBYTE_TYPE_PADDED (UINT64_C(1) << 2)

/* DLManagedTensorVersioned: the "dltensor_versioned" capsule's payload. */
typedef struct mxd_dl_managed_versioned {
    mxd_dl_version version;
    void *manager_ctx;
    void (*deleter)(struct mxd_dl_managed_versioned *self);
    uint64_t flags;
    mxd_dl_tensor dl_tensor;
} mxd_dl_managed_versioned;

#endif /* MXD_DLPACK_H */
