/* SPDX-License-Identifier: MIT */
/*
 * The runtime's producer side (lib/runtime/producer.c) against its advancing thread, in interleavings
 * the public API cannot hold still: the test takes the part of a producer preempted between two of
 * its steps by making those steps itself (state.h's transitions, timer.h's push), and before it goes
 * on it waits until the advancing thread is asleep on its futex, which it reads from
 * /proc/self/task/<tid>/syscall (skipped where that file is missing). The clock is injected
 * (runtime.h): nothing depends on how fast anything runs. A plain TAP program (tap.h).
 */
#define _GNU_SOURCE /* syscall(SYS_gettid) */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "chime.h"
#include "runtime/runtime.h"
#include "runtime/timer.h"
#include "runtime_util.h"
#include "tap.h"

#define MS UINT64_C(1000000)
#define HOUR (UINT64_C(3600) * 1000 * MS)

static _Atomic long thread_tid; /* the advancing thread's, noted by a callback */
static void note_tid(void *arg)
{
    (void)arg;
    atomic_store(&thread_tid, (long)syscall(SYS_gettid));
}

static _Atomic int fired;
static _Atomic uint64_t fired_at;
static void fire(void *arg)
{
    (void)arg;
    atomic_fetch_add(&fired, 1);
    atomic_store(&fired_at, fake_clock(NULL));
}

/* Is thread tid blocked in futex() on word? Return: 1 yes, 0 not (yet), -1 no way to tell here. */
static int blocked_on(long tid, const void *word)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/self/task/%ld/syscall", tid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    long nr = -1;
    uintptr_t arg0 = 0;
    int n = fscanf(f, "%ld 0x%" SCNxPTR, &nr, &arg0);
    fclose(f);
    return n == 2 && nr == SYS_futex && arg0 == (uintptr_t)word;
}

/* Wait (a condition, polled) until the advancing thread sleeps on its futex; its sleep_until then. */
static uint64_t wait_asleep(chime_timer *t)
{
    long tid = atomic_load(&thread_tid);
    int b;
    while ((b = blocked_on(tid, &t->sleeper.wake_seq)) == 0)
        sched_yield();
    CHECK(b == 1, "cannot read /proc/self/task/%ld/syscall", tid);
    return atomic_load(&t->sleeper.sleep_until);
}

/*
 * Producer A reschedules a timer and finds it unqueued (it will push it); before A pushes, producer B
 * reschedules the same timer earlier, finds it queued (Q is A's) and so only wakes the advancing
 * thread, which finds nothing queued yet and goes back to sleep until the timer's old deadline. B's
 * deadline now reaches the thread only through A's push: A must wake it for that deadline, not for
 * its own later one, or the timer fires an hour late (or, with a timer parked far away, never).
 */
static void a_reschedule_that_finds_the_timer_queued_is_woken_for_by_the_push(void)
{
    chime_timer *t = start(NULL, 0);
    CHECK_EQ(chime_timer_schedule_at(t, 0, note_tid, NULL, NULL), 0);
    chime__timer_sync(t);
    CHECK(atomic_load(&thread_tid) > 0, "the callback did not note the thread");
    if (blocked_on(atomic_load(&thread_tid), &t->sleeper.wake_seq) < 0) {
        printf("# skipped: no /proc/self/task/<tid>/syscall here\n");
        chime_timer_free(t);
        return;
    }

    chime_id id;
    CHECK_EQ(chime_timer_schedule_at(t, HOUR, fire, NULL, &id), 0);
    chime__timer_sync(t);
    uint64_t asleep_until = wait_asleep(t);
    CHECK(asleep_until > 1 * MS, "asleep until %" PRIu64, asleep_until);

    /* A: chime_timer_reschedule(t, id, 2 hours) up to its push. */
    struct chime__rec *rec = chime__records_find(&t->recs, id);
    CHECK(rec != NULL, "no record for the id");
    CHECK_EQ(chime__state_reschedule_begin(&rec->state, (uint32_t)(id >> 32)), CHIME__RESCHED_PUSH);
    atomic_store_explicit(&rec->deadline_ns, 2 * HOUR, memory_order_relaxed);
    chime__state_reschedule_end(&rec->state);

    /* B: the whole call; its deadline is the one that stands. */
    CHECK_EQ(chime_timer_reschedule(t, id, 1 * MS), 0);
    chime__timer_sync(t); /* the thread has taken B's wake-up, found nothing queued... */
    asleep_until = wait_asleep(t); /* ...and sleeps again, until the timer's old deadline */
    CHECK(asleep_until > 1 * MS, "asleep until %" PRIu64, asleep_until);

    /* A's push, as producer.c makes it. */
    chime__timer_push(t, (uint32_t)id, 2 * HOUR);
    CHECK(atomic_load(&t->sleeper.sleep_until) != asleep_until,
          "the push left the thread asleep until %" PRIu64 " with a timer due at 1 ms queued",
          asleep_until);

    atomic_store(&fake_now, 1 * MS);
    chime__timer_sync(t);
    CHECK_EQ(atomic_load(&fired), 1);
    CHECK_EQ(atomic_load(&fired_at), 1 * MS);
    atomic_store(&fake_now, 3 * HOUR);
    chime__timer_sync(t);
    CHECK_EQ(atomic_load(&fired), 1);
    CHECK_EQ(chime_timer_stop(t, CHIME_STOP_NOW, NULL), 0);
    struct chime_stats st;
    chime_timer_stats(t, &st);
    CHECK_EQ(st.scheduled, 2);
    CHECK_EQ(st.fired, 2);
    CHECK_EQ(st.pending, 0);
    chime_timer_free(t);
}

/*
 * Producer B reschedules a timer that producer A has queued (B finds Q set: WRITE) and is preempted
 * holding W, before it writes its deadline. The advancing thread pops the record, finds W, leaves
 * the record out of the queue for B to bring back, and goes back to sleep. Found in review: it
 * pushed the record again and popped it again, 1024 times per iteration, never sleeping while W was
 * held (a whole CPU for as long as B was preempted); here that hangs the first wait below.
 */
static void a_reschedule_preempted_holding_w_does_not_make_the_thread_spin(void)
{
    chime_timer *t = start(NULL, 0);
    CHECK_EQ(chime_timer_schedule_at(t, 0, note_tid, NULL, NULL), 0);
    chime__timer_sync(t);
    if (blocked_on(atomic_load(&thread_tid), &t->sleeper.wake_seq) < 0) {
        printf("# skipped: no /proc/self/task/<tid>/syscall here\n");
        chime_timer_free(t);
        return;
    }
    atomic_store(&fired, 0);
    chime_id id;
    CHECK_EQ(chime_timer_schedule_at(t, HOUR, fire, NULL, &id), 0);
    chime__timer_sync(t);
    wait_asleep(t);
    struct chime__rec *rec = chime__records_find(&t->recs, id);
    CHECK(rec != NULL, "no record for the id");
    /* A: a whole reschedule up to its push. */
    CHECK_EQ(chime__state_reschedule_begin(&rec->state, (uint32_t)(id >> 32)), CHIME__RESCHED_PUSH);
    atomic_store_explicit(&rec->deadline_ns, 2 * HOUR, memory_order_relaxed);
    chime__state_reschedule_end(&rec->state);
    /* B: begins (Q is A's) and is preempted holding W. */
    CHECK_EQ(chime__state_reschedule_begin(&rec->state, (uint32_t)(id >> 32)),
             CHIME__RESCHED_WRITE);
    /* A pushes. */
    chime__timer_push(t, (uint32_t)id, 2 * HOUR);
    chime__timer_poke(t); /* anything wakes the thread meanwhile: another producer's timer */

    while (atomic_load(&rec->state) & CHIME__ST_Q)
        sched_yield(); /* a poll: the thread pops the record and leaves it to B */
    wait_asleep(t); /* and sleeps, while B is still preempted */

    /* B goes on: writes its deadline and ends, as producer.c does for WRITE. */
    atomic_store_explicit(&rec->deadline_ns, 1 * MS, memory_order_relaxed);
    if (chime__state_reschedule_end(&rec->state))
        chime__timer_push(t, (uint32_t)id, 1 * MS);
    else
        chime__timer_wake_before(t, 1 * MS);
    chime__timer_sync(t);
    atomic_store(&fake_now, 1 * MS);
    chime__timer_sync(t);
    CHECK_EQ(atomic_load(&fired), 1);
    CHECK_EQ(atomic_load(&fired_at), 1 * MS);
    CHECK_EQ(chime_timer_stop(t, CHIME_STOP_NOW, NULL), 0);
    const char *err = chime__timer_check(t);
    CHECK(err == NULL, "%s", err ? err : "");
    chime_timer_free(t);
}

/*
 * With the thread leaving a record its writer holds out of the queue (the fix above), a timer can
 * be cancelled while a reschedule holds W and have no Q when a NOW stop sweeps: it must still count
 * as cancelled, once (its writer's push comes after the thread has gone).
 */
static void a_timer_cancelled_while_a_reschedule_holds_w_counts_once_at_stop(void)
{
    chime_timer *t = start(NULL, 0);
    chime_id id;
    CHECK_EQ(chime_timer_schedule_at(t, HOUR, fire, NULL, &id), 0);
    chime__timer_sync(t);
    struct chime__rec *rec = chime__records_find(&t->recs, id);
    CHECK(rec != NULL, "no record for the id");
    uint32_t gen = (uint32_t)(id >> 32);
    CHECK_EQ(chime__state_reschedule_begin(&rec->state, gen), CHIME__RESCHED_PUSH); /* A */
    atomic_store_explicit(&rec->deadline_ns, 2 * HOUR, memory_order_relaxed);
    chime__state_reschedule_end(&rec->state);
    CHECK_EQ(chime__state_reschedule_begin(&rec->state, gen), CHIME__RESCHED_WRITE); /* B */
    chime__timer_push(t, (uint32_t)id, 2 * HOUR); /* A's push */
    chime__timer_sync(t);
    CHECK_EQ(chime_timer_cancel(t, id), 0);
    chime__timer_sync(t);
    CHECK_EQ(chime_timer_stop(t, CHIME_STOP_NOW, NULL), 0);
    struct chime_stats st;
    chime_timer_stats(t, &st);
    CHECK_EQ(st.scheduled, 1);
    CHECK_EQ(st.cancelled, 1);
    CHECK_EQ(st.pending, 0);
    /* B ends; its push finds the thread gone. */
    if (chime__state_reschedule_end(&rec->state))
        chime__timer_push(t, (uint32_t)id, 2 * HOUR);
    chime_timer_free(t);
}

/* A worker blocked in a callback until released; and a worker stopped inside finish_run, between
 * its CAS and its push (chime__timer_finish_run_hook), until released. */
static _Atomic int busy, busy_release, finish_armed, finishing, finish_release;

static void busy_callback(void *arg)
{
    (void)arg;
    atomic_store(&busy, 1);
    while (!atomic_load(&busy_release))
        sched_yield();
}

/* The advancing thread's tid, when callbacks run on workers: the task asleep on its futex word
 * (a poll until it is). */
static long find_sleeper(chime_timer *t)
{
    for (;;) {
        DIR *d = opendir("/proc/self/task");
        CHECK(d != NULL, "opendir /proc/self/task");
        long found = 0;
        for (struct dirent *e; (e = readdir(d));)
            if (e->d_name[0] != '.' && blocked_on(atol(e->d_name), &t->sleeper.wake_seq) == 1)
                found = atol(e->d_name);
        closedir(d);
        if (found)
            return found;
        sched_yield();
    }
}

static void hold_finish_run(void)
{
    if (!atomic_load(&finish_armed))
        return;
    atomic_store(&finishing, 1);
    while (!atomic_load(&finish_release))
        sched_yield();
}

/*
 * A periodic timer's run waits for the only worker, which is busy. B reschedules the timer (the
 * run is withdrawn; B pushes); A begins a reschedule and is preempted holding W; the thread pops
 * B's push, finds W and leaves the record. The worker takes the withdrawn run: finish_run sets Q
 * (it was clear) and is stopped before its push. A writes 20 ms and ends: it finds Q set, so it
 * only wakes the thread, which finds nothing queued and sleeps. Then the worker pushes: that push
 * must wake the thread for A's deadline. Found in review: it was a bare requeue, and the thread
 * slept on until the old boundary, an hour (here the check after the worker's push fails).
 */
static void a_withdrawn_runs_push_wakes_the_thread_for_a_writers_deadline(void)
{
    atomic_store(&busy, 0);
    atomic_store(&busy_release, 0);
    atomic_store(&finishing, 0);
    atomic_store(&finish_release, 0);
    atomic_store(&finish_armed, 1);
    atomic_store(&fired, 0);
    atomic_store(&fired_at, 0);
    struct chime_timer_config cfg = { .workers = 1 };
    chime_timer *t = start(&cfg, 0);
    CHECK_EQ(chime_timer_schedule_at(t, 0, busy_callback, NULL, NULL), 0);
    chime__timer_sync(t);
    while (!atomic_load(&busy))
        sched_yield();
    if (blocked_on((long)syscall(SYS_gettid), &t->sleeper.wake_seq) < 0) {
        printf("# skipped: no /proc/self/task/<tid>/syscall here\n");
        atomic_store(&busy_release, 1);
        chime_timer_free(t);
        return;
    }
    atomic_store(&thread_tid, find_sleeper(t)); /* callbacks run on the worker here */
    chime_id id;
    CHECK_EQ(chime_timer_schedule_every(t, 10 * MS, HOUR, fire, NULL, &id), 0);
    atomic_store(&fake_now, 10 * MS);
    chime__timer_sync(t); /* fired: its run waits for the busy worker */
    struct chime__rec *rec = chime__records_find(&t->recs, id);
    CHECK(rec != NULL, "no record for the id");
    uint32_t gen = (uint32_t)(id >> 32);
    CHECK_EQ(chime__state_reschedule_begin(&rec->state, gen), CHIME__RESCHED_PUSH); /* B */
    atomic_store_explicit(&rec->deadline_ns, 2 * HOUR, memory_order_relaxed);
    CHECK(!chime__state_reschedule_end(&rec->state), "B told to push twice");
    CHECK_EQ(chime__state_reschedule_begin(&rec->state, gen), CHIME__RESCHED_WRITE); /* A */
    chime__timer_push(t, (uint32_t)id, 2 * HOUR); /* B's push: the thread leaves it to A */
    chime__timer_poke(t); /* anything wakes the thread meanwhile: another producer's timer */
    while (atomic_load(&rec->state) & CHIME__ST_Q)
        sched_yield(); /* a poll: the thread pops it */
    atomic_store(&busy_release, 1); /* the worker takes the withdrawn run */
    while (!atomic_load(&finishing))
        sched_yield(); /* a poll: finish_run has set Q and stops before its push */
    atomic_store_explicit(&rec->deadline_ns, 20 * MS, memory_order_relaxed); /* A writes, ends */
    CHECK(!chime__state_reschedule_end(&rec->state), "A told to push: Q is the worker's");
    chime__timer_wake_before(t, 20 * MS);
    chime__timer_sync(t); /* the thread took A's wake-up and found nothing queued... */
    uint64_t asleep_until = wait_asleep(t); /* ...and sleeps until the old boundary */
    CHECK(asleep_until > 20 * MS, "asleep until %" PRIu64, asleep_until);
    uint32_t idle = atomic_load(&t->idle_seq);
    atomic_store(&finish_release, 1); /* the worker's push */
    while (atomic_load(&t->idle_seq) == idle)
        sched_yield(); /* a poll: the worker has pushed and gone idle */
    CHECK(atomic_load(&t->sleeper.sleep_until) != asleep_until,
          "the push left the thread asleep until %" PRIu64 " with a timer due at 20 ms queued",
          asleep_until);
    while (atomic_load(&rec->state) & CHIME__ST_Q)
        sched_yield(); /* a poll: the thread takes the record in */
    uint64_t until = wait_asleep(t);
    CHECK(until <= 20 * MS, "asleep until %" PRIu64 " ns with the timer due at 20 ms", until);
    atomic_store(&fake_now, 20 * MS);
    chime__timer_sync(t);
    while (atomic_load(&fired_at) == 0)
        sched_yield(); /* a poll: its run, on the worker (fire() counts, then notes the time) */
    CHECK_EQ(atomic_load(&fired_at), 20 * MS);
    CHECK_EQ(atomic_load(&fired), 1);
    atomic_store(&finish_armed, 0);
    CHECK_EQ(chime_timer_stop(t, CHIME_STOP_NOW, NULL), 0);
    chime_timer_free(t);
}

int main(void)
{
    chime__timer_finish_run_hook = hold_finish_run; /* before any runtime; idle unless armed */
    static const struct tap_test tests[] = {
        { "a reschedule that finds the timer queued is woken for by the push", a_reschedule_that_finds_the_timer_queued_is_woken_for_by_the_push },
        { "a reschedule preempted holding W does not make the thread spin",
          a_reschedule_preempted_holding_w_does_not_make_the_thread_spin },
        { "a timer cancelled while a reschedule holds W counts once at stop",
          a_timer_cancelled_while_a_reschedule_holds_w_counts_once_at_stop },
        { "a withdrawn run's push wakes the thread for a writer's deadline",
          a_withdrawn_runs_push_wakes_the_thread_for_a_writers_deadline },
    };
    return tap_run(tests, (int)(sizeof(tests) / sizeof(tests[0])));
}
