/* Process-level state: fork() and exit handling.
 *
 * fork() copies only the calling thread.  The core's worker threads, the
 * locks they held, the work they had queued and any GPU driver state do not
 * survive in the child.  The handlers below take the core's global locks
 * around the fork (so the child gets them in a consistent state), reset the
 * CPU backend in the child, and advance the process epoch so that objects
 * made before the fork refuse to be used (see mxd_stale). */
#include <stdlib.h>
#include <time.h>

#include "backend.h"
#include "virtual.h"

atomic_uint mxd_process_epoch;

static pthread_once_t setup_once = PTHREAD_ONCE_INIT;

static void before_fork(void)
{
    mxd_selection_fork_prepare();
    mxd_virtual_fork_prepare();
    mxd_devices_fork_prepare();
    mxd_watch_fork_prepare(); /* before the pool: it submits jobs to it */
    mxd_pool_fork_prepare();
}

static void after_fork_parent(void)
{
    mxd_pool_fork_parent();
    mxd_watch_fork_parent();
    mxd_devices_fork_parent();
    mxd_virtual_fork_parent();
    mxd_selection_fork_parent();
}

static void after_fork_child(void)
{
    atomic_fetch_add(&mxd_process_epoch, 1);
    mxd_pool_fork_child();
    mxd_watch_fork_child();
    mxd_devices_fork_child();
    mxd_virtual_fork_child();
    mxd_selection_fork_child();
}

static void register_handlers(void)
{
    pthread_atfork(before_fork, after_fork_parent, after_fork_child);
}

void mxd_process_setup(void)
{
    pthread_once(&setup_once, register_handlers);
}

/* ---- Exit ---------------------------------------------------------------
 *
 * GPU drivers tear themselves down when the process exits (exit handlers
 * they register when initialised, library destructors), and a driver call
 * after that may crash or hang.  Our threads that call the driver on their
 * own, the reaper and the watcher, must stop first.  Python's atexit hooks
 * are too early (objects released while the interpreter finalizes hand
 * their cleanup to the reaper) and library destructors too late, so a C
 * exit handler stops them: registered after the driver initialised, it
 * runs before the driver's own handlers (exit runs them last registered
 * first) and before _dl_fini runs the libraries' destructors.  Pending
 * cleanup is abandoned: the process is exiting, and leaking is right. */

/* How long the exit waits for a driver call in progress on our threads. */
#define EXIT_WAIT_NS (2 * MXD_SECOND)

static pthread_once_t exit_once = PTHREAD_ONCE_INIT;
static unsigned exit_epoch; /* the process that registered the handler */

bool mxd_wait_for_mutex(pthread_mutex_t *mu, const struct timespec *until)
{
    if (pthread_mutex_timedlock(mu, until) != 0)
        return false;
    pthread_mutex_unlock(mu);
    return true;
}

static void before_driver_exit(void)
{
    /* A forked child has none of our threads (nor a usable driver). */
    if (mxd_stale(exit_epoch))
        return;
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += EXIT_WAIT_NS / MXD_SECOND;
    mxd_watch_stop(&until);
    mxd_reaper_stop(&until);
}

static void register_exit_handler(void)
{
    exit_epoch = mxd_epoch_now();
    atexit(before_driver_exit);
}

void mxd_process_driver_loaded(void)
{
    pthread_once(&exit_once, register_exit_handler);
}

mxd_status mxd_fail_stale(mxd_error *err, const char *what)
{
    return mxd_fail(err, MXD_UNAVAILABLE,
                    "this %s was created before os.fork(): its worker "
                    "threads and driver state do not exist in this child "
                    "process; create new objects here (the CPU device works "
                    "after a fork, GPUs do not)",
                    what);
}
