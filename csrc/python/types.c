/* What every type file shares, below all of them: creating a heap type of
 * the module, and equality of wrappers by the native object they wrap. */
#include "binding.h"

PyTypeObject *binding_add_type(PyObject *module, PyType_Spec *spec,
                               PyObject *base)
{
    PyObject *type = PyType_FromModuleAndSpec(module, spec, base);
    if (type == NULL)
        return NULL;
    if (PyModule_AddType(module, (PyTypeObject *)type) < 0) {
        Py_DECREF(type);
        return NULL;
    }
    return (PyTypeObject *)type;
}

static const void *native_at(PyObject *obj, size_t offset)
{
    return *(const void *const *)((const char *)obj + offset);
}

PyObject *binding_compare_native(PyObject *self, PyObject *other, int op,
                                 size_t native_offset)
{
    if ((op != Py_EQ && op != Py_NE) || !Py_IS_TYPE(other, Py_TYPE(self)))
        Py_RETURN_NOTIMPLEMENTED;
    int equal =
        native_at(self, native_offset) == native_at(other, native_offset);
    return PyBool_FromLong(op == Py_EQ ? equal : !equal);
}
