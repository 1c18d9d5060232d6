/* Stream capture and graphs (fake_engine.h describes the locking).
 *
 * A capture begins on one stream (its origin) and records, instead of
 * running them, the items enqueued on every stream that takes part in it:
 * each becomes a node that depends on what its stream's previous work
 * was (the stream's `deps`).  An event recorded on a capturing stream
 * marks that point (no node); a stream that waits for such an event joins
 * the capture (a fork), and a capturing stream that waits for one adds
 * its point to its dependencies (a join).  Ending the capture on its
 * origin checks that every stream that joined was joined back (its last
 * nodes are ancestors of the origin's), and hands the nodes to a graph.
 * A launch of an executable graph enqueues a copy of each node's item on
 * the launch stream in capture order (a valid order of the graph), after
 * the previous launch of the same executable graph.
 *
 * What the CUDA programming guide calls invalid during capture ("Prohibited
 * and Unhandled Operations") fails here with its error, invalidates the
 * capture (its streams then refuse work until it is ended, which returns
 * no graph) and records a violation naming the call, so that a backend
 * that ignores the error is caught too: synchronizing or querying a
 * capturing stream or an event last recorded in a capture, a synchronous
 * copy (pageable memory, host to host), waiting for an event recorded
 * outside the capture, merging two captures, the legacy stream while a
 * blocking stream captures, stream-ordered allocation (graph memory nodes
 * are not modelled), and the potentially unsafe calls (allocation and
 * frees that are not stream ordered) under a capture whose mode forbids
 * them. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "fake_engine.h"

typedef struct fake_node {
    fake_item *item; /* owned: the template each launch copies */
    fake_deps deps;
} fake_node;

/* The nodes, shared by a graph and the executable graphs made from it. */
typedef struct fake_body {
    int refs;
    int device;
    fake_node *nodes;
    int count, cap;
} fake_body;

typedef struct fake_capture {
    int refs; /* member streams, events recorded in it, the begin call */
    int device;
    unsigned mode;
    pthread_t thread; /* that began it */
    fake_stream *origin;
    fake_stream **members; /* held, the origin first */
    int member_count, member_cap;
    unsigned invalid; /* the error that invalidated it; 0 while valid */
    bool ended;
    fake_body *body;
    struct fake_capture *next_active; /* captures not yet ended */
} fake_capture;

enum { FAKE_KIND_GRAPH = 0x47525048, FAKE_KIND_EXEC = 0x45584543 };

typedef struct fake_graph_obj {
    int kind;
    fake_body *body; /* held */
    fake_mark *last; /* an executable graph's last launch, held */
} fake_graph_obj;

static fake_capture *fake_active; /* captures not yet ended */
static int fake_live_graphs, fake_live_execs;

/* ---- Dependency sets ------------------------------------------------- */

static void fake_deps_clear(fake_deps *d)
{
    free(d->ids);
    d->ids = NULL;
    d->n = 0;
}

static bool fake_deps_has(const fake_deps *d, int id)
{
    for (int i = 0; i < d->n; i++)
        if (d->ids[i] == id)
            return true;
    return false;
}

/* d gains the ids of `more` (a union); false when out of memory. */
static bool fake_deps_merge(fake_deps *d, const fake_deps *more)
{
    int *ids = realloc(d->ids, (size_t)(d->n + more->n + 1) * sizeof *ids);
    if (ids == NULL)
        return false;
    d->ids = ids;
    for (int i = 0; i < more->n; i++)
        if (!fake_deps_has(d, more->ids[i]))
            d->ids[d->n++] = more->ids[i];
    return true;
}

static bool fake_deps_copy(fake_deps *d, const fake_deps *from)
{
    fake_deps_clear(d);
    return fake_deps_merge(d, from);
}

/* ---- Bodies and captures -------------------------------------------- */

static void fake_body_unref(fake_body *b)
{
    if (b == NULL || --b->refs > 0)
        return;
    for (int i = 0; i < b->count; i++) {
        fake_item_free(b->nodes[i].item);
        fake_deps_clear(&b->nodes[i].deps);
    }
    free(b->nodes);
    free(b);
}

static void fake_capture_unref(fake_capture *c)
{
    if (--c->refs > 0)
        return;
    fake_body_unref(c->body);
    free(c->members);
    free(c);
}

static void fake_unlink_active(fake_capture *c)
{
    fake_capture **p = &fake_active;
    while (*p != NULL && *p != c)
        p = &(*p)->next_active;
    if (*p == c)
        *p = c->next_active;
}

static void fake_invalidate(fake_capture *c, unsigned code)
{
    if (c->invalid == 0)
        c->invalid = code;
}

unsigned fake_capture_illegal(fake_stream *s, unsigned code, const char *why)
{
    fake_violation("%s %s during stream capture (error %u); the capture is "
                   "invalidated",
                   fake_current_entry_name(), why, code);
    if (s != NULL && s->capture != NULL)
        fake_invalidate(s->capture, code);
    return code;
}

/* s leaves its capture (which ended, or which s no longer serves). */
static void fake_leave(fake_stream *s)
{
    fake_capture *c = s->capture;
    s->capture = NULL;
    fake_deps_clear(&s->deps);
    fake_stream_unref(s); /* the capture's hold */
    fake_capture_unref(c);
}

static bool fake_join(fake_capture *c, fake_stream *s, const fake_deps *deps)
{
    if (c->member_count == c->member_cap) {
        int cap = c->member_cap ? 2 * c->member_cap : 4;
        fake_stream **grown = realloc(c->members, (size_t)cap * sizeof *grown);
        if (grown == NULL)
            return false;
        c->members = grown;
        c->member_cap = cap;
    }
    if (deps != NULL && !fake_deps_copy(&s->deps, deps))
        return false;
    c->members[c->member_count++] = s;
    s->refs++;
    s->capture = c;
    c->refs++;
    return true;
}

static bool fake_is_blocking_stream(const fake_stream *s)
{
    return (s->flags & (FAKE_STREAM_NON_BLOCKING | FAKE_STREAM_LEGACY |
                        FAKE_STREAM_NULL)) == 0;
}

static bool fake_is_legacy_stream(const fake_stream *s)
{
    return (s->flags & (FAKE_STREAM_LEGACY | FAKE_STREAM_NULL)) != 0;
}

unsigned fake_capture_admit(fake_stream *s)
{
    if (s->capture != NULL && s->capture->invalid != 0)
        return FAKE_E_CAPTURE_INVALIDATED;
    if (!fake_is_legacy_stream(s))
        return FAKE_E_OK;
    /* The legacy stream would wait for the capturing blocking streams of
     * its device: an implicit dependency on work that does not run. */
    bool conflict = false;
    for (fake_capture *c = fake_active; c != NULL; c = c->next_active)
        for (int i = 0; i < c->member_count; i++)
            if (c->members[i]->device == s->device &&
                fake_is_blocking_stream(c->members[i])) {
                fake_invalidate(c, FAKE_E_CAPTURE_IMPLICIT);
                conflict = true;
            }
    if (!conflict)
        return FAKE_E_OK;
    return fake_capture_illegal(NULL, FAKE_E_CAPTURE_IMPLICIT,
                                "used the legacy stream while a blocking "
                                "stream of its device captures");
}

bool fake_capture_take(fake_stream *s, fake_item *it)
{
    fake_capture *c = s->capture;
    if (c == NULL)
        return false;
    fake_body *b = c->body;
    fake_deps deps = {NULL, 0};
    if (b->count == b->cap) {
        int cap = b->cap ? 2 * b->cap : 16;
        fake_node *grown = realloc(b->nodes, (size_t)cap * sizeof *grown);
        if (grown != NULL) {
            b->nodes = grown;
            b->cap = cap;
        }
    }
    int id = b->count;
    bool ok = b->count < b->cap && fake_deps_copy(&deps, &s->deps);
    int *one = ok ? malloc(sizeof *one) : NULL;
    if (one == NULL) { /* no memory to capture it with: the capture fails */
        fake_deps_clear(&deps);
        fake_invalidate(c, FAKE_E_OUT_OF_MEMORY);
        fake_item_free(it);
        return true;
    }
    b->nodes[b->count++] = (fake_node){it, deps};
    *one = id;
    free(s->deps.ids);
    s->deps = (fake_deps){one, 1};
    return true;
}

/* ---- Events --------------------------------------------------------- */

void fake_capture_forget(fake_event_capture *ec)
{
    if (ec->capture != NULL)
        fake_capture_unref(ec->capture);
    ec->capture = NULL;
    fake_deps_clear(&ec->deps);
}

void fake_capture_record(fake_event_capture *ec, fake_stream *s)
{
    fake_capture_forget(ec);
    if (!fake_deps_copy(&ec->deps, &s->deps))
        fake_invalidate(s->capture, FAKE_E_OUT_OF_MEMORY);
    ec->capture = s->capture;
    ec->capture->refs++;
}

unsigned fake_capture_event_use(fake_event_capture *ec)
{
    fake_capture *c = ec->capture;
    fake_violation("%s used an event last recorded in a stream capture (%s); "
                   "real drivers refuse it (error %d)",
                   fake_current_entry_name(),
                   c->ended ? "which has ended" : "still capturing",
                   FAKE_E_CAPTURED_EVENT);
    if (!c->ended)
        fake_invalidate(c, FAKE_E_CAPTURED_EVENT);
    return FAKE_E_CAPTURED_EVENT;
}

unsigned fake_capture_wait(fake_stream *s, fake_event_capture *ec)
{
    fake_capture *c = ec->capture;
    if (c == NULL)
        return s->capture == NULL
                   ? FAKE_CAPTURE_PASS
                   : fake_capture_illegal(s, FAKE_E_CAPTURE_ISOLATION,
                                          "made a capturing stream wait for "
                                          "an event recorded outside the "
                                          "capture");
    if (c->ended)
        return fake_capture_event_use(ec);
    if (c->invalid != 0)
        return FAKE_E_CAPTURE_INVALIDATED;
    if (s->capture == c)
        return fake_deps_merge(&s->deps, &ec->deps) ? FAKE_E_OK
                                                    : FAKE_E_OUT_OF_MEMORY;
    if (s->capture != NULL) {
        fake_invalidate(c, FAKE_E_CAPTURE_MERGE);
        return fake_capture_illegal(s, FAKE_E_CAPTURE_MERGE,
                                    "merged two stream captures");
    }
    if (s->device != c->device || fake_is_legacy_stream(s))
        return fake_capture_illegal(NULL, FAKE_E_CAPTURE_UNSUPPORTED,
                                    "forked a capture into a stream of "
                                    "another device or the legacy stream");
    return fake_join(c, s, &ec->deps) ? FAKE_E_OK : FAKE_E_OUT_OF_MEMORY;
}

/* ---- Begin, end, status --------------------------------------------- */

unsigned fake_begin_capture(void *h, unsigned mode)
{
    if (mode > FAKE_CAPTURE_RELAXED)
        return FAKE_E_INVALID_VALUE;
    pthread_mutex_lock(&fake_lock);
    fake_stream *s = fake_find_stream(h);
    unsigned rc = s == NULL                  ? FAKE_E_INVALID_HANDLE
                  : fake_is_legacy_stream(s) ? FAKE_E_CAPTURE_UNSUPPORTED
                  : s->capture != NULL       ? FAKE_E_INVALID_VALUE
                                             : FAKE_E_OK;
    fake_capture *c = rc == FAKE_E_OK ? calloc(1, sizeof *c) : NULL;
    fake_body *b = c != NULL ? calloc(1, sizeof *b) : NULL;
    if (rc == FAKE_E_OK && (b == NULL || !fake_join(c, s, NULL))) {
        free(b);
        free(c);
        rc = FAKE_E_OUT_OF_MEMORY;
    }
    if (rc == FAKE_E_OK) {
        b->refs = 1;
        b->device = s->device;
        c->body = b;
        c->device = s->device;
        c->mode = mode;
        c->thread = pthread_self();
        c->origin = s;
        c->next_active = fake_active;
        fake_active = c;
    }
    pthread_mutex_unlock(&fake_lock);
    return rc;
}

/* Marks the ancestors of the origin's dependencies (and themselves). */
static void fake_mark_joined(const fake_body *b, const fake_deps *from,
                             bool *seen)
{
    for (int i = 0; i < from->n; i++) {
        int id = from->ids[i];
        if (!seen[id]) {
            seen[id] = true;
            fake_mark_joined(b, &b->nodes[id].deps, seen);
        }
    }
}

/* Whether every member's last nodes are ancestors of the origin's. */
static bool fake_all_joined(const fake_capture *c)
{
    const fake_body *b = c->body;
    bool *seen = calloc((size_t)b->count + 1, sizeof *seen);
    if (seen == NULL)
        return false;
    fake_mark_joined(b, &c->origin->deps, seen);
    bool joined = true;
    for (int m = 1; m < c->member_count; m++)
        for (int i = 0; i < c->members[m]->deps.n; i++)
            joined = joined && seen[c->members[m]->deps.ids[i]];
    free(seen);
    return joined;
}

/* Takes every stream out of capture c, which ends. */
static void fake_finish(fake_capture *c)
{
    c->ended = true;
    fake_unlink_active(c);
    c->refs++; /* the members' holds go while we walk them */
    for (int i = 0; i < c->member_count; i++)
        fake_leave(c->members[i]);
    c->member_count = 0;
    fake_capture_unref(c);
}

static unsigned fake_new_graph_obj(int kind, fake_body *b, void **out)
{
    fake_graph_obj *g = calloc(1, sizeof *g);
    if (g == NULL || !fake_handle_add(g)) {
        free(g);
        return FAKE_E_OUT_OF_MEMORY;
    }
    g->kind = kind;
    g->body = b;
    b->refs++;
    if (kind == FAKE_KIND_GRAPH)
        fake_live_graphs++;
    else
        fake_live_execs++;
    *out = g;
    return FAKE_E_OK;
}

unsigned fake_end_capture(void *h, void **graph)
{
    if (graph == NULL)
        return FAKE_E_INVALID_VALUE;
    *graph = NULL;
    pthread_mutex_lock(&fake_lock);
    fake_stream *s = fake_find_stream(h);
    fake_capture *c = s != NULL ? s->capture : NULL;
    unsigned rc = s == NULL   ? FAKE_E_INVALID_HANDLE
                  : c == NULL ? FAKE_E_INVALID_VALUE
                  : c->origin != s
                      ? fake_capture_illegal(s, FAKE_E_CAPTURE_UNMATCHED,
                                             "ended a capture on a stream "
                                             "that did not begin it")
                  : c->mode != FAKE_CAPTURE_RELAXED &&
                          !pthread_equal(c->thread, pthread_self())
                      ? FAKE_E_CAPTURE_WRONG_THREAD
                      : FAKE_E_OK;
    if (rc == FAKE_E_OK || rc == FAKE_E_CAPTURE_UNMATCHED) {
        if (rc == FAKE_E_OK)
            rc = c->invalid            ? FAKE_E_CAPTURE_INVALIDATED
                 : !fake_all_joined(c) ? FAKE_E_CAPTURE_UNJOINED
                                       : FAKE_E_OK;
        if (rc == FAKE_E_OK)
            rc = fake_new_graph_obj(FAKE_KIND_GRAPH, c->body, graph);
        if (rc != FAKE_E_CAPTURE_UNMATCHED)
            fake_finish(c);
    }
    pthread_mutex_unlock(&fake_lock);
    return rc;
}

unsigned fake_is_capturing(void *h, unsigned *status)
{
    if (status == NULL)
        return FAKE_E_INVALID_VALUE;
    pthread_mutex_lock(&fake_lock);
    fake_stream *s = fake_find_stream(h);
    unsigned rc = s == NULL ? FAKE_E_INVALID_HANDLE : FAKE_E_OK;
    if (s != NULL && fake_is_legacy_stream(s))
        for (fake_capture *c = fake_active; c != NULL; c = c->next_active)
            for (int i = 0; i < c->member_count; i++)
                if (c->members[i]->device == s->device &&
                    fake_is_blocking_stream(c->members[i]))
                    rc = FAKE_E_CAPTURE_IMPLICIT; /* not invalidated */
    if (rc == FAKE_E_OK)
        *status = s->capture == NULL ? 0 : s->capture->invalid ? 2 : 1;
    pthread_mutex_unlock(&fake_lock);
    return rc;
}

void fake_capture_stream_gone(fake_stream *s)
{
    fake_capture *c = s->capture;
    if (c == NULL)
        return;
    fake_invalidate(c, FAKE_E_CAPTURE_INVALIDATED);
    if (c->origin == s) {
        fake_finish(c); /* nobody can end it any more */
        return;
    }
    for (int i = 0; i < c->member_count; i++)
        if (c->members[i] == s)
            c->members[i] = c->members[--c->member_count];
    fake_leave(s);
}

/* Whether the calling thread is prohibited from potentially unsafe calls
 * by capture c (the thread's own mode is always GLOBAL here: the fake has
 * no cuThreadExchangeStreamCaptureMode). */
static bool fake_prohibits(const fake_capture *c)
{
    bool mine = pthread_equal(c->thread, pthread_self());
    return c->invalid == 0 && (mine ? c->mode != FAKE_CAPTURE_RELAXED
                                    : c->mode == FAKE_CAPTURE_GLOBAL);
}

unsigned fake_capture_unsafe_call(void)
{
    pthread_mutex_lock(&fake_lock);
    bool prohibited = false;
    for (fake_capture *c = fake_active; c != NULL; c = c->next_active)
        if (fake_prohibits(c)) {
            fake_invalidate(c, FAKE_E_CAPTURE_UNSUPPORTED);
            prohibited = true;
        }
    unsigned rc = prohibited
                      ? fake_capture_illegal(NULL, FAKE_E_CAPTURE_UNSUPPORTED,
                                             "made a potentially unsafe call "
                                             "while a capture forbids them")
                      : FAKE_E_OK;
    pthread_mutex_unlock(&fake_lock);
    return rc;
}

unsigned fake_capture_unsupported(void *h, const char *what)
{
    pthread_mutex_lock(&fake_lock);
    fake_stream *s = fake_find_stream(h);
    unsigned rc =
        s == NULL || s->capture == NULL
            ? FAKE_E_OK
            : fake_capture_illegal(s, FAKE_E_CAPTURE_UNSUPPORTED, what);
    pthread_mutex_unlock(&fake_lock);
    return rc;
}

/* ---- Graphs --------------------------------------------------------- */

static fake_graph_obj *fake_find_graph(void *h, int kind)
{
    return fake_handle_valid(h) && ((fake_graph_obj *)h)->kind == kind ? h
                                                                       : NULL;
}

unsigned fake_graph_instantiate(void **exec, void *graph,
                                unsigned long long flags)
{
    if (exec == NULL || flags != 0)
        return FAKE_E_INVALID_VALUE;
    pthread_mutex_lock(&fake_lock);
    fake_graph_obj *g = fake_find_graph(graph, FAKE_KIND_GRAPH);
    unsigned rc = g == NULL ? FAKE_E_INVALID_VALUE
                            : fake_new_graph_obj(FAKE_KIND_EXEC, g->body, exec);
    pthread_mutex_unlock(&fake_lock);
    return rc;
}

static unsigned fake_destroy_graph_obj(void *h, int kind)
{
    pthread_mutex_lock(&fake_lock);
    fake_graph_obj *g = fake_find_graph(h, kind);
    if (g != NULL) {
        fake_handle_remove(g);
        if (kind == FAKE_KIND_GRAPH)
            fake_live_graphs--;
        else
            fake_live_execs--;
        fake_body_unref(g->body);
        if (g->last != NULL) /* an in-flight launch still completes */
            fake_mark_unref(g->last);
        free(g);
    }
    pthread_mutex_unlock(&fake_lock);
    return g != NULL ? FAKE_E_OK : FAKE_E_INVALID_VALUE;
}

unsigned fake_graph_destroy(void *graph)
{
    return fake_destroy_graph_obj(graph, FAKE_KIND_GRAPH);
}

unsigned fake_graph_exec_destroy(void *exec)
{
    return fake_destroy_graph_obj(exec, FAKE_KIND_EXEC);
}

/* A new item of s (fake_lock held), or NULL. */
static fake_item *fake_mark_item(int type, fake_mark *m)
{
    fake_item *it = calloc(1, sizeof *it);
    if (it != NULL) {
        it->type = type;
        it->entry = fake_current_entry_name();
        it->u.mark = m;
        m->refs++;
    }
    return it;
}

/* The copies of the nodes, then the record of the launch's end: made
 * before anything is enqueued, so that a launch runs whole or not at
 * all. */
static fake_item **fake_launch_items(const fake_graph_obj *g, fake_mark *end,
                                     int *count)
{
    const fake_body *b = g->body;
    int n = b->count + 2;
    fake_item **items = calloc((size_t)n, sizeof *items);
    bool ok = items != NULL;
    int k = 0;
    if (ok && g->last != NULL && !g->last->done) /* after the last launch */
        ok = (items[k++] = fake_mark_item(FAKE_ITEM_WAIT_MARK, g->last));
    for (int i = 0; ok && i < b->count; i++)
        ok = (items[k++] = fake_item_clone(b->nodes[i].item)) != NULL;
    if (ok)
        ok = (items[k++] = fake_mark_item(FAKE_ITEM_RECORD, end)) != NULL;
    if (!ok) {
        for (int i = 0; items != NULL && i < k; i++)
            if (items[i] != NULL)
                fake_item_free(items[i]);
        free(items);
        return NULL;
    }
    *count = k;
    return items;
}

unsigned fake_graph_launch(void *exec, void *stream)
{
    fake_stream *s;
    fake_item *unused;
    fake_mark *end = calloc(1, sizeof *end);
    if (end == NULL)
        return FAKE_E_OUT_OF_MEMORY;
    unsigned rc = fake_begin_item(stream, &s, &unused);
    if (rc != FAKE_E_OK) {
        free(end);
        return rc;
    }
    free(unused);
    fake_graph_obj *g = fake_find_graph(exec, FAKE_KIND_EXEC);
    int count = 0;
    fake_item **items = NULL;
    if (g == NULL || g->body->device != s->device)
        rc = FAKE_E_INVALID_VALUE;
    else if (s->capture != NULL) /* real drivers add a child graph node */
        rc = fake_capture_illegal(s, FAKE_E_CAPTURE_UNSUPPORTED,
                                  "launched a graph into a capture (child "
                                  "graphs are not modelled)");
    else if ((items = fake_launch_items(g, end, &count)) == NULL)
        rc = FAKE_E_OUT_OF_MEMORY;
    if (rc != FAKE_E_OK) {
        pthread_mutex_unlock(&fake_lock);
        free(end);
        return rc;
    }
    end->refs++; /* the executable graph's */
    if (g->last != NULL)
        fake_mark_unref(g->last);
    g->last = end;
    bool was_empty = s->head == NULL;
    s->quiet = true; /* the worker is woken once, below */
    for (int i = 0; i < count; i++)
        fake_enqueue(s, items[i]);
    s->quiet = false;
    if (was_empty)
        pthread_cond_signal(&s->wake);
    pthread_mutex_unlock(&fake_lock);
    free(items);
    return FAKE_E_OK;
}

int fake_graphs_live(bool executable)
{
    return executable ? fake_live_execs : fake_live_graphs;
}
