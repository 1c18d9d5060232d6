/* Tests of the core's watches (watch.h) on CPU queues, without Python; run
 * by tests/test_core.py, plain, under ThreadSanitizer and under
 * AddressSanitizer.  Each check prints what failed and exits non-zero. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "mxd.h"
#include "watch.h"

static mxd_error err;
static const mxd_wait forever = {.timeout = -1};

#define CHECK(cond)                                                            \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "%s:%d: check failed: %s (last error: %s)\n",      \
                    __FILE__, __LINE__, #cond, err.message);                   \
            exit(1);                                                           \
        }                                                                      \
    } while (0)
#define OK(call) CHECK((call) == MXD_OK)

static void count(void *ctx)
{
    atomic_fetch_add((atomic_int *)ctx, 1);
}

static void pause_ms(int ms)
{
    struct timespec ts = {0, ms * 1000000L};
    nanosleep(&ts, NULL);
}

/* True once *fired reaches `value` (polls for up to 10 s). */
static bool becomes(atomic_int *fired, int value)
{
    for (int i = 0; i < 10000 && atomic_load(fired) < value; i++)
        pause_ms(1);
    return atomic_load(fired) == value;
}

/* A new CPU queue held behind a new flag until it is signalled 1. */
static mxd_queue *gated(mxd_flag **flag)
{
    mxd_queue *q;
    OK(mxd_queue_create(mxd_cpu(), &q, &err));
    OK(mxd_flag_create(mxd_cpu(), flag, &err));
    OK(mxd_queue_wait_value(q, *flag, 1, &err));
    return q;
}

static void release(mxd_queue *q, mxd_flag *flag)
{
    mxd_flag_signal(flag, 1);
    OK(mxd_queue_synchronize(q, &forever, &err));
    mxd_queue_release(q);
    mxd_flag_release(flag);
}

static void test_queue_watch_fires_once_complete(void)
{
    mxd_flag *flag;
    mxd_queue *q = gated(&flag);
    atomic_int fired = 0;
    mxd_watch *w;
    OK(mxd_watch_queue(q, count, &fired, &w, &err));
    CHECK(w != NULL && mxd_watch_armed() == 1);
    pause_ms(20);
    CHECK(atomic_load(&fired) == 0);
    mxd_flag_signal(flag, 1);
    CHECK(becomes(&fired, 1));
    CHECK(mxd_watch_result(w, &err) == MXD_OK);
    CHECK(!mxd_watch_cancel(w)); /* fired: nothing to disarm */
    mxd_watch_free(w);
    CHECK(mxd_watch_armed() == 0);
    release(q, flag);
}

static void test_complete_points_arm_nothing(void)
{
    mxd_queue *q;
    OK(mxd_queue_create(mxd_cpu(), &q, &err));
    atomic_int fired = 0;
    mxd_watch *w = (mxd_watch *)&fired;
    OK(mxd_watch_queue(q, count, &fired, &w, &err)); /* idle */
    CHECK(w == NULL);
    mxd_event_storage storage;
    mxd_event *ev;
    OK(mxd_event_init(&storage, mxd_cpu(), false, &ev, &err));
    OK(mxd_watch_event(ev, count, &fired, &w, &err)); /* unrecorded */
    CHECK(w == NULL && atomic_load(&fired) == 0);
    mxd_event_fini(ev);
    mxd_queue_release(q);
}

static void test_event_watch_takes_the_point_when_armed(void)
{
    mxd_flag *fa, *fb;
    mxd_queue *a = gated(&fa), *b = gated(&fb);
    mxd_event_storage storage;
    mxd_event *ev;
    OK(mxd_event_init(&storage, mxd_cpu(), false, &ev, &err));
    OK(mxd_queue_record(a, ev, &err));
    atomic_int fired = 0;
    mxd_watch *w;
    OK(mxd_watch_event(ev, count, &fired, &w, &err));
    OK(mxd_queue_record(b, ev, &err)); /* moves the event, not the watch */
    mxd_flag_signal(fa, 1);
    CHECK(becomes(&fired, 1));
    mxd_watch_free(w);
    mxd_event_fini(ev);
    release(a, fa);
    release(b, fb);
}

static void test_cancel_disarms(void)
{
    mxd_flag *flag;
    mxd_queue *q = gated(&flag);
    atomic_int fired = 0;
    mxd_watch *w[3];
    for (int i = 0; i < 3; i++)
        OK(mxd_watch_queue(q, count, &fired, &w[i], &err));
    CHECK(mxd_watch_armed() == 3);
    CHECK(mxd_watch_cancel(w[1]));
    CHECK(!mxd_watch_cancel(w[1])); /* once only */
    mxd_watch_free(w[1]);
    CHECK(mxd_watch_armed() == 2);
    mxd_flag_signal(flag, 1);
    CHECK(becomes(&fired, 2));
    pause_ms(20);
    CHECK(atomic_load(&fired) == 2);
    mxd_watch_free(w[0]);
    mxd_watch_free(w[2]);
    release(q, flag);
}

typedef struct race {
    mxd_flag *flag;
} race;

static void *signal_now(void *arg)
{
    mxd_flag_signal(((race *)arg)->flag, 1);
    return NULL;
}

/* A cancel racing the completion: either it disarms (and the function
 * never runs) or the function ran before it returned. */
static void test_cancel_races_the_completion(void)
{
    for (int i = 0; i < 500; i++) {
        mxd_flag *flag;
        mxd_queue *q = gated(&flag);
        atomic_int fired = 0;
        mxd_watch *w;
        OK(mxd_watch_queue(q, count, &fired, &w, &err));
        race r = {flag};
        pthread_t t;
        CHECK(pthread_create(&t, NULL, signal_now, &r) == 0);
        bool disarmed = mxd_watch_cancel(w);
        int seen = atomic_load(&fired);
        CHECK(disarmed ? seen == 0 : seen == 1);
        pthread_join(t, NULL);
        OK(mxd_queue_synchronize(q, &forever, &err));
        CHECK(atomic_load(&fired) == (disarmed ? 0 : 1));
        mxd_watch_free(w);
        release(q, flag);
    }
    CHECK(mxd_watch_armed() == 0);
}

static void test_many_watches_on_one_queue(void)
{
    enum { N = 10000 };
    static mxd_watch *w[N];
    mxd_flag *flag;
    mxd_queue *q = gated(&flag);
    atomic_int fired = 0;
    for (int i = 0; i < N; i++)
        OK(mxd_watch_queue(q, count, &fired, &w[i], &err));
    mxd_flag_signal(flag, 1);
    CHECK(becomes(&fired, N));
    for (int i = 0; i < N; i++)
        mxd_watch_free(w[i]);
    CHECK(mxd_watch_armed() == 0);
    release(q, flag);
}

int main(void)
{
    mxd_host_runner runner = {0};
    OK(mxd_init(&runner, &err));
    test_queue_watch_fires_once_complete();
    test_complete_points_arm_nothing();
    test_event_watch_takes_the_point_when_armed();
    test_cancel_disarms();
    test_cancel_races_the_completion();
    test_many_watches_on_one_queue();
    puts("watch tests passed");
    return 0;
}
