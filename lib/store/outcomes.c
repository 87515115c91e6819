/* SPDX-License-Identifier: MIT */
/*
 * Outcomes in flight: what makes chime_store_sync cover the outcome of every handler that returned
 * before it (store.h, "outcomes.c").
 *
 * WHY. A handler's outcome is recorded by its own thread after it returns: appended with its key's
 * stripe locked (fire.c, chime__store_finish), or queued for a group (acks.c). A put or cancel of
 * any key of the stripe may hold that lock meanwhile (an index batch written under it takes
 * milliseconds), so a sync that only recorded the queue and committed could return while an
 * acknowledgement that returned before it still waited for the lock; a crash then fired the timer
 * again (found in review, test_store_outcomes).
 *
 * HOW. Each outcome is counted from the handler's return until it is appended or queued, under
 * the parity of a generation; a sync flips the parity and waits until the old parity's count is 0
 * (outcomes counted after the flip are the next sync's), then records the queue and commits. One
 * word holds it all, so that counting in and flipping are ordered by the word's modification
 * order alone:
 *
 *   bit 63      the parity outcomes are counted under now
 *   bit 62      WAITING: a sync waits for the other parity's count to reach 0
 *   bits 32-61  the count of parity 1; bits 0-29 the count of parity 0 (30 and 31 stay 0)
 *
 *   begin  (handler's thread)  compare-and-swap: count + 1 under the parity it reads
 *   end    (handler's thread)  fetch-sub: count - 1 under the parity begin returned; if it made
 *                              that count 0 while a sync waits, broadcast under `lock`
 *   sync                       under `order` (one sync's flip at a time): flip the parity and set
 *                              WAITING in one compare-and-swap; wait under `lock` until the old
 *                              parity's count is 0; clear WAITING
 *
 * A sync that reads a count of its parity above 0 under `lock` sleeps, releasing it; the end that
 * brings the count to 0 broadcasts under `lock` after its fetch-sub, so it cannot fall between the
 * read and the sleep. Counts of 2^30 outcomes in flight at once cannot be reached: an outcome is
 * in flight on the thread that ran its handler, one at a time (the runtime's workers, its advancing
 * thread, and the dispatcher when the runtime refuses a handler).
 *
 * Cost per firing: two atomic read-modify-writes of one shared line, which `running` (fire.c)
 * already costs too; a lock only while a sync waits.
 */
#include "store/store.h"

#define PARITY (UINT64_C(1) << 63)
#define WAITING (UINT64_C(1) << 62)

static uint64_t one(unsigned parity)
{
    return UINT64_C(1) << (32 * parity);
}

static uint64_t count(uint64_t word, unsigned parity)
{
    return (word >> (32 * parity)) & 0x3fffffff;
}

void chime__store_outcomes_init(struct chime_store *s)
{
    atomic_init(&s->outcomes.word, 0);
    pthread_mutex_init(&s->outcomes.order, NULL);
    pthread_mutex_init(&s->outcomes.lock, NULL);
    pthread_cond_init(&s->outcomes.done, NULL);
}

void chime__store_outcomes_destroy(struct chime_store *s)
{
    pthread_mutex_destroy(&s->outcomes.order);
    pthread_mutex_destroy(&s->outcomes.lock);
    pthread_cond_destroy(&s->outcomes.done);
}

unsigned chime__store_outcome_begin(struct chime_store *s)
{
    /* relaxed: the compare-and-swap decides */
    uint64_t w = atomic_load_explicit(&s->outcomes.word, memory_order_relaxed);
    unsigned parity;
    /* relaxed: nothing is published by counting in; what matters is where it falls in the word's
     * modification order, before or after a sync's flip */
    do {
        parity = (unsigned)(w >> 63);
    } while (!atomic_compare_exchange_weak_explicit(&s->outcomes.word, &w, w + one(parity),
                                                    memory_order_relaxed, memory_order_relaxed));
    return parity;
}

void chime__store_outcome_end(struct chime_store *s, unsigned parity)
{
    /* release: the outcome's append (or queueing) comes before, for the sync that sees the count
     * fall (its acquire load below) and then commits */
    uint64_t w = atomic_fetch_sub_explicit(&s->outcomes.word, one(parity), memory_order_release) -
                 one(parity);
    if (count(w, parity) == 0 && (w & WAITING)) {
        pthread_mutex_lock(&s->outcomes.lock);
        pthread_cond_broadcast(&s->outcomes.done);
        pthread_mutex_unlock(&s->outcomes.lock);
    }
}

void chime__store_outcomes_wait(struct chime_store *s)
{
    pthread_mutex_lock(&s->outcomes.order);
    /* relaxed: the compare-and-swap decides; and it is relaxed too, since what it must order is
     * only its place in the word's modification order (an outcome counted in before it is waited
     * for, one after it is the next sync's), and the appends are acquired by the load below */
    uint64_t w = atomic_load_explicit(&s->outcomes.word, memory_order_relaxed);
    while (!atomic_compare_exchange_weak_explicit(&s->outcomes.word, &w, (w ^ PARITY) | WAITING,
                                                  memory_order_relaxed, memory_order_relaxed))
        ;
    unsigned old = (unsigned)(w >> 63);
    pthread_mutex_lock(&s->outcomes.lock);
    /* acquire: pairs with end's release, so the outcomes counted under the old parity are
     * appended (or queued) before this sync records the queue and commits */
    while (count(atomic_load_explicit(&s->outcomes.word, memory_order_acquire), old))
        pthread_cond_wait(&s->outcomes.done, &s->outcomes.lock);
    pthread_mutex_unlock(&s->outcomes.lock);
    /* relaxed: WAITING only spares end the lock when no sync waits */
    atomic_fetch_and_explicit(&s->outcomes.word, ~WAITING, memory_order_relaxed);
    pthread_mutex_unlock(&s->outcomes.order);
}
