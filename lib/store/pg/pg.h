/* SPDX-License-Identifier: MIT */
/*
 * The PostgreSQL backend: timers in a database that several processes (nodes) share. What its files
 * share, and the protocol they implement together. docs/design.md ("Durable timers on PostgreSQL")
 * explains the why; schema.c holds the schema itself.
 *
 * FILES
 *   backend.c  the operations table (backend.h), open and close
 *   conn.c     connections: settings, reconnection, errors, binary arrays and results
 *   schema.c   the schema (created by chime-store init, checked by open) and its partitions
 *   lanes.c    the write lanes: puts, cancels, acks, burials, dead letters, batched per lane
 *   firing.c   fire() and load(): the owner's reads and its firing records
 *   lease.c    the lease thread: heartbeat, renewal, balancing, takeover, revocation
 *   loader.c   the loader thread: takeover loads, notifications, polls, arming
 *   house.c    the housekeeper: partitions ahead of time, settled partitions dropped, counts
 *
 * SHARDS AND OWNERS. A key belongs to shard siphash(0, 0, key) mod shards (fixed by the schema). A
 * shard has at most one owner at a time: the node whose lease on it (a row of chime.shards: owner,
 * token, epoch, expires) has not expired by the DATABASE's clock (now() and clock_timestamp(), never
 * a node's). Only the owner fires a shard's timers. Any node puts and cancels any key.
 *
 * EPOCHS AND FENCES. Each acquisition of a shard increments its epoch (renewals keep it). A timer is
 * handed to the logic with fence = epoch << 16 | shard. Every statement that writes as the owner
 * (fire, ack, bury, retry) locks its shards' rows of chime.shards FOR KEY SHARE (shard, owner,
 * token, not expired when its transaction began) and then checks, on the rows it locked, epoch and
 * expires > statement_timestamp() (firing.c, FIRE: the statement's start, not the clock when the
 * check runs); an acquisition locks the same row FOR UPDATE, then updates it. So
 * the two exclude each other, while a renewal conflicts with neither (lease.c, LOCK MODES): an
 * owner's write commits either before the next epoch begins (and the next owner's loads see it) or
 * not at all. Reads (load, takeover, poll, notified keys) join on (shard, owner, token, epoch,
 * expires > now()) and lock nothing (firing.c, EXPIRY IN A READ, and FIRE: why never
 * clock_timestamp() against a snapshot's row).
 *
 * INVARIANTS (each is argued where the code keeps it; the tests crash, pause and restart against
 * them):
 *   P1 Only the owner of a shard in epoch e records a firing, an acknowledgement, a burial or a retry
 *      in e, and only while e is current and unexpired by the database's clock (the FOR KEY SHARE
 *      join above). A node paused past its lease can do neither once it continues: the row no
 *      longer matches. (firing.c, lanes.c)
 *   P2 A handler starts only while its node believes its lease valid, and that belief is
 *      conservative: a lease renewed by a request sent at monotonic time t is believed until
 *      t + 3/4 lease, while the database keeps it until at least t + lease (its now() is later than
 *      t). A lapse is final once seen: chime__pg_holds zeroes the deadline before refusing, and the
 *      renewal extends only by a compare-and-swap from the deadline it checked. The remaining race
 *      (a check, then a pause, then the handler) is closed only by fencing downstream with
 *      chime_fire.fence. (lease.c, the logic's run_handler)
 *   P3 A fired timer stays pending until its acknowledgement commits. A firing recorded in an
 *      epoch that then lost its lease is loaded by the next owner like any pending timer, and fires
 *      again with attempt + 1 (the recorded attempt is kept). (firing.c)
 *   P4 Versions of one key only grow: each statement that writes versions draws one value from a
 *      sequence (cache 1, so in time order) and numbers its rows under it, except that a put that
 *      finds the key's row draws its version once it holds the row's lock, so it always replaces
 *      the row; a retry replaces it only while its version is the one that fired (statements.h).
 *      Rows of ended timers stay as tombstones until their partition is dropped, at least one
 *      partition width after it ended, and at least two minutes after they ended (longer than any
 *      statement runs: a put whose statement drew its version before its predecessor was written
 *      has ended by then), so a put of the same key always meets its predecessor.
 *      (lanes.c, house.c, schema.c)
 *   P5 A cancel is never undone: it ends the key's current version (end_epoch = 0) in a committed
 *      transaction; a later write of that key is a newer put (a larger version). Nothing else ever
 *      clears end_epoch, and a version ends at most once.
 *   P6 Nothing is reported committed that is not, and no batch commits twice: each try of a batch
 *      inserts its mark, a row of chime.marks (token, lane, try), in its own transaction; when the
 *      connection is lost after COMMIT was sent, the lane inserts the same row as a fence on a new
 *      one unless it is there: the try's own mark there (committed), the try committed; a fence
 *      there (inserted now, or by an earlier ask whose reply was lost), it did not, and cannot any
 *      more, since its own insert would fail on the key. Fences are kept a day (longer than any
 *      session of a try can wait to run its insert), try marks only until a later one commits. A
 *      try that did not commit is sent again as a new try; its callers wait on. (batch.c, resolve)
 *   P7 A timer due before `loaded` reaches its owner: through the owner's load if it was committed
 *      before the load's snapshot; otherwise through a post-commit arm (its own puts), a
 *      notification (others' puts due soon), or the owner's poll, which reads every row committed
 *      since the previous poll's snapshot (pg_visible_in_snapshot on the row's transaction id),
 *      or, first on a new connection, every pending row (a snapshot of the server before a crash
 *      or a failover may count a transaction id given out again as seen: loader.c, SERVER
 *      RESTARTS). A lost notification therefore delays a timer by at most the poll interval, never
 *      loses it.
 *      The poll skips this node's own transactions whose every row its lane handed over (the
 *      post-commit arms, queued before the transaction is listed; loader.c, SKIPPED TRANSACTIONS):
 *      a load or takeover whose snapshot came later reads what the arms did not cover, as above.
 */
#ifndef CHIME_STORE_PG_H
#define CHIME_STORE_PG_H

#include <libpq-fe.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "store/backend.h"

#define PG_MAX_SHARDS 65535u /* a fence keeps the shard in 16 bits */
#define PG_LANES 1           /* write lanes (connections) per node (design.md, Writes) */
#define PG_BATCH 2000        /* operations per lane transaction at most */
#define PG_BATCH_BYTES ((size_t)1 << 20) /* keys and payloads per lane transaction (lanes.c) */
#define PG_SCHEMA_VERSION 4
#define PG_MIN_LEASE_NS UINT64_C(200000000)
#define PG_DEFAULT_LEASE_NS UINT64_C(10000000000)
#define PG_LOCK_PARTITIONS 0x63686d70 /* the advisory lock of partition creation ("chmp") */

static inline uint64_t pg_fence(uint64_t epoch, unsigned shard)
{
    return epoch << 16 | shard;
}
static inline unsigned pg_fence_shard(uint64_t fence)
{
    return (unsigned)(fence & 0xffff);
}
static inline uint64_t pg_fence_epoch(uint64_t fence)
{
    return fence >> 16;
}

/* ---- conn.c ---- */

/* How a statement went. The codes lie outside the range of negative errno values, so that a
 * function may return either (schema_read: -ENOENT or PG_LOST). */
enum pg_rc {
    PG_OK = 0,
    PG_LOST = -1001,   /* the connection is gone (or the server is shutting down): reconnect */
    PG_RETRY = -1002,  /* the transaction was rolled back and may be run again (deadlock,
                          serialization failure, lock or statement timeout) */
    PG_NOPART = -1003, /* no partition of chime.timers for a row: create it, run again */
    PG_FATAL = -1004,  /* anything else: a bug or a damaged schema; the store fails */
};
static inline int pg_rc_is_db(int rc) /* one of the PG_* failures above */
{
    return rc <= PG_LOST && rc >= PG_FATAL;
}

/* One connection of a node, with the settings of its role. */
struct pg_conn {
    PGconn *c;
    const char *conninfo;
    const char *role;          /* application_name suffix, for pg_stat_activity */
    const char *node;
    uint64_t lease_ns;         /* for the session's timeouts */
    int prepared;              /* bit per prepared statement (the caller's numbering) */
    struct pg_session {        /* a server session: its process and when it began (us) */
        int pid;               /* 0: none */
        long long start;
    } session, stale;          /* this one's; the one given up last (conn.c, STALE SESSIONS),
                                  ended by the next connect */
};

/* PQconnectdbParams with conninfo over the defaults for a lost server (conn.c, DEAD PEERS), and
 * application_name app. What libpq returns (NULL: out of memory). */
PGconn *chime__pg_connectdb(const char *conninfo, const char *app);
int chime__pg_connect(struct pg_conn *pc);          /* 0; PG_LOST if unreachable; -EINVAL */
void chime__pg_disconnect(struct pg_conn *pc);
/* End session s if the server still has it (conn.c, STALE SESSIONS): best effort, PG_LOST only if
 * pc's own connection was lost meanwhile, else PG_OK. */
int chime__pg_end_session(struct pg_conn *pc, struct pg_session s);
/* Connect again until it works or *stop becomes nonzero (then PG_LOST). Sleeps between tries. */
int chime__pg_reconnect(struct pg_conn *pc, _Atomic int *stop);
/* One try of chime__pg_connect; if it found the server unreachable (PG_LOST), sleep *delay_ms
 * first and double it, up to 250 ms (start it at 10; a success sets it back). For a caller that
 * looks at bounds of its own between tries. */
int chime__pg_connect_or_wait(struct pg_conn *pc, long *delay_ms);
/* Classify a result (NULL: the connection failed). Logs a fatal error to stderr once. */
int chime__pg_status(struct pg_conn *pc, const PGresult *r);
/* Wait, at most until the server has been silent for chime__pg_silence_ns (conn.c, SILENT
 * SERVERS), until PQgetResult will not block. PG_OK; PG_LOST if the connection broke or was given
 * up on (its socket is then shut down, and libpq reports it broken from now on). */
int chime__pg_await(struct pg_conn *pc);
/* Give a connection up: shut its socket down, so that libpq finds it broken, as after a cut. */
void chime__pg_abandon(struct pg_conn *pc);
/* What PQexec returns for a query already sent (`sent`: what PQsend* returned), each wait through
 * chime__pg_await: the last result, or NULL if the send or the connection failed. */
PGresult *chime__pg_result(struct pg_conn *pc, int sent);
/* Pipeline mode (batch.c): send what libpq buffered, reading whatever arrives meanwhile (a
 * server blocked writing results we do not read would stop reading what we send), giving a server
 * silent either way for chime__pg_silence_ns up as chime__pg_await does; the result of the next
 * query (kept in *out if out, else cleared); the next sync. Each: PG_OK, PG_LOST, or (a result) the
 * class chime__pg_status gives it. */
int chime__pg_flush(struct pg_conn *pc);
int chime__pg_pipeline_result(struct pg_conn *pc, PGresult **out);
int chime__pg_pipeline_sync(struct pg_conn *pc);
/* Run sql (several statements allowed, text results) as PQexec would, through chime__pg_result;
 * *out (if given) receives the last result on PG_OK. */
int chime__pg_run(struct pg_conn *pc, const char *sql, PGresult **out);
/* How long a server may send nothing while a reply is owed (default 90 s). Tests lower it once
 * their store is open (a slow first reply would fail the open itself); nothing else writes it.
 * Each wait reads it once, as it begins. */
extern _Atomic uint64_t chime__pg_silence_ns;
/* The bytes of keys and payloads a lane's batch holds at most, beyond its first operation (default
 * PG_BATCH_BYTES). Tests raise it before they open a store; nothing else writes it. */
extern size_t chime__pg_batch_bytes;
/* Run sql with text parameters and binary results; *out (if given) receives the result on PG_OK. */
int chime__pg_exec(struct pg_conn *pc, const char *sql, int n, const char *const *values,
                   PGresult **out);
/* The same with text results. */
int chime__pg_exec_text(struct pg_conn *pc, const char *sql, int n, const char *const *values,
                        PGresult **out);
/* Prepare statement number `id` (< 32) once per connection. */
int chime__pg_prepare(struct pg_conn *pc, int id, const char *name, const char *sql);

/* A one-dimensional array in PostgreSQL's binary format, built element by element. */
struct pg_array {
    char *buf;
    size_t len, cap;
    uint32_t n;
    uint32_t oid;
    int oom;
};
#define PG_OID_BYTEA 17u
#define PG_OID_INT8 20u
#define PG_OID_INT4 23u
#define PG_OID_TEXT 25u
void chime__pg_array_init(struct pg_array *a, uint32_t oid);
void chime__pg_array_reset(struct pg_array *a);
void chime__pg_array_free(struct pg_array *a);
void chime__pg_array_bytes(struct pg_array *a, const void *p, size_t n);
void chime__pg_array_i64(struct pg_array *a, int64_t v);
void chime__pg_array_i32(struct pg_array *a, int32_t v);
/* Finish the header; returns the bytes (valid until the next change) and their length. */
const char *chime__pg_array_done(struct pg_array *a, int *len);

/* Binary result fields. */
int64_t chime__pg_i64(const PGresult *r, int row, int col);
int32_t chime__pg_i32(const PGresult *r, int row, int col);

uint64_t chime__pg_mono(void); /* CLOCK_MONOTONIC ns */
uint64_t chime__pg_wall(void); /* CLOCK_REALTIME ns */

/* ---- schema.c ---- */

struct pg_schema {
    unsigned shards;
    uint64_t partition_ns;
};
/* Create the schema (chime-store init). Return: 0; -EEXIST if a chime schema exists (its shards
 * and partition width in *found); PG_* on a database error. */
int chime__pg_schema_create(struct pg_conn *pc, unsigned shards, uint64_t partition_ns,
                            struct pg_schema *found);
/* Read the schema. Return: 0; -ENOENT (no schema `chime`); -EPROTO (another schema version);
 * PG_LOST. */
int chime__pg_schema_read(struct pg_conn *pc, struct pg_schema *out);
/* Make sure the partitions holding parts [from, to] exist (CREATE TABLE IF NOT EXISTS, outside a
 * transaction). Return: 0 or PG_*: PG_RETRY when chime.timers stayed locked by another session for
 * 100 ms (a reader: schema.c, ensure_one), to be called again. */
int chime__pg_partitions_ensure(struct pg_conn *pc, const struct pg_schema *sc, uint64_t from,
                                uint64_t to);
/* The partitions a caller made lately (chime__pg_partition_need), zeroed to begin. */
struct pg_parts_made {
    uint64_t n[16];
    size_t count;
};
/* Make sure the partition holding part exists, unless it is one of the last 16 made through m (a
 * round trip each: a lane's batch often puts many rows into one new partition). Return: as
 * chime__pg_partitions_ensure. */
int chime__pg_partition_need(struct pg_conn *pc, const struct pg_schema *sc, uint64_t part,
                             struct pg_parts_made *m);
/* Drop the partitions that ended at least one width before `now` and hold no pending timer, with
 * the tombstones of their keys. *dropped counts them. Return: 0 or PG_*. */
int chime__pg_partitions_retire(struct pg_conn *pc, const struct pg_schema *sc, uint64_t now,
                                unsigned *dropped);
/* The shard of a key (fixed by the schema since its version 1: SipHash-2-4 under the zero key,
 * low 64 bits). */
unsigned chime__pg_shard_of(const void *key, size_t len, unsigned shards);
/* The partition key of a timer put at wall time now: its due time, or now if that has passed. */
static inline uint64_t pg_part(uint64_t due, uint64_t now)
{
    return due > now ? due : now;
}

/* ---- the backend ---- */

/* This node's view of one shard. */
struct pg_shard {
    _Atomic uint64_t epoch;       /* the epoch this node holds, 0 if none */
    _Atomic uint64_t valid_until; /* CLOCK_MONOTONIC ns until which the lease is believed (P2) */
    _Atomic int draining;         /* being given away: fire nothing new, let acks through */
    uint64_t drain_since;         /* lease thread only: the round draining began */
    /* Firings of this shard being recorded, or recorded and not yet settled (backend.h, fire):
     * their outcomes not yet committed or refused. A drain releases the shard once it is 0, or
     * after a lease at most (lease.c). */
    _Atomic uint32_t unsettled;
};

struct pg_lane;
struct pg_task;

struct chime__backend {
    const struct chime_store_config *cfg;
    struct chime__sink sink;
    char *conninfo, *node;
    int64_t token;                /* this process's incarnation (random): leases are (node, token) */
    uint64_t lease_ns;
    struct pg_schema schema;
    uint64_t notify_ns;           /* puts due within now + notify_ns are notified to their owner */
    struct pg_shard *shards;      /* schema.shards of them */

    /* ownership and loading: own_lock orders registrations against load boundaries (P7) */
    pthread_mutex_t own_lock;
    _Atomic uint64_t max_until;   /* the greatest `until` a load has begun with */

    struct pg_lane *lanes[PG_LANES];

    struct pg_conn fire_conn, load_conn;
    pthread_mutex_t fire_lock;    /* fire() is the dispatcher's alone, but say so */

    /* the dead-letter listing and other one-off reads */
    struct pg_conn misc_conn;
    pthread_mutex_t misc_lock;

    /* the lease thread (lease.c) */
    pthread_t lease_thread;
    int lease_started;
    uint64_t beat_sent;           /* monotonic: when the last heartbeat that committed was sent (the
                                     lease thread's; close reads it after joining the thread) */
    struct pg_conn lease_conn;
    pthread_mutex_t lease_lock;
    pthread_cond_t lease_cond;    /* CLOCK_MONOTONIC */

    /* the loader thread (loader.c) */
    pthread_t loader_thread;
    int loader_started;
    struct pg_conn listen_conn;
    void *loader;                 /* its state (loader.c) */
    pthread_mutex_t task_lock;
    struct pg_task *tasks, *tasks_tail; /* takeovers and arms, in order */
    int64_t *armed_tx;            /* under task_lock: this node's transactions the next poll skips */
    size_t armed_tx_n;
    int armed_tx_lost;            /* under task_lock: one could not be listed; the next poll skips none */
    int wake_fd;                  /* eventfd: a task is queued, or stop */
    _Atomic int poll_now;         /* run a poll at once (a batch's results were lost) */
    _Atomic int revoke_wanted;    /* call sink->revoke (leases were lost or are draining) */

    /* the housekeeper (house.c) */
    pthread_t house_thread;
    int house_started;
    struct pg_conn house_conn;
    _Atomic uint64_t count_pending, count_dead, count_bytes;
    _Atomic uint64_t stats_wanted; /* CLOCK_MONOTONIC of the last stats() call */

    _Atomic int stop;             /* the threads end */
    _Atomic int closing;          /* the store's close has begun: reads waiting for a server, and
                                     fire()'s runs again, end */
    _Atomic int error;            /* sticky: -EIO (D5) */
    _Atomic int failed_told;

    /* statistics for tests and benchmarks */
    _Atomic uint64_t acquired, lost, released, polls, notified, armed;
    _Atomic uint64_t rounds;      /* lease rounds ended (for tests) */
};

/* backend.c */
void chime__pg_fail(struct chime__backend *b, int err); /* sticky error; tells the sink once */
int chime__pg_error(const struct chime__backend *b);
/* A read's statement on pc found the server gone (PG_LOST) or asked for a retry (PG_RETRY). Wait
 * as every call does (chime_store.h): a lost connection is dropped and made again once; a failed
 * connect or a retry pauses 50 ms. Return: whether the read should try again (1), or give up (0)
 * because the store closes, stops or has failed. */
int chime__pg_wait_server(struct chime__backend *b, struct pg_conn *pc, int rc);
/* Whether this node holds shard's lease in `epoch` (locally believed, not draining). A lapse it sees
 * it makes final (the belief's deadline set to 0), so that no renewal extends that epoch (P2). */
int chime__pg_holds(struct chime__backend *b, unsigned shard, uint64_t epoch);
/* The same, draining or not: whether an outcome of a firing made in `epoch` (an acknowledgement, a
 * burial, a retry) may still be recorded. A draining shard fires nothing new, but lets its running
 * handlers' outcomes through until it is released (lease.c). */
int chime__pg_believes(struct chime__backend *b, unsigned shard, uint64_t epoch);
/* The epoch of shard if this node holds it (as chime__pg_holds), else 0. */
uint64_t chime__pg_epoch_of(struct chime__backend *b, unsigned shard);
/* A firing of shard recorded by fire() is settled (backend.h, fire): its outcome was committed or
 * refused, or it was abandoned (n of them). */
void chime__pg_settled(struct chime__backend *b, unsigned shard, uint32_t n);

/* conn.c. Tests only: nonzero turns lock_timeout off on the owners' sessions connected from then
 * on (conn.c, SESSION SETTINGS), for a test of what an owner statement's long wait holds. */
extern _Atomic int chime__pg_lock_timeout_off;

/* batch.c. Tests only: called by a lane once its COMMIT is in the connection's socket, before
 * the reply is read (an ambiguous commit from here on). */
extern void (*chime__pg_commit_hook)(void);

/* batch.c: how long after its COMMIT a lane still asks whether its try committed (default 12 h,
 * half the day its mark is kept: house.c's daily clean). Tests lower it. */
extern _Atomic uint64_t chime__pg_ask_within_ns;

/* lease.c. Tests only: called by the lease thread between a renewal's check that its belief still
 * holds and the compare-and-swap that extends it. */
extern void (*chime__pg_renew_hook)(struct chime__backend *b, unsigned shard);
/* lease.c. Tests only: called by close's release (chime__pg_lease_release_all) after each try
 * that did not reach the database, before it decides whether to try again. */
extern void (*chime__pg_release_failed_hook)(struct chime__backend *b);
/* lease.c: the release and the acquisition (not a retake), for test_pg_lease, which runs them while
 * an owner statement waits (P1). */
extern const char chime__pg_release_sql[];
extern const char chime__pg_acquire_sql[];
/* backend.c. Tests only: called by chime__pg_wait_server each time a read on pc waits to try
 * again (a lost connection; pc is b's load_conn for a load, misc_conn for a dead-letter list). */
extern void (*chime__pg_wait_hook)(struct chime__backend *b, struct pg_conn *pc);

/* firing.c. Tests only: called by a read once its cursor is declared (its snapshot taken) and
 * before its first FETCH; since as chime__pg_read_cursor's (NULL: a load, a takeover, or the
 * loader's first poll on a new connection, which reads every pending row). */
extern void (*chime__pg_read_hook)(struct chime__backend *b, const char *since);

/* lanes.c */
int chime__pg_lanes_start(struct chime__backend *b);
void chime__pg_lanes_stop(struct chime__backend *b); /* after draining them */
/* Tests only: called by chime__pg_lanes_stop once every lane is freed. */
extern void (*chime__pg_lanes_stopped_hook)(struct chime__backend *b);
int chime__pg_lanes_sync(struct chime__backend *b);
int chime__pg_put(struct chime__backend *b, const struct chime__put *p, struct chime__put_result *res,
                  uint64_t *ticket);
int chime__pg_cancel(struct chime__backend *b, const void *key, size_t key_len, uint64_t firing,
                     struct chime__ref *victim, uint64_t *ticket);
int chime__pg_wait(struct chime__backend *b, uint64_t ticket);
int chime__pg_ack(struct chime__backend *b, const struct chime__timer *t, int current);
int chime__pg_bury(struct chime__backend *b, const struct chime__timer *t);
/* Un-record t, a firing of a draining shard whose handler never began (statements.h,
 * PG_SQL_UNFIRE): queued on its lane, settled once committed or refused (or here if it cannot be
 * queued). Return: 0, or why it was not queued (settled all the same). */
int chime__pg_unfire(struct chime__backend *b, const struct chime__timer *t);
int chime__pg_dead_requeue(struct chime__backend *b, const void *key, size_t key_len,
                           uint64_t due_ns, const struct chime__dead *seen,
                           struct chime__put_result *res, chime__timer_fn *fn, void *ctx,
                           uint64_t *ticket);
int chime__pg_dead_drop(struct chime__backend *b, const void *key, size_t key_len,
                        uint64_t *ticket);

/* firing.c */
int chime__pg_fire(struct chime__backend *b, struct chime__firing *f, size_t n);
int chime__pg_load(struct chime__backend *b, uint64_t from, uint64_t until, chime__timer_fn *fn,
                   void *ctx);
/* The owned shards (and epochs) a read may cover, under own_lock: n of them into shards/epochs. */
size_t chime__pg_owned(struct chime__backend *b, int32_t *shards, int64_t *epochs);
/* Read timers of the given shards (each in its epoch) with part in [from, until), pending and not
 * being fired by this node in that epoch, through fn, in a transaction of their own. Return: 0,
 * what fn returned (it stops the read), or PG_*. */
int chime__pg_read_timers(struct chime__backend *b, struct pg_conn *pc, const int32_t *shards,
                          const int64_t *epochs, size_t n, uint64_t from, uint64_t until,
                          chime__timer_fn *fn, void *ctx);
/* The same inside a transaction the caller opened. since: if not NULL, a snapshot (as text): only
 * rows whose transaction it did not see, and is none of the n_skip transactions in skip (a poll). */
int chime__pg_read_cursor(struct chime__backend *b, struct pg_conn *pc, const int32_t *shards,
                          const int64_t *epochs, size_t n, uint64_t from, uint64_t until,
                          const char *since, const int64_t *skip, size_t n_skip,
                          chime__timer_fn *fn, void *ctx);

/* lease.c */
int chime__pg_lease_start(struct chime__backend *b); /* runs the first round before returning */
void chime__pg_lease_stop(struct chime__backend *b);
void chime__pg_lease_release_all(struct chime__backend *b);

/* loader.c */
int chime__pg_loader_start(struct chime__backend *b);
void chime__pg_loader_stop(struct chime__backend *b);
/* Hand shards just acquired (epochs[i] for shards[i]) to the loader: it loads their timers due
 * before max_until, read after they were registered (P7). */
void chime__pg_takeover(struct chime__backend *b, const int32_t *shards, const int64_t *epochs,
                        size_t n);
/* Have the loader thread call sink->revoke soon. The lease thread never calls it itself: the
 * logic's revoke walks every loaded timer (seconds with 10^6 of them on a busy machine), and a lease
 * thread busy that long misses its renewals and loses the rest of its leases. Safety does not wait
 * for it: a lost or draining shard's fences are invalid at once (chime__pg_holds), so its timers
 * neither start nor record anything meanwhile. */
void chime__pg_revoke_later(struct chime__backend *b);
/* Have the loader poll at once (not at its next POLL_NS): a lane lost a batch's results, or an arm
 * could not be queued, and the poll finds what they did not hand over (P7). */
void chime__pg_poll_soon(struct chime__backend *b);
/* Arm a timer this node put (after its commit): the loader calls sink->arm if it still holds the
 * shard. Copies t. Return: 0; -ENOMEM (not queued: the next poll reads it instead). */
int chime__pg_arm_later(struct chime__backend *b, const struct chime__timer *t);
/* List transaction xid, committed by a lane whose rows are all handed over (arms queued, P7): the
 * next poll skips its rows. */
void chime__pg_armed_tx(struct chime__backend *b, uint64_t xid);

/* Test hook: while on, every node of this process drops the notifications it receives, as if
 * they were lost with a connection (P7 says the poll then delivers). */
void chime__pg_drop_notifications(int on);

/* house.c */
int chime__pg_house_start(struct chime__backend *b);
void chime__pg_house_stop(struct chime__backend *b);

#endif /* CHIME_STORE_PG_H */
