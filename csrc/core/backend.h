/* The backend operations table and the object layouts shared by the core's
 * generic layer and its backends.  Not part of the public interface.
 *
 * Each backend (cpu.c, later cuda.c / hip.c) fills one mxd_backend.  The
 * generic layer (device.c, queue.c, event.c, flag.c) checks arguments,
 * keeps the bookkeeping every backend needs (reference counts, the device's
 * list of queues) and calls through the table.  Backend objects embed the
 * generic struct as their first member, so a backend converts with a cast. */
#ifndef MXD_BACKEND_H
#define MXD_BACKEND_H

#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#include "capture.h"
#include "hazard.h"
#include "memory.h"
#include "mxd.h"
#include "symmetric.h"
#include "sync.h"
#include "trace.h"
#include "watch.h"

typedef struct mxd_backend mxd_backend;

struct mxd_device {
    const mxd_backend *ops;
    int id;
    pthread_mutex_t mu; /* guards queues and default_queue */
    mxd_queue *queues;  /* every live queue of this device */
    mxd_queue *default_queue;
    void *native; /* backend data, e.g. a CUcontext */
};

struct mxd_queue {
    atomic_long refs;
    unsigned epoch; /* the process generation it was created in */
    mxd_device *device;
    const mxd_backend *ops;
    bool is_default;
    mxd_queue *prev, *next; /* in device->queues, under device->mu */
    /* The capture the queue takes part in (capture.h), and its lane
     * there; set and cleared by the capturing thread. */
    _Atomic(struct mxd_capture *) capture;
    int lane;
};

struct mxd_event {
    unsigned epoch;
    mxd_device *device;
    const mxd_backend *ops;
    bool timing;
    /* Its last record, when that is inside a capture (capture.h); set by
     * the capturing thread, read by any. */
    _Atomic(struct mxd_capture_point *) point;
};

struct mxd_flag {
    atomic_long refs;
    unsigned epoch;
    mxd_device *device;
    const mxd_backend *ops;
    _Atomic uint64_t *slot; /* the 8 bytes the device reads */
    uintptr_t device_ptr;   /* the slot's device-visible address */
    mxd_notifier changed;   /* host waiters on the slot (CPU queues) */
    void *backend_data;     /* e.g. the pinned-pool slot holding `slot` */
};

struct mxd_memory {
    atomic_long refs;
    unsigned epoch;
    mxd_device *device;
    const mxd_backend *ops; /* the device's backend: it frees the memory */
    mxd_memory_kind kind;
    bool pinned;   /* host memory mapped into an accelerator */
    bool readonly; /* foreign memory nothing of ours may write */
    bool tracked;  /* false for MXD_ALLOC_UNTRACKED memory */
    void *host;    /* NULL for device memory */
    uintptr_t device_ptr;
    int64_t size;
    mxd_queue *queue; /* the owner (retained): frees go in its order */
    /* Active captures whose nodes touch it: host access is refused. */
    atomic_int captures;
    /* What its operations wait for (hazard.h); kept for untracked memory
     * too, whose frees still wait for every operation that used it. */
    mxd_record record;
    mxd_host_fn release; /* foreign memory: gives it back */
    void *backend_data;  /* e.g. the pinned-pool block */
    /* The backend's record of consumers' streams (DLPack exports) that
     * released the memory while their work may still use it: its free
     * waits for them.  Under the record's lock. */
    void *consumers;
};

struct mxd_backend {
    const char *api; /* "cpu", "cuda", "hip" */

    /* Devices */
    bool (*is_host_unified)(const mxd_device *dev);
    mxd_status (*architecture)(const mxd_device *dev, char *buf, size_t size,
                               mxd_error *err);
    mxd_status (*model_name)(const mxd_device *dev, char *buf, size_t size,
                             mxd_error *err);
    mxd_status (*memory)(const mxd_device *dev, mxd_memory_stats *out,
                         mxd_error *err);
    mxd_status (*can_access)(const mxd_device *dev, const mxd_device *peer,
                             bool *out, mxd_error *err);
    /* Optional (NULL: the backend has no peer access to enable).  dev may
     * reach peer's memory directly from now on, the memory of peer's
     * memory pool included; both are of this backend and can_access(dev,
     * peer) is true.  Enabling what is enabled already succeeds. */
    mxd_status (*enable_peer)(mxd_device *dev, mxd_device *peer,
                              mxd_error *err);
    mxd_status (*features)(const mxd_device *dev, mxd_device_features *out,
                           mxd_error *err);

    /* Queues: create returns an object whose generic part is zeroed; the
     * generic layer fills it in. */
    mxd_status (*queue_create)(mxd_device *dev, mxd_queue **out,
                               mxd_error *err);
    void (*queue_destroy)(mxd_queue *q);
    /* Optional.  Called when the last reference is gone: returns true when
     * the backend takes the queue over, setting its count to 1 (so that
     * device.synchronize() still finds and waits for it) and later calling
     * mxd_queue_finish_retire once nobody else retained it meanwhile. */
    bool (*queue_retire)(mxd_queue *q);
    /* Optional (NULL: never).  See mxd_queue_enqueue_may_block. */
    bool (*enqueue_may_block)(const mxd_queue *q);
    /* True when the calling thread runs a host function of q. */
    bool (*runs_host_fn_of)(const mxd_queue *q);
    uintptr_t (*queue_native)(const mxd_queue *q);
    bool (*queue_is_idle)(const mxd_queue *q);
    mxd_status (*queue_synchronize)(mxd_queue *q, const mxd_wait *wait,
                                    mxd_error *err);
    mxd_status (*queue_wait_queue)(mxd_queue *q, mxd_queue *other,
                                   mxd_error *err);
    mxd_status (*queue_wait_event)(mxd_queue *q, mxd_event *ev, mxd_error *err);
    mxd_status (*queue_wait_value)(mxd_queue *q, mxd_flag *flag, uint64_t value,
                                   mxd_error *err);
    mxd_status (*queue_host_fn)(mxd_queue *q, mxd_host_fn fn, mxd_error *err);
    /* Enqueue the kickoff of mxd_queue_async_host_fn. */
    mxd_status (*queue_async_kickoff)(mxd_queue *q, mxd_host_fn fn,
                                      mxd_flag *flag, uint64_t value,
                                      mxd_error *err);

    /* Events */
    /* Events live in caller storage (mxd_event_storage); init fills the
     * backend part, the generic layer the rest. */
    mxd_status (*event_init)(mxd_event *ev, mxd_error *err);
    void (*event_fini)(mxd_event *ev);
    mxd_status (*event_record)(mxd_event *ev, mxd_queue *q, mxd_error *err);
    mxd_status (*event_query)(mxd_event *ev, bool *ready, mxd_error *err);
    mxd_status (*event_synchronize)(mxd_event *ev, const mxd_wait *wait,
                                    mxd_error *err);
    mxd_status (*event_elapsed)(mxd_event *start, mxd_event *end, double *ms,
                                mxd_error *err);

    /* Completions (hazard.h).  record sets c, allocated for q, to the
     * current end of q; fini releases what the point holds. */
    mxd_status (*completion_record)(mxd_queue *q, mxd_completion *c,
                                    mxd_error *err);
    void (*completion_fini)(mxd_completion *c);
    /* Never blocks: MXD_OK when the point completed, MXD_TIMEOUT while it
     * has not, or the driver's error for the work before it. */
    mxd_status (*completion_query)(mxd_completion *c, mxd_error *err);
    /* True when known complete without asking the driver. */
    bool (*completion_known_done)(const mxd_completion *c);
    /* Waits on the host (inside a host function of c's queue that runs
     * before the point, such a wait fails: it would wait for itself). */
    mxd_status (*completion_wait)(mxd_completion *c, const mxd_wait *wait,
                                  mxd_error *err);
    /* True when the calling thread runs a host function of c's queue that
     * comes before c's point (host access then does not wait for c). */
    bool (*completion_behind_caller)(const mxd_completion *c);
    /* Work enqueued on q afterwards waits for c, a completion of any
     * backend, on another queue, not known done. */
    mxd_status (*queue_wait_completion)(mxd_queue *q, mxd_completion *c,
                                        mxd_error *err);
    /* Optional (GPUs): work enqueued afterwards on `native`, a stream of
     * dev, waits for c, a completion of this backend (mxd_order_native). */
    mxd_status (*native_wait_completion)(mxd_device *dev, uintptr_t native,
                                         mxd_completion *c, mxd_error *err);
    /* Optional (GPUs): a consumer that used m on `native` (a stream of m's
     * device) let go of it: m's free waits for the work enqueued there so
     * far (mxd_memory_consumer_done). */
    mxd_status (*consumer_done)(mxd_memory *m, uintptr_t native,
                                mxd_error *err);

    /* Flags: allocate and free the slot (pinned, mapped memory on GPUs). */
    mxd_status (*flag_slot_alloc)(mxd_flag *flag, mxd_error *err);
    void (*flag_slot_free)(mxd_flag *flag);

    /* Memory: alloc returns an object whose generic part is zeroed (the
     * generic layer fills it in), with host, device_ptr and
     * backend_data set; `bytes` is at least 1.  Memory allocated in q's
     * order sets *born to the allocation's completion (the record's first
     * write: other queues' work waits for it), else leaves it NULL. */
    mxd_status (*memory_alloc)(mxd_queue *q, int64_t bytes, bool pinned,
                               mxd_memory **out, mxd_completion **born,
                               mxd_error *err);
    /* Optional (GPUs): the device address of page-locked host memory
     * mapped into dev (someone else's: DLPack's CUDA-host / ROCm-host);
     * fails when the driver does not know the memory as mapped. */
    mxd_status (*host_device_ptr)(const mxd_device *dev, void *host,
                                  uintptr_t *out, mxd_error *err);
    /* At the last release: frees (or releases foreign) memory once its
     * owner queue and every user queue have passed the work using it, and
     * frees the object.  Must not block or call the driver on the calling
     * thread when that could be a driver callback thread. */
    void (*memory_free)(mxd_memory *m);
    /* Copies and fills (memory.h).  The backend of whichever side is an
     * accelerator copies; CPU-only copies are the CPU backend's.  On
     * success `note` says which entry point moved the data and which queue
     * runs it (for the launch trace); the generic layer fills it in with
     * "memcpy" / "memset" and the destination's queue first. */
    mxd_status (*copy)(const mxd_view *dst, const mxd_view *src,
                       const mxd_copy_plan *plan, const mxd_wait *wait,
                       mxd_trace_note *note, mxd_error *err);
    mxd_status (*fill)(const mxd_view *dst, const mxd_copy_plan *plan,
                       const void *element, const mxd_wait *wait,
                       mxd_trace_note *note, mxd_error *err);
    /* Optional (GPUs; host-visible memory needs none): host access to
     * device memory (mxd_read_host, mxd_write_host).  `plan` moves the
     * bytes between the view (its offsets) and the packed host side.  The
     * backend orders itself with mxd_hazard_lock_settled (untracked
     * memory: a read after the view's queue so far, a write after
     * nothing). */
    mxd_status (*host_read)(const mxd_view *src, const mxd_copy_plan *plan,
                            void *dst, const mxd_wait *wait,
                            mxd_trace_note *note, mxd_error *err);
    mxd_status (*host_write)(const mxd_view *dst, const mxd_copy_plan *plan,
                             const void *src, const mxd_wait *wait,
                             mxd_trace_note *note, mxd_error *err);

    /* Optional (CUDA): multicast objects, for SymmetricPool (symmetric.h).
     * `multicast` says whether the device can back one; `symmetric_alloc`
     * allocates `bytes` (rounded up: *size) of memory on each of devs[0..n)
     * (n at most MXD_MAX_SYMMETRIC_DEVICES, one backend), binds it all to
     * one multicast object and maps both on each device: unicast[i] is
     * where device i reaches its own memory, multicast[i] the object.
     * Never freed: the pool is the driver's for the process. */
    bool (*multicast)(const mxd_device *dev);
    mxd_status (*symmetric_alloc)(mxd_device *const *devs, int n, size_t bytes,
                                  size_t *size, uintptr_t *unicast,
                                  uintptr_t *multicast, mxd_error *err);

    /* Watches (watch.h).  Optional: NULL makes watch.c's watcher thread
     * poll the point's event.  Arms w on the point ev is recorded at now,
     * or (ev NULL) on the current end of q, or (both NULL) on the point of
     * w->completion, and fires it from the thread that completes that
     * point; *armed false when it is complete already. */
    mxd_status (*watch_arm)(mxd_watch *w, mxd_queue *q, mxd_event *ev,
                            bool *armed, mxd_error *err);
    /* Disarms a watch watch_arm armed: true when it had not fired. */
    bool (*watch_cancel)(mxd_watch *w);

    /* Graph capture (capture.h).  A backend captures when it has
     * graph_launch; each hook is optional (NULL: nothing to do there).  A
     * lane's hooks run on the capturing thread.  begin makes
     * lane 0 capture; fork makes a new lane join after the point `ev` is
     * recorded at in the capture, or (ev NULL) after the end of lane
     * `from`; join makes a lane wait for such a point; record records ev
     * at the lane's end; node records a node (COPY: dst and src are its
     * views); end ends the capture on lane 0 and, when `keep`, makes the
     * graph's executable form (graph->backend), else throws it away (which
     * cannot fail).  */
    mxd_status (*capture_begin)(mxd_capture *c, mxd_lane *lane, mxd_error *err);
    mxd_status (*capture_fork)(mxd_capture *c, mxd_lane *lane, mxd_event *ev,
                               mxd_lane *from, mxd_error *err);
    mxd_status (*capture_join)(mxd_capture *c, mxd_lane *lane, mxd_event *ev,
                               mxd_lane *from, mxd_error *err);
    mxd_status (*capture_record)(mxd_capture *c, mxd_lane *lane, mxd_event *ev,
                                 mxd_error *err);
    mxd_status (*capture_node)(mxd_capture *c, mxd_lane *lane, mxd_node *node,
                               const mxd_view *dst, const mxd_view *src,
                               mxd_error *err);
    mxd_status (*capture_end)(mxd_capture *c, bool keep, mxd_error *err);
    /* Enqueues a launch of g on q; c, allocated for q, is its completion
     * (the backend sets its point).  The generic layer enqueued the waits
     * the launch needs first. */
    mxd_status (*graph_launch)(mxd_graph *g, mxd_queue *q, mxd_completion *c,
                               mxd_error *err);
    /* Frees the backend's part of g (its nodes' states, the executable
     * graph) once its last launch has completed, then calls
     * mxd_graph_finish.  Never on the calling thread when that could be a
     * driver callback thread. */
    void (*graph_free)(mxd_graph *g);
};

static inline struct mxd_capture *mxd_capture_of(const mxd_queue *q)
{
    return atomic_load_explicit(&((mxd_queue *)q)->capture,
                                memory_order_acquire);
}

extern const mxd_backend mxd_cpu_backend;

/* The `kind` column of the driver entry-point lists (cuda_abi.h, hip_abi.h):
 * a missing required entry point makes the backend unusable. */
enum { MXD_REQUIRED = 1, MXD_OPTIONAL = 0 };

/* What backend selection needs from a GPU backend (cuda.c, hip.c). */
typedef struct mxd_gpu_probe {
    const mxd_backend *backend;
    /* Resolves the driver's entry points in `lib`, initialises it and
     * counts devices; false with the reason written otherwise. */
    bool (*load)(void *lib, int *device_count, char *reason, size_t size);
    /* Prepares accelerator dev->id for use (e.g. retains its context);
     * called once, before the device is first handed out. */
    mxd_status (*open_device)(mxd_device *dev, mxd_error *err);
} mxd_gpu_probe;

extern const mxd_backend mxd_cuda_backend, mxd_hip_backend;
extern const mxd_gpu_probe mxd_cuda_probe, mxd_hip_probe;

/* ---- Shared helpers (error.c) ------------------------------------------- */

/* Fills err (status and printf-style message) and returns the status. */
mxd_status mxd_fail(mxd_error *err, mxd_status status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The same for a driver error, keeping its code and name. */
mxd_status mxd_fail_driver(mxd_error *err, int code, const char *name,
                           const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* ---- Processes (process.c) ---------------------------------------------- */

/* Incremented in the child of every fork().  Objects remember the epoch
 * they were made in: an object from before a fork refers to threads, locks
 * and driver state that did not survive it, so using it fails (and
 * dropping it leaks it) instead of hanging on a lock nobody will release.
 * The CPU backend itself is reset in the child and works for new objects;
 * GPU drivers do not support use across fork() at all. */
extern atomic_uint mxd_process_epoch;

static inline unsigned mxd_epoch_now(void)
{
    return atomic_load_explicit(&mxd_process_epoch, memory_order_relaxed);
}

static inline bool mxd_stale(unsigned epoch)
{
    return epoch != mxd_epoch_now();
}

/* The RuntimeError for using `what` (e.g. "DeviceQueue") after a fork. */
mxd_status mxd_fail_stale(mxd_error *err, const char *what);

/* What a module does around fork(): take its global lock before the fork,
 * release it after, and in the child also forget what belonged to threads
 * that no longer exist.  Modules export their hooks; init.c registers them
 * with process.c, which calls them through this table (so process.c, which
 * every module calls, calls no module by name). */
typedef struct mxd_fork_hooks {
    void (*prepare)(void);
    void (*parent)(void);
    void (*child)(void);
} mxd_fork_hooks;

/* What a module does at exit, once a GPU driver is loaded: from now on its
 * thread makes no driver call; it waits (until `until`, CLOCK_REALTIME) for
 * the one in progress.  What it had pending is abandoned. */
typedef void (*mxd_exit_hook)(const struct timespec *until);

/* Registers the fork handlers; called once (by mxd_init).  `prepare` hooks
 * run in table order (the order the modules' locks are taken), `parent` and
 * `child` hooks in reverse.  At exit, the exit hooks run in table order. */
void mxd_process_setup(const mxd_fork_hooks *const *fork_hooks,
                       size_t fork_count, const mxd_exit_hook *exit_hooks,
                       size_t exit_count);

/* Once a GPU driver library is loaded and initialised: registers the exit
 * handler that stops our threads' driver calls before the driver tears
 * itself down at exit (once). */
void mxd_process_driver_loaded(void);
void mxd_reaper_stop(const struct timespec *until);
void mxd_watch_stop(const struct timespec *until);
/* Waits until nobody holds `mu` (until `until`); false when it timed out. */
bool mxd_wait_for_mutex(pthread_mutex_t *mu, const struct timespec *until);

extern const mxd_fork_hooks mxd_pool_fork_hooks;
extern const mxd_fork_hooks mxd_devices_fork_hooks;
extern const mxd_fork_hooks mxd_selection_fork_hooks;
extern const mxd_fork_hooks mxd_watch_fork_hooks;
extern const mxd_fork_hooks mxd_symmetric_fork_hooks;
extern const mxd_fork_hooks mxd_capture_fork_hooks;

/* ---- Memory (memory.c) -------------------------------------------------- */

/* Drops the record and the owner queue: the last step before a backend
 * frees the object. */
void mxd_memory_drop_queues(mxd_memory *m);
/* For foreign memory once nothing uses it: drops the queues, frees the
 * object and runs its release function (inside the host runner). */
void mxd_memory_release_foreign(mxd_memory *m);

/* A view's memory and queue are of this process and of one device, and its
 * layout lies inside the memory; `which` names it in the message
 * ("destination ", "source ", or ""); `count` (may be NULL): its
 * elements. */
mxd_status mxd_view_check(const mxd_view *v, const char *which, int64_t *count,
                          mxd_error *err);

/* RuntimeError when q captures: `what` (a wait on the host for q, e.g.
 * "await") would wait for work that does not run (queue.c). */
mxd_status mxd_queue_check_wait(const mxd_queue *q, const char *what,
                                mxd_error *err);

/* Unlinks a retired queue from its device and destroys it (queue.c). */
void mxd_queue_finish_retire(mxd_queue *q);

/* MXD_OK when new objects may be made on dev in this process. */
mxd_status mxd_device_check(const mxd_device *dev, mxd_error *err);

/* ---- Host work (hostwork.c) --------------------------------------------- */

/* Runs fn inside the registered host runner, or discards it when the runner
 * refuses (interpreter finalizing).  Used for one-off host work. */
void mxd_host_fn_run_alone(mxd_host_fn fn);

/* A batch of consecutive host functions under one runner entry. */
typedef struct mxd_host_batch {
    void *token;
    bool entered;
} mxd_host_batch;

void mxd_host_batch_run(mxd_host_batch *batch, mxd_host_fn fn);
/* The same with fn.call, which leaves fn.data to its owner (a node of a
 * launched graph); nothing when the runner refuses. */
void mxd_host_batch_call(mxd_host_batch *batch, mxd_host_fn fn);
void mxd_host_batch_end(mxd_host_batch *batch);
void mxd_set_host_runner(const mxd_host_runner *runner);
/* Tells the runner that this worker thread is exiting. */
void mxd_host_thread_exit(void);

#endif /* MXD_BACKEND_H */
