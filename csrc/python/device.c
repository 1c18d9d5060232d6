/* Device, and its two constructible subclasses CPU and Accelerator.
 *
 * Device objects are cached in module state, one per core device, so that
 * CPU() is CPU(), Accelerator() is Accelerator(0) and every `.device`
 * property returns the same object.  CPU and Accelerator are subtypes of
 * Device whose vectorcall returns the cached object; tp_new refuses (so
 * T.__new__(T) never yields an uninitialised device), and Device itself is
 * abstract. */
#include "binding.h"

#include <stdio.h>

#include <string.h>

/* ---- Construction and the cache ----------------------------------------- */

static PyObject *device_alloc(PyTypeObject *type, mxd_device *dev)
{
    DeviceObject *self = PyObject_GC_New(DeviceObject, type);
    if (self == NULL)
        return NULL;
    self->device = dev;
    self->default_queue = NULL;
    PyObject_GC_Track(self);
    return (PyObject *)self;
}

/* "failed to create device: <reason>", with the backend selection reasons
 * when there is no accelerator backend at all (SPEC §3). */
static PyObject *raise_device_error(const mxd_error *err)
{
    static const char prefix[] = "failed to create device: ";
    mxd_error copy = *err;
    if (strncmp(copy.message, prefix, sizeof prefix - 1) == 0)
        memmove(copy.message, copy.message + sizeof prefix - 1,
                strlen(copy.message) - (sizeof prefix - 1) + 1);
    PyObject *text = binding_error_text(&copy);
    if (text == NULL)
        return NULL;
    PyObject *type =
        err->status == MXD_NO_MEMORY ? PyExc_MemoryError : PyExc_ValueError;
    const char *summary = mxd_selection_summary();
    if (mxd_accelerator_count() == 0 && summary != NULL && summary[0] != '\0' &&
        strstr(err->message, summary) == NULL)
        PyErr_Format(type, "%s%U\n%s", prefix, text, summary);
    else
        PyErr_Format(type, "%s%U", prefix, text);
    Py_DECREF(text);
    return NULL;
}

static PyObject *accelerator_object(binding_state *st, int id)
{
    if (id >= 0 && id < st->accelerator_count && st->accelerators[id] != NULL)
        return Py_NewRef(st->accelerators[id]);
    mxd_device *dev;
    mxd_error err;
    if (mxd_accelerator(id, &dev, &err) != MXD_OK)
        return raise_device_error(&err);
    if (id < 0 || id >= st->accelerator_count) {
        /* The core and the count read at import disagree: never index out
         * of the cache. */
        PyErr_Format(PyExc_ValueError,
                     "failed to create device: accelerator %d is out of "
                     "range (%d found)",
                     id, st->accelerator_count);
        return NULL;
    }
    PyObject *obj = device_alloc(st->accelerator_type, dev);
    if (obj != NULL)
        st->accelerators[id] = Py_NewRef(obj);
    return obj;
}

/* A virtual accelerator's one object, found by its core device (new
 * reference); made on first use. */
static PyObject *virtual_device_object(binding_state *st, mxd_device *dev)
{
    PyObject *key = PyLong_FromVoidPtr(dev);
    if (key == NULL)
        return NULL;
    PyObject *obj = PyDict_GetItemWithError(st->virtual_devices, key);
    if (obj != NULL || PyErr_Occurred()) {
        Py_DECREF(key);
        return Py_XNewRef(obj);
    }
    obj = device_alloc(st->accelerator_type, dev);
    if (obj != NULL && PyDict_SetItem(st->virtual_devices, key, obj) < 0)
        Py_CLEAR(obj);
    Py_DECREF(key);
    return obj;
}

/* Accelerator(id) in virtual device mode. */
static PyObject *virtual_accelerator(binding_state *st, int id)
{
    mxd_device *dev;
    mxd_error err;
    if (mxd_virtual_device(id, &dev, &err) != MXD_OK)
        return binding_raise(&err); /* says "failed to create device:" */
    return virtual_device_object(st, dev);
}

PyObject *binding_device_object(binding_state *st, mxd_device *dev)
{
    if (mxd_device_is_host(dev))
        return Py_NewRef(st->cpu);
    if (mxd_device_is_virtual(dev))
        return virtual_device_object(st, dev);
    return accelerator_object(st, mxd_device_id(dev));
}

static const char *const id_names[] = {"id"};

PyObject *binding_cpu_from_arg(binding_state *st, const char *fname,
                               PyObject *id)
{
    int ignored; /* the CPU's id is always 0 (SPEC §3) */
    if (id != NULL && binding_parse_device_id(fname, id, &ignored) < 0)
        return NULL;
    return Py_NewRef(st->cpu);
}

/* Device objects are never made by tp_new (so T.__new__(T) cannot produce
 * a second, or an uninitialised, device object): CPU(id) and
 * Accelerator(id) are served by the types' vectorcall, below. */
static PyObject *device_tp_new(PyTypeObject *type, PyObject *args,
                               PyObject *kwargs)
{
    (void)type;
    (void)args;
    (void)kwargs;
    PyErr_SetString(PyExc_TypeError,
                    "Device objects cannot be created with __new__; call "
                    "CPU(id), Accelerator(id) or Device.cpu(id)");
    return NULL;
}

static PyObject *cpu_vectorcall(PyObject *type, PyObject *const *args,
                                size_t nargsf, PyObject *kwnames)
{
    const binding_params params = {"CPU", id_names, 1, 0};
    PyObject *id;
    if (binding_parse_fast(&params, args, PyVectorcall_NARGS(nargsf), kwnames,
                           &id) < 0)
        return NULL;
    return binding_cpu_from_arg(binding_type_state((PyTypeObject *)type), "CPU",
                                id);
}

static PyObject *accelerator_vectorcall(PyObject *type, PyObject *const *args,
                                        size_t nargsf, PyObject *kwnames)
{
    const binding_params params = {"Accelerator", id_names, 1, 0};
    PyObject *arg;
    int id = -1;
    if (binding_parse_fast(&params, args, PyVectorcall_NARGS(nargsf), kwnames,
                           &arg) < 0 ||
        (arg != NULL && binding_parse_device_id("Accelerator", arg, &id) < 0))
        return NULL;
    binding_state *st = binding_type_state((PyTypeObject *)type);
    /* Virtual device mode names virtual devices, whatever the hardware. */
    if (mxd_virtual_count() > 0)
        return virtual_accelerator(st, id);
    return accelerator_object(st, id == -1 ? 0 : id);
}

/* Device.cpu(id=-1): a static method, so its `self` is the module. */
static PyObject *device_cpu_static(PyObject *module, PyObject *const *args,
                                   Py_ssize_t nargs, PyObject *kwnames)
{
    const binding_params params = {"cpu", id_names, 1, 0};
    PyObject *id;
    if (binding_parse_fast(&params, args, nargs, kwnames, &id) < 0)
        return NULL;
    return binding_cpu_from_arg(PyModule_GetState(module), "cpu", id);
}

static PyMethodDef device_cpu_def = {
    "cpu", (PyCFunction)(void (*)(void))device_cpu_static,
    METH_FASTCALL | METH_KEYWORDS,
    BINDING_DOC("cpu", "(id=-1)",
                "The host device; the same object as CPU(id).")};

/* ---- Lifetime ----------------------------------------------------------- */

static int device_traverse(PyObject *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(((DeviceObject *)self)->default_queue);
    return 0;
}

static int device_clear(PyObject *self)
{
    Py_CLEAR(((DeviceObject *)self)->default_queue);
    return 0;
}

static void device_dealloc(PyObject *self)
{
    PyTypeObject *type = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    device_clear(self);
    type->tp_free(self);
    Py_DECREF(type);
}

/* ---- Properties --------------------------------------------------------- */

static mxd_device *dev_of(PyObject *self)
{
    return ((DeviceObject *)self)->device;
}

static const char *device_label(mxd_device *dev)
{
    return mxd_device_is_host(dev) ? "cpu" : "gpu";
}

static PyObject *device_get_api(PyObject *self, void *closure)
{
    (void)closure;
    return PyUnicode_FromString(mxd_device_api(dev_of(self)));
}

static PyObject *device_get_label(PyObject *self, void *closure)
{
    (void)closure;
    return PyUnicode_FromString(device_label(dev_of(self)));
}

static PyObject *device_get_id(PyObject *self, void *closure)
{
    (void)closure;
    return PyLong_FromLong(mxd_device_id(dev_of(self)));
}

static PyObject *device_get_is_host(PyObject *self, void *closure)
{
    (void)closure;
    return PyBool_FromLong(mxd_device_is_host(dev_of(self)));
}

static PyObject *device_get_is_host_unified(PyObject *self, void *closure)
{
    (void)closure;
    return PyBool_FromLong(mxd_device_is_host_unified(dev_of(self)));
}

static PyObject *device_get_architecture_name(PyObject *self, void *closure)
{
    (void)closure;
    char name[128];
    mxd_error err;
    if (mxd_device_architecture(dev_of(self), name, sizeof name, &err) ==
        MXD_OK)
        return PyUnicode_FromString(name);
    if (err.status == MXD_NO_MEMORY)
        return binding_raise(&err);
    /* The CPU has no architecture name: ValueError, as MAX 26.7 raises.
     * A virtual device without a target architecture is a missing
     * setting: RuntimeError naming the call that sets it. */
    err.status =
        mxd_device_is_host(dev_of(self)) ? MXD_INVALID : MXD_UNAVAILABLE;
    return binding_raise_prefixed("failed to get device architecture name",
                                  &err);
}

static PyObject *device_get_model_name(PyObject *self, void *closure)
{
    (void)closure;
    char name[256];
    mxd_error err;
    if (mxd_device_model_name(dev_of(self), name, sizeof name, &err) != MXD_OK)
        return binding_raise(&err);
    return PyUnicode_FromString(name);
}

static int set_u64_item(PyObject *dict, const char *key, uint64_t value)
{
    PyObject *number = PyLong_FromUnsignedLongLong(value);
    if (number == NULL)
        return -1;
    int rc = PyDict_SetItemString(dict, key, number);
    Py_DECREF(number);
    return rc;
}

static PyObject *device_get_stats(PyObject *self, void *closure)
{
    (void)closure;
    mxd_memory_stats stats;
    mxd_error err;
    if (mxd_device_memory(dev_of(self), &stats, &err) != MXD_OK)
        return binding_raise(&err);
    PyObject *dict = PyDict_New();
    if (dict == NULL)
        return NULL;
    /* MAX's keys on every device: the graph memory counters are 0 where
     * there is no graph memory pool (the CPU), as MAX 26.7 reports. */
    if (!stats.has_graph_memory)
        stats.graph_mem_reserved = stats.graph_mem_used = 0;
    if (set_u64_item(dict, "free_memory", stats.free_memory) < 0 ||
        set_u64_item(dict, "total_memory", stats.total_memory) < 0 ||
        set_u64_item(dict, "graph_mem_reserved", stats.graph_mem_reserved) <
            0 ||
        set_u64_item(dict, "graph_mem_used", stats.graph_mem_used) < 0) {
        Py_DECREF(dict);
        return NULL;
    }
    return dict;
}

static PyObject *device_get_max_single_alloc_size(PyObject *self, void *closure)
{
    (void)closure;
    uint64_t size;
    mxd_error err;
    if (mxd_device_max_alloc(dev_of(self), &size, &err) != MXD_OK)
        return binding_raise(&err);
    return PyLong_FromUnsignedLongLong(size);
}

static PyObject *device_get_is_compatible(PyObject *self, void *closure)
{
    (void)self;
    (void)closure;
    Py_RETURN_TRUE; /* the core only exposes devices it can drive */
}

PyObject *binding_device_default_queue(DeviceObject *self)
{
    if (self->default_queue != NULL &&
        !mxd_queue_is_stale(((QueueObject *)self->default_queue)->queue))
        return self->default_queue;
    /* None yet, or one made before os.fork(): the core has a new one. */
    Py_CLEAR(self->default_queue);
    mxd_error err;
    mxd_queue *queue = mxd_device_default_queue(self->device, &err);
    if (queue == NULL)
        return binding_raise(&err);
    /* The core's default queue is borrowed; the wrapper owns a reference
     * like any other DeviceQueue so that dealloc needs no special case. */
    mxd_queue_retain(queue);
    self->default_queue =
        binding_queue_wrap(binding_state_of((PyObject *)self), queue);
    return self->default_queue;
}

static PyObject *device_get_default_queue(PyObject *self, void *closure)
{
    (void)closure;
    return Py_XNewRef(binding_device_default_queue((DeviceObject *)self));
}

static PyObject *device_get_default_stream(PyObject *self, void *closure)
{
    if (PyErr_WarnEx(PyExc_DeprecationWarning,
                     "Device.default_stream is deprecated; use "
                     "Device.default_queue",
                     1) < 0)
        return NULL;
    return device_get_default_queue(self, closure);
}

static PyGetSetDef device_getset[] = {
    {"api", device_get_api, NULL,
     "The device's API: \"cpu\", \"cuda\" or \"hip\".", NULL},
    {"label", device_get_label, NULL,
     "\"cpu\" for the host, \"gpu\" for accelerators.", NULL},
    {"id", device_get_id, NULL, "The device id (0 for the CPU).", NULL},
    {"is_host", device_get_is_host, NULL, "True only for the CPU.", NULL},
    {"is_host_unified", device_get_is_host_unified, NULL,
     "Whether the device shares physical memory with the host.", NULL},
    {"architecture_name", device_get_architecture_name, NULL,
     "The accelerator architecture, e.g. \"sm_90\" or \"gfx942\"; "
     "ValueError on the CPU.",
     NULL},
    {"model_name", device_get_model_name, NULL,
     "The device's model name (the processor model for the CPU).", NULL},
    {"stats", device_get_stats, NULL,
     "Memory statistics: a dict of ints (free_memory, total_memory, "
     "graph_mem_reserved and graph_mem_used, 0 on the CPU).",
     NULL},
    {"max_single_alloc_size", device_get_max_single_alloc_size, NULL,
     "The largest single allocation in bytes.", NULL},
    {"is_compatible", device_get_is_compatible, NULL,
     "True for every device this module can drive.", NULL},
    {"default_queue", device_get_default_queue, NULL,
     "The device's default DeviceQueue (the same object on every access).",
     NULL},
    {"default_stream", device_get_default_stream, NULL,
     "Deprecated alias of default_queue.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

/* ---- Methods ------------------------------------------------------------ */

static PyObject *device_synchronize(PyObject *self, PyObject *const *args,
                                    Py_ssize_t nargs, PyObject *kwnames)
{
    double timeout;
    if (binding_parse_timeout_only("synchronize", args, nargs, kwnames,
                                   &timeout) < 0)
        return NULL;
    binding_wait w;
    binding_wait_init(&w, timeout);
    mxd_error err;
    mxd_status status = MXD_OK;
    /* Idle: nothing to wait for, and no GIL round trip to pay for it. */
    if (!mxd_device_is_idle(dev_of(self))) {
        binding_wait_release_gil(&w);
        status = mxd_device_synchronize(dev_of(self), &w.wait, &err);
        binding_wait_acquire_gil(&w);
    }
    if (status != MXD_OK)
        return binding_raise(&err);
    Py_RETURN_NONE;
}

static const char *const other_names[] = {"other"};

static PyObject *device_can_access(PyObject *self, PyObject *const *args,
                                   Py_ssize_t nargs, PyObject *kwnames)
{
    const binding_params params = {"can_access", other_names, 1, 1};
    PyObject *other;
    binding_state *st = binding_state_of(self);
    if (binding_parse_fast(&params, args, nargs, kwnames, &other) < 0 ||
        binding_check_type("can_access", "other", other, st->device_type) < 0)
        return NULL;
    bool can;
    mxd_error err;
    if (mxd_device_can_access(dev_of(self), dev_of(other), &can, &err) !=
        MXD_OK)
        return binding_raise(&err);
    return PyBool_FromLong(can);
}

static PyObject *device_enqueue_host_fn(PyObject *self, PyObject *const *args,
                                        Py_ssize_t nargs, PyObject *kwnames)
{
    PyObject *queue = binding_device_default_queue((DeviceObject *)self);
    if (queue == NULL)
        return NULL;
    return binding_enqueue_host_fn("__unsafe_enqueue_py_host_func",
                                   ((QueueObject *)queue)->queue, args, nargs,
                                   kwnames);
}

static PyObject *device_enqueue_async_host_fn(PyObject *self,
                                              PyObject *const *args,
                                              Py_ssize_t nargs,
                                              PyObject *kwnames)
{
    PyObject *queue = binding_device_default_queue((DeviceObject *)self);
    if (queue == NULL)
        return NULL;
    return binding_enqueue_async_host_fn(
        binding_state_of(self), "__unsafe_enqueue_async_py_host_func",
        ((QueueObject *)queue)->queue, args, nargs, kwnames);
}

/* copy and pickle go through CPU(id) / Accelerator(id), which return the
 * cached object, since __new__ refuses to make device objects. */
static PyObject *device_reduce(PyObject *self, PyObject *unused)
{
    (void)unused;
    return Py_BuildValue("(O(i))", (PyObject *)Py_TYPE(self),
                         mxd_device_id(dev_of(self)));
}

static PyObject *device_capabilities(PyObject *self, PyObject *unused)
{
    (void)unused;
    mxd_device_features f;
    mxd_error err;
    if (mxd_device_features_of(dev_of(self), &f, &err) != MXD_OK)
        return binding_raise(&err);
    const char *host_fns =
        !f.host_fn_entry_point && !mxd_device_is_host(dev_of(self))
            ? "unavailable"
        : f.host_fns_on_workers ? "worker threads"
                                : "driver callback thread";
    char capture[128];
    snprintf(capture, sizeof capture, "%s%s%s",
             f.capture ? "available" : "unavailable",
             f.capture_missing ? ": the driver lacks " : "",
             f.capture_missing ? f.capture_missing : "");
    return Py_BuildValue(
        "{s:i,s:O,s:s,s:s,s:O,s:(iL),s:L,s:s}", "driver_version",
        f.driver_version, "stream_memory_operations",
        f.stream_memory_ops ? Py_True : Py_False, "host_function_entry_point",
        f.host_fn_entry_point ? f.host_fn_entry_point : "",
        "python_host_functions_run_on", host_fns, "memory_pools",
        f.memory_pools ? Py_True : Py_False, "staging_ring", f.staging_chunks,
        (long long)f.staging_chunk_bytes, "pinned_reserve_bytes",
        (long long)f.pinned_reserve_bytes, "graph_capture", capture);
}

static PyObject *device_context_ptr(PyObject *self, PyObject *unused)
{
    (void)unused;
    return PyLong_FromVoidPtr(dev_of(self));
}

static PyMethodDef device_methods[] = {
    {"synchronize", (PyCFunction)(void (*)(void))device_synchronize,
     METH_FASTCALL | METH_KEYWORDS,
     BINDING_DOC("synchronize", "($self, /, timeout=None)",
                 "Blocks until all work on every queue of this device is "
                 "done.\n\nThe GIL is released while waiting. timeout: None "
                 "waits forever, else seconds before TimeoutError. "
                 "ValueError if enqueued work hit a driver error.")},
    {"can_access", (PyCFunction)(void (*)(void))device_can_access,
     METH_FASTCALL | METH_KEYWORDS,
     BINDING_DOC("can_access", "($self, /, other)",
                 "Whether this device can access `other`'s memory (peer "
                 "access). False for the CPU and for the device itself.")},
    {"__unsafe_enqueue_py_host_func",
     (PyCFunction)(void (*)(void))device_enqueue_host_fn,
     METH_FASTCALL | METH_KEYWORDS,
     BINDING_DOC("__unsafe_enqueue_py_host_func", "($self, /, fn)",
                 "Enqueues fn() on the default queue; it runs on a worker "
                 "thread holding the GIL. Exceptions go to "
                 "sys.unraisablehook.")},
    {"__unsafe_enqueue_async_py_host_func",
     (PyCFunction)(void (*)(void))device_enqueue_async_host_fn,
     METH_FASTCALL | METH_KEYWORDS,
     BINDING_DOC("__unsafe_enqueue_async_py_host_func",
                 "($self, /, fn, flag, value, cpu)",
                 "Enqueues a kickoff on the default queue that resets flag, "
                 "hands fn to the CPU device's workers and lets the queue go "
                 "on; after fn() returns (or raises) value is signalled "
                 "into flag.")},
    {"_device_context_ptr", device_context_ptr, METH_NOARGS,
     BINDING_DOC("_device_context_ptr", "($self, /)",
                 "The address of the native device object.")},
    {"_capabilities", device_capabilities, METH_NOARGS,
     BINDING_DOC("_capabilities", "($self, /)",
                 "What the device's driver supports, probed when it was "
                 "opened: a dict with driver_version (0 when unknown), "
                 "stream_memory_operations, host_function_entry_point ('' "
                 "when none or on the CPU) and python_host_functions_run_on "
                 "('worker threads', 'driver callback thread' or "
                 "'unavailable'), memory_pools (stream-ordered "
                 "allocation), staging_ring ((chunks, bytes per chunk) of "
                 "pinned memory copies stage through; (0, 0) on the CPU) "
                 "pinned_reserve_bytes (pinned memory reserved for flags "
                 "and small pinned buffers) and graph_capture ('available', "
                 "or 'unavailable: the driver lacks <entry point>').")},
    {"__reduce__", device_reduce, METH_NOARGS,
     BINDING_DOC("__reduce__", "($self, /)",
                 "Copies and pickles refer to the same cached device.")},
    {NULL, NULL, 0, NULL},
};

/* ---- Comparison and text ------------------------------------------------ */

static PyObject *device_richcompare(PyObject *self, PyObject *other, int op)
{
    if ((op != Py_EQ && op != Py_NE) ||
        !PyObject_TypeCheck(other, binding_state_of(self)->device_type))
        Py_RETURN_NOTIMPLEMENTED;
    /* One core object per device: same object means same api and id. */
    int equal = dev_of(self) == dev_of(other);
    return PyBool_FromLong(op == Py_EQ ? equal : !equal);
}

static Py_hash_t device_hash(PyObject *self)
{
    return compat_hash_pointer(dev_of(self));
}

static PyObject *device_repr(PyObject *self)
{
    mxd_device *dev = dev_of(self);
    return PyUnicode_FromFormat("Device(type=%s,id=%d)", device_label(dev),
                                mxd_device_id(dev));
}

/* ---- Types -------------------------------------------------------------- */

static PyType_Slot device_slots[] = {
    {Py_tp_doc, "A device: the host CPU or one accelerator.\n\n"
                "Not constructible: use CPU(), Accelerator(id) or "
                "Device.cpu()."},
    {Py_tp_new, device_tp_new},
    {Py_tp_dealloc, device_dealloc},
    {Py_tp_traverse, device_traverse},
    {Py_tp_clear, device_clear},
    {Py_tp_repr, device_repr},
    {Py_tp_hash, device_hash},
    {Py_tp_richcompare, device_richcompare},
    {Py_tp_methods, device_methods},
    {Py_tp_getset, device_getset},
    {0, NULL},
};

static PyType_Spec device_spec = {
    .name = "max._core.driver.Device",
    .basicsize = sizeof(DeviceObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC |
             Py_TPFLAGS_IMMUTABLETYPE,
    .slots = device_slots,
};

static PyType_Slot cpu_slots[] = {
    {Py_tp_doc, BINDING_DOC("CPU", "(id=-1)",
                            "The host device. Always id 0; CPU() returns one "
                            "cached object.")},
    {0, NULL},
};

/* CPU and Accelerator inherit layout, GC support, behaviour and the
 * refusing tp_new from Device; calling them goes to their vectorcall. */
static PyType_Spec cpu_spec = {
    .name = "max._core.driver.CPU",
    .basicsize = 0,
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = cpu_slots,
};

static PyType_Slot accelerator_slots[] = {
    {Py_tp_doc,
     BINDING_DOC("Accelerator", "(id=-1)",
                 "Accelerator (GPU) `id`; -1 means 0. One cached object per "
                 "id. ValueError when there is no such accelerator. In "
                 "virtual device mode (set_virtual_device_count), a virtual "
                 "device for compilation only.")},
    {0, NULL},
};

static PyType_Spec accelerator_spec = {
    .name = "max._core.driver.Accelerator",
    .basicsize = 0,
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = accelerator_slots,
};

/* Device.cpu is a static method whose `self` is the module (for its
 * state); the type is immutable to users, so it is added to the type's
 * dict directly before anyone can see the type. */
static int add_cpu_staticmethod(PyObject *module, PyTypeObject *type)
{
    PyObject *func = PyCFunction_NewEx(&device_cpu_def, module, NULL);
    if (func == NULL)
        return -1;
    PyObject *method = PyStaticMethod_New(func);
    Py_DECREF(func);
    if (method == NULL)
        return -1;
    int rc = PyDict_SetItemString(type->tp_dict, "cpu", method);
    Py_DECREF(method);
    PyType_Modified(type);
    return rc;
}

int binding_add_device_types(PyObject *module, binding_state *st)
{
    st->device_type = binding_add_type(module, &device_spec, NULL);
    if (st->device_type == NULL ||
        add_cpu_staticmethod(module, st->device_type) < 0)
        return -1;
    st->cpu_type =
        binding_add_type(module, &cpu_spec, (PyObject *)st->device_type);
    st->accelerator_type = st->cpu_type
                               ? binding_add_type(module, &accelerator_spec,
                                                  (PyObject *)st->device_type)
                               : NULL;
    if (st->accelerator_type == NULL)
        return -1;
    /* Set after creation: PyType_Spec has no vectorcall slot before 3.14.
     * The types are immutable, so nothing resets it. */
    st->cpu_type->tp_vectorcall = cpu_vectorcall;
    st->accelerator_type->tp_vectorcall = accelerator_vectorcall;

    st->cpu = device_alloc(st->cpu_type, mxd_cpu());
    st->virtual_devices = PyDict_New();
    if (st->cpu == NULL || st->virtual_devices == NULL)
        return -1;
    int count = mxd_accelerator_count();
    st->accelerator_count = count > 0 ? count : 0;
    if (st->accelerator_count > 0) {
        st->accelerators =
            PyMem_Calloc((size_t)st->accelerator_count, sizeof(PyObject *));
        if (st->accelerators == NULL) {
            PyErr_NoMemory();
            return -1;
        }
    }
    return 0;
}
