/* The callback thread of each device.
 *
 * Real drivers run every host function (cuLaunchHostFunc) and stream
 * callback (cuStreamAddCallback) of a device on one internal thread, one at
 * a time in the order the streams reach them, and forbid API calls there.
 * The fake does the same: a stream's worker hands its callback item to the
 * device's thread and waits until it returns, so stream order holds, a
 * callback that blocks holds up the callbacks of every other stream of the
 * device, and fake_enter refuses calls made from the thread (it is marked
 * by fake_callback_kind). */
#include <stdlib.h>

#include "fake_engine.h"

typedef struct fake_handoff {
    struct fake_handoff *next;
    fake_stream *stream;
    fake_item *item;
    unsigned status; /* a stream callback's status argument */
    bool done;
} fake_handoff;

typedef struct fake_callback_queue {
    bool started;
    pthread_cond_t wake;
    fake_handoff *head, *tail;
} fake_callback_queue;

static fake_callback_queue *fake_queues; /* one per device; under fake_lock */
static int fake_threads_started;

static _Thread_local const char *fake_running_kind;

const char *fake_callback_kind(void)
{
    return fake_running_kind;
}

static void fake_call(const fake_handoff *h)
{
    const fake_item *it = h->item;
    if (it->type == FAKE_ITEM_HOST_FN) {
        fake_running_kind = "host-function callback";
        it->u.host.fn(it->u.host.data);
    } else {
        fake_running_kind = "stream callback";
        void *data = it->u.callback.data;
        if (it->u.callback.api == FAKE_CB_CUDA)
            ((cu_stream_callback)it->u.callback.fn)(
                (cu_stream)h->stream->handle, h->status, data);
        else
            ((hip_stream_callback)it->u.callback.fn)(
                (hip_stream)h->stream->handle, h->status, data);
    }
    fake_running_kind = NULL;
}

/* Lives as long as the process, like the drivers' callback threads. */
static void *fake_callback_main(void *arg)
{
    fake_callback_queue *q = arg;
    pthread_mutex_lock(&fake_lock);
    for (;;) {
        while (q->head == NULL)
            pthread_cond_wait(&q->wake, &fake_lock);
        fake_handoff *h = q->head;
        q->head = h->next;
        if (q->head == NULL)
            q->tail = NULL;
        pthread_mutex_unlock(&fake_lock);
        fake_call(h);
        pthread_mutex_lock(&fake_lock);
        h->done = true;
        pthread_cond_broadcast(&fake_changed);
    }
    return NULL;
}

bool fake_callback_thread_start(int device)
{
    if (fake_queues == NULL) {
        fake_queues = calloc((size_t)fake_cfg()->devices, sizeof *fake_queues);
        if (fake_queues == NULL)
            return false;
    }
    fake_callback_queue *q = &fake_queues[device];
    if (q->started)
        return true;
    pthread_cond_init(&q->wake, NULL);
    if (!fake_start_thread(fake_callback_main, q)) {
        pthread_cond_destroy(&q->wake);
        return false;
    }
    q->started = true;
    fake_threads_started++;
    return true;
}

void fake_callback_run(fake_stream *s, fake_item *it, unsigned status)
{
    fake_callback_queue *q = &fake_queues[s->device];
    fake_handoff h = {NULL, s, it, status, false};
    if (q->tail != NULL)
        q->tail->next = &h;
    else
        q->head = &h;
    q->tail = &h;
    pthread_cond_signal(&q->wake);
    while (!h.done)
        pthread_cond_wait(&fake_changed, &fake_lock);
}

int fake_callback_threads(void)
{
    return fake_threads_started;
}
