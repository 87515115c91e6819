/* SPDX-License-Identifier: MIT */
/* The wheel's timer nodes: see nodes.h. */
#include "wheel/nodes.h"

#include <errno.h>
#include <unistd.h>

#include "alloc.h"

#define FIRST_NODES 128u /* one 4 KiB page of nodes */
/* From this size on the node array asks for transparent huge pages: a cancel at 10^6 timers lands on
 * a random node of 32 MB, and with 4 KiB pages nearly every one is also a TLB miss (a page walk in
 * series with the cache miss). Below it, 2 MiB pages would cost more memory than they save. */
#define HUGE_FROM (UINT64_C(4) << 20)

/* Bytes to map for n items of size each: whole pages. */
static size_t mapping_bytes(size_t n, size_t size)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    return (n * size + page - 1) / page * page;
}

void chime__nodes_init(struct chime__nodes *ns)
{
    *ns = (struct chime__nodes){ .free_head = CHIME__NIL, .gen_floor = 1, .gen_max = 1 };
}

void chime__nodes_destroy(struct chime__nodes *ns)
{
    chime__unmap(ns->v, mapping_bytes(ns->cap, sizeof(*ns->v)));
    chime__unmap(ns->call, mapping_bytes(ns->call_cap, sizeof(*ns->call)));
    chime__unmap(ns->period, mapping_bytes(ns->period_cap, sizeof(*ns->period)));
    chime__nodes_init(ns);
}

/* Map (or remap) an array of *cap items of size bytes to hold at least want items (nothing to do if
 * it does). Past HUGE_FROM bytes it asks for huge pages. */
static int grow_mapping(void **v, size_t *cap, size_t want, size_t size)
{
    if (*cap >= want)
        return 0;
    size_t n = *cap ? *cap : FIRST_NODES;
    while (n < want)
        n *= 2;
    if (n > CHIME__MAX_NODES)
        n = CHIME__MAX_NODES;
    if (n < want || n == *cap)
        return -ENOMEM;
    size_t bytes = mapping_bytes(n, size);
    void *p = *v ? chime__remap(*v, mapping_bytes(*cap, size), bytes) : chime__map(bytes);
    if (!p)
        return -ENOMEM;
    *v = p;
    *cap = bytes / size;
    if (bytes >= HUGE_FROM)
        chime__map_huge(p, bytes);
    return 0;
}

int chime__nodes_grow(struct chime__nodes *ns)
{
    size_t want = (size_t)ns->top + 1;
    void *v = ns->v, *call = ns->call;
    int err = grow_mapping(&v, &ns->cap, want, sizeof(*ns->v));
    ns->v = v;
    if (!err)
        err = grow_mapping(&call, &ns->call_cap, want, sizeof(*ns->call));
    ns->call = call;
    return err;
}

int chime__nodes_grow_periods(struct chime__nodes *ns, uint32_t idx)
{
    if (idx < ns->period_cap)
        return 0;
    void *p = ns->period;
    int err = grow_mapping(&p, &ns->period_cap, (size_t)idx + 1, sizeof(*ns->period));
    ns->period = p;
    return err;
}

bool chime__nodes_reset(struct chime__nodes *ns)
{
    if (ns->used || !ns->top || ns->gen_max == UINT32_MAX)
        return false; /* in use, nothing to give, or no generation left to start above */
    /* Whole pages only: the mapping's tail past top may share a page with nothing. */
    chime__unmap_pages(ns->v, mapping_bytes(ns->top, sizeof(*ns->v)));
    chime__unmap_pages(ns->call, mapping_bytes(ns->top, sizeof(*ns->call)));
    if (ns->period)
        chime__unmap_pages(ns->period, mapping_bytes(ns->period_cap, sizeof(*ns->period)));
    ns->top = 0;
    ns->free_head = CHIME__NIL;
    ns->retired = 0;
    ns->gen_floor = ns->gen_max + 1;
    ns->gen_max = ns->gen_floor;
    return true;
}

const char *chime__nodes_check(const struct chime__nodes *ns)
{
    size_t free_count = 0;
    for (uint32_t idx = ns->free_head; idx != CHIME__NIL; idx = (uint32_t)ns->v[idx].deadline) {
        if (idx >= ns->top)
            return "free list link outside the nodes handed out";
        if (ns->v[idx].pos != CHIME__POS_FREE)
            return "free list holds a live node";
        if (++free_count > ns->top)
            return "free list cycles";
    }
    if (free_count + ns->used + ns->retired != ns->top)
        return "nodes lost: free plus used plus retired is not top";
    if (ns->top > ns->cap || ns->top > ns->call_cap)
        return "top beyond the mappings";
    return NULL;
}
