/* SPDX-License-Identifier: MIT */
/* The layouts in chime.h: chime_layout_*() name the same layouts as the CHIME_LAYOUT_* macros. */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <string.h>

#include "chime.h"

static void assert_same(const struct chime_wheel_config *macro, unsigned levels,
                        const uint32_t slots[CHIME_MAX_LEVELS])
{
    cr_assert(eq(uint, levels, macro->levels));
    for (unsigned i = 0; i < CHIME_MAX_LEVELS; i++)
        cr_assert(eq(u32, slots[i], macro->slots[i]), "slots[%u]", i);
}

Test(layout, milliseconds_function_gives_the_macros_layout)
{
    struct chime_wheel_config macro = { CHIME_LAYOUT_MILLISECONDS }, cfg;
    memset(&cfg, 0xa5, sizeof cfg); /* entries past the layout's levels must be overwritten */
    assert_same(&macro, chime_layout_milliseconds(cfg.slots), cfg.slots);
}

Test(layout, seconds_function_gives_the_macros_layout)
{
    struct chime_wheel_config macro = { CHIME_LAYOUT_SECONDS }, cfg;
    memset(&cfg, 0xa5, sizeof cfg);
    assert_same(&macro, chime_layout_seconds(cfg.slots), cfg.slots);
}

static void count(void *arg) { ++*(int *)arg; }

Test(layout, one_line_sets_a_wheel_that_runs_on_that_layout)
{
    struct chime_wheel_config cfg = { .start = 0 };
    cfg.levels = chime_layout_seconds(cfg.slots);
    chime_wheel *w;
    int fired = 0;
    cr_assert(eq(int, chime_wheel_new(&w, &cfg), 0));
    /* 511 days and 5 s, in seconds: the timer waits in the day level, so the next event is the
     * start of day 511 (the millisecond layout would put it in the hour level). */
    uint64_t deadline = 511ull * 86400 + 5, next;
    cr_assert(eq(int, chime_wheel_schedule(w, deadline, count, &fired, NULL), 0));
    cr_assert(eq(int, chime_wheel_next(w, &next), 0));
    cr_assert(eq(u64, next, 511ull * 86400));
    cr_assert(eq(sz, chime_wheel_advance(w, deadline - 1), 0));
    cr_assert(eq(sz, chime_wheel_advance(w, deadline), 1));
    cr_assert(eq(int, fired, 1));
    chime_wheel_free(w, NULL);
}
