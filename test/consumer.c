/* SPDX-License-Identifier: MIT */
/*
 * A program that uses chime as an application would, built by test/install.sh and
 * test/subproject.sh against an installed or a subproject chime (dynamically, statically, through
 * pkg-config, CMake or meson). It checks that the library works and that the version it runs with is
 * the header's, then reports which allocator serves what:
 *
 *     malloc=glibc|other   whether the program's own malloc() is still the C library's
 *     heap=glibc|other     whether chime's heap allocations (the wheel's slot arrays; its nodes
 *                          and tables are mapped directly) come from the C library's malloc
 *
 * glibc's mallinfo2() counts only what glibc's malloc handed out, so an allocation it does not see
 * came from another allocator (jemalloc, once it has replaced malloc or through mallocx). The
 * scripts compare the line with what the build should give; this program exits 1 only if chime
 * itself misbehaves.
 */
#define _GNU_SOURCE
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>

#include <chime.h>

/* Bytes glibc's malloc has handed out, from its heap or from its own mmap()s. */
static size_t glibc_bytes(void)
{
    struct mallinfo2 mi = mallinfo2();
    return mi.uordblks + mi.hblkhd;
}

static void count(void *arg) { ++*(int *)arg; }

int main(void)
{
    if (chime_version() != CHIME_VERSION) {
        printf("chime_version() is %#lx, the header says %#lx\n", (unsigned long)chime_version(),
               (unsigned long)CHIME_VERSION);
        return 1;
    }

    /* 64 KiB is below glibc's mmap threshold, so a glibc malloc serves it from its heap. */
    size_t before = glibc_bytes();
    void *block = malloc(64 * 1024);
    int malloc_is_glibc = glibc_bytes() >= before + 64 * 1024;
    free(block);

    /* 20000 pending timers fill the wheel's slot arrays, which come from the heap: with glibc's
     * malloc, glibc sees them (about 120 KB); with jemalloc's mallocx, not a byte. */
    enum { TIMERS = 20000 };
    chime_wheel *w;
    int fired = 0;
    before = glibc_bytes();
    if (chime_wheel_new(&w, NULL) != 0)
        return 1;
    for (int i = 0; i < TIMERS; i++)
        if (chime_wheel_schedule(w, 1 + (uint64_t)i % 5000, count, &fired, NULL) != 0)
            return 1;
    int heap_is_glibc = glibc_bytes() > before;
    chime_wheel_advance(w, 5000);
    chime_wheel_free(w, NULL);
    if (fired != TIMERS) {
        printf("the wheel fired %d of %d timers\n", fired, TIMERS);
        return 1;
    }

    /* The threaded runtime, which needs the threads library the link line must bring. */
    chime_timer *t;
    struct chime_stats st;
    int ran = 0;
    if (chime_timer_new(&t, NULL) != 0 || chime_timer_schedule(t, 1000000, count, &ran, NULL) != 0 ||
        chime_timer_stop(t, CHIME_STOP_DRAIN, NULL) != 0)
        return 1;
    chime_timer_stats(t, &st);
    chime_timer_free(t);
    if (ran != 1 || st.fired != 1) {
        printf("the runtime fired %d timer(s), its stats say %llu\n", ran, (unsigned long long)st.fired);
        return 1;
    }

    printf("malloc=%s heap=%s\n", malloc_is_glibc ? "glibc" : "other", heap_is_glibc ? "glibc" : "other");
    return 0;
}
