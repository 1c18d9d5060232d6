/* A stress program for the C core's CPU backend, without Python: many
 * threads use shared and private queues at once with every operation the
 * core offers, and the work itself checks the core's promises.
 *
 *   stress [seconds] [threads]      (defaults: 5 s, 8 threads)
 *
 * Built plain, with ThreadSanitizer and with ASan+UBSan by
 * tests/test_core_stress.py.  Checked while it runs:
 *   - host functions run in enqueue order per queue and producing thread,
 *     inside the registered runner, never nested in it;
 *   - work after wait_for(event / queue / async host function) sees the
 *     writes of the work it waited for (plain writes, so that TSan checks
 *     the happens-before edge as well as the value);
 *   - work gated on a completion flag never runs before the flag's signal;
 *   - a host function cannot wait for its own queue (MXD_INVALID);
 *   - every wait expected to finish does so within a generous bound (a
 *     lost wake-up shows as a timeout), and a watchdog turns a hang into a
 *     failure with the counts so far;
 *   - at the end everything enqueued has run (or, after mxd_shutdown, been
 *     discarded), and every object was freed (LeakSanitizer in ASan builds).
 * Prints one line of counts and "stress passed", or the failures and exits
 * with status 1. */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "mxd.h"

enum {
    MAX_THREADS = 64,
    PRIVATE_QUEUES = 4,
    SHARED_QUEUES = 4, /* [0] is the CPU device's default queue */
    SHARED_EVENTS = 4, /* [2] and [3] measure time */
    SIGNALLERS = 2,
};

/* Any wait that should finish: far beyond any scheduling delay, even under
 * TSan on two cores, so that only a lost wake-up or a deadlock reaches it. */
static double bound_s = 30.0;

/* ---- Failures and counts --------------------------------------------------
 */

static atomic_long failures;

#define FAIL(...)                                                              \
    do {                                                                       \
        if (atomic_fetch_add(&failures, 1) < 25) {                             \
            fprintf(stderr, "stress: %s:%d: ", __FILE__, __LINE__);            \
            fprintf(stderr, __VA_ARGS__);                                      \
            fputc('\n', stderr);                                               \
        }                                                                      \
    } while (0)

#define OK(call, errp)                                                         \
    do {                                                                       \
        mxd_status st_ = (call);                                               \
        if (st_ != MXD_OK)                                                     \
            FAIL("%s returned %d: %s", #call, (int)st_, (errp)->message);      \
    } while (0)

enum counter {
    C_HOST_ENQUEUED,
    C_HOST_RAN,
    C_HOST_DISCARDED,
    C_ASYNC,
    C_GATES,
    C_GATES_DIRECT,
    C_SIGNALS,
    C_EVENT_CHAINS,
    C_RERECORDS,
    C_QUEUE_CHAINS,
    C_QUERIES,
    C_EVENT_SYNCS,
    C_QUEUE_SYNCS,
    C_TIMEOUTS_SEEN,
    C_INTERRUPTS_SEEN,
    C_DEVICE_SYNCS,
    C_QUEUES_CREATED,
    C_QUEUES_DROPPED_BUSY,
    C_SHARED_EVENT_OPS,
    C_ELAPSED_OK,
    C_SELF_WAITS,
    C_RUNNER_ENTERS,
    C_COUNT
};

static const char *const counter_names[C_COUNT] = {
    "host_enqueued",
    "host_ran",
    "host_discarded",
    "async",
    "gates",
    "gates_direct",
    "signals",
    "event_chains",
    "rerecords",
    "queue_chains",
    "queries",
    "event_syncs",
    "queue_syncs",
    "timeouts_seen",
    "interrupts_seen",
    "device_syncs",
    "queues_created",
    "queues_dropped_busy",
    "shared_event_ops",
    "elapsed_ok",
    "self_waits",
    "runner_enters",
};

static atomic_long counts[C_COUNT];

static void count(enum counter c)
{
    atomic_fetch_add_explicit(&counts[c], 1, memory_order_relaxed);
}

static long counted(enum counter c)
{
    return atomic_load(&counts[c]);
}

static atomic_llong longest_wait_ns;

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void note_wait(int64_t start)
{
    long long took = now_ns() - start;
    long long seen = atomic_load(&longest_wait_ns);
    while (took > seen &&
           !atomic_compare_exchange_weak(&longest_wait_ns, &seen, took))
        ;
}

static mxd_wait bounded(void)
{
    return (mxd_wait){.timeout = bound_s};
}

/* ---- Randomness (per thread) ----------------------------------------------
 */

static uint64_t next_random(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static unsigned below(uint64_t *s, unsigned n)
{
    return (unsigned)(next_random(s) % n);
}

/* ---- The host runner: checks that work runs inside it, never nested ----- */

static _Thread_local int in_runner;

static void *runner_enter(void)
{
    if (in_runner)
        FAIL("the runner was entered twice on one thread");
    in_runner = 1;
    count(C_RUNNER_ENTERS);
    return &in_runner;
}

static void runner_leave(void *token)
{
    if (token != &in_runner || !in_runner)
        FAIL("runner leave() without a matching enter()");
    in_runner = 0;
}

static void host_ran(void)
{
    if (!in_runner)
        FAIL("a host function ran outside the runner");
    count(C_HOST_RAN);
}

static mxd_host_fn host(void (*run)(void *), void (*discard)(void *),
                        void *data)
{
    count(C_HOST_ENQUEUED);
    return (mxd_host_fn){run, discard, data, NULL};
}

/* ---- Tracked queues: order of host functions ----------------------------- */

typedef struct tq {
    mxd_queue *q;
    atomic_int refs; /* the owner's and one per pending host function */
    /* produced[t]: host functions thread t enqueued (written by t only);
     * consumed[t]: how many of them ran, written by the host functions,
     * which the queue runs one at a time. */
    long produced[MAX_THREADS];
    long consumed[MAX_THREADS];
} tq;

static tq *tq_wrap(mxd_queue *q)
{
    tq *t = calloc(1, sizeof *t);
    if (!t) {
        FAIL("out of memory");
        exit(1);
    }
    t->q = q;
    atomic_init(&t->refs, 1);
    return t;
}

static tq *tq_new(mxd_error *err)
{
    mxd_queue *q = NULL;
    OK(mxd_queue_create(mxd_cpu(), &q, err), err);
    if (!q)
        exit(1);
    count(C_QUEUES_CREATED);
    return tq_wrap(q);
}

static void tq_unref(tq *t)
{
    if (atomic_fetch_sub(&t->refs, 1) != 1)
        return;
    for (int i = 0; i < MAX_THREADS; i++)
        if (t->consumed[i] != t->produced[i])
            FAIL("queue %p: thread %d enqueued %ld host functions, %ld ran",
                 (void *)t, i, t->produced[i], t->consumed[i]);
    free(t);
}

typedef struct order_item {
    tq *t;
    int thread;
    long seq;
} order_item;

static void order_step(order_item *o)
{
    long want = o->t->consumed[o->thread] + 1;
    if (o->seq != want)
        FAIL("queue %p ran host function %ld of thread %d, expected %ld",
             (void *)o->t, o->seq, o->thread, want);
    o->t->consumed[o->thread] = o->seq;
    tq_unref(o->t);
    free(o);
}

static void order_run(void *data)
{
    host_ran();
    order_step(data);
}

static void order_discard(void *data)
{
    count(C_HOST_DISCARDED);
    order_step(data);
}

static void enqueue_ordered(tq *t, int thread, mxd_error *err)
{
    order_item *o = malloc(sizeof *o);
    if (!o) {
        FAIL("out of memory");
        return;
    }
    atomic_fetch_add(&t->refs, 1);
    o->t = t;
    o->thread = thread;
    o->seq = ++t->produced[thread];
    OK(mxd_queue_host_fn(t->q, host(order_run, order_discard, o), err), err);
}

/* ---- Tokens: "this work ran" marks checked by later work ------------------
 */

typedef struct token {
    atomic_int refs;
    int done; /* plain on purpose: TSan checks the ordering edge */
    const char *what;
} token;

static token *token_new(int refs, const char *what)
{
    token *k = malloc(sizeof *k);
    if (!k) {
        FAIL("out of memory");
        exit(1);
    }
    atomic_init(&k->refs, refs);
    k->done = 0;
    k->what = what;
    return k;
}

static void token_unref(token *k)
{
    if (atomic_fetch_sub(&k->refs, 1) == 1)
        free(k);
}

static void mark_run(void *data)
{
    host_ran();
    token *k = data;
    k->done = 1;
    token_unref(k);
}

static void check_run(void *data)
{
    host_ran();
    token *k = data;
    if (!k->done)
        FAIL("work ordered after %s ran before it", k->what);
    token_unref(k);
}

static void token_discard(void *data)
{
    count(C_HOST_DISCARDED);
    token_unref(data);
}

static void enqueue_mark(mxd_queue *q, token *k, mxd_error *err)
{
    OK(mxd_queue_host_fn(q, host(mark_run, token_discard, k), err), err);
}

static void enqueue_check(mxd_queue *q, token *k, mxd_error *err)
{
    OK(mxd_queue_host_fn(q, host(check_run, token_discard, k), err), err);
}

/* ---- Gates: flags signalled later by other threads ------------------------
 */

typedef struct gate {
    atomic_int refs;
    mxd_flag *flag; /* the gate holds the only reference outside the core */
    uint64_t value;
    int signalled; /* plain: written before the signal, read by gated work */
    int direct;    /* store to the slot's address instead of signal() */
    int64_t due_ns;
    struct gate *next; /* in the mailbox */
} gate;

static struct {
    pthread_mutex_t mu;
    gate *head;
    long pending;
} mailbox = {.mu = PTHREAD_MUTEX_INITIALIZER};

static void gate_unref(gate *g)
{
    if (atomic_fetch_sub(&g->refs, 1) != 1)
        return;
    mxd_flag_release(g->flag); /* often the last reference */
    free(g);
}

static void gated_run(void *data)
{
    host_ran();
    gate *g = data;
    if (!g->signalled)
        FAIL("work gated on a flag ran before the flag was signalled");
    gate_unref(g);
}

static void gate_discard(void *data)
{
    count(C_HOST_DISCARDED);
    gate_unref(data);
}

/* Gates `nq` queues on a new flag that another thread signals after
 * `delay_us`; each queue gets a host function that checks the order. */
static void gate_queues(mxd_queue **qs, int nq, int64_t delay_us, int direct,
                        uint64_t value, mxd_error *err)
{
    gate *g = calloc(1, sizeof *g);
    if (!g) {
        FAIL("out of memory");
        return;
    }
    OK(mxd_flag_create(mxd_cpu(), &g->flag, err), err);
    if (!g->flag) {
        free(g);
        return;
    }
    atomic_init(&g->refs, 1 + nq);
    g->value = value;
    g->direct = direct;
    for (int i = 0; i < nq; i++) {
        OK(mxd_queue_wait_value(qs[i], g->flag, value, err), err);
        OK(mxd_queue_host_fn(qs[i], host(gated_run, gate_discard, g), err),
           err);
    }
    count(C_GATES);
    if (direct)
        count(C_GATES_DIRECT);
    g->due_ns = now_ns() + delay_us * 1000;
    pthread_mutex_lock(&mailbox.mu);
    g->next = mailbox.head;
    mailbox.head = g;
    mailbox.pending++;
    pthread_mutex_unlock(&mailbox.mu);
}

/* Signals the gates that are due (all of them when `all`); returns how many
 * are still pending. */
static long signal_due(int all)
{
    int64_t now = now_ns();
    gate *due = NULL;
    pthread_mutex_lock(&mailbox.mu);
    for (gate **p = &mailbox.head; *p;) {
        gate *g = *p;
        if (all || g->due_ns <= now) {
            *p = g->next;
            g->next = due;
            due = g;
            mailbox.pending--;
        } else {
            p = &g->next;
        }
    }
    long left = mailbox.pending;
    pthread_mutex_unlock(&mailbox.mu);
    while (due) {
        gate *g = due;
        due = g->next;
        g->signalled = 1;
        if (g->direct) /* as ctypes would: no notification */
            atomic_store((_Atomic uint64_t *)mxd_flag_device_ptr(g->flag),
                         g->value);
        else
            mxd_flag_signal(g->flag, g->value);
        count(C_SIGNALS);
        gate_unref(g);
    }
    return left;
}

static atomic_bool stopping;

static void *signaller_main(void *arg)
{
    (void)arg;
    while (!atomic_load(&stopping)) {
        signal_due(0);
        usleep(200);
    }
    return NULL;
}

/* ---- Async host functions --------------------------------------------------
 */

typedef struct async_item {
    token *before; /* enqueued on the same queue before the kickoff */
    token *after;  /* set here, checked by work gated on the flag */
} async_item;

static void async_run(void *data)
{
    host_ran();
    async_item *a = data;
    if (!a->before->done)
        FAIL("an async host function ran before earlier work on its queue");
    token_unref(a->before);
    a->after->done = 1;
    token_unref(a->after);
    free(a);
}

static void async_discard(void *data)
{
    count(C_HOST_DISCARDED);
    async_item *a = data;
    token_unref(a->before);
    a->after->done = 1; /* the flag is signalled anyway */
    token_unref(a->after);
    free(a);
}

/* ---- Self-wait: a host function may not wait for its own queue ---------- */

typedef struct self_wait {
    mxd_queue *q; /* retained */
} self_wait;

static void self_wait_run(void *data)
{
    host_ran();
    self_wait *s = data;
    mxd_error err;
    mxd_wait zero = {.timeout = 0};
    mxd_status st = mxd_queue_synchronize(s->q, &zero, &err);
    if (st != MXD_INVALID)
        FAIL("a host function waiting for its own queue got %d, expected "
             "MXD_INVALID",
             (int)st);
    count(C_SELF_WAITS);
    mxd_queue_release(s->q);
    free(s);
}

static void self_wait_discard(void *data)
{
    count(C_HOST_DISCARDED);
    self_wait *s = data;
    mxd_queue_release(s->q);
    free(s);
}

/* A host function that takes a little time (for timing events). */
static void busy_run(void *data)
{
    host_ran();
    (void)data;
    usleep(200);
}

static void nothing_discard(void *data)
{
    (void)data;
    count(C_HOST_DISCARDED);
}

/* ---- Shared objects --------------------------------------------------------
 */

static tq *shared_q[SHARED_QUEUES];
static mxd_event_storage shared_ev_storage[SHARED_EVENTS];
static mxd_event *shared_ev[SHARED_EVENTS];

static int poll_stop(void *ctx)
{
    (void)ctx;
    return 1; /* interrupt at the first slice boundary */
}

/* ---- The workers -----------------------------------------------------------
 */

typedef struct worker {
    int id;
    uint64_t rng;
    pthread_t thread;
    tq *priv[PRIVATE_QUEUES];
    mxd_event_storage ev_storage[3];
    mxd_event *ev[3]; /* [0], [1]: plain; [2]: timing */
    mxd_event_storage tm_storage[2];
    mxd_event *tm[2]; /* timing pair */
} worker;

static int64_t deadline_ns;

static tq *pick_queue(worker *w)
{
    if (below(&w->rng, 3) == 0)
        return shared_q[below(&w->rng, SHARED_QUEUES)];
    return w->priv[below(&w->rng, PRIVATE_QUEUES)];
}

static tq *pick_private(worker *w)
{
    return w->priv[below(&w->rng, PRIVATE_QUEUES)];
}

/* Synchronizes a private queue; everything this thread enqueued there has
 * run afterwards. */
static void sync_private(worker *w, tq *t, mxd_error *err)
{
    mxd_wait wait = bounded();
    int64_t start = now_ns();
    mxd_status st = mxd_queue_synchronize(t->q, &wait, err);
    note_wait(start);
    count(C_QUEUE_SYNCS);
    if (st != MXD_OK) {
        FAIL("synchronize of a private queue: status %d (%s)", (int)st,
             err->message);
        return;
    }
    if (!mxd_queue_is_idle(t->q))
        FAIL("a private queue is not idle after synchronize");
    if (t->consumed[w->id] != t->produced[w->id])
        FAIL("after synchronize %ld of %ld host functions ran",
             t->consumed[w->id], t->produced[w->id]);
}

static void op_order(worker *w, mxd_error *err)
{
    tq *t = pick_queue(w);
    int n = 1 + (int)below(&w->rng, 8);
    for (int i = 0; i < n; i++)
        enqueue_ordered(t, w->id, err);
}

static void op_gate(worker *w, mxd_error *err)
{
    mxd_queue *qs[2] = {pick_queue(w)->q, pick_queue(w)->q};
    int nq = (qs[0] == qs[1]) ? 1 : 1 + (int)below(&w->rng, 2);
    int direct = below(&w->rng, 32) == 0; /* waits for the 50 ms re-check */
    gate_queues(qs, nq, below(&w->rng, 3000), direct, 1 + below(&w->rng, 1000),
                err);
    if (below(&w->rng, 4) == 0)
        signal_due(0); /* workers signal too, not only the signallers */
}

/* mark on A, record ev on A, B waits for ev, check on B; sometimes the
 * event is re-recorded and a second queue waits for the new point. */
static void op_event_chain(worker *w, mxd_error *err)
{
    tq *a = pick_queue(w), *b = pick_queue(w);
    mxd_event *ev = w->ev[below(&w->rng, 3)];
    token *k = token_new(2, "an event's recorded work");
    enqueue_mark(a->q, k, err);
    OK(mxd_queue_record(a->q, ev, err), err);
    OK(mxd_queue_wait_event(b->q, ev, err), err);
    enqueue_check(b->q, k, err);
    count(C_EVENT_CHAINS);
    if (below(&w->rng, 2)) {
        tq *c = pick_queue(w);
        token *k2 = token_new(2, "a re-recorded event's work");
        enqueue_mark(a->q, k2, err);
        OK(mxd_queue_record(a->q, ev, err), err);
        OK(mxd_queue_wait_event(c->q, ev, err), err);
        enqueue_check(c->q, k2, err);
        count(C_RERECORDS);
    }
}

static void op_queue_chain(worker *w, mxd_error *err)
{
    tq *a = pick_queue(w), *b = pick_queue(w);
    token *k = token_new(2, "a waited-for queue's work");
    enqueue_mark(a->q, k, err);
    OK(mxd_queue_wait_queue(b->q, a->q, err), err);
    enqueue_check(b->q, k, err);
    count(C_QUEUE_CHAINS);
}

static void op_async(worker *w, mxd_error *err)
{
    tq *a = pick_queue(w), *b = pick_queue(w);
    token *before = token_new(2, "work before an async host function");
    token *after = token_new(2, "an async host function");
    async_item *item = malloc(sizeof *item);
    mxd_flag *flag = NULL;
    OK(mxd_flag_create(mxd_cpu(), &flag, err), err);
    if (!item || !flag) {
        FAIL("out of memory");
        exit(1);
    }
    item->before = before;
    item->after = after;
    uint64_t value = 1 + below(&w->rng, 100);
    enqueue_mark(a->q, before, err);
    OK(mxd_queue_async_host_fn(a->q, host(async_run, async_discard, item), flag,
                               value, err),
       err);
    OK(mxd_queue_wait_value(b->q, flag, value, err), err);
    enqueue_check(b->q, after, err);
    mxd_flag_release(flag); /* still referenced by the kickoff and the wait */
    count(C_ASYNC);
}

/* Record after a mark on a private queue, then query / synchronize the
 * event from this thread and read the mark directly. */
static void op_event_sync(worker *w, mxd_error *err)
{
    tq *t = pick_private(w);
    mxd_event *ev = w->ev[below(&w->rng, 3)];
    token *k = token_new(2, "work before a synchronized event");
    atomic_fetch_add(&k->refs, 1); /* ours, for the direct read */
    enqueue_mark(t->q, k, err);
    OK(mxd_queue_record(t->q, ev, err), err);
    bool ready = false;
    OK(mxd_event_query(ev, &ready, err), err);
    count(C_QUERIES);
    if (ready && !k->done)
        FAIL("an event reports ready before the work it follows ran");
    mxd_wait wait = bounded();
    int64_t start = now_ns();
    mxd_status st = mxd_event_synchronize(ev, &wait, err);
    note_wait(start);
    count(C_EVENT_SYNCS);
    if (st != MXD_OK)
        FAIL("event synchronize: status %d (%s)", (int)st, err->message);
    else if (!k->done)
        FAIL("event synchronize returned before the work it follows ran");
    token_unref(k); /* the check's reference: not enqueued */
    token_unref(k);
}

/* Short timeouts on a gated private queue, then a bounded wait. */
static void op_sync_timeout(worker *w, mxd_error *err)
{
    tq *t = pick_private(w);
    mxd_queue *q = t->q;
    enqueue_ordered(t, w->id, err);
    gate_queues(&q, 1, 5000 + below(&w->rng, 10000), 0, 7, err);
    enqueue_ordered(t, w->id, err);
    mxd_wait brief = {.timeout = 0.001};
    mxd_status st = mxd_queue_synchronize(q, &brief, err);
    if (st == MXD_TIMEOUT)
        count(C_TIMEOUTS_SEEN);
    else if (st != MXD_OK)
        FAIL("synchronize(timeout=1ms): status %d (%s)", (int)st, err->message);
    sync_private(w, t, err);
}

/* A poll callback that asks to stop interrupts a wait on a gated queue. */
static void op_interrupt(worker *w, mxd_error *err)
{
    tq *t = pick_private(w);
    mxd_queue *q = t->q;
    gate_queues(&q, 1, 60000, 0, 3, err);
    mxd_wait wait = {.timeout = bound_s, .poll = poll_stop};
    mxd_status st = mxd_queue_synchronize(q, &wait, err);
    if (st == MXD_INTERRUPTED)
        count(C_INTERRUPTS_SEEN);
    else if (st != MXD_OK)
        FAIL("an interrupted synchronize: status %d (%s)", (int)st,
             err->message);
}

static void op_device_sync(worker *w, mxd_error *err)
{
    if (below(&w->rng, 2)) {
        mxd_wait zero = {.timeout = 0};
        mxd_status st = mxd_device_synchronize(mxd_cpu(), &zero, err);
        if (st == MXD_TIMEOUT)
            count(C_TIMEOUTS_SEEN);
        else if (st != MXD_OK)
            FAIL("device synchronize(0): status %d (%s)", (int)st,
                 err->message);
        return;
    }
    mxd_wait wait = bounded();
    int64_t start = now_ns();
    OK(mxd_device_synchronize(mxd_cpu(), &wait, err), err);
    note_wait(start);
    count(C_DEVICE_SYNCS);
}

/* Drops a private queue, often with gated work still pending, and makes a
 * new one. */
static void op_replace(worker *w, mxd_error *err)
{
    int slot = (int)below(&w->rng, PRIVATE_QUEUES);
    tq *t = w->priv[slot];
    if (below(&w->rng, 2)) {
        mxd_queue *q = t->q;
        gate_queues(&q, 1, below(&w->rng, 5000), 0, 1, err);
        for (int i = 0; i < 4; i++)
            enqueue_ordered(t, w->id, err);
        count(C_QUEUES_DROPPED_BUSY);
    }
    mxd_queue_release(t->q); /* the pending work keeps it alive */
    tq_unref(t);
    w->priv[slot] = tq_new(err);
    if (below(&w->rng, 4) == 0) { /* a short-lived queue that does nothing */
        tq *tmp = tq_new(err);
        mxd_queue_release(tmp->q);
        tq_unref(tmp);
    }
}

static void op_shared_events(worker *w, mxd_error *err)
{
    int i = (int)below(&w->rng, SHARED_EVENTS);
    mxd_event *ev = shared_ev[i];
    tq *a = shared_q[below(&w->rng, SHARED_QUEUES)];
    tq *b = shared_q[below(&w->rng, SHARED_QUEUES)];
    bool ready;
    switch (below(&w->rng, 5)) {
    case 0: OK(mxd_queue_record(a->q, ev, err), err); break;
    case 1: OK(mxd_event_query(ev, &ready, err), err); break;
    case 2: OK(mxd_queue_wait_event(b->q, ev, err), err); break;
    case 3: {
        mxd_wait wait = bounded();
        int64_t start = now_ns();
        OK(mxd_event_synchronize(ev, &wait, err), err);
        note_wait(start);
        break;
    }
    case 4: {
        /* Timing events recorded by other threads: either a result or
         * "not recorded / not complete", never garbage. */
        double ms = 0;
        mxd_status st = mxd_event_elapsed(shared_ev[2], shared_ev[3], &ms, err);
        if (st == MXD_OK) {
            if (!isfinite(ms))
                FAIL("elapsed time is not finite");
            count(C_ELAPSED_OK);
        } else if (st != MXD_UNAVAILABLE) {
            FAIL("elapsed: status %d (%s)", (int)st, err->message);
        }
        break;
    }
    }
    count(C_SHARED_EVENT_OPS);
}

static void op_timing(worker *w, mxd_error *err)
{
    tq *t = pick_private(w);
    OK(mxd_queue_record(t->q, w->tm[0], err), err);
    OK(mxd_queue_host_fn(t->q, host(busy_run, nothing_discard, NULL), err),
       err);
    OK(mxd_queue_record(t->q, w->tm[1], err), err);
    mxd_wait wait = bounded();
    OK(mxd_event_synchronize(w->tm[1], &wait, err), err);
    double ms = -1;
    OK(mxd_event_elapsed(w->tm[0], w->tm[1], &ms, err), err);
    if (!(ms >= 0.0 && ms < bound_s * 1000))
        FAIL("elapsed time %g ms around a 0.2 ms host function", ms);
    else
        count(C_ELAPSED_OK);
}

static void op_self_wait(worker *w, mxd_error *err)
{
    tq *t = pick_queue(w);
    self_wait *s = malloc(sizeof *s);
    if (!s) {
        FAIL("out of memory");
        return;
    }
    mxd_queue_retain(t->q);
    s->q = t->q;
    OK(mxd_queue_host_fn(t->q, host(self_wait_run, self_wait_discard, s), err),
       err);
}

static void *worker_main(void *arg)
{
    worker *w = arg;
    mxd_error err;
    memset(&err, 0, sizeof err);
    for (long iter = 0; now_ns() < deadline_ns; iter++) {
        switch (below(&w->rng, 20)) {
        case 0:
        case 1:
        case 2: op_order(w, &err); break;
        case 3:
        case 4: op_gate(w, &err); break;
        case 5:
        case 6: op_event_chain(w, &err); break;
        case 7: op_queue_chain(w, &err); break;
        case 8: op_async(w, &err); break;
        case 9:
        case 10: op_event_sync(w, &err); break;
        case 11: op_sync_timeout(w, &err); break;
        case 12:
            if (below(&w->rng, 8) == 0)
                op_interrupt(w, &err);
            break;
        case 13: op_device_sync(w, &err); break;
        case 14: op_replace(w, &err); break;
        case 15:
        case 16: op_shared_events(w, &err); break;
        case 17: op_timing(w, &err); break;
        case 18: op_self_wait(w, &err); break;
        case 19: sync_private(w, pick_private(w), &err); break;
        }
    }
    return NULL;
}

/* ---- Watchdog
 * ---------------------------------------------------------------- */

static atomic_bool finished;
static double watchdog_s;

static void print_counts(FILE *out)
{
    fprintf(out, "stress counts:");
    for (int i = 0; i < C_COUNT; i++)
        fprintf(out, " %s=%ld", counter_names[i], counted(i));
    fprintf(out, " longest_wait_ms=%.1f\n",
            (double)atomic_load(&longest_wait_ns) / 1e6);
}

static void *watchdog_main(void *arg)
{
    (void)arg;
    int64_t until = now_ns() + (int64_t)(watchdog_s * 1e9);
    while (!atomic_load(&finished)) {
        if (now_ns() > until) {
            fprintf(stderr,
                    "stress: still running %.0f s after the start: a "
                    "wait never finished (lost wake-up or deadlock)\n",
                    watchdog_s);
            print_counts(stderr);
            fflush(stderr);
            _exit(3);
        }
        usleep(100 * 1000);
    }
    return NULL;
}

/* ---- Main
 * -------------------------------------------------------------------- */

int main(int argc, char **argv)
{
    double seconds = argc > 1 ? atof(argv[1]) : 5.0;
    int nthreads = argc > 2 ? atoi(argv[2]) : 8;
    if (nthreads < 1 || nthreads > MAX_THREADS || !(seconds >= 0)) {
        fprintf(stderr, "usage: stress [seconds] [threads <= %d]\n",
                MAX_THREADS);
        return 2;
    }
    mxd_error err;
    memset(&err, 0, sizeof err);
    mxd_host_runner runner = {runner_enter, runner_leave, NULL};
    OK(mxd_init(&runner, &err), &err);
    if (mxd_accelerator_count() != 0)
        FAIL("an accelerator backend was chosen; run with "
             "MAX_DRIVER_BACKEND=cpu");

    watchdog_s = seconds + 3 * bound_s;
    pthread_t watchdog;
    pthread_create(&watchdog, NULL, watchdog_main, NULL);

    shared_q[0] = tq_wrap(mxd_device_default_queue(mxd_cpu(), &err));
    mxd_queue_retain(shared_q[0]->q); /* released like the others */
    for (int i = 1; i < SHARED_QUEUES; i++)
        shared_q[i] = tq_new(&err);
    for (int i = 0; i < SHARED_EVENTS; i++)
        OK(mxd_event_init(&shared_ev_storage[i], mxd_cpu(), i >= 2,
                          &shared_ev[i], &err),
           &err);

    worker *workers = calloc((size_t)nthreads, sizeof *workers);
    pthread_t signallers[SIGNALLERS];
    for (int i = 0; i < SIGNALLERS; i++)
        pthread_create(&signallers[i], NULL, signaller_main, NULL);
    int64_t start = now_ns();
    deadline_ns = start + (int64_t)(seconds * 1e9);
    for (int i = 0; i < nthreads; i++) {
        worker *w = &workers[i];
        w->id = i;
        w->rng = 0x9E3779B97F4A7C15ull * (uint64_t)(i + 1) ^ (uint64_t)start;
        if (!w->rng)
            w->rng = 1;
        for (int j = 0; j < PRIVATE_QUEUES; j++)
            w->priv[j] = tq_new(&err);
        for (int j = 0; j < 3; j++)
            OK(mxd_event_init(&w->ev_storage[j], mxd_cpu(), j == 2, &w->ev[j],
                              &err),
               &err);
        for (int j = 0; j < 2; j++)
            OK(mxd_event_init(&w->tm_storage[j], mxd_cpu(), true, &w->tm[j],
                              &err),
               &err);
        pthread_create(&w->thread, NULL, worker_main, w);
    }
    for (int i = 0; i < nthreads; i++)
        pthread_join(workers[i].thread, NULL);

    /* Release every gate, then everything must finish. */
    atomic_store(&stopping, true);
    for (int i = 0; i < SIGNALLERS; i++)
        pthread_join(signallers[i], NULL);
    signal_due(1);
    mxd_wait wait = bounded();
    OK(mxd_device_synchronize(mxd_cpu(), &wait, &err), &err);
    /* Async host functions run on the pool after their kickoff; the work
     * gated on their flags (now complete) saw them finish. */
    int64_t settle = now_ns() + (int64_t)(bound_s * 1e9);
    while (counted(C_HOST_RAN) + counted(C_HOST_DISCARDED) !=
               counted(C_HOST_ENQUEUED) &&
           now_ns() < settle)
        usleep(1000);
    if (counted(C_HOST_RAN) != counted(C_HOST_ENQUEUED))
        FAIL("%ld host functions enqueued, %ld ran", counted(C_HOST_ENQUEUED),
             counted(C_HOST_RAN));
    double run_s = (double)(now_ns() - start) / 1e9;

    for (int i = 0; i < nthreads; i++) {
        worker *w = &workers[i];
        for (int j = 0; j < PRIVATE_QUEUES; j++) {
            mxd_queue_release(w->priv[j]->q);
            tq_unref(w->priv[j]);
        }
        for (int j = 0; j < 3; j++)
            mxd_event_fini(w->ev[j]);
        for (int j = 0; j < 2; j++)
            mxd_event_fini(w->tm[j]);
    }
    free(workers);

    /* After shutdown, host work that has not started is discarded. */
    long ran_before = counted(C_HOST_RAN);
    long discarded_before = counted(C_HOST_DISCARDED);
    mxd_shutdown();
    tq *last = tq_new(&err);
    for (int i = 0; i < 100; i++)
        enqueue_ordered(last, 0, &err);
    OK(mxd_queue_synchronize(last->q, &wait, &err), &err);
    if (counted(C_HOST_RAN) != ran_before ||
        counted(C_HOST_DISCARDED) != discarded_before + 100)
        FAIL("after mxd_shutdown host functions ran instead of being "
             "discarded (%ld ran, %ld discarded)",
             counted(C_HOST_RAN) - ran_before,
             counted(C_HOST_DISCARDED) - discarded_before);
    mxd_queue_release(last->q);
    tq_unref(last);

    for (int i = 0; i < SHARED_EVENTS; i++)
        mxd_event_fini(shared_ev[i]);
    for (int i = 0; i < SHARED_QUEUES; i++) {
        mxd_queue_release(shared_q[i]->q);
        tq_unref(shared_q[i]);
    }
    atomic_store(&finished, true);
    pthread_join(watchdog, NULL);

    printf("stress: %d threads for %.1f s (%.1f s with the drain)\n", nthreads,
           seconds, run_s);
    print_counts(stdout);
    if (atomic_load(&failures)) {
        printf("stress FAILED: %ld failures\n", atomic_load(&failures));
        return 1;
    }
    puts("stress passed");
    return 0;
}
