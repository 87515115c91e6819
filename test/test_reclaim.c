/* SPDX-License-Identifier: MIT */
/*
 * The record pool's idle sweep (lib/runtime/reclaim.c) against producers that act in the middle of
 * one of its steps, at the points where a real producer thread could. To stop the sweep there, this
 * program compiles reclaim.c itself (the static archive's copy is then not linked: nothing else
 * needs it) with its calls of take_all() (records_impl.h: take a shard's whole free stack) going
 * through a hook; the hook plays those producers with the pool's real functions, on this thread,
 * so the interleaving is the same on every run. The test plays the advancing thread, as
 * test_records.c does. A plain TAP program (tap.h).
 */
#define _GNU_SOURCE /* as reclaim.c, which defines it too */
#include "runtime/records_impl.h"

static uint32_t hooked_take_all(struct chime__shard *s);
#define take_all(s) hooked_take_all(s)
#include "runtime/reclaim.c"
#undef take_all

#include <stdint.h>

#include "runtime/state.h"
#include "tap.h"

static struct chime__records r;

/* What the hook does at the next take_all: nothing, or play producers before or after it. */
static enum { QUIET, GROW_AFTER, EMPTY_BEFORE } script;
static uint32_t held[2 * CHIME__REC_CHUNK]; /* records the played producers took */
static uint32_t nheld;

/* A producer on shard s takes a record and fills it in (it is never queued here). */
static void producer_takes(unsigned s)
{
    uint32_t idx;
    uint64_t st;
    int got = chime__records_take(&r, s, &idx, &st);
    CHECK(got == 0 || got == 1, "take: %d", got);
    chime__state_taken(&chime__records_at(&r, idx)->state, st, s, false, false);
    CHECK((size_t)nheld < sizeof held / sizeof held[0], "too many taken");
    held[nheld++] = idx;
}

static uint32_t hooked_take_all(struct chime__shard *s)
{
    unsigned shard = (unsigned)(s - r.shard);
    if (script == EMPTY_BEFORE) {
        /* The stack was seen holding records; before the take, producers of that shard take them
         * all. */
        script = QUIET;
        /* acquire: as pop(). */
        while (HEAD_IDX(atomic_load_explicit(&s->head, memory_order_acquire)) != CHIME__REC_NIL)
            producer_takes(shard);
    }
    uint32_t top = take_all(s);
    if (script == GROW_AFTER) {
        /* The sweep holds the shard's stack: a producer of that shard finds it empty, and every
         * other one too, and grows the pool, which pushes a new chunk onto its stack. */
        script = EMPTY_BEFORE;
        producer_takes(shard);
    }
    return top;
}

/* The advancing thread takes record idx in and, later, gives it back (fired, say). */
static void known(uint32_t idx)
{
    chime__records_known(&r, idx);
}

static void give(uint32_t idx)
{
    struct chime__rec *rec = chime__records_at(&r, idx);
    uint64_t s = atomic_load(&rec->state);
    atomic_store(&rec->state, (s & ~CHIME__ST_LIFE) | CHIME__LIFE_DONE);
    chime__records_give(&r, idx);
}

static void check(void)
{
    const char *err = chime__records_check(&r);
    CHECK(err == NULL, "records_check: %s", err);
}

/*
 * A sweep step takes shard 0's stack and looks at its top records; meanwhile a producer grows the
 * pool onto that stack, and, after the step has seen the new chunk there but before it takes it off
 * to put the rest of the old stack back beneath it, producers take every record of that chunk. The
 * step must find the stack empty and put the rest back, not follow a "next" from nothing.
 */
static void a_sweep_puts_back_its_stack_when_producers_empty_it_under_its_hands(void)
{
    CHECK_EQ(chime__records_init(&r), 0);
    enum { N = 3 * CHIME__REC_CHUNK };
    static uint32_t idx[N];
    for (uint32_t i = 0; i < N; i++) {
        uint32_t x;
        uint64_t st;
        int got = chime__records_take(&r, 0, &x, &st);
        CHECK(got == 0 || got == 1, "take: %d", got);
        chime__state_taken(&chime__records_at(&r, x)->state, st, 0, false, false);
        known(x);
        idx[i] = x;
    }
    chime__records_balance(&r); /* producers are taking: records given back go to the stacks */
    for (uint32_t i = 0; i < N; i++)
        give(idx[i]);
    chime__records_flush(&r);
    for (int k = 0; k < 64; k++)
        chime__records_balance(&r); /* demand falls to 0, the watermark to the reserve: a sweep */
    check();

    script = GROW_AFTER;
    CHECK(chime__records_idle(&r), "the sweep did not start");
    CHECK(script == QUIET, "the step did not come back to shard 0's stack (script %d)", (int)script);
    CHECK_EQ(nheld, CHIME__REC_CHUNK);

    /* The taken records are applied and end; the pool must account for every record. */
    for (uint32_t i = 0; i < nheld; i++)
        known(held[i]);
    for (uint32_t i = 0; i < nheld; i++)
        give(held[i]);
    chime__records_flush(&r);
    for (int k = 0; k < 64; k++)
        chime__records_balance(&r);
    unsigned steps = 0;
    while (chime__records_idle(&r))
        CHECK(++steps < 1000000, "idle work does not end");
    check();
    CHECK_EQ(chime__records_live(&r), 0);
    CHECK_EQ(chime__records_taken(&r), 0); /* no record lost off every list */
    chime__records_destroy(&r);
}

int main(void)
{
    static const struct tap_test tests[] = {
        { "a sweep puts back its stack when producers empty it under its hands", a_sweep_puts_back_its_stack_when_producers_empty_it_under_its_hands },
    };
    return tap_run(tests, (int)(sizeof(tests) / sizeof(tests[0])));
}
