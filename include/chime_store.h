/* SPDX-License-Identifier: MIT */
/*
 * chime: durable timers (chime_store_*). Part of the public API: programs include <chime.h>, which
 * includes this header; the conventions stated there hold here too.
 */
#ifndef CHIME_H
#include "chime.h" /* the entry point: it includes this header again after its own declarations */
#elif !defined(CHIME_STORE_H)
#define CHIME_STORE_H

#ifdef __cplusplus
extern "C" {
#endif

/* ==== Durable timers ==========================================================================
 *
 * A chime_store holds keyed timers that survive the process: every put, cancel and acknowledgement
 * is recorded in a journal (a directory of append-only, checksummed files; the default backend) before
 * it is reported durable, and a restart finds every pending timer again. Timers fire by running one
 * handler, on a threaded runtime (chime_timer_*, chime_timer.h) that the store owns: on its workers
 * (cfg->runtime.workers; none by default) or else its advancing thread. The store
 * uses the runtime's public API, and its check of a config to refuse at open what chime_timer_new
 * would; the runtime knows nothing of disks. docs/design.md explains the journal, recovery and the
 * contract below; lib/store/format.md is the on-disk format.
 *
 * The contract shared by every function below:
 *   - A key (1 to CHIME_STORE_KEY_MAX bytes, compared as bytes) names at most one pending timer. A
 *     put with a pending key replaces its due time and payload: the old one will not fire, unless
 *     its firing was already recorded (from the lead before its due time: see chime_store_cancel),
 *     in which case its handler still starts and the new one is pending after it.
 *   - Deadlines are wall-clock: CLOCK_REALTIME in nanoseconds since the epoch, because they outlive
 *     the process and the machine's boot. A timer never fires before its due time by the wall clock:
 *     if the clock steps back, nothing fires early; if it steps forward, what became due fires (within
 *     max_fires_per_s). A due time already past fires at once.
 *   - AT LEAST ONCE. A handler that returned 0 has been acknowledged: the timer is removed for good
 *     (durably by the group commit after its acknowledgement is written: at once, or during a burst
 *     of firings with others soon after; chime_store_sync waits for all of them). A handler that was
 *     running, or had fired and not been acknowledged, when the process died runs again after the
 *     restart with attempt + 1, unless its key was put again (or put and cancelled) while it ran:
 *     then, as when it returns, the newer timer wins and the interrupted firing does not run again
 *     (see chime_handler). A handler can therefore run more than once for one put: HANDLERS MUST
 *     BE IDEMPOTENT (cancel an order only if it is still unpaid; deduplicate by key and due_ns).
 *     attempt > 1 says "this may have run before".
 *   - Only timers due within horizon_ns of now are held in memory; the rest stay on disk, grouped by
 *     due time, and are loaded ahead of their time. Memory follows the horizon, not the total.
 *   - Errors are negative errno values. -EIO (a write or fsync failed), -ENOSPC (the disk is full)
 *     and -EBADMSG (the journal's flusher, reading a sealed segment or a run back, found damage)
 *     are sticky: nothing is reported durable after them, no handler starts any more, and every later
 *     put, cancel, sync and dead-letter call returns that error until the store is closed and opened
 *     again (an fsync error cannot be retried safely: the kernel may have dropped the data it failed
 *     to write). Recovery on the next open keeps everything that had been reported durable. So is
 *     -ENOMEM when the store runs out of memory where a timer recorded on disk would otherwise be
 *     dropped from memory unfired (a handler's outcome that could not be recorded, a timer that
 *     could not be loaded): the restart fires it again, with attempt + 1. The journal's background
 *     flusher, which keeps the disk bounded, fails the store the same way when it runs out of
 *     memory (-ENOMEM) or file descriptors (-EMFILE, -ENFILE). A write to the journal's files can
 *     also fail with another error of the file system's (-EDQUOT, -EROFS, -EFBIG...): it is
 *     sticky as -EIO is, and returned as it is.
 *
 * Durable timers on PostgreSQL. With cfg->postgres set, timers live in a PostgreSQL database (schema
 * `chime`, created once by `chime-store --postgres CONNINFO init`) that every process opening it
 * shares; the contract above holds across them. Any process (node) puts and cancels any key; each
 * key hashes to a shard, and a shard's timers are fired by its owner, the node holding its lease.
 * Leases expire by the database's clock; a node that dies or is paused past lease_ns loses its
 * shards to the others, which fire its pending and unacknowledged timers (attempt + 1). Every
 * firing, acknowledgement and retry is checked against the lease's epoch in the same transaction, so
 * a node that comes back from a pause cannot record them in its old epoch; a handler already past
 * its start when the pause began runs on, which is what chime_fire.fence is for. When a node joins,
 * others hand it shards: a shard handed over fires nothing new at once, and moves once the
 * outcomes of its running handlers are recorded, or after lease_ns if a handler runs longer (its
 * outcome is then refused, and the new owner fires the timer again). With
 * CHIME_SYNC_EACH a put or cancel returns once its transaction committed (one commit serves every
 * thread waiting on that connection: one per process). A lost connection or a restarted server is
 * retried, not an error: calls wait for it, and a call whose commit was cut off from its reply
 * (also by a server crash or restart) reports what the database did, once, if it can ask within
 * half a day of the commit. -EIO then means the database rejected chime's statements (a damaged
 * or foreign schema), or that a commit's outcome could not be asked in time (the database away,
 * or the process paused, that long): as after a failed fsync, that call may or may not have taken
 * effect, and the store has failed. docs/design.md, "Durable
 * timers on PostgreSQL", says more; the fields are in struct chime_store_config.
 */

typedef struct chime_store chime_store;

#define CHIME_STORE_KEY_MAX 256       /* bytes; keys are 1 to 256 bytes */
#define CHIME_STORE_PAYLOAD_MAX 65536 /* bytes; payloads are 1 to 65536 bytes */

enum chime_sync {
    CHIME_SYNC_EACH = 1,     /* put and cancel return once their record is on stable storage (one
                                group commit, one fdatasync, serves every thread waiting at that
                                moment) */
    CHIME_SYNC_INTERVAL = 2, /* they return at once; records reach stable storage within
                                sync_interval_ns; chime_store_sync() waits for everything before it.
                                A crash can undo the puts and cancels of the last interval */
};

struct chime_store_config {            /* zero fields mean the defaults */
    const char *path;                  /* directory of the journal; created if absent (not its
                                          parents); one process at a time. Required,
                                          unless postgres is set */
    enum chime_sync sync;              /* 0 = CHIME_SYNC_EACH */
    uint64_t sync_interval_ns;         /* 0 = 1 ms; CHIME_SYNC_INTERVAL only */
    uint64_t horizon_ns;               /* timers due later than now + horizon + horizon/8 are kept
                                          on disk only (loads come horizon/8 at a time);
                                          0 = 1 hour; at least 1 s (smaller values are raised to it) */
    uint64_t max_fires_per_s;          /* handlers started per second at most, in bursts of at most
                                          max(1, rate/100) (a restart after a long outage must not
                                          flood downstream); 0 = no limit. The starts are scheduled
                                          at that pace: a handler that waits for a busy worker
                                          starts late, and such handlers can start together */
    unsigned max_attempts;             /* firings of one timer at most: a retry asked for after the
                                          last one, or a restart finding the last one unacknowledged,
                                          sends it to the dead letters instead; 0 = 10 */
    struct chime_timer_config runtime; /* tick and workers on which handlers run (as chime_timer_new;
                                          max_pending is ignored) */
    /* PostgreSQL (see "Durable timers on PostgreSQL" below; the journal ignores these fields). */
    const char *postgres;              /* a libpq connection string ("host=db dbname=app"): when set,
                                          timers live in that database, in the schema `chime` that
                                          `chime-store --postgres CONNINFO init` created, and every
                                          process that opens it shares them; path is then unused.
                                          Unless it sets them, each connection gets
                                          connect_timeout=10 keepalives_idle=5
                                          keepalives_interval=2 keepalives_count=3
                                          tcp_user_timeout=75000, so that a dead server is given
                                          up in seconds, not hours; a server silent for 90 s
                                          while a reply is owed is given up too */
    const char *node;                  /* this process's name in the cluster (UTF-8, at most 63
                                          bytes); NULL = host name and pid. Two live processes
                                          must not share one (their leases would be one) */
    unsigned shards;                   /* fixed when the schema is created (chime-store init
                                          --shards); 0 = the schema's. Any other value must equal it
                                          (else open fails with -EINVAL) */
    uint64_t lease_ns;                 /* how long a shard's owner may go silent before another node
                                          takes it over; 0 = 10 s; at least 200 ms (smaller values
                                          are raised to it) */
};

/* One firing, as the handler (and a dead-letter listing) sees it. The pointers are valid only during
 * the call. */
struct chime_fire {
    const void *key;
    size_t key_len;         /* the caller's id for the timer (an order number) */
    const void *payload;
    size_t payload_len;     /* opaque bytes stored with it */
    uint64_t due_ns;        /* CLOCK_REALTIME, ns since the epoch, exactly as it was put (a retry's
                               due time is when the handler returned plus its delay) */
    uint32_t attempt;       /* 1 the first time; more after a retry, or after a restart found it
                               fired but not acknowledged (a firing is recorded a lead of 2 to 50
                               ms before its due time: a crash in the lead counts it though the
                               handler never ran, and so does a close that does not wait for a
                               recorded handler because the wall clock stepped back past its lead;
                               with max_attempts 1 such a timer goes to the dead letters unrun.
                               With PostgreSQL, a shard handed to a node that joined while the
                               firing was in its lead does not count it, unless the old owner
                               lost its lease meanwhile or another transaction held the key's row
                               until the hand-over).
                               For a dead letter: the firings made */
    uint64_t fence;         /* the fencing token of this firing: 0 with the journal; with
                               PostgreSQL, epoch << 16 | shard, where epoch is the lease under which
                               the firing was recorded. For one key it only grows from one owner to
                               the next, so a downstream system that remembers the greatest fence it
                               has seen for a key and refuses smaller ones shuts out a node that was
                               paused past its lease. 0 for a dead letter */
};

/* What a handler returns: 0 = done (acknowledged; removed for good). > 0 = fire again after that
 * many ns, counted from when the handler returned (a retry; attempt + 1; with PostgreSQL, whose due
 * times are bigint, a retry due in the year 2262 or later is kept but never fires, as a put due
 * UINT64_MAX). CHIME_STORE_DEAD (or any other negative value) = give up now: the timer goes to the
 * dead letters. If the key was put (or requeued) again while the handler ran, the newer timer wins
 * whatever the handler returns: it stays pending, and neither a retry nor a dead letter is made of
 * the firing that ran. */
#define CHIME_STORE_DEAD ((int64_t)-1)

/*
 * A handler runs on the store's runtime (its advancing thread, or one of its workers), never twice at
 * once for the same key: a newer firing of a key whose handler is running waits for it to return. It
 * may call any chime_store_* function but chime_store_close on its own store; no handler starts
 * before chime_store_open has written *out, so one that reads the store from where the application
 * keeps it finds it there. A long handler holds its worker (and with no workers, the firing of
 * every other timer) for as long as it runs.
 */
typedef int64_t chime_handler(void *ctx, const struct chime_fire *fire);

/*
 * Open (or create) the store in cfg->path, replay its journal, and start firing: timers already due
 * fire at once (within max_fires_per_s), those due within the horizon are loaded, the rest wait on
 * disk. A torn tail left by a crash is cut at the last whole record; nothing that was reported durable
 * is lost. (Damage inside the last group commit written cannot be told from a torn tail and is cut
 * the same way, that commit's acknowledged records after it included: docs/design.md, "Limits".)
 * @out: receives the store; untouched on error.  @handler: called for every firing; @ctx is its first
 * argument.
 * Return: 0; -EINVAL if out, cfg or handler is NULL, cfg->path and cfg->postgres are both NULL,
 *         cfg->sync is not a chime_sync, or the runtime config is invalid (as chime_timer_new);
 *         -EBUSY if another process (or another open store in this one) has the directory open
 *         (a child forked while a store was open holds it too, until it exits or calls exec, even
 *         after the parent's close: the lock, flock(2), belongs to the open file, which fork
 *         shares);
 *         -EBADMSG if the journal is damaged other than by a torn tail (a checksum fails, or zeros
 *         are followed by data, in a file or a group commit that had been completely written and
 *         synced, as a later group commit's mark in the log shows; a run or a segment is not the
 *         size its header records (cut short, by something other than a crash); a run, a segment
 *         or the file HEAD is missing, the newest ones included: run `chime-store verify` on the
 *         directory); -EPROTO if the journal's files
 *         are of another format version (written by chime before 0.2.0's release: there is no
 *         migration; nothing is changed); -ENOMEM;
 *         -EIO, -ENOSPC, or another negative errno from the file system (-EACCES, -ENOTDIR, ...;
 *         -EACCES also when the directory had to be made and its parent cannot be read, so that
 *         its new entry cannot be synced: it is removed again; an existing directory whose parent
 *         this process may enter but not read opens);
 *         -ECHILD if a thread could not be started.
 *         With cfg->postgres: -ENOTSUP if this build has no PostgreSQL support (libpq);
 *         -ECONNREFUSED if the database cannot be reached (open does not wait for it); -ENOENT if it
 *         has no schema `chime` (run chime-store --postgres CONNINFO init); -EPROTO if the schema is
 *         another version; -EINVAL also if cfg->postgres is not a connection string libpq can
 *         parse, cfg->shards differs from the schema's, or cfg->node is empty, over 63 bytes or not
 *         UTF-8;
 *         -EBUSY if a live process already uses cfg->node (a process that died holds its name
 *         until its heartbeat lapses, lease_ns at most: a supervisor that restarts it under the
 *         same name at once gets -EBUSY until then); -EIO if the database rejects chime's
 *         statements.
 * Complexity: O(records in the journal) to replay: the journal is read once (4.4 to 6.5 M records/s
 *             on a 2-core VM: 10^7 timers in 2.5 to 3 s; see docs/perf.md, "Reopen"); plus
 *             O(timers due within the horizon) to load them. The key index is rebuilt one table at
 *             a time, from a spill in the journal's directory when it is large (32 bytes a record
 *             on disk, for the open's length): 10^7 far timers open in under 64 MB. With
 *             PostgreSQL: a few connections (seven per node), one lease round (which takes this
 *             node's share of the free shards), and a read of the owned shards' timers due within
 *             the horizon.
 * Thread safety: any thread.
 */
CHIME_API int chime_store_open(chime_store **out, const struct chime_store_config *cfg,
                               chime_handler *handler, void *ctx);

/*
 * Schedule the timer `key` to fire at due_ns (wall clock) with a copy of payload; if key is pending,
 * replace its due time and payload instead. If key's handler is running, this schedules a new firing:
 * the running one's acknowledgement (or retry) does not remove it. A due_ns of UINT64_MAX (in the
 * year 2554) is kept but never fires: no wall clock in ns since the epoch reaches it.
 * Return: 0 (with CHIME_SYNC_EACH: the put is on stable storage); -EINVAL if s, key or payload is NULL,
 *         or key_len or payload_len is 0 or over its maximum, or (PostgreSQL, whose due times are
 *         bigint) due_ns is INT64_MAX or more, in the year 2262, and not UINT64_MAX (nothing is
 *         written); -EIO, -ENOSPC, -EBADMSG, -EMFILE, -ENFILE (the
 *         store has failed: see above; this put was not reported durable: after a reopen it may be
 *         there or not, as a write cut by a crash); -ESHUTDOWN once close has begun; -ENOMEM.
 * Complexity: O(1) expected: a hash lookup in memory and one in the journal's key index (in memory
 *             up to about a quarter of a million keys; beyond, in a file held in the page cache: a
 *             new key makes no system call, a pending key's slot costs a 32-byte pread, and the
 *             index's writes go to the file in batches, at times by the putting thread, which then
 *             holds one of 32 index locks for a few ms), one record appended; with
 *             CHIME_SYNC_EACH a wait for the next group commit (one fdatasync shared with every
 *             waiting thread). Waits also while the journal's flusher is more than a few segments
 *             behind (the disk sets the pace).
 * Thread safety: any thread, handlers included.
 */
CHIME_API int chime_store_put(chime_store *s, const void *key, size_t key_len, const void *payload,
                              size_t payload_len, uint64_t due_ns);

/*
 * Cancel key's pending timer. Returns 0 exactly when the handler of the pending timer will not
 * start (again): it had not started (a timer that fired and waits for max_fires_per_s has not
 * started). A firing recorded before a newer put replaced it is not that timer: its handler still
 * starts. A firing is recorded a lead before its due time, so that its commit is over and the
 * handler can start on time: from then on it is starting, and cannot be cancelled (with
 * max_fires_per_s, its start may come after its due time, up to about the lead plus
 * 1/max_fires_per_s). The lead follows how long the backend's commits take (the longest of the
 * last 10 to 20 s, plus a tick; 50 ms until 10 s of commits have been timed, from the first firing
 * after open): 2 ms on a quick disk, at most 50 ms (chime_store_stats reports it).
 * Return: 0 (with CHIME_SYNC_EACH: the cancel is on stable storage, and no crash can undo it);
 *         -ENOENT if key has no pending timer (never put, fired and acknowledged, cancelled, or in the
 *         dead letters); -EINPROGRESS if key's handler is running, or its firing is recorded (from
 *         the lead before its due time), and no newer put is pending: it cannot be cancelled; -EINVAL if
 *         s or key is NULL or key_len is 0 or over CHIME_STORE_KEY_MAX; -EIO, -ENOSPC, -EBADMSG,
 *         -EMFILE, -ENFILE, -ESHUTDOWN, -ENOMEM as chime_store_put.
 * Complexity: as chime_store_put.
 * Thread safety: any thread, handlers included (a handler cancelling its own key gets -EINPROGRESS).
 */
CHIME_API int chime_store_cancel(chime_store *s, const void *key, size_t key_len);

/*
 * Wait until every put, cancel, acknowledgement and dead-letter change that returned before this call
 * is on stable storage.
 * Return: 0; -EINVAL if s is NULL; -EIO, -ENOSPC, -EBADMSG, -ENOMEM, -EMFILE, -ENFILE if the store
 *         has failed (the sticky error: see above); -ESHUTDOWN once close has begun.
 * Complexity: one group commit. Thread safety: any thread, handlers included.
 */
CHIME_API int chime_store_sync(chime_store *s);

/*
 * Stop firing, wait for the handlers that are running (and for those whose firing is recorded and
 * due within 50 ms, the longest lead), make everything durable and free the store. Pending timers
 * stay in the journal for the next open. s is freed even when an error is returned. With
 * PostgreSQL and the server lost, close waits for it only for what must become durable (the
 * handlers' outcomes, puts not yet committed), and for that at most three leases (10 s at least),
 * after which it returns -EIO: what was not committed is lost, and the outcomes not recorded fire
 * again. A load waiting for the server gives up, and a dead-letter listing waiting for it returns
 * -ESHUTDOWN. Then close releases the node's shards, which the others take over at once, and its
 * name, which a new process may open under at once; with the server down or restarting it tries
 * again for 10 s at most, and not past lease_ns after the node's last heartbeat, when both lapse
 * anyway.
 * Return: 0; -EINVAL if s is NULL; -EDEADLK if called from one of s's handlers (nothing is done);
 *         -EIO, -ENOSPC, -EBADMSG, -ENOMEM, -EMFILE, -ENFILE if the store had failed (the sticky
 *         error) or the last sync failed (what was reported durable stays durable).
 * Complexity: O(timers in memory) plus the wait for running handlers and one group commit.
 * Thread safety: any thread but s's handlers; no other call on s may be running or follow.
 */
CHIME_API int chime_store_close(chime_store *s);

/* ---- Dead letters: timers whose handler gave up, or that ran out of attempts ----
 * They keep their key, payload, due time and attempt count, survive restarts, and stay until requeued
 * or dropped. A key names at most one dead letter (a newer one replaces it), independently of its
 * pending timer. */

/* Called once per dead letter; return nonzero to stop the listing early. */
typedef int chime_dead_fn(void *ctx, const struct chime_fire *dead);

/*
 * Call fn(ctx, dead) for each dead letter, in the order they died. The list is a snapshot taken when
 * the call begins; fn runs with no lock of the store held and may call chime_store_* on s (requeue
 * or drop what it is shown, say).
 * Return: 0; the first nonzero value fn returned; -EINVAL if s or fn is NULL; -EIO, -ENOSPC,
 *         -EBADMSG, -EMFILE, -ENFILE, -ESHUTDOWN as chime_store_sync; -ENOMEM.
 * Complexity: O(dead letters) plus a read of the journal's dead-letter records; flushes the journal's
 *             newest records first (one file written and synced).
 * Thread safety: any thread, handlers included.
 */
CHIME_API int chime_store_dead_list(chime_store *s, chime_dead_fn *fn, void *ctx);

/*
 * Move key's dead letter back to the pending timers, due at due_ns, with its payload and attempt
 * reset to a first firing; a pending timer of the same key is replaced (as chime_store_put).
 * Return: 0 (durable as chime_store_put); -ENOENT if key has no dead letter; -EINVAL as
 *         chime_store_cancel, or for due_ns as chime_store_put; -EIO, -ENOSPC, -EMFILE, -ENFILE,
 *         -ESHUTDOWN, -ENOMEM as chime_store_cancel (PostgreSQL: -ENOMEM also when the requeue
 *         committed but its payload could not be copied back; the timer is then pending and fires
 *         as requeued, loaded by the next poll, and a second requeue finds no dead letter);
 *         -EBADMSG if the journal does not hold the dead letter its index names, or the store has
 *         failed with it.
 * Complexity: the journal first reads the dead letter, outside the key's lock so that other keys
 * do not wait for it: from its runs' indexes, about 64 KiB of each run (about six), or, if it
 * is still in the log (buried since the last flush), after a flush of the log into a run; then as
 * chime_store_put. About 10 to 15 us each with 10^3 to 5*10^4 dead letters on a small VM
 * (SYNC_INTERVAL). PostgreSQL: one statement.
 * Thread safety: as chime_store_put.
 */
CHIME_API int chime_store_dead_requeue(chime_store *s, const void *key, size_t key_len,
                                       uint64_t due_ns);

/*
 * Delete key's dead letter for good.
 * Return: 0 (durable as chime_store_cancel); -ENOENT if key has no dead letter; -EINVAL, -EIO,
 *         -ENOSPC, -EBADMSG, -EMFILE, -ENFILE, -ESHUTDOWN, -ENOMEM as chime_store_cancel.
 * Complexity and thread safety: as chime_store_cancel.
 */
CHIME_API int chime_store_dead_drop(chime_store *s, const void *key, size_t key_len);

struct chime_store_stats {
    uint64_t pending;     /* pending timers, in memory and on disk (a running one counts until
                             its handler's outcome is recorded) */
    uint64_t loaded;      /* of those, the ones due within the horizon, held in memory */
    uint64_t running;     /* firings recorded whose outcome is not yet recorded (a handler about
                             to start at its due time, running, or its outcome being written) */
    uint64_t dead;        /* dead letters */
    uint64_t fired;       /* firings recorded since open (each one's handler starts at its due
                             time, unless the store closes or fails first) */
    uint64_t acked;       /* handlers that returned 0 since open */
    uint64_t retried;     /* handlers that asked for a retry since open */
    uint64_t buried;      /* timers sent to the dead letters since open */
    uint64_t journal_bytes; /* bytes the journal's files hold on disk (not the key index's
                               unnamed files in its directory: 32 bytes a slot of its tables
                               beyond about a quarter of a million keys, given back as they go) */
    int error;            /* 0, or the sticky error: -EIO, -ENOSPC, -EBADMSG, -ENOMEM, -EMFILE,
                             -ENFILE, or another error of the file system's a journal write met
                             (-EDQUOT, -EROFS, -EFBIG...; see above) */
    uint64_t lead_ns;     /* how long before its due time a firing is recorded now (2 to 50 ms,
                             from recent commit times; see chime_store_cancel) */
};

/*
 * Read the store's counters (a snapshot: each is exact at some moment during the call). A NULL s or
 * out is a no-op. With PostgreSQL, pending, dead and journal_bytes (the schema's size) come from a
 * count that the node runs in the database while stats are being asked for, at most every 500 ms:
 * they may be that much older, and the first call after a quiet spell returns the last count (0
 * before any).
 * Complexity: O(files in the journal's directory, a few dozen): journal_bytes is read from it; and
 *             the counts of loaded timers are summed over 64 stripes, each locked in turn as a put
 *             to it would. With PostgreSQL, that sum here, and O(pending keys) in the database every
 *             500 ms at most.
 * Thread safety: any thread, handlers included.
 */
CHIME_API void chime_store_stats(const chime_store *s, struct chime_store_stats *out);

#ifdef __cplusplus
}
#endif

#endif /* CHIME_STORE_H */
