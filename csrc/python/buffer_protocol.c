/* The buffer protocol (PEP 3118) of Buffer, on host-accessible memory
 * (SPEC §15): memoryview(buf), bytes(buf), numpy.frombuffer(buf),
 * struct.unpack_from(fmt, buf) and every C consumer of Py_buffer.
 *
 * The export has the buffer's shape, strides in bytes and the struct
 * format of its dtype.  A dtype that struct cannot describe (bfloat16,
 * float8/6/4) exports as its raw bytes (format "B", one dimension of the
 * byte count), which needs a contiguous view.  Taking the export is a host
 * access: it waits as a host read does (SPEC §12.6).  The export holds a
 * reference to the Buffer, so its memory lives while the export does. */
#include "binding.h"

static BufferObject *as_buffer(PyObject *self)
{
    return (BufferObject *)self;
}

/* The struct module's native format for the dtype, NULL for none. */
static const char *struct_format(const mxd_dtype_info *info)
{
    switch (info->code) {
    case MXD_DTYPE_BOOL: return "?";
    case MXD_DTYPE_INT8: return "b";
    case MXD_DTYPE_UINT8: return "B";
    case MXD_DTYPE_INT16: return "h";
    case MXD_DTYPE_UINT16: return "H";
    case MXD_DTYPE_INT32: return "i";
    case MXD_DTYPE_UINT32: return "I";
    case MXD_DTYPE_INT64: return "q";
    case MXD_DTYPE_UINT64: return "Q";
    case MXD_DTYPE_FLOAT16: return "e";
    case MXD_DTYPE_FLOAT32: return "f";
    case MXD_DTYPE_FLOAT64: return "d";
    default: return NULL; /* bfloat16, float8, float6, float4 */
    }
}

static int refuse(const char *fmt, ...)
{
    va_list args;
    va_start(args, fmt);
    PyErr_FormatV(PyExc_BufferError, fmt, args);
    va_end(args);
    return -1;
}

/* What no export can give, checked before waiting for anything. */
static int check_exportable(BufferObject *b, const mxd_layout *layout,
                            int flags)
{
    mxd_device *dev = mxd_memory_device(b->memory);
    const mxd_dtype_info *info = buffer_dtype(b);
    if (mxd_memory_host(b->memory) == NULL)
        return refuse("the buffer protocol needs host memory, and this "
                      "Buffer is in %s device memory (Device(type=gpu,id=%d));"
                      " copy it to the host first with buf.to(CPU())",
                      mxd_device_api(dev), mxd_device_id(dev));
    if ((flags & PyBUF_WRITABLE) && mxd_memory_is_readonly(b->memory))
        return refuse("the Buffer's memory is read-only: it cannot be "
                      "exported as writable");
    if (struct_format(info) == NULL && !mxd_layout_is_contiguous(layout))
        return refuse("DType.%s has no struct format, so a Buffer of it "
                      "exports as raw bytes, which needs a contiguous view; "
                      "this one is strided (copy it with contiguous() "
                      "first)",
                      info->name);
    return 0;
}

/* Fills shape and strides (in bytes) into dims[0..2*ndim). */
static void fill_dims(BufferObject *b, const mxd_layout *layout, bool raw,
                      Py_buffer *view, Py_ssize_t *dims)
{
    if (raw) {
        view->ndim = 1;
        dims[0] = view->len;
        dims[1] = 1;
    } else {
        view->ndim = layout->rank;
        for (int i = 0; i < layout->rank; i++) {
            dims[i] = (Py_ssize_t)buffer_shape(b)[i];
            dims[layout->rank + i] =
                (Py_ssize_t)(buffer_strides(b)[i] * layout->element_size);
        }
    }
    view->shape = dims;
    view->strides = dims + view->ndim;
}

/* Applies what the consumer asked for (PyBUF_ND, _STRIDES, the contiguity
 * flags) to a view filled with everything. */
static int apply_request(Py_buffer *view, int flags)
{
    if ((flags & PyBUF_F_CONTIGUOUS) == PyBUF_F_CONTIGUOUS &&
        !PyBuffer_IsContiguous(view, 'F'))
        return refuse("the Buffer is not Fortran-contiguous");
    if ((flags & PyBUF_C_CONTIGUOUS) == PyBUF_C_CONTIGUOUS &&
        !PyBuffer_IsContiguous(view, 'C'))
        return refuse("the Buffer is not C-contiguous");
    if ((flags & PyBUF_ANY_CONTIGUOUS) == PyBUF_ANY_CONTIGUOUS &&
        !PyBuffer_IsContiguous(view, 'A'))
        return refuse("the Buffer is not contiguous");
    if ((flags & PyBUF_STRIDES) != PyBUF_STRIDES) {
        /* Without strides the consumer assumes C order. */
        if (!PyBuffer_IsContiguous(view, 'C'))
            return refuse("the Buffer is strided: its consumer must accept "
                          "strides (PyBUF_STRIDES), as memoryview does");
        view->strides = NULL;
    }
    if ((flags & PyBUF_ND) != PyBUF_ND)
        view->shape = NULL;
    if ((flags & PyBUF_FORMAT) != PyBUF_FORMAT)
        view->format = NULL; /* means "B" */
    return 0;
}

int binding_buffer_getbuffer(PyObject *self, Py_buffer *view, int flags)
{
    BufferObject *b = as_buffer(self);
    mxd_layout layout = binding_buffer_layout(b);
    view->obj = NULL;
    if (check_exportable(b, &layout, flags) < 0 ||
        binding_buffer_host_wait(b) < 0)
        return -1;
    const char *format = struct_format(buffer_dtype(b));
    bool raw = format == NULL;
    Py_ssize_t *dims = PyMem_Malloc(
        2 * (size_t)(layout.rank > 1 ? layout.rank : 1) * sizeof(Py_ssize_t));
    if (dims == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    view->buf = (char *)mxd_memory_host(b->memory) + b->offset;
    view->itemsize = raw ? 1 : (Py_ssize_t)layout.element_size;
    view->len = (Py_ssize_t)(binding_buffer_count(b) * layout.element_size);
    view->readonly = mxd_memory_is_readonly(b->memory);
    view->format = (char *)(raw ? "B" : format);
    view->suboffsets = NULL;
    view->internal = dims;
    fill_dims(b, &layout, raw, view, dims);
    if (apply_request(view, flags) < 0) {
        PyMem_Free(dims);
        view->internal = NULL;
        return -1;
    }
    view->obj = Py_NewRef(self);
    return 0;
}

void binding_buffer_releasebuffer(PyObject *self, Py_buffer *view)
{
    (void)self;
    PyMem_Free(view->internal);
    view->internal = NULL;
}
