/* The view math of Buffer: sizes, contiguity, extents, indexing and
 * reinterpreting (layout.h).  All arithmetic on sizes, strides and offsets
 * is checked, so no input makes it overflow. */
#include "backend.h"
#include "layout.h"

static bool mul(int64_t a, int64_t b, int64_t *out)
{
    return !__builtin_mul_overflow(a, b, out);
}

static bool add(int64_t a, int64_t b, int64_t *out)
{
    return !__builtin_add_overflow(a, b, out);
}

/* Copies n dimensions; loops rather than memcpy, because the arrays of a
 * rank-0 view may be NULL, and dst may be src. */
static void copy_dims(int64_t *dst, const int64_t *src, int n)
{
    for (int i = 0; i < n; i++)
        dst[i] = src[i];
}

/* ---- Sizes -------------------------------------------------------------- */

mxd_status mxd_shape_size(int rank, const int64_t *shape, int64_t element_size,
                          int64_t *count, int64_t *bytes, mxd_error *err)
{
    if (rank < 0 || rank > MXD_MAX_RANK)
        return mxd_fail(err, MXD_INVALID,
                        "a buffer has 0 to %d dimensions, not %d", MXD_MAX_RANK,
                        rank);
    if (element_size < 1)
        return mxd_fail(err, MXD_INVALID,
                        "the element size must be at least 1 byte, not %lld",
                        (long long)element_size);
    for (int i = 0; i < rank; i++)
        if (shape[i] < 0)
            return mxd_fail(err, MXD_INVALID,
                            "negative dimensions are not allowed "
                            "(dimension %d is %lld)",
                            i, (long long)shape[i]);
    int64_t nonzero = 1, size;
    bool empty = false;
    for (int i = 0; i < rank; i++) {
        if (shape[i] == 0)
            empty = true;
        else if (!mul(nonzero, shape[i], &nonzero))
            return mxd_fail(err, MXD_INVALID,
                            "the shape is too big: the product of its "
                            "dimensions exceeds 2**63 - 1");
    }
    if (!mul(nonzero, element_size, &size))
        return mxd_fail(err, MXD_INVALID,
                        "the shape is too big: %lld elements of %lld bytes "
                        "exceed 2**63 - 1 bytes",
                        (long long)nonzero, (long long)element_size);
    if (count)
        *count = empty ? 0 : nonzero;
    if (bytes)
        *bytes = empty ? 0 : size;
    return MXD_OK;
}

void mxd_contiguous_strides(int rank, const int64_t *shape, int64_t *strides)
{
    int64_t step = 1;
    for (int i = rank - 1; i >= 0; i--) {
        strides[i] = step;
        if (shape[i] > 0)
            step *= shape[i];
    }
}

/* ---- Contiguity, extent, bounds ----------------------------------------- */

bool mxd_layout_is_contiguous(const mxd_layout *v)
{
    for (int i = 0; i < v->rank; i++)
        if (v->shape[i] == 0)
            return true;
    int64_t expected = 1;
    for (int i = v->rank - 1; i >= 0; i--) {
        if (v->strides[i] < 0)
            return false;
        if (v->shape[i] == 1)
            continue;
        if (v->strides[i] != expected || !mul(expected, v->shape[i], &expected))
            return false;
    }
    return true;
}

bool mxd_byte_extent(int rank, const int64_t *shape, const int64_t *strides,
                     int64_t offset, int64_t element_size, int64_t *lo,
                     int64_t *hi)
{
    for (int i = 0; i < rank; i++)
        if (shape[i] == 0) {
            *lo = *hi = offset;
            return true;
        }
    int64_t down = 0, up = 0, reach, top;
    for (int i = 0; i < rank; i++) {
        if (shape[i] == 1)
            continue;
        if (!mul(strides[i], shape[i] - 1, &reach) ||
            !add(reach < 0 ? down : up, reach, reach < 0 ? &down : &up))
            return false;
    }
    return add(offset, down, lo) && add(offset, up, &top) &&
           add(top, element_size, hi);
}

/* The strides of `v` in bytes; false when one does not fit. */
static bool byte_strides(const mxd_layout *v, int64_t *out)
{
    for (int i = 0; i < v->rank; i++)
        if (!mul(v->strides[i], v->element_size, &out[i]))
            return false;
    return true;
}

mxd_status mxd_layout_extent(const mxd_layout *v, int64_t *lo, int64_t *hi,
                             mxd_error *err)
{
    int64_t strides[MXD_MAX_RANK];
    if (!byte_strides(v, strides) ||
        !mxd_byte_extent(v->rank, v->shape, strides, v->offset, v->element_size,
                         lo, hi))
        return mxd_fail(err, MXD_INVALID,
                        "the view's bytes cannot be addressed with 64 bits");
    return MXD_OK;
}

mxd_status mxd_layout_check(const mxd_layout *v, int64_t *count_out,
                            mxd_error *err)
{
    int64_t count, bytes, lo, hi, strides[MXD_MAX_RANK];
    mxd_status st =
        mxd_shape_size(v->rank, v->shape, v->element_size, &count, &bytes, err);
    if (st != MXD_OK)
        return st;
    if (count_out)
        *count_out = count;
    if (v->memory_size < 0)
        return mxd_fail(err, MXD_INVALID,
                        "the memory size must be at least 0, not %lld",
                        (long long)v->memory_size);
    if (!byte_strides(v, strides))
        return mxd_fail(err, MXD_INVALID,
                        "the view's strides in bytes do not fit in 64 bits");
    if (count == 0)
        return MXD_OK;
    if (mxd_layout_is_contiguous(v)) { /* most views: [offset, + bytes) */
        lo = v->offset;
        if (!add(lo, bytes, &hi))
            hi = INT64_MAX;
    } else if ((st = mxd_layout_extent(v, &lo, &hi, err)) != MXD_OK) {
        return st;
    }
    if (lo < 0 || hi > v->memory_size)
        return mxd_fail(err, MXD_INVALID,
                        "the view's bytes [%lld, %lld) lie outside its memory "
                        "of %lld bytes",
                        (long long)lo, (long long)hi,
                        (long long)v->memory_size);
    return MXD_OK;
}

/* ---- Indexing ----------------------------------------------------------- */

static mxd_status bad_count(int rank, int count, mxd_error *err)
{
    if (rank == 0)
        return mxd_fail(err, MXD_INVALID,
                        "a rank-0 buffer takes () or 0 as its index, "
                        "got %d indices",
                        count);
    return mxd_fail(err, MXD_INVALID,
                    "expected %d %s for a rank-%d buffer, got %d", rank,
                    rank == 1 ? "index" : "indices", rank, count);
}

/* A rank-0 view takes () or the single integer 0. */
static mxd_status rank0_index(bool is_slice, int64_t value, mxd_error *err)
{
    if (is_slice)
        return mxd_fail(err, MXD_INVALID,
                        "a rank-0 buffer takes () or 0 as its index, "
                        "not a slice");
    if (value != 0)
        return mxd_fail(err, MXD_OUT_OF_RANGE,
                        "index %lld is out of bounds for a rank-0 buffer "
                        "(only 0 is accepted)",
                        (long long)value);
    return MXD_OK;
}

static mxd_status wrap(int64_t value, int64_t size, int axis, int64_t *out,
                       mxd_error *err)
{
    int64_t i = value < 0 ? value + size : value;
    if (i < 0 || i >= size)
        return mxd_fail(err, MXD_OUT_OF_RANGE,
                        "index %lld is out of bounds for axis %d with size "
                        "%lld",
                        (long long)value, axis, (long long)size);
    *out = i;
    return MXD_OK;
}

/* Moves *offset by `steps` elements of `stride` (a checked view's stride:
 * its bytes fit); fails only for forged views. */
static mxd_status move(int64_t *offset, int64_t steps, int64_t stride,
                       int64_t element_size, mxd_error *err)
{
    int64_t bytes;
    if (!mul(stride, element_size, &bytes) || !mul(bytes, steps, &bytes) ||
        !add(*offset, bytes, offset))
        return mxd_fail(err, MXD_INVALID,
                        "the view's offset overflows 64 bits");
    return MXD_OK;
}

/* Python's slice.indices() for a dimension of `length`: the first index,
 * the step and the element count (PySlice_Unpack + PySlice_AdjustIndices). */
static int64_t slice_indices(const mxd_index *e, int64_t length, int64_t *start,
                             int64_t *step)
{
    int64_t s = e->has_step ? e->step : 1;
    if (s == INT64_MIN)
        s = -INT64_MAX; /* so that -s exists, as PySlice_Unpack */
    int64_t bounds[2] = {
        e->has_start ? e->start : (s < 0 ? INT64_MAX : 0),
        e->has_stop ? e->stop : (s < 0 ? INT64_MIN : INT64_MAX),
    };
    for (int k = 0; k < 2; k++) {
        int64_t *b = &bounds[k];
        if (*b < 0) {
            *b += length;
            if (*b < 0)
                *b = s < 0 ? -1 : 0;
        } else if (*b >= length) {
            *b = s < 0 ? length - 1 : length;
        }
    }
    int64_t a = bounds[0], z = bounds[1], n = 0;
    if (s < 0 && z < a)
        n = (a - z - 1) / -s + 1;
    else if (s > 0 && a < z)
        n = (z - a - 1) / s + 1;
    *start = a;
    *step = s;
    return n;
}

/* One slice of a dimension: its new size and stride, and the offset moved
 * to its first element.  As NumPy, an empty slice starts at 0 with step 1. */
static mxd_status apply_slice(const mxd_index *e, int64_t size, int64_t stride,
                              int64_t element_size, int64_t *offset,
                              int64_t *new_size, int64_t *new_stride,
                              mxd_error *err)
{
    if (e->has_step && e->step == 0)
        return mxd_fail(err, MXD_INVALID, "slice step cannot be zero");
    int64_t start, step, scaled, bytes;
    int64_t n = slice_indices(e, size, &start, &step);
    if (n == 0)
        start = 0, step = 1;
    if (!mul(stride, step, &scaled) || !mul(scaled, element_size, &bytes)) {
        if (n > 1) /* a checked view's elements are addressable */
            return mxd_fail(err, MXD_INVALID,
                            "the view's strides overflow 64 bits");
        scaled = stride; /* one element: its stride does not matter */
    }
    *new_size = n;
    *new_stride = scaled;
    return move(offset, start, stride, element_size, err);
}

mxd_status mxd_layout_index(const mxd_layout *in, const mxd_index *entries,
                            int count, mxd_layout *out, mxd_error *err)
{
    const int rank = in->rank;
    const int64_t element_size = in->element_size;
    const int64_t memory_size = in->memory_size;
    int64_t offset = in->offset;
    if (rank == 0 && count <= 1) {
        mxd_status st =
            count ? rank0_index(entries[0].is_slice, entries[0].value, err)
                  : MXD_OK;
        if (st != MXD_OK)
            return st;
    } else if (count != rank) {
        return bad_count(rank, count, err);
    }
    /* Built aside and written at the end: out may be in, and is left
     * untouched on errors. */
    int64_t shape[MXD_MAX_RANK], strides[MXD_MAX_RANK];
    int j = 0;
    for (int i = 0; i < rank; i++) {
        const int64_t size = in->shape[i], stride = in->strides[i];
        const mxd_index *e = &entries[i];
        mxd_status st;
        if (e->is_slice) {
            st = apply_slice(e, size, stride, element_size, &offset, &shape[j],
                             &strides[j], err);
            j++;
        } else {
            int64_t at = 0;
            st = wrap(e->value, size, i, &at, err);
            if (st == MXD_OK)
                st = move(&offset, at, stride, element_size, err);
        }
        if (st != MXD_OK)
            return st;
    }
    copy_dims(out->shape, shape, j);
    copy_dims(out->strides, strides, j);
    out->rank = j;
    out->offset = offset;
    out->element_size = element_size;
    out->memory_size = memory_size;
    return MXD_OK;
}

mxd_status mxd_layout_locate(const mxd_layout *in, const int64_t *indices,
                             int count, int64_t *offset, mxd_error *err)
{
    int64_t at = in->offset;
    if (in->rank == 0 && count <= 1) {
        mxd_status st = count ? rank0_index(false, indices[0], err) : MXD_OK;
        if (st == MXD_OK)
            *offset = at;
        return st;
    }
    if (count != in->rank)
        return bad_count(in->rank, count, err);
    for (int i = 0; i < count; i++) {
        int64_t k = 0;
        mxd_status st = wrap(indices[i], in->shape[i], i, &k, err);
        if (st == MXD_OK)
            st = move(&at, k, in->strides[i], in->element_size, err);
        if (st != MXD_OK)
            return st;
    }
    *offset = at;
    return MXD_OK;
}

/* ---- Reinterpreting ----------------------------------------------------- */

/* The shape of view(dtype) without a shape: the last dimension rescaled. */
static mxd_status derived_shape(const mxd_layout *in, int64_t element_size,
                                int64_t *shape, mxd_error *err)
{
    if (in->rank == 0) {
        if (element_size != in->element_size)
            return mxd_fail(err, MXD_INVALID,
                            "a rank-0 buffer changes its element size "
                            "(%lld to %lld bytes) only with a shape",
                            (long long)in->element_size,
                            (long long)element_size);
        return MXD_OK;
    }
    const int last = in->rank - 1;
    int64_t bytes;
    if (!mul(in->shape[last], in->element_size, &bytes))
        return mxd_fail(err, MXD_INVALID, "the last axis overflows 64 bits");
    if (bytes % element_size != 0)
        return mxd_fail(err, MXD_INVALID,
                        "When changing to a larger dtype, its size must be a "
                        "divisor of the total size in bytes of the last axis "
                        "of the array.");
    copy_dims(shape, in->shape, last);
    shape[last] = bytes / element_size;
    return MXD_OK;
}

static bool same_shape(const int64_t *a, int rank_a, const int64_t *b,
                       int rank_b)
{
    if (rank_a != rank_b)
        return false;
    for (int i = 0; i < rank_a; i++)
        if (a[i] != b[i])
            return false;
    return true;
}

/* A fresh row-major view of `shape` at in's first byte; `shape` was checked
 * and may be out->shape. */
static mxd_status fresh_view(const mxd_layout *in, int64_t element_size,
                             const int64_t *shape, int rank, mxd_layout *out,
                             mxd_error *err)
{
    int64_t bytes, room = 0;
    mxd_shape_size(rank, shape, element_size, NULL, &bytes, NULL);
    if (in->offset >= 0 && in->offset < in->memory_size)
        room = in->memory_size - in->offset;
    if (bytes > room)
        return mxd_fail(err, MXD_INVALID,
                        "a view of %lld bytes is larger than the %lld bytes of "
                        "storage from its start",
                        (long long)bytes, (long long)room);
    const int64_t offset = in->offset, memory_size = in->memory_size;
    copy_dims(out->shape, shape, rank);
    mxd_contiguous_strides(rank, out->shape, out->strides);
    out->rank = rank;
    out->offset = offset;
    out->element_size = element_size;
    out->memory_size = memory_size;
    return MXD_OK;
}

/* The same elements of a non-contiguous view as `element_size` bytes each,
 * with NumPy's rules; `shape` is the derived shape. */
static mxd_status strided_view(const mxd_layout *in, int64_t element_size,
                               const int64_t *shape, mxd_layout *out,
                               mxd_error *err)
{
    const int rank = in->rank, last = rank - 1;
    const int64_t old = in->element_size;
    int64_t strides[MXD_MAX_RANK];
    copy_dims(strides, in->strides, rank);
    if (element_size != old) { /* rank >= 1: derived_shape checked it */
        if (in->shape[last] > 1 && in->strides[last] != 1)
            return mxd_fail(err, MXD_INVALID,
                            "to change to a dtype of a different size, the "
                            "last axis must be contiguous");
        for (int i = 0; i < last; i++) {
            int64_t bytes;
            if (!mul(strides[i], old, &bytes))
                return mxd_fail(err, MXD_INVALID,
                                "the view's strides overflow 64 bits");
            if (bytes % element_size == 0)
                strides[i] = bytes / element_size;
            else if (in->shape[i] <= 1)
                strides[i] = 0; /* its stride never moves anything */
            else
                return mxd_fail(err, MXD_INVALID,
                                "to change to a dtype of a different size, "
                                "the strides of the other axes must be "
                                "multiples of its %lld bytes (axis %d moves "
                                "%lld bytes)",
                                (long long)element_size, i, (long long)bytes);
        }
        strides[last] = 1;
    }
    copy_dims(out->shape, shape, rank);
    copy_dims(out->strides, strides, rank);
    out->rank = rank;
    out->offset = in->offset;
    out->element_size = element_size;
    out->memory_size = in->memory_size;
    return MXD_OK;
}

mxd_status mxd_layout_reinterpret(const mxd_layout *in, int64_t element_size,
                                  const int64_t *shape, int rank,
                                  mxd_layout *out, mxd_error *err)
{
    int64_t derived[MXD_MAX_RANK];
    mxd_status st;
    if (element_size < 1)
        return mxd_fail(err, MXD_INVALID,
                        "the element size must be at least 1 byte, not %lld",
                        (long long)element_size);
    const bool given = shape != NULL;
    if (!given) {
        st = derived_shape(in, element_size, derived, err);
        if (st != MXD_OK)
            return st;
        shape = derived;
        rank = in->rank;
    }
    st = mxd_shape_size(rank, shape, element_size, NULL, NULL, err);
    if (st != MXD_OK)
        return st;
    if (mxd_layout_is_contiguous(in))
        return fresh_view(in, element_size, shape, rank, out, err);
    if (given && (derived_shape(in, element_size, derived, NULL) != MXD_OK ||
                  !same_shape(shape, rank, derived, in->rank)))
        return mxd_fail(err, MXD_INVALID,
                        "only a contiguous buffer can be viewed with a new "
                        "shape (this one is strided); copy it with "
                        "contiguous() first");
    return strided_view(in, element_size, shape, out, err);
}
