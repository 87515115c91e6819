/* SPDX-License-Identifier: MIT */
/* Waiting for a group commit without the log's lock (waiters.h). */
#include "store/waiters.h"

#include "futex.h"

static void wake(struct chime__waiters *w, int p)
{
    /* seq_cst: the writer's half of the handshake: after its store of the news (durable or failed),
     * the bump, then the load of sleepers; pairs with the waiter's seq_cst increment and load. */
    atomic_fetch_add_explicit(&w->parity[p].word, 1, memory_order_seq_cst);
    if (atomic_load_explicit(&w->parity[p].sleepers, memory_order_seq_cst))
        chime__futex_wake_all(&w->parity[p].word);
}

void chime__waiters_commit(struct chime__waiters *w, uint64_t n, uint64_t end)
{
    /* seq_cst: the news of the handshake (waiters.h), so that the C11 model, not only x86, orders
     * it before the bump and the load of sleepers; as a release it pairs with the waiters' acquire
     * loads: what was synced is theirs to rely on. */
    atomic_store_explicit(&w->durable, end, memory_order_seq_cst);
    wake(w, (int)(n & 1));
}

void chime__waiters_fail(struct chime__waiters *w, int err)
{
    atomic_store_explicit(&w->failed, err, memory_order_seq_cst); /* as durable in commit */
    wake(w, 0);
    wake(w, 1);
}

int chime__waiters_wait(struct chime__waiters *w, uint64_t lsn)
{
    for (;;) {
        /* acquire: pairs with the release stores in commit and fail. */
        if (atomic_load_explicit(&w->durable, memory_order_acquire) >= lsn)
            return 0;
        int err = atomic_load_explicit(&w->failed, memory_order_acquire);
        if (err)
            return err;
        /* acquire: pairs with the release store in chime__waiters_taken. */
        uint64_t taken = atomic_load_explicit(&w->taken, memory_order_acquire);
        int p = (int)(taken & 1) ^ (lsn > taken >> 1); /* this record's batch's parity (the top) */
        /* acquire: a bump seen here is a commit whose durable store this load then also sees. */
        uint32_t seen = atomic_load_explicit(&w->parity[p].word, memory_order_acquire);
        /* seq_cst: the waiter's half of the handshake (the top): count, then look once more. */
        atomic_fetch_add_explicit(&w->parity[p].sleepers, 1, memory_order_seq_cst);
        int slept = atomic_load_explicit(&w->durable, memory_order_seq_cst) < lsn &&
                    !atomic_load_explicit(&w->failed, memory_order_seq_cst);
        if (slept)
            chime__futex_wait(&w->parity[p].word, seen, UINT64_MAX);
        /* relaxed: a writer that still counts us wakes nobody in vain but costs a system call. */
        atomic_fetch_sub_explicit(&w->parity[p].sleepers, 1, memory_order_relaxed);
        /* relaxed: a statistic. (A futex_wait that found the word bumped already did not sleep.) */
        if (slept && atomic_load_explicit(&w->durable, memory_order_acquire) < lsn &&
            !atomic_load_explicit(&w->failed, memory_order_acquire))
            atomic_fetch_add_explicit(&w->idle_wakes, 1, memory_order_relaxed);
    }
}
