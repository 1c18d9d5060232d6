/* Tests of the view math and copy plans (csrc/core/layout.h), run by
 * tests/test_core_layout.py plain and under ASan+UBSan.
 *
 *   layout_test            unit tests; prints "layout tests passed"
 *   layout_test index      \
 *   layout_test view        | read cases from stdin, one per line, and write
 *   layout_test copy        | one result line each (see the run_* functions);
 *   layout_test fill       /  the pytest compares them with Python and NumPy
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "layout.h"

static mxd_error err;

#define CHECK(cond)                                                            \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "%s:%d: check failed: %s (last error: %s)\n",      \
                    __FILE__, __LINE__, #cond, err.message);                   \
            exit(1);                                                           \
        }                                                                      \
    } while (0)
#define OK(call) CHECK((call) == MXD_OK)
/* A call that fails with `status` and a message containing `text`. */
#define FAILS(call, status, text)                                              \
    do {                                                                       \
        err.message[0] = 0;                                                    \
        CHECK((call) == (status));                                             \
        CHECK(strstr(err.message, (text)) != NULL);                            \
    } while (0)

/* A view with its own arrays. */
typedef struct view {
    mxd_layout l;
    int64_t shape[MXD_MAX_RANK], strides[MXD_MAX_RANK];
} view;

static void init_view(view *v, int rank, const int64_t *shape,
                      const int64_t *strides, int64_t offset,
                      int64_t element_size, int64_t memory_size)
{
    v->l = (mxd_layout){rank,   v->shape,     v->strides,
                        offset, element_size, memory_size};
    for (int i = 0; i < rank; i++)
        v->shape[i] = shape[i];
    for (int i = 0; strides && i < rank; i++)
        v->strides[i] = strides[i];
    if (!strides)
        mxd_contiguous_strides(rank, shape, v->strides);
}

/* A fresh contiguous buffer of `shape`. */
static void fresh(view *v, int rank, const int64_t *shape, int64_t element_size)
{
    int64_t bytes = 0;
    OK(mxd_shape_size(rank, shape, element_size, NULL, &bytes, &err));
    init_view(v, rank, shape, NULL, 0, element_size, bytes);
}

/* A rank-0 view of one byte at offset 0 of no memory (tests adjust it). */
static void scalar(view *v)
{
    init_view(v, 0, NULL, NULL, 0, 1, 0);
}

static bool same(const int64_t *a, const int64_t *b, int n)
{
    for (int i = 0; i < n; i++)
        if (a[i] != b[i])
            return false;
    return true;
}

#define SHAPE(...) ((const int64_t[]){__VA_ARGS__})

static mxd_index at(int64_t i)
{
    return (mxd_index){.value = i};
}

/* A slice; NONE marks an absent field. */
#define NONE INT64_MIN
static mxd_index sl(int64_t start, int64_t stop, int64_t step)
{
    return (mxd_index){
        .is_slice = true,
        .has_start = start != NONE,
        .start = start,
        .has_stop = stop != NONE,
        .stop = stop,
        .has_step = step != NONE,
        .step = step,
    };
}
static const mxd_index all = {.is_slice = true};

/* ---- Sizes ------------------------------------------------------------- */

static void test_sizes(void)
{
    int64_t count = -1, bytes = -1;
    OK(mxd_shape_size(0, NULL, 4, &count, &bytes, &err));
    CHECK(count == 1 && bytes == 4);
    OK(mxd_shape_size(2, SHAPE(2, 3), 4, &count, &bytes, &err));
    CHECK(count == 6 && bytes == 24);
    OK(mxd_shape_size(3, SHAPE(2, 0, 3), 8, &count, &bytes, &err));
    CHECK(count == 0 && bytes == 0);
    OK(mxd_shape_size(2, SHAPE(2, 3), 4, NULL, NULL, &err));
    FAILS(mxd_shape_size(3, SHAPE(2, 3, -1), 4, &count, &bytes, &err),
          MXD_INVALID, "negative dimensions are not allowed (dimension 2 is");
    /* A negative dimension is reported even after an overflowing one. */
    FAILS(mxd_shape_size(3, SHAPE(INT64_MAX, 2, -1), 1, NULL, NULL, &err),
          MXD_INVALID, "negative dimensions");
    FAILS(mxd_shape_size(2, SHAPE(1LL << 32, 1LL << 32), 1, NULL, NULL, &err),
          MXD_INVALID, "product of its dimensions exceeds 2**63 - 1");
    FAILS(
        mxd_shape_size(3, SHAPE(0, 1LL << 32, 1LL << 32), 1, NULL, NULL, &err),
        MXD_INVALID, "product of its dimensions");
    OK(mxd_shape_size(1, SHAPE(INT64_MAX), 1, &count, &bytes, &err));
    CHECK(count == INT64_MAX && bytes == INT64_MAX);
    FAILS(mxd_shape_size(1, SHAPE(INT64_MAX), 2, NULL, NULL, &err), MXD_INVALID,
          "elements of 2 bytes exceed 2**63 - 1 bytes");
    FAILS(mxd_shape_size(2, SHAPE(1LL << 31, 1LL << 31), 4, NULL, NULL, &err),
          MXD_INVALID, "4611686018427387904 elements of 4 bytes");
    FAILS(mxd_shape_size(2, SHAPE(0, 1LL << 62), 4, NULL, NULL, &err),
          MXD_INVALID, "bytes");
    FAILS(mxd_shape_size(1, SHAPE(1), 0, NULL, NULL, &err), MXD_INVALID,
          "at least 1 byte");
    FAILS(mxd_shape_size(-1, NULL, 1, NULL, NULL, &err), MXD_INVALID,
          "0 to 64 dimensions, not -1");
    int64_t ones[MXD_MAX_RANK + 1];
    for (int i = 0; i <= MXD_MAX_RANK; i++)
        ones[i] = 1;
    OK(mxd_shape_size(MXD_MAX_RANK, ones, 2, &count, &bytes, &err));
    CHECK(count == 1 && bytes == 2);
    FAILS(mxd_shape_size(MXD_MAX_RANK + 1, ones, 1, NULL, NULL, &err),
          MXD_INVALID, "not 65");
}

static void test_contiguous_strides(void)
{
    int64_t s[4];
    mxd_contiguous_strides(3, SHAPE(2, 3, 4), s);
    CHECK(same(s, SHAPE(12, 4, 1), 3));
    mxd_contiguous_strides(3, SHAPE(2, 0, 3), s);
    CHECK(same(s, SHAPE(3, 3, 1), 3));
    mxd_contiguous_strides(2, SHAPE(1, 1), s);
    CHECK(same(s, SHAPE(1, 1), 2));
    s[0] = 99;
    mxd_contiguous_strides(0, NULL, s);
    CHECK(s[0] == 99);
}

/* ---- Contiguity, extent, bounds ---------------------------------------- */

static bool contiguous(int rank, const int64_t *shape, const int64_t *strides)
{
    view v;
    init_view(&v, rank, shape, strides, 0, 4, 1 << 20);
    return mxd_layout_is_contiguous(&v.l);
}

static void test_is_contiguous(void)
{
    view e;
    scalar(&e);
    CHECK(mxd_layout_is_contiguous(&e.l)); /* rank 0 */
    CHECK(contiguous(2, SHAPE(2, 3), SHAPE(3, 1)));
    CHECK(contiguous(1, SHAPE(3), SHAPE(1)));        /* a 1-D sub-range */
    CHECK(contiguous(2, SHAPE(2, 4), SHAPE(4, 1)));  /* adjacent rows */
    CHECK(contiguous(2, SHAPE(1, 4), SHAPE(99, 1))); /* one row */
    CHECK(contiguous(3, SHAPE(2, 1, 3), SHAPE(3, 7, 1)));
    CHECK(contiguous(1, SHAPE(1), SHAPE(5)));
    CHECK(contiguous(2, SHAPE(0, 3), SHAPE(7, 2))); /* nothing in it */
    CHECK(!contiguous(1, SHAPE(3), SHAPE(2)));
    CHECK(!contiguous(2, SHAPE(3, 1), SHAPE(4, 1))); /* a column */
    CHECK(!contiguous(2, SHAPE(2, 3), SHAPE(4, 1))); /* part of each row */
    CHECK(!contiguous(2, SHAPE(3, 2), SHAPE(1, 3))); /* column-major */
    CHECK(!contiguous(1, SHAPE(3), SHAPE(0)));
    CHECK(!contiguous(1, SHAPE(3), SHAPE(-1)));
    CHECK(!contiguous(1, SHAPE(1), SHAPE(-1)));      /* every negative step */
    CHECK(contiguous(2, SHAPE(0, 2), SHAPE(2, -1))); /* empty: any strides */
    CHECK(!contiguous(2, SHAPE(2, 1), SHAPE(1, -1)));
    /* MXD_MAX_RANK dimensions: 62 of size 2 and two of size 1. */
    int64_t shape[MXD_MAX_RANK];
    for (int i = 0; i < MXD_MAX_RANK; i++)
        shape[i] = i < 62 ? 2 : 1;
    view big;
    fresh(&big, MXD_MAX_RANK, shape, 1);
    CHECK(big.l.memory_size == 1LL << 62);
    CHECK(mxd_layout_is_contiguous(&big.l));
    big.strides[10] *= 2;
    CHECK(!mxd_layout_is_contiguous(&big.l));
}

static void test_extent_and_check(void)
{
    int64_t lo, hi;
    view v;
    init_view(&v, 2, SHAPE(2, 3), NULL, 8, 4, 32);
    OK(mxd_layout_extent(&v.l, &lo, &hi, &err));
    CHECK(lo == 8 && hi == 32);
    OK(mxd_layout_check(&v.l, NULL, &err));
    v.l.memory_size = 31;
    FAILS(mxd_layout_check(&v.l, NULL, &err), MXD_INVALID,
          "bytes [8, 32) lie outside its memory of 31 bytes");
    init_view(&v, 1, SHAPE(3), SHAPE(-1), 8, 4, 12); /* reversed */
    OK(mxd_layout_extent(&v.l, &lo, &hi, &err));
    CHECK(lo == 0 && hi == 12);
    OK(mxd_layout_check(&v.l, NULL, &err));
    v.l.offset = 4;
    FAILS(mxd_layout_check(&v.l, NULL, &err), MXD_INVALID, "[-4, 8)");
    init_view(&v, 2, SHAPE(3, 0), SHAPE(1000, -5), 12345, 4, 0);
    OK(mxd_layout_extent(&v.l, &lo, &hi, &err));
    CHECK(lo == 12345 && hi == 12345); /* touches nothing */
    OK(mxd_layout_check(&v.l, NULL, &err));
    view e;
    scalar(&e);
    e.l.memory_size = 1;
    OK(mxd_layout_extent(&e.l, &lo, &hi, &err));
    CHECK(lo == 0 && hi == 1);
    OK(mxd_layout_check(&e.l, NULL, &err));
    e.l.memory_size = 0;
    FAILS(mxd_layout_check(&e.l, NULL, &err), MXD_INVALID, "outside");
    e.l.memory_size = -1;
    FAILS(mxd_layout_check(&e.l, NULL, &err), MXD_INVALID, "at least 0");
    init_view(&v, 1, SHAPE(2), SHAPE(INT64_MAX), 1, 1, INT64_MAX);
    FAILS(mxd_layout_extent(&v.l, &lo, &hi, &err), MXD_INVALID,
          "cannot be addressed with 64 bits");
    FAILS(mxd_layout_check(&v.l, NULL, &err), MXD_INVALID, "64 bits");
    init_view(&v, 1, SHAPE(1), SHAPE(INT64_MAX / 2), 0, 4, 4);
    FAILS(mxd_layout_check(&v.l, NULL, &err), MXD_INVALID,
          "strides in bytes do not fit");
    init_view(&v, 1, SHAPE(-1), SHAPE(1), 0, 4, 4);
    FAILS(mxd_layout_check(&v.l, NULL, &err), MXD_INVALID,
          "negative dimensions");
    CHECK(mxd_byte_extent(2, SHAPE(2, 3), SHAPE(-12, 4), 12, 4, &lo, &hi));
    CHECK(lo == 0 && hi == 24);
    CHECK(!mxd_byte_extent(1, SHAPE(4), SHAPE(INT64_MIN / 2), 0, 1, &lo, &hi));
}

/* ---- Indexing ---------------------------------------------------------- */

static void test_index_basics(void)
{
    view p, r;
    fresh(&p, 2, SHAPE(3, 4), 4);
    init_view(&r, 0, NULL, NULL, 0, 1, 0);
    OK(mxd_layout_index(&p.l, (mxd_index[]){at(1), all}, 2, &r.l, &err));
    CHECK(r.l.rank == 1 && r.shape[0] == 4 && r.strides[0] == 1);
    CHECK(r.l.offset == 16 && r.l.element_size == 4 && r.l.memory_size == 48);
    OK(mxd_layout_index(&p.l, (mxd_index[]){all, at(1)}, 2, &r.l, &err));
    CHECK(r.l.rank == 1 && r.shape[0] == 3 && r.strides[0] == 4);
    CHECK(r.l.offset == 4);
    OK(mxd_layout_index(&p.l, (mxd_index[]){sl(NONE, NONE, -1), sl(1, NONE, 2)},
                        2, &r.l, &err));
    CHECK(r.l.rank == 2 && same(r.shape, SHAPE(3, 2), 2));
    CHECK(same(r.strides, SHAPE(-4, 2), 2) && r.l.offset == 2 * 16 + 4);
    OK(mxd_layout_check(&r.l, NULL, &err));
    CHECK(!mxd_layout_is_contiguous(&r.l));
    OK(mxd_layout_index(&p.l, (mxd_index[]){at(-1), at(-1)}, 2, &r.l, &err));
    CHECK(r.l.rank == 0 && r.l.offset == 44);
    OK(mxd_layout_index(&p.l, (mxd_index[]){sl(1, 3, NONE), all}, 2, &r.l,
                        &err));
    CHECK(mxd_layout_is_contiguous(&r.l) && r.l.offset == 16);
    FAILS(mxd_layout_index(&p.l, (mxd_index[]){at(5), at(0)}, 2, &r.l, &err),
          MXD_OUT_OF_RANGE, "index 5 is out of bounds for axis 0 with size 3");
    FAILS(mxd_layout_index(&p.l, (mxd_index[]){at(0), at(-5)}, 2, &r.l, &err),
          MXD_OUT_OF_RANGE, "index -5 is out of bounds for axis 1 with size 4");
    FAILS(mxd_layout_index(&p.l, (mxd_index[]){at(INT64_MIN), at(0)}, 2, &r.l,
                           &err),
          MXD_OUT_OF_RANGE, "index -9223372036854775808 is out of bounds");
    FAILS(mxd_layout_index(&p.l, (mxd_index[]){at(0)}, 1, &r.l, &err),
          MXD_INVALID, "expected 2 indices for a rank-2 buffer, got 1");
    FAILS(mxd_layout_index(&p.l, (mxd_index[]){at(0), at(0), at(0)}, 3, &r.l,
                           &err),
          MXD_INVALID, "got 3");
    FAILS(mxd_layout_index(&p.l, NULL, 0, &r.l, &err), MXD_INVALID, "got 0");
    FAILS(mxd_layout_index(&p.l, (mxd_index[]){all, sl(NONE, NONE, 0)}, 2, &r.l,
                           &err),
          MXD_INVALID, "slice step cannot be zero");
    view q;
    fresh(&q, 1, SHAPE(3), 1);
    FAILS(mxd_layout_index(&q.l, (mxd_index[]){at(0), at(0)}, 2, &r.l, &err),
          MXD_INVALID, "expected 1 index for a rank-1 buffer, got 2");
}

static void test_index_rank0(void)
{
    view p, r;
    scalar(&p);
    p.l.offset = 8, p.l.element_size = 4, p.l.memory_size = 12;
    init_view(&r, 0, NULL, NULL, 0, 1, 0);
    OK(mxd_layout_index(&p.l, NULL, 0, &r.l, &err));
    CHECK(r.l.rank == 0 && r.l.offset == 8 && r.l.element_size == 4);
    r.l.offset = 0;
    OK(mxd_layout_index(&p.l, (mxd_index[]){at(0)}, 1, &r.l, &err));
    CHECK(r.l.rank == 0 && r.l.offset == 8);
    FAILS(mxd_layout_index(&p.l, (mxd_index[]){at(1)}, 1, &r.l, &err),
          MXD_OUT_OF_RANGE, "index 1 is out of bounds for a rank-0 buffer");
    FAILS(mxd_layout_index(&p.l, (mxd_index[]){at(-1)}, 1, &r.l, &err),
          MXD_OUT_OF_RANGE, "index -1");
    FAILS(mxd_layout_index(&p.l, (mxd_index[]){all}, 1, &r.l, &err),
          MXD_INVALID, "not a slice");
    FAILS(mxd_layout_index(&p.l, (mxd_index[]){at(0), at(0)}, 2, &r.l, &err),
          MXD_INVALID, "a rank-0 buffer takes () or 0 as its index, got 2");
}

static void test_index_in_place(void)
{
    view v;
    fresh(&v, 3, SHAPE(2, 3, 4), 2);
    OK(mxd_layout_index(&v.l, (mxd_index[]){at(1), sl(NONE, NONE, -2), at(3)},
                        3, &v.l, &err));
    CHECK(v.l.rank == 1 && v.shape[0] == 2 && v.strides[0] == -8);
    CHECK(v.l.offset == (12 + 8 + 3) * 2);
    /* A failing call leaves its output (here its input) as it was. */
    view w;
    fresh(&w, 2, SHAPE(3, 4), 1);
    FAILS(mxd_layout_index(&w.l, (mxd_index[]){sl(1, NONE, NONE), at(4)}, 2,
                           &w.l, &err),
          MXD_OUT_OF_RANGE, "axis 1");
    CHECK(w.l.rank == 2 && same(w.shape, SHAPE(3, 4), 2));
    CHECK(same(w.strides, SHAPE(4, 1), 2) && w.l.offset == 0);
}

static void test_index_edges(void)
{
    view p, r;
    fresh(&p, 1, SHAPE(5), 4);
    init_view(&r, 0, NULL, NULL, 0, 1, 0);
    /* As NumPy: an empty slice keeps the parent's stride and start. */
    OK(mxd_layout_index(&p.l, (mxd_index[]){sl(3, 1, NONE)}, 1, &r.l, &err));
    CHECK(r.shape[0] == 0 && r.strides[0] == 1 && r.l.offset == 0);
    OK(mxd_layout_index(&p.l, (mxd_index[]){sl(4, 0, 3)}, 1, &r.l, &err));
    CHECK(r.shape[0] == 0 && r.strides[0] == 1 && r.l.offset == 0);
    /* One element keeps stride times step while it fits in bytes. */
    OK(mxd_layout_index(&p.l, (mxd_index[]){sl(1, 2, 3)}, 1, &r.l, &err));
    CHECK(r.shape[0] == 1 && r.strides[0] == 3 && r.l.offset == 4);
    OK(mxd_layout_index(&p.l,
                        (mxd_index[]){sl(INT64_MAX, -INT64_MAX, -INT64_MAX)}, 1,
                        &r.l, &err));
    CHECK(r.shape[0] == 1 && r.strides[0] == 1 && r.l.offset == 16);
    OK(mxd_layout_check(&r.l, NULL, &err));
    /* A step of -2**63 counts as -(2**63 - 1), as PySlice_Unpack. */
    mxd_index lowest = sl(NONE, NONE, NONE);
    lowest.has_step = true, lowest.step = INT64_MIN;
    OK(mxd_layout_index(&p.l, &lowest, 1, &r.l, &err));
    CHECK(r.shape[0] == 1 && r.l.offset == 16);
    mxd_index stop_min = sl(NONE, NONE, -1);
    stop_min.has_stop = true, stop_min.stop = INT64_MIN;
    OK(mxd_layout_index(&p.l, &stop_min, 1, &r.l, &err));
    CHECK(r.shape[0] == 5 && r.strides[0] == -1 && r.l.offset == 16);
    OK(mxd_layout_index(&p.l, (mxd_index[]){sl(-INT64_MAX, INT64_MAX, 2)}, 1,
                        &r.l, &err));
    CHECK(r.shape[0] == 3 && r.strides[0] == 2 && r.l.offset == 0);
    /* Zero-size dimensions. */
    view z;
    fresh(&z, 2, SHAPE(0, 4), 8);
    OK(mxd_layout_index(&z.l, (mxd_index[]){all, at(2)}, 2, &r.l, &err));
    CHECK(r.l.rank == 1 && r.shape[0] == 0 && r.l.offset == 16);
    OK(mxd_layout_check(&r.l, NULL, &err));
    FAILS(mxd_layout_index(&z.l, (mxd_index[]){at(0), all}, 2, &r.l, &err),
          MXD_OUT_OF_RANGE, "index 0 is out of bounds for axis 0 with size 0");
    /* MXD_MAX_RANK dimensions of size 1. */
    int64_t ones[MXD_MAX_RANK];
    mxd_index ints[MXD_MAX_RANK + 1], slices[MXD_MAX_RANK];
    for (int i = 0; i < MXD_MAX_RANK; i++)
        ones[i] = 1, ints[i] = at(-1), slices[i] = sl(NONE, NONE, -1);
    ints[MXD_MAX_RANK] = at(0);
    view big;
    fresh(&big, MXD_MAX_RANK, ones, 4);
    OK(mxd_layout_index(&big.l, ints, MXD_MAX_RANK, &r.l, &err));
    CHECK(r.l.rank == 0 && r.l.offset == 0);
    OK(mxd_layout_index(&big.l, slices, MXD_MAX_RANK, &r.l, &err));
    CHECK(r.l.rank == MXD_MAX_RANK && same(r.shape, ones, MXD_MAX_RANK));
    CHECK(r.strides[0] == -1 && !mxd_layout_is_contiguous(&r.l));
    FAILS(mxd_layout_index(&big.l, ints, MXD_MAX_RANK + 1, &r.l, &err),
          MXD_INVALID, "expected 64 indices for a rank-64 buffer, got 65");
    /* Forged views whose arithmetic overflows fail instead. */
    view f;
    init_view(&f, 1, SHAPE(3), SHAPE(INT64_MAX / 4), 0, 4, 0);
    FAILS(
        mxd_layout_index(&f.l, (mxd_index[]){sl(NONE, NONE, 2)}, 1, &r.l, &err),
        MXD_INVALID, "strides overflow");
    init_view(&f, 2, SHAPE(0, 3), SHAPE(1, INT64_MAX / 4), 0, 4, 0);
    FAILS(mxd_layout_index(&f.l, (mxd_index[]){all, at(2)}, 2, &r.l, &err),
          MXD_INVALID, "offset overflows");
}

static void test_locate(void)
{
    view p;
    fresh(&p, 2, SHAPE(3, 4), 4);
    int64_t off = -1;
    OK(mxd_layout_locate(&p.l, SHAPE(1, 2), 2, &off, &err));
    CHECK(off == 24);
    OK(mxd_layout_locate(&p.l, SHAPE(-1, -4), 2, &off, &err));
    CHECK(off == 32);
    FAILS(mxd_layout_locate(&p.l, SHAPE(3, 0), 2, &off, &err), MXD_OUT_OF_RANGE,
          "index 3 is out of bounds for axis 0 with size 3");
    FAILS(mxd_layout_locate(&p.l, SHAPE(1), 1, &off, &err), MXD_INVALID,
          "expected 2 indices");
    view r;
    scalar(&r);
    r.l.offset = 4;
    OK(mxd_layout_locate(&r.l, NULL, 0, &off, &err));
    CHECK(off == 4);
    off = 0;
    OK(mxd_layout_locate(&r.l, SHAPE(0), 1, &off, &err));
    CHECK(off == 4);
    FAILS(mxd_layout_locate(&r.l, SHAPE(2), 1, &off, &err), MXD_OUT_OF_RANGE,
          "rank-0");
    FAILS(mxd_layout_locate(&r.l, SHAPE(0, 0), 2, &off, &err), MXD_INVALID,
          "got 2 indices");
}

/* ---- Reinterpreting ---------------------------------------------------- */

static void test_reinterpret_contiguous(void)
{
    view p, r;
    fresh(&p, 2, SHAPE(2, 4), 1);
    init_view(&r, 0, NULL, NULL, 0, 1, 0);
    OK(mxd_layout_reinterpret(&p.l, 4, NULL, 0, &r.l, &err));
    CHECK(r.l.rank == 2 && same(r.shape, SHAPE(2, 1), 2));
    CHECK(same(r.strides, SHAPE(1, 1), 2) && r.l.element_size == 4);
    CHECK(r.l.memory_size == 8 && mxd_layout_is_contiguous(&r.l));
    FAILS(mxd_layout_reinterpret(&p.l, 3, NULL, 0, &r.l, &err), MXD_INVALID,
          "its size must be a divisor of the total size in bytes of the last "
          "axis");
    FAILS(mxd_layout_reinterpret(&p.l, 8, NULL, 0, &r.l, &err), MXD_INVALID,
          "divisor");
    view q;
    fresh(&q, 2, SHAPE(2, 3), 4);
    OK(mxd_layout_reinterpret(&q.l, 2, NULL, 0, &r.l, &err));
    CHECK(same(r.shape, SHAPE(2, 6), 2) && same(r.strides, SHAPE(6, 1), 2));
    /* With a shape: any rank, up to the end of the storage. */
    OK(mxd_layout_reinterpret(&q.l, 8, SHAPE(3), 1, &r.l, &err));
    CHECK(r.l.rank == 1 && r.shape[0] == 3 && r.strides[0] == 1);
    OK(mxd_layout_reinterpret(&q.l, 1, SHAPE(2, 2, 2, 3), 4, &r.l, &err));
    CHECK(same(r.strides, SHAPE(12, 6, 3, 1), 4));
    FAILS(mxd_layout_reinterpret(&q.l, 8, SHAPE(4), 1, &r.l, &err), MXD_INVALID,
          "a view of 32 bytes is larger than the 24 bytes of storage from its "
          "start");
    view sub;
    init_view(&sub, 1, SHAPE(2), NULL, 8, 4, 24); /* q's second row, cut */
    OK(mxd_layout_reinterpret(&sub.l, 4, SHAPE(4), 1, &r.l, &err));
    CHECK(r.l.offset == 8 && r.shape[0] == 4);
    FAILS(mxd_layout_reinterpret(&sub.l, 4, SHAPE(5), 1, &r.l, &err),
          MXD_INVALID, "20 bytes is larger than the 16 bytes");
    view odd; /* starts at an odd byte: kept as is */
    init_view(&odd, 1, SHAPE(8), NULL, 3, 1, 11);
    OK(mxd_layout_reinterpret(&odd.l, 4, NULL, 0, &r.l, &err));
    CHECK(r.l.offset == 3 && r.shape[0] == 2);
    FAILS(mxd_layout_reinterpret(&q.l, 4, SHAPE(-1), 1, &r.l, &err),
          MXD_INVALID, "negative dimensions");
    FAILS(
        mxd_layout_reinterpret(&q.l, 4, SHAPE(1), MXD_MAX_RANK + 1, &r.l, &err),
        MXD_INVALID, "not 65");
    FAILS(mxd_layout_reinterpret(&q.l, 0, NULL, 0, &r.l, &err), MXD_INVALID,
          "at least 1 byte");
    /* In place. */
    OK(mxd_layout_reinterpret(&q.l, 1, NULL, 0, &q.l, &err));
    CHECK(same(q.shape, SHAPE(2, 12), 2) && same(q.strides, SHAPE(12, 1), 2));
    CHECK(q.l.element_size == 1);
}

static void test_reinterpret_rank0_and_empty(void)
{
    view s, r;
    scalar(&s);
    s.l.element_size = 4, s.l.memory_size = 8, s.l.offset = 4;
    init_view(&r, 0, NULL, NULL, 0, 1, 0);
    OK(mxd_layout_reinterpret(&s.l, 4, NULL, 0, &r.l, &err));
    CHECK(r.l.rank == 0 && r.l.offset == 4);
    FAILS(mxd_layout_reinterpret(&s.l, 2, NULL, 0, &r.l, &err), MXD_INVALID,
          "a rank-0 buffer changes its element size (4 to 2 bytes) only with "
          "a shape");
    OK(mxd_layout_reinterpret(&s.l, 2, SHAPE(2), 1, &r.l, &err));
    CHECK(r.l.rank == 1 && r.shape[0] == 2 && r.l.element_size == 2);
    FAILS(mxd_layout_reinterpret(&s.l, 1, NULL, 0, &r.l, &err), MXD_INVALID,
          "only with a shape");
    view v;
    fresh(&v, 1, SHAPE(2), 1);
    OK(mxd_layout_reinterpret(&v.l, 2, SHAPE(0), 0, &r.l, &err)); /* rank 0 */
    CHECK(r.l.rank == 0 && r.l.element_size == 2);
    view z;
    fresh(&z, 2, SHAPE(0, 4), 1);
    OK(mxd_layout_reinterpret(&z.l, 4, NULL, 0, &r.l, &err));
    CHECK(same(r.shape, SHAPE(0, 1), 2));
    z.l.memory_size = 8; /* an empty view at the start of 8 bytes */
    OK(mxd_layout_reinterpret(&z.l, 4, SHAPE(2), 1, &r.l, &err));
    z.l.offset = 16; /* past the end: no room at all */
    FAILS(mxd_layout_reinterpret(&z.l, 4, SHAPE(1), 1, &r.l, &err), MXD_INVALID,
          "than the 0 bytes");
    OK(mxd_layout_reinterpret(&z.l, 4, SHAPE(0), 1, &r.l, &err));
    view rev; /* empty and reversed: nothing to keep in order */
    init_view(&rev, 2, SHAPE(0, 2), SHAPE(2, -1), 1, 1, 2);
    OK(mxd_layout_reinterpret(&rev.l, 2, NULL, 0, &r.l, &err));
    CHECK(same(r.shape, SHAPE(0, 1), 2) && r.l.offset == 1);
}

static void test_reinterpret_strided(void)
{
    view r;
    init_view(&r, 0, NULL, NULL, 0, 1, 0);
    view rev; /* (3,) reversed, 4-byte elements */
    init_view(&rev, 1, SHAPE(3), SHAPE(-1), 8, 4, 12);
    OK(mxd_layout_reinterpret(&rev.l, 4, NULL, 0, &r.l, &err));
    CHECK(r.shape[0] == 3 && r.strides[0] == -1 && r.l.offset == 8);
    FAILS(mxd_layout_reinterpret(&rev.l, 2, NULL, 0, &r.l, &err), MXD_INVALID,
          "the last axis must be contiguous");
    view rows; /* a (3, 4) uint8 buffer with its rows reversed */
    init_view(&rows, 2, SHAPE(3, 4), SHAPE(-4, 1), 8, 1, 12);
    OK(mxd_layout_reinterpret(&rows.l, 4, NULL, 0, &r.l, &err));
    CHECK(same(r.shape, SHAPE(3, 1), 2) && same(r.strides, SHAPE(-1, 1), 2));
    OK(mxd_layout_check(&r.l, NULL, &err));
    OK(mxd_layout_reinterpret(&rows.l, 2, NULL, 0, &r.l, &err));
    CHECK(same(r.shape, SHAPE(3, 2), 2) && same(r.strides, SHAPE(-2, 1), 2));
    /* The shape derived without one is accepted; another is not. */
    OK(mxd_layout_reinterpret(&rows.l, 2, SHAPE(3, 2), 2, &r.l, &err));
    CHECK(same(r.strides, SHAPE(-2, 1), 2));
    FAILS(mxd_layout_reinterpret(&rows.l, 2, SHAPE(6), 1, &r.l, &err),
          MXD_INVALID,
          "only a contiguous buffer can be viewed with a new "
          "shape");
    FAILS(mxd_layout_reinterpret(&rows.l, 3, SHAPE(4), 1, &r.l, &err),
          MXD_INVALID, "only a contiguous buffer");
    view cols; /* [:, :2] of a (3, 3) uint8 buffer: rows 3 bytes apart */
    init_view(&cols, 2, SHAPE(3, 2), SHAPE(3, 1), 0, 1, 9);
    FAILS(mxd_layout_reinterpret(&cols.l, 2, NULL, 0, &r.l, &err), MXD_INVALID,
          "multiples of its 2 bytes (axis 0 moves 3 bytes)");
    OK(mxd_layout_reinterpret(&cols.l, 1, NULL, 0, &r.l, &err));
    view one; /* a size-1 axis with a stride that does not divide */
    init_view(&one, 3, SHAPE(1, 2, 2), SHAPE(3, 4, 1), 0, 1, 8);
    OK(mxd_layout_reinterpret(&one.l, 2, NULL, 0, &r.l, &err));
    CHECK(same(r.shape, SHAPE(1, 2, 1), 3));
    CHECK(same(r.strides, SHAPE(0, 2, 1), 3));
    OK(mxd_layout_check(&r.l, NULL, &err));
    /* A last axis of one element may have any stride. */
    view last;
    init_view(&last, 2, SHAPE(3, 1), SHAPE(2, 7), 0, 4, 24);
    OK(mxd_layout_reinterpret(&last.l, 2, NULL, 0, &last.l, &err));
    CHECK(same(last.shape, SHAPE(3, 2), 2));
    CHECK(same(last.strides, SHAPE(4, 1), 2));
}

/* ---- Copy plans -------------------------------------------------------- */

static mxd_copy_plan plan;

static void test_plan_shapes(void)
{
    const mxd_copy_block *b = &plan.block;
    /* Contiguous to contiguous: one memcpy. */
    OK(mxd_copy_plan_init(&plan, 3, SHAPE(2, 3, 4), 4, 8, SHAPE(48, 16, 4), 0,
                          SHAPE(48, 16, 4), &err));
    CHECK(plan.blocks == 1 && plan.outer_rank == 0 && plan.bytes == 96);
    CHECK(b->width == 96 && b->height == 1 && b->pitched);
    CHECK(b->src_offset == 8 && b->dst_offset == 0);
    CHECK(plan.src_lo == 8 && plan.src_hi == 104);
    CHECK(plan.dst_lo == 0 && plan.dst_hi == 96);
    /* Size-1 dimensions, whatever their strides, do not matter. */
    OK(mxd_copy_plan_init(&plan, 4, SHAPE(1, 3, 1, 4), 1, 0,
                          SHAPE(-5, 4, 99, 1), 0, SHAPE(0, 4, -7, 1), &err));
    CHECK(plan.blocks == 1 && b->width == 12 && b->height == 1);
    /* Rows of a wider source: one pitched block. */
    OK(mxd_copy_plan_init(&plan, 2, SHAPE(3, 4), 4, 0, SHAPE(32, 4), 0,
                          SHAPE(16, 4), &err));
    CHECK(plan.blocks == 1 && b->width == 16 && b->height == 3);
    CHECK(b->src_pitch == 32 && b->dst_pitch == 16 && b->pitched);
    /* Reversed rows: a negative pitch, not pitched. */
    OK(mxd_copy_plan_init(&plan, 2, SHAPE(3, 4), 4, 32, SHAPE(-16, 4), 0,
                          SHAPE(16, 4), &err));
    CHECK(b->width == 16 && b->height == 3 && b->src_pitch == -16);
    CHECK(b->src_offset == 32 && !b->pitched);
    CHECK(plan.src_lo == 0 && plan.src_hi == 48);
    /* Reversed in both: walked forward, one memcpy. */
    OK(mxd_copy_plan_init(&plan, 1, SHAPE(3), 4, 8, SHAPE(-4), 20, SHAPE(-4),
                          &err));
    CHECK(plan.blocks == 1 && b->width == 12 && b->height == 1);
    CHECK(b->src_offset == 0 && b->dst_offset == 12);
    /* A column-major source: rows of one element, one block per column. */
    OK(mxd_copy_plan_init(&plan, 2, SHAPE(3, 4), 4, 0, SHAPE(4, 12), 0,
                          SHAPE(16, 4), &err));
    CHECK(plan.blocks == 3 && plan.outer_rank == 1);
    CHECK(b->width == 4 && b->height == 4 && b->pitched);
    CHECK(b->src_pitch == 12 && b->dst_pitch == 4);
    mxd_copy_iter it;
    mxd_copy_block blk;
    mxd_copy_iter_init(&it, &plan);
    for (int k = 0; k < 3; k++) {
        CHECK(mxd_copy_iter_next(&it, &blk));
        CHECK(blk.src_offset == 4 * k && blk.dst_offset == 16 * k);
        CHECK(blk.width == 4 && blk.height == 4);
    }
    CHECK(!mxd_copy_iter_next(&it, &blk));
    CHECK(!mxd_copy_iter_next(&it, &blk));
    /* Rows that interleave (a layout that forces it): not pitched. */
    OK(mxd_copy_plan_init(&plan, 2, SHAPE(2, 4), 1, 0, SHAPE(2, 1), 0,
                          SHAPE(4, 1), &err));
    CHECK(b->width == 4 && b->height == 2 && b->src_pitch == 2);
    CHECK(!b->pitched);
}

static void test_plan_edges(void)
{
    const mxd_copy_block *b = &plan.block;
    mxd_copy_iter it;
    mxd_copy_block blk;
    OK(mxd_copy_plan_init(&plan, 2, SHAPE(3, 0), 4, 0, SHAPE(4, 4), 0,
                          SHAPE(-4, 4), &err));
    CHECK(plan.blocks == 0 && plan.bytes == 0);
    mxd_copy_iter_init(&it, &plan);
    CHECK(!mxd_copy_iter_next(&it, &blk));
    OK(mxd_copy_plan_init(&plan, 0, NULL, 8, 16, NULL, 24, NULL, &err));
    CHECK(plan.blocks == 1 && b->width == 8 && b->height == 1);
    CHECK(b->src_offset == 16 && b->dst_offset == 24 && plan.bytes == 8);
    /* MXD_MAX_RANK dimensions: 20 of size 2 with every other byte of the
     * source merge into one dimension of 2**20 rows. */
    int64_t shape[MXD_MAX_RANK], src[MXD_MAX_RANK], dst[MXD_MAX_RANK];
    for (int i = 0; i < MXD_MAX_RANK; i++)
        shape[i] = i < 20 ? 2 : 1;
    mxd_contiguous_strides(MXD_MAX_RANK, shape, dst);
    for (int i = 0; i < MXD_MAX_RANK; i++)
        src[i] = 2 * dst[i];
    OK(mxd_copy_plan_init(&plan, MXD_MAX_RANK, shape, 1, 0, src, 0, dst, &err));
    CHECK(plan.blocks == 1 && b->width == 1 && b->height == 1 << 20);
    CHECK(b->src_pitch == 2 && b->dst_pitch == 1);
    /* Nothing merges when every dimension has its own gap. */
    for (int i = 0; i < MXD_MAX_RANK; i++)
        shape[i] = 1;
    for (int i = 0; i < 6; i++)
        shape[i] = 2, src[i] = 1LL << (2 * (6 - i)), dst[i] = 1LL << (6 - i);
    OK(mxd_copy_plan_init(&plan, MXD_MAX_RANK, shape, 1, 0, src, 0, dst, &err));
    CHECK(plan.outer_rank == 5 && plan.blocks == 32 && b->height == 2);
    int64_t count = 0, last = -1;
    mxd_copy_iter_init(&it, &plan);
    while (mxd_copy_iter_next(&it, &blk)) {
        CHECK(blk.dst_offset > last); /* row-major order */
        last = blk.dst_offset;
        count++;
    }
    CHECK(count == 32 && last == 64 + 32 + 16 + 8 + 4);
    FAILS(mxd_copy_plan_init(&plan, 1, SHAPE(2), 1, 1, SHAPE(INT64_MAX), 0,
                             SHAPE(1), &err),
          MXD_INVALID, "the source's bytes cannot be addressed");
    FAILS(mxd_copy_plan_init(&plan, 1, SHAPE(2), 1, 0, SHAPE(1), INT64_MAX,
                             SHAPE(1), &err),
          MXD_INVALID, "the destination's bytes");
    FAILS(mxd_copy_plan_init(&plan, 1, SHAPE(-2), 1, 0, SHAPE(1), 0, SHAPE(1),
                             &err),
          MXD_INVALID, "negative dimensions");
    FAILS(mxd_copy_plan_init(&plan, MXD_MAX_RANK + 1, shape, 1, 0, src, 0, dst,
                             &err),
          MXD_INVALID, "not 65");
}

static void test_plan_layouts_and_fill(void)
{
    const mxd_copy_block *b = &plan.block;
    view s, d;
    fresh(&s, 2, SHAPE(3, 4), 4);
    fresh(&d, 2, SHAPE(3, 4), 4);
    OK(mxd_layout_index(&s.l, (mxd_index[]){sl(NONE, NONE, -1), all}, 2, &s.l,
                        &err));
    OK(mxd_copy_plan_layouts(&plan, &d.l, &s.l, &err));
    CHECK(b->width == 16 && b->height == 3 && b->src_pitch == -16);
    CHECK(b->src_offset == 32 && b->dst_pitch == 16);
    view other;
    fresh(&other, 2, SHAPE(4, 3), 4);
    FAILS(mxd_copy_plan_layouts(&plan, &other.l, &s.l, &err), MXD_INVALID,
          "same shape and element size");
    view bytes;
    fresh(&bytes, 2, SHAPE(3, 4), 1);
    FAILS(mxd_copy_plan_layouts(&plan, &bytes.l, &s.l, &err), MXD_INVALID,
          "same shape");
    view vec;
    fresh(&vec, 1, SHAPE(3), 4);
    FAILS(mxd_copy_plan_layouts(&plan, &vec.l, &s.l, &err), MXD_INVALID,
          "same shape");
    view huge;
    init_view(&huge, 1, SHAPE(3), SHAPE(INT64_MAX / 2), 0, 4, 0);
    view three;
    fresh(&three, 1, SHAPE(3), 4);
    FAILS(mxd_copy_plan_layouts(&plan, &three.l, &huge.l, &err), MXD_INVALID,
          "do not fit");

    OK(mxd_fill_plan_init(&plan, 2, SHAPE(3, 4), 4, 0, SHAPE(16, 4), &err));
    CHECK(plan.fill && plan.blocks == 1 && b->width == 48 && b->height == 1);
    CHECK(b->src_pitch == 0 && b->src_offset == 0 && b->pitched);
    CHECK(plan.src_lo == 0 && plan.src_hi == 0 && plan.dst_hi == 48);
    /* [:, ::2] of (3, 4): every other element, one evenly strided run. */
    OK(mxd_fill_plan_init(&plan, 2, SHAPE(3, 2), 4, 0, SHAPE(16, 8), &err));
    CHECK(plan.blocks == 1 && b->width == 4 && b->height == 6);
    CHECK(b->dst_pitch == 8 && b->src_pitch == 0 && b->pitched);
    OK(mxd_fill_plan_init(&plan, 2, SHAPE(3, 2), 4, 0, SHAPE(20, 8), &err));
    CHECK(plan.blocks == 3 && plan.outer_rank == 1 && b->height == 2);
    OK(mxd_fill_plan_init(&plan, 2, SHAPE(3, 4), 2, 0, SHAPE(16, 2), &err));
    CHECK(plan.blocks == 1 && b->width == 8 && b->height == 3);
    CHECK(b->dst_pitch == 16 && b->pitched);
    OK(mxd_fill_plan_init(&plan, 1, SHAPE(3), 4, 8, SHAPE(-4), &err));
    CHECK(plan.blocks == 1 && b->width == 12 && b->dst_offset == 0);
    OK(mxd_fill_plan_init(&plan, 1, SHAPE(0), 4, 8, SHAPE(4), &err));
    CHECK(plan.blocks == 0);
    FAILS(mxd_fill_plan_init(&plan, 1, SHAPE(2), 1, 0, SHAPE(INT64_MAX), &err),
          MXD_INVALID, "destination");
}

/* ---- Host execution ---------------------------------------------------- */

static void test_copy_host(void)
{
    unsigned char a[16], c[16];
    for (int i = 0; i < 16; i++)
        a[i] = (unsigned char)i, c[i] = 0xee;
    /* Gather a column-major (4, 2) source of 2-byte elements. */
    OK(mxd_copy_plan_init(&plan, 2, SHAPE(4, 2), 2, 0, SHAPE(2, 8), 0,
                          SHAPE(4, 2), &err));
    OK(mxd_copy_host(&plan, c, a, &err));
    const unsigned char want[16] = {0, 1, 8,  9,  2, 3, 10, 11,
                                    4, 5, 12, 13, 6, 7, 14, 15};
    CHECK(!memcmp(c, want, 16));
    /* a[1:] into a[:-1]: memmove. */
    OK(mxd_copy_plan_init(&plan, 1, SHAPE(15), 1, 1, SHAPE(1), 0, SHAPE(1),
                          &err));
    OK(mxd_copy_host(&plan, a, a, &err));
    CHECK(a[0] == 1 && a[14] == 15 && a[15] == 15);
    /* Reversing in place: as if through a temporary. */
    for (int i = 0; i < 16; i++)
        a[i] = (unsigned char)i;
    OK(mxd_copy_plan_init(&plan, 1, SHAPE(8), 2, 14, SHAPE(-2), 0, SHAPE(2),
                          &err));
    OK(mxd_copy_host(&plan, a, a, &err));
    for (int i = 0; i < 8; i++)
        CHECK(a[2 * i] == 14 - 2 * i && a[2 * i + 1] == 15 - 2 * i);
    /* Nothing to copy: the bases are not touched. */
    OK(mxd_copy_plan_init(&plan, 1, SHAPE(0), 1, 0, SHAPE(1), 0, SHAPE(1),
                          &err));
    OK(mxd_copy_host(&plan, NULL, NULL, &err));
    OK(mxd_fill_plan_init(&plan, 1, SHAPE(2), 1, 0, SHAPE(1), &err));
    FAILS(mxd_copy_host(&plan, c, a, &err), MXD_INVALID, "not fill plans");
}

static void test_fill_host(void)
{
    unsigned char d[40];
    memset(d, 0xee, sizeof d);
    const unsigned char pattern[3] = {1, 2, 3};
    /* Every other 3-byte element of a (2, 3) view with rows 18 bytes apart. */
    OK(mxd_fill_plan_init(&plan, 2, SHAPE(2, 3), 3, 1, SHAPE(18, 6), &err));
    mxd_fill_host(&plan, d, pattern);
    for (int i = 0; i < 40; i++) {
        int r = (i - 1) % 18, in = i >= 1 && i < 37 && r % 6 < 3;
        CHECK(d[i] == (in ? pattern[r % 6] : 0xee));
    }
    /* A long run of 5-byte elements, filled by doubling. */
    unsigned char run[37];
    memset(run, 0, sizeof run);
    OK(mxd_fill_plan_init(&plan, 1, SHAPE(7), 5, 1, SHAPE(5), &err));
    mxd_fill_host(&plan, run, "abcde");
    CHECK(run[0] == 0 && run[36] == 0);
    for (int i = 1; i < 36; i++)
        CHECK(run[i] == "abcde"[(i - 1) % 5]);
    memset(d, 0, sizeof d);
    OK(mxd_fill_plan_init(&plan, 1, SHAPE(4), 1, 0, SHAPE(-1), &err));
    CHECK(plan.block.dst_offset == -3);
    OK(mxd_fill_plan_init(&plan, 1, SHAPE(4), 1, 3, SHAPE(-1), &err));
    mxd_fill_host(&plan, d, "z");
    CHECK(!memcmp(d, "zzzz", 4) && d[4] == 0);
}

/* ---- Cases from the pytest --------------------------------------------- */

static bool read_int(int64_t *v)
{
    long long x;
    if (scanf("%lld", &x) != 1)
        return false;
    *v = x;
    return true;
}

static int64_t next_int(void)
{
    int64_t v;
    if (!read_int(&v)) {
        fprintf(stderr, "truncated case\n");
        exit(2);
    }
    return v;
}

static void read_ints(int64_t *out, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        out[i] = next_int();
}

static void print_failure(mxd_status st)
{
    printf("err %d %s\n", (int)st, err.message);
}

static void print_view(const mxd_layout *v)
{
    printf("ok %d %lld", v->rank, (long long)v->offset);
    for (int i = 0; i < v->rank; i++)
        printf(" %lld", (long long)v->shape[i]);
    for (int i = 0; i < v->rank; i++)
        printf(" %lld", (long long)v->strides[i]);
    putchar('\n');
}

/* A view: element_size offset memory_size rank shape... strides... */
static bool read_view(view *v)
{
    int64_t esize, offset, memory_size, rank;
    if (!read_int(&esize))
        return false;
    offset = next_int(), memory_size = next_int(), rank = next_int();
    CHECK(rank >= 0 && rank <= MXD_MAX_RANK);
    int64_t shape[MXD_MAX_RANK], strides[MXD_MAX_RANK];
    read_ints(shape, rank);
    read_ints(strides, rank);
    init_view(v, (int)rank, shape, strides, offset, esize, memory_size);
    OK(mxd_layout_check(&v->l, NULL, &err));
    return true;
}

/* view count entries..., an entry being "0 value" or
 * "1 has_start start has_stop stop has_step step"
 * -> "ok rank offset shape... strides..." or "err status message". */
static void run_index(void)
{
    view v, r;
    while (read_view(&v)) {
        mxd_index entries[MXD_MAX_RANK + 1];
        int64_t count = next_int();
        CHECK(count >= 0 && count <= MXD_MAX_RANK + 1);
        for (int64_t i = 0; i < count; i++) {
            mxd_index *e = &entries[i];
            e->is_slice = next_int() != 0;
            if (!e->is_slice) {
                e->value = next_int();
                continue;
            }
            e->has_start = next_int(), e->start = next_int();
            e->has_stop = next_int(), e->stop = next_int();
            e->has_step = next_int(), e->step = next_int();
        }
        init_view(&r, 0, NULL, NULL, 0, 1, 0);
        mxd_status st = mxd_layout_index(&v.l, entries, (int)count, &r.l, &err);
        if (st != MXD_OK) {
            print_failure(st);
            continue;
        }
        OK(mxd_layout_check(&r.l, NULL, &err));
        print_view(&r.l);
    }
}

/* view new_element_size has_shape [rank shape...] -> as run_index. */
static void run_view(void)
{
    view v, r;
    while (read_view(&v)) {
        int64_t esize = next_int(), has_shape = next_int(), rank = 0;
        int64_t shape[MXD_MAX_RANK];
        if (has_shape) {
            rank = next_int();
            CHECK(rank >= 0 && rank <= MXD_MAX_RANK);
            read_ints(shape, rank);
        }
        init_view(&r, 0, NULL, NULL, 0, 1, 0);
        mxd_status st = mxd_layout_reinterpret(
            &v.l, esize, has_shape ? shape : NULL, (int)rank, &r.l, &err);
        if (st != MXD_OK) {
            print_failure(st);
            continue;
        }
        OK(mxd_layout_check(&r.l, NULL, &err));
        print_view(&r.l);
    }
}

/* Byte i of a source, and of a destination before the copy. */
static unsigned char src_byte(int64_t i)
{
    return (unsigned char)((i * 167 + 13) % 251);
}

static unsigned char dst_byte(int64_t i)
{
    return (unsigned char)(255 - i % 199);
}

static void print_plan_and_bytes(const unsigned char *bytes, int64_t size)
{
    const mxd_copy_block *b = &plan.block;
    printf("ok %lld %lld %lld %lld %lld %d %d ", (long long)plan.blocks,
           (long long)b->width, (long long)b->height, (long long)b->src_pitch,
           (long long)b->dst_pitch, (int)b->pitched, plan.outer_rank);
    for (int64_t i = 0; i < size; i++)
        printf("%02x", bytes[i]);
    putchar('\n');
}

/* Checks the blocks against the plan's summary: they cover plan.bytes, in
 * rows inside the extents. */
static void check_blocks(void)
{
    mxd_copy_iter it;
    mxd_copy_block b;
    int64_t total = 0, n = 0;
    mxd_copy_iter_init(&it, &plan);
    while (mxd_copy_iter_next(&it, &b)) {
        CHECK(b.width == plan.block.width && b.height == plan.block.height);
        for (int64_t r = 0; r < b.height; r += b.height - 1) {
            int64_t d = b.dst_offset + r * b.dst_pitch;
            CHECK(d >= plan.dst_lo && d + b.width <= plan.dst_hi);
            if (!plan.fill) {
                int64_t s = b.src_offset + r * b.src_pitch;
                CHECK(s >= plan.src_lo && s + b.width <= plan.src_hi);
            }
            if (b.height == 1)
                break;
        }
        total += b.width * b.height;
        n++;
    }
    CHECK(n == plan.blocks && total == plan.bytes);
}

/* element_size rank shape... same src_size src_offset src_strides...
 * dst_size dst_offset dst_strides... (byte strides; same: the destination
 * is the source's memory, dst_size ignored)
 * -> "ok blocks width height src_pitch dst_pitch pitched outer_rank
 *     <destination bytes, hex>". */
static void run_copy(void)
{
    int64_t esize;
    while (read_int(&esize)) {
        int64_t rank = next_int(), shape[MXD_MAX_RANK];
        int64_t src_strides[MXD_MAX_RANK], dst_strides[MXD_MAX_RANK];
        CHECK(rank >= 0 && rank <= MXD_MAX_RANK);
        read_ints(shape, rank);
        int64_t shared = next_int(), src_size = next_int();
        int64_t src_offset = next_int();
        read_ints(src_strides, rank);
        int64_t dst_size = next_int(), dst_offset = next_int();
        read_ints(dst_strides, rank);
        unsigned char *src = malloc((size_t)src_size + 1);
        unsigned char *dst = shared ? src : malloc((size_t)dst_size + 1);
        CHECK(src && dst);
        for (int64_t i = 0; i < src_size; i++)
            src[i] = src_byte(i);
        for (int64_t i = 0; !shared && i < dst_size; i++)
            dst[i] = dst_byte(i);
        mxd_status st =
            mxd_copy_plan_init(&plan, (int)rank, shape, esize, src_offset,
                               src_strides, dst_offset, dst_strides, &err);
        if (st == MXD_OK) {
            check_blocks();
            st = mxd_copy_host(&plan, dst, src, &err);
        }
        if (st == MXD_OK)
            print_plan_and_bytes(dst, shared ? src_size : dst_size);
        else
            print_failure(st);
        if (!shared)
            free(dst);
        free(src);
    }
}

/* element_size rank shape... size offset strides... pattern bytes...
 * -> as run_copy. */
static void run_fill(void)
{
    int64_t esize;
    while (read_int(&esize)) {
        int64_t rank = next_int(), shape[MXD_MAX_RANK], strides[MXD_MAX_RANK];
        CHECK(rank >= 0 && rank <= MXD_MAX_RANK && esize >= 1);
        read_ints(shape, rank);
        int64_t size = next_int(), offset = next_int();
        read_ints(strides, rank);
        unsigned char *dst = malloc((size_t)size + 1);
        unsigned char *pattern = malloc((size_t)esize);
        CHECK(dst && pattern);
        for (int64_t i = 0; i < esize; i++)
            pattern[i] = (unsigned char)next_int();
        for (int64_t i = 0; i < size; i++)
            dst[i] = dst_byte(i);
        mxd_status st = mxd_fill_plan_init(&plan, (int)rank, shape, esize,
                                           offset, strides, &err);
        if (st == MXD_OK) {
            check_blocks();
            mxd_fill_host(&plan, dst, pattern);
            print_plan_and_bytes(dst, size);
        } else {
            print_failure(st);
        }
        free(pattern);
        free(dst);
    }
}

int main(int argc, char **argv)
{
    if (argc > 1) {
        static const struct {
            const char *name;
            void (*run)(void);
        } modes[] = {{"index", run_index},
                     {"view", run_view},
                     {"copy", run_copy},
                     {"fill", run_fill}};
        for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++)
            if (!strcmp(argv[1], modes[i].name)) {
                modes[i].run();
                return 0;
            }
        fprintf(stderr, "unknown mode %s\n", argv[1]);
        return 2;
    }
    test_sizes();
    test_contiguous_strides();
    test_is_contiguous();
    test_extent_and_check();
    test_index_basics();
    test_index_rank0();
    test_index_in_place();
    test_index_edges();
    test_locate();
    test_reinterpret_contiguous();
    test_reinterpret_rank0_and_empty();
    test_reinterpret_strided();
    test_plan_shapes();
    test_plan_edges();
    test_plan_layouts_and_fill();
    test_copy_host();
    test_fill_host();
    puts("layout tests passed");
    return 0;
}
