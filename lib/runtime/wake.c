/* SPDX-License-Identifier: MIT */
/* The sleep handshake's waker: see wake.h. */
#include "runtime/wake.h"

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
