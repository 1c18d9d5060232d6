/* The launch trace (SPEC §14): LaunchTraceEntry and the module functions
 * begin_launch_trace / take_launch_trace.  The recording itself is the
 * core's (trace.h); launch_trace() is a context manager in max.driver. */
#include "binding.h"

#include <structmember.h>

#include "trace.h"

typedef struct EntryObject {
    PyObject_HEAD
    PyObject *kind;        /* LaunchTraceEntry.OperationKind member */
    PyObject *name;        /* str */
    PyObject *memcpy_kind; /* LaunchTraceEntry.MemcpyKind member */
    unsigned long long semantic_hash;
    long long grid[3], block[3], shared_mem_bytes;
    long long stream_index;
    long long memcpy_byte_size, memset_byte_size;
    long long memset_value, memset_value_size;
} EntryObject;

static void entry_dealloc(PyObject *self)
{
    PyTypeObject *type = Py_TYPE(self);
    EntryObject *e = (EntryObject *)self;
    Py_XDECREF(e->kind);
    Py_XDECREF(e->name);
    Py_XDECREF(e->memcpy_kind);
    type->tp_free(self);
    Py_DECREF(type);
}

static PyObject *entry_repr(PyObject *self)
{
    EntryObject *e = (EntryObject *)self;
    PyObject *kind = PyObject_GetAttrString(e->kind, "name");
    PyObject *copy = PyObject_GetAttrString(e->memcpy_kind, "name");
    char hash[24]; /* PyUnicode_FromFormat has no %llx */
    snprintf(hash, sizeof hash, "0x%llx", e->semantic_hash);
    PyObject *text =
        kind && copy
            ? PyUnicode_FromFormat(
                  "LaunchTraceEntry(kind=%U, name=%R, stream_index=%lld, "
                  "memcpy_kind=%U, memcpy_byte_size=%lld, "
                  "memset_byte_size=%lld, memset_value=%lld, "
                  "memset_value_size=%lld, semantic_hash=%s)",
                  kind, e->name, e->stream_index, copy, e->memcpy_byte_size,
                  e->memset_byte_size, e->memset_value, e->memset_value_size,
                  hash)
            : NULL;
    Py_XDECREF(kind);
    Py_XDECREF(copy);
    return text;
}

#define LL_MEMBER(name, field, doc)                                            \
    {                                                                          \
        name, T_LONGLONG, offsetof(EntryObject, field), READONLY, doc          \
    }

static PyMemberDef entry_members[] = {
    {"kind", T_OBJECT_EX, offsetof(EntryObject, kind), READONLY,
     "LaunchTraceEntry.OperationKind: KERNEL_LAUNCH, MEMCPY or MEMSET."},
    {"name", T_OBJECT_EX, offsetof(EntryObject, name), READONLY,
     "The driver entry point (e.g. cuMemcpyHtoDAsync), or memcpy / memset "
     "on the CPU."},
    {"semantic_hash", T_ULONGLONG, offsetof(EntryObject, semantic_hash),
     READONLY,
     "Non-zero; from the kind, name, sizes, memcpy_kind, fill value and "
     "stream_index, never from addresses."},
    LL_MEMBER("grid_x", grid[0], "0: this module launches no kernels."),
    LL_MEMBER("grid_y", grid[1], "0: this module launches no kernels."),
    LL_MEMBER("grid_z", grid[2], "0: this module launches no kernels."),
    LL_MEMBER("block_x", block[0], "0: this module launches no kernels."),
    LL_MEMBER("block_y", block[1], "0: this module launches no kernels."),
    LL_MEMBER("block_z", block[2], "0: this module launches no kernels."),
    LL_MEMBER("shared_mem_bytes", shared_mem_bytes,
              "0: this module launches no kernels."),
    LL_MEMBER("stream_index", stream_index,
              "The queue, numbered from 0 in the order the trace first saw "
              "the queues."),
    {"memcpy_kind", T_OBJECT_EX, offsetof(EntryObject, memcpy_kind), READONLY,
     "LaunchTraceEntry.MemcpyKind: NONE, HTOD, DTOH or DTOD (pinned memory "
     "counts as host)."},
    LL_MEMBER("memcpy_byte_size", memcpy_byte_size, "Bytes copied."),
    LL_MEMBER("memset_byte_size", memset_byte_size, "Bytes filled."),
    LL_MEMBER("memset_value", memset_value, "The value a fill writes."),
    LL_MEMBER("memset_value_size", memset_value_size,
              "The width of memset_value in bytes."),
    {NULL, 0, 0, 0, NULL},
};

static PyType_Slot entry_slots[] = {
    {Py_tp_doc, "One copy or fill recorded by the launch trace (read-only)."},
    {Py_tp_dealloc, entry_dealloc},
    {Py_tp_repr, entry_repr},
    {Py_tp_members, entry_members},
    {0, NULL},
};

static PyType_Spec entry_spec = {
    .name = "max._core.driver.LaunchTraceEntry",
    .basicsize = sizeof(EntryObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE |
             Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = entry_slots,
};

/* The IntEnum class attribute `name` of the entry type: `members` is a
 * list of (name, value). */
static PyObject *add_enum(PyTypeObject *type, const char *name,
                          PyObject *members)
{
    PyObject *enum_module = PyImport_ImportModule("enum");
    PyObject *int_enum =
        enum_module ? PyObject_GetAttrString(enum_module, "IntEnum") : NULL;
    Py_XDECREF(enum_module);
    char qualname[64];
    snprintf(qualname, sizeof qualname, "LaunchTraceEntry.%s", name);
    PyObject *args = int_enum ? Py_BuildValue("(sO)", name, members) : NULL;
    PyObject *kwargs =
        args ? Py_BuildValue("{s:s,s:s}", "module", "max._core.driver",
                             "qualname", qualname)
             : NULL;
    PyObject *cls = kwargs ? PyObject_Call(int_enum, args, kwargs) : NULL;
    Py_XDECREF(kwargs);
    Py_XDECREF(args);
    Py_XDECREF(int_enum);
    if (cls != NULL && PyDict_SetItemString(type->tp_dict, name, cls) < 0)
        Py_CLEAR(cls);
    return cls;
}

int binding_add_trace_type(PyObject *module, binding_state *st)
{
    st->trace_entry_type = binding_add_type(module, &entry_spec, NULL);
    if (st->trace_entry_type == NULL)
        return -1;
    PyObject *ops =
        Py_BuildValue("[(si)(si)(si)]", "KERNEL_LAUNCH", MXD_TRACE_KERNEL,
                      "MEMCPY", MXD_TRACE_MEMCPY, "MEMSET", MXD_TRACE_MEMSET);
    PyObject *copies = Py_BuildValue(
        "[(si)(si)(si)(si)]", "NONE", MXD_MEMCPY_NONE, "HTOD", MXD_MEMCPY_HTOD,
        "DTOH", MXD_MEMCPY_DTOH, "DTOD", MXD_MEMCPY_DTOD);
    if (ops && copies) {
        st->operation_kind =
            add_enum(st->trace_entry_type, "OperationKind", ops);
        st->memcpy_kind = add_enum(st->trace_entry_type, "MemcpyKind", copies);
    }
    Py_XDECREF(ops);
    Py_XDECREF(copies);
    PyType_Modified(st->trace_entry_type);
    return st->operation_kind && st->memcpy_kind ? 0 : -1;
}

/* ---- Module functions --------------------------------------------------- */

PyObject *binding_begin_launch_trace(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    mxd_trace_begin();
    Py_RETURN_NONE;
}

static PyObject *enum_member(PyObject *cls, long value)
{
    return PyObject_CallFunction(cls, "l", value);
}

static PyObject *make_entry(binding_state *st, const mxd_trace_entry *t)
{
    EntryObject *e = PyObject_New(EntryObject, st->trace_entry_type);
    if (e == NULL)
        return NULL;
    memset((char *)e + offsetof(EntryObject, kind), 0,
           sizeof *e - offsetof(EntryObject, kind));
    e->kind = enum_member(st->operation_kind, t->kind);
    e->name = PyUnicode_FromString(t->name);
    e->memcpy_kind = enum_member(st->memcpy_kind, t->memcpy_kind);
    e->semantic_hash = t->semantic_hash;
    e->stream_index = t->stream_index;
    e->memcpy_byte_size = (long long)t->memcpy_bytes;
    e->memset_byte_size = (long long)t->memset_bytes;
    e->memset_value = t->memset_value;
    e->memset_value_size = t->memset_value_size;
    if (!e->kind || !e->name || !e->memcpy_kind)
        Py_CLEAR(e);
    return (PyObject *)e;
}

PyObject *binding_take_launch_trace(PyObject *module, PyObject *unused)
{
    (void)unused;
    binding_state *st = PyModule_GetState(module);
    size_t count;
    mxd_trace_entry *entries = mxd_trace_take(&count);
    PyObject *list = PyList_New((Py_ssize_t)count);
    for (size_t i = 0; list != NULL && i < count; i++) {
        PyObject *entry = make_entry(st, &entries[i]);
        if (entry == NULL)
            Py_CLEAR(list);
        else
            PyList_SET_ITEM(list, (Py_ssize_t)i, entry);
    }
    free(entries);
    return list;
}
