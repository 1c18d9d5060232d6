/* mxd_init: the core's one entry point that knows every module.  It hands
 * process.c the modules' fork and exit hooks as tables and the queues
 * their capture recorder, then selects the backend.  Nothing in the core calls
 * this file, so the modules can call process.c (mxd_fail_stale, the epoch)
 * without process.c calling them. */
#include "backend.h"
#include "capture.h"
#include "select.h"
#include "virtual.h"

/* The order the modules' locks are taken before fork() (released in
 * reverse after it). */
static const mxd_fork_hooks *const fork_hooks[] = {
    &mxd_symmetric_fork_hooks, /* its lock is held while devices are used */
    &mxd_selection_fork_hooks, &mxd_virtual_fork_hooks, &mxd_devices_fork_hooks,
    &mxd_watch_fork_hooks, /* before the pool: it submits jobs to it */
    &mxd_pool_fork_hooks,      &mxd_capture_fork_hooks, /* a leaf lock */
};

/* The threads that call the driver on their own, stopped at exit. */
static const mxd_exit_hook exit_hooks[] = {
    mxd_watch_stop,
    mxd_reaper_stop,
};

static pthread_once_t hooks_once = PTHREAD_ONCE_INIT;

static void register_hooks(void)
{
    mxd_process_setup(fork_hooks, sizeof fork_hooks / sizeof *fork_hooks,
                      exit_hooks, sizeof exit_hooks / sizeof *exit_hooks);
    mxd_recorder_in_use = &mxd_capture_recorder;
}

mxd_status mxd_init(const mxd_host_runner *runner, mxd_error *err)
{
    pthread_once(&hooks_once, register_hooks);
    return mxd_select_backend(runner, err);
}
