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
    mxd_status status;
    if (mxd_copy_only_enqueues(&d, &s)) {
        /* Between device-side memory: an enqueue, as a record is. */
        BINDING_ENQUEUE(d.queue, status = mxd_copy(&d, &s, &w.wait, &err));
    } else {
        /* Copies that may wait for a queue, or move bytes on the host:
         * never with the GIL. */
        binding_wait_release_gil(&w);
        status = mxd_copy(&d, &s, &w.wait, &err);
        binding_wait_acquire_gil(&w);
    }
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
    BufferObject *b = as_buffer(self);
    binding_state *st = binding_state_of(self);
    PyObject *stream = binding_device_default_queue((DeviceObject *)st->cpu);
    if (stream == NULL)
        return NULL;
    mxd_view view = binding_buffer_view(b);
    mxd_memory *host;
    binding_wait w;
    binding_wait_init(&w, -1);
    mxd_error err;
    /* A wait for the storage's last write, and a device-to-host copy. */
    binding_wait_release_gil(&w);
    mxd_status status = mxd_download(&view, ((QueueObject *)stream)->queue,
                                     &host, &w.wait, &err);
    binding_wait_acquire_gil(&w);
    if (status != MXD_OK)
        return binding_raise(&err);
    int rank = buffer_rank(b);
    int64_t strides[MXD_MAX_RANK];
    mxd_contiguous_strides(rank, buffer_shape(b), strides);
    mxd_layout layout = {rank,
                         buffer_shape(b),
                         strides,
                         0,
                         (int64_t)buffer_dtype(b)->size_in_bytes,
                         mxd_memory_size(host)};
    return binding_buffer_new(st->buffer_type, host, stream, b->dtype_index,
                              BUFFER_USAGE_DEFAULT, &layout);
}

/* Why src cannot be copied into dst by inplace_copy_from, or NULL: MAX's
 * texts in MAX's order, which MAX code may match on (MAX says "from" for a
 * destination that is not contiguous; here each text names the side it is
 * about). */
static const char *copy_problem(BufferObject *d, BufferObject *s)
{
    mxd_layout dl = binding_buffer_layout(d), sl = binding_buffer_layout(s);
    return !mxd_layout_is_contiguous(&dl)
               ? "Cannot copy to non-contiguous buffer"
           : !mxd_layout_is_contiguous(&sl)
               ? "Cannot copy from non-contiguous buffer"
           : binding_buffer_count(d) != binding_buffer_count(s)
               ? "Cannot copy buffers of different sizes"
           : d->dtype_index != s->dtype_index
               ? "Cannot copy buffers of different dtypes"
               : NULL;
}

/* The ValueError for `problem`, then what the call (`what`) saw. */
static PyObject *raise_copy_problem(binding_state *st, const char *what,
                                    BufferObject *d, BufferObject *s,
                                    const char *problem)
{
    mxd_layout dl = binding_buffer_layout(d), sl = binding_buffer_layout(s);
    return PyErr_Format(
        PyExc_ValueError,
        "%s (%s: destination %S, %lld elements%s; source %S, "
        "%lld elements%s)",
        problem, what, st->dtypes[d->dtype_index],
        (long long)binding_buffer_count(d),
        mxd_layout_is_contiguous(&dl) ? "" : ", not contiguous",
        st->dtypes[s->dtype_index], (long long)binding_buffer_count(s),
        mxd_layout_is_contiguous(&sl) ? "" : ", not contiguous");
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
    const char *problem = copy_problem(d, s);
    if (problem != NULL)
        return raise_copy_problem(st, "inplace_copy_from()", d, s, problem);
    if (binding_buffer_copy_into(d, s) < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* ---- Batches ------------------------------------------------------------ */

/* Checks every pair (dsts[i], srcs[i]) of Buffers before any is copied:
 * -1 with TypeError / ValueError naming the first bad one. */
static int check_pairs(binding_state *st, const char *fname, PyObject *dsts,
                       PyObject *srcs)
{
    Py_ssize_t n = PySequence_Fast_GET_SIZE(dsts);
    if (n != PySequence_Fast_GET_SIZE(srcs)) {
        PyErr_Format(PyExc_ValueError,
                     "%s(): dsts and srcs must have the same length (got %zd "
                     "dsts, %zd srcs)",
                     fname, n, PySequence_Fast_GET_SIZE(srcs));
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *d = PySequence_Fast_GET_ITEM(dsts, i);
        PyObject *s = PySequence_Fast_GET_ITEM(srcs, i);
        if (!PyObject_TypeCheck(d, st->buffer_type) ||
            !PyObject_TypeCheck(s, st->buffer_type)) {
            PyErr_Format(PyExc_TypeError,
                         "%s(): pair %zd is not two Buffers (%.100s, %.100s)",
                         fname, i, Py_TYPE(d)->tp_name, Py_TYPE(s)->tp_name);
            return -1;
        }
        const char *problem =
            d == s ? NULL : copy_problem(as_buffer(d), as_buffer(s));
        if (problem != NULL) {
            char what[96];
            snprintf(what, sizeof what, "%s(): pair %zd", fname, i);
            raise_copy_problem(st, what, as_buffer(d), as_buffer(s), problem);
            return -1;
        }
    }
    return 0;
}

/* The checked pairs, copied in order.  A copy that fails (a driver error)
 * stops the batch; the copies before it stay enqueued. */
static int copy_pairs(PyObject *dsts, PyObject *srcs)
{
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(dsts); i++) {
        PyObject *d = PySequence_Fast_GET_ITEM(dsts, i);
        PyObject *s = PySequence_Fast_GET_ITEM(srcs, i);
        if (d != s && binding_buffer_copy_into(as_buffer(d), as_buffer(s)) < 0)
            return -1;
    }
    return 0;
}

/* `obj` as a fast sequence of (what should be) Buffers.  A Buffer is a
 * sequence too (a rank-1 one iterates its elements) but never a list of
 * buffers. */
static PyObject *buffer_sequence(binding_state *st, const char *fname,
                                 const char *param, PyObject *obj)
{
    if (PyObject_TypeCheck(obj, st->buffer_type) || !PySequence_Check(obj)) {
        PyErr_Format(PyExc_TypeError,
                     "%s(): '%s' must be a sequence of Buffers, not %.100s",
                     fname, param, Py_TYPE(obj)->tp_name);
        return NULL;
    }
    return PySequence_Fast(obj, "expected a sequence of Buffers");
}

static PyObject *copy_batch(binding_state *st, const char *fname,
                            PyObject *dsts, PyObject *srcs)
{
    PyObject *d = buffer_sequence(st, fname, "dsts", dsts);
    PyObject *s = d ? buffer_sequence(st, fname, "srcs", srcs) : NULL;
    int rc = s ? check_pairs(st, fname, d, s) : -1;
    if (rc == 0)
        rc = copy_pairs(d, s);
    Py_XDECREF(d);
    Py_XDECREF(s);
    if (rc < 0)
        return NULL;
    Py_RETURN_NONE;
}

static const char *const batch_names[] = {"dsts", "srcs"};

PyObject *binding_batch_inplace_copy(PyObject *module, PyObject *const *args,
                                     Py_ssize_t nargs, PyObject *kwnames)
{
    binding_state *st = PyModule_GetState(module);
    const binding_params params = {"batch_inplace_copy", batch_names, 2, 2};
    PyObject *argv[2];
    if (binding_parse_fast(&params, args, nargs, kwnames, argv) < 0)
        return NULL;
    return copy_batch(st, "batch_inplace_copy", argv[0], argv[1]);
}

static const char *const fanout_names[] = {"source", "destinations"};

PyObject *binding_copy_pinned_to_destinations(PyObject *module,
                                              PyObject *const *args,
                                              Py_ssize_t nargs,
                                              PyObject *kwnames)
{
    static const char fname[] = "copy_pinned_to_destinations";
    binding_state *st = PyModule_GetState(module);
    const binding_params params = {fname, fanout_names, 2, 2};
    PyObject *argv[2];
    if (binding_parse_fast(&params, args, nargs, kwnames, argv) < 0 ||
        binding_check_type(fname, "source", argv[0], st->buffer_type) < 0)
        return NULL;
    PyObject *dsts = buffer_sequence(st, fname, "destinations", argv[1]);
    if (dsts == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(dsts);
    PyObject *srcs = PyList_New(n);
    for (Py_ssize_t i = 0; srcs && i < n; i++)
        PyList_SET_ITEM(srcs, i, Py_NewRef(argv[0]));
    PyObject *result = srcs ? copy_batch(st, fname, dsts, srcs) : NULL;
    Py_XDECREF(srcs);
    Py_DECREF(dsts);
    return result;
}

/* ---- Stamps ------------------------------------------------------------- */

static PyObject *stamp(PyObject *self, PyObject *obj, bool write)
{
    binding_state *st = binding_state_of(self);
    const char *fname = write ? "_stamp_write" : "_stamp_read";
    if (binding_check_type(fname, "completion", obj, st->completion_type) < 0)
        return NULL;
    mxd_completion *c = ((CompletionObject *)obj)->completion;
    if (c == NULL)
        return PyErr_Format(PyExc_ValueError,
                            "%s(): the HostHazardCompletion was never made",
                            fname);
    mxd_memory_stamp(as_buffer(self)->memory, c, write);
    Py_RETURN_NONE;
}

static const char *const stamp_names[] = {"completion"};

PyObject *binding_buffer_stamp_write(PyObject *self, PyObject *const *args,
                                     Py_ssize_t nargs, PyObject *kwnames)
{
    const binding_params params = {"_stamp_write", stamp_names, 1, 1};
    PyObject *completion;
    if (binding_parse_fast(&params, args, nargs, kwnames, &completion) < 0)
        return NULL;
    return stamp(self, completion, true);
}

PyObject *binding_buffer_stamp_read(PyObject *self, PyObject *const *args,
                                    Py_ssize_t nargs, PyObject *kwnames)
{
    const binding_params params = {"_stamp_read", stamp_names, 1, 1};
    PyObject *completion;
    if (binding_parse_fast(&params, args, nargs, kwnames, &completion) < 0)
        return NULL;
    return stamp(self, completion, false);
}

/* _release_buffers_to_borrowed(buffers), MAX 26.7's: a new handle per
 * buffer over the same view of the same storage (the same hazard record).
 * MAX's handle borrows the memory from its owner; here it shares it, so
 * the memory stays valid while any handle lives (a borrowed handle that
 * outlived its owner would read freed memory). */
static const char *const borrowed_names[] = {"buffers"};

PyObject *binding_release_to_borrowed(PyObject *module, PyObject *const *args,
                                      Py_ssize_t nargs, PyObject *kwnames)
{
    const char *fname = "_release_buffers_to_borrowed";
    const binding_params params = {fname, borrowed_names, 1, 1};
    PyObject *buffers;
    if (binding_parse_fast(&params, args, nargs, kwnames, &buffers) < 0)
        return NULL;
    binding_state *st = (binding_state *)PyModule_GetState(module);
    PyObject *seq = buffer_sequence(st, fname, "buffers", buffers);
    if (seq == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject *out = PyList_New(n);
    for (Py_ssize_t i = 0; out != NULL && i < n; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(seq, i);
        if (binding_check_type(fname, "buffers[i]", item, st->buffer_type) <
            0) {
            Py_CLEAR(out);
            break;
        }
        BufferObject *b = as_buffer(item);
        mxd_layout layout = binding_buffer_layout(b);
        mxd_memory_retain(b->memory);
        PyObject *handle =
            binding_buffer_new(Py_TYPE(item), b->memory, b->stream,
                               b->dtype_index, b->usage, &layout);
        if (handle == NULL)
            Py_CLEAR(out);
        else
            PyList_SET_ITEM(out, i, handle);
    }
    Py_DECREF(seq);
    return out;
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

/* The same memory bound to another queue of its device, with the same
 * hazard record: every operation on either is ordered by it, and the
 * memory is freed after all of them (SPEC §12.6). */
static PyObject *rebind(PyObject *self, PyObject *stream)
{
    BufferObject *b = as_buffer(self);
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
