/* Python's number conversions of a Buffer: float(), int(), complex(),
 * bool() and operator.index(), as NumPy 2's arrays do them, each through
 * item() (so an accelerator buffer is read as item() reads it).
 *
 * Without these slots, float() and int() would fall back to the buffer
 * protocol and parse the element's bytes as text (float() of a float32
 * buffer failed; int() of a uint8 buffer holding b"42" returned 42).
 *
 * bytes() would try __index__ before the buffer protocol, and make
 * bytes(Buffer.scalar(3, DType.int32)) three zero bytes, as it does for a
 * NumPy array: __bytes__ keeps it the buffer's contents (SPEC 15). */
#include "binding.h"

/* The element count, from the shape alone. */
static int64_t element_count(BufferObject *b)
{
    int64_t count = 1;
    for (int i = 0; i < buffer_rank(b); i++)
        count *= buffer_shape(b)[i];
    return count;
}

/* item() of a rank-0 buffer; a TypeError naming `what` otherwise (NumPy 2
 * refuses arrays of rank > 0 even with one element). */
static PyObject *scalar_of(PyObject *self, const char *what)
{
    BufferObject *b = (BufferObject *)self;
    if (buffer_rank(b) != 0) {
        int64_t count = element_count(b);
        PyErr_Format(PyExc_TypeError,
                     "only 0-dimensional buffers can be converted to Python "
                     "scalars by %s() (this one has rank %d and %lld "
                     "elements)%s",
                     what, buffer_rank(b), (long long)count,
                     count == 1 ? "; item() reads its one element" : "");
        return NULL;
    }
    return binding_buffer_item(self, NULL);
}

static PyObject *convert(PyObject *self, const char *what,
                         PyObject *(*to)(PyObject *))
{
    PyObject *value = scalar_of(self, what);
    if (value == NULL)
        return NULL;
    PyObject *result = to(value);
    Py_DECREF(value);
    return result;
}

PyObject *binding_buffer_float(PyObject *self)
{
    return convert(self, "float", PyNumber_Float);
}

PyObject *binding_buffer_int(PyObject *self)
{
    return convert(self, "int", PyNumber_Long);
}

static PyObject *to_complex(PyObject *value)
{
    return PyObject_CallOneArg((PyObject *)&PyComplex_Type, value);
}

PyObject *binding_buffer_complex(PyObject *self, PyObject *unused)
{
    (void)unused;
    return convert(self, "complex", to_complex);
}

/* Any one-element buffer (any rank), as NumPy: the truth of its element;
 * empty and larger buffers are ambiguous (ValueError). */
int binding_buffer_bool(PyObject *self)
{
    int64_t count = element_count((BufferObject *)self);
    if (count != 1) {
        PyErr_SetString(PyExc_ValueError,
                        count == 0
                            ? "the truth value of an empty buffer is "
                              "ambiguous; use `buf.num_elements > 0` to check "
                              "that a buffer is not empty"
                            : "the truth value of a buffer with more than one "
                              "element is ambiguous");
        return -1;
    }
    PyObject *value = binding_buffer_item(self, NULL);
    if (value == NULL)
        return -1;
    int truth = PyObject_IsTrue(value);
    Py_DECREF(value);
    return truth;
}

/* Only a rank-0 buffer of an integer dtype (not bool) is an index, as
 * NumPy's integer scalar arrays. */
PyObject *binding_buffer_index(PyObject *self)
{
    BufferObject *b = (BufferObject *)self;
    mxd_dtype_kind kind = buffer_dtype(b)->kind;
    if (buffer_rank(b) != 0 ||
        (kind != MXD_KIND_SIGNED && kind != MXD_KIND_UNSIGNED)) {
        PyErr_Format(PyExc_TypeError,
                     "only 0-dimensional buffers of an integer dtype can be "
                     "converted to an index (this one: %s, rank %d)",
                     buffer_dtype(b)->name, buffer_rank(b));
        return NULL;
    }
    return binding_buffer_item(self, NULL);
}

/* bytes(buf): the contents through the buffer protocol (a host read), not
 * the zero bytes bytes(operator.index(buf)) would give. */
PyObject *binding_buffer_bytes(PyObject *self, PyObject *unused)
{
    (void)unused;
    return PyBytes_FromObject(self);
}
