/* SPDX-License-Identifier: MIT */
/*
 * The runtime's protocol (lib/runtime/state.h): each transition from each state it can meet, as a
 * table, then the races the header names, run on real threads many times (TSan runs this): exactly
 * one of cancel and fire wins; a run withdrawn by cancel never starts; every record is queued by
 * exactly one of its pushers. A plain TAP program (tap.h).
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "runtime/state.h"
#include "tap.h"

#define GEN 7u
#define PENDING (chime__state_free(GEN, 3) | CHIME__LIFE_PENDING)
#define Q CHIME__ST_Q
#define R CHIME__ST_R
#define W CHIME__ST_W
#define KNOWN CHIME__ST_KNOWN
#define RUN CHIME__ST_RUN
#define P CHIME__ST_P
#define E CHIME__ST_E
#define PER CHIME__ST_PERIODIC
#define D CHIME__ST_D
#define LIFE(s, l) (((s) & ~CHIME__ST_LIFE) | (l))

static _Atomic uint64_t word;

static void set(uint64_t s)
{
    atomic_store(&word, s);
}

#define EXPECT_WORD(want)                                                                          \
    CHECK(atomic_load(&word) == (want), "state %#llx, want %#llx",                                \
          (unsigned long long)atomic_load(&word), (unsigned long long)(want))

static void fresh_makes_a_free_record_no_id_of_another_generation_matches(void)
{
    set(UINT64_MAX); /* whatever new memory held */
    chime__state_fresh(&word, GEN, 4);
    EXPECT_WORD(chime__state_free(GEN, 4));
    CHECK_EQ(chime__state_cancel(&word, GEN - 1), -ENOENT);
    CHECK_EQ(chime__state_cancel(&word, GEN), -ENOENT); /* FREE: not pending either */
    EXPECT_WORD(chime__state_free(GEN, 4));
}

static void taken_makes_a_free_record_pending_queued_and_placeable(void)
{
    chime__state_taken(&word, chime__state_free(GEN, 5), 2, false, false);
    EXPECT_WORD(chime__state_free(GEN, 2) | CHIME__LIFE_PENDING | Q | R);
    chime__state_taken(&word, chime__state_free(GEN, 5), 1, true, false);
    EXPECT_WORD(chime__state_free(GEN, 1) | CHIME__LIFE_PENDING | Q | R | PER);
    chime__state_taken(&word, chime__state_free(GEN, 5), 1, false, true); /* a delay */
    EXPECT_WORD(chime__state_free(GEN, 1) | CHIME__LIFE_PENDING | Q | R | D);
}

static void cancel_wins_only_over_a_pending_timer_of_its_generation(void)
{
    set(PENDING | KNOWN);
    CHECK_EQ(chime__state_cancel(&word, GEN), 1); /* Q was clear: the caller pushes */
    EXPECT_WORD(LIFE(PENDING, CHIME__LIFE_CANCELLED) | KNOWN | Q);
    set(PENDING | Q | R);
    CHECK_EQ(chime__state_cancel(&word, GEN), 0); /* already queued: nobody pushes twice */
    EXPECT_WORD(LIFE(PENDING, CHIME__LIFE_CANCELLED) | Q | R);
    set(PENDING | KNOWN | RUN | P | PER);
    CHECK_EQ(chime__state_cancel(&word, GEN), 1); /* a run handed out is withdrawn (P) */
    EXPECT_WORD(LIFE(PENDING, CHIME__LIFE_CANCELLED) | KNOWN | RUN | PER | Q);
    const uint64_t lose[] = { LIFE(PENDING, CHIME__LIFE_DONE), LIFE(PENDING, CHIME__LIFE_CANCELLED) | Q,
                              LIFE(PENDING, CHIME__LIFE_FREE), 0 };
    for (size_t i = 0; i < sizeof lose / sizeof lose[0]; i++) {
        set(lose[i]);
        CHECK_EQ(chime__state_cancel(&word, GEN), -ENOENT);
        EXPECT_WORD(lose[i]);
    }
    set(PENDING);
    CHECK_EQ(chime__state_cancel(&word, GEN + 1), -ENOENT); /* a stale or forged id */
    CHECK_EQ(chime__state_cancel(&word, 0), -ENOENT);
    EXPECT_WORD(PENDING);
}

static void reschedule_takes_the_write_bit_or_loses_to_its_holder(void)
{
    set(PENDING | KNOWN | RUN | P | PER);
    CHECK_EQ(chime__state_reschedule_begin(&word, GEN), CHIME__RESCHED_PUSH);
    EXPECT_WORD(PENDING | KNOWN | RUN | PER | W | R | Q);
    CHECK_EQ(chime__state_reschedule_begin(&word, GEN), CHIME__RESCHED_LOST);
    CHECK(!chime__state_reschedule_end(&word), "a PUSH writer's end asked for a second push");
    EXPECT_WORD(PENDING | KNOWN | RUN | PER | R | Q);
    CHECK_EQ(chime__state_reschedule_begin(&word, GEN), CHIME__RESCHED_WRITE); /* queued already */
    CHECK(!chime__state_reschedule_end(&word), "pushed while still queued");
    set(PENDING | KNOWN | D); /* a relative schedule's delay gives way to the absolute deadline */
    CHECK_EQ(chime__state_reschedule_begin(&word, GEN), CHIME__RESCHED_PUSH);
    EXPECT_WORD(PENDING | KNOWN | W | R | Q);
    set(LIFE(PENDING, CHIME__LIFE_CANCELLED) | Q);
    CHECK_EQ(chime__state_reschedule_begin(&word, GEN), -ENOENT);
    set(PENDING);
    CHECK_EQ(chime__state_reschedule_begin(&word, GEN - 1), -ENOENT);
}

static void apply_leaves_a_record_to_its_writer_and_takes_it_in_after(void)
{
    uint64_t old = 0;
    set(PENDING | Q | R | W);
    CHECK(!chime__state_apply(&word, &old), "applied while a reschedule writes");
    EXPECT_WORD(PENDING | R | W); /* out of the queue: the writer brings it back */
    CHECK(chime__state_reschedule_end(&word), "the writer was not told to push");
    EXPECT_WORD(PENDING | Q | R);
    set(PENDING | Q | R);
    CHECK(chime__state_apply(&word, &old), "apply refused");
    CHECK_EQ(old, PENDING | Q | R);
    EXPECT_WORD(PENDING | KNOWN);
}

static void fire_runs_drops_or_skips_by_the_state_it_finds(void)
{
    set(PENDING | KNOWN);
    CHECK_EQ(chime__state_fire(&word, false), CHIME__FIRE_RUN);
    EXPECT_WORD(LIFE(PENDING, CHIME__LIFE_DONE) | KNOWN);
    set(PENDING | KNOWN | PER);
    CHECK_EQ(chime__state_fire(&word, false), CHIME__FIRE_RUN);
    EXPECT_WORD(PENDING | KNOWN | PER | RUN | P); /* periodic: it stays pending */
    CHECK_EQ(chime__state_fire(&word, false), CHIME__FIRE_SKIP); /* the run is still out */
    set(PENDING | KNOWN | PER);
    CHECK_EQ(chime__state_fire(&word, true), CHIME__FIRE_RUN); /* its last firing ends it */
    EXPECT_WORD(LIFE(PENDING, CHIME__LIFE_DONE) | KNOWN | PER);
    set(PENDING | KNOWN | PER | RUN); /* its last boundary (the next passes 2^64) while a run is out */
    CHECK_EQ(chime__state_fire(&word, true), CHIME__FIRE_END);
    EXPECT_WORD(LIFE(PENDING, CHIME__LIFE_DONE) | KNOWN | PER | RUN); /* ended; the run goes on */
    CHECK(chime__state_finish_run(&word, false), "the ended timer's run end did not queue it");
    EXPECT_WORD(LIFE(PENDING, CHIME__LIFE_DONE) | KNOWN | PER | Q);
    const uint64_t drop[] = { PENDING | KNOWN | R | Q, PENDING | KNOWN | PER | RUN | E,
                              LIFE(PENDING, CHIME__LIFE_CANCELLED) | KNOWN | Q,
                              LIFE(PENDING, CHIME__LIFE_DONE) | KNOWN };
    for (size_t i = 0; i < sizeof drop / sizeof drop[0]; i++) {
        set(drop[i]);
        CHECK_EQ(chime__state_fire(&word, false), CHIME__FIRE_DROP);
        EXPECT_WORD(drop[i]);
    }
}

static void a_run_starts_only_if_not_withdrawn_and_its_end_queues_an_ended_timer(void)
{
    set(PENDING | KNOWN | PER | RUN | P);
    CHECK(chime__state_start_run(&word), "a run handed out did not start");
    EXPECT_WORD(PENDING | KNOWN | PER | RUN);
    CHECK(!chime__state_start_run(&word), "a run started twice");
    CHECK(!chime__state_finish_run(&word, false), "a pending timer's run end queued it");
    EXPECT_WORD(PENDING | KNOWN | PER);
    set(LIFE(PENDING, CHIME__LIFE_CANCELLED) | KNOWN | PER | RUN);
    CHECK(chime__state_finish_run(&word, true), "a cancelled timer's run end did not queue it");
    EXPECT_WORD(LIFE(PENDING, CHIME__LIFE_CANCELLED) | KNOWN | PER | Q); /* no R: given back */
    set(LIFE(PENDING, CHIME__LIFE_CANCELLED) | KNOWN | PER | RUN | Q);
    CHECK(!chime__state_finish_run(&word, false), "queued twice"); /* the cancel's push comes */
    set(PENDING | KNOWN | PER | RUN | E);
    CHECK(chime__state_finish_run(&word, false), "an ending timer's run end did not queue it");
    EXPECT_WORD(PENDING | KNOWN | PER | E | Q);
    /* A run a reschedule withdrew (P cleared, the timer pending): queued with R, so that apply
     * places it at its new deadline again, whose boundary RUN may have made fire skip. */
    set(PENDING | KNOWN | PER | RUN);
    CHECK(chime__state_finish_run(&word, true), "a withdrawn run's end did not queue its timer");
    EXPECT_WORD(PENDING | KNOWN | PER | Q | R);
    set(PENDING | KNOWN | PER | RUN | Q | R); /* the reschedule's own push is on its way */
    CHECK(!chime__state_finish_run(&word, true), "queued twice");
    EXPECT_WORD(PENDING | KNOWN | PER | Q | R);
}

static void stop_claims_pending_timers_and_marks_running_ones(void)
{
    set(PENDING | KNOWN | Q);
    CHECK_EQ(chime__state_claim(&word), PENDING | KNOWN | Q);
    EXPECT_WORD(LIFE(PENDING, CHIME__LIFE_DONE) | KNOWN | Q);
    CHECK_EQ(chime__state_claim(&word), 0);
    uint64_t running = PENDING | KNOWN | PER | RUN | P;
    set(running);
    CHECK(chime__state_end_on_drain(&word, running), "end_on_drain refused a running timer");
    EXPECT_WORD(PENDING | KNOWN | PER | RUN | E);
    set(PENDING | KNOWN | PER);
    CHECK(!chime__state_end_on_drain(&word, PENDING | KNOWN | PER), "end_on_drain on an idle timer");
    set(PENDING | KNOWN | PER | RUN);
    CHECK(!chime__state_end_on_drain(&word, running), "end_on_drain from a state it did not see");
}

static void requeue_and_freed_keep_the_queue_and_the_generations_right(void)
{
    set(PENDING | KNOWN);
    CHECK(chime__state_requeue(&word), "requeue did not ask for a push");
    CHECK(!chime__state_requeue(&word), "requeue asked for a second push");
    EXPECT_WORD(PENDING | KNOWN | Q | R);
    set(LIFE(PENDING, CHIME__LIFE_DONE) | KNOWN);
    uint64_t s = chime__state_freed(&word);
    CHECK_EQ(s, chime__state_free(GEN + 1, 3));
    EXPECT_WORD(s);
    /* At the last generation it stays there, free: wrapping would revive the record's first ids
     * (the pool retires it: test_records). */
    set(chime__state_free(UINT32_MAX, 3) | CHIME__LIFE_DONE);
    CHECK_EQ(chime__state_freed(&word), chime__state_free(UINT32_MAX, 3));
}

/* ---- races on real threads ---- */

/* Rounds of each race: each is a hand-over between two spinning threads, which valgrind, running one
 * thread at a time, makes slow; there a tenth of them still exercises every outcome. */
#define ROUNDS (RUNNING_ON_VALGRIND ? 2000u : 20000u)
static _Atomic uint32_t round_no, round_done;
static _Atomic int cancels_won;

/* A short wait that differs from round to round and between the two sides, so that each side goes
 * first in some rounds: without it the side that starts the round wins every time. */
static void stagger(uint32_t r, uint32_t mult)
{
    for (volatile uint32_t i = 0; i < (r * mult) % 61; i++)
        ;
}

static void *canceller(void *arg)
{
    (void)arg;
    for (uint32_t r = 1; r <= ROUNDS; r++) {
        while (atomic_load_explicit(&round_no, memory_order_acquire) != r)
            ;
        stagger(r, 7);
        if (chime__state_cancel(&word, GEN) >= 0)
            atomic_fetch_add_explicit(&cancels_won, 1, memory_order_relaxed);
        atomic_store_explicit(&round_done, r, memory_order_release);
    }
    return NULL;
}

static void exactly_one_of_cancel_and_fire_wins(void)
{
    atomic_store(&round_no, 0);
    atomic_store(&round_done, 0);
    atomic_store(&cancels_won, 0);
    pthread_t th;
    CHECK_EQ(pthread_create(&th, NULL, canceller, NULL), 0);
    int fires_won = 0;
    for (uint32_t r = 1; r <= ROUNDS; r++) {
        set(PENDING | KNOWN);
        atomic_store_explicit(&round_no, r, memory_order_release);
        stagger(r, 13);
        fires_won += chime__state_fire(&word, false) == CHIME__FIRE_RUN;
        while (atomic_load_explicit(&round_done, memory_order_acquire) != r)
            ;
        uint64_t life = chime__life(atomic_load(&word));
        CHECK(life == CHIME__LIFE_DONE || life == CHIME__LIFE_CANCELLED, "round %u: life %llu", r,
              (unsigned long long)life);
    }
    pthread_join(th, NULL);
    printf("# %d fires and %d cancels won\n", fires_won, atomic_load(&cancels_won));
    CHECK_EQ(fires_won + atomic_load(&cancels_won), ROUNDS);
}

static _Atomic int starts_won;

static void *starter(void *arg)
{
    (void)arg;
    for (uint32_t r = 1; r <= ROUNDS; r++) {
        while (atomic_load_explicit(&round_no, memory_order_acquire) != r)
            ;
        stagger(r, 7);
        if (chime__state_start_run(&word))
            atomic_fetch_add_explicit(&starts_won, 1, memory_order_relaxed);
        atomic_store_explicit(&round_done, r, memory_order_release);
    }
    return NULL;
}

static void a_run_and_a_cancel_racing_leave_a_cancelled_timer_and_no_run_to_come(void)
{
    atomic_store(&round_no, 0);
    atomic_store(&round_done, 0);
    atomic_store(&starts_won, 0);
    pthread_t th;
    CHECK_EQ(pthread_create(&th, NULL, starter, NULL), 0);
    for (uint32_t r = 1; r <= ROUNDS; r++) {
        set(PENDING | KNOWN | PER | RUN | P);
        atomic_store_explicit(&round_no, r, memory_order_release);
        stagger(r, 13);
        CHECK_EQ(chime__state_cancel(&word, GEN), 1); /* a periodic timer: cancel always wins */
        while (atomic_load_explicit(&round_done, memory_order_acquire) != r)
            ;
        /* Whichever cleared P first, P is clear: no start can follow, and the run (started or
         * withdrawn) still holds RUN until its end gives the record back. */
        EXPECT_WORD(LIFE(PENDING, CHIME__LIFE_CANCELLED) | KNOWN | PER | RUN | Q);
        CHECK(!chime__state_start_run(&word), "a run started after the race");
    }
    pthread_join(th, NULL);
    printf("# %d runs started before the cancel, %d withdrawn\n", atomic_load(&starts_won),
           ROUNDS - atomic_load(&starts_won));
}

int main(void)
{
    static const struct tap_test tests[] = {
        { "fresh makes a free record no id of another generation matches", fresh_makes_a_free_record_no_id_of_another_generation_matches },
        { "taken makes a free record pending, queued and placeable", taken_makes_a_free_record_pending_queued_and_placeable },
        { "cancel wins only over a pending timer of its generation", cancel_wins_only_over_a_pending_timer_of_its_generation },
        { "reschedule takes the write bit or loses to its holder", reschedule_takes_the_write_bit_or_loses_to_its_holder },
        { "apply leaves a record to its writer and takes it in after",
          apply_leaves_a_record_to_its_writer_and_takes_it_in_after },
        { "fire runs, drops or skips by the state it finds", fire_runs_drops_or_skips_by_the_state_it_finds },
        { "a run starts only if not withdrawn and its end queues an ended timer", a_run_starts_only_if_not_withdrawn_and_its_end_queues_an_ended_timer },
        { "stop claims pending timers and marks running ones", stop_claims_pending_timers_and_marks_running_ones },
        { "requeue and freed keep the queue and the generations right", requeue_and_freed_keep_the_queue_and_the_generations_right },
        { "exactly one of cancel and fire wins", exactly_one_of_cancel_and_fire_wins },
        { "a run and a cancel racing leave a cancelled timer and no run to come", a_run_and_a_cancel_racing_leave_a_cancelled_timer_and_no_run_to_come },
    };
    return tap_run(tests, (int)(sizeof(tests) / sizeof(tests[0])));
}
