/* DeviceEvent: a point in a queue's work (SPEC §5). */
#include "binding.h"

static mxd_event *event_of(PyObject *self)
{
    return ((EventObject *)self)->event;
}

/* ---- Construction and lifetime ------------------------------------------ */

static const char *const new_names[] = {"device", "enable_timing"};

static PyObject *event_tp_new(PyTypeObject *type, PyObject *args,
                              PyObject *kwargs)
{
    const binding_params params = {"DeviceEvent", new_names, 2, 1};
    binding_state *st = binding_type_state(type);
    PyObject *argv[2];
    if (binding_parse_tuple(&params, args, kwargs, argv) < 0 ||
        binding_check_type("DeviceEvent", "device", argv[0], st->device_type) <
            0)
        return NULL;
    int timing = argv[1] != NULL ? PyObject_IsTrue(argv[1]) : 0;
    if (timing < 0)
        return NULL;
    return binding_event_new(type, ((DeviceObject *)argv[0])->device,
                             timing != 0);
}

PyObject *binding_event_new(PyTypeObject *type, mxd_device *device,
                            bool enable_timing)
{
    EventObject *self = PyObject_New(EventObject, type);
    if (self == NULL)
        return NULL;
    self->event = NULL;
    mxd_error err;
    if (mxd_event_init(&self->storage, device, enable_timing, &self->event,
                       &err) != MXD_OK) {
        Py_DECREF(self);
        return binding_raise(&err);
    }
    return (PyObject *)self;
}

static void event_dealloc(PyObject *self)
{
    PyTypeObject *type = Py_TYPE(self);
    /* Cheap and non-blocking: work that still refers to the event keeps
     * what it needs alive in the core. */
    mxd_event_fini(event_of(self));
    type->tp_free(self);
    Py_DECREF(type);
}

/* ---- Methods ------------------------------------------------------------ */

static PyObject *event_synchronize(PyObject *self, PyObject *const *args,
                                   Py_ssize_t nargs, PyObject *kwnames)
{
    double timeout;
    if (binding_parse_timeout_only("synchronize", args, nargs, kwnames,
                                   &timeout) < 0)
        return NULL;
    mxd_event *event = event_of(self);
    mxd_error err;
    bool ready;
    /* Already complete (or unrecorded): no GIL round trip. The query also
     * reports a driver error of the recorded work. */
    if (mxd_event_query(event, &ready, &err) != MXD_OK)
        return binding_raise(&err);
    if (ready)
        Py_RETURN_NONE;
    binding_wait w;
    binding_wait_init(&w, timeout);
    binding_wait_release_gil(&w);
    mxd_status status = mxd_event_synchronize(event, &w.wait, &err);
    binding_wait_acquire_gil(&w);
    if (status != MXD_OK)
        return binding_raise(&err);
    Py_RETURN_NONE;
}

static PyObject *event_is_ready(PyObject *self, PyObject *unused)
{
    (void)unused;
    bool ready;
    mxd_error err;
    if (mxd_event_query(event_of(self), &ready, &err) != MXD_OK)
        return binding_raise(&err);
    return PyBool_FromLong(ready);
}

static const char *const elapsed_names[] = {"end_event"};

static PyObject *event_elapsed_time(PyObject *self, PyObject *const *args,
                                    Py_ssize_t nargs, PyObject *kwnames)
{
    const binding_params params = {"elapsed_time", elapsed_names, 1, 1};
    PyObject *end;
    if (binding_parse_fast(&params, args, nargs, kwnames, &end) < 0 ||
        binding_check_type("elapsed_time", "end_event", end, Py_TYPE(self)) < 0)
        return NULL;
    double ms;
    mxd_error err;
    if (mxd_event_elapsed(event_of(self), event_of(end), &ms, &err) != MXD_OK)
        return binding_raise(&err);
    return PyFloat_FromDouble(ms);
}

/* ---- await (SPEC §15) --------------------------------------------------- */

static mxd_status event_watch_start(PyObject *owner, mxd_watch_fn fn, void *ctx,
                                    mxd_watch **out, mxd_error *err)
{
    return mxd_watch_event(event_of(owner), fn, ctx, out, err);
}

static PyObject *event_await(PyObject *self)
{
    return binding_await(self, event_watch_start, binding_await_outcome_sync);
}

static PyMethodDef event_methods[] = {
    {"synchronize", (PyCFunction)(void (*)(void))event_synchronize,
     METH_FASTCALL | METH_KEYWORDS,
     BINDING_DOC("synchronize", "($self, /, timeout=None)",
                 "Blocks until the recorded point is complete; no-op when "
                 "unrecorded.\n\nThe GIL is released while waiting. timeout: "
                 "None waits forever, else seconds before TimeoutError.")},
    {"is_ready", event_is_ready, METH_NOARGS,
     BINDING_DOC("is_ready", "($self, /)",
                 "True when the recorded point is complete or the event is "
                 "unrecorded. Never blocks.")},
    {"elapsed_time", (PyCFunction)(void (*)(void))event_elapsed_time,
     METH_FASTCALL | METH_KEYWORDS,
     BINDING_DOC("elapsed_time", "($self, /, end_event)",
                 "Milliseconds (float) from this event to `end_event`; both "
                 "need enable_timing=True and must be complete "
                 "(RuntimeError otherwise).")},
    {"__reduce_ex__", binding_refuse_pickle, METH_O,
     BINDING_DOC("__reduce_ex__", "($self, protocol, /)",
                 "Raises TypeError: an event is a resource of one process.")},
    {NULL, NULL, 0, NULL},
};

/* ---- Properties, comparison and text ------------------------------------ */

static PyObject *event_get_device(PyObject *self, void *closure)
{
    (void)closure;
    return binding_device_object(binding_state_of(self),
                                 mxd_event_device(event_of(self)));
}

static PyGetSetDef event_getset[] = {
    {"device", event_get_device, NULL, "The owning Device.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyObject *event_richcompare(PyObject *self, PyObject *other, int op)
{
    return binding_compare_native(self, other, op,
                                  offsetof(EventObject, event));
}

static Py_hash_t event_hash(PyObject *self)
{
    return compat_hash_pointer(event_of(self));
}

/* The native event's address, which re-recording does not change. */
static PyObject *event_repr(PyObject *self)
{
    mxd_event *event = event_of(self);
    mxd_device *dev = mxd_event_device(event);
    return PyUnicode_FromFormat("%s[%d]:event@%p", mxd_device_api(dev),
                                mxd_device_id(dev), (void *)event);
}

static PyType_Slot event_slots[] = {
    {Py_tp_doc,
     BINDING_DOC("DeviceEvent", "(device, enable_timing=False)",
                 "A new, unrecorded event on `device`; record it with "
                 "DeviceQueue.record_event(event).\n\n"
                 "Awaitable in asyncio: `await event` completes when the "
                 "recorded point is complete (at once when unrecorded), "
                 "without blocking the event loop.")},
    {Py_tp_new, event_tp_new},
    {Py_tp_dealloc, event_dealloc},
    {Py_tp_repr, event_repr},
    {Py_tp_hash, event_hash},
    {Py_tp_richcompare, event_richcompare},
    {Py_tp_methods, event_methods},
    {Py_tp_getset, event_getset},
    {Py_am_await, event_await},
    {0, NULL},
};

/* Holds no Python references, so no GC support. */
static PyType_Spec event_spec = {
    .name = "max._core.driver.DeviceEvent",
    .basicsize = sizeof(EventObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = event_slots,
};

int binding_add_event_type(PyObject *module, binding_state *st)
{
    st->event_type = binding_add_type(module, &event_spec, NULL);
    return st->event_type == NULL ? -1 : 0;
}
