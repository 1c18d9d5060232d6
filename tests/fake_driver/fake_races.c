/* Unordered accesses (fake_engine.h, "fake_races.c"; fake_engine.h
 * describes the locking).
 *
 * Every pending memory item is on one list, in enqueue order.  An item
 * that starts compares itself with the items of other streams enqueued
 * before it that have not completed: if one touches its bytes and either
 * writes, nothing ordered the two (a wait orders work after work enqueued
 * before the wait, and the earlier item was enqueued before the later one
 * existed), so a GPU could run them either way round.  The fake reports it
 * even when its threads happened to run them in a good order, which is
 * what makes such a bug show on every run rather than on unlucky ones. */
#include <inttypes.h>
#include <stddef.h>

#include "fake_engine.h"

static fake_access *fake_pending_head, *fake_pending_tail;
static uint64_t fake_seq;

/* [lo, hi) of a span's bytes, or false for pageable memory (the host's:
 * what it does with it is not the fake's to see). */
static bool fake_span_range(const fake_transfer *x, const fake_span *sp,
                            bool write, fake_range *out)
{
    size_t extent = (x->height - 1) * sp->pitch + x->width;
    uintptr_t lo = sp->addr;
    if (sp->kind == FAKE_SPAN_PAGEABLE)
        return false;
    if (sp->kind == FAKE_SPAN_PINNED) {
        const fake_alloc *a = sp->pinned;
        uintptr_t host = (uintptr_t)a->host, dev = (uintptr_t)a->dev;
        lo = lo - host < a->size ? lo : host + (lo - dev);
    }
    *out = (fake_range){lo, lo + extent, write};
    return true;
}

int fake_transfer_ranges(const fake_transfer *x, fake_range out[2])
{
    int n = fake_span_range(x, &x->dst, true, &out[0]);
    if (x->fill_size == 0)
        n += fake_span_range(x, &x->src, false, &out[n]);
    return n;
}

static int fake_item_ranges(const fake_item *it, fake_range out[2])
{
    switch (it->type) {
    case FAKE_ITEM_TRANSFER: return fake_transfer_ranges(&it->u.xfer, out);
    case FAKE_ITEM_ALLOC: /* the memory comes into being: a write */
    case FAKE_ITEM_FREE:  /* and goes: a write too */
        out[0] = (fake_range){it->u.dmem->base,
                              it->u.dmem->base + it->u.dmem->size, true};
        return 1;
    default: return 0;
    }
}

void fake_access_enter(fake_stream *s, fake_item *it)
{
    fake_access *a = &it->access;
    a->ranges = fake_item_ranges(it, a->range);
    if (a->ranges == 0)
        return;
    a->stream = s;
    a->seq = ++fake_seq;
    a->entry = it->entry;
    a->prev = fake_pending_tail;
    a->next = NULL;
    if (fake_pending_tail != NULL)
        fake_pending_tail->next = a;
    else
        fake_pending_head = a;
    fake_pending_tail = a;
}

void fake_access_leave(fake_item *it)
{
    fake_access *a = &it->access;
    if (a->ranges == 0)
        return;
    if (a->prev != NULL)
        a->prev->next = a->next;
    else
        fake_pending_head = a->next;
    if (a->next != NULL)
        a->next->prev = a->prev;
    else
        fake_pending_tail = a->prev;
    a->ranges = 0;
}

static fake_item *fake_item_of(const fake_access *a)
{
    return (fake_item *)((char *)a - offsetof(fake_item, access));
}

static bool fake_host_gated(const fake_stream *s, const fake_item *upto,
                            int depth);

/* The record item of a pending mark on its stream, or NULL. */
static const fake_item *fake_record_of(const fake_mark *m)
{
    const fake_stream *s = m->stream;
    if (s->running != NULL && s->running->type == FAKE_ITEM_RECORD &&
        s->running->u.mark == m)
        return s->running;
    for (const fake_item *it = s->head; it != NULL; it = it->next)
        if (it->type == FAKE_ITEM_RECORD && it->u.mark == m)
            return it;
    return NULL;
}

/* Whether pending item `it` may wait for something the host does later,
 * and so be ordered after any work of any stream by a host that waits for
 * that work first (our backends' host steps do, behind a wait on a value):
 * an item ahead of it on its stream is a host function or callback that
 * has not returned, a wait for a value the memory does not hold yet, or a
 * wait for work of another stream gated so (followed `depth` deep). */
static bool fake_item_gated(const fake_item *it, int depth)
{
    switch (it->type) {
    case FAKE_ITEM_HOST_FN:
    case FAKE_ITEM_CALLBACK: return true;
    case FAKE_ITEM_WAIT_VALUE: return !fake_wait_value_met(it);
    case FAKE_ITEM_WAIT_MARK: {
        const fake_mark *m = it->u.mark;
        if (m->done)
            return false;
        const fake_item *record = depth > 0 ? fake_record_of(m) : NULL;
        return depth == 0 || (record != NULL &&
                              fake_host_gated(m->stream, record, depth - 1));
    }
    case FAKE_ITEM_WAIT_STREAM:
        return depth == 0 ||
               fake_host_gated(it->u.behind.stream, NULL, depth - 1);
    default: return false;
    }
}

/* Whether an item of s ahead of `upto` (NULL: the whole queue) is gated
 * so, the running item included. */
static bool fake_host_gated(const fake_stream *s, const fake_item *upto,
                            int depth)
{
    if (s->running != NULL && s->running != upto &&
        fake_item_gated(s->running, depth))
        return true;
    for (const fake_item *it = s->head; it != NULL && it != upto; it = it->next)
        if (fake_item_gated(it, depth))
            return true;
    return false;
}

static bool fake_conflict(const fake_range *a, const fake_range *b)
{
    return (a->write || b->write) && a->lo < b->hi && b->lo < a->hi;
}

static const char *fake_verb(const fake_range *r)
{
    return r->write ? "writes" : "reads";
}

/* The first of `ranges` that conflicts with one of p's, and that one of
 * p's (*theirs), or -1. */
static int fake_conflicting(const fake_range *ranges, int n,
                            const fake_access *p, int *theirs)
{
    for (int i = 0; i < n; i++)
        for (int j = 0; j < p->ranges; j++)
            if (fake_conflict(&ranges[i], &p->range[j])) {
                *theirs = j;
                return i;
            }
    return -1;
}

/* Reports the first pending item of another stream enqueued before `seq`
 * that conflicts with `ranges` and that no host gate may order after
 * them. */
static void fake_check(const fake_stream *s, uint64_t seq, const char *entry,
                       const fake_range *ranges, int n)
{
    for (const fake_access *p = fake_pending_head; p != NULL && p->seq < seq;
         p = p->next) {
        int j, i = p->stream == s ? -1 : fake_conflicting(ranges, n, p, &j);
        if (i < 0 || fake_host_gated(p->stream, fake_item_of(p), 4))
            continue; /* its own stream's, no conflict, or maybe ordered */
        fake_violation("%s %s 0x%" PRIxPTR " + %zu while %s, enqueued "
                       "earlier on another stream, %s it and has not "
                       "completed: nothing orders the two, so a GPU may "
                       "run them in either order",
                       entry, fake_verb(&ranges[i]), ranges[i].lo,
                       (size_t)(ranges[i].hi - ranges[i].lo), p->entry,
                       fake_verb(&p->range[j]));
        return;
    }
}

void fake_access_check(const fake_item *it)
{
    const fake_access *a = &it->access;
    if (a->ranges > 0)
        fake_check(a->stream, a->seq, a->entry, a->range, a->ranges);
}

void fake_access_check_now(fake_stream *s, const char *entry,
                           const fake_transfer *x)
{
    fake_range r[2];
    int n = fake_transfer_ranges(x, r);
    if (n > 0)
        fake_check(s, UINT64_MAX, entry, r, n);
}

void fake_access_check_free(const char *entry, uintptr_t lo, uintptr_t hi)
{
    fake_range r = {lo, hi, true};
    fake_check(NULL, UINT64_MAX, entry, &r, 1);
}
