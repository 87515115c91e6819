/* SPDX-License-Identifier: MIT */
/* The allocation layer's out-of-line half: page mappings, the test hooks. See alloc.h. */
#define _GNU_SOURCE /* mremap, MREMAP_MAYMOVE, MADV_DONTNEED: Linux interfaces beyond C11 */
#include "alloc.h"

#include <stdio.h>
#include <sys/mman.h>
#include <sys/types.h> /* ssize_t, the type of jemalloc's decay settings */

#if defined(CHIME_USE_JEMALLOC) && CHIME_USE_JEMALLOC
#include <pthread.h>

static int jemalloc_flags;
static pthread_once_t jemalloc_once = PTHREAD_ONCE_INIT;

/* chime's arena: see alloc.h. */
static void make_arena(void)
{
    unsigned arena;
    size_t size = sizeof(arena);
    if (mallctl("arenas.create", &arena, &size, NULL, 0))
        return;
    ssize_t zero = 0;
    char name[64];
    snprintf(name, sizeof(name), "arena.%u.dirty_decay_ms", arena);
    mallctl(name, NULL, NULL, &zero, sizeof(zero));
    snprintf(name, sizeof(name), "arena.%u.muzzy_decay_ms", arena);
    mallctl(name, NULL, NULL, &zero, sizeof(zero));
    jemalloc_flags = MALLOCX_ARENA(arena) | MALLOCX_TCACHE_NONE;
}

int chime__jemalloc_large_flags(void)
{
    pthread_once(&jemalloc_once, make_arena);
    return jemalloc_flags;
}
#endif

_Atomic long chime__alloc_fail_countdown = -1;
_Atomic bool chime__alloc_size_checks = false;

void chime__alloc_fail_after(long n)
{
    /* relaxed: see chime__alloc_should_fail. */
    atomic_store_explicit(&chime__alloc_fail_countdown, n < 0 ? -1 : n, memory_order_relaxed);
}

void chime__alloc_check_sizes(bool on)
{
    atomic_store_explicit(&chime__alloc_size_checks, on, memory_order_relaxed); /* a test switch */
}

void chime__alloc_verify_size(void *ptr, size_t size, size_t align)
{
#if defined(CHIME_USE_JEMALLOC) && CHIME_USE_JEMALLOC
    /* jemalloc's contract for sdallocx and rallocx: size must round to the block's size class. */
    int flags = chime__jemalloc_flags(size) | (align ? MALLOCX_ALIGN(align) : 0);
    size_t want = sallocx(ptr, flags), got = size ? nallocx(size, flags) : 0;
    if (got != want) {
        fprintf(stderr, "chime: sized free of a %zu-byte block told %zu bytes\n", want, size);
        abort();
    }
#else
    (void)ptr;
    (void)size;
    (void)align; /* the C library's free takes no size: nothing to get wrong */
#endif
}

void *chime__map(size_t size)
{
    if (chime__alloc_should_fail())
        return NULL;
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

void *chime__remap(void *ptr, size_t old_size, size_t size)
{
    if (chime__alloc_should_fail())
        return NULL;
    void *p = mremap(ptr, old_size, size, MREMAP_MAYMOVE);
    return p == MAP_FAILED ? NULL : p;
}

void chime__unmap(void *ptr, size_t size)
{
    if (ptr)
        munmap(ptr, size);
}

void chime__unmap_pages(void *ptr, size_t size)
{
    madvise(ptr, size, MADV_DONTNEED);
}

void chime__map_huge(void *ptr, size_t size)
{
    madvise(ptr, size, MADV_HUGEPAGE); /* advice: without transparent huge pages it does nothing */
}
