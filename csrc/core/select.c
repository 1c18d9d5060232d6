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
    const mxd_gpu_probe *probe;
} gpu_api;

static const char *const cuda_names[] = {"libcuda.so.1", NULL};
static const char *const hip_names[] = {"libamdhip64.so.7", "libamdhip64.so.6",
                                        "libamdhip64.so.5", "libamdhip64.so",
                                        NULL};

static const gpu_api gpu_apis[MAX_APIS] = {
    {"cuda", "MAX_DRIVER_CUDA_LIBRARY", cuda_names, &mxd_cuda_probe},
    {"hip", "MAX_DRIVER_HIP_LIBRARY", hip_names, &mxd_hip_probe},
};

/* ---- Selection ---------------------------------------------------------- */

static struct {
    pthread_mutex_t mu;
    bool done;
    mxd_error failure; /* status MXD_OK when selection succeeded */
    size_t count;
    probe_result results[MAX_APIS];
    mxd_selection entries[MAX_APIS];
    char summary[MAX_APIS * (REASON_SIZE + 16)];
    const gpu_api *chosen; /* NULL: no accelerator backend */
    bool forked;           /* in a child forked after the choice */
    int device_count;
    mxd_device *devices;
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
    if (!api->probe->load(lib, &result->device_count, result->error,
                          sizeof result->error)) {
        result->failed = true;
        return;
    }
    mxd_process_driver_loaded(); /* initialised: its exit handlers exist */
    if (result->device_count == 0) {
        snprintf(result->error, sizeof result->error, "no %s device found",
                 api->api);
        result->failed = true;
    }
}

/* Makes `api` the accelerator backend with `count` devices. */
static bool choose(const gpu_api *api, int count, probe_result *result)
{
    sel.devices = calloc((size_t)count, sizeof *sel.devices);
    if (!sel.devices) {
        snprintf(result->error, sizeof result->error, "out of memory");
        result->failed = true;
        return false;
    }
    for (int i = 0; i < count; i++) {
        sel.devices[i].ops = api->probe->backend;
        sel.devices[i].id = i;
        pthread_mutex_init(&sel.devices[i].mu, NULL);
    }
    sel.chosen = api;
    sel.device_count = count;
    return true;
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
            .chosen = sel.chosen == &gpu_apis[i],
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
        if (sel.chosen) {
            snprintf(r->error, sizeof r->error,
                     "not tried: the %s backend was chosen first",
                     sel.chosen->api);
            continue;
        }
        probe(&gpu_apis[i], r);
        if (!r->failed)
            choose(&gpu_apis[i], r->device_count, r);
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

mxd_status mxd_select_backend(const mxd_host_runner *runner, mxd_error *err)
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
    return sel.device_count;
}

const char *mxd_accelerator_api(void)
{
    return sel.chosen ? sel.chosen->api : NULL;
}

mxd_status mxd_selected_device(int id, mxd_device **out, mxd_error *err)
{
    mxd_device *dev = &sel.devices[id];
    pthread_mutex_lock(&sel.mu);
    mxd_status st = sel.chosen->probe->open_device(dev, err);
    pthread_mutex_unlock(&sel.mu);
    if (st == MXD_OK)
        *out = dev;
    return st;
}

bool mxd_gpu_forked(void)
{
    return sel.forked;
}

static void selection_fork_prepare(void)
{
    pthread_mutex_lock(&sel.mu);
}

static void selection_fork_parent(void)
{
    pthread_mutex_unlock(&sel.mu);
}

static void selection_fork_child(void)
{
    /* CUDA and HIP do not support a driver initialised before fork(). */
    sel.forked = sel.chosen != NULL;
    pthread_mutex_unlock(&sel.mu);
}

const mxd_fork_hooks mxd_selection_fork_hooks = {
    selection_fork_prepare,
    selection_fork_parent,
    selection_fork_child,
};
