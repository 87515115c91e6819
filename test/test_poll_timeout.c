/* SPDX-License-Identifier: MIT */
/* docs/examples/poll_timeout.h: the event loop's poll() timeout, at the edges of int and uint64_t. */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <criterion/parameterized.h>
#include <limits.h>
#include <stdint.h>

#include "poll_timeout.h"

#define DAY_MS (24 * 60 * 60 * 1000ull)

struct case_ {
    uint64_t next, now;
    int want;
};

ParameterizedTestParameters(poll_timeout, is_the_wait_clamped_to_what_poll_takes)
{
    static struct case_ cases[] = {
        { 1000, 1000, 0 },                                      /* due now */
        { 999, 1000, 0 },                                       /* overdue */
        { 0, UINT64_MAX, 0 },                                   /* far overdue */
        { 1001, 1000, 1 },
        { 1000 + (uint64_t)INT_MAX, 1000, INT_MAX },                 /* the longest exact wait */
        { 1000 + (uint64_t)INT_MAX + 1, 1000, INT_MAX },        /* (int) would give INT_MIN */
        { 25 * DAY_MS, 0, INT_MAX },                            /* 25 days: (int) is negative */
        { 1000 + (1ull << 32) + 5, 1000, INT_MAX },             /* (int) would give 5 */
        { 30 * DAY_MS + 123456789, 123456789, INT_MAX },        /* the example's reminder */
        { UINT64_MAX, 0, INT_MAX },                             /* the end of time */
        { UINT64_MAX, UINT64_MAX - 7, 7 },
    };
    return cr_make_param_array(struct case_, cases, sizeof(cases) / sizeof(cases[0]));
}

ParameterizedTest(struct case_ *c, poll_timeout, is_the_wait_clamped_to_what_poll_takes)
{
    cr_assert(eq(int, poll_timeout_ms(c->next, c->now), c->want), "next %llu, now %llu",
              (unsigned long long)c->next, (unsigned long long)c->now);
}

Test(poll_timeout, is_never_negative_for_any_distance_in_powers_of_two)
{
    for (int bit = 0; bit < 64; bit++) {
        uint64_t d = 1ull << bit;
        int got = poll_timeout_ms(5 + d, 5);
        cr_assert(ge(int, got, 1), "distance 2^%d", bit);
        cr_assert(eq(int, got, d > INT_MAX ? INT_MAX : (int)d), "distance 2^%d", bit);
    }
}
