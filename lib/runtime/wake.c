/* SPDX-License-Identifier: MIT */
/* The sleep handshake's system calls: see wake.h. */
#define _GNU_SOURCE /* syscall(SYS_futex): a Linux interface beyond C11 */
#include "runtime/wake.h"

#include <limits.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

void chime__futex_wake_all(_Atomic uint32_t *word)
{
    syscall(SYS_futex, word, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
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

void chime__sleeper_wake(struct chime__sleeper *s, uint64_t when_ns, uint64_t seen)
{
    do {
        /* seq_cst, as the load in chime__sleeper_wake_before; only the waker whose swap succeeds
         * makes the system call. */
        if (atomic_compare_exchange_weak_explicit(&s->sleep_until, &seen, 0, memory_order_seq_cst,
                                                  memory_order_seq_cst)) {
            /* release: pairs with the acquire load of wake_seq in chime__sleeper_prepare. */
            atomic_fetch_add_explicit(&s->wake_seq, 1, memory_order_release);
            chime__futex_wake_all(&s->wake_seq);
            return;
        }
    } while (seen != 0 && when_ns < seen);
}
