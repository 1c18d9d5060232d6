/* Hazard records and completions: how every operation on memory is ordered
 * (SPEC §12.6, DESIGN.md decision 12).  Not part of the public interface;
 * the backends and the core's memory code call it.
 *
 * Each mxd_memory (a storage: every view of it shares it) owns a record:
 * the completion of the last write this module enqueued into it and the
 * completions of the reads since, at most one per queue (a queue is in
 * order: its latest read covers the earlier ones).  User stamps add to it
 * (mxd_memory_stamp).  A completion names a
 * point in one queue: a ticket on a CPU timeline, or an event mark on an
 * accelerator stream (gpu_backend.inc).  Completed entries are dropped when
 * an operation next looks at the record.
 *
 * An operation on memory, under the records' locks (taken in address order
 * when it touches two storages):
 *   1. asks the record what it must wait for: a read waits for the last
 *      write, a write for the last write and every read since;
 *   2. enqueues those waits on the queue that runs it (mxd_hazard_order:
 *      event waits between accelerator queues, a pool-thread wait between
 *      a CPU queue and an accelerator queue), or, when the calling thread
 *      itself touches the bytes (a pageable source read during the call, a
 *      pageable destination written on return, host access), waits on the
 *      host first (mxd_hazard_lock_settled);
 *   3. enqueues its work and notes its completion: a read of the source, the
 *      last write of the destination (mxd_hazard_note).
 * Nothing else links queues.  A buffer that stays on one queue pays a
 * pointer compare per entry: completions of the queue an operation runs on
 * need no wait.
 *
 * The lock is held while the operation enqueues its waits and its work, so
 * that the operations on one storage have one order.  It is never held
 * while the host waits for a pending completion (the settled lock drops it
 * to wait, then retakes it and looks again). */
#ifndef MXD_HAZARD_H
#define MXD_HAZARD_H

#include <pthread.h>
#include <stdatomic.h>

#include "memory.h"
#include "mxd.h"

struct mxd_backend;

struct mxd_completion {
    atomic_long refs;
    const struct mxd_backend *ops; /* its queue's backend */
    mxd_queue *queue;              /* retained */
    /* The order of completions of one queue: later points have larger
     * values (the CPU's ticket; a counter of the GPU queue). */
    uint64_t seq;
    uint64_t ticket; /* CPU: the point on the queue's timeline */
    void *mark;      /* GPU: the event mark holding the point, retained */
    /* The operation it ends, for the message when it failed: its entry
     * point (a static string) and bytes; NULL for a recorded point. */
    const char *what;
    uint64_t bytes;
    _Atomic(char *) poison; /* malloc'd; set once */
};

/* Completions, at most one per queue (the latest). */
typedef struct mxd_entries {
    mxd_completion **at;
    int n, cap;
} mxd_entries;

typedef struct mxd_record {
    pthread_mutex_t mu;
    /* Whether the lists are not empty: host access looks without the lock
     * first. */
    atomic_bool has_write, has_reads;
    /* The last write: one completion after an operation of ours; more only
     * when a write stamp of one queue could not supersede pending work of
     * others (mxd_memory_stamp). */
    mxd_entries writes;
    mxd_entries reads; /* since the last write */
} mxd_record;

/* An empty record, for an initializer. */
#define MXD_RECORD_INIT                                                        \
    {                                                                          \
        .mu = PTHREAD_MUTEX_INITIALIZER                                        \
    }
/* Drops the completions (the memory is being freed). */
void mxd_record_fini(mxd_record *r);

/* A new completion of q with one reference, its point not yet set: the
 * backend sets seq and the point (ticket or mark) as it enqueues the
 * operation.  NULL when out of memory. */
mxd_completion *mxd_completion_alloc(mxd_queue *q, const char *what,
                                     uint64_t bytes);
/* The operation c ends failed (`why`, a driver error, seen by whoever ran
 * it): c is poisoned with a message naming the operation and the error. */
void mxd_completion_failed(mxd_completion *c, const mxd_error *why);
/* True when c is known to be complete without asking a driver (a CPU
 * ticket reached, a GPU mark seen complete, poisoned). */
bool mxd_completion_known_done(mxd_completion *c);
/* Waits for c where host access needs it: as mxd_completion_wait, except
 * that inside a host function of c's queue a point enqueued after the
 * function counts as passed (waiting for it would wait forever; the host
 * function acts at its place in the queue). */
mxd_status mxd_completion_wait_host(mxd_completion *c, const mxd_wait *wait,
                                    mxd_error *err);
/* Work enqueued on q afterwards waits for c (nothing when c is on q or done;
 * for a poisoned c, nothing: its failure stays with the memory it wrote). */
mxd_status mxd_queue_wait_completion(mxd_queue *q, mxd_completion *c,
                                     mxd_error *err);

/* ---- Records ------------------------------------------------------------ */

/* Locks the records of a and b (either may be NULL; a == b locks once). */
void mxd_hazard_lock(mxd_memory *a, mxd_memory *b);
void mxd_hazard_unlock(mxd_memory *a, mxd_memory *b);

/* Under the lock: enqueues on q the waits an access of v by q needs (a
 * write: the last write and every read; a read: the last write).  Untracked
 * memory: a read waits for v's queue so far, a write for nothing. */
mxd_status mxd_hazard_order(mxd_queue *q, const mxd_view *v, bool write,
                            mxd_error *err);
/* mxd_hazard_order without dropping the entries seen complete first: for
 * a graph's launch, whose notes replace them (capture.c). */
mxd_status mxd_hazard_order_quick(mxd_queue *q, const mxd_view *v, bool write,
                                  mxd_error *err);
/* Under the lock: true when an access of v has nothing pending to wait
 * for (entries seen complete are dropped; may ask the driver). */
bool mxd_hazard_settled(const mxd_view *v, bool write);
/* Locks the records of `read`, `write` (views, either may be NULL) and
 * `other` (a memory the operation orders on the device, or NULL; with both
 * views given it must be one of theirs) once the accesses the calling
 * thread makes itself have nothing pending: it reads `read` (after its last
 * write; untracked: after its queue so far) and writes `write` (after its
 * last write and reads; untracked: nothing).  Waits on the host with no
 * lock held, and retries when new work arrived meanwhile.  MXD_HAZARD when
 * the last write waited for is poisoned (nothing is then locked). */
mxd_status mxd_hazard_lock_settled(const mxd_view *read, const mxd_view *write,
                                   mxd_memory *other, const mxd_wait *wait,
                                   mxd_error *err);
/* Under the lock: an operation with completion c (NULL: it is complete)
 * read `read` and wrote `write` (either may be NULL, or the same memory). */
void mxd_hazard_note(mxd_memory *read, mxd_memory *write, mxd_completion *c);
/* The references a launch's notes move, settled in two atomic operations
 * instead of two per storage: `owed` references taken to `taken` (the
 * launch's completion), `dropped` released of `prev` (the previous
 * launch's, which its holder keeps alive until the batch settles). */
typedef struct mxd_ref_batch {
    mxd_completion *taken, *prev;
    long owed, dropped;
} mxd_ref_batch;

/* Under the lock: the launch (batch->taken) read or wrote m, as
 * mxd_hazard_note; the references it moves are counted in `batch`. */
void mxd_hazard_note_launch(mxd_memory *m, bool write, mxd_ref_batch *batch);
/* Moves what `batch` counted (before the records are unlocked). */
void mxd_hazard_batch_settle(mxd_ref_batch *batch);
/* The pending last writes of m (retained into out[0..*count), at most
 * cap), for ordering a stream we do not own after them; MXD_HAZARD when
 * one is poisoned. */
mxd_status mxd_hazard_pending_writes(mxd_memory *m, mxd_completion **out,
                                     int cap, int *count, mxd_error *err);
/* For a memory being freed (nobody else can reach its record): calls visit
 * for every completion in it, the last writes first. */
void mxd_hazard_visit(mxd_memory *m,
                      void (*visit)(mxd_completion *c, void *ctx), void *ctx);

#endif /* MXD_HAZARD_H */
