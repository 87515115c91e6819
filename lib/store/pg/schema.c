/* SPDX-License-Identifier: MIT */
/*
 * The schema `chime` (version 4), created by `chime-store --postgres CONNINFO init` and checked by
 * every open; and the partitions of chime.timers, created ahead of time and dropped once settled.
 *
 * TABLES (docs/design.md, "The schema", says what each column is for; COMMENT ON says it in psql)
 *   meta     name -> value: schema_version, shards, partition_ns, created
 *   versions a sequence: each statement that writes versions draws one value n and numbers its rows
 *            n * 4096 + i (statements.h; version 1 of the schema drew one value per row)
 *   nodes    one row per node process: node (its name), token (its incarnation), expires (its
 *            heartbeat: alive while expires > now())
 *   shards   one row per shard: owner, token, epoch, expires (the lease), since
 *   leases   one row per acquisition: (shard, epoch) -> owner, acquired (history, kept 7 days)
 *   keys     one row per key: the key's latest version (pending, or ended: a tombstone), where its
 *            timer row is (shard, part), attempts recorded, fire_epoch (the epoch that recorded the
 *            latest firing, 0 if none), end_epoch (NULL while pending; 0 cancelled; else the epoch
 *            of the acknowledgement or burial) and ended_at
 *   timers   one row per put (every version): part, shard, key, version, due, payload, tx (the
 *            inserting transaction's id, for polls). PARTITION BY RANGE (part), one partition per
 *            partition_ns of part; part is the due time, or the time of the put if that is later
 *            (by the putting node's clock, taken before each attempt of its lane's transaction),
 *            so puts rarely land in a partition that has ended; a skewed clock or a slow commit
 *            can still put one there, which the settling below allows for. Insert-only.
 *   dead     one row per key with a dead letter: shard, due, attempt, payload, died, seq (order)
 *   marks    one row per try of a write lane's batch, committed with it: (token, lane, batch),
 *            node, at, fence (false); a lane that lost a COMMIT's reply inserts the try's as a
 *            fence (true) unless it is there (pg.h, P6; batch.c, resolve). The node's housekeeper
 *            deletes its try marks but each lane's latest, close the rest; any housekeeper deletes
 *            what is a day old, fences included (version 2 had no marks, version 3 no fences)
 *
 * SETTLED PARTITIONS. A partition whose range ended at least one partition width ago and none of
 * whose rows is a pending version (keys.end_epoch IS NULL with that version) is settled: the
 * tombstones of the versions in it are deleted from keys, then the partition is dropped. The check
 * is made again in the transaction that drops the partition, after locking it (ACCESS EXCLUSIVE),
 * so that no put can commit a row into it between the check and the drop (retire_one). No row of
 * timers is ever deleted or updated, so it is never vacuumed row by row; keys (one small row per
 * live key) is the only table whose rows are deleted.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/hash.h"
#include "store/pg/pg.h"

static const char *const create_sql[] = {
    "CREATE SCHEMA chime",
    "COMMENT ON SCHEMA chime IS 'durable timers of chime_store (docs/design.md, Durable timers on "
    "PostgreSQL); created by chime-store init'",
    "CREATE TABLE chime.meta (name text PRIMARY KEY, value text NOT NULL)",
    "CREATE TABLE chime.nodes (node text PRIMARY KEY, token bigint NOT NULL,"
    " expires timestamptz NOT NULL, joined timestamptz NOT NULL DEFAULT now())",
    "COMMENT ON TABLE chime.nodes IS 'one row per node process; alive while expires > now()'",
    "CREATE TABLE chime.shards (shard int PRIMARY KEY, owner text, token bigint,"
    " epoch bigint NOT NULL DEFAULT 0, expires timestamptz NOT NULL DEFAULT '-infinity',"
    " since timestamptz)",
    "COMMENT ON TABLE chime.shards IS 'the lease on each shard: its owner fires its timers while "
    "expires > now(); every acquisition increments epoch'",
    "CREATE TABLE chime.leases (shard int NOT NULL, epoch bigint NOT NULL, owner text NOT NULL,"
    " acquired timestamptz NOT NULL, PRIMARY KEY (shard, epoch))",
    "COMMENT ON TABLE chime.leases IS 'every acquisition of a shard (history, kept 7 days)'",
    "CREATE SEQUENCE chime.versions CACHE 1",
    "COMMENT ON SEQUENCE chime.versions IS 'each statement that writes timers draws one value n; "
    "its i-th row (from 1) gets version n * 4096 + i'",
    /* fillfactor 50: a key's row is updated twice per timer (firing, then end); with room on its
     * page an update is HOT, no new index entry (docs/design.md, "The schema"). */
    "CREATE TABLE chime.keys (key bytea PRIMARY KEY, version bigint NOT NULL, part bigint NOT NULL,"
    " shard int NOT NULL, attempt int NOT NULL, fire_epoch bigint NOT NULL DEFAULT 0,"
    " end_epoch bigint, ended_at timestamptz) WITH (fillfactor = 50)",
    "COMMENT ON TABLE chime.keys IS 'each key''s latest version: pending while end_epoch IS NULL "
    "(firing if fire_epoch <> 0); end_epoch 0 = cancelled, else the epoch that acknowledged or "
    "buried it'",
    "CREATE TABLE chime.timers (part bigint NOT NULL, shard int NOT NULL, key bytea NOT NULL,"
    " version bigint NOT NULL, due bigint NOT NULL, payload bytea NOT NULL,"
    " tx bigint NOT NULL DEFAULT (pg_current_xact_id()::text::bigint)) PARTITION BY RANGE (part)",
    "COMMENT ON TABLE chime.timers IS 'every put (insert-only), partitioned by part (the due time, "
    "or the put''s time if later); settled partitions are dropped'",
    "CREATE INDEX timers_shard_part ON chime.timers (shard, part)",
    "CREATE INDEX timers_tx ON chime.timers USING brin (tx) WITH (autosummarize = on)",
    "CREATE SEQUENCE chime.dead_order",
    "CREATE TABLE chime.dead (key bytea PRIMARY KEY, shard int NOT NULL, due bigint NOT NULL,"
    " attempt int NOT NULL, payload bytea NOT NULL, died timestamptz NOT NULL,"
    " seq bigint NOT NULL DEFAULT nextval('chime.dead_order'))",
    "COMMENT ON TABLE chime.dead IS 'dead letters: timers whose handler gave up or ran out of "
    "attempts'",
    "CREATE TABLE chime.marks (token bigint NOT NULL, lane int NOT NULL, batch bigint NOT NULL,"
    " node text NOT NULL, at timestamptz NOT NULL DEFAULT now(), fence boolean NOT NULL DEFAULT"
    " false, PRIMARY KEY (token, lane, batch))",
    "COMMENT ON TABLE chime.marks IS 'one row per committed write of a node process (token), or "
    "per fence: whether a write whose reply was lost committed (fence false) or never will (fence "
    "true); older ones are deleted'",
    "CREATE VIEW chime.pending AS SELECT k.key, k.shard, to_timestamp(t.due / 1e9) AS due,"
    " t.due AS due_ns, k.attempt, k.fire_epoch <> 0 AS firing, k.version,"
    " length(t.payload) AS payload_bytes FROM chime.keys k JOIN chime.timers t"
    " ON t.shard = k.shard AND t.part = k.part AND t.key = k.key AND t.version = k.version"
    " WHERE k.end_epoch IS NULL",
    "CREATE VIEW chime.cluster AS SELECT n.node, n.expires > now() AS alive, n.expires, n.joined,"
    " (SELECT count(*) FROM chime.shards s WHERE s.owner = n.node AND s.token = n.token"
    " AND s.expires > now()) AS shards FROM chime.nodes n",
};

int chime__pg_schema_read(struct pg_conn *pc, struct pg_schema *out)
{
    PGresult *r = NULL;
    int rc = chime__pg_run(pc, "SELECT to_regclass('chime.meta') IS NOT NULL", &r);
    if (rc != PG_OK)
        return rc;
    int exists = PQntuples(r) == 1 && PQgetvalue(r, 0, 0)[0] == 't';
    PQclear(r);
    if (!exists)
        return -ENOENT;
    r = NULL;
    rc = chime__pg_run(pc, "SELECT (SELECT value FROM chime.meta WHERE name = 'schema_version'),"
                           " (SELECT value FROM chime.meta WHERE name = 'shards'),"
                           " (SELECT value FROM chime.meta WHERE name = 'partition_ns')",
                       &r);
    if (rc == PG_OK) {
        long version = atol(PQgetvalue(r, 0, 0));
        out->shards = (unsigned)strtoul(PQgetvalue(r, 0, 1), NULL, 10);
        out->partition_ns = strtoull(PQgetvalue(r, 0, 2), NULL, 10);
        if (version != PG_SCHEMA_VERSION || !out->shards || out->shards > PG_MAX_SHARDS ||
            !out->partition_ns)
            rc = -EPROTO;
    }
    PQclear(r);
    return rc;
}

int chime__pg_schema_create(struct pg_conn *pc, unsigned shards, uint64_t partition_ns,
                            struct pg_schema *found)
{
    if (!shards || shards > PG_MAX_SHARDS || partition_ns < UINT64_C(1000000000))
        return -EINVAL;
    int rc = chime__pg_schema_read(pc, found);
    if (rc == -EPROTO) /* another version: its shards say nothing (the tool's init reports it) */
        *found = (struct pg_schema){ 0 };
    if (rc == 0 || rc == -EPROTO)
        return -EEXIST;
    if (rc != -ENOENT)
        return rc;
    rc = chime__pg_run(pc, "BEGIN", NULL);
    for (size_t i = 0; rc == PG_OK && i < sizeof create_sql / sizeof *create_sql; i++)
        rc = chime__pg_run(pc, create_sql[i], NULL);
    char sql[256];
    snprintf(sql, sizeof sql,
             "INSERT INTO chime.meta VALUES ('schema_version', '%d'), ('shards', '%u'),"
             " ('partition_ns', '%" PRIu64 "'), ('created', now()::text)",
             PG_SCHEMA_VERSION, shards, partition_ns);
    if (rc == PG_OK)
        rc = chime__pg_run(pc, sql, NULL);
    snprintf(sql, sizeof sql, "INSERT INTO chime.shards (shard) SELECT generate_series(0, %u)",
             shards - 1);
    if (rc == PG_OK)
        rc = chime__pg_run(pc, sql, NULL);
    if (rc == PG_OK)
        rc = chime__pg_run(pc, "COMMIT", NULL);
    if (rc != PG_OK) {
        if (rc != PG_LOST)
            chime__pg_run(pc, "ROLLBACK", NULL);
        return rc;
    }
    found->shards = shards;
    found->partition_ns = partition_ns;
    return 0;
}

/* The partition holding part p: number p / width, range [n * width, (n + 1) * width). */
static int ensure_one(struct pg_conn *pc, uint64_t width, uint64_t n)
{
    char sql[600], name[64], hi[32];
    snprintf(name, sizeof name, "chime.timers_%" PRIu64, n);
    if ((n + 1) > (uint64_t)INT64_MAX / width)
        snprintf(hi, sizeof hi, "MAXVALUE");
    else
        snprintf(hi, sizeof hi, "%" PRIu64, (n + 1) * width);
    /* Nodes create the same partitions at once; IF NOT EXISTS alone does not make that safe (the
     * loser's catalog insert fails), so creators queue on one advisory lock, held to the commit.
     * Made as a table of its own, then attached: CREATE TABLE ... PARTITION OF locks chime.timers
     * exclusively, and waited for every reader (a load, a poll) to end, while a reader can itself
     * wait for the put that needs the partition (a loader arming under a stripe lock that a cancel
     * holds while its lane's put waits): a cycle the server cannot see, which the lock_timeout
     * below only turned into the lane trying again until the server ended the loader's session
     * (found in review twice; test_pg_loader). ATTACH PARTITION locks chime.timers SHARE UPDATE
     * EXCLUSIVE, which readers and writers do not conflict with. What it still conflicts with (a
     * manual VACUUM or ANALYZE, a DROP of a settled partition) it waits for 100 ms at most
     * (PG_RETRY), and its caller tries again. */
    snprintf(sql, sizeof sql,
             "BEGIN; SET LOCAL lock_timeout = '100ms'; SELECT pg_advisory_xact_lock(%d);"
             " DO $$BEGIN IF to_regclass('%s') IS NULL THEN"
             " CREATE TABLE %s (LIKE chime.timers INCLUDING DEFAULTS);"
             " ALTER TABLE chime.timers ATTACH PARTITION %s FOR VALUES FROM (%" PRIu64 ") TO (%s);"
             " END IF; END$$; COMMIT",
             PG_LOCK_PARTITIONS, name, name, name, n * width, hi);
    int rc = chime__pg_run(pc, sql, NULL);
    if (rc != PG_OK && rc != PG_LOST)
        chime__pg_run(pc, "ROLLBACK", NULL);
    return rc;
}

int chime__pg_partitions_ensure(struct pg_conn *pc, const struct pg_schema *sc, uint64_t from,
                                uint64_t to)
{
    int rc = PG_OK;
    for (uint64_t n = from / sc->partition_ns; rc == PG_OK && n <= to / sc->partition_ns; n++)
        rc = ensure_one(pc, sc->partition_ns, n);
    return rc;
}

int chime__pg_partition_need(struct pg_conn *pc, const struct pg_schema *sc, uint64_t part,
                             struct pg_parts_made *m)
{
    const size_t slots = sizeof m->n / sizeof *m->n;
    uint64_t n = part / sc->partition_ns;
    for (size_t i = 0; i < m->count && i < slots; i++)
        if (m->n[i] == n)
            return PG_OK;
    int rc = ensure_one(pc, sc->partition_ns, n);
    if (rc == PG_OK)
        m->n[m->count++ % slots] = n;
    return rc;
}

/* How long a tombstone is kept after its version ended, by the database's clock: longer than a
 * statement may run (statement_timeout, 60 s: conn.c), so that a put whose statement drew its
 * version base before the ended version was written has finished before the tombstone goes, and
 * met it (P4). Bounding it by the partition width instead (a version written after the put began
 * has its part after that, so its partition settles at least a width later) holds only for widths
 * above 60 s; init allows 1 s (found in review; test_pg_retire 7 and 9). */
#define TOMBSTONE_AGE "interval '2 minutes'"

/* Whether partition n holds a pending version, or a tombstone younger than TOMBSTONE_AGE.
 * Return: 1, 0, or PG_*. */
static int has_pending(struct pg_conn *pc, uint64_t n)
{
    char sql[320];
    snprintf(sql, sizeof sql,
             "SELECT EXISTS (SELECT 1 FROM chime.timers_%" PRIu64 " t JOIN chime.keys k"
             " ON k.key = t.key AND k.version = t.version WHERE k.end_epoch IS NULL"
             " OR k.ended_at > now() - " TOMBSTONE_AGE ")",
             n);
    PGresult *r = NULL;
    int rc = chime__pg_run(pc, sql, &r);
    int pending = rc == PG_OK && PQntuples(r) == 1 && PQgetvalue(r, 0, 0)[0] == 't';
    PQclear(r);
    return rc != PG_OK ? rc : pending;
}

/* Delete the tombstones of the versions in partition n older than TOMBSTONE_AGE (harmless
 * whether or not it is dropped: an ended version's row is never read, and no put that began
 * before it can still be running). */
static int delete_tombstones(struct pg_conn *pc, uint64_t n)
{
    char sql[320];
    snprintf(sql, sizeof sql,
             "DELETE FROM chime.keys k USING chime.timers_%" PRIu64 " t"
             " WHERE k.key = t.key AND k.version = t.version AND k.end_epoch IS NOT NULL"
             " AND k.ended_at <= now() - " TOMBSTONE_AGE,
             n);
    return chime__pg_run(pc, sql, NULL);
}

/*
 * Settle partition n (see SETTLED PARTITIONS). Return: 1 dropped, 0 not settled yet, or PG_*.
 * The check and the bulk of the deletions run first without a lock, so that readers of the
 * partition (takeovers and polls read from part 0) queue behind no long statement. The decision
 * is then taken again under the partition's lock, in the transaction that drops it: every put
 * committed before the lock is seen by that check (each statement of a READ COMMITTED
 * transaction takes a new snapshot). A put into the partition after the lock waits for it while
 * holding its own lock on chime.timers, which the DROP needs too: the DROP times out, and the put
 * commits into a partition that stays (the next round finds it pending). A put that reaches
 * chime.timers only after the DROP locked it finds no partition once it may go on, and its lane
 * runs it again in a partition of the clock's now (PG_NOPART).
 */
static int retire_one(struct pg_conn *pc, uint64_t n)
{
    int pending = has_pending(pc, n); /* 1, 0, or PG_* */
    if (pending != 0)
        return pending > 0 ? 0 : pending;
    int rc = delete_tombstones(pc, n);
    if (rc != PG_OK)
        return rc;
    /* Never queue behind a long reader (everything else would queue behind us): try, and try
     * again next round. Dropping a partition also locks the parent, for an instant. */
    char sql[200];
    snprintf(sql, sizeof sql,
             "BEGIN; SET LOCAL lock_timeout = '100ms';"
             " LOCK TABLE chime.timers_%" PRIu64 " IN ACCESS EXCLUSIVE MODE",
             n);
    rc = chime__pg_run(pc, sql, NULL);
    if (rc == PG_OK) { /* the decision again, under the lock */
        pending = has_pending(pc, n);
        if (pending < 0)
            rc = pending;
        else if (pending == 0) /* the versions that ended since the first deletion */
            rc = delete_tombstones(pc, n);
    }
    if (rc == PG_OK && pending == 0) {
        snprintf(sql, sizeof sql, "DROP TABLE chime.timers_%" PRIu64, n);
        rc = chime__pg_run(pc, sql, NULL);
    }
    if (rc == PG_OK)
        rc = chime__pg_run(pc, pending ? "ROLLBACK" : "COMMIT", NULL);
    else if (rc != PG_LOST)
        chime__pg_run(pc, "ROLLBACK", NULL);
    if (rc == PG_OK)
        return pending ? 0 : 1;
    return rc == PG_RETRY ? 0 : rc;
}

int chime__pg_partitions_retire(struct pg_conn *pc, const struct pg_schema *sc, uint64_t now,
                                unsigned *dropped)
{
    *dropped = 0;
    PGresult *r = NULL;
    int rc = chime__pg_run(pc, "SELECT c.relname FROM pg_inherits i JOIN pg_class c"
                               " ON c.oid = i.inhrelid"
                               " WHERE i.inhparent = 'chime.timers'::regclass",
                           &r);
    if (rc != PG_OK)
        return rc;
    int rows = PQntuples(r);
    uint64_t *ns = malloc((size_t)(rows ? rows : 1) * sizeof *ns);
    int k = 0;
    for (int i = 0; ns && i < rows; i++) {
        uint64_t n;
        if (sscanf(PQgetvalue(r, i, 0), "timers_%" SCNu64, &n) == 1 &&
            n < UINT64_MAX / sc->partition_ns - 2 && (n + 2) * sc->partition_ns <= now)
            ns[k++] = n; /* ended at least one width ago */
    }
    PQclear(r);
    if (!ns)
        return -ENOMEM;
    for (int i = 0; i < k && rc == PG_OK; i++) {
        int d = retire_one(pc, ns[i]);
        if (d > 0)
            (*dropped)++;
        else if (d < 0)
            rc = d;
    }
    free(ns);
    return rc;
}

unsigned chime__pg_shard_of(const void *key, size_t len, unsigned shards)
{
    return (unsigned)(chime__siphash128(0, 0, key, len).lo % shards);
}
