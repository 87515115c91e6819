/* SPDX-License-Identifier: MIT */
/*
 * The durable store's rate limit (chime_store_config.max_fires_per_s; lib/store/fire.c, THE
 * DISPATCHER): handlers start no faster than the token bucket allows, over any interval, and a
 * token goes only to a handler that starts, not to a timer taken from the queue that does not (one
 * cancelled while it waited), nor to one the wall clock stepped back from. The second and third
 * tests run the bucket on a clock of their own (chime__store_set_rate_clock), so that they decide
 * when tokens come. A plain TAP program (tap.h).
 */
#include "store_api.h"

#include <inttypes.h>

#include "store/store.h"

/* Sort n wall-clock times in place (workers may record out of order). */
static void sort_times(uint64_t *t, size_t n)
{
    for (size_t i = 1; i < n; i++)
        for (size_t k = i; k && t[k] < t[k - 1]; k--) {
            uint64_t x = t[k];
            t[k] = t[k - 1];
            t[k - 1] = x;
        }
}

static void the_rate_limit_bounds_handler_starts_over_any_interval(void)
{
    fresh();
    const uint64_t rate = 20;
    const size_t n = 24;
    struct chime_store_config cfg = { .max_fires_per_s = rate };
    uint64_t opened = wall_ns(); /* the bucket starts with one token when the store opens */
    chime_store *s = open_store(&cfg);
    for (size_t i = 0; i < n; i++) {
        char key[16];
        snprintf(key, sizeof key, "r%zu", i);
        CHECK_EQ(put(s, key, "x", 0), 0);
    }
    recorder_wait(&rec, n);
    CHECK_EQ(chime_store_close(s), 0);
    /* The k-th start (from 1) happened when k tokens had been taken: at most 1 (the capacity, for
     * this rate) plus rate per second since open. Slowness only makes starts later. */
    uint64_t starts[24];
    for (size_t i = 0; i < n; i++)
        starts[i] = rec.f[i].at_wall;
    sort_times(starts, n);
    for (size_t k = 1; k <= n; k++) /* k starts by starts[k-1]: at most 1 + rate * elapsed */
        CHECK((k - 1) * SEC <= rate * (starts[k - 1] - opened), "start %zu came %.3f s after open",
              k, (double)(starts[k - 1] - opened) / 1e9);
}

/* Found in review: firings are recorded up to the lead (2 to 50 ms) before their due time, and
 * every handler of a due time started at it, so the tokens of the whole lead started at once: at
 * 100/s, 5 handlers within 0.06 ms where the bucket allows 1. No handler starts before the due
 * time, so by the k-th start (from 1), at most cap + rate * (its time - due) may have started.
 * Slowness only makes starts later. */
static void handlers_due_at_one_instant_start_within_the_rate(void)
{
    fresh();
    const uint64_t rate = 1000, cap = rate / 100; /* fire.c: at most max(1, rate/100) stored */
    enum { N = 40 };
    struct chime_store_config cfg = { .max_fires_per_s = rate };
    chime_store *s = open_store(&cfg);
    uint64_t due = wall_ns() + 300 * MS; /* past the lead's longest (50 ms), to fill the bucket */
    for (size_t i = 0; i < N; i++) {
        char key[16];
        snprintf(key, sizeof key, "d%zu", i);
        CHECK_EQ(put(s, key, "x", due), 0);
    }
    recorder_wait(&rec, N);
    CHECK_EQ(chime_store_close(s), 0);
    uint64_t starts[N];
    for (size_t i = 0; i < N; i++) {
        starts[i] = rec.f[i].at_wall;
        CHECK(starts[i] >= due, "a handler started %" PRIu64 " ns early", due - starts[i]);
    }
    sort_times(starts, N);
    for (size_t k = cap + 1; k <= N; k++)
        CHECK((k - cap) * SEC <= rate * (starts[k - 1] - due),
              "start %zu came %.3f ms after the due time: %zu started by then", k,
              (double)(starts[k - 1] - due) / 1e6, k);
}

/* The rate limit's clock (chime__store_set_rate_clock): it stands still until the test moves it,
 * and counts the dispatcher's looks at it since it last moved (each look is one decision). */
static pthread_mutex_t rate_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t rate_at, rate_looks;

static uint64_t rate_now(void)
{
    pthread_mutex_lock(&rate_lock);
    uint64_t now = rate_at;
    rate_looks++;
    pthread_mutex_unlock(&rate_lock);
    return now;
}

/* Move the rate limit's clock by `by`, and count the dispatcher's looks from here. */
static void rate_move(uint64_t by)
{
    pthread_mutex_lock(&rate_lock);
    rate_at += by;
    rate_looks = 0;
    pthread_mutex_unlock(&rate_lock);
}

/* Wait until the dispatcher has looked at the rate limit's clock n times since it last moved. */
static void rate_wait_looks(uint64_t n)
{
    pthread_mutex_lock(&rate_lock);
    while (rate_looks < n) {
        pthread_mutex_unlock(&rate_lock);
        sleep_ms(1); /* a poll: the dispatcher's rounds (it waits on the real clock for a token) */
        pthread_mutex_lock(&rate_lock);
    }
    pthread_mutex_unlock(&rate_lock);
}

/* The length of the dispatcher's queue. */
static size_t queued(chime_store *s)
{
    pthread_mutex_lock(&s->dlock);
    size_t n = s->qlen;
    pthread_mutex_unlock(&s->dlock);
    return n;
}

/* Put key due at once, and wait until the dispatcher's queue holds n timers. */
static void put_queued(chime_store *s, const char *key, size_t n)
{
    CHECK_EQ(put(s, key, "x", 0), 0);
    while (queued(s) < n)
        sleep_ms(1); /* a poll: the runtime's callback queues it */
}

/* Found in review: a timer cancelled while it waited for the rate limit spent a token when the
 * dispatcher took it, so the live timer behind it waited for the next token (a second at 1/s).
 * With the bucket's clock standing still, one token is given: the cancelled timer gives it back,
 * the one behind it starts, and the next one does not, until the next token comes. */
static void a_timer_cancelled_in_the_queue_spends_no_token(void)
{
    fresh();
    rate_move(0);
    chime__store_set_rate_clock(rate_now);
    struct chime_store_config cfg = { .max_fires_per_s = 1 };
    chime_store *s = open_store(&cfg);
    chime__store_set_rate_clock(NULL);
    CHECK_EQ(put(s, "first", "x", 0), 0); /* the bucket's one token at open */
    recorder_wait_key(&rec, "first", 1, NULL);
    put_queued(s, "cancelled", 1);
    put_queued(s, "live", 2);
    put_queued(s, "next", 3);
    CHECK_EQ(cancel(s, "cancelled"), 0);
    rate_move(SEC); /* one token */
    /* Three decisions: "cancelled" taken (and its token given back), "live" taken, and then, no
     * token left, "next" left in the queue. With the clock standing, nothing changes after. */
    rate_wait_looks(3);
    size_t n = queued(s);
    CHECK(n == 1, "%zu timers queued, not 1: the cancelled one's token was %s", n,
          n ? "spent" : "given twice");
    recorder_wait_key(&rec, "live", 1, NULL);
    CHECK_EQ(recorder_count_key(&rec, "next"), 0); /* queued, it has not started */
    rate_move(SEC); /* the next token */
    recorder_wait_key(&rec, "next", 1, NULL);
    CHECK_EQ(chime_store_close(s), 0);
    CHECK_EQ(recorder_count_key(&rec, "cancelled"), 0);
    CHECK_EQ(recorder_count(&rec), 3);
}

/* The wall clock at which the dispatcher last armed a queued timer again, found early by a clock
 * that stepped back (chime__store_rewait_hook); 0: not since the test cleared it. */
static _Atomic uint64_t rearmed_at;

static void note_rearm(uint64_t wall)
{
    atomic_store(&rearmed_at, wall);
}

static uint64_t fired(chime_store *s)
{
    struct chime_store_stats st;
    chime_store_stats(s, &st);
    return st.fired;
}

/* Found in review: a timer queued behind the rate limit when the clock stepped an hour back had its
 * firing recorded once its token came, an hour before its due time, and could not be cancelled
 * for that hour (the lead bounds that to 50 ms: lead.h). The dispatcher arms it again instead, as
 * the runtime's callback does for a timer it finds early. The bucket's clock stands still, so the
 * second timer waits in the queue until the test, having stepped the wall clock back, gives it its
 * token (with a real bucket, a slow machine could take it before the step: a stress run hung). */
static void a_timer_queued_by_the_rate_limit_through_a_step_back_stays_cancellable(void)
{
    fresh();
    rate_move(0);
    chime__store_set_rate_clock(rate_now);
    struct chime_store_config cfg = { .max_fires_per_s = 1 };
    chime_store *s = store_open_on_fake_clock(dir, &rec, &cfg);
    chime__store_set_rate_clock(NULL);
    uint64_t t0 = fake_wall(), due = t0 + 100 * MS;
    fake_freeze(s, t0);
    CHECK_EQ(put(s, "a", "x", due), 0);
    CHECK_EQ(put(s, "b", "x", due), 0);
    fake_freeze(s, due); /* both due: one takes the bucket's token, the other waits for the next */
    recorder_wait(&rec, 1);
    while (queued(s) < 1)
        sleep_ms(1); /* a poll: the other's runtime callback queues it */
    const char *other = rec.f[0].key[0] == 'a' ? "b" : "a";
    atomic_store(&rearmed_at, 0);
    fake_freeze(s, due - 3600 * SEC); /* an hour back while it waits in the queue */
    rate_move(SEC);                   /* its token */
    while (!atomic_load(&rearmed_at) && fired(s) < 2)
        sleep_ms(1); /* a poll: the dispatcher arms it again, or (wrongly) records its firing */
    CHECK_EQ(chime_store_cancel(s, other, 1), 0);
    CHECK_EQ(atomic_load(&rearmed_at), due - 3600 * SEC);
    fake_freeze(s, due + SEC);
    chime__store_settle(s);
    CHECK_EQ(recorder_count(&rec), 1);
    CHECK(!atomic_load(&rec.early), "fired before its due time by the wall clock");
    fake_freeze(s, 0);
    CHECK_EQ(chime_store_close(s), 0);
}

static const struct tap_test tests[] = {
    { "the_rate_limit_bounds_handler_starts_over_any_interval",
      the_rate_limit_bounds_handler_starts_over_any_interval },
    { "handlers_due_at_one_instant_start_within_the_rate",
      handlers_due_at_one_instant_start_within_the_rate },
    { "a_timer_cancelled_in_the_queue_spends_no_token",
      a_timer_cancelled_in_the_queue_spends_no_token },
    { "a_timer_queued_by_the_rate_limit_through_a_step_back_stays_cancellable",
      a_timer_queued_by_the_rate_limit_through_a_step_back_stays_cancellable },
};

int main(void)
{
    chime__store_rewait_hook = note_rearm; /* before any store's threads read it */
    return store_tests_run(tests, (int)(sizeof tests / sizeof tests[0]), &dir, &rec, fake_wall);
}
