/* SPDX-License-Identifier: MIT */
/*
 * The runtime's clocks (lib/runtime/clock.h): the upper bound a producer's deadline starts from is
 * never behind CLOCK_MONOTONIC read before it, and never further ahead of CLOCK_MONOTONIC read after
 * it than the bound the header states, on several threads at once. These are properties of the values,
 * not timings: they hold however slowly the test runs. A plain TAP program (tap.h).
 */
#include <pthread.h>
#include <stdint.h>

#include "runtime/clock.h"
#include "tap.h"

#define ROUNDS 2000000
#define THREADS 3
/* Under valgrind (which runs one thread at a time, each read about 150 times slower) 2*10^6 rounds
 * took 54 s of CI's valgrind stage: memcheck checks the same reads in far fewer. */
#define ROUNDS_VALGRIND 20000

static void *reader(void *arg)
{
    uint64_t *worst_ahead = arg;
    int rounds = RUNNING_ON_VALGRIND ? ROUNDS_VALGRIND : ROUNDS;
    for (int i = 0; i < rounds; i++) {
        uint64_t before = chime__clock_monotonic(NULL);
        uint64_t upper = chime__clock_upper();
        uint64_t after = chime__clock_monotonic(NULL);
        CHECK(upper >= before, "upper %llu behind a clock read before it (%llu): a deadline would be early",
              (unsigned long long)upper, (unsigned long long)before);
        CHECK(upper <= after + chime__clock_upper_excess(), "upper %llu ahead of %llu by more than %llu",
              (unsigned long long)upper, (unsigned long long)after,
              (unsigned long long)chime__clock_upper_excess());
        if (upper > after && upper - after > *worst_ahead)
            *worst_ahead = upper - after;
    }
    return NULL;
}

static void the_upper_bound_is_never_behind_the_clock_nor_far_ahead(void)
{
    chime__clock_calibrate();
    chime__clock_calibrate(); /* once per process: the second call does nothing */
    printf("# upper bound from the %s, at most %llu ns ahead\n", chime__clock_tsc() ? "TSC" : "clock itself",
           (unsigned long long)chime__clock_upper_excess());
    pthread_t th[THREADS];
    uint64_t worst[THREADS] = { 0 };
    for (int i = 0; i < THREADS; i++)
        CHECK_EQ(pthread_create(&th[i], NULL, reader, &worst[i]), 0);
    for (int i = 0; i < THREADS; i++) {
        pthread_join(th[i], NULL);
        printf("# thread %d: at most %llu ns ahead of a read after it\n", i, (unsigned long long)worst[i]);
    }
}

int main(void)
{
    static const struct tap_test tests[] = {
        { "the upper bound is never behind the clock nor far ahead", the_upper_bound_is_never_behind_the_clock_nor_far_ahead },
    };
    return tap_run(tests, (int)(sizeof(tests) / sizeof(tests[0])));
}
