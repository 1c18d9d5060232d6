/* Process-level state: fork() handling.
 *
 * fork() copies only the calling thread.  The core's worker threads, the
 * locks they held, the work they had queued and any GPU driver state do not
 * survive in the child.  The handlers below take the core's global locks
 * around the fork (so the child gets them in a consistent state), reset the
 * CPU backend in the child, and advance the process epoch so that objects
 * made before the fork refuse to be used (see mxd_stale). */
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

mxd_status mxd_fail_stale(mxd_error *err, const char *what)
{
    return mxd_fail(err, MXD_UNAVAILABLE,
                    "this %s was created before os.fork(): its worker "
                    "threads and driver state do not exist in this child "
                    "process; create new objects here (the CPU device works "
                    "after a fork, GPUs do not)",
                    what);
}
