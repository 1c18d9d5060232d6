#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "backend.h"

static mxd_status vfail(mxd_error *err, mxd_status status, int code,
                        const char *name, const char *fmt, va_list args)
{
    if (!err)
        return status;
    err->status = status;
    err->code = code;
    snprintf(err->name, sizeof err->name, "%s", name ? name : "");
    vsnprintf(err->message, sizeof err->message, fmt, args);
    return status;
}

mxd_status mxd_fail(mxd_error *err, mxd_status status, const char *fmt, ...)
{
    va_list args;
    va_start(args, fmt);
    vfail(err, status, 0, NULL, fmt, args);
    va_end(args);
    return status;
}

mxd_status mxd_fail_driver(mxd_error *err, int code, const char *name,
                           const char *fmt, ...)
{
    va_list args;
    va_start(args, fmt);
    vfail(err, MXD_DRIVER, code, name, fmt, args);
    va_end(args);
    return MXD_DRIVER;
}
