/* SPDX-License-Identifier: MIT */
/* A slot's array: append and growth, the compaction threshold, exact sizes. (Compaction itself
 * rewrites nodes' positions, so it is tested through the wheel: test_wheel.c.) */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>

#include <errno.h>

#include "alloc.h"
#include "wheel/slot.h"

static struct chime__slot s;

static void setup(void)
{
    s = (struct chime__slot){ 0 };
    chime__alloc_check_sizes(true); /* every free and realloc must name the block's real size */
}
static void teardown(void)
{
    chime__slot_release(&s);
    chime__alloc_check_sizes(false);
}

TestSuite(slot, .init = setup, .fini = teardown);

Test(slot, appends_in_order_and_quadruples_from_eight)
{
    for (uint32_t i = 0; i < 9; i++)
        cr_assert(eq(i64, chime__slot_append(&s, 100 + i), i));
    cr_assert(eq(u32, s.cap, 32));
    for (uint32_t i = 9; i < 33; i++)
        chime__slot_append(&s, 100 + i);
    cr_assert(eq(u32, s.cap, 128));
    for (uint32_t i = 0; i < 33; i++)
        cr_assert(eq(u32, s.v[i], 100 + i));
}

Test(slot, compaction_is_wanted_once_tombstones_are_twice_the_live_entries)
{
    for (uint32_t i = 0; i < 30; i++)
        chime__slot_append(&s, i);
    for (uint32_t i = 0; i < CHIME__SLOT_MIN_DEAD; i++) {
        s.v[i] = CHIME__DEAD;
        s.dead++;
    }
    cr_assert(not(chime__slot_wants_compaction(&s)), "8 of 30");
    for (uint32_t i = CHIME__SLOT_MIN_DEAD; i < 20; i++) {
        s.v[i] = CHIME__DEAD;
        s.dead++;
    }
    cr_assert(not(chime__slot_wants_compaction(&s)), "20 of 30: exactly twice the live ones");
    s.v[20] = CHIME__DEAD;
    s.dead++;
    cr_assert(chime__slot_wants_compaction(&s), "21 of 30");
}

Test(slot, a_few_tombstones_never_ask_for_compaction)
{
    chime__slot_append(&s, 1);
    for (uint32_t i = 0; i < CHIME__SLOT_MIN_DEAD; i++) {
        chime__slot_append(&s, CHIME__DEAD);
        s.dead++;
    }
    cr_assert(not(chime__slot_wants_compaction(&s)), "8 tombstones, 1 live");
}

Test(slot, a_cleared_slot_keeps_its_array_and_release_frees_it)
{
    for (uint32_t i = 0; i < 12; i++)
        chime__slot_append(&s, i);
    chime__slot_clear(&s);
    cr_assert(eq(u32, s.len, 0));
    cr_assert(eq(u32, s.cap, 32));
    cr_assert(eq(i64, chime__slot_append(&s, 5), 0), "reused without growing");
    chime__slot_release(&s);
    cr_assert(s.v == NULL);
    cr_assert(eq(u32, s.cap, 0));
}

Test(slot, a_failed_growth_leaves_the_slot_as_it_was)
{
    for (uint32_t i = 0; i < 8; i++)
        chime__slot_append(&s, i);
    chime__alloc_fail_after(0);
    cr_assert(eq(i64, chime__slot_append(&s, 99), -ENOMEM));
    chime__alloc_fail_after(-1);
    cr_assert(eq(u32, s.len, 8));
    cr_assert(eq(u32, s.cap, 8));
    cr_assert(eq(i64, chime__slot_append(&s, 99), 8));
}
