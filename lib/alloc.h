/* SPDX-License-Identifier: MIT */
/*
 * Where chime's memory comes from, and the one place tests can make it run out.
 *
 * Heap allocations (the wheel's slot arrays and tables, the runtime's structures) use jemalloc's
 * non-standard API (mallocx/rallocx/sdallocx), so chime gets jemalloc's size classes without
 * replacing the application's malloc (the loader finds malloc in libc before libjemalloc);
 * `-Dallocator=system` uses the C library instead, which is what the sanitizer and valgrind builds
 * use so that every allocation is tracked. The static archive is always compiled without
 * CHIME_USE_JEMALLOC (lib/meson.build): Debian's libjemalloc.a defines malloc itself, so linking it
 * would replace the whole program's allocator. Node arrays, which must grow without copying and give
 * pages back, are mapped directly (chime__map and friends).
 *
 * Every free and realloc is told the size the block was allocated with: jemalloc's sdallocx and
 * rallocx require it (the size passed must lie between the size requested and the usable size). A
 * test can turn on a check of that contract (chime__alloc_check_sizes) and can make the N-th
 * allocation from now fail (chime__alloc_fail_after), so every allocation point's failure path is
 * exercised, in the jemalloc build too. Sizes passed here are never 0 (mallocx(0) is undefined).
 */
#ifndef CHIME_ALLOC_H
#define CHIME_ALLOC_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#if defined(CHIME_USE_JEMALLOC) && CHIME_USE_JEMALLOC
#include <jemalloc/jemalloc.h>
#endif

/* Allocations left before one fails: -1 means never (the default). Tests only. */
extern _Atomic long chime__alloc_fail_countdown;
/* Verify every sized free against the allocator's own record of the block (jemalloc). Tests only. */
extern _Atomic bool chime__alloc_size_checks;

/* Make the n-th allocation from now fail (n = 0: the next one), or never (n < 0). Any thread. */
void chime__alloc_fail_after(long n);
/* Turn the sized-deallocation check on or off; a mismatch aborts with a message. */
void chime__alloc_check_sizes(bool on);

/* True if this allocation must fail (a test armed the countdown). The fast path is one relaxed load. */
static inline bool chime__alloc_should_fail(void)
{
    /* relaxed: a test's countdown; it orders no other memory. */
    if (__builtin_expect(atomic_load_explicit(&chime__alloc_fail_countdown, memory_order_relaxed) < 0, 1))
        return false;
    return atomic_fetch_sub_explicit(&chime__alloc_fail_countdown, 1, memory_order_relaxed) == 0;
}

/* Abort if size is not what ptr was allocated with (only when the check is on). */
void chime__alloc_verify_size(void *ptr, size_t size, size_t align);

static inline void chime__alloc_checked(void *ptr, size_t size, size_t align)
{
    /* relaxed: a test switch, set before the code under test runs. */
    if (ptr && __builtin_expect(atomic_load_explicit(&chime__alloc_size_checks, memory_order_relaxed), 0))
        chime__alloc_verify_size(ptr, size, align);
}

#if defined(CHIME_USE_JEMALLOC) && CHIME_USE_JEMALLOC

/*
 * Large blocks (16 KiB and up: the arrays of busy slots, what a burst leaves behind) go to an arena of
 * chime's own whose decay times are 0, without the thread cache: when chime frees them (the runtime
 * trims after a burst) they leave the process at once. In jemalloc's default arenas a freed extent
 * stays resident for dirty_decay_ms (10 s) and is purged only when the allocator is next used, so an
 * idle process would keep its high-water mark (measured after a burst of 10^6 runtime timers: +13.1
 * MB resident, +11.3 with this arena for blocks from 16 KiB, +5.6 from 1 KiB). Smaller blocks stay in
 * the default arenas: a second arena's own first pages (about 90 KB) are paid once its first block is
 * allocated, and from a 4 KiB threshold on a wheel of a thousand timers already has such a block
 * (57 bytes per timer in a fresh process became 152). If the arena cannot be made, large blocks use
 * the default arena too.
 */
int chime__jemalloc_large_flags(void);

static inline int chime__jemalloc_flags(size_t size)
{
    return size >= 16384 ? chime__jemalloc_large_flags() : 0;
}

static inline void *chime__alloc(size_t size)
{
    return chime__alloc_should_fail() ? NULL : mallocx(size, chime__jemalloc_flags(size));
}
static inline void *chime__alloc_zeroed(size_t size)
{
    return chime__alloc_should_fail() ? NULL : mallocx(size, chime__jemalloc_flags(size) | MALLOCX_ZERO);
}
/* Resize a block of old_size bytes (ptr may be NULL with old_size 0). NULL on failure, ptr intact. */
static inline void *chime__realloc_sized(void *ptr, size_t old_size, size_t size)
{
    if (!ptr)
        return chime__alloc(size);
    chime__alloc_checked(ptr, old_size, 0);
    /* The new size picks the arena: a block growing past 16 KiB moves to chime's. */
    return chime__alloc_should_fail() ? NULL : rallocx(ptr, size, chime__jemalloc_flags(size));
}
/* sdallocx: jemalloc skips the size lookup when it is told the size. */
static inline void chime__free(void *ptr, size_t size)
{
    chime__alloc_checked(ptr, size, 0);
    if (ptr)
        sdallocx(ptr, size, chime__jemalloc_flags(size));
}
/* Zeroed and aligned (align a power of two): for structures with cache-line-aligned members. */
static inline void *chime__alloc_aligned(size_t size, size_t align)
{
    return chime__alloc_should_fail()
               ? NULL
               : mallocx(size, chime__jemalloc_flags(size) | MALLOCX_ALIGN(align) | MALLOCX_ZERO);
}
static inline void chime__free_aligned(void *ptr, size_t size, size_t align)
{
    chime__alloc_checked(ptr, size, align);
    if (ptr)
        sdallocx(ptr, size, chime__jemalloc_flags(size) | MALLOCX_ALIGN(align));
}

#else

static inline void *chime__alloc(size_t size)
{
    return chime__alloc_should_fail() ? NULL : malloc(size);
}
static inline void *chime__alloc_zeroed(size_t size)
{
    return chime__alloc_should_fail() ? NULL : calloc(1, size);
}
static inline void *chime__realloc_sized(void *ptr, size_t old_size, size_t size)
{
    (void)old_size;
    return chime__alloc_should_fail() ? NULL : realloc(ptr, size);
}
static inline void chime__free(void *ptr, size_t size)
{
    (void)size;
    free(ptr);
}
static inline void *chime__alloc_aligned(size_t size, size_t align)
{
    if (chime__alloc_should_fail())
        return NULL;
    size = (size + align - 1) / align * align; /* aligned_alloc wants a multiple of the alignment */
    void *p = aligned_alloc(align, size);
    return p ? memset(p, 0, size) : NULL;
}
static inline void chime__free_aligned(void *ptr, size_t size, size_t align)
{
    (void)size;
    (void)align;
    free(ptr);
}

#endif

/*
 * Pages straight from the kernel, for arrays that grow without copying (chime__remap moves the
 * page tables, not the bytes) and read as zeros until written: untouched pages cost no memory.
 * Sizes are multiples of the page size. NULL on failure (and when a test makes it fail).
 */
void *chime__map(size_t size);
/* Grow (or shrink) a mapping of old_size bytes to size bytes; it may move. NULL on failure, the old
 * mapping intact. */
void *chime__remap(void *ptr, size_t old_size, size_t size);
void chime__unmap(void *ptr, size_t size);
/* Give the pages of [ptr, ptr + size) back to the system; they read as zeros afterwards. */
void chime__unmap_pages(void *ptr, size_t size);
/* Ask for transparent huge pages over [ptr, ptr + size) (a hint; ignored where THP is off). */
void chime__map_huge(void *ptr, size_t size);

#endif /* CHIME_ALLOC_H */
