/* The drivers' special streams: CUDA's legacy default stream
 * (CU_STREAM_LEGACY, handle 0x1) and per-thread default stream
 * (CU_STREAM_PER_THREAD, 0x2), and HIP's null stream (handle 0).
 *
 * A real driver accepts these handles wherever it takes a stream and
 * resolves them in the calling thread's current context (CUDA) or current
 * device (HIP).  Here each is an engine stream made on first use: one
 * legacy and one null stream per device, living as long as the process,
 * and one per-thread stream per (thread, device), retired when its thread
 * exits (its pending work still completes, as a destroyed stream's does).
 * Their flags carry FAKE_STREAM_LEGACY / _PER_THREAD / _NULL, so that
 * fake_gpu_stream_flags tells them from the application's streams; the
 * implicit synchronisation of the legacy and null streams with blocking
 * streams is the engine's (fake_implicit_waits). */
#include <pthread.h>
#include <stdlib.h>

#include "fake_engine.h"

/* Guards the tables below.  Taken before fake_lock (fake_stream_create
 * takes it), never while holding it. */
static pthread_mutex_t fake_special_lock = PTHREAD_MUTEX_INITIALIZER;
static void **fake_legacy, **fake_null; /* one per device */

static pthread_key_t fake_per_thread_key;
static pthread_once_t fake_per_thread_once = PTHREAD_ONCE_INIT;

/* Thread exit: the thread's per-thread streams go, as the driver's do. */
static void fake_per_thread_exit(void *table)
{
    void **streams = table;
    for (int i = 0; i < fake_cfg()->devices; i++)
        if (streams[i] != NULL)
            fake_stream_retire(streams[i]);
    free(streams);
}

static void fake_per_thread_init(void)
{
    pthread_key_create(&fake_per_thread_key, fake_per_thread_exit);
}

/* The slot of `which` for `device` (the calling thread's for per-thread
 * streams), NULL when out of memory. */
static void **fake_slot(enum fake_special which, int device)
{
    void ***table = which == FAKE_SPECIAL_LEGACY ? &fake_legacy : &fake_null;
    if (which == FAKE_SPECIAL_PER_THREAD) {
        pthread_once(&fake_per_thread_once, fake_per_thread_init);
        void **mine = pthread_getspecific(fake_per_thread_key);
        if (mine == NULL) {
            mine = calloc((size_t)fake_cfg()->devices, sizeof *mine);
            if (mine == NULL ||
                pthread_setspecific(fake_per_thread_key, mine) != 0) {
                free(mine);
                return NULL;
            }
        }
        return &mine[device];
    }
    if (*table == NULL)
        *table = calloc((size_t)fake_cfg()->devices, sizeof **table);
    return *table != NULL ? &(*table)[device] : NULL;
}

static const unsigned fake_special_flags[] = {
    [FAKE_SPECIAL_LEGACY] = FAKE_STREAM_LEGACY,
    [FAKE_SPECIAL_PER_THREAD] = FAKE_STREAM_PER_THREAD, /* blocking */
    [FAKE_SPECIAL_NULL] = FAKE_STREAM_NULL,
};

/* The handle a stream callback of it is given (the one the API names it
 * by). */
static void *fake_special_handle(enum fake_special which)
{
    return which == FAKE_SPECIAL_LEGACY       ? (void *)0x1
           : which == FAKE_SPECIAL_PER_THREAD ? (void *)0x2
                                              : NULL;
}

unsigned fake_special_stream(enum fake_special which, int device, void **out)
{
    if (!fake_valid_device(device) || which > FAKE_SPECIAL_NULL)
        return FAKE_E_INVALID_VALUE;
    unsigned rc = FAKE_E_OK;
    pthread_mutex_lock(&fake_special_lock);
    void **slot = fake_slot(which, device);
    if (slot == NULL)
        rc = FAKE_E_OUT_OF_MEMORY;
    else if (*slot == NULL) {
        rc = fake_stream_create(device, fake_special_flags[which], slot);
        if (rc == FAKE_E_OK) {
            pthread_mutex_lock(&fake_lock);
            ((fake_stream *)*slot)->handle = fake_special_handle(which);
            pthread_mutex_unlock(&fake_lock);
        }
    }
    if (rc == FAKE_E_OK)
        *out = *slot;
    pthread_mutex_unlock(&fake_special_lock);
    return rc;
}
