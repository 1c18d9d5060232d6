/* Hazard records and completions (hazard.h): what every operation on
 * memory waits for, and the completions it leaves behind. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"

/* ---- Completions -------------------------------------------------------- */

mxd_completion *mxd_completion_alloc(mxd_queue *q, const char *what,
                                     uint64_t bytes)
{
    mxd_completion *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    atomic_init(&c->refs, 1);
    c->ops = q->ops;
    c->queue = q;
    mxd_queue_retain(q);
    c->what = what;
    c->bytes = bytes;
    atomic_init(&c->poison, NULL);
    return c;
}

void mxd_completion_retain(mxd_completion *c)
{
    atomic_fetch_add_explicit(&c->refs, 1, memory_order_relaxed);
}

void mxd_completion_release(mxd_completion *c)
{
    if (!c || atomic_fetch_sub_explicit(&c->refs, 1, memory_order_acq_rel) != 1)
        return;
    if (!mxd_stale(c->queue->epoch)) /* a stale point's state is leaked */
        c->ops->completion_fini(c);
    mxd_queue_release(c->queue);
    free(atomic_load(&c->poison));
    free(c);
}

mxd_queue *mxd_completion_queue(const mxd_completion *c)
{
    return c->queue;
}

const char *mxd_completion_poison_message(const mxd_completion *c)
{
    return atomic_load_explicit(&((mxd_completion *)c)->poison,
                                memory_order_acquire);
}

/* Sets the poison unless one is set already; false when out of memory. */
static bool set_poison(mxd_completion *c, const char *message)
{
    char *copy = strdup(message);
    if (!copy)
        return false;
    char *none = NULL;
    if (!atomic_compare_exchange_strong(&c->poison, &none, copy))
        free(copy); /* the first failure is the one to report */
    return true;
}

mxd_status mxd_completion_poison(mxd_completion *c, const char *message,
                                 mxd_error *err)
{
    if (!set_poison(c, message))
        return mxd_fail(err, MXD_NO_MEMORY, "out of memory");
    return MXD_OK;
}

static mxd_status check_queue(mxd_queue *q, mxd_error *err)
{
    if (mxd_queue_is_stale(q))
        return mxd_fail_stale(err, "DeviceQueue");
    return MXD_OK;
}

mxd_status mxd_completion_record_on(mxd_queue *q, mxd_completion **out,
                                    mxd_error *err)
{
    mxd_status st = check_queue(q, err);
    if (st != MXD_OK)
        return st;
    mxd_completion *c = mxd_completion_alloc(q, NULL, 0);
    if (!c)
        return mxd_fail(err, MXD_NO_MEMORY, "out of memory");
    st = q->ops->completion_record(q, c, err);
    if (st != MXD_OK) {
        /* No point was set: nothing for the backend to release. */
        mxd_queue_release(c->queue);
        free(c);
        return st;
    }
    *out = c;
    return MXD_OK;
}

mxd_status mxd_completion_poisoned(mxd_queue *q, const char *message,
                                   mxd_completion **out, mxd_error *err)
{
    mxd_status st = check_queue(q, err);
    if (st != MXD_OK)
        return st;
    /* Ready at once: its point is the start of q's timeline (ticket 0, or
     * no mark), which the backends take as complete. */
    mxd_completion *c = mxd_completion_alloc(q, NULL, 0);
    if (!c || !set_poison(c, message)) {
        if (c) {
            mxd_queue_release(c->queue);
            free(c);
        }
        return mxd_fail(err, MXD_NO_MEMORY, "out of memory");
    }
    *out = c;
    return MXD_OK;
}

/* A driver error seen while waiting for an operation's completion means the
 * operation failed: the completion is poisoned with both (SPEC §12.6). */
static mxd_status poisoned_by(mxd_completion *c, const mxd_error *why,
                              mxd_error *err)
{
    char message[sizeof err->message];
    snprintf(message, sizeof message,
             "%s of %llu bytes on %s queue failed: %.400s", c->what,
             (unsigned long long)c->bytes, c->ops->api, why->message);
    set_poison(c, message);
    return mxd_fail(err, MXD_HAZARD, "%s", message);
}

void mxd_completion_failed(mxd_completion *c, const mxd_error *why)
{
    poisoned_by(c, why, NULL);
}

static mxd_status hazard_of(const mxd_completion *c, mxd_error *err)
{
    return mxd_fail(err, MXD_HAZARD, "%s", mxd_completion_poison_message(c));
}

bool mxd_completion_known_done(mxd_completion *c)
{
    return mxd_completion_poison_message(c) != NULL ||
           c->ops->completion_known_done(c);
}

mxd_status mxd_completion_query(mxd_completion *c, bool *ready, mxd_error *err)
{
    *ready = true;
    if (mxd_stale(c->queue->epoch))
        return mxd_fail_stale(err, "HostHazardCompletion");
    if (mxd_completion_poison_message(c))
        return MXD_OK;
    mxd_error why;
    mxd_status st = c->ops->completion_query(c, &why);
    if (st == MXD_TIMEOUT) {
        *ready = false;
        return MXD_OK;
    }
    if (st == MXD_DRIVER && c->what) {
        poisoned_by(c, &why, NULL);
        return MXD_OK;
    }
    if (st != MXD_OK && err)
        *err = why;
    return st;
}

static mxd_status wait_for(mxd_completion *c, bool host_access,
                           const mxd_wait *wait, mxd_error *err)
{
    if (mxd_stale(c->queue->epoch))
        return mxd_fail_stale(err, "HostHazardCompletion");
    if (mxd_completion_poison_message(c))
        return hazard_of(c, err);
    if (host_access && c->ops->completion_behind_caller(c))
        return MXD_OK;
    mxd_error why;
    mxd_status st = c->ops->completion_wait(c, wait, &why);
    if (st == MXD_DRIVER && c->what)
        return poisoned_by(c, &why, err);
    if (st != MXD_OK) {
        if (err)
            *err = why;
        return st;
    }
    /* Poisoned by the user while we waited. */
    return mxd_completion_poison_message(c) ? hazard_of(c, err) : MXD_OK;
}

mxd_status mxd_completion_wait(mxd_completion *c, const mxd_wait *wait,
                               mxd_error *err)
{
    return wait_for(c, false, wait, err);
}

mxd_status mxd_completion_wait_host(mxd_completion *c, const mxd_wait *wait,
                                    mxd_error *err)
{
    return wait_for(c, true, wait, err);
}

mxd_status mxd_queue_wait_completion(mxd_queue *q, mxd_completion *c,
                                     mxd_error *err)
{
    if (c->queue == q || mxd_completion_known_done(c))
        return MXD_OK;
    if (mxd_stale(c->queue->epoch))
        return mxd_fail_stale(err, "HostHazardCompletion");
    return q->ops->queue_wait_completion(q, c, err);
}

/* ---- Records ------------------------------------------------------------ */

/* A record's lists keep at most one completion per queue, the latest: a
 * queue is in order, so it covers the queue's earlier ones. */

/* A reference an entry takes to c, or one it drops: counted in `batch`
 * (a launch's notes, mxd_hazard_note_launch) or moved at once (NULL). */
static void take_ref(mxd_ref_batch *batch, mxd_completion *c)
{
    if (batch && c == batch->taken)
        batch->owed++;
    else
        mxd_completion_retain(c);
}

static void drop_ref(mxd_ref_batch *batch, mxd_completion *c)
{
    if (batch && c == batch->prev)
        batch->dropped++;
    else
        mxd_completion_release(c);
}

static void entries_clear_batch(mxd_entries *e, mxd_ref_batch *batch)
{
    for (int i = 0; i < e->n; i++)
        drop_ref(batch, e->at[i]);
    e->n = 0;
}

static void entries_clear(mxd_entries *e)
{
    entries_clear_batch(e, NULL);
}

/* Keeps the entries `keep` says yes to, releasing the others. */
static void entries_filter(mxd_entries *e,
                           bool (*keep)(mxd_completion *c, const void *arg),
                           const void *arg)
{
    int kept = 0;
    for (int i = 0; i < e->n; i++) {
        if (keep(e->at[i], arg))
            e->at[kept++] = e->at[i];
        else
            mxd_completion_release(e->at[i]);
    }
    e->n = kept;
}

/* Adds c (retained), replacing an older entry of its queue.  Out of
 * memory, the host waits for the oldest entry instead of keeping it: an
 * entry is never lost. */
static void entries_add_batch(mxd_entries *e, mxd_completion *c,
                              mxd_ref_batch *batch)
{
    for (int i = 0; i < e->n; i++) {
        mxd_completion *old = e->at[i];
        if (old->queue != c->queue)
            continue;
        if (old->seq <= c->seq) {
            take_ref(batch, c);
            e->at[i] = c;
            drop_ref(batch, old);
        }
        return;
    }
    if (e->n == e->cap) {
        int cap = e->cap ? e->cap * 2 : 2;
        mxd_completion **grown = realloc(e->at, (size_t)cap * sizeof c);
        if (grown) {
            e->at = grown;
            e->cap = cap;
        } else {
            mxd_error ignored;
            mxd_completion_wait(e->at[0], NULL, &ignored);
            drop_ref(batch, e->at[0]);
            e->at[0] = e->at[--e->n];
        }
    }
    take_ref(batch, c);
    e->at[e->n++] = c;
}

static void entries_add(mxd_entries *e, mxd_completion *c)
{
    entries_add_batch(e, c, NULL);
}

static void entries_fini(mxd_entries *e)
{
    entries_clear(e);
    free(e->at);
    e->at = NULL;
    e->cap = 0;
}

/* Publishes whether the lists hold anything, for the lock-free looks of
 * host access (mxd_host_access_idle, mxd_host_read_wait). */
static void publish(mxd_record *r)
{
    atomic_store_explicit(&r->has_write, r->writes.n > 0, memory_order_release);
    atomic_store_explicit(&r->has_reads, r->reads.n > 0, memory_order_release);
}

/* Most records never hold an entry: dropping one costs a compare (a
 * default mutex needs no destroy). */
void mxd_record_fini(mxd_record *r)
{
    if (r->writes.cap == 0 && r->reads.cap == 0)
        return;
    entries_fini(&r->writes);
    entries_fini(&r->reads);
    publish(r);
}

static bool pending_or_poisoned(mxd_completion *c, const void *unused)
{
    (void)unused;
    return mxd_completion_poison_message(c) || !mxd_completion_known_done(c);
}

/* A read that failed did not damage the memory it read. */
static bool pending(mxd_completion *c, const void *unused)
{
    (void)unused;
    return !mxd_completion_known_done(c);
}

/* Drops the entries known complete (no driver call). */
static void compact(mxd_record *r)
{
    entries_filter(&r->writes, pending_or_poisoned, NULL);
    entries_filter(&r->reads, pending, NULL);
    publish(r);
}

static void lock_one(mxd_memory *m)
{
    pthread_mutex_lock(&m->record.mu);
}

void mxd_hazard_lock(mxd_memory *a, mxd_memory *b)
{
    if (a && b && a != b) {
        /* Address order: two operations on the same pair never deadlock. */
        lock_one(a < b ? a : b);
        lock_one(a < b ? b : a);
    } else if (a || b) {
        lock_one(a ? a : b);
    }
}

void mxd_hazard_unlock(mxd_memory *a, mxd_memory *b)
{
    if (a)
        pthread_mutex_unlock(&a->record.mu);
    if (b && b != a)
        pthread_mutex_unlock(&b->record.mu);
}

/* The point an untracked view's operations are ordered after: its queue so
 * far (SPEC §12.6: untracked copies are ordered by queue order only). */
static mxd_status queue_point(const mxd_view *v, mxd_completion **out,
                              mxd_error *err)
{
    *out = NULL;
    if (mxd_queue_is_idle(v->queue))
        return MXD_OK;
    return mxd_completion_record_on(v->queue, out, err);
}

static mxd_status wait_entries(mxd_queue *q, mxd_entries *e, mxd_error *err)
{
    mxd_status st = MXD_OK;
    for (int i = 0; st == MXD_OK && i < e->n; i++)
        if (e->at[i]->queue != q) /* the common case: in order already */
            st = mxd_queue_wait_completion(q, e->at[i], err);
    return st;
}

mxd_status mxd_hazard_order(mxd_queue *q, const mxd_view *v, bool write,
                            mxd_error *err)
{
    mxd_memory *m = v->memory;
    if (!m->tracked) {
        if (write || v->queue == q)
            return MXD_OK;
        mxd_completion *point;
        mxd_status st = queue_point(v, &point, err);
        if (st == MXD_OK && point)
            st = mxd_queue_wait_completion(q, point, err);
        mxd_completion_release(point);
        return st;
    }
    mxd_record *r = &m->record;
    compact(r);
    mxd_status st = wait_entries(q, &r->writes, err);
    return st == MXD_OK && write ? wait_entries(q, &r->reads, err) : st;
}

mxd_status mxd_hazard_order_quick(mxd_queue *q, const mxd_view *v, bool write,
                                  mxd_error *err)
{
    mxd_record *r = &v->memory->record;
    if (!v->memory->tracked)
        return mxd_hazard_order(q, v, write, err);
    mxd_status st = wait_entries(q, &r->writes, err);
    return st == MXD_OK && write ? wait_entries(q, &r->reads, err) : st;
}

/* Whether the host must still wait for c: not complete (asking the
 * driver), and not behind the host function the calling thread runs (which
 * acts at its place in the queue, before c). */
static bool host_must_wait(mxd_completion *c)
{
    bool ready;
    mxd_error ignored;
    if (mxd_completion_query(c, &ready, &ignored) == MXD_OK && ready)
        return false;
    return !c->ops->completion_behind_caller(c);
}

/* The first entry of `e` the host must wait for or see poisoned, or NULL. */
static mxd_completion *first_of(mxd_entries *e, bool poison_counts)
{
    for (int i = 0; i < e->n; i++) {
        mxd_completion *c = e->at[i];
        bool wait = host_must_wait(c); /* a query may poison it */
        if (wait || (poison_counts && mxd_completion_poison_message(c)))
            return c;
    }
    return NULL;
}

/* The first entry a host access must wait for (a poisoned write included:
 * the access must see it), dropping the complete ones; NULL when there is
 * none.  *is_read tells a read from a write. */
static mxd_completion *first_pending(mxd_record *r, bool write, bool *is_read)
{
    compact(r);
    mxd_completion *c = first_of(&r->writes, true);
    *is_read = false;
    if (!c && write && (c = first_of(&r->reads, false)))
        *is_read = true;
    if (!c) /* what the queries found complete goes now */
        compact(r);
    return c;
}

bool mxd_hazard_settled(const mxd_view *v, bool write)
{
    bool is_read;
    return !v->memory->tracked ||
           first_pending(&v->memory->record, write, &is_read) == NULL;
}

/* What the calling thread must wait for before it touches v itself
 * (retained), or NULL; *is_read when it is a read of v (whose failure is
 * not v's).  MXD_HAZARD for a poisoned write. */
static mxd_status host_pending(const mxd_view *v, bool write,
                               mxd_completion **out, bool *is_read,
                               mxd_error *err)
{
    *out = NULL;
    *is_read = false;
    if (!v)
        return MXD_OK;
    if (!v->memory->tracked)
        return write ? MXD_OK : queue_point(v, out, err);
    mxd_completion *c = first_pending(&v->memory->record, write, is_read);
    if (c && !*is_read && mxd_completion_poison_message(c))
        return hazard_of(c, err);
    if (c)
        mxd_completion_retain(c);
    *out = c;
    return MXD_OK;
}

mxd_status mxd_hazard_lock_settled(const mxd_view *read, const mxd_view *write,
                                   mxd_memory *other, const mxd_wait *wait,
                                   mxd_error *err)
{
    mxd_memory *a = read ? read->memory : other;
    mxd_memory *b = write ? write->memory : read ? other : NULL;
    for (;;) {
        mxd_hazard_lock(a, b);
        mxd_completion *pending;
        bool is_read;
        mxd_status st = host_pending(read, false, &pending, &is_read, err);
        if (st == MXD_OK && !pending)
            st = host_pending(write, true, &pending, &is_read, err);
        if (st == MXD_OK && !pending)
            return MXD_OK; /* locked, nothing pending */
        mxd_hazard_unlock(a, b);
        if (st != MXD_OK)
            return st;
        st = mxd_completion_wait_host(pending, wait, err);
        mxd_completion_release(pending);
        /* A read that failed left the memory it read as it was. */
        if (st != MXD_OK && !(st == MXD_HAZARD && is_read))
            return st;
    }
}

void mxd_hazard_note(mxd_memory *read, mxd_memory *write, mxd_completion *c)
{
    if (write) {
        /* The operation waited for everything the record held. */
        mxd_record *r = &write->record;
        entries_clear(&r->reads);
        entries_clear(&r->writes);
        if (c)
            entries_add(&r->writes, c);
        publish(r);
    }
    if (read && read != write && c) {
        entries_add(&read->record.reads, c);
        publish(&read->record);
    }
}

void mxd_hazard_note_launch(mxd_memory *m, bool write, mxd_ref_batch *batch)
{
    mxd_record *r = &m->record;
    if (write) { /* the launch waited for everything the record held */
        entries_clear_batch(&r->reads, batch);
        entries_clear_batch(&r->writes, batch);
        entries_add_batch(&r->writes, batch->taken, batch);
    } else {
        entries_add_batch(&r->reads, batch->taken, batch);
    }
    publish(r);
}

void mxd_hazard_batch_settle(mxd_ref_batch *batch)
{
    atomic_fetch_add_explicit(&batch->taken->refs, batch->owed,
                              memory_order_relaxed);
    if (batch->prev && batch->dropped)
        atomic_fetch_sub_explicit(&batch->prev->refs, batch->dropped,
                                  memory_order_acq_rel);
    batch->owed = batch->dropped = 0;
}

void mxd_hazard_visit(mxd_memory *m,
                      void (*visit)(mxd_completion *c, void *ctx), void *ctx)
{
    mxd_record *r = &m->record;
    for (int i = 0; i < r->writes.n; i++)
        visit(r->writes.at[i], ctx);
    for (int i = 0; i < r->reads.n; i++)
        visit(r->reads.at[i], ctx);
}

/* Entries a write stamp of c supersedes: complete ones, and those of c's
 * queue up to c's point.  An entry of c's queue noted after c was recorded
 * (an operation enqueued between record_on and the stamp) is after c, so
 * it stays. */
static bool not_superseded(mxd_completion *e, const void *arg)
{
    const mxd_completion *c = arg;
    if (e->queue == c->queue && e->seq <= c->seq)
        return false;
    return !mxd_completion_known_done(e);
}

void mxd_memory_stamp(mxd_memory *m, mxd_completion *c, bool write)
{
    if (!m->tracked)
        return;
    mxd_record *r = &m->record;
    mxd_hazard_lock(m, NULL);
    /* A write stamp is the last write and clears the reads (MAX's rule)
     * as far as they are before it: pending work of other queues, which a
     * point of c's queue cannot be after, stays to be waited for. */
    if (write) {
        entries_filter(&r->writes, not_superseded, c);
        entries_filter(&r->reads, not_superseded, c);
    }
    entries_add(write ? &r->writes : &r->reads, c);
    publish(r);
    mxd_hazard_unlock(m, NULL);
}

mxd_status mxd_hazard_pending_writes(mxd_memory *m, mxd_completion **out,
                                     int cap, int *count, mxd_error *err)
{
    mxd_record *r = &m->record;
    mxd_hazard_lock(m, NULL);
    compact(r);
    mxd_status st = MXD_OK;
    *count = 0;
    for (int i = 0; st == MXD_OK && i < r->writes.n; i++) {
        mxd_completion *c = r->writes.at[i];
        if (mxd_completion_poison_message(c))
            st = hazard_of(c, err);
        else if (*count < cap)
            mxd_completion_retain(out[(*count)++] = c);
    }
    mxd_hazard_unlock(m, NULL);
    if (st != MXD_OK) {
        for (int i = 0; i < *count; i++)
            mxd_completion_release(out[i]);
        *count = 0;
    }
    return st;
}
