/* SPDX-License-Identifier: MIT */
/*
 * The runtime's clocks, in nanoseconds of CLOCK_MONOTONIC.
 *
 * Two questions need a clock, and they need opposite guarantees:
 *   - "Has this deadline come?" (the advancing thread, before it fires anything): the clock must
 *     never be AHEAD of CLOCK_MONOTONIC, or a timer fires early. It reads CLOCK_MONOTONIC itself
 *     (chime__clock_now).
 *   - "When is now + delay?" (a producer's schedule, schedule_every and reschedule): the clock must
 *     never be BEHIND CLOCK_MONOTONIC at the call, or the deadline, and so the firing, comes early.
 *     An upper bound of the time is enough (chime__clock_upper), and it can be had for less than a
 *     clock read.
 *
 * THE UPPER BOUND. Where CLOCK_MONOTONIC itself is computed from the TSC (the kernel's clocksource is
 * "tsc", which the kernel uses only when the TSC is invariant and synchronised across CPUs), each
 * thread keeps a base pair (tsc_b, ns_b), taken by reading the TSC and then CLOCK_MONOTONIC, and
 * estimates
 *     upper(tsc) = ns_b + (tsc - tsc_b) * rate_hi + SLACK.
 * Why it is never behind: the vDSO's clock read orders its own TSC read after ours (lfence), so
 * ns_b >= CLOCK_MONOTONIC at tsc_b. Between the base and now, CLOCK_MONOTONIC advances at the
 * kernel's rate for the TSC, which adjtimex can move by at most 10 % (ADJ_TICK) plus 500 ppm
 * (ADJ_FREQUENCY) from its nominal value; rate_hi is the rate measured at start-up times 5/4, above
 * anything those limits allow, measurement error included. SLACK (1 us) covers our unfenced TSC read
 * executing a few cycles before an earlier, fenced clock read of the caller's. The base is taken again
 * (one real clock read) when it is more than about 16 us old, which bounds how far the estimate runs
 * ahead: at most a quarter of 16 us plus SLACK, 5 us, added to a deadline that is rounded up to a tick
 * anyway; and when the TSC difference looks wrong in any way (a new thread, a resume, a TSC that went
 * back), since any difference out of range also takes the base again.
 * The TSC read costs less than a vDSO clock read (which reads the TSC too, behind a fence and a
 * sequence lock); perf/ measures both. Elsewhere (another clocksource, another architecture, a
 * calibration that could not measure cleanly) chime__clock_upper is CLOCK_MONOTONIC.
 */
#ifndef CHIME_RUNTIME_CLOCK_H
#define CHIME_RUNTIME_CLOCK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A clock in nanoseconds; the runtime's default is CLOCK_MONOTONIC. Tests inject their own. */
typedef uint64_t chime__clock_fn(void *arg);

/* CLOCK_MONOTONIC, read. */
uint64_t chime__clock_monotonic(void *unused);

/* Set up the upper-bound clock (once per process; later calls return at once). Takes about a
 * millisecond the first time (two samples of the TSC against CLOCK_MONOTONIC). */
void chime__clock_calibrate(void);

/* Whether chime__clock_upper uses the TSC (after chime__clock_calibrate). */
bool chime__clock_tsc(void);

/* The calibration, read-only once chime__clock_calibrate has returned. */
struct chime__tsc {
    uint64_t mult;          /* rate_hi: ns per TSC cycle, 32.32 fixed point; 0: no TSC */
    uint64_t rebase_cycles; /* a base older than this many cycles is taken again */
};
extern struct chime__tsc chime__tsc;

/* This thread's base pair. */
struct chime__tsc_base {
    uint64_t tsc, ns;
};
extern _Thread_local struct chime__tsc_base chime__tsc_base __attribute__((tls_model("initial-exec")));

#define CHIME__CLOCK_SLACK_NS 1000u

/* Take this thread's base again and return the clock's value: chime__clock_upper's slow half. */
uint64_t chime__clock_rebase(void);

static inline uint64_t chime__rdtsc(void)
{
#if defined(__x86_64__)
    return __builtin_ia32_rdtsc();
#else
    return 0; /* never used: chime__tsc.mult stays 0 */
#endif
}

/* An upper bound of CLOCK_MONOTONIC's value at the call, at most chime__clock_upper_excess() above
 * it. Any thread. */
static inline uint64_t chime__clock_upper(void)
{
    /* Without a TSC to trust (another clocksource: kvm-clock under many hypervisors), the clock
     * itself and nothing more: a TSC read there costs as much as half the clock read (11 ns against
     * 26 ns, measured on a kvm-clock VM), and the rebase would read it twice for nothing. */
    if (!chime__tsc.mult)
        return chime__clock_monotonic(NULL);
    uint64_t d = chime__rdtsc() - chime__tsc_base.tsc;
    if (__builtin_expect(d >= chime__tsc.rebase_cycles, 0))
        return chime__clock_rebase(); /* also a new thread (base 0) */
    return chime__tsc_base.ns + (d * chime__tsc.mult >> 32) + CHIME__CLOCK_SLACK_NS;
}

/* The bound above: how far chime__clock_upper may be ahead of CLOCK_MONOTONIC, in ns (tests). */
uint64_t chime__clock_upper_excess(void);

#endif /* CHIME_RUNTIME_CLOCK_H */
