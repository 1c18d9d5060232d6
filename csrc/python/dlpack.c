/* DLPack and NumPy (SPEC §13): Buffer.__dlpack__ / __dlpack_device__,
 * Buffer.from_dlpack, from_numpy and to_numpy.
 *
 * DLPack is the only bridge to NumPy (no NumPy C API, no build dependency):
 * an export is a capsule holding a DLManagedTensor(Versioned) that keeps a
 * reference to the buffer's memory until the consumer calls its deleter;
 * an import wraps the producer's tensor as foreign memory whose release
 * calls the producer's deleter once nothing of ours uses it.  The ABI is
 * our own declaration (csrc/core/dlpack.h). */
#include "binding.h"

#include <stdarg.h>
#include <string.h>

#include "dlpack.h"

static BufferObject *as_buffer(PyObject *self)
{
    return (BufferObject *)self;
}

PyObject *binding_import_numpy(const char *what)
{
    PyObject *np = PyImport_ImportModule("numpy");
    if (np == NULL && PyErr_ExceptionMatches(PyExc_ImportError)) {
        PyErr_Clear();
        PyErr_Format(PyExc_ImportError,
                     "%s needs NumPy, which is not installed (pip install "
                     "numpy)",
                     what);
    }
    return np;
}

/* ---- The bridge --------------------------------------------------------- */

int binding_bridge_traverse(binding_bridge *b, visitproc visit, void *arg)
{
    Py_VISIT(b->dlpack_name);
    Py_VISIT(b->kw_versioned);
    Py_VISIT(b->kw_legacy);
    Py_VISIT(b->kw_copy);
    Py_VISIT(b->kw_legacy_copy);
    Py_VISIT(b->max_version);
    Py_VISIT(b->numpy);
    Py_VISIT(b->ndarray);
    Py_VISIT(b->from_dlpack);
    Py_VISIT(b->dtype_name);
    for (int i = 0; i < b->np_dtype_count; i++)
        Py_VISIT(b->np_dtypes[i]);
    return 0;
}

void binding_bridge_clear(binding_bridge *b)
{
    Py_CLEAR(b->dlpack_name);
    Py_CLEAR(b->kw_versioned);
    Py_CLEAR(b->kw_legacy);
    Py_CLEAR(b->kw_copy);
    Py_CLEAR(b->kw_legacy_copy);
    Py_CLEAR(b->max_version);
    Py_CLEAR(b->numpy);
    Py_CLEAR(b->ndarray);
    Py_CLEAR(b->from_dlpack);
    Py_CLEAR(b->dtype_name);
    for (int i = 0; i < b->np_dtype_count; i++)
        Py_CLEAR(b->np_dtypes[i]);
    b->np_dtype_count = 0;
}

static PyObject *interned_tuple(int n, const char *a, const char *b,
                                const char *c)
{
    const char *names[3] = {a, b, c};
    PyObject *tuple = PyTuple_New(n);
    for (int i = 0; tuple != NULL && i < n; i++) {
        PyObject *name = PyUnicode_InternFromString(names[i]);
        if (name == NULL)
            Py_CLEAR(tuple);
        else
            PyTuple_SET_ITEM(tuple, i, name);
    }
    return tuple;
}

/* The names __dlpack__ calls use; NULL with an exception. */
static binding_bridge *bridge_names(binding_state *st)
{
    binding_bridge *b = &st->bridge;
    if (b->dlpack_name != NULL)
        return b;
    b->kw_versioned = interned_tuple(2, "max_version", "stream", NULL);
    b->kw_legacy = interned_tuple(1, "stream", NULL, NULL);
    b->kw_copy = interned_tuple(3, "max_version", "stream", "copy");
    b->kw_legacy_copy = interned_tuple(2, "stream", "copy", NULL);
    b->max_version = Py_BuildValue("(ii)", 1, 0);
    if (b->kw_versioned && b->kw_legacy && b->kw_copy && b->kw_legacy_copy &&
        b->max_version)
        b->dlpack_name = PyUnicode_InternFromString("__dlpack__");
    if (b->dlpack_name == NULL) {
        binding_bridge_clear(b);
        return NULL;
    }
    return b;
}

/* The names, and NumPy's objects (importing NumPy on the first call);
 * NULL with an ImportError naming `what`. */
static binding_bridge *bridge_numpy(binding_state *st, const char *what)
{
    binding_bridge *b = bridge_names(st);
    if (b == NULL || b->numpy != NULL)
        return b;
    PyObject *np = binding_import_numpy(what);
    if (np == NULL)
        return NULL;
    b->ndarray = PyObject_GetAttrString(np, "ndarray");
    b->from_dlpack = PyObject_GetAttrString(np, "from_dlpack");
    b->dtype_name = PyUnicode_InternFromString("dtype");
    if (b->ndarray == NULL || !PyType_Check(b->ndarray) ||
        b->from_dlpack == NULL || b->dtype_name == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ImportError,
                            "numpy.ndarray is not a type: is this NumPy?");
        Py_CLEAR(b->ndarray);
        Py_CLEAR(b->from_dlpack);
        Py_CLEAR(b->dtype_name);
        Py_DECREF(np);
        return NULL;
    }
    b->numpy = np;
    return b;
}

/* ---- Export ------------------------------------------------------------- */

static const char VERSIONED[] = "dltensor_versioned";
static const char USED_VERSIONED[] = "used_dltensor_versioned";
static const char LEGACY[] = "dltensor";
static const char USED_LEGACY[] = "used_dltensor";

typedef struct dlpack_request {
    int minor; /* of the DLPack 1.x capsule to export; -1: legacy */
    enum {
        ORDER_ON_HOST,    /* stream=None: the host waits for the queue */
        ORDER_NONE,       /* stream=-1: the consumer orders its own work */
        ORDER_ON_CONSUMER /* a stream: it waits for the queue, the host not */
    } order;
    long long stream; /* the consumer's stream, with ORDER_ON_CONSUMER */
    bool to_host;     /* dl_device=(kDLCPU, 0) asked of a device buffer */
    int copy;         /* -1: None, 0: False, 1: True */
} dlpack_request;

/* One allocation per export: the managed tensor, its shape and strides,
 * the memory reference the deleter gives back, and the consumer's stream
 * when it named one. */
typedef struct export_block {
    union {
        mxd_dl_managed legacy;
        mxd_dl_managed_versioned versioned;
    } tensor;
    mxd_memory *memory;
    bool has_consumer;
    uintptr_t consumer;
    int64_t dims[];
} export_block;

/* Deleters: called exactly once, by the consumer, on any thread, with or
 * without the GIL.  They only touch the core (foreign memory is given back
 * through the host runner, which takes the GIL safely).  The consumer's
 * kernels on its stream may still read the memory: it is freed after the
 * work enqueued there so far (SPEC 12.7).  When that cannot be arranged (a
 * driver error, or a deleter run on the driver's callback thread) it is
 * freed in our order only, as for a consumer that named no stream. */
static void release_export(export_block *block)
{
    mxd_error ignored;
    if (block->has_consumer)
        mxd_memory_consumer_done(block->memory, block->consumer, &ignored);
    mxd_memory_release(block->memory);
    PyMem_RawFree(block);
}

static void delete_legacy(mxd_dl_managed *self)
{
    release_export(self->manager_ctx);
}

static void delete_versioned(mxd_dl_managed_versioned *self)
{
    release_export(self->manager_ctx);
}

/* A capsule nobody consumed frees its tensor.  It still has the name we
 * gave it, the same pointer (a consumer renames it "used_..."), so no
 * string is compared. */
static void capsule_destructor(PyObject *capsule)
{
    const char *name = PyCapsule_GetName(capsule);
    if (name == VERSIONED) {
        mxd_dl_managed_versioned *t = PyCapsule_GetPointer(capsule, VERSIONED);
        if (t->deleter)
            t->deleter(t);
    } else if (name == LEGACY) {
        mxd_dl_managed *t = PyCapsule_GetPointer(capsule, LEGACY);
        if (t->deleter)
            t->deleter(t);
    }
}

typedef struct dl_target {
    int32_t device_type;
    int32_t device_id;
} dl_target;

/* Where the memory is, as DLPack names it (SPEC §13). */
static dl_target dl_device_of(BufferObject *b)
{
    mxd_device *dev = mxd_memory_device(b->memory);
    if (mxd_device_is_host(dev))
        return (dl_target){MXD_DL_CPU, 0};
    bool cuda = strcmp(mxd_device_api(dev), "cuda") == 0;
    if (mxd_memory_is_pinned(b->memory))
        return (dl_target){cuda ? MXD_DL_CUDA_HOST : MXD_DL_ROCM_HOST, 0};
    return (dl_target){cuda ? MXD_DL_CUDA : MXD_DL_ROCM, mxd_device_id(dev)};
}

/* The address DLPack consumers read: pinned memory's host address (as
 * kDLCUDAHost / kDLROCMHost require), device memory's device address. */
static void *dl_data(BufferObject *b)
{
    char *host = mxd_memory_host(b->memory);
    if (host != NULL)
        return host + b->offset;
    return (void *)(mxd_memory_device_ptr(b->memory) + (uintptr_t)b->offset);
}

static void fill_tensor(mxd_dl_tensor *t, BufferObject *b,
                        const mxd_dtype_info *as, int64_t *dims)
{
    int rank = buffer_rank(b);
    dl_target where = dl_device_of(b);
    t->data = dl_data(b);
    t->device = (mxd_dl_device){where.device_type, where.device_id};
    t->ndim = rank;
    t->dtype = (mxd_dl_dtype){as->dlpack_code, (uint8_t)as->dlpack_bits, 1};
    t->shape = dims;
    t->strides = dims + rank;
    t->byte_offset = 0;
    memcpy(dims, buffer_shape(b), (size_t)rank * sizeof *dims);
    memcpy(dims + rank, buffer_strides(b), (size_t)rank * sizeof *dims);
}

/* A capsule over b's elements, described as dtype `as` (the buffer's own,
 * or one of the same size for NumPy): DLPack 1.`minor`, or the legacy
 * capsule for a negative `minor`; r (NULL: none) the request, whose
 * consumer stream the memory's free waits for. */
static PyObject *export_capsule(BufferObject *b, const mxd_dtype_info *as,
                                int minor, uint64_t flags,
                                const dlpack_request *r)
{
    bool versioned = minor >= 0;
    int rank = buffer_rank(b);
    export_block *block =
        PyMem_RawMalloc(sizeof *block + 2 * (size_t)rank * sizeof(int64_t));
    if (block == NULL)
        return PyErr_NoMemory();
    memset(&block->tensor, 0, sizeof block->tensor);
    block->has_consumer = r && r->order == ORDER_ON_CONSUMER;
    block->consumer = block->has_consumer ? (uintptr_t)r->stream : 0;
    block->memory = b->memory;
    mxd_memory_retain(b->memory);
    void *payload;
    if (versioned) {
        mxd_dl_managed_versioned *t = &block->tensor.versioned;
        t->version = (mxd_dl_version){MXD_DLPACK_MAJOR, (uint32_t)minor};
        t->manager_ctx = block;
        t->deleter = delete_versioned;
        t->flags =
            flags |
            (as->subbyte_padded ? MXD_DL_FLAG_IS_SUBBYTE_TYPE_PADDED : 0);
        fill_tensor(&t->dl_tensor, b, as, block->dims);
        payload = t;
    } else {
        mxd_dl_managed *t = &block->tensor.legacy;
        t->manager_ctx = block;
        t->deleter = delete_legacy;
        fill_tensor(&t->dl_tensor, b, as, block->dims);
        payload = t;
    }
    PyObject *capsule = PyCapsule_New(payload, versioned ? VERSIONED : LEGACY,
                                      capsule_destructor);
    if (capsule == NULL) {
        mxd_memory_release(b->memory);
        PyMem_RawFree(block);
    }
    return capsule;
}

/* ---- Buffer.__dlpack__ -------------------------------------------------- */

static int buffer_error(const char *fmt, ...)
{
    va_list args;
    va_start(args, fmt);
    PyErr_FormatV(PyExc_BufferError, fmt, args);
    va_end(args);
    return -1;
}

/* *minor: the DLPack 1.x minor version to export, no newer than the
 * consumer's max_version and ours; -1 for the legacy capsule. */
static int parse_max_version(PyObject *obj, int *minor)
{
    *minor = -1;
    if (obj == NULL || obj == Py_None)
        return 0;
    if (!PyTuple_Check(obj) || PyTuple_GET_SIZE(obj) != 2) {
        PyErr_Format(PyExc_TypeError,
                     "__dlpack__(): max_version must be a (major, minor) "
                     "tuple, not %R",
                     obj);
        return -1;
    }
    long major = PyLong_AsLong(PyTuple_GET_ITEM(obj, 0));
    if (major == -1 && PyErr_Occurred())
        return -1;
    long asked = PyLong_AsLong(PyTuple_GET_ITEM(obj, 1));
    if (asked == -1 && PyErr_Occurred())
        return -1;
    if (major > MXD_DLPACK_MAJOR)
        *minor = MXD_DLPACK_MINOR;
    else if (major == MXD_DLPACK_MAJOR)
        *minor = asked < 0                  ? 0
                 : asked > MXD_DLPACK_MINOR ? MXD_DLPACK_MINOR
                                            : (int)asked;
    return 0;
}

static int parse_dl_device(BufferObject *b, PyObject *obj, bool *to_host)
{
    *to_host = false;
    if (obj == NULL || obj == Py_None)
        return 0;
    long type, id;
    if (!PyTuple_Check(obj) || PyTuple_GET_SIZE(obj) != 2 ||
        ((type = PyLong_AsLong(PyTuple_GET_ITEM(obj, 0))) == -1 &&
         PyErr_Occurred()) ||
        ((id = PyLong_AsLong(PyTuple_GET_ITEM(obj, 1))) == -1 &&
         PyErr_Occurred())) {
        if (!PyErr_Occurred() || PyErr_ExceptionMatches(PyExc_TypeError)) {
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError,
                         "__dlpack__(): dl_device must be a (device_type, "
                         "device_id) tuple of ints, not %R",
                         obj);
        }
        return -1;
    }
    dl_target own = dl_device_of(b);
    if (type == own.device_type && id == own.device_id)
        return 0;
    if (type == MXD_DL_CPU && id == 0) {
        *to_host = true; /* a copy, unless the memory is host memory */
        return 0;
    }
    return buffer_error("__dlpack__(): cannot export to device (%ld, %ld): "
                        "the buffer is on (%d, %d), and only a copy to the "
                        "CPU, (1, 0), is possible",
                        type, id, own.device_type, own.device_id);
}

static int parse_copy(PyObject *obj, int *copy)
{
    *copy = -1;
    if (obj == NULL || obj == Py_None)
        return 0;
    int truth = PyObject_IsTrue(obj);
    if (truth < 0)
        return -1;
    *copy = truth;
    return 0;
}

/* SPEC §13, the array API's stream argument: None, -1, and per API the
 * values that name a consumer stream. */
static int parse_stream(BufferObject *b, PyObject *obj, dlpack_request *r)
{
    r->order = ORDER_ON_HOST;
    if (obj == NULL || obj == Py_None)
        return 0;
    if (!PyLong_Check(obj) || PyBool_Check(obj)) {
        PyErr_Format(PyExc_TypeError,
                     "__dlpack__(): stream must be None or an int, not "
                     "%.100s",
                     Py_TYPE(obj)->tp_name);
        return -1;
    }
    int overflow;
    long long value = PyLong_AsLongLongAndOverflow(obj, &overflow);
    if (value == -1 && PyErr_Occurred())
        return -1;
    mxd_device *dev = mxd_memory_device(b->memory);
    const char *api = mxd_device_api(dev);
    if (!overflow && value == -1) {
        r->order = ORDER_NONE;
        return 0;
    }
    if (mxd_device_is_host(dev))
        return buffer_error("__dlpack__(): a CPU buffer takes stream=None or "
                            "-1, not %R",
                            obj);
    bool cuda = strcmp(api, "cuda") == 0;
    bool bad = overflow || value < -1 ||
               (cuda ? value == 0 : value == 1 || value == 2);
    if (bad)
        return buffer_error("__dlpack__(): %R is not a stream on %s (use "
                            "None, -1, %s or a stream handle)",
                            obj, api, cuda ? "1, 2" : "0");
    r->order = ORDER_ON_CONSUMER;
    r->stream = value;
    return 0;
}

static const char *const dlpack_names[] = {"stream", "max_version", "dl_device",
                                           "copy"};

static int parse_dlpack(BufferObject *b, PyObject *const *args,
                        Py_ssize_t nargs, PyObject *kwnames, dlpack_request *r)
{
    if (nargs != 0) {
        PyErr_SetString(PyExc_TypeError,
                        "__dlpack__() takes keyword arguments only");
        return -1;
    }
    const binding_params params = {"__dlpack__", dlpack_names, 4, 0};
    PyObject *argv[4];
    if (binding_parse_fast(&params, args, 0, kwnames, argv) < 0 ||
        parse_max_version(argv[1], &r->minor) < 0 ||
        parse_dl_device(b, argv[2], &r->to_host) < 0 ||
        parse_copy(argv[3], &r->copy) < 0 || parse_stream(b, argv[0], r) < 0)
        return -1;
    return 0;
}

/* Orders the consumer's work after the storage's last write (SPEC §13):
 * its stream waits for an event (no host block), or with stream=None the
 * host waits as a host read does (for nothing on untracked memory);
 * stream=-1 orders nothing. */
static int order_consumer(BufferObject *b, const dlpack_request *r)
{
    if (r->order == ORDER_NONE)
        return 0;
    if (r->order == ORDER_ON_CONSUMER) {
        mxd_queue *q = binding_buffer_queue(b);
        mxd_view view = binding_buffer_view(b);
        mxd_error err;
        mxd_status status;
        BINDING_ENQUEUE(
            q, status = mxd_order_native(&view, (uintptr_t)r->stream, &err));
        if (status != MXD_OK) {
            binding_raise(&err);
            return -1;
        }
        return 0;
    }
    return binding_buffer_host_wait(b);
}

/* The dtype a consumer sees: the float8/6/4 type codes and the sub-byte
 * padding flag are DLPack 1.1's.  A versioned capsule carries them for any
 * consumer of DLPack 1.x, stamped 1.1 (as PyTorch exports them to a
 * consumer asking for (1, 0), stamping its own version: the array API
 * lets a producer answer with another version, which the consumer
 * checks); the legacy capsule has no flags and predates the codes. */
static int exportable_minor(const mxd_dtype_info *info, int *minor)
{
    if (info->dlpack_code <= MXD_DL_BOOL)
        return 0;
    if (*minor >= 0) {
        *minor = *minor > 1 ? *minor : 1;
        return 0;
    }
    return buffer_error("__dlpack__(): %s has no type code in the legacy "
                        "DLPack capsule; ask for a versioned one "
                        "(max_version=(1, 0) or later)",
                        info->name);
}

PyObject *binding_buffer_dlpack(PyObject *self, PyObject *const *args,
                                Py_ssize_t nargs, PyObject *kwnames)
{
    BufferObject *b = as_buffer(self);
    dlpack_request r;
    if (parse_dlpack(b, args, nargs, kwnames, &r) < 0)
        return NULL;
    bool host_memory = mxd_memory_host(b->memory) != NULL;
    bool need_copy = r.copy == 1 || (r.to_host && !host_memory);
    if (need_copy && r.copy == 0)
        return PyErr_Format(PyExc_BufferError,
                            "__dlpack__(): a device buffer can reach the CPU "
                            "only as a copy, and copy=False forbids one"),
               NULL;
    if (exportable_minor(buffer_dtype(b), &r.minor) < 0)
        return NULL;
    if (need_copy) {
        /* As the array API: on the device __dlpack_device__ names unless
         * dl_device asks for the CPU; host memory (pinned included) is
         * copied into CPU memory, which every consumer of it can read.  A
         * copy into CPU memory is complete on return; one on the device is
         * ordered for the consumer as the buffer itself would be. */
        bool on_host = r.to_host || host_memory;
        PyObject *copy = on_host ? binding_buffer_host_copy(self)
                                 : binding_buffer_copy_to(self, b->stream);
        if (copy == NULL)
            return NULL;
        if (!on_host && order_consumer(as_buffer(copy), &r) < 0) {
            Py_DECREF(copy);
            return NULL;
        }
        PyObject *capsule = export_capsule(as_buffer(copy), buffer_dtype(b),
                                           r.minor, MXD_DL_FLAG_IS_COPIED, &r);
        Py_DECREF(copy);
        return capsule;
    }
    if (order_consumer(b, &r) < 0)
        return NULL;
    PyObject *capsule = export_capsule(b, buffer_dtype(b), r.minor, 0, &r);
    if (capsule != NULL && r.to_host) {
        /* Pinned memory, asked for as CPU memory: the same host bytes. */
        bool versioned = r.minor >= 0;
        void *payload =
            PyCapsule_GetPointer(capsule, versioned ? VERSIONED : LEGACY);
        mxd_dl_tensor *t =
            versioned ? &((mxd_dl_managed_versioned *)payload)->dl_tensor
                      : &((mxd_dl_managed *)payload)->dl_tensor;
        t->device = (mxd_dl_device){MXD_DL_CPU, 0};
    }
    return capsule;
}

PyObject *binding_buffer_dlpack_device(PyObject *self, PyObject *unused)
{
    (void)unused;
    dl_target where = dl_device_of(as_buffer(self));
    return Py_BuildValue("(ii)", where.device_type, where.device_id);
}

/* ---- Import ------------------------------------------------------------- */

/* The producer's managed tensor, ours once its capsule is renamed
 * "used_...": given back through its deleter, inside the host runner. */
static void release_versioned(void *data)
{
    mxd_dl_managed_versioned *t = data;
    if (t->deleter)
        t->deleter(t);
}

static void release_legacy(void *data)
{
    mxd_dl_managed *t = data;
    if (t->deleter)
        t->deleter(t);
}

static void leak_imported(void *data)
{
    /* Interpreter exit: the producer's deleter may need a runtime that is
     * going away; leaking is what the DLPack spec allows then. */
    (void)data;
}

typedef struct import_spec {
    PyObject *stream; /* the queue the buffer is bound to (borrowed) */
    /* The producer was asked to order its work before the stream's (the
     * capsule was asked for with stream's native handle). */
    bool ordered_before_stream;
    int dtype_index;            /* -1: the capsule's dtype */
    int copy;                   /* -1 None, 0 False, 1 True */
    const char *not_contiguous; /* the ValueError for strided input */
    /* When not NULL, strided input sets it and returns NULL without an
     * exception (the capsule is left unconsumed): the caller copies. */
    bool *strided;
} import_spec;

/* The capsule's tensor, whether it is versioned, and the managed tensor
 * that holds it; NULL with an exception when it is not an unconsumed
 * DLPack capsule. */
static mxd_dl_tensor *capsule_tensor(PyObject *capsule, bool *versioned,
                                     uint64_t *flags, void **managed)
{
    *flags = 0;
    const char *name =
        PyCapsule_CheckExact(capsule) ? PyCapsule_GetName(capsule) : NULL;
    if (name != NULL && strcmp(name, VERSIONED) == 0) {
        mxd_dl_managed_versioned *t = PyCapsule_GetPointer(capsule, name);
        if (t == NULL)
            return NULL;
        if (t->version.major != MXD_DLPACK_MAJOR) {
            buffer_error("from_dlpack(): DLPack %u.%u is not supported "
                         "(this module reads %d.x)",
                         t->version.major, t->version.minor, MXD_DLPACK_MAJOR);
            return NULL;
        }
        *versioned = true;
        *flags = t->flags;
        *managed = t;
        return &t->dl_tensor;
    }
    if (name != NULL && strcmp(name, LEGACY) == 0) {
        mxd_dl_managed *t = PyCapsule_GetPointer(capsule, name);
        if (t == NULL)
            return NULL;
        *versioned = false;
        *managed = t;
        return &t->dl_tensor;
    }
    PyErr_Clear(); /* a capsule without a name */
    buffer_error("from_dlpack(): __dlpack__() returned %s, not an unconsumed "
                 "DLPack capsule",
                 PyCapsule_CheckExact(capsule) ? "a used capsule"
                                               : Py_TYPE(capsule)->tp_name);
    return NULL;
}

/* The tensor's dtype as an index into mxd_dtype_at(), or -1. */
static int tensor_dtype(const mxd_dl_tensor *t, int override)
{
    if (t->dtype.lanes != 1) {
        buffer_error("from_dlpack(): vector types (lanes=%u) are not "
                     "supported",
                     t->dtype.lanes);
        return -1;
    }
    if (override >= 0) {
        const mxd_dtype_info *as = mxd_dtype_at((size_t) override);
        if (as->size_in_bits != t->dtype.bits &&
            as->size_in_bytes * 8 != t->dtype.bits) {
            buffer_error("from_dlpack(): %u-bit elements cannot hold %s",
                         t->dtype.bits, as->name);
            return -1;
        }
        return override;
    }
    const mxd_dtype_info *info =
        mxd_dtype_from_dlpack(t->dtype.code, t->dtype.bits);
    for (int i = 0; info && i < MXD_DTYPE_MEMBERS; i++)
        if (mxd_dtype_at((size_t)i) == info)
            return i;
    buffer_error("from_dlpack(): DLPack type (code %u, %u bits) has no "
                 "max.dtype.DType",
                 t->dtype.code, t->dtype.bits);
    return -1;
}

/* The view of the tensor: shape and element strides into `layout`, and
 * the byte range it touches relative to its first element. */
static int tensor_layout(const mxd_dl_tensor *t, int64_t element_size,
                         mxd_layout *layout, int64_t *lo, int64_t *hi)
{
    if (t->ndim < 0 || t->ndim > MXD_MAX_RANK) {
        buffer_error("from_dlpack(): %d dimensions are not supported", t->ndim);
        return -1;
    }
    layout->rank = t->ndim;
    layout->element_size = element_size;
    layout->offset = 0;
    /* A 0-d tensor's shape and strides may be NULL. */
    if (t->ndim > 0)
        memcpy(layout->shape, t->shape, (size_t)t->ndim * sizeof(int64_t));
    if (t->ndim > 0 && t->strides)
        memcpy(layout->strides, t->strides, (size_t)t->ndim * sizeof(int64_t));
    else
        mxd_contiguous_strides(t->ndim, layout->shape, layout->strides);
    /* A dimension of size 1 is never stepped along, so its stride is free
     * (NumPy gives a reversed one a negative stride): it takes the packed
     * one, so that the import is contiguous when NumPy (and MAX 26.7) call
     * the array C-contiguous. */
    int64_t packed[MXD_MAX_RANK];
    mxd_contiguous_strides(t->ndim, layout->shape, packed);
    for (int i = 0; i < t->ndim; i++)
        if (layout->shape[i] == 1)
            layout->strides[i] = packed[i];
    mxd_error err;
    if (mxd_shape_size(t->ndim, layout->shape, element_size, NULL, NULL,
                       &err) != MXD_OK) {
        binding_raise(&err);
        return -1;
    }
    int64_t bytes[MXD_MAX_RANK];
    mxd_byte_strides(layout, bytes);
    if (!mxd_byte_extent(t->ndim, layout->shape, bytes, 0, element_size, lo,
                         hi)) {
        buffer_error("from_dlpack(): the tensor's strides address more than "
                     "64 bits");
        return -1;
    }
    return 0;
}

static PyObject *wrap_tensor(binding_state *st, PyObject *capsule,
                             void *managed, mxd_dl_tensor *t, bool versioned,
                             uint64_t flags, const import_spec *spec,
                             int dtype_index, mxd_layout *layout, int64_t lo,
                             int64_t hi)
{
    char *first = (char *)t->data + t->byte_offset;
    mxd_device *dev = binding_stream_device(spec->stream);
    bool host = t->device.device_type != MXD_DL_CUDA &&
                t->device.device_type != MXD_DL_ROCM;
    mxd_foreign foreign = {
        .host = host ? first + lo : NULL,
        .device_ptr = host ? 0 : (uintptr_t)(first + lo),
        .size = hi - lo,
        .pinned = host && !mxd_device_is_host(dev),
        .readonly = (flags & MXD_DL_FLAG_READ_ONLY) != 0,
        .written_before_queue = spec->ordered_before_stream,
        .release = {versioned ? release_versioned : release_legacy,
                    leak_imported, managed},
    };
    mxd_queue *q = ((QueueObject *)spec->stream)->queue;
    mxd_memory *memory;
    mxd_error err;
    mxd_status status;
    BINDING_ENQUEUE(q, status = mxd_memory_wrap(q, &foreign, &memory, &err));
    if (status != MXD_OK)
        return binding_raise(&err);
    /* Ours now: the capsule must not call the deleter any more. */
    PyCapsule_SetName(capsule, versioned ? USED_VERSIONED : USED_LEGACY);
    layout->offset = -lo;
    layout->memory_size = hi - lo;
    return binding_buffer_new(st->buffer_type, memory, spec->stream,
                              dtype_index, BUFFER_USAGE_DEFAULT, layout);
}

/* The export block behind a capsule this module made (its deleter is
 * ours), or NULL. */
static export_block *own_export(void *managed, bool versioned)
{
    if (versioned) {
        mxd_dl_managed_versioned *t = managed;
        return t->deleter == delete_versioned ? t->manager_ctx : NULL;
    }
    mxd_dl_managed *t = managed;
    return t->deleter == delete_legacy ? t->manager_ctx : NULL;
}

/* A Buffer over the storage of one of our own exports (consuming the
 * capsule), sharing the exporter's record (SPEC §13), so that the two
 * buffers order their work on each other; bound to the default queue of
 * the storage's device.  NULL without an exception when the tensor does
 * not lie inside that storage (a producer rewrote it): imported then as
 * foreign memory. */
static PyObject *share_export(binding_state *st, PyObject *capsule,
                              export_block *block, const mxd_dl_tensor *t,
                              bool versioned, int dtype_index,
                              mxd_layout *layout, int64_t lo, int64_t hi)
{
    mxd_memory *memory = block->memory;
    char *host = mxd_memory_host(memory);
    uintptr_t base = host ? (uintptr_t)host : mxd_memory_device_ptr(memory);
    uintptr_t first = (uintptr_t)t->data + t->byte_offset;
    int64_t size = mxd_memory_size(memory);
    int64_t offset = (int64_t)(first - base);
    if (first < base || offset + lo < 0 || offset + hi > size)
        return NULL;
    PyObject *device = binding_device_object(st, mxd_memory_device(memory));
    PyObject *stream =
        device ? binding_device_default_queue((DeviceObject *)device) : NULL;
    Py_XDECREF(device); /* cached by the module: stream stays valid */
    if (stream == NULL)
        return NULL;
    layout->offset = offset;
    layout->memory_size = size;
    int usage = (mxd_memory_is_pinned(memory) ? BUFFER_USAGE_STAGING : 0) |
                (mxd_memory_is_tracked(memory) ? 0 : BUFFER_USAGE_UNTRACKED);
    mxd_memory_retain(memory);
    PyObject *b = binding_buffer_new(st->buffer_type, memory, stream,
                                     dtype_index, usage, layout);
    if (b == NULL)
        return NULL;
    /* Consumed: the deleter gives the export's reference back now (the new
     * buffer holds its own); no consumer fence, the record orders us. */
    PyCapsule_SetName(capsule, versioned ? USED_VERSIONED : USED_LEGACY);
    block->has_consumer = false;
    release_export(block);
    return b;
}

/* A Buffer over the capsule's tensor (consuming it), or a copy of it when
 * it is read-only and a copy is allowed. */
static PyObject *import_capsule(binding_state *st, PyObject *capsule,
                                const import_spec *spec)
{
    bool versioned;
    uint64_t flags;
    void *managed;
    mxd_dl_tensor *t = capsule_tensor(capsule, &versioned, &flags, &managed);
    if (t == NULL)
        return NULL;
    int dtype_index = tensor_dtype(t, spec->dtype_index);
    if (dtype_index < 0)
        return NULL;
    int64_t shape[MXD_MAX_RANK], strides[MXD_MAX_RANK], lo, hi;
    mxd_layout layout = {0, shape, strides, 0, 0, 0};
    if (tensor_layout(t, mxd_dtype_at((size_t)dtype_index)->size_in_bytes,
                      &layout, &lo, &hi) < 0)
        return NULL;
    if (!mxd_layout_is_contiguous(&layout)) {
        if (spec->strided != NULL)
            *spec->strided = true;
        else
            PyErr_SetString(PyExc_ValueError, spec->not_contiguous);
        return NULL;
    }
    bool readonly = (flags & MXD_DL_FLAG_READ_ONLY) != 0;
    if (readonly && spec->copy == 0) { /* BufferError: the array API's */
        PyErr_SetString(PyExc_BufferError,
                        "from_dlpack(): the tensor is read-only and "
                        "copy=False forbids a copy");
        return NULL;
    }
    export_block *own = own_export(managed, versioned);
    PyObject *b = own ? share_export(st, capsule, own, t, versioned,
                                     dtype_index, &layout, lo, hi)
                      : NULL;
    if (b == NULL && !PyErr_Occurred())
        b = wrap_tensor(st, capsule, managed, t, versioned, flags, spec,
                        dtype_index, &layout, lo, hi);
    if (b == NULL || !(readonly || spec->copy == 1))
        return b;
    PyObject *copy = binding_buffer_copy_to(b, spec->stream);
    Py_DECREF(b);
    return copy;
}

/* ---- Buffer.from_dlpack ------------------------------------------------- */

static bool is_numpy_array(binding_state *st, PyObject *obj)
{
    if (st->bridge.ndarray != NULL)
        return PyObject_TypeCheck(obj, (PyTypeObject *)st->bridge.ndarray);
    /* NumPy not looked up yet: is it an ndarray (or a subclass)? */
    for (PyTypeObject *t = Py_TYPE(obj); t != NULL; t = t->tp_base)
        if (strcmp(t->tp_name, "numpy.ndarray") == 0)
            return true;
    return false;
}

/* The queue a buffer over memory on DLPack device (type, id) is bound to:
 * the default queue of the device this process drives there. */
static PyObject *import_target(binding_state *st, long type, long id)
{
    const char *api = mxd_accelerator_api();
    bool cuda = api && strcmp(api, "cuda") == 0;
    bool hip = api && strcmp(api, "hip") == 0;
    long device = -1;
    if (type == MXD_DL_CPU)
        return binding_device_default_queue((DeviceObject *)st->cpu);
    if ((cuda && type == MXD_DL_CUDA) || (hip && type == MXD_DL_ROCM))
        device = id;
    else if ((cuda && type == MXD_DL_CUDA_HOST) ||
             (hip && type == MXD_DL_ROCM_HOST))
        device = 0; /* host memory mapped into the accelerators */
    if (device < 0 || device >= mxd_accelerator_count()) {
        buffer_error("from_dlpack(): DLPack device (%ld, %ld) is not one "
                     "this process drives (backend: %s, %d accelerator%s)",
                     type, id, api ? api : "cpu", mxd_accelerator_count(),
                     mxd_accelerator_count() == 1 ? "" : "s");
        return NULL;
    }
    mxd_device *dev;
    mxd_error err;
    if (mxd_accelerator((int)device, &dev, &err) != MXD_OK)
        return binding_raise(&err);
    PyObject *obj = binding_device_object(st, dev);
    PyObject *q =
        obj ? binding_device_default_queue((DeviceObject *)obj) : NULL;
    Py_XDECREF(obj); /* cached by the module: q stays valid */
    return q;
}

static int parse_device_tuple(PyObject *obj, long *type, long *id)
{
    PyObject *dev = PyObject_CallMethod(obj, "__dlpack_device__", NULL);
    if (dev == NULL)
        return -1;
    int ok = PyTuple_Check(dev) && PyTuple_GET_SIZE(dev) == 2;
    if (ok) {
        *type = PyLong_AsLong(PyTuple_GET_ITEM(dev, 0));
        *id = PyLong_AsLong(PyTuple_GET_ITEM(dev, 1));
        ok = !PyErr_Occurred();
    }
    Py_DECREF(dev);
    if (!ok) {
        PyErr_Clear();
        return buffer_error("from_dlpack(): __dlpack_device__() must return "
                            "a (device_type, device_id) tuple of ints");
    }
    return 0;
}

/* obj.__dlpack__(max_version=(1, 0), stream=stream[, copy=...]), falling
 * back to a call without max_version for producers that predate it. */
static PyObject *ask_capsule(binding_bridge *b, PyObject *obj, PyObject *stream,
                             int copy)
{
    PyObject *flag = copy > 0 ? Py_True : Py_False;
    PyObject *args[] = {obj, b->max_version, stream, flag};
    PyObject *capsule = PyObject_VectorcallMethod(
        b->dlpack_name, args, 1, copy >= 0 ? b->kw_copy : b->kw_versioned);
    if (capsule == NULL && PyErr_ExceptionMatches(PyExc_TypeError)) {
        PyErr_Clear();
        PyObject *legacy[] = {obj, stream, flag};
        capsule = PyObject_VectorcallMethod(b->dlpack_name, legacy, 1,
                                            copy >= 0 ? b->kw_legacy_copy
                                                      : b->kw_legacy);
    }
    return capsule;
}

/* MAX's texts, which MAX code may match on: its NumPy one, its PyTorch
 * one (for producers with an is_contiguous() method, as MAX tells them
 * apart), and the same opening for every other producer. */
static const char not_contiguous_numpy[] =
    "driver buffer's from_dlpack only accepts contiguous arrays. First call "
    "np.ascontiguousarray(array)";
static const char not_contiguous_torch[] =
    "driver buffer's from_dlpack only accepts contiguous tensors. First call "
    ".contiguous() on the tensor";
static const char not_contiguous_other[] =
    "driver buffer's from_dlpack only accepts contiguous tensors. First make "
    "a contiguous copy of it";

static const char *not_contiguous_text(PyObject *obj, bool numpy)
{
    if (numpy)
        return not_contiguous_numpy;
    PyObject *method = PyObject_GetAttrString(obj, "is_contiguous");
    bool torch = method != NULL && PyCallable_Check(method);
    Py_XDECREF(method);
    PyErr_Clear();
    return torch ? not_contiguous_torch : not_contiguous_other;
}

/* from_dlpack(array, *, copy=None), as MAX names them. */
static const char *const from_dlpack_names[] = {"array", "copy"};

PyObject *binding_from_dlpack(PyObject *cls, PyObject *const *args,
                              Py_ssize_t nargs, PyObject *kwnames)
{
    binding_state *st = binding_type_state((PyTypeObject *)cls);
    if (nargs > 1) {
        PyErr_Format(PyExc_TypeError,
                     "from_dlpack() takes 1 positional argument but %zd were "
                     "given (copy is keyword-only)",
                     nargs);
        return NULL;
    }
    const binding_params params = {"from_dlpack", from_dlpack_names, 2, 1};
    PyObject *argv[2];
    if (binding_parse_fast(&params, args, nargs, kwnames, argv) < 0)
        return NULL;
    PyObject *obj = argv[0];
    int copy;
    if (parse_copy(argv[1], &copy) < 0)
        return NULL;
    if (PyObject_TypeCheck(obj, st->buffer_type))
        return copy == 1 ? binding_buffer_copy_to(obj, as_buffer(obj)->stream)
                         : Py_NewRef(obj);
    binding_bridge *bridge = bridge_names(st);
    if (bridge == NULL)
        return NULL;
    bool numpy = is_numpy_array(st, obj);
    if (copy >= 0 && !numpy) {
        PyErr_SetString(PyExc_ValueError,
                        "`Buffer.from_dlpack` supports the `copy` flag only "
                        "for numpy array and `Buffer` inputs");
        return NULL;
    }
    if (!PyObject_HasAttr(obj, bridge->dlpack_name)) {
        PyErr_Format(PyExc_TypeError,
                     "from_dlpack(): expected a Buffer or an object with "
                     "__dlpack__ and __dlpack_device__, not %.100s",
                     Py_TYPE(obj)->tp_name);
        return NULL;
    }
    long type = 0, id = 0;
    if (parse_device_tuple(obj, &type, &id) < 0)
        return NULL;
    PyObject *target = import_target(st, type, id);
    if (target == NULL)
        return NULL;
    /* A consumer stream only for device memory: host memory (kDLCPU,
     * kDLCUDAHost, kDLROCMHost) is asked for with stream=None, which is
     * all NumPy accepts for the pinned arrays it re-exports. */
    mxd_queue *q = ((QueueObject *)target)->queue;
    bool device_memory = type == MXD_DL_CUDA || type == MXD_DL_ROCM;
    PyObject *stream = device_memory
                           ? PyLong_FromSize_t(mxd_queue_native_handle(q))
                           : Py_NewRef(Py_None);
    PyObject *capsule = stream ? ask_capsule(bridge, obj, stream, copy) : NULL;
    Py_XDECREF(stream);
    if (capsule == NULL)
        return NULL;
    import_spec spec = {
        target, device_memory, -1, copy, not_contiguous_text(obj, numpy), NULL};
    PyObject *b = import_capsule(st, capsule, &spec);
    Py_DECREF(capsule);
    return b;
}

/* ---- NumPy -------------------------------------------------------------- */

/* The ml_dtypes type NumPy needs for bfloat16, or NULL with ValueError. */
static PyObject *ml_bfloat16(void)
{
    PyObject *ml = PyImport_ImportModule("ml_dtypes");
    if (ml == NULL) {
        if (PyErr_ExceptionMatches(PyExc_ImportError)) {
            PyErr_Clear();
            PyErr_SetString(PyExc_ValueError,
                            "DType.bfloat16 has no NumPy dtype without "
                            "ml_dtypes (pip install ml_dtypes)");
        }
        return NULL;
    }
    PyObject *bf16 = PyObject_GetAttrString(ml, "bfloat16");
    Py_DECREF(ml);
    return bf16;
}

/* The dtype NumPy's DLPack carries for `info`: the same, or raw bytes of
 * the same size (float8: uint8 as MAX; bfloat16: uint16, viewed as
 * ml_dtypes.bfloat16 after); -1 with ValueError for float4/6. */
static int numpy_carrier(const mxd_dtype_info *info)
{
    int code = info->code;
    if (info->kind == MXD_KIND_FLOAT8)
        code = MXD_DTYPE_UINT8;
    else if (info->kind == MXD_KIND_BFLOAT16)
        code = MXD_DTYPE_UINT16;
    else if (info->kind == MXD_KIND_FLOAT4 || info->kind == MXD_KIND_FLOAT6) {
        PyErr_Format(PyExc_ValueError,
                     "DType.%s cannot be converted to a NumPy array",
                     info->name);
        return -1;
    }
    for (int i = 0; i < MXD_DTYPE_MEMBERS; i++)
        if (mxd_dtype_at((size_t)i)->code == code)
            return i;
    return -1;
}

PyObject *binding_to_numpy(PyObject *self, PyObject *unused)
{
    (void)unused;
    BufferObject *b = as_buffer(self);
    binding_state *st = binding_state_of(self);
    const mxd_dtype_info *info = buffer_dtype(b);
    binding_bridge *bridge = bridge_numpy(st, "Buffer.to_numpy()");
    if (bridge == NULL)
        return NULL;
    int carrier = numpy_carrier(info);
    PyObject *bf16 = NULL;
    if (carrier < 0 ||
        (info->kind == MXD_KIND_BFLOAT16 && !(bf16 = ml_bfloat16())))
        return NULL;
    /* Accelerator memory is copied to the host first. */
    PyObject *host = NULL;
    if (mxd_memory_host(b->memory) == NULL) {
        host = binding_buffer_host_copy(self);
    } else {
        host = Py_NewRef(self);
    }
    if (host != NULL && carrier != b->dtype_index) {
        /* The same bytes, as the dtype NumPy's DLPack can carry. */
        BufferObject *h = as_buffer(host);
        mxd_layout layout = binding_buffer_layout(h);
        mxd_memory_retain(h->memory);
        Py_SETREF(host,
                  binding_buffer_new(binding_view_type(host), h->memory,
                                     h->stream, carrier, h->usage, &layout));
    }
    PyObject *array =
        host ? PyObject_CallOneArg(bridge->from_dlpack, host) : NULL;
    Py_XDECREF(host);
    if (array != NULL && bf16 != NULL) {
        PyObject *viewed = PyObject_CallMethod(array, "view", "O", bf16);
        Py_SETREF(array, viewed);
    }
    Py_XDECREF(bf16);
    return array;
}

/* The DType index of a NumPy dtype object (max.dtype does the mapping,
 * once per dtype object); -1 with an exception. */
static int numpy_dtype_index(binding_state *st, PyObject *np_dtype)
{
    binding_bridge *b = &st->bridge;
    for (int i = 0; i < b->np_dtype_count; i++)
        if (b->np_dtypes[i] == np_dtype)
            return b->np_dtype_index[i];
    PyObject *dtype =
        PyObject_CallMethod(st->dtype_type, "from_numpy", "O", np_dtype);
    if (dtype == NULL)
        return -1;
    int index = binding_parse_dtype(st, "from_numpy", "dtype", dtype);
    Py_DECREF(dtype);
    if (index >= 0 && b->np_dtype_count < BINDING_NUMPY_DTYPES) {
        b->np_dtypes[b->np_dtype_count] = Py_NewRef(np_dtype);
        b->np_dtype_index[b->np_dtype_count++] = index;
    }
    return index;
}

/* For the types NumPy's DLPack cannot carry, the plain dtype to export
 * them as (a new reference); NULL when none is needed. */
static PyObject *numpy_carrier_name(const mxd_dtype_info *info)
{
    if (info->kind == MXD_KIND_BFLOAT16 || info->kind == MXD_KIND_FLOAT8 ||
        info->kind == MXD_KIND_FLOAT4 || info->kind == MXD_KIND_FLOAT6)
        return PyUnicode_FromString(info->size_in_bytes == 2 ? "uint16"
                                                             : "uint8");
    return NULL;
}

/* numpy.array(array, order="C"): a C-contiguous, writable copy (0-d
 * arrays stay 0-d, unlike ascontiguousarray). */
static PyObject *numpy_c_copy(PyObject *np, PyObject *array)
{
    PyObject *fn = PyObject_GetAttrString(np, "array");
    PyObject *args = fn ? PyTuple_Pack(1, array) : NULL;
    PyObject *kwargs = args ? Py_BuildValue("{s:s}", "order", "C") : NULL;
    PyObject *copy = kwargs ? PyObject_Call(fn, args, kwargs) : NULL;
    Py_XDECREF(kwargs);
    Py_XDECREF(args);
    Py_XDECREF(fn);
    return copy;
}

/* A capsule of the array's elements, as `carrier` when not NULL; NULL
 * without an exception when NumPy refuses to export it: the caller then
 * copies.  The legacy capsule is asked for (a call without arguments,
 * NumPy's fastest): every NumPy dtype has a legacy type code, and NumPy
 * refuses a read-only array there, which has to be copied anyway. */
static PyObject *numpy_capsule(binding_bridge *b, PyObject *array,
                               PyObject *carrier)
{
    PyObject *source = carrier
                           ? PyObject_CallMethod(array, "view", "O", carrier)
                           : Py_NewRef(array);
    PyObject *capsule =
        source ? PyObject_CallMethodNoArgs(source, b->dlpack_name) : NULL;
    Py_XDECREF(source);
    if (capsule == NULL && PyErr_ExceptionMatches(PyExc_BufferError))
        PyErr_Clear();
    return capsule;
}

/* Zero-copy over a C-contiguous, writable array; otherwise NumPy copies
 * it first (a strided array, or a read-only one, which NumPy does not
 * export as a legacy capsule). */
PyObject *binding_from_numpy(PyObject *cls, PyObject *array)
{
    binding_state *st = binding_type_state((PyTypeObject *)cls);
    binding_bridge *b = bridge_numpy(st, "Buffer.from_numpy()");
    if (b == NULL)
        return NULL;
    if (!PyObject_TypeCheck(array, (PyTypeObject *)b->ndarray)) {
        PyErr_Format(PyExc_TypeError,
                     "from_numpy(): expected a numpy.ndarray, not %.100s",
                     Py_TYPE(array)->tp_name);
        return NULL;
    }
    PyObject *np_dtype = PyObject_GetAttr(array, b->dtype_name);
    int index = np_dtype ? numpy_dtype_index(st, np_dtype) : -1;
    Py_XDECREF(np_dtype);
    PyObject *cpu = index >= 0
                        ? binding_device_default_queue((DeviceObject *)st->cpu)
                        : NULL;
    if (cpu == NULL)
        return NULL;
    PyObject *carrier = numpy_carrier_name(mxd_dtype_at((size_t)index));
    if (carrier == NULL && PyErr_Occurred())
        return NULL;
    bool strided = false;
    import_spec spec = {
        cpu,     false, index, -1, "from_numpy(): the array is not contiguous",
        &strided};
    PyObject *buffer = NULL;
    PyObject *capsule = numpy_capsule(b, array, carrier);
    if (capsule != NULL)
        buffer = import_capsule(st, capsule, &spec);
    Py_XDECREF(capsule);
    if (buffer == NULL && !PyErr_Occurred()) { /* strided or refused */
        PyObject *copy = numpy_c_copy(b->numpy, array);
        capsule = copy ? numpy_capsule(b, copy, carrier) : NULL;
        Py_XDECREF(copy);
        spec.strided = NULL;
        if (capsule != NULL)
            buffer = import_capsule(st, capsule, &spec);
        else if (!PyErr_Occurred())
            PyErr_SetString(PyExc_BufferError,
                            "from_numpy(): NumPy refused to export a copy "
                            "of the array through DLPack");
        Py_XDECREF(capsule);
    }
    Py_XDECREF(carrier);
    return buffer;
}

static const char *const from_numpy_names[] = {"arr"};

/* Buffer.from_numpy(arr), as MAX names it; positional is the fast path. */
PyObject *binding_buffer_from_numpy(PyObject *cls, PyObject *const *args,
                                    Py_ssize_t nargs, PyObject *kwnames)
{
    if (nargs == 1 && kwnames == NULL)
        return binding_from_numpy(cls, args[0]);
    const binding_params params = {"from_numpy", from_numpy_names, 1, 1};
    PyObject *arr;
    if (binding_parse_fast(&params, args, nargs, kwnames, &arr) < 0)
        return NULL;
    return binding_from_numpy(cls, arr);
}

PyObject *binding_import_array(binding_state *st, PyObject *array)
{
    PyObject *cls = (PyObject *)st->buffer_type;
    if (is_numpy_array(st, array))
        return binding_from_numpy(cls, array);
    if (!PyObject_TypeCheck(array, st->buffer_type) &&
        !PyObject_HasAttrString(array, "__dlpack__")) {
        PyErr_Format(PyExc_TypeError,
                     "Buffer(): argument 'array' must be a NumPy array or "
                     "another DLPack producer, not %.100s",
                     Py_TYPE(array)->tp_name);
        return NULL;
    }
    return binding_from_dlpack(cls, &array, 1, NULL);
}

/* ---- numpy.asarray(buf) and __cuda_array_interface__ -------------------- */

static const char *const array_names[] = {"dtype", "copy"};

/* numpy.asarray(buf) [beyond MAX]: to_numpy() (a zero-copy alias of host
 * memory, a copy of device memory), then NumPy's dtype and copy rules. */
PyObject *binding_buffer_array(PyObject *self, PyObject *const *args,
                               Py_ssize_t nargs, PyObject *kwnames)
{
    const binding_params params = {"__array__", array_names, 2, 0};
    PyObject *argv[2];
    int copy;
    if (binding_parse_fast(&params, args, nargs, kwnames, argv) < 0 ||
        parse_copy(argv[1], &copy) < 0)
        return NULL;
    if (copy == 0 && mxd_memory_host(as_buffer(self)->memory) == NULL) {
        PyErr_SetString(PyExc_ValueError,
                        "__array__(copy=False): accelerator memory reaches "
                        "NumPy only as a copy");
        return NULL;
    }
    PyObject *array = binding_to_numpy(self, NULL);
    if (array != NULL && argv[0] != NULL && argv[0] != Py_None)
        Py_SETREF(array, PyObject_CallMethod(array, "astype", "O", argv[0]));
    if (array != NULL && copy == 1)
        Py_SETREF(array, PyObject_CallMethod(array, "copy", NULL));
    return array;
}

/* NumPy's array-interface type string of the dtype's NumPy mapping
 * (float8/6/4 as raw bytes, bfloat16 as 2-byte opaque values). */
static const char *typestr(const mxd_dtype_info *info)
{
    switch (info->code) {
    case MXD_DTYPE_BOOL: return "|b1";
    case MXD_DTYPE_INT8: return "|i1";
    case MXD_DTYPE_INT16: return "<i2";
    case MXD_DTYPE_INT32: return "<i4";
    case MXD_DTYPE_INT64: return "<i8";
    case MXD_DTYPE_UINT16: return "<u2";
    case MXD_DTYPE_UINT32: return "<u4";
    case MXD_DTYPE_UINT64: return "<u8";
    case MXD_DTYPE_FLOAT16: return "<f2";
    case MXD_DTYPE_FLOAT32: return "<f4";
    case MXD_DTYPE_FLOAT64: return "<f8";
    case MXD_DTYPE_BFLOAT16: return "<V2";
    default: return "|u1"; /* uint8 and the sub-byte and float8 types */
    }
}

static PyObject *byte_strides(BufferObject *b)
{
    mxd_layout layout = binding_buffer_layout(b);
    if (mxd_layout_is_contiguous(&layout))
        Py_RETURN_NONE; /* version 3: None means C-contiguous */
    PyObject *tuple = PyTuple_New(buffer_rank(b));
    for (int i = 0; tuple && i < buffer_rank(b); i++) {
        PyObject *s =
            PyLong_FromLongLong(buffer_strides(b)[i] * layout.element_size);
        if (s == NULL) {
            Py_CLEAR(tuple);
            break;
        }
        PyTuple_SET_ITEM(tuple, i, s);
    }
    return tuple;
}

/* A property only CUDA buffers have (hasattr is False elsewhere). */
PyObject *binding_buffer_cuda_array_interface(PyObject *self, void *closure)
{
    (void)closure;
    BufferObject *b = as_buffer(self);
    mxd_device *dev = mxd_memory_device(b->memory);
    if (strcmp(mxd_device_api(dev), "cuda") != 0) {
        PyErr_Format(PyExc_AttributeError,
                     "'%.100s' object has no attribute "
                     "'__cuda_array_interface__' (the buffer is in %s "
                     "memory, not CUDA memory)",
                     Py_TYPE(self)->tp_name, mxd_device_api(dev));
        return NULL;
    }
    uintptr_t stream = mxd_queue_native_handle(binding_buffer_queue(b));
    PyObject *shape = PyTuple_New(buffer_rank(b));
    for (int i = 0; shape && i < buffer_rank(b); i++) {
        PyObject *n = PyLong_FromLongLong(buffer_shape(b)[i]);
        if (n == NULL) {
            Py_CLEAR(shape);
            break;
        }
        PyTuple_SET_ITEM(shape, i, n);
    }
    PyObject *strides = shape ? byte_strides(b) : NULL;
    PyObject *stream_obj =
        strides ? (stream ? PyLong_FromSize_t(stream) : Py_NewRef(Py_None))
                : NULL;
    /* Version 3: the pointer of a zero-size array is 0, and memory nothing
     * of ours may write (a read-only import) is flagged read-only. */
    uintptr_t data =
        binding_buffer_count(b) == 0
            ? 0
            : mxd_memory_device_ptr(b->memory) + (uintptr_t)b->offset;
    PyObject *readonly = mxd_memory_is_readonly(b->memory) ? Py_True : Py_False;
    PyObject *cai =
        stream_obj
            ? Py_BuildValue("{s:N,s:s,s:(NO),s:i,s:N,s:N}", "shape", shape,
                            "typestr", typestr(buffer_dtype(b)), "data",
                            PyLong_FromSize_t(data), readonly, "version", 3,
                            "strides", strides, "stream", stream_obj)
            : NULL;
    if (cai == NULL) {
        Py_XDECREF(shape);
        Py_XDECREF(strides);
        Py_XDECREF(stream_obj);
    }
    return cai;
}
