/* Graph capture and replay (capture.h, SPEC §16): the recorder, the
 * refusals, and the launch as one operation of the hazard records. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"

/* ---- Messages ----------------------------------------------------------- */

/* "cuda[0]:queue@0x..." as the binding's repr() writes it. */
mxd_status mxd_capture_check_thread(const mxd_queue *q, const char *what,
                                    mxd_error *err)
{
    mxd_capture *c = mxd_capture_of(q);
    if (!c || pthread_equal(c->thread, pthread_self()))
        return MXD_OK;
    return mxd_capture_refuse(q, what,
                              "only the thread that began the capture may "
                              "enqueue work on its queues",
                              err);
}

mxd_status mxd_capture_refuse_access(const mxd_memory *m, mxd_error *err)
{
    (void)m;
    return mxd_fail(err, MXD_UNAVAILABLE,
                    "host access to a buffer that an active capture has "
                    "touched is not allowed: its contents will be what the "
                    "graph's launches write, not what the capture recorded; "
                    "access it after end_capture() (and after a launch, which "
                    "it then waits for); the capture is still intact");
}

static mxd_status out_of_memory(mxd_error *err)
{
    return mxd_fail(err, MXD_NO_MEMORY, "out of memory");
}

/* ---- Growing arrays ------------------------------------------------------ */

/* Makes room for one more element in *array (count used of *cap). */
static bool grow(void **array, int count, int *cap, size_t size)
{
    if (count < *cap)
        return true;
    int more = *cap ? *cap * 2 : 8;
    void *grown = realloc(*array, (size_t)more * size);
    if (!grown)
        return false;
    *array = grown;
    *cap = more;
    return true;
}

/* ---- Graphs ------------------------------------------------------------- */

static mxd_graph *graph_new(mxd_queue *q)
{
    mxd_graph *g = calloc(1, sizeof *g);
    if (!g)
        return NULL;
    atomic_init(&g->refs, 1);
    g->device = q->device;
    g->ops = q->ops;
    g->queue = q;
    mxd_queue_retain(q);
    pthread_mutex_init(&g->mu, NULL);
    return g;
}

static void node_fini(mxd_node *n)
{
    if (n->dst)
        mxd_memory_release(n->dst);
    if (n->src)
        mxd_memory_release(n->src);
    if (n->fn.discard)
        n->fn.discard(n->fn.data);
    if (n->flag)
        mxd_flag_release(n->flag);
    if (n->queue)
        mxd_queue_release(n->queue);
}

void mxd_graph_finish(mxd_graph *g)
{
    for (int i = 0; i < g->node_count; i++)
        node_fini(&g->nodes[i]);
    for (int i = 0; i < g->use_count; i++) {
        mxd_memory_release(g->uses[i].memory);
        mxd_queue_release(g->uses[i].queue);
    }
    for (int i = 0; i < g->keep_count; i++)
        g->keeps[i].discard(g->keeps[i].data);
    mxd_completion_release(g->last);
    mxd_queue_release(g->queue);
    pthread_mutex_destroy(&g->mu);
    free(g->nodes);
    free(g->uses);
    free(g->keeps);
    free(g);
}

void mxd_graph_retain(mxd_graph *g)
{
    atomic_fetch_add_explicit(&g->refs, 1, memory_order_relaxed);
}

void mxd_graph_release(mxd_graph *g)
{
    if (!g || atomic_fetch_sub_explicit(&g->refs, 1, memory_order_acq_rel) != 1)
        return;
    if (mxd_stale(g->queue->epoch))
        return; /* its driver state is the parent's: leak it */
    g->ops->graph_free(g);
}

mxd_device *mxd_graph_device(const mxd_graph *g)
{
    return g->device;
}

mxd_queue *mxd_graph_queue(const mxd_graph *g)
{
    return g->queue;
}

int mxd_graph_node_count(const mxd_graph *g)
{
    return g->node_count;
}

/* ---- Captures ----------------------------------------------------------- */

static void capture_release(mxd_capture *c)
{
    if (atomic_fetch_sub(&c->refs, 1) != 1)
        return;
    for (int i = 0; i < c->lane_count; i++)
        free(c->lanes[i].clock);
    free(c->lanes);
    free(c);
}

bool mxd_queue_is_capturing(const mxd_queue *q)
{
    return mxd_capture_of(q) != NULL;
}

static mxd_lane *lane_of(mxd_capture *c, const mxd_queue *q)
{
    return &c->lanes[q->lane];
}

/* Adds q as a new lane (not yet counted) whose clock is lane `from`'s
 * (-1: `clock`, count entries, or none seen).  Every lane's clock gets an
 * entry for it. */
static mxd_status add_lane(mxd_capture *c, mxd_queue *q, int from,
                           const uint64_t *clock, int count, mxd_error *err)
{
    int cap = c->lane_cap;
    if (!grow((void **)&c->lanes, c->lane_count, &c->lane_cap,
              sizeof *c->lanes))
        return out_of_memory(err);
    if (c->lane_cap != cap) /* every clock gets the new width */
        for (int i = 0; i < c->lane_count; i++) {
            uint64_t *wider =
                realloc(c->lanes[i].clock, (size_t)c->lane_cap * sizeof *wider);
            if (!wider)
                return out_of_memory(err);
            memset(wider + cap, 0, (size_t)(c->lane_cap - cap) * sizeof *wider);
            c->lanes[i].clock = wider;
        }
    uint64_t *own = calloc((size_t)c->lane_cap, sizeof *own);
    if (!own)
        return out_of_memory(err);
    if (from >= 0) {
        clock = c->lanes[from].clock; /* after the widening */
        count = c->lane_count;
    }
    if (clock)
        memcpy(own, clock, (size_t)count * sizeof *own);
    c->lanes[c->lane_count] = (mxd_lane){q, own, -1, 0};
    return MXD_OK;
}

/* Makes the new lane part of the capture once the backend agreed. */
static void enter_lane(mxd_capture *c, mxd_queue *q)
{
    mxd_queue_retain(q);
    q->lane = c->lane_count++;
    atomic_fetch_add(&c->refs, 1);
    atomic_store_explicit(&q->capture, c, memory_order_release);
}

static void drop_new_lane(mxd_capture *c)
{
    free(c->lanes[c->lane_count].clock);
}

mxd_status mxd_queue_begin_capture(mxd_queue *q, mxd_error *err)
{
    if (mxd_queue_is_stale(q))
        return mxd_fail_stale(err, "DeviceQueue");
    if (mxd_capture_of(q))
        return mxd_fail(err, MXD_UNAVAILABLE,
                        "begin_capture(): the queue is capturing already; "
                        "end_capture() first");
    if (!q->ops->graph_launch)
        return mxd_fail(err, MXD_UNAVAILABLE,
                        "begin_capture(): %s devices cannot capture",
                        q->ops->api);
    mxd_capture *c = calloc(1, sizeof *c);
    mxd_graph *g = c ? graph_new(q) : NULL;
    mxd_status st = g ? add_lane(c, q, -1, NULL, 0, err) : out_of_memory(err);
    if (st == MXD_OK) {
        atomic_init(&c->refs, 1); /* the capture's own, until it ends */
        atomic_init(&c->active, true);
        c->thread = pthread_self();
        c->origin = q;
        c->graph = g;
        st = q->ops->capture_begin ? q->ops->capture_begin(c, &c->lanes[0], err)
                                   : MXD_OK;
        if (st != MXD_OK)
            drop_new_lane(c);
    }
    if (st != MXD_OK) {
        if (g)
            mxd_graph_finish(g);
        if (c)
            free(c->lanes);
        free(c);
        return st;
    }
    enter_lane(c, q);
    return MXD_OK;
}

/* ---- Nodes -------------------------------------------------------------- */

/* A new node of q's lane (zeroed but for kind and lane), or NULL. */
static mxd_node *new_node(mxd_capture *c, mxd_queue *q, mxd_node_kind kind,
                          mxd_error *err)
{
    mxd_graph *g = c->graph;
    if (!grow((void **)&g->nodes, g->node_count, &g->node_cap,
              sizeof *g->nodes)) {
        out_of_memory(err);
        return NULL;
    }
    mxd_node *n = &g->nodes[g->node_count];
    memset(n, 0, sizeof *n);
    n->kind = kind;
    n->lane = q->lane;
    n->after = -1;
    return n;
}

/* The node made by new_node is part of the graph now. */
static void commit_node(mxd_capture *c, mxd_queue *q)
{
    mxd_lane *lane = lane_of(c, q);
    lane->last = c->graph->node_count++;
    lane->clock[q->lane]++;
}

/* Hands a new node to the backend, then commits it; on failure the node's
 * references are the caller's again. */
static mxd_status record_node(mxd_capture *c, mxd_queue *q, mxd_node *n,
                              const mxd_view *dst, const mxd_view *src,
                              mxd_error *err)
{
    mxd_status st =
        q->ops->capture_node
            ? q->ops->capture_node(c, lane_of(c, q), n, dst, src, err)
            : MXD_OK;
    if (st == MXD_OK)
        commit_node(c, q);
    return st;
}

static mxd_status capture_host_fn(mxd_queue *q, mxd_host_fn fn, mxd_flag *flag,
                                  uint64_t value, mxd_error *err)
{
    const char *what = flag ? "an async host function" : "a host function";
    mxd_status st = mxd_capture_check_thread(q, what, err);
    if (st != MXD_OK)
        return st;
    if (!fn.call)
        return mxd_capture_refuse(q, what, "this function cannot run twice",
                                  err);
    mxd_capture *c = mxd_capture_of(q);
    mxd_node *n =
        new_node(c, q, flag ? MXD_NODE_ASYNC_HOST_FN : MXD_NODE_HOST_FN, err);
    if (!n)
        return MXD_NO_MEMORY;
    n->fn = fn;
    n->flag = flag;
    n->value = value;
    st = record_node(c, q, n, NULL, NULL, err);
    if (st != MXD_OK)
        return st; /* fn stays the caller's */
    if (flag)
        mxd_flag_retain(flag);
    c->graph->holds_host = true;
    return MXD_OK;
}

static mxd_status capture_wait_value(mxd_queue *q, mxd_flag *flag,
                                     uint64_t value, mxd_error *err)
{
    mxd_status st = mxd_capture_check_thread(q, "wait_for_host_value()", err);
    if (st != MXD_OK)
        return st;
    mxd_capture *c = mxd_capture_of(q);
    mxd_node *n = new_node(c, q, MXD_NODE_WAIT_VALUE, err);
    if (!n)
        return MXD_NO_MEMORY;
    n->flag = flag;
    n->value = value;
    st = record_node(c, q, n, NULL, NULL, err);
    if (st == MXD_OK) {
        mxd_flag_retain(flag);
        c->graph->holds_host = true;
    }
    return st;
}

/* m is in the graph's set of storages, read or written. */
static mxd_status add_use(mxd_graph *g, const mxd_view *v, bool write,
                          mxd_error *err)
{
    for (int i = 0; i < g->use_count; i++)
        if (g->uses[i].memory == v->memory) {
            g->uses[i].write |= write;
            return MXD_OK;
        }
    if (!grow((void **)&g->uses, g->use_count, &g->use_cap, sizeof *g->uses))
        return out_of_memory(err);
    g->uses[g->use_count++] = (mxd_graph_use){v->memory, v->queue, write};
    mxd_memory_retain(v->memory);
    mxd_queue_retain(v->queue);
    atomic_fetch_add(&v->memory->captures, 1);
    return MXD_OK;
}

/* Whether the view's memory is of the capturing backend's kind: CPU memory
 * in a CPU capture, accelerator memory (device or pinned) otherwise. */
static bool same_side(const mxd_queue *q, const mxd_view *v)
{
    return mxd_device_is_host(v->memory->device) ==
           mxd_device_is_host(q->device);
}

static mxd_status capture_copy(const mxd_view *dst, const mxd_view *src,
                               const mxd_copy_plan *plan, mxd_error *err)
{
    mxd_queue *q = dst->queue;
    mxd_status st = mxd_capture_check_thread(q, "a copy", err);
    if (st != MXD_OK)
        return st;
    if (!same_side(q, dst) || !same_side(q, src))
        return mxd_capture_refuse(
            q, "a copy between pageable CPU memory and an accelerator",
            mxd_device_is_host(q->device)
                ? "capture it on a queue of the accelerator, from or into "
                  "pinned Usage.STAGING buffers"
                : "use pinned Usage.STAGING buffers, whose bytes are read or "
                  "written at each launch",
            err);
    mxd_capture *c = mxd_capture_of(q);
    mxd_node *n = new_node(c, q, MXD_NODE_COPY, err);
    if (!n)
        return MXD_NO_MEMORY;
    n->plan = *plan;
    n->name = "memcpy";
    /* SPEC §14: pinned memory counts as host. */
    bool from_host = src->memory->host != NULL, to_host = dst->memory->host;
    n->memcpy_kind = from_host && !to_host   ? MXD_MEMCPY_HTOD
                     : !from_host && to_host ? MXD_MEMCPY_DTOH
                                             : MXD_MEMCPY_DTOD;
    mxd_graph *g = c->graph;
    int uses = g->use_count;
    st = add_use(g, src, false, err);
    if (st == MXD_OK)
        st = add_use(g, dst, true, err);
    if (st == MXD_OK)
        st = record_node(c, q, n, dst, src, err);
    if (st != MXD_OK) {
        while (g->use_count > uses) { /* the uses this node added */
            mxd_graph_use *u = &g->uses[--g->use_count];
            atomic_fetch_sub(&u->memory->captures, 1);
            mxd_memory_release(u->memory);
            mxd_queue_release(u->queue);
        }
        return st;
    }
    n->dst = dst->memory;
    n->src = src->memory;
    mxd_memory_retain(n->dst);
    mxd_memory_retain(n->src);
    return MXD_OK;
}

/* ---- Events and waits --------------------------------------------------- */

/* Events are used from any thread: a point is read under this lock (and
 * kept by a reference), swapped under it, and freed by its last holder.
 * Events that were never recorded in a capture never take it. */
static pthread_mutex_t points_mu = PTHREAD_MUTEX_INITIALIZER;

/* A leaf lock: taken last before fork() (init.c), so the child finds it
 * free. */
static void points_lock(void)
{
    pthread_mutex_lock(&points_mu);
}

static void points_unlock(void)
{
    pthread_mutex_unlock(&points_mu);
}

const mxd_fork_hooks mxd_capture_fork_hooks = {points_lock, points_unlock,
                                               points_unlock};

static void point_put(mxd_capture_point *p)
{
    if (!p || atomic_fetch_sub(&p->refs, 1) != 1)
        return;
    capture_release(p->capture);
    free(p);
}

/* ev's point (a reference), or NULL: one load in the common case. */
static mxd_capture_point *point_get(const mxd_event *ev)
{
    _Atomic(mxd_capture_point *) *at = &((mxd_event *)ev)->point;
    if (!atomic_load_explicit(at, memory_order_acquire))
        return NULL;
    pthread_mutex_lock(&points_mu);
    mxd_capture_point *p = atomic_load(at);
    if (p)
        atomic_fetch_add(&p->refs, 1);
    pthread_mutex_unlock(&points_mu);
    return p;
}

/* ev's point becomes p (NULL: none); the old one is dropped. */
static void point_set(mxd_event *ev, mxd_capture_point *p)
{
    pthread_mutex_lock(&points_mu);
    mxd_capture_point *old = atomic_exchange(&ev->point, p);
    pthread_mutex_unlock(&points_mu);
    point_put(old);
}

bool mxd_event_in_capture(const mxd_event *ev, bool *active)
{
    mxd_capture_point *p = point_get(ev);
    *active = p && atomic_load(&p->capture->active);
    point_put(p);
    return p != NULL;
}

mxd_status mxd_capture_refuse_event(const mxd_event *ev, const char *what,
                                    mxd_error *err)
{
    (void)ev;
    return mxd_fail(err, MXD_UNAVAILABLE,
                    "%s an event recorded during an active capture is not "
                    "allowed: it marks a point of the graph, which runs only "
                    "when the graph is launched; the capture is still intact",
                    what);
}

void mxd_event_leave_capture(mxd_event *ev)
{
    if (atomic_load_explicit(&ev->point, memory_order_relaxed))
        point_set(ev, NULL);
}

static mxd_status capture_record(mxd_queue *q, mxd_event *ev, mxd_error *err)
{
    mxd_status st = mxd_capture_check_thread(q, "record_event()", err);
    if (st != MXD_OK)
        return st;
    mxd_capture *c = mxd_capture_of(q);
    mxd_lane *lane = lane_of(c, q);
    mxd_capture_point *p =
        malloc(sizeof *p + (size_t)c->lane_count * sizeof p->clock[0]);
    mxd_node *n = p ? new_node(c, q, MXD_NODE_RECORD, err) : NULL;
    if (!n) {
        free(p);
        return p ? MXD_NO_MEMORY : out_of_memory(err);
    }
    if (q->ops->capture_record)
        st = q->ops->capture_record(c, lane, ev, err);
    if (st == MXD_OK)
        st = record_node(c, q, n, NULL, NULL, err);
    if (st != MXD_OK) {
        free(p);
        return st;
    }
    atomic_init(&p->refs, 1);
    p->capture = c;
    atomic_fetch_add(&c->refs, 1);
    p->node = lane->last;
    p->count = c->lane_count;
    memcpy(p->clock, lane->clock, (size_t)p->count * sizeof p->clock[0]);
    point_set(ev, p);
    return MXD_OK;
}

static void merge_clock(uint64_t *into, const uint64_t *from, int count)
{
    for (int i = 0; i < count; i++)
        if (from[i] > into[i])
            into[i] = from[i];
}

/* q (not capturing) joins capture c after ev's point (its clock, count
 * entries) or, with ev NULL, after the end of lane `from`. */
static mxd_status fork_into(mxd_capture *c, mxd_queue *q, mxd_event *ev,
                            int from, const uint64_t *clock, int count,
                            mxd_error *err)
{
    if (q->device != c->graph->device)
        return mxd_capture_refuse(c->lanes[0].queue,
                                  "a queue of another device joining the "
                                  "capture",
                                  "a graph runs on one device; order work of "
                                  "other devices outside the capture",
                                  err);
    mxd_status st = add_lane(c, q, from, clock, count, err);
    if (st != MXD_OK)
        return st;
    mxd_lane *lane = &c->lanes[c->lane_count];
    if (q->ops->capture_fork)
        st = q->ops->capture_fork(c, lane, ev,
                                  from >= 0 ? &c->lanes[from] : NULL, err);
    if (st != MXD_OK) {
        drop_new_lane(c);
        return st;
    }
    enter_lane(c, q);
    c->graph->lane_count = c->lane_count;
    return MXD_OK;
}

/* A wait node of q's lane for the point `after` (a node of another lane). */
static mxd_status join_node(mxd_capture *c, mxd_queue *q, mxd_event *ev,
                            mxd_lane *from, int after, const uint64_t *clock,
                            int count, mxd_error *err)
{
    mxd_node *n = new_node(c, q, MXD_NODE_JOIN, err);
    if (!n)
        return MXD_NO_MEMORY;
    n->after = after;
    mxd_status st = q->ops->capture_join
                        ? q->ops->capture_join(c, lane_of(c, q), ev, from, err)
                        : MXD_OK;
    if (st != MXD_OK)
        return st;
    commit_node(c, q);
    merge_clock(lane_of(c, q)->clock, clock, count);
    return MXD_OK;
}

/* A wait for work outside the capture: made at the start of each launch. */
static mxd_status outside_node(mxd_capture *c, mxd_queue *q, mxd_queue *other,
                               mxd_event *ev, mxd_error *err)
{
    if (other && other->ops != q->ops)
        return mxd_fail(err, MXD_INVALID,
                        "a %s queue cannot wait for a queue on a %s device; "
                        "synchronize on the host instead",
                        q->ops->api, other->ops->api);
    mxd_node *n = new_node(c, q, MXD_NODE_WAIT_OUTSIDE, err);
    if (!n)
        return MXD_NO_MEMORY;
    n->queue = other;
    n->event = ev;
    mxd_status st = record_node(c, q, n, NULL, NULL, err);
    if (st == MXD_OK && other)
        mxd_queue_retain(other);
    return st;
}

static mxd_status refuse_merge(mxd_queue *q, mxd_error *err)
{
    return mxd_capture_refuse(q, "waiting for work of another capture",
                              "two captures cannot be merged into one graph",
                              err);
}

static mxd_status capture_wait_queue(mxd_queue *q, mxd_queue *other,
                                     mxd_error *err)
{
    mxd_status st = mxd_capture_check_thread(q, "wait_for()", err);
    if (st == MXD_OK)
        st = mxd_capture_check_thread(other, "wait_for() a capturing queue",
                                      err);
    if (st != MXD_OK || q == other)
        return st;
    mxd_capture *c = mxd_capture_of(q), *oc = mxd_capture_of(other);
    if (c && oc && c != oc)
        return refuse_merge(q, err);
    if (!oc)
        return outside_node(c, q, other, NULL, err);
    if (!c) /* q joins other's capture after other's work so far */
        return fork_into(oc, q, NULL, other->lane, NULL, 0, err);
    mxd_lane *from = lane_of(oc, other);
    return join_node(c, q, NULL, from, from->last, from->clock, c->lane_count,
                     err);
}

/* A wait of q for ev, whose point p (held) is in an active capture. */
static mxd_status wait_point(mxd_queue *q, mxd_event *ev, mxd_capture_point *p,
                             mxd_error *err)
{
    mxd_capture *c = mxd_capture_of(q), *ec = p->capture;
    if (!pthread_equal(ec->thread, pthread_self()))
        return mxd_capture_refuse(ec->origin,
                                  "wait_for() an event recorded in the "
                                  "capture",
                                  "only the thread that began the capture may "
                                  "fork it",
                                  err);
    if (c && c != ec)
        return refuse_merge(q, err);
    if (!c)
        return fork_into(ec, q, ev, -1, p->clock, p->count, err);
    return join_node(c, q, ev, NULL, p->node, p->clock, p->count, err);
}

static mxd_status capture_wait_event(mxd_queue *q, mxd_event *ev,
                                     mxd_error *err)
{
    mxd_status st = mxd_capture_check_thread(q, "wait_for()", err);
    if (st != MXD_OK)
        return st;
    mxd_capture_point *p = point_get(ev);
    if (p && atomic_load(&p->capture->active))
        st = wait_point(q, ev, p, err);
    else if (!p && mxd_capture_of(q)) /* recorded outside any capture */
        st = outside_node(mxd_capture_of(q), q, NULL, ev, err);
    /* else: recorded in a capture that ended: as if never recorded */
    point_put(p);
    return st;
}

/* ---- Keeping objects ---------------------------------------------------- */

mxd_status mxd_queue_capture_keep(mxd_queue *q, mxd_host_fn keep,
                                  mxd_error *err)
{
    mxd_capture *c = mxd_capture_of(q);
    if (!c)
        return MXD_OK; /* nothing captures: nothing to keep */
    mxd_graph *g = c->graph;
    if (!grow((void **)&g->keeps, g->keep_count, &g->keep_cap,
              sizeof *g->keeps))
        return out_of_memory(err);
    g->keeps[g->keep_count++] = keep;
    return MXD_OK;
}

/* ---- Ending ------------------------------------------------------------- */

/* The first lane whose work the origin is not ordered after, or -1. */
static int unjoined_lane(const mxd_capture *c)
{
    const uint64_t *origin = c->lanes[0].clock;
    for (int i = 1; i < c->lane_count; i++)
        if (origin[i] < c->lanes[i].clock[i])
            return i;
    return -1;
}

/* Every lane leaves the capture, which the backend ended already. */
static void leave_all(mxd_capture *c)
{
    atomic_store(&c->active, false);
    for (int i = 0; i < c->lane_count; i++) {
        mxd_queue *q = c->lanes[i].queue;
        atomic_store_explicit(&q->capture, NULL, memory_order_release);
        mxd_queue_release(q);
        capture_release(c); /* the lane's */
    }
}

/* Ends c: every lane leaves it, and the memory it touched may be accessed
 * again.  The graph when `keep` and the backend made its executable form;
 * else NULL (the graph is thrown away, which cannot fail). */
static mxd_graph *end(mxd_capture *c, bool keep, mxd_status *st, mxd_error *err)
{
    mxd_graph *g = c->graph;
    g->lane_count = c->lane_count;
    const mxd_backend *ops = c->lanes[0].queue->ops;
    *st = ops->capture_end ? ops->capture_end(c, keep, err) : MXD_OK;
    for (int i = 0; i < g->use_count; i++)
        atomic_fetch_sub(&g->uses[i].memory->captures, 1);
    c->graph = NULL;
    leave_all(c);
    capture_release(c); /* its own */
    if (keep && *st == MXD_OK)
        return g;
    g->ops->graph_free(g);
    return NULL;
}

/* MXD_OK when q began a capture and the calling thread may end it. */
static mxd_status check_origin(mxd_queue *q, const char *fname, mxd_error *err)
{
    if (mxd_queue_is_stale(q))
        return mxd_fail_stale(err, "DeviceQueue");
    mxd_capture *c = mxd_capture_of(q);
    if (!c)
        return mxd_fail(err, MXD_UNAVAILABLE,
                        "%s(): the queue is not capturing; begin_capture() "
                        "first",
                        fname);
    mxd_status st = mxd_capture_check_thread(q, fname, err);
    if (st == MXD_OK && q->lane != 0) {
        char name[64];
        mxd_queue_name(c->lanes[0].queue, name, sizeof name);
        st = mxd_fail(err, MXD_UNAVAILABLE,
                      "%s(): the queue joined a capture that %s began; end it "
                      "there; the capture is still intact",
                      fname, name);
    }
    return st;
}

mxd_status mxd_queue_end_capture(mxd_queue *q, mxd_graph **out, mxd_error *err)
{
    mxd_status st = check_origin(q, "end_capture", err);
    if (st != MXD_OK)
        return st;
    mxd_capture *c = mxd_capture_of(q);
    if (c->broken) {
        mxd_error ignored;
        end(c, false, &st, &ignored);
        return mxd_fail(err, MXD_UNAVAILABLE,
                        "end_capture(): an operation failed halfway during the "
                        "capture (it raised then), leaving part of it in the "
                        "driver's graph; the capture is discarded");
    }
    int k = unjoined_lane(c);
    if (k >= 0) {
        char name[64];
        mxd_error ignored;
        mxd_queue_name(c->lanes[k].queue, name, sizeof name);
        end(c, false, &st, &ignored);
        return mxd_fail(err, MXD_UNAVAILABLE,
                        "end_capture(): %s joined the capture and was not "
                        "joined back: the queue that began it must wait for "
                        "its work (wait_for(queue), or wait_for(an event "
                        "recorded on it after that work)) before "
                        "end_capture(); the capture is discarded",
                        name);
    }
    mxd_graph *g = end(c, true, &st, err);
    if (g)
        *out = g;
    return st;
}

mxd_status mxd_queue_discard_capture(mxd_queue *q, mxd_error *err)
{
    mxd_status st = check_origin(q, "end_capture", err);
    if (st == MXD_OK)
        end(mxd_capture_of(q), false, &st, err);
    return st;
}

/* ---- Launches ----------------------------------------------------------- */

static int by_address(const void *a, const void *b)
{
    const mxd_memory *x = ((const mxd_graph_use *)a)->memory;
    const mxd_memory *y = ((const mxd_graph_use *)b)->memory;
    return x < y ? -1 : x > y;
}

static mxd_view use_view(const mxd_graph_use *u)
{
    return (mxd_view){.memory = u->memory, .queue = u->queue};
}

/* Locks the records of what g touches and enqueues on q the waits they
 * need, in one pass: the uses are sorted by address (at the first launch),
 * so the records are locked in address order, as two-storage operations
 * do.  On failure, nothing stays locked. */
static mxd_status lock_and_order(mxd_graph *g, mxd_queue *q, mxd_error *err)
{
    mxd_status st = MXD_OK;
    int i;
    for (i = 0; st == MXD_OK && i < g->use_count; i++) {
        mxd_view v = use_view(&g->uses[i]);
        pthread_mutex_lock(&v.memory->record.mu);
        st = mxd_hazard_order_quick(q, &v, g->uses[i].write, err);
    }
    if (st != MXD_OK)
        while (i-- > 0)
            pthread_mutex_unlock(&g->uses[i].memory->record.mu);
    return st;
}

/* The other waits a launch on q needs: for work outside the capture, and
 * for the previous launch. */
static mxd_status launch_waits(mxd_graph *g, mxd_queue *q, mxd_error *err)
{
    mxd_status st = MXD_OK;
    for (int i = 0; st == MXD_OK && i < g->node_count; i++) {
        const mxd_node *n = &g->nodes[i];
        if (n->kind == MXD_NODE_WAIT_OUTSIDE)
            st = n->queue ? mxd_queue_wait_queue(q, n->queue, err)
                          : mxd_queue_wait_event(q, n->event, err);
    }
    if (st == MXD_OK && g->last)
        st = mxd_queue_wait_completion(q, g->last, err);
    return st;
}

/* After a launch with completion c (NULL: it failed): it read and wrote
 * what it touches; the records are unlocked.  Their entries are mostly
 * the previous launch's completion, which g holds until the references
 * settle. */
static void launch_notes(mxd_graph *g, mxd_completion *c)
{
    mxd_ref_batch batch = {c, g->last, 0, 0};
    for (int i = 0; i < g->use_count; i++) {
        mxd_memory *m = g->uses[i].memory;
        if (c)
            mxd_hazard_note_launch(m, g->uses[i].write, &batch);
        if (i == g->use_count - 1 && c)
            mxd_hazard_batch_settle(&batch); /* before the last unlock */
        pthread_mutex_unlock(&m->record.mu);
    }
    if (!c)
        return;
    if (g->use_count == 0)
        mxd_hazard_batch_settle(&batch);
    mxd_completion_retain(c);
    mxd_completion_release(g->last);
    g->last = c;
}

static void trace_launch(const mxd_graph *g, mxd_queue *q)
{
    for (int i = 0; i < g->node_count; i++) {
        const mxd_node *n = &g->nodes[i];
        if (n->kind != MXD_NODE_COPY)
            continue;
        mxd_trace_note note = {n->name, q, 0, 0};
        mxd_trace_copy(&note, n->memcpy_kind, (uint64_t)n->plan.bytes);
    }
}

static mxd_status check_launch(const mxd_graph *g, mxd_queue *q, mxd_error *err)
{
    if (mxd_queue_is_stale(q))
        return mxd_fail_stale(err, "DeviceQueue");
    if (q->device != g->device)
        return mxd_fail(err, MXD_INVALID,
                        "the graph was captured on %s device %d and cannot "
                        "be launched on a queue of %s device %d",
                        g->ops->api, g->device->id, q->ops->api, q->device->id);
    if (mxd_capture_of(q))
        return mxd_capture_refuse(q, "launching a graph",
                                  "graphs are not captured into graphs; "
                                  "launch it after end_capture()",
                                  err);
    return MXD_OK;
}

mxd_status mxd_graph_launch(mxd_graph *g, mxd_queue *q, mxd_error *err)
{
    mxd_status st = check_launch(g, q, err);
    if (st != MXD_OK)
        return st;
    mxd_completion *c = mxd_completion_alloc(q, "graph launch", 0);
    if (!c)
        return out_of_memory(err);
    pthread_mutex_lock(&g->mu);
    if (!g->last && g->use_count > 1) /* the first launch: nobody else reads */
        qsort(g->uses, (size_t)g->use_count, sizeof *g->uses, by_address);
    st = lock_and_order(g, q, err);
    if (st == MXD_OK) {
        st = launch_waits(g, q, err);
        if (st == MXD_OK)
            st = q->ops->graph_launch(g, q, c, err);
        launch_notes(g, st == MXD_OK ? c : NULL);
    }
    pthread_mutex_unlock(&g->mu);
    if (st == MXD_OK && mxd_trace_active())
        trace_launch(g, q);
    mxd_completion_release(c);
    return st;
}

/* ---- Graphviz ----------------------------------------------------------- */

typedef struct text {
    char *buf;
    size_t len, cap;
    bool failed;
} text;

static void add(text *t, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void add(text *t, const char *fmt, ...)
{
    for (int attempt = 0; attempt < 2 && !t->failed; attempt++) {
        va_list args;
        va_start(args, fmt);
        int n = vsnprintf(t->buf + t->len, t->cap - t->len, fmt, args);
        va_end(args);
        if (n < 0) {
            t->failed = true;
        } else if ((size_t)n < t->cap - t->len) {
            t->len += (size_t)n;
            return;
        } else {
            size_t cap = (t->cap + (size_t)n + 1) * 2;
            char *grown = realloc(t->buf, cap);
            t->failed = grown == NULL;
            if (grown) {
                t->buf = grown;
                t->cap = cap;
            }
        }
    }
}

static const char *const memcpy_kinds[] = {"", "HtoD", "DtoH", "DtoD"};

static void dot_node(text *t, const mxd_graph *g, int i)
{
    const mxd_node *n = &g->nodes[i];
    add(t, "  n%d [label=\"", i);
    switch (n->kind) {
    case MXD_NODE_COPY:
        add(t, "copy %s %lld B\\n%s\\n%s@%p -> %s@%p",
            memcpy_kinds[n->memcpy_kind], (long long)n->plan.bytes, n->name,
            mxd_memory_kind_of(n->src) == MXD_MEMORY_PINNED ? "pinned"
            : n->src->host                                  ? "host"
                                                            : "device",
            (void *)n->src,
            mxd_memory_kind_of(n->dst) == MXD_MEMORY_PINNED ? "pinned"
            : n->dst->host                                  ? "host"
                                                            : "device",
            (void *)n->dst);
        break;
    case MXD_NODE_HOST_FN: add(t, "host function"); break;
    case MXD_NODE_ASYNC_HOST_FN:
        add(t, "async host function\\nsignals flag@%p = %llu", (void *)n->flag,
            (unsigned long long)n->value);
        break;
    case MXD_NODE_WAIT_VALUE:
        add(t, "wait for host value\\nflag@%p == %llu", (void *)n->flag,
            (unsigned long long)n->value);
        break;
    case MXD_NODE_RECORD: add(t, "record event"); break;
    case MXD_NODE_JOIN: add(t, "wait (join)"); break;
    case MXD_NODE_WAIT_OUTSIDE:
        add(t, "wait for %s outside the capture\\n(at each launch)",
            n->queue ? "a queue" : "an event");
        break;
    }
    add(t, "\\n(queue %d)\"%s];\n", n->lane,
        n->kind == MXD_NODE_COPY ? ", shape=box" : "");
}

char *mxd_graph_dot(const mxd_graph *g)
{
    text t = {0};
    add(&t, "digraph DeviceGraph {\n  label=\"%s device %d, %d nodes\";\n",
        g->ops->api, g->device->id, g->node_count);
    int *last = calloc((size_t)g->lane_count + 1, sizeof *last);
    t.failed = t.failed || !last;
    for (int i = 0; last && i <= g->lane_count; i++)
        last[i] = -1;
    for (int i = 0; !t.failed && i < g->node_count; i++) {
        const mxd_node *n = &g->nodes[i];
        dot_node(&t, g, i);
        if (last[n->lane] >= 0)
            add(&t, "  n%d -> n%d;\n", last[n->lane], i);
        if (n->after >= 0)
            add(&t, "  n%d -> n%d [style=dashed];\n", n->after, i);
        last[n->lane] = i;
    }
    add(&t, "}\n");
    free(last);
    if (t.failed) {
        free(t.buf);
        return NULL;
    }
    return t.buf;
}

const mxd_recorder mxd_capture_recorder = {
    .wait_queue = capture_wait_queue,
    .wait_event = capture_wait_event,
    .record = capture_record,
    .host_fn = capture_host_fn,
    .wait_value = capture_wait_value,
    .copy = capture_copy,
    .recorded_outside = mxd_event_leave_capture,
};
