/*
 * Where chime's memory comes from. By default the shared library allocates the node pool and the
 * slot tables with jemalloc's non-standard API (mallocx/sdallocx), so chime gets jemalloc's size
 * classes and arenas without replacing the application's malloc (the loader finds malloc in libc
 * before libjemalloc); `-Dallocator=system` uses the C library instead, which is what the sanitizer
 * and valgrind builds use so that every allocation is tracked. The static archive is always
 * compiled without CHIME_USE_JEMALLOC (lib/meson.build): Debian's libjemalloc.a defines malloc
 * itself, so linking it would replace the whole program's allocator.
 * Sizes passed here are never 0 (mallocx(0) is undefined).
 */
#ifndef CHIME_ALLOC_H
#define CHIME_ALLOC_H

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#if defined(CHIME_USE_JEMALLOC) && CHIME_USE_JEMALLOC
#include <jemalloc/jemalloc.h>

static inline void *chime__alloc(size_t size) { return mallocx(size, 0); }
static inline void *chime__alloc_zeroed(size_t size) { return mallocx(size, MALLOCX_ZERO); }
static inline void *chime__realloc(void *ptr, size_t size) { return ptr ? rallocx(ptr, size, 0) : mallocx(size, 0); }
/* sdallocx: jemalloc skips the size lookup when it is told the size. */
static inline void chime__free(void *ptr, size_t size) { if (ptr) sdallocx(ptr, size, 0); }
/* Zeroed and aligned (align a power of two): for structures with cache-line-aligned members. */
static inline void *chime__alloc_aligned(size_t size, size_t align) { return mallocx(size, MALLOCX_ALIGN(align) | MALLOCX_ZERO); }
static inline void chime__free_aligned(void *ptr, size_t size, size_t align) { if (ptr) sdallocx(ptr, size, MALLOCX_ALIGN(align)); }
#else
static inline void *chime__alloc(size_t size) { return malloc(size); }
static inline void *chime__alloc_zeroed(size_t size) { return calloc(1, size); }
static inline void *chime__realloc(void *ptr, size_t size) { return realloc(ptr, size); }
static inline void chime__free(void *ptr, size_t size) { (void)size; free(ptr); }
static inline void *chime__alloc_aligned(size_t size, size_t align)
{
    size = (size + align - 1) / align * align; /* aligned_alloc wants a multiple of the alignment */
    void *p = aligned_alloc(align, size);
    return p ? memset(p, 0, size) : NULL;
}
static inline void chime__free_aligned(void *ptr, size_t size, size_t align) { (void)size; (void)align; free(ptr); }
#endif

#endif /* CHIME_ALLOC_H */
