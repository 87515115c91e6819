/* SPDX-License-Identifier: MIT */
/* The futex system calls: see futex.h. */
#define _GNU_SOURCE /* syscall(SYS_futex): a Linux interface beyond C11 */
#include "futex.h"

#include <limits.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

void chime__futex_wake(_Atomic uint32_t *word, int n)
{
    syscall(SYS_futex, word, FUTEX_WAKE_PRIVATE, n, NULL, NULL, 0);
}

void chime__futex_wake_all(_Atomic uint32_t *word)
{
    chime__futex_wake(word, INT_MAX);
}

void chime__futex_wait(_Atomic uint32_t *word, uint32_t seen, uint64_t deadline_ns)
{
    struct timespec ts, *timeout = NULL;
    if (deadline_ns != UINT64_MAX) {
        ts.tv_sec = (time_t)(deadline_ns / 1000000000u);
        ts.tv_nsec = (long)(deadline_ns % 1000000000u);
        timeout = &ts;
    }
    /* FUTEX_WAIT_BITSET takes an absolute CLOCK_MONOTONIC timeout. */
    syscall(SYS_futex, word, FUTEX_WAIT_BITSET_PRIVATE, seen, timeout, NULL, FUTEX_BITSET_MATCH_ANY);
}
