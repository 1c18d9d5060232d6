/* Backend selection at import time (SPEC §2): try CUDA, then HIP, and
 * record for the user what each attempt found.
 *
 * A driver library is opened with dlopen and never closed (drivers do not
 * support being unloaded after initialisation, and other libraries in the
 * process may share it).  Probing needs only the entry points that report
 * whether the driver works and how many devices it has. */
#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "backend.h"
#include "select.h"

enum {
    MAX_APIS = 2,
    ERROR_SIZE = 1024,
    PATH_SIZE = 1024,
    REASON_SIZE = ERROR_SIZE + PATH_SIZE + 2, /* "<library>: <error>" */
};

typedef struct probe_result {
    char library[PATH_SIZE];
    char error[ERROR_SIZE];
    bool tried, loaded, failed;
    int device_count;
} probe_result;

typedef struct gpu_api {
    const char *api;
    const char *library_env;
    const char *const *default_names;
    /* Initialises the driver and counts devices; on failure writes the
     * reason into result->error and returns false. */
    bool (*count_devices)(void *lib, probe_result *result);
} gpu_api;

/* ---- CUDA -------------------------------------------------------------- */

typedef int (*cu_init_fn)(unsigned flags);
typedef int (*cu_count_fn)(int *count);
typedef int (*cu_error_name_fn)(int code, const char **name);

/* Names for the results a probe can meet, for drivers (such as the CUDA
 * Toolkit's stub library) whose cuGetErrorName fails too. */
static const char *cuda_known_name(int code)
{
    switch (code) {
    case 1: return "CUDA_ERROR_INVALID_VALUE";
    case 2: return "CUDA_ERROR_OUT_OF_MEMORY";
    case 3: return "CUDA_ERROR_NOT_INITIALIZED";
    case 4: return "CUDA_ERROR_DEINITIALIZED";
    case 34: return "CUDA_ERROR_STUB_LIBRARY";
    case 35: return "CUDA_ERROR_INSUFFICIENT_DRIVER";
    case 36: return "CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER";
    case 100: return "CUDA_ERROR_NO_DEVICE";
    case 101: return "CUDA_ERROR_INVALID_DEVICE";
    case 304: return "CUDA_ERROR_OPERATING_SYSTEM";
    case 999: return "CUDA_ERROR_UNKNOWN";
    default: return "CUDA_ERROR_UNRECOGNIZED";
    }
}

static void cuda_describe(void *lib, const char *call, int code,
                          probe_result *result)
{
    cu_error_name_fn error_name =
        (cu_error_name_fn)(uintptr_t)dlsym(lib, "cuGetErrorName");
    const char *name = NULL;
    if (!error_name || error_name(code, &name) != 0 || !name)
        name = cuda_known_name(code);
    snprintf(result->error, sizeof result->error, "%s failed: %s (%d)", call,
             name, code);
}

static bool cuda_count_devices(void *lib, probe_result *result)
{
    cu_init_fn init = (cu_init_fn)(uintptr_t)dlsym(lib, "cuInit");
    cu_count_fn count = (cu_count_fn)(uintptr_t)dlsym(lib, "cuDeviceGetCount");
    if (!init || !count) {
        snprintf(result->error, sizeof result->error,
                 "not a CUDA driver library: %s is missing",
                 init ? "cuDeviceGetCount" : "cuInit");
        return false;
    }
    int rc = init(0);
    if (rc == 0)
        rc = count(&result->device_count);
    if (rc != 0) {
        cuda_describe(lib, result->device_count ? "cuDeviceGetCount" : "cuInit",
                      rc, result);
        result->device_count = 0;
        return false;
    }
    return true;
}

static const char *const cuda_names[] = {"libcuda.so.1", NULL};

/* ---- HIP --------------------------------------------------------------- */

typedef int (*hip_init_fn)(unsigned flags);
typedef int (*hip_count_fn)(int *count);
typedef const char *(*hip_error_name_fn)(int code);

static bool hip_count_devices(void *lib, probe_result *result)
{
    hip_init_fn init = (hip_init_fn)(uintptr_t)dlsym(lib, "hipInit");
    hip_count_fn count =
        (hip_count_fn)(uintptr_t)dlsym(lib, "hipGetDeviceCount");
    hip_error_name_fn error_name =
        (hip_error_name_fn)(uintptr_t)dlsym(lib, "hipGetErrorName");
    if (!count) {
        snprintf(result->error, sizeof result->error,
                 "not a HIP runtime library: hipGetDeviceCount is missing");
        return false;
    }
    const char *call = "hipInit";
    int rc = init ? init(0) : 0;
    if (rc == 0) {
        call = "hipGetDeviceCount";
        rc = count(&result->device_count);
    }
    if (rc != 0) {
        const char *name = error_name ? error_name(rc) : NULL;
        snprintf(result->error, sizeof result->error, "%s failed: %s (%d)",
                 call, name ? name : "hipErrorUnknown", rc);
        result->device_count = 0;
        return false;
    }
    return true;
}

static const char *const hip_names[] = {"libamdhip64.so.7", "libamdhip64.so.6",
                                        "libamdhip64.so.5", "libamdhip64.so",
                                        NULL};

static const gpu_api gpu_apis[MAX_APIS] = {
    {"cuda", "MAX_DRIVER_CUDA_LIBRARY", cuda_names, cuda_count_devices},
    {"hip", "MAX_DRIVER_HIP_LIBRARY", hip_names, hip_count_devices},
};

/* ---- Selection ----------------------------------------------------------- */

static struct {
    pthread_mutex_t mu;
    bool done;
    mxd_error failure; /* status MXD_OK when selection succeeded */
    size_t count;
    probe_result results[MAX_APIS];
    mxd_selection entries[MAX_APIS];
    char summary[MAX_APIS * (REASON_SIZE + 16)];
} sel = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* The path the dynamic loader actually opened for `lib`. */
static void loaded_path(void *lib, const char *fallback, char *out, size_t size)
{
    struct link_map *map = NULL;
    if (dlinfo(lib, RTLD_DI_LINKMAP, &map) == 0 && map && map->l_name &&
        map->l_name[0])
        snprintf(out, size, "%s", map->l_name);
    else
        snprintf(out, size, "%s", fallback);
}

/* Opens the first library that loads; records every failure otherwise. */
static void *open_library(const gpu_api *api, probe_result *result)
{
    const char *forced = getenv(api->library_env);
    const char *single[] = {forced, NULL};
    const char *const *names = forced && *forced ? single : api->default_names;
    size_t used = 0;
    for (size_t i = 0; names[i]; i++) {
        snprintf(result->library, sizeof result->library, "%s", names[i]);
        /* RTLD_NOLOAD first: share a driver that PyTorch or CuPy already
         * loaded rather than mapping a second copy. */
        void *lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
        if (!lib)
            lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (lib) {
            loaded_path(lib, names[i], result->library, sizeof result->library);
            return lib;
        }
        const char *why = dlerror();
        used += (size_t)snprintf(
            result->error + used,
            used < sizeof result->error ? sizeof result->error - used : 0,
            "%s%s", used ? "; " : "", why ? why : names[i]);
        if (used >= sizeof result->error)
            used = sizeof result->error;
    }
    return NULL;
}

static void probe(const gpu_api *api, probe_result *result)
{
    result->tried = true;
    void *lib = open_library(api, result);
    if (!lib) {
        result->failed = true;
        return;
    }
    result->loaded = true;
    result->error[0] = '\0';
    if (!api->count_devices(lib, result)) {
        result->failed = true;
        return;
    }
    if (result->device_count == 0) {
        snprintf(result->error, sizeof result->error, "no %s device found",
                 api->api);
        result->failed = true;
        return;
    }
    /* The driver works and has devices, but no GPU backend is compiled
     * into this build yet: say so rather than pretend. */
    snprintf(result->error, sizeof result->error,
             "found %d %s device%s, but this build of max.driver has no %s "
             "backend",
             result->device_count, api->api,
             result->device_count == 1 ? "" : "s", api->api);
    result->failed = true;
}

/* "<library>: <error>" for a library that loaded (dlerror already names
 * the library when loading failed). */
static void describe(const probe_result *r, char *out, size_t size)
{
    if (!r->tried)
        snprintf(out, size, "%s", r->error);
    else if (r->loaded)
        snprintf(out, size, "%s: %s", r->library, r->error);
    else
        snprintf(out, size, "%s", r->error);
}

static void publish(void)
{
    size_t used = 0;
    for (size_t i = 0; i < sel.count; i++) {
        const probe_result *r = &sel.results[i];
        sel.entries[i] = (mxd_selection){
            .api = gpu_apis[i].api,
            .library = r->tried && r->library[0] ? r->library : NULL,
            .loaded = r->loaded,
            .device_count = r->device_count,
            .error = r->error[0] ? r->error : NULL,
            .chosen = false,
        };
        char reason[REASON_SIZE];
        describe(r, reason, sizeof reason);
        int n = snprintf(sel.summary + used, sizeof sel.summary - used,
                         "%s%s: %s", used ? "; " : "", gpu_apis[i].api, reason);
        if (n > 0 && (size_t)n < sizeof sel.summary - used)
            used += (size_t)n;
    }
}

/* Which backends MAX_DRIVER_BACKEND allows: index of the forced one, -1
 * for auto, MAX_APIS for cpu; -2 when the value is not understood. */
static int parse_backend_env(const char *value)
{
    if (!value || !*value || strcasecmp(value, "auto") == 0)
        return -1;
    if (strcasecmp(value, "cpu") == 0)
        return MAX_APIS;
    for (int i = 0; i < MAX_APIS; i++)
        if (strcasecmp(value, gpu_apis[i].api) == 0)
            return i;
    return -2;
}

static void select_backend(void)
{
    const char *env = getenv("MAX_DRIVER_BACKEND");
    int forced = parse_backend_env(env);
    sel.count = MAX_APIS;
    if (forced == -2) {
        mxd_fail(&sel.failure, MXD_IMPORT,
                 "MAX_DRIVER_BACKEND=%s is not understood; use auto, cuda, "
                 "hip or cpu",
                 env);
        return;
    }
    for (int i = 0; i < MAX_APIS; i++) {
        probe_result *r = &sel.results[i];
        if (forced == MAX_APIS || (forced >= 0 && forced != i)) {
            snprintf(r->error, sizeof r->error,
                     "not tried: MAX_DRIVER_BACKEND=%s", env);
            continue;
        }
        probe(&gpu_apis[i], r);
        if (forced == i && r->failed) {
            char reason[REASON_SIZE];
            describe(r, reason, sizeof reason);
            mxd_fail(&sel.failure, MXD_IMPORT,
                     "MAX_DRIVER_BACKEND=%s, but the %s backend cannot be "
                     "used: %s",
                     env, gpu_apis[i].api, reason);
        }
    }
    publish();
}

mxd_status mxd_init(const mxd_host_runner *runner, mxd_error *err)
{
    pthread_mutex_lock(&sel.mu);
    if (!sel.done) {
        mxd_set_host_runner(runner);
        select_backend();
        sel.done = true;
    }
    mxd_status st = sel.failure.status;
    if (st != MXD_OK && err)
        *err = sel.failure;
    pthread_mutex_unlock(&sel.mu);
    return st;
}

size_t mxd_selection_count(void)
{
    return sel.count;
}

const mxd_selection *mxd_selection_at(size_t i)
{
    return i < sel.count ? &sel.entries[i] : NULL;
}

const char *mxd_selection_summary(void)
{
    return sel.summary;
}

int mxd_accelerator_count(void)
{
    return 0; /* no GPU backend is compiled in yet (see probe()) */
}

const char *mxd_accelerator_api(void)
{
    return NULL;
}

mxd_device *mxd_selected_device(int id)
{
    (void)id;
    return NULL; /* unreachable while mxd_accelerator_count() is 0 */
}
