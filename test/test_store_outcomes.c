/* SPDX-License-Identifier: MIT */
/*
 * A handler's outcome the backend could not record. The journal's log append returns -ENOMEM when
 * it cannot allocate (lib/store/wal.c: the encoding buffer of a record over 1 KiB, the log's buffer
 * growing) without failing the journal, and backend.h allows it. The wrappers here make the next
 * retry (a put with if_version), bury or ack return -ENOMEM once, writing nothing. A timer whose
 * outcome was not recorded is still pending on disk with its firing recorded, and no load reads it
 * again, so the store fails (sticky, as when a recorded timer cannot be loaded) and the restart
 * fires it again with attempt + 1. Found in review: the store dropped such a timer from memory and
 * ran on, reporting nothing; it stayed unfired until a restart, and an acknowledged one fired again
 * after a clean close and reopen. A plain TAP program (tap.h).
 */
#include "store_api.h"

#include "store/backend.h"
#include "store/journal.h"
#include "store/store.h"

static struct chime__backend_ops enomem_ops;
static _Atomic int enomem_retry, enomem_bury, enomem_ack;

static int put_enomem(struct chime__backend *b, const struct chime__put *p,
                      struct chime__put_result *res, uint64_t *ticket)
{
    if (p->if_version && atomic_exchange(&enomem_retry, 0))
        return -ENOMEM;
    return chime__journal_ops.put(b, p, res, ticket);
}

static int bury_enomem(struct chime__backend *b, const struct chime__timer *t)
{
    if (atomic_exchange(&enomem_bury, 0))
        return -ENOMEM;
    return chime__journal_ops.bury(b, t);
}

static int ack_enomem(struct chime__backend *b, const struct chime__timer *t, int current)
{
    if (atomic_exchange(&enomem_ack, 0))
        return -ENOMEM;
    return chime__journal_ops.ack(b, t, current);
}

static chime_store *open_enomem(struct chime_store_config *cfg)
{
    enomem_ops = chime__journal_ops;
    enomem_ops.put = put_enomem;
    enomem_ops.bury = bury_enomem;
    enomem_ops.ack = ack_enomem;
    return open_store_on(&enomem_ops, cfg);
}

static int64_t retry_first(struct recorder *r, const struct chime_fire *f)
{
    (void)r;
    return f->attempt == 1 ? (int64_t)MS : 0; /* a retry 1 ms after the first firing */
}

/* Once the handler has returned, the store has failed with the error; close reports it. */
static void expect_failed(chime_store *s)
{
    store_wait_handlers(s);
    struct chime_store_stats st;
    chime_store_stats(s, &st);
    CHECK(st.error == -ENOMEM, "the lost outcome went unreported: error %d, pending %llu, "
          "loaded %llu, dead %llu", st.error, (unsigned long long)st.pending,
          (unsigned long long)st.loaded, (unsigned long long)st.dead);
    CHECK_EQ(put(s, "other", "x", wall_ns() + 3600 * SEC), -ENOMEM); /* sticky */
    CHECK_EQ(chime_store_close(s), -ENOMEM);
}

/* The reopen fires the timer whose outcome was lost as attempt 2 (past the limit, buries it). */
static void expect_fired_again(struct chime_store_config *cfg)
{
    rec.reply = NULL;
    chime_store *s = open_store(cfg);
    recorder_wait(&rec, 2);
    CHECK_EQ(rec.f[1].attempt, 2);
    store_wait_idle(s);
    CHECK_EQ(chime_store_close(s), 0);
}

static void a_retry_the_backend_could_not_record_fails_the_store(void)
{
    fresh();
    rec.reply = retry_first;
    chime_store *s = open_enomem(NULL);
    atomic_store(&enomem_retry, 1);
    CHECK_EQ(put(s, "k", "x", 0), 0);
    recorder_wait(&rec, 1);
    expect_failed(s);
    CHECK_EQ(recorder_count(&rec), 1);
    expect_fired_again(NULL);
}

static void a_burial_the_backend_could_not_record_fails_the_store(void)
{
    fresh();
    struct chime_store_config cfg = { .max_attempts = 1 };
    rec.reply = retry_first; /* a retry after the last attempt: a dead letter */
    chime_store *s = open_enomem(&cfg);
    atomic_store(&enomem_bury, 1);
    CHECK_EQ(put(s, "k", "x", 0), 0);
    recorder_wait(&rec, 1);
    expect_failed(s);
    rec.reply = NULL;
    s = open_store(&cfg); /* its last allowed firing, unacknowledged: buried at load */
    struct chime_store_stats st;
    chime_store_stats(s, &st);
    CHECK_EQ(st.dead, 1);
    CHECK_EQ(st.pending, 0);
    CHECK_EQ(chime_store_close(s), 0);
    CHECK_EQ(recorder_count(&rec), 1);
}

static void an_acknowledgement_the_backend_could_not_record_fails_the_store(void)
{
    fresh();
    rec.reply = NULL;
    chime_store *s = open_enomem(NULL);
    atomic_store(&enomem_ack, 1);
    CHECK_EQ(put(s, "k", "x", 0), 0);
    recorder_wait(&rec, 1);
    expect_failed(s);
    expect_fired_again(NULL); /* the second firing is explained by the failure reported */
}

/* A restart finds a timer's last allowed firing unacknowledged, and its burial cannot be recorded:
 * it is neither a dead letter nor loaded, so the store fails. */
static void a_burial_at_load_the_backend_could_not_record_fails_the_store(void)
{
    fresh();
    struct chime_store_config cfg = { .path = dir, .max_attempts = 1 };
    static const struct chime__sink none = { NULL, NULL, NULL, NULL };
    struct chime__backend *b;
    CHECK_EQ(chime__journal_ops.open(&b, &cfg, &none), 0);
    struct chime__put p = { "k", 1, "x", 1, wall_ns(), 0, 0, 0 };
    struct chime__put_result res;
    uint64_t ticket;
    CHECK_EQ(chime__journal_ops.put(b, &p, &res, &ticket), 0);
    struct chime__firing f = { "k", 1, p.due_ns, res.ref, 1, 0 };
    CHECK_EQ(chime__journal_ops.fire(b, &f, 1), 0); /* fired, never acknowledged */
    CHECK_EQ(chime__journal_ops.close(b), 0);
    atomic_store(&enomem_bury, 1);
    chime_store *s = open_enomem(&cfg);
    expect_failed(s);
    CHECK_EQ(recorder_count(&rec), 0);
    s = open_store(&cfg); /* the burial, this time */
    struct chime_store_stats st;
    chime_store_stats(s, &st);
    CHECK_EQ(st.dead, 1);
    CHECK_EQ(chime_store_close(s), 0);
}

static const struct tap_test tests[] = {
    { "a_retry_the_backend_could_not_record_fails_the_store",
      a_retry_the_backend_could_not_record_fails_the_store },
    { "a_burial_the_backend_could_not_record_fails_the_store",
      a_burial_the_backend_could_not_record_fails_the_store },
    { "an_acknowledgement_the_backend_could_not_record_fails_the_store",
      an_acknowledgement_the_backend_could_not_record_fails_the_store },
    { "a_burial_at_load_the_backend_could_not_record_fails_the_store",
      a_burial_at_load_the_backend_could_not_record_fails_the_store },
};

int main(void)
{
    return store_tests_run(tests, (int)(sizeof tests / sizeof tests[0]), &dir, &rec, NULL);
}
