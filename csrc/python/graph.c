/* DeviceGraph: a captured graph of a queue's work, replayed by launch()
 * (SPEC §16).  Made by DeviceQueue.end_capture(), or empty by
 * max.driver.capture(), which fills it when its block ends. */
#include "binding.h"

typedef struct GraphObject {
    PyObject_HEAD
    mxd_graph *graph; /* one reference; NULL while the capture runs */
} GraphObject;

static mxd_graph *graph_of(PyObject *self)
{
    return ((GraphObject *)self)->graph;
}

/* The graph, or NULL with RuntimeError while its capture has not ended. */
static mxd_graph *ended(PyObject *self)
{
    mxd_graph *g = graph_of(self);
    if (g == NULL)
        PyErr_SetString(PyExc_RuntimeError,
                        "the capture of this DeviceGraph has not ended yet: "
                        "use it after the `with capture(queue)` block");
    return g;
}

static PyObject *graph_wrap(binding_state *st, mxd_graph *g)
{
    GraphObject *self = PyObject_New(GraphObject, st->graph_type);
    if (self == NULL) {
        mxd_graph_release(g);
        return NULL;
    }
    self->graph = g;
    return (PyObject *)self;
}

/* With the GIL held: the host functions the graph owns are released at
 * once (on another thread they would be handed to the main thread). */
static void graph_dealloc(PyObject *self)
{
    PyTypeObject *type = Py_TYPE(self);
    mxd_graph_release(graph_of(self));
    type->tp_free(self);
    Py_DECREF(type);
}

/* ---- Ending a capture --------------------------------------------------- */

PyObject *binding_end_capture(binding_state *st, mxd_queue *queue)
{
    mxd_graph *g = NULL;
    mxd_error err;
    mxd_status status;
    Py_BEGIN_ALLOW_THREADS /* instantiating may take a while */
        status = mxd_queue_end_capture(queue, &g, &err);
    Py_END_ALLOW_THREADS
    if (status != MXD_OK)
        return binding_raise(&err);
    return graph_wrap(st, g);
}

/* _pending_graph(): an empty DeviceGraph for max.driver.capture(). */
PyObject *binding_pending_graph(PyObject *module, PyObject *unused)
{
    (void)unused;
    binding_state *st = PyModule_GetState(module);
    GraphObject *self = PyObject_New(GraphObject, st->graph_type);
    if (self != NULL)
        self->graph = NULL;
    return (PyObject *)self;
}

/* graph._end_capture(queue): ends queue's capture into this empty graph. */
static PyObject *graph_end_capture(PyObject *self, PyObject *queue)
{
    binding_state *st = binding_state_of(self);
    if (binding_check_type("_end_capture", "queue", queue, st->queue_type) < 0)
        return NULL;
    if (graph_of(self) != NULL) {
        PyErr_SetString(PyExc_RuntimeError,
                        "_end_capture(): the graph holds a capture already");
        return NULL;
    }
    PyObject *made = binding_end_capture(st, ((QueueObject *)queue)->queue);
    if (made == NULL)
        return NULL;
    ((GraphObject *)self)->graph = graph_of(made);
    ((GraphObject *)made)->graph = NULL;
    Py_DECREF(made);
    Py_RETURN_NONE;
}

/* ---- launch ------------------------------------------------------------- */

static const char *const launch_names[] = {"queue"};

static PyObject *graph_launch(PyObject *self, PyObject *const *args,
                              Py_ssize_t nargs, PyObject *kwnames)
{
    PyObject *arg = NULL;
    if (nargs == 1 && kwnames == NULL) {
        arg = args[0];
    } else if (nargs != 0 || kwnames != NULL) {
        const binding_params params = {"launch", launch_names, 1, 0};
        if (binding_parse_fast(&params, args, nargs, kwnames, &arg) < 0)
            return NULL;
    }
    binding_state *st = binding_state_of(self);
    if (arg != NULL && arg != Py_None &&
        binding_check_type("launch", "queue", arg, st->queue_type) < 0)
        return NULL;
    mxd_graph *g = ended(self);
    if (g == NULL)
        return NULL;
    mxd_queue *queue = arg != NULL && arg != Py_None
                           ? ((QueueObject *)arg)->queue
                           : mxd_graph_queue(g);
    mxd_error err;
    mxd_status status;
    BINDING_ENQUEUE(queue, status = mxd_graph_launch(g, queue, &err));
    if (status != MXD_OK)
        return binding_raise(&err);
    Py_RETURN_NONE;
}

/* ---- Properties and text ------------------------------------------------ */

static PyObject *graph_get_num_nodes(PyObject *self, void *closure)
{
    (void)closure;
    mxd_graph *g = ended(self);
    return g ? PyLong_FromLong(mxd_graph_node_count(g)) : NULL;
}

static PyObject *graph_get_device(PyObject *self, void *closure)
{
    (void)closure;
    mxd_graph *g = ended(self);
    return g ? binding_device_object(binding_state_of(self),
                                     mxd_graph_device(g))
             : NULL;
}

static PyObject *graph_to_dot(PyObject *self, PyObject *unused)
{
    (void)unused;
    mxd_graph *g = ended(self);
    if (g == NULL)
        return NULL;
    char *text = mxd_graph_dot(g);
    if (text == NULL)
        return PyErr_NoMemory();
    PyObject *result = PyUnicode_FromString(text);
    free(text);
    return result;
}

static PyObject *graph_repr(PyObject *self)
{
    mxd_graph *g = graph_of(self);
    if (g == NULL)
        return PyUnicode_FromString("DeviceGraph(<capture not ended>)");
    mxd_device *dev = mxd_graph_device(g);
    int n = mxd_graph_node_count(g);
    return PyUnicode_FromFormat(
        "DeviceGraph(%s[%d], %d node%s, captured on %s[%d]:queue@%p)",
        mxd_device_api(dev), mxd_device_id(dev), n, n == 1 ? "" : "s",
        mxd_device_api(dev), mxd_device_id(dev), (void *)mxd_graph_queue(g));
}

#define FASTCALL_KW(fn) (PyCFunction)(void (*)(void))(fn)

static PyMethodDef graph_methods[] = {
    {"launch", FASTCALL_KW(graph_launch), METH_FASTCALL | METH_KEYWORDS,
     BINDING_DOC("launch", "($self, /, queue=None)",
                 "Replays every node of the graph, in captured order, on "
                 "`queue` (default: the queue it was captured on; any queue "
                 "of its device). Returns at once; launches are ordered "
                 "like other work on the queue, each after the previous "
                 "launch of this graph, and wait for (then stamp) the "
                 "hazard records of the buffers the graph touches.")},
    {"to_dot", graph_to_dot, METH_NOARGS,
     BINDING_DOC("to_dot", "($self, /)",
                 "Graphviz source of the graph: one node per captured "
                 "operation (kind, sizes, buffers), edges in queue order "
                 "and for joins between queues.")},
    {"_end_capture", graph_end_capture, METH_O,
     BINDING_DOC("_end_capture", "($self, queue, /)",
                 "Ends queue's capture into this empty graph "
                 "(max.driver.capture's exit; not for direct use).")},
    {"__reduce_ex__", binding_refuse_pickle, METH_O,
     BINDING_DOC("__reduce_ex__", "($self, protocol, /)",
                 "Raises TypeError: a graph is a resource of one process.")},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef graph_getset[] = {
    {"num_nodes", graph_get_num_nodes, NULL,
     "The number of captured operations (copies, host functions, waits, "
     "event records).",
     NULL},
    {"device", graph_get_device, NULL, "The Device the graph runs on.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot graph_slots[] = {
    {Py_tp_doc, "A captured graph of queue work (DeviceQueue.end_capture(), "
                "max.driver.capture()): replay it with launch()."},
    {Py_tp_dealloc, graph_dealloc},
    {Py_tp_repr, graph_repr},
    {Py_tp_methods, graph_methods},
    {Py_tp_getset, graph_getset},
    {0, NULL},
};

/* Holds no Python references (the core holds the graph's). */
static PyType_Spec graph_spec = {
    .name = "max._core.driver.DeviceGraph",
    .basicsize = sizeof(GraphObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE |
             Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = graph_slots,
};

int binding_add_graph_type(PyObject *module, binding_state *st)
{
    st->graph_type = binding_add_type(module, &graph_spec, NULL);
    return st->graph_type == NULL ? -1 : 0;
}
