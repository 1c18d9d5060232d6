/* The dtype table and scalar codecs (csrc/core/dtype.c) without Python,
 * driven by tests/test_core_dtype.py.
 *
 *   dtype_test check   runs the API checks below; prints "dtype checks passed"
 *   dtype_test table   prints one line per dtype: code name kind bits bytes
 *                      align dlpack_code dlpack_bits padded
 *   dtype_test codec   reads one request per line from stdin and answers each
 *                      on one line of stdout (the test compares the answers
 *                      with NumPy and ml_dtypes):
 *       D code hexbits   decode the element whose bytes, read as a
 *                        little-endian integer, are hexbits
 *       F code hexdouble encode the double whose IEEE bits are hexdouble
 *       I code int       encode an int64 (decimal)
 *       U code uint      encode a uint64 (decimal)
 *       B code 0|1       encode a bool
 *     Answers: for D "f <hex bits of the double>", "i <int>", "u <uint>" or
 *     "b <0|1>"; for encodes "<hexbits>" of the element; "E <status>
 *     <message>" on failure. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtype.h"

static mxd_error err;

#define CHECK(cond)                                                            \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "%s:%d: check failed: %s (last error: %s)\n",      \
                    __FILE__, __LINE__, #cond, err.message);                   \
            exit(1);                                                           \
        }                                                                      \
    } while (0)

/* ---- codec -------------------------------------------------------------- */

static uint64_t element_bits(const unsigned char *bytes, unsigned size)
{
    uint64_t bits = 0;
    for (unsigned i = 0; i < size; i++)
        bits |= (uint64_t)bytes[i] << (8 * i);
    return bits;
}

static void answer_decode(int code, uint64_t bits)
{
    const mxd_dtype_info *info = mxd_dtype_info_of(code);
    unsigned char bytes[MXD_DTYPE_MAX_BYTES] = {0};
    for (unsigned i = 0; info && i < info->size_in_bytes; i++)
        bytes[i] = (unsigned char)(bits >> (8 * i));
    mxd_scalar out;
    if (mxd_dtype_decode(code, bytes, &out, &err) != MXD_OK) {
        printf("E %d %s\n", err.status, err.message);
        return;
    }
    switch (out.kind) {
    case MXD_SCALAR_BOOL: printf("b %d\n", out.v.b); break;
    case MXD_SCALAR_INT: printf("i %" PRId64 "\n", out.v.i); break;
    case MXD_SCALAR_UINT: printf("u %" PRIu64 "\n", out.v.u); break;
    case MXD_SCALAR_FLOAT: {
        uint64_t d;
        memcpy(&d, &out.v.f, 8);
        printf("f %016" PRIx64 "\n", d);
        break;
    }
    }
}

static void answer_encode(int code, mxd_scalar value)
{
    unsigned char bytes[MXD_DTYPE_MAX_BYTES];
    memset(bytes, 0xA5, sizeof bytes);
    if (mxd_dtype_encode(code, value, bytes, &err) != MXD_OK) {
        /* A failed encode writes nothing. */
        for (size_t i = 0; i < sizeof bytes; i++)
            CHECK(bytes[i] == 0xA5);
        printf("E %d %s\n", err.status, err.message);
        return;
    }
    const mxd_dtype_info *info = mxd_dtype_info_of(code);
    /* An encode writes exactly size_in_bytes bytes. */
    for (size_t i = info->size_in_bytes; i < sizeof bytes; i++)
        CHECK(bytes[i] == 0xA5);
    printf("%" PRIx64 "\n", element_bits(bytes, info->size_in_bytes));
}

static int run_codec(void)
{
    char line[256], op;
    int code;
    while (fgets(line, sizeof line, stdin)) {
        char arg[128];
        if (sscanf(line, " %c %d %127s", &op, &code, arg) != 3) {
            fprintf(stderr, "bad request: %s", line);
            return 2;
        }
        if (op == 'D') {
            answer_decode(code, strtoull(arg, NULL, 16));
        } else if (op == 'F') {
            uint64_t bits = strtoull(arg, NULL, 16);
            double d;
            memcpy(&d, &bits, 8);
            answer_encode(code, mxd_scalar_float(d));
        } else if (op == 'I') {
            answer_encode(code, mxd_scalar_int(strtoll(arg, NULL, 10)));
        } else if (op == 'U') {
            answer_encode(code, mxd_scalar_uint(strtoull(arg, NULL, 10)));
        } else if (op == 'B') {
            answer_encode(code, mxd_scalar_bool(strcmp(arg, "0") != 0));
        } else {
            fprintf(stderr, "bad request: %s", line);
            return 2;
        }
    }
    return 0;
}

/* ---- table -------------------------------------------------------------- */

static int print_table(void)
{
    for (size_t i = 0; i < mxd_dtype_count(); i++) {
        const mxd_dtype_info *t = mxd_dtype_at(i);
        printf("%d %s %d %u %u %u %u %u %d\n", t->code, t->name, (int)t->kind,
               t->size_in_bits, t->size_in_bytes, t->align, t->dlpack_code,
               t->dlpack_bits, t->subbyte_padded);
    }
    return 0;
}

/* ---- check -------------------------------------------------------------- */

static void check_lookup(void)
{
    CHECK(mxd_dtype_count() == 21);
    CHECK(mxd_dtype_at(mxd_dtype_count()) == NULL);
    for (size_t i = 0; i < mxd_dtype_count(); i++) {
        const mxd_dtype_info *t = mxd_dtype_at(i);
        CHECK(mxd_dtype_known(t->code));
        CHECK(mxd_dtype_info_of(t->code) == t);
        CHECK(mxd_dtype_from_dlpack(t->dlpack_code, t->dlpack_bits) == t);
        CHECK(t->size_in_bytes >= 1 && t->size_in_bytes <= MXD_DTYPE_MAX_BYTES);
        CHECK(t->subbyte_padded == (t->size_in_bits % 8 != 0));
    }
    const int unknown[] = {-1, 0, 2, 63, 67, 72, 74, 83, 133, 142, 255, 256};
    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
        CHECK(!mxd_dtype_known(unknown[i]));
        CHECK(mxd_dtype_info_of(unknown[i]) == NULL);
    }
    /* DLPack types MAX has no dtype for. */
    CHECK(mxd_dtype_from_dlpack(MXD_DL_FLOAT, 8) == NULL);
    CHECK(mxd_dtype_from_dlpack(MXD_DL_INT, 1) == NULL);
    CHECK(mxd_dtype_from_dlpack(8 /* kDLFloat8_e4m3 */, 8) == NULL);
    CHECK(mxd_dtype_from_dlpack(5 /* kDLComplex */, 64) == NULL);
    CHECK(mxd_dtype_from_dlpack(MXD_DL_FLOAT4_E2M1FN, 8) == NULL);
}

static void check_unknown_code_fails(void)
{
    unsigned char byte = 0x5A;
    mxd_scalar out = mxd_scalar_int(7);
    CHECK(mxd_dtype_encode(2, mxd_scalar_int(1), &byte, &err) == MXD_INVALID);
    CHECK(err.status == MXD_INVALID);
    CHECK(strcmp(err.message, "unknown dtype code 2") == 0);
    CHECK(byte == 0x5A);
    CHECK(mxd_dtype_decode(0, &byte, &out, &err) == MXD_INVALID);
    CHECK(out.kind == MXD_SCALAR_INT && out.v.i == 7);
    /* err may be NULL: the status alone still says what happened. */
    CHECK(mxd_dtype_decode(0, &byte, &out, NULL) == MXD_INVALID);
    CHECK(mxd_dtype_encode(MXD_DTYPE_UINT8, mxd_scalar_int(256), &byte, NULL) ==
          MXD_INVALID);
}

static void check_scalar_helpers(void)
{
    CHECK(mxd_scalar_bool(true).kind == MXD_SCALAR_BOOL);
    CHECK(mxd_scalar_bool(true).v.b);
    CHECK(mxd_scalar_int(-5).kind == MXD_SCALAR_INT);
    CHECK(mxd_scalar_int(-5).v.i == -5);
    CHECK(mxd_scalar_uint(UINT64_MAX).kind == MXD_SCALAR_UINT);
    CHECK(mxd_scalar_uint(UINT64_MAX).v.u == UINT64_MAX);
    CHECK(mxd_scalar_float(0.5).kind == MXD_SCALAR_FLOAT);
    CHECK(mxd_scalar_float(0.5).v.f == 0.5);
}

/* Host byte order: an int32 element reads back through an int32_t. */
static void check_host_order(void)
{
    int32_t x = 0;
    CHECK(mxd_dtype_encode(MXD_DTYPE_INT32, mxd_scalar_int(-123456789), &x,
                           &err) == MXD_OK);
    CHECK(x == -123456789);
    double d = 0;
    CHECK(mxd_dtype_encode(MXD_DTYPE_FLOAT64, mxd_scalar_float(0.1), &d,
                           &err) == MXD_OK);
    CHECK(d == 0.1);
}

static int run_checks(void)
{
    check_lookup();
    check_unknown_code_fails();
    check_scalar_helpers();
    check_host_order();
    printf("dtype checks passed\n");
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "check") == 0)
        return run_checks();
    if (argc == 2 && strcmp(argv[1], "table") == 0)
        return print_table();
    if (argc == 2 && strcmp(argv[1], "codec") == 0)
        return run_codec();
    fprintf(stderr, "usage: %s check|table|codec\n", argv[0]);
    return 2;
}
