/* Shared declarations of the max._core.driver extension module.
 *
 * Every .c file of csrc/python includes this header first: it defines
 * PY_SSIZE_T_CLEAN and includes Python.h before any system header, as the
 * CPython documentation requires. */
#ifndef MXD_BINDING_H
#define MXD_BINDING_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>

#include "compat.h"
#include "dtype.h"
#include "memory.h"
#include "mxd.h"
#include "watch.h"

/* ---- Module state ------------------------------------------------------- */

/* What the DLPack and NumPy paths call on every use, made once (dlpack.c):
 * the names and keyword tuples of __dlpack__ calls, and NumPy's objects,
 * looked up by the first call that needs NumPy (never at import). */
enum { BINDING_NUMPY_DTYPES = 24 };
typedef struct binding_bridge {
    PyObject *dlpack_name;    /* "__dlpack__" */
    PyObject *kw_versioned;   /* ("max_version", "stream") */
    PyObject *kw_legacy;      /* ("stream",) */
    PyObject *kw_copy;        /* ... with "copy" after, same order */
    PyObject *kw_legacy_copy; /* ("stream", "copy") */
    PyObject *max_version;    /* (1, 0) */
    PyObject *numpy;          /* the module, once a call needed it */
    PyObject *ndarray;
    PyObject *from_dlpack;
    PyObject *dtype_name; /* "dtype" */
    /* NumPy dtype objects from_numpy met, and their DType index: NumPy's
     * dtypes are few long-lived objects, found here by identity. */
    PyObject *np_dtypes[BINDING_NUMPY_DTYPES];
    int np_dtype_index[BINDING_NUMPY_DTYPES];
    int np_dtype_count;
} binding_bridge;

/* Usage flags (SPEC §12.2): MAX's values. */
enum {
    BUFFER_USAGE_DEFAULT = 0,
    BUFFER_USAGE_STAGING = 1,
    BUFFER_USAGE_UNTRACKED = 2,
    BUFFER_USAGES = 4,
};

/* What `await` needs (awaitable.c): asyncio's objects, looked up by the
 * first await (importing max.driver never imports asyncio), and the
 * waker of each event loop. */
typedef struct binding_async {
    PyTypeObject *waker_type;  /* one per event loop */
    PyTypeObject *waiter_type; /* one per pending await */
    PyObject *get_running_loop;
    PyObject *wakers;     /* weakref.WeakKeyDictionary: loop -> waker */
    PyObject *last_loop;  /* a weak reference: the loop of the last await */
    PyObject *last_waker; /* and its waker */
    PyObject *names[8];   /* interned method names (awaitable.c) */
} binding_async;

/* Per-module-object state: the heap types and the cached Device objects
 * (so that CPU() is CPU() and queue.device is the same object). */
typedef struct binding_state {
    PyTypeObject *device_type;
    PyTypeObject *cpu_type;
    PyTypeObject *accelerator_type;
    PyTypeObject *queue_type;
    PyTypeObject *event_type;
    PyTypeObject *flag_type;
    PyTypeObject *buffer_type;
    PyTypeObject *pinned_buffer_type; /* DevicePinnedBuffer */
    PyObject *dtype_type;             /* max.dtype.DType */
    /* The DType members, in mxd_dtype_at() order. */
    PyObject *dtypes[MXD_DTYPE_MEMBERS];
    PyTypeObject *trace_entry_type; /* LaunchTraceEntry */
    PyObject *operation_kind;       /* LaunchTraceEntry.OperationKind */
    PyObject *memcpy_kind;          /* LaunchTraceEntry.MemcpyKind */
    PyObject *usage_type;           /* Usage, an enum.Flag */
    /* Usage(i) for every combination of DEFAULT, STAGING, UNTRACKED. */
    PyObject *usages[BUFFER_USAGES];
    PyTypeObject *completion_type; /* HostHazardCompletion */
    PyTypeObject *graph_type;      /* DeviceGraph */
    PyTypeObject *symmetric_type;  /* SymmetricPool */
    PyObject *cpu;                 /* the one CPU Device object */
    PyObject **accelerators;       /* per id, created on first use */
    int accelerator_count;
    /* Virtual accelerators by core device address (virtual device mode). */
    PyObject *virtual_devices;
    binding_bridge bridge;
    binding_async async;
} binding_state;

/* ---- Buffers (buffer_object.c; buffer_view.c, buffer_copy.c, dlpack.c) -- */

/* A view of memory: rank dimensions, stored inline after the fixed part
 * (shape then strides, in elements), so a Buffer is one allocation. */
typedef struct BufferObject {
    PyObject_VAR_HEAD   /* ob_size: the rank */
    mxd_memory *memory; /* one reference */
    PyObject *stream;   /* the DeviceQueue it is bound to */
    int dtype_index;    /* in mxd_dtype_at() order */
    int usage;          /* BUFFER_USAGE_* */
    int64_t offset;     /* byte offset of element (0, ..., 0) */
    int64_t dims[];
} BufferObject;

static inline int buffer_rank(const BufferObject *b)
{
    return (int)Py_SIZE(b);
}

static inline int64_t *buffer_shape(BufferObject *b)
{
    return b->dims;
}

static inline int64_t *buffer_strides(BufferObject *b)
{
    return b->dims + Py_SIZE(b);
}

static inline const mxd_dtype_info *buffer_dtype(const BufferObject *b)
{
    return mxd_dtype_at((size_t)b->dtype_index);
}

/* The view's layout, pointing into the object. */
mxd_layout binding_buffer_layout(BufferObject *b);
mxd_view binding_buffer_view(BufferObject *b);
mxd_queue *binding_buffer_queue(BufferObject *b);

/* A new Buffer of `type` over `memory` (a reference the caller gives
 * away, also on failure) bound to `stream`, with the given view. */
PyObject *binding_buffer_new(PyTypeObject *type, mxd_memory *memory,
                             PyObject *stream, int dtype_index, int usage,
                             const mxd_layout *layout);
/* A new contiguous Buffer of `shape` bound to `stream` (a DeviceQueue). */
PyObject *binding_buffer_alloc(binding_state *st, PyTypeObject *type,
                               PyObject *stream, int dtype_index, int usage,
                               int rank, const int64_t *shape);
/* The type a view of `self` gets (a pinned buffer's views are pinned). */
PyTypeObject *binding_view_type(PyObject *self);

/* The DType argument `obj` as an index into mxd_dtype_at(), or -1 with
 * TypeError set. */
int binding_parse_dtype(binding_state *st, const char *fname, const char *param,
                        PyObject *obj);
/* A shape argument: a sequence of ints; returns the rank or -1. */
int binding_parse_shape(const char *fname, PyObject *obj, int64_t *shape);
/* The same in two steps, so that a constructor checks every argument's
 * type before any value: the shape as a sequence of ints (a new reference;
 * NULL with a TypeError), then its values into `shape` (the rank, or -1). */
PyObject *binding_shape_sequence(const char *fname, PyObject *obj);
int binding_shape_values(const char *fname, PyObject *seq, int64_t *shape);
/* One dimension (an int or __index__); a negative one is the core's to
 * reject, after every argument's type was checked.  -1 with an exception
 * (OverflowError beyond 64 bits). */
int binding_parse_dimension(const char *fname, PyObject *item, int64_t *out);
/* `device=` / `stream=` / None: the DeviceQueue to bind to (borrowed), or
 * NULL with TypeError set. */
PyObject *binding_parse_target(binding_state *st, const char *fname,
                               const char *param, PyObject *obj);

/* Waits (GIL released, interruptible) before the host reads b through an
 * alias: for its storage's last write (SPEC §12.6). */
int binding_buffer_host_wait(BufferObject *b);
/* Copies src's elements into dst (GIL released); -1 with an exception. */
int binding_buffer_copy_into(BufferObject *dst, BufferObject *src);
/* A new contiguous copy of `self` bound to `stream`. */
PyObject *binding_buffer_copy_to(PyObject *self, PyObject *stream);
/* A contiguous copy in CPU memory for the host to read (to_numpy of device
 * memory, a DLPack export to the CPU), complete on return, read as a host
 * read (SPEC §12.6): after the storage's last write only.  Bound to the
 * CPU's default queue, whose work it does not wait for. */
PyObject *binding_buffer_host_copy(PyObject *self);

/* The element count (the product of the shape). */
int64_t binding_buffer_count(BufferObject *b);
/* Fills every element of b with `element` in its queue's order. */
int binding_buffer_fill(BufferObject *b, const void *element);
/* `value` (a Python or NumPy scalar) as one element of `info`. */
int binding_encode_scalar(const char *fname, const mxd_dtype_info *info,
                          PyObject *value, void *element);

int binding_add_buffer_types(PyObject *module, binding_state *st);
int binding_add_trace_type(PyObject *module, binding_state *st);
PyObject *binding_begin_launch_trace(PyObject *module, PyObject *unused);
PyObject *binding_take_launch_trace(PyObject *module, PyObject *unused);

/* The methods the Buffer type lists (buffer.c), from the other files. */
PyObject *binding_buffer_subscript(PyObject *self, PyObject *key);
PyObject *binding_buffer_sq_item(PyObject *self, Py_ssize_t i);
PyObject *binding_buffer_iter(PyObject *self);
int binding_buffer_ass_subscript(PyObject *self, PyObject *key,
                                 PyObject *value);
PyObject *binding_buffer_item(PyObject *self, PyObject *unused);
PyObject *binding_buffer_view_as(PyObject *self, PyObject *const *args,
                                 Py_ssize_t nargs, PyObject *kwnames);
PyObject *binding_buffer_inplace_copy_from(PyObject *self,
                                           PyObject *const *args,
                                           Py_ssize_t nargs, PyObject *kwnames);
PyObject *binding_buffer_copy(PyObject *self, PyObject *const *args,
                              Py_ssize_t nargs, PyObject *kwnames);
PyObject *binding_buffer_contiguous(PyObject *self, PyObject *unused);
PyObject *binding_buffer_to(PyObject *self, PyObject *target);
PyObject *binding_buffer_to_kw(PyObject *self, PyObject *const *args,
                               Py_ssize_t nargs, PyObject *kwnames);
PyObject *binding_buffer_stamp_write(PyObject *self, PyObject *const *args,
                                     Py_ssize_t nargs, PyObject *kwnames);
PyObject *binding_buffer_stamp_read(PyObject *self, PyObject *const *args,
                                    Py_ssize_t nargs, PyObject *kwnames);
/* MAX 26.7's private Buffer surface (buffer_view.c, buffer_copy.c). */
PyObject *binding_buffer_getitem_kw(PyObject *self, PyObject *const *args,
                                    Py_ssize_t nargs, PyObject *kwnames);
PyObject *binding_buffer_setitem_kw(PyObject *self, PyObject *const *args,
                                    Py_ssize_t nargs, PyObject *kwnames);
PyObject *binding_buffer_iterate_indices(PyObject *self, PyObject *unused);
PyObject *binding_release_to_borrowed(PyObject *module, PyObject *const *args,
                                      Py_ssize_t nargs, PyObject *kwnames);
/* batch_inplace_copy(dsts, srcs), copy_pinned_to_destinations(source,
 * destinations): module functions (buffer_copy.c). */
PyObject *binding_batch_inplace_copy(PyObject *module, PyObject *const *args,
                                     Py_ssize_t nargs, PyObject *kwnames);
PyObject *binding_copy_pinned_to_destinations(PyObject *module,
                                              PyObject *const *args,
                                              Py_ssize_t nargs,
                                              PyObject *kwnames);
PyObject *binding_buffer_dlpack(PyObject *self, PyObject *const *args,
                                Py_ssize_t nargs, PyObject *kwnames);
PyObject *binding_buffer_dlpack_device(PyObject *self, PyObject *unused);
PyObject *binding_buffer_mmap(PyObject *cls, PyObject *const *args,
                              Py_ssize_t nargs, PyObject *kwnames);
PyObject *binding_buffer_array(PyObject *self, PyObject *const *args,
                               Py_ssize_t nargs, PyObject *kwnames);
PyObject *binding_buffer_cuda_array_interface(PyObject *self, void *closure);

/* DLPack and NumPy (dlpack.c). */
PyObject *binding_from_numpy(PyObject *cls, PyObject *array);
PyObject *binding_buffer_from_numpy(PyObject *cls, PyObject *const *args,
                                    Py_ssize_t nargs, PyObject *kwnames);
/* A Buffer over `array`'s memory (new reference): from_numpy for a NumPy
 * array (a copy where it must), from_dlpack for another DLPack producer;
 * TypeError for anything else. */
PyObject *binding_import_array(binding_state *st, PyObject *array);
PyObject *binding_from_dlpack(PyObject *cls, PyObject *const *args,
                              Py_ssize_t nargs, PyObject *kwnames);
PyObject *binding_to_numpy(PyObject *self, PyObject *unused);
/* numpy, imported on first use; NULL with an ImportError naming `what`.
 * A new reference. */
PyObject *binding_import_numpy(const char *what);
int binding_bridge_traverse(binding_bridge *b, visitproc visit, void *arg);
void binding_bridge_clear(binding_bridge *b);

/* ---- Python protocols (SPEC §15) ---------------------------------------- */

/* Number conversions of Buffer through item(), as NumPy's arrays
 * (buffer_number.c): float(), int(), complex(), bool(), operator.index(),
 * and bytes() as the contents (not bytes(operator.index(buf))). */
PyObject *binding_buffer_float(PyObject *self);
PyObject *binding_buffer_int(PyObject *self);
PyObject *binding_buffer_complex(PyObject *self, PyObject *unused);
int binding_buffer_bool(PyObject *self);
PyObject *binding_buffer_bytes(PyObject *self, PyObject *unused);
PyObject *binding_buffer_index(PyObject *self);

/* The buffer protocol of Buffer (buffer_protocol.c). */
int binding_buffer_getbuffer(PyObject *self, Py_buffer *view, int flags);
void binding_buffer_releasebuffer(PyObject *self, Py_buffer *view);

/* Pickling (pickling.c): Buffer.__reduce_ex__, the function pickles call
 * to rebuild a Buffer, and the __reduce_ex__ of the types that cannot be
 * pickled (queues, events, flags: resources of one process). */
PyObject *binding_buffer_reduce_ex(PyObject *self, PyObject *protocol);
PyObject *binding_rebuild_buffer(PyObject *module, PyObject *const *args,
                                 Py_ssize_t nargs);
PyObject *binding_refuse_pickle(PyObject *self, PyObject *protocol);

/* asyncio (awaitable.c).  An awaitable type's am_await calls
 * binding_await with two functions of its own: `start` arms a core watch
 * (watch.h) on what the object completes, giving `fn` and `ctx` to the
 * core (or sets *out to NULL when that is complete already); `outcome`
 * turns the watch's result into the value of the await (a new reference)
 * or raises (NULL).  binding_await returns the iterator `await` drives
 * (an asyncio future's), or NULL with RuntimeError outside a running
 * event loop. */
typedef mxd_status (*binding_watch_start)(PyObject *owner, mxd_watch_fn fn,
                                          void *ctx, mxd_watch **out,
                                          mxd_error *err);
typedef PyObject *(*binding_await_outcome)(PyObject *owner, mxd_status status,
                                           const mxd_error *err);
PyObject *binding_await(PyObject *owner, binding_watch_start start,
                        binding_await_outcome outcome);
/* The outcome of a wait as synchronize() reports it: None, or ValueError
 * for a driver error. */
PyObject *binding_await_outcome_sync(PyObject *owner, mxd_status status,
                                     const mxd_error *err);
int binding_add_async_types(PyObject *module, binding_state *st);
int binding_async_traverse(binding_async *a, visitproc visit, void *arg);
void binding_async_clear(binding_async *a);
/* _async_stats(): what is armed and pending (tests). */
PyObject *binding_async_stats(PyObject *module, PyObject *unused);

extern PyModuleDef binding_module_def;

/* Our types are heap types created with PyType_FromModuleAndSpec; Device
 * and Buffer may be subclassed in Python, and a subclass has no module of
 * its own: the state is that of the first of our types in its MRO. */
static inline binding_state *binding_type_state(PyTypeObject *type)
{
    return (binding_state *)PyModule_GetState(
        compat_module_by_def(type, &binding_module_def));
}

/* The module object of one of our types (borrowed), or NULL. */
static inline PyObject *binding_module_of(PyTypeObject *type)
{
    return compat_module_by_def(type, &binding_module_def);
}

static inline binding_state *binding_state_of(PyObject *self)
{
    return binding_type_state(Py_TYPE(self));
}

/* ---- Object layouts ----------------------------------------------------- */

typedef struct DeviceObject {
    PyObject_HEAD
    mxd_device *device;      /* never freed by the core */
    PyObject *default_queue; /* cached DeviceQueue, created on first use */
} DeviceObject;

typedef struct QueueObject {
    PyObject_HEAD
    mxd_queue *queue; /* one reference owned */
} QueueObject;

typedef struct EventObject {
    PyObject_HEAD
    mxd_event *event; /* in `storage`; NULL until initialised */
    mxd_event_storage storage;
} EventObject;

/* A new DeviceEvent of `type` on `device` (NULL with an exception set). */
PyObject *binding_event_new(PyTypeObject *type, mxd_device *device,
                            bool enable_timing);

typedef struct FlagObject {
    PyObject_HEAD
    mxd_flag *flag; /* one reference owned */
} FlagObject;

typedef struct CompletionObject {
    PyObject_HEAD
    mxd_completion *completion; /* one reference owned; NULL until made */
} CompletionObject;

int binding_add_completion_type(PyObject *module, binding_state *st);

/* ---- Graphs (graph.c) --------------------------------------------------- */

int binding_add_graph_type(PyObject *module, binding_state *st);
/* queue.end_capture(): a new DeviceGraph, or NULL with an exception. */
PyObject *binding_end_capture(binding_state *st, mxd_queue *queue);
/* _pending_graph(): an empty DeviceGraph that max.driver.capture() fills. */
PyObject *binding_pending_graph(PyObject *module, PyObject *unused);

/* ---- Type creation (one per file) --------------------------------------- */

/* Creates a heap type of the module from spec (with `base`, may be NULL)
 * and adds it to the module: a new reference, or NULL with an exception. */
PyTypeObject *binding_add_type(PyObject *module, PyType_Spec *spec,
                               PyObject *base);

int binding_add_device_types(PyObject *module, binding_state *st);
int binding_add_queue_type(PyObject *module, binding_state *st);
int binding_add_event_type(PyObject *module, binding_state *st);
int binding_add_flag_type(PyObject *module, binding_state *st);
int binding_add_region_type(PyObject *module, binding_state *st);
int binding_add_symmetric_type(PyObject *module, binding_state *st);

/* ---- Cross-type helpers ------------------------------------------------- */

/* __eq__ / __ne__ of a type whose objects wrap a native object: equal iff
 * both wrap the same one.  `native_offset` locates the wrapper's pointer
 * (offsetof(QueueObject, queue), say). */
PyObject *binding_compare_native(PyObject *self, PyObject *other, int op,
                                 size_t native_offset);

/* The cached Device object for a core device (new reference). */
PyObject *binding_device_object(binding_state *st, mxd_device *dev);
/* CPU(id) / Device.cpu(id) after the argument was parsed (new reference). */
PyObject *binding_cpu_from_arg(binding_state *st, const char *fname,
                               PyObject *id);
/* The device's cached default DeviceQueue (borrowed reference). */
PyObject *binding_device_default_queue(DeviceObject *self);
/* The device of a DeviceQueue object. */
static inline mxd_device *binding_stream_device(PyObject *stream)
{
    return mxd_queue_device(((QueueObject *)stream)->queue);
}

/* Wraps a queue reference the caller owns into a DeviceQueue; the reference
 * is consumed even on failure.  Inline: Device (device.c) makes its default
 * queue with it, and DeviceQueue (queue.c) sits above Device. */
static inline PyObject *binding_queue_wrap(binding_state *st, mxd_queue *queue)
{
    QueueObject *self = PyObject_New(QueueObject, st->queue_type);
    if (self == NULL) {
        mxd_queue_release(queue);
        return NULL;
    }
    self->queue = queue;
    return (PyObject *)self;
}

/* set_virtual_device_count and its siblings (virtual.c). */
extern PyMethodDef binding_virtual_functions[];

/* ---- Errors (errors.c) -------------------------------------------------- */

/* HostHazardError (a RuntimeError), made once per process like the core
 * it reports for (errors.c; added to the module by module.c). */
PyObject *binding_hazard_error(void);

/* Sets the Python exception for a failed core call; returns NULL. */
PyObject *binding_raise(const mxd_error *err);
/* The core's message, with the driver's error name and code added when the
 * message lacks them (new reference). */
PyObject *binding_error_text(const mxd_error *err);
/* As binding_raise, with `prefix: ` before the core's message. */
PyObject *binding_raise_prefixed(const char *prefix, const mxd_error *err);

/* ---- Arguments (args.c) ------------------------------------------------- */

/* A parameter list of a native callable: every parameter is
 * positional-or-keyword; the first `required` ones are mandatory. */
typedef struct binding_params {
    const char *fname; /* used as "fname()" in messages */
    const char *const *names;
    Py_ssize_t count;
    Py_ssize_t required;
} binding_params;

/* Fills out[0..count) with borrowed references (NULL when not given) from
 * METH_FASTCALL|METH_KEYWORDS arguments.  Returns -1 with TypeError set. */
int binding_parse_fast(const binding_params *params, PyObject *const *args,
                       Py_ssize_t nargs, PyObject *kwnames, PyObject **out);
/* The same for tp_new's (tuple, dict) arguments. */
int binding_parse_tuple(const binding_params *params, PyObject *args,
                        PyObject *kwargs, PyObject **out);

/* SPEC "u64": an int (or __index__) in 0..2**64-1, else TypeError naming
 * the parameter and the range. */
int binding_parse_u64(const char *fname, const char *param, PyObject *obj,
                      uint64_t *out);
/* An int (or __index__) that fits a C int; values out of that range are
 * clamped to INT_MIN / INT_MAX so that the caller reports them as an
 * invalid id rather than as a type error. */
int binding_parse_device_id(const char *fname, PyObject *obj, int *out);
/* `timeout`: NULL or None -> -1 (forever); int/float seconds >= 0. */
int binding_parse_timeout(const char *fname, PyObject *obj, double *out);
/* The arguments of a method whose only parameter is an optional
 * `timeout`, as above. */
int binding_parse_timeout_only(const char *fname, PyObject *const *args,
                               Py_ssize_t nargs, PyObject *kwnames,
                               double *out);
/* Requires `obj` to be an instance of `type`; TypeError naming the
 * parameter otherwise. */
int binding_check_type(const char *fname, const char *param, PyObject *obj,
                       PyTypeObject *type);
/* Requires `obj` to be callable. */
int binding_check_callable(const char *fname, const char *param, PyObject *obj);

/* The nanobind-style TypeError of SPEC §4 for a call that matches no
 * overload; `signatures` are the overloads without their number.
 * Returns NULL. */
PyObject *binding_overload_error(const char *fname,
                                 const char *const *signatures, size_t count,
                                 PyObject *self, PyObject *const *args,
                                 Py_ssize_t nargs, PyObject *kwnames);

/* A blocking core call with the GIL released: on the main thread the
 * wait's poll callback briefly re-takes the GIL to run signal handlers, so
 * that Ctrl-C interrupts the wait. */
typedef struct binding_wait {
    mxd_wait wait;
    PyThreadState *saved;
} binding_wait;

void binding_wait_init(binding_wait *w, double timeout);
void binding_wait_release_gil(binding_wait *w);
void binding_wait_acquire_gil(binding_wait *w);
/* Remembers which thread is the main one (signal handlers run only there). */
int binding_wait_setup(void);

/* Runs `statement`, an enqueue on `queue`, with the GIL released when the
 * core says the enqueue may block (a full GPU queue behind work that needs
 * a host thread, which may need the GIL); otherwise with the GIL held,
 * which is cheaper.  The statement must not touch Python objects. */
#define BINDING_ENQUEUE(queue, statement)                                      \
    do {                                                                       \
        if (mxd_queue_enqueue_may_block(queue)) {                              \
            Py_BEGIN_ALLOW_THREADS                                             \
                statement;                                                     \
            Py_END_ALLOW_THREADS                                               \
        } else {                                                               \
            statement;                                                         \
        }                                                                      \
    } while (0)

/* ---- Host functions (hostfn.c) ------------------------------------------ */

extern const mxd_host_runner binding_host_runner;

/* Parses (fn) and enqueues fn() on `queue`. */
PyObject *binding_enqueue_host_fn(const char *fname, mxd_queue *queue,
                                  PyObject *const *args, Py_ssize_t nargs,
                                  PyObject *kwnames);
/* Parses (fn, flag, value, cpu) and enqueues the async host function. */
PyObject *binding_enqueue_async_host_fn(binding_state *st, const char *fname,
                                        mxd_queue *queue, PyObject *const *args,
                                        Py_ssize_t nargs, PyObject *kwnames);
/* The graph `queue` captures keeps a reference to obj until it is gone
 * (an event it records or waits for).  -1 with an exception. */
int binding_keep_in_graph(mxd_queue *queue, PyObject *obj);
/* The same when `queue` captures (one call on the hot path otherwise). */
static inline int binding_keep_in_capture(mxd_queue *queue, PyObject *obj)
{
    return mxd_queue_is_capturing(queue) ? binding_keep_in_graph(queue, obj)
                                         : 0;
}
/* The atexit hook: stops host work and refuses further GIL entries. */
PyObject *binding_atexit(PyObject *module, PyObject *unused);
/* __unsafe_pack_py_host_func(fn) -> (trampoline, data). */
PyObject *binding_pack_host_fn(PyObject *module, PyObject *const *args,
                               Py_ssize_t nargs, PyObject *kwnames);

/* ---- Docstring helper --------------------------------------------------- */

/* "name(sig)\n--\n\ndoc": the convention from which CPython derives
 * __text_signature__. */
#define BINDING_DOC(name, sig, doc) name sig "\n--\n\n" doc

#endif /* MXD_BINDING_H */
