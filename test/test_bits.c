/* SPDX-License-Identifier: MIT */
/* The bit operations of lib/bits.h against plain arithmetic: edge cases, then random values. */
#include <stdint.h>

#include "bits.h"
#include "rng.h"
#include "tap.h"

static void ctz_finds_the_lowest_set_bit(void)
{
    for (unsigned i = 0; i < 64; i++) {
        CHECK_EQ(chime__ctz64(UINT64_C(1) << i), i);
        CHECK_EQ(chime__ctz64(UINT64_MAX << i), i);
    }
    for (unsigned i = 0; i < 32; i++) {
        CHECK_EQ(chime__ctz32(UINT32_C(1) << i), i);
        CHECK_EQ(chime__ctz32(UINT32_MAX << i), i);
    }
}

static void check_div(uint64_t x, uint64_t d)
{
    uint64_t inv = chime__div_inv(d);
    uint64_t q = chime__div(x, d, inv), up = chime__div_up(x, d, inv);
    CHECK(q == x / d, "%llu / %llu: got %llu", (unsigned long long)x, (unsigned long long)d,
          (unsigned long long)q);
    CHECK(up == x / d + (x % d != 0), "%llu / %llu rounded up: got %llu", (unsigned long long)x,
          (unsigned long long)d, (unsigned long long)up);
}

static void division_by_a_reciprocal_is_exact_at_the_edges(void)
{
    const uint64_t d[] = { 1, 2, 3, 7, 1000, 1000000, 999999937, UINT64_C(1) << 32,
                           (UINT64_C(1) << 32) + 1, UINT64_C(3600) * 1000000000u, UINT64_MAX / 3,
                           UINT64_MAX - 1, UINT64_MAX };
    for (size_t i = 0; i < sizeof d / sizeof d[0]; i++) {
        const uint64_t x[] = { 0, 1, d[i] - 1, d[i], d[i] + 1, 2 * d[i] - 1, 2 * d[i],
                               UINT64_MAX - 1, UINT64_MAX, UINT64_MAX / d[i] * d[i],
                               UINT64_MAX / d[i] * d[i] - 1 };
        for (size_t j = 0; j < sizeof x / sizeof x[0]; j++)
            check_div(x[j], d[i]);
    }
}

static void division_by_a_reciprocal_is_exact_for_random_values(void)
{
    struct rng rng = { .state = rng_seed("bits") };
    for (int i = 0; i < 1000000; i++) {
        uint64_t d = rng_next(&rng) >> rng_below(&rng, 64);
        uint64_t x = rng_next(&rng) >> rng_below(&rng, 64);
        check_div(x, d ? d : 1);
    }
}

int main(void)
{
    static const struct tap_test tests[] = {
        { "ctz finds the lowest set bit", ctz_finds_the_lowest_set_bit },
        { "division by a reciprocal is exact at the edges", division_by_a_reciprocal_is_exact_at_the_edges },
        { "division by a reciprocal is exact for random values", division_by_a_reciprocal_is_exact_for_random_values },
    };
    return tap_run(tests, (int)(sizeof(tests) / sizeof(tests[0])));
}
