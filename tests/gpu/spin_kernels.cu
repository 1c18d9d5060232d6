// Kernels for the real-GPU tests (tests/gpu).  The committed spin.ptx is
// generated from this file, since the GPU machine may lack nvcc:
//
//     nvcc -ptx -arch=compute_75 spin_kernels.cu -o spin.ptx
//     sed -i 's/^\.version .*/.version 7.0/' spin.ptx
//
// (CUDA 13 dropped compute_70, the oldest target it still accepts being
// compute_75; the driver JIT-compiles the PTX for the GPU it runs on.  nvcc
// writes its own PTX ISA version, 9.0 for CUDA 13, which drivers before
// CUDA 13 reject; the instructions used need only 7.0, so the header is
// lowered, and tests/test_gpu_tooling.py checks it.)
//
// Every pointer is a device-visible address, normally of pinned host memory
// mapped into the device (cuMemHostAlloc with DEVICEMAP), so the host reads
// what a kernel wrote without a copy.  Null pointers are skipped.

// The GPU's nanosecond wall clock, the same on every SM.
__device__ __forceinline__ unsigned long long global_ns()
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// Spins for `ns` nanoseconds (or until *stop becomes non-zero), then copies
// *watch into *seen (what this kernel observed of earlier work) and finally
// stores `value` into *out.  Launch it with one thread.
extern "C" __global__ void spin_write(unsigned long long ns,
                                      const volatile unsigned long long *stop,
                                      const volatile unsigned long long *watch,
                                      volatile unsigned long long *seen,
                                      volatile unsigned long long *out,
                                      unsigned long long value)
{
    const unsigned long long start = global_ns();
    while (global_ns() - start < ns) {
        if (stop && *stop)
            break;
    }
    if (watch && seen)
        *seen = *watch;
    __threadfence_system();
    if (out)
        *out = value;
    __threadfence_system();
}

// Spins for `ns` nanoseconds, then executes a trap instruction: the launch
// fails and the context records a sticky error.
extern "C" __global__ void spin_trap(unsigned long long ns)
{
    const unsigned long long start = global_ns();
    while (global_ns() - start < ns) {
    }
    __trap();
}
