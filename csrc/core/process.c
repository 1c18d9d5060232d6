/* Process-level state: fork() and exit handling.
 *
 * fork() copies only the calling thread.  The core's worker threads, the
 * locks they held, the work they had queued and any GPU driver state do not
 * survive in the child.  The handlers below run the modules' fork hooks,
 * which take the core's global locks around the fork (so the child gets
 * them in a consistent state) and reset the CPU backend in the child, and
 * advance the process epoch so that objects made before the fork refuse to
 * be used (see mxd_stale).  The modules' hooks come as a table (init.c
 * registers it): this file, which every module calls, calls none of them
 * by name. */
#include <stdlib.h>
#include <time.h>

#include "backend.h"

atomic_uint mxd_process_epoch;

/* The modules' hooks, from mxd_process_setup. */
static struct {
    const mxd_fork_hooks *const *fork;
    size_t fork_count;
    const mxd_exit_hook *exit;
    size_t exit_count;
} hooks;

static void before_fork(void)
{
    for (size_t i = 0; i < hooks.fork_count; i++)
        hooks.fork[i]->prepare();
}

static void after_fork_parent(void)
{
    for (size_t i = hooks.fork_count; i-- > 0;)
        hooks.fork[i]->parent();
}

static void after_fork_child(void)
{
    atomic_fetch_add(&mxd_process_epoch, 1);
    for (size_t i = hooks.fork_count; i-- > 0;)
        hooks.fork[i]->child();
}

void mxd_process_setup(const mxd_fork_hooks *const *fork_hooks,
                       size_t fork_count, const mxd_exit_hook *exit_hooks,
                       size_t exit_count)
{
    hooks.fork = fork_hooks;
    hooks.fork_count = fork_count;
    hooks.exit = exit_hooks;
    hooks.exit_count = exit_count;
    pthread_atfork(before_fork, after_fork_parent, after_fork_child);
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
    for (size_t i = 0; i < hooks.exit_count; i++)
        hooks.exit[i](&until);
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
