/* What cuda.c and hip.c share with the GPU backend they include
 * (gpu_backend.inc) beyond the operations it names: argument shapes that
 * need a struct. */
#ifndef MXD_GPU_API_H
#define MXD_GPU_API_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A 2-D copy: `height` rows of `width` bytes; each side is a device
 * address or a host pointer (as an integer), with its pitch. */
typedef struct gpu_copy2d {
    bool dst_device, src_device;
    uintptr_t dst, src;
    size_t dst_pitch, src_pitch;
    size_t width, height;
} gpu_copy2d;

#endif /* MXD_GPU_API_H */
