#include "reaper.h"

#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "backend.h"

/* How long the reaper sleeps between polls while entries are pending:
 * short after progress (more is likely to complete soon), longer while
 * nothing moves. */
#define MIN_PAUSE_NS (50 * 1000LL)
#define MAX_PAUSE_NS (5 * MXD_MS)

static struct {
    pthread_mutex_t mu;
    pthread_cond_t wake; /* on CLOCK_MONOTONIC; signalled by add */
    pthread_once_t once;
    mxd_reap *incoming; /* added, not yet taken by the thread */
    bool started;
    /* Held by the thread while it polls and finishes entries (its driver
     * calls); set, `stopped` ends them for good (mxd_reaper_stop). */
    pthread_mutex_t pass_mu;
    atomic_bool stopped;
    /* Cleanup failures. */
    size_t failures;
    char last_failure[sizeof((mxd_error *)0)->message];
} reaper = {.mu = PTHREAD_MUTEX_INITIALIZER,
            .once = PTHREAD_ONCE_INIT,
            .pass_mu = PTHREAD_MUTEX_INITIALIZER};

static void reaper_init(void)
{
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&reaper.wake, &attr);
    pthread_condattr_destroy(&attr);
}

/* Polls every entry once, finishing those that are done; returns the ones
 * still pending and whether any finished.  Once stopped it touches no
 * entry: they are kept, never to finish. */
static mxd_reap *poll_entries(mxd_reap *pending, bool *progress)
{
    mxd_reap *kept = NULL;
    while (pending) {
        mxd_reap *entry = pending;
        pending = entry->next;
        if (!atomic_load(&reaper.stopped) && entry->done(entry)) {
            entry->finish(entry); /* frees it */
            *progress = true;
        } else {
            entry->next = kept;
            kept = entry;
        }
    }
    return kept;
}

static mxd_reap *append(mxd_reap *list, mxd_reap *more)
{
    while (more) {
        mxd_reap *entry = more;
        more = entry->next;
        entry->next = list;
        list = entry;
    }
    return list;
}

/* Under reaper.mu: waits for new entries, forever when nothing is
 * pending, else for at most pause_ns; returns what was added. */
static mxd_reap *take_incoming(bool have_pending, int64_t pause_ns)
{
    if (!reaper.incoming) {
        if (have_pending) {
            int64_t until_ns = mxd_now_ns() + pause_ns;
            struct timespec until = {until_ns / MXD_SECOND,
                                     until_ns % MXD_SECOND};
            pthread_cond_timedwait(&reaper.wake, &reaper.mu, &until);
        } else {
            while (!reaper.incoming)
                pthread_cond_wait(&reaper.wake, &reaper.mu);
        }
    }
    mxd_reap *fresh = reaper.incoming;
    reaper.incoming = NULL;
    return fresh;
}

static void *reaper_main(void *unused)
{
    (void)unused;
    mxd_reap *pending = NULL;
    int64_t pause = MIN_PAUSE_NS;
    for (;;) {
        pthread_mutex_lock(&reaper.mu);
        mxd_reap *fresh = take_incoming(pending != NULL, pause);
        pthread_mutex_unlock(&reaper.mu);
        pending = append(pending, fresh);
        bool progress = false;
        pthread_mutex_lock(&reaper.pass_mu);
        pending = poll_entries(pending, &progress);
        bool stopped = atomic_load(&reaper.stopped);
        pthread_mutex_unlock(&reaper.pass_mu);
        if (stopped)
            break; /* the process exits: what is pending is abandoned */
        if (progress || fresh)
            pause = MIN_PAUSE_NS;
        else if (pause < MAX_PAUSE_NS)
            pause = pause * 2 < MAX_PAUSE_NS ? pause * 2 : MAX_PAUSE_NS;
    }
    return NULL;
}

/* Under reaper.mu.  With every signal blocked, so that signals keep
 * going to the application's threads (Python handles them on its main
 * thread). */
static int start_thread(void)
{
    pthread_attr_t attr;
    pthread_t thread;
    sigset_t all, old;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&thread, &attr, reaper_main, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&attr);
    return rc;
}

mxd_status mxd_reaper_add(mxd_reap *entry, mxd_error *err)
{
    pthread_once(&reaper.once, reaper_init);
    pthread_mutex_lock(&reaper.mu);
    if (!reaper.started) {
        int rc = start_thread();
        if (rc) {
            pthread_mutex_unlock(&reaper.mu);
            return mxd_fail(err, MXD_NO_MEMORY,
                            "cannot start the cleanup thread: %s",
                            strerror(rc));
        }
        reaper.started = true;
    }
    entry->next = reaper.incoming;
    reaper.incoming = entry;
    pthread_mutex_unlock(&reaper.mu);
    pthread_cond_signal(&reaper.wake);
    return MXD_OK;
}

void mxd_reaper_stop(const struct timespec *until)
{
    atomic_store(&reaper.stopped, true);
    mxd_wait_for_mutex(&reaper.pass_mu, until); /* the pass in progress */
}

void mxd_cleanup_failed(const mxd_error *err)
{
    pthread_mutex_lock(&reaper.mu);
    reaper.failures++;
    snprintf(reaper.last_failure, sizeof reaper.last_failure, "%s",
             err->message);
    pthread_mutex_unlock(&reaper.mu);
}

size_t mxd_cleanup_failures(char *last, size_t size)
{
    pthread_mutex_lock(&reaper.mu);
    size_t count = reaper.failures;
    if (last && size)
        snprintf(last, size, "%s", reaper.last_failure);
    pthread_mutex_unlock(&reaper.mu);
    return count;
}
