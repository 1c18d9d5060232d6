/* A stress program for the hazard records (csrc/core/hazard.c) on the CPU
 * backend, without Python: threads copy between buffers over shared,
 * sometimes gated, queues, and check that every read sees the last write
 * the records order it after (SPEC §12.6).
 *
 *   hazard_stress [seconds] [threads]      (defaults: 5 s, 4 threads)
 *
 * Built plain, with ThreadSanitizer and with ASan+UBSan by
 * tests/test_core_stress.py.  Each thread owns a chain of buffers bound to
 * queues shared with the other threads, and runs rounds: the round's value
 * is written into the first buffer (a host write, or an upload from a
 * staging buffer through a copy), copied along the chain (each copy bound
 * to another queue, so only the records link them), sometimes behind a
 * gate that a signaller thread opens later, and read back at the end with
 * a host read, which must see the round's value.  Meanwhile the threads
 * also copy into and out of one buffer they all share, declare reads and
 * writes with stamps of recorded completions, and read and write it from
 * the host: the values there are not checked (the writers race, as the
 * program lets them), but TSan checks the records' own synchronization and
 * ASan the lifetime of completions, items and memory.  Prints counts and
 * "hazard stress passed", or the failures and exits with status 1. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "memory.h"
#include "mxd.h"

enum { MAX_THREADS = 16, CHAIN = 4, QUEUES = 6, ELEMENTS = 64 };

static atomic_long failures;

#define FAIL(...)                                                              \
    do {                                                                       \
        if (atomic_fetch_add(&failures, 1) < 25) {                             \
            fprintf(stderr, "hazard_stress: %s:%d: ", __FILE__, __LINE__);     \
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

static atomic_long rounds, gated_rounds, shared_ops, stamps;
static atomic_bool stop;
static mxd_queue *queues[QUEUES];
static mxd_device *cpu;

/* Gates opened by the signaller thread a little later. */
static pthread_mutex_t gates_mu = PTHREAD_MUTEX_INITIALIZER;
static mxd_flag *pending_gates[256];
static int npending;

static void *runner_enter(void)
{
    static int token;
    return &token;
}

static void runner_leave(void *token)
{
    (void)token;
}

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* A buffer: one int32 storage of ELEMENTS, bound to a queue. */
typedef struct buffer {
    mxd_memory *memory;
    mxd_queue *queue;
    int64_t shape[1], strides[1];
} buffer;

static mxd_view view_of(buffer *b)
{
    return (mxd_view){
        b->memory, b->queue, {1, b->shape, b->strides, 0, 4, 4 * ELEMENTS}};
}

static void make(buffer *b, mxd_queue *q)
{
    mxd_error err;
    b->queue = q;
    b->shape[0] = ELEMENTS;
    b->strides[0] = 1;
    OK(mxd_memory_alloc(q, 4 * ELEMENTS, 0, &b->memory, &err), &err);
}

/* The same storage bound to another queue (Buffer.to(stream)). */
static buffer rebound(buffer *b, mxd_queue *q)
{
    buffer out = *b;
    out.queue = q;
    mxd_memory_retain(b->memory);
    return out;
}

static void gate(mxd_queue *q)
{
    mxd_error err;
    mxd_flag *flag;
    OK(mxd_flag_create(cpu, &flag, &err), &err);
    OK(mxd_queue_wait_value(q, flag, 1, &err), &err);
    pthread_mutex_lock(&gates_mu);
    if (npending < 256) {
        pending_gates[npending++] = flag;
        flag = NULL;
    }
    pthread_mutex_unlock(&gates_mu);
    if (flag) { /* no room: open it now */
        mxd_flag_signal(flag, 1);
        mxd_flag_release(flag);
    }
}

static void *signaller(void *unused)
{
    (void)unused;
    while (!atomic_load(&stop)) {
        usleep(2000);
        pthread_mutex_lock(&gates_mu);
        int n = npending;
        mxd_flag *open[256];
        memcpy(open, pending_gates, (size_t)n * sizeof *open);
        npending = 0;
        pthread_mutex_unlock(&gates_mu);
        for (int i = 0; i < n; i++) {
            mxd_flag_signal(open[i], 1);
            mxd_flag_release(open[i]);
        }
    }
    return NULL;
}

static unsigned next_rand(unsigned *s)
{
    *s = *s * 1103515245u + 12345u;
    return *s >> 8;
}

/* The round's value into the chain's first buffer: a host write of every
 * element, or a copy from a staging buffer written on the host. */
static void write_first(buffer *first, int32_t value, unsigned *seed)
{
    mxd_error err;
    int32_t values[ELEMENTS];
    for (int i = 0; i < ELEMENTS; i++)
        values[i] = value;
    mxd_view v = view_of(first);
    if (next_rand(seed) % 2) {
        OK(mxd_write_host(&v, values, NULL, &err), &err);
        return;
    }
    buffer staging;
    make(&staging, queues[next_rand(seed) % QUEUES]);
    mxd_view s = view_of(&staging);
    OK(mxd_write_host(&s, values, NULL, &err), &err);
    OK(mxd_copy(&v, &s, NULL, &err), &err);
    mxd_memory_release(staging.memory); /* the copy keeps what it needs */
}

static void check_last(buffer *last, int32_t value)
{
    mxd_error err;
    int32_t got[ELEMENTS];
    mxd_view v = view_of(last);
    OK(mxd_read_host(&v, got, NULL, &err), &err);
    for (int i = 0; i < ELEMENTS; i++)
        if (got[i] != value) {
            FAIL("element %d holds %d, the round wrote %d", i, got[i], value);
            return;
        }
}

/* A round over the thread's chain: buffers bound to queues the other
 * threads use too; each copy through an alias on yet another queue. */
static void chain_round(buffer *chain, int32_t value, unsigned *seed)
{
    mxd_error err;
    if (next_rand(seed) % 4 == 0) {
        gate(chain[0].queue);
        atomic_fetch_add(&gated_rounds, 1);
    }
    write_first(&chain[0], value, seed);
    for (int i = 1; i < CHAIN; i++) {
        buffer dst = rebound(&chain[i], queues[next_rand(seed) % QUEUES]);
        mxd_view d = view_of(&dst), s = view_of(&chain[i - 1]);
        OK(mxd_copy(&d, &s, NULL, &err), &err);
        mxd_memory_release(dst.memory);
    }
    check_last(&chain[CHAIN - 1], value);
    atomic_fetch_add(&rounds, 1);
}

/* Unchecked traffic on the shared buffer: copies in and out, stamps, host
 * reads and writes. */
static void shared_op(buffer *shared, buffer *mine, unsigned *seed)
{
    mxd_error err;
    buffer here = rebound(shared, queues[next_rand(seed) % QUEUES]);
    mxd_view sv = view_of(&here), mv = view_of(mine);
    int32_t values[ELEMENTS] = {0};
    mxd_completion *c = NULL;
    switch (next_rand(seed) % 5) {
    case 0: OK(mxd_copy(&sv, &mv, NULL, &err), &err); break;
    case 1: OK(mxd_copy(&mv, &sv, NULL, &err), &err); break;
    case 2: OK(mxd_read_host(&sv, values, NULL, &err), &err); break;
    case 3: OK(mxd_write_host(&sv, values, NULL, &err), &err); break;
    default:
        OK(mxd_completion_record_on(here.queue, &c, &err), &err);
        if (c) {
            mxd_memory_stamp(here.memory, c, next_rand(seed) % 2);
            mxd_completion_release(c);
            atomic_fetch_add(&stamps, 1);
        }
    }
    mxd_memory_release(here.memory);
    atomic_fetch_add(&shared_ops, 1);
}

typedef struct worker_args {
    int id;
    buffer *shared;
    double seconds;
} worker_args;

static void *worker(void *arg)
{
    worker_args *a = arg;
    unsigned seed = 0x9e3779b9u * (unsigned)(a->id + 1);
    buffer chain[CHAIN], mine;
    for (int i = 0; i < CHAIN; i++)
        make(&chain[i], queues[(a->id + i) % QUEUES]);
    make(&mine, queues[a->id % QUEUES]);
    int64_t end = now_ns() + (int64_t)(a->seconds * 1e9);
    for (int32_t value = a->id * 1000000; now_ns() < end; value++) {
        chain_round(chain, value, &seed);
        shared_op(a->shared, &mine, &seed);
    }
    for (int i = 0; i < CHAIN; i++)
        mxd_memory_release(chain[i].memory);
    mxd_memory_release(mine.memory);
    return NULL;
}

int main(int argc, char **argv)
{
    double seconds = argc > 1 ? atof(argv[1]) : 5.0;
    int nthreads = argc > 2 ? atoi(argv[2]) : 4;
    if (nthreads < 1 || nthreads > MAX_THREADS)
        nthreads = 4;
    mxd_error err;
    mxd_host_runner runner = {runner_enter, runner_leave, NULL};
    OK(mxd_init(&runner, &err), &err);
    cpu = mxd_cpu();
    for (int i = 0; i < QUEUES; i++)
        OK(mxd_queue_create(cpu, &queues[i], &err), &err);
    buffer shared;
    make(&shared, queues[0]);
    pthread_t sig, threads[MAX_THREADS];
    worker_args args[MAX_THREADS];
    pthread_create(&sig, NULL, signaller, NULL);
    for (int i = 0; i < nthreads; i++) {
        args[i] = (worker_args){i, &shared, seconds};
        pthread_create(&threads[i], NULL, worker, &args[i]);
    }
    for (int i = 0; i < nthreads; i++)
        pthread_join(threads[i], NULL);
    atomic_store(&stop, true);
    pthread_join(sig, NULL);
    for (int i = 0; i < npending; i++) { /* the last gates */
        mxd_flag_signal(pending_gates[i], 1);
        mxd_flag_release(pending_gates[i]);
    }
    mxd_wait forever = {-1, NULL, NULL};
    OK(mxd_device_synchronize(cpu, &forever, &err), &err);
    mxd_memory_release(shared.memory);
    for (int i = 0; i < QUEUES; i++)
        mxd_queue_release(queues[i]);
    mxd_shutdown();
    printf("rounds=%ld gated_rounds=%ld shared_ops=%ld stamps=%ld\n",
           atomic_load(&rounds), atomic_load(&gated_rounds),
           atomic_load(&shared_ops), atomic_load(&stamps));
    if (atomic_load(&failures)) {
        printf("hazard stress FAILED (%ld failures)\n", atomic_load(&failures));
        return 1;
    }
    printf("hazard stress passed\n");
    return 0;
}
