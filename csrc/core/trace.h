/* The launch trace (SPEC §14): while recording, every copy and fill any
 * queue enqueues is noted, in enqueue order, process-wide.  Off (the
 * normal state), noting costs one relaxed atomic load. */
#ifndef MXD_TRACE_H
#define MXD_TRACE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mxd.h"

enum { MXD_TRACE_KERNEL = 0, MXD_TRACE_MEMCPY = 1, MXD_TRACE_MEMSET = 2 };
enum {
    MXD_MEMCPY_NONE = 0,
    MXD_MEMCPY_HTOD = 1,
    MXD_MEMCPY_DTOH = 2,
    MXD_MEMCPY_DTOD = 3,
};

typedef struct mxd_trace_entry {
    int kind;         /* MXD_TRACE_* */
    const char *name; /* the driver entry point, or "memcpy" / "memset" */
    int stream_index; /* queues numbered from 0 as the trace first sees them */
    int memcpy_kind;  /* MXD_MEMCPY_* */
    uint64_t memcpy_bytes, memset_bytes;
    uint32_t memset_value;
    int memset_value_size;
    uint64_t semantic_hash; /* of everything above but addresses: never 0 */
} mxd_trace_entry;

/* What a backend tells the recorder about a copy or fill it enqueued: the
 * entry point it used and the queue that runs it. */
typedef struct mxd_trace_note {
    const char *name;
    mxd_queue *queue;
    uint32_t value; /* fills: the value written, value_size bytes wide */
    int value_size;
} mxd_trace_note;

extern atomic_bool mxd_trace_recording;

static inline bool mxd_trace_active(void)
{
    return atomic_load_explicit(&mxd_trace_recording, memory_order_relaxed);
}

/* Starts recording, forgetting an earlier recording. */
void mxd_trace_begin(void);
/* Stops recording and hands over the entries (malloc'd; *count of them,
 * NULL when none): the caller frees them. */
mxd_trace_entry *mxd_trace_take(size_t *count);

void mxd_trace_copy(const mxd_trace_note *note, int memcpy_kind,
                    uint64_t bytes);
void mxd_trace_fill(const mxd_trace_note *note, uint64_t bytes);

#endif /* MXD_TRACE_H */
