/* SPDX-License-Identifier: MIT */
/*
 * The durable store's API, rule by rule (include/chime.h, "Durable timers"): firing, replacing,
 * cancelling, running handlers, retries and dead letters. test_store_life.c has restarts, far timers,
 * the error codes, close and the rate limit. A plain TAP program (tap.h) so that ThreadSanitizer
 * runs it.
 */
#include "store_api.h"

#include "store/index.h"

static void a_put_fires_once_at_its_due_time_never_before(void)
{
    fresh();
    chime_store *s = open_store(NULL);
    uint64_t due = wall_ns() + 30 * MS;
    CHECK_EQ(put(s, "order-1", "unpaid", due), 0);
    recorder_wait(&rec, 1);
    CHECK(!atomic_load(&rec.early), "a handler ran before its due time");
    CHECK(strcmp(rec.f[0].key, "order-1") == 0 && strcmp(rec.f[0].payload, "unpaid") == 0, "key");
    CHECK_EQ(rec.f[0].due, due);
    CHECK_EQ(rec.f[0].attempt, 1);
    store_wait_idle(s);
    struct chime_store_stats st;
    chime_store_stats(s, &st);
    CHECK_EQ(st.fired, 1);
    CHECK_EQ(st.acked, 1);
    CHECK_EQ(recorder_count(&rec), 1);
    CHECK_EQ(chime_store_close(s), 0);
}

static void a_due_time_in_the_past_fires_at_once(void)
{
    fresh();
    chime_store *s = open_store(NULL);
    CHECK_EQ(put(s, "late", "x", 1), 0); /* 1 ns after the epoch */
    CHECK_EQ(put(s, "zero", "x", 0), 0);
    recorder_wait(&rec, 2);
    CHECK_EQ(chime_store_close(s), 0);
}

/* Put k due at now + window, replace it with now + 2 window: only the second fires, if the replace
 * returned within the window. */
static bool replace_in(uint64_t window)
{
    fresh();
    chime_store *s = open_store(NULL);
    uint64_t now = wall_ns();
    CHECK_EQ(put(s, "k", "first", now + window), 0);
    CHECK_EQ(put(s, "k", "second", now + 2 * window), 0);
    bool fit = in_time(now + window);
    recorder_wait(&rec, 1);
    store_wait_idle(s);
    if (fit) {
        CHECK_EQ(recorder_count(&rec), 1);
        CHECK(strcmp(rec.f[0].payload, "second") == 0, "payload %s", rec.f[0].payload);
        CHECK_EQ(rec.f[0].due, now + 2 * window);
        CHECK(rec.f[0].at_wall >= now + 2 * window, "fired at the replaced due time");
    }
    CHECK_EQ(chime_store_close(s), 0);
    return fit;
}

static void a_put_with_a_pending_key_replaces_its_due_time_and_payload(void)
{
    in_window(replace_in);
}

/* Put "paid" due at now + window and "unpaid" at now + 2 window, cancel "paid". A cancel that
 * returns 0 guarantees its handler never starts, however late it returned; one that found the
 * timer fired is a failure only if it returned within the window. */
static bool cancel_in(uint64_t window)
{
    fresh();
    chime_store *s = open_store(NULL);
    uint64_t now = wall_ns();
    CHECK_EQ(put(s, "paid", "x", now + window), 0);
    CHECK_EQ(put(s, "unpaid", "x", now + 2 * window), 0);
    int got = cancel(s, "paid");
    if (got != 0 && !in_time(now + window)) {
        store_wait_idle(s);
        CHECK_EQ(chime_store_close(s), 0);
        return false;
    }
    CHECK_EQ(got, 0);
    CHECK_EQ(cancel(s, "paid"), -ENOENT);
    CHECK_EQ(cancel(s, "never-put"), -ENOENT);
    recorder_wait(&rec, 1); /* "unpaid", due after "paid" was: had "paid" fired, it came first */
    store_wait_idle(s);
    CHECK_EQ(recorder_count(&rec), 1);
    CHECK(strcmp(rec.f[0].key, "unpaid") == 0, "fired %s", rec.f[0].key);
    CHECK_EQ(cancel(s, "unpaid"), -ENOENT); /* fired and acknowledged */
    CHECK_EQ(chime_store_close(s), 0);
    return true;
}

static void cancel_returns_0_then_enoent_and_the_handler_never_runs(void)
{
    in_window(cancel_in);
}

static void a_running_handler_cannot_be_cancelled_einprogress(void)
{
    fresh();
    gate_reset();
    rec.reply = gated;
    struct chime_store_config cfg = { .runtime = { .workers = 2 } };
    chime_store *s = open_store(&cfg);
    CHECK_EQ(put(s, "busy", "x", 0), 0);
    gate_wait_entered(1);
    CHECK_EQ(cancel(s, "busy"), -EINPROGRESS);
    gate_open();
    recorder_wait(&rec, 1);
    store_wait_idle(s);
    CHECK_EQ(cancel(s, "busy"), -ENOENT);
    CHECK_EQ(chime_store_close(s), 0);
}

static void a_put_while_the_handler_runs_fires_again_after_it_never_at_once(void)
{
    fresh();
    gate_reset();
    rec.reply = gated;
    struct chime_store_config cfg = { .runtime = { .workers = 4 } };
    chime_store *s = open_store(&cfg);
    CHECK_EQ(put(s, "k", "old", 0), 0);
    gate_wait_entered(1);
    CHECK_EQ(put(s, "k", "new", 0), 0); /* due at once, but the old handler still runs */
    sleep_ms(30); /* give a wrong implementation the chance to start it concurrently */
    pthread_mutex_lock(&gate.lock);
    int entered = gate.entered;
    pthread_mutex_unlock(&gate.lock);
    CHECK_EQ(entered, 1);
    gate_open(); /* the old handler acknowledges: that must not remove the new firing */
    recorder_wait(&rec, 2);
    store_wait_idle(s);
    CHECK_EQ(recorder_count(&rec), 2);
    CHECK(strcmp(rec.f[1].payload, "new") == 0, "second firing %s", rec.f[1].payload);
    pthread_mutex_lock(&gate.lock);
    int most = gate.max_concurrent;
    pthread_mutex_unlock(&gate.lock);
    CHECK_EQ(most, 1);
    CHECK_EQ(chime_store_close(s), 0);
}

static void a_cancel_while_running_cancels_the_newer_put_only(void)
{
    fresh();
    gate_reset();
    rec.reply = gated;
    struct chime_store_config cfg = { .runtime = { .workers = 2 } };
    chime_store *s = open_store(&cfg);
    CHECK_EQ(put(s, "k", "old", 0), 0);
    gate_wait_entered(1);
    CHECK_EQ(put(s, "k", "new", wall_ns() + 10 * MS), 0);
    CHECK_EQ(cancel(s, "k"), 0);            /* the newer one: it will not start */
    CHECK_EQ(cancel(s, "k"), -EINPROGRESS); /* what is left runs */
    gate_open();
    recorder_wait(&rec, 1);
    store_wait_idle(s);
    sleep_ms(30);
    CHECK_EQ(recorder_count(&rec), 1);
    CHECK_EQ(chime_store_close(s), 0);
}

static int payload_is(const struct chime_fire *f, const char *s)
{
    return f->payload_len == strlen(s) && memcmp(f->payload, s, f->payload_len) == 0;
}

/* "give up" goes to the dead letters, "hold" waits at the gate, anything else is acknowledged. */
static int64_t hold_or_give_up(struct recorder *r, const struct chime_fire *f)
{
    if (payload_is(f, "give up"))
        return CHIME_STORE_DEAD;
    return payload_is(f, "hold") ? gated(r, f) : 0;
}

static void wait_dead(chime_store *s, uint64_t n)
{
    for (struct chime_store_stats st;; sleep_ms(2)) { /* a poll, as in store_wait_idle */
        chime_store_stats(s, &st);
        if (st.dead >= n)
            return;
    }
}

/* With the index in files, the journal acknowledges a timer nothing replaced without reading its
 * key's slot (lib/store/index.c, DELETION), on the logic's word that it is still the key's pending
 * version. A put or a requeue made while the handler ran must take that word back, or the
 * acknowledgement would end the newer timer in the index: it would then no longer be cancellable,
 * and the index would disagree with the journal until a restart. */
static void an_ack_never_ends_a_timer_put_or_requeued_while_its_handler_ran(void)
{
    chime__index_set_defaults(1024, 8, 0); /* every table of the index in a file */
    fresh();
    gate_reset();
    rec.reply = hold_or_give_up;
    struct chime_store_config cfg = { .runtime = { .workers = 4 } };
    chime_store *s = open_store(&cfg);
    uint64_t far = wall_ns() + 3600 * SEC;
    CHECK_EQ(put(s, "put", "hold", 0), 0);
    gate_wait_entered(1);
    CHECK_EQ(put(s, "put", "newer", far), 0);
    CHECK_EQ(put(s, "requeue", "give up", 0), 0);
    wait_dead(s, 1);
    CHECK_EQ(put(s, "requeue", "hold", 0), 0);
    gate_wait_entered(2);
    CHECK_EQ(chime_store_dead_requeue(s, "requeue", 7, far), 0);
    CHECK_EQ(put(s, "plain", "ack me", 0), 0);
    gate_open(); /* both held handlers return 0: their versions were replaced meanwhile */
    recorder_wait(&rec, 4);
    store_wait_handlers(s);
    struct chime_store_stats st;
    chime_store_stats(s, &st);
    CHECK_EQ(st.acked, 3);
    CHECK_EQ(st.pending, 2);
    CHECK_EQ(cancel(s, "plain"), -ENOENT); /* acknowledged without a read: ended all the same */
    CHECK_EQ(cancel(s, "put"), 0);
    CHECK_EQ(cancel(s, "requeue"), 0);
    CHECK_EQ(chime_store_close(s), 0);
    s = open_store(&cfg); /* the journal agrees: nothing is pending */
    chime_store_stats(s, &st);
    CHECK_EQ(st.pending, 0);
    CHECK_EQ(chime_store_close(s), 0);
    chime__index_set_defaults(0, 0, 0);
}

static int64_t retry_twice(struct recorder *r, const struct chime_fire *f)
{
    (void)r;
    return f->attempt < 3 ? (int64_t)(20 * MS) : 0;
}

static void a_retry_fires_again_after_the_delay_with_attempt_plus_one(void)
{
    fresh();
    rec.reply = retry_twice;
    chime_store *s = open_store(NULL);
    CHECK_EQ(put(s, "flaky", "x", 0), 0);
    recorder_wait(&rec, 3);
    store_wait_idle(s);
    CHECK_EQ(recorder_count(&rec), 3);
    for (int i = 0; i < 3; i++)
        CHECK_EQ(rec.f[i].attempt, (uint32_t)i + 1);
    /* a retry's delay counts from when the handler returned: after its call began, at least */
    CHECK(rec.f[1].due >= rec.f[0].at_wall + 20 * MS, "retry due too early");
    CHECK(rec.f[2].at_wall >= rec.f[1].at_wall + 20 * MS, "second retry too early");
    struct chime_store_stats st;
    chime_store_stats(s, &st);
    CHECK_EQ(st.retried, 2);
    CHECK_EQ(st.acked, 1);
    CHECK_EQ(chime_store_close(s), 0);
}

static int64_t always_retry(struct recorder *r, const struct chime_fire *f)
{
    (void)r;
    (void)f;
    return 1;
}

struct dead_seen {
    int n;
    char key[64];
    char payload[64];
    uint32_t attempt;
};

static int collect_dead(void *ctx, const struct chime_fire *d)
{
    struct dead_seen *ds = ctx;
    if (ds->n++ == 0) {
        memcpy(ds->key, d->key, d->key_len < 63 ? d->key_len : 63);
        memcpy(ds->payload, d->payload, d->payload_len < 63 ? d->payload_len : 63);
        ds->attempt = d->attempt;
    }
    return 0;
}

static void after_max_attempts_a_timer_goes_to_the_dead_letters(void)
{
    fresh();
    rec.reply = always_retry;
    struct chime_store_config cfg = { .max_attempts = 3 };
    chime_store *s = open_store(&cfg);
    CHECK_EQ(put(s, "poison", "body", 0), 0);
    recorder_wait(&rec, 3);
    store_wait_idle(s);
    CHECK_EQ(recorder_count(&rec), 3);
    struct chime_store_stats st;
    chime_store_stats(s, &st);
    CHECK_EQ(st.dead, 1);
    CHECK_EQ(st.buried, 1);
    struct dead_seen ds = { 0 };
    CHECK_EQ(chime_store_dead_list(s, collect_dead, &ds), 0);
    CHECK_EQ(ds.n, 1);
    CHECK(strcmp(ds.key, "poison") == 0 && strcmp(ds.payload, "body") == 0, "dead letter");
    CHECK_EQ(ds.attempt, 3);
    CHECK_EQ(cancel(s, "poison"), -ENOENT); /* a dead letter is not pending */
    CHECK_EQ(chime_store_close(s), 0);
}

static int64_t give_up(struct recorder *r, const struct chime_fire *f)
{
    (void)r;
    return strcmp((const char *)f->payload, "give up") == 0 ? CHIME_STORE_DEAD : 0;
}

static void dead_letters_survive_a_restart_and_can_be_requeued_and_dropped(void)
{
    fresh();
    rec.reply = give_up;
    chime_store *s = open_store(NULL);
    CHECK_EQ(chime_store_put(s, "a", 1, "give up", 8, 0), 0);
    CHECK_EQ(chime_store_put(s, "b", 1, "give up", 8, 0), 0);
    recorder_wait(&rec, 2);
    store_wait_idle(s);
    CHECK_EQ(chime_store_close(s), 0);

    s = open_store(NULL);
    struct dead_seen ds = { 0 };
    CHECK_EQ(chime_store_dead_list(s, collect_dead, &ds), 0);
    CHECK_EQ(ds.n, 2);
    CHECK_EQ(chime_store_dead_requeue(s, "nope", 4, 0), -ENOENT);
    CHECK_EQ(chime_store_dead_drop(s, "nope", 4), -ENOENT);
    CHECK_EQ(chime_store_dead_drop(s, "b", 1), 0);
    CHECK_EQ(chime_store_dead_drop(s, "b", 1), -ENOENT);
    rec.reply = NULL; /* the requeued one is acknowledged this time */
    CHECK_EQ(chime_store_dead_requeue(s, "a", 1, 0), 0);
    recorder_wait(&rec, 3);
    store_wait_idle(s);
    CHECK(strcmp(rec.f[2].key, "a") == 0 && strcmp(rec.f[2].payload, "give up") == 0, "requeued");
    CHECK_EQ(rec.f[2].attempt, 1);
    ds.n = 0;
    CHECK_EQ(chime_store_dead_list(s, collect_dead, &ds), 0);
    CHECK_EQ(ds.n, 0);
    CHECK_EQ(chime_store_close(s), 0);
    s = open_store(NULL);
    CHECK_EQ(chime_store_dead_list(s, collect_dead, &ds), 0);
    CHECK_EQ(ds.n, 0);
    CHECK_EQ(chime_store_close(s), 0);
}

/*
 * A burst: BURST timers due at once, their handlers run one after another on the advancing thread
 * (no workers). While more than a few dozen firings are outstanding, the store queues their
 * acknowledgements and records them in groups (lib/store/acks.c); these tests hold it to the rules
 * a handler that returned 0 has always had.
 */
#define BURST 1000

static chime_store *burst_store;
static _Atomic int burst_sync = 1;
static struct chime_store_stats burst_seen;
static char burst_first[16];

/* The first handler puts its key again, so that its acknowledgement, which may wait in the queue,
 * must not end the new firing. The BURST-th handler syncs and looks at what is recorded: the
 * handlers before it have all returned (one thread runs them). */
static int64_t burst_reply(struct recorder *r, const struct chime_fire *f)
{
    pthread_mutex_lock(&r->lock);
    size_t before = r->n; /* handlers that have returned: recorder_handler counts after the reply */
    pthread_mutex_unlock(&r->lock);
    if (before == 0) { /* the first handler: its key again */
        CHECK(f->key_len < sizeof burst_first, "key length %zu", f->key_len);
        memcpy(burst_first, f->key, f->key_len);
        CHECK_EQ(put(burst_store, burst_first, "again", 0), 0);
    }
    if (before == BURST - 1) {
        atomic_store(&burst_sync, chime_store_sync(burst_store));
        chime_store_stats(burst_store, &burst_seen);
    }
    return 0;
}

/* Put n timers, <prefix><i>, ten minutes ahead by a fake clock, then step it: all due at once. */
static chime_store *burst_begin(int64_t (*reply)(struct recorder *, const struct chime_fire *),
                                unsigned workers, int n, char prefix)
{
    fresh();
    rec.reply = reply;
    atomic_store(&fake_offset, 0);
    chime__store_set_clock(fake_wall);
    struct chime_store_config cfg = { .sync = CHIME_SYNC_INTERVAL };
    cfg.runtime.workers = workers;
    chime_store *s = open_store(&cfg);
    burst_store = s;
    uint64_t due = fake_wall() + 600 * SEC;
    for (int i = 0; i < n; i++) {
        char key[16];
        snprintf(key, sizeof key, "%c%d", prefix, i);
        CHECK_EQ(put(s, key, "x", due), 0);
    }
    fake_step(s, (int64_t)(700 * SEC));
    return s;
}

static void a_burst_s_acknowledgements_are_recorded_before_a_sync_returns(void)
{
    chime_store *s = burst_begin(burst_reply, 0, BURST, 'b');
    recorder_wait(&rec, BURST + 1); /* and the first key once more */
    /* No firing starts from here on. Read the statistics without a pause while the last groups are
     * recorded: once they say no handler runs, their counts must say every one was acknowledged. */
    struct chime_store_stats st;
    do
        chime_store_stats(s, &st);
    while (st.running);
    CHECK_EQ(st.acked, BURST + 1);
    chime__store_set_clock(NULL);
    CHECK_EQ(atomic_load(&burst_sync), 0);
    /* Every handler that had returned when the BURST-th one synced was recorded by then. */
    CHECK_EQ(burst_seen.acked, BURST - 1);
    CHECK_EQ(st.pending, 0);
    CHECK_EQ(recorder_count_key(&rec, burst_first), 2);
    CHECK(!atomic_load(&rec.early), "a handler ran before its due time");
    CHECK_EQ(chime_store_close(s), 0);
}

static void a_burst_closed_at_once_keeps_its_acknowledgements(void)
{
    chime_store *s = burst_begin(NULL, 0, BURST, 'b');
    recorder_wait(&rec, BURST);
    CHECK_EQ(chime_store_close(s), 0); /* acknowledgements may be queued: close records them */
    chime__store_set_clock(NULL);
    s = open_store(&(struct chime_store_config){ .sync = CHIME_SYNC_INTERVAL });
    struct chime_store_stats st;
    chime_store_stats(s, &st);
    CHECK_EQ(st.pending, 0);
    CHECK_EQ(chime_store_close(s), 0);
    CHECK_EQ(recorder_count(&rec), BURST); /* nothing fired again */
}

/* The flush refused (as when the runtime has no memory for it): the handlers' thread records the
 * queue itself, and nothing is left behind. */
static void a_burst_whose_flush_is_refused_records_its_acknowledgements_itself(void)
{
    chime__store_acks_refuse_flush(1);
    chime_store *s = burst_begin(NULL, 0, BURST, 'b');
    recorder_wait(&rec, BURST);
    store_wait_handlers(s);
    struct chime_store_stats st;
    chime_store_stats(s, &st);
    CHECK_EQ(st.acked, BURST);
    CHECK_EQ(st.pending, 0);
    CHECK_EQ(chime_store_close(s), 0);
    chime__store_acks_refuse_flush(0);
    chime__store_set_clock(NULL);
    s = open_store(&(struct chime_store_config){ .sync = CHIME_SYNC_INTERVAL });
    chime_store_stats(s, &st);
    CHECK_EQ(st.pending, 0);
    CHECK_EQ(chime_store_close(s), 0);
}

/* Keys w<i>: a third cancelled, a third put again at once, while the burst fires on 4 workers. */
#define MIXED 2000

static _Atomic int mixed_cancelled[MIXED], mixed_again[MIXED];

static void *mixed_caller(void *arg)
{
    int first = (int)(intptr_t)arg;
    for (int i = first; i < first + MIXED / 2; i++) {
        char key[16];
        snprintf(key, sizeof key, "w%d", i);
        if (i % 3 == 0) {
            int rc = cancel(burst_store, key);
            CHECK(rc == 0 || rc == -EINPROGRESS || rc == -ENOENT, "cancel %s: %d", key, rc);
            atomic_store(&mixed_cancelled[i], rc == 0);
        } else if (i % 3 == 1) {
            CHECK_EQ(put(burst_store, key, "again", 0), 0);
            atomic_store(&mixed_again[i], 1);
        }
        if (i % 100 == 99)
            CHECK_EQ(chime_store_sync(burst_store), 0);
    }
    return NULL;
}

static void a_burst_on_workers_beside_puts_cancels_and_syncs_loses_nothing(void)
{
    chime_store *s = burst_begin(NULL, 4, MIXED, 'w');
    pthread_t th[2];
    for (int t = 0; t < 2; t++)
        CHECK_EQ(pthread_create(&th[t], NULL, mixed_caller, (void *)(intptr_t)(t * MIXED / 2)),
                 0);
    for (int t = 0; t < 2; t++)
        pthread_join(th[t], NULL);
    store_wait_idle(s);
    chime__store_set_clock(NULL);
    struct chime_store_stats st;
    chime_store_stats(s, &st);
    CHECK_EQ(st.acked, recorder_count(&rec)); /* every handler returned 0 */
    for (int i = 0; i < MIXED; i++) {
        char key[16];
        snprintf(key, sizeof key, "w%d", i);
        size_t x = recorder_count_with(&rec, key, "x");
        size_t again = recorder_count_with(&rec, key, "again");
        if (atomic_load(&mixed_cancelled[i]))
            CHECK(x == 0 && again == 0, "%s was cancelled and fired", key);
        else if (atomic_load(&mixed_again[i]))
            CHECK(x <= 1 && again == 1, "%s fired %zu, %zu times", key, x, again);
        else
            CHECK(x == 1 && again == 0, "%s fired %zu, %zu times", key, x, again);
    }
    CHECK(!atomic_load(&rec.early), "a handler ran before its due time");
    CHECK_EQ(chime_store_close(s), 0);
    s = open_store(&(struct chime_store_config){ .sync = CHIME_SYNC_INTERVAL });
    chime_store_stats(s, &st);
    CHECK_EQ(st.pending, 0); /* every acknowledgement reached the disk by close */
    CHECK_EQ(chime_store_close(s), 0);
}

static const struct tap_test tests[] = {
    { "a_put_fires_once_at_its_due_time_never_before",
      a_put_fires_once_at_its_due_time_never_before },
    { "a_due_time_in_the_past_fires_at_once", a_due_time_in_the_past_fires_at_once },
    { "a_put_with_a_pending_key_replaces_its_due_time_and_payload",
      a_put_with_a_pending_key_replaces_its_due_time_and_payload },
    { "cancel_returns_0_then_enoent_and_the_handler_never_runs",
      cancel_returns_0_then_enoent_and_the_handler_never_runs },
    { "a_running_handler_cannot_be_cancelled_einprogress",
      a_running_handler_cannot_be_cancelled_einprogress },
    { "a_put_while_the_handler_runs_fires_again_after_it_never_at_once",
      a_put_while_the_handler_runs_fires_again_after_it_never_at_once },
    { "a_cancel_while_running_cancels_the_newer_put_only",
      a_cancel_while_running_cancels_the_newer_put_only },
    { "an_ack_never_ends_a_timer_put_or_requeued_while_its_handler_ran",
      an_ack_never_ends_a_timer_put_or_requeued_while_its_handler_ran },
    { "a_retry_fires_again_after_the_delay_with_attempt_plus_one",
      a_retry_fires_again_after_the_delay_with_attempt_plus_one },
    { "after_max_attempts_a_timer_goes_to_the_dead_letters",
      after_max_attempts_a_timer_goes_to_the_dead_letters },
    { "dead_letters_survive_a_restart_and_can_be_requeued_and_dropped",
      dead_letters_survive_a_restart_and_can_be_requeued_and_dropped },
    { "a_burst_s_acknowledgements_are_recorded_before_a_sync_returns",
      a_burst_s_acknowledgements_are_recorded_before_a_sync_returns },
    { "a_burst_closed_at_once_keeps_its_acknowledgements",
      a_burst_closed_at_once_keeps_its_acknowledgements },
    { "a_burst_whose_flush_is_refused_records_its_acknowledgements_itself",
      a_burst_whose_flush_is_refused_records_its_acknowledgements_itself },
    { "a_burst_on_workers_beside_puts_cancels_and_syncs_loses_nothing",
      a_burst_on_workers_beside_puts_cancels_and_syncs_loses_nothing },
};

int main(void)
{
    return store_tests_run(tests, (int)(sizeof tests / sizeof tests[0]), &dir, &rec, NULL);
}
