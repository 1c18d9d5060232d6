/* Minimal reproducer of two races on timing events in csrc/backends/cpu.c,
 * found by tests/core/stress.c under ThreadSanitizer.  Build and run:
 *
 *   cc -std=c11 -D_GNU_SOURCE -g -O1 -fsanitize=thread -Icsrc/core
 * -Icsrc/backends \
 *      csrc/core/[a-z]*.c csrc/backends/[a-z]*.c
 * tests/core/repro_timing_races.c -o repro \ -pthread -ldl
 *   ./repro        # exit status 66 and "WARNING: ThreadSanitizer" while
 *                  # the bugs are there; "repro done" and 0 once fixed
 *
 * 1. stamp_point() reads item->ticket after enqueue() released q->mu; by
 *    then the drain thread may have run the ITEM_STAMP item and freed it
 *    (run_item's free): a use-after-free (and a wrong ticket if reused).
 * 2. completed_stamp() reads ev->stamp->ns before checking that the point
 *    completed, while the drain thread writes it in run_item (ITEM_STAMP):
 *    a data race whenever elapsed() is called on an in-flight event. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>

#include "mxd.h"

static void nothing(void *data)
{
    (void)data;
}

static mxd_event *start, *end;
static atomic_bool done;

static void *poll_elapsed(void *arg)
{
    (void)arg;
    mxd_error err;
    double ms;
    while (!atomic_load(&done)) /* race 2: reads the stamp while in flight */
        mxd_event_elapsed(start, end, &ms, &err);
    return NULL;
}

int main(void)
{
    mxd_error err;
    mxd_host_runner runner = {0};
    mxd_queue *q;
    mxd_flag *gate;
    mxd_event_storage s1, s2;
    if (mxd_init(&runner, &err) || mxd_queue_create(mxd_cpu(), &q, &err) ||
        mxd_flag_create(mxd_cpu(), &gate, &err) ||
        mxd_event_init(&s1, mxd_cpu(), true, &start, &err) ||
        mxd_event_init(&s2, mxd_cpu(), true, &end, &err)) {
        fprintf(stderr, "setup failed: %s\n", err.message);
        return 1;
    }
    /* Race 1: record a timing event on a busy queue, many times. */
    for (int i = 0; i < 20000; i++) {
        mxd_queue_host_fn(q, (mxd_host_fn){nothing, nothing, NULL, NULL}, &err);
        mxd_queue_record(q, end, &err);
    }
    mxd_wait forever = {.timeout = -1};
    mxd_queue_synchronize(q, &forever, &err);

    /* Race 2: elapsed() polled while `end` waits behind a gate. */
    mxd_queue_record(q, start, &err);
    mxd_queue_wait_value(q, gate, 1, &err);
    mxd_queue_record(q, end, &err);
    pthread_t t;
    pthread_create(&t, NULL, poll_elapsed, NULL);
    mxd_flag_signal(gate, 1);
    mxd_event_synchronize(end, &forever, &err);
    atomic_store(&done, true);
    pthread_join(t, NULL);

    mxd_event_fini(start);
    mxd_event_fini(end);
    mxd_flag_release(gate);
    mxd_queue_release(q);
    puts("repro done");
    return 0;
}
