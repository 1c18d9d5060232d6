/* CompletionFlag: an 8-byte host slot that gates queues (SPEC §6). */
#include "binding.h"

static mxd_flag *flag_of(PyObject *self)
{
    return ((FlagObject *)self)->flag;
}

/* ---- Construction and lifetime ------------------------------------------ */

static const char *const device_names[] = {"device"};

static PyObject *flag_tp_new(PyTypeObject *type, PyObject *args,
                             PyObject *kwargs)
{
    const binding_params params = {"CompletionFlag", device_names, 1, 1};
    binding_state *st = binding_type_state(type);
    PyObject *device;
    if (binding_parse_tuple(&params, args, kwargs, &device) < 0 ||
        binding_check_type("CompletionFlag", "device", device,
                           st->device_type) < 0)
        return NULL;
    mxd_flag *flag;
    mxd_error err;
    mxd_status status;
    /* Allocating pinned host memory may wait for the device, whose pending
     * host functions may need the GIL. */
    Py_BEGIN_ALLOW_THREADS
        status = mxd_flag_create(((DeviceObject *)device)->device, &flag, &err);
    Py_END_ALLOW_THREADS
    if (status != MXD_OK)
        return binding_raise(&err);
    FlagObject *self = PyObject_New(FlagObject, type);
    if (self == NULL) {
        Py_BEGIN_ALLOW_THREADS
            mxd_flag_release(flag);
        Py_END_ALLOW_THREADS
        return NULL;
    }
    self->flag = flag;
    return (PyObject *)self;
}

static void flag_dealloc(PyObject *self)
{
    PyTypeObject *type = Py_TYPE(self);
    mxd_flag *flag = flag_of(self);
    /* Freeing pinned host memory can synchronize with the device: do not
     * hold the GIL meanwhile. */
    Py_BEGIN_ALLOW_THREADS
        mxd_flag_release(flag);
    Py_END_ALLOW_THREADS
    type->tp_free(self);
    Py_DECREF(type);
}

/* ---- Methods ------------------------------------------------------------ */

static const char *const value_names[] = {"value"};

static PyObject *flag_signal(PyObject *self, PyObject *const *args,
                             Py_ssize_t nargs, PyObject *kwnames)
{
    PyObject *arg;
    if (nargs == 1 && kwnames == NULL) {
        arg = args[0];
    } else {
        const binding_params params = {"signal", value_names, 1, 1};
        if (binding_parse_fast(&params, args, nargs, kwnames, &arg) < 0)
            return NULL;
    }
    uint64_t value;
    if (binding_parse_u64("signal", "value", arg, &value) < 0)
        return NULL;
    mxd_flag_signal(flag_of(self), value);
    Py_RETURN_NONE;
}

static PyObject *flag_load(PyObject *self, PyObject *unused)
{
    (void)unused;
    return PyLong_FromUnsignedLongLong(mxd_flag_load(flag_of(self)));
}

static PyObject *flag_reset(PyObject *self, PyObject *unused)
{
    (void)unused;
    mxd_flag_signal(flag_of(self), 0);
    Py_RETURN_NONE;
}

static PyMethodDef flag_methods[] = {
    {"signal", (PyCFunction)(void (*)(void))flag_signal,
     METH_FASTCALL | METH_KEYWORDS,
     BINDING_DOC("signal", "($self, /, value)",
                 "Stores `value` (0..2**64-1) with release ordering; "
                 "callable from any thread.")},
    {"load", flag_load, METH_NOARGS,
     BINDING_DOC("load", "($self, /)",
                 "The current value (acquire-ordered load).")},
    {"reset", flag_reset, METH_NOARGS,
     BINDING_DOC("reset", "($self, /)", "Stores 0.")},
    {"__reduce_ex__", binding_refuse_pickle, METH_O,
     BINDING_DOC("__reduce_ex__", "($self, protocol, /)",
                 "Raises TypeError: a flag is a resource of one process.")},
    {NULL, NULL, 0, NULL},
};

/* ---- Properties and text ------------------------------------------------ */

static PyObject *flag_get_device(PyObject *self, void *closure)
{
    (void)closure;
    return binding_device_object(binding_state_of(self),
                                 mxd_flag_device(flag_of(self)));
}

static PyObject *flag_get_device_ptr(PyObject *self, void *closure)
{
    (void)closure;
    return PyLong_FromSize_t((size_t)mxd_flag_device_ptr(flag_of(self)));
}

static PyObject *flag_get_unsafe_ptr(PyObject *self, void *closure)
{
    (void)closure;
    return PyLong_FromVoidPtr(flag_of(self));
}

static PyGetSetDef flag_getset[] = {
    {"device", flag_get_device, NULL, "The owning Device.", NULL},
    {"device_ptr", flag_get_device_ptr, NULL,
     "The device-visible address of the slot (its host address on CPU).", NULL},
    {"_unsafe_ptr", flag_get_unsafe_ptr, NULL,
     "The address of the native flag object (not of the slot).", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyObject *flag_repr(PyObject *self)
{
    mxd_flag *flag = flag_of(self);
    mxd_device *dev = mxd_flag_device(flag);
    PyObject *value = PyLong_FromUnsignedLongLong(mxd_flag_load(flag));
    if (value == NULL)
        return NULL;
    PyObject *repr = PyUnicode_FromFormat(
        "CompletionFlag(device=Device(type=%s,id=%d), device_ptr=%p, "
        "value=%S)",
        mxd_device_is_host(dev) ? "cpu" : "gpu", mxd_device_id(dev),
        (void *)mxd_flag_device_ptr(flag), value);
    Py_DECREF(value);
    return repr;
}

static PyType_Slot flag_slots[] = {
    {Py_tp_doc,
     BINDING_DOC("CompletionFlag", "(device)",
                 "A fresh 8-byte slot of device-readable host memory holding "
                 "0; queues can wait until it equals a value.")},
    {Py_tp_new, flag_tp_new},
    {Py_tp_dealloc, flag_dealloc},
    {Py_tp_repr, flag_repr},
    {Py_tp_methods, flag_methods},
    {Py_tp_getset, flag_getset},
    {0, NULL},
};

/* Holds no Python references, so no GC support. */
static PyType_Spec flag_spec = {
    .name = "max._core.driver.CompletionFlag",
    .basicsize = sizeof(FlagObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = flag_slots,
};

int binding_add_flag_type(PyObject *module, binding_state *st)
{
    st->flag_type = binding_add_type(module, &flag_spec, NULL);
    return st->flag_type == NULL ? -1 : 0;
}
