/* Device memory (fake_engine.h describes the locking).
 *
 * Each device owns a range of address space reserved PROT_NONE, so host
 * code that dereferences a device pointer faults, as with a discrete GPU,
 * instead of silently working.  Allocations get 256-byte aligned addresses
 * in it (CUDA's alignment), placed next-fit so that a freed address is
 * reused as late as possible: a stale pointer then lies in no allocation.
 * Their bytes live in separate host storage that fake_copy.c translates
 * to.  Stream-ordered allocations reserve their address at the call and
 * become live when their stream reaches them; stream-ordered frees take
 * effect when their stream reaches them. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "fake_engine.h"

enum { FAKE_ALIGN = 256 };
/* Address space per device, halved until the reservation succeeds (the
 * sanitizers leave less of it). */
#define FAKE_RESERVE_MAX ((size_t)1 << 40)
#define FAKE_RESERVE_MIN ((size_t)1 << 26)
/* New allocations up to this size are filled with a pattern, since a real
 * driver's are not zeroed; bigger ones are left to the kernel's zero pages
 * to keep them cheap. */
#define FAKE_POISON_MAX ((size_t)16 << 20)
#define FAKE_POISON 0xA5

typedef struct fake_devmem {
    uintptr_t base, end; /* the reserved range, [base, end) */
    uintptr_t cursor;    /* where the next placement search starts */
    fake_dmem **items;   /* pending and live allocations, by address */
    size_t n, cap;
} fake_devmem;

static fake_devmem *fake_devs; /* one per device, made on first use */
static int fake_dmem_count;
static size_t fake_dmem_bytes;

int fake_device_allocs(void)
{
    return fake_dmem_count;
}

size_t fake_device_bytes(void)
{
    return fake_dmem_bytes;
}

static size_t fake_span_of(size_t bytes)
{
    return (bytes + FAKE_ALIGN - 1) / FAKE_ALIGN * FAKE_ALIGN;
}

/* The device's table and reservation, or NULL when there is no memory for
 * them. */
static fake_devmem *fake_devmem_of(int device)
{
    if (fake_devs == NULL) {
        fake_devs = calloc((size_t)fake_cfg()->devices, sizeof *fake_devs);
        if (fake_devs == NULL)
            return NULL;
    }
    fake_devmem *m = &fake_devs[device];
    for (size_t size = FAKE_RESERVE_MAX;
         m->base == 0 && size >= FAKE_RESERVE_MIN; size /= 2) {
        void *p = mmap(NULL, size, PROT_NONE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (p != MAP_FAILED) {
            m->base = m->cursor = (uintptr_t)p;
            m->end = m->base + size;
        }
    }
    return m->base != 0 ? m : NULL;
}

int fake_device_of(uintptr_t addr)
{
    for (int d = 0; fake_devs != NULL && d < fake_cfg()->devices; d++)
        if (addr >= fake_devs[d].base && addr < fake_devs[d].end)
            return d;
    return fake_vmm_device_of(addr); /* memory mapped by hand */
}

/* The index of the first allocation whose base is above addr. */
static size_t fake_upper(const fake_devmem *m, uintptr_t addr)
{
    size_t lo = 0, hi = m->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (m->items[mid]->base <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

fake_dmem *fake_dmem_at(uintptr_t addr)
{
    if (fake_vmm_device_of(addr) >= 0) /* memory mapped by hand */
        return fake_vmm_at(addr);
    int d = fake_device_of(addr);
    if (d < 0)
        return NULL;
    const fake_devmem *m = &fake_devs[d];
    size_t i = fake_upper(m, addr);
    fake_dmem *x = i > 0 ? m->items[i - 1] : NULL;
    return x != NULL && addr - x->base < x->size ? x : NULL;
}

/* The allocation that starts at ptr and has no free on its way, or NULL:
 * what a free may be given. */
static fake_dmem *fake_dmem_freeable(uintptr_t ptr)
{
    fake_dmem *x = fake_dmem_at(ptr);
    return x != NULL && x->base == ptr && !x->free_enqueued ? x : NULL;
}

/* The lowest address >= from where `need` bytes fit below `limit` between
 * the allocations' 256-byte spans, or 0. */
static uintptr_t fake_gap(const fake_devmem *m, uintptr_t from, uintptr_t limit,
                          size_t need)
{
    uintptr_t lo = from;
    size_t i = fake_upper(m, from);
    for (i = i > 0 ? i - 1 : 0; i < m->n && lo < limit; i++) {
        const fake_dmem *x = m->items[i];
        uintptr_t end = x->base + fake_span_of(x->size);
        if (end <= lo)
            continue; /* wholly below */
        if (x->base >= lo && x->base - lo >= need)
            break; /* the gap before x fits */
        lo = end;
    }
    return lo <= limit && limit - lo >= need ? lo : 0;
}

/* Places x and enters it in the device's table: next-fit, wrapping once. */
static bool fake_place(fake_devmem *m, fake_dmem *x)
{
    size_t need = fake_span_of(x->size);
    uintptr_t addr = fake_gap(m, m->cursor, m->end, need);
    if (addr == 0)
        addr = fake_gap(m, m->base, m->end, need);
    if (addr == 0)
        return false;
    if (m->n == m->cap) {
        size_t cap = m->cap ? m->cap * 2 : 64;
        fake_dmem **items = realloc(m->items, cap * sizeof *items);
        if (items == NULL)
            return false;
        m->items = items;
        m->cap = cap;
    }
    size_t at = fake_upper(m, addr);
    memmove(m->items + at + 1, m->items + at, (m->n - at) * sizeof *m->items);
    m->items[at] = x;
    m->n++;
    x->base = addr;
    m->cursor = addr + need;
    return true;
}

void fake_dmem_unref(fake_dmem *x)
{
    if (--x->refs > 0)
        return;
    munmap(x->backing, x->size);
    free(x);
}

static unsigned fake_dmem_create(int device, size_t bytes,
                                 fake_dmem_state state, fake_dmem **out)
{
    if (bytes == 0)
        return FAKE_E_INVALID_VALUE;
    fake_devmem *m = fake_devmem_of(device);
    fake_dmem *x = calloc(1, sizeof *x);
    if (m == NULL || x == NULL || !fake_charge(device, bytes)) {
        free(x);
        return FAKE_E_OUT_OF_MEMORY;
    }
    x->size = bytes;
    x->device = device;
    x->state = state;
    x->refs = 1; /* the table's */
    x->backing = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (x->backing == MAP_FAILED || !fake_place(m, x)) {
        if (x->backing != MAP_FAILED)
            munmap(x->backing, bytes);
        fake_uncharge(device, bytes);
        free(x);
        return FAKE_E_OUT_OF_MEMORY;
    }
    if (bytes <= FAKE_POISON_MAX)
        memset(x->backing, FAKE_POISON, bytes);
    fake_dmem_count++;
    fake_dmem_bytes += bytes;
    *out = x;
    return FAKE_E_OK;
}

/* The free takes effect: out of the table, its bytes gone once no copy in
 * flight holds them. */
static void fake_dmem_release(fake_dmem *x)
{
    fake_devmem *m = &fake_devs[x->device];
    size_t i = fake_upper(m, x->base) - 1;
    memmove(m->items + i, m->items + i + 1, (m->n - i - 1) * sizeof *m->items);
    m->n--;
    x->state = FAKE_DMEM_FREED;
    fake_uncharge(x->device, x->size);
    fake_dmem_count--;
    fake_dmem_bytes -= x->size;
    fake_dmem_unref(x);
}

unsigned fake_dmem_alloc(int device, size_t bytes, uintptr_t *ptr)
{
    if (ptr == NULL)
        return FAKE_E_INVALID_VALUE;
    fake_dmem *x;
    pthread_mutex_lock(&fake_lock);
    unsigned rc = fake_dmem_create(device, bytes, FAKE_DMEM_LIVE, &x);
    if (rc == FAKE_E_OK)
        *ptr = x->base;
    pthread_mutex_unlock(&fake_lock);
    return rc;
}

/* Real drivers' cuMemFree / hipFree synchronise the device. */
unsigned fake_dmem_free(uintptr_t ptr)
{
    pthread_mutex_lock(&fake_lock);
    fake_dmem *x = fake_dmem_freeable(ptr);
    if (x != NULL) {
        fake_sync_device(x->device);
        x = fake_dmem_freeable(ptr); /* another thread may have freed it */
    }
    if (x != NULL) {
        fake_access_check_free(fake_current_entry_name(), x->base,
                               x->base + x->size);
        fake_dmem_release(x);
    }
    pthread_mutex_unlock(&fake_lock);
    return x != NULL ? FAKE_E_OK : FAKE_E_INVALID_VALUE;
}

/* From the pool of the stream's device, as documented. */
unsigned fake_dmem_alloc_async(void *stream, size_t bytes, uintptr_t *ptr)
{
    fake_stream *s;
    fake_item *it;
    fake_dmem *x;
    if (ptr == NULL)
        return FAKE_E_INVALID_VALUE;
    unsigned rc = fake_begin_item(stream, &s, &it);
    if (rc != FAKE_E_OK)
        return rc;
    rc = fake_dmem_create(s->device, bytes, FAKE_DMEM_PENDING, &x);
    if (rc != FAKE_E_OK) {
        pthread_mutex_unlock(&fake_lock);
        free(it);
        return rc;
    }
    x->pooled = true;
    x->refs++;
    it->type = FAKE_ITEM_ALLOC;
    it->u.dmem = x;
    *ptr = x->base;
    fake_enqueue(s, it);
    pthread_mutex_unlock(&fake_lock);
    return FAKE_E_OK;
}

unsigned fake_dmem_free_async(void *stream, uintptr_t ptr)
{
    fake_stream *s;
    fake_item *it;
    unsigned rc = fake_begin_item(stream, &s, &it);
    if (rc != FAKE_E_OK)
        return rc;
    fake_dmem *x = fake_dmem_freeable(ptr);
    if (x == NULL) {
        pthread_mutex_unlock(&fake_lock);
        free(it);
        return FAKE_E_INVALID_VALUE;
    }
    x->free_enqueued = true;
    x->refs++;
    it->type = FAKE_ITEM_FREE;
    it->u.dmem = x;
    fake_enqueue(s, it);
    pthread_mutex_unlock(&fake_lock);
    return FAKE_E_OK;
}

/* A free that overtakes its allocation (a stream not ordered after the
 * allocating one) is a use of memory that does not exist yet. */
void fake_dmem_run(fake_stream *s, fake_item *it)
{
    fake_dmem *x = it->u.dmem;
    if (it->type == FAKE_ITEM_ALLOC) {
        if (x->state == FAKE_DMEM_PENDING)
            x->state = FAKE_DMEM_LIVE;
        return;
    }
    if (x->state == FAKE_DMEM_FREED)
        return;
    if (x->state == FAKE_DMEM_PENDING) {
        fake_violation("%s freed 0x%" PRIxPTR
                       " before its allocation took effect",
                       it->entry, x->base);
        s->sticky = FAKE_E_ILLEGAL_ADDRESS;
    }
    fake_dmem_release(x);
}

unsigned fake_pointer_device(uintptr_t ptr, int *device)
{
    bool view;
    if (device == NULL)
        return FAKE_E_INVALID_VALUE;
    pthread_mutex_lock(&fake_lock);
    fake_dmem *x = fake_dmem_at(ptr);
    fake_alloc *a = x == NULL ? fake_find_pinned(ptr, &view) : NULL;
    unsigned rc = x != NULL || a != NULL ? FAKE_E_OK : FAKE_E_INVALID_VALUE;
    if (rc == FAKE_E_OK)
        *device = x != NULL ? x->device : a->device;
    pthread_mutex_unlock(&fake_lock);
    return rc;
}
