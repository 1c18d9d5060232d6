/* Argument parsing shared by every native callable.
 *
 * Hot methods are METH_FASTCALL|METH_KEYWORDS and call these small parsers
 * instead of PyArg_ParseTupleAndKeywords, whose format-string interpretation
 * costs more than the core operation itself. */
#include "binding.h"

#include <limits.h>
#include <math.h>
#include <string.h>

/* ---- Positional-or-keyword parameters ----------------------------------- */

/* Keyword names are nearly always compact ASCII strings (identifiers):
 * compared by length and bytes, which is several times cheaper than
 * PyUnicode_CompareWithASCIIString; a name that is not ASCII matches none
 * of our (ASCII) parameter names. */
static Py_ssize_t find_param(const binding_params *params, PyObject *name)
{
    if (!PyUnicode_IS_COMPACT_ASCII(name))
        return -1;
    const char *text = (const char *)PyUnicode_DATA(name);
    size_t length = (size_t)PyUnicode_GET_LENGTH(name);
    for (Py_ssize_t i = 0; i < params->count; i++) {
        const char *param = params->names[i];
        if (param[0] == text[0] && strncmp(param, text, length) == 0 &&
            param[length] == '\0')
            return i;
    }
    return -1;
}

static int take_positional(const binding_params *params, PyObject *const *args,
                           Py_ssize_t nargs, PyObject **out)
{
    if (nargs > params->count) {
        PyErr_Format(
            PyExc_TypeError, "%s() takes at most %zd argument%s (%zd given)",
            params->fname, params->count, params->count == 1 ? "" : "s", nargs);
        return -1;
    }
    for (Py_ssize_t i = 0; i < params->count; i++)
        out[i] = i < nargs ? args[i] : NULL;
    return 0;
}

static int take_keyword(const binding_params *params, PyObject *name,
                        PyObject *value, PyObject **out)
{
    if (!PyUnicode_Check(name)) {
        PyErr_Format(PyExc_TypeError, "%s() keywords must be strings",
                     params->fname);
        return -1;
    }
    Py_ssize_t i = find_param(params, name);
    if (i < 0) {
        PyErr_Format(PyExc_TypeError,
                     "%s() got an unexpected keyword argument '%U'",
                     params->fname, name);
        return -1;
    }
    if (out[i] != NULL) {
        PyErr_Format(PyExc_TypeError,
                     "%s() got multiple values for argument '%s'",
                     params->fname, params->names[i]);
        return -1;
    }
    out[i] = value;
    return 0;
}

static int check_required(const binding_params *params, PyObject **out)
{
    for (Py_ssize_t i = 0; i < params->required; i++) {
        if (out[i] == NULL) {
            PyErr_Format(PyExc_TypeError,
                         "%s() missing required argument '%s' (pos %zd)",
                         params->fname, params->names[i], i + 1);
            return -1;
        }
    }
    return 0;
}

int binding_parse_fast(const binding_params *params, PyObject *const *args,
                       Py_ssize_t nargs, PyObject *kwnames, PyObject **out)
{
    if (take_positional(params, args, nargs, out) < 0)
        return -1;
    if (kwnames != NULL) {
        Py_ssize_t nkw = PyTuple_GET_SIZE(kwnames);
        for (Py_ssize_t k = 0; k < nkw; k++) {
            if (take_keyword(params, PyTuple_GET_ITEM(kwnames, k),
                             args[nargs + k], out) < 0)
                return -1;
        }
    }
    return check_required(params, out);
}

int binding_parse_tuple(const binding_params *params, PyObject *args,
                        PyObject *kwargs, PyObject **out)
{
    Py_ssize_t nargs = PyTuple_GET_SIZE(args);
    if (take_positional(params, &PyTuple_GET_ITEM(args, 0), nargs, out) < 0)
        return -1;
    if (kwargs != NULL) {
        Py_ssize_t pos = 0;
        PyObject *name;
        PyObject *value;
        while (PyDict_Next(kwargs, &pos, &name, &value)) {
            if (take_keyword(params, name, value, out) < 0)
                return -1;
        }
    }
    return check_required(params, out);
}

/* ---- Value conversions -------------------------------------------------- */

/* Only ints and objects with __index__ count as integers: a float or a str
 * is a type error, never silently truncated. */
static PyObject *as_index(PyObject *obj)
{
    if (PyLong_Check(obj))
        return Py_NewRef(obj);
    if (PyIndex_Check(obj))
        return PyNumber_Index(obj);
    return NULL;
}

static int u64_type_error(const char *fname, const char *param, PyObject *obj)
{
    PyErr_Format(PyExc_TypeError,
                 "%s(): argument '%s' must be an int in the range "
                 "0..2**64-1 (0..18446744073709551615), not %R",
                 fname, param, obj);
    return -1;
}

int binding_parse_u64(const char *fname, const char *param, PyObject *obj,
                      uint64_t *out)
{
    if (PyLong_CheckExact(obj)) { /* the common case, without new refs */
        unsigned long long value = PyLong_AsUnsignedLongLong(obj);
        if (value != (unsigned long long)-1 || !PyErr_Occurred()) {
            *out = (uint64_t)value;
            return 0;
        }
        PyErr_Clear(); /* negative or too large: reported below */
    }
    PyObject *index = as_index(obj);
    if (index == NULL) {
        if (PyErr_Occurred() && !PyErr_ExceptionMatches(PyExc_TypeError))
            return -1;
        PyErr_Clear();
        return u64_type_error(fname, param, obj);
    }
    unsigned long long value = PyLong_AsUnsignedLongLong(index);
    Py_DECREF(index);
    if (value == (unsigned long long)-1 && PyErr_Occurred()) {
        if (!PyErr_ExceptionMatches(PyExc_OverflowError))
            return -1;
        PyErr_Clear();
        return u64_type_error(fname, param, obj);
    }
    *out = (uint64_t)value;
    return 0;
}

int binding_parse_device_id(const char *fname, PyObject *obj, int *out)
{
    PyObject *index = as_index(obj);
    if (index == NULL) {
        if (PyErr_Occurred() && !PyErr_ExceptionMatches(PyExc_TypeError))
            return -1;
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError,
                     "%s(): argument 'id' must be an int, not %.200s", fname,
                     Py_TYPE(obj)->tp_name);
        return -1;
    }
    int overflow = 0;
    long long value = PyLong_AsLongLongAndOverflow(index, &overflow);
    Py_DECREF(index);
    if (value == -1 && PyErr_Occurred())
        return -1;
    if (overflow > 0 || value > INT_MAX)
        *out = INT_MAX;
    else if (overflow < 0 || value < INT_MIN)
        *out = INT_MIN;
    else
        *out = (int)value;
    return 0;
}

static int timeout_seconds(PyObject *obj, double *seconds)
{
    if (PyFloat_Check(obj)) {
        *seconds = PyFloat_AS_DOUBLE(obj);
        return 0;
    }
    PyObject *index = as_index(obj);
    if (index == NULL)
        return -1;
    *seconds = PyLong_AsDouble(index);
    if (*seconds == -1.0 && PyErr_Occurred()) {
        if (!PyErr_ExceptionMatches(PyExc_OverflowError)) {
            Py_DECREF(index);
            return -1;
        }
        /* An int too large for a double is a timeout of "forever" (or, if
         * negative, still negative). */
        PyErr_Clear();
        int overflow = 0;
        (void)PyLong_AsLongLongAndOverflow(index, &overflow);
        *seconds = overflow < 0 ? -INFINITY : INFINITY;
    }
    Py_DECREF(index);
    return 0;
}

int binding_parse_timeout(const char *fname, PyObject *obj, double *out)
{
    if (obj == NULL || obj == Py_None) {
        *out = -1.0;
        return 0;
    }
    double seconds;
    if (timeout_seconds(obj, &seconds) < 0) {
        if (PyErr_Occurred() && !PyErr_ExceptionMatches(PyExc_TypeError))
            return -1;
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError,
                     "%s(): argument 'timeout' must be None or a number of "
                     "seconds (int or float), not %.200s",
                     fname, Py_TYPE(obj)->tp_name);
        return -1;
    }
    if (isnan(seconds) || seconds < 0) {
        PyErr_Format(PyExc_ValueError,
                     "%s(): argument 'timeout' must be non-negative, not %R",
                     fname, obj);
        return -1;
    }
    /* The core reads a negative timeout as "forever". */
    *out = isinf(seconds) ? -1.0 : seconds;
    return 0;
}

static const char *const timeout_names[] = {"timeout"};

int binding_parse_timeout_only(const char *fname, PyObject *const *args,
                               Py_ssize_t nargs, PyObject *kwnames, double *out)
{
    *out = -1.0;
    if (nargs == 0 && kwnames == NULL) /* the common call: no parsing */
        return 0;
    const binding_params params = {fname, timeout_names, 1, 0};
    PyObject *arg;
    if (binding_parse_fast(&params, args, nargs, kwnames, &arg) < 0)
        return -1;
    return binding_parse_timeout(fname, arg, out);
}

int binding_check_type(const char *fname, const char *param, PyObject *obj,
                       PyTypeObject *type)
{
    if (PyObject_TypeCheck(obj, type))
        return 0;
    PyObject *expected = compat_type_qualname(type);
    if (expected == NULL)
        return -1;
    PyErr_Format(PyExc_TypeError, "%s(): argument '%s' must be %U, not %.200s",
                 fname, param, expected, Py_TYPE(obj)->tp_name);
    Py_DECREF(expected);
    return -1;
}

int binding_check_callable(const char *fname, const char *param, PyObject *obj)
{
    if (PyCallable_Check(obj))
        return 0;
    PyErr_Format(PyExc_TypeError,
                 "%s(): argument '%s' must be callable, not %.200s", fname,
                 param, Py_TYPE(obj)->tp_name);
    return -1;
}

/* ---- The overload TypeError (SPEC §4) ----------------------------------- */

static int append_type_name(PyObject *parts, PyObject *obj)
{
    PyObject *name = compat_type_qualname(Py_TYPE(obj));
    if (name == NULL)
        return -1;
    int rc = PyList_Append(parts, name);
    Py_DECREF(name);
    return rc;
}

/* nanobind writes keyword arguments as "kwargs = { name: type, ... }". */
static int append_kwargs(PyObject *parts, PyObject *const *values,
                         PyObject *kwnames)
{
    PyObject *items = PyList_New(0);
    if (items == NULL)
        return -1;
    for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(kwnames); k++) {
        PyObject *type = compat_type_qualname(Py_TYPE(values[k]));
        PyObject *item =
            type ? PyUnicode_FromFormat("%U: %U", PyTuple_GET_ITEM(kwnames, k),
                                        type)
                 : NULL;
        Py_XDECREF(type);
        if (item == NULL || PyList_Append(items, item) < 0) {
            Py_XDECREF(item);
            Py_DECREF(items);
            return -1;
        }
        Py_DECREF(item);
    }
    PyObject *sep = PyUnicode_FromString(", ");
    PyObject *joined = sep ? PyUnicode_Join(sep, items) : NULL;
    Py_XDECREF(sep);
    Py_DECREF(items);
    PyObject *part =
        joined ? PyUnicode_FromFormat("kwargs = { %U }", joined) : NULL;
    Py_XDECREF(joined);
    if (part == NULL)
        return -1;
    int rc = PyList_Append(parts, part);
    Py_DECREF(part);
    return rc;
}

static PyObject *invoked_types(PyObject *self, PyObject *const *args,
                               Py_ssize_t nargs, PyObject *kwnames)
{
    PyObject *parts = PyList_New(0);
    if (parts == NULL)
        return NULL;
    int rc = append_type_name(parts, self);
    for (Py_ssize_t i = 0; rc == 0 && i < nargs; i++)
        rc = append_type_name(parts, args[i]);
    if (rc == 0 && kwnames != NULL && PyTuple_GET_SIZE(kwnames) > 0)
        rc = append_kwargs(parts, args + nargs, kwnames);
    PyObject *sep = rc == 0 ? PyUnicode_FromString(", ") : NULL;
    PyObject *joined = sep ? PyUnicode_Join(sep, parts) : NULL;
    Py_XDECREF(sep);
    Py_DECREF(parts);
    return joined;
}

PyObject *binding_overload_error(const char *fname,
                                 const char *const *signatures, size_t count,
                                 PyObject *self, PyObject *const *args,
                                 Py_ssize_t nargs, PyObject *kwnames)
{
    PyObject *types = invoked_types(self, args, nargs, kwnames);
    if (types == NULL)
        return NULL;
    PyObject *message = PyUnicode_FromFormat(
        "%s(): incompatible function arguments. The following argument "
        "types are supported:\n",
        fname);
    for (size_t i = 0; message != NULL && i < count; i++) {
        PyObject *line =
            PyUnicode_FromFormat("    %zu. %s\n", i + 1, signatures[i]);
        PyUnicode_AppendAndDel(&message, line);
    }
    if (message != NULL) {
        PyObject *tail =
            PyUnicode_FromFormat("\nInvoked with types: %U", types);
        PyUnicode_AppendAndDel(&message, tail);
    }
    Py_DECREF(types);
    if (message != NULL) {
        PyErr_SetObject(PyExc_TypeError, message);
        Py_DECREF(message);
    }
    return NULL;
}

/* ---- Interruptible waits ------------------------------------------------ */

/* Signal handlers run only on the main thread, so only waits there need to
 * come back for them; other threads wait without touching the GIL. */
static unsigned long main_thread_ident;

int binding_wait_setup(void)
{
    PyObject *threading = PyImport_ImportModule("threading");
    if (threading == NULL)
        return -1;
    PyObject *main_thread = PyObject_CallMethod(threading, "main_thread", NULL);
    Py_DECREF(threading);
    PyObject *ident =
        main_thread ? PyObject_GetAttrString(main_thread, "ident") : NULL;
    Py_XDECREF(main_thread);
    if (ident == NULL)
        return -1;
    main_thread_ident = PyLong_AsUnsignedLong(ident);
    Py_DECREF(ident);
    return PyErr_Occurred() ? -1 : 0;
}

static int poll_signals(void *ctx)
{
    binding_wait *w = ctx;
    PyEval_RestoreThread(w->saved);
    int raised = PyErr_CheckSignals() != 0;
    w->saved = PyEval_SaveThread();
    return raised;
}

void binding_wait_init(binding_wait *w, double timeout)
{
    w->wait.timeout = timeout;
    w->saved = NULL;
    if (PyThread_get_thread_ident() == main_thread_ident) {
        w->wait.poll = poll_signals;
        w->wait.ctx = w;
    } else {
        /* Signal handlers run only on the main thread: nothing to poll
         * for, so without a timeout the core may block in the driver. */
        w->wait.poll = NULL;
        w->wait.ctx = NULL;
    }
}

void binding_wait_release_gil(binding_wait *w)
{
    w->saved = PyEval_SaveThread();
}

void binding_wait_acquire_gil(binding_wait *w)
{
    PyEval_RestoreThread(w->saved);
    w->saved = NULL;
}
