/* SPDX-License-Identifier: MIT */
/*
 * Waiting for a group commit (lib/store/waiters.h): a waiter returns once its LSN is durable, or with
 * the log's error, and a commit wakes the waiters of its own batch only, not those of the next one.
 * Then a model of the log under load: appenders take LSNs under a lock and wait, a writer takes
 * batches under the same lock and commits them, and every wait must return, and only once its LSN
 * is durable (TSan runs this). CHIME_SEED repeats a run.
 */
#include "store_util.h"

#include <pthread.h>
#include <stdatomic.h>

#include "rng.h"
#include "store/waiters.h"

static struct chime__waiters w;

struct waiter {
    pthread_t thread;
    uint64_t lsn;
    _Atomic int done;
    int rc;
    uint64_t durable_seen; /* durable when it returned */
};

static void *wait_main(void *arg)
{
    struct waiter *x = arg;
    x->rc = chime__waiters_wait(&w, x->lsn);
    x->durable_seen = chime__waiters_durable(&w);
    atomic_store(&x->done, 1);
    return NULL;
}

static void start(struct waiter *x, uint64_t lsn)
{
    *x = (struct waiter){ .lsn = lsn };
    CHECK_EQ(pthread_create(&x->thread, NULL, wait_main, x), 0);
}

/* Until x sleeps (or is about to) on parity p: counted among its sleepers. */
static void until_asleep(int p, uint32_t n)
{
    while (atomic_load(&w.parity[p].sleepers) < n)
        sched_yield(); /* a poll of a condition the waiter sets itself */
}

static void a_durable_lsn_returns_at_once(void)
{
    chime__waiters_init(&w);
    chime__waiters_taken(&w, 1, 100);
    chime__waiters_commit(&w, 1, 100);
    CHECK_EQ(chime__waiters_wait(&w, 100), 0);
    CHECK_EQ(chime__waiters_wait(&w, 1), 0);
    CHECK_EQ(chime__waiters_wait(&w, 0), 0);
}

static void a_commit_wakes_its_own_batch_and_not_the_next(void)
{
    chime__waiters_init(&w);
    chime__waiters_taken(&w, 1, 100); /* batch 1 (parity 1) ends at 100 */
    struct waiter in1, in2;
    start(&in1, 60);  /* in batch 1 */
    start(&in2, 150); /* appended after batch 1 was taken: batch 2 (parity 0) */
    until_asleep(1, 1);
    until_asleep(0, 1);
    chime__waiters_commit(&w, 1, 100);
    pthread_join(in1.thread, NULL);
    CHECK(in1.rc == 0 && in1.durable_seen >= 60, "batch 1's waiter: %d, durable %llu", in1.rc,
          (unsigned long long)in1.durable_seen);
    CHECK(!atomic_load(&in2.done), "batch 2's waiter returned before its batch was durable");
    CHECK_EQ(atomic_load(&w.parity[0].sleepers), 1); /* and still sleeps: batch 1 did not wake it */
    chime__waiters_taken(&w, 2, 200);
    chime__waiters_commit(&w, 2, 200);
    pthread_join(in2.thread, NULL);
    CHECK(in2.rc == 0 && in2.durable_seen >= 150, "batch 2's waiter");
    CHECK_EQ(atomic_load(&w.idle_wakes), 0); /* batch 1's commit woke nobody of batch 2 */
}

static void a_failure_wakes_every_waiter_with_the_error(void)
{
    chime__waiters_init(&w);
    chime__waiters_taken(&w, 1, 100);
    struct waiter a, b;
    start(&a, 50);
    start(&b, 500);
    until_asleep(1, 1);
    until_asleep(0, 1);
    chime__waiters_fail(&w, -EIO);
    pthread_join(a.thread, NULL);
    pthread_join(b.thread, NULL);
    CHECK_EQ(a.rc, -EIO);
    CHECK_EQ(b.rc, -EIO);
    CHECK_EQ(chime__waiters_wait(&w, 1000), -EIO);
}

/* ---- a model of the log under load ---- */

#define APPENDERS 8
#define APPENDS 3000

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t appended;   /* under lock: the LSN of the end of what was appended */
static _Atomic int appenders_left;
static _Atomic uint64_t early; /* waits that returned before their LSN was durable */

static void *appender_main(void *arg)
{
    struct rng r = { (uint64_t)(uintptr_t)arg };
    for (int i = 0; i < APPENDS; i++) {
        pthread_mutex_lock(&lock);
        uint64_t lsn = appended += 1 + rng_below(&r, 200);
        pthread_mutex_unlock(&lock);
        int rc = chime__waiters_wait(&w, lsn);
        if (rc != 0 || chime__waiters_durable(&w) < lsn)
            atomic_fetch_add(&early, 1);
    }
    atomic_fetch_sub(&appenders_left, 1);
    return NULL;
}

static void under_load_every_wait_returns_once_durable(void)
{
    chime__waiters_init(&w);
    uint64_t seed = rng_seed("test_store_waiters");
    atomic_store(&appenders_left, APPENDERS);
    pthread_t t[APPENDERS];
    for (uintptr_t i = 0; i < APPENDERS; i++)
        CHECK_EQ(pthread_create(&t[i], NULL, appender_main, (void *)(seed + i)), 0);
    struct rng r = { seed };
    uint64_t batches = 0, committed = 0;
    while (atomic_load(&appenders_left)) { /* the writer */
        pthread_mutex_lock(&lock);
        uint64_t end = appended;
        chime__waiters_taken(&w, ++batches, end);
        pthread_mutex_unlock(&lock);
        for (uint64_t k = rng_below(&r, 4); k; k--)
            sched_yield(); /* the "fdatasync": appenders append into the next batch meanwhile */
        chime__waiters_commit(&w, batches, end);
        committed = end;
    }
    for (int i = 0; i < APPENDERS; i++)
        pthread_join(t[i], NULL);
    CHECK_EQ(atomic_load(&early), 0);
    fprintf(stderr, "%llu batches, %llu idle wake-ups\n", (unsigned long long)batches,
            (unsigned long long)atomic_load(&w.idle_wakes));
    CHECK(committed == appended, "the writer stopped before the last append was durable");
    CHECK(batches > 1, "one batch only: the model did not overlap appends and commits");
}

static const struct tap_test tests[] = {
    { "a_durable_lsn_returns_at_once", a_durable_lsn_returns_at_once },
    { "a_commit_wakes_its_own_batch_and_not_the_next", a_commit_wakes_its_own_batch_and_not_the_next },
    { "a_failure_wakes_every_waiter_with_the_error", a_failure_wakes_every_waiter_with_the_error },
    { "under_load_every_wait_returns_once_durable", under_load_every_wait_returns_once_durable },
};

int main(void)
{
    return tap_run(tests, (int)(sizeof tests / sizeof tests[0]));
}
