/* SPDX-License-Identifier: MIT */
/* The runtime's counters: see stats.h. */
#include "runtime/stats.h"

void chime__stats_run(struct chime__stats *s, uint64_t late_ns)
{
    uint64_t us = late_ns / 1000;
    unsigned bucket = 0;
    while (us && bucket < CHIME_LATENESS_BUCKETS - 1) {
        us >>= 1;
        bucket++;
    }
    /* relaxed throughout: counters, read as a snapshot by chime__stats_read; none orders the count
     * of ends (fired is bumped by the caller with chime__stats_add). */
    atomic_fetch_add_explicit(&s->late_hist[bucket], 1, memory_order_relaxed);
    uint64_t max = atomic_load_explicit(&s->late_max, memory_order_relaxed);
    while (late_ns > max && !atomic_compare_exchange_weak_explicit(&s->late_max, &max, late_ns,
                                                                   memory_order_relaxed,
                                                                   memory_order_relaxed))
        ;
    atomic_fetch_add_explicit(&s->runs, 1, memory_order_relaxed);
}

void chime__stats_read(struct chime__stats *s, struct chime_stats *out)
{
    struct chime_stats st = { 0 };
    /* acquire: pairs with the release increments, so a timer counted as ended here was counted as
     * scheduled before; scheduled is read last and so is at least the sum of the ends. */
    st.fired = atomic_load_explicit(&s->fired, memory_order_acquire);
    st.unfired = atomic_load_explicit(&s->unfired, memory_order_acquire);
    st.cancelled = atomic_load_explicit(&s->cancelled, memory_order_acquire);
    st.scheduled = atomic_load_explicit(&s->scheduled, memory_order_acquire);
    uint64_t ended = st.fired + st.cancelled + st.unfired;
    st.pending = st.scheduled > ended ? st.scheduled - ended : 0;
    st.runs = atomic_load_explicit(&s->runs, memory_order_relaxed);
    st.late_max_ns = atomic_load_explicit(&s->late_max, memory_order_relaxed);
    for (unsigned b = 0; b < CHIME_LATENESS_BUCKETS; b++)
        st.late_hist[b] = atomic_load_explicit(&s->late_hist[b], memory_order_relaxed);
    *out = st;
}
