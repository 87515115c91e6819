/* SPDX-License-Identifier: MIT */
/*
 * The runtime's worker pool (lib/runtime/workers.c) on its own: this program plays the advancing
 * thread (the only caller of submit, idle and stop). Items run in the order submitted when there is
 * one worker, and the room a backlog made goes back once the pool is idle. A plain TAP program
 * (tap.h), so that TSan runs it.
 */
#define _GNU_SOURCE
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>

#include "runtime/workers.h"
#include "tap.h"

enum { BURST = 200000 }; /* items: the ring grows to 262 144 (8 MiB) */

static struct chime__workers wk;
static _Atomic int gate_open, in_gate;
static _Atomic size_t ran, idles;
static uintptr_t *order; /* the args of the items run, in the order run (one worker) */

static void noop(void *arg)
{
    (void)arg;
}

#define GATE ((void *)UINTPTR_MAX)

static void run(void *ctx, const struct chime__item *item)
{
    (void)ctx;
    if (item->arg == GATE) {
        atomic_store(&in_gate, 1);
        while (!atomic_load(&gate_open))
            sched_yield(); /* a poll: the test opens the gate once the burst is queued */
        return;
    }
    order[atomic_fetch_add(&ran, 1)] = (uintptr_t)item->arg;
}

static void idle(void *ctx)
{
    (void)ctx;
    atomic_fetch_add(&idles, 1);
}

static size_t ring_cap(void)
{
    pthread_mutex_lock(&wk.lock);
    size_t cap = wk.cap;
    pthread_mutex_unlock(&wk.lock);
    return cap;
}

/* Submit items whose args are first..first+n-1, in batches as the advancing thread hands them out. */
static void submit_run(uintptr_t first, size_t n)
{
    struct chime__item batch[256];
    for (size_t done = 0; done < n;) {
        size_t k = n - done < 256 ? n - done : 256;
        for (size_t i = 0; i < k; i++)
            batch[i] = (struct chime__item){ noop, (void *)(first + done + i), UINT32_MAX, 0 };
        CHECK_EQ(chime__workers_submit(&wk, batch, k), 0);
        done += k;
    }
}

/* Wait until the worker has run `want` items and then found the pool idle. */
static void wait_idle_after(size_t want, size_t idles_before)
{
    while (atomic_load(&ran) < want || atomic_load(&idles) == idles_before ||
           !chime__workers_idle(&wk))
        sched_yield(); /* a poll: the worker runs the burst */
}

/* Found in review: a burst handed to a busy worker grew the ring to hold it (8 MiB for 2 * 10^5
 * callbacks), and nothing ever shrank it. Then the pool still runs a burst, in order. */
static void a_backlog_s_room_goes_back_once_the_pool_is_idle(void)
{
    order = calloc(2 * BURST, sizeof *order);
    CHECK(order != NULL, "out of memory");
    CHECK_EQ(chime__workers_start(&wk, 1, run, idle, NULL), 0);
    size_t cap0 = ring_cap();
    struct chime__item gate = { noop, GATE, UINT32_MAX, 0 };
    CHECK_EQ(chime__workers_submit(&wk, &gate, 1), 0);
    while (!atomic_load(&in_gate))
        sched_yield(); /* a poll: the worker takes the gate, and the burst queues behind it */
    size_t idles_before = atomic_load(&idles);
    submit_run(0, BURST);
    size_t peak = ring_cap();
    CHECK(peak >= BURST, "ring of %zu for a backlog of %d", peak, BURST);
    atomic_store(&gate_open, 1);
    wait_idle_after(BURST, idles_before);
    size_t after = ring_cap();
    printf("# ring: %zu items at start, %zu with the backlog, %zu once idle\n", cap0, peak, after);
    CHECK(after == cap0, "the ring keeps room for %zu items after the burst", after);

    idles_before = atomic_load(&idles);
    submit_run(BURST, BURST);
    wait_idle_after(2 * BURST, idles_before);
    for (size_t i = 0; i < 2 * BURST; i++)
        CHECK(order[i] == i, "item %zu ran as the %zu-th", (size_t)order[i], i);
    chime__workers_stop(&wk, false, NULL);
    free(order);
}

int main(void)
{
    static const struct tap_test tests[] = {
        { "a backlog's room goes back once the pool is idle",
          a_backlog_s_room_goes_back_once_the_pool_is_idle },
    };
    return tap_run(tests, (int)(sizeof(tests) / sizeof(tests[0])));
}
