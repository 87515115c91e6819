/* SPDX-License-Identifier: MIT */
/* The lead of firings before their due time (lead.h). */
#include "store/lead.h"

void chime__lead_init(struct chime__lead *l, uint64_t tick_ns)
{
    l->longest[0] = l->longest[1] = 0;
    l->tick_ns = tick_ns;
    l->period_start = l->first = 0;
    atomic_init(&l->ns, CHIME__LEAD_MAX_NS);
}

/* The least power of two of microseconds, in ns, at or above ns (at most 2^40 us: clamped later). */
static uint64_t round_up(uint64_t ns)
{
    uint64_t us = 1;
    while (us * 1000 < ns && us < (UINT64_C(1) << 40))
        us <<= 1;
    return us * 1000;
}

void chime__lead_note(struct chime__lead *l, uint64_t commit_ns, uint64_t now_ns)
{
    if (l->first == 0)
        l->first = now_ns ? now_ns : 1;
    if (l->period_start == 0 || now_ns - l->period_start >= 2 * CHIME__LEAD_PERIOD_NS) {
        l->longest[0] = l->longest[1] = 0; /* both periods are over: start afresh */
        l->period_start = now_ns;
    } else if (now_ns - l->period_start >= CHIME__LEAD_PERIOD_NS) {
        l->longest[1] = l->longest[0];
        l->longest[0] = 0;
        l->period_start += CHIME__LEAD_PERIOD_NS;
    }
    if (commit_ns > l->longest[0])
        l->longest[0] = commit_ns;
    int learned = now_ns - l->first >= CHIME__LEAD_PERIOD_NS; /* a whole period of commits timed */
    uint64_t longest = l->longest[0] > l->longest[1] ? l->longest[0] : l->longest[1];
    uint64_t lead = learned ? round_up(longest) + l->tick_ns : CHIME__LEAD_MAX_NS;
    lead = lead < CHIME__LEAD_MIN_NS ? CHIME__LEAD_MIN_NS : lead;
    lead = lead > CHIME__LEAD_MAX_NS ? CHIME__LEAD_MAX_NS : lead;
    /* relaxed: see chime__lead_ns */
    atomic_store_explicit(&l->ns, lead, memory_order_relaxed);
}
