/* SPDX-License-Identifier: MIT */
/* A small seeded generator for the randomised tests (splitmix64: one state word, good enough mixing). */
#ifndef CHIME_TEST_RNG_H
#define CHIME_TEST_RNG_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

struct rng {
    uint64_t state;
};

static inline uint64_t rng_next(struct rng *r)
{
    uint64_t z = (r->state += UINT64_C(0x9e3779b97f4a7c15));
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

/* Uniform in [0, n); n == 0 means the whole 64-bit range. The modulo bias is irrelevant here. */
static inline uint64_t rng_below(struct rng *r, uint64_t n)
{
    return n ? rng_next(r) % n : rng_next(r);
}

/* The seed: $CHIME_SEED if set, else one drawn from the clock; printed either way, so a failing run
 * can be repeated with CHIME_SEED=<printed value>. */
static inline uint64_t rng_seed(const char *what)
{
    const char *env = getenv("CHIME_SEED");
    uint64_t seed;
    if (env && *env) {
        seed = strtoull(env, NULL, 0);
    } else {
        struct timespec ts;
        timespec_get(&ts, TIME_UTC);
        seed = (uint64_t)ts.tv_sec * 1000000007u ^ (uint64_t)ts.tv_nsec;
    }
    fprintf(stderr, "%s: seed %llu (rerun with CHIME_SEED=%llu)\n", what, (unsigned long long)seed,
            (unsigned long long)seed);
    return seed;
}

#endif /* CHIME_TEST_RNG_H */
