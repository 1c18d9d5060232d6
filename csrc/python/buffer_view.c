/* Buffer indexing, element access and views (SPEC §12.5): buf[idx],
 * buf[idx] = value, item(), view(dtype, shape).  The view math is the
 * core's (layout.h); this file only reads Python arguments. */
#include "binding.h"

#include <string.h>

static BufferObject *as_buffer(PyObject *self)
{
    return (BufferObject *)self;
}

/* ---- Index entries ------------------------------------------------------ */

static int index_error(const char *what, PyObject *key)
{
    PyErr_Format(PyExc_TypeError,
                 "%s: only integers and slices (`:`) are valid indices, not "
                 "%.100s",
                 what, Py_TYPE(key)->tp_name);
    return -1;
}

/* An int index that does not fit in 64 bits is out of range whatever the
 * dimension: said here, with the index as given. */
static int parse_int_entry(PyObject *obj, int64_t *out)
{
    PyObject *index = PyNumber_Index(obj);
    if (index == NULL)
        return -1;
    int overflow;
    long long value = PyLong_AsLongLongAndOverflow(index, &overflow);
    if (overflow)
        PyErr_Format(PyExc_IndexError,
                     "index %S is out of bounds (it does not fit in 64 bits)",
                     index);
    Py_DECREF(index);
    if (overflow || (value == -1 && PyErr_Occurred()))
        return -1;
    *out = value;
    return 0;
}

static int parse_entry(const char *what, PyObject *obj, mxd_index *out)
{
    memset(out, 0, sizeof *out);
    if (PySlice_Check(obj)) {
        PySliceObject *s = (PySliceObject *)obj;
        Py_ssize_t start, stop, step;
        /* Clamps huge bounds to +-PY_SSIZE_T_MAX; step 0 is ValueError. */
        if (PySlice_Unpack(obj, &start, &stop, &step) < 0)
            return -1;
        out->is_slice = true;
        out->has_start = s->start != Py_None;
        out->has_stop = s->stop != Py_None;
        out->has_step = s->step != Py_None;
        out->start = start;
        out->stop = stop;
        out->step = step;
        return 0;
    }
    if (PyBool_Check(obj) || !PyIndex_Check(obj))
        return index_error(what, obj);
    return parse_int_entry(obj, &out->value);
}

/* Entries of a tuple, a list or another sequence of them. */
static int parse_entries(const char *what, PyObject *seq, mxd_index *entries)
{
    Py_ssize_t count = PySequence_Fast_GET_SIZE(seq);
    if (count > MXD_MAX_RANK) {
        PyErr_Format(PyExc_ValueError,
                     "%s: %zd indices are more than any buffer has "
                     "dimensions",
                     what, count);
        return -1;
    }
    for (Py_ssize_t i = 0; i < count; i++)
        if (parse_entry(what, PySequence_Fast_GET_ITEM(seq, i), &entries[i]) <
            0)
            return -1;
    return (int)count;
}

/* key: an int, a slice, or a sequence of them (MAX's Sequence[int |
 * slice]: a tuple, a list, ...; not a str or bytes); returns the entry
 * count. */
static int parse_key(const char *what, PyObject *key, mxd_index *entries)
{
    if (PyTuple_Check(key) || PyList_Check(key))
        return parse_entries(what, key, entries);
    /* A Buffer is a sequence (it iterates) but never a key. */
    if (PySlice_Check(key) || PyIndex_Check(key) || PyUnicode_Check(key) ||
        PyBytes_Check(key) || PyByteArray_Check(key) ||
        !PySequence_Check(key) ||
        Py_TYPE(key)->tp_as_sequence->sq_item == binding_buffer_sq_item)
        return parse_entry(what, key, &entries[0]) < 0 ? -1 : 1;
    PyObject *seq = PySequence_Fast(key, "an index sequence");
    if (seq == NULL)
        return -1;
    int count = parse_entries(what, seq, entries);
    Py_DECREF(seq);
    return count;
}

PyObject *binding_buffer_subscript(PyObject *self, PyObject *key)
{
    BufferObject *b = as_buffer(self);
    mxd_index entries[MXD_MAX_RANK];
    int count = parse_key("Buffer indexing", key, entries);
    if (count < 0)
        return NULL;
    int64_t shape[MXD_MAX_RANK], strides[MXD_MAX_RANK];
    mxd_layout in = binding_buffer_layout(b);
    mxd_layout out = {0, shape, strides, 0, 0, 0};
    mxd_error err;
    if (mxd_layout_index(&in, entries, count, &out, &err) != MXD_OK)
        return binding_raise(&err);
    mxd_memory_retain(b->memory);
    return binding_buffer_new(binding_view_type(self), b->memory, b->stream,
                              b->dtype_index, b->usage, &out);
}

/* buf[i] through the sequence protocol, which iter(buf) uses: as MAX's
 * Buffer, a rank-1 buffer iterates one rank-0 view per element (ending at
 * the IndexError past its end); iterating any other rank raises
 * ValueError, as buf[0] does there in MAX. */
static PyObject *refuse_iteration(int rank)
{
    return PyErr_Format(PyExc_ValueError,
                        "only a rank-1 Buffer iterates (one element view per "
                        "index); this one has rank %d",
                        rank);
}

PyObject *binding_buffer_iter(PyObject *self)
{
    int rank = buffer_rank(as_buffer(self));
    return rank == 1 ? PySeqIter_New(self) : refuse_iteration(rank);
}

PyObject *binding_buffer_sq_item(PyObject *self, Py_ssize_t i)
{
    int rank = buffer_rank(as_buffer(self));
    if (rank != 1)
        return refuse_iteration(rank);
    PyObject *key = PyLong_FromSsize_t(i);
    PyObject *view = key ? binding_buffer_subscript(self, key) : NULL;
    Py_XDECREF(key);
    return view;
}

/* __getitem__(idx) and __setitem__(idx, value) called by name, with MAX's
 * keyword names; buf[idx] itself goes through the mapping slots. */
static const char *const getitem_names[] = {"idx", "value"};

PyObject *binding_buffer_getitem_kw(PyObject *self, PyObject *const *args,
                                    Py_ssize_t nargs, PyObject *kwnames)
{
    const binding_params params = {"__getitem__", getitem_names, 1, 1};
    PyObject *idx;
    if (binding_parse_fast(&params, args, nargs, kwnames, &idx) < 0)
        return NULL;
    return binding_buffer_subscript(self, idx);
}

PyObject *binding_buffer_setitem_kw(PyObject *self, PyObject *const *args,
                                    Py_ssize_t nargs, PyObject *kwnames)
{
    const binding_params params = {"__setitem__", getitem_names, 2, 2};
    PyObject *argv[2];
    if (binding_parse_fast(&params, args, nargs, kwnames, argv) < 0 ||
        binding_buffer_ass_subscript(self, argv[0], argv[1]) < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* _iterate_indices(): every index of the shape in row-major order, as
 * MAX's (itertools.product of the dimensions' ranges). */
PyObject *binding_buffer_iterate_indices(PyObject *self, PyObject *unused)
{
    (void)unused;
    BufferObject *b = as_buffer(self);
    int rank = buffer_rank(b);
    PyObject *ranges = PyTuple_New(rank);
    for (int i = 0; ranges != NULL && i < rank; i++) {
        PyObject *r = PyObject_CallFunction((PyObject *)&PyRange_Type, "L",
                                            (long long)b->dims[i]);
        if (r == NULL)
            Py_CLEAR(ranges);
        else
            PyTuple_SET_ITEM(ranges, i, r);
    }
    PyObject *itertools = ranges ? PyImport_ImportModule("itertools") : NULL;
    PyObject *product =
        itertools ? PyObject_GetAttrString(itertools, "product") : NULL;
    PyObject *indices = product ? PyObject_Call(product, ranges, NULL) : NULL;
    Py_XDECREF(product);
    Py_XDECREF(itertools);
    Py_XDECREF(ranges);
    return indices;
}

/* ---- Scalars ------------------------------------------------------------ */

/* NumPy's bool scalar ("numpy.bool_" before NumPy 2).  Tested before
 * PyIndex_Check: NumPy 1.x and 2.0 to 2.3 give it a deprecated __index__
 * that warns (and raises under -W error). */
static bool is_numpy_bool(PyObject *value)
{
    const char *name = Py_TYPE(value)->tp_name;
    return strcmp(name, "numpy.bool") == 0 || strcmp(name, "numpy.bool_") == 0;
}

/* An integer beyond 64 bits, for a `kind` destination: as NumPy (and MAX
 * 26.7) a float holds its nearest value (2**64 into float32 is
 * 1.8446744e19) and a bool is True; an integer dtype cannot hold it. */
static int parse_wide_int(const char *fname, PyObject *value, PyObject *index,
                          mxd_dtype_kind kind, mxd_scalar *out)
{
    if (kind == MXD_KIND_BOOL) {
        *out = mxd_scalar_bool(true);
        return 0;
    }
    if (kind != MXD_KIND_SIGNED && kind != MXD_KIND_UNSIGNED) {
        double f = PyLong_AsDouble(index); /* OverflowError past 1.8e308 */
        if (f == -1.0 && PyErr_Occurred())
            return -1;
        *out = mxd_scalar_float(f);
        return 0;
    }
    PyErr_Format(PyExc_OverflowError,
                 "%s(): Python integer %R out of bounds for every integer "
                 "dtype",
                 fname, value);
    return -1;
}

/* A Python int or NumPy integer (or integer rank-0 array) as a core
 * scalar for a `kind` destination. */
static int parse_int(const char *fname, PyObject *value, PyObject *index,
                     mxd_dtype_kind kind, mxd_scalar *out)
{
    int overflow;
    long long i = PyLong_AsLongLongAndOverflow(index, &overflow);
    if (overflow > 0) {
        unsigned long long u = PyLong_AsUnsignedLongLong(index);
        if (u != (unsigned long long)-1 || !PyErr_Occurred()) {
            *out = mxd_scalar_uint(u);
            return 0;
        }
        PyErr_Clear();
    }
    if (overflow != 0)
        return parse_wide_int(fname, value, index, kind, out);
    if (i == -1 && PyErr_Occurred())
        return -1;
    *out = mxd_scalar_int(i);
    return 0;
}

/* A Python or NumPy scalar (or bool, or rank-0 array) as a core scalar
 * for a `kind` destination. */
static int parse_scalar(const char *fname, PyObject *value, mxd_dtype_kind kind,
                        mxd_scalar *out)
{
    if (PyBool_Check(value)) {
        *out = mxd_scalar_bool(value == Py_True);
        return 0;
    }
    if (!PyLong_CheckExact(value) && is_numpy_bool(value)) {
        int truth = PyObject_IsTrue(value);
        if (truth < 0)
            return -1;
        *out = mxd_scalar_bool(truth);
        return 0;
    }
    if (PyFloat_Check(value)) {
        *out = mxd_scalar_float(PyFloat_AS_DOUBLE(value));
        return 0;
    }
    if (PyIndex_Check(value)) { /* int, NumPy integers */
        PyObject *index = PyNumber_Index(value);
        if (index != NULL) {
            int rc = parse_int(fname, value, index, kind, out);
            Py_DECREF(index);
            return rc;
        }
        /* A NumPy array has __index__ but refuses it unless it holds one
         * integer: a rank-0 float array (np.array(1.5)) goes on below as
         * a float, as NumPy and MAX store it. */
        if (!PyErr_ExceptionMatches(PyExc_TypeError) || PyLong_Check(value))
            return -1;
        PyErr_Clear();
    }
    if (PyUnicode_Check(value) || PyBytes_Check(value) ||
        PyComplex_Check(value))
        goto not_a_scalar;
    /* NumPy's bool_ and non-Python floats (float32, float16, bfloat16). */
    PyObject *dtype = PyObject_GetAttrString(value, "dtype");
    if (dtype == NULL) {
        PyErr_Clear();
    } else {
        PyObject *kind = PyObject_GetAttrString(dtype, "kind");
        Py_DECREF(dtype);
        int is_bool = kind && PyUnicode_Check(kind) &&
                      PyUnicode_CompareWithASCIIString(kind, "b") == 0;
        Py_XDECREF(kind);
        PyErr_Clear();
        if (is_bool) {
            int truth = PyObject_IsTrue(value);
            if (truth < 0)
                return -1;
            *out = mxd_scalar_bool(truth);
            return 0;
        }
    }
    double f = PyFloat_AsDouble(value);
    if (f == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
        goto not_a_scalar;
    }
    *out = mxd_scalar_float(f);
    return 0;
not_a_scalar:
    PyErr_Format(PyExc_TypeError,
                 "%s(): the value must be a Python or NumPy scalar (bool, "
                 "int or float), not %.100s",
                 fname, Py_TYPE(value)->tp_name);
    return -1;
}

int binding_encode_scalar(const char *fname, const mxd_dtype_info *info,
                          PyObject *value, void *element)
{
    mxd_scalar scalar;
    if (parse_scalar(fname, value, info->kind, &scalar) < 0)
        return -1;
    mxd_error err;
    if (mxd_dtype_encode(info->code, scalar, element, &err) == MXD_OK)
        return 0;
    /* As NumPy 2: an integer that does not fit is an OverflowError. */
    bool integer =
        scalar.kind == MXD_SCALAR_INT || scalar.kind == MXD_SCALAR_UINT;
    PyErr_Format(integer ? PyExc_OverflowError : PyExc_ValueError, "%s(): %s",
                 fname, err.message);
    return -1;
}

static PyObject *decode_scalar(const mxd_dtype_info *info, const void *element)
{
    mxd_scalar s;
    mxd_error err;
    if (mxd_dtype_decode(info->code, element, &s, &err) != MXD_OK)
        return binding_raise(&err);
    switch (s.kind) {
    case MXD_SCALAR_BOOL: return PyBool_FromLong(s.v.b);
    case MXD_SCALAR_INT: return PyLong_FromLongLong(s.v.i);
    case MXD_SCALAR_UINT: return PyLong_FromUnsignedLongLong(s.v.u);
    case MXD_SCALAR_FLOAT: break;
    }
    return PyFloat_FromDouble(s.v.f);
}

/* ---- Element access ----------------------------------------------------- */

/* A one-element view of b at byte `offset`. */
static mxd_view element_view(BufferObject *b, int64_t offset)
{
    mxd_view v = binding_buffer_view(b);
    v.layout.rank = 0;
    v.layout.offset = offset;
    return v;
}

int binding_buffer_host_wait(BufferObject *b)
{
    mxd_view view = binding_buffer_view(b);
    if (mxd_host_access_idle(&view, MXD_ACCESS_READ))
        return 0; /* the common case: without releasing the GIL */
    binding_wait w;
    binding_wait_init(&w, -1);
    mxd_error err;
    binding_wait_release_gil(&w);
    mxd_status status = mxd_host_read_wait(&view, &w.wait, &err);
    binding_wait_acquire_gil(&w);
    if (status != MXD_OK) {
        binding_raise(&err);
        return -1;
    }
    return 0;
}

/* Reads (to_host) or writes the element at byte `offset` as a host access
 * (SPEC §12.5, §12.6): after what the storage's record holds, on any
 * memory; device memory through a one-element copy, complete on return. */
static int access_element(BufferObject *b, int64_t offset, void *element,
                          bool to_host)
{
    mxd_view view = element_view(b, offset);
    size_t size = buffer_dtype(b)->size_in_bytes;
    char *host = mxd_memory_host(b->memory);
    /* The common case, without releasing the GIL: host-visible memory with
     * nothing to wait for. */
    if (mxd_host_access_idle(&view,
                             to_host ? MXD_ACCESS_ITEM : MXD_ACCESS_WRITE)) {
        if (to_host)
            memcpy(element, host + offset, size);
        else
            memcpy(host + offset, element, size);
        return 0;
    }
    binding_wait w;
    binding_wait_init(&w, -1);
    mxd_error err;
    binding_wait_release_gil(&w);
    mxd_status status = to_host ? mxd_read_host(&view, element, &w.wait, &err)
                                : mxd_write_host(&view, element, &w.wait, &err);
    binding_wait_acquire_gil(&w);
    if (status != MXD_OK) {
        binding_raise(&err);
        return -1;
    }
    return 0;
}

static int refuse_slices(void)
{
    PyErr_SetString(PyExc_TypeError,
                    "Buffer assignment takes one integer index per dimension "
                    "(slices are not supported)");
    return -1;
}

/* A slice as the key or as an entry of a tuple or list of them. */
static bool has_slice(PyObject *key)
{
    if (PySlice_Check(key))
        return true;
    if (!PyTuple_Check(key) && !PyList_Check(key))
        return false;
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(key); i++)
        if (PySlice_Check(PySequence_Fast_GET_ITEM(key, i)))
            return true;
    return false;
}

int binding_buffer_ass_subscript(PyObject *self, PyObject *key, PyObject *value)
{
    BufferObject *b = as_buffer(self);
    if (value == NULL) {
        PyErr_SetString(PyExc_TypeError, "Buffer elements cannot be deleted");
        return -1;
    }
    /* A slice is an index of the wrong type (TypeError, as MAX), refused
     * before parsing so that a slice with step 0 is refused for that too
     * (and after, for a slice inside another kind of sequence). */
    if (has_slice(key))
        return refuse_slices();
    mxd_index entries[MXD_MAX_RANK];
    int count = parse_key("Buffer assignment", key, entries);
    if (count < 0)
        return -1;
    int64_t indices[MXD_MAX_RANK];
    for (int i = 0; i < count; i++) {
        if (entries[i].is_slice)
            return refuse_slices();
        indices[i] = entries[i].value;
    }
    mxd_layout layout = binding_buffer_layout(b);
    int64_t offset;
    mxd_error err;
    if (mxd_layout_locate(&layout, indices, count, &offset, &err) != MXD_OK) {
        binding_raise(&err);
        return -1;
    }
    if (mxd_memory_is_readonly(b->memory)) {
        PyErr_SetString(PyExc_ValueError, "the buffer is read-only");
        return -1;
    }
    unsigned char element[MXD_DTYPE_MAX_BYTES];
    if (binding_encode_scalar("__setitem__", buffer_dtype(b), value, element) <
        0)
        return -1;
    return access_element(b, offset, element, false);
}

PyObject *binding_buffer_item(PyObject *self, PyObject *unused)
{
    (void)unused;
    BufferObject *b = as_buffer(self);
    int64_t count = binding_buffer_count(b);
    if (count != 1) {
        PyErr_Format(PyExc_ValueError,
                     "calling `item` on a tensor with %lld items but "
                     "expected only 1",
                     (long long)count);
        return NULL;
    }
    unsigned char element[MXD_DTYPE_MAX_BYTES];
    if (access_element(b, b->offset, element, true) < 0)
        return NULL;
    return decode_scalar(buffer_dtype(b), element);
}

/* ---- view(dtype, shape=None) -------------------------------------------- */

static const char *const view_names[] = {"dtype", "shape"};

PyObject *binding_buffer_view_as(PyObject *self, PyObject *const *args,
                                 Py_ssize_t nargs, PyObject *kwnames)
{
    BufferObject *b = as_buffer(self);
    binding_state *st = binding_state_of(self);
    const binding_params params = {"view", view_names, 2, 1};
    PyObject *argv[2];
    if (binding_parse_fast(&params, args, nargs, kwnames, argv) < 0)
        return NULL;
    int dtype_index = binding_parse_dtype(st, "view", "dtype", argv[0]);
    if (dtype_index < 0)
        return NULL;
    int64_t new_shape[MXD_MAX_RANK];
    int rank = 0;
    bool has_shape = argv[1] != NULL && argv[1] != Py_None;
    if (has_shape &&
        (rank = binding_parse_shape("view", argv[1], new_shape)) < 0)
        return NULL;
    int64_t shape[MXD_MAX_RANK], strides[MXD_MAX_RANK];
    mxd_layout in = binding_buffer_layout(b);
    mxd_layout out = {0, shape, strides, 0, 0, 0};
    mxd_error err;
    if (mxd_layout_reinterpret(
            &in, mxd_dtype_at((size_t)dtype_index)->size_in_bytes,
            has_shape ? new_shape : NULL, rank, &out, &err) != MXD_OK)
        return binding_raise(&err);
    mxd_memory_retain(b->memory);
    return binding_buffer_new(binding_view_type(self), b->memory, b->stream,
                              dtype_index, b->usage, &out);
}
