/* What the API fronts share: the prologue of every entry point and the
 * current device of each API.  fake_cuda.c / fake_cuda_memory.c are the
 * CUDA front, fake_hip.c / fake_hip_memory.c the HIP one. */
#ifndef FAKE_FRONT_H
#define FAKE_FRONT_H

#include "fake_gpu.h"

#pragma GCC visibility push(hidden)

/* Declaring every entry point from the project's X-macro makes the
 * compiler reject a definition whose signature drifted. */
#define FAKE_DECLARE_CU(name, version, kind, ret, params)                      \
    FAKE_VISIBILITY(name) ret name params;
#define FAKE_DECLARE_HIP(name, kind, ret, params)                              \
    FAKE_VISIBILITY(name) ret name params;

/* CUDA: counts the call and fires an armed fault before anything else. */
#define FAKE_CU_ENTER(name)                                                    \
    do {                                                                       \
        unsigned fake_fault_ = fake_enter(FAKE_ID_##name);                     \
        if (fake_fault_ != 0)                                                  \
            return fake_fault_;                                                \
    } while (0)

/* CUDA: every call but the error names and cuGetProcAddress needs cuInit. */
#define FAKE_CU_BEGIN(name)                                                    \
    do {                                                                       \
        FAKE_CU_ENTER(name);                                                   \
        if (!fake_cuda_initialized())                                          \
            return FAKE_E_NOT_INITIALIZED;                                     \
    } while (0)

/* HIP: counts the call, fires an armed fault, then fails every call the way
 * a runtime that found no usable GPU does (FAKE_GPU_INIT_ERROR). */
#define FAKE_HIP_BEGIN(name)                                                   \
    do {                                                                       \
        unsigned fake_rc_ = fake_enter(FAKE_ID_##name);                        \
        if (fake_rc_ == 0)                                                     \
            fake_rc_ = fake_cfg()->init_error;                                 \
        if (fake_rc_ != 0)                                                     \
            return fake_rc_;                                                   \
    } while (0)

/* The drivers' special stream handles, resolved before the engine sees
 * them (fake_special.c): a stream parameter named `stream` is rebound to
 * the engine stream it names, or the entry point returns the error. */
#define FAKE_CU_STREAM(stream)                                                 \
    do {                                                                       \
        void *fake_named_;                                                     \
        unsigned fake_rs_ = fake_cuda_stream(stream, &fake_named_);            \
        if (fake_rs_ != 0)                                                     \
            return fake_rs_;                                                   \
        stream = fake_named_;                                                  \
    } while (0)
#define FAKE_HIP_STREAM(stream)                                                \
    do {                                                                       \
        void *fake_named_;                                                     \
        unsigned fake_rs_ = fake_hip_stream(stream, &fake_named_);             \
        if (fake_rs_ != 0)                                                     \
            return fake_rs_;                                                   \
        stream = fake_named_;                                                  \
    } while (0)

/* CUDA: the stream parameter of an entry point that enqueues work on it,
 * resolved as by FAKE_CU_STREAM; then the calling thread's current context
 * must be the primary context of the stream's device (fake_cuda_enqueue_
 * context), else the entry point returns INVALID_CONTEXT. */
#define FAKE_CU_ENQUEUE(stream)                                                \
    do {                                                                       \
        FAKE_CU_STREAM(stream);                                                \
        unsigned fake_rx_ = fake_cuda_enqueue_context(stream);                 \
        if (fake_rx_ != 0)                                                     \
            return fake_rx_;                                                   \
    } while (0)

/* A potentially unsafe call (allocation or a free that is not stream
 * ordered) returns the error a capture that forbids it gives
 * (fake_capture_unsafe_call). */
#define FAKE_CAPTURE_SAFE()                                                    \
    do {                                                                       \
        unsigned fake_rcap_ = fake_capture_unsafe_call();                      \
        if (fake_rcap_ != 0)                                                   \
            return fake_rcap_;                                                 \
    } while (0)
/* Work the fake does not capture, on a capturing stream: refused. */
#define FAKE_CAPTURE_UNSUPPORTED(stream, what)                                 \
    do {                                                                       \
        unsigned fake_rcap_ = fake_capture_unsupported(stream, what);          \
        if (fake_rcap_ != 0)                                                   \
            return fake_rcap_;                                                 \
    } while (0)

/* CU_STREAM_LEGACY (0x1) and CU_STREAM_PER_THREAD (0x2): those of the
 * current context's device (INVALID_CONTEXT without one).  Any other
 * handle is passed on as it is, 0 included: CUDA's NULL stream is the
 * legacy stream too, but the fake refuses it (INVALID_HANDLE) so that a
 * backend that leaves a stream handle zero fails loudly. */
unsigned fake_cuda_stream(cu_stream handle, void **stream);
/* Real drivers enqueue in the stream's context and refuse work while
 * another context (or none) is current: INVALID_CONTEXT and a violation,
 * unless FAKE_GPU_CONTEXT_CHECK=0.  A handle that names no stream passes,
 * for the engine to refuse (INVALID_HANDLE). */
unsigned fake_cuda_enqueue_context(void *stream);
/* 0: the null stream of the current device. */
unsigned fake_hip_stream(hip_stream handle, void **stream);

bool fake_cuda_initialized(void);
/* The device of the calling thread's current context: INVALID_CONTEXT
 * without one, which catches a backend that forgot to push its context. */
unsigned fake_cuda_current_device(int *device);
/* The device of a primary context, or false for anything else. */
bool fake_cuda_context_device(cu_context ctx, int *device);
/* hipSetDevice's device; hipErrorNoDevice when there is none. */
unsigned fake_hip_current_device(int *device);

#pragma GCC visibility pop

#endif /* FAKE_FRONT_H */
