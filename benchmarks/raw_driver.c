/* The baseline of the GPU benchmarks (benchmarks/gpu.py): the raw CUDA
 * driver calls that each max.driver operation stands for, timed in a C
 * loop on the same stream handles (passed in from Python as
 * queue.native_stream_handle).
 *
 * Built at run time by benchmarks/gpu.py into a small shared library:
 *
 *     cc -std=c11 -O2 -fPIC -shared -Wall -Wextra -Werror -D_GNU_SOURCE \
 *        -I csrc/backends benchmarks/raw_driver.c -o raw_driver.so -ldl
 *
 * No CUDA SDK is needed: the types and the list of entry points come from
 * the project's own csrc/backends/cuda_abi.h, and the entry points are
 * resolved the way csrc/backends/cuda.c resolves them (cuGetProcAddress_v2 at
 * the declared versions, else dlsym of the _v2 / plain names), so both
 * sides call the very same driver functions.
 *
 * Every raw_*_ns function returns nanoseconds per iteration, or a negative
 * number on failure (-(CUDA error code), or -1e9 when raw_open has not
 * succeeded); raw_last_error() then says what failed. */
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "cuda_abi.h"

#define EXPORT __attribute__((visibility("default")))

/* The blocking stream wait the benchmarks compare against; the project
 * itself never calls it (its waits record an event and wait for that). */
#define RAW_EXTRA_ENTRY_POINTS(X)                                              \
    X(cuStreamSynchronize, 2000, REQUIRED, cu_result, (cu_stream stream))

#define DECLARE_ENTRY(name, version, kind, ret, params) ret(*name) params;
static struct {
    CUDA_ENTRY_POINTS(DECLARE_ENTRY)
    RAW_EXTRA_ENTRY_POINTS(DECLARE_ENTRY)
} drv;

static cu_context context; /* the device's primary context */
static int opened;
static char last_error[256] = "raw_open() has not been called";

#define NOT_OPEN (-1e9)

/* The two constants we need, named here so that only the types and the
 * entry-point list are taken from cuda_abi.h. */
enum { RAW_SUCCESS = 0, RAW_EVENT_DISABLE_TIMING = 0x2 };

EXPORT const char *raw_last_error(void)
{
    return last_error;
}

static const char *error_name(cu_result rc)
{
    const char *name = NULL;
    if (drv.cuGetErrorName && drv.cuGetErrorName(rc, &name) == RAW_SUCCESS &&
        name)
        return name;
    return "unnamed CUDA error";
}

/* Records a failed call; returns the value a raw_*_ns function returns. */
static double failed(const char *call, cu_result rc)
{
    snprintf(last_error, sizeof last_error, "%s failed: %s (%u)", call,
             error_name(rc), rc);
    return -(double)rc;
}

static void *resolve(void *lib, cu_get_proc_address_fn get_proc,
                     const char *name, int version)
{
    void *fn = NULL;
    if (get_proc && get_proc(name, &fn, version, 0, NULL) == RAW_SUCCESS && fn)
        return fn;
    char versioned[128];
    snprintf(versioned, sizeof versioned, "%s_v2", name);
    fn = dlsym(lib, versioned);
    return fn ? fn : dlsym(lib, name);
}

/* Opens the driver library at `path` (NULL: libcuda.so.1), initialises it
 * and retains the primary context of device `ordinal`.  Returns 0, the
 * CUDA error code of the call that failed, or -1 when the library or an
 * entry point is missing. */
EXPORT int raw_open(const char *path, int ordinal)
{
    if (!path)
        path = "libcuda.so.1";
    void *lib = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
    if (!lib)
        lib = dlopen(path, RTLD_NOW);
    if (!lib) {
        snprintf(last_error, sizeof last_error, "dlopen: %s", dlerror());
        return -1;
    }
    cu_get_proc_address_fn get_proc =
        (cu_get_proc_address_fn)(uintptr_t)dlsym(lib, "cuGetProcAddress_v2");
#define RESOLVE(name, version, kind, ret, params)                              \
    drv.name = (ret(*) params)(uintptr_t)resolve(lib, get_proc, #name, version);
    CUDA_ENTRY_POINTS(RESOLVE)
    RAW_EXTRA_ENTRY_POINTS(RESOLVE)
#undef RESOLVE
    const char *needed[] = {"cuInit", "cuGetErrorName", "cuDeviceGet",
                            "cuDevicePrimaryCtxRetain"};
    void *found[] = {(void *)(uintptr_t)drv.cuInit,
                     (void *)(uintptr_t)drv.cuGetErrorName,
                     (void *)(uintptr_t)drv.cuDeviceGet,
                     (void *)(uintptr_t)drv.cuDevicePrimaryCtxRetain};
    for (size_t i = 0; i < sizeof needed / sizeof *needed; i++) {
        if (!found[i]) {
            snprintf(last_error, sizeof last_error,
                     "the driver lacks the entry point %s", needed[i]);
            return -1;
        }
    }
    cu_result rc = drv.cuInit(0);
    if (rc != RAW_SUCCESS) {
        failed("cuInit", rc);
        return (int)rc;
    }
    cu_device device;
    rc = drv.cuDeviceGet(&device, ordinal);
    if (rc != RAW_SUCCESS) {
        failed("cuDeviceGet", rc);
        return (int)rc;
    }
    rc = drv.cuDevicePrimaryCtxRetain(&context, device);
    if (rc != RAW_SUCCESS) {
        failed("cuDevicePrimaryCtxRetain", rc);
        return (int)rc;
    }
    opened = 1;
    last_error[0] = '\0';
    return 0;
}

/* ---- Timing -------------------------------------------------------------- */

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static double per_iteration(int64_t start, long iterations)
{
    return (double)(now_ns() - start) /
           (double)(iterations > 0 ? iterations : 1);
}

/* The setup and teardown of each measurement run with the primary context
 * current (event creation needs one); the calls on streams and events in
 * the timed loops do not depend on it. */
static double enter(void)
{
    if (!opened) {
        char why[sizeof last_error];
        snprintf(why, sizeof why, "%s", last_error);
        if (strncmp(why, "raw_open", 8) != 0)
            snprintf(last_error, sizeof last_error,
                     "raw_open() has not succeeded: %.200s", why);
        return NOT_OPEN;
    }
    cu_result rc = drv.cuCtxPushCurrent(context);
    return rc == RAW_SUCCESS ? 0 : failed("cuCtxPushCurrent", rc);
}

static void leave(void)
{
    cu_context popped;
    drv.cuCtxPopCurrent(&popped);
}

#define CHECK(call, expr)                                                      \
    do {                                                                       \
        cu_result rc_ = (expr);                                                \
        if (rc_ != RAW_SUCCESS) {                                              \
            result = failed(call, rc_);                                        \
            goto out;                                                          \
        }                                                                      \
    } while (0)

/* The device's primary context made current on the calling thread until
 * raw_context_pop(), as PyTorch and CuPy leave it on theirs: then
 * max.driver's enqueues find it current and push nothing. */
EXPORT int raw_context_push(void)
{
    double result = enter();
    return result == 0 ? 0 : -1;
}

EXPORT void raw_context_pop(void)
{
    leave();
}

/* What an enqueue from a thread without a current context adds: making
 * the device's context current and restoring the thread's afterwards. */
EXPORT double raw_context_bind_ns(long iterations)
{
    double result = enter();
    if (result != 0)
        return result;
    leave();
    cu_context current;
    int64_t start = now_ns();
    for (long i = 0; i < iterations; i++) {
        CHECK("cuCtxGetCurrent", drv.cuCtxGetCurrent(&current));
        CHECK("cuCtxPushCurrent", drv.cuCtxPushCurrent(context));
        CHECK("cuCtxPopCurrent", drv.cuCtxPopCurrent(&current));
    }
    result = per_iteration(start, iterations);
out:
    return result;
}

/* A disabled-timing event recorded on `stream` and completed (stream 0:
 * created only). */
static cu_result ready_event(cu_event *ev, cu_stream stream)
{
    cu_result rc = drv.cuEventCreate(ev, RAW_EVENT_DISABLE_TIMING);
    if (rc == RAW_SUCCESS && stream)
        rc = drv.cuEventRecord(*ev, stream);
    if (rc == RAW_SUCCESS && stream)
        rc = drv.cuEventSynchronize(*ev);
    return rc;
}

/* queue.record_event(ev): one cuEventRecord. */
EXPORT double raw_event_record_ns(uintptr_t stream, long iterations)
{
    double result = enter();
    if (result != 0)
        return result;
    cu_stream s = (cu_stream)stream;
    cu_event ev = NULL;
    CHECK("cuEventCreate", ready_event(&ev, NULL));
    int64_t start = now_ns();
    for (long i = 0; i < iterations; i++)
        CHECK("cuEventRecord", drv.cuEventRecord(ev, s));
    result = per_iteration(start, iterations);
    CHECK("cuStreamSynchronize", drv.cuStreamSynchronize(s));
out:
    if (ev)
        drv.cuEventDestroy(ev);
    leave();
    return result;
}

/* queue.record_event(): a new event each time, recorded, then dropped. */
EXPORT double raw_event_create_record_destroy_ns(uintptr_t stream,
                                                 long iterations)
{
    double result = enter();
    if (result != 0)
        return result;
    cu_stream s = (cu_stream)stream;
    int64_t start = now_ns();
    for (long i = 0; i < iterations; i++) {
        cu_event ev;
        CHECK("cuEventCreate",
              drv.cuEventCreate(&ev, RAW_EVENT_DISABLE_TIMING));
        cu_result rc = drv.cuEventRecord(ev, s);
        drv.cuEventDestroy(ev);
        CHECK("cuEventRecord", rc);
    }
    result = per_iteration(start, iterations);
    CHECK("cuStreamSynchronize", drv.cuStreamSynchronize(s));
out:
    leave();
    return result;
}

/* queue.wait_for(other): mark `other` with an event, `stream` waits on it. */
EXPORT double raw_wait_queue_ns(uintptr_t stream, uintptr_t other,
                                long iterations)
{
    double result = enter();
    if (result != 0)
        return result;
    cu_stream s = (cu_stream)stream, o = (cu_stream)other;
    cu_event ev = NULL;
    CHECK("cuEventCreate", ready_event(&ev, NULL));
    int64_t start = now_ns();
    for (long i = 0; i < iterations; i++) {
        CHECK("cuEventRecord", drv.cuEventRecord(ev, o));
        CHECK("cuStreamWaitEvent", drv.cuStreamWaitEvent(s, ev, 0));
    }
    result = per_iteration(start, iterations);
    CHECK("cuStreamSynchronize", drv.cuStreamSynchronize(s));
out:
    if (ev)
        drv.cuEventDestroy(ev);
    leave();
    return result;
}

/* queue.wait_for(event): `stream` waits on an event recorded on `other`. */
EXPORT double raw_wait_event_ns(uintptr_t stream, uintptr_t other,
                                long iterations)
{
    double result = enter();
    if (result != 0)
        return result;
    cu_stream s = (cu_stream)stream;
    cu_event ev = NULL;
    CHECK("cuEventRecord", ready_event(&ev, (cu_stream)other));
    int64_t start = now_ns();
    for (long i = 0; i < iterations; i++)
        CHECK("cuStreamWaitEvent", drv.cuStreamWaitEvent(s, ev, 0));
    result = per_iteration(start, iterations);
    CHECK("cuStreamSynchronize", drv.cuStreamSynchronize(s));
out:
    if (ev)
        drv.cuEventDestroy(ev);
    leave();
    return result;
}

/* event.is_ready() (and event.synchronize() when complete): cuEventQuery
 * of a completed event. */
EXPORT double raw_event_query_ns(uintptr_t stream, long iterations)
{
    double result = enter();
    if (result != 0)
        return result;
    cu_event ev = NULL;
    CHECK("cuEventRecord", ready_event(&ev, (cu_stream)stream));
    int64_t start = now_ns();
    for (long i = 0; i < iterations; i++)
        CHECK("cuEventQuery", drv.cuEventQuery(ev));
    result = per_iteration(start, iterations);
out:
    if (ev)
        drv.cuEventDestroy(ev);
    leave();
    return result;
}

/* event.synchronize() when complete, the blocking way: cuEventSynchronize. */
EXPORT double raw_event_synchronize_ns(uintptr_t stream, long iterations)
{
    double result = enter();
    if (result != 0)
        return result;
    cu_event ev = NULL;
    CHECK("cuEventRecord", ready_event(&ev, (cu_stream)stream));
    int64_t start = now_ns();
    for (long i = 0; i < iterations; i++)
        CHECK("cuEventSynchronize", drv.cuEventSynchronize(ev));
    result = per_iteration(start, iterations);
out:
    if (ev)
        drv.cuEventDestroy(ev);
    leave();
    return result;
}

/* queue.synchronize() when idle: cuStreamQuery of an idle stream. */
EXPORT double raw_stream_query_ns(uintptr_t stream, long iterations)
{
    double result = enter();
    if (result != 0)
        return result;
    cu_stream s = (cu_stream)stream;
    CHECK("cuStreamSynchronize", drv.cuStreamSynchronize(s));
    int64_t start = now_ns();
    for (long i = 0; i < iterations; i++)
        CHECK("cuStreamQuery", drv.cuStreamQuery(s));
    result = per_iteration(start, iterations);
out:
    leave();
    return result;
}

/* queue.synchronize() when idle, the blocking way: cuStreamSynchronize. */
EXPORT double raw_stream_synchronize_ns(uintptr_t stream, long iterations)
{
    double result = enter();
    if (result != 0)
        return result;
    cu_stream s = (cu_stream)stream;
    int64_t start = now_ns();
    for (long i = 0; i < iterations; i++)
        CHECK("cuStreamSynchronize", drv.cuStreamSynchronize(s));
    result = per_iteration(start, iterations);
out:
    leave();
    return result;
}

/* flag.signal(v): a release-ordered store of a u64 (no driver call). */
static _Atomic uint64_t slot;

EXPORT double raw_host_store_ns(long iterations)
{
    int64_t start = now_ns();
    for (long i = 0; i < iterations; i++)
        atomic_store_explicit(&slot, (uint64_t)i, memory_order_release);
    return per_iteration(start, iterations);
}

/* queue.native_stream_handle: reading a stored handle. */
static volatile uintptr_t stored_handle;

EXPORT double raw_load_ns(long iterations)
{
    uintptr_t sum = 0;
    int64_t start = now_ns();
    for (long i = 0; i < iterations; i++)
        sum += stored_handle;
    double result = per_iteration(start, iterations);
    stored_handle = sum; /* keeps the loads */
    return result;
}

/* ---- Copies ---------------------------------------------------------------
 *
 * The baselines of the copy benchmarks: cuMemcpy{HtoD,DtoH,DtoD}Async
 * between pinned host memory and device memory allocated here, the way
 * max.driver allocates its own (pinned: portable and mapped; device:
 * cuMemAlloc), and cuMemcpyPeerAsync into device 1's memory. */

enum {
    RAW_COPY_HTOD = 0,
    RAW_COPY_DTOH = 1,
    RAW_COPY_DTOD = 2,
    RAW_COPY_PEER = 3, /* device 0 -> device 1, on a stream of device 1 */
    RAW_MEMHOSTALLOC_PORTABLE = 0x1,
    RAW_MEMHOSTALLOC_DEVICEMAP = 0x2,
};

typedef struct copy_memory {
    void *host;
    cu_deviceptr device, other;
    cu_context peer_context; /* RAW_COPY_PEER: device 1's, retained */
    cu_deviceptr peer;       /* ... and memory there */
} copy_memory;

static void copy_memory_free(copy_memory *m)
{
    cu_context popped;
    if (m->host)
        drv.cuMemFreeHost(m->host);
    if (m->device)
        drv.cuMemFree(m->device);
    if (m->other)
        drv.cuMemFree(m->other);
    if (m->peer && drv.cuCtxPushCurrent(m->peer_context) == RAW_SUCCESS) {
        drv.cuMemFree(m->peer);
        drv.cuCtxPopCurrent(&popped);
    }
}

/* Device 1's memory, under its primary context. */
static cu_result peer_alloc(copy_memory *m, size_t bytes)
{
    cu_device peer;
    cu_context popped;
    cu_result rc = drv.cuDeviceGet(&peer, 1);
    if (rc == RAW_SUCCESS)
        rc = drv.cuDevicePrimaryCtxRetain(&m->peer_context, peer);
    if (rc == RAW_SUCCESS &&
        (rc = drv.cuCtxPushCurrent(m->peer_context)) == RAW_SUCCESS) {
        rc = drv.cuMemAlloc(&m->peer, bytes);
        drv.cuCtxPopCurrent(&popped);
    }
    return rc;
}

static cu_result copy_memory_alloc(copy_memory *m, int kind, size_t bytes)
{
    cu_result rc = drv.cuMemHostAlloc(&m->host, bytes,
                                      RAW_MEMHOSTALLOC_PORTABLE |
                                          RAW_MEMHOSTALLOC_DEVICEMAP);
    if (rc == RAW_SUCCESS)
        rc = drv.cuMemAlloc(&m->device, bytes);
    if (rc == RAW_SUCCESS)
        rc = drv.cuMemAlloc(&m->other, bytes);
    if (rc == RAW_SUCCESS && kind == RAW_COPY_PEER)
        rc = peer_alloc(m, bytes);
    if (rc == RAW_SUCCESS)
        memset(m->host, 1, bytes); /* touched, as the benchmarks' buffers */
    return rc;
}

static cu_result copy_once(int kind, const copy_memory *m, size_t bytes,
                           cu_stream s)
{
    switch (kind) {
    case RAW_COPY_HTOD:
        return drv.cuMemcpyHtoDAsync(m->device, m->host, bytes, s);
    case RAW_COPY_DTOH:
        return drv.cuMemcpyDtoHAsync(m->host, m->device, bytes, s);
    case RAW_COPY_PEER:
        return drv.cuMemcpyPeerAsync(m->peer, m->peer_context, m->device,
                                     context, bytes, s);
    default: return drv.cuMemcpyDtoDAsync(m->other, m->device, bytes, s);
    }
}

/* `iterations` copies of `bytes` of `kind` (RAW_COPY_*) on `stream`, after
 * one untimed copy.  With `synchronize`, the clock runs until the stream
 * has finished them (bytes / result: the bandwidth); without, it stops
 * after the last enqueue (the call overhead of a small copy) and the
 * stream is synchronized afterwards.  ns per copy. */
EXPORT double raw_copy_ns(int kind, uint64_t bytes, uintptr_t stream,
                          long iterations, int synchronize)
{
    if (kind < RAW_COPY_HTOD || kind > RAW_COPY_PEER || bytes == 0) {
        snprintf(last_error, sizeof last_error,
                 "raw_copy_ns: bad kind %d or size %llu", kind,
                 (unsigned long long)bytes);
        return -1;
    }
    double result = enter();
    if (result != 0)
        return result;
    cu_stream s = (cu_stream)stream;
    copy_memory m = {NULL, 0, 0, NULL, 0};
    bool pushed = false;
    CHECK("allocation (cuMemHostAlloc, cuMemAlloc)",
          copy_memory_alloc(&m, kind, (size_t)bytes));
    /* A peer copy is enqueued on a stream of device 1: its context. */
    if (kind == RAW_COPY_PEER) {
        CHECK("cuCtxPushCurrent", drv.cuCtxPushCurrent(m.peer_context));
        pushed = true;
    }
    CHECK("the first copy", copy_once(kind, &m, (size_t)bytes, s));
    CHECK("cuStreamSynchronize", drv.cuStreamSynchronize(s));
    int64_t start = now_ns();
    for (long i = 0; i < iterations; i++)
        CHECK("cuMemcpy*Async", copy_once(kind, &m, (size_t)bytes, s));
    if (synchronize)
        CHECK("cuStreamSynchronize", drv.cuStreamSynchronize(s));
    result = per_iteration(start, iterations);
out:
    /* Nothing may be freed under a pending copy, a failed one included. */
    if (m.host) {
        cu_result rc = drv.cuStreamSynchronize(s);
        if (rc != RAW_SUCCESS && result >= 0)
            result = failed("cuStreamSynchronize", rc);
    }
    if (pushed) {
        cu_context popped;
        drv.cuCtxPopCurrent(&popped);
    }
    copy_memory_free(&m);
    leave();
    return result;
}
