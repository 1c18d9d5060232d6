/* The shape/strides/offset math of Buffer views, and plans for copying and
 * filling strided views.  Pure arithmetic: no Python, no driver, and no
 * allocation (mxd_copy_host allocates a staging copy only for overlapping
 * strided copies).
 *
 * A view (mxd_layout) is `rank` dimensions with a shape and strides counted
 * in elements, the byte offset of element (0, ..., 0) in the memory it
 * lives in, the element size and the memory's size in bytes.  Callers own
 * the shape and stride arrays; functions that produce a view write into the
 * arrays the output mxd_layout points to, which need room for MXD_MAX_RANK
 * entries (or the output rank, when the caller knows it).
 *
 * Views produced by these functions from a checked view (mxd_layout_check)
 * are checked views again: their bytes lie inside the memory and every
 * stride times the element size fits in an int64_t, so callers can convert
 * strides to bytes without overflow checks.  Functions taking a view assume
 * it is a checked view; functions taking a shape from the user check it. */
#ifndef MXD_LAYOUT_H
#define MXD_LAYOUT_H

#include "mxd.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The most dimensions a view has: NumPy 2's limit. */
#define MXD_MAX_RANK 64

typedef struct mxd_layout {
    int rank;             /* 0 .. MXD_MAX_RANK */
    int64_t *shape;       /* rank entries, each >= 0 */
    int64_t *strides;     /* rank entries, in elements, any sign */
    int64_t offset;       /* byte offset of element (0, ..., 0) */
    int64_t element_size; /* bytes per element, >= 1 */
    int64_t memory_size;  /* bytes of the memory the view lives in */
} mxd_layout;

/* ---- Sizes -------------------------------------------------------------- */

/* The element count and byte size of `shape` (either output may be NULL).
 * Rank 0 has one element.  MXD_INVALID for a rank outside 0..MXD_MAX_RANK,
 * an element size below 1, a negative dimension, or a size that does not fit
 * in an int64_t.  As NumPy, the overflow check multiplies the non-zero
 * dimensions only, so a shape with a 0 whose other dimensions overflow is
 * rejected too: every contiguous stride of an accepted shape fits. */
mxd_status mxd_shape_size(int rank, const int64_t *shape, int64_t element_size,
                          int64_t *count, int64_t *bytes, mxd_error *err);

/* Row-major strides (in elements) of an accepted shape.  A dimension of size
 * 0 counts as 1 for the strides of the dimensions before it (as PyTorch;
 * NumPy 2 gives empty arrays all-zero strides): the strides of an empty
 * buffer stay those of its shape with the zeros replaced by ones. */
void mxd_contiguous_strides(int rank, const int64_t *shape, int64_t *strides);

/* ---- Contiguity, extent, bounds ----------------------------------------- */

/* True when the view is row-major contiguous with positive strides: every
 * dimension of size above 1 has the stride of a fresh buffer of the view's
 * shape.  A view with no elements is contiguous whatever its strides (as
 * NumPy's flags: it has no bytes to be out of order).  Otherwise a negative
 * stride makes it non-contiguous whatever its dimension's size (every
 * negative-step view, as MAX), and dimensions of size 1 do not matter. */
bool mxd_layout_is_contiguous(const mxd_layout *v);

/* The bytes the view touches: [*lo, *hi), relative to the memory's start.
 * A view with no elements touches nothing: *lo == *hi == v->offset.
 * MXD_INVALID when the bytes cannot be addressed with 64 bits. */
mxd_status mxd_layout_extent(const mxd_layout *v, int64_t *lo, int64_t *hi,
                             mxd_error *err);

/* The same for byte strides (stride i moves strides[i] bytes), for views
 * that are not mxd_layouts (the two sides of a copy); false when the bytes
 * cannot be addressed with 64 bits. */
bool mxd_byte_extent(int rank, const int64_t *shape, const int64_t *strides,
                     int64_t offset, int64_t element_size, int64_t *lo,
                     int64_t *hi);

/* Checks a view made outside these functions (e.g. imported): rank, element
 * size, shape (as mxd_shape_size), strides times the element size fitting
 * in 64 bits, and its extent inside [0, memory_size).  A view with no
 * elements is inside any memory.  `count` (may be NULL): its elements. */
mxd_status mxd_layout_check(const mxd_layout *v, int64_t *count,
                            mxd_error *err);

/* ---- Indexing ----------------------------------------------------------- */

/* One entry of buf[idx]: an integer or a slice.  Slice fields are any
 * int64 (as PySlice_Unpack clamps Python ints; a step of -2**63 counts as
 * -(2**63 - 1), as there); absent fields take Python's defaults. */
typedef struct mxd_index {
    bool is_slice;
    int64_t value; /* the integer, when !is_slice */
    bool has_start, has_stop, has_step;
    int64_t start, stop, step;
} mxd_index;

/* out = in[entries[0], ..., entries[count - 1]]: a view of the same memory.
 * Exactly in->rank entries (MXD_INVALID otherwise, naming both counts); a
 * rank-0 view takes no entry or the single integer 0 (another integer is
 * MXD_OUT_OF_RANGE, a slice MXD_INVALID), so the binding passes `0` through.
 * Integers drop their dimension and count from the end when negative; out of
 * range they give MXD_OUT_OF_RANGE in NumPy's words ("index 5 is out of
 * bounds for axis 0 with size 3").  Slices clamp as Python's (any sign of
 * step; step 0 is MXD_INVALID, "slice step cannot be zero") and keep the
 * parent's stride times the step; as NumPy, an empty slice keeps the
 * parent's stride and start, and a one-element slice keeps the parent's
 * stride when the stride times the step would not fit in bytes.
 * out->shape and out->strides need room for in->rank entries; out may be
 * in (indexing in place), and is left as it was on errors.  Element size
 * and memory size are kept. */
mxd_status mxd_layout_index(const mxd_layout *in, const mxd_index *entries,
                            int count, mxd_layout *out, mxd_error *err);

/* The byte offset of one element: `count` integers, with the rules and
 * errors of integer entries in mxd_layout_index (for buf[i, j] = value and
 * item-style access). */
mxd_status mxd_layout_locate(const mxd_layout *in, const int64_t *indices,
                             int count, int64_t *offset, mxd_error *err);

/* ---- Reinterpreting: view(dtype, shape=None) ---------------------------- */

/* out = the same bytes as elements of `element_size` bytes, starting at the
 * byte where `in` starts (aligned or not); memory size kept.
 *
 * Without a shape (shape == NULL, rank ignored) the last dimension is
 * rescaled: its bytes must divide by the new element size (MXD_INVALID
 * otherwise, MAX's message).  A rank-0 view keeps rank 0 and cannot change
 * its element size without a shape (as NumPy).  For a contiguous view the
 * result is contiguous.  For any other view (strided, negative steps) the
 * result covers exactly the same elements, as NumPy's ndarray.view: with an
 * unchanged element size every stride is kept; otherwise the last dimension
 * must be contiguous (stride 1, or at most one element) and the other
 * strides, in bytes, multiples of the new element size (MXD_INVALID
 * otherwise).
 *
 * With a shape (rank entries, checked as mxd_shape_size) the view must be
 * contiguous, and the result is a fresh row-major view of that shape, which
 * may extend past the original view up to the end of the memory: a view
 * larger than the storage from its start byte is MXD_INVALID.  A shape on a
 * non-contiguous view is accepted only when it equals the shape derived
 * without one (then as without a shape): a strided view cannot be reshaped
 * without a copy.
 *
 * out->shape and out->strides need room for the output rank; out may be
 * in, and is left as it was on errors. */
mxd_status mxd_layout_reinterpret(const mxd_layout *in, int64_t element_size,
                                  const int64_t *shape, int rank,
                                  mxd_layout *out, mxd_error *err);

/* ---- Copy and fill plans ------------------------------------------------ */

/* One 2-D block: `height` rows of `width` bytes, row r copied from byte
 * src_offset + r * src_pitch (of the source memory) to byte
 * dst_offset + r * dst_pitch (of the destination memory).  Pitches may be
 * negative (reversed rows) or smaller than the width (a layout with
 * interleaved rows); `pitched` says whether both are at least the width,
 * i.e. whether a 2-D driver copy (cuMemcpy2D, hipMemcpy2D) can do the block
 * directly; otherwise a backend stages it or copies row by row.  A block of
 * height 1 always has pitched set (its pitches are the width). */
typedef struct mxd_copy_block {
    int64_t src_offset, dst_offset;
    int64_t src_pitch, dst_pitch;
    int64_t width, height;
    bool pitched;
} mxd_copy_block;

/* A copy (or fill) as outer loops over one kind of 2-D block.  Dimensions
 * of size 1 are dropped, dimensions where neither stride is positive are
 * walked forward, and neighbouring dimensions that are contiguous with each
 * other in both source and destination are merged.  When the innermost
 * remaining dimension is contiguous in both (in the destination alone, for
 * a fill), a row is that whole dimension and the next one gives the rows;
 * otherwise a row is one element and the innermost dimension gives the
 * rows.  The remaining dimensions are the outer loops, row-major.  A copy
 * between two contiguous views is one block of height 1.  Plans live on
 * the caller's stack (about 1.6 KiB) and hold no pointers. */
typedef struct mxd_copy_plan {
    int64_t element_size;
    int64_t bytes;        /* bytes copied in all: count * element_size */
    int64_t blocks;       /* product of outer_shape; 0 when nothing is copied */
    mxd_copy_block block; /* the first block; the others move its offsets */
    int outer_rank;
    int64_t outer_shape[MXD_MAX_RANK - 1];
    int64_t outer_src[MXD_MAX_RANK - 1], outer_dst[MXD_MAX_RANK - 1];
    /* The bytes each side touches (for overlap tests); empty when nothing
     * is copied.  A fill has no source: src_lo == src_hi == 0. */
    int64_t src_lo, src_hi, dst_lo, dst_hi;
    bool fill;
} mxd_copy_plan;

/* Plans copying the `shape` view at (src_offset, src_strides) into the one
 * at (dst_offset, dst_strides).  Strides and offsets in BYTES, any sign;
 * both views must address bytes that fit in 64 bits (MXD_INVALID
 * otherwise) and the shape is checked as mxd_shape_size. */
mxd_status mxd_copy_plan_init(mxd_copy_plan *plan, int rank,
                              const int64_t *shape, int64_t element_size,
                              int64_t src_offset, const int64_t *src_strides,
                              int64_t dst_offset, const int64_t *dst_strides,
                              mxd_error *err);

/* The same for two views: MXD_INVALID unless their shapes and element sizes
 * are equal. */
mxd_status mxd_copy_plan_layouts(mxd_copy_plan *plan, const mxd_layout *dst,
                                 const mxd_layout *src, mxd_error *err);

/* Plans filling a view with one element's bytes: blocks of contiguous runs
 * of the destination, each row `width` bytes (a multiple of the element
 * size) to fill with the pattern repeated.  Blocks of a fill have
 * src_offset and src_pitch 0, and `pitched` considers dst_pitch only. */
mxd_status mxd_fill_plan_init(mxd_copy_plan *plan, int rank,
                              const int64_t *shape, int64_t element_size,
                              int64_t dst_offset, const int64_t *dst_strides,
                              mxd_error *err);

/* Walks a plan's blocks in order without allocating. */
typedef struct mxd_copy_iter {
    const mxd_copy_plan *plan;
    int64_t left; /* blocks not yet returned */
    int64_t src_offset, dst_offset;
    int64_t index[MXD_MAX_RANK - 1];
} mxd_copy_iter;

void mxd_copy_iter_init(mxd_copy_iter *it, const mxd_copy_plan *plan);
/* Writes the next block and returns true, or returns false at the end. */
bool mxd_copy_iter_next(mxd_copy_iter *it, mxd_copy_block *block);

/* ---- Host execution ----------------------------------------------------- */

/* Runs a copy plan between host memory at src_base and dst_base (the bases
 * its offsets count from).  The result is always as if the source were
 * first copied to a temporary (as NumPy's assignment): a single-block plan
 * of height 1 uses memmove; other plans whose source and destination
 * extents overlap (a conservative test: interleaved views count) gather
 * the source into a temporary first (MXD_NO_MEMORY if it cannot be
 * allocated), the only allocation here.  MXD_INVALID for a fill plan. */
mxd_status mxd_copy_host(const mxd_copy_plan *plan, void *dst_base,
                         const void *src_base, mxd_error *err);

/* Runs a fill plan on host memory at dst_base with `pattern`, one element
 * of plan->element_size bytes, which must not lie in the destination. */
void mxd_fill_host(const mxd_copy_plan *plan, void *dst_base,
                   const void *pattern);

#ifdef __cplusplus
}
#endif

#endif
