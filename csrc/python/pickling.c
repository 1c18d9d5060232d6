/* Pickling (SPEC §15): a Buffer pickles its dtype, shape and values; the
 * types that are resources of one process refuse with a TypeError.
 *
 * Buffer.__reduce_ex__ names _rebuild_buffer(data, dtype, shape, (kind,
 * id), pinned).  With protocol 5 `data` is a pickle.PickleBuffer over host
 * memory (the buffer's own when it is host-accessible and contiguous, else
 * a contiguous CPU copy), so a pickler with a buffer_callback sends the
 * bytes out of band without copying them; older protocols get bytes (a
 * copy).  Unpickling wraps a writable, aligned `data` without copying (the
 * out-of-band buffer the receiver hands to pickle.loads) and copies
 * anything else; an accelerator buffer then moves onto Accelerator(id) of
 * the receiving process. */
#include "binding.h"

#include <string.h>

static BufferObject *as_buffer(PyObject *self)
{
    return (BufferObject *)self;
}

/* ---- Refusals ----------------------------------------------------------- */

PyObject *binding_refuse_pickle(PyObject *self, PyObject *protocol)
{
    (void)protocol;
    const char *name = Py_TYPE(self)->tp_name;
    const char *dot = strrchr(name, '.');
    name = dot ? dot + 1 : name;
    /* Queues, events and flags belong to a device, which pickles; a
     * completion names a point in a queue and has none. */
    int has_device = PyObject_HasAttrString(self, "device");
    PyErr_Format(PyExc_TypeError,
                 "cannot pickle '%s' object: a %s is a resource of one "
                 "process (its worker threads, driver handles and pending "
                 "work do not exist in another); %s",
                 name, name,
                 has_device ? "pickle its device (`.device`) and create a "
                              "new one where it is unpickled"
                            : "create a new one where it is needed");
    return NULL;
}

/* ---- Buffer.__reduce_ex__ ----------------------------------------------- */

/* The buffer's elements as host memory in C order: itself, or a copy
 * complete on return (accelerator memory, strided views). */
static PyObject *host_source(PyObject *self)
{
    BufferObject *b = as_buffer(self);
    mxd_layout layout = binding_buffer_layout(b);
    if (mxd_memory_host(b->memory) != NULL && mxd_layout_is_contiguous(&layout))
        return Py_NewRef(self);
    return binding_buffer_host_copy(self);
}

/* A copy of the bytes, for protocols before 5. */
static PyObject *bytes_of(PyObject *source)
{
    Py_buffer view;
    if (PyObject_GetBuffer(source, &view, PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    PyObject *bytes = PyBytes_FromStringAndSize(view.buf, view.len);
    PyBuffer_Release(&view);
    return bytes;
}

static PyObject *shape_tuple(BufferObject *b)
{
    PyObject *shape = PyTuple_New(buffer_rank(b));
    for (int i = 0; shape && i < buffer_rank(b); i++) {
        PyObject *n = PyLong_FromLongLong(buffer_shape(b)[i]);
        if (n == NULL)
            Py_CLEAR(shape);
        else
            PyTuple_SET_ITEM(shape, i, n);
    }
    return shape;
}

PyObject *binding_buffer_reduce_ex(PyObject *self, PyObject *protocol)
{
    long proto = PyLong_AsLong(protocol);
    if (proto == -1 && PyErr_Occurred())
        return NULL;
    BufferObject *b = as_buffer(self);
    binding_state *st = binding_state_of(self);
    mxd_device *dev = mxd_memory_device(b->memory);
    bool host = mxd_device_is_host(dev);
    PyObject *module = binding_module_of(Py_TYPE(self));
    PyObject *rebuild =
        module ? PyObject_GetAttrString(module, "_rebuild_buffer") : NULL;
    PyObject *source = rebuild ? host_source(self) : NULL;
    PyObject *data = NULL;
    if (source != NULL)
        data =
            proto >= 5 ? PyPickleBuffer_FromObject(source) : bytes_of(source);
    Py_XDECREF(source);
    PyObject *shape = data ? shape_tuple(b) : NULL;
    if (shape == NULL) {
        Py_XDECREF(rebuild);
        Py_XDECREF(data);
        return NULL;
    }
    bool pinned = !host && mxd_memory_is_pinned(b->memory);
    return Py_BuildValue(
        "(N(NON(si)O))", rebuild, data, st->dtypes[b->dtype_index], shape,
        host ? "cpu" : "gpu", mxd_device_id(dev), pinned ? Py_True : Py_False);
}

/* ---- _rebuild_buffer ---------------------------------------------------- */

typedef struct rebuild_args {
    int dtype_index;
    int rank;
    int64_t shape[MXD_MAX_RANK];
    int64_t bytes;
    bool gpu;
    int device_id;
    bool pinned;
} rebuild_args;

static int parse_place(PyObject *place, rebuild_args *r)
{
    const char *kind = NULL;
    if (PyTuple_Check(place) && PyTuple_GET_SIZE(place) == 2 &&
        PyUnicode_Check(PyTuple_GET_ITEM(place, 0)))
        kind = PyUnicode_AsUTF8(PyTuple_GET_ITEM(place, 0));
    if (kind != NULL && (strcmp(kind, "cpu") == 0 || strcmp(kind, "gpu") == 0))
        if (binding_parse_device_id("_rebuild_buffer",
                                    PyTuple_GET_ITEM(place, 1),
                                    &r->device_id) == 0) {
            r->gpu = kind[0] == 'g';
            return 0;
        }
    if (!PyErr_Occurred() || PyErr_ExceptionMatches(PyExc_TypeError)) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError,
                     "_rebuild_buffer(): the device must be ('cpu' or "
                     "'gpu', id), not %R",
                     place);
    }
    return -1;
}

static int parse_rebuild(binding_state *st, PyObject *const *args,
                         Py_ssize_t nargs, rebuild_args *r)
{
    static const char fname[] = "_rebuild_buffer";
    if (nargs != 5) {
        PyErr_Format(PyExc_TypeError,
                     "%s() takes 5 positional arguments (%zd given)", fname,
                     nargs);
        return -1;
    }
    int pinned;
    if ((r->dtype_index = binding_parse_dtype(st, fname, "dtype", args[1])) <
            0 ||
        (r->rank = binding_parse_shape(fname, args[2], r->shape)) < 0 ||
        parse_place(args[3], r) < 0 || (pinned = PyObject_IsTrue(args[4])) < 0)
        return -1;
    r->pinned = pinned;
    mxd_error err;
    const mxd_dtype_info *info = mxd_dtype_at((size_t)r->dtype_index);
    if (mxd_shape_size(r->rank, r->shape, info->size_in_bytes, NULL, &r->bytes,
                       &err) != MXD_OK) {
        binding_raise(&err);
        return -1;
    }
    return 0;
}

/* The receiving process's accelerator `id`, or RuntimeError naming it. */
static PyObject *accelerator_queue(binding_state *st, int id)
{
    mxd_device *dev;
    mxd_error err;
    if (mxd_accelerator(id, &dev, &err) != MXD_OK) {
        PyErr_Format(PyExc_RuntimeError,
                     "cannot unpickle a Buffer of Device(type=gpu,id=%d): "
                     "this process has no such accelerator (%s)",
                     id, err.message);
        return NULL;
    }
    PyObject *device = binding_device_object(st, dev);
    PyObject *queue =
        device ? binding_device_default_queue((DeviceObject *)device) : NULL;
    Py_XDECREF(device); /* cached by the module: the queue stays valid */
    return queue;
}

/* Gives the exported memory back (inside the host runner: GIL held). */
static void release_view(void *data)
{
    PyBuffer_Release(data);
    PyMem_RawFree(data);
}

static void leak_view(void *data)
{
    (void)data; /* interpreter exit: the exporter may be gone already */
}

/* A CPU buffer over view's memory, which it takes over. */
static PyObject *wrap_view(binding_state *st, Py_buffer *view,
                           const rebuild_args *r)
{
    PyObject *cpu = binding_device_default_queue((DeviceObject *)st->cpu);
    if (cpu == NULL) {
        release_view(view);
        return NULL;
    }
    mxd_foreign foreign = {
        .host = view->buf,
        .size = view->len,
        .release = {release_view, leak_view, view},
    };
    mxd_memory *memory;
    mxd_error err;
    if (mxd_memory_wrap(((QueueObject *)cpu)->queue, &foreign, &memory, &err) !=
        MXD_OK) {
        release_view(view); /* still ours */
        return binding_raise(&err);
    }
    const mxd_dtype_info *info = mxd_dtype_at((size_t)r->dtype_index);
    int64_t strides[MXD_MAX_RANK];
    mxd_contiguous_strides(r->rank, r->shape, strides);
    mxd_layout layout = {r->rank, (int64_t *)r->shape,          strides,
                         0,       (int64_t)info->size_in_bytes, r->bytes};
    return binding_buffer_new(st->buffer_type, memory, cpu, r->dtype_index,
                              BUFFER_USAGE_DEFAULT, &layout);
}

/* A new buffer of `type` on `queue` holding a copy of view's bytes
 * (fresh memory nothing else sees: written on the host). */
static PyObject *copy_view(binding_state *st, PyTypeObject *type,
                           PyObject *queue, int usage, const Py_buffer *view,
                           const rebuild_args *r)
{
    PyObject *b = binding_buffer_alloc(st, type, queue, r->dtype_index, usage,
                                       r->rank, r->shape);
    if (b != NULL && view->len > 0)
        memcpy(mxd_memory_host(as_buffer(b)->memory), view->buf,
               (size_t)view->len);
    return b;
}

/* The pickled bytes as a C-contiguous export: writable when `data`
 * allows it (*writable says which); NULL with an exception. */
static Py_buffer *export_data(PyObject *data, const rebuild_args *r,
                              bool *writable)
{
    Py_buffer *view = PyMem_RawMalloc(sizeof *view);
    if (view == NULL)
        return (Py_buffer *)PyErr_NoMemory();
    *writable = true;
    if (PyObject_GetBuffer(data, view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) <
        0) {
        PyErr_Clear();
        *writable = false;
        if (PyObject_GetBuffer(data, view, PyBUF_C_CONTIGUOUS) < 0) {
            PyMem_RawFree(view);
            return NULL;
        }
    }
    if (view->len != r->bytes) {
        PyErr_Format(PyExc_ValueError,
                     "_rebuild_buffer(): the pickled data holds %zd bytes, "
                     "but the Buffer's dtype and shape need %lld",
                     view->len, (long long)r->bytes);
        PyBuffer_Release(view);
        PyMem_RawFree(view);
        return NULL;
    }
    return view;
}

/* The values as a CPU buffer: over `data` itself when it is writable and
 * aligned for the dtype, else a copy. */
static PyObject *cpu_buffer(binding_state *st, PyObject *data,
                            const rebuild_args *r)
{
    bool writable;
    Py_buffer *view = export_data(data, r, &writable);
    if (view == NULL)
        return NULL;
    unsigned align = mxd_dtype_at((size_t)r->dtype_index)->align;
    if (writable && view->len > 0 && (uintptr_t)view->buf % align == 0)
        return wrap_view(st, view, r); /* which takes the view over */
    PyObject *cpu = binding_device_default_queue((DeviceObject *)st->cpu);
    PyObject *b =
        cpu ? copy_view(st, st->buffer_type, cpu, BUFFER_USAGE_DEFAULT, view, r)
            : NULL;
    PyBuffer_Release(view);
    PyMem_RawFree(view);
    return b;
}

PyObject *binding_rebuild_buffer(PyObject *module, PyObject *const *args,
                                 Py_ssize_t nargs)
{
    binding_state *st = PyModule_GetState(module);
    rebuild_args r;
    if (parse_rebuild(st, args, nargs, &r) < 0)
        return NULL;
    /* The device first: a missing accelerator fails before any copy. */
    PyObject *queue = r.gpu ? accelerator_queue(st, r.device_id) : NULL;
    if (r.gpu && queue == NULL)
        return NULL;
    if (r.gpu && r.pinned) {
        bool writable;
        Py_buffer *view = export_data(args[0], &r, &writable);
        if (view == NULL)
            return NULL;
        PyObject *b = copy_view(st, st->pinned_buffer_type, queue,
                                BUFFER_USAGE_STAGING, view, &r);
        PyBuffer_Release(view);
        PyMem_RawFree(view);
        return b;
    }
    PyObject *cpu = cpu_buffer(st, args[0], &r);
    if (cpu == NULL || !r.gpu)
        return cpu;
    PyObject *moved = binding_buffer_copy_to(cpu, queue);
    Py_DECREF(cpu);
    return moved;
}
