/* SPDX-License-Identifier: MIT */
/*
 * chime_store on PostgreSQL against the local server's own ceiling, in one run, on a throwaway
 * cluster started here (test/pg_util.h) with fsync on (CHIME_PG_FSYNC=on is forced: a commit is
 * a WAL flush, as in production):
 *
 *   insert_1conn    the baseline: raw batched INSERTs of 1000 rows (16-byte key, due, 64-byte
 *                   payload) per transaction, through unnest over binary arrays, on one connection;
 *   insert_4conn    the same on four connections at once;
 *   schema_1conn,   chime's own put statement (statements.h: a row into timers, the key's upsert
 *   schema_4conn    into keys) with 1000 rows per transaction, on one and on four connections:
 *                   the ceiling of chime's schema, where the raw inserts are the server's;
 *   put_each        chime_store_put with CHIME_SYNC_EACH from T threads at once, for SECONDS, for
 *                   each T in THREADS (16-byte keys, 64-byte payloads, due in a day: nothing
 *                   fires), one node. With SYNC_EACH, puts/s is at most threads / commit latency:
 *                   a lane's batch is what its waiting callers put, so the thread count matters;
 *   fire_ack        FIRE_N timers due at one instant; from that instant until every handler
 *                   returned 0 and chime_store_sync confirmed every acknowledgement committed;
 *   takeover        node A (a child process) puts TAKEOVER_N timers due 5 to 50 minutes ahead;
 *                   node B joins, takes its half of the shards and loads their timers; 1000 of
 *                   A's are made due in the 2 s after the kill (an UPDATE), and A is killed
 *                   (SIGKILL); reported: when B had A's shards
 *                   (database time of the acquisitions) and when the last of the overdue timers
 *                   fired, both from the kill, against lease_ns.
 *
 * Usage: pg_bench [THREADS [SECONDS [FIRE_N [TAKEOVER_N]]]]   (default 64,256,1024 5 200000 1000000;
 *        THREADS is a comma-separated list; fire_ack and takeover put from its last, the largest
 *        by default)
 *        PG_BENCH_PUTS_ONLY=1: put_each alone; PG_BENCH_TAKEOVER_ONLY=1: takeover alone;
 *        PG_BENCH_FIRE_ONLY=RATE: fire_ack alone, from 64 threads, its due instant set for puts
 *        at RATE puts/s (the put_each figure it would otherwise take).
 * Run it under flock /work/bench.lock; docs/perf.md has the figures and the command.
 */
#include "pg_util.h"

#include <inttypes.h>
#include <pthread.h>
#include <sys/prctl.h>

#include "chime.h"
#include "store/pg/pg.h"
#include "store/pg/statements.h"
#include "store/store.h"

#define SEC UINT64_C(1000000000)
#define MS UINT64_C(1000000)
#define LEASE_NS (2 * SEC)

static struct pg_cluster cluster;
static unsigned threads = 1024, seconds = 5, fire_n = 200000, takeover_n = 1000000;
static const char *thread_list = "64,256,1024";

static uint64_t now_ns(clockid_t c)
{
    struct timespec ts;
    clock_gettime(c, &ts);
    return (uint64_t)ts.tv_sec * SEC + (uint64_t)ts.tv_nsec;
}

static void die(const char *what)
{
    fprintf(stderr, "pg_bench: %s\n", what);
    exit(1);
}

static void db(const char *name, char *out, size_t n)
{
    if (pg_cluster_db(&cluster, name, 256, 3600, out, n) != 0)
        die("cannot create a database");
}

/* ---- the baseline: raw batched INSERTs ---- */

struct ins {
    const char *conninfo;
    unsigned index;
    _Atomic int *stop;
    uint64_t rows;
    int schema; /* chime's own put statement into its schema, instead of the plain table */
};

static void *insert_main(void *arg)
{
    struct ins *w = arg;
    PGconn *c = PQconnectdb(w->conninfo);
    if (PQstatus(c) != CONNECTION_OK)
        die(PQerrorMessage(c));
    /* keys, dues, payloads; for the schema also parts (= dues), shards and attempts */
    struct pg_array a[6];
    static const uint32_t oids[6] = { PG_OID_BYTEA, PG_OID_INT8, PG_OID_BYTEA,
                                      PG_OID_INT8,  PG_OID_INT4, PG_OID_INT4 };
    int na = w->schema ? 6 : 3; /* the raw insert builds only what it sends */
    for (int i = 0; i < na; i++)
        chime__pg_array_init(&a[i], oids[i]);
    char payload[64];
    memset(payload, 'p', sizeof payload);
    uint64_t due = now_ns(CLOCK_REALTIME) + 86400 * SEC;
    for (uint64_t seq = 0; !atomic_load(w->stop);) {
        for (int i = 0; i < na; i++)
            chime__pg_array_reset(&a[i]);
        for (int i = 0; i < 1000; i++, seq++) {
            char key[17];
            snprintf(key, sizeof key, "%02u%014" PRIu64, w->index, seq);
            chime__pg_array_bytes(&a[0], key, 16);
            chime__pg_array_i64(&a[1], (int64_t)due);
            chime__pg_array_bytes(&a[2], payload, sizeof payload);
            if (w->schema) {
                chime__pg_array_i64(&a[3], (int64_t)due);
                chime__pg_array_i32(&a[4], (int32_t)chime__pg_shard_of(key, 16, 256));
                chime__pg_array_i32(&a[5], 0);
            }
        }
        const char *v[6];
        int len[6], fmt[6] = { 1, 1, 1, 1, 1, 1 };
        for (int i = 0; i < na; i++)
            v[i] = chime__pg_array_done(&a[i], &len[i]);
        PGresult *r;
        if (w->schema) { /* the put's parameters: keys, dues, parts, shards, attempts, payloads */
            const char *pv[6] = { v[0], v[1], v[3], v[4], v[5], v[2] };
            int pl[6] = { len[0], len[1], len[3], len[4], len[5], len[2] };
            r = PQexecParams(c, PG_SQL_PUT, 6, NULL, pv, pl, fmt, 1);
        } else {
            r = PQexecParams(c, "INSERT INTO bench (key, due, payload) SELECT * FROM"
                                " unnest($1::bytea[], $2::int8[], $3::bytea[])",
                             3, NULL, v, len, fmt, 1);
        }
        if (PQresultStatus(r) != PGRES_COMMAND_OK && PQresultStatus(r) != PGRES_TUPLES_OK)
            die(PQerrorMessage(c));
        PQclear(r);
        w->rows += 1000;
    }
    for (int i = 0; i < na; i++)
        chime__pg_array_free(&a[i]);
    PQfinish(c);
    return NULL;
}

/* schema: chime's put statement (statements.h) into the schema of conninfo's database (a fresh
 * one: every key is new), whose partition for the day ahead is created here. */
static double insert_rate(const char *conninfo, unsigned conns, int schema)
{
    PGconn *c = PQconnectdb(conninfo);
    char sql[300];
    uint64_t width = 3600 * SEC, n = (now_ns(CLOCK_REALTIME) + 86400 * SEC) / width;
    if (schema)
        snprintf(sql, sizeof sql, "CREATE TABLE chime.timers_%" PRIu64 " PARTITION OF chime.timers"
                 " FOR VALUES FROM (%" PRIu64 ") TO (%" PRIu64 ")", n, n * width, (n + 1) * width);
    else
        snprintf(sql, sizeof sql, "DROP TABLE IF EXISTS bench; CREATE TABLE bench (key bytea"
                 " PRIMARY KEY, due int8 NOT NULL, payload bytea NOT NULL)");
    PGresult *r = PQexec(c, sql);
    if (PQresultStatus(r) != PGRES_COMMAND_OK)
        die(PQerrorMessage(c));
    PQclear(r);
    PQfinish(c);
    _Atomic int stop = 0;
    struct ins w[8];
    pthread_t t[8];
    uint64_t t0 = now_ns(CLOCK_MONOTONIC);
    for (unsigned i = 0; i < conns; i++) {
        w[i] = (struct ins){ conninfo, i, &stop, 0, schema };
        pthread_create(&t[i], NULL, insert_main, &w[i]);
    }
    struct timespec ts = { (time_t)seconds, 0 };
    nanosleep(&ts, NULL);
    atomic_store(&stop, 1);
    uint64_t rows = 0;
    for (unsigned i = 0; i < conns; i++) {
        pthread_join(t[i], NULL);
        rows += w[i].rows;
    }
    return (double)rows / ((double)(now_ns(CLOCK_MONOTONIC) - t0) / 1e9);
}

/* ---- chime's puts ---- */

static int64_t ack(void *ctx, const struct chime_fire *f)
{
    (void)f;
    atomic_fetch_add((_Atomic uint64_t *)ctx, 1);
    return 0;
}

static chime_store *open_node(const char *conninfo, const char *name, _Atomic uint64_t *fired)
{
    struct chime_store_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.postgres = conninfo;
    cfg.node = name;
    cfg.lease_ns = LEASE_NS;
    cfg.runtime.workers = 2;
    chime_store *s;
    int rc = chime_store_open(&s, &cfg, ack, fired);
    if (rc != 0)
        die(chime_strerror(rc));
    return s;
}

struct putter {
    chime_store *s;
    unsigned index, every; /* puts keys index, index + every, ... below `count` */
    uint64_t count, due, spread, done;
    _Atomic int *stop;
};

static void *put_main(void *arg)
{
    struct putter *p = arg;
    char payload[64];
    memset(payload, 'p', sizeof payload);
    for (uint64_t k = p->index; k < p->count && !(p->stop && atomic_load(p->stop)); k += p->every) {
        char key[17];
        snprintf(key, sizeof key, "k%015" PRIu64, k % UINT64_C(1000000000000000));
        uint64_t due = p->due + (p->spread ? k * p->spread / p->count : 0);
        int rc = chime_store_put(p->s, key, 16, payload, sizeof payload, due);
        if (rc != 0)
            die(chime_strerror(rc));
        p->done++;
    }
    return NULL;
}

/* Put keys [0, count) from n threads; stop (if not NULL) ends early. Return: puts made. */
static uint64_t put_all(chime_store *s, unsigned n, uint64_t count, uint64_t due, uint64_t spread,
                        _Atomic int *stop)
{
    struct putter *p = calloc(n, sizeof *p);
    pthread_t *t = calloc(n, sizeof *t);
    for (unsigned i = 0; i < n; i++) {
        p[i] = (struct putter){ s, i, n, count, due, spread, 0, stop };
        pthread_create(&t[i], NULL, put_main, &p[i]);
    }
    uint64_t done = 0;
    if (stop) {
        struct timespec ts = { (time_t)seconds, 0 };
        nanosleep(&ts, NULL);
        atomic_store(stop, 1);
    }
    for (unsigned i = 0; i < n; i++) {
        pthread_join(t[i], NULL);
        done += p[i].done;
    }
    free(p);
    free(t);
    return done;
}

static double put_rate(const char *conninfo)
{
    _Atomic uint64_t fired = 0;
    _Atomic int stop = 0;
    chime_store *s = open_node(conninfo, "bench", &fired);
    uint64_t t0 = now_ns(CLOCK_MONOTONIC);
    uint64_t n = put_all(s, threads, UINT64_MAX, now_ns(CLOCK_REALTIME) + 86400 * SEC, 0, &stop);
    double rate = (double)n / ((double)(now_ns(CLOCK_MONOTONIC) - t0) / 1e9);
    chime_store_close(s);
    return rate;
}

/* ---- fire + acknowledgement ---- */

/* put_rate: what put_each measured, to choose a due time after the last put. */
static double fire_ack_rate(const char *conninfo, double put_rate)
{
    _Atomic uint64_t fired = 0;
    chime_store *s = open_node(conninfo, "fire", &fired);
    uint64_t due = now_ns(CLOCK_REALTIME) + 2 * SEC + (uint64_t)((double)fire_n / put_rate * 2e9);
    put_all(s, threads, fire_n, due, 0, NULL);
    if (now_ns(CLOCK_REALTIME) >= due)
        die("the puts took longer than twice the measured put rate: run again");
    while (atomic_load(&fired) < fire_n) {
        struct timespec ts = { 0, 1000000 };
        nanosleep(&ts, NULL);
    }
    /* the logic's counts alone (chime__store_tally: chime_store_stats makes the housekeeper count
     * the database's pending keys, not something to run in a loop while measuring) */
    for (struct chime_store_stats t; chime__store_tally(s, &t), t.acked < fire_n;) {
        struct timespec ts = { 0, 200000 };
        nanosleep(&ts, NULL);
    }
    if (chime_store_sync(s) != 0)
        die("sync");
    uint64_t end = now_ns(CLOCK_REALTIME);
    chime_store_close(s);
    return (double)fire_n / ((double)(end - due) / 1e9);
}

/* ---- takeover ---- */

static void takeover(const char *conninfo)
{
    int ready[2];
    if (pipe(ready) != 0)
        die("pipe");
    uint64_t kill_at = now_ns(CLOCK_REALTIME) + 3600 * SEC; /* set by A's report below */
    fflush(stdout);
    pid_t a = fork();
    if (a == 0) { /* node A: everything, then wait to be killed */
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* also if the benchmark dies first */
        pg_cluster_forked(&cluster);
        close(ready[0]);
        _Atomic uint64_t fired = 0;
        chime_store *s = open_node(conninfo, "A", &fired);
        uint64_t t0 = now_ns(CLOCK_MONOTONIC);
        /* due 5 to 50 minutes ahead: none fires while A runs, and all are within the horizon
         * (an hour), so both nodes hold their shards' timers in memory */
        put_all(s, threads, takeover_n, now_ns(CLOCK_REALTIME) + 300 * SEC, 2700 * SEC, NULL);
        double secs = (double)(now_ns(CLOCK_MONOTONIC) - t0) / 1e9;
        printf("takeover: node A put %u timers from %u threads in %.1f s\n", takeover_n, threads,
               secs);
        fflush(stdout);
        if (write(ready[1], "r", 1) != 1)
            _exit(1);
        for (;;)
            pause();
    }
    close(ready[1]);
    char c;
    if (read(ready[0], &c, 1) != 1)
        die("node A failed");
    /* Make 1000 of A's timers due in the 2 s after the kill: the keys spread first in due order. */
    PGconn *pc = PQconnectdb(conninfo);
    _Atomic uint64_t fired = 0;
    chime_store *b = open_node(conninfo, "B", &fired);
    char sql[600];
    for (;;) { /* B has its share (half) */
        PGresult *r = PQexec(pc, "SELECT count(*) FILTER (WHERE owner = 'B'),"
                                 " count(*) FILTER (WHERE owner = 'A') FROM chime.shards"
                                 " WHERE expires > now()");
        long held = atol(PQgetvalue(r, 0, 0)), by_a = atol(PQgetvalue(r, 0, 1));
        PQclear(r);
        if (held == 128 && by_a == 128)
            break;
        if (held > 128) {
            fprintf(stderr, "pg_bench: node A lost its leases while it put (B holds %ld)\n", held);
            exit(1);
        }
        struct timespec ts = { 0, 20000000 };
        nanosleep(&ts, NULL);
    }
    /* B in its steady state: its takeover of the half A gave it is read (a takeover queues behind
     * a load). The logic's own count, chime__store_tally (chime_store_stats would make the housekeeper
     * count every pending key in the database meanwhile), until it has not moved for 2 s. */
    uint64_t seen = 0, still_since = now_ns(CLOCK_MONOTONIC);
    for (;;) {
        struct chime_store_stats t;
        chime__store_tally(b, &t);
        uint64_t n = t.loaded;
        if (n != seen) {
            seen = n;
            still_since = now_ns(CLOCK_MONOTONIC);
        } else if (n && now_ns(CLOCK_MONOTONIC) - still_since > 2 * SEC) {
            break;
        }
        struct timespec ts = { 0, 20000000 };
        nanosleep(&ts, NULL);
    }
    printf("takeover: node B holds half the shards, %" PRIu64 " timers loaded\n", seen);
    kill_at = now_ns(CLOCK_REALTIME) + 1 * SEC;
    /* The 1000 earliest of A's shards' timers become due in [kill, kill + 2 s) (A loaded nothing
     * of them: they were 10 min away; B reads them when it takes A's shards). */
    snprintf(sql, sizeof sql,
             "WITH v AS MATERIALIZED (SELECT k.key, k.version, %" PRIu64 " + (random() * 2e9)::int8"
             " AS d FROM chime.keys k JOIN chime.shards s ON s.shard = k.shard WHERE s.owner = 'A'"
             " AND k.end_epoch IS NULL ORDER BY k.part LIMIT 1000),"
             " t AS (UPDATE chime.timers t SET due = v.d, part = v.d FROM v"
             " WHERE t.key = v.key AND t.version = v.version)"
             " UPDATE chime.keys k SET part = v.d FROM v WHERE k.key = v.key",
             kill_at);
    PGresult *r = PQexec(pc, sql);
    if (PQresultStatus(r) != PGRES_COMMAND_OK)
        die(PQerrorMessage(pc));
    if (atoi(PQcmdTuples(r)) != 1000) {
        fprintf(stderr, "pg_bench: %s of A's timers made due at the kill\n", PQcmdTuples(r));
        exit(1);
    }
    PQclear(r);
    while (now_ns(CLOCK_REALTIME) < kill_at) {
        struct timespec ts = { 0, 1000000 };
        nanosleep(&ts, NULL);
    }
    kill(a, SIGKILL);
    waitpid(a, NULL, 0);
    uint64_t last = 0;
    while (atomic_load(&fired) < 1000) {
        struct timespec ts = { 0, 1000000 };
        nanosleep(&ts, NULL);
        last = now_ns(CLOCK_REALTIME);
    }
    snprintf(sql, sizeof sql,
             "SELECT (extract(epoch FROM max(acquired)) * 1e6)::int8 * 1000 - %" PRIu64
             " FROM chime.leases WHERE owner = 'B' AND acquired > to_timestamp(%" PRIu64 " / 1e9)",
             kill_at, kill_at);
    r = PQexec(pc, sql);
    double acquired = PQresultStatus(r) == PGRES_TUPLES_OK ? atof(PQgetvalue(r, 0, 0)) / 1e9 : -1;
    PQclear(r);
    PQfinish(pc);
    printf("takeover: lease %.1f s; %u pending; B had A's shards %.3f s after the kill; the last of"
           " the 1000 timers due in the 2 s after the kill fired %.3f s after it (lease %+.3f s)\n",
           (double)LEASE_NS / 1e9, takeover_n, acquired, (double)(last - kill_at) / 1e9,
           (double)(last - kill_at) / 1e9 - (double)LEASE_NS / 1e9);
    chime_store_close(b);
}

/* The server's own ceilings, on the machine and load of this run. */
static void baselines(void)
{
    char conninfo[600];
    db("raw", conninfo, sizeof conninfo);
    printf("insert_1conn: %.0f rows/s (1000 rows per transaction)\n", insert_rate(conninfo, 1, 0));
    printf("insert_4conn: %.0f rows/s (1000 rows per transaction, 4 connections)\n",
           insert_rate(conninfo, 4, 0));
    db("schema_1", conninfo, sizeof conninfo);
    printf("schema_1conn: %.0f puts/s (chime's put statement, 1000 rows per transaction)\n",
           insert_rate(conninfo, 1, 1));
    db("schema_4", conninfo, sizeof conninfo);
    printf("schema_4conn: %.0f puts/s (the same, 4 connections)\n", insert_rate(conninfo, 4, 1));
    fflush(stdout);
}

int main(int argc, char **argv)
{
    if (argc > 1)
        thread_list = argv[1];
    if (argc > 2)
        seconds = (unsigned)atoi(argv[2]);
    if (argc > 3)
        fire_n = (unsigned)atoi(argv[3]);
    if (argc > 4)
        takeover_n = (unsigned)atoi(argv[4]);
    setenv("CHIME_PG_FSYNC", "on", 1);
    int rc = pg_cluster_start(&cluster);
    if (rc != 0)
        die(rc == PG_SKIP ? "PostgreSQL is not installed" : "the cluster did not start");
    char conninfo[600];
    if (getenv("PG_BENCH_TAKEOVER_ONLY")) { /* a shortcut while working on takeovers */
        const char *last = strrchr(thread_list, ','); /* it puts from THREADS' last, as below */
        threads = (unsigned)atoi(last ? last + 1 : thread_list);
        db("takeover", conninfo, sizeof conninfo);
        takeover(conninfo);
        pg_cluster_stop(&cluster);
        return 0;
    }
    const char *fire_only = getenv("PG_BENCH_FIRE_ONLY"); /* a shortcut: its value, a put rate */
    if (fire_only) {
        threads = 64;
        db("fire", conninfo, sizeof conninfo);
        printf("fire_ack: %.0f timers/s (%u due at one instant)\n",
               fire_ack_rate(conninfo, atof(fire_only)), fire_n);
        pg_cluster_stop(&cluster);
        return 0;
    }
    int puts_only = getenv("PG_BENCH_PUTS_ONLY") != NULL; /* a shortcut while working on puts */
    if (!puts_only)
        baselines();
    double puts = 0;
    for (const char *t = thread_list; *t; t += strcspn(t, ",") + (t[strcspn(t, ",")] == ',')) {
        threads = (unsigned)atoi(t);
        char name[32];
        snprintf(name, sizeof name, "puts_%u", threads);
        db(name, conninfo, sizeof conninfo);
        puts = put_rate(conninfo);
        printf("put_each: %.0f puts/s (CHIME_SYNC_EACH, %u threads, one node)\n", puts, threads);
        fflush(stdout);
    }
    if (puts_only) {
        pg_cluster_stop(&cluster);
        return 0;
    }
    db("fire", conninfo, sizeof conninfo);
    printf("fire_ack: %.0f timers/s (%u due at one instant, to every acknowledgement committed)\n",
           fire_ack_rate(conninfo, puts), fire_n);
    fflush(stdout);
    db("takeover", conninfo, sizeof conninfo);
    takeover(conninfo);
    pg_cluster_stop(&cluster);
    return 0;
}
