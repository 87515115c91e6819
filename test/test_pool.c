/* The node pool: ids, generations, growth across chunks. */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>

#include "wheel/pool.h"

static struct chime__pool p;

static void setup(void) { chime__pool_init(&p); }
static void teardown(void) { chime__pool_destroy(&p); }

TestSuite(pool, .init = setup, .fini = teardown);

static uint32_t take(void)
{
    uint32_t idx;
    cr_assert(eq(int, chime__pool_take(&p, &idx), 0));
    chime__pool_at(&p, idx)->where = CHIME__WHERE_DUE; /* in use: any list */
    return idx;
}

Test(pool, a_taken_node_is_found_by_its_id_and_only_by_it)
{
    uint32_t idx = take();
    chime_id id = chime__pool_id(&p, idx);
    cr_assert(ne(u64, id, 0));
    cr_assert(eq(u32, chime__pool_find(&p, id), idx));
    cr_assert(eq(u32, chime__pool_find(&p, id + (UINT64_C(1) << 32)), CHIME__NIL));
    cr_assert(eq(u32, chime__pool_find(&p, id ^ 1), CHIME__NIL)); /* a free neighbour */
    cr_assert(eq(u32, chime__pool_find(&p, 0), CHIME__NIL));
}

Test(pool, giving_back_kills_the_id_and_the_next_take_reuses_the_node)
{
    uint32_t idx = take();
    chime_id id = chime__pool_id(&p, idx);
    chime__pool_give(&p, idx);
    cr_assert(eq(u32, chime__pool_find(&p, id), CHIME__NIL));
    uint32_t again = take();
    cr_assert(eq(u32, again, idx));
    cr_assert(ne(u64, chime__pool_id(&p, again), id));
    cr_assert(eq(u32, chime__pool_find(&p, id), CHIME__NIL));
}

Test(pool, generation_skips_zero_when_it_wraps)
{
    uint32_t idx = take();
    chime__pool_at(&p, idx)->gen = UINT32_MAX;
    chime__pool_give(&p, idx);
    take();
    cr_assert(eq(u32, chime__pool_at(&p, idx)->gen, 1));
    cr_assert(ne(u64, chime__pool_id(&p, idx), 0));
}

Test(pool, grows_across_chunks_and_finds_nothing_beyond_its_capacity)
{
    for (uint32_t i = 0; i < 3 * CHIME__CHUNK_NODES + 1; i++)
        take();
    cr_assert(eq(u32, p.used, 3 * CHIME__CHUNK_NODES + 1));
    cr_assert(eq(sz, chime__pool_capacity(&p), 4 * CHIME__CHUNK_NODES));
    cr_assert(eq(u32, chime__pool_find(&p, UINT64_C(1) << 32 | (4 * CHIME__CHUNK_NODES)), CHIME__NIL));
    cr_assert(eq(u32, chime__pool_find(&p, UINT64_C(1) << 32 | UINT32_MAX), CHIME__NIL));
}
