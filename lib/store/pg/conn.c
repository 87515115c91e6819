/* SPDX-License-Identifier: MIT */
/*
 * Connections to PostgreSQL (pg.h): each thread of a node that talks to the database has its own,
 * with session settings for its role, and reconnects on its own when the connection is lost (a
 * server restart, a network failure): D5 says a backend retries what it can retry safely, and every
 * statement chime sends is safe to send again once it is known not to have committed (pg.h, P6).
 *
 * SESSION SETTINGS
 *   statement_timeout 60 s: no statement of chime's takes that long; one that does (a lock wait
 *     behind something stuck) is rolled back and run again. It also bounds how long a put can sit
 *     between taking its version and inserting it, below the two minutes a tombstone is kept for
 *     P4 (schema.c, TOMBSTONE_AGE).
 *   idle_in_transaction_session_timeout max(lease / 2, 1 s): a node paused inside a transaction
 *     (SIGSTOP) holds row locks, among them FOR KEY SHARE locks on shard rows that a takeover must
 *     lock FOR UPDATE; the server ends such a session within that time, so a takeover waits at
 *     most that long beyond the lease.
 *   lock_timeout max(lease / 4, 1 s), on the owners' sessions (roles "lane" and "fire") only: a
 *     node paused while one of its owner statements waits for a key's row that another
 *     transaction holds is not idle but active, and kept the shard rows it had locked until the
 *     wait ended, up to statement_timeout while the key stayed held (found in review;
 *     test_pg_takeover). The wait now ends within this time (SQLSTATE 55P03: rolled back and run
 *     again, PG_RETRY), and the paused session is then idle in its failed transaction, which the
 *     setting above ends. At least deadlock_timeout's default, 1 s, so that the server's deadlock
 *     check settles a real cycle first; the owners lock the keys they share in one order
 *     (statements.h), so a wait that long means a key held by something stuck or slow. Between
 *     the runs the shard's row is not locked: an owner statement cannot hold a shard against a
 *     takeover for longer than this, a drain's un-record included (backend.c, pg_abandon: one
 *     whose key stays held past the drain's lease bound is refused, and the attempt is spent).
 *   client_connection_check_interval lease / 4 (at least 500 ms; PostgreSQL 14 on): the server
 *     checks that the client is still there while a statement runs, so that a dead node's session
 *     waiting for a lock goes within that time, with the shard rows it holds.
 *   application_name "chime <node> <role>", so that pg_stat_activity says who is who.
 *   tcp_keepalives_idle 5 s, _interval 2 s, _count 3: the server's side of DEAD PEERS below. A
 *     session waits for its client without a bound where no timeout above applies: in the middle
 *     of a pipeline (after a statement, before the Sync that ends it, the session is neither
 *     idle in a transaction nor running a statement). A node whose machine died there, its
 *     connection dropped by the network, held its locks (key rows, shard rows FOR KEY SHARE,
 *     against a takeover) until the server's kernel gave up, two hours by its defaults; now
 *     about 11 s (found in review).
 *   synchronous_commit at least local where the database or role has it off: a commit then
 *     returns before its WAL is flushed, and a put chime reported durable was lost in a server
 *     crash (found in review). A stronger setting (remote_apply, ...) is kept.
 *
 * DEAD PEERS. A server whose machine dies, or a network that drops everything, closes nothing: a
 * thread waiting for a reply would wait for the kernel's defaults, two hours of TCP keepalive idle
 * time, or about fifteen minutes of retransmissions for a request never acknowledged, and a node
 * could not follow a failover for that long. So unless the connection string says otherwise, each
 * connection probes after 5 s of silence, every 2 s, and gives up after 3 probes unanswered (11 s),
 * gives up on data unacknowledged for 75 s (tcp_user_timeout; longer than statement_timeout,
 * since a server busy with a statement may leave what we pipelined after it unread, and Linux
 * counts a full window against that timeout), and on a connection attempt after 10 s. The lost
 * connection is then handled as any other (P6). These are TCP's own checks: they do not catch a
 * server that is alive but stuck, whose kernel still answers (statement_timeout bounds only what
 * the server does run).
 *
 * STALE SESSIONS. A connection given up on (lost, or silent: below) may leave its session running
 * on the server: the network lost the flow but the server's side stays open (a proxy in between
 * keeps it), or the server is stuck. Such a session keeps its transaction and its locks, and a
 * lane's fence ask (batch.c, resolve) waited for it for ever, and close with it (found in review).
 * So the next connect of the same pg_conn ends the session it gave up last, if it is still there
 * (pg_terminate_backend, matched by pid and start time, which name one session of a server, and by
 * user; never the new session itself), best effort (chime__pg_end_session). Safe whatever the
 * session was doing: a try that had not sent COMMIT cannot commit, and one that had is resolved by
 * its mark once the session has ended, either way.
 *
 * SILENT SERVERS. So no thread waits for a reply without a bound of its own: every wait for a
 * result goes through chime__pg_await, which gives up when the server has sent nothing for
 * chime__pg_silence_ns (90 s) while a reply is owed. Each statement of chime's ends within
 * statement_timeout (60 s, counted per statement, also within a pipeline) or is cancelled by the
 * server, which answers then; so a live server is never given up on, and 30 s is left for the
 * network. Giving up shuts the socket down: libpq then finds the connection broken, exactly as if
 * the network had cut it, and every caller already handles that (P6 resolves a COMMIT whose reply
 * never came). Sending is bounded the same way where it can block for long: the lanes' pipelines,
 * megabytes at times, go out through batch.c's flush, which gives up when nothing has moved either
 * way for as long; every other statement is small enough for the socket's buffers, and behind
 * them tcp_user_timeout counts a window the server keeps shut.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h> /* INT_MAX */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "store/pg/pg.h"

uint64_t chime__pg_mono(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t chime__pg_wall(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

_Atomic uint64_t chime__pg_silence_ns = UINT64_C(90000000000);

/* relaxed: a bound read once per wait; a test that changes it while a node runs needs no order
 * with anything else, a wait in progress keeps the bound it began with */
static uint64_t silence_ns(void)
{
    return atomic_load_explicit(&chime__pg_silence_ns, memory_order_relaxed);
}

void chime__pg_abandon(struct pg_conn *pc)
{
    shutdown(PQsocket(pc->c), SHUT_RDWR);
    PQconsumeInput(pc->c); /* reads the end of the stream: libpq marks the connection broken */
}

int chime__pg_await(struct pg_conn *pc)
{
    if (!pc->c)
        return PG_LOST;
    uint64_t heard = chime__pg_mono(); /* when the server last sent something */
    uint64_t silence = silence_ns();
    while (PQisBusy(pc->c)) {
        uint64_t quiet_ns = chime__pg_mono() - heard;
        if (quiet_ns >= silence) {
            chime__pg_abandon(pc);
            return PG_LOST;
        }
        uint64_t wait_ms = (silence - quiet_ns) / 1000000u + 1;
        struct pollfd pfd = { PQsocket(pc->c), POLLIN, 0 };
        int n = poll(&pfd, 1, wait_ms > 1000 ? 1000 : (int)wait_ms);
        if (n < 0 && errno != EINTR)
            return PG_LOST;
        if (n > 0) {
            if (!PQconsumeInput(pc->c))
                return PG_LOST;
            heard = chime__pg_mono();
        }
    }
    return PQstatus(pc->c) == CONNECTION_OK ? PG_OK : PG_LOST;
}

PGresult *chime__pg_result(struct pg_conn *pc, int sent)
{
    PGresult *last = NULL;
    if (!sent)
        return NULL;
    for (;;) {
        if (chime__pg_await(pc) != PG_OK) {
            PQclear(last);
            return NULL;
        }
        PGresult *r = PQgetResult(pc->c);
        if (!r)
            return last;
        PQclear(last);
        last = r;
    }
}

/* ---- pipelines (pg.h) ---- */

int chime__pg_flush(struct pg_conn *pc)
{
    uint64_t moved = chime__pg_mono(); /* when bytes last went either way */
    uint64_t silence = silence_ns();
    for (;;) {
        int f = PQflush(pc->c);
        if (f == 0)
            return PG_OK;
        if (f < 0)
            return PG_LOST;
        if (chime__pg_mono() - moved >= silence) {
            chime__pg_abandon(pc);
            return PG_LOST;
        }
        struct pollfd pfd = { PQsocket(pc->c), POLLIN | POLLOUT, 0 };
        if (poll(&pfd, 1, 1000) < 0 && errno != EINTR)
            return PG_LOST;
        if (pfd.revents & (POLLIN | POLLOUT))
            moved = chime__pg_mono();
        if ((pfd.revents & POLLIN) && !PQconsumeInput(pc->c))
            return PG_LOST;
    }
}

int chime__pg_pipeline_result(struct pg_conn *pc, PGresult **out)
{
    if (chime__pg_await(pc) != PG_OK)
        return PG_LOST;
    PGresult *r = PQgetResult(pc->c);
    int rc = chime__pg_status(pc, r);
    if (r && PQresultStatus(r) == PGRES_PIPELINE_SYNC)
        rc = PG_LOST; /* out of step: treat the connection as unusable */
    if (r && chime__pg_await(pc) != PG_OK)
        rc = PG_LOST;
    /* each query's results end with NULL */
    PGresult *end = r && rc != PG_LOST ? PQgetResult(pc->c) : NULL;
    if (end) {
        PQclear(end);
        rc = rc == PG_OK ? PG_LOST : rc;
    }
    if (out && rc == PG_OK)
        *out = r;
    else
        PQclear(r);
    return rc;
}

int chime__pg_pipeline_sync(struct pg_conn *pc)
{
    if (chime__pg_await(pc) != PG_OK)
        return PG_LOST;
    PGresult *r = PQgetResult(pc->c);
    int ok = r && PQresultStatus(r) == PGRES_PIPELINE_SYNC;
    PQclear(r);
    return ok ? PG_OK : PG_LOST;
}

/* Classify r; on PG_OK hand it to *out if asked for, else clear it. */
static int settle(struct pg_conn *pc, PGresult *r, PGresult **out)
{
    int rc = chime__pg_status(pc, r);
    if (rc == PG_OK && out)
        *out = r;
    else
        PQclear(r);
    return rc;
}

int chime__pg_run(struct pg_conn *pc, const char *sql, PGresult **out)
{
    return settle(pc, chime__pg_result(pc, pc->c && PQsendQuery(pc->c, sql)), out);
}

static const char *sqlstate(const PGresult *r)
{
    const char *s = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
    return s ? s : "";
}

int chime__pg_status(struct pg_conn *pc, const PGresult *r)
{
    ExecStatusType st = r ? PQresultStatus(r) : PGRES_FATAL_ERROR;
    if (r && (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK || st == PGRES_SINGLE_TUPLE ||
              st == PGRES_PIPELINE_SYNC || st == PGRES_EMPTY_QUERY))
        return PG_OK;
    if (!r || PQstatus(pc->c) != CONNECTION_OK)
        return PG_LOST;
    if (st == PGRES_PIPELINE_ABORTED)
        return PG_RETRY; /* an earlier statement of the pipeline failed: that one says why */
    const char *s = sqlstate(r);
    if (!strncmp(s, "08", 2) || !strcmp(s, "57P01") || !strcmp(s, "57P02") || !strcmp(s, "57P03") ||
        !strcmp(s, "53300") || !strcmp(s, "25P03") || !*s)
        return PG_LOST; /* connection or server going away; no SQLSTATE: a client-side failure */
    if (!strcmp(s, "40001") || !strcmp(s, "40P01") || !strcmp(s, "55P03") || !strcmp(s, "57014"))
        return PG_RETRY;
    /* A row no partition takes: a check violation (23514) that names no constraint, unlike a
     * constraint's own. Told by the fields, never by the message, which the server writes in its
     * lc_messages language (a German server's failed the store: test_pg_locale). */
    if (!strcmp(s, "23514") && !PQresultErrorField(r, PG_DIAG_CONSTRAINT_NAME))
        return PG_NOPART;
    fprintf(stderr, "chime: PostgreSQL (%s): %s", pc->role, PQresultErrorMessage(r));
    return PG_FATAL;
}

/* Notices ("relation already exists, skipping") are not for the application's stderr. */
static void quiet(void *arg, const char *message)
{
    (void)arg;
    (void)message;
}

/* A timeout in ms for a session setting, which is an int: at least 1 s, at most INT_MAX. */
static uint64_t clamp_ms(uint64_t ms)
{
    return ms < 1000 ? 1000 : ms > INT_MAX ? INT_MAX : ms;
}

PGconn *chime__pg_connectdb(const char *conninfo, const char *app)
{
    /* Our defaults for a lost server (DEAD PEERS), then the caller's string over them
     * (expand_dbname: keywords are applied in order, the last value of one stays), then
     * application_name on top of it. */
    const char *keys[] = { "connect_timeout", "keepalives", "keepalives_idle",
                           "keepalives_interval", "keepalives_count", "tcp_user_timeout",
                           "dbname", "application_name", NULL };
    const char *vals[] = { "10", "1", "5", "2", "3", "75000", conninfo, app, NULL };
    return PQconnectdbParams(keys, vals, 1);
}

_Atomic int chime__pg_lock_timeout_off;

int chime__pg_connect(struct pg_conn *pc)
{
    char app[128], set[1024], *parse_err = NULL;
    /* A malformed string is -EINVAL, told by libpq's parser rather than by its message, which is
     * in the application's language (test_pg_locale). */
    PQconninfoOption *parsed = PQconninfoParse(pc->conninfo, &parse_err);
    if (!parsed) {
        int err = parse_err ? -EINVAL : -ENOMEM;
        PQfreemem(parse_err);
        return err;
    }
    PQconninfoFree(parsed);
    /* At most 63 bytes, what the server keeps: a longer name was cut with a notice that libpq
     * printed on the application's stderr before `quiet` could be set (found in review). The
     * node's name is cut, not the role's, which tells the sessions apart in pg_stat_activity. */
    const char *node = pc->node ? pc->node : "-", *role = pc->role ? pc->role : "-";
    int room = 63 - (int)strlen("chime  ") - (int)strlen(role);
    snprintf(app, sizeof app, "chime %.*s %s", room, node, role);
    pc->c = chime__pg_connectdb(pc->conninfo, app);
    pc->prepared = 0;
    if (!pc->c)
        return -ENOMEM;
    if (PQstatus(pc->c) != CONNECTION_OK) {
        /* What the parser above lets through and the connection refuses before any network
         * (a port that is not a number: libpq's English message, the C locale's). */
        const char *msg = PQerrorMessage(pc->c);
        int bad = strstr(msg, "invalid connection option") || strstr(msg, "missing \"=\"") ||
                  strstr(msg, "unterminated quoted string") || strstr(msg, "invalid URI") ||
                  strstr(msg, "invalid integer value");
        PQfinish(pc->c);
        pc->c = NULL;
        return bad ? -EINVAL : PG_LOST;
    }
    /* The settings are ints of ms: a lease over 49 days made the SET fail, and open said the
     * database could not be reached (found in review). */
    uint64_t idle_ms = clamp_ms(pc->lease_ns / 2000000u);
    PQsetNoticeProcessor(pc->c, quiet, NULL);
    /* A session whose node died while one of its statements waited (an owner statement, for a
     * key's row that another transaction holds) kept the shard rows it had locked FOR KEY SHARE
     * until the wait ended, up to statement_timeout: the server looks at a client only when it
     * next reads from it, and every acquisition skips a locked row, so the dead node's shards
     * stayed untaken (found in review; test_pg_takeover). client_connection_check_interval
     * (PostgreSQL 14 on) has the server look while a statement runs. */
    char check[80] = "", lock[48] = "";
    if (PQserverVersion(pc->c) >= 140000)
        snprintf(check, sizeof check, " SET client_connection_check_interval = %llu;",
                 (unsigned long long)(idle_ms / 2));
    /* relaxed: a test's switch, set before the nodes it concerns open */
    if (!atomic_load_explicit(&chime__pg_lock_timeout_off, memory_order_relaxed) && pc->role &&
        (!strcmp(pc->role, "lane") || !strcmp(pc->role, "fire"))) {
        uint64_t lock_ms = clamp_ms(pc->lease_ns / 4000000u); /* see SESSION SETTINGS */
        snprintf(lock, sizeof lock, " SET lock_timeout = %llu;", (unsigned long long)lock_ms);
    }
    snprintf(set, sizeof set,
             "SET statement_timeout = 60000; SET idle_in_transaction_session_timeout = %llu;%s%s"
             " SET tcp_keepalives_idle = 5; SET tcp_keepalives_interval = 2;"
             " SET tcp_keepalives_count = 3;"
             " SELECT set_config('synchronous_commit', 'local', false)"
             " WHERE current_setting('synchronous_commit') = 'off';"
             " SET client_min_messages = warning;"
             " SELECT pg_backend_pid(), (extract(epoch FROM backend_start) * 1e6)::int8"
             " FROM pg_stat_activity WHERE pid = pg_backend_pid()",
             (unsigned long long)idle_ms, check, lock);
    PGresult *r = NULL;
    int rc = chime__pg_run(pc, set, &r);
    struct pg_session me = { 0, 0 };
    if (rc == PG_OK && PQntuples(r) == 1) /* now: libpq's PQbackendPID says 0 once it is bad */
        me = (struct pg_session){ atoi(PQgetvalue(r, 0, 0)), atoll(PQgetvalue(r, 0, 1)) };
    PQclear(r);
    if (rc == PG_OK && pc->stale.pid)
        rc = chime__pg_end_session(pc, pc->stale);
    if (rc != PG_OK) {
        struct pg_session stale = pc->stale;
        chime__pg_disconnect(pc);
        pc->stale = stale; /* still to be ended; this session never ran anything */
        return PG_LOST;
    }
    pc->session = me;
    pc->stale = (struct pg_session){ 0, 0 };
    return 0;
}

void chime__pg_disconnect(struct pg_conn *pc)
{
    if (pc->c) {
        pc->stale = pc->session; /* STALE SESSIONS: ended by the next connect */
        pc->session = (struct pg_session){ 0, 0 };
        PQfinish(pc->c);
    }
    pc->c = NULL;
    pc->prepared = 0;
}

int chime__pg_end_session(struct pg_conn *pc, struct pg_session s)
{
    if (!s.pid)
        return PG_OK;
    /* Matched by its start too, so that a pid the server gave out again is left alone; by user,
     * so that it needs no right this user may lack beyond EXECUTE on pg_terminate_backend
     * (PUBLIC's by default). Without that right it fails, logged, and the session is not ended:
     * best effort, never a reason not to connect (found in review: the connect failed for ever). */
    char sql[300];
    snprintf(sql, sizeof sql,
             "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid = %d"
             " AND (extract(epoch FROM backend_start) * 1e6)::int8 = %lld"
             " AND usename = current_user AND pid <> pg_backend_pid()",
             s.pid, s.start);
    return chime__pg_run(pc, sql, NULL) == PG_LOST ? PG_LOST : PG_OK;
}

int chime__pg_connect_or_wait(struct pg_conn *pc, long *delay_ms)
{
    int rc = chime__pg_connect(pc);
    if (rc != PG_LOST) {
        *delay_ms = 10;
        return rc;
    }
    /* The server restarts or is unreachable: back off to 250 ms between tries. The store goes on
     * meanwhile; leases lapse on their own (lease.c) and their shards move on. */
    struct timespec ts = { 0, *delay_ms * 1000000L };
    nanosleep(&ts, NULL);
    if (*delay_ms < 250)
        *delay_ms *= 2;
    return PG_LOST;
}

int chime__pg_reconnect(struct pg_conn *pc, _Atomic int *stop)
{
    chime__pg_disconnect(pc);
    long delay_ms = 10;
    for (;;) {
        if (stop && atomic_load_explicit(stop, memory_order_acquire)) /* pairs with the stopper */
            return PG_LOST;
        int rc = chime__pg_connect_or_wait(pc, &delay_ms);
        if (rc != PG_LOST)
            return rc;
    }
}

static int exec_as(struct pg_conn *pc, const char *sql, int n, const char *const *values,
                   PGresult **out, int binary)
{
    if (!pc->c)
        return PG_LOST;
    return settle(pc, chime__pg_result(pc, PQsendQueryParams(pc->c, sql, n, NULL, values, NULL,
                                                             NULL, binary)),
                  out);
}

int chime__pg_exec(struct pg_conn *pc, const char *sql, int n, const char *const *values,
                   PGresult **out)
{
    return exec_as(pc, sql, n, values, out, 1);
}

int chime__pg_exec_text(struct pg_conn *pc, const char *sql, int n, const char *const *values,
                        PGresult **out)
{
    return exec_as(pc, sql, n, values, out, 0);
}

int chime__pg_prepare(struct pg_conn *pc, int id, const char *name, const char *sql)
{
    if (pc->prepared & (1 << id))
        return PG_OK;
    int rc = settle(pc, chime__pg_result(pc, PQsendPrepare(pc->c, name, sql, 0, NULL)), NULL);
    if (rc == PG_OK)
        pc->prepared |= 1 << id;
    return rc;
}

/* ---- binary arrays: ndim, has-null, element type, then (length, lower bound), then each element
 * as (length, bytes); every integer big-endian. ---- */

#define ARRAY_HEADER 20

static void put32(char *p, uint32_t v)
{
    p[0] = (char)(v >> 24);
    p[1] = (char)(v >> 16);
    p[2] = (char)(v >> 8);
    p[3] = (char)v;
}

static int reserve(struct pg_array *a, size_t more)
{
    if (a->len + more <= a->cap)
        return 1;
    size_t cap = a->cap ? a->cap : 256;
    while (cap < a->len + more)
        cap *= 2;
    char *p = realloc(a->buf, cap);
    if (!p) {
        a->oom = 1;
        return 0;
    }
    a->buf = p;
    a->cap = cap;
    return 1;
}

void chime__pg_array_init(struct pg_array *a, uint32_t oid)
{
    memset(a, 0, sizeof *a);
    a->oid = oid;
    chime__pg_array_reset(a);
}

void chime__pg_array_reset(struct pg_array *a)
{
    a->len = 0;
    a->n = 0;
    a->oom = 0;
    if (reserve(a, ARRAY_HEADER))
        a->len = ARRAY_HEADER;
}

void chime__pg_array_free(struct pg_array *a)
{
    free(a->buf);
    memset(a, 0, sizeof *a);
}

void chime__pg_array_bytes(struct pg_array *a, const void *p, size_t n)
{
    if (!reserve(a, 4 + n))
        return;
    put32(a->buf + a->len, (uint32_t)n);
    memcpy(a->buf + a->len + 4, p, n);
    a->len += 4 + n;
    a->n++;
}

void chime__pg_array_i64(struct pg_array *a, int64_t v)
{
    char b[8];
    put32(b, (uint32_t)((uint64_t)v >> 32));
    put32(b + 4, (uint32_t)v);
    chime__pg_array_bytes(a, b, 8);
}

void chime__pg_array_i32(struct pg_array *a, int32_t v)
{
    char b[4];
    put32(b, (uint32_t)v);
    chime__pg_array_bytes(a, b, 4);
}

const char *chime__pg_array_done(struct pg_array *a, int *len)
{
    if (a->oom || a->len < ARRAY_HEADER)
        return NULL;
    put32(a->buf, a->n ? 1 : 0); /* an empty array has no dimensions */
    put32(a->buf + 4, 0);
    put32(a->buf + 8, a->oid);
    put32(a->buf + 12, a->n);
    put32(a->buf + 16, 1);
    *len = a->n ? (int)a->len : 12;
    return a->buf;
}

static uint64_t get64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | p[i];
    return v;
}

int64_t chime__pg_i64(const PGresult *r, int row, int col)
{
    const unsigned char *p = (const unsigned char *)PQgetvalue(r, row, col);
    return PQgetlength(r, row, col) == 8 ? (int64_t)get64(p) : 0;
}

int32_t chime__pg_i32(const PGresult *r, int row, int col)
{
    const unsigned char *p = (const unsigned char *)PQgetvalue(r, row, col);
    if (PQgetlength(r, row, col) != 4)
        return 0;
    return (int32_t)((uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]);
}
