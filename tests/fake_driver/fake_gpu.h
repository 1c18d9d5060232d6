/* Internal interface of the fake GPU driver (test code only, never ships).
 *
 * One shared library exports both the CUDA driver API entry points
 * (fake_cuda.c) and the HIP runtime ones (fake_hip.c) that the project's
 * backends use.  Both are thin front ends over one engine (fake_engine.c):
 * devices, streams run by host threads, events, mapped pinned host memory,
 * fault injection and the control API the tests call through ctypes.  The
 * CUDA and HIP error codes the engine returns coincide numerically, so the
 * engine speaks one set of codes (FAKE_E_*) and the fronts pass them on. */
#ifndef FAKE_GPU_H
#define FAKE_GPU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cuda_abi.h"
#include "hip_abi.h"

/* Error codes shared by both APIs (cudaError_enum and hipError_t agree on
 * every value the fake returns). */
enum {
    FAKE_E_OK = 0,
    FAKE_E_INVALID_VALUE = 1,
    FAKE_E_OUT_OF_MEMORY = 2,
    FAKE_E_NOT_INITIALIZED = 3,
    FAKE_E_DEINITIALIZED = 4,
    FAKE_E_NO_DEVICE = 100,
    FAKE_E_INVALID_DEVICE = 101,
    FAKE_E_INVALID_CONTEXT = 201,
    FAKE_E_INVALID_HANDLE = 400,
    FAKE_E_NOT_FOUND = 500,
    FAKE_E_NOT_READY = 600,
    FAKE_E_ILLEGAL_ADDRESS = 700,
    FAKE_E_LAUNCH_FAILED = 719,
    FAKE_E_NOT_PERMITTED = 800, /* CUDA only (HIP has no such code) */
    FAKE_E_NOT_SUPPORTED = 801,
    /* Stream capture (the same values in CUDA and HIP). */
    FAKE_E_CAPTURE_UNSUPPORTED = 900,
    FAKE_E_CAPTURE_INVALIDATED = 901,
    FAKE_E_CAPTURE_MERGE = 902,
    FAKE_E_CAPTURE_UNMATCHED = 903,
    FAKE_E_CAPTURE_UNJOINED = 904,
    FAKE_E_CAPTURE_ISOLATION = 905,
    FAKE_E_CAPTURE_IMPLICIT = 906,
    FAKE_E_CAPTURED_EVENT = 907,
    FAKE_E_CAPTURE_WRONG_THREAD = 908,
    FAKE_E_UNKNOWN = 999,
};

/* The API constants the fake checks.  Our own copies, because the
 * project's headers prefix theirs and may rename them; the values are the
 * drivers' and never change. */
enum {
    FAKE_STREAM_NON_BLOCKING = 0x1, /* CU_ / hipStreamNonBlocking */
    /* The fake's own flags of the drivers' special streams (never accepted
     * from a caller; fake_gpu_stream_flags reports them). */
    FAKE_STREAM_LEGACY = 0x100,     /* CUDA's CU_STREAM_LEGACY (0x1) */
    FAKE_STREAM_PER_THREAD = 0x200, /* CUDA's CU_STREAM_PER_THREAD (0x2) */
    FAKE_STREAM_NULL = 0x400,       /* HIP's null stream (0) */
    FAKE_STREAM_SPECIAL =
        FAKE_STREAM_LEGACY | FAKE_STREAM_PER_THREAD | FAKE_STREAM_NULL,
    FAKE_EVENT_DISABLE_TIMING = 0x2, /* CU_ / hipEventDisableTiming */
    FAKE_CU_MEMHOSTALLOC_DEVICEMAP = 0x2,
    FAKE_CU_ATTR_MAX_PITCH = 11,
    FAKE_CU_ATTR_INTEGRATED = 18,
    FAKE_CU_ATTR_CC_MAJOR = 75,
    FAKE_CU_ATTR_CC_MINOR = 76,
    FAKE_CU_ATTR_STREAM_MEM_OPS_V1 = 92,
    FAKE_CU_ATTR_64_BIT_STREAM_MEM_OPS_V1 = 93,
    FAKE_CU_ATTR_MEMORY_POOLS = 115,
    FAKE_CU_ATTR_64_BIT_STREAM_MEM_OPS = 122, /* CUDA 12.0 and later */
    FAKE_CU_ATTR_MULTICAST_SUPPORTED = 132,   /* CUDA 12.1 and later */
    FAKE_HIP_ATTR_INTEGRATED = 16,            /* hipDeviceAttributeIntegrated */
    FAKE_HIP_ATTR_MAX_PITCH = 58,             /* hipDeviceAttributeMaxPitch */
    FAKE_HIP_ATTR_MEMORY_POOLS = 88,
    FAKE_HIP_ATTR_STREAM_WAIT_VALUE = 10013,
    FAKE_POINTER_DEVICE_ORDINAL = 9, /* CU_ / HIP_POINTER_ATTRIBUTE_... */
};

/* ---- Entry point identities ----------------------------------------- */

/* Entry points outside the project's X-macro lists that the fake exports
 * too.  (Versioned symbols such as cuStreamDestroy_v2 and
 * hipGetDevicePropertiesR0000 share their base name's bookkeeping.) */
/* Entry points the fake exports beyond the project's lists: the v1 proc
 * lookup, and calls the project does not use but the self-test drives
 * streams and events with. */
#define FAKE_EXTRA_ENTRY_POINTS(X)                                             \
    X(cuGetProcAddress)                                                        \
    X(cuDeviceTotalMem)                                                        \
    X(cuStreamSynchronize)                                                     \
    X(cuStreamIsCapturing)                                                     \
    X(hipDeviceTotalMem)                                                       \
    X(hipStreamSynchronize)                                                    \
    X(hipStreamIsCapturing)

#define FAKE_ID_CU(name, version, kind, ret, params) FAKE_ID_##name,
#define FAKE_ID_HIP(name, kind, ret, params) FAKE_ID_##name,
#define FAKE_ID_EXTRA(name) FAKE_ID_##name,
enum {
    CUDA_ENTRY_POINTS(FAKE_ID_CU) HIP_ENTRY_POINTS(FAKE_ID_HIP)
        FAKE_EXTRA_ENTRY_POINTS(FAKE_ID_EXTRA) FAKE_ID_COUNT
};
#undef FAKE_ID_CU
#undef FAKE_ID_HIP
#undef FAKE_ID_EXTRA

/* ---- Compile-time omission ------------------------------------------
 * -DFAKE_OMIT_<name> simulates an older driver that lacks <name>.  The
 * preprocessor cannot test #ifdef inside an X-macro, so FAKE_PICK uses the
 * Linux kernel's IS_ENABLED trick: when FAKE_OMIT_<name> is defined as 1
 * the placeholder turns into "0," and shifts the choice to `if_omitted`.
 * The omitted function is still compiled, but with hidden visibility, so it
 * is absent from the dynamic symbol table (dlsym fails) and the
 * cuGetProcAddress table holds NULL for it. */
#define FAKE_PLACEHOLDER_1 0,
#define FAKE_PICK(name, if_omitted, if_present)                                \
    FAKE_PICK_0(FAKE_OMIT_##name, if_omitted, if_present)
/* One more level, so that FAKE_OMIT_<name> is expanded before pasting. */
#define FAKE_PICK_0(value, a, b) FAKE_PICK_1(value, a, b)
#define FAKE_PICK_1(value, a, b) FAKE_PICK_2(FAKE_PLACEHOLDER_##value, a, b)
#define FAKE_PICK_2(arg_or_junk, a, b) FAKE_PICK_3(arg_or_junk a, b, )
#define FAKE_PICK_3(ignored, chosen, ...) chosen
#define FAKE_OMITTED(name) FAKE_PICK(name, 1, 0)
#define FAKE_VISIBILITY(name)                                                  \
    __attribute__((visibility(FAKE_PICK(name, "hidden", "default"))))
/* Exports `alias` (a versioned symbol such as cuStreamDestroy_v2) as the
 * same code as `name`, omitted together with it. */
#define FAKE_ALIAS(name, versioned, ret, params)                               \
    FAKE_VISIBILITY(name) ret versioned params __attribute__((alias(#name)))

#define FAKE_EXPORT __attribute__((visibility("default")))

#pragma GCC visibility push(hidden)

/* Counts the call, then fires an armed fault: returns its error code, which
 * the entry point returns at once, or 0 to go on. */
unsigned fake_enter(int id);

/* Name of an entry point id ("cuStreamDestroy"), or NULL. */
const char *fake_entry_name(int id);

/* ---- Configuration (read from the environment once) ----------------- */

typedef struct fake_config {
    int devices;
    const char *name_prefix;
    int cc_major, cc_minor;
    const char *gcn_arch;
    size_t total_mem;
    int integrated;
    int peer;
    unsigned init_error;
    int driver_version; /* cuDriverGetVersion, e.g. 13000 for CUDA 13.0 */
    int hang_seconds;   /* how long a call a real driver would hang in waits */
    long long queue_depth; /* pending items a stream takes before it blocks */
    int stream_mem_ops; /* 0: no cuStreamWaitValue64 / hipStreamWaitValue64 */
    int memory_pools;   /* 0: no stream-ordered allocation */
    int multicast;      /* 0: no multicast objects (fake_vmm.c) */
    /* The real-driver rules that can be turned off (README, "Real-driver
     * rules"): each is on unless its variable is 0. */
    int cross_device_events; /* a cross-device event record is a violation */
    int context_check;     /* CUDA enqueues need the stream's context current */
    int host_copy_sync;    /* copies between host memory are synchronous */
    int pinned_alloc_sync; /* pinned allocation synchronises the device */
    int exit_check;        /* calls after the library's destructor fail */
    size_t max_pitch;      /* not a switch: the largest 2-D copy pitch */
    /* Not a switch: bytes per second of a modelled copy engine (0: none,
     * copies take only their memmove).  A stream's copy or fill then also
     * sleeps for its bytes at this rate, without holding a CPU, as a DMA
     * engine moves data while the host computes. */
    long long copy_bytes_per_s;
    /* Not a rule: an infinitely fast device for measuring the cost of the
     * calls alone.  An item that cannot block (a record, a copy or fill, an
     * allocation or free, a wait already satisfied) enqueued on an idle
     * stream runs in the call, so no stream thread has to wake up. */
    int instant;
} fake_config;

const fake_config *fake_cfg(void);
/* FAKE_GPU_MAX_PITCH as the int attribute that reports it (CUDA 11, HIP
 * 58), saturated. */
int fake_max_pitch_attribute(void);
bool fake_valid_device(int device);
/* Writes "<prefix> <device>" into name[len] (truncated, NUL-terminated). */
void fake_device_name(int device, char *name, int len);
size_t fake_free_mem(int device);

/* ---- Violations ------------------------------------------------------
 * Calls that a real driver answers by hanging or by undefined behaviour
 * (an API call from a callback, a free that waits on a stream that waits
 * on the host, a full queue nobody drains) are recorded with a sentence
 * saying so, printed to stderr, and read back by the tests. */
void fake_violation(const char *format, ...)
    __attribute__((format(printf, 1, 2)));

/* The entry point the calling thread is in (for violation messages), or
 * "the fake" when none. */
const char *fake_current_entry_name(void);

/* Non-NULL on the callback threads while they run a callback: what kind of
 * callback ("host-function callback", "stream callback"). */
const char *fake_callback_kind(void);

/* The API's name and description of an error code, or NULL if unknown. */
const char *fake_error_name(unsigned code, bool hip);
const char *fake_error_string(unsigned code, bool hip);

/* ---- Streams, events and host memory --------------------------------
 * Handles are the engine's object pointers; every call validates them
 * against a registry, so a stale or foreign handle gives INVALID_HANDLE
 * instead of a crash. */

enum fake_callback_api { FAKE_CB_CUDA, FAKE_CB_HIP };

unsigned fake_stream_create(int device, unsigned flags, void **out);
/* INVALID_HANDLE for a special stream: only its owner retires it. */
unsigned fake_stream_destroy(void *stream);

/* The drivers' special stream handles (fake_special.c), resolved by the
 * fronts before they reach the engine: CUDA's CU_STREAM_LEGACY and
 * CU_STREAM_PER_THREAD in the current context's device, HIP's null stream
 * in the current device.  Each is a stream of the engine made on first
 * use; a per-thread one is retired when its thread exits. */
enum fake_special {
    FAKE_SPECIAL_LEGACY,
    FAKE_SPECIAL_PER_THREAD,
    FAKE_SPECIAL_NULL
};
unsigned fake_special_stream(enum fake_special which, int device, void **out);
/* Destroys a special stream (its pending work still completes). */
void fake_stream_retire(void *stream);
/* Whether any stream (destroyed ones still draining included) exists, for
 * the teardown at exit. */
bool fake_streams_alive(void);
/* The device of the stream a handle names; false when it names none. */
bool fake_stream_device(void *stream, int *device);
unsigned fake_stream_query(void *stream);
unsigned fake_stream_synchronize(void *stream);
unsigned fake_stream_wait_event(void *stream, void *event);
/* Enqueues a wait until (*addr & mask) compares to value by `op`
 * (0 GEQ, 1 EQ, 2 AND, 3 NOR: the CUDA and HIP encodings agree). */
unsigned fake_stream_wait_value(void *stream, uintptr_t device_addr,
                                uint64_t value, unsigned op, uint64_t mask);
unsigned fake_stream_host_fn(void *stream, void (*fn)(void *), void *data);
unsigned fake_stream_callback(void *stream, enum fake_callback_api api,
                              void (*callback)(void), void *data);

unsigned fake_event_create(int device, unsigned flags, void **out);
unsigned fake_event_destroy(void *event);
unsigned fake_event_record(void *event, void *stream);
unsigned fake_event_query(void *event);
unsigned fake_event_synchronize(void *event);
unsigned fake_event_elapsed(float *ms, void *start, void *end);

unsigned fake_host_alloc(int device, size_t bytes, bool mapped, void **host);
unsigned fake_host_device_pointer(void *host, void **device);
unsigned fake_host_free(void *host);

/* ---- Device memory, copies and fills --------------------------------
 * Device pointers are addresses in a range of the device's own that the
 * host cannot dereference (fake_devmem.c); copies and fills are stream
 * items that check, when they run, that every device byte they touch is in
 * a live allocation of the right device (fake_copy.c). */

unsigned fake_dmem_alloc(int device, size_t bytes, uintptr_t *ptr);
/* Synchronises the allocation's device first (bounded, like freeing
 * pinned memory). */
unsigned fake_dmem_free(uintptr_t ptr);
/* Stream-ordered: the address is reserved now, the memory is live once the
 * stream reaches the allocation, and gone once it reaches the free. */
unsigned fake_dmem_alloc_async(void *stream, size_t bytes, uintptr_t *ptr);
unsigned fake_dmem_free_async(void *stream, uintptr_t ptr);
/* The device of device memory or of a pinned allocation (either view). */
unsigned fake_pointer_device(uintptr_t ptr, int *device);

/* What one side of a copy must be, as the entry point says. */
enum fake_role {
    FAKE_ROLE_DEVICE, /* device memory, or the device view of pinned memory */
    FAKE_ROLE_HOST,   /* pinned (either view) or pageable host memory */
    FAKE_ROLE_ANY,    /* by its address (hipMemcpyDefault) */
};

typedef struct fake_side {
    uintptr_t addr;
    size_t pitch; /* bytes from one row to the next (>= the width) */
    enum fake_role role;
    int device; /* device memory of this device (peer copies); -1: the
                   stream's */
} fake_side;

/* A copy of `height` rows of `width` bytes.  Pageable host memory makes it
 * synchronous: it waits for the stream's earlier work (bounded), copies
 * and returns the stream's error. */
unsigned fake_copy(void *stream, const fake_side *dst, const fake_side *src,
                   size_t width, size_t height);
/* A 2-D copy: a pitch above FAKE_GPU_MAX_PITCH is INVALID_VALUE (no
 * effect), as on a real device. */
unsigned fake_copy_2d(void *stream, const fake_side *dst, const fake_side *src,
                      size_t width, size_t height);
/* Fills `count` elements of `size` (1, 2 or 4) bytes with `value`. */
unsigned fake_fill(void *stream, uintptr_t dst, unsigned size, uint32_t value,
                   size_t count);

/* ---- Stream capture and graphs (fake_graph.c) ------------------------
 * Capture modes and statuses have the same values in CUDA and HIP. */

enum {
    FAKE_CAPTURE_GLOBAL = 0,
    FAKE_CAPTURE_THREAD_LOCAL = 1,
    FAKE_CAPTURE_RELAXED = 2,
};

unsigned fake_begin_capture(void *stream, unsigned mode);
unsigned fake_end_capture(void *stream, void **graph);
unsigned fake_is_capturing(void *stream, unsigned *status);
unsigned fake_graph_instantiate(void **exec, void *graph,
                                unsigned long long flags);
unsigned fake_graph_launch(void *exec, void *stream);
unsigned fake_graph_exec_destroy(void *exec);
unsigned fake_graph_destroy(void *graph);
/* A potentially unsafe call (allocation and frees that are not stream
 * ordered) while a capture prohibits them for the calling thread: the
 * error, after invalidating those captures; 0 otherwise. */
unsigned fake_capture_unsafe_call(void);
/* An operation the fake does not capture (stream-ordered allocation: real
 * drivers make graph memory nodes, which the fake does not model) on a
 * capturing stream: refused as unsupported; 0 when the stream does not
 * capture. */
unsigned fake_capture_unsupported(void *stream, const char *what);
int fake_graphs_live(bool executable);

#pragma GCC visibility pop

/* ---- Control API (exported; called by tests through ctypes) --------- */

FAKE_EXPORT int fake_gpu_fail(const char *entry_point, int nth, int error_code);
FAKE_EXPORT void fake_gpu_reset(void);
FAKE_EXPORT int fake_gpu_calls(const char *entry_point);
FAKE_EXPORT int fake_gpu_live(const char *kind);
FAKE_EXPORT int fake_gpu_async_error(void *stream, int error_code);
FAKE_EXPORT unsigned fake_gpu_stream_flags(void *stream);
FAKE_EXPORT void *fake_gpu_special_stream(const char *which, int device);
FAKE_EXPORT int fake_gpu_threads(void);
FAKE_EXPORT int fake_gpu_violations(void);
FAKE_EXPORT const char *fake_gpu_violation(int i);
FAKE_EXPORT void fake_gpu_clear_violations(void);
/* fake_hostmem.c: bytes of live pinned host allocations (their requested
 * sizes), or with `peak` their peak since load or the last
 * fake_gpu_reset_pinned_peak, which sets the peak to the current bytes. */
FAKE_EXPORT unsigned long long fake_gpu_pinned_bytes(int peak);
FAKE_EXPORT void fake_gpu_reset_pinned_peak(void);
/* fake_peer.c: whether `device` enabled peer access to `peer`; whether
 * `device` may use memory of `owner`'s default pool; that pool's release
 * threshold (-1 / 0 for an invalid device). */
FAKE_EXPORT int fake_gpu_peer_access(int device, int peer);
FAKE_EXPORT int fake_gpu_pool_access(int owner, int device);
FAKE_EXPORT unsigned long long fake_gpu_pool_release_threshold(int device);

/* The calling thread's CUDA context stack depth (fake_cuda.c), reported by
 * fake_gpu_live("context_push"). */
__attribute__((visibility("hidden"))) int fake_cuda_push_depth(void);
/* cuGetProcAddress calls refused for asking a version newer than the
 * driver's, since the library was loaded (fake_gpu_live("proc_too_new")). */
__attribute__((visibility("hidden"))) int fake_cuda_proc_too_new(void);

#endif /* FAKE_GPU_H */
