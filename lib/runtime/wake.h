/* SPDX-License-Identifier: MIT */
/*
 * The advancing thread's sleep and the wake-up handshake with everyone else.
 *
 * The thread sleeps on a futex until its next deadline (tickless: no wake-up per tick), after
 * publishing that time in sleep_until. A thread that needs it awake sooner (a producer whose timer is
 * due earlier, a stop, a sync request) swaps sleep_until to 0 and wakes it; one waker wins that swap,
 * the rest make no system call.
 *
 * The handshake is Dekker's, store-then-load on both sides, all seq_cst:
 *     waker:    store its news (a queue push, a mode, a counter);  load sleep_until
 *     sleeper:  store sleep_until;                                load the news
 * At least one of them sees the other: either the waker sees the sleeper's sleep_until and wakes it,
 * or the sleeper sees the news and does not sleep. wake_seq, the futex word, is read before
 * sleep_until is published, so a wake that lands between the check and the futex call changes it and
 * the futex returns at once.
 */
#ifndef CHIME_RUNTIME_WAKE_H
#define CHIME_RUNTIME_WAKE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "futex.h"

struct chime__sleeper {
    _Alignas(64) _Atomic uint64_t sleep_until; /* 0: awake; else when it wakes (UINT64_MAX: never) */
    _Atomic uint32_t wake_seq;                 /* the futex word wakers bump */
    _Atomic uint32_t ready; /* 1: running, and it takes in what is queued before it runs any
                               callback itself (producer.c, RELATIVE SCHEDULES); 0 from just before
                               it sleeps or runs callbacks on its own thread */
};

static inline void chime__sleeper_init(struct chime__sleeper *s)
{
    atomic_init(&s->sleep_until, 0);
    atomic_init(&s->wake_seq, 0);
    atomic_init(&s->ready, 0);
}

/* The slow half of chime__sleeper_wake_before: swap sleep_until (seen as `seen`) to 0 and wake. */
void chime__sleeper_wake(struct chime__sleeper *s, uint64_t when_ns, uint64_t seen);

/* Wake the sleeper if it sleeps until after when_ns (0: if it sleeps at all). Any thread, after
 * storing its news. Inline: on a schedule the answer is almost always "no", one load and a compare. */
static inline void chime__sleeper_wake_before(struct chime__sleeper *s, uint64_t when_ns)
{
    /* seq_cst: the waker's load in the handshake, after its seq_cst store of the news; pairs with the
     * store in chime__sleeper_prepare. */
    uint64_t until = atomic_load_explicit(&s->sleep_until, memory_order_seq_cst);
    if (until != 0 && when_ns < until)
        chime__sleeper_wake(s, when_ns, until);
}

/*
 * The sleeper's half: publish that it sleeps until wake_ns. Return: the futex value to wait on. The
 * caller then loads its news (seq_cst) and, if there is none, calls chime__sleeper_wait.
 */
static inline uint32_t chime__sleeper_prepare(struct chime__sleeper *s, uint64_t wake_ns)
{
    /* acquire: pairs with the release increment in chime__sleeper_wake. Read before sleep_until is
     * published, so a wake after that changes it and the futex returns at once. */
    uint32_t seq = atomic_load_explicit(&s->wake_seq, memory_order_acquire);
    /* relaxed: `ready` is a producer's hint (chime__sleeper_set_ready); a stale 1 queues a delay
     * whose push wakes the thread through sleep_until's handshake. */
    atomic_store_explicit(&s->ready, 0, memory_order_relaxed);
    /* seq_cst: the sleeper's store in the handshake; its news loads come after it. */
    atomic_store_explicit(&s->sleep_until, wake_ns, memory_order_seq_cst);
    return seq;
}

/* Sleep until wake_ns (CLOCK_MONOTONIC; UINT64_MAX: until woken) unless woken since prepare. */
static inline void chime__sleeper_wait(struct chime__sleeper *s, uint32_t seq, uint64_t wake_ns)
{
    chime__futex_wait(&s->wake_seq, seq, wake_ns);
}

/* Awake again. relaxed: being awake needs no publication; a waker that still sees the old value
 * wakes a thread that is awake, which costs a system call and nothing else. */
static inline void chime__sleeper_awake(struct chime__sleeper *s)
{
    atomic_store_explicit(&s->sleep_until, 0, memory_order_relaxed);
}

/*
 * The thread is ready (it takes in what is queued before it runs a callback itself), or no longer
 * is. A producer that finds it ready queues a delay rather than a deadline (producer.c, RELATIVE
 * SCHEDULES). Before it runs callbacks, the thread stores 0 here and then takes in what was queued
 * (chime__timer_drain_queued, whose load of the queue's newest node follows this store: seq_cst,
 * so a push that came before the store is taken in); before it sleeps, the push's own wake-up
 * (sleep_until's handshake) brings it back for what came. A delay pushed after that look by a
 * producer that found the thread ready waits for the callbacks: the race producer.c describes. The
 * store of 1 may be relaxed: a producer that misses it reads the clock as before.
 */
static inline void chime__sleeper_set_ready(struct chime__sleeper *s, bool ready)
{
    /* relaxed load: the thread is the only writer. Stored only when it changes: producers read
     * this line at every schedule, and a store at every iteration took it from them. */
    memory_order order = ready ? memory_order_relaxed : memory_order_seq_cst;
    if (atomic_load_explicit(&s->ready, memory_order_relaxed) != (uint32_t)ready)
        atomic_store_explicit(&s->ready, ready, order);
}

#endif /* CHIME_RUNTIME_WAKE_H */
