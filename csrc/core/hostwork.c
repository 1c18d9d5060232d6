/* Running user host functions through the runner the binding registered
 * (for Python: taking the GIL). */
#include "backend.h"

static mxd_host_runner host_runner;
static atomic_bool shutting_down;

void mxd_shutdown(void)
{
    atomic_store(&shutting_down, true);
}

void mxd_set_host_runner(const mxd_host_runner *runner)
{
    host_runner = *runner;
}

/* Enters the runner once per batch; false when it refuses. */
static bool batch_enter(mxd_host_batch *batch)
{
    if (!batch->entered) {
        if (atomic_load(&shutting_down))
            batch->token = NULL;
        else
            batch->token = host_runner.enter ? host_runner.enter() : batch;
        batch->entered = true;
    }
    return batch->token != NULL;
}

void mxd_host_batch_run(mxd_host_batch *batch, mxd_host_fn fn)
{
    if (batch_enter(batch))
        fn.run(fn.data);
    else
        fn.discard(fn.data);
}

/* A graph's node: refused, it is skipped, and the graph still owns data. */
void mxd_host_batch_call(mxd_host_batch *batch, mxd_host_fn fn)
{
    if (batch_enter(batch))
        fn.call(fn.data);
}

void mxd_host_fn_call_alone(mxd_host_fn fn)
{
    mxd_host_batch batch = {0};
    mxd_host_batch_call(&batch, fn);
    mxd_host_batch_end(&batch);
}

void mxd_host_batch_end(mxd_host_batch *batch)
{
    if (batch->entered && batch->token && host_runner.leave)
        host_runner.leave(batch->token);
    batch->entered = false;
    batch->token = NULL;
}

void mxd_host_thread_exit(void)
{
    if (host_runner.thread_exit)
        host_runner.thread_exit();
}

void mxd_host_fn_run_alone(mxd_host_fn fn)
{
    mxd_host_batch batch = {0};
    mxd_host_batch_run(&batch, fn);
    mxd_host_batch_end(&batch);
}
