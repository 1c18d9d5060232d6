/* The max._core.driver extension module: multi-phase initialisation, module
 * state, and the module-level functions. */
#include "binding.h"

/* ---- Module functions --------------------------------------------------- */

static PyObject *accelerator_count(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    int virtual_count = mxd_virtual_count();
    return PyLong_FromLong(virtual_count > 0 ? virtual_count
                                             : mxd_accelerator_count());
}

static PyObject *accelerator_api(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    const char *api = mxd_accelerator_api();
    return PyUnicode_FromString(api != NULL ? api : "cpu");
}

static PyObject *optional_str(const char *text)
{
    return text != NULL ? PyUnicode_FromString(text) : Py_NewRef(Py_None);
}

static PyObject *selection_dict(const mxd_selection *sel)
{
    return Py_BuildValue("{s:s,s:N,s:O,s:i,s:N,s:O}", "api", sel->api,
                         "library", optional_str(sel->library), "loaded",
                         sel->loaded ? Py_True : Py_False, "device_count",
                         sel->device_count, "error", optional_str(sel->error),
                         "chosen", sel->chosen ? Py_True : Py_False);
}

static PyObject *backend_selection(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    size_t count = mxd_selection_count();
    PyObject *list = PyList_New((Py_ssize_t)count);
    if (list == NULL)
        return NULL;
    for (size_t i = 0; i < count; i++) {
        PyObject *item = selection_dict(mxd_selection_at(i));
        if (item == NULL) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)i, item);
    }
    return list;
}

/* Driver calls that may take a while (enabling peer access maps every
 * allocation of the peer): without the GIL. */
static PyObject *enable_all_peer_access(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    mxd_error err;
    mxd_status status;
    Py_BEGIN_ALLOW_THREADS
        status = mxd_enable_all_peer_access(&err);
    Py_END_ALLOW_THREADS
    if (status == MXD_DRIVER) {
        /* RuntimeError, as MAX documents for this call (a driver failure
         * is a ValueError everywhere else, SPEC 8). */
        PyObject *text = binding_error_text(&err);
        if (text) {
            PyErr_SetObject(PyExc_RuntimeError, text);
            Py_DECREF(text);
        }
        return NULL;
    }
    if (status != MXD_OK)
        return binding_raise(&err);
    Py_RETURN_NONE;
}

static PyObject *cleanup_failures(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    char last[sizeof((mxd_error *)0)->message];
    size_t count = mxd_cleanup_failures(last, sizeof last);
    return Py_BuildValue("(ns)", (Py_ssize_t)count, last);
}

static PyMethodDef module_methods[] = {
    {"accelerator_count", accelerator_count, METH_NOARGS,
     BINDING_DOC("accelerator_count", "()",
                 "The number of accelerators of the chosen backend (0 when "
                 "there is none); in virtual device mode, the virtual "
                 "device count.")},
    {"accelerator_api", accelerator_api, METH_NOARGS,
     BINDING_DOC("accelerator_api", "()",
                 "\"cuda\" or \"hip\" for the chosen backend, \"cpu\" when "
                 "there is no accelerator.")},
    {"backend_selection", backend_selection, METH_NOARGS,
     BINDING_DOC("backend_selection", "()",
                 "How the accelerator backend was chosen at import: one dict "
                 "per backend considered, in order, with keys api, library, "
                 "loaded, device_count, error and chosen.")},
    {"enable_all_peer_access", enable_all_peer_access, METH_NOARGS,
     BINDING_DOC("enable_all_peer_access", "()",
                 "Enables peer access between every pair of accelerators "
                 "whose driver allows it (Device.can_access), in both "
                 "directions, and grants each such peer access to the "
                 "device's memory pool. Idempotent; nothing to do with "
                 "fewer than two accelerators. RuntimeError (as MAX) "
                 "naming the driver's error if enabling fails, or the "
                 "entry point the driver lacks.")},
    {"begin_launch_trace", binding_begin_launch_trace, METH_NOARGS,
     BINDING_DOC("begin_launch_trace", "()",
                 "Starts recording, process-wide, every copy and fill any "
                 "queue enqueues (and forgets an earlier recording).")},
    {"take_launch_trace", binding_take_launch_trace, METH_NOARGS,
     BINDING_DOC("take_launch_trace", "()",
                 "Stops recording and returns the LaunchTraceEntry list in "
                 "enqueue order (empty when nothing was recording).")},
    {"batch_inplace_copy",
     (PyCFunction)(void (*)(void))binding_batch_inplace_copy,
     METH_FASTCALL | METH_KEYWORDS,
     BINDING_DOC("batch_inplace_copy", "(dsts, srcs)",
                 "dsts[i].inplace_copy_from(srcs[i]) for every i (pairs with "
                 "dst is src are skipped), all checked before anything is "
                 "enqueued: ValueError for unequal lengths or any mismatch, "
                 "and then nothing is copied.")},
    {"_batch_inplace_copy",
     (PyCFunction)(void (*)(void))binding_batch_inplace_copy,
     METH_FASTCALL | METH_KEYWORDS,
     BINDING_DOC("_batch_inplace_copy", "(dsts, srcs)",
                 "MAX 26.7's name for batch_inplace_copy, which it is "
                 "here.")},
    {"_release_buffers_to_borrowed",
     (PyCFunction)(void (*)(void))binding_release_to_borrowed,
     METH_FASTCALL | METH_KEYWORDS,
     BINDING_DOC("_release_buffers_to_borrowed", "(buffers)",
                 "A new handle for each buffer over the same view of the "
                 "same storage, sharing its hazard record (MAX 26.7's "
                 "borrowed wrappers). The memory stays valid while any "
                 "handle lives.")},
    {"copy_pinned_to_destinations",
     (PyCFunction)(void (*)(void))binding_copy_pinned_to_destinations,
     METH_FASTCALL | METH_KEYWORDS,
     BINDING_DOC("copy_pinned_to_destinations", "(source, destinations)",
                 "Copies one host buffer (pinned or CPU) into each "
                 "destination buffer, checked in full first. The source's "
                 "hazard record keeps it alive and unwritten until every "
                 "copy has read it.")},
    {"_pending_graph", binding_pending_graph, METH_NOARGS,
     BINDING_DOC("_pending_graph", "()",
                 "An empty DeviceGraph that max.driver.capture() fills when "
                 "its block ends (not for direct use).")},
    {"_cleanup_failures", cleanup_failures, METH_NOARGS,
     BINDING_DOC("_cleanup_failures", "()",
                 "(count, last message) of the driver destroys and frees "
                 "that failed on the core's cleanup thread, where no "
                 "exception can reach anyone.")},
    {"_rebuild_buffer", (PyCFunction)(void (*)(void))binding_rebuild_buffer,
     METH_FASTCALL,
     BINDING_DOC("_rebuild_buffer", "(data, dtype, shape, device, pinned, /)",
                 "Rebuilds a pickled Buffer: what Buffer.__reduce_ex__ "
                 "names, not for direct use.")},
    {"_async_stats", binding_async_stats, METH_NOARGS,
     BINDING_DOC("_async_stats", "()",
                 "What awaits have armed and left: a dict with "
                 "armed_watches, waiters, event_loops and watcher_thread "
                 "(for tests).")},
    {"__unsafe_pack_py_host_func",
     (PyCFunction)(void (*)(void))binding_pack_host_fn,
     METH_FASTCALL | METH_KEYWORDS,
     BINDING_DOC("__unsafe_pack_py_host_func", "(fn)",
                 "Returns (trampoline_ptr, user_data_ptr): calling the C "
                 "function void trampoline(void *) once with user_data_ptr "
                 "calls fn() under the GIL and releases fn. Use the pair "
                 "exactly once.")},
    {NULL, NULL, 0, NULL},
};

/* ---- Exec --------------------------------------------------------------- */

static int init_core(void)
{
    mxd_error err;
    if (mxd_init(&binding_host_runner, &err) == MXD_OK)
        return 0;
    /* Exactly ImportError (not ModuleNotFoundError): the module exists, the
     * forced backend does not work.  It carries backend_selection(), the
     * reasons, for whoever reports the failure (python -m max.driver). */
    PyObject *error = PyObject_CallFunction(
        PyExc_ImportError, "s",
        err.message[0] != '\0'
            ? err.message
            : "max._core.driver: backend initialisation failed");
    PyObject *reasons = error ? backend_selection(NULL, NULL) : NULL;
    if (reasons &&
        PyObject_SetAttrString(error, "backend_selection", reasons) == 0)
        PyErr_SetObject(PyExc_ImportError, error);
    Py_XDECREF(reasons);
    Py_XDECREF(error);
    return -1;
}

static PyMethodDef atexit_def = {
    "_shutdown", binding_atexit, METH_NOARGS,
    BINDING_DOC("_shutdown", "()",
                "Stops pending host work at interpreter exit.")};

/* Host work must stop taking the GIL before the interpreter tears down;
 * atexit hooks run while it is still whole. */
static int register_atexit(PyObject *module)
{
    PyObject *hook = PyCFunction_NewEx(&atexit_def, module, NULL);
    if (hook == NULL)
        return -1;
    PyObject *atexit = PyImport_ImportModule("atexit");
    PyObject *result =
        atexit ? PyObject_CallMethod(atexit, "register", "O", hook) : NULL;
    Py_XDECREF(atexit);
    Py_DECREF(hook);
    if (result == NULL)
        return -1;
    Py_DECREF(result);
    return 0;
}

static int module_exec(PyObject *module)
{
    binding_state *st = PyModule_GetState(module);
    if (init_core() < 0 || binding_wait_setup() < 0 ||
        binding_add_device_types(module, st) < 0 ||
        binding_add_queue_type(module, st) < 0 ||
        binding_add_event_type(module, st) < 0 ||
        binding_add_flag_type(module, st) < 0 ||
        binding_add_region_type(module, st) < 0 ||
        binding_add_symmetric_type(module, st) < 0 ||
        binding_add_completion_type(module, st) < 0 ||
        binding_add_graph_type(module, st) < 0 ||
        binding_add_buffer_types(module, st) < 0 ||
        binding_add_trace_type(module, st) < 0 ||
        PyModule_AddFunctions(module, binding_virtual_functions) < 0 ||
        binding_add_async_types(module, st) < 0 || register_atexit(module) < 0)
        return -1;
    return 0;
}

/* ---- State lifetime ----------------------------------------------------- */

static int module_traverse(PyObject *module, visitproc visit, void *arg)
{
    binding_state *st = PyModule_GetState(module);
    if (st == NULL)
        return 0;
    Py_VISIT(st->device_type);
    Py_VISIT(st->cpu_type);
    Py_VISIT(st->accelerator_type);
    Py_VISIT(st->queue_type);
    Py_VISIT(st->event_type);
    Py_VISIT(st->flag_type);
    Py_VISIT(st->buffer_type);
    Py_VISIT(st->pinned_buffer_type);
    Py_VISIT(st->dtype_type);
    for (int i = 0; i < MXD_DTYPE_MEMBERS; i++)
        Py_VISIT(st->dtypes[i]);
    Py_VISIT(st->trace_entry_type);
    Py_VISIT(st->operation_kind);
    Py_VISIT(st->memcpy_kind);
    Py_VISIT(st->usage_type);
    for (int i = 0; i < BUFFER_USAGES; i++)
        Py_VISIT(st->usages[i]);
    Py_VISIT(st->completion_type);
    Py_VISIT(st->graph_type);
    Py_VISIT(st->cpu);
    Py_VISIT(st->virtual_devices);
    int visited = binding_bridge_traverse(&st->bridge, visit, arg);
    if (visited == 0)
        visited = binding_async_traverse(&st->async, visit, arg);
    if (visited != 0)
        return visited;
    for (int i = 0; st->accelerators != NULL && i < st->accelerator_count; i++)
        Py_VISIT(st->accelerators[i]);
    return 0;
}

static int module_clear(PyObject *module)
{
    binding_state *st = PyModule_GetState(module);
    if (st == NULL)
        return 0;
    for (int i = 0; st->accelerators != NULL && i < st->accelerator_count; i++)
        Py_CLEAR(st->accelerators[i]);
    Py_CLEAR(st->cpu);
    Py_CLEAR(st->virtual_devices);
    binding_bridge_clear(&st->bridge);
    binding_async_clear(&st->async);
    Py_CLEAR(st->device_type);
    Py_CLEAR(st->cpu_type);
    Py_CLEAR(st->accelerator_type);
    Py_CLEAR(st->queue_type);
    Py_CLEAR(st->event_type);
    Py_CLEAR(st->flag_type);
    Py_CLEAR(st->buffer_type);
    Py_CLEAR(st->pinned_buffer_type);
    Py_CLEAR(st->dtype_type);
    for (int i = 0; i < MXD_DTYPE_MEMBERS; i++)
        Py_CLEAR(st->dtypes[i]);
    Py_CLEAR(st->trace_entry_type);
    Py_CLEAR(st->operation_kind);
    Py_CLEAR(st->memcpy_kind);
    Py_CLEAR(st->usage_type);
    for (int i = 0; i < BUFFER_USAGES; i++)
        Py_CLEAR(st->usages[i]);
    Py_CLEAR(st->completion_type);
    Py_CLEAR(st->graph_type);
    return 0;
}

static void module_free(void *module)
{
    module_clear(module);
    binding_state *st = PyModule_GetState(module);
    if (st != NULL) {
        PyMem_Free(st->accelerators);
        st->accelerators = NULL;
        st->accelerator_count = 0;
    }
}

static PyModuleDef_Slot module_slots[] = {
    {Py_mod_exec, module_exec},
#if COMPAT_HAS_MULTIPLE_INTERPRETERS_SLOT
    /* The host runner enters the main interpreter (PyGILState_Ensure). */
    {Py_mod_multiple_interpreters, Py_MOD_MULTIPLE_INTERPRETERS_NOT_SUPPORTED},
#endif
    {0, NULL},
};

PyModuleDef binding_module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "max._core.driver",
    .m_doc = "Devices, queues, events and completion flags: the native part "
             "of max.driver.",
    .m_size = sizeof(binding_state),
    .m_methods = module_methods,
    .m_slots = module_slots,
    .m_traverse = module_traverse,
    .m_clear = module_clear,
    .m_free = module_free,
};

PyMODINIT_FUNC PyInit_driver(void)
{
    return PyModuleDef_Init(&binding_module_def);
}
