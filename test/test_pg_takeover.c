/* SPDX-License-Identifier: MIT */
/*
 * A dead or paused node's shard is taken within its lease plus the bound test_pg_cluster states,
 * even when the node stopped while one of its owner statements (here its acknowledgement) waited
 * for a key's row that another transaction holds (an operator's SELECT ... FOR UPDATE, another
 * node's long transaction). Such a statement holds its shard's row FOR KEY SHARE, and every
 * acquisition skips a locked row (FOR UPDATE SKIP LOCKED). Found by a review of leases and fencing
 * (session 22), with the key held:
 *   1. a dead node: the server ended its session only when the wait ended, since it looks at a
 *      client only when it next reads from it: after statement_timeout (60 s). conn.c sets
 *      client_connection_check_interval, so the server sees the dead client while it waits.
 *   2. a paused node (SIGSTOP): its client is alive, its session active, not idle in a
 *      transaction, so nothing ended the wait before statement_timeout either. conn.c sets
 *      lock_timeout on the owners' sessions; the failed transaction then sits idle until
 *      idle_in_transaction_session_timeout ends it.
 *
 * And 3: an owner statement that meets lock_timeout is run again, not taken for a failure: fire()'s
 * statement waits for a key's row past it, runs again, and fires once the key is let go (review of
 * session 23's lock_timeout).
 *
 * Environment: CHIME_PG_LEASE_MS (default 1000), CHIME_PG_TAKEOVER_BOUND_MS (default 5000), as
 * test_pg_cluster reads them; .ci/run sets longer ones under valgrind and TSan, all far below
 * the 60 s that the wait lasted.
 */
#include "pg_test.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

static struct pg_cluster cluster;
static char conninfo[600];

static unsigned env_ms(const char *name, unsigned def)
{
    const char *v = getenv(name);
    return v && *v ? (unsigned)strtoul(v, NULL, 10) : def;
}

/* The child's handler: says it runs, then returns 0 once told to (its acknowledgement then waits
 * for the key's row). */
static int started_pipe[2], go_pipe[2];

static int64_t signal_and_wait(struct recorder *r, const struct chime_fire *fire)
{
    (void)r;
    (void)fire;
    char c = 'f';
    if (write(started_pipe[1], &c, 1) != 1 || read(go_pipe[0], &c, 1) != 1)
        _exit(3);
    return 0;
}

/* Node a (a child) owns the one shard; its acknowledgement waits for a key's row that the test
 * holds; a gets sig (SIGKILL or SIGSTOP); node b must take the shard within the bound. */
static void stopped_while_waiting_for_a_key(const char *db, int sig)
{
    CHECK_EQ(pg_cluster_db(&cluster, db, 1, PG_WIDTH_S, conninfo, sizeof conninfo), 0);
    uint64_t lease = env_ms("CHIME_PG_LEASE_MS", 1000) * MS;
    uint64_t bound = lease + env_ms("CHIME_PG_TAKEOVER_BOUND_MS", 5000) * MS;
    CHECK_EQ(pipe(started_pipe), 0);
    CHECK_EQ(pipe(go_pipe), 0);
    const char *key = "held-1";
    fflush(stdout);
    pid_t pid = fork();
    CHECK(pid >= 0, "fork");
    if (pid == 0) { /* node a, the one shard's owner */
        pg_cluster_forked(&cluster);
        close(started_pipe[0]); /* so that a test that died reads as end of file here */
        close(go_pipe[1]);
        struct recorder rec;
        recorder_init(&rec, NULL);
        rec.reply = signal_and_wait;
        chime_store *a = NULL;
        if (pg_open_node(&a, conninfo, "a", &rec, lease, 0) != 0 ||
            chime_store_put(a, key, strlen(key), "x", 1, wall_ns() + 100 * MS) != 0)
            _exit(2);
        for (;;)
            pause(); /* until killed */
    }
    close(started_pipe[1]); /* so that a child that failed reads as end of file, not a hang */
    close(go_pipe[0]);
    char c;
    CHECK_EQ(read(started_pipe[0], &c, 1), 1); /* a's handler runs: its firing committed */
    PGconn *h = pg_connect_or_die(conninfo), *obs = pg_connect_or_die(conninfo);
    pg_hold_key(h, key);
    CHECK_EQ(write(go_pipe[1], "g", 1), 1);
    char sql[300]; /* a's acknowledgement waits for the key's row: a session of a's blocked by h */
    snprintf(sql, sizeof sql,
             "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE 'chime a %%'"
             " AND %d = ANY(pg_blocking_pids(pid))",
             PQbackendPID(h));
    while (pg_value(obs, sql) < 1)
        sleep_ms(10); /* a poll of the server's lock table */
    CHECK_EQ(kill(pid, sig), 0);
    if (sig == SIGKILL)
        CHECK_EQ(waitpid(pid, NULL, 0), pid);
    uint64_t killed = mono_ns();
    struct recorder rb;
    recorder_init(&rb, NULL);
    chime_store *b = NULL;
    CHECK_EQ(pg_open_node(&b, conninfo, "b", &rb, lease, 0), 0);
    char who[80] = "";
    while (!(pg_owner(obs, 0, who, sizeof who) && !strcmp(who, "b")))
        sleep_ms(20); /* a poll of the shard's row */
    uint64_t took = mono_ns() - killed;
    long long blocked = pg_value(obs, sql); /* the key is still held: nothing else let a's go */
    const char *what = sig == SIGKILL ? "killed" : "paused";
    printf("# shard 0 taken by b %llu ms after a was %s (bound %llu ms); a's sessions still "
           "waiting for the key: %lld\n",
           (unsigned long long)(took / MS), what, (unsigned long long)(bound / MS), blocked);
    CHECK(pg_command(h, "ROLLBACK"), "release the key");
    recorder_wait_key(&rb, key, 1, NULL); /* the firing a recorded fires again on b */
    CHECK_EQ(chime_store_close(b), 0);
    if (sig != SIGKILL) {
        CHECK_EQ(kill(pid, SIGKILL), 0);
        CHECK_EQ(waitpid(pid, NULL, 0), pid);
    }
    recorder_free(&rb);
    PQfinish(h);
    PQfinish(obs);
    CHECK(took <= bound,
          "a %s node's shard was taken %llu ms after it stopped, over the bound of %llu ms: its "
          "acknowledgement's session, waiting for a key's row, kept the shard's row locked",
          what, (unsigned long long)(took / MS), (unsigned long long)(bound / MS));
}

static void test_a_dead_nodes_shard_is_taken_though_its_ack_waited_for_a_key(void)
{
    stopped_while_waiting_for_a_key("takeover_dead", SIGKILL);
}

static void test_a_paused_nodes_shard_is_taken_though_its_ack_waited_for_a_key(void)
{
    stopped_while_waiting_for_a_key("takeover_paused", SIGSTOP);
}

/* query_start of the session of node's role that h blocks, as text into out; 0 if none. */
static int blocked_session(PGconn *obs, PGconn *h, const char *node, const char *role, char *out,
                           size_t n)
{
    char sql[400];
    snprintf(sql, sizeof sql,
             "SELECT query_start::text FROM pg_stat_activity WHERE application_name = 'chime %s %s'"
             " AND %d = ANY(pg_blocking_pids(pid))",
             node, role, PQbackendPID(h));
    PGresult *r = PQexec(obs, sql);
    int found = PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) > 0;
    if (found)
        snprintf(out, n, "%s", PQgetvalue(r, 0, 0));
    PQclear(r);
    return found;
}

static void test_a_firing_that_meets_a_lock_timeout_is_run_again(void)
{
    CHECK_EQ(pg_cluster_db(&cluster, "lock_timeout", 1, PG_WIDTH_S, conninfo, sizeof conninfo), 0);
    struct recorder rec;
    recorder_init(&rec, NULL);
    chime_store *a = NULL;
    /* lock_timeout a quarter of the lease: 1 s, or 2.5 s where threads are slow */
    CHECK_EQ(pg_open_node(&a, conninfo, "a", &rec, (TAP_SLOW ? 10 : 4) * SEC, 0), 0);
    const char *key = "fire-held";
    PGconn *h = pg_connect_or_die(conninfo), *obs = pg_connect_or_die(conninfo);
    CHECK_EQ(chime_store_put(a, key, strlen(key), "x", 1, wall_ns() + 3 * SEC), 0);
    pg_hold_key(h, key);
    CHECK(recorder_count_key(&rec, key) == 0, "fired before the key was held (inconclusive)");
    char first[64] = "", now[64] = "";
    while (!blocked_session(obs, h, "a", "fire", first, sizeof first))
        sleep_ms(5); /* a poll of the server's lock table: a's firing waits for the key */
    while (!(blocked_session(obs, h, "a", "fire", now, sizeof now) && strcmp(now, first)))
        sleep_ms(5); /* again: blocked by a statement begun later, after a lock timeout */
    printf("# a's firing waited for the key from %s, and again from %s\n", first, now);
    CHECK(pg_command(h, "ROLLBACK"), "release the key");
    struct firing f;
    recorder_wait_key(&rec, key, 1, &f);
    CHECK_EQ(f.attempt, 1);
    pg_wait_idle(a, conninfo);
    pg_wait_settled(a);
    CHECK_EQ(recorder_count_key(&rec, key), 1);
    CHECK_EQ(chime_store_close(a), 0); /* 0: the lock timeout did not fail the store */
    PQfinish(h);
    PQfinish(obs);
    recorder_free(&rec);
}

int main(void)
{
    static const struct tap_test tests[] = {
        { "a_dead_nodes_shard_is_taken_though_its_ack_waited_for_a_key",
          test_a_dead_nodes_shard_is_taken_though_its_ack_waited_for_a_key },
        { "a_paused_nodes_shard_is_taken_though_its_ack_waited_for_a_key",
          test_a_paused_nodes_shard_is_taken_though_its_ack_waited_for_a_key },
        { "a_firing_that_meets_a_lock_timeout_is_run_again",
          test_a_firing_that_meets_a_lock_timeout_is_run_again },
    };
    return pg_tests_main(&cluster, tests, (int)(sizeof tests / sizeof *tests));
}
