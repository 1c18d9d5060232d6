/* Copies and fills (fake_engine.h describes the locking).
 *
 * The call classifies each side (device memory, pinned host memory,
 * pageable host memory) and rejects what the API rejects outright.  The
 * work is a stream item: when it runs, every device byte it touches must
 * be in an allocation live at that moment on the right device, and every
 * pinned range inside its allocation; otherwise it records a violation and
 * fails the stream with ILLEGAL_ADDRESS, as a GPU faults.  Pageable host
 * memory cannot be read by a DMA engine later, so the real drivers stage
 * it; the fake models the strictest case: the call waits until the stream
 * has finished its earlier work, copies, and returns.  A copy between host
 * memory (pinned or not) is synchronous the same way, as CUDA documents. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fake_engine.h"

static void fake_span_release(fake_span *sp)
{
    if (sp->pinned != NULL)
        fake_alloc_unref(sp->pinned);
    sp->pinned = NULL;
}

void fake_transfer_release(fake_transfer *x)
{
    fake_span_release(&x->dst);
    fake_span_release(&x->src);
}

/* Classifies one side.  INVALID_VALUE where the role does not fit: device
 * memory given as host memory, or host memory (the host view of pinned
 * memory included: the fake has no unified addressing) as device memory. */
static unsigned fake_classify(const fake_side *side, fake_span *sp)
{
    bool device_view = false;
    *sp = (fake_span){
        .addr = side->addr, .pitch = side->pitch, .device = side->device};
    if (side->addr == 0)
        return FAKE_E_INVALID_VALUE;
    bool on_device = fake_device_of(side->addr) >= 0;
    fake_alloc *a =
        on_device ? NULL : fake_find_pinned(side->addr, &device_view);
    enum fake_role role = side->role;
    if (role == FAKE_ROLE_ANY)
        role = on_device ? FAKE_ROLE_DEVICE : FAKE_ROLE_HOST;
    if (role == FAKE_ROLE_DEVICE ? !on_device && !device_view : on_device)
        return FAKE_E_INVALID_VALUE;
    sp->kind = on_device ? FAKE_SPAN_DEVICE
               : a       ? FAKE_SPAN_PINNED
                         : FAKE_SPAN_PAGEABLE;
    if (a != NULL) {
        a->refs++;
        sp->pinned = a;
    }
    return FAKE_E_OK;
}

/* The bytes a side spans: rows of `width`, `pitch` apart. */
static size_t fake_extent(const fake_transfer *x, const fake_span *sp)
{
    return (x->height - 1) * sp->pitch + x->width;
}

/* Rejects pitches below the width and ranges that wrap the address space. */
static bool fake_valid_extent(const fake_transfer *x, const fake_span *sp)
{
    size_t rows;
    if (sp->pitch < x->width ||
        __builtin_mul_overflow(x->height - 1, sp->pitch, &rows) ||
        rows + x->width < rows)
        return false;
    return sp->addr + rows + x->width >= sp->addr;
}

/* Where the bytes of a pinned span are now, or NULL after recording why
 * there are none. */
static char *fake_locate_pinned(const char *entry, const char *verb,
                                const fake_span *sp, size_t extent)
{
    const fake_alloc *a = sp->pinned;
    uintptr_t host = (uintptr_t)a->host;
    size_t offset = sp->addr - host < a->size ? sp->addr - host
                                              : sp->addr - (uintptr_t)a->dev;
    if (a->freed) {
        fake_violation("%s %s 0x%" PRIxPTR " + %zu: pinned memory freed "
                       "before the copy ran",
                       entry, verb, sp->addr, extent);
        return NULL;
    }
    if (extent > a->size - offset) {
        fake_violation("%s %s 0x%" PRIxPTR " + %zu beyond the end of its "
                       "pinned allocation (0x%" PRIxPTR " + %zu)",
                       entry, verb, sp->addr, extent, sp->addr - offset,
                       a->size);
        return NULL;
    }
    return a->host + offset;
}

/* Where the bytes of a device span are now (taking a reference on their
 * allocation, *held), or NULL after recording why there are none.  A peer
 * copy names each side's device; other copies and fills reach the memory
 * of the stream's device, or of a device it enabled peer access to (and,
 * for memory of that device's pool, was granted access to the pool). */
static char *fake_locate_device(const char *entry, const char *verb,
                                const fake_span *sp, size_t extent,
                                int stream_device, fake_dmem **held)
{
    int want = sp->device >= 0 ? sp->device : stream_device;
    int have = fake_device_of(sp->addr);
    fake_dmem *m = fake_dmem_at(sp->addr);
    if (have >= 0 && have != want && sp->device < 0 &&
        fake_peer_reachable(want, have, m != NULL && m->pooled))
        want = have;
    if (have != want) {
        if (sp->device >= 0)
            fake_violation("%s %s 0x%" PRIxPTR " + %zu: memory of device %d, "
                           "not of device %d as the call says",
                           entry, verb, sp->addr, extent, have, want);
        else
            fake_violation("%s %s 0x%" PRIxPTR " + %zu: memory of device %d "
                           "used on a stream of device %d",
                           entry, verb, sp->addr, extent, have, want);
        return NULL;
    }
    if (m == NULL || m->state != FAKE_DMEM_LIVE ||
        extent > m->size - (sp->addr - m->base)) {
        fake_violation("%s %s 0x%" PRIxPTR " + %zu outside any live "
                       "allocation of device %d",
                       entry, verb, sp->addr, extent, have);
        return NULL;
    }
    m->refs++;
    *held = m;
    return m->backing + (sp->addr - m->base);
}

static char *fake_locate(const char *entry, const char *verb,
                         const fake_transfer *x, const fake_span *sp,
                         int stream_device, fake_dmem **held)
{
    size_t extent = fake_extent(x, sp);
    switch (sp->kind) {
    case FAKE_SPAN_DEVICE:
        return fake_locate_device(entry, verb, sp, extent, stream_device, held);
    case FAKE_SPAN_PINNED: return fake_locate_pinned(entry, verb, sp, extent);
    default: return (char *)sp->addr; /* pageable: the caller's, now */
    }
}

/* The time a modelled copy engine takes for `bytes` (FAKE_GPU_COPY_MIB_PER_S),
 * slept on the stream's thread so that it costs no CPU. */
static void fake_engine_time(size_t bytes)
{
    long long rate = fake_cfg()->copy_bytes_per_s;
    if (rate <= 0 || bytes == 0)
        return;
    long long ns = (long long)((double)bytes * 1e9 / (double)rate);
    struct timespec ts = {.tv_sec = ns / 1000000000LL,
                          .tv_nsec = ns % 1000000000LL};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

static void fake_fill_row(char *row, const fake_transfer *x)
{
    if (x->fill_size == 1) {
        memset(row, (int)x->fill_value, x->width);
        return;
    }
    uint16_t v16 = (uint16_t)x->fill_value;
    const void *value = x->fill_size == 2 ? (const void *)&v16 : &x->fill_value;
    for (size_t i = 0; i < x->width; i += x->fill_size)
        memcpy(row + i, value, x->fill_size);
}

/* Runs a transfer now; fake_lock is released while the bytes move (the
 * references taken keep them in place). */
static void fake_execute(fake_stream *s, const char *entry,
                         const fake_transfer *x)
{
    fake_dmem *held_src = NULL, *held_dst = NULL;
    char *src = NULL, *dst = NULL;
    if (x->fill_size == 0)
        src = fake_locate(entry, "read", x, &x->src, s->device, &held_src);
    if (x->fill_size != 0 || src != NULL)
        dst = fake_locate(entry, "wrote", x, &x->dst, s->device, &held_dst);
    if (dst != NULL) {
        pthread_mutex_unlock(&fake_lock);
        for (size_t r = 0; r < x->height; r++) {
            char *row = dst + r * x->dst.pitch;
            if (x->fill_size != 0)
                fake_fill_row(row, x);
            else
                memmove(row, src + r * x->src.pitch, x->width);
        }
        fake_engine_time(x->width * x->height);
        pthread_mutex_lock(&fake_lock);
    } else {
        s->sticky = FAKE_E_ILLEGAL_ADDRESS;
    }
    if (held_src != NULL)
        fake_dmem_unref(held_src);
    if (held_dst != NULL)
        fake_dmem_unref(held_dst);
}

void fake_transfer_run(fake_stream *s, fake_item *it, unsigned err)
{
    if (err == 0)
        fake_execute(s, it->entry, &it->u.xfer);
}

/* Why a transfer must run in the call, or NULL when it is a stream item:
 * pageable host memory, which no DMA engine can read later, or (a copy
 * with) host memory on both sides, pinned or not: CUDA's "API
 * synchronization behavior" makes a host-to-host copy synchronous. */
static const char *fake_synchronous(const fake_transfer *x)
{
    bool copy = x->fill_size == 0;
    if (x->dst.kind == FAKE_SPAN_PAGEABLE ||
        (copy && x->src.kind == FAKE_SPAN_PAGEABLE))
        return "with pageable host memory";
    if (copy && fake_cfg()->host_copy_sync && x->dst.kind != FAKE_SPAN_DEVICE &&
        x->src.kind != FAKE_SPAN_DEVICE)
        return "between host memory";
    return NULL;
}

/* The synchronous case (fake_synchronous says why): after the stream's
 * earlier work, in the caller's thread, as the stream's next item. */
static unsigned fake_run_now(fake_stream *s, const char *entry, const char *why,
                             const fake_transfer *x)
{
    s->refs++;              /* it may be destroyed meanwhile */
    fake_implicit_waits(s); /* so that draining s covers them */
    if (!fake_drain_stream(s))
        fake_violation("%s %s would deadlock: its stream is still busy "
                       "after %d s; a real driver hangs here",
                       entry, why, fake_cfg()->hang_seconds);
    if (s->pending_fault != 0) {
        s->sticky = s->pending_fault;
        s->pending_fault = 0;
    }
    if (s->sticky == 0) {
        fake_access_check_now(s, entry, x);
        fake_execute(s, entry, x);
    }
    unsigned rc = s->sticky;
    fake_stream_unref(s);
    return rc;
}

/* Enqueues x on the stream, or runs it now if a side is pageable; takes
 * over x's references. */
static unsigned fake_submit(void *stream, fake_transfer *x,
                            const fake_side *dst, const fake_side *src)
{
    fake_stream *s;
    fake_item *it;
    unsigned rc = fake_begin_item(stream, &s, &it);
    if (rc != FAKE_E_OK)
        return rc;
    if (x->width == 0 || x->height == 0) { /* nothing to do, nothing read */
        pthread_mutex_unlock(&fake_lock);
        free(it);
        return FAKE_E_OK;
    }
    rc = fake_classify(dst, &x->dst);
    if (rc == FAKE_E_OK && src != NULL)
        rc = fake_classify(src, &x->src);
    if (rc == FAKE_E_OK && (!fake_valid_extent(x, &x->dst) ||
                            (src != NULL && !fake_valid_extent(x, &x->src))))
        rc = FAKE_E_INVALID_VALUE;
    const char *why = rc == FAKE_E_OK ? fake_synchronous(x) : NULL;
    if (why != NULL && s->capture != NULL) /* would synchronize */
        rc = fake_capture_illegal(s, FAKE_E_CAPTURE_UNSUPPORTED, why);
    else if (why != NULL)
        rc = fake_run_now(s, it->entry, why, x);
    else if (rc == FAKE_E_OK) {
        it->type = FAKE_ITEM_TRANSFER;
        it->u.xfer = *x;
        fake_enqueue(s, it);
        pthread_mutex_unlock(&fake_lock);
        return FAKE_E_OK;
    }
    fake_transfer_release(x);
    pthread_mutex_unlock(&fake_lock);
    free(it);
    return rc;
}

unsigned fake_copy(void *stream, const fake_side *dst, const fake_side *src,
                   size_t width, size_t height)
{
    fake_transfer x = {.width = width, .height = height};
    return fake_submit(stream, &x, dst, src);
}

unsigned fake_copy_2d(void *stream, const fake_side *dst, const fake_side *src,
                      size_t width, size_t height)
{
    size_t max = fake_cfg()->max_pitch;
    if (dst->pitch > max || src->pitch > max)
        return FAKE_E_INVALID_VALUE;
    return fake_copy(stream, dst, src, width, height);
}

/* The pointer must be aligned to the element size (INVALID_VALUE). */
unsigned fake_fill(void *stream, uintptr_t dst, unsigned size, uint32_t value,
                   size_t count)
{
    if (dst % size != 0 || count > SIZE_MAX / size)
        return FAKE_E_INVALID_VALUE;
    fake_side side = {dst, count * size, FAKE_ROLE_DEVICE, -1};
    fake_transfer x = {.width = count * size,
                       .height = 1,
                       .fill_size = size,
                       .fill_value = value};
    return fake_submit(stream, &x, &side, NULL);
}
