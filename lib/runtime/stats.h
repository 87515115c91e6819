/* SPDX-License-Identifier: MIT */
/*
 * The runtime's counters (struct chime_stats in chime.h). The per-timer counts are written by the
 * advancing thread alone (scheduled, cancelled, unfired) or by whichever thread starts a callback
 * (fired, runs, lateness); never by a producer, so that the producer's path has no counter to bump
 * (a locked add cost 13 % of schedule_at's throughput). A timer counts as scheduled when the
 * advancing thread first takes it in, and as cancelled when it gives it back.
 *
 * Readers see a snapshot in which every timer counted as ended was counted as scheduled first: the
 * ends are written with release after the schedule's count, and read with acquire before it.
 */
#ifndef CHIME_RUNTIME_STATS_H
#define CHIME_RUNTIME_STATS_H

#include <stdatomic.h>
#include <stdint.h>

#include "chime.h"

struct chime__stats {
    _Alignas(64) _Atomic uint64_t scheduled, cancelled, unfired; /* the advancing thread's */
    _Alignas(64) _Atomic uint64_t fired, runs, late_max;        /* whoever runs callbacks */
    _Atomic uint64_t late_hist[CHIME_LATENESS_BUCKETS];
};

/* Bump a counter only the advancing thread writes: a load and a store, no locked instruction.
 * release: pairs with the acquire loads in chime__stats_read. */
static inline void chime__stats_bump(_Atomic uint64_t *counter)
{
    atomic_store_explicit(counter, atomic_load_explicit(counter, memory_order_relaxed) + 1,
                          memory_order_release);
}

/* Bump a counter several threads write. release: as chime__stats_bump. */
static inline void chime__stats_add(_Atomic uint64_t *counter)
{
    atomic_fetch_add_explicit(counter, 1, memory_order_release);
}

/* A callback starts late_ns after its deadline: count the run and its lateness. Any thread. */
void chime__stats_run(struct chime__stats *s, uint64_t late_ns);

/* A snapshot for chime_timer_stats. Any thread. */
void chime__stats_read(struct chime__stats *s, struct chime_stats *out);

#endif /* CHIME_RUNTIME_STATS_H */
