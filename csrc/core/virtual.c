/* Virtual devices (mxd.h): MAX's virtual device mode.
 *
 * The settings are a few strings and a count under one lock.  Virtual
 * devices are made on first request and never freed, like real ones (the
 * binding keeps one Python object per core device): one per (id, API,
 * architecture) ever asked for, found again when the same settings come
 * back, so that toggling the mode in a test suite does not grow them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "virtual.h"

typedef struct virtual_device {
    mxd_device dev; /* dev.native points to target */
    mxd_virtual_target target;
    struct virtual_device *next;
} virtual_device;

static struct {
    pthread_mutex_t mu; /* guards the strings and the list */
    atomic_int count;   /* read without the lock: one load per Accelerator() */
    char values[3][MXD_VIRTUAL_VALUE_SIZE]; /* by mxd_virtual_setting */
    virtual_device *devices;
} virt = {.mu = PTHREAD_MUTEX_INITIALIZER};

mxd_status mxd_virtual_set_count(long long count, mxd_error *err)
{
    if (count < 0 || count > MXD_VIRTUAL_MAX_COUNT)
        return mxd_fail(err, MXD_INVALID,
                        "the virtual device count must be between 0 (off) "
                        "and %d, not %lld",
                        MXD_VIRTUAL_MAX_COUNT, count);
    atomic_store(&virt.count, (int)count);
    return MXD_OK;
}

int mxd_virtual_count(void)
{
    return atomic_load_explicit(&virt.count, memory_order_relaxed);
}

/* The name LLVM gives the baseline CPU of the host's family. */
static const char *generic_cpu(void)
{
#if defined(__x86_64__)
    return "x86-64";
#elif defined(__aarch64__)
    return "generic"; /* AArch64's baseline is armv8-a, named "generic" */
#else
    return NULL;
#endif
}

/* The CPU target to store for `value`, or NULL with err filled in. */
static const char *cpu_target(const char *value, mxd_error *err)
{
    if (strcmp(value, "native") == 0) {
        mxd_fail(err, MXD_INVALID,
                 "the virtual CPU target cannot be 'native': it would "
                 "target the CPU of the host that compiles, which a virtual "
                 "target exists to avoid (use '' for the host's CPU)");
        return NULL;
    }
    if (strcmp(value, "generic") != 0)
        return value;
    const char *generic = generic_cpu();
    if (!generic)
        mxd_fail(err, MXD_INVALID,
                 "the virtual CPU target 'generic' has no baseline for this "
                 "host's architecture (x86-64 and AArch64 have one); name "
                 "a CPU instead");
    return generic;
}

mxd_status mxd_virtual_set(mxd_virtual_setting which, const char *value,
                           mxd_error *err)
{
    static const char *const names[] = {"API", "target architecture",
                                        "CPU target"};
    if (strlen(value) >= MXD_VIRTUAL_VALUE_SIZE)
        return mxd_fail(err, MXD_INVALID,
                        "the virtual device %s '%.80s...' is longer than %d "
                        "bytes",
                        names[which], value, MXD_VIRTUAL_VALUE_SIZE - 1);
    if (which == MXD_VIRTUAL_CPU && !(value = cpu_target(value, err)))
        return MXD_INVALID;
    pthread_mutex_lock(&virt.mu);
    snprintf(virt.values[which], sizeof virt.values[which], "%s", value);
    pthread_mutex_unlock(&virt.mu);
    return MXD_OK;
}

void mxd_virtual_get(mxd_virtual_setting which, char *buf, size_t size)
{
    pthread_mutex_lock(&virt.mu);
    snprintf(buf, size, "%s", virt.values[which]);
    pthread_mutex_unlock(&virt.mu);
}

bool mxd_device_is_virtual(const mxd_device *dev)
{
    return dev->ops == &mxd_virtual_backend;
}

/* The target the current settings describe (under virt.mu). */
static void current_target(mxd_virtual_target *t)
{
    const char *api = virt.values[MXD_VIRTUAL_API];
    if (!api[0])
        api = mxd_accelerator_api() ? mxd_accelerator_api() : "cuda";
    snprintf(t->api, sizeof t->api, "%s", api);
    snprintf(t->arch, sizeof t->arch, "%s", virt.values[MXD_VIRTUAL_ARCH]);
}

/* The device for (id, *t), made if it does not exist yet (under virt.mu);
 * NULL when out of memory. */
static mxd_device *intern(int id, const mxd_virtual_target *t)
{
    for (virtual_device *v = virt.devices; v; v = v->next)
        if (v->dev.id == id && strcmp(v->target.api, t->api) == 0 &&
            strcmp(v->target.arch, t->arch) == 0)
            return &v->dev;
    virtual_device *v = calloc(1, sizeof *v);
    if (!v)
        return NULL;
    v->target = *t;
    v->dev.ops = &mxd_virtual_backend;
    v->dev.id = id;
    v->dev.native = &v->target;
    pthread_mutex_init(&v->dev.mu, NULL);
    v->next = virt.devices;
    virt.devices = v;
    return &v->dev;
}

mxd_status mxd_virtual_device(int id, mxd_device **out, mxd_error *err)
{
    int count = mxd_virtual_count();
    if (id == -1)
        id = 0;
    if (count == 0)
        return mxd_fail(err, MXD_INVALID,
                        "failed to create device: virtual device mode is "
                        "off; set_virtual_device_count(n) turns it on");
    if (id < 0 || id >= count)
        return mxd_fail(err, MXD_INVALID,
                        "failed to create device: accelerator id %d is out "
                        "of range; virtual device mode has %d device%s "
                        "(set_virtual_device_count(%d))",
                        id, count, count == 1 ? "" : "s", count);
    mxd_virtual_target t;
    pthread_mutex_lock(&virt.mu);
    current_target(&t);
    mxd_device *dev = intern(id, &t);
    pthread_mutex_unlock(&virt.mu);
    if (!dev)
        return mxd_fail(err, MXD_NO_MEMORY, "out of memory");
    *out = dev;
    return MXD_OK;
}

mxd_status mxd_virtual_refuse(const mxd_device *dev, const char *what,
                              mxd_error *err)
{
    return mxd_fail(err, MXD_UNAVAILABLE,
                    "Accelerator(%d) is a virtual %s device (virtual device "
                    "mode, set_virtual_device_count): it exists for "
                    "compilation only and cannot %s; use a real device "
                    "(set_virtual_device_count(0) leaves the mode)",
                    dev->id, mxd_virtual_target_of(dev)->api, what);
}

static void virtual_fork_prepare(void)
{
    pthread_mutex_lock(&virt.mu);
}

static void virtual_fork_parent(void)
{
    pthread_mutex_unlock(&virt.mu);
}

static void virtual_fork_child(void)
{
    /* Nothing of a virtual device belongs to a thread: only the lock. */
    pthread_mutex_unlock(&virt.mu);
}

const mxd_fork_hooks mxd_virtual_fork_hooks = {
    virtual_fork_prepare,
    virtual_fork_parent,
    virtual_fork_child,
};
