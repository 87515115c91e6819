/* SPDX-License-Identifier: MIT */
/*
 * The lead: how long before its due time a loaded timer's firing is recorded (fire.c, "LEAD"), set
 * from how long the backend's firing commits have taken lately, so that the commit is over before
 * the due time and the handler starts on time, however slow the disk or the database is, within
 * bounds.
 *
 * A firing's handler may start only once its firing is durable (D2), and the commit that makes it
 * so is an fdatasync or a PostgreSQL transaction: 0.2 ms on a quiet disk, and on a virtual disk a
 * p99 of several milliseconds and spikes of tens (docs/perf.md). A fixed 2 ms lead left the p99 of
 * handler starts 5 ms late here, where the runtime alone is one tick late; a fixed 20 ms lead put it
 * back at one tick, but would keep every key uncancellable for 20 ms before its due time on any
 * disk (a recorded firing cannot be cancelled). So the lead follows the commits:
 *
 *     lead = clamp(the longest firing commit of the last 10 to 20 s, rounded up to a power of two
 *                  of microseconds, + the runtime's tick,  CHIME__LEAD_MIN_NS, CHIME__LEAD_MAX_NS)
 *
 * The longest, not a percentile: the dispatcher records one batch at a time, so a slow commit makes
 * every firing queued behind it wait as long, and a commit slower than the lead makes late handlers
 * out of all of them (a lead from the commits' p99 left the handlers' p99 2.8 to 4.7 ms late,
 * measured).
 * The tick is how late the runtime may call back at (due - lead). The longest commit is kept for the
 * current period of CHIME__LEAD_PERIOD_NS and the one before it, so a spike raises the lead at once
 * and stops counting 10 to 20 s later; a period with no commit teaches nothing, so the lead falls
 * back only as quicker commits come in. Until the dispatcher has timed commits for a whole period
 * (the first 10 s of firings after open) it knows too little of the disk, and the lead is
 * CHIME__LEAD_MAX_NS: the first slow commit would otherwise make late handlers of everything queued
 * behind it before the lead could learn from it. Loaded timers are armed CHIME__LEAD_MAX_NS before
 * their due time and armed again at (due - lead) then (fire.c), so a lead that grew since a timer
 * was loaded applies to it too.
 *
 * Concurrency: chime__lead_note is the dispatcher's alone (one thread); chime__lead_ns any thread.
 */
#ifndef CHIME_STORE_LEAD_H
#define CHIME_STORE_LEAD_H

#include <stdatomic.h>
#include <stdint.h>

#define CHIME__LEAD_MIN_NS UINT64_C(2000000)       /* 2 ms: the lead on a quick disk */
#define CHIME__LEAD_MAX_NS UINT64_C(50000000)      /* 50 ms: at most this long uncancellable */
#define CHIME__LEAD_PERIOD_NS UINT64_C(10000000000) /* 10 s: how long a slow commit counts, twice */

struct chime__lead {
    _Atomic uint64_t ns;     /* the lead now */
    uint64_t tick_ns;        /* added to the longest commit */
    uint64_t first;          /* CLOCK_MONOTONIC of the first commit timed (0: none yet); a period
                                after it, the lead is learned */
    uint64_t period_start;   /* CLOCK_MONOTONIC of the current period's start */
    uint64_t longest[2];     /* the longest commit of [0] this period, [1] the one before */
};

/* A lead for a runtime of this tick: CHIME__LEAD_MAX_NS until commits have been timed for a period. */
void chime__lead_init(struct chime__lead *l, uint64_t tick_ns);

/* A firing commit took commit_ns, ending at now_ns (CLOCK_MONOTONIC): update the lead. O(1). */
void chime__lead_note(struct chime__lead *l, uint64_t commit_ns, uint64_t now_ns);

/* The lead now. O(1). */
static inline uint64_t chime__lead_ns(const struct chime__lead *l)
{
    /* relaxed: a tuning value; any recent one is correct (a timer taken with an older lead is
     * taken a little earlier or later, never fired before its due time: fire.c checks that). */
    return atomic_load_explicit(&((struct chime__lead *)l)->ns, memory_order_relaxed);
}

#endif /* CHIME_STORE_LEAD_H */
