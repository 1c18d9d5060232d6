/* Buffer.mmap (SPEC §12.3): a CPU buffer over a memory-mapped file, with
 * numpy.memmap's modes.  The mapping is foreign memory whose release
 * unmaps it once nothing uses the buffer any more. */
#include "binding.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

typedef enum map_mode {
    MODE_READ,
    MODE_READ_WRITE,
    MODE_CREATE,
    MODE_COPY
} map_mode;

static int parse_mode(PyObject *obj, map_mode *out)
{
    static const struct {
        const char *name;
        map_mode mode;
    } modes[] = {
        {"r", MODE_READ},        {"readonly", MODE_READ},
        {"r+", MODE_READ_WRITE}, {"readwrite", MODE_READ_WRITE},
        {"w+", MODE_CREATE},     {"write", MODE_CREATE},
        {"c", MODE_COPY},        {"copyonwrite", MODE_COPY},
    };
    *out = MODE_COPY;
    if (obj == NULL)
        return 0;
    if (PyUnicode_Check(obj))
        for (size_t i = 0; i < sizeof modes / sizeof *modes; i++)
            if (PyUnicode_CompareWithASCIIString(obj, modes[i].name) == 0) {
                *out = modes[i].mode;
                return 0;
            }
    PyErr_Format(PyExc_ValueError,
                 "mmap(): mode must be one of 'r', 'r+', 'w+', 'c' (or "
                 "'readonly', 'readwrite', 'write', 'copyonwrite'), not %R",
                 obj);
    return -1;
}

typedef struct mapping {
    void *base;
    size_t length;
} mapping;

static void unmap(void *data)
{
    mapping *m = data;
    munmap(m->base, m->length);
    PyMem_RawFree(m);
}

static PyObject *os_error(PyObject *filename)
{
    return PyErr_SetFromErrnoWithFilenameObject(PyExc_OSError, filename);
}

/* Maps [offset, offset + bytes) of the open file; offset need not be
 * page-aligned (the mapping starts at the page before it). */
static void *map_range(int fd, map_mode mode, int64_t offset, int64_t bytes,
                       mapping *m, int64_t *skip)
{
    long page = sysconf(_SC_PAGESIZE);
    int64_t start = offset - offset % page;
    *skip = offset - start;
    m->length = (size_t)(bytes + *skip);
    int prot = mode == MODE_READ ? PROT_READ : PROT_READ | PROT_WRITE;
    int flags = mode == MODE_COPY ? MAP_PRIVATE : MAP_SHARED;
    m->base = mmap(NULL, m->length, prot, flags, fd, (off_t)start);
    return m->base == MAP_FAILED ? NULL : m->base;
}

static int open_file(PyObject *path, PyObject *filename, map_mode mode,
                     int64_t end)
{
    int flags = mode == MODE_READ     ? O_RDONLY
                : mode == MODE_CREATE ? O_RDWR | O_CREAT | O_TRUNC
                                      : (mode == MODE_COPY ? O_RDONLY : O_RDWR);
    int fd = open(PyBytes_AS_STRING(path), flags | O_CLOEXEC, 0666);
    if (fd < 0) {
        os_error(filename);
        return -1;
    }
    struct stat st;
    int ok = fstat(fd, &st) == 0;
    if (ok && mode == MODE_CREATE)
        ok = ftruncate(fd, (off_t)end) == 0;
    else if (ok && st.st_size < end) {
        close(fd);
        PyErr_Format(PyExc_ValueError,
                     "mmap(): the file holds %lld bytes, fewer than the "
                     "%lld the offset and shape need",
                     (long long)st.st_size, (long long)end);
        return -1;
    }
    if (!ok) {
        os_error(filename);
        close(fd);
        return -1;
    }
    return fd;
}

static const char *const mmap_names[] = {"filename", "dtype", "shape", "mode",
                                         "offset"};

/* A sequence of ints, or one int for a 1-D buffer (as numpy.memmap and
 * MAX take it); returns the rank or -1. */
static int parse_mmap_shape(PyObject *obj, int64_t *shape)
{
    if (PyBool_Check(obj) || !PyIndex_Check(obj))
        return binding_parse_shape("mmap", obj, shape);
    return binding_parse_dimension("mmap", obj, &shape[0]) < 0 ? -1 : 1;
}

PyObject *binding_buffer_mmap(PyObject *cls, PyObject *const *args,
                              Py_ssize_t nargs, PyObject *kwnames)
{
    binding_state *st = binding_type_state((PyTypeObject *)cls);
    const binding_params params = {"mmap", mmap_names, 5, 3};
    PyObject *argv[5], *path = NULL;
    map_mode mode;
    int64_t shape[MXD_MAX_RANK], bytes;
    long long offset = 0;
    if (binding_parse_fast(&params, args, nargs, kwnames, argv) < 0)
        return NULL;
    int dtype_index = binding_parse_dtype(st, "mmap", "dtype", argv[1]);
    int rank = dtype_index < 0 ? -1 : parse_mmap_shape(argv[2], shape);
    if (rank < 0 || parse_mode(argv[3], &mode) < 0)
        return NULL;
    if (argv[4] != NULL &&
        ((offset = PyLong_AsLongLong(argv[4])) == -1 && PyErr_Occurred()))
        return NULL;
    if (offset < 0) {
        PyErr_SetString(PyExc_ValueError, "mmap(): offset must be >= 0");
        return NULL;
    }
    const mxd_dtype_info *info = mxd_dtype_at((size_t)dtype_index);
    mxd_error err;
    if (mxd_shape_size(rank, shape, info->size_in_bytes, NULL, &bytes, &err) !=
        MXD_OK)
        return binding_raise(&err);
    PyObject *cpu = binding_device_default_queue((DeviceObject *)st->cpu);
    if (cpu == NULL || !PyUnicode_FSConverter(argv[0], &path))
        return NULL;
    if (bytes == 0) { /* nothing to map: an empty buffer */
        Py_DECREF(path);
        return binding_buffer_alloc(st, st->buffer_type, cpu, dtype_index,
                                    BUFFER_USAGE_DEFAULT, rank, shape);
    }
    int fd = open_file(path, argv[0], mode, offset + bytes);
    Py_DECREF(path);
    if (fd < 0)
        return NULL;
    mapping *m = PyMem_RawMalloc(sizeof *m);
    int64_t skip = 0;
    void *base = m ? map_range(fd, mode, offset, bytes, m, &skip) : NULL;
    int saved = errno;
    close(fd);
    if (base == NULL) {
        PyMem_RawFree(m);
        errno = saved;
        return m ? os_error(argv[0]) : PyErr_NoMemory();
    }
    mxd_foreign foreign = {.host = (char *)base + skip,
                           .size = bytes,
                           .readonly = mode == MODE_READ,
                           .release = {unmap, unmap, m}};
    mxd_memory *memory;
    if (mxd_memory_wrap(((QueueObject *)cpu)->queue, &foreign, &memory, &err) !=
        MXD_OK) {
        unmap(m);
        return binding_raise(&err);
    }
    int64_t strides[MXD_MAX_RANK];
    mxd_contiguous_strides(rank, shape, strides);
    mxd_layout layout = {rank, shape, strides, 0, (int64_t)info->size_in_bytes,
                         bytes};
    PyObject *b = binding_buffer_new(st->buffer_type, memory, cpu, dtype_index,
                                     BUFFER_USAGE_DEFAULT, &layout);
    if (b == NULL || mode != MODE_READ)
        return b;
    /* Buffers are writable: a read-only file is copied (SPEC §12.3). */
    PyObject *copy = binding_buffer_copy_to(b, cpu);
    Py_DECREF(b);
    return copy;
}
