/* HostHazardCompletion: a point in one queue's order that buffers' hazard
 * records can hold (SPEC §12.6, MAX's name), and HostHazardError. */
#include "binding.h"
#include "watch.h"

static mxd_completion *completion_of(PyObject *self)
{
    return ((CompletionObject *)self)->completion;
}

/* The completion, or NULL with an exception for an object made with
 * __new__ and never given one. */
static mxd_completion *checked(PyObject *self)
{
    mxd_completion *c = completion_of(self);
    if (c == NULL)
        PyErr_SetString(PyExc_ValueError,
                        "this HostHazardCompletion was never made: use "
                        "HostHazardCompletion.record_on(queue) or "
                        ".poisoned(queue, error)");
    return c;
}

/* Takes the reference to c (released on failure). */
static PyObject *wrap(PyTypeObject *type, mxd_completion *c)
{
    CompletionObject *self = PyObject_New(CompletionObject, type);
    if (self == NULL) {
        mxd_completion_release(c);
        return NULL;
    }
    self->completion = c;
    return (PyObject *)self;
}

static int check_queue(binding_state *st, const char *fname, PyObject *queue)
{
    return binding_check_type(fname, "queue", queue, st->queue_type);
}

static const char *const record_on_names[] = {"queue"};

static PyObject *completion_record_on(PyObject *cls, PyObject *const *args,
                                      Py_ssize_t nargs, PyObject *kwnames)
{
    binding_state *st = binding_type_state((PyTypeObject *)cls);
    const binding_params params = {"record_on", record_on_names, 1, 1};
    PyObject *queue;
    if (binding_parse_fast(&params, args, nargs, kwnames, &queue) < 0 ||
        check_queue(st, "record_on", queue) < 0)
        return NULL;
    mxd_queue *q = ((QueueObject *)queue)->queue;
    mxd_completion *c;
    mxd_error err;
    mxd_status status;
    BINDING_ENQUEUE(q, status = mxd_completion_record_on(q, &c, &err));
    if (status != MXD_OK)
        return binding_raise(&err);
    return wrap((PyTypeObject *)cls, c);
}

/* A message argument named `param`: a str, as UTF-8 (borrowed from the
 * object). */
static const char *parse_message(const char *fname, const char *param,
                                 PyObject *obj)
{
    if (!PyUnicode_Check(obj)) {
        PyErr_Format(PyExc_TypeError,
                     "%s(): argument '%s' must be str, not %.100s", fname,
                     param, Py_TYPE(obj)->tp_name);
        return NULL;
    }
    return PyUnicode_AsUTF8(obj);
}

/* MAX 26.7's names: poisoned(queue, error), poison(message). */
static const char *const poisoned_names[] = {"queue", "error"};

static PyObject *completion_poisoned(PyObject *cls, PyObject *const *args,
                                     Py_ssize_t nargs, PyObject *kwnames)
{
    binding_state *st = binding_type_state((PyTypeObject *)cls);
    const binding_params params = {"poisoned", poisoned_names, 2, 2};
    PyObject *argv[2];
    if (binding_parse_fast(&params, args, nargs, kwnames, argv) < 0 ||
        check_queue(st, "poisoned", argv[0]) < 0)
        return NULL;
    const char *message = parse_message("poisoned", "error", argv[1]);
    if (message == NULL)
        return NULL;
    mxd_completion *c;
    mxd_error err;
    if (mxd_completion_poisoned(((QueueObject *)argv[0])->queue, message, &c,
                                &err) != MXD_OK)
        return binding_raise(&err);
    return wrap((PyTypeObject *)cls, c);
}

static PyObject *completion_is_ready(PyObject *self, PyObject *unused)
{
    (void)unused;
    mxd_completion *c = checked(self);
    if (c == NULL)
        return NULL;
    mxd_queue *q = mxd_completion_queue(c);
    bool ready;
    mxd_error err;
    mxd_status status;
    /* May record the event of the point (an enqueue on its queue). */
    BINDING_ENQUEUE(q, status = mxd_completion_query(c, &ready, &err));
    if (status != MXD_OK)
        return binding_raise(&err);
    return PyBool_FromLong(ready);
}

static PyObject *completion_wait(PyObject *self, PyObject *const *args,
                                 Py_ssize_t nargs, PyObject *kwnames)
{
    double timeout;
    if (binding_parse_timeout_only("wait", args, nargs, kwnames, &timeout) < 0)
        return NULL;
    mxd_completion *c = checked(self);
    if (c == NULL)
        return NULL;
    binding_wait w;
    binding_wait_init(&w, timeout);
    mxd_error err;
    binding_wait_release_gil(&w);
    mxd_status status = mxd_completion_wait(c, &w.wait, &err);
    binding_wait_acquire_gil(&w);
    if (status != MXD_OK)
        return binding_raise(&err);
    Py_RETURN_NONE;
}

static const char *const poison_names[] = {"message"};

static PyObject *completion_poison(PyObject *self, PyObject *const *args,
                                   Py_ssize_t nargs, PyObject *kwnames)
{
    const binding_params params = {"poison", poison_names, 1, 1};
    PyObject *message;
    if (binding_parse_fast(&params, args, nargs, kwnames, &message) < 0)
        return NULL;
    mxd_completion *c = checked(self);
    const char *text = c ? parse_message("poison", "message", message) : NULL;
    if (text == NULL)
        return NULL;
    mxd_error err;
    if (mxd_completion_poison(c, text, &err) != MXD_OK)
        return binding_raise(&err);
    Py_RETURN_NONE;
}

/* ---- await (SPEC §15) --------------------------------------------------- */

static mxd_status completion_watch_start(PyObject *owner, mxd_watch_fn fn,
                                         void *ctx, mxd_watch **out,
                                         mxd_error *err)
{
    mxd_completion *c = completion_of(owner);
    if (c == NULL) {
        *out = NULL;
        return MXD_OK; /* the outcome raises */
    }
    return mxd_watch_completion(c, fn, ctx, out, err);
}

/* As wait(): HostHazardError when poisoned (also when it became poisoned
 * while awaited), else synchronize()'s outcome. */
static PyObject *completion_outcome(PyObject *owner, mxd_status status,
                                    const mxd_error *err)
{
    mxd_completion *c = checked(owner);
    if (c == NULL)
        return NULL;
    const char *poison = mxd_completion_poison_message(c);
    if (poison)
        return PyErr_Format(binding_hazard_error(), "%s", poison);
    return binding_await_outcome_sync(owner, status, err);
}

static PyObject *completion_await(PyObject *self)
{
    return binding_await(self, completion_watch_start, completion_outcome);
}

static PyObject *completion_repr(PyObject *self)
{
    mxd_completion *c = completion_of(self);
    if (c == NULL)
        return PyUnicode_FromString("<HostHazardCompletion (never made)>");
    const char *poison = mxd_completion_poison_message(c);
    mxd_queue *q = mxd_completion_queue(c);
    mxd_device *dev = mxd_queue_device(q);
    if (poison)
        return PyUnicode_FromFormat(
            "<HostHazardCompletion on %s[%d]:queue@%p, poisoned: %s>",
            mxd_device_api(dev), mxd_device_id(dev), (void *)q, poison);
    return PyUnicode_FromFormat("<HostHazardCompletion on %s[%d]:queue@%p>",
                                mxd_device_api(dev), mxd_device_id(dev),
                                (void *)q);
}

static PyObject *completion_tp_new(PyTypeObject *type, PyObject *args,
                                   PyObject *kwargs)
{
    (void)type;
    (void)args;
    (void)kwargs;
    PyErr_SetString(PyExc_TypeError,
                    "HostHazardCompletion cannot be created directly: use "
                    "HostHazardCompletion.record_on(queue) or "
                    "HostHazardCompletion.poisoned(queue, error)");
    return NULL;
}

static void completion_dealloc(PyObject *self)
{
    PyTypeObject *type = Py_TYPE(self);
    mxd_completion_release(completion_of(self));
    type->tp_free(self);
    Py_DECREF(type);
}

#define FASTCALL_KW(fn) (PyCFunction)(void (*)(void))(fn)

static PyMethodDef completion_methods[] = {
    {"record_on", FASTCALL_KW(completion_record_on),
     METH_FASTCALL | METH_KEYWORDS | METH_CLASS,
     BINDING_DOC("record_on", "($cls, /, queue)",
                 "A completion at the current end of `queue`: ready once "
                 "everything enqueued on it so far has completed.")},
    {"poisoned", FASTCALL_KW(completion_poisoned),
     METH_FASTCALL | METH_KEYWORDS | METH_CLASS,
     BINDING_DOC("poisoned", "($cls, /, queue, error)",
                 "A completion of `queue` whose producer failed: ready at "
                 "once, and waiting for it raises HostHazardError(error).")},
    {"is_ready", completion_is_ready, METH_NOARGS,
     BINDING_DOC("is_ready", "($self, /)",
                 "True once the point completed, or when poisoned (a "
                 "poisoned completion never blocks a waiter).")},
    {"wait", FASTCALL_KW(completion_wait), METH_FASTCALL | METH_KEYWORDS,
     BINDING_DOC("wait", "($self, /, timeout=None)",
                 "Blocks until ready (TimeoutError after `timeout` seconds; "
                 "the GIL is released and Ctrl-C interrupts); raises "
                 "HostHazardError when poisoned.")},
    {"poison", FASTCALL_KW(completion_poison), METH_FASTCALL | METH_KEYWORDS,
     BINDING_DOC("poison", "($self, /, message)",
                 "Marks the producer as failed: the completion is ready, and "
                 "waits for it (and host access to memory whose record holds "
                 "it) raise HostHazardError(message). The first poison's "
                 "message stays.")},
    {"__reduce_ex__", binding_refuse_pickle, METH_O,
     BINDING_DOC("__reduce_ex__", "($self, protocol, /)",
                 "Refused: a completion belongs to one process.")},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot completion_slots[] = {
    {Py_tp_doc,
     "A point in one queue's order that buffers' hazard records hold: the "
     "end of a copy or fill, or a point recorded with record_on(queue) to "
     "declare work the module does not see (Buffer._stamp_write / "
     "_stamp_read). Compared and hashed by identity."},
    {Py_tp_new, completion_tp_new},
    {Py_tp_dealloc, completion_dealloc},
    {Py_tp_repr, completion_repr},
    {Py_tp_methods, completion_methods},
    {Py_am_await, completion_await},
    {0, NULL},
};

/* Holds no Python references, so no GC support. */
static PyType_Spec completion_spec = {
    .name = "max._core.driver.HostHazardCompletion",
    .basicsize = sizeof(CompletionObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = completion_slots,
};

int binding_add_completion_type(PyObject *module, binding_state *st)
{
    st->completion_type = binding_add_type(module, &completion_spec, NULL);
    if (st->completion_type == NULL)
        return -1;
    PyObject *error = binding_hazard_error();
    return error ? PyModule_AddObjectRef(module, "HostHazardError", error) : -1;
}
