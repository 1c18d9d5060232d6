/* Tests of the C core without Python, run by tests/test_core.py (also under
 * ThreadSanitizer when the compiler supports it).  Each check prints what
 * failed and exits non-zero. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mxd.h"

static mxd_error err;
static const mxd_wait forever = {.timeout = -1};
static const mxd_wait briefly = {.timeout = 0.05};

#define CHECK(cond)                                                            \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "%s:%d: check failed: %s (last error: %s)\n",      \
                    __FILE__, __LINE__, #cond, err.message);                   \
            exit(1);                                                           \
        }                                                                      \
    } while (0)
#define OK(call) CHECK((call) == MXD_OK)

/* A log of host-function runs, to check their order. */
static atomic_int log_items[4096];
static atomic_int log_len;

static void log_run(void *data)
{
    atomic_store(&log_items[atomic_fetch_add(&log_len, 1)],
                 (int)(intptr_t)data);
}

static void nothing(void *data)
{
    (void)data;
}

static mxd_host_fn logger(int value)
{
    return (mxd_host_fn){log_run, nothing, (void *)(intptr_t)value, NULL};
}

static void reset_log(void)
{
    atomic_store(&log_len, 0);
}

static mxd_queue *new_queue(void)
{
    mxd_queue *q;
    OK(mxd_queue_create(mxd_cpu(), &q, &err));
    return q;
}

static mxd_flag *new_flag(void)
{
    mxd_flag *f;
    OK(mxd_flag_create(mxd_cpu(), &f, &err));
    return f;
}

static void test_order_on_one_queue(void)
{
    reset_log();
    mxd_queue *q = new_queue();
    for (int i = 0; i < 1000; i++)
        OK(mxd_queue_host_fn(q, logger(i), &err));
    OK(mxd_queue_synchronize(q, &forever, &err));
    CHECK(atomic_load(&log_len) == 1000);
    for (int i = 0; i < 1000; i++)
        CHECK(atomic_load(&log_items[i]) == i);
    mxd_queue_release(q);
}

/* Two gated queues released in reverse order complete in release order,
 * which only happens when they run concurrently. */
static void test_queues_overlap(void)
{
    reset_log();
    mxd_queue *a = new_queue(), *b = new_queue();
    mxd_flag *fa = new_flag(), *fb = new_flag();
    OK(mxd_queue_wait_value(a, fa, 1, &err));
    OK(mxd_queue_host_fn(a, logger(1), &err));
    OK(mxd_queue_wait_value(b, fb, 1, &err));
    OK(mxd_queue_host_fn(b, logger(2), &err));
    CHECK(mxd_queue_synchronize(a, &briefly, &err) == MXD_TIMEOUT);
    mxd_flag_signal(fb, 1);
    OK(mxd_queue_synchronize(b, &forever, &err));
    mxd_flag_signal(fa, 1);
    OK(mxd_queue_synchronize(a, &forever, &err));
    CHECK(atomic_load(&log_items[0]) == 2 && atomic_load(&log_items[1]) == 1);
    mxd_flag_release(fa);
    mxd_flag_release(fb);
    mxd_queue_release(a);
    mxd_queue_release(b);
}

static void test_cross_queue_wait_and_events(void)
{
    reset_log();
    mxd_queue *a = new_queue(), *b = new_queue();
    mxd_flag *gate = new_flag();
    mxd_event_storage ev_storage;
    mxd_event *ev;
    OK(mxd_event_init(&ev_storage, mxd_cpu(), false, &ev, &err));
    bool ready;
    OK(mxd_event_query(ev, &ready, &err));
    CHECK(ready); /* unrecorded */
    OK(mxd_queue_wait_value(a, gate, 5, &err));
    OK(mxd_queue_host_fn(a, logger(1), &err));
    OK(mxd_queue_record(a, ev, &err));
    OK(mxd_queue_wait_event(b, ev, &err));
    /* Re-recording after the wait does not change what b waits for. */
    OK(mxd_queue_host_fn(a, logger(9), &err));
    OK(mxd_queue_record(a, ev, &err));
    OK(mxd_queue_host_fn(b, logger(2), &err));
    OK(mxd_event_query(ev, &ready, &err));
    CHECK(!ready);
    CHECK(mxd_event_synchronize(ev, &briefly, &err) == MXD_TIMEOUT);
    mxd_flag_signal(gate, 5);
    OK(mxd_device_synchronize(mxd_cpu(), &forever, &err));
    CHECK(atomic_load(&log_len) == 3);
    CHECK(atomic_load(&log_items[0]) == 1);
    mxd_event_fini(ev);
    mxd_flag_release(gate);
    mxd_queue_release(a);
    mxd_queue_release(b);
}

static void test_event_timing(void)
{
    mxd_queue *q = new_queue();
    mxd_flag *gate = new_flag();
    mxd_event_storage storage[2];
    mxd_event *start, *end;
    OK(mxd_event_init(&storage[0], mxd_cpu(), true, &start, &err));
    OK(mxd_event_init(&storage[1], mxd_cpu(), true, &end, &err));
    double ms;
    CHECK(mxd_event_elapsed(start, end, &ms, &err) == MXD_UNAVAILABLE);
    OK(mxd_queue_record(q, start, &err));
    OK(mxd_queue_wait_value(q, gate, 1, &err));
    OK(mxd_queue_record(q, end, &err));
    CHECK(mxd_event_elapsed(start, end, &ms, &err) == MXD_UNAVAILABLE);
    usleep(20 * 1000);
    mxd_flag_signal(gate, 1);
    OK(mxd_event_synchronize(end, &forever, &err));
    OK(mxd_event_elapsed(start, end, &ms, &err));
    CHECK(ms >= 19.0 && ms < 10000.0);
    mxd_event_fini(start);
    mxd_event_fini(end);
    mxd_flag_release(gate);
    mxd_queue_release(q);
}

/* Dropping every reference right after enqueueing loses nothing. */
static void test_released_queue_still_runs(void)
{
    reset_log();
    mxd_flag *gate = new_flag(), *done = new_flag();
    mxd_queue *q = new_queue();
    OK(mxd_queue_wait_value(q, gate, 1, &err));
    OK(mxd_queue_host_fn(q, logger(7), &err));
    mxd_queue *q2 = new_queue();
    OK(mxd_queue_async_host_fn(q2, logger(8), done, 3, &err));
    mxd_queue_release(q);
    mxd_queue_release(q2);
    mxd_flag_signal(gate, 1);
    mxd_flag_release(gate);
    while (mxd_flag_load(done) != 3)
        usleep(100);
    OK(mxd_device_synchronize(mxd_cpu(), &forever, &err));
    CHECK(atomic_load(&log_len) == 2);
    mxd_flag_release(done);
}

/* Many queues each blocked on the next one all make progress. */
static void test_many_queues_progress(void)
{
    enum { N = 300 };
    static mxd_queue *queues[N];
    static mxd_flag *flags[N];
    for (int i = 0; i < N; i++) {
        queues[i] = new_queue();
        flags[i] = new_flag();
    }
    for (int i = 0; i < N; i++) {
        if (i + 1 < N)
            OK(mxd_queue_wait_value(queues[i], flags[i + 1], 1, &err));
        OK(mxd_queue_async_host_fn(queues[i],
                                   (mxd_host_fn){nothing, nothing, NULL, NULL},
                                   flags[i], 1, &err));
    }
    OK(mxd_device_synchronize(mxd_cpu(), &forever, &err));
    for (int i = 0; i < N; i++) {
        while (mxd_flag_load(flags[i]) != 1)
            usleep(100);
        mxd_queue_release(queues[i]);
        mxd_flag_release(flags[i]);
    }
}

/* Several threads enqueue on shared queues at once. */
static mxd_queue *shared[4];

static void *hammer(void *arg)
{
    (void)arg;
    mxd_error local;
    mxd_event_storage storage;
    mxd_event *ev;
    if (mxd_event_init(&storage, mxd_cpu(), false, &ev, &local))
        return NULL;
    for (int i = 0; i < 2000; i++) {
        mxd_queue *q = shared[i % 4], *other = shared[(i + 1) % 4];
        mxd_queue_host_fn(q, (mxd_host_fn){nothing, nothing, NULL, NULL},
                          &local);
        mxd_queue_record(q, ev, &local);
        mxd_queue_wait_event(other, ev, &local);
        mxd_queue_wait_queue(q, other, &local);
        bool ready;
        mxd_event_query(ev, &ready, &local);
    }
    mxd_event_fini(ev);
    return NULL;
}

static void test_threads_share_queues(void)
{
    for (int i = 0; i < 4; i++)
        shared[i] = new_queue();
    pthread_t threads[4];
    for (int i = 0; i < 4; i++)
        CHECK(pthread_create(&threads[i], NULL, hammer, NULL) == 0);
    for (int i = 0; i < 4; i++)
        pthread_join(threads[i], NULL);
    OK(mxd_device_synchronize(mxd_cpu(), &forever, &err));
    for (int i = 0; i < 4; i++) {
        CHECK(mxd_queue_is_idle(shared[i]));
        mxd_queue_release(shared[i]);
    }
}

int main(void)
{
    mxd_host_runner runner = {0};
    OK(mxd_init(&runner, &err));
    CHECK(mxd_accelerator_count() == 0);
    test_order_on_one_queue();
    test_queues_overlap();
    test_cross_queue_wait_and_events();
    test_event_timing();
    test_released_queue_still_runs();
    test_many_queues_progress();
    test_threads_share_queues();
    puts("core tests passed");
    return 0;
}
