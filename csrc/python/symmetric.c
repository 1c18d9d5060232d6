/* SymmetricPool, MAX 26.7's symmetric multicast pool: one fixed-size
 * allocation per set of accelerators, registered for the process (the
 * core's symmetric.h); handles are made by allocate() and lookup(). */
#include "binding.h"
#include "symmetric.h"

typedef struct PoolObject {
    PyObject_HEAD
    mxd_symmetric *pool; /* the registry's: never freed */
} PoolObject;

static mxd_symmetric *pool_of(PyObject *self)
{
    return ((PoolObject *)self)->pool;
}

/* `devices` (a sequence of Devices) into devs; the count, or -1 with a
 * TypeError. */
static int parse_devices(binding_state *st, const char *fname, PyObject *obj,
                         mxd_device **devs)
{
    if (PyObject_TypeCheck(obj, st->device_type) || !PySequence_Check(obj) ||
        PyUnicode_Check(obj)) {
        PyErr_Format(PyExc_TypeError,
                     "%s(): devices must be a sequence of Devices, not %.100s",
                     fname, Py_TYPE(obj)->tp_name);
        return -1;
    }
    PyObject *seq = PySequence_Fast(obj, "devices must be a sequence");
    if (seq == NULL)
        return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    int rc = (int)n;
    if (n > MXD_MAX_SYMMETRIC_DEVICES) {
        PyErr_Format(PyExc_ValueError,
                     "%s(): a symmetric pool spans at most %d devices, not %zd",
                     fname, MXD_MAX_SYMMETRIC_DEVICES, n);
        rc = -1;
    }
    for (Py_ssize_t i = 0; rc >= 0 && i < n; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(seq, i);
        if (binding_check_type(fname, "devices[i]", item, st->device_type) < 0)
            rc = -1;
        else
            devs[i] = ((DeviceObject *)item)->device;
    }
    Py_DECREF(seq);
    return rc;
}

static PyObject *wrap(binding_state *st, mxd_symmetric *pool)
{
    PoolObject *self = PyObject_New(PoolObject, st->symmetric_type);
    if (self != NULL)
        self->pool = pool;
    return (PyObject *)self;
}

/* ---- The static methods ---------------------------------------------------
 */

static const char *const allocate_names[] = {"devices", "byte_size"};

static PyObject *pool_allocate(PyObject *cls, PyObject *const *args,
                               Py_ssize_t nargs, PyObject *kwnames)
{
    binding_state *st = binding_type_state((PyTypeObject *)cls);
    const binding_params params = {"allocate", allocate_names, 2, 2};
    PyObject *argv[2];
    mxd_device *devs[MXD_MAX_SYMMETRIC_DEVICES];
    uint64_t bytes;
    if (binding_parse_fast(&params, args, nargs, kwnames, argv) < 0 ||
        binding_parse_u64("allocate", "byte_size", argv[1], &bytes) < 0)
        return NULL;
    int n = parse_devices(st, "allocate", argv[0], devs);
    if (n < 0)
        return NULL;
    if (bytes == 0)
        return PyErr_Format(PyExc_ValueError,
                            "allocate(): byte_size must be positive");
    mxd_symmetric *pool;
    mxd_error err;
    mxd_status status;
    /* Allocating and mapping device memory can synchronize devices. */
    Py_BEGIN_ALLOW_THREADS
        status = mxd_symmetric_allocate(devs, n, bytes, &pool, &err);
    Py_END_ALLOW_THREADS
    if (status != MXD_OK)
        return binding_raise_prefixed("SymmetricPool.allocate", &err);
    return wrap(st, pool);
}

static const char *const devices_names[] = {"devices"};

/* The one argument of lookup() and is_supported(): devs filled, their
 * count returned, or -1 with an exception. */
static int parse_devices_arg(binding_state *st, const char *fname,
                             PyObject *const *args, Py_ssize_t nargs,
                             PyObject *kwnames, mxd_device **devs)
{
    const binding_params params = {fname, devices_names, 1, 1};
    PyObject *arg;
    if (binding_parse_fast(&params, args, nargs, kwnames, &arg) < 0)
        return -1;
    return parse_devices(st, fname, arg, devs);
}

static PyObject *pool_lookup(PyObject *cls, PyObject *const *args,
                             Py_ssize_t nargs, PyObject *kwnames)
{
    binding_state *st = binding_type_state((PyTypeObject *)cls);
    mxd_device *devs[MXD_MAX_SYMMETRIC_DEVICES];
    int n = parse_devices_arg(st, "lookup", args, nargs, kwnames, devs);
    if (n < 0)
        return NULL;
    mxd_symmetric *pool = mxd_symmetric_lookup(devs, n);
    return pool != NULL ? wrap(st, pool) : Py_NewRef(Py_None);
}

static PyObject *pool_is_supported(PyObject *cls, PyObject *const *args,
                                   Py_ssize_t nargs, PyObject *kwnames)
{
    mxd_device *devs[MXD_MAX_SYMMETRIC_DEVICES];
    int n = parse_devices_arg(binding_type_state((PyTypeObject *)cls),
                              "is_supported", args, nargs, kwnames, devs);
    if (n < 0)
        return NULL;
    return PyBool_FromLong(mxd_symmetric_supported(devs, n));
}

/* ---- Views ------------------------------------------------------------------
 */

static int uint8_index(void)
{
    for (size_t i = 0; i < MXD_DTYPE_MEMBERS; i++)
        if (mxd_dtype_at(i)->code == MXD_DTYPE_UINT8)
            return (int)i;
    return -1;
}

/* A flat uint8 Buffer over device's unicast or multicast view, bound to
 * the device's default queue. */
static PyObject *view(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                      PyObject *kwnames, bool multicast)
{
    binding_state *st = binding_state_of(self);
    const char *fname = multicast ? "multicast_view" : "unicast_view";
    static const char *const names[] = {"device"};
    const binding_params params = {fname, names, 1, 1};
    PyObject *device;
    if (binding_parse_fast(&params, args, nargs, kwnames, &device) < 0 ||
        binding_check_type(fname, "device", device, st->device_type) < 0)
        return NULL;
    PyObject *queue = binding_device_default_queue((DeviceObject *)device);
    if (queue == NULL)
        return NULL;
    mxd_memory *memory;
    mxd_error err;
    if (mxd_symmetric_memory(pool_of(self), ((DeviceObject *)device)->device,
                             multicast, &memory, &err) != MXD_OK)
        return binding_raise(&err);
    int64_t shape[1] = {(int64_t)mxd_symmetric_byte_size(pool_of(self))};
    int64_t strides[1] = {1};
    mxd_layout layout = {1, shape, strides, 0, 1, shape[0]};
    return binding_buffer_new(st->buffer_type, memory, queue, uint8_index(),
                              BUFFER_USAGE_DEFAULT, &layout);
}

static PyObject *pool_unicast_view(PyObject *self, PyObject *const *args,
                                   Py_ssize_t nargs, PyObject *kwnames)
{
    return view(self, args, nargs, kwnames, false);
}

static PyObject *pool_multicast_view(PyObject *self, PyObject *const *args,
                                     Py_ssize_t nargs, PyObject *kwnames)
{
    return view(self, args, nargs, kwnames, true);
}

/* ---- The type ---------------------------------------------------------------
 */

static PyObject *pool_get_byte_size(PyObject *self, void *closure)
{
    (void)closure;
    return PyLong_FromUnsignedLongLong(mxd_symmetric_byte_size(pool_of(self)));
}

static PyObject *pool_tp_new(PyTypeObject *type, PyObject *args,
                             PyObject *kwargs)
{
    (void)type, (void)args, (void)kwargs;
    PyErr_SetString(PyExc_TypeError,
                    "SymmetricPool cannot be created directly: use "
                    "SymmetricPool.allocate(devices, byte_size) once, then "
                    "SymmetricPool.lookup(devices)");
    return NULL;
}

static void pool_dealloc(PyObject *self)
{
    PyTypeObject *type = Py_TYPE(self);
    type->tp_free(self); /* the pool itself is the driver's */
    Py_DECREF(type);
}

/* Two handles of one pool are equal (and hash alike). */
static PyObject *pool_richcompare(PyObject *self, PyObject *other, int op)
{
    if (Py_TYPE(other) != Py_TYPE(self) || (op != Py_EQ && op != Py_NE))
        Py_RETURN_NOTIMPLEMENTED;
    bool same = pool_of(self) == pool_of(other);
    return PyBool_FromLong(op == Py_EQ ? same : !same);
}

static Py_hash_t pool_hash(PyObject *self)
{
    return compat_hash_pointer(pool_of(self));
}

static PyObject *pool_repr(PyObject *self)
{
    return PyUnicode_FromFormat(
        "<SymmetricPool of %llu bytes per device at %p>",
        (unsigned long long)mxd_symmetric_byte_size(pool_of(self)),
        (void *)pool_of(self));
}

#define FASTCALL_KW(fn) (PyCFunction)(void (*)(void))(fn)

static PyMethodDef pool_methods[] = {
    {"allocate", FASTCALL_KW(pool_allocate),
     METH_FASTCALL | METH_KEYWORDS | METH_CLASS,
     BINDING_DOC("allocate", "($cls, /, devices, byte_size)",
                 "Allocates byte_size usable bytes on each of `devices` (at "
                 "least two, in any order), binds them to one multicast "
                 "object and registers the pool for the process. "
                 "RuntimeError if a pool is registered for these devices "
                 "already, fewer than two devices are given, a device lacks "
                 "multicast support (the CPU; HIP devices), or the "
                 "allocation fails.")},
    {"lookup", FASTCALL_KW(pool_lookup),
     METH_FASTCALL | METH_KEYWORDS | METH_CLASS,
     BINDING_DOC("lookup", "($cls, /, devices)",
                 "The pool registered for `devices` (in any order), or None; "
                 "never allocates.")},
    {"is_supported", FASTCALL_KW(pool_is_supported),
     METH_FASTCALL | METH_KEYWORDS | METH_CLASS,
     BINDING_DOC("is_supported", "($cls, /, devices)",
                 "Whether every device can back a multicast pool, answered "
                 "before anything is allocated.")},
    {"unicast_view", FASTCALL_KW(pool_unicast_view),
     METH_FASTCALL | METH_KEYWORDS,
     BINDING_DOC("unicast_view", "($self, /, device)",
                 "The device's own memory of the pool as a flat uint8 "
                 "Buffer of byte_size bytes (the pool owns the memory; "
                 "retype a part with view()). RuntimeError if the pool does "
                 "not span `device`.")},
    {"multicast_view", FASTCALL_KW(pool_multicast_view),
     METH_FASTCALL | METH_KEYWORDS,
     BINDING_DOC("multicast_view", "($self, /, device)",
                 "The multicast object as `device` maps it, a flat uint8 "
                 "Buffer of byte_size bytes: for kernels issuing multimem "
                 "instructions (host loads and stores through it are "
                 "undefined).")},
    {"__reduce_ex__", binding_refuse_pickle, METH_O,
     BINDING_DOC("__reduce_ex__", "($self, protocol, /)",
                 "Raises TypeError: a pool is a resource of one process.")},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef pool_getset[] = {
    {"byte_size", pool_get_byte_size, NULL,
     "Usable bytes per device: the views' length.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot pool_slots[] = {
    {Py_tp_doc,
     BINDING_DOC("SymmetricPool", "()",
                 "A symmetric multicast pool shared by a set of "
                 "accelerators: one fixed-size allocation per device, all "
                 "bound to one multicast object, registered for the process "
                 "and never freed (dropping a handle frees nothing). Not "
                 "constructible: allocate() once, lookup() afterwards.")},
    {Py_tp_new, pool_tp_new},
    {Py_tp_dealloc, pool_dealloc},
    {Py_tp_repr, pool_repr},
    {Py_tp_hash, pool_hash},
    {Py_tp_richcompare, pool_richcompare},
    {Py_tp_methods, pool_methods},
    {Py_tp_getset, pool_getset},
    {0, NULL},
};

/* Holds no Python references: no GC support. */
static PyType_Spec pool_spec = {
    .name = "max._core.driver.SymmetricPool",
    .basicsize = sizeof(PoolObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = pool_slots,
};

int binding_add_symmetric_type(PyObject *module, binding_state *st)
{
    st->symmetric_type = binding_add_type(module, &pool_spec, NULL);
    return st->symmetric_type == NULL ? -1 : 0;
}
