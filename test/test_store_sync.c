/* SPDX-License-Identifier: MIT */
/*
 * chime_store_sync covers the outcome of every handler that returned before it (include/chime.h,
 * chime_store_sync; lib/store/outcomes.c). Found in review: outside a burst a handler's thread
 * appends its acknowledgement after taking its key's stripe lock, which a put of another key may
 * hold meanwhile; sync only recorded the queue of grouped acknowledgements and committed, so it
 * returned 0 with the acknowledgement not yet appended, and a crash then fired the timer again.
 * Here a child holds every stripe lock from before its handler returns until its sync is seen
 * waiting, then crashes (_exit, no close) once sync has returned; the reopen must not fire the
 * timer again. A plain TAP program (tap.h).
 */
#include "store_api.h"

#include <inttypes.h>
#include <sys/wait.h>

#include "store/store.h"

static _Atomic int entered, may_return, synced;
static _Atomic int sync_rc = 1;

static int64_t returns_when_allowed(void *ctx, const struct chime_fire *f)
{
    (void)ctx;
    (void)f;
    atomic_store(&entered, 1);
    while (!atomic_load(&may_return))
        sched_yield(); /* a poll: the child lets it return once it holds the stripe locks */
    return 0; /* done: acknowledged */
}

static void *sync_thread(void *arg)
{
    atomic_store(&sync_rc, chime_store_sync(arg));
    atomic_store(&synced, 1);
    return NULL;
}

static uint64_t outcomes_counted(chime_store *s)
{
    uint64_t w = atomic_load(&s->outcomes.word);
    return (w & 0x3fffffff) + ((w >> 32) & 0x3fffffff);
}

/* The child: exit 0 if sync waited for the acknowledgement and returned 0; 3 if it returned while
 * the acknowledgement could not be appended (the defect); 2 on a setup failure. */
static void child(void)
{
    struct chime_store_config cfg = { .path = dir };
    chime_store *s = NULL;
    if (chime_store_open(&s, &cfg, returns_when_allowed, NULL) != 0 ||
        chime_store_put(s, "order-1", 7, "x", 1, wall_ns()) != 0)
        _exit(2);
    while (!atomic_load(&entered))
        sched_yield(); /* a poll: the timer fires */
    for (int i = 0; i < HOT_STRIPES; i++)
        pthread_mutex_lock(&s->stripes[i].lock);
    atomic_store(&may_return, 1);
    while (!outcomes_counted(s))
        sched_yield(); /* a poll: the handler has returned; its thread waits for its stripe */
    pthread_t t;
    if (pthread_create(&t, NULL, sync_thread, s) != 0)
        _exit(2);
    while (!atomic_load(&synced) && !(atomic_load(&s->outcomes.word) & (UINT64_C(1) << 62)))
        sched_yield(); /* a poll: sync waits for the outcome (WAITING, outcomes.c), or returns */
    if (atomic_load(&synced))
        _exit(3);
    for (int i = 0; i < HOT_STRIPES; i++)
        pthread_mutex_unlock(&s->stripes[i].lock);
    pthread_join(t, NULL);
    _exit(atomic_load(&sync_rc) == 0 ? 0 : 2); /* a crash: no close */
}

/* The reopen's handler holds any timer that fires again until the test has counted it pending. */
static _Atomic int released;

static int64_t held_until_released(void *ctx, const struct chime_fire *f)
{
    (void)ctx;
    (void)f;
    while (!atomic_load(&released))
        sched_yield(); /* a poll: released once the test has read the counts */
    return 0;
}

static void a_sync_covers_an_acknowledgement_waiting_for_its_stripe(void)
{
    fresh();
    fflush(stdout);
    pid_t pid = fork();
    CHECK(pid >= 0, "fork");
    if (pid == 0)
        child();
    int status;
    CHECK_EQ(waitpid(pid, &status, 0), pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) != 2, "the child's setup failed");
    int early = WEXITSTATUS(status) == 3;
    struct chime_store_config cfg = { .path = dir };
    chime_store *s = NULL;
    CHECK_EQ(chime_store_open(&s, &cfg, held_until_released, NULL), 0);
    struct chime_store_stats st;
    chime_store_stats(s, &st); /* a timer not acknowledged is pending until its handler returns */
    atomic_store(&released, 1);
    CHECK_EQ(chime_store_close(s), 0);
    CHECK(!early && st.pending == 0, "sync returned %s; after the crash %" PRIu64 " timer pending",
          early ? "before the acknowledgement was appended" : "0", st.pending);
}

static const struct tap_test tests[] = {
    { "a_sync_covers_an_acknowledgement_waiting_for_its_stripe",
      a_sync_covers_an_acknowledgement_waiting_for_its_stripe },
};

int main(void)
{
    return store_tests_run(tests, (int)(sizeof tests / sizeof tests[0]), &dir, &rec, NULL);
}
