/* SPDX-License-Identifier: MIT */
/*
 * The runtime's record pool (lib/runtime/records.h) on its own: take and give, ids that die when a
 * record is given back, shards that lend to each other, free records that gather chunk by chunk when
 * nobody takes them, memory given back in idle steps (sweep, release) and taken again, dry shards
 * refilled, close, and producers taking on several threads while one thread gives back (TSan runs
 * this). The test plays the advancing thread: it calls chime__records_balance once per "iteration",
 * as thread.c does. A plain TAP program (tap.h).
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "rng.h"
#include "runtime/records.h"
#include "runtime/records_impl.h" /* the chunk table: which chunks are held */
#include "runtime/state.h"
#include "tap.h"

static struct chime__records r;

static void check(void)
{
    const char *err = chime__records_check(&r);
    CHECK(err == NULL, "records_check: %s", err);
}

/* Take a record on shard s and make it live as a producer and then the advancing thread would. */
static uint32_t take_live(unsigned s, chime_id *id)
{
    uint32_t idx;
    uint64_t free_state;
    int got = chime__records_take(&r, s, &idx, &free_state);
    CHECK(got == 0 || got == 1, "take: %d", got);
    CHECK_EQ(chime__life(free_state), CHIME__LIFE_FREE);
    CHECK(chime__gen(free_state) != 0, "a record handed out with generation 0");
    chime__state_taken(&chime__records_at(&r, idx)->state, free_state, s, false, false);
    chime__records_known(&r, idx);
    if (id)
        *id = chime__records_id(free_state, idx);
    return idx;
}

/* Give a live record back as the advancing thread does once it ended. */
static void give(uint32_t idx)
{
    struct chime__rec *rec = chime__records_at(&r, idx);
    uint64_t s = atomic_load(&rec->state);
    atomic_store(&rec->state, (s & ~CHIME__ST_LIFE) | CHIME__LIFE_DONE); /* fired, say */
    chime__records_give(&r, idx);
}

/* Idle steps until there is nothing left to do; the number taken. */
static unsigned idle_until_done(void)
{
    unsigned steps = 0;
    chime__records_flush(&r);
    while (chime__records_idle(&r))
        CHECK(++steps < 1000000, "idle work does not end");
    return steps;
}

static bool id_is_live(chime_id id)
{
    struct chime__rec *rec = chime__records_find(&r, id);
    if (!rec)
        return false;
    uint64_t s = atomic_load(&rec->state);
    return chime__gen(s) == (uint32_t)(id >> 32) && chime__life(s) != CHIME__LIFE_FREE;
}

static void shuffle(uint32_t *v, uint32_t n, uint64_t seed)
{
    struct rng rng = { .state = seed };
    for (uint32_t i = n - 1; i > 0; i--) {
        uint32_t j = (uint32_t)rng_below(&rng, i + 1), t = v[i];
        v[i] = v[j];
        v[j] = t;
    }
}

static void a_taken_record_is_named_by_its_id_until_it_is_given_back(void)
{
    CHECK_EQ(chime__records_init(&r), 0);
    chime_id id;
    uint32_t idx = take_live(0, &id);
    chime__records_balance(&r); /* a producer is taking: records given back go to its stack */
    CHECK(id != 0, "id 0");
    CHECK(chime__records_find(&r, id) == chime__records_at(&r, idx), "find misses the record");
    CHECK(id_is_live(id), "the id does not name its record");
    give(idx);
    CHECK(!id_is_live(id), "the id still names the record after it was given back");
    chime__records_flush(&r);
    /* LIFO: the same record comes back, under a new generation. */
    chime_id again;
    CHECK_EQ(take_live(0, &again), idx);
    CHECK(again != id && (uint32_t)again == (uint32_t)id, "reused without a new generation");
    CHECK(!id_is_live(id), "the old id names the reused record");
    give(idx);
    chime__records_flush(&r);
    check();
    /* Ids beyond what was ever mapped are not found at all. */
    CHECK(chime__records_find(&r, (UINT64_C(1) << 32) | CHIME__REC_CHUNK) == NULL, "an unmapped index found");
    CHECK(chime__records_find(&r, UINT64_MAX) == NULL, "an unmapped index found");
    chime__records_destroy(&r);
}

/* Give record idx's state word generation gen, as 2^32 - 1 - gen reuses from the last would. */
static void set_generation(uint32_t idx, uint32_t gen)
{
    _Atomic uint64_t *st = &chime__records_at(&r, idx)->state;
    atomic_store(st, (atomic_load(st) & UINT32_MAX) | (uint64_t)gen << 32);
}

/* A record given back at the last generation would come back at a wrapped one, where an id of its
 * first life matches again: it is retired instead, and its ids stay dead. */
static void a_record_given_back_at_its_last_generation_is_retired_and_its_ids_stay_dead(void)
{
    CHECK_EQ(chime__records_init(&r), 0);
    uint32_t idx = take_live(0, NULL);
    chime__records_balance(&r); /* a producer is taking: records given back go to its stack */
    set_generation(idx, UINT32_MAX - 1);
    chime_id before_last = chime__records_id(atomic_load(&chime__records_at(&r, idx)->state), idx);
    give(idx);
    chime__records_flush(&r);
    chime_id last;
    CHECK_EQ(take_live(0, &last), idx); /* LIFO: the same record, at the last generation */
    CHECK_EQ(last >> 32, UINT32_MAX);
    give(idx);
    chime__records_flush(&r);
    CHECK_EQ(r.retired, 1);
    for (int i = 0; i < 3; i++) {
        uint32_t other = take_live(0, NULL);
        CHECK(other != idx, "a retired record was handed out again");
        give(other);
        chime__records_flush(&r);
    }
    CHECK(!id_is_live(last) && !id_is_live(before_last), "an id of the retired record is live");
    CHECK(!id_is_live(UINT64_C(1) << 32 | idx), "the first generation's id is live");
    check();
    chime__records_close(&r);
    CHECK_EQ(chime__records_taken(&r), 0); /* retired is not taken: a stop would wait for it */
    chime__records_destroy(&r);
}

static void every_record_taken_is_distinct_and_shards_lend_to_each_other(void)
{
    CHECK_EQ(chime__records_init(&r), 0);
    enum { N = 3 * CHIME__REC_CHUNK + 100 };
    static uint32_t idx[N];
    static uint8_t seen[4 * CHIME__REC_CHUNK];
    memset(seen, 0, sizeof seen);
    for (uint32_t i = 0; i < N; i++) {
        idx[i] = take_live(i % 2, NULL); /* two shards: each grows chunks, and borrows */
        CHECK(idx[i] < 4 * CHIME__REC_CHUNK && !seen[idx[i]]++, "record %u handed out twice", idx[i]);
    }
    /* Empty every stack: take on shard 0 until the pool grows (every stack was empty then), then
     * the rest of the new chunk, which growth put on shard 0. */
    size_t capacity = chime__records_capacity(&r);
    while (chime__records_capacity(&r) == capacity)
        take_live(0, NULL);
    for (uint32_t i = 1; i < CHIME__REC_CHUNK; i++)
        take_live(0, NULL);
    chime__records_balance(&r); /* producers are taking */
    check();
    /* Give the first N back to shard 1: shard 0 then borrows (hint 1) instead of growing. */
    for (uint32_t i = 0; i < N; i++) {
        struct chime__rec *rec = chime__records_at(&r, idx[i]);
        uint64_t s = atomic_load(&rec->state);
        atomic_store(&rec->state, (s & ~CHIME__ST_SHARD) | (uint64_t)1 << CHIME__ST_SHARD_SHIFT);
        give(idx[i]);
    }
    chime__records_flush(&r);
    check();
    capacity = chime__records_capacity(&r);
    uint32_t got_idx;
    uint64_t st;
    CHECK_EQ(chime__records_take(&r, 0, &got_idx, &st), 1);
    CHECK_EQ(chime__records_capacity(&r), capacity); /* borrowed, not grown */
    chime__records_destroy(&r);
}

/* Twelve chunks' worth of records, live, taken over every shard (the ids in ids_of_many): a fresh
 * pool, one balance after the takes (a producer's demand). */
enum { MANY = 12 * CHIME__REC_CHUNK };
static uint32_t many[MANY];
static chime_id ids_of_many[MANY];

static void take_many(void)
{
    CHECK_EQ(chime__records_init(&r), 0);
    for (uint32_t i = 0; i < MANY; i++)
        many[i] = take_live(i % CHIME__SHARDS, &ids_of_many[i]);
    chime__records_balance(&r);
}

/* After take_many's records ended: the pool grows again to as many, and no id of take_many's
 * names a record now. */
static void take_many_again(void)
{
    for (uint32_t i = 0; i < MANY; i++)
        take_live(i % CHIME__SHARDS, NULL);
    check();
    for (uint32_t i = 0; i < MANY; i++)
        CHECK(!id_is_live(ids_of_many[i]), "id %u names a record again after the pool grew", i);
}

static void memory_goes_back_in_idle_steps_and_old_ids_stay_dead(void)
{
    take_many();
    size_t peak = chime__records_capacity(&r);
    CHECK(peak >= MANY, "capacity %zu below %u", peak, MANY);
    /* Timers end in a shuffled order, an iteration per 1024: while the producers' demand lasts the
     * records go to the stacks (the sweep has work then), afterwards to their chunks' lists. */
    shuffle(many, MANY, 42);
    for (uint32_t i = 0; i < MANY; i++) {
        give(many[i]);
        if (i % 1024 == 1023)
            chime__records_balance(&r);
    }
    chime__records_balance(&r);
    check();
    unsigned steps = idle_until_done();
    check();
    size_t after = chime__records_capacity(&r);
    printf("# capacity %zu records at the peak, %zu after %u idle steps\n", peak, after, steps);
    CHECK(after <= (CHIME__REC_RESERVE + 1) * CHIME__REC_CHUNK, "%zu records still held", after);
    for (uint32_t i = 0; i < MANY; i++)
        CHECK(!id_is_live(ids_of_many[i]), "id %u lives after its record was released", i);
    take_many_again(); /* no old id comes back to life on the reused chunks */
    chime__records_destroy(&r);
}

/* A chunk one of whose records reached the last generation is not released: grown again, it would
 * start its records at generation 1, and the ids of their first life would name them again. */
static void a_chunk_at_the_last_generation_is_kept_and_no_first_id_comes_back(void)
{
    take_many();
    uint32_t top = many[MANY - 1]; /* a record of a chunk far above the watermark once all end */
    set_generation(top, UINT32_MAX - 1); /* freed, it reaches the last */
    for (uint32_t i = 0; i < MANY; i++)
        give(many[i]);
    for (int i = 0; i < 20; i++)
        chime__records_balance(&r); /* the demand halves at each: gone, the watermark falls */
    idle_until_done();
    check();
    uint32_t c = top >> CHIME__REC_CHUNK_SHIFT;
    CHECK(chunk_state(&r, c) == USED, "chunk %u, at the last generation, was released", c);
    size_t after = chime__records_capacity(&r);
    printf("# %zu records held after idle work (the reserve, and chunk %u)\n", after, c);
    take_many_again();
    chime__records_destroy(&r);
}

static void with_no_demand_records_gather_by_chunk_and_need_no_sweep(void)
{
    CHECK_EQ(chime__records_init(&r), 0);
    enum { N = 16 * CHIME__REC_CHUNK };
    static uint32_t idx[N];
    for (uint32_t i = 0; i < N; i++)
        idx[i] = take_live(0, NULL);
    chime__records_balance(&r);
    chime__records_balance(&r); /* no new records: the producers' demand is over */
    for (uint32_t k = 0; k < 64 && r.demand; k++)
        chime__records_balance(&r);
    CHECK_EQ(r.demand, 0);
    /* A burst firing: every record goes to its chunk's private list, none to a stack. */
    shuffle(idx, N, 7);
    for (uint32_t i = 0; i < N; i++) {
        give(idx[i]);
        if (i % 1024 == 1023)
            chime__records_balance(&r);
    }
    chime__records_flush(&r);
    CHECK_EQ(r.nprivate, N);
    check();
    unsigned steps = idle_until_done();
    size_t after = chime__records_capacity(&r);
    printf("# %u idle steps gave back %zu of %u records\n", steps, N - after, N);
    CHECK(after <= (CHIME__REC_RESERVE + 1) * CHIME__REC_CHUNK, "%zu records still held", after);
    /* Whole runs of chunks per step, and a sweep over empty stacks: a few dozen steps at most. */
    CHECK(steps <= 8 * CHIME__SHARDS + N / CHIME__REC_CHUNK, "%u idle steps for %u chunks", steps,
          N / CHIME__REC_CHUNK);
    check();
    chime__records_destroy(&r);
}

static void a_dry_shard_is_refilled_from_private_lists_before_the_pool_grows_much(void)
{
    CHECK_EQ(chime__records_init(&r), 0);
    enum { N = 8 * CHIME__REC_CHUNK };
    static uint32_t idx[N];
    for (uint32_t i = 0; i < N; i++)
        idx[i] = take_live(0, NULL);
    for (uint32_t i = 0; i < N; i++)
        give(idx[i]); /* no balance yet: no demand known, so all to private lists */
    chime__records_flush(&r);
    CHECK_EQ(r.nprivate, N);
    size_t before = chime__records_capacity(&r);
    /* Load comes back. The first take finds every stack empty: it grows the pool (a producer cannot
     * wait) and marks its shard dry; the next balance refills the shard from the private lists. */
    idx[0] = take_live(0, NULL);
    CHECK(atomic_load(&r.dry) & 1, "shard 0 not marked dry");
    chime__records_balance(&r);
    CHECK_EQ(atomic_load(&r.dry), 0);
    for (uint32_t i = 1; i < N; i++) {
        idx[i] = take_live(0, NULL);
        if (i % 1024 == 0)
            chime__records_balance(&r); /* the advancing thread's iterations */
    }
    check();
    CHECK(chime__records_capacity(&r) <= before + 2 * CHIME__REC_CHUNK,
          "capacity %zu: grew beyond the %zu records it held", chime__records_capacity(&r), before);
    chime__records_destroy(&r);
}

static void a_closed_pool_refuses_takes_and_counts_what_is_out(void)
{
    CHECK_EQ(chime__records_init(&r), 0);
    enum { N = 2 * CHIME__REC_CHUNK };
    static uint32_t idx[N];
    for (uint32_t i = 0; i < N; i++)
        idx[i] = take_live(i % 3, NULL);
    chime__records_balance(&r);
    for (uint32_t i = 0; i < N / 2; i++)
        give(idx[i]);
    /* A record taken and not yet known (a producer that has not pushed it yet) counts as taken. */
    uint32_t extra;
    uint64_t st;
    CHECK(chime__records_take(&r, 0, &extra, &st) >= 0, "take failed");
    chime__records_close(&r);
    CHECK_EQ(chime__records_take(&r, 0, &extra, &st), -ESHUTDOWN);
    CHECK_EQ(chime__records_take(&r, 5, &extra, &st), -ESHUTDOWN);
    chime__records_flush(&r);
    CHECK_EQ(chime__records_taken(&r), N - N / 2 + 1);
    CHECK(!chime__records_idle(&r), "idle work on a closed pool");
    chime__records_destroy(&r);
}

/* Producers take on several threads while this one gives back, balances and steps idle work. */
#define PRODUCERS 3
#define PER_PRODUCER 100000
static _Atomic uint32_t handed[PRODUCERS * PER_PRODUCER];
static _Atomic uint32_t handed_n;

static void *producer(void *arg)
{
    unsigned s = (unsigned)(uintptr_t)arg;
    for (uint32_t i = 0; i < PER_PRODUCER; i++) {
        uint32_t idx;
        uint64_t st;
        int got = chime__records_take(&r, s, &idx, &st);
        CHECK(got == 0 || got == 1, "take: %d", got);
        CHECK(chime__life(st) == CHIME__LIFE_FREE, "took a record that is not free");
        chime__state_taken(&chime__records_at(&r, idx)->state, st, s, false, false);
        /* release: the consumer below reads the state word the take wrote (as the queue would). */
        uint32_t at = atomic_fetch_add_explicit(&handed_n, 1, memory_order_relaxed);
        atomic_store_explicit(&handed[at], idx + 1, memory_order_release);
    }
    return NULL;
}

static void producers_take_while_the_owner_gives_back_and_trims(void)
{
    CHECK_EQ(chime__records_init(&r), 0);
    atomic_store(&handed_n, 0);
    for (size_t i = 0; i < PRODUCERS * PER_PRODUCER; i++)
        atomic_store(&handed[i], 0);
    pthread_t th[PRODUCERS];
    for (unsigned p = 0; p < PRODUCERS; p++)
        CHECK_EQ(pthread_create(&th[p], NULL, producer, (void *)(uintptr_t)p), 0);
    static uint8_t out[1u << 20]; /* records handed out and not given back */
    memset(out, 0, sizeof out);
    uint32_t next = 0, iter = 0;
    while (next < PRODUCERS * PER_PRODUCER) {
        /* acquire: pairs with the producer's release store. */
        uint32_t v = atomic_load_explicit(&handed[next], memory_order_acquire);
        if (!v) {
            chime__records_flush(&r);
            chime__records_balance(&r);
            chime__records_idle(&r); /* memory work while producers run */
            continue;
        }
        uint32_t idx = v - 1;
        CHECK(idx < sizeof out && !out[idx], "record %u handed out twice", idx);
        out[idx] = 1;
        chime__records_known(&r, idx);
        out[idx] = 0; /* before the give: a producer may take it again at once */
        give(idx);
        next++;
        if (++iter % 256 == 0)
            chime__records_balance(&r);
    }
    for (unsigned p = 0; p < PRODUCERS; p++)
        pthread_join(th[p], NULL);
    for (int k = 0; k < 64; k++)
        chime__records_balance(&r); /* the producers are gone: demand falls to 0 */
    idle_until_done();
    check();
    CHECK(chime__records_capacity(&r) <= (CHIME__REC_RESERVE + 1) * CHIME__REC_CHUNK,
          "capacity %zu after everything was given back", chime__records_capacity(&r));
    chime__records_destroy(&r);
}

int main(void)
{
    static const struct tap_test tests[] = {
        { "a taken record is named by its id until it is given back", a_taken_record_is_named_by_its_id_until_it_is_given_back },
        { "a record given back at its last generation is retired and its ids stay dead",
          a_record_given_back_at_its_last_generation_is_retired_and_its_ids_stay_dead },
        { "a chunk at the last generation is kept and no first id comes back",
          a_chunk_at_the_last_generation_is_kept_and_no_first_id_comes_back },
        { "every record taken is distinct and shards lend to each other", every_record_taken_is_distinct_and_shards_lend_to_each_other },
        { "memory goes back in idle steps and old ids stay dead", memory_goes_back_in_idle_steps_and_old_ids_stay_dead },
        { "with no demand records gather by chunk and need no sweep", with_no_demand_records_gather_by_chunk_and_need_no_sweep },
        { "a dry shard is refilled from private lists before the pool grows much", a_dry_shard_is_refilled_from_private_lists_before_the_pool_grows_much },
        { "a closed pool refuses takes and counts what is out", a_closed_pool_refuses_takes_and_counts_what_is_out },
        { "producers take while the owner gives back and trims", producers_take_while_the_owner_gives_back_and_trims },
    };
    return tap_run(tests, (int)(sizeof(tests) / sizeof(tests[0])));
}
