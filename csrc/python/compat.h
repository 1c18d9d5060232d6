/* Everything that differs between the supported CPython versions (3.10+).
 * The rest of csrc/python uses only the names defined here, so a new
 * Python release should need changes in this one file. */
#ifndef MXD_BINDING_COMPAT_H
#define MXD_BINDING_COMPAT_H

#ifndef PY_SSIZE_T_CLEAN
#error "include binding.h (which includes Python.h first) instead"
#endif

#if PY_VERSION_HEX < 0x030A0000
#error "max._core.driver needs CPython 3.10 or newer"
#endif

/* The interpreter has started tearing down: taking the GIL from a foreign
 * thread from now on may never return (the thread is parked or exited). */
static inline int compat_is_finalizing(void)
{
#if PY_VERSION_HEX >= 0x030D0000
    return Py_IsFinalizing();
#else
    return _Py_IsFinalizing();
#endif
}

/* The short qualified name of a type ("DeviceQueue", "int"), as a new
 * reference; the name is what error messages show the user. */
static inline PyObject *compat_type_qualname(PyTypeObject *type)
{
#if PY_VERSION_HEX >= 0x030B0000
    return PyType_GetQualName(type);
#else
    return PyObject_GetAttrString((PyObject *)type, "__qualname__");
#endif
}

/* Python 3.12 lets a module say it cannot live in several interpreters;
 * ours cannot, since the host runner takes the main interpreter's GIL. */
#if PY_VERSION_HEX >= 0x030C0000
#define COMPAT_HAS_MULTIPLE_INTERPRETERS_SLOT 1
#else
#define COMPAT_HAS_MULTIPLE_INTERPRETERS_SLOT 0
#endif

/* The module of the first class in type's MRO defined by `def` (type is
 * ours, or a Python subclass of one of ours); NULL only for other types.
 * No exception is set. */
static inline PyObject *compat_module_by_def(PyTypeObject *type,
                                             PyModuleDef *def)
{
#if PY_VERSION_HEX >= 0x030B0000
    PyObject *module = PyType_GetModuleByDef(type, def);
    if (module == NULL)
        PyErr_Clear();
    return module;
#else
    for (; type != NULL; type = type->tp_base) {
        if (!(type->tp_flags & Py_TPFLAGS_HEAPTYPE))
            continue;
        PyObject *module = ((PyHeapTypeObject *)type)->ht_module;
        if (module != NULL && PyModule_GetDef(module) == def)
            return module;
    }
    return NULL;
#endif
}

/* Hash of an address, like CPython's own object hash (which is private). */
static inline Py_hash_t compat_hash_pointer(const void *ptr)
{
    uintptr_t bits = (uintptr_t)ptr;
    /* Low bits are always zero for aligned allocations: rotate them away. */
    bits = (bits >> 4) | (bits << (8 * sizeof(bits) - 4));
    Py_hash_t hash = (Py_hash_t)bits;
    return hash == -1 ? -2 : hash;
}

/* The exception being raised, taken out of the thread state (a new
 * reference to the instance; NULL when none is set). */
static inline PyObject *compat_take_exception(void)
{
#if PY_VERSION_HEX >= 0x030C0000
    return PyErr_GetRaisedException();
#else
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    if (type == NULL)
        return NULL;
    PyErr_NormalizeException(&type, &value, &tb);
    if (tb != NULL && value != NULL)
        PyException_SetTraceback(value, tb);
    Py_XDECREF(type);
    Py_XDECREF(tb);
    return value;
#endif
}

/* Raises `exc` (an instance, or NULL for nothing) again, stealing the
 * reference: the inverse of compat_take_exception. */
static inline void compat_restore_exception(PyObject *exc)
{
#if PY_VERSION_HEX >= 0x030C0000
    PyErr_SetRaisedException(exc);
#else
    if (exc == NULL)
        return;
    PyErr_Restore(Py_NewRef((PyObject *)Py_TYPE(exc)), exc,
                  PyException_GetTraceback(exc));
#endif
}

/* The object a weak reference points to, as a new reference, or NULL
 * (no exception) when it is gone. */
static inline PyObject *compat_weakref_get(PyObject *ref)
{
#if PY_VERSION_HEX >= 0x030D0000
    PyObject *obj = NULL;
    if (PyWeakref_GetRef(ref, &obj) < 0)
        PyErr_Clear();
    return obj;
#else
    PyObject *obj = PyWeakref_GetObject(ref);
    return obj == Py_None ? NULL : Py_NewRef(obj);
#endif
}

#endif /* MXD_BINDING_COMPAT_H */
