/* Element types of buffers: a table keyed by MAX's dtype values (the values
 * of max.dtype.DType) and the codecs that turn one Python-level scalar into
 * an element's bytes and back (Buffer.item(), buf[i] = v, Buffer.scalar(),
 * fills).
 *
 * Elements are stored in host byte order.  Sub-byte types (float4, float6)
 * take one byte per element, the value in the low bits and zeros above:
 * their DLPack export must say so (DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED,
 * which only the versioned capsule can carry).
 *
 * Conversions (mxd_dtype_encode) follow NumPy and ml_dtypes:
 * - into a float type: rounded once, to nearest, ties to even (float8_e8m0fnu,
 *   whose values are powers of two, rounds ties up, as ml_dtypes), from the
 *   exact value of the source (a double, or an integer without going through
 *   a double first).  Each format keeps its own rules for what it cannot
 *   hold, as ml_dtypes has them:
 *     float16, bfloat16, float8_e5m2 (IEEE): overflow -> +-inf, NaN -> NaN;
 *     float8_e4m3fn: overflow and +-inf -> NaN of that sign;
 *     float8_e4m3fnuz, float8_e5m2fnuz: overflow, inf, NaN -> the NaN 0x80,
 *       -0.0 and negative values that round to zero -> +0.0;
 *     float8_e8m0fnu (unsigned, no zero): zero, negative, inf, NaN and
 *       overflow -> NaN 0xFF; positive values below 2^-127 -> 2^-127;
 *     float4_e2m1fn, float6_e2m3fn, float6_e3m2fn (no inf, no NaN):
 *       overflow and +-inf saturate to +-max; NaN -> -0.0 and -NaN -> +0.0
 *       (the MX spec leaves it to the implementation; this is ml_dtypes').
 *   Where ml_dtypes itself rounds twice (its NumPy casts from float64 and its
 *   bfloat16 scalars go through float32 first), we round once, as NumPy's
 *   float16 does.
 * - into an integer type: integers must fit (else MXD_INVALID, "integer 300
 *   out of bounds for uint8"; NumPy 2 raises OverflowError there, which the
 *   binding may choose to raise); floats are truncated toward zero and must
 *   then fit; NaN and inf fail with MXD_INVALID.
 * - into bool: non-zero (NaN included) is true, as NumPy.
 * Decoding never fails for a known dtype: bool -> bool, signed -> int64,
 * unsigned -> uint64, every float type -> double (exactly). */
#ifndef MXD_DTYPE_H
#define MXD_DTYPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mxd.h"

#ifdef __cplusplus
extern "C" {
#endif

/* MAX's integer values for its dtypes (max.dtype.DType). */
enum mxd_dtype_code {
    MXD_DTYPE_BOOL = 1,
    MXD_DTYPE_FLOAT4_E2M1FN = 64,
    MXD_DTYPE_FLOAT6_E2M3FN = 65,
    MXD_DTYPE_FLOAT6_E3M2FN = 66,
    MXD_DTYPE_FLOAT8_E8M0FNU = 73,
    MXD_DTYPE_FLOAT8_E4M3FN = 75,
    MXD_DTYPE_FLOAT8_E4M3FNUZ = 76,
    MXD_DTYPE_FLOAT8_E5M2 = 77,
    MXD_DTYPE_FLOAT8_E5M2FNUZ = 78,
    MXD_DTYPE_FLOAT16 = 79,
    MXD_DTYPE_BFLOAT16 = 80,
    MXD_DTYPE_FLOAT32 = 81,
    MXD_DTYPE_FLOAT64 = 82,
    MXD_DTYPE_UINT8 = 134,
    MXD_DTYPE_INT8 = 135,
    MXD_DTYPE_UINT16 = 136,
    MXD_DTYPE_INT16 = 137,
    MXD_DTYPE_UINT32 = 138,
    MXD_DTYPE_INT32 = 139,
    MXD_DTYPE_UINT64 = 140,
    MXD_DTYPE_INT64 = 141,
};

typedef enum mxd_dtype_kind {
    MXD_KIND_BOOL,
    MXD_KIND_SIGNED,   /* int8 .. int64 */
    MXD_KIND_UNSIGNED, /* uint8 .. uint64 */
    MXD_KIND_FLOAT,    /* IEEE float16, float32, float64 */
    MXD_KIND_BFLOAT16,
    MXD_KIND_FLOAT8, /* the five float8 variants; `code` says which */
    MXD_KIND_FLOAT6,
    MXD_KIND_FLOAT4,
} mxd_dtype_kind;

/* DLPack's DLDataTypeCode values we use (dlpack.h 1.1). */
enum mxd_dlpack_code {
    MXD_DL_INT = 0,
    MXD_DL_UINT = 1,
    MXD_DL_FLOAT = 2,
    MXD_DL_BFLOAT = 4,
    MXD_DL_BOOL = 6,
    MXD_DL_FLOAT8_E4M3FN = 10,
    MXD_DL_FLOAT8_E4M3FNUZ = 11,
    MXD_DL_FLOAT8_E5M2 = 12,
    MXD_DL_FLOAT8_E5M2FNUZ = 13,
    MXD_DL_FLOAT8_E8M0FNU = 14,
    MXD_DL_FLOAT6_E2M3FN = 15,
    MXD_DL_FLOAT6_E3M2FN = 16,
    MXD_DL_FLOAT4_E2M1FN = 17,
};

typedef struct mxd_dtype_info {
    int code;         /* MAX's value, an mxd_dtype_code */
    const char *name; /* "float32", as the DType member is named */
    mxd_dtype_kind kind;
    unsigned size_in_bits;  /* 4 for float4, 6 for float6, 8 for bool */
    unsigned size_in_bytes; /* storage per element, at least 1 */
    unsigned align;         /* in bytes */
    uint8_t dlpack_code;    /* an mxd_dlpack_code */
    uint8_t dlpack_bits;    /* DLDataType.bits, with lanes = 1 */
    bool subbyte_padded;    /* fewer bits than its byte (float4, float6) */
} mxd_dtype_info;

/* How many dtypes there are (mxd_dtype_count()). */
enum { MXD_DTYPE_MEMBERS = 21 };

/* The largest size_in_bytes: room for any one element. */
enum { MXD_DTYPE_MAX_BYTES = 8 };

bool mxd_dtype_known(int code);
/* The entry for `code`; NULL when it is not a dtype. */
const mxd_dtype_info *mxd_dtype_info_of(int code);
/* The dtype a DLPack (code, bits) describes (lanes = 1); NULL when none. */
const mxd_dtype_info *mxd_dtype_from_dlpack(uint8_t code, uint8_t bits);
/* Every dtype, in MAX's member order: i in [0, mxd_dtype_count()). */
size_t mxd_dtype_count(void);
const mxd_dtype_info *mxd_dtype_at(size_t i);

/* One scalar on its way into or out of an element. */
typedef enum mxd_scalar_kind {
    MXD_SCALAR_BOOL,
    MXD_SCALAR_INT,   /* v.i */
    MXD_SCALAR_UINT,  /* v.u: for integers above INT64_MAX */
    MXD_SCALAR_FLOAT, /* v.f */
} mxd_scalar_kind;

typedef struct mxd_scalar {
    mxd_scalar_kind kind;
    union {
        bool b;
        int64_t i;
        uint64_t u;
        double f;
    } v;
} mxd_scalar;

static inline mxd_scalar mxd_scalar_bool(bool b)
{
    return (mxd_scalar){.kind = MXD_SCALAR_BOOL, .v.b = b};
}
static inline mxd_scalar mxd_scalar_int(int64_t i)
{
    return (mxd_scalar){.kind = MXD_SCALAR_INT, .v.i = i};
}
static inline mxd_scalar mxd_scalar_uint(uint64_t u)
{
    return (mxd_scalar){.kind = MXD_SCALAR_UINT, .v.u = u};
}
static inline mxd_scalar mxd_scalar_float(double f)
{
    return (mxd_scalar){.kind = MXD_SCALAR_FLOAT, .v.f = f};
}

/* Writes `value` converted to dtype `code` into dst (size_in_bytes bytes;
 * nothing is written on failure).  MXD_INVALID for an unknown code or a
 * value the integer type cannot hold (see the top of this file). */
mxd_status mxd_dtype_encode(int code, mxd_scalar value, void *dst,
                            mxd_error *err);
/* Reads the element at src: MXD_SCALAR_BOOL for bool, _INT for signed,
 * _UINT for unsigned and _FLOAT for every float type.  MXD_INVALID only for
 * an unknown code.  For float4/float6 the bits above the value are ignored. */
mxd_status mxd_dtype_decode(int code, const void *src, mxd_scalar *out,
                            mxd_error *err);

#ifdef __cplusplus
}
#endif
#endif /* MXD_DTYPE_H */
