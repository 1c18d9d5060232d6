/* Turns a core error record into the Python exception SPEC §8 asks for. */
#include "binding.h"

#include <string.h>

/* One class for the process, as the core is one: a second module object
 * (the extension imported again after its module was dropped) raises the
 * same class, so `except HostHazardError` keeps working.  Never freed. */
static PyObject *hazard_error;

PyObject *binding_hazard_error(void)
{
    if (hazard_error == NULL)
        hazard_error = PyErr_NewExceptionWithDoc(
            "max._core.driver.HostHazardError",
            "Raised when the host touches memory whose producer failed (a "
            "poisoned HostHazardCompletion in its hazard record), or waits "
            "for such a completion.  A later successful write into the "
            "memory clears it.",
            PyExc_RuntimeError, NULL);
    return hazard_error;
}

static PyObject *exception_for(mxd_status status)
{
    switch (status) {
    case MXD_HAZARD: return hazard_error ? hazard_error : PyExc_RuntimeError;
    case MXD_INVALID:
    case MXD_DRIVER: return PyExc_ValueError;
    case MXD_UNAVAILABLE: return PyExc_RuntimeError;
    case MXD_TIMEOUT: return PyExc_TimeoutError;
    case MXD_NO_MEMORY: return PyExc_MemoryError;
    case MXD_IMPORT: return PyExc_ImportError;
    case MXD_BAD_TYPE: return PyExc_TypeError;
    case MXD_OUT_OF_RANGE: return PyExc_IndexError;
    case MXD_OK:
    case MXD_INTERRUPTED: break;
    }
    return PyExc_RuntimeError;
}

/* A driver error must carry the driver's error name and code (as MAX's
 * messages do) even when the core's sentence does not mention them. */
static int needs_driver_suffix(const mxd_error *err)
{
    return err->status == MXD_DRIVER && err->name[0] != '\0' &&
           strstr(err->message, err->name) == NULL;
}

PyObject *binding_error_text(const mxd_error *err)
{
    const char *message =
        err->message[0] != '\0' ? err->message : "unknown error";
    if (needs_driver_suffix(err))
        return PyUnicode_FromFormat("%s (%s, code %d)", message, err->name,
                                    err->code);
    return PyUnicode_FromString(message);
}

static PyObject *raise_with_prefix(const char *prefix, const mxd_error *err)
{
    if (err->status == MXD_INTERRUPTED) {
        /* The poll callback stopped the wait because a signal handler
         * raised; that exception is the one the user must see. */
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_KeyboardInterrupt, "wait interrupted");
        return NULL;
    }
    if (err->status == MXD_NO_MEMORY && err->message[0] == '\0')
        return PyErr_NoMemory();

    PyObject *text = binding_error_text(err);
    if (text == NULL)
        return NULL;
    const char *sep = prefix[0] != '\0' ? ": " : "";
    PyErr_Format(exception_for(err->status), "%s%s%U", prefix, sep, text);
    Py_DECREF(text);
    return NULL;
}

PyObject *binding_raise(const mxd_error *err)
{
    return raise_with_prefix("", err);
}

PyObject *binding_raise_prefixed(const char *prefix, const mxd_error *err)
{
    /* Avoid "x: x: ..." when the core already starts with the prefix. */
    if (strncmp(err->message, prefix, strlen(prefix)) == 0)
        return raise_with_prefix("", err);
    return raise_with_prefix(prefix, err);
}
