/* Buffer and DevicePinnedBuffer (SPEC §12): the type, construction,
 * properties and text forms, on top of the Buffer files: indexing and views
 * are in buffer_view.c, copies in buffer_copy.c, DLPack and NumPy in
 * dlpack.c, numbers in buffer_number.c, the object itself (making and
 * allocating one, parsing dtypes and shapes) in buffer_object.c, which they
 * all use; the math and the data movement are the core's (layout.h,
 * memory.h). */
#include "binding.h"

#include <string.h>

static void buffer_dealloc(PyObject *self)
{
    PyTypeObject *type = Py_TYPE(self);
    BufferObject *b = (BufferObject *)self;
    /* Never blocks: what the memory's queues still have to do with it is
     * waited for by the core, off this thread where needed. */
    if (b->memory)
        mxd_memory_release(b->memory);
    Py_XDECREF(b->stream);
    type->tp_free(self);
    Py_DECREF(type);
}

static int parse_usage(binding_state *st, const char *fname, PyObject *obj)
{
    if (obj == NULL)
        return BUFFER_USAGE_DEFAULT;
    for (int i = 0; i < BUFFER_USAGES; i++)
        if (obj == st->usages[i])
            return i;
    PyErr_Format(PyExc_TypeError,
                 "%s(): argument 'usage' must be a max.driver.Usage "
                 "(DEFAULT, STAGING, UNTRACKED or a combination), not %R",
                 fname, obj);
    return -1;
}

/* ---- Construction ---------------------------------------------------------
 *
 * Buffer(dtype, shape, device=None, usage=Usage.DEFAULT) and
 * Buffer(dtype, shape, stream, usage=Usage.DEFAULT): the third argument is a
 * Device, a DeviceQueue or None by position, `device=` or `stream=` by
 * keyword. */

static const char *const new_names[] = {"dtype", "shape", "device", "usage",
                                        "stream"};

typedef struct new_args {
    int dtype_index;
    int rank;
    int64_t shape[MXD_MAX_RANK];
    PyObject *stream; /* borrowed */
    int usage;
} new_args;

/* The third argument: by position a Device, a DeviceQueue or None; by
 * keyword `device=` a Device or None, `stream=` a DeviceQueue. */
static PyObject *parse_place(binding_state *st, const char *fname,
                             PyObject *device, bool device_by_keyword,
                             PyObject *stream)
{
    if (device != NULL && stream != NULL) {
        PyErr_Format(PyExc_TypeError,
                     "%s(): give either 'device' or 'stream', not both", fname);
        return NULL;
    }
    if (stream != NULL && !Py_IS_TYPE(stream, st->queue_type)) {
        PyErr_Format(PyExc_TypeError,
                     "%s(): argument 'stream' must be a DeviceQueue, not "
                     "%.100s",
                     fname, Py_TYPE(stream)->tp_name);
        return NULL;
    }
    if (device_by_keyword && device && Py_IS_TYPE(device, st->queue_type)) {
        PyErr_Format(PyExc_TypeError,
                     "%s(): argument 'device' must be a Device or None; pass "
                     "a DeviceQueue as 'stream'",
                     fname);
        return NULL;
    }
    return binding_parse_target(st, fname, stream ? "stream" : "device",
                                stream ? stream : device);
}

/* argv: dtype, shape, device, usage, stream (NULL when not given);
 * `device_by_keyword`: argv[2] came as device=.  Every argument's type is
 * checked before any value (SPEC §12.3). */
static int parse_new(binding_state *st, const char *fname, PyObject **argv,
                     bool device_by_keyword, new_args *out)
{
    if ((out->dtype_index = binding_parse_dtype(st, fname, "dtype", argv[0])) <
        0)
        return -1;
    PyObject *seq = binding_shape_sequence(fname, argv[1]);
    if (seq == NULL)
        return -1;
    out->stream = parse_place(st, fname, argv[2], device_by_keyword, argv[4]);
    if (out->stream == NULL ||
        (out->usage = parse_usage(st, fname, argv[3])) < 0 ||
        (out->rank = binding_shape_values(fname, seq, out->shape)) < 0) {
        Py_DECREF(seq);
        return -1;
    }
    Py_DECREF(seq);
    return 0;
}

/* Whether the keyword `name` is among kwnames (vectorcall) or kwargs. */
static bool has_keyword(PyObject *kwnames, PyObject *kwargs, const char *name)
{
    if (kwargs != NULL)
        return PyDict_GetItemString(kwargs, name) != NULL;
    for (Py_ssize_t i = 0; kwnames && i < PyTuple_GET_SIZE(kwnames); i++)
        if (PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, i),
                                             name) == 0)
            return true;
    return false;
}

/* A DevicePinnedBuffer names its device (or queue): there is no default. */
static int check_pinned_place(binding_state *st, PyTypeObject *type,
                              PyObject **argv)
{
    if (type == st->pinned_buffer_type && argv[3] != NULL) {
        PyErr_SetString(PyExc_TypeError,
                        "DevicePinnedBuffer() takes no 'usage' argument: its "
                        "memory is always Usage.STAGING");
        return -1;
    }
    if (type != st->pinned_buffer_type ||
        (argv[2] != NULL && argv[2] != Py_None) || argv[4] != NULL)
        return 0;
    PyErr_SetString(PyExc_TypeError,
                    "DevicePinnedBuffer() missing required argument 'device' "
                    "(an accelerator Device or one of its queues)");
    return -1;
}

static int check_pinned_device(binding_state *st, PyTypeObject *type,
                               PyObject *stream)
{
    if (type != st->pinned_buffer_type ||
        !mxd_device_is_host(binding_stream_device(stream)))
        return 0;
    PyErr_SetString(PyExc_ValueError,
                    "DevicePinnedBuffer requires a non-host device: pinned "
                    "memory is host memory mapped into an accelerator (pass "
                    "Accelerator(...) or one of its queues)");
    return -1;
}

static PyObject *construct(PyTypeObject *type, PyObject **argv,
                           bool device_by_keyword)
{
    binding_state *st = binding_type_state(type);
    const char *fname =
        type == st->pinned_buffer_type ? "DevicePinnedBuffer" : "Buffer";
    new_args a;
    if (check_pinned_place(st, type, argv) < 0 ||
        parse_new(st, fname, argv, device_by_keyword, &a) < 0 ||
        check_pinned_device(st, type, a.stream) < 0)
        return NULL;
    if (type == st->pinned_buffer_type)
        a.usage = BUFFER_USAGE_STAGING;
    return binding_buffer_alloc(st, type, a.stream, a.dtype_index, a.usage,
                                a.rank, a.shape);
}

/* ---- Buffer(array, device) ------------------------------------------------
 *
 * MAX's third constructor: a buffer on `device` holding a copy of a NumPy
 * array (here also of any other DLPack producer), chosen when the first
 * argument is not a DType.  It imports the array (zero-copy where it can)
 * and copies that into a new buffer on the device's default queue. */

static const char *const array_names[] = {"array", "device"};

static bool is_dtype(binding_state *st, PyObject *obj)
{
    return Py_IS_TYPE(obj, (PyTypeObject *)st->dtype_type);
}

/* Whether Buffer(first, ...) is the array overload: a first argument that
 * is not a DType but exports memory (others fail as a bad dtype); by
 * keyword, a call naming `array`. */
static bool is_array_call(binding_state *st, PyObject *first)
{
    return first != NULL && !is_dtype(st, first) &&
           (PyObject_TypeCheck(first, st->buffer_type) ||
            PyObject_HasAttrString(first, "__dlpack__"));
}

static PyObject *construct_from_array(PyTypeObject *type, PyObject **argv)
{
    binding_state *st = binding_type_state(type);
    if (type == st->pinned_buffer_type) {
        PyErr_SetString(PyExc_TypeError,
                        "DevicePinnedBuffer() takes a dtype and a shape, not "
                        "an array: Buffer(array, device) copies an array");
        return NULL;
    }
    if (binding_check_type("Buffer", "device", argv[1], st->device_type) < 0)
        return NULL;
    PyObject *stream = binding_device_default_queue((DeviceObject *)argv[1]);
    PyObject *src = stream ? binding_import_array(st, argv[0]) : NULL;
    if (src == NULL)
        return NULL;
    BufferObject *s = (BufferObject *)src;
    PyObject *dst = binding_buffer_alloc(st, type, stream, s->dtype_index,
                                         BUFFER_USAGE_DEFAULT, buffer_rank(s),
                                         buffer_shape(s));
    if (dst != NULL && binding_buffer_copy_into((BufferObject *)dst, s) < 0)
        Py_CLEAR(dst);
    Py_DECREF(src);
    return dst;
}

static PyObject *buffer_vectorcall(PyObject *type, PyObject *const *args,
                                   size_t nargsf, PyObject *kwnames)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    const binding_params params = {"Buffer", new_names, 5, 2};
    PyObject *argv[5];
    if (nargs > 0
            ? is_array_call(binding_type_state((PyTypeObject *)type), args[0])
            : has_keyword(kwnames, NULL, "array")) {
        const binding_params array_params = {"Buffer", array_names, 2, 2};
        if (binding_parse_fast(&array_params, args, nargs, kwnames, argv) < 0)
            return NULL;
        return construct_from_array((PyTypeObject *)type, argv);
    }
    if (nargs > 4) {
        PyErr_Format(PyExc_TypeError,
                     "Buffer() takes at most 4 positional arguments (%zd "
                     "given)",
                     nargs);
        return NULL;
    }
    if (binding_parse_fast(&params, args, nargs, kwnames, argv) < 0)
        return NULL;
    return construct((PyTypeObject *)type, argv,
                     has_keyword(kwnames, NULL, "device"));
}

static PyObject *buffer_tp_new(PyTypeObject *type, PyObject *args,
                               PyObject *kwargs)
{
    const binding_params params = {"Buffer", new_names, 5, 2};
    PyObject *argv[5];
    if (PyTuple_GET_SIZE(args) > 0
            ? is_array_call(binding_type_state(type), PyTuple_GET_ITEM(args, 0))
            : has_keyword(NULL, kwargs, "array")) {
        const binding_params array_params = {"Buffer", array_names, 2, 2};
        if (binding_parse_tuple(&array_params, args, kwargs, argv) < 0)
            return NULL;
        return construct_from_array(type, argv);
    }
    if (PyTuple_GET_SIZE(args) > 4) {
        PyErr_SetString(PyExc_TypeError,
                        "Buffer() takes at most 4 positional arguments");
        return NULL;
    }
    if (binding_parse_tuple(&params, args, kwargs, argv) < 0)
        return NULL;
    return construct(type, argv, has_keyword(NULL, kwargs, "device"));
}

/* ---- Factories ---------------------------------------------------------- */

static const char *const zeros_names[] = {"shape", "dtype", "device", "usage",
                                          "stream"};

/* A fresh pinned buffer's bytes, written on the host: memory nothing else
 * can see yet. */
static void zero_on_host(BufferObject *b)
{
    memset(mxd_memory_host(b->memory), 0, (size_t)mxd_memory_size(b->memory));
}

int binding_buffer_fill(BufferObject *b, const void *element)
{
    mxd_view view = binding_buffer_view(b);
    binding_wait w;
    binding_wait_init(&w, -1);
    mxd_error err;
    binding_wait_release_gil(&w);
    mxd_status status = mxd_fill(&view, element, &w.wait, &err);
    binding_wait_acquire_gil(&w);
    if (status != MXD_OK) {
        binding_raise(&err);
        return -1;
    }
    return 0;
}

static PyObject *buffer_zeros(PyObject *cls, PyObject *const *args,
                              Py_ssize_t nargs, PyObject *kwnames)
{
    PyTypeObject *type = (PyTypeObject *)cls;
    binding_state *st = binding_type_state(type);
    const char *fname = "zeros";
    const binding_params params = {fname, zeros_names, 5, 2};
    PyObject *argv[5], *reordered[5];
    if (binding_parse_fast(&params, args, nargs, kwnames, argv) < 0)
        return NULL;
    /* The same checks as the constructor, whose order is dtype, shape. */
    reordered[0] = argv[1];
    reordered[1] = argv[0];
    memcpy(reordered + 2, argv + 2, 3 * sizeof *argv);
    new_args a;
    if (check_pinned_place(st, type, reordered) < 0 ||
        parse_new(st, fname, reordered, has_keyword(kwnames, NULL, "device"),
                  &a) < 0 ||
        check_pinned_device(st, type, a.stream) < 0)
        return NULL;
    if (type == st->pinned_buffer_type)
        a.usage = BUFFER_USAGE_STAGING;
    PyObject *b = binding_buffer_alloc(st, type, a.stream, a.dtype_index,
                                       a.usage, a.rank, a.shape);
    if (b == NULL)
        return NULL;
    BufferObject *buf = (BufferObject *)b;
    unsigned char zero[MXD_DTYPE_MAX_BYTES] = {0};
    /* SPEC §12.3: DevicePinnedBuffer.zeros is zero on return; Buffer.zeros
     * enqueues its fill, STAGING memory included (as MAX). */
    if (type == st->pinned_buffer_type)
        zero_on_host(buf);
    else if (binding_buffer_fill(buf, zero) < 0)
        Py_CLEAR(b);
    return b;
}

static const char *const scalar_names[] = {"value", "dtype", "device"};

static PyObject *buffer_scalar(PyObject *cls, PyObject *const *args,
                               Py_ssize_t nargs, PyObject *kwnames)
{
    binding_state *st = binding_type_state((PyTypeObject *)cls);
    const binding_params params = {"scalar", scalar_names, 3, 2};
    PyObject *argv[3];
    if (binding_parse_fast(&params, args, nargs, kwnames, argv) < 0)
        return NULL;
    int dtype_index = binding_parse_dtype(st, "scalar", "dtype", argv[1]);
    if (dtype_index < 0)
        return NULL;
    unsigned char element[MXD_DTYPE_MAX_BYTES];
    if (binding_encode_scalar("scalar", mxd_dtype_at((size_t)dtype_index),
                              argv[0], element) < 0)
        return NULL;
    PyObject *stream = binding_parse_target(st, "scalar", "device", argv[2]);
    if (stream == NULL)
        return NULL;
    PyObject *b = binding_buffer_alloc(st, st->buffer_type, stream, dtype_index,
                                       BUFFER_USAGE_DEFAULT, 0, NULL);
    if (b != NULL && binding_buffer_fill((BufferObject *)b, element) < 0)
        Py_CLEAR(b);
    return b;
}

/* ---- Properties --------------------------------------------------------- */

static PyObject *int64_tuple(const int64_t *values, int count)
{
    PyObject *tuple = PyTuple_New(count);
    for (int i = 0; tuple != NULL && i < count; i++) {
        PyObject *item = PyLong_FromLongLong(values[i]);
        if (item == NULL) {
            Py_CLEAR(tuple);
            break;
        }
        PyTuple_SET_ITEM(tuple, i, item);
    }
    return tuple;
}

static BufferObject *as_buffer(PyObject *self)
{
    return (BufferObject *)self;
}

static PyObject *buffer_get_device(PyObject *self, void *closure)
{
    (void)closure;
    return binding_device_object(binding_state_of(self),
                                 mxd_memory_device(as_buffer(self)->memory));
}

static PyObject *buffer_get_stream(PyObject *self, void *closure)
{
    (void)closure;
    return Py_NewRef(as_buffer(self)->stream);
}

static PyObject *buffer_get_dtype(PyObject *self, void *closure)
{
    (void)closure;
    return Py_NewRef(
        binding_state_of(self)->dtypes[as_buffer(self)->dtype_index]);
}

static PyObject *buffer_get_shape(PyObject *self, void *closure)
{
    (void)closure;
    BufferObject *b = as_buffer(self);
    return int64_tuple(buffer_shape(b), buffer_rank(b));
}

static PyObject *buffer_get_strides(PyObject *self, void *closure)
{
    (void)closure;
    BufferObject *b = as_buffer(self);
    return int64_tuple(buffer_strides(b), buffer_rank(b));
}

static PyObject *buffer_get_rank(PyObject *self, void *closure)
{
    (void)closure;
    return PyLong_FromLong(buffer_rank(as_buffer(self)));
}

static PyObject *buffer_get_num_elements(PyObject *self, void *closure)
{
    (void)closure;
    return PyLong_FromLongLong(binding_buffer_count(as_buffer(self)));
}

static PyObject *buffer_get_element_size(PyObject *self, void *closure)
{
    (void)closure;
    return PyLong_FromUnsignedLong(
        buffer_dtype(as_buffer(self))->size_in_bytes);
}

static PyObject *buffer_get_is_contiguous(PyObject *self, void *closure)
{
    (void)closure;
    mxd_layout layout = binding_buffer_layout(as_buffer(self));
    return PyBool_FromLong(mxd_layout_is_contiguous(&layout));
}

static PyObject *buffer_get_is_host(PyObject *self, void *closure)
{
    (void)closure;
    return PyBool_FromLong(
        mxd_device_is_host(mxd_memory_device(as_buffer(self)->memory)));
}

static PyObject *buffer_get_pinned(PyObject *self, void *closure)
{
    (void)closure;
    return PyBool_FromLong(mxd_memory_is_pinned(as_buffer(self)->memory));
}

static PyObject *buffer_get_usage(PyObject *self, void *closure)
{
    (void)closure;
    return Py_NewRef(binding_state_of(self)->usages[as_buffer(self)->usage]);
}

static PyObject *buffer_get_tracked(PyObject *self, void *closure)
{
    (void)closure;
    return PyBool_FromLong(mxd_memory_is_tracked(as_buffer(self)->memory));
}

static PyGetSetDef buffer_getset[] = {
    {"device", buffer_get_device, NULL, "The owning Device (cached object).",
     NULL},
    {"stream", buffer_get_stream, NULL,
     "The DeviceQueue the buffer is bound to.", NULL},
    {"dtype", buffer_get_dtype, NULL, "The element type, a DType.", NULL},
    {"shape", buffer_get_shape, NULL, "The shape, a tuple of ints.", NULL},
    {"strides", buffer_get_strides, NULL,
     "The strides, a tuple of ints in elements.", NULL},
    {"rank", buffer_get_rank, NULL, "len(shape).", NULL},
    {"num_elements", buffer_get_num_elements, NULL,
     "The product of shape (1 for rank 0).", NULL},
    {"element_size", buffer_get_element_size, NULL, "Bytes per element.", NULL},
    {"is_contiguous", buffer_get_is_contiguous, NULL,
     "True for a row-major contiguous view with positive strides.", NULL},
    {"is_host", buffer_get_is_host, NULL, "True only for CPU buffers.", NULL},
    {"pinned", buffer_get_pinned, NULL,
     "True for host memory pinned and mapped into an accelerator.", NULL},
    {"usage", buffer_get_usage, NULL, "The Usage asked for.", NULL},
    {"_host_hazard_tracked", buffer_get_tracked, NULL,
     "Whether the storage has a hazard record (False for Usage.UNTRACKED "
     "and DevicePinnedBuffer).",
     NULL},
    {"__cuda_array_interface__", binding_buffer_cuda_array_interface, NULL,
     "The CUDA array interface (version 3, with the buffer's queue as its "
     "stream); CUDA buffers only.",
     NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

/* ---- Addresses ---------------------------------------------------------- */

static uintptr_t data_ptr(BufferObject *b)
{
    return mxd_memory_device_ptr(b->memory) + (uintptr_t)b->offset;
}

static PyObject *buffer_data_ptr(PyObject *self, PyObject *unused)
{
    (void)unused;
    return PyLong_FromSize_t((size_t)data_ptr(as_buffer(self)));
}

static const char *const aligned_names[] = {"alignment"};

static PyObject *buffer_aligned(PyObject *self, PyObject *const *args,
                                Py_ssize_t nargs, PyObject *kwnames)
{
    const binding_params params = {"_aligned", aligned_names, 1, 0};
    PyObject *arg;
    if (binding_parse_fast(&params, args, nargs, kwnames, &arg) < 0)
        return NULL;
    BufferObject *b = as_buffer(self);
    long long alignment = buffer_dtype(b)->align;
    if (arg != NULL && arg != Py_None) {
        if (!PyLong_Check(arg)) {
            PyErr_Format(PyExc_TypeError,
                         "_aligned(): alignment must be an int, not %.100s",
                         Py_TYPE(arg)->tp_name);
            return NULL;
        }
        alignment = PyLong_AsLongLong(arg);
        if (alignment == -1 && PyErr_Occurred())
            return NULL;
        if (alignment <= 0) {
            PyErr_SetString(PyExc_ValueError,
                            "_aligned(): alignment must be positive");
            return NULL;
        }
    }
    return PyBool_FromLong(data_ptr(b) % (uint64_t)alignment == 0);
}

/* ---- Text --------------------------------------------------------------- */

/* "Buffer" or "DevicePinnedBuffer" (the type's name without its module). */
static const char *type_name(PyObject *self)
{
    const char *name = Py_TYPE(self)->tp_name;
    const char *dot = strrchr(name, '.');
    return dot ? dot + 1 : name;
}

static PyObject *buffer_repr(PyObject *self)
{
    BufferObject *b = as_buffer(self);
    PyObject *dtype = binding_state_of(self)->dtypes[b->dtype_index];
    PyObject *shape = buffer_get_shape(self, NULL);
    if (shape == NULL)
        return NULL;
    /* The device, as MAX 26.7 shows it (cpu[0]); the queue too when it
     * is not the device's default one, since MAX's text cannot tell two
     * queues apart. */
    mxd_queue *queue = ((QueueObject *)b->stream)->queue;
    mxd_device *dev = mxd_queue_device(queue);
    PyObject *text =
        mxd_queue_is_default(queue)
            ? PyUnicode_FromFormat("max.driver.%s(%S, %R, %s[%d])",
                                   type_name(self), dtype, shape,
                                   mxd_device_api(dev), mxd_device_id(dev))
            : PyUnicode_FromFormat("max.driver.%s(%S, %R, %s[%d], stream=%R)",
                                   type_name(self), dtype, shape,
                                   mxd_device_api(dev), mxd_device_id(dev),
                                   b->stream);
    Py_DECREF(shape);
    return text;
}

/* The decoded values of a contiguous host buffer as float64 bytes. */
static PyObject *decoded_bytes(BufferObject *c)
{
    const mxd_dtype_info *info = buffer_dtype(c);
    int64_t n = binding_buffer_count(c);
    PyObject *bytes =
        PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(n * sizeof(double)));
    if (bytes == NULL)
        return NULL;
    double *out = (double *)PyBytes_AS_STRING(bytes);
    const unsigned char *src =
        (const unsigned char *)mxd_memory_host(c->memory) + c->offset;
    for (int64_t i = 0; i < n; i++) {
        mxd_scalar s;
        mxd_error err;
        if (mxd_dtype_decode(info->code, src + i * info->size_in_bytes, &s,
                             &err) != MXD_OK) {
            Py_DECREF(bytes);
            return binding_raise(&err);
        }
        out[i] = s.v.f;
    }
    return bytes;
}

/* What str() prints: to_numpy() for the dtypes NumPy holds; for bfloat16
 * and the float8, float6 and float4 types their decoded values as float64
 * (to_numpy() would give raw bytes, or refuse), as MAX 26.7 prints them. */
static PyObject *display_array(PyObject *self, PyObject *np)
{
    mxd_dtype_kind kind = buffer_dtype(as_buffer(self))->kind;
    if (kind == MXD_KIND_BOOL || kind == MXD_KIND_SIGNED ||
        kind == MXD_KIND_UNSIGNED || kind == MXD_KIND_FLOAT)
        return binding_to_numpy(self, NULL);
    PyObject *copy = binding_buffer_contiguous(self, NULL); /* on the CPU */
    if (copy == NULL)
        return NULL;
    PyObject *bytes = binding_buffer_host_wait(as_buffer(copy)) == 0
                          ? decoded_bytes(as_buffer(copy))
                          : NULL;
    PyObject *shape = bytes ? buffer_get_shape(copy, NULL) : NULL;
    Py_DECREF(copy);
    PyObject *flat =
        shape ? PyObject_CallMethod(np, "frombuffer", "Os", bytes, "float64")
              : NULL;
    PyObject *name = flat ? PyUnicode_FromString("reshape") : NULL;
    PyObject *array =
        name ? PyObject_CallMethodOneArg(flat, name, shape) : NULL;
    Py_XDECREF(name);
    Py_XDECREF(flat);
    Py_XDECREF(shape);
    Py_XDECREF(bytes);
    return array;
}

/* Buffer([...], dtype=..., shape=..., device=...) with the data as NumPy
 * prints it (summarised with ... when large). */
static PyObject *buffer_str(PyObject *self)
{
    PyObject *np = binding_import_numpy("str(Buffer)");
    if (np == NULL)
        return NULL;
    PyObject *array = display_array(self, np);
    PyObject *fn = array ? PyObject_GetAttrString(np, "array2string") : NULL;
    PyObject *args = fn ? PyTuple_Pack(1, array) : NULL;
    char prefix[64];
    snprintf(prefix, sizeof prefix, "%s(", type_name(self));
    PyObject *kwargs = args ? Py_BuildValue("{s:s}", "prefix", prefix) : NULL;
    PyObject *data = kwargs ? PyObject_Call(fn, args, kwargs) : NULL;
    Py_XDECREF(kwargs);
    Py_XDECREF(args);
    Py_XDECREF(fn);
    Py_XDECREF(array);
    Py_DECREF(np);
    if (data == NULL)
        return NULL;
    BufferObject *b = as_buffer(self);
    PyObject *shape = buffer_get_shape(self, NULL);
    PyObject *device = buffer_get_device(self, NULL);
    PyObject *text =
        shape && device
            ? PyUnicode_FromFormat(
                  "%s(%U, dtype=%S, shape=%R, device=%R)", type_name(self),
                  data, binding_state_of(self)->dtypes[b->dtype_index], shape,
                  device)
            : NULL;
    Py_XDECREF(shape);
    Py_XDECREF(device);
    Py_DECREF(data);
    return text;
}

/* ---- The types ---------------------------------------------------------- */

#define FASTCALL_KW(fn) (PyCFunction)(void (*)(void))(fn)

static PyMethodDef buffer_methods[] = {
    {"zeros", FASTCALL_KW(buffer_zeros),
     METH_FASTCALL | METH_KEYWORDS | METH_CLASS,
     BINDING_DOC("zeros",
                 "($cls, /, shape, dtype, device=None, usage=..., stream=...)",
                 "A zero-filled buffer. On an accelerator the fill is "
                 "enqueued on the buffer's queue; a DevicePinnedBuffer is "
                 "zero on return.\n\n"
                 "Overloads:\n"
                 "    1. zeros(shape: Sequence[int], dtype: DType, device: "
                 "Device | None = None, usage: Usage = Usage.DEFAULT) -> "
                 "Buffer\n"
                 "    2. zeros(shape: Sequence[int], dtype: DType, stream: "
                 "DeviceQueue, usage: Usage = Usage.DEFAULT) -> Buffer")},
    {"scalar", FASTCALL_KW(buffer_scalar),
     METH_FASTCALL | METH_KEYWORDS | METH_CLASS,
     BINDING_DOC("scalar", "($cls, /, value, dtype, device=None)",
                 "A rank-0 buffer holding `value` converted to `dtype`.")},
    {"from_numpy", FASTCALL_KW(binding_buffer_from_numpy),
     METH_FASTCALL | METH_KEYWORDS | METH_CLASS,
     BINDING_DOC("from_numpy", "($cls, /, arr)",
                 "A CPU buffer over a NumPy array: zero-copy for a writable "
                 "C-contiguous array (kept alive), else a contiguous copy.")},
    {"from_dlpack", FASTCALL_KW(binding_from_dlpack),
     METH_FASTCALL | METH_KEYWORDS | METH_CLASS,
     BINDING_DOC("from_dlpack", "($cls, /, array, *, copy=None)",
                 "A buffer over any DLPack producer's memory (zero-copy "
                 "where possible).")},
    {"mmap", FASTCALL_KW(binding_buffer_mmap),
     METH_FASTCALL | METH_KEYWORDS | METH_CLASS,
     BINDING_DOC("mmap",
                 "($cls, /, filename, dtype, shape, mode='copyonwrite', "
                 "offset=0)",
                 "A CPU buffer over a memory-mapped file, with numpy.memmap's "
                 "modes ('r+' writes through to the file, 'r' is copied).")},
    {"item", binding_buffer_item, METH_NOARGS,
     BINDING_DOC("item", "($self, /)",
                 "The one element of a one-element buffer, as a Python bool, "
                 "int or float.")},
    {"__complex__", binding_buffer_complex, METH_NOARGS,
     BINDING_DOC("__complex__", "($self, /)",
                 "complex(buf): the element of a rank-0 buffer, through "
                 "item().")},
    {"__bytes__", binding_buffer_bytes, METH_NOARGS,
     BINDING_DOC("__bytes__", "($self, /)",
                 "bytes(buf): the contents, through the buffer protocol (host "
                 "memory only).")},
    {"view", FASTCALL_KW(binding_buffer_view_as), METH_FASTCALL | METH_KEYWORDS,
     BINDING_DOC("view", "($self, /, dtype, shape=None)",
                 "The same bytes as elements of `dtype`; without `shape` the "
                 "last dimension is rescaled.")},
    {"contiguous", binding_buffer_contiguous, METH_NOARGS,
     BINDING_DOC("contiguous", "($self, /)",
                 "A new contiguous CPU buffer holding a copy (always a "
                 "copy).")},
    {"copy", FASTCALL_KW(binding_buffer_copy), METH_FASTCALL | METH_KEYWORDS,
     BINDING_DOC("copy", "($self, /, device=None, stream=...)",
                 "A new contiguous buffer on `device` (None: the buffer's "
                 "own) or bound to `stream`, holding a copy.\n\n"
                 "Overloads:\n"
                 "    1. copy(self, device: Device | None = None) -> Buffer\n"
                 "    2. copy(self, stream: DeviceQueue) -> Buffer")},
    {"to", FASTCALL_KW(binding_buffer_to_kw), METH_FASTCALL | METH_KEYWORDS,
     BINDING_DOC("to",
                 "($self, /, device=..., stream=..., devices=..., "
                 "streams=...)",
                 "The buffer on a Device or bound to a DeviceQueue: itself "
                 "when it is there already, a zero-copy rebinding for another "
                 "queue of its device, else a copy; a list for a list or "
                 "tuple of targets. Give one argument, by position or by "
                 "keyword.\n\n"
                 "Overloads:\n"
                 "    1. to(self, device: Device) -> Buffer\n"
                 "    2. to(self, stream: DeviceQueue) -> Buffer\n"
                 "    3. to(self, devices: Sequence[Device]) -> list[Buffer]\n"
                 "    4. to(self, streams: Sequence[DeviceQueue]) -> "
                 "list[Buffer]\n"
                 "    5. to(self, targets: Sequence[Device | DeviceQueue], /) "
                 "-> list[Buffer]")},
    {"inplace_copy_from", FASTCALL_KW(binding_buffer_inplace_copy_from),
     METH_FASTCALL | METH_KEYWORDS,
     BINDING_DOC("inplace_copy_from", "($self, /, src)",
                 "Copies src's elements into this buffer, ordered on both "
                 "buffers' queues. Both contiguous, same dtype and element "
                 "count.")},
    {"__dlpack__", FASTCALL_KW(binding_buffer_dlpack),
     METH_FASTCALL | METH_KEYWORDS,
     BINDING_DOC("__dlpack__",
                 "($self, /, *, stream=None, max_version=None, "
                 "dl_device=None, copy=None)",
                 "A DLPack capsule over the buffer's elements (versioned when "
                 "max_version >= (1, 0)), ordered after the buffer's queue as "
                 "the array API's stream argument says.")},
    {"__array__", FASTCALL_KW(binding_buffer_array),
     METH_FASTCALL | METH_KEYWORDS,
     BINDING_DOC("__array__", "($self, /, dtype=None, copy=None)",
                 "numpy.asarray(buf): to_numpy() (a zero-copy alias of host "
                 "memory), converted to `dtype` or copied when asked.")},
    {"__dlpack_device__", binding_buffer_dlpack_device, METH_NOARGS,
     BINDING_DOC("__dlpack_device__", "($self, /)",
                 "(device_type, device_id) as DLPack names the memory.")},
    {"to_numpy", binding_to_numpy, METH_NOARGS,
     BINDING_DOC("to_numpy", "($self, /)",
                 "A NumPy array: a writable zero-copy alias of CPU and "
                 "pinned memory, a copy of accelerator memory.")},
    {"_stamp_write", FASTCALL_KW(binding_buffer_stamp_write),
     METH_FASTCALL | METH_KEYWORDS,
     BINDING_DOC("_stamp_write", "($self, /, completion)",
                 "Declares work the module does not see as the last write "
                 "into the storage: later copies and host access wait for "
                 "`completion` (a HostHazardCompletion); what the record held "
                 "before it (complete entries, those of its queue) is "
                 "dropped. No-op on untracked storage.")},
    {"_stamp_read", FASTCALL_KW(binding_buffer_stamp_read),
     METH_FASTCALL | METH_KEYWORDS,
     BINDING_DOC("_stamp_read", "($self, /, completion)",
                 "Declares work the module does not see as a read of the "
                 "storage: later writes wait for `completion`. No-op on "
                 "untracked storage.")},
    {"__getitem__", FASTCALL_KW(binding_buffer_getitem_kw),
     METH_FASTCALL | METH_KEYWORDS | METH_COEXIST,
     BINDING_DOC("__getitem__", "($self, /, idx)",
                 "buf[idx]: a view (an int or a slice per dimension; all "
                 "ints give a rank-0 view).")},
    {"__setitem__", FASTCALL_KW(binding_buffer_setitem_kw),
     METH_FASTCALL | METH_KEYWORDS | METH_COEXIST,
     BINDING_DOC("__setitem__", "($self, /, idx, value)",
                 "buf[idx] = value: stores one element (an int per "
                 "dimension).")},
    {"_inplace_copy_from", FASTCALL_KW(binding_buffer_inplace_copy_from),
     METH_FASTCALL | METH_KEYWORDS,
     BINDING_DOC("_inplace_copy_from", "($self, /, src)",
                 "MAX 26.7's name for inplace_copy_from, which it is "
                 "here.")},
    {"_view", FASTCALL_KW(binding_buffer_view_as),
     METH_FASTCALL | METH_KEYWORDS,
     BINDING_DOC("_view", "($self, /, dtype, shape=None)",
                 "MAX 26.7's name for view, which it is here.")},
    {"_iterate_indices", binding_buffer_iterate_indices, METH_NOARGS,
     BINDING_DOC("_iterate_indices", "($self, /)",
                 "Every index of the shape in row-major order (an iterator "
                 "of tuples), as MAX's.")},
    {"_data_ptr", buffer_data_ptr, METH_NOARGS,
     BINDING_DOC("_data_ptr", "($self, /)",
                 "The address of the first element: the device address for "
                 "device memory and pinned mappings, the host address on the "
                 "CPU.")},
    {"_aligned", FASTCALL_KW(buffer_aligned), METH_FASTCALL | METH_KEYWORDS,
     BINDING_DOC("_aligned", "($self, /, alignment=None)",
                 "Whether _data_ptr() is a multiple of `alignment` (default "
                 "dtype.align).")},
    {"__reduce_ex__", binding_buffer_reduce_ex, METH_O,
     BINDING_DOC("__reduce_ex__", "($self, protocol, /)",
                 "Pickles the dtype, shape and values (a view as a "
                 "contiguous copy). Protocol 5 hands host memory out of band "
                 "without copying it (pickle.PickleBuffer); older protocols "
                 "copy. An accelerator buffer unpickles onto Accelerator(id) "
                 "of the receiving process.")},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot buffer_slots[] = {
    {Py_tp_doc,
     BINDING_DOC("Buffer", "(dtype, shape, device=None, usage=..., stream=...)",
                 "An n-dimensional, typed, strided view of memory on one "
                 "device, bound to one queue (uninitialised when created "
                 "from a dtype and a shape; a copy of `array` when created "
                 "from one).\n\n"
                 "Overloads:\n"
                 "    1. Buffer(dtype: DType, shape: Sequence[int], device: "
                 "Device | None = None, usage: Usage = Usage.DEFAULT)\n"
                 "    2. Buffer(dtype: DType, shape: Sequence[int], stream: "
                 "DeviceQueue, usage: Usage = Usage.DEFAULT)\n"
                 "    3. Buffer(array: numpy.ndarray | DLPackArray, device: "
                 "Device)")},
    {Py_tp_new, buffer_tp_new},
    {Py_tp_dealloc, buffer_dealloc},
    {Py_tp_repr, buffer_repr},
    {Py_tp_str, buffer_str},
    {Py_tp_methods, buffer_methods},
    {Py_tp_getset, buffer_getset},
    {Py_mp_subscript, binding_buffer_subscript},
    {Py_sq_item, binding_buffer_sq_item},
    {Py_tp_iter, binding_buffer_iter},
    {Py_mp_ass_subscript, binding_buffer_ass_subscript},
    {Py_bf_getbuffer, binding_buffer_getbuffer},
    {Py_bf_releasebuffer, binding_buffer_releasebuffer},
    {Py_nb_float, binding_buffer_float},
    {Py_nb_int, binding_buffer_int},
    {Py_nb_bool, binding_buffer_bool},
    {Py_nb_index, binding_buffer_index},
    {0, NULL},
};

/* No GC support: a Buffer refers only to a DeviceQueue and to core memory,
 * neither of which can refer back to a Buffer, so it is never part of a
 * reference cycle (and millions of small buffers cost no GC tracking). */
static PyType_Spec buffer_spec = {
    .name = "max._core.driver.Buffer",
    .basicsize = sizeof(BufferObject),
    .itemsize = 2 * sizeof(int64_t),
    .flags =
        Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = buffer_slots,
};

static PyType_Slot pinned_slots[] = {
    {Py_tp_doc,
     BINDING_DOC(
         "DevicePinnedBuffer", "(dtype, shape, device=..., stream=...)",
         "A Buffer of host memory pinned and mapped into an "
         "accelerator (usage STAGING, pinned True); pass exactly one "
         "of device and stream.\n\n"
         "Overloads:\n"
         "    1. DevicePinnedBuffer(dtype: DType, shape: Sequence[int], "
         "device: Device)\n"
         "    2. DevicePinnedBuffer(dtype: DType, shape: Sequence[int], "
         "stream: DeviceQueue)")},
    {0, NULL},
};

static PyType_Spec pinned_spec = {
    .name = "max._core.driver.DevicePinnedBuffer",
    .basicsize = sizeof(BufferObject),
    .itemsize = 2 * sizeof(int64_t),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = pinned_slots,
};

/* max.dtype's DType members, by the names of the core's table. */
static int load_dtypes(binding_state *st)
{
    PyObject *module = PyImport_ImportModule("max.dtype");
    if (module == NULL)
        return -1;
    st->dtype_type = PyObject_GetAttrString(module, "DType");
    Py_DECREF(module);
    if (st->dtype_type == NULL)
        return -1;
    for (size_t i = 0; i < MXD_DTYPE_MEMBERS; i++) {
        st->dtypes[i] =
            PyObject_GetAttrString(st->dtype_type, mxd_dtype_at(i)->name);
        if (st->dtypes[i] == NULL)
            return -1;
    }
    return 0;
}

/* Usage, an enum.Flag with MAX's members, defined in Python: a class
 * statement is the clear way to give an enum a method.  As MAX 26.7's (a
 * nanobind enum.Flag): DEFAULT is listed among the members (len(Usage) ==
 * 3, where enum.Flag leaves a 0-valued member out of iteration), repr() is
 * str() (Usage.STAGING), and a negative value is refused (enum.Flag would
 * take -1 as the complement of 0).  repr() and the refusals are spelled out
 * so that every CPython prints and raises the same: 3.10's Flag names a
 * combination highest bit first (Usage.UNTRACKED|STAGING) and compares a
 * str with 0 (TypeError). */
static const char usage_source[] =
    "import enum\n"
    "class Usage(enum.Flag):\n"
    "    \"\"\"How a buffer's memory is allocated and ordered: DEFAULT, the\n"
    "    device's own memory; STAGING, on an accelerator pinned host memory\n"
    "    mapped into the device (on the CPU, ordinary memory); UNTRACKED, no\n"
    "    hazard record: copies are ordered by queue order only and host\n"
    "    access waits for nothing (item() waits for the buffer's "
    "queue).\"\"\"\n"
    "    DEFAULT = 0\n"
    "    STAGING = 1\n"
    "    UNTRACKED = 2\n"
    "    def __repr__(self):\n"
    "        names = [m._name_ for m in type(self).__members__.values()\n"
    "                 if m._value_ and m._value_ & self._value_ == m._value_]\n"
    "        return 'Usage.' + ('|'.join(names) or 'DEFAULT')\n"
    "    __str__ = __repr__\n"
    "    @classmethod\n"
    "    def _missing_(cls, value):\n"
    "        known = 0\n"
    "        for member in cls.__members__.values():\n"
    "            known |= member._value_\n"
    "        if not isinstance(value, int) or value < 0 or value & ~known:\n"
    "            raise ValueError(f'{value!r} is not a valid Usage')\n"
    "        return super()._missing_(value)\n"
    "if 'DEFAULT' not in Usage._member_names_:\n"
    "    Usage._member_names_.insert(0, 'DEFAULT')\n";

static PyObject *new_usage_type(void)
{
    PyObject *globals = Py_BuildValue("{s:s}", "__name__", "max._core.driver");
    if (globals == NULL)
        return NULL;
    PyObject *type = NULL;
    if (PyDict_SetItemString(globals, "__builtins__", PyEval_GetBuiltins()) ==
        0) {
        PyObject *done =
            PyRun_String(usage_source, Py_file_input, globals, globals);
        type = done ? PyDict_GetItemString(globals, "Usage") : NULL;
        Py_XINCREF(type);
        Py_XDECREF(done);
    }
    Py_DECREF(globals);
    return type;
}

static int make_usage(PyObject *module, binding_state *st)
{
    if (!(st->usage_type = new_usage_type()))
        return -1;
    /* Every combination, as the objects Flag hands out for them. */
    for (int i = 0; i < BUFFER_USAGES; i++)
        if (!(st->usages[i] = PyObject_CallFunction(st->usage_type, "i", i)))
            return -1;
    return PyModule_AddObjectRef(module, "Usage", st->usage_type);
}

int binding_add_buffer_types(PyObject *module, binding_state *st)
{
    if (load_dtypes(st) < 0 || make_usage(module, st) < 0)
        return -1;
    st->buffer_type = binding_add_type(module, &buffer_spec, NULL);
    if (st->buffer_type == NULL)
        return -1;
    st->pinned_buffer_type =
        binding_add_type(module, &pinned_spec, (PyObject *)st->buffer_type);
    if (st->pinned_buffer_type == NULL)
        return -1;
    /* Set after creation: PyType_Spec has no vectorcall slot before 3.14. */
    st->buffer_type->tp_vectorcall = buffer_vectorcall;
    st->pinned_buffer_type->tp_vectorcall = buffer_vectorcall;
    return 0;
}
