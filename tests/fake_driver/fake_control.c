/* Configuration, call counters, fault injection and error names of the
 * fake GPU driver: everything the two API fronts share that is not a
 * stream, an event or host memory. */
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fake_gpu.h"

/* ---- Entry point names ---------------------------------------------- */

#define FAKE_NAME_CU(name, version, kind, ret, params) #name,
#define FAKE_NAME_HIP(name, kind, ret, params) #name,
#define FAKE_NAME_EXTRA(name) #name,
static const char *const fake_names[FAKE_ID_COUNT] = {
    CUDA_ENTRY_POINTS(FAKE_NAME_CU) HIP_ENTRY_POINTS(FAKE_NAME_HIP)
        FAKE_EXTRA_ENTRY_POINTS(FAKE_NAME_EXTRA)};

const char *fake_entry_name(int id)
{
    return id >= 0 && id < FAKE_ID_COUNT ? fake_names[id] : NULL;
}

static bool fake_ends_with(const char *s, size_t len, const char *suffix)
{
    size_t n = strlen(suffix);
    return len > n && memcmp(s + len - n, suffix, n) == 0;
}

/* Maps a symbol name to its entry point id.  Versioned symbols share the
 * bookkeeping of their base name ("cuStreamDestroy_v2" is
 * "cuStreamDestroy", "hipGetDevicePropertiesR0000" is
 * "hipGetDeviceProperties"), because a test cannot know which one the
 * backend resolved. */
static int fake_lookup(const char *name)
{
    static const char *const suffixes[] = {"_v2", "R0000", "R0600"};
    if (name == NULL)
        return -1;
    size_t len = strlen(name);
    for (size_t i = 0; i <= sizeof suffixes / sizeof *suffixes; i++) {
        size_t base = len;
        if (i > 0) {
            if (!fake_ends_with(name, len, suffixes[i - 1]))
                continue;
            base = len - strlen(suffixes[i - 1]);
        }
        for (int id = 0; id < FAKE_ID_COUNT; id++)
            if (strlen(fake_names[id]) == base &&
                memcmp(fake_names[id], name, base) == 0)
                return id;
    }
    return -1;
}

/* ---- Configuration -------------------------------------------------- */

static fake_config fake_config_value;
static pthread_once_t fake_once = PTHREAD_ONCE_INIT;

static long long fake_env_int(const char *var, long long fallback)
{
    const char *text = getenv(var);
    if (text == NULL || *text == '\0')
        return fallback;
    char *end;
    long long value = strtoll(text, &end, 0);
    if (*end != '\0' || value < 0) {
        fprintf(stderr, "fake_gpu: ignoring %s=%s (not a number)\n", var, text);
        return fallback;
    }
    return value;
}

static const char *fake_env_str(const char *var, const char *fallback)
{
    const char *text = getenv(var);
    return text != NULL && *text != '\0' ? text : fallback;
}

static void fake_parse_cc(fake_config *cfg)
{
    const char *text = fake_env_str("FAKE_GPU_CC", "9.0");
    if (sscanf(text, "%d.%d", &cfg->cc_major, &cfg->cc_minor) != 2) {
        fprintf(stderr, "fake_gpu: ignoring FAKE_GPU_CC=%s\n", text);
        cfg->cc_major = 9;
        cfg->cc_minor = 0;
    }
}

static void fake_arm_from_env(void);

/* Reads the environment once, at the first call of any entry point, so
 * that a test can configure the fake before the backend is imported. */
static void fake_init(void)
{
    fake_config *cfg = &fake_config_value;
    cfg->devices = (int)fake_env_int("FAKE_GPU_DEVICES", 2);
    cfg->name_prefix = fake_env_str("FAKE_GPU_NAME", "Fake GPU");
    fake_parse_cc(cfg);
    cfg->gcn_arch = fake_env_str("FAKE_GPU_GCN", "gfx942");
    cfg->total_mem =
        (size_t)fake_env_int("FAKE_GPU_TOTAL_MEM", 80LL << 30 /* 80 GiB */);
    cfg->integrated = (int)fake_env_int("FAKE_GPU_INTEGRATED", 0) != 0;
    cfg->peer = (int)fake_env_int("FAKE_GPU_PEER", 1) != 0;
    cfg->init_error = (unsigned)fake_env_int("FAKE_GPU_INIT_ERROR", 0);
    cfg->driver_version = (int)fake_env_int("FAKE_GPU_DRIVER_VERSION", 13000);
    cfg->hang_seconds = (int)fake_env_int("FAKE_GPU_HANG_SECONDS", 10);
    cfg->queue_depth = fake_env_int("FAKE_GPU_QUEUE_DEPTH", 1024);
    if (cfg->queue_depth < 1)
        cfg->queue_depth = 1;
    cfg->stream_mem_ops = (int)fake_env_int("FAKE_GPU_STREAM_MEM_OPS", 1) != 0;
    cfg->memory_pools = (int)fake_env_int("FAKE_GPU_MEMORY_POOLS", 1) != 0;
    cfg->multicast = (int)fake_env_int("FAKE_GPU_MULTICAST", 1) != 0;
    cfg->cross_device_events =
        fake_env_int("FAKE_GPU_CROSS_DEVICE_EVENTS", 1) != 0;
    cfg->context_check = fake_env_int("FAKE_GPU_CONTEXT_CHECK", 1) != 0;
    cfg->host_copy_sync = fake_env_int("FAKE_GPU_HOST_COPY_SYNC", 1) != 0;
    cfg->pinned_alloc_sync = fake_env_int("FAKE_GPU_PINNED_ALLOC_SYNC", 1) != 0;
    cfg->exit_check = fake_env_int("FAKE_GPU_EXIT_CHECK", 1) != 0;
    /* As on current NVIDIA GPUs (CU_DEVICE_ATTRIBUTE_MAX_PITCH). */
    cfg->max_pitch = (size_t)fake_env_int("FAKE_GPU_MAX_PITCH", INT_MAX);
    cfg->copy_bytes_per_s = fake_env_int("FAKE_GPU_COPY_MIB_PER_S", 0) << 20;
    if (cfg->copy_bytes_per_s < 0)
        cfg->copy_bytes_per_s = 0;
    cfg->instant = fake_env_int("FAKE_GPU_INSTANT", 0) != 0;
    fake_arm_from_env();
}

const fake_config *fake_cfg(void)
{
    pthread_once(&fake_once, fake_init);
    return &fake_config_value;
}

int fake_max_pitch_attribute(void)
{
    size_t pitch = fake_cfg()->max_pitch;
    return pitch > INT_MAX ? INT_MAX : (int)pitch;
}

bool fake_valid_device(int device)
{
    return device >= 0 && device < fake_cfg()->devices;
}

void fake_device_name(int device, char *name, int len)
{
    snprintf(name, (size_t)len, "%s %d", fake_cfg()->name_prefix, device);
}

/* ---- Call counters and faults --------------------------------------- */

enum { FAKE_MAX_FAULTS = 16 };

typedef struct fake_fault {
    int remaining; /* calls until it fires; 0 = free slot */
    unsigned code;
} fake_fault;

static atomic_int fake_calls[FAKE_ID_COUNT];
/* Armed faults per entry point: lets fake_enter skip the lock when none. */
static atomic_int fake_armed[FAKE_ID_COUNT];
static fake_fault fake_faults[FAKE_ID_COUNT][FAKE_MAX_FAULTS];
static pthread_mutex_t fake_fault_lock = PTHREAD_MUTEX_INITIALIZER;

/* The entry point each thread is in, named in violation messages. */
static _Thread_local int fake_current_entry = -1;

const char *fake_current_entry_name(void)
{
    const char *name = fake_entry_name(fake_current_entry);
    return name != NULL ? name : "the fake";
}

static bool fake_can_fail(int id);

/* The real drivers run callbacks on a thread of their own and forbid API
 * calls there (CUDA: "must not make any CUDA API calls"; doing so may
 * return CUDA_ERROR_NOT_PERMITTED or deadlock).  The fake always refuses
 * and records a violation; the string-returning HIP calls cannot fail, so
 * they are only recorded. */
static unsigned fake_refuse_callback_call(int id, const char *kind)
{
    const char *name = fake_names[id];
    bool hip = strncmp(name, "hip", 3) == 0;
    if (!fake_can_fail(id)) {
        fake_violation("%s called from a %s (not permitted; it returns a "
                       "string, so it cannot fail)",
                       name, kind);
        return 0;
    }
    fake_violation("%s called from a %s (%s)", name, kind,
                   hip ? "hipErrorNotSupported" : "CUDA_ERROR_NOT_PERMITTED");
    return hip ? FAKE_E_NOT_SUPPORTED : FAKE_E_NOT_PERMITTED;
}

/* ---- Process exit ----------------------------------------------------
 * Real drivers tear themselves down when the process exits (library
 * destructors, exit handlers they register); a thread that still calls the
 * driver then may crash or hang.  The fake's destructor marks the driver
 * shut down, and every later call fails (fake_enter).  While streams are
 * still alive it then takes FAKE_TEARDOWN_MS, as a driver's teardown of
 * its contexts takes a while, so that a thread of the application that
 * keeps polling the driver is caught calling.  The fake's own threads
 * never enter an entry point: they are not affected. */

enum { FAKE_TEARDOWN_MS = 50 };

static atomic_bool fake_shut_down;

__attribute__((destructor)) static void fake_teardown(void)
{
    atomic_store(&fake_shut_down, true);
    if (fake_cfg()->exit_check && fake_streams_alive()) {
        struct timespec pause = {0, FAKE_TEARDOWN_MS * 1000000L};
        nanosleep(&pause, NULL);
    }
}

/* The driver is gone: no effect, DEINITIALIZED; the string-returning HIP
 * calls cannot fail, so they are only recorded. */
static unsigned fake_refuse_after_exit(int id)
{
    fake_violation("%s called after the driver shut down at process exit; "
                   "a real driver may crash or hang here",
                   fake_names[id]);
    return fake_can_fail(id) ? FAKE_E_DEINITIALIZED : 0;
}

unsigned fake_enter(int id)
{
    pthread_once(&fake_once, fake_init);
    atomic_fetch_add_explicit(&fake_calls[id], 1, memory_order_relaxed);
    fake_current_entry = id;
    if (atomic_load(&fake_shut_down) && fake_config_value.exit_check)
        return fake_refuse_after_exit(id);
    const char *kind = fake_callback_kind();
    if (kind != NULL) /* before any fault: the call has no effect at all */
        return fake_refuse_callback_call(id, kind);
    if (atomic_load_explicit(&fake_armed[id], memory_order_acquire) == 0)
        return 0;
    unsigned code = 0;
    pthread_mutex_lock(&fake_fault_lock);
    for (int i = 0; i < FAKE_MAX_FAULTS; i++) {
        fake_fault *f = &fake_faults[id][i];
        if (f->remaining == 0 || --f->remaining > 0)
            continue;
        if (code == 0) /* two faults due on one call: the first armed wins */
            code = f->code;
        atomic_fetch_sub(&fake_armed[id], 1);
    }
    pthread_mutex_unlock(&fake_fault_lock);
    return code;
}

/* hipGetErrorName/String return a string, not a status: they cannot fail. */
static bool fake_can_fail(int id)
{
    return id != FAKE_ID_hipGetErrorName && id != FAKE_ID_hipGetErrorString;
}

static int fake_arm(int id, int nth, int error_code)
{
    if (id < 0 || !fake_can_fail(id) || nth < 1 || error_code <= 0)
        return -1;
    int rc = -1;
    pthread_mutex_lock(&fake_fault_lock);
    for (int i = 0; i < FAKE_MAX_FAULTS; i++) {
        fake_fault *f = &fake_faults[id][i];
        if (f->remaining != 0)
            continue;
        f->remaining = nth;
        f->code = (unsigned)error_code;
        atomic_fetch_add(&fake_armed[id], 1);
        rc = 0;
        break;
    }
    pthread_mutex_unlock(&fake_fault_lock);
    return rc;
}

/* FAKE_GPU_FAIL="cuStreamCreate:1:2,hipEventRecord:3:1" arms faults before
 * the first call, for faults a test needs at import time. */
static void fake_arm_from_env(void)
{
    const char *text = getenv("FAKE_GPU_FAIL");
    if (text == NULL)
        return;
    char *copy = strdup(text), *save = NULL;
    for (char *tok = copy ? strtok_r(copy, ",", &save) : NULL; tok;
         tok = strtok_r(NULL, ",", &save)) {
        char name[128];
        int nth, code;
        if (sscanf(tok, " %127[^:]:%d:%d", name, &nth, &code) != 3 ||
            fake_arm(fake_lookup(name), nth, code) != 0)
            fprintf(stderr, "fake_gpu: ignoring FAKE_GPU_FAIL entry '%s'\n",
                    tok);
    }
    free(copy);
}

FAKE_EXPORT int fake_gpu_fail(const char *entry_point, int nth, int error_code)
{
    pthread_once(&fake_once, fake_init);
    return fake_arm(fake_lookup(entry_point), nth, error_code);
}

FAKE_EXPORT void fake_gpu_reset(void)
{
    pthread_once(&fake_once, fake_init);
    pthread_mutex_lock(&fake_fault_lock);
    memset(fake_faults, 0, sizeof fake_faults);
    for (int id = 0; id < FAKE_ID_COUNT; id++) {
        atomic_store(&fake_armed[id], 0);
        atomic_store(&fake_calls[id], 0);
    }
    pthread_mutex_unlock(&fake_fault_lock);
}

FAKE_EXPORT int fake_gpu_calls(const char *entry_point)
{
    int id = fake_lookup(entry_point);
    return id < 0 ? -1 : atomic_load(&fake_calls[id]);
}

/* ---- Violations ----------------------------------------------------- */

enum { FAKE_KEPT_VIOLATIONS = 64, FAKE_VIOLATION_LEN = 320 };

/* Its own lock, taken last: violations are recorded with fake_lock held. */
static pthread_mutex_t fake_violation_lock = PTHREAD_MUTEX_INITIALIZER;
static int fake_violation_count; /* since the last clear */
static char fake_violation_text[FAKE_KEPT_VIOLATIONS][FAKE_VIOLATION_LEN];

/* Keeps and prints the first FAKE_KEPT_VIOLATIONS since the last clear (a
 * backend that breaks a rule in a loop would flood the test output), and
 * counts every one. */
void fake_violation(const char *format, ...)
{
    char text[FAKE_VIOLATION_LEN];
    va_list args;
    va_start(args, format);
    vsnprintf(text, sizeof text, format, args);
    va_end(args);
    pthread_mutex_lock(&fake_violation_lock);
    int n = fake_violation_count++;
    if (n < FAKE_KEPT_VIOLATIONS) {
        memcpy(fake_violation_text[n], text, sizeof text);
        fprintf(stderr, "fake_gpu: violation: %s\n", text);
    } else if (n == FAKE_KEPT_VIOLATIONS) {
        fprintf(stderr, "fake_gpu: violation: (more violations are counted "
                        "but not printed)\n");
    }
    pthread_mutex_unlock(&fake_violation_lock);
}

FAKE_EXPORT int fake_gpu_violations(void)
{
    pthread_mutex_lock(&fake_violation_lock);
    int n = fake_violation_count;
    pthread_mutex_unlock(&fake_violation_lock);
    return n;
}

/* The text stays valid until the next fake_gpu_clear_violations. */
FAKE_EXPORT const char *fake_gpu_violation(int i)
{
    pthread_mutex_lock(&fake_violation_lock);
    const char *text =
        i >= 0 && i < fake_violation_count && i < FAKE_KEPT_VIOLATIONS
            ? fake_violation_text[i]
            : NULL;
    pthread_mutex_unlock(&fake_violation_lock);
    return text;
}

FAKE_EXPORT void fake_gpu_clear_violations(void)
{
    pthread_mutex_lock(&fake_violation_lock);
    fake_violation_count = 0;
    pthread_mutex_unlock(&fake_violation_lock);
}

/* ---- Error names ---------------------------------------------------- */

typedef struct fake_error {
    unsigned code;
    const char *cu_name, *hip_name, *text;
} fake_error;

/* The real drivers' names and descriptions of every code the fake returns
 * (and of a few that tests like to inject through FAKE_GPU_INIT_ERROR). */
static const fake_error fake_errors[] = {
    {0, "CUDA_SUCCESS", "hipSuccess", "no error"},
    {1, "CUDA_ERROR_INVALID_VALUE", "hipErrorInvalidValue", "invalid argument"},
    {2, "CUDA_ERROR_OUT_OF_MEMORY", "hipErrorOutOfMemory", "out of memory"},
    {3, "CUDA_ERROR_NOT_INITIALIZED", "hipErrorNotInitialized",
     "initialization error"},
    {4, "CUDA_ERROR_DEINITIALIZED", "hipErrorDeinitialized",
     "driver shutting down"},
    {34, "CUDA_ERROR_STUB_LIBRARY", NULL, "CUDA driver is a stub library"},
    {21, NULL, "hipErrorInvalidMemcpyDirection",
     "invalid copy direction for memcpy"},
    {35, NULL, "hipErrorInsufficientDriver",
     "driver version is insufficient for runtime version"},
    {46, "CUDA_ERROR_DEVICE_UNAVAILABLE", NULL,
     "CUDA-capable device(s) is/are busy or unavailable"},
    {100, "CUDA_ERROR_NO_DEVICE", "hipErrorNoDevice",
     NULL /* per API, below */},
    {101, "CUDA_ERROR_INVALID_DEVICE", "hipErrorInvalidDevice",
     "invalid device ordinal"},
    {201, "CUDA_ERROR_INVALID_CONTEXT", "hipErrorInvalidContext",
     "invalid device context"},
    {400, "CUDA_ERROR_INVALID_HANDLE", "hipErrorInvalidHandle",
     "invalid resource handle"},
    {500, "CUDA_ERROR_NOT_FOUND", "hipErrorNotFound", "named symbol not found"},
    {600, "CUDA_ERROR_NOT_READY", "hipErrorNotReady", "device not ready"},
    {700, "CUDA_ERROR_ILLEGAL_ADDRESS", "hipErrorIllegalAddress",
     "an illegal memory access was encountered"},
    {719, "CUDA_ERROR_LAUNCH_FAILED", "hipErrorLaunchFailure",
     "unspecified launch failure"},
    {800, "CUDA_ERROR_NOT_PERMITTED", NULL, "operation not permitted"},
    {801, "CUDA_ERROR_NOT_SUPPORTED", "hipErrorNotSupported",
     "operation not supported"},
    {900, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED",
     "hipErrorStreamCaptureUnsupported",
     "operation not permitted when stream is capturing"},
    {901, "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED",
     "hipErrorStreamCaptureInvalidated",
     "operation failed due to a previous error during capture"},
    {902, "CUDA_ERROR_STREAM_CAPTURE_MERGE", "hipErrorStreamCaptureMerge",
     "operation would result in a merge of separate capture sequences"},
    {903, "CUDA_ERROR_STREAM_CAPTURE_UNMATCHED",
     "hipErrorStreamCaptureUnmatched",
     "capture was not ended in the same stream "
     "as it began"},
    {904, "CUDA_ERROR_STREAM_CAPTURE_UNJOINED", "hipErrorStreamCaptureUnjoined",
     "capturing stream has unjoined work"},
    {905, "CUDA_ERROR_STREAM_CAPTURE_ISOLATION",
     "hipErrorStreamCaptureIsolation",
     "dependency created on uncaptured work in another stream"},
    {906, "CUDA_ERROR_STREAM_CAPTURE_IMPLICIT", "hipErrorStreamCaptureImplicit",
     "operation would make the legacy stream depend on a capturing blocking "
     "stream"},
    {907, "CUDA_ERROR_CAPTURED_EVENT", "hipErrorCapturedEvent",
     "operation not permitted on an event last recorded in a capturing "
     "stream"},
    {908, "CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD",
     "hipErrorStreamCaptureWrongThread",
     "attempt to terminate a thread-local capture sequence from another "
     "thread"},
    {999, "CUDA_ERROR_UNKNOWN", "hipErrorUnknown", "unknown error"},
};

static const fake_error *fake_find_error(unsigned code, bool hip)
{
    for (size_t i = 0; i < sizeof fake_errors / sizeof *fake_errors; i++) {
        const fake_error *e = &fake_errors[i];
        if (e->code == code && (hip ? e->hip_name : e->cu_name) != NULL)
            return e;
    }
    return NULL;
}

/* NULL for a code the API does not know. */
const char *fake_error_name(unsigned code, bool hip)
{
    const fake_error *e = fake_find_error(code, hip);
    return e == NULL ? NULL : hip ? e->hip_name : e->cu_name;
}

const char *fake_error_string(unsigned code, bool hip)
{
    if (code == FAKE_E_NO_DEVICE)
        return hip ? "no ROCm-capable device is detected"
                   : "no CUDA-capable device is detected";
    const fake_error *e = fake_find_error(code, hip);
    return e == NULL ? NULL : e->text;
}
