/* The public interface of the max.driver C core.
 *
 * Pure C11 + pthreads: nothing here knows Python, and nothing outside
 * csrc/core knows a driver.  Every call that can fail returns an
 * mxd_status and fills an mxd_error that the binding layer turns into an
 * exception; the status says which kind of exception (see mxd_status).
 *
 * Objects are reference counted (retain/release) and thread-safe: any
 * function may be called from any thread without external locking.
 * Work enqueued on a queue keeps every object it needs alive until it has
 * run, so a caller may release its references right after enqueueing. */
#ifndef MXD_H
#define MXD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What went wrong, chosen so that each value maps to one Python exception. */
typedef enum mxd_status {
    MXD_OK = 0,
    MXD_INVALID,      /* wrong device or invalid state       -> ValueError   */
    MXD_DRIVER,       /* the driver failed (name and code)   -> ValueError   */
    MXD_UNAVAILABLE,  /* feature or result not available     -> RuntimeError */
    MXD_TIMEOUT,      /* a wait ran past its timeout         -> TimeoutError */
    MXD_INTERRUPTED,  /* the wait's poll callback asked to stop (the caller
                         already knows why, e.g. a pending signal)           */
    MXD_NO_MEMORY,    /* allocation failed                    -> MemoryError */
    MXD_IMPORT,       /* a forced backend cannot be used      -> ImportError  */
    MXD_BAD_TYPE,     /* an argument of the wrong kind        -> TypeError    */
    MXD_OUT_OF_RANGE, /* an index outside its dimension      -> IndexError   */
    MXD_HAZARD,       /* the producer of the memory failed   -> HostHazardError
                         (a RuntimeError) */
} mxd_status;

typedef struct mxd_error {
    mxd_status status;
    int code;          /* driver error code, 0 when not from a driver */
    char name[64];     /* driver error name, e.g. "CUDA_ERROR_INVALID_VALUE" */
    char message[512]; /* a complete sentence for the user */
} mxd_error;

typedef struct mxd_device mxd_device;
typedef struct mxd_queue mxd_queue;
typedef struct mxd_event mxd_event;
typedef struct mxd_flag mxd_flag;
typedef struct mxd_completion mxd_completion;

/* How to wait: every blocking call waits in bounded slices and calls
 * `poll` between them (with no lock held); a non-zero return stops the wait
 * with MXD_INTERRUPTED.  `timeout` < 0 waits forever.  `poll` NULL says
 * there is nothing to poll for (not the main thread): with no timeout
 * either, a backend may then block in the driver's own wait. */
typedef struct mxd_wait {
    double timeout;
    int (*poll)(void *ctx);
    void *ctx;
} mxd_wait;

/* Work items that run user code (host functions) are run between
 * enter() and leave() of the registered runner; consecutive items on one
 * worker share one enter()/leave() pair.  enter() returns NULL to refuse
 * (e.g. the interpreter is finalizing): the item's `discard` runs instead
 * of its `run`, without the runner. */
typedef struct mxd_host_runner {
    void *(*enter)(void);
    void (*leave)(void *token);
    /* Optional: a worker thread that entered the runner is about to exit
     * (the runner may keep per-thread state between entries). */
    void (*thread_exit)(void);
} mxd_host_runner;

typedef struct mxd_host_fn {
    void (*run)(void *data);     /* runs inside the runner */
    void (*discard)(void *data); /* frees data when the work never runs */
    void *data;
    /* Optional: runs the function inside the runner without freeing data,
     * as often as asked (a captured host function runs at every launch of
     * its graph; discard frees data once the graph is gone).  NULL: the
     * function cannot be captured. */
    void (*call)(void *data);
} mxd_host_fn;

/* ---- Initialisation and backend selection ------------------------------- */

/* Reads MAX_DRIVER_BACKEND / MAX_DRIVER_{CUDA,HIP}_LIBRARY and picks the
 * accelerator backend.  Idempotent.  Fails (MXD_IMPORT) only when a forced
 * backend cannot be used or the variable's value is not understood. */
mxd_status mxd_init(const mxd_host_runner *runner, mxd_error *err);

/* Stops running host work that has not started yet (it is discarded
 * instead).  Called at interpreter exit. */
void mxd_shutdown(void);

typedef struct mxd_selection {
    const char *api;     /* "cuda" or "hip" */
    const char *library; /* path tried, NULL when none was tried */
    bool loaded;
    int device_count;
    const char *error; /* NULL when there was none */
    bool chosen;
} mxd_selection;

size_t mxd_selection_count(void);
const mxd_selection *mxd_selection_at(size_t i);
/* One line per backend considered, for error messages. */
const char *mxd_selection_summary(void);

int mxd_accelerator_count(void);
/* "cuda" or "hip", or NULL when there is no accelerator backend. */
const char *mxd_accelerator_api(void);

/* ---- Devices (never destroyed; one object per device) ------------------- */

mxd_device *mxd_cpu(void);
mxd_status mxd_accelerator(int id, mxd_device **out, mxd_error *err);

const char *mxd_device_api(const mxd_device *dev); /* "cpu","cuda","hip" */
int mxd_device_id(const mxd_device *dev);
bool mxd_device_is_host(const mxd_device *dev);
bool mxd_device_is_host_unified(const mxd_device *dev);

typedef struct mxd_memory_stats {
    uint64_t free_memory;
    uint64_t total_memory;
    bool has_graph_memory; /* GPUs only */
    uint64_t graph_mem_reserved;
    uint64_t graph_mem_used;
} mxd_memory_stats;

mxd_status mxd_device_architecture(const mxd_device *dev, char *buf,
                                   size_t size, mxd_error *err);
mxd_status mxd_device_model_name(const mxd_device *dev, char *buf, size_t size,
                                 mxd_error *err);
mxd_status mxd_device_memory(const mxd_device *dev, mxd_memory_stats *out,
                             mxd_error *err);
mxd_status mxd_device_max_alloc(const mxd_device *dev, uint64_t *out,
                                mxd_error *err);
mxd_status mxd_device_can_access(const mxd_device *dev, const mxd_device *peer,
                                 bool *out, mxd_error *err);
/* Enables peer access for every ordered pair of the backend's accelerators
 * for which mxd_device_can_access is true, so that each reaches the
 * other's memory directly (memory pools included).  Idempotent; nothing to
 * do with fewer than two accelerators.  A failure leaves the pairs enabled
 * before it enabled. */
mxd_status mxd_enable_all_peer_access(mxd_error *err);
/* The device's default queue; borrowed, lives as long as the device. */
mxd_queue *mxd_device_default_queue(mxd_device *dev, mxd_error *err);
mxd_status mxd_device_synchronize(mxd_device *dev, const mxd_wait *wait,
                                  mxd_error *err);
/* Whether no queue of dev has work pending and nothing stands in the way of
 * a synchronize, which would return MXD_OK at once (a hint: work may be
 * enqueued right after; on the CPU one load per queue). */
bool mxd_device_is_idle(mxd_device *dev);

/* What the device's driver supports, probed when it was opened. */
typedef struct mxd_device_features {
    int driver_version;     /* e.g. 12040 for CUDA 12.4; 0 when unknown */
    bool stream_memory_ops; /* wait_for_host_value works */
    const char *host_fn_entry_point; /* NULL when the driver has none */
    /* Python host functions run on our worker threads (true), or on the
     * driver's callback thread, where no other call is allowed (false). */
    bool host_fns_on_workers;
    /* Device memory is allocated and freed in queue order by the driver
     * (cuMemAllocAsync / hipMallocAsync). */
    bool memory_pools;
    /* Pinned memory reserved when the device opened: the staging ring
     * (chunks of chunk_bytes) and the pool's reserve (pinned.h). */
    int staging_chunks;
    int64_t staging_chunk_bytes, pinned_reserve_bytes;
    /* Graph capture (begin_capture) works; else `capture_missing` names
     * what the driver lacks. */
    bool capture;
    const char *capture_missing;
} mxd_device_features;

mxd_status mxd_device_features_of(const mxd_device *dev,
                                  mxd_device_features *out, mxd_error *err);

/* ---- Queues ------------------------------------------------------------- */

mxd_status mxd_queue_create(mxd_device *dev, mxd_queue **out, mxd_error *err);
void mxd_queue_retain(mxd_queue *q);
void mxd_queue_release(mxd_queue *q);
mxd_device *mxd_queue_device(const mxd_queue *q);
bool mxd_queue_is_default(const mxd_queue *q);
/* The CUstream / hipStream_t; 0 on CPU. */
uintptr_t mxd_queue_native_handle(const mxd_queue *q);
/* True when an enqueue on q may block until the device makes progress that
 * needs another thread (a full driver queue behind a host function or a
 * gate on a host value): the caller must then not hold a lock that thread
 * needs, such as Python's GIL.  One atomic load. */
bool mxd_queue_enqueue_may_block(const mxd_queue *q);

/* True for a queue created before os.fork() in this (child) process: it
 * cannot be used here (every operation fails with a RuntimeError). */
bool mxd_queue_is_stale(const mxd_queue *q);
/* True when everything enqueued so far has completed. */
bool mxd_queue_is_idle(const mxd_queue *q);
mxd_status mxd_queue_synchronize(mxd_queue *q, const mxd_wait *wait,
                                 mxd_error *err);
/* Work enqueued on q afterwards waits for all work on `other` so far. */
mxd_status mxd_queue_wait_queue(mxd_queue *q, mxd_queue *other, mxd_error *err);
/* Work enqueued on q afterwards waits for the point `ev` is recorded at
 * now (nothing when unrecorded). */
mxd_status mxd_queue_wait_event(mxd_queue *q, mxd_event *ev, mxd_error *err);
/* Work enqueued on q afterwards waits until flag's value equals `value`. */
mxd_status mxd_queue_wait_value(mxd_queue *q, mxd_flag *flag, uint64_t value,
                                mxd_error *err);
/* Runs fn after earlier work on q; later work waits for it.  On success the
 * queue owns fn.data (run or discard frees it); on failure the caller does. */
mxd_status mxd_queue_host_fn(mxd_queue *q, mxd_host_fn fn, mxd_error *err);
/* Enqueues a kickoff that resets `flag` to 0 and hands fn to the CPU worker
 * pool, which runs it and then signals `value` into `flag`. */
mxd_status mxd_queue_async_host_fn(mxd_queue *q, mxd_host_fn fn, mxd_flag *flag,
                                   uint64_t value, mxd_error *err);

/* ---- Graph capture (capture.c, SPEC §16) -------------------------------- */

typedef struct mxd_graph mxd_graph;

/* Starts capturing on q: what the calling thread enqueues on q afterwards
 * is recorded into a graph instead of running.  RuntimeError when q
 * captures already, when the backend or driver cannot capture (naming what
 * is missing), or from another thread than a capture q takes part in. */
mxd_status mxd_queue_begin_capture(mxd_queue *q, mxd_error *err);
/* Ends the capture q began: *out is the graph (one reference).
 * RuntimeError when q began none, from another thread, or when a queue
 * that joined the capture was not joined back (named; the capture is then
 * discarded). */
mxd_status mxd_queue_end_capture(mxd_queue *q, mxd_graph **out, mxd_error *err);
/* Ends the capture q began and throws it away. */
mxd_status mxd_queue_discard_capture(mxd_queue *q, mxd_error *err);
/* True while q takes part in a capture (began it or joined it). */
bool mxd_queue_is_capturing(const mxd_queue *q);
/* The graph being captured on q keeps `keep` until it is gone (then runs
 * its discard, on any thread): what the binding must keep alive for it
 * (the owner of an event the graph waits for).  Nothing when q does not
 * capture.  On failure the caller keeps it. */
mxd_status mxd_queue_capture_keep(mxd_queue *q, mxd_host_fn keep,
                                  mxd_error *err);

void mxd_graph_retain(mxd_graph *g);
/* The last release frees the graph once its last launch has completed. */
void mxd_graph_release(mxd_graph *g);
mxd_device *mxd_graph_device(const mxd_graph *g);
/* The queue it was captured on (borrowed, lives as long as g). */
mxd_queue *mxd_graph_queue(const mxd_graph *g);
int mxd_graph_node_count(const mxd_graph *g);
/* Replays the graph on q (of the graph's device, not capturing): one
 * operation of the hazard records over the storages its nodes touch. */
mxd_status mxd_graph_launch(mxd_graph *g, mxd_queue *q, mxd_error *err);
/* Graphviz source describing the graph (malloc'd), or NULL. */
char *mxd_graph_dot(const mxd_graph *g);

/* ---- Events ------------------------------------------------------------- */

/* An event lives in storage its owner provides (the binding embeds it in
 * each DeviceEvent object), which spares an allocation on record_event(),
 * the hottest call.  Opaque; large enough for every backend's event. */
enum { MXD_EVENT_STORAGE_SIZE = 96 };
typedef struct mxd_event_storage {
    _Alignas(16) unsigned char bytes[MXD_EVENT_STORAGE_SIZE];
} mxd_event_storage;

/* Initialises an unrecorded event in `storage`; *out points into it. */
mxd_status mxd_event_init(mxd_event_storage *storage, mxd_device *dev,
                          bool enable_timing, mxd_event **out, mxd_error *err);
/* Releases what the event holds; its storage may then be freed.  Work that
 * waits for the event's point does not need the event itself. */
void mxd_event_fini(mxd_event *ev);
mxd_device *mxd_event_device(const mxd_event *ev);
/* Records ev at the current end of q (moves it if already recorded). */
mxd_status mxd_queue_record(mxd_queue *q, mxd_event *ev, mxd_error *err);
/* *ready is true when the recorded point completed or ev is unrecorded. */
mxd_status mxd_event_query(mxd_event *ev, bool *ready, mxd_error *err);
mxd_status mxd_event_synchronize(mxd_event *ev, const mxd_wait *wait,
                                 mxd_error *err);
mxd_status mxd_event_elapsed(mxd_event *start, mxd_event *end, double *ms,
                             mxd_error *err);

/* ---- Completions (SPEC §12.6: HostHazardCompletion) --------------------- */

/* A completion names a point in one queue's order: the end of an operation
 * this module enqueued (the hazard records of memory.h hold them), or a
 * point the user recorded.  Reference counted; it keeps its queue alive.
 * A poisoned completion (its operation failed, or the user said so) is
 * ready, and waiting for it fails with MXD_HAZARD and the message. */

/* A completion at the current end of q (everything enqueued so far). */
mxd_status mxd_completion_record_on(mxd_queue *q, mxd_completion **out,
                                    mxd_error *err);
/* A completion of q that is ready and poisoned with `message`. */
mxd_status mxd_completion_poisoned(mxd_queue *q, const char *message,
                                   mxd_completion **out, mxd_error *err);
void mxd_completion_retain(mxd_completion *c);
void mxd_completion_release(mxd_completion *c);
/* Borrowed; lives as long as c. */
mxd_queue *mxd_completion_queue(const mxd_completion *c);
/* *ready when the point completed or c is poisoned.  A driver error seen
 * here poisons the completion of an operation (ready) and is returned for
 * one made by mxd_completion_record_on (a ValueError, as synchronize). */
mxd_status mxd_completion_query(mxd_completion *c, bool *ready, mxd_error *err);
/* Waits until ready (on the host, in bounded slices); MXD_HAZARD with the
 * poison message when c is (or becomes) poisoned. */
mxd_status mxd_completion_wait(mxd_completion *c, const mxd_wait *wait,
                               mxd_error *err);
/* Poisons c; the first message stays (the first failure is the cause). */
mxd_status mxd_completion_poison(mxd_completion *c, const char *message,
                                 mxd_error *err);
/* The poison message, or NULL; valid as long as c lives. */
const char *mxd_completion_poison_message(const mxd_completion *c);

/* ---- Completion flags --------------------------------------------------- */

mxd_status mxd_flag_create(mxd_device *dev, mxd_flag **out, mxd_error *err);
void mxd_flag_retain(mxd_flag *flag);
void mxd_flag_release(mxd_flag *flag);
mxd_device *mxd_flag_device(const mxd_flag *flag);
/* Device-visible address of the 8-byte slot (host address on CPU). */
uintptr_t mxd_flag_device_ptr(const mxd_flag *flag);
/* Release store; works on any flag (after a fork it only stores). */
void mxd_flag_signal(mxd_flag *flag, uint64_t value);
uint64_t mxd_flag_load(const mxd_flag *flag); /* acquire load */

/* ---- Virtual devices (virtual.c) ----------------------------------------
 *
 * MAX's virtual device mode, for compiling without the hardware: with a
 * count above 0, accelerator ids 0..count-1 name virtual devices, whatever
 * the hardware, that report the API and target architecture set here and
 * refuse to run work or hold memory (MXD_UNAVAILABLE, naming virtual device
 * mode).  The settings are process-wide.  A virtual device keeps the
 * settings it was made with: one device object per (id, API, architecture)
 * asked for, living for the whole process. */

enum { MXD_VIRTUAL_VALUE_SIZE = 64 }; /* a setting's longest value + NUL */

/* The most virtual devices: above the largest machines built (NVLink
 * domains of a few hundred GPUs), and small enough that what enumerates
 * them (scan_available_devices makes one DeviceSpec per device) stays
 * cheap.  MAX accepts up to 2**31 - 1, which would take minutes and
 * gigabytes to enumerate. */
enum { MXD_VIRTUAL_MAX_COUNT = 4096 };

typedef enum mxd_virtual_setting {
    MXD_VIRTUAL_API,  /* "cuda", "hip", "metal", ...; "" when unset */
    MXD_VIRTUAL_ARCH, /* "sm_90", "gfx942", ...; "" when unset */
    MXD_VIRTUAL_CPU,  /* an LLVM CPU name for CPU code; "" for the host's */
} mxd_virtual_setting;

/* 0 leaves virtual device mode; MXD_INVALID when negative or above
 * MXD_VIRTUAL_MAX_COUNT. */
mxd_status mxd_virtual_set_count(long long count, mxd_error *err);
int mxd_virtual_count(void);
/* MXD_INVALID for a value too long, or a CPU target that cannot be
 * honoured ("native"; "generic" on a host without a known baseline).
 * "generic" is stored as the host family's baseline CPU name. */
mxd_status mxd_virtual_set(mxd_virtual_setting which, const char *value,
                           mxd_error *err);
void mxd_virtual_get(mxd_virtual_setting which, char *buf, size_t size);
/* Virtual accelerator `id` (-1 means 0) for the current settings; its API
 * is the one set, else the chosen backend's, else "cuda".  MXD_INVALID
 * when virtual device mode is off or id is out of range. */
mxd_status mxd_virtual_device(int id, mxd_device **out, mxd_error *err);
bool mxd_device_is_virtual(const mxd_device *dev);

/* ---- Cleanup ------------------------------------------------------------ */

/* Destroys and frees the driver refused, done where nobody could be told
 * (on the core's cleanup thread): how many, and the last one's message
 * (copied into last[size]). */
size_t mxd_cleanup_failures(char *last, size_t size);

#ifdef __cplusplus
}
#endif
#endif /* MXD_H */
