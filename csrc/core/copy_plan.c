/* Copy and fill plans (layout.h): a strided copy as outer loops over 2-D
 * blocks, and the iterator that walks them. */
#include <string.h>

#include "backend.h"
#include "layout.h"

/* The dimensions of a copy while it is being simplified: byte strides. */
typedef struct dims {
    int n;
    int64_t shape[MXD_MAX_RANK];
    int64_t src[MXD_MAX_RANK], dst[MXD_MAX_RANK];
} dims;

/* Drops dimensions of size 1 and walks forward the ones where neither
 * stride is positive (the same pairs of bytes, in the other order).  The
 * views' extents were checked, so the moved offsets fit. */
static void collect(dims *d, int rank, const int64_t *shape, const int64_t *src,
                    const int64_t *dst, int64_t *src_at, int64_t *dst_at)
{
    d->n = 0;
    for (int i = 0; i < rank; i++) {
        if (shape[i] == 1)
            continue;
        int64_t s = src ? src[i] : 0, t = dst[i]; /* no source: a fill */
        if (s <= 0 && t <= 0) {
            *src_at += (shape[i] - 1) * s;
            *dst_at += (shape[i] - 1) * t;
            s = -s, t = -t;
        }
        d->shape[d->n] = shape[i];
        d->src[d->n] = s;
        d->dst[d->n++] = t;
    }
}

/* Whether dimension `outer` steps over exactly one run of `inner`. */
static bool follows(const dims *d, int outer, int inner)
{
    int64_t s, t;
    return !__builtin_mul_overflow(d->src[inner], d->shape[inner], &s) &&
           !__builtin_mul_overflow(d->dst[inner], d->shape[inner], &t) &&
           s == d->src[outer] && t == d->dst[outer];
}

/* Merges each dimension into the next inner one when it follows it in both
 * views; sizes multiply within the element count, so they fit. */
static void coalesce(dims *d)
{
    int kept = d->n ? 1 : 0; /* dims [n - kept, n) are the merged ones */
    for (int i = d->n - 2; i >= 0; i--) {
        int top = d->n - kept;
        if (follows(d, i, top)) {
            d->shape[top] *= d->shape[i];
            continue;
        }
        top--;
        d->shape[top] = d->shape[i];
        d->src[top] = d->src[i];
        d->dst[top] = d->dst[i];
        kept++;
    }
    int first = d->n - kept;
    memmove(d->shape, d->shape + first, sizeof *d->shape * (size_t)kept);
    memmove(d->src, d->src + first, sizeof *d->src * (size_t)kept);
    memmove(d->dst, d->dst + first, sizeof *d->dst * (size_t)kept);
    d->n = kept;
}

/* Splits the simplified dimensions into the block and the outer loops. */
static void shape_blocks(mxd_copy_plan *p, const dims *d)
{
    mxd_copy_block *b = &p->block;
    const int64_t esize = p->element_size;
    int inner = d->n - 1, rows = inner;
    b->width = esize;
    if (inner >= 0 && (p->fill || d->src[inner] == esize) &&
        d->dst[inner] == esize) {
        b->width = d->shape[inner] * esize;
        rows = inner - 1;
    }
    if (rows >= 0) {
        b->height = d->shape[rows];
        b->src_pitch = d->src[rows];
        b->dst_pitch = d->dst[rows];
    } else {
        b->height = 1;
        b->src_pitch = p->fill ? 0 : b->width;
        b->dst_pitch = b->width;
    }
    b->pitched =
        b->dst_pitch >= b->width && (p->fill || b->src_pitch >= b->width);
    p->outer_rank = rows > 0 ? rows : 0;
    p->blocks = 1;
    for (int i = 0; i < p->outer_rank; i++) {
        p->outer_shape[i] = d->shape[i];
        p->outer_src[i] = d->src[i];
        p->outer_dst[i] = d->dst[i];
        p->blocks *= d->shape[i];
    }
}

/* A fill is a copy from a source whose strides are all 0. */
static mxd_status plan(mxd_copy_plan *p, bool fill, int rank,
                       const int64_t *shape, int64_t element_size,
                       int64_t src_offset, const int64_t *src_strides,
                       int64_t dst_offset, const int64_t *dst_strides,
                       mxd_error *err)
{
    int64_t count;
    mxd_status st =
        mxd_shape_size(rank, shape, element_size, &count, NULL, err);
    if (st != MXD_OK)
        return st;
    p->element_size = element_size;
    p->fill = fill;
    p->src_lo = p->src_hi = p->dst_lo = p->dst_hi = 0;
    if (!fill && !mxd_byte_extent(rank, shape, src_strides, src_offset,
                                  element_size, &p->src_lo, &p->src_hi))
        return mxd_fail(err, MXD_INVALID,
                        "the source's bytes cannot be addressed with 64 bits");
    if (!mxd_byte_extent(rank, shape, dst_strides, dst_offset, element_size,
                         &p->dst_lo, &p->dst_hi))
        return mxd_fail(err, MXD_INVALID,
                        "the destination's bytes cannot be "
                        "addressed with 64 bits");
    p->bytes = count * element_size;
    p->outer_rank = 0;
    memset(&p->block, 0, sizeof p->block);
    if (count == 0) {
        p->blocks = 0;
        return MXD_OK;
    }
    dims d;
    collect(&d, rank, shape, src_strides, dst_strides, &src_offset,
            &dst_offset);
    coalesce(&d);
    p->block.src_offset = fill ? 0 : src_offset;
    p->block.dst_offset = dst_offset;
    shape_blocks(p, &d);
    return MXD_OK;
}

mxd_status mxd_copy_plan_init(mxd_copy_plan *plan_out, int rank,
                              const int64_t *shape, int64_t element_size,
                              int64_t src_offset, const int64_t *src_strides,
                              int64_t dst_offset, const int64_t *dst_strides,
                              mxd_error *err)
{
    return plan(plan_out, false, rank, shape, element_size, src_offset,
                src_strides, dst_offset, dst_strides, err);
}

mxd_status mxd_fill_plan_init(mxd_copy_plan *plan_out, int rank,
                              const int64_t *shape, int64_t element_size,
                              int64_t dst_offset, const int64_t *dst_strides,
                              mxd_error *err)
{
    return plan(plan_out, true, rank, shape, element_size, 0, NULL, dst_offset,
                dst_strides, err);
}

static bool to_bytes(const mxd_layout *v, int64_t *out)
{
    for (int i = 0; i < v->rank; i++)
        if (__builtin_mul_overflow(v->strides[i], v->element_size, &out[i]))
            return false;
    return true;
}

mxd_status mxd_copy_plan_layouts(mxd_copy_plan *plan_out, const mxd_layout *dst,
                                 const mxd_layout *src, mxd_error *err)
{
    int64_t src_strides[MXD_MAX_RANK], dst_strides[MXD_MAX_RANK];
    if (src->rank < 0 || src->rank > MXD_MAX_RANK)
        return mxd_shape_size(src->rank, NULL, 1, NULL, NULL, err);
    bool same =
        dst->rank == src->rank && dst->element_size == src->element_size;
    for (int i = 0; same && i < src->rank; i++)
        same = dst->shape[i] == src->shape[i];
    if (!same)
        return mxd_fail(err, MXD_INVALID,
                        "a copy needs views of the same shape and element "
                        "size");
    if (!to_bytes(src, src_strides) || !to_bytes(dst, dst_strides))
        return mxd_fail(err, MXD_INVALID,
                        "the views' strides in bytes do not fit in 64 bits");
    return plan(plan_out, false, src->rank, src->shape, src->element_size,
                src->offset, src_strides, dst->offset, dst_strides, err);
}

/* ---- Iteration ---------------------------------------------------------- */

void mxd_copy_iter_init(mxd_copy_iter *it, const mxd_copy_plan *plan_in)
{
    it->plan = plan_in;
    it->left = plan_in->blocks;
    it->src_offset = plan_in->block.src_offset;
    it->dst_offset = plan_in->block.dst_offset;
    for (int i = 0; i < plan_in->outer_rank; i++)
        it->index[i] = 0;
}

/* Moves to the next block, row-major; an index that wraps goes back by its
 * whole span, so offsets never leave the views' extents. */
static void advance(mxd_copy_iter *it)
{
    const mxd_copy_plan *p = it->plan;
    for (int i = p->outer_rank - 1; i >= 0; i--) {
        if (++it->index[i] < p->outer_shape[i]) {
            it->src_offset += p->outer_src[i];
            it->dst_offset += p->outer_dst[i];
            return;
        }
        it->index[i] = 0;
        it->src_offset -= (p->outer_shape[i] - 1) * p->outer_src[i];
        it->dst_offset -= (p->outer_shape[i] - 1) * p->outer_dst[i];
    }
}

bool mxd_copy_iter_next(mxd_copy_iter *it, mxd_copy_block *block)
{
    if (it->left == 0)
        return false;
    *block = it->plan->block;
    block->src_offset = it->src_offset;
    block->dst_offset = it->dst_offset;
    if (--it->left > 0)
        advance(it);
    return true;
}
