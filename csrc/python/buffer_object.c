/* The Buffer object under every Buffer file (buffer.c, buffer_view.c,
 * buffer_copy.c, dlpack.c, ...): its layout and view for the core, making
 * one over memory, allocating one, and parsing the arguments that describe
 * one (dtype, shape, target).  It calls no other Buffer file, so they all
 * sit above it. */
#include "binding.h"

#include <string.h>

/* ---- The object --------------------------------------------------------- */

mxd_layout binding_buffer_layout(BufferObject *b)
{
    return (mxd_layout){
        .rank = buffer_rank(b),
        .shape = buffer_shape(b),
        .strides = buffer_strides(b),
        .offset = b->offset,
        .element_size = buffer_dtype(b)->size_in_bytes,
        .memory_size = mxd_memory_size(b->memory),
    };
}

mxd_queue *binding_buffer_queue(BufferObject *b)
{
    return ((QueueObject *)b->stream)->queue;
}

mxd_view binding_buffer_view(BufferObject *b)
{
    return (mxd_view){b->memory, binding_buffer_queue(b),
                      binding_buffer_layout(b)};
}

PyObject *binding_buffer_new(PyTypeObject *type, mxd_memory *memory,
                             PyObject *stream, int dtype_index, int usage,
                             const mxd_layout *layout)
{
    BufferObject *b = (BufferObject *)type->tp_alloc(type, layout->rank);
    if (b == NULL) {
        mxd_memory_release(memory);
        return NULL;
    }
    b->memory = memory;
    b->stream = Py_NewRef(stream);
    b->dtype_index = dtype_index;
    b->usage = usage;
    b->offset = layout->offset;
    size_t dims = (size_t)layout->rank * sizeof(int64_t);
    if (dims) {
        memcpy(buffer_shape(b), layout->shape, dims);
        memcpy(buffer_strides(b), layout->strides, dims);
    }
    return (PyObject *)b;
}

PyTypeObject *binding_view_type(PyObject *self)
{
    binding_state *st = binding_state_of(self);
    return Py_IS_TYPE(self, st->pinned_buffer_type) ? st->pinned_buffer_type
                                                    : st->buffer_type;
}

int64_t binding_buffer_count(BufferObject *b)
{
    int64_t count = 1;
    for (int i = 0; i < buffer_rank(b); i++)
        count *= buffer_shape(b)[i]; /* checked when the view was made */
    return count;
}

/* ---- Arguments ---------------------------------------------------------- */

int binding_parse_dtype(binding_state *st, const char *fname, const char *param,
                        PyObject *obj)
{
    for (int i = 0; i < MXD_DTYPE_MEMBERS; i++)
        if (obj == st->dtypes[i])
            return i;
    PyErr_Format(PyExc_TypeError,
                 "%s(): argument '%s' must be a max.dtype.DType, not %.100s",
                 fname, param, Py_TYPE(obj)->tp_name);
    return -1;
}

int binding_parse_dimension(const char *fname, PyObject *item, int64_t *out)
{
    /* An int, nearly always: no __index__ call. */
    PyObject *index =
        PyLong_CheckExact(item) ? Py_NewRef(item) : PyNumber_Index(item);
    if (index == NULL)
        return -1;
    int overflow;
    long long value = PyLong_AsLongLongAndOverflow(index, &overflow);
    Py_DECREF(index);
    if (overflow || (value == -1 && PyErr_Occurred())) {
        if (!PyErr_Occurred())
            PyErr_Format(PyExc_OverflowError,
                         "%s(): a dimension does not fit in 64 bits", fname);
        return -1;
    }
    *out = value;
    return 0;
}

PyObject *binding_shape_sequence(const char *fname, PyObject *obj)
{
    if (PyUnicode_Check(obj) || PyBytes_Check(obj) || !PySequence_Check(obj)) {
        PyErr_Format(PyExc_TypeError,
                     "%s(): the shape must be a sequence of ints, not %.100s",
                     fname, Py_TYPE(obj)->tp_name);
        return NULL;
    }
    PyObject *seq = PySequence_Fast(obj, "the shape must be a sequence");
    for (Py_ssize_t i = 0; seq && i < PySequence_Fast_GET_SIZE(seq); i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(seq, i);
        if (!PyIndex_Check(item)) {
            PyErr_Format(PyExc_TypeError,
                         "%s(): the shape must be a sequence of ints, not "
                         "one holding %.100s",
                         fname, Py_TYPE(item)->tp_name);
            Py_CLEAR(seq);
        }
    }
    return seq;
}

int binding_shape_values(const char *fname, PyObject *seq, int64_t *shape)
{
    Py_ssize_t rank = PySequence_Fast_GET_SIZE(seq);
    if (rank > MXD_MAX_RANK) {
        PyErr_Format(PyExc_ValueError,
                     "%s(): %zd dimensions are more than the %d supported",
                     fname, rank, MXD_MAX_RANK);
        return -1;
    }
    PyObject **items = PySequence_Fast_ITEMS(seq);
    for (Py_ssize_t i = 0; i < rank; i++)
        if (binding_parse_dimension(fname, items[i], &shape[i]) < 0)
            return -1;
    return (int)rank;
}

int binding_parse_shape(const char *fname, PyObject *obj, int64_t *shape)
{
    PyObject *seq = binding_shape_sequence(fname, obj);
    if (seq == NULL)
        return -1;
    int rank = binding_shape_values(fname, seq, shape);
    Py_DECREF(seq);
    return rank;
}

PyObject *binding_parse_target(binding_state *st, const char *fname,
                               const char *param, PyObject *obj)
{
    if (obj == NULL || obj == Py_None)
        return binding_device_default_queue((DeviceObject *)st->cpu);
    if (Py_IS_TYPE(obj, st->queue_type))
        return obj;
    if (PyObject_TypeCheck(obj, st->device_type))
        return binding_device_default_queue((DeviceObject *)obj);
    PyErr_Format(PyExc_TypeError,
                 "%s(): argument '%s' must be a Device, a DeviceQueue or "
                 "None, not %.100s",
                 fname, param, Py_TYPE(obj)->tp_name);
    return NULL;
}

/* ---- Allocation --------------------------------------------------------- */

/* What the core allocates: pinned memory for STAGING on an accelerator;
 * no hazard record for UNTRACKED, and for DevicePinnedBuffer, untracked as
 * MAX's is (SPEC §12.3). */
static unsigned alloc_flags(binding_state *st, PyTypeObject *type, int usage,
                            PyObject *stream)
{
    bool pinned_type = type == st->pinned_buffer_type;
    unsigned flags = 0;
    if (!mxd_device_is_host(binding_stream_device(stream)) &&
        (pinned_type || (usage & BUFFER_USAGE_STAGING)))
        flags |= MXD_ALLOC_PINNED;
    if (pinned_type || (usage & BUFFER_USAGE_UNTRACKED))
        flags |= MXD_ALLOC_UNTRACKED;
    return flags;
}

PyObject *binding_buffer_alloc(binding_state *st, PyTypeObject *type,
                               PyObject *stream, int dtype_index, int usage,
                               int rank, const int64_t *shape)
{
    const mxd_dtype_info *info = mxd_dtype_at((size_t)dtype_index);
    int64_t bytes, strides[MXD_MAX_RANK];
    mxd_error err;
    if (mxd_shape_size(rank, shape, info->size_in_bytes, NULL, &bytes, &err) !=
        MXD_OK)
        return binding_raise(&err);
    mxd_contiguous_strides(rank, shape, strides);
    mxd_queue *queue = ((QueueObject *)stream)->queue;
    unsigned flags = alloc_flags(st, type, usage, stream);
    mxd_memory *memory;
    mxd_status status;
    /* On a GPU this enqueues (cuMemAllocAsync), which may block. */
    BINDING_ENQUEUE(
        queue, status = mxd_memory_alloc(queue, bytes, flags, &memory, &err));
    if (status != MXD_OK)
        return binding_raise(&err);
    mxd_layout layout = {
        rank, (int64_t *)shape, strides, 0, (int64_t)info->size_in_bytes,
        bytes};
    return binding_buffer_new(type, memory, stream, dtype_index, usage,
                              &layout);
}
