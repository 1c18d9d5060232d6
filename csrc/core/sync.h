/* Parking threads until a condition holds, with timeouts and polling.
 *
 * A notifier pairs a condition variable with a count of parked threads so
 * that the notifying side costs one atomic load when nobody waits (the hot
 * path of flag.signal and of every completed work item). */
#ifndef MXD_SYNC_H
#define MXD_SYNC_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "mxd.h"

typedef struct mxd_notifier {
    pthread_mutex_t mu;
    pthread_cond_t cv; /* on CLOCK_MONOTONIC */
    atomic_uint parked;
} mxd_notifier;

int mxd_notifier_init(mxd_notifier *n);
void mxd_notifier_destroy(mxd_notifier *n);

/* Wakes every thread parked on n.  Call after making the condition true
 * (with a sequentially consistent or release store). */
void mxd_notify_all(mxd_notifier *n);

typedef bool (*mxd_ready_fn)(const void *arg);

/* Blocks until ready(arg) is true, waking at least every `slice_ns` to
 * re-check it (so writes that do not notify are still seen) and to run
 * wait->poll.  wait == NULL waits forever without polling.  Returns
 * MXD_OK, MXD_TIMEOUT or MXD_INTERRUPTED (err filled for the timeout). */
mxd_status mxd_park(mxd_notifier *n, mxd_ready_fn ready, const void *arg,
                    const mxd_wait *wait, int64_t slice_ns, mxd_error *err);

/* A lock for critical sections of a few loads and stores (an event's
 * point), where a mutex's two atomic operations and calls would be most of
 * the cost of the hottest calls.  Yields the CPU if the holder was
 * preempted. */
typedef struct mxd_spinlock {
    atomic_bool held;
} mxd_spinlock;

void mxd_spin_wait(mxd_spinlock *lock);

static inline void mxd_spin_init(mxd_spinlock *lock)
{
    atomic_init(&lock->held, false);
}

static inline void mxd_spin_lock(mxd_spinlock *lock)
{
    if (atomic_exchange_explicit(&lock->held, true, memory_order_acquire))
        mxd_spin_wait(lock);
}

static inline void mxd_spin_unlock(mxd_spinlock *lock)
{
    atomic_store_explicit(&lock->held, false, memory_order_release);
}

/* When a wait that starts at `start` (ns) times out: INT64_MAX for none
 * (no timeout, or one too large to represent). */
int64_t mxd_deadline(const mxd_wait *wait, int64_t start);

/* Nanoseconds on the monotonic clock. */
int64_t mxd_now_ns(void);

#define MXD_MS (1000 * 1000LL)
#define MXD_SECOND (1000 * MXD_MS)

#endif /* MXD_SYNC_H */
