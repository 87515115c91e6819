/* SPDX-License-Identifier: MIT */
/*
 * Versions of one key against each other (lib/store/pg/pg.h, P4): a user's put, or a requeue of a
 * dead letter, from one node, meets the owner's retry of the timer it replaces, from another. The
 * retry is conditional on the version that fired; the put and the requeue are not. Whichever
 * commits first, the end state must be one of the two orders: the put (or the requeue) after the
 * retry, replacing it, or before it, and the retry refused. Never the retry alone with the put
 * reported done: that loses a put the user was told is durable.
 *
 * The statements are the lanes' own (statements.h), sent on the test's connections to a real
 * server, over rows made by hand in shard 0, held by node "a" in epoch 5. The interleaving is made
 * with a row lock: a third session holds the row of a key that sorts before k-0 in the put's
 * batch, so the put stops there, past the start of its statement and before k-0's row, while the
 * retry of k-0 commits (found in review; a batch of 2 000 puts gives the same window by itself).
 * The test waits for the put to be blocked through pg_blocking_pids: no timing.
 */
#include "pg_test.h"
#include "store/pg/statements.h"

static struct pg_cluster cluster;
static char conninfo[600];

struct session {
    PGconn *obs, *hold, *lane, *owner; /* the test's eyes, the row's holder, the two nodes */
};

/* A fresh database with k-0 (version 100) fired by a in epoch 5, pending a-0 (version 50) and,
 * with_dead, a dead letter for each of them. */
static struct session fresh(const char *name, bool with_dead)
{
    CHECK_EQ(pg_cluster_db(&cluster, name, 1, PG_WIDTH_S, conninfo, sizeof conninfo), 0);
    struct session s = { pg_connect_or_die(conninfo), pg_connect_or_die(conninfo),
                         pg_connect_or_die(conninfo), pg_connect_or_die(conninfo) };
    CHECK(pg_command(s.obs, "CREATE TABLE chime.timers_all PARTITION OF chime.timers"
                            " FOR VALUES FROM (0) TO (MAXVALUE)"), "partition");
    CHECK(pg_command(s.obs, "UPDATE chime.shards SET owner = 'a', token = 1, epoch = 5,"
                            " expires = now() + interval '1 hour'"), "lease");
    CHECK(pg_command(s.obs, "INSERT INTO chime.timers (part, shard, key, version, due, payload)"
                            " VALUES (1000, 0, 'k-0'::bytea, 100, 1000, 'old'::bytea),"
                            " (1000, 0, 'a-0'::bytea, 50, 1000, 'old-a'::bytea)"), "timers");
    CHECK(pg_command(s.obs, "INSERT INTO chime.keys (key, version, part, shard, attempt,"
                            " fire_epoch) VALUES ('k-0'::bytea, 100, 1000, 0, 1, 5),"
                            " ('a-0'::bytea, 50, 1000, 0, 0, 0)"), "keys");
    if (with_dead)
        CHECK(pg_command(s.obs, "INSERT INTO chime.dead (key, shard, due, attempt, payload, died)"
                                " VALUES ('k-0'::bytea, 0, 10, 3, 'dead-k'::bytea, now()),"
                                " ('a-0'::bytea, 0, 10, 3, 'dead-a'::bytea, now())"), "dead");
    return s;
}

static void finish(struct session *s)
{
    PQfinish(s->obs);
    PQfinish(s->hold);
    PQfinish(s->lane);
    PQfinish(s->owner);
}

/* The owner's retry of k-0's firing (version 100, epoch 5): due 2000, payload "retry-of-old".
 * Return: how many retries it recorded (0 or 1). */
static int retry_k0(PGconn *c)
{
    const char *p[10] = { "{k-0}", "{100}", "{0}", "{5}", "{2000}", "{2000}", "{1}",
                          "{retry-of-old}", "a", "1" };
    PGresult *r = PQexecParams(c, PG_SQL_RETRY, 10, NULL, p, NULL, NULL, 0);
    CHECK(PQresultStatus(r) == PGRES_TUPLES_OK, "retry: %s", PQerrorMessage(c));
    int n = PQntuples(r);
    PQclear(r);
    return n;
}

/* Send a lane's statement for a-0 and k-0 while a-0's row is held, wait until it waits for that
 * row, let the owner retry k-0 meanwhile (which must be recorded: nothing has replaced version 100
 * yet), then release a-0. Return: the rows the lane's statement returned. */
static int behind_a_retry(struct session *s, const char *sql, int nparams, const char *const *p)
{
    pg_hold_key(s->hold, "a-0");
    CHECK(PQsendQueryParams(s->lane, sql, nparams, NULL, p, NULL, NULL, 0), "send");
    while (!pg_blocked(s->obs, PQbackendPID(s->lane)))
        sleep_ms(2); /* a poll of the server's lock table */
    CHECK_EQ(retry_k0(s->owner), 1);
    CHECK(pg_command(s->hold, "ROLLBACK"), "release a-0");
    int rows = 0;
    PGresult *r;
    while ((r = PQgetResult(s->lane))) {
        CHECK(PQresultStatus(r) == PGRES_TUPLES_OK, "the lane's statement: %s",
              PQerrorMessage(s->lane));
        rows += PQntuples(r);
        PQclear(r);
    }
    return rows;
}

/* k-0's pending payload (its latest version's), in out. */
static void pending_payload(PGconn *c, char *out, size_t n)
{
    PGresult *r = PQexec(c, "SELECT encode(t.payload, 'escape') FROM chime.keys k"
                            " JOIN chime.timers t ON t.key = k.key AND t.version = k.version"
                            " WHERE k.key = 'k-0'::bytea AND k.end_epoch IS NULL");
    CHECK(PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1, "k-0 is not pending");
    snprintf(out, n, "%s", PQgetvalue(r, 0, 0));
    PQclear(r);
}

static void test_a_put_that_meets_the_retry_of_what_it_replaces_still_takes_effect(void)
{
    struct session s = fresh("put_retry", false);
    const char *put[6] = { "{a-0,k-0}", "{5000000,9000000}", "{5000000,9000000}", "{0,0}",
                           "{0,0}", "{new-a,new-k}" };
    /* the retry commits while the put waits: the put comes after it, and replaces it */
    CHECK_EQ(behind_a_retry(&s, PG_SQL_PUT, 6, put), 2); /* both reported done */
    char payload[64];
    pending_payload(s.obs, payload, sizeof payload);
    CHECK(!strcmp(payload, "new-k"), "k-0's put, reported done, lost to the retry of the timer it"
          " replaced: pending payload %s", payload);
    CHECK_EQ(pg_value(s.obs, "SELECT due FROM chime.timers t JOIN chime.keys k USING (key, version)"
                             " WHERE key = 'k-0'::bytea"), 9000000);
    /* the other order: once the put has replaced version 100, its retry is refused */
    CHECK_EQ(retry_k0(s.owner), 0);
    pending_payload(s.obs, payload, sizeof payload);
    CHECK(!strcmp(payload, "new-k"), "a retry of a replaced version took effect: %s", payload);
    finish(&s);
}

static void test_a_requeue_that_meets_the_retry_of_what_it_replaces_still_takes_effect(void)
{
    struct session s = fresh("requeue_retry", true);
    const char *rq[3] = { "{a-0,k-0}", "{5000000,9000000}", "{5000000,9000000}" };
    CHECK_EQ(behind_a_retry(&s, PG_SQL_REQUEUE, 3, rq), 2); /* both reported requeued */
    CHECK_EQ(pg_value(s.obs, "SELECT count(*) FROM chime.dead"), 0);
    char payload[64];
    pending_payload(s.obs, payload, sizeof payload);
    CHECK(!strcmp(payload, "dead-k"), "k-0's dead letter, reported requeued, is neither dead nor"
          " pending: pending payload %s", payload);
    CHECK_EQ(retry_k0(s.owner), 0);
    finish(&s);
}


/* A burial of k-0 (the owner's) meets a requeue of k-0's dead letter (any node's) batched behind
 * a-0, whose row is held: the requeue has deleted both dead letters and waits for a-0's row of
 * keys; the burial locks k-0's row of keys, then waits for the dead letter the requeue deleted.
 * Released, the requeue goes on to k-0's row of keys: each waits for the other. statements.h
 * orders rows by key so that a lane never meets such a cycle; the two statements lock the two
 * tables in opposite orders (keys then dead, dead then keys), and the server breaks the cycle
 * only after deadlock_timeout (1 s), aborting one of them: its lane's whole batch waits that
 * long and runs again. Both statements must complete. */
static void test_a_burial_that_meets_a_requeue_of_its_key_completes(void)
{
    struct session s = fresh("bury_requeue", true);
    const char *rq[3] = { "{a-0,k-0}", "{5000000,9000000}", "{5000000,9000000}" };
    const char *bury[9] = { "{k-0}", "{100}", "{0}", "{5}", "{1000}", "{1}", "{buried}", "a",
                            "1" };
    pg_hold_key(s.hold, "a-0");
    CHECK(PQsendQueryParams(s.lane, PG_SQL_REQUEUE, 3, NULL, rq, NULL, NULL, 0), "send");
    while (!pg_blocked(s.obs, PQbackendPID(s.lane)))
        sleep_ms(2); /* a poll of the server's lock table */
    CHECK(PQsendQueryParams(s.owner, PG_SQL_BURY, 9, NULL, bury, NULL, NULL, 0), "send");
    /* a poll: the burial waits for the requeue's deleted dead letter, or (the requeue holding
     * nothing of k-0 yet) is done */
    while (PQconsumeInput(s.owner) && PQisBusy(s.owner) &&
           !pg_blocked(s.obs, PQbackendPID(s.owner)))
        sleep_ms(2);
    CHECK(pg_command(s.hold, "ROLLBACK"), "release a-0");
    PGconn *both[2] = { s.lane, s.owner };
    for (int i = 0; i < 2; i++) {
        PGresult *r;
        while ((r = PQgetResult(both[i]))) {
            const char *state = PQresultErrorField(r, PG_DIAG_SQLSTATE);
            CHECK(PQresultStatus(r) == PGRES_TUPLES_OK || PQresultStatus(r) == PGRES_COMMAND_OK,
                  "the %s: SQLSTATE %s: %s", i ? "burial" : "requeue", state ? state : "-",
                  PQerrorMessage(both[i]));
            PQclear(r);
        }
    }
    finish(&s);
}

int main(void)
{
    static const struct tap_test tests[] = {
        { "a_put_that_meets_the_retry_of_what_it_replaces_still_takes_effect",
          test_a_put_that_meets_the_retry_of_what_it_replaces_still_takes_effect },
        { "a_requeue_that_meets_the_retry_of_what_it_replaces_still_takes_effect",
          test_a_requeue_that_meets_the_retry_of_what_it_replaces_still_takes_effect },
        { "a_burial_that_meets_a_requeue_of_its_key_completes",
          test_a_burial_that_meets_a_requeue_of_its_key_completes },
    };
    return pg_tests_main(&cluster, tests, (int)(sizeof tests / sizeof *tests));
}
