/* Python host functions: the work items that call user code from the
 * core's worker threads, the runner that gives those threads the GIL, and
 * the interpreter-exit handshake that keeps them from taking it too late. */
#include "binding.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

/* Process-wide, like the core itself: set by the atexit hook, after which
 * no worker thread may take the GIL (it could be parked forever once
 * Py_FinalizeEx runs). */
static atomic_int exiting;
/* Worker threads that passed the `exiting` check and may be about to take
 * the GIL; the atexit hook waits for them to finish deciding. */
static atomic_int entering;

static int refusing_python(void)
{
    return atomic_load(&exiting) || compat_is_finalizing();
}

/* ---- The runner --------------------------------------------------------
 *
 * A worker thread that runs Python keeps its Python thread state from one
 * entry to the next (and drops it when the worker exits): creating and
 * deleting one per host function would be most of the time a gated queue
 * takes to resume its Python host function after flag.signal().  Only
 * threads Python did not know before keep one: a thread of the
 * interpreter's own (the caller of an inline run, or a host function
 * nesting one) takes and gives back the GIL as PyGILState_Ensure says. */

static _Thread_local PyThreadState *worker_state; /* while not in Python */
static _Thread_local PyGILState_STATE worker_gil; /* its PyGILState_Ensure */

/* Tokens: how runner_leave gives the GIL back. */
static char held_already, kept_state, ensured_locked, ensured_unlocked;

static void *take_gil(void)
{
    if (worker_state != NULL) {
        PyEval_RestoreThread(worker_state);
        worker_state = NULL;
        return &kept_state;
    }
    if (PyGILState_GetThisThreadState() != NULL)
        return PyGILState_Ensure() == PyGILState_LOCKED ? &ensured_locked
                                                        : &ensured_unlocked;
    worker_gil = PyGILState_Ensure(); /* a new thread state, kept */
    return &kept_state;
}

static void give_gil(void *token)
{
    if (token == &held_already)
        return;
    if (token == &kept_state)
        worker_state = PyEval_SaveThread();
    else
        PyGILState_Release(token == &ensured_locked ? PyGILState_LOCKED
                                                    : PyGILState_UNLOCKED);
}

static void *runner_enter(void)
{
    /* The caller holds the GIL already (the last reference to imported
     * memory dropped by Python code): the runtime is alive, nothing to
     * take. */
    if (PyGILState_Check() && !compat_is_finalizing())
        return &held_already;
    atomic_fetch_add(&entering, 1);
    if (refusing_python()) {
        atomic_fetch_sub(&entering, 1);
        return NULL;
    }
    void *token = take_gil();
    atomic_fetch_sub(&entering, 1);
    if (atomic_load(&exiting)) {
        if (token == &kept_state) {
            PyGILState_Release(worker_gil); /* drops the kept state */
        } else {
            give_gil(token);
        }
        return NULL;
    }
    return token;
}

static void runner_leave(void *token)
{
    give_gil(token);
}

/* The worker exits: give its thread state back, unless the interpreter
 * is going away (then the state belongs to a dying runtime: leave it). */
static void runner_thread_exit(void)
{
    if (worker_state == NULL)
        return;
    atomic_fetch_add(&entering, 1);
    if (!refusing_python()) {
        PyEval_RestoreThread(worker_state);
        PyGILState_Release(worker_gil);
    }
    worker_state = NULL;
    atomic_fetch_sub(&entering, 1);
}

const mxd_host_runner binding_host_runner = {runner_enter, runner_leave,
                                             runner_thread_exit};

/* ---- Work items --------------------------------------------------------- */

/* Runs with the GIL held; the reference to fn stays (a captured host
 * function is called at every launch of its graph). */
static void host_fn_call(void *data)
{
    PyObject *fn = data;
    PyObject *result = PyObject_CallNoArgs(fn);
    if (result == NULL)
        PyErr_WriteUnraisable(fn); /* the queue carries on (SPEC §7) */
    else
        Py_DECREF(result);
}

/* Runs with the GIL held; consumes the reference to fn. */
static void host_fn_run(void *data)
{
    host_fn_call(data);
    Py_DECREF((PyObject *)data);
}

/* References dropped without the GIL, for the main thread to drop: one
 * pending call drops them all (a graph's host functions go together, and
 * the pending-call queue holds only a few dozen calls). */
typedef struct later {
    struct later *next;
    PyObject *obj;
} later;

static pthread_mutex_t later_mu = PTHREAD_MUTEX_INITIALIZER;
static later *later_head;
static bool later_scheduled; /* a pending call will drop them */

static int decref_later(void *unused)
{
    (void)unused;
    pthread_mutex_lock(&later_mu);
    later *list = later_head;
    later_head = NULL;
    later_scheduled = false;
    pthread_mutex_unlock(&later_mu);
    while (list != NULL) {
        later *next = list->next;
        Py_DECREF(list->obj);
        free(list);
        list = next;
    }
    return 0;
}

/* May run on any thread, usually without the GIL and possibly while the
 * core holds a lock: never block on the GIL here. */
static void host_fn_discard(void *data)
{
    if (atomic_load(&exiting))
        return; /* leak one reference rather than touch a dying runtime */
    if (PyGILState_Check()) {
        Py_DECREF((PyObject *)data);
        return;
    }
    later *entry = malloc(sizeof *entry);
    if (entry == NULL)
        return; /* out of memory: the reference leaks, which is harmless */
    pthread_mutex_lock(&later_mu);
    *entry = (later){later_head, data};
    later_head = entry;
    /* If the pending-call queue is full, the next discard tries again. */
    if (!later_scheduled)
        later_scheduled = Py_AddPendingCall(decref_later, NULL) == 0;
    pthread_mutex_unlock(&later_mu);
}

int binding_keep_in_graph(mxd_queue *queue, PyObject *obj)
{
    mxd_host_fn keep = {NULL, host_fn_discard, Py_NewRef(obj), NULL};
    mxd_error err;
    if (mxd_queue_capture_keep(queue, keep, &err) == MXD_OK)
        return 0;
    Py_DECREF(obj);
    binding_raise(&err);
    return -1;
}

static const char *const fn_names[] = {"fn"};

/* Fast path first: one positional argument needs no keyword parsing. */
static PyObject *parse_fn(const char *fname, PyObject *const *args,
                          Py_ssize_t nargs, PyObject *kwnames)
{
    PyObject *fn;
    if (nargs == 1 && kwnames == NULL) {
        fn = args[0];
    } else {
        const binding_params params = {fname, fn_names, 1, 1};
        if (binding_parse_fast(&params, args, nargs, kwnames, &fn) < 0)
            return NULL;
    }
    if (binding_check_callable(fname, "fn", fn) < 0)
        return NULL;
    return fn;
}

PyObject *binding_enqueue_host_fn(const char *fname, mxd_queue *queue,
                                  PyObject *const *args, Py_ssize_t nargs,
                                  PyObject *kwnames)
{
    PyObject *fn = parse_fn(fname, args, nargs, kwnames);
    if (fn == NULL)
        return NULL;
    mxd_host_fn work = {host_fn_run, host_fn_discard, Py_NewRef(fn),
                        host_fn_call};
    mxd_error err;
    mxd_status status;
    BINDING_ENQUEUE(queue, status = mxd_queue_host_fn(queue, work, &err));
    if (status != MXD_OK) {
        Py_DECREF(fn); /* on failure the caller still owns the data */
        return binding_raise(&err);
    }
    Py_RETURN_NONE;
}

static const char *const async_names[] = {"fn", "flag", "value", "cpu"};

static int check_cpu_device(binding_state *st, const char *fname, PyObject *cpu)
{
    if (PyObject_TypeCheck(cpu, st->device_type) &&
        mxd_device_is_host(((DeviceObject *)cpu)->device))
        return 0;
    PyErr_Format(PyExc_TypeError,
                 "%s(): argument 'cpu' must be the CPU device (CPU()), "
                 "not %R",
                 fname, cpu);
    return -1;
}

PyObject *binding_enqueue_async_host_fn(binding_state *st, const char *fname,
                                        mxd_queue *queue, PyObject *const *args,
                                        Py_ssize_t nargs, PyObject *kwnames)
{
    const binding_params params = {fname, async_names, 4, 4};
    PyObject *argv[4];
    uint64_t value;
    if (binding_parse_fast(&params, args, nargs, kwnames, argv) < 0 ||
        binding_check_callable(fname, "fn", argv[0]) < 0 ||
        binding_check_type(fname, "flag", argv[1], st->flag_type) < 0 ||
        binding_parse_u64(fname, "value", argv[2], &value) < 0 ||
        check_cpu_device(st, fname, argv[3]) < 0)
        return NULL;

    PyObject *fn = argv[0];
    mxd_host_fn work = {host_fn_run, host_fn_discard, Py_NewRef(fn),
                        host_fn_call};
    mxd_flag *flag = ((FlagObject *)argv[1])->flag;
    mxd_error err;
    mxd_status status;
    BINDING_ENQUEUE(queue, status = mxd_queue_async_host_fn(queue, work, flag,
                                                            value, &err));
    if (status != MXD_OK) {
        Py_DECREF(fn);
        return binding_raise(&err);
    }
    Py_RETURN_NONE;
}

/* ---- __unsafe_pack_py_host_func ----------------------------------------- */

/* The C entry point handed out by __unsafe_pack_py_host_func: called
 * exactly once, from any thread, with or without the GIL. */
static void py_host_trampoline(void *data)
{
    if (refusing_python())
        return; /* too late to run Python; the reference leaks */
    PyGILState_STATE gil = PyGILState_Ensure();
    host_fn_run(data);
    PyGILState_Release(gil);
}

PyObject *binding_pack_host_fn(PyObject *module, PyObject *const *args,
                               Py_ssize_t nargs, PyObject *kwnames)
{
    (void)module;
    PyObject *fn = parse_fn("__unsafe_pack_py_host_func", args, nargs, kwnames);
    if (fn == NULL)
        return NULL;
    PyObject *trampoline =
        PyLong_FromVoidPtr((void *)(uintptr_t)py_host_trampoline);
    if (trampoline == NULL)
        return NULL;
    PyObject *data = PyLong_FromVoidPtr(fn);
    PyObject *pair = data ? PyTuple_Pack(2, trampoline, data) : NULL;
    Py_DECREF(trampoline);
    Py_XDECREF(data);
    if (pair != NULL)
        Py_INCREF(fn); /* owned by the pair until the trampoline runs */
    return pair;
}

/* ---- Interpreter exit --------------------------------------------------- */

static void wait_for_entering_threads(void)
{
    /* Bounded: a thread stuck elsewhere must not make exit hang. */
    const struct timespec pause = {0, 1000000}; /* 1 ms */
    for (int i = 0; i < 2000 && atomic_load(&entering) > 0; i++)
        nanosleep(&pause, NULL);
}

PyObject *binding_atexit(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    atomic_store(&exiting, 1);
    /* Workers blocked on the GIL must be able to take it, see `exiting`
     * and give it back before the interpreter is torn down. */
    Py_BEGIN_ALLOW_THREADS
        mxd_shutdown();
        wait_for_entering_threads();
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}
