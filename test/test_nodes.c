/* SPDX-License-Identifier: MIT */
/* The wheel's nodes: ids, generations, growth by remapping, reset. */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>

#include "wheel/nodes.h"

static struct chime__nodes ns;

static void setup(void) { chime__nodes_init(&ns); }
static void teardown(void) { chime__nodes_destroy(&ns); }

TestSuite(nodes, .init = setup, .fini = teardown);

static void dummy(void *arg) { (void)arg; }

static uint32_t take(void)
{
    uint32_t idx;
    cr_assert(eq(int, chime__nodes_take(&ns, &idx), 0));
    ns.call[idx].fn = dummy;
    ns.v[idx].pos = 0; /* in use: placed */
    return idx;
}

Test(nodes, a_taken_node_is_found_by_its_id_and_only_by_it)
{
    uint32_t idx = take();
    chime_id id = chime__nodes_id(&ns, idx);
    cr_assert(ne(u64, id, 0));
    cr_assert(eq(u32, chime__nodes_find(&ns, id), idx));
    cr_assert(eq(u32, chime__nodes_find(&ns, id + (UINT64_C(1) << 32)), CHIME__NIL));
    cr_assert(eq(u32, chime__nodes_find(&ns, id ^ 1), CHIME__NIL), "a neighbour never handed out");
    cr_assert(eq(u32, chime__nodes_find(&ns, 0), CHIME__NIL));
}

Test(nodes, giving_back_kills_the_id_and_the_next_take_reuses_the_node)
{
    uint32_t idx = take();
    chime_id id = chime__nodes_id(&ns, idx);
    chime__nodes_give(&ns, idx);
    cr_assert(eq(u32, chime__nodes_find(&ns, id), CHIME__NIL));
    uint32_t again = take();
    cr_assert(eq(u32, again, idx));
    cr_assert(ne(u64, chime__nodes_id(&ns, again), id));
    cr_assert(eq(u32, chime__nodes_find(&ns, id), CHIME__NIL));
    cr_assert(chime__nodes_check(&ns) == NULL, "%s", chime__nodes_check(&ns));
}

/* A node given back at the last generation would come back at a wrapped one, where an id of its
 * first life matches again: it is retired instead, and its ids stay dead. */
Test(nodes, a_node_given_back_at_its_last_generation_is_retired_and_its_ids_stay_dead)
{
    uint32_t idx = take();
    ns.v[idx].gen = UINT32_MAX - 1;
    chime_id before_last = chime__nodes_id(&ns, idx);
    chime__nodes_give(&ns, idx);
    cr_assert(eq(u32, take(), idx), "LIFO: the same node, at the last generation");
    chime_id last = chime__nodes_id(&ns, idx);
    cr_assert(eq(u64, last >> 32, UINT32_MAX));
    chime__nodes_give(&ns, idx);
    cr_assert(eq(u32, ns.retired, 1));
    cr_assert(chime__nodes_check(&ns) == NULL, "%s", chime__nodes_check(&ns));
    for (int i = 0; i < 3; i++) {
        uint32_t other = take();
        cr_assert(ne(u32, other, idx), "a retired node was handed out again");
        chime__nodes_give(&ns, other);
    }
    cr_assert(eq(u32, chime__nodes_find(&ns, last), CHIME__NIL));
    cr_assert(eq(u32, chime__nodes_find(&ns, before_last), CHIME__NIL));
    cr_assert(eq(u32, chime__nodes_find(&ns, UINT64_C(1) << 32 | idx), CHIME__NIL));
    cr_assert(not(chime__nodes_reset(&ns)), "no generation above the last to start again at");
    cr_assert(chime__nodes_check(&ns) == NULL, "%s", chime__nodes_check(&ns));
}

Test(nodes, grows_by_remapping_and_finds_nothing_beyond_what_it_handed_out)
{
    enum { N = 100000 };
    chime_id first = chime__nodes_id(&ns, take());
    for (uint32_t i = 1; i < N; i++)
        take();
    cr_assert(eq(u32, ns.used, N));
    cr_assert(ge(sz, ns.cap, N));
    cr_assert(eq(u32, chime__nodes_find(&ns, first), 0), "ids survive the array moving");
    cr_assert(eq(u32, chime__nodes_find(&ns, UINT64_C(1) << 32 | N), CHIME__NIL));
    cr_assert(eq(u32, chime__nodes_find(&ns, UINT64_C(1) << 32 | UINT32_MAX), CHIME__NIL));
    cr_assert(chime__nodes_check(&ns) == NULL, "%s", chime__nodes_check(&ns));
}

Test(nodes, a_reset_happens_only_when_nothing_is_in_use_and_revives_no_id)
{
    uint32_t a = take(), b = take();
    chime_id ida = chime__nodes_id(&ns, a), idb = chime__nodes_id(&ns, b);
    chime__nodes_give(&ns, a);
    cr_assert(not(chime__nodes_reset(&ns)), "b is in use");
    chime__nodes_give(&ns, b);
    cr_assert(chime__nodes_reset(&ns));
    cr_assert(eq(u32, ns.top, 0));
    for (int i = 0; i < 2; i++)
        take(); /* indices 0 and 1 again */
    cr_assert(eq(u32, chime__nodes_find(&ns, ida), CHIME__NIL));
    cr_assert(eq(u32, chime__nodes_find(&ns, idb), CHIME__NIL));
    cr_assert(chime__nodes_check(&ns) == NULL, "%s", chime__nodes_check(&ns));
}

Test(nodes, periods_are_mapped_only_when_asked_for)
{
    cr_assert(ns.period == NULL);
    cr_assert(eq(int, chime__nodes_grow_periods(&ns, 5000), 0));
    cr_assert(ge(sz, ns.period_cap, 5001));
    ns.period[5000] = 7;
    cr_assert(eq(int, chime__nodes_grow_periods(&ns, 10), 0), "already room");
    cr_assert(eq(u64, ns.period[5000], 7));
}
