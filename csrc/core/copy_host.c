/* Runs copy and fill plans on host memory (layout.h): the CPU backend's
 * copies and fills, and the host side of staged GPU copies. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "layout.h"

/* Whether the bytes the plan reads and writes overlap, given the bases. */
static bool overlaps(const mxd_copy_plan *p, const char *dst, const char *src)
{
    uintptr_t s = (uintptr_t)src, d = (uintptr_t)dst;
    return s + (uintptr_t)p->src_lo < d + (uintptr_t)p->dst_hi &&
           d + (uintptr_t)p->dst_lo < s + (uintptr_t)p->src_hi;
}

static void copy_rows(const mxd_copy_block *b, char *dst, const char *src)
{
    for (int64_t r = 0; r < b->height; r++)
        memcpy(dst + b->dst_offset + r * b->dst_pitch,
               src + b->src_offset + r * b->src_pitch, (size_t)b->width);
}

/* Copies the source's rows, in plan order, to or from a packed buffer. */
static void pack(const mxd_copy_plan *p, char *packed, const char *src,
                 char *dst)
{
    mxd_copy_iter it;
    mxd_copy_block b;
    mxd_copy_iter_init(&it, p);
    while (mxd_copy_iter_next(&it, &b))
        for (int64_t r = 0; r < b.height; r++, packed += b.width) {
            if (src)
                memcpy(packed, src + b.src_offset + r * b.src_pitch,
                       (size_t)b.width);
            else
                memcpy(dst + b.dst_offset + r * b.dst_pitch, packed,
                       (size_t)b.width);
        }
}

mxd_status mxd_copy_host(const mxd_copy_plan *plan, void *dst_base,
                         const void *src_base, mxd_error *err)
{
    char *dst = dst_base;
    const char *src = src_base;
    const mxd_copy_block *first = &plan->block;
    if (plan->fill)
        return mxd_fail(err, MXD_INVALID,
                        "mxd_copy_host runs copy plans, not fill plans");
    if (plan->blocks == 0)
        return MXD_OK;
    if (plan->blocks == 1 && first->height == 1) {
        memmove(dst + first->dst_offset, src + first->src_offset,
                (size_t)first->width);
        return MXD_OK;
    }
    if (overlaps(plan, dst, src)) {
        /* As NumPy: as if through a temporary. */
        char *packed = malloc((size_t)plan->bytes);
        if (!packed)
            return mxd_fail(err, MXD_NO_MEMORY,
                            "cannot allocate %lld bytes to copy between "
                            "overlapping views",
                            (long long)plan->bytes);
        pack(plan, packed, src, NULL);
        pack(plan, packed, NULL, dst);
        free(packed);
        return MXD_OK;
    }
    mxd_copy_iter it;
    mxd_copy_block b;
    mxd_copy_iter_init(&it, plan);
    while (mxd_copy_iter_next(&it, &b))
        copy_rows(&b, dst, src);
    return MXD_OK;
}

/* Fills `width` bytes with the pattern, doubling what is written so far. */
static void fill_run(char *at, int64_t width, const char *pattern, int64_t size)
{
    if (size == 1) {
        memset(at, pattern[0], (size_t)width);
        return;
    }
    memcpy(at, pattern, (size_t)size);
    for (int64_t done = size; done < width;) {
        int64_t n = width - done < done ? width - done : done;
        memcpy(at + done, at, (size_t)n);
        done += n;
    }
}

void mxd_fill_host(const mxd_copy_plan *plan, void *dst_base,
                   const void *pattern)
{
    char *dst = dst_base;
    mxd_copy_iter it;
    mxd_copy_block b;
    mxd_copy_iter_init(&it, plan);
    while (mxd_copy_iter_next(&it, &b))
        for (int64_t r = 0; r < b.height; r++)
            fill_run(dst + b.dst_offset + r * b.dst_pitch, b.width, pattern,
                     plan->element_size);
}
