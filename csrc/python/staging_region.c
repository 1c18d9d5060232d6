/* _ChunkedStagingRegion, MAX 26.7's staging allocation for callers outside
 * the driver: a large range of host memory the device reaches, handed out
 * as addresses (not a Buffer), here over the device's pinned pool.
 *
 * MAX maps one host range and page-locks it in chunks, or (driver_alloc)
 * allocates each chunk as pinned memory of its own.  Here both come from
 * the pool that pinned Buffers use (DESIGN decision 11: pinned memory
 * comes from pools): one pinned block for the whole range, whose chunks
 * are its consecutive slices, or one block per chunk with driver_alloc.
 * The pool memory is resident from the start, so `threads` (MAX's
 * page-touching workers) has nothing to do. */
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "binding.h"

typedef struct RegionObject {
    PyObject_HEAD
    PyObject *device;      /* the Device */
    mxd_memory **memories; /* 1, or num_chunks with driver_alloc */
    int64_t num_memories;
    uint64_t byte_size, row_bytes, chunk_bytes;
    int64_t num_chunks;
    bool driver_alloc, mlocked;
} RegionObject;

static RegionObject *as_region(PyObject *self)
{
    return (RegionObject *)self;
}

static uint64_t gcd(uint64_t a, uint64_t b)
{
    while (b != 0) {
        uint64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

/* chunk_bytes rounded up to whole rows and whole pages; 0 on overflow. */
static uint64_t round_chunk(uint64_t chunk, uint64_t row)
{
    uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
    uint64_t unit = row / gcd(row, page);
    if (unit > UINT64_MAX / page)
        return 0;
    unit *= page; /* lcm(row, page) */
    uint64_t units = chunk / unit + (chunk % unit != 0);
    return units > UINT64_MAX / unit ? 0 : units * unit;
}

static void *host_of(RegionObject *r, int64_t i)
{
    return mxd_memory_host(r->memories[i]);
}

/* The pinned blocks: one for the range, or one per chunk (the last one
 * holding what is left).  Allocating pinned memory may wait for the
 * device, so the GIL is released. */
static int allocate(RegionObject *r, mxd_queue *queue)
{
    r->num_memories = r->driver_alloc ? r->num_chunks : 1;
    r->memories = calloc((size_t)r->num_memories, sizeof *r->memories);
    if (r->memories == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    mxd_status status = MXD_OK;
    mxd_error err;
    Py_BEGIN_ALLOW_THREADS
        for (int64_t i = 0; status == MXD_OK && i < r->num_memories; i++) {
            uint64_t start = (uint64_t)i * r->chunk_bytes;
            uint64_t size = !r->driver_alloc ? r->byte_size
                            : r->byte_size - start < r->chunk_bytes
                                ? r->byte_size - start
                                : r->chunk_bytes;
            status = mxd_memory_alloc(queue, (int64_t)size,
                                      MXD_ALLOC_PINNED | MXD_ALLOC_UNTRACKED,
                                      &r->memories[i], &err);
        }
    Py_END_ALLOW_THREADS
    if (status != MXD_OK) {
        /* As MAX: RuntimeError when a chunk cannot be had. */
        err.status = MXD_UNAVAILABLE;
        binding_raise_prefixed("_ChunkedStagingRegion: allocating a chunk "
                               "failed",
                               &err);
        return -1;
    }
    if (r->mlocked && mlock(host_of(r, 0), (size_t)r->byte_size) != 0) {
        PyErr_SetFromErrno(PyExc_RuntimeError);
        r->mlocked = false;
        return -1;
    }
    return 0;
}

/* ---- Construction and lifetime ------------------------------------------ */

static const char *const region_names[] = {
    "byte_size",   "row_bytes",    "device",     "threads",
    "chunk_bytes", "driver_alloc", "mlock_pages"};

static int parse_flag(PyObject *obj, bool *out)
{
    int truth = obj == NULL ? 0 : PyObject_IsTrue(obj);
    *out = truth == 1;
    return truth < 0 ? -1 : 0;
}

static int check_sizes(uint64_t byte_size, uint64_t row_bytes, uint64_t threads,
                       uint64_t chunk_bytes)
{
    const char *problem =
        byte_size == 0 || row_bytes == 0 || chunk_bytes == 0 || threads == 0
            ? "byte_size, row_bytes, chunk_bytes and threads must be positive"
        : byte_size % row_bytes != 0
            ? "byte_size must be a multiple of row_bytes"
            : NULL;
    if (problem != NULL)
        PyErr_Format(PyExc_ValueError, "_ChunkedStagingRegion(): %s", problem);
    return problem ? -1 : 0;
}

static PyObject *region_tp_new(PyTypeObject *type, PyObject *args,
                               PyObject *kwargs)
{
    const char *fname = "_ChunkedStagingRegion";
    const binding_params params = {fname, region_names, 7, 3};
    binding_state *st = binding_type_state(type);
    PyObject *argv[7];
    uint64_t byte_size, row_bytes, threads = 16, chunk_bytes = 512u << 20;
    bool driver_alloc, mlock_pages;
    if (binding_parse_tuple(&params, args, kwargs, argv) < 0 ||
        binding_parse_u64(fname, "byte_size", argv[0], &byte_size) < 0 ||
        binding_parse_u64(fname, "row_bytes", argv[1], &row_bytes) < 0 ||
        binding_check_type(fname, "device", argv[2], st->device_type) < 0 ||
        (argv[3] &&
         binding_parse_u64(fname, "threads", argv[3], &threads) < 0) ||
        (argv[4] &&
         binding_parse_u64(fname, "chunk_bytes", argv[4], &chunk_bytes) < 0) ||
        parse_flag(argv[5], &driver_alloc) < 0 ||
        parse_flag(argv[6], &mlock_pages) < 0 ||
        check_sizes(byte_size, row_bytes, threads, chunk_bytes) < 0)
        return NULL;
    DeviceObject *device = (DeviceObject *)argv[2];
    if (mxd_device_is_host(device->device))
        return PyErr_Format(PyExc_ValueError,
                            "%s(): the device must be an accelerator, not "
                            "the CPU",
                            fname);
    if (driver_alloc && mlock_pages)
        return PyErr_Format(PyExc_ValueError,
                            "%s(): mlock_pages is not allowed with "
                            "driver_alloc (driver allocations are pinned "
                            "already)",
                            fname);
    uint64_t chunk = round_chunk(chunk_bytes, row_bytes);
    if (chunk == 0 || byte_size > (uint64_t)INT64_MAX)
        return PyErr_Format(PyExc_ValueError, "%s(): the sizes overflow",
                            fname);
    PyObject *queue = binding_device_default_queue(device);
    if (queue == NULL)
        return NULL;
    RegionObject *self = (RegionObject *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->device = Py_NewRef(argv[2]);
    self->byte_size = byte_size;
    self->row_bytes = row_bytes;
    self->chunk_bytes = chunk;
    self->num_chunks = (int64_t)(byte_size / chunk + (byte_size % chunk != 0));
    self->driver_alloc = driver_alloc;
    self->mlocked = mlock_pages;
    if (allocate(self, ((QueueObject *)queue)->queue) < 0) {
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

/* As MAX: drains the device (a transfer still reading the range must not
 * see it reused), then gives the blocks back to the pool. */
static void region_dealloc(PyObject *self)
{
    RegionObject *r = as_region(self);
    PyTypeObject *type = Py_TYPE(self);
    if (r->memories != NULL) {
        mxd_device *dev = ((DeviceObject *)r->device)->device;
        if (r->mlocked)
            munlock(host_of(r, 0), (size_t)r->byte_size);
        Py_BEGIN_ALLOW_THREADS
            mxd_wait wait = {-1.0, NULL, NULL}; /* forever */
            mxd_error err;
            (void)mxd_device_synchronize(dev, &wait, &err);
            for (int64_t i = 0; i < r->num_memories; i++)
                if (r->memories[i] != NULL)
                    mxd_memory_release(r->memories[i]);
        Py_END_ALLOW_THREADS
        free(r->memories);
    }
    Py_XDECREF(r->device);
    type->tp_free(self);
    Py_DECREF(type);
}

/* ---- Properties --------------------------------------------------------- */

static PyObject *region_get_address(PyObject *self, void *closure)
{
    (void)closure;
    RegionObject *r = as_region(self);
    if (r->driver_alloc)
        return PyErr_Format(PyExc_RuntimeError,
                            "a driver_alloc region has no single base "
                            "address: use chunk_addresses");
    return PyLong_FromVoidPtr(host_of(r, 0));
}

static PyObject *region_get_chunk_addresses(PyObject *self, void *closure)
{
    (void)closure;
    RegionObject *r = as_region(self);
    PyObject *list = PyList_New(r->num_chunks);
    for (int64_t i = 0; list != NULL && i < r->num_chunks; i++) {
        char *host = r->driver_alloc
                         ? host_of(r, i)
                         : (char *)host_of(r, 0) + (uint64_t)i * r->chunk_bytes;
        PyObject *address = PyLong_FromVoidPtr(host);
        if (address == NULL)
            Py_CLEAR(list);
        else
            PyList_SET_ITEM(list, i, address);
    }
    return list;
}

#define REGION_U64(name)                                                       \
    static PyObject *region_get_##name(PyObject *self, void *closure)          \
    {                                                                          \
        (void)closure;                                                         \
        return PyLong_FromUnsignedLongLong(as_region(self)->name);             \
    }
REGION_U64(byte_size)
REGION_U64(row_bytes)
REGION_U64(chunk_bytes)

static PyObject *region_get_num_chunks(PyObject *self, void *closure)
{
    (void)closure;
    return PyLong_FromLongLong(as_region(self)->num_chunks);
}

static PyObject *region_get_driver_alloc(PyObject *self, void *closure)
{
    (void)closure;
    return PyBool_FromLong(as_region(self)->driver_alloc);
}

static PyObject *region_get_mlocked(PyObject *self, void *closure)
{
    (void)closure;
    return PyBool_FromLong(as_region(self)->mlocked);
}

static PyObject *region_get_device(PyObject *self, void *closure)
{
    (void)closure;
    return Py_NewRef(as_region(self)->device);
}

static PyGetSetDef region_getset[] = {
    {"address", region_get_address, NULL,
     "Host address of the whole range (RuntimeError for a driver_alloc "
     "region, which has no single base).",
     NULL},
    {"chunk_addresses", region_get_chunk_addresses, NULL,
     "Host address of each chunk, in order: chunk i holds bytes "
     "[i * chunk_bytes, (i + 1) * chunk_bytes).",
     NULL},
    {"driver_alloc", region_get_driver_alloc, NULL,
     "Whether each chunk is a pinned allocation of its own.", NULL},
    {"mlocked", region_get_mlocked, NULL, "Whether the range is mlock()ed.",
     NULL},
    {"byte_size", region_get_byte_size, NULL, "Total bytes.", NULL},
    {"row_bytes", region_get_row_bytes, NULL,
     "Row width that no chunk boundary falls inside.", NULL},
    {"chunk_bytes", region_get_chunk_bytes, NULL,
     "The requested chunk_bytes rounded up to whole rows and pages.", NULL},
    {"num_chunks", region_get_num_chunks, NULL, "How many chunks.", NULL},
    {"device", region_get_device, NULL, "The accelerator that reaches it.",
     NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef region_methods[] = {
    {"__reduce_ex__", binding_refuse_pickle, METH_O,
     BINDING_DOC("__reduce_ex__", "($self, protocol, /)",
                 "Raises TypeError: a region is a resource of one "
                 "process.")},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot region_slots[] = {
    {Py_tp_doc,
     BINDING_DOC(
         "_ChunkedStagingRegion",
         "(byte_size, row_bytes, device, threads=16, chunk_bytes=536870912, "
         "driver_alloc=False, mlock_pages=False)",
         "A range of pinned host memory `device` reaches (from its pinned "
         "pool), handed out as addresses in chunks of whole rows, as MAX "
         "26.7's (internal to MAX, kept for its callers). Not a Buffer: keep "
         "each transfer inside one row. With driver_alloc each chunk is an "
         "allocation of its own (use chunk_addresses). Releasing it drains "
         "the device first.")},
    {Py_tp_new, region_tp_new},
    {Py_tp_dealloc, region_dealloc},
    {Py_tp_getset, region_getset},
    {Py_tp_methods, region_methods},
    {0, NULL},
};

/* Holds only a Device, which cannot refer back to it: no GC support. */
static PyType_Spec region_spec = {
    .name = "max._core.driver._ChunkedStagingRegion",
    .basicsize = sizeof(RegionObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = region_slots,
};

int binding_add_region_type(PyObject *module, binding_state *st)
{
    (void)st;
    return binding_add_type(module, &region_spec, NULL) == NULL ? -1 : 0;
}
