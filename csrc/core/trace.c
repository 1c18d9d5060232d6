#include "trace.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"

atomic_bool mxd_trace_recording;

/* The recording; queues are retained while it lasts so that a queue's
 * address, which numbers it, is not reused by another one meanwhile. */
static struct {
    pthread_mutex_t mu;
    mxd_trace_entry *entries;
    size_t count, capacity;
    mxd_queue **queues;
    int queue_count, queue_capacity;
} trace = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* Under trace.mu. */
static void forget(void)
{
    for (int i = 0; i < trace.queue_count; i++)
        mxd_queue_release(trace.queues[i]);
    free(trace.queues);
    free(trace.entries);
    trace.queues = NULL;
    trace.entries = NULL;
    trace.count = trace.capacity = 0;
    trace.queue_count = trace.queue_capacity = 0;
}

void mxd_trace_begin(void)
{
    pthread_mutex_lock(&trace.mu);
    forget();
    atomic_store(&mxd_trace_recording, true);
    pthread_mutex_unlock(&trace.mu);
}

mxd_trace_entry *mxd_trace_take(size_t *count)
{
    pthread_mutex_lock(&trace.mu);
    atomic_store(&mxd_trace_recording, false);
    mxd_trace_entry *entries = trace.entries;
    *count = trace.count;
    trace.entries = NULL;
    forget();
    pthread_mutex_unlock(&trace.mu);
    return entries;
}

/* Under trace.mu: q's number in this recording, or -1 out of memory. */
static int stream_index(mxd_queue *q)
{
    for (int i = 0; i < trace.queue_count; i++)
        if (trace.queues[i] == q)
            return i;
    if (trace.queue_count == trace.queue_capacity) {
        int cap = trace.queue_capacity ? 2 * trace.queue_capacity : 8;
        mxd_queue **grown = realloc(trace.queues, (size_t)cap * sizeof *grown);
        if (!grown)
            return -1;
        trace.queues = grown;
        trace.queue_capacity = cap;
    }
    mxd_queue_retain(q);
    trace.queues[trace.queue_count] = q;
    return trace.queue_count++;
}

/* FNV-1a over the entry's fields (not over addresses: the same operation
 * hashes equal in two traces). */
static uint64_t mix(uint64_t h, const void *data, size_t size)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < size; i++) {
        h ^= p[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

static uint64_t semantic_hash(const mxd_trace_entry *e)
{
    uint64_t h = 0xcbf29ce484222325ULL;
    h = mix(h, &e->kind, sizeof e->kind);
    h = mix(h, e->name, strlen(e->name));
    h = mix(h, &e->stream_index, sizeof e->stream_index);
    h = mix(h, &e->memcpy_kind, sizeof e->memcpy_kind);
    h = mix(h, &e->memcpy_bytes, sizeof e->memcpy_bytes);
    h = mix(h, &e->memset_bytes, sizeof e->memset_bytes);
    h = mix(h, &e->memset_value, sizeof e->memset_value);
    h = mix(h, &e->memset_value_size, sizeof e->memset_value_size);
    return h ? h : 1;
}

static void note(mxd_trace_entry entry, mxd_queue *q)
{
    pthread_mutex_lock(&trace.mu);
    if (atomic_load(&mxd_trace_recording)) {
        entry.stream_index = stream_index(q);
        entry.semantic_hash = semantic_hash(&entry);
        if (trace.count == trace.capacity) {
            size_t cap = trace.capacity ? 2 * trace.capacity : 64;
            mxd_trace_entry *grown =
                realloc(trace.entries, cap * sizeof *grown);
            if (grown) {
                trace.entries = grown;
                trace.capacity = cap;
            }
        }
        /* Out of memory: the entry is dropped, the work is not. */
        if (trace.count < trace.capacity && entry.stream_index >= 0)
            trace.entries[trace.count++] = entry;
    }
    pthread_mutex_unlock(&trace.mu);
}

void mxd_trace_copy(const mxd_trace_note *n, int memcpy_kind, uint64_t bytes)
{
    note((mxd_trace_entry){.kind = MXD_TRACE_MEMCPY,
                           .name = n->name,
                           .memcpy_kind = memcpy_kind,
                           .memcpy_bytes = bytes},
         n->queue);
}

void mxd_trace_fill(const mxd_trace_note *n, uint64_t bytes)
{
    note((mxd_trace_entry){.kind = MXD_TRACE_MEMSET,
                           .name = n->name,
                           .memset_bytes = bytes,
                           .memset_value = n->value,
                           .memset_value_size = n->value_size},
         n->queue);
}
