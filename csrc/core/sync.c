#include "sync.h"

#include <errno.h>
#include <math.h>
#include <sched.h>
#include <time.h>

#include "backend.h"

/* Spinning only pays off when the other side is about to finish; keep it
 * to roughly a microsecond so a two-core machine does not lose a core. */
enum { SPIN_CHECKS = 64 };

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

void mxd_spin_wait(mxd_spinlock *lock)
{
    for (unsigned spins = 0;; spins++) {
        if (!atomic_load_explicit(&lock->held, memory_order_relaxed) &&
            !atomic_exchange_explicit(&lock->held, true, memory_order_acquire))
            return;
        if (spins < 100)
            cpu_relax();
        else
            sched_yield(); /* the holder was preempted: let it run */
    }
}

int64_t mxd_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * MXD_SECOND + ts.tv_nsec;
}

int mxd_notifier_init(mxd_notifier *n)
{
    pthread_condattr_t attr;
    int rc = pthread_condattr_init(&attr);
    if (rc)
        return rc;
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    rc = pthread_cond_init(&n->cv, &attr);
    pthread_condattr_destroy(&attr);
    if (rc)
        return rc;
    rc = pthread_mutex_init(&n->mu, NULL);
    if (rc) {
        pthread_cond_destroy(&n->cv);
        return rc;
    }
    atomic_init(&n->parked, 0);
    return 0;
}

void mxd_notifier_destroy(mxd_notifier *n)
{
    pthread_cond_destroy(&n->cv);
    pthread_mutex_destroy(&n->mu);
}

void mxd_notify_all(mxd_notifier *n)
{
    /* Pairs with the increment of `parked` in park_slice: either the
     * parked thread sees the new condition, or we see it parked (both
     * sides use sequentially consistent operations). */
    if (atomic_load(&n->parked) == 0)
        return;
    /* Taking the mutex once makes sure a thread that counted itself as
     * parked is inside pthread_cond_timedwait; broadcasting after releasing
     * it lets the woken thread run at once instead of blocking again on
     * the mutex we would still hold. */
    pthread_mutex_lock(&n->mu);
    pthread_mutex_unlock(&n->mu);
    pthread_cond_broadcast(&n->cv);
}

static struct timespec to_timespec(int64_t ns)
{
    struct timespec ts = {.tv_sec = ns / MXD_SECOND,
                          .tv_nsec = ns % MXD_SECOND};
    return ts;
}

/* Parks until ready or until `until_ns`; true when ready. */
static bool park_slice(mxd_notifier *n, mxd_ready_fn ready, const void *arg,
                       int64_t until_ns)
{
    struct timespec until = to_timespec(until_ns);
    bool is_ready;
    pthread_mutex_lock(&n->mu);
    atomic_fetch_add(&n->parked, 1);
    while (!(is_ready = ready(arg))) {
        if (pthread_cond_timedwait(&n->cv, &n->mu, &until) == ETIMEDOUT) {
            is_ready = ready(arg);
            break;
        }
    }
    atomic_fetch_sub(&n->parked, 1);
    pthread_mutex_unlock(&n->mu);
    return is_ready;
}

int64_t mxd_deadline(const mxd_wait *wait, int64_t start)
{
    if (!wait || wait->timeout < 0 || isnan(wait->timeout))
        return INT64_MAX;
    double ns = wait->timeout * (double)MXD_SECOND;
    if (ns >= (double)(INT64_MAX - start))
        return INT64_MAX;
    return start + (int64_t)ns;
}

mxd_status mxd_park(mxd_notifier *n, mxd_ready_fn ready, const void *arg,
                    const mxd_wait *wait, int64_t slice_ns, mxd_error *err)
{
    for (int i = 0; i < SPIN_CHECKS; i++) {
        if (ready(arg))
            return MXD_OK;
        cpu_relax();
    }
    int64_t start = mxd_now_ns();
    int64_t deadline = mxd_deadline(wait, start);
    for (;;) {
        int64_t now = mxd_now_ns();
        if (now >= deadline)
            return mxd_fail(err, MXD_TIMEOUT,
                            "the wait timed out after %g s; the work stays "
                            "enqueued",
                            wait->timeout);
        int64_t until = deadline - now < slice_ns ? deadline : now + slice_ns;
        if (park_slice(n, ready, arg, until))
            return MXD_OK;
        if (wait && wait->poll && wait->poll(wait->ctx))
            return mxd_fail(err, MXD_INTERRUPTED, "the wait was interrupted");
    }
}
