/* DeviceQueue: an in-order queue of work on one device (SPEC §4). */
#include "binding.h"

#include <string.h>

static mxd_queue *queue_of(PyObject *self)
{
    return ((QueueObject *)self)->queue;
}

/* ---- Construction and lifetime ------------------------------------------ */

static const char *const device_names[] = {"device"};

static PyObject *queue_tp_new(PyTypeObject *type, PyObject *args,
                              PyObject *kwargs)
{
    const binding_params params = {"DeviceQueue", device_names, 1, 1};
    binding_state *st = binding_type_state(type);
    PyObject *device;
    if (binding_parse_tuple(&params, args, kwargs, &device) < 0 ||
        binding_check_type("DeviceQueue", "device", device, st->device_type) <
            0)
        return NULL;
    mxd_queue *queue;
    mxd_error err;
    mxd_device *dev = ((DeviceObject *)device)->device;
    mxd_status status;
    /* A GPU queue may need pinned memory, whose allocation may wait for
     * the device, whose work may wait for a host function. */
    Py_BEGIN_ALLOW_THREADS
        status = mxd_queue_create(dev, &queue, &err);
    Py_END_ALLOW_THREADS
    if (status != MXD_OK)
        return binding_raise(&err);
    return binding_queue_wrap(st, queue);
}

static void queue_dealloc(PyObject *self)
{
    PyTypeObject *type = Py_TYPE(self);
    mxd_queue *queue = queue_of(self);
    /* Nobody can end a capture this queue began once the queue is gone:
     * it ends here, thrown away (from the capturing thread only; another
     * thread's capture is not this thread's to end). */
    mxd_error ignored;
    if (mxd_queue_is_capturing(queue))
        (void)mxd_queue_discard_capture(queue, &ignored);
    /* The last release may wait for the queue's worker or driver stream to
     * wind down, and that worker may be waiting for the GIL to finish a
     * host function: release the queue without holding the GIL. */
    Py_BEGIN_ALLOW_THREADS
        mxd_queue_release(queue);
    Py_END_ALLOW_THREADS
    type->tp_free(self);
    Py_DECREF(type);
}

/* ---- Properties --------------------------------------------------------- */

static PyObject *queue_get_device(PyObject *self, void *closure)
{
    (void)closure;
    return binding_device_object(binding_state_of(self),
                                 mxd_queue_device(queue_of(self)));
}

static PyObject *queue_get_native_stream_handle(PyObject *self, void *closure)
{
    (void)closure;
    return PyLong_FromSize_t((size_t)mxd_queue_native_handle(queue_of(self)));
}

static PyObject *queue_cuda_stream(PyObject *self, PyObject *unused)
{
    (void)unused;
    /* (version, handle) per the CUDA stream interoperability protocol. */
    return Py_BuildValue("(in)", 0,
                         (Py_ssize_t)mxd_queue_native_handle(queue_of(self)));
}

static PyMethodDef queue_cuda_stream_def = {
    "__cuda_stream__", queue_cuda_stream, METH_NOARGS,
    BINDING_DOC("__cuda_stream__", "($self, /)",
                "(0, native_stream_handle): the CUDA stream interoperability "
                "protocol. Only present on CUDA queues.")};

/* A descriptor rather than a method, so that hasattr(q, "__cuda_stream__")
 * is False on queues that are not CUDA streams, without slowing down the
 * lookup of every other method with a custom tp_getattro. */
static PyObject *queue_get_cuda_stream(PyObject *self, void *closure)
{
    (void)closure;
    const char *api = mxd_device_api(mxd_queue_device(queue_of(self)));
    if (strcmp(api, "cuda") != 0) {
        PyErr_Format(PyExc_AttributeError,
                     "'DeviceQueue' object has no attribute "
                     "'__cuda_stream__' (the queue is a %s queue, not a "
                     "CUDA stream)",
                     api);
        return NULL;
    }
    return PyCFunction_NewEx(&queue_cuda_stream_def, self, NULL);
}

static PyObject *queue_get_is_capturing(PyObject *self, void *closure)
{
    (void)closure;
    return PyBool_FromLong(mxd_queue_is_capturing(queue_of(self)));
}

static PyGetSetDef queue_getset[] = {
    {"device", queue_get_device, NULL, "The owning Device.", NULL},
    {"native_stream_handle", queue_get_native_stream_handle, NULL,
     "The CUstream / hipStream_t as an int; 0 on CPU. Owned by the queue.",
     NULL},
    {"__cuda_stream__", queue_get_cuda_stream, NULL,
     "__cuda_stream__() -> (0, native_stream_handle); CUDA queues only.", NULL},
    {"is_capturing", queue_get_is_capturing, NULL,
     "True while the queue takes part in a capture (began it, or joined it "
     "by waiting for work of a capturing queue).",
     NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

/* ---- synchronize -------------------------------------------------------- */

static PyObject *queue_synchronize(PyObject *self, PyObject *const *args,
                                   Py_ssize_t nargs, PyObject *kwnames)
{
    double timeout;
    if (binding_parse_timeout_only("synchronize", args, nargs, kwnames,
                                   &timeout) < 0)
        return NULL;
    mxd_queue *queue = queue_of(self);
    binding_wait w;
    binding_wait_init(&w, timeout);
    mxd_error err;
    mxd_status status;
    if (mxd_queue_is_idle(queue)) {
        /* Nothing to wait for: skip the GIL round trip, but still let the
         * core report an error that earlier work ran into. */
        status = mxd_queue_synchronize(queue, &w.wait, &err);
    } else {
        binding_wait_release_gil(&w);
        status = mxd_queue_synchronize(queue, &w.wait, &err);
        binding_wait_acquire_gil(&w);
    }
    if (status != MXD_OK)
        return binding_raise(&err);
    Py_RETURN_NONE;
}

/* ---- record_event ------------------------------------------------------- */

static const char *const record_event_overloads[] = {
    "record_event(self) -> DeviceEvent",
    "record_event(self, event: DeviceEvent) -> None",
};

static PyObject *record_new_event(PyObject *self)
{
    mxd_queue *queue = queue_of(self);
    PyObject *event = binding_event_new(binding_state_of(self)->event_type,
                                        mxd_queue_device(queue), false);
    if (event == NULL)
        return NULL;
    mxd_error err;
    mxd_event *ev = ((EventObject *)event)->event;
    mxd_status status;
    BINDING_ENQUEUE(queue, status = mxd_queue_record(queue, ev, &err));
    if (status != MXD_OK) {
        Py_DECREF(event);
        return binding_raise(&err);
    }
    if (binding_keep_in_capture(queue, event) < 0) {
        Py_DECREF(event);
        return NULL;
    }
    return event;
}

static PyObject *record_existing_event(PyObject *self, PyObject *event)
{
    mxd_error err; /* the core checks the event's device */
    mxd_queue *queue = queue_of(self);
    mxd_event *ev = ((EventObject *)event)->event;
    mxd_status status;
    BINDING_ENQUEUE(queue, status = mxd_queue_record(queue, ev, &err));
    if (status != MXD_OK)
        return binding_raise(&err);
    if (binding_keep_in_capture(queue, event) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static int is_keyword(PyObject *kwnames, const char *name)
{
    return kwnames != NULL && PyTuple_GET_SIZE(kwnames) == 1 &&
           PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, 0),
                                            name) == 0;
}

static PyObject *queue_record_event(PyObject *self, PyObject *const *args,
                                    Py_ssize_t nargs, PyObject *kwnames)
{
    if (nargs == 0 && kwnames == NULL)
        return record_new_event(self);
    PyTypeObject *event_type = binding_state_of(self)->event_type;
    PyObject *event = NULL;
    if (nargs == 1 && kwnames == NULL)
        event = args[0];
    else if (nargs == 0 && is_keyword(kwnames, "event"))
        event = args[0];
    if (event != NULL && Py_IS_TYPE(event, event_type))
        return record_existing_event(self, event);
    return binding_overload_error("record_event", record_event_overloads, 2,
                                  self, args, nargs, kwnames);
}

/* ---- wait_for ----------------------------------------------------------- */

static const char *const wait_for_overloads[] = {
    "wait_for(self, stream: DeviceQueue) -> None",
    "wait_for(self, device: Device) -> None",
    "wait_for(self, event: DeviceEvent) -> None",
};

static PyObject *wait_for_queue(PyObject *self, mxd_queue *other)
{
    mxd_error err; /* waiting for oneself is a no-op in the core */
    mxd_queue *queue = queue_of(self);
    mxd_status status;
    BINDING_ENQUEUE(queue, status = mxd_queue_wait_queue(queue, other, &err));
    if (status != MXD_OK)
        return binding_raise(&err);
    Py_RETURN_NONE;
}

static PyObject *wait_for_device(PyObject *self, PyObject *device)
{
    PyObject *other = binding_device_default_queue((DeviceObject *)device);
    if (other == NULL)
        return NULL;
    return wait_for_queue(self, queue_of(other));
}

static PyObject *wait_for_event(PyObject *self, PyObject *event)
{
    mxd_error err;
    mxd_queue *queue = queue_of(self);
    mxd_event *ev = ((EventObject *)event)->event;
    mxd_status status;
    BINDING_ENQUEUE(queue, status = mxd_queue_wait_event(queue, ev, &err));
    if (status != MXD_OK)
        return binding_raise(&err);
    /* A wait for an event outside the capture is made at every launch. */
    if (binding_keep_in_capture(queue, event) < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* Positional: by the argument's type. */
static PyObject *wait_for_positional(PyObject *self, binding_state *st,
                                     PyObject *arg)
{
    if (Py_IS_TYPE(arg, st->queue_type))
        return wait_for_queue(self, queue_of(arg));
    if (Py_IS_TYPE(arg, st->event_type))
        return wait_for_event(self, arg);
    if (PyObject_TypeCheck(arg, st->device_type))
        return wait_for_device(self, arg);
    return NULL; /* no overload, no exception set */
}

/* Keyword: by the keyword's name, and the value must have that type. */
static PyObject *wait_for_keyword(PyObject *self, binding_state *st,
                                  PyObject *name, PyObject *arg)
{
    if (PyUnicode_CompareWithASCIIString(name, "stream") == 0) {
        if (Py_IS_TYPE(arg, st->queue_type))
            return wait_for_queue(self, queue_of(arg));
    } else if (PyUnicode_CompareWithASCIIString(name, "device") == 0) {
        if (PyObject_TypeCheck(arg, st->device_type))
            return wait_for_device(self, arg);
    } else if (PyUnicode_CompareWithASCIIString(name, "event") == 0) {
        if (Py_IS_TYPE(arg, st->event_type))
            return wait_for_event(self, arg);
    }
    return NULL;
}

static PyObject *queue_wait_for(PyObject *self, PyObject *const *args,
                                Py_ssize_t nargs, PyObject *kwnames)
{
    binding_state *st = binding_state_of(self);
    PyObject *result = NULL;
    if (nargs == 1 && kwnames == NULL)
        result = wait_for_positional(self, st, args[0]);
    else if (nargs == 0 && kwnames != NULL && PyTuple_GET_SIZE(kwnames) == 1)
        result =
            wait_for_keyword(self, st, PyTuple_GET_ITEM(kwnames, 0), args[0]);
    if (result != NULL || PyErr_Occurred())
        return result;
    return binding_overload_error("wait_for", wait_for_overloads, 3, self, args,
                                  nargs, kwnames);
}

/* ---- wait_for_host_value and host functions ----------------------------- */

static const char *const wait_value_names[] = {"flag", "value"};

static PyObject *queue_wait_for_host_value(PyObject *self,
                                           PyObject *const *args,
                                           Py_ssize_t nargs, PyObject *kwnames)
{
    static const char fname[] = "wait_for_host_value";
    const binding_params params = {fname, wait_value_names, 2, 2};
    binding_state *st = binding_state_of(self);
    PyObject *argv[2];
    uint64_t value;
    if (binding_parse_fast(&params, args, nargs, kwnames, argv) < 0 ||
        binding_check_type(fname, "flag", argv[0], st->flag_type) < 0 ||
        binding_parse_u64(fname, "value", argv[1], &value) < 0)
        return NULL;
    mxd_error err; /* the core checks the flag's device */
    mxd_queue *queue = queue_of(self);
    mxd_flag *flag = ((FlagObject *)argv[0])->flag;
    mxd_status status;
    BINDING_ENQUEUE(queue,
                    status = mxd_queue_wait_value(queue, flag, value, &err));
    if (status != MXD_OK)
        return binding_raise(&err);
    Py_RETURN_NONE;
}

static PyObject *queue_enqueue_host_fn(PyObject *self, PyObject *const *args,
                                       Py_ssize_t nargs, PyObject *kwnames)
{
    return binding_enqueue_host_fn("__unsafe_enqueue_py_host_func",
                                   queue_of(self), args, nargs, kwnames);
}

static PyObject *queue_enqueue_async_host_fn(PyObject *self,
                                             PyObject *const *args,
                                             Py_ssize_t nargs,
                                             PyObject *kwnames)
{
    return binding_enqueue_async_host_fn(binding_state_of(self),
                                         "__unsafe_enqueue_async_py_host_func",
                                         queue_of(self), args, nargs, kwnames);
}

/* ---- Graph capture (SPEC §16) ------------------------------------------ */

static PyObject *queue_begin_capture(PyObject *self, PyObject *unused)
{
    (void)unused;
    mxd_queue *queue = queue_of(self);
    mxd_error err;
    mxd_status status;
    Py_BEGIN_ALLOW_THREADS /* may create a driver stream */
        status = mxd_queue_begin_capture(queue, &err);
    Py_END_ALLOW_THREADS
    if (status != MXD_OK)
        return binding_raise(&err);
    Py_RETURN_NONE;
}

static PyObject *queue_end_capture(PyObject *self, PyObject *unused)
{
    (void)unused;
    return binding_end_capture(binding_state_of(self), queue_of(self));
}

static PyObject *queue_discard_capture(PyObject *self, PyObject *unused)
{
    (void)unused;
    mxd_error err;
    if (mxd_queue_discard_capture(queue_of(self), &err) != MXD_OK)
        return binding_raise(&err);
    Py_RETURN_NONE;
}

static PyObject *queue_context_ptr(PyObject *self, PyObject *unused)
{
    (void)unused;
    return PyLong_FromVoidPtr(queue_of(self));
}

/* ---- await (SPEC §15) --------------------------------------------------- */

/* On an accelerator the watch records an event on the queue's stream: an
 * enqueue, which may block (BINDING_ENQUEUE); the watch's function touches
 * no Python object, so it may fire meanwhile. */
static mxd_status queue_watch_start(PyObject *owner, mxd_watch_fn fn, void *ctx,
                                    mxd_watch **out, mxd_error *err)
{
    mxd_queue *queue = queue_of(owner);
    mxd_status status;
    BINDING_ENQUEUE(queue, status = mxd_watch_queue(queue, fn, ctx, out, err));
    return status;
}

static PyObject *queue_await(PyObject *self)
{
    return binding_await(self, queue_watch_start, binding_await_outcome_sync);
}

#define FASTCALL_KW(fn) (PyCFunction)(void (*)(void))(fn)

static PyMethodDef queue_methods[] = {
    {"synchronize", FASTCALL_KW(queue_synchronize),
     METH_FASTCALL | METH_KEYWORDS,
     BINDING_DOC("synchronize", "($self, /, timeout=None)",
                 "Blocks until everything enqueued before the call has "
                 "completed.\n\nThe GIL is released while waiting. timeout: "
                 "None waits forever, else seconds before TimeoutError. "
                 "ValueError if an enqueued operation had a driver error.")},
    {"record_event", FASTCALL_KW(queue_record_event),
     METH_FASTCALL | METH_KEYWORDS,
     BINDING_DOC("record_event", "($self, /, event=...)",
                 "Records an event at the current end of the queue.\n\n"
                 "`event` is optional (`...` in the signature: no default "
                 "value).\n\n"
                 "Overloads:\n"
                 "    1. record_event(self) -> DeviceEvent\n"
                 "       Returns a new event (timing disabled).\n"
                 "    2. record_event(self, event: DeviceEvent) -> None\n"
                 "       Re-records `event` (of this queue's device) here.")},
    {"wait_for", FASTCALL_KW(queue_wait_for), METH_FASTCALL | METH_KEYWORDS,
     BINDING_DOC("wait_for", "($self, /, stream=..., device=..., event=...)",
                 "Makes work enqueued afterwards wait; pass exactly one of "
                 "the arguments, by position or by keyword.\n\n"
                 "Overloads:\n"
                 "    1. wait_for(self, stream: DeviceQueue) -> None\n"
                 "       Waits for everything enqueued on `stream` so far.\n"
                 "    2. wait_for(self, device: Device) -> None\n"
                 "       The same against device.default_queue.\n"
                 "    3. wait_for(self, event: DeviceEvent) -> None\n"
                 "       Waits for the point `event` is recorded at now.")},
    {"wait_for_host_value", FASTCALL_KW(queue_wait_for_host_value),
     METH_FASTCALL | METH_KEYWORDS,
     BINDING_DOC("wait_for_host_value", "($self, /, flag, value)",
                 "Returns at once; work enqueued afterwards starts only once "
                 "flag's value equals `value` (0..2**64-1).")},
    {"__unsafe_enqueue_py_host_func", FASTCALL_KW(queue_enqueue_host_fn),
     METH_FASTCALL | METH_KEYWORDS,
     BINDING_DOC("__unsafe_enqueue_py_host_func", "($self, /, fn)",
                 "Enqueues fn() on this queue; it runs on a worker thread "
                 "holding the GIL. Exceptions go to sys.unraisablehook.")},
    {"__unsafe_enqueue_async_py_host_func",
     FASTCALL_KW(queue_enqueue_async_host_fn), METH_FASTCALL | METH_KEYWORDS,
     BINDING_DOC("__unsafe_enqueue_async_py_host_func",
                 "($self, /, fn, flag, value, cpu)",
                 "Enqueues a kickoff that resets flag, hands fn to the CPU "
                 "device's workers and lets the queue go on; after fn() "
                 "returns (or raises) value is signalled into flag.")},
    {"begin_capture", queue_begin_capture, METH_NOARGS,
     BINDING_DOC("begin_capture", "($self, /)",
                 "Starts capturing: work this thread enqueues on the queue "
                 "afterwards is recorded into a graph instead of running. "
                 "RuntimeError when the queue captures already or the "
                 "driver cannot capture (naming what it lacks).")},
    {"end_capture", queue_end_capture, METH_NOARGS,
     BINDING_DOC("end_capture", "($self, /)",
                 "Ends the capture this queue began and returns the "
                 "DeviceGraph. RuntimeError when it began none, or when a "
                 "queue that joined the capture was not joined back (named; "
                 "the capture is discarded).")},
    {"_discard_capture", queue_discard_capture, METH_NOARGS,
     BINDING_DOC("_discard_capture", "($self, /)",
                 "Ends the capture this queue began and throws it away "
                 "(max.driver.capture's exit on an exception).")},
    {"_device_context_ptr", queue_context_ptr, METH_NOARGS,
     BINDING_DOC("_device_context_ptr", "($self, /)",
                 "An int identifying the native queue.")},
    {"__reduce_ex__", binding_refuse_pickle, METH_O,
     BINDING_DOC("__reduce_ex__", "($self, protocol, /)",
                 "Raises TypeError: a queue is a resource of one process.")},
    {NULL, NULL, 0, NULL},
};

/* ---- Comparison and text ------------------------------------------------ */

static PyObject *queue_richcompare(PyObject *self, PyObject *other, int op)
{
    return binding_compare_native(self, other, op,
                                  offsetof(QueueObject, queue));
}

static Py_hash_t queue_hash(PyObject *self)
{
    return compat_hash_pointer(queue_of(self));
}

static PyObject *queue_repr(PyObject *self)
{
    mxd_queue *queue = queue_of(self);
    mxd_device *dev = mxd_queue_device(queue);
    return PyUnicode_FromFormat(
        "%s[%d]:queue@%p%s", mxd_device_api(dev), mxd_device_id(dev),
        (void *)queue, mxd_queue_is_default(queue) ? " (default)" : "");
}

static PyType_Slot queue_slots[] = {
    {Py_tp_doc,
     BINDING_DOC("DeviceQueue", "(device)",
                 "A new in-order queue of work on `device`.\n\n"
                 "Awaitable in asyncio: `await queue` completes when "
                 "everything enqueued before the await is complete, without "
                 "blocking the event loop.")},
    {Py_tp_new, queue_tp_new},
    {Py_tp_dealloc, queue_dealloc},
    {Py_tp_repr, queue_repr},
    {Py_tp_hash, queue_hash},
    {Py_tp_richcompare, queue_richcompare},
    {Py_tp_methods, queue_methods},
    {Py_tp_getset, queue_getset},
    {Py_am_await, queue_await},
    {0, NULL},
};

/* Holds no Python references, so no GC support. */
static PyType_Spec queue_spec = {
    .name = "max._core.driver.DeviceQueue",
    .basicsize = sizeof(QueueObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = queue_slots,
};

int binding_add_queue_type(PyObject *module, binding_state *st)
{
    st->queue_type = binding_add_type(module, &queue_spec, NULL);
    return st->queue_type == NULL ? -1 : 0;
}
