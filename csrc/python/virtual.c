/* The module functions of MAX's virtual device mode (mxd.h, "Virtual
 * devices"): set_virtual_device_count and its siblings.  The settings are
 * the core's; Accelerator(i) and accelerator_count() read them
 * (device.c, module.c). */
#include "binding.h"

#include <limits.h>
#include <string.h>

static const char *const count_names[] = {"count"};

static PyObject *set_count(PyObject *module, PyObject *const *args,
                           Py_ssize_t nargs, PyObject *kwnames)
{
    (void)module;
    static const char fname[] = "set_virtual_device_count";
    const binding_params params = {fname, count_names, 1, 1};
    PyObject *arg;
    if (binding_parse_fast(&params, args, nargs, kwnames, &arg) < 0)
        return NULL;
    if (PyBool_Check(arg) || !PyIndex_Check(arg)) {
        PyErr_Format(PyExc_TypeError,
                     "%s(): argument 'count' must be an int, not %.100s", fname,
                     Py_TYPE(arg)->tp_name);
        return NULL;
    }
    PyObject *index = PyNumber_Index(arg);
    if (index == NULL)
        return NULL;
    int overflow;
    long long count = PyLong_AsLongLongAndOverflow(index, &overflow);
    Py_DECREF(index);
    if (count == -1 && PyErr_Occurred())
        return NULL;
    if (overflow) /* out of range either way: the core says so */
        count = overflow > 0 ? LLONG_MAX : LLONG_MIN;
    mxd_error err;
    if (mxd_virtual_set_count(count, &err) != MXD_OK)
        return binding_raise(&err);
    Py_RETURN_NONE;
}

static PyObject *get_count(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    return PyLong_FromLong(mxd_virtual_count());
}

static PyObject *is_mode(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    return PyBool_FromLong(mxd_virtual_count() > 0);
}

/* set_virtual_*(value): one str parameter named `param`. */
static PyObject *set_text(mxd_virtual_setting which, const char *fname,
                          const char *const *param, PyObject *const *args,
                          Py_ssize_t nargs, PyObject *kwnames)
{
    const binding_params params = {fname, param, 1, 1};
    PyObject *arg;
    if (binding_parse_fast(&params, args, nargs, kwnames, &arg) < 0)
        return NULL;
    if (!PyUnicode_Check(arg)) {
        PyErr_Format(PyExc_TypeError,
                     "%s(): argument '%s' must be a str, not %.100s", fname,
                     param[0], Py_TYPE(arg)->tp_name);
        return NULL;
    }
    Py_ssize_t size;
    const char *text = PyUnicode_AsUTF8AndSize(arg, &size);
    if (text == NULL)
        return NULL;
    if ((size_t)size != strlen(text)) {
        PyErr_Format(PyExc_ValueError,
                     "%s(): argument '%s' contains a null character", fname,
                     param[0]);
        return NULL;
    }
    mxd_error err;
    if (mxd_virtual_set(which, text, &err) != MXD_OK)
        return binding_raise(&err);
    Py_RETURN_NONE;
}

static PyObject *get_text(mxd_virtual_setting which)
{
    char value[MXD_VIRTUAL_VALUE_SIZE];
    mxd_virtual_get(which, value, sizeof value);
    return PyUnicode_FromString(value);
}

static const char *const api_names[] = {"api"};
static const char *const arch_names[] = {"arch"};
static const char *const cpu_names[] = {"cpu"};

static PyObject *set_api(PyObject *module, PyObject *const *args,
                         Py_ssize_t nargs, PyObject *kwnames)
{
    (void)module;
    return set_text(MXD_VIRTUAL_API, "set_virtual_device_api", api_names, args,
                    nargs, kwnames);
}

static PyObject *set_arch(PyObject *module, PyObject *const *args,
                          Py_ssize_t nargs, PyObject *kwnames)
{
    (void)module;
    return set_text(MXD_VIRTUAL_ARCH, "set_virtual_device_target_arch",
                    arch_names, args, nargs, kwnames);
}

static PyObject *set_cpu(PyObject *module, PyObject *const *args,
                         Py_ssize_t nargs, PyObject *kwnames)
{
    (void)module;
    return set_text(MXD_VIRTUAL_CPU, "set_virtual_cpu_target", cpu_names, args,
                    nargs, kwnames);
}

static PyObject *get_api(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    return get_text(MXD_VIRTUAL_API);
}

static PyObject *get_arch(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    return get_text(MXD_VIRTUAL_ARCH);
}

static PyObject *get_cpu(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    return get_text(MXD_VIRTUAL_CPU);
}

#define FASTCALL_KW(fn) (PyCFunction)(void (*)(void))(fn)

PyMethodDef binding_virtual_functions[] = {
    {"set_virtual_device_count", FASTCALL_KW(set_count),
     METH_FASTCALL | METH_KEYWORDS,
     BINDING_DOC("set_virtual_device_count", "(count)",
                 "Virtual device mode: with count > 0, accelerator_count() "
                 "is count and Accelerator(i) a virtual device (for "
                 "compilation only: it reports the API and target "
                 "architecture set, and refuses queues, events, flags and "
                 "memory). 0 turns the mode off.")},
    {"get_virtual_device_count", get_count, METH_NOARGS,
     BINDING_DOC("get_virtual_device_count", "()",
                 "The virtual device count; 0 when virtual device mode is "
                 "off.")},
    {"is_virtual_device_mode", is_mode, METH_NOARGS,
     BINDING_DOC("is_virtual_device_mode", "()",
                 "Whether virtual device mode is on (the count is > 0).")},
    {"set_virtual_device_api", FASTCALL_KW(set_api),
     METH_FASTCALL | METH_KEYWORDS,
     BINDING_DOC("set_virtual_device_api", "(api)",
                 "The API virtual devices report (\"cuda\", \"hip\", "
                 "\"metal\", ...); '' unsets it. Devices asked for "
                 "afterwards use it.")},
    {"get_virtual_device_api", get_api, METH_NOARGS,
     BINDING_DOC("get_virtual_device_api", "()",
                 "The API set for virtual devices; '' when unset.")},
    {"set_virtual_device_target_arch", FASTCALL_KW(set_arch),
     METH_FASTCALL | METH_KEYWORDS,
     BINDING_DOC("set_virtual_device_target_arch", "(arch)",
                 "The architecture virtual devices report (\"sm_90\", "
                 "\"gfx942\", ...); '' unsets it. Devices asked for "
                 "afterwards use it.")},
    {"get_virtual_device_target_arch", get_arch, METH_NOARGS,
     BINDING_DOC("get_virtual_device_target_arch", "()",
                 "The architecture set for virtual devices; '' when unset.")},
    {"set_virtual_cpu_target", FASTCALL_KW(set_cpu),
     METH_FASTCALL | METH_KEYWORDS,
     BINDING_DOC("set_virtual_cpu_target", "(cpu)",
                 "Records an LLVM CPU name for host-independent CPU code "
                 "('' for the host's CPU; 'generic' is stored as the host "
                 "family's baseline; 'native' is refused). This module "
                 "compiles nothing: the value is only recorded.")},
    {"get_virtual_cpu_target", get_cpu, METH_NOARGS,
     BINDING_DOC("get_virtual_cpu_target", "()",
                 "The virtual CPU target; '' when unset (the host's CPU).")},
    {NULL, NULL, 0, NULL},
};
