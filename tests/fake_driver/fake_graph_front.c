/* The CUDA and HIP fronts of stream capture and graphs: argument checks
 * and special stream handles; the capture itself is fake_graph.c's.  The
 * two APIs agree on every value (modes, statuses, errors 900-908). */
#include "fake_front.h"

CUDA_ENTRY_POINTS(FAKE_DECLARE_CU)
HIP_ENTRY_POINTS(FAKE_DECLARE_HIP)

FAKE_VISIBILITY(cuStreamIsCapturing)
cu_result cuStreamIsCapturing(cu_stream stream, unsigned int *status);
FAKE_VISIBILITY(hipStreamIsCapturing)
hip_result hipStreamIsCapturing(hip_stream stream, unsigned int *status);

/* libcuda exports the mode-taking cuStreamBeginCapture as _v2. */
FAKE_ALIAS(cuStreamBeginCapture, cuStreamBeginCapture_v2, cu_result,
           (cu_stream stream, cu_stream_capture_mode mode));

/* ---- CUDA ----------------------------------------------------------- */

cu_result cuStreamBeginCapture(cu_stream stream, cu_stream_capture_mode mode)
{
    FAKE_CU_BEGIN(cuStreamBeginCapture);
    FAKE_CU_STREAM(stream);
    return fake_begin_capture(stream, mode);
}

cu_result cuStreamEndCapture(cu_stream stream, cu_graph *graph)
{
    FAKE_CU_BEGIN(cuStreamEndCapture);
    FAKE_CU_STREAM(stream);
    return fake_end_capture(stream, (void **)graph);
}

cu_result cuStreamIsCapturing(cu_stream stream, unsigned int *status)
{
    FAKE_CU_BEGIN(cuStreamIsCapturing);
    FAKE_CU_STREAM(stream);
    return fake_is_capturing(stream, status);
}

cu_result cuGraphInstantiateWithFlags(cu_graph_exec *exec, cu_graph graph,
                                      unsigned long long flags)
{
    FAKE_CU_BEGIN(cuGraphInstantiateWithFlags);
    return fake_graph_instantiate((void **)exec, graph, flags);
}

/* An enqueue: in the stream's context, like every other. */
cu_result cuGraphLaunch(cu_graph_exec exec, cu_stream stream)
{
    FAKE_CU_BEGIN(cuGraphLaunch);
    FAKE_CU_ENQUEUE(stream);
    return fake_graph_launch(exec, stream);
}

cu_result cuGraphExecDestroy(cu_graph_exec exec)
{
    FAKE_CU_BEGIN(cuGraphExecDestroy);
    return fake_graph_exec_destroy(exec);
}

cu_result cuGraphDestroy(cu_graph graph)
{
    FAKE_CU_BEGIN(cuGraphDestroy);
    return fake_graph_destroy(graph);
}

/* ---- HIP ------------------------------------------------------------ */

hip_result hipStreamBeginCapture(hip_stream stream,
                                 hip_stream_capture_mode mode)
{
    FAKE_HIP_BEGIN(hipStreamBeginCapture);
    FAKE_HIP_STREAM(stream);
    return fake_begin_capture(stream, mode);
}

hip_result hipStreamEndCapture(hip_stream stream, hip_graph *graph)
{
    FAKE_HIP_BEGIN(hipStreamEndCapture);
    FAKE_HIP_STREAM(stream);
    return fake_end_capture(stream, (void **)graph);
}

hip_result hipStreamIsCapturing(hip_stream stream, unsigned int *status)
{
    FAKE_HIP_BEGIN(hipStreamIsCapturing);
    FAKE_HIP_STREAM(stream);
    return fake_is_capturing(stream, status);
}

hip_result hipGraphInstantiateWithFlags(hip_graph_exec *exec, hip_graph graph,
                                        unsigned long long flags)
{
    FAKE_HIP_BEGIN(hipGraphInstantiateWithFlags);
    return fake_graph_instantiate((void **)exec, graph, flags);
}

hip_result hipGraphLaunch(hip_graph_exec exec, hip_stream stream)
{
    FAKE_HIP_BEGIN(hipGraphLaunch);
    FAKE_HIP_STREAM(stream);
    return fake_graph_launch(exec, stream);
}

hip_result hipGraphExecDestroy(hip_graph_exec exec)
{
    FAKE_HIP_BEGIN(hipGraphExecDestroy);
    return fake_graph_exec_destroy(exec);
}

hip_result hipGraphDestroy(hip_graph graph)
{
    FAKE_HIP_BEGIN(hipGraphDestroy);
    return fake_graph_destroy(graph);
}
