/* Buffer copies and moves (SPEC §12.6): inplace_copy_from, copy, to,
 * contiguous.  How each copy is ordered and what the caller may rely on
 * when it returns is the core's (memory.h). */
#include "binding.h"

static BufferObject *as_buffer(PyObject *self)
{
    return (BufferObject *)self;
}

int binding_buffer_copy_into(BufferObject *dst, BufferObject *src)
{
    mxd_view d = binding_buffer_view(dst), s = binding_buffer_view(src);
    binding_wait w;
    binding_wait_init(&w, -1);
    mxd_error err;
    /* Copies may wait for a queue, and move bytes: never with the GIL. */
    binding_wait_release_gil(&w);
    mxd_status status = mxd_copy(&d, &s, &w.wait, &err);
    binding_wait_acquire_gil(&w);
    if (status != MXD_OK) {
        binding_raise(&err);
        return -1;
    }
    return 0;
}

PyObject *binding_buffer_copy_to(PyObject *self, PyObject *stream)
{
    BufferObject *b = as_buffer(self);
    binding_state *st = binding_state_of(self);
    PyObject *copy = binding_buffer_alloc(st, st->buffer_type, stream,
                                          b->dtype_index, BUFFER_USAGE_DEFAULT,
                                          buffer_rank(b), buffer_shape(b));
    if (copy != NULL && binding_buffer_copy_into(as_buffer(copy), b) < 0)
        Py_CLEAR(copy);
    return copy;
}

PyObject *binding_buffer_host_copy(PyObject *self)
{
    binding_state *st = binding_state_of(self);
    mxd_queue *queue;
    mxd_error err;
    if (mxd_queue_create(((DeviceObject *)st->cpu)->device, &queue, &err) !=
        MXD_OK)
        return binding_raise(&err);
    PyObject *own = binding_queue_wrap(st, queue);
    PyObject *copy = own ? binding_buffer_copy_to(self, own) : NULL;
    Py_XDECREF(own);
    return copy;
}

static const char *const src_names[] = {"src"};

PyObject *binding_buffer_inplace_copy_from(PyObject *self,
                                           PyObject *const *args,
                                           Py_ssize_t nargs, PyObject *kwnames)
{
    static const char fname[] = "inplace_copy_from";
    binding_state *st = binding_state_of(self);
    const binding_params params = {fname, src_names, 1, 1};
    PyObject *src;
    if (binding_parse_fast(&params, args, nargs, kwnames, &src) < 0 ||
        binding_check_type(fname, "src", src, st->buffer_type) < 0)
        return NULL;
    if (src == self)
        Py_RETURN_NONE;
    BufferObject *d = as_buffer(self), *s = as_buffer(src);
    mxd_layout dl = binding_buffer_layout(d), sl = binding_buffer_layout(s);
    /* MAX's texts and order, which MAX code may match on (MAX says "from"
     * for a destination that is not contiguous; here each text names the
     * side it is about), then what this call saw. */
    const char *problem = !mxd_layout_is_contiguous(&dl)
                              ? "Cannot copy to non-contiguous buffer"
                          : !mxd_layout_is_contiguous(&sl)
                              ? "Cannot copy from non-contiguous buffer"
                          : binding_buffer_count(d) != binding_buffer_count(s)
                              ? "Cannot copy buffers of different sizes"
                          : d->dtype_index != s->dtype_index
                              ? "Cannot copy buffers of different dtypes"
                              : NULL;
    if (problem != NULL) {
        PyErr_Format(PyExc_ValueError,
                     "%s (inplace_copy_from(): destination %S, %lld "
                     "elements%s; source %S, %lld elements%s)",
                     problem, st->dtypes[d->dtype_index],
                     (long long)binding_buffer_count(d),
                     mxd_layout_is_contiguous(&dl) ? "" : ", not contiguous",
                     st->dtypes[s->dtype_index],
                     (long long)binding_buffer_count(s),
                     mxd_layout_is_contiguous(&sl) ? "" : ", not contiguous");
        return NULL;
    }
    if (binding_buffer_copy_into(d, s) < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* copy(device=None) / copy(stream): a new contiguous buffer, never an
 * alias; `device` None is the buffer's own device. */
static const char *const copy_names[] = {"device", "stream"};

PyObject *binding_buffer_copy(PyObject *self, PyObject *const *args,
                              Py_ssize_t nargs, PyObject *kwnames)
{
    binding_state *st = binding_state_of(self);
    const binding_params params = {"copy", copy_names, 2, 0};
    PyObject *argv[2];
    if (binding_parse_fast(&params, args, nargs, kwnames, argv) < 0)
        return NULL;
    if (argv[0] != NULL && argv[1] != NULL) {
        PyErr_SetString(PyExc_TypeError,
                        "copy(): give either 'device' or 'stream', not both");
        return NULL;
    }
    PyObject *target = argv[1] != NULL ? argv[1] : argv[0];
    if (target == NULL || target == Py_None)
        target = binding_device_object(
            st, mxd_memory_device(as_buffer(self)->memory));
    else
        Py_INCREF(target);
    if (target == NULL)
        return NULL;
    if (argv[1] != NULL && !Py_IS_TYPE(argv[1], st->queue_type)) {
        Py_DECREF(target);
        PyErr_Format(PyExc_TypeError,
                     "copy(): argument 'stream' must be a DeviceQueue, not "
                     "%.100s",
                     Py_TYPE(argv[1])->tp_name);
        return NULL;
    }
    PyObject *stream = binding_parse_target(st, "copy", "device", target);
    PyObject *copy = stream ? binding_buffer_copy_to(self, stream) : NULL;
    Py_DECREF(target);
    return copy;
}

PyObject *binding_buffer_contiguous(PyObject *self, PyObject *unused)
{
    (void)unused;
    binding_state *st = binding_state_of(self);
    PyObject *stream = binding_device_default_queue((DeviceObject *)st->cpu);
    return stream ? binding_buffer_copy_to(self, stream) : NULL;
}

/* ---- to() --------------------------------------------------------------- */

/* The same memory bound to another queue of its device: `stream` first
 * waits for the buffer's queue, and the memory is freed only after
 * `stream`'s work too. */
static PyObject *rebind(PyObject *self, PyObject *stream)
{
    BufferObject *b = as_buffer(self);
    mxd_queue *q = ((QueueObject *)stream)->queue;
    mxd_error err;
    mxd_status status;
    BINDING_ENQUEUE(
        q, status = mxd_queue_wait_queue(q, binding_buffer_queue(b), &err));
    if (status == MXD_OK)
        status = mxd_memory_use_on(b->memory, q, &err);
    if (status != MXD_OK)
        return binding_raise(&err);
    mxd_layout layout = binding_buffer_layout(b);
    mxd_memory_retain(b->memory);
    return binding_buffer_new(binding_view_type(self), b->memory, stream,
                              b->dtype_index, b->usage, &layout);
}

static PyObject *to_one(PyObject *self, PyObject *target)
{
    binding_state *st = binding_state_of(self);
    BufferObject *b = as_buffer(self);
    mxd_device *dev = mxd_memory_device(b->memory);
    if (Py_IS_TYPE(target, st->queue_type)) {
        mxd_queue *q = ((QueueObject *)target)->queue;
        if (target == b->stream)
            return Py_NewRef(self);
        if (mxd_queue_device(q) == dev) /* pinned memory too (SPEC) */
            return rebind(self, target);
        return binding_buffer_copy_to(self, target);
    }
    if (PyObject_TypeCheck(target, st->device_type)) {
        if (((DeviceObject *)target)->device == dev &&
            !mxd_memory_is_pinned(b->memory))
            return Py_NewRef(self);
        PyObject *stream = binding_device_default_queue((DeviceObject *)target);
        return stream ? binding_buffer_copy_to(self, stream) : NULL;
    }
    PyErr_Format(PyExc_TypeError,
                 "to(): expected a Device, a DeviceQueue or a list of them, "
                 "not %.100s",
                 Py_TYPE(target)->tp_name);
    return NULL;
}

static PyObject *to_many(PyObject *self, PyObject *targets)
{
    PyObject *seq = PySequence_Fast(targets, "to(): expected a sequence");
    if (seq == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject *out = PyList_New(n);
    for (Py_ssize_t i = 0; out != NULL && i < n; i++) {
        PyObject *item = to_one(self, PySequence_Fast_GET_ITEM(seq, i));
        if (item == NULL)
            Py_CLEAR(out);
        else
            PyList_SET_ITEM(out, i, item);
    }
    Py_DECREF(seq);
    return out;
}

PyObject *binding_buffer_to(PyObject *self, PyObject *target)
{
    if (PyList_Check(target) || PyTuple_Check(target))
        return to_many(self, target);
    return to_one(self, target);
}

/* to(device=) / to(stream=) / to(devices=) / to(streams=), MAX's keyword
 * names; by position, one target of any of these kinds. */
static const char *const to_names[] = {"device", "stream", "devices",
                                       "streams"};
static const char *const to_signatures[] = {
    "to(self, device: Device) -> Buffer",
    "to(self, stream: DeviceQueue) -> Buffer",
    "to(self, devices: Sequence[Device]) -> list[Buffer]",
    "to(self, streams: Sequence[DeviceQueue]) -> list[Buffer]",
    "to(self, targets: Sequence[Device | DeviceQueue], /) -> list[Buffer]",
};

/* Whether `obj` is what keyword `which` of to_names takes. */
static bool keyword_fits(binding_state *st, int which, PyObject *obj)
{
    PyTypeObject *want = which % 2 ? st->queue_type : st->device_type;
    if (which < 2)
        return PyObject_TypeCheck(obj, want);
    if (!PyList_Check(obj) && !PyTuple_Check(obj))
        return false;
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(obj); i++)
        if (!PyObject_TypeCheck(PySequence_Fast_GET_ITEM(obj, i), want))
            return false;
    return true;
}

PyObject *binding_buffer_to_kw(PyObject *self, PyObject *const *args,
                               Py_ssize_t nargs, PyObject *kwnames)
{
    if (nargs == 1 && kwnames == NULL)
        return binding_buffer_to(self, args[0]);
    const binding_params params = {"to", to_names, 4, 0};
    PyObject *argv[4];
    int given = -1, count = 0;
    if (binding_parse_fast(&params, args, nargs, kwnames, argv) < 0)
        return NULL;
    for (int i = 0; i < 4; i++)
        if (argv[i] != NULL) {
            given = i;
            count++;
        }
    binding_state *st = binding_state_of(self);
    if (count == 1 && (nargs == 1 || keyword_fits(st, given, argv[given])))
        return binding_buffer_to(self, argv[given]);
    return binding_overload_error("to", to_signatures, 5, self, args, nargs,
                                  kwnames);
}
