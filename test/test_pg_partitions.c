/* SPDX-License-Identifier: MIT */
/*
 * The partitions of chime.timers (lib/store/pg/schema.c, SETTLED PARTITIONS): a partition is
 * dropped only once nothing in it is pending, even when a put commits into it while the
 * housekeeper is settling it; one is created only when no reader holds the table. The
 * housekeeper's step runs on a connection of the test's, and the interleavings are made with
 * PostgreSQL's own locks, waited for through pg_blocking_pids (no timing: each step waits for the
 * state it needs).
 */
#include "pg_test.h"
#include "store/pg/statements.h"

static struct pg_cluster cluster;
static char conninfo[600];

#define WIDTH SEC /* partitions of one second: the smallest `init --partition-seconds` allows */

static void fresh(void)
{
    pg_fresh_db(&cluster, "parts", 1, (unsigned)(WIDTH / SEC), conninfo, sizeof conninfo, NULL);
}

/* A put exactly as a lane sends it (statements.h), of one key into shard 0 with part `part`,
 * sent without waiting for its result. */
static void send_put(PGconn *c, const char *key, uint64_t part)
{
    char keys[64], parts[32];
    snprintf(keys, sizeof keys, "{\"\\\\x%02x%02x%02x\"}", key[0], key[1], key[2]);
    snprintf(parts, sizeof parts, "{%llu}", (unsigned long long)part);
    const char *v[6] = { keys, parts, parts, "{0}", "{0}", "{\"\\\\x70\"}" };
    CHECK(PQsendQueryParams(c, PG_SQL_PUT, 6, NULL, v, NULL, NULL, 0), "send: %s",
          PQerrorMessage(c));
}

struct house {
    struct pg_conn pc;
    struct pg_schema sc;
    int rc;
    unsigned dropped;
};

static void house_open(struct house *h)
{
    *h = (struct house){ .pc = { .conninfo = conninfo, .role = "house" } };
    CHECK_EQ(chime__pg_connect(&h->pc), 0);
    CHECK_EQ(chime__pg_schema_read(&h->pc, &h->sc), 0);
}

/* A cancelled timer (the key "tom") whose row is in the partition of `part`, ended an hour ago
 * (older than the tombstones the housekeeper keeps: schema.c, TOMBSTONE_AGE). */
static void tombstone(PGconn *c, uint64_t part)
{
    char sql[600];
    snprintf(sql, sizeof sql,
             "WITH v AS (SELECT nextval('chime.versions') * 4096 + 1 AS version),"
             " t AS (INSERT INTO chime.timers (part, shard, key, version, due, payload)"
             " SELECT %llu, 0, '\\x746f6d'::bytea, version, %llu, '\\x78' FROM v)"
             " INSERT INTO chime.keys (key, version, part, shard, attempt, end_epoch, ended_at)"
             " SELECT '\\x746f6d'::bytea, version, %llu, 0, 0, 0, now() - interval '1 hour' FROM v",
             (unsigned long long)part, (unsigned long long)part, (unsigned long long)part);
    CHECK(pg_command(c, sql), "the tombstone");
}

static void *house_main(void *arg)
{
    struct house *h = arg;
    h->rc = chime__pg_partitions_retire(&h->pc, &h->sc, wall_ns(), &h->dropped);
    return NULL;
}

/*
 * A partition that ended long ago holds one cancelled timer (a tombstone). The housekeeper checks
 * it for pending rows and starts deleting the tombstone, which a third session holds locked; a put
 * (a lane whose part was taken before an outage, or on a clock that is behind) then commits a row
 * into that partition. Whatever the order the database lets these run in, a put it acknowledged
 * keeps its row: the partition must not be dropped under it.
 */
static void test_a_put_committed_while_its_partition_is_settled_is_never_dropped(void)
{
    fresh();
    struct house h;
    house_open(&h);
    uint64_t n = wall_ns() / WIDTH - 10; /* ended nine widths ago: settled unless pending */
    uint64_t part = n * WIDTH + WIDTH / 2;
    CHECK_EQ(chime__pg_partitions_ensure(&h.pc, &h.sc, part, part), PG_OK);

    PGconn *c = pg_connect_or_die(conninfo);
    tombstone(c, part);

    PGconn *holder = pg_connect_or_die(conninfo); /* holds the tombstone's keys row */
    CHECK(pg_command(holder, "BEGIN"), "begin");
    CHECK(pg_command(holder, "SELECT 1 FROM chime.keys WHERE key = '\\x746f6d' FOR UPDATE"),
          "lock the tombstone");

    int house_pid = PQbackendPID(h.pc.c);
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, house_main, &h), 0);
    while (!pg_blocked(c, house_pid)) /* past its check, deleting the tombstone */
        sleep_ms(2); /* a poll of the database: there is nothing to wait on */

    PGconn *put = pg_connect_or_die(conninfo);
    int put_pid = PQbackendPID(put);
    send_put(put, "pnd", part);
    for (;;) { /* until the put is done, or waits for the housekeeper */
        CHECK(PQconsumeInput(put), "put: %s", PQerrorMessage(put));
        if (!PQisBusy(put) || pg_blocked(c, put_pid))
            break;
        sleep_ms(2); /* as above */
    }
    CHECK(pg_command(holder, "COMMIT"), "release the tombstone");
    CHECK_EQ(pthread_join(t, NULL), 0);

    PGresult *r = PQgetResult(put);
    int acknowledged = PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1;
    printf("# the put %s; the housekeeper returned %d and dropped %u\n",
           acknowledged ? "committed" : "failed", h.rc, h.dropped);
    PQclear(r);
    while ((r = PQgetResult(put)))
        PQclear(r);
    if (acknowledged)
        CHECK_EQ(pg_value(c, "SELECT count(*) FROM chime.timers WHERE key = '\\x706e64'"), 1);
    /* In every case: no pending key without its row (chime.pending joins the two). */
    CHECK_EQ(pg_value(c, "SELECT count(*) FROM chime.keys WHERE end_epoch IS NULL"),
             pg_value(c, "SELECT count(*) FROM chime.pending"));
    /* A later round keeps the partition while the put is pending. */
    if (acknowledged) {
        house_main(&h);
        CHECK_EQ(h.rc, PG_OK);
        CHECK_EQ(h.dropped, 0);
        CHECK_EQ(pg_value(c, "SELECT count(*) FROM chime.pending"), 1);
    }
    PQfinish(put);
    PQfinish(holder);
    PQfinish(c);
    chime__pg_disconnect(&h.pc);
}

/* Nothing pending and nobody in the way: the partition and its tombstones go. */
static void test_a_settled_partition_is_dropped_with_its_tombstones(void)
{
    fresh();
    struct house h;
    house_open(&h);
    uint64_t n = wall_ns() / WIDTH - 10;
    uint64_t part = n * WIDTH + WIDTH / 2;
    CHECK_EQ(chime__pg_partitions_ensure(&h.pc, &h.sc, part, part), PG_OK);
    PGconn *c = pg_connect_or_die(conninfo);
    tombstone(c, part);
    char sql[120];
    house_main(&h);
    CHECK_EQ(h.rc, PG_OK);
    CHECK(h.dropped >= 1, "dropped %u", h.dropped);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM pg_class WHERE relname = 'timers_%llu'",
             (unsigned long long)n);
    CHECK_EQ(pg_value(c, sql), 0);
    CHECK_EQ(pg_value(c, "SELECT count(*) FROM chime.keys"), 0);
    PQfinish(c);
    chime__pg_disconnect(&h.pc);
}

/*
 * A partition made while a reader (a load, a poll) holds chime.timers: it is attached beside it
 * (schema.c, ensure_one), where CREATE TABLE ... PARTITION OF needed the table exclusively and
 * waited for the reader to end (while a reader can wait for the put that needs the partition:
 * test_pg_loader). A put into it goes through with the reader still open. Behind a session whose
 * lock does conflict (here a LOCK TABLE, as a manual VACUUM takes), it gives up after a moment
 * (PG_RETRY) instead of waiting in the lock queue, where every put and read after it would wait
 * behind it; once that session ends, the partition is made.
 */
static void test_a_partition_is_made_beside_a_reader_and_not_behind_a_lock(void)
{
    fresh();
    struct house h;
    house_open(&h);
    uint64_t now = wall_ns(), later = now + 1000 * WIDTH, last = now + 2000 * WIDTH;
    CHECK_EQ(chime__pg_partitions_ensure(&h.pc, &h.sc, now, now), PG_OK);
    PGconn *reader = pg_connect_or_die(conninfo), *c = pg_connect_or_die(conninfo);
    CHECK(pg_command(reader, "BEGIN"), "begin");
    CHECK_EQ(pg_value(reader, "SELECT count(*) FROM chime.timers"), 0);
    CHECK_EQ(chime__pg_partitions_ensure(&h.pc, &h.sc, later, later), PG_OK);
    send_put(c, "abc", later);
    PGresult *r;
    int ok = 0;
    while ((r = PQgetResult(c))) {
        ok |= PQresultStatus(r) == PGRES_TUPLES_OK;
        PQclear(r);
    }
    CHECK(ok, "the put beside the reader: %s", PQerrorMessage(c));
    CHECK(pg_command(reader, "COMMIT"), "commit");
    CHECK(pg_command(reader, "BEGIN; LOCK TABLE chime.timers IN SHARE UPDATE EXCLUSIVE MODE"),
          "lock");
    CHECK_EQ(chime__pg_partitions_ensure(&h.pc, &h.sc, last, last), PG_RETRY);
    CHECK(pg_command(reader, "COMMIT"), "commit");
    CHECK_EQ(chime__pg_partitions_ensure(&h.pc, &h.sc, last, last), PG_OK);
    char sql[240];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM pg_class WHERE relname = 'timers_%llu'",
             (unsigned long long)(last / WIDTH));
    CHECK_EQ(pg_value(c, sql), 1);
    CHECK_EQ(pg_value(c, "SELECT count(*) FROM chime.timers WHERE key = '\\x616263'"), 1);
    /* attached, it has the parent's indexes, as a partition created in it has: the polls read
     * through the BRIN index on tx (firing.c), summarized as rows come */
    snprintf(sql, sizeof sql, "SELECT count(*) FROM pg_indexes WHERE tablename = 'timers_%llu'"
             " AND (indexdef LIKE '%%(shard, part)' OR indexdef LIKE '%%brin (tx)%%')",
             (unsigned long long)(later / WIDTH));
    CHECK_EQ(pg_value(c, sql), 2);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM pg_class WHERE relname LIKE 'timers_%llu%%'"
             " AND 'autosummarize=on' = ANY(reloptions)", (unsigned long long)(later / WIDTH));
    CHECK_EQ(pg_value(c, sql), 1);
    PQfinish(reader);
    PQfinish(c);
    chime__pg_disconnect(&h.pc);
}

/* The partitions of chime.timers there are now. */
static long long partitions(PGconn *c)
{
    return pg_value(c, "SELECT count(*) FROM pg_inherits"
                       " WHERE inhparent = 'chime.timers'::regclass");
}

struct opener {
    struct chime_store_config cfg;
    chime_store *s;
    struct recorder rec;
    _Atomic int done;
    int rc;
};

static void *open_main(void *arg)
{
    struct opener *o = arg;
    o->rc = pg_open_config(&o->s, &o->cfg, &o->rec);
    atomic_store(&o->done, 1);
    return NULL;
}

/*
 * The housekeeper makes the partitions ahead of puts (house.c), before open returns: those of the
 * next notify_ns (a horizon and a quarter) and two widths. A node whose horizon is long beside the
 * width made one partition per width of it: UINT64_MAX ("everything in memory"), which the journal
 * takes as it is, wrapped around to 2^62 ns, and open went on creating partitions for years of
 * them (found in review). What it makes ahead is bounded; a put beyond makes its own (lanes.c).
 */
static void test_a_long_horizon_makes_a_bounded_stretch_of_partitions(void)
{
    fresh();
    PGconn *c = pg_connect_or_die(conninfo);
    long long before = partitions(c);
    struct opener o = { .rc = -1 };
    recorder_init(&o.rec, NULL);
    pg_node_config(&o.cfg, conninfo, "far", 0, UINT64_MAX);
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, open_main, &o), 0);
    long long made;
    while ((made = partitions(c) - before) <= 100 && !atomic_load(&o.done))
        sleep_ms(5); /* a poll of the database: the open reports nothing while it runs */
    CHECK(atomic_load(&o.done), "open has made %lld partitions ahead and goes on", made);
    CHECK_EQ(pthread_join(t, NULL), 0);
    CHECK_EQ(o.rc, 0);
    CHECK(made <= 100, "open made %lld partitions", made);
    uint64_t due = wall_ns() + 500 * WIDTH; /* beyond them: the put makes its partition */
    CHECK_EQ(chime_store_put(o.s, "late", 4, "x", 1, due), 0);
    char sql[120];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM pg_class WHERE relname = 'timers_%llu'",
             (unsigned long long)(due / WIDTH));
    CHECK_EQ(pg_value(c, sql), 1);
    CHECK_EQ(chime_store_close(o.s), 0);
    recorder_free(&o.rec);
    PQfinish(c);
}

int main(void)
{
    static const struct tap_test tests[] = {
        { "a_put_committed_while_its_partition_is_settled_is_never_dropped",
          test_a_put_committed_while_its_partition_is_settled_is_never_dropped },
        { "a_settled_partition_is_dropped_with_its_tombstones",
          test_a_settled_partition_is_dropped_with_its_tombstones },
        { "a_partition_is_made_beside_a_reader_and_not_behind_a_lock",
          test_a_partition_is_made_beside_a_reader_and_not_behind_a_lock },
        { "a_long_horizon_makes_a_bounded_stretch_of_partitions",
          test_a_long_horizon_makes_a_bounded_stretch_of_partitions },
    };
    return pg_tests_main(&cluster, tests, (int)(sizeof tests / sizeof *tests));
}
