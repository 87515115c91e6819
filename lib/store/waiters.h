/* SPDX-License-Identifier: MIT */
/*
 * Waiting for a group commit without the log's lock: the protocol between the log's writer
 * (wal.c), which takes batches of records, syncs them and publishes each commit, and the threads
 * that wait for their record to be durable (a CHIME_SYNC_EACH put, a sync, a firing).
 *
 * BATCHES. The writer takes the records appended so far as a batch, writes and syncs it, publishes
 * its end as `durable`, and only then takes the next: batches are numbered 1, 2, ... and commit in
 * order. When it takes one it publishes `taken`: that batch's end LSN and its number's parity. A
 * record appended before a batch was taken is in that batch or an earlier one; appended after, in
 * the next one taken. So a waiter for LSN L that reads `taken` = (end E, parity q) knows its batch:
 * the one of parity q if L <= E (or an earlier one, already durable), else the next, of parity
 * 1 - q. There is no third case: its record was appended before it waits, so it is in no batch
 * after the first one taken since.
 *
 * WAKING BY PARITY. Each parity has its own futex word, bumped by the commit of a batch of that
 * parity, and its own count of sleepers. At the commit of batch b only the waiters of b and b + 1
 * exist (b + 2 collects records only once b + 1 is taken, after b committed), and they sleep on
 * different words: a commit wakes exactly its own waiters. (One word for all woke the waiters of the
 * next batch at every commit for nothing: measured, a third of all sleeps with 64 putting threads.)
 *
 * THE HANDSHAKE (Dekker's, all seq_cst where it matters):
 *     writer:  store durable;  bump word[p];  load sleepers[p]: wake word[p] if any
 *     waiter:  read word[p];  sleepers[p]++;  load durable: if not there, futex_wait(word[p], read)
 * At least one side sees the other: either the writer sees the sleeper and wakes it, or the waiter
 * sees durable; and a bump between the waiter's read of the word and its futex_wait makes the
 * futex_wait return at once. A failure is published in `failed` and wakes both words.
 *
 * Concurrency: chime__waiters_taken (under the log's lock), _commit and _fail are the writer's (one
 * thread); chime__waiters_wait and _durable any thread.
 */
#ifndef CHIME_STORE_WAITERS_H
#define CHIME_STORE_WAITERS_H

#include <stdatomic.h>
#include <stdint.h>

struct chime__waiters {
    _Atomic uint64_t durable; /* everything before this LSN is synced */
    _Atomic uint64_t taken;   /* the last batch taken: its end LSN << 1 | its number's parity */
    _Atomic int failed;       /* the log's sticky error, once it failed */
    _Atomic uint64_t idle_wakes; /* waits that woke with their LSN not yet durable (a statistic) */
    struct {
        _Alignas(64) _Atomic uint32_t word; /* a futex word: bumped by each commit of this parity */
        _Atomic uint32_t sleepers;          /* waiters asleep on it, or about to be */
    } parity[2];
};

static inline void chime__waiters_init(struct chime__waiters *w)
{
    atomic_init(&w->durable, 0);
    atomic_init(&w->taken, 0); /* batch 0, of parity 0, ended at LSN 0 */
    atomic_init(&w->failed, 0);
    atomic_init(&w->idle_wakes, 0);
    for (int p = 0; p < 2; p++) {
        atomic_init(&w->parity[p].word, 0);
        atomic_init(&w->parity[p].sleepers, 0);
    }
}

/* The writer took batch number n, whose records end at LSN end. */
static inline void chime__waiters_taken(struct chime__waiters *w, uint64_t n, uint64_t end)
{
    /* release: pairs with the acquire load in chime__waiters_wait. Nothing rides on it but the
     * value; the order that matters is that of the commit's bump after durable (see the top). */
    atomic_store_explicit(&w->taken, end << 1 | (n & 1), memory_order_release);
}

/* Everything before this LSN is durable (any thread). */
static inline uint64_t chime__waiters_durable(struct chime__waiters *w)
{
    return atomic_load_explicit(&w->durable, memory_order_acquire); /* pairs with commit's release */
}

/* The writer synced batch number n, up to LSN end: publish it and wake its waiters. */
void chime__waiters_commit(struct chime__waiters *w, uint64_t n, uint64_t end);

/* The log failed with err: publish it and wake every waiter. */
void chime__waiters_fail(struct chime__waiters *w, int err);

/* Wait until everything before LSN lsn is durable. Return: 0, or the log's error. No lock. */
int chime__waiters_wait(struct chime__waiters *w, uint64_t lsn);

#endif /* CHIME_STORE_WAITERS_H */
