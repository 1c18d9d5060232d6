/* The dtype table and the scalar codecs (see dtype.h for the rules). */
#include "dtype.h"

#include <math.h>
#include <string.h>

#include "backend.h"

/* ---- Small float formats ------------------------------------------------ */

/* How a format spends its special encodings. */
typedef enum fp_specials {
    FP_IEEE, /* the all-ones exponent holds inf and NaN */
    FP_FN,   /* no inf; NaN is S.1111.111 (float8_e4m3fn) */
    FP_FNUZ, /* no inf, no -0; NaN is 1.0000.000 */
    FP_E8M0, /* unsigned powers of two, no zero; NaN is 0xFF */
    FP_MX,   /* no inf, no NaN (float4 and float6) */
} fp_specials;

typedef struct fp_format {
    int exp_bits, man_bits, bias;
    fp_specials specials;
} fp_format;

static const fp_format fmt_f16 = {5, 10, 15, FP_IEEE};
static const fp_format fmt_bf16 = {8, 7, 127, FP_IEEE};
static const fp_format fmt_e5m2 = {5, 2, 15, FP_IEEE};
static const fp_format fmt_e4m3fn = {4, 3, 7, FP_FN};
static const fp_format fmt_e4m3fnuz = {4, 3, 8, FP_FNUZ};
static const fp_format fmt_e5m2fnuz = {5, 2, 16, FP_FNUZ};
static const fp_format fmt_e8m0fnu = {8, 0, 127, FP_E8M0};
static const fp_format fmt_e2m1fn = {2, 1, 1, FP_MX};
static const fp_format fmt_e2m3fn = {2, 3, 1, FP_MX};
static const fp_format fmt_e3m2fn = {3, 2, 3, FP_MX};

static uint32_t fp_sign_bit(const fp_format *f)
{
    return f->specials == FP_E8M0 ? 0 : 1u << (f->exp_bits + f->man_bits);
}

static uint32_t fp_exp_ones(const fp_format *f)
{
    return ((1u << f->exp_bits) - 1) << f->man_bits;
}

/* The largest finite magnitude's bits. */
static uint32_t fp_max_finite(const fp_format *f)
{
    uint32_t all = (1u << (f->exp_bits + f->man_bits)) - 1;
    switch (f->specials) {
    case FP_IEEE: return fp_exp_ones(f) - 1;
    case FP_FN: return all - 1;
    case FP_E8M0: return 0xFE;
    default: return all;
    }
}

static uint32_t fp_nan(const fp_format *f, bool negative)
{
    uint32_t sign = negative ? fp_sign_bit(f) : 0;
    switch (f->specials) {
    case FP_IEEE: return sign | fp_exp_ones(f) | 1u << (f->man_bits - 1);
    case FP_FN: return sign | (fp_sign_bit(f) - 1);
    case FP_FNUZ: return fp_sign_bit(f);
    case FP_E8M0: return 0xFF;
    default: return negative ? 0 : fp_sign_bit(f); /* ml_dtypes' choice */
    }
}

/* What inf and values beyond the largest finite one become. */
static uint32_t fp_overflow(const fp_format *f, bool negative)
{
    uint32_t sign = negative ? fp_sign_bit(f) : 0;
    switch (f->specials) {
    case FP_IEEE: return sign | fp_exp_ones(f);
    case FP_MX: return sign | fp_max_finite(f);
    default: return fp_nan(f, negative);
    }
}

/* What a value that is zero, or rounds to zero, becomes. */
static uint32_t fp_zero(const fp_format *f, bool negative, bool was_zero)
{
    switch (f->specials) {
    case FP_FNUZ: return 0;
    case FP_E8M0: return was_zero ? 0xFF : 0x00; /* tiny: the least value */
    default: return negative ? fp_sign_bit(f) : 0;
    }
}

/* Rounds a finite, non-zero magnitude once, to nearest (ties to even, or up
 * for E8M0, whose only significand digit is always 1), with the exponent
 * unbounded above; then applies the format's overflow rule. */
static uint32_t fp_round(const fp_format *f, double a, bool negative)
{
    const int m = f->man_bits;
    /* The least normal exponent: E8M0's field 0 is 2^-127, not subnormal. */
    const int emin = f->specials == FP_E8M0 ? -f->bias : 1 - f->bias;
    int e;
    frexp(a, &e);
    int unbiased = e - 1 < emin ? emin : e - 1; /* of a's leading bit */
    int q = unbiased - m;    /* the exponent of one unit in the last place */
    double n = ldexp(a, -q); /* exact: below 2^(m+1) */
    double whole = floor(n);
    double frac = n - whole;
    uint32_t r = (uint32_t)whole;
    if (frac > 0.5 || (frac == 0.5 && (f->specials == FP_E8M0 || (r & 1))))
        r++;
    if (r == 0)
        return fp_zero(f, negative, false);
    if (r >> (m + 1)) { /* rounding carried into the next binade */
        r >>= 1;
        q++;
    }
    uint32_t mag = r; /* subnormal: r < 2^m, and the field is 0 */
    if (r >> m) {
        long field = (long)q + m + f->bias;
        if (field > (long)(fp_max_finite(f) >> m))
            return fp_overflow(f, negative);
        mag = (uint32_t)field << m | (r - (1u << m));
    }
    if (mag > fp_max_finite(f))
        return fp_overflow(f, negative);
    return (negative ? fp_sign_bit(f) : 0) | mag;
}

static uint32_t fp_encode(const fp_format *f, double x)
{
    bool negative = signbit(x);
    if (isnan(x))
        return fp_nan(f, negative);
    if (f->specials == FP_E8M0 && (negative || x == 0))
        return 0xFF; /* no sign, no zero */
    if (isinf(x))
        return fp_overflow(f, negative);
    if (x == 0)
        return fp_zero(f, negative, true);
    return fp_round(f, fabs(x), negative);
}

static double fp_decode(const fp_format *f, uint32_t bits)
{
    const int m = f->man_bits;
    uint32_t sign = fp_sign_bit(f);
    int width = f->exp_bits + m + (sign != 0);
    bits &= (1u << width) - 1; /* drop the padding above a sub-byte value */
    bool negative = bits & sign;
    uint32_t mag = bits & ~sign;
    uint32_t field = mag >> m, man = mag & ((1u << m) - 1);
    switch (f->specials) {
    case FP_IEEE:
        if ((mag & fp_exp_ones(f)) == fp_exp_ones(f))
            return copysign(man ? NAN : INFINITY, negative ? -1.0 : 1.0);
        break;
    case FP_FN:
        if (mag == sign - 1)
            return copysign(NAN, negative ? -1.0 : 1.0);
        break;
    case FP_FNUZ:
        if (bits == sign) /* its sign bit is set: a negative NaN */
            return copysign(NAN, -1.0);
        break;
    case FP_E8M0: return bits == 0xFF ? NAN : ldexp(1.0, (int)bits - f->bias);
    case FP_MX: break;
    }
    double v = field ? ldexp((double)(man | 1u << m), (int)field - f->bias - m)
                     : ldexp((double)man, 1 - f->bias - m);
    return negative ? -v : v;
}

/* ---- The table ---------------------------------------------------------- */

typedef struct entry {
    mxd_dtype_info info;
    const fp_format *fp; /* the small float formats */
} entry;

#define NATIVE_ROW(code, name, kind, type, dl)                                 \
    {                                                                          \
        {code,         name,           kind, 8 * sizeof(type),                 \
         sizeof(type), _Alignof(type), dl,   8 * sizeof(type),                 \
         false},                                                               \
            NULL                                                               \
    }
#define FP_ROW(code, name, kind, bits, dl, fmt)                                \
    {                                                                          \
        {code,           name, kind, bits,         (bits + 7) / 8,             \
         (bits + 7) / 8, dl,   bits, bits % 8 != 0},                           \
            fmt                                                                \
    }

/* In MAX's member order. */
static const entry table[] = {
    NATIVE_ROW(MXD_DTYPE_BOOL, "bool", MXD_KIND_BOOL, uint8_t, MXD_DL_BOOL),
    NATIVE_ROW(MXD_DTYPE_INT8, "int8", MXD_KIND_SIGNED, int8_t, MXD_DL_INT),
    NATIVE_ROW(MXD_DTYPE_INT16, "int16", MXD_KIND_SIGNED, int16_t, MXD_DL_INT),
    NATIVE_ROW(MXD_DTYPE_INT32, "int32", MXD_KIND_SIGNED, int32_t, MXD_DL_INT),
    NATIVE_ROW(MXD_DTYPE_INT64, "int64", MXD_KIND_SIGNED, int64_t, MXD_DL_INT),
    NATIVE_ROW(MXD_DTYPE_UINT8, "uint8", MXD_KIND_UNSIGNED, uint8_t,
               MXD_DL_UINT),
    NATIVE_ROW(MXD_DTYPE_UINT16, "uint16", MXD_KIND_UNSIGNED, uint16_t,
               MXD_DL_UINT),
    NATIVE_ROW(MXD_DTYPE_UINT32, "uint32", MXD_KIND_UNSIGNED, uint32_t,
               MXD_DL_UINT),
    NATIVE_ROW(MXD_DTYPE_UINT64, "uint64", MXD_KIND_UNSIGNED, uint64_t,
               MXD_DL_UINT),
    FP_ROW(MXD_DTYPE_FLOAT16, "float16", MXD_KIND_FLOAT, 16, MXD_DL_FLOAT,
           &fmt_f16),
    NATIVE_ROW(MXD_DTYPE_FLOAT32, "float32", MXD_KIND_FLOAT, float,
               MXD_DL_FLOAT),
    NATIVE_ROW(MXD_DTYPE_FLOAT64, "float64", MXD_KIND_FLOAT, double,
               MXD_DL_FLOAT),
    FP_ROW(MXD_DTYPE_BFLOAT16, "bfloat16", MXD_KIND_BFLOAT16, 16, MXD_DL_BFLOAT,
           &fmt_bf16),
    FP_ROW(MXD_DTYPE_FLOAT4_E2M1FN, "float4_e2m1fn", MXD_KIND_FLOAT4, 4,
           MXD_DL_FLOAT4_E2M1FN, &fmt_e2m1fn),
    FP_ROW(MXD_DTYPE_FLOAT6_E2M3FN, "float6_e2m3fn", MXD_KIND_FLOAT6, 6,
           MXD_DL_FLOAT6_E2M3FN, &fmt_e2m3fn),
    FP_ROW(MXD_DTYPE_FLOAT6_E3M2FN, "float6_e3m2fn", MXD_KIND_FLOAT6, 6,
           MXD_DL_FLOAT6_E3M2FN, &fmt_e3m2fn),
    FP_ROW(MXD_DTYPE_FLOAT8_E8M0FNU, "float8_e8m0fnu", MXD_KIND_FLOAT8, 8,
           MXD_DL_FLOAT8_E8M0FNU, &fmt_e8m0fnu),
    FP_ROW(MXD_DTYPE_FLOAT8_E4M3FN, "float8_e4m3fn", MXD_KIND_FLOAT8, 8,
           MXD_DL_FLOAT8_E4M3FN, &fmt_e4m3fn),
    FP_ROW(MXD_DTYPE_FLOAT8_E4M3FNUZ, "float8_e4m3fnuz", MXD_KIND_FLOAT8, 8,
           MXD_DL_FLOAT8_E4M3FNUZ, &fmt_e4m3fnuz),
    FP_ROW(MXD_DTYPE_FLOAT8_E5M2, "float8_e5m2", MXD_KIND_FLOAT8, 8,
           MXD_DL_FLOAT8_E5M2, &fmt_e5m2),
    FP_ROW(MXD_DTYPE_FLOAT8_E5M2FNUZ, "float8_e5m2fnuz", MXD_KIND_FLOAT8, 8,
           MXD_DL_FLOAT8_E5M2FNUZ, &fmt_e5m2fnuz),
};

enum { TABLE_SIZE = sizeof table / sizeof table[0] };
_Static_assert((int)TABLE_SIZE == (int)MXD_DTYPE_MEMBERS,
               "dtype.h counts the dtypes");

static const entry *find(int code)
{
    for (size_t i = 0; i < TABLE_SIZE; i++)
        if (table[i].info.code == code)
            return &table[i];
    return NULL;
}

bool mxd_dtype_known(int code)
{
    return find(code) != NULL;
}

const mxd_dtype_info *mxd_dtype_info_of(int code)
{
    const entry *e = find(code);
    return e ? &e->info : NULL;
}

const mxd_dtype_info *mxd_dtype_from_dlpack(uint8_t code, uint8_t bits)
{
    for (size_t i = 0; i < TABLE_SIZE; i++)
        if (table[i].info.dlpack_code == code &&
            table[i].info.dlpack_bits == bits)
            return &table[i].info;
    return NULL;
}

size_t mxd_dtype_count(void)
{
    return TABLE_SIZE;
}

const mxd_dtype_info *mxd_dtype_at(size_t i)
{
    return i < TABLE_SIZE ? &table[i].info : NULL;
}

static mxd_status unknown(int code, mxd_error *err)
{
    return mxd_fail(err, MXD_INVALID, "unknown dtype code %d", code);
}

/* ---- Integers ----------------------------------------------------------- */

/* An exact integer: value = negative ? -(int64)... : magnitude. */
typedef struct whole {
    bool negative;
    uint64_t magnitude;
} whole;

static mxd_status to_whole(mxd_scalar v, const char *name, whole *out,
                           mxd_error *err)
{
    switch (v.kind) {
    case MXD_SCALAR_BOOL: *out = (whole){false, v.v.b}; return MXD_OK;
    case MXD_SCALAR_INT:
        *out = (whole){v.v.i < 0,
                       v.v.i < 0 ? 0 - (uint64_t)v.v.i : (uint64_t)v.v.i};
        return MXD_OK;
    case MXD_SCALAR_UINT: *out = (whole){false, v.v.u}; return MXD_OK;
    case MXD_SCALAR_FLOAT: break;
    }
    double f = v.v.f;
    if (isnan(f))
        return mxd_fail(err, MXD_INVALID,
                        "cannot convert float NaN to integer");
    if (isinf(f))
        return mxd_fail(err, MXD_INVALID,
                        "cannot convert float infinity to integer");
    double t = fabs(trunc(f));
    if (t >= 0x1p64)
        return mxd_fail(err, MXD_INVALID, "value %.17g out of bounds for %s", f,
                        name);
    *out = (whole){f < 0 && t != 0, (uint64_t)t};
    return MXD_OK;
}

static mxd_status encode_int(const mxd_dtype_info *t, mxd_scalar v, void *dst,
                             mxd_error *err)
{
    whole w;
    mxd_status st = to_whole(v, t->name, &w, err);
    if (st != MXD_OK)
        return st;
    unsigned bits = t->size_in_bits;
    uint64_t top = bits == 64 ? UINT64_MAX : (UINT64_C(1) << bits) - 1;
    bool fits;
    if (t->kind == MXD_KIND_UNSIGNED)
        fits = !w.negative && w.magnitude <= top;
    else /* signed: -2^(bits-1) .. 2^(bits-1) - 1 */
        fits = w.magnitude <= (top >> 1) + w.negative;
    if (!fits) {
        if (v.kind == MXD_SCALAR_FLOAT)
            return mxd_fail(err, MXD_INVALID,
                            "value %.17g out of bounds for %s", v.v.f, t->name);
        return mxd_fail(err, MXD_INVALID, "integer %s%llu out of bounds for %s",
                        w.negative ? "-" : "", (unsigned long long)w.magnitude,
                        t->name);
    }
    /* Two's complement: the low bytes of the 64-bit value, in host order. */
    uint64_t u = w.negative ? 0 - w.magnitude : w.magnitude;
    uint8_t u8 = (uint8_t)u;
    uint16_t u16 = (uint16_t)u;
    uint32_t u32 = (uint32_t)u;
    switch (bits) {
    case 8: memcpy(dst, &u8, 1); break;
    case 16: memcpy(dst, &u16, 2); break;
    case 32: memcpy(dst, &u32, 4); break;
    default: memcpy(dst, &u, 8); break;
    }
    return MXD_OK;
}

static mxd_scalar decode_int(const mxd_dtype_info *t, const void *src)
{
    switch (t->code) {
    case MXD_DTYPE_INT8: {
        int8_t x;
        memcpy(&x, src, 1);
        return mxd_scalar_int(x);
    }
    case MXD_DTYPE_INT16: {
        int16_t x;
        memcpy(&x, src, 2);
        return mxd_scalar_int(x);
    }
    case MXD_DTYPE_INT32: {
        int32_t x;
        memcpy(&x, src, 4);
        return mxd_scalar_int(x);
    }
    case MXD_DTYPE_INT64: {
        int64_t x;
        memcpy(&x, src, 8);
        return mxd_scalar_int(x);
    }
    case MXD_DTYPE_UINT8: return mxd_scalar_uint(*(const uint8_t *)src);
    case MXD_DTYPE_UINT16: {
        uint16_t x;
        memcpy(&x, src, 2);
        return mxd_scalar_uint(x);
    }
    case MXD_DTYPE_UINT32: {
        uint32_t x;
        memcpy(&x, src, 4);
        return mxd_scalar_uint(x);
    }
    default: {
        uint64_t x;
        memcpy(&x, src, 8);
        return mxd_scalar_uint(x);
    }
    }
}

/* ---- Floats ------------------------------------------------------------- */

/* The magnitude as a double rounded to odd: truncated, with the last bit set
 * when bits were dropped.  Rounding that again to a format of at most 51
 * significand bits gives the correctly rounded result (Boldo & Melquiond,
 * "When double rounding is odd"), so integers reach every float type with
 * one rounding. */
static double round_to_odd(uint64_t m)
{
    int shift = 0;
    while (m >> shift >= UINT64_C(1) << 53)
        shift++;
    uint64_t kept = m >> shift;
    if (m & ((UINT64_C(1) << shift) - 1))
        kept |= 1;
    return ldexp((double)kept, shift);
}

/* The scalar as a double that rounds correctly into `t` (exactly the value,
 * or for float64 the nearest double). */
static double to_double(mxd_scalar v, const mxd_dtype_info *t)
{
    switch (v.kind) {
    case MXD_SCALAR_BOOL: return v.v.b ? 1.0 : 0.0;
    case MXD_SCALAR_FLOAT: return v.v.f;
    default: break;
    }
    whole w;
    to_whole(v, t->name, &w, NULL); /* integers always convert */
    double d = t->code == MXD_DTYPE_FLOAT64 ? (double)w.magnitude
                                            : round_to_odd(w.magnitude);
    return w.negative ? -d : d;
}

static void encode_float(const entry *e, mxd_scalar v, void *dst)
{
    double d = to_double(v, &e->info);
    if (e->info.code == MXD_DTYPE_FLOAT64) {
        memcpy(dst, &d, 8);
    } else if (e->info.code == MXD_DTYPE_FLOAT32) {
        float f = (float)d;
        memcpy(dst, &f, 4);
    } else if (e->info.size_in_bytes == 2) {
        uint16_t bits = (uint16_t)fp_encode(e->fp, d);
        memcpy(dst, &bits, 2);
    } else {
        uint8_t bits = (uint8_t)fp_encode(e->fp, d);
        memcpy(dst, &bits, 1);
    }
}

static double decode_float(const entry *e, const void *src)
{
    if (e->info.code == MXD_DTYPE_FLOAT64) {
        double d;
        memcpy(&d, src, 8);
        return d;
    }
    if (e->info.code == MXD_DTYPE_FLOAT32) {
        float f;
        memcpy(&f, src, 4);
        return f;
    }
    if (e->info.size_in_bytes == 2) {
        uint16_t bits;
        memcpy(&bits, src, 2);
        return fp_decode(e->fp, bits);
    }
    return fp_decode(e->fp, *(const uint8_t *)src);
}

/* ---- Entry points ------------------------------------------------------- */

static bool is_true(mxd_scalar v)
{
    switch (v.kind) {
    case MXD_SCALAR_BOOL: return v.v.b;
    case MXD_SCALAR_INT: return v.v.i != 0;
    case MXD_SCALAR_UINT: return v.v.u != 0;
    default: return v.v.f != 0; /* NaN is true, as in NumPy */
    }
}

mxd_status mxd_dtype_encode(int code, mxd_scalar value, void *dst,
                            mxd_error *err)
{
    const entry *e = find(code);
    if (!e)
        return unknown(code, err);
    switch (e->info.kind) {
    case MXD_KIND_BOOL: *(uint8_t *)dst = is_true(value); return MXD_OK;
    case MXD_KIND_SIGNED:
    case MXD_KIND_UNSIGNED: return encode_int(&e->info, value, dst, err);
    default: encode_float(e, value, dst); return MXD_OK;
    }
}

mxd_status mxd_dtype_decode(int code, const void *src, mxd_scalar *out,
                            mxd_error *err)
{
    const entry *e = find(code);
    if (!e)
        return unknown(code, err);
    switch (e->info.kind) {
    case MXD_KIND_BOOL:
        *out = mxd_scalar_bool(*(const uint8_t *)src != 0);
        return MXD_OK;
    case MXD_KIND_SIGNED:
    case MXD_KIND_UNSIGNED: *out = decode_int(&e->info, src); return MXD_OK;
    default: *out = mxd_scalar_float(decode_float(e, src)); return MXD_OK;
    }
}
