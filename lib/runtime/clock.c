/* SPDX-License-Identifier: MIT */
/* The runtime's clocks: see clock.h. */
#define _GNU_SOURCE /* nothing beyond POSIX is used; kept for the cpuid header's inline asm */
#include "runtime/clock.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

#define REBASE_NS 16000u        /* a base older than this is taken again */
#define BRACKET_CYCLES 2000u    /* a calibration sample whose TSC reads lie further apart is retried */
#define CALIBRATE_NS 1000000u   /* between the two samples */

struct chime__tsc chime__tsc;
_Thread_local struct chime__tsc_base chime__tsc_base __attribute__((tls_model("initial-exec")));

uint64_t chime__clock_monotonic(void *unused)
{
    (void)unused;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t chime__clock_rebase(void)
{
    /* The TSC first, then the clock: the vDSO reads the TSC again behind a fence, after ours, so
     * the clock's value is at least CLOCK_MONOTONIC at our TSC reading (clock.h). The base is kept
     * only if the second TSC read shows the pair was taken close together (no preemption between),
     * which bounds how far an estimate from it can run ahead. */
    uint64_t tsc = chime__rdtsc();
    uint64_t ns = chime__clock_monotonic(NULL);
    if (chime__rdtsc() - tsc <= BRACKET_CYCLES)
        chime__tsc_base = (struct chime__tsc_base){ tsc, ns };
    return ns;
}

#if defined(__x86_64__)
/* The kernel computes CLOCK_MONOTONIC from the TSC. */
static bool clocksource_is_tsc(void)
{
    FILE *f = fopen("/sys/devices/system/clocksource/clocksource0/current_clocksource", "r");
    if (!f)
        return false;
    char name[32] = "";
    bool tsc = fgets(name, sizeof name, f) && strcmp(name, "tsc\n") == 0;
    fclose(f);
    return tsc;
}

/* The CPU says its TSC runs at a constant rate in every power state. */
static bool invariant_tsc(void)
{
    unsigned a, b, c, d;
    return __get_cpuid(0x80000007u, &a, &b, &c, &d) && (d >> 8 & 1);
}

/* A TSC reading and CLOCK_MONOTONIC's value at a point between two TSC reads no more than
 * BRACKET_CYCLES apart. Return: false if no clean sample came in a few tries (preemption). */
static bool sample(uint64_t *tsc, uint64_t *ns)
{
    for (int i = 0; i < 100; i++) {
        uint64_t a = chime__rdtsc();
        uint64_t n = chime__clock_monotonic(NULL);
        uint64_t b = chime__rdtsc();
        if (b - a <= BRACKET_CYCLES) {
            *tsc = a + (b - a) / 2;
            *ns = n;
            return true;
        }
    }
    return false;
}

static void calibrate(void)
{
    uint64_t t0, n0, t1, n1;
    if (!clocksource_is_tsc() || !invariant_tsc() || !sample(&t0, &n0))
        return;
    /* The whole gap, even when a signal cuts the sleep short: the error budget (clock.h) assumes
     * samples CALIBRATE_NS apart. */
    struct timespec gap = { 0, CALIBRATE_NS };
    while (nanosleep(&gap, &gap) != 0 && errno == EINTR) {
    }
    if (!sample(&t1, &n1) || t1 <= t0 || n1 <= n0)
        return;
    /* ns per cycle in 32.32, times 5/4 (clock.h: adjtimex's limits and the measurement's error). */
    __extension__ typedef unsigned __int128 u128; /* gcc and clang; __extension__ for -pedantic */
    uint64_t mult = (uint64_t)(((u128)(n1 - n0) << 32) / (t1 - t0));
    mult += mult / 4;
    uint64_t rebase = (uint64_t)(((u128)REBASE_NS << 32) / mult);
    if (mult == 0 || mult >> 40 || rebase == 0)
        return; /* below 1/256 GHz or above 256 GHz: not a TSC to trust */
    chime__tsc = (struct chime__tsc){ mult, rebase };
}
#else
static void calibrate(void)
{
}
#endif

void chime__clock_calibrate(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, calibrate);
}

bool chime__clock_tsc(void)
{
    return chime__tsc.mult != 0;
}

uint64_t chime__clock_upper_excess(void)
{
    /* With the kernel's rate as calibrated: a base's clock value is at most BRACKET_CYCLES late,
     * (rate_hi - rate) over a base's life is at most a fifth of REBASE_NS (rate_hi = 5/4 rate), then
     * the slack, and one for the fixed point's rounding. */
    if (!chime__tsc.mult)
        return 0;
    return (BRACKET_CYCLES * chime__tsc.mult >> 32) + REBASE_NS / 5 + CHIME__CLOCK_SLACK_NS + 1;
}
