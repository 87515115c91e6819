/* SPDX-License-Identifier: MIT */
/*
 * The statements a write lane sends (lanes.c), one per kind of operation, each over arrays so that
 * one statement carries a whole batch. Every one orders its rows by key where it can, so that two
 * transactions lock the rows of keys they share in the same order (a deadlock is retried, but costs
 * a round trip).
 *
 * Owner statements (ack, bury, retry) lock the shard rows they act for FOR KEY SHARE (owner and
 * token, and not expired before the transaction began), then check epoch and expiry by the
 * database's clock on the rows they locked: an acquisition locks those rows FOR UPDATE before it
 * changes them, so it waits for them and they fail after it (pg.h, P1). Not FOR SHARE, which the
 * node's own renewal waits behind while the statement waits for a key's row (lease.c, LOCK MODES).
 * The expiry is checked on the row locked, against the statement's start (statement_timestamp()),
 * never against clock_timestamp(): firing.c, FIRE, says why.
 */
#ifndef CHIME_STORE_PG_STATEMENTS_H
#define CHIME_STORE_PG_STATEMENTS_H

/* Versions (P4): a statement draws ONE value n from the sequence chime.versions (cache 1, so in
 * time order) and gives its i-th row (1-based, i < PG_VERSION_ROWS) version
 * n * PG_VERSION_ROWS + i; a row's i can be read back from its version. A put or requeue that
 * finds the key's row takes a value drawn once it holds the row's lock instead
 * (PG_VERSION_LOCKED), greater than every version committed to the row before; a retry keeps the
 * statement's, and is refused if any write changed the row's version meanwhile (its condition is
 * checked again on the row it locks). So a key's versions grow in the order its writes take
 * effect. */
#define PG_VERSION_ROWS 4096
#define PG_STR_(x) #x
#define PG_STR(x) PG_STR_(x)
#define PG_VERSION_BASE "(SELECT nextval('chime.versions') * " PG_STR(PG_VERSION_ROWS) " AS base)"
/* The version of a row that an upsert found and locked (ON CONFLICT ... DO UPDATE evaluates it
 * once it holds the lock): a value of its own, drawn then, and the same i. Drawn at the
 * statement's start, a put's version could be smaller than one a conditional retry drew later but
 * committed first, and the put, reported done, would lose to the retry of the timer it replaced
 * (found in review). */
#define PG_VERSION_LOCKED                                                                          \
    "nextval('chime.versions') * " PG_STR(PG_VERSION_ROWS) " + excluded.version % "                \
    PG_STR(PG_VERSION_ROWS)

/* A user's put: $1 keys, $2 dues, $3 parts, $4 shards, $5 attempts, $6 payloads. The key's row
 * in keys is written first, in key order: a new key takes the statement's version for its i, a
 * key that has a row takes a version drawn once that row is locked (PG_VERSION_LOCKED), so it is
 * greater than every version committed to the row before, the conditional retry's among them
 * (P4). Then one row per put goes into timers with the version its key took (insert-only: a row
 * whose key then keeps a greater version is never read, and goes with its partition). Every put
 * wins: returns (i, version) for each. */
#define PG_SQL_PUT                                                                                 \
    "WITH v AS MATERIALIZED " PG_VERSION_BASE ","                                                  \
    " u AS MATERIALIZED (SELECT * FROM unnest($1::bytea[], $2::int8[], $3::int8[],"                \
    " $4::int4[], $5::int4[], $6::bytea[]) WITH ORDINALITY"                                        \
    " AS u(key, due, part, shard, attempt, payload, i)),"                                          \
    " k AS (INSERT INTO chime.keys AS k (key, version, part, shard, attempt)"                      \
    " SELECT u.key, v.base + u.i, u.part, u.shard, u.attempt FROM v, u"                            \
    " ORDER BY u.key ON CONFLICT (key) DO UPDATE SET version = " PG_VERSION_LOCKED ","             \
    " part = excluded.part, shard = excluded.shard, attempt = excluded.attempt, fire_epoch = 0,"   \
    " end_epoch = NULL, ended_at = NULL RETURNING k.version),"                                     \
    " t AS (INSERT INTO chime.timers (part, shard, key, version, due, payload)"                    \
    " SELECT u.part, u.shard, u.key, k.version, u.due, u.payload FROM k"                           \
    " JOIN u ON u.i = k.version % " PG_STR(PG_VERSION_ROWS) ")"                                    \
    " SELECT k.version % " PG_STR(PG_VERSION_ROWS) ", k.version FROM k"

/* A retry (the owner's, conditional on the version that fired): $1 keys, $2 if_versions,
 * $3 shards, $4 epochs, $5 dues, $6 parts, $7 attempts, $8 payloads, $9 owner, $10 token.
 * Returns (i, version) of the retries that were recorded. */
#define PG_SQL_RETRY                                                                               \
    "WITH f AS (SELECT * FROM unnest($1::bytea[], $2::int8[], $3::int4[], $4::int8[], $5::int8[]," \
    " $6::int8[], $7::int4[], $8::bytea[]) WITH ORDINALITY"                                        \
    " AS f(key, if_version, shard, epoch, due, part, attempt, payload, i)),"                       \
    " s AS MATERIALIZED (SELECT shard, epoch, expires FROM chime.shards"                           \
    " WHERE shard = ANY(ARRAY(SELECT DISTINCT shard FROM f)) AND owner = $9 AND token = $10::int8" \
    " AND expires > now() ORDER BY shard FOR KEY SHARE),"                                          \
    " v AS MATERIALIZED " PG_VERSION_BASE ","                                                      \
    " g AS MATERIALIZED (SELECT f.*, v.base + f.i AS nv FROM v, f"                                 \
    " JOIN s ON s.shard = f.shard AND s.epoch = f.epoch AND s.expires > statement_timestamp()"     \
    " ORDER BY f.key),"                                                                            \
    " k AS (UPDATE chime.keys k SET version = g.nv, part = g.part, attempt = g.attempt,"           \
    " fire_epoch = 0 FROM g WHERE k.key = g.key AND k.version = g.if_version"                      \
    " AND k.end_epoch IS NULL RETURNING k.key, k.version),"                                        \
    " t AS (INSERT INTO chime.timers (part, shard, key, version, due, payload)"                    \
    " SELECT g.part, g.shard, g.key, k.version, g.due, g.payload FROM g JOIN k ON k.key = g.key)"  \
    " SELECT g.i, k.version FROM g JOIN k ON k.key = g.key"

/* Cancels: $1 keys, $2 the version each must not cancel (its firing has begun; 0 none). Ends the
 * pending version unless its firing is recorded or begun (a no-op update then, which reports it).
 * Returns (i, version, cancelled) for each key that had a pending version. */
#define PG_SQL_CANCEL                                                                              \
    "WITH c AS (SELECT * FROM unnest($1::bytea[], $2::int8[]) WITH ORDINALITY AS c(key, firing, i))" \
    " UPDATE chime.keys k SET"                                                                     \
    " end_epoch = CASE WHEN k.fire_epoch = 0 AND k.version <> c.firing THEN 0 END,"                \
    " ended_at = CASE WHEN k.fire_epoch = 0 AND k.version <> c.firing THEN clock_timestamp() END"  \
    " FROM c WHERE k.key = c.key AND k.end_epoch IS NULL"                                          \
    " RETURNING c.i, k.version, k.end_epoch IS NOT NULL"

/* Acknowledgements: $1 keys, $2 versions, $3 shards, $4 epochs, $5 owner, $6 token. */
#define PG_SQL_ACK                                                                                 \
    "WITH f AS (SELECT * FROM unnest($1::bytea[], $2::int8[], $3::int4[], $4::int8[])"             \
    " AS f(key, version, shard, epoch)),"                                                          \
    " s AS MATERIALIZED (SELECT shard, epoch, expires FROM chime.shards"                           \
    " WHERE shard = ANY(ARRAY(SELECT DISTINCT shard FROM f)) AND owner = $5 AND token = $6::int8"  \
    " AND expires > now() ORDER BY shard FOR KEY SHARE)"                                           \
    " UPDATE chime.keys k SET end_epoch = f.epoch, ended_at = clock_timestamp()"                   \
    " FROM f JOIN s ON s.shard = f.shard AND s.epoch = f.epoch"                                    \
    " AND s.expires > statement_timestamp()"                                                       \
    " WHERE k.key = f.key AND k.version = f.version AND k.end_epoch IS NULL"

/* Burials: $1 keys, $2 versions, $3 shards, $4 epochs, $5 dues, $6 attempts, $7 payloads,
 * $8 owner, $9 token. The version ends (as an acknowledgement would) and becomes the key's dead
 * letter, replacing an older one. */
#define PG_SQL_BURY                                                                                \
    "WITH f AS (SELECT * FROM unnest($1::bytea[], $2::int8[], $3::int4[], $4::int8[], $5::int8[]," \
    " $6::int4[], $7::bytea[]) AS f(key, version, shard, epoch, due, attempt, payload)),"          \
    " s AS MATERIALIZED (SELECT shard, epoch, expires FROM chime.shards"                           \
    " WHERE shard = ANY(ARRAY(SELECT DISTINCT shard FROM f)) AND owner = $8 AND token = $9::int8"  \
    " AND expires > now() ORDER BY shard FOR KEY SHARE),"                                          \
    " k AS (UPDATE chime.keys k SET end_epoch = f.epoch, ended_at = clock_timestamp()"             \
    " FROM f JOIN s ON s.shard = f.shard AND s.epoch = f.epoch"                                    \
    " AND s.expires > statement_timestamp()"                                                       \
    " WHERE k.key = f.key AND k.version = f.version AND k.end_epoch IS NULL RETURNING k.key)"      \
    " INSERT INTO chime.dead AS d (key, shard, due, attempt, payload, died)"                       \
    " SELECT f.key, f.shard, f.due, f.attempt, f.payload, clock_timestamp() FROM f"                \
    " JOIN k ON k.key = f.key ORDER BY f.key ON CONFLICT (key) DO UPDATE SET shard = excluded.shard," \
    " due = excluded.due, attempt = excluded.attempt, payload = excluded.payload,"                 \
    " died = excluded.died, seq = nextval('chime.dead_order')"

/* Requeues: $1 keys, $2 dues, $3 parts. The dead letter becomes a put of its payload (attempt 0),
 * its version taken as a put's. Returns (i, version, payload, shard) for each key that had a dead
 * letter. The keys' rows of keys are locked first, in key order, before their dead letters (l,
 * which the deletion's condition evaluates first): a burial locks a key's row of keys and then
 * writes its dead letter, and a requeue that deleted the dead letter first and then waited for the
 * row of keys made a cycle with it, which the server broke only after deadlock_timeout (found in
 * review; test_pg_versions). */
#define PG_SQL_REQUEUE                                                                             \
    "WITH f AS (SELECT * FROM unnest($1::bytea[], $2::int8[], $3::int8[]) WITH ORDINALITY"        \
    " AS f(key, due, part, i)),"                                                                   \
    " l AS MATERIALIZED (SELECT k.key FROM chime.keys k WHERE k.key = ANY($1::bytea[])"            \
    " ORDER BY k.key FOR UPDATE),"                                                                 \
    " d AS (DELETE FROM chime.dead d USING f WHERE d.key = f.key"                                  \
    " AND (SELECT count(*) FROM l) >= 0 RETURNING d.key, d.shard, d.payload),"                     \
    " v AS MATERIALIZED " PG_VERSION_BASE ","                                                      \
    " g AS MATERIALIZED (SELECT f.i, f.key, f.due, f.part, d.shard, d.payload,"                    \
    " v.base + f.i AS nv FROM v, f JOIN d ON d.key = f.key ORDER BY f.key),"                       \
    " k AS (INSERT INTO chime.keys AS k (key, version, part, shard, attempt)"                      \
    " SELECT key, nv, part, shard, 0 FROM g ON CONFLICT (key) DO UPDATE SET"                       \
    " version = " PG_VERSION_LOCKED ", part = excluded.part, shard = excluded.shard,"              \
    " attempt = 0, fire_epoch = 0, end_epoch = NULL, ended_at = NULL RETURNING k.key, k.version)," \
    " t AS (INSERT INTO chime.timers (part, shard, key, version, due, payload)"                    \
    " SELECT g.part, g.shard, g.key, k.version, g.due, g.payload FROM g JOIN k ON k.key = g.key)"  \
    " SELECT g.i, k.version, g.payload, g.shard FROM g JOIN k ON k.key = g.key"

/* Un-recordings (lanes.c, chime__pg_unfire): $1 keys, $2 versions, $3 attempts (each firing's, as
 * fire() recorded it), $4 shards, $5 epochs, $6 owner, $7 token. A firing of a draining shard whose
 * handler never began is undone in its own epoch, as an owner statement (the shard's row locked FOR
 * KEY SHARE, its epoch and expiry checked as ack's are), if the key's row is still as that firing
 * left it: the same version, pending, fired in that epoch with that attempt. The attempt goes back
 * to the one before, and fire_epoch to 0 (no firing recorded: a cancel may end it): the next owner
 * fires the timer with the attempt it would have had. 0 even when the firing re-fired one an older
 * epoch recorded and never settled, whose epoch is not known here: as after a retry (which sets 0
 * too), a handler a paused node may still run for it has its outcome refused. Anything else (a
 * put, a cancel, a later firing, an epoch lost) leaves the row alone. */
#define PG_SQL_UNFIRE                                                                              \
    "WITH f AS (SELECT * FROM unnest($1::bytea[], $2::int8[], $3::int4[], $4::int4[], $5::int8[])" \
    " AS f(key, version, attempt, shard, epoch)),"                                                 \
    " s AS MATERIALIZED (SELECT shard, epoch, expires FROM chime.shards"                           \
    " WHERE shard = ANY(ARRAY(SELECT DISTINCT shard FROM f)) AND owner = $6 AND token = $7::int8"  \
    " AND expires > now() ORDER BY shard FOR KEY SHARE)"                                           \
    " UPDATE chime.keys k SET attempt = f.attempt - 1, fire_epoch = 0"                             \
    " FROM f JOIN s ON s.shard = f.shard AND s.epoch = f.epoch"                                    \
    " AND s.expires > statement_timestamp()"                                                       \
    " WHERE k.key = f.key AND k.version = f.version AND k.end_epoch IS NULL"                       \
    " AND k.fire_epoch = f.epoch AND k.attempt = f.attempt"

/* Dead-letter deletions: $1 keys. Returns i of each key that had one. */
#define PG_SQL_DROP                                                                                \
    "DELETE FROM chime.dead d USING unnest($1::bytea[]) WITH ORDINALITY AS f(key, i)"             \
    " WHERE d.key = f.key RETURNING f.i"

/* Notifications to owners of puts due soon: $1 payloads ("shard:hexkey"). */
#define PG_SQL_NOTIFY "SELECT count(pg_notify('chime', x)) FROM unnest($1::text[]) x"

/* A try's mark (pg.h, P6): $1 the node's token, $2 the lane, $3 the node, $4 the try's number in
 * the lane, inserted in the try's own transaction. A new row each time, never one row updated: a
 * try whose connection stalled in the middle of its pipeline leaves a session that holds its
 * locks until the server finds the client gone, which may be never (a stuck peer), and every
 * later try would wait for the row it locked (found in test_pg_cuts, whose relay stops reading a
 * batch at a Bind). The housekeeper deletes the marks older than each lane's latest (house.c). */
#define PG_SQL_MARK "INSERT INTO chime.marks (token, lane, node, batch) VALUES ($1, $2, $3, $4)"

/* The ask of a lane that lost a try's COMMIT reply (batch.c, resolve): the try's mark as a fence,
 * unless the key is there. Returns the row's fence: false, the try's own mark (it committed); true,
 * a fence (this ask's, or an earlier one's whose reply was lost: asking again answers the same).
 * A try still in progress that inserted its mark makes it wait for the try's end. $1 token, $2
 * lane, $3 node, $4 the try's number. */
#define PG_SQL_FENCE                                                                               \
    "INSERT INTO chime.marks AS m (token, lane, node, batch, fence)"                               \
    " VALUES ($1::int8, $2::int4, $3, $4::int8, true)"                                             \
    " ON CONFLICT (token, lane, batch) DO UPDATE SET fence = m.fence RETURNING m.fence"

/* The housekeeper's: this node's try marks ($1 its token) but the latest of each lane. The mark a
 * lane may be about to ask about is its latest: it asks only before its next try. Fences stay: the
 * session of the try a fence shuts out may still be waiting to run its insert (a connection held
 * in the network; bounded by idle_in_transaction_session_timeout, lease / 2), and without the
 * fence it would commit (found in review). The daily clean-up takes them. */
#define PG_SQL_MARKS_TRIM                                                                          \
    "DELETE FROM chime.marks m WHERE m.token = $1::int8 AND NOT m.fence AND m.batch <"             \
    " (SELECT max(x.batch) FROM chime.marks x WHERE x.token = m.token AND x.lane = m.lane)"

#endif /* CHIME_STORE_PG_STATEMENTS_H */
