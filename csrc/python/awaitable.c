/* `await event`, `await queue` (SPEC §15): awaiting in asyncio without a
 * thread per waiter and without polling the event loop.
 *
 * Each event loop gets one waker: an eventfd the loop watches
 * (loop.add_reader).  An await arms a core watch (watch.h) and returns the
 * iterator of a fresh asyncio future.  When the awaited point completes,
 * the core thread that sees it (a CPU queue's worker, or the accelerators'
 * watcher thread) runs waiter_fire: a few lines of C that put the waiter
 * on its waker's list and write the eventfd, without the GIL.  The loop
 * then calls the waker, which resolves the futures in the loop's thread.
 *
 * Cancelling the awaiting task cancels the future; its done-callback (the
 * waiter itself) disarms the watch, so nothing stays registered.  A watch
 * that fired meanwhile is already on the waker's list, and the waker drops
 * it there.
 *
 * Lifetimes: a waiter is referenced by the future's callbacks and, while
 * its watch is armed or on a waker's list, by the core (one reference,
 * given up by the waker or by a cancel).  A waker's C part outlives its
 * Python object while waiters refer to it, since a core thread may still
 * write to its eventfd. */
#include "binding.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

enum {
    NAME_CREATE_FUTURE,
    NAME_ADD_DONE_CALLBACK,
    NAME_SET_RESULT,
    NAME_SET_EXCEPTION,
    NAME_DONE,
    NAME_CANCELLED,
    NAME_ADD_READER,
    NAME_AWAIT,
    NAME_COUNT,
};

static const char *const method_names[NAME_COUNT] = {
    "create_future", "add_done_callback", "set_result", "set_exception",
    "done",          "cancelled",         "add_reader", "__await__",
};

typedef struct WaiterObject WaiterObject;

/* The part of a waker the core's threads touch. */
typedef struct waker_core {
    atomic_long refs; /* the WakerObject and each waiter */
    int fd;           /* eventfd, non-blocking */
    pthread_mutex_t mu;
    WaiterObject *fired, *fired_tail; /* fired, not yet resolved */
    bool signalled; /* the eventfd was written since the last read */
} waker_core;

typedef struct WakerObject {
    PyObject_HEAD
    waker_core *core;
} WakerObject;

struct WaiterObject {
    PyObject_HEAD
    WaiterObject *next; /* on the waker's fired list */
    waker_core *waker;  /* retained */
    mxd_watch *watch;   /* NULL once freed */
    PyObject *future;   /* NULL once resolved or abandoned */
    PyObject *owner;    /* the awaited object: kept alive meanwhile */
    binding_await_outcome outcome;
};

static atomic_long live_waiters;

static binding_async *async_of(PyObject *obj)
{
    return &binding_state_of(obj)->async;
}

/* ---- The waker's C part ------------------------------------------------- */

static waker_core *waker_core_new(void)
{
    waker_core *k = PyMem_RawCalloc(1, sizeof *k);
    if (k == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    k->fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (k->fd < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        PyMem_RawFree(k);
        return NULL;
    }
    pthread_mutex_init(&k->mu, NULL);
    atomic_init(&k->refs, 1);
    return k;
}

static void waker_core_release(waker_core *k)
{
    if (atomic_fetch_sub(&k->refs, 1) != 1)
        return;
    close(k->fd);
    pthread_mutex_destroy(&k->mu);
    PyMem_RawFree(k);
}

/* The watch's function (watch.h): on a core thread, without the GIL, under
 * a core lock.  The eventfd is written under the waker's lock, so the
 * waker cannot be freed (and its descriptor reused) in between. */
static void waiter_fire(void *ctx)
{
    WaiterObject *w = ctx;
    waker_core *k = w->waker;
    pthread_mutex_lock(&k->mu);
    w->next = NULL;
    if (k->fired_tail)
        k->fired_tail->next = w;
    else
        k->fired = w;
    k->fired_tail = w;
    if (!k->signalled) {
        k->signalled = true;
        uint64_t one = 1;
        ssize_t n = write(k->fd, &one, sizeof one);
        (void)n; /* cannot fail: the counter is far from overflowing */
    }
    pthread_mutex_unlock(&k->mu);
}

/* ---- Waiters ------------------------------------------------------------ */

/* With the GIL held: the watch's last queue reference, if it is the last
 * of all, only hands the queue to its backend (which never blocks there),
 * and releasing the GIL here would hand it to whichever thread wants it
 * right when the loop is waking an awaiting task. */
static void waiter_free_watch(WaiterObject *w)
{
    mxd_watch *watch = w->watch;
    w->watch = NULL;
    mxd_watch_free(watch);
}

/* Drops what the waiter holds once it is settled, and the core's
 * reference (the caller holds another, or this is the end of it). */
static void waiter_finish(WaiterObject *w)
{
    Py_CLEAR(w->future);
    Py_CLEAR(w->owner);
    Py_DECREF(w);
}

static int call_method1(binding_async *a, PyObject *obj, int name,
                        PyObject *arg)
{
    PyObject *r = PyObject_CallMethodOneArg(obj, a->names[name], arg);
    Py_XDECREF(r);
    return r == NULL ? -1 : 0;
}

/* 1 when fut's method `name` (done, cancelled) says so, 0 if not, -1. */
static int ask(binding_async *a, PyObject *fut, int name)
{
    PyObject *r = PyObject_CallMethodNoArgs(fut, a->names[name]);
    int truth = r ? PyObject_IsTrue(r) : -1;
    Py_XDECREF(r);
    return truth;
}

/* Sets the future's result, or its exception when the outcome raised. */
static int resolve(binding_async *a, PyObject *fut, PyObject *result)
{
    if (result != NULL) {
        int rc = call_method1(a, fut, NAME_SET_RESULT, result);
        Py_DECREF(result);
        return rc;
    }
    PyObject *exc = compat_take_exception();
    int rc = exc ? call_method1(a, fut, NAME_SET_EXCEPTION, exc) : -1;
    Py_XDECREF(exc);
    return rc;
}

/* In the loop's thread: the waiter's watch fired. */
static void waiter_settle(binding_async *a, WaiterObject *w)
{
    mxd_error err;
    mxd_status status = mxd_watch_result(w->watch, &err);
    waiter_free_watch(w);
    if (w->future != NULL && ask(a, w->future, NAME_DONE) == 0 &&
        resolve(a, w->future, w->outcome(w->owner, status, &err)) < 0)
        PyErr_WriteUnraisable(w->future);
    PyErr_Clear(); /* from ask(): nothing to report it to */
    waiter_finish(w);
}

/* The future's done-callback: a cancelled await disarms its watch. */
static PyObject *waiter_call(PyObject *self, PyObject *args, PyObject *kw)
{
    (void)args;
    (void)kw;
    WaiterObject *w = (WaiterObject *)self;
    if (w->watch == NULL || w->future == NULL)
        Py_RETURN_NONE; /* settled already */
    if (mxd_watch_cancel(w->watch)) {
        waiter_free_watch(w);
        waiter_finish(w);
    } else {
        /* It fired: the waker has it on its list and drops it there. */
        Py_CLEAR(w->future);
    }
    Py_RETURN_NONE;
}

static void waiter_dealloc(PyObject *self)
{
    WaiterObject *w = (WaiterObject *)self;
    PyTypeObject *type = Py_TYPE(self);
    Py_XDECREF(w->future);
    Py_XDECREF(w->owner);
    if (w->waker)
        waker_core_release(w->waker);
    atomic_fetch_sub(&live_waiters, 1);
    type->tp_free(self);
    Py_DECREF(type);
}

static WaiterObject *waiter_new(binding_async *a, waker_core *k,
                                PyObject *owner, binding_await_outcome outcome)
{
    WaiterObject *w = PyObject_New(WaiterObject, a->waiter_type);
    if (w == NULL)
        return NULL;
    atomic_fetch_add(&k->refs, 1);
    atomic_fetch_add(&live_waiters, 1);
    w->next = NULL;
    w->waker = k;
    w->watch = NULL;
    w->future = NULL;
    w->owner = Py_NewRef(owner);
    w->outcome = outcome;
    return w;
}

/* ---- Wakers ------------------------------------------------------------- */

/* loop.add_reader calls the waker when its eventfd is readable. */
static PyObject *waker_call(PyObject *self, PyObject *args, PyObject *kw)
{
    (void)args;
    (void)kw;
    waker_core *k = ((WakerObject *)self)->core;
    uint64_t count;
    while (read(k->fd, &count, sizeof count) < 0 && errno == EINTR)
        ;
    pthread_mutex_lock(&k->mu);
    WaiterObject *w = k->fired;
    k->fired = k->fired_tail = NULL;
    k->signalled = false;
    pthread_mutex_unlock(&k->mu);
    binding_async *a = async_of(self);
    while (w != NULL) {
        WaiterObject *next = w->next;
        waiter_settle(a, w);
        w = next;
    }
    Py_RETURN_NONE;
}

static void waker_dealloc(PyObject *self)
{
    PyTypeObject *type = Py_TYPE(self);
    if (((WakerObject *)self)->core)
        waker_core_release(((WakerObject *)self)->core);
    type->tp_free(self);
    Py_DECREF(type);
}

/* A new waker, registered with the loop. */
static PyObject *waker_new(binding_async *a, PyObject *loop)
{
    WakerObject *wk = PyObject_New(WakerObject, a->waker_type);
    if (wk == NULL)
        return NULL;
    wk->core = waker_core_new();
    if (wk->core == NULL) {
        Py_DECREF(wk);
        return NULL;
    }
    PyObject *fd = PyLong_FromLong(wk->core->fd);
    PyObject *args[] = {loop, fd, (PyObject *)wk};
    PyObject *r =
        fd ? PyObject_VectorcallMethod(a->names[NAME_ADD_READER], args,
                                       3 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL)
           : NULL;
    Py_XDECREF(fd);
    if (r == NULL) {
        Py_DECREF(wk);
        return NULL;
    }
    Py_DECREF(r);
    return (PyObject *)wk;
}

/* asyncio's lookups, on the first await. */
static int async_load(binding_async *a)
{
    if (a->get_running_loop != NULL)
        return 0;
    PyObject *asyncio = PyImport_ImportModule("asyncio");
    PyObject *weakref = asyncio ? PyImport_ImportModule("weakref") : NULL;
    PyObject *fn =
        weakref ? PyObject_GetAttrString(asyncio, "_get_running_loop") : NULL;
    PyObject *wakers =
        fn ? PyObject_CallMethod(weakref, "WeakKeyDictionary", NULL) : NULL;
    Py_XDECREF(asyncio);
    Py_XDECREF(weakref);
    if (wakers == NULL) {
        Py_XDECREF(fn);
        return -1;
    }
    a->get_running_loop = fn;
    a->wakers = wakers;
    return 0;
}

/* The waker of `loop` (borrowed from the cache), made on first use. */
static PyObject *waker_for(binding_async *a, PyObject *loop)
{
    PyObject *cached = a->last_loop ? compat_weakref_get(a->last_loop) : NULL;
    Py_XDECREF(cached); /* only compared */
    if (cached == loop)
        return a->last_waker;
    PyObject *waker = PyObject_GetItem(a->wakers, loop);
    if (waker == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_KeyError))
            return NULL;
        PyErr_Clear();
        waker = waker_new(a, loop);
        if (waker == NULL || PyObject_SetItem(a->wakers, loop, waker) < 0) {
            Py_XDECREF(waker);
            return NULL;
        }
    }
    PyObject *ref = PyWeakref_NewRef(loop, NULL);
    if (ref == NULL) {
        Py_DECREF(waker);
        return NULL;
    }
    Py_XSETREF(a->last_loop, ref);
    Py_XSETREF(a->last_waker, waker);
    return waker;
}

/* ---- await -------------------------------------------------------------- */

/* fut.__await__(): the iterator `await fut` drives. */
static PyObject *future_iter(binding_async *a, PyObject *fut)
{
    PyAsyncMethods *am = Py_TYPE(fut)->tp_as_async;
    if (am != NULL && am->am_await != NULL)
        return am->am_await(fut);
    return PyObject_CallMethodNoArgs(fut, a->names[NAME_AWAIT]);
}

/* The running loop (a new reference), or NULL with RuntimeError. */
static PyObject *running_loop(binding_async *a, PyObject *owner)
{
    if (async_load(a) < 0)
        return NULL;
    PyObject *loop = PyObject_CallNoArgs(a->get_running_loop);
    if (loop == Py_None) {
        Py_DECREF(loop);
        const char *name = Py_TYPE(owner)->tp_name;
        const char *dot = strrchr(name, '.');
        PyErr_Format(PyExc_RuntimeError,
                     "awaiting a %s needs a running asyncio event loop "
                     "(asyncio.run, or anyio with its asyncio backend); "
                     "outside one, call synchronize()",
                     dot ? dot + 1 : name);
        return NULL;
    }
    return loop;
}

/* What `await` iterates when there is nothing to wait for. */
static PyObject *completed(binding_async *a, PyObject *loop, PyObject *result)
{
    if (result == NULL)
        return NULL;
    if (result == Py_None) {
        Py_DECREF(result);
        PyObject *empty = PyTuple_New(0);
        PyObject *it = empty ? PyObject_GetIter(empty) : NULL;
        Py_XDECREF(empty);
        return it;
    }
    PyObject *fut =
        PyObject_CallMethodNoArgs(loop, a->names[NAME_CREATE_FUTURE]);
    int rc = fut ? call_method1(a, fut, NAME_SET_RESULT, result) : -1;
    Py_DECREF(result);
    PyObject *it = rc == 0 ? future_iter(a, fut) : NULL;
    Py_XDECREF(fut);
    return it;
}

/* Arms the waiter's watch; *armed false when there is nothing to wait
 * for.  The core's reference to the waiter is taken first: a core thread
 * may fire the watch before `start` returns. */
static void arm(WaiterObject *w, binding_watch_start start, bool *armed,
                PyObject **result)
{
    mxd_error err;
    mxd_watch *watch;
    Py_INCREF(w);
    mxd_status status = start(w->owner, waiter_fire, w, &watch, &err);
    *armed = status == MXD_OK && watch != NULL;
    if (*armed) {
        w->watch = watch;
        return;
    }
    Py_DECREF(w);
    *result = w->outcome(w->owner, status, &err);
}

PyObject *binding_await(PyObject *owner, binding_watch_start start,
                        binding_await_outcome outcome)
{
    binding_async *a = async_of(owner);
    PyObject *loop = running_loop(a, owner);
    if (loop == NULL)
        return NULL;
    PyObject *waker = waker_for(a, loop);
    PyObject *fut =
        waker ? PyObject_CallMethodNoArgs(loop, a->names[NAME_CREATE_FUTURE])
              : NULL;
    WaiterObject *w =
        fut ? waiter_new(a, ((WakerObject *)waker)->core, owner, outcome)
            : NULL;
    if (w == NULL) {
        Py_XDECREF(fut);
        Py_DECREF(loop);
        return NULL;
    }
    bool armed;
    PyObject *result = NULL;
    arm(w, start, &armed, &result);
    if (!armed) {
        Py_DECREF(w);
        Py_DECREF(fut);
        PyObject *it = completed(a, loop, result);
        Py_DECREF(loop);
        return it;
    }
    Py_DECREF(loop);
    w->future = Py_NewRef(fut);
    PyObject *it = NULL;
    if (call_method1(a, fut, NAME_ADD_DONE_CALLBACK, (PyObject *)w) == 0)
        it = future_iter(a, fut);
    if (it == NULL) {
        /* Nobody will await the future: disarm as a cancel would. */
        PyObject *exc = compat_take_exception();
        PyObject *r = waiter_call((PyObject *)w, NULL, NULL);
        Py_XDECREF(r);
        compat_restore_exception(exc);
    }
    Py_DECREF(w);
    Py_DECREF(fut);
    return it;
}

PyObject *binding_await_outcome_sync(PyObject *owner, mxd_status status,
                                     const mxd_error *err)
{
    (void)owner;
    if (status != MXD_OK)
        return binding_raise(err);
    Py_RETURN_NONE;
}

/* ---- Introspection and types -------------------------------------------- */

PyObject *binding_async_stats(PyObject *module, PyObject *unused)
{
    (void)unused;
    binding_async *a = &((binding_state *)PyModule_GetState(module))->async;
    Py_ssize_t wakers = a->wakers ? PyObject_Length(a->wakers) : 0;
    if (wakers < 0)
        return NULL;
    return Py_BuildValue(
        "{s:l,s:l,s:n,s:O}", "armed_watches", mxd_watch_armed(), "waiters",
        atomic_load(&live_waiters), "event_loops", wakers, "watcher_thread",
        mxd_watch_thread_running() ? Py_True : Py_False);
}

static PyType_Slot waker_slots[] = {
    {Py_tp_doc, "The eventfd one asyncio event loop watches for the "
                "completions its awaits wait for (internal)."},
    {Py_tp_call, waker_call},
    {Py_tp_dealloc, waker_dealloc},
    {0, NULL},
};

/* Neither type holds references the cycle collector could break: a
 * waker holds none, and a waiter's future holds it only until the future
 * is done (asyncio then drops its callbacks), while the core's reference
 * keeps an armed waiter alive whatever the collector sees. */
static PyType_Spec waker_spec = {
    .name = "max._core.driver._AsyncWaker",
    .basicsize = sizeof(WakerObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE |
             Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = waker_slots,
};

static PyType_Slot waiter_slots[] = {
    {Py_tp_doc, "One pending await: the done-callback of its future "
                "(internal)."},
    {Py_tp_call, waiter_call},
    {Py_tp_dealloc, waiter_dealloc},
    {0, NULL},
};

static PyType_Spec waiter_spec = {
    .name = "max._core.driver._AsyncWaiter",
    .basicsize = sizeof(WaiterObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE |
             Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = waiter_slots,
};

int binding_add_async_types(PyObject *module, binding_state *st)
{
    binding_async *a = &st->async;
    a->waker_type =
        (PyTypeObject *)PyType_FromModuleAndSpec(module, &waker_spec, NULL);
    a->waiter_type =
        (PyTypeObject *)PyType_FromModuleAndSpec(module, &waiter_spec, NULL);
    if (a->waker_type == NULL || a->waiter_type == NULL)
        return -1;
    for (int i = 0; i < NAME_COUNT; i++)
        if (!(a->names[i] = PyUnicode_InternFromString(method_names[i])))
            return -1;
    return 0;
}

int binding_async_traverse(binding_async *a, visitproc visit, void *arg)
{
    Py_VISIT(a->waker_type);
    Py_VISIT(a->waiter_type);
    Py_VISIT(a->get_running_loop);
    Py_VISIT(a->wakers);
    Py_VISIT(a->last_loop);
    Py_VISIT(a->last_waker);
    return 0;
}

void binding_async_clear(binding_async *a)
{
    Py_CLEAR(a->waker_type);
    Py_CLEAR(a->waiter_type);
    Py_CLEAR(a->get_running_loop);
    Py_CLEAR(a->wakers);
    Py_CLEAR(a->last_loop);
    Py_CLEAR(a->last_waker);
    for (int i = 0; i < NAME_COUNT; i++)
        Py_CLEAR(a->names[i]);
}
