/* SPDX-License-Identifier: MIT */
/*
 * Three node processes share one database; each runs a load generator that puts, replaces and
 * cancels timers through its node and logs what was acknowledged (pg_node.h). Under that load:
 *   - one node is killed with SIGKILL; the others must take its shards and fire its timers again
 *     within lease_ns + TAKEOVER_BOUND (5 s by default: generous, for loaded CI machines and
 *     sanitizers; docs/perf.md has the measured takeover time);
 *   - another is stopped with SIGSTOP until the database shows every one of its shards taken by
 *     the third (its lease expired), then continued: it must stop acting in its old epochs;
 *   - (second test) PostgreSQL itself is restarted with pg_ctl restart: the nodes reconnect;
 *   - (third test) the nodes reach PostgreSQL through test/pg_proxy.h, which cuts their connections
 *     at random messages (leases, loads, firings, writes alike) for a stretch of the load.
 * Afterwards the oracle (pg_oracle.h) checks the logs and the database: every acknowledged put
 * fired at least once and never early, no acknowledged cancel fired, nothing fired or was
 * acknowledged in a stale epoch, nothing is left pending.
 *
 * Waits are on conditions (the database's view of the leases, the logs' firings), polled every
 * 20 ms; the watchdog (tap.h) turns a condition that never comes into a failure.
 * Environment: CHIME_SEED (the kill's moment and the generators' choices), CHIME_PG_THREADS
 * (generator threads per node, default 4), CHIME_PG_LOAD_MS (load before and after each event,
 * default 700), CHIME_PG_TAKEOVER_BOUND_MS (default 5000), CHIME_PG_LEASE_MS (default 1000; valgrind
 * and TSan runs use longer leases, since a thread there can stall for longer than a quarter of one
 * between its fence check and its handler's first line, the window pg.h's P2 leaves to fencing).
 */
#include "pg_oracle.h"
#include "pg_proxy.h"

#define SHARDS 24
static uint64_t lease_ns; /* CHIME_PG_LEASE_MS, default 1000 */

static struct pg_cluster cluster;
static char logdir[280];
static uint64_t seed;

static unsigned env_u(const char *name, unsigned def)
{
    const char *v = getenv(name);
    return v && *v ? (unsigned)strtoul(v, NULL, 10) : def;
}

/* The node processes of one test, on a database of their own. */
struct fleet {
    int n;
    struct pg_child kids[3];
    struct pg_node_cfg cfgs[3];
    char names[3][16];
    char paths[3][300];
    char conninfo[600];   /* the test's own, straight to the server */
    char relayed[600];    /* the nodes', through a relay if the test has one */
    PGconn *c; /* the test's own connection, to watch the leases */
};

static void wait_shards_balanced(PGconn *c, int nodes);

/* A database `db` with the schema, and n nodes on it, balanced; the nodes connect through `relay`
 * if not NULL (listening: it is served once the nodes are forked, pg_proxy.h). */
static void fleet_start(struct fleet *f, int n, const char *db, struct pg_proxy *relay)
{
    if (!*logdir) { /* in the cluster's directory, removed with it */
        snprintf(logdir, sizeof logdir, "%.200s/logs", cluster.dir);
        CHECK(mkdir(logdir, 0755) == 0, "mkdir %s", logdir);
    }
    f->n = n;
    CHECK_EQ(pg_cluster_db(&cluster, db, SHARDS, 60, f->conninfo, sizeof f->conninfo), 0);
    f->c = pg_connect_or_die(f->conninfo);
    if (relay)
        pg_proxy_conninfo(relay, db, f->relayed, sizeof f->relayed);
    else
        snprintf(f->relayed, sizeof f->relayed, "%s", f->conninfo);
    for (int i = 0; i < n; i++) {
        snprintf(f->names[i], 16, "n%d", i + 1);
        snprintf(f->paths[i], 300, "%.200s/%s-%s.log", logdir, db, f->names[i]);
        f->cfgs[i] = (struct pg_node_cfg){ f->relayed, f->names[i], f->paths[i], lease_ns,
                                           env_u("CHIME_PG_THREADS", 4), 40, seed + (uint64_t)i };
        CHECK_EQ(pg_child_start(&f->kids[i], &cluster, &f->cfgs[i]), 0);
    }
    if (relay)
        CHECK_EQ(pg_proxy_serve(relay), 0);
    wait_shards_balanced(f->c, n);
}

/* Wait until the database shows every shard held unexpired, by the given nodes only. */
static void wait_owned_by(PGconn *c, const char *nodes_sql)
{
    char sql[300];
    snprintf(sql, sizeof sql,
             "SELECT count(*) FROM chime.shards WHERE NOT (owner IN (%s) AND expires > now())",
             nodes_sql);
    while (pg_value(c, sql) != 0)
        sleep_ms(20);
}

static void wait_shards_balanced(PGconn *c, int nodes)
{
    char sql[200];
    snprintf(sql, sizeof sql,
             "SELECT count(*) FROM chime.cluster WHERE alive AND shards >= %d",
             SHARDS / nodes);
    while (pg_value(c, sql) < nodes)
        sleep_ms(20);
}

static void load_for(unsigned ms)
{
    sleep_ms(ms); /* the generators run meanwhile: this is load, not synchronisation */
}

/* The last stretch of load: ms, and on until the logs hold more than LOAD_MIN_PUTS puts, so that
 * finish_and_check's "the load was real" holds on a machine too busy to reach it in ms (it did
 * not once, with 724 puts, while sanitizer builds compiled alongside). */
#define LOAD_MIN_PUTS 1000
static void load_at_least(struct fleet *f, unsigned ms)
{
    load_for(ms);
    for (;;) {
        struct pg_oracle o = { 0 };
        o.shards = SHARDS;
        for (int i = 0; i < f->n; i++)
            pg_oracle_read(&o, f->paths[i], f->names[i]);
        size_t n = o.nputs;
        pg_oracle_free(&o);
        if (n > LOAD_MIN_PUTS)
            return;
        sleep_ms(50); /* a condition polled on files: the generators write them */
    }
}

/* A clue for a timer that does not fire: its key's row, its shard's lease, and the shard's
 * acquisitions, as the database has them. */
static void pg_dump_key(PGconn *c, const char *key)
{
    const char *v[1] = { key };
    PGresult *r = PQexecParams(
        c,
        "SELECT k.version, k.attempt, k.fire_epoch, coalesce(k.end_epoch::text, '-'), k.shard,"
        " coalesce(s.owner, '-'), s.epoch, s.expires > now(), t.due, t.tx,"
        " (SELECT string_agg(l.epoch || ':' || l.owner || '@' || to_char(l.acquired, 'MI:SS.MS'),"
        " ' ' ORDER BY l.epoch) FROM chime.leases l WHERE l.shard = k.shard)"
        " FROM chime.keys k JOIN chime.shards s ON s.shard = k.shard"
        " LEFT JOIN chime.timers t ON t.key = k.key AND t.version = k.version"
        " WHERE k.key = convert_to($1, 'UTF8')",
        1, NULL, v, NULL, NULL, 0);
    if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1)
        printf("#     version %s attempt %s fire_epoch %s end_epoch %s shard %s: owner %s epoch %s"
               " unexpired %s; due %s tx %s; leases %s\n", PQgetvalue(r, 0, 0),
               PQgetvalue(r, 0, 1), PQgetvalue(r, 0, 2), PQgetvalue(r, 0, 3), PQgetvalue(r, 0, 4),
               PQgetvalue(r, 0, 5), PQgetvalue(r, 0, 6), PQgetvalue(r, 0, 7), PQgetvalue(r, 0, 8),
               PQgetvalue(r, 0, 9), PQgetvalue(r, 0, 10));
    else
        printf("#     (no row: %s)\n", PQerrorMessage(c));
    PQclear(r);
}

/* Read every log and wait until every expected put has fired and nothing is pending. */
static void settle(struct pg_oracle *o, struct fleet *f)
{
    uint64_t t0 = mono_ns(), told = 0;
    for (;;) {
        pg_oracle_free(o);
        o->shards = SHARDS;
        for (int i = 0; i < f->n; i++)
            pg_oracle_read(o, f->paths[i], f->names[i]);
        if (pg_oracle_unfired(o) == 0 && pg_value(f->c, "SELECT count(*) FROM chime.pending") == 0)
            return;
        if (mono_ns() - t0 > (told + 1) * 20 * SEC) { /* a clue for the watchdog's report */
            told++;
            printf("# still waiting: %zu acknowledged puts not fired, %lld pending\n",
                   pg_oracle_unfired(o), pg_value(f->c, "SELECT count(*) FROM chime.pending"));
            for (size_t i = 0, k = 0; i < o->nputs && k < 5; i++)
                if (o->puts[i].expected && !o->puts[i].fires && ++k) {
                    printf("#   %s (key %s, shard %u)\n", o->puts[i].payload, o->puts[i].key,
                           chime__pg_shard_of(o->puts[i].key, strlen(o->puts[i].key), SHARDS));
                    pg_dump_key(f->c, o->puts[i].key);
                }
            fflush(stdout);
        }
        sleep_ms(50);
    }
}

/* Stop the generators, wait for every expected firing, close the nodes, and run the oracle. */
static void finish_and_check(struct pg_oracle *o, struct fleet *f)
{
    for (int i = 0; i < f->n; i++)
        if (f->kids[i].control >= 0)
            pg_child_send(&f->kids[i], 'q');
    settle(o, f);
    printf("# every acknowledged put fired; closing the nodes\n");
    fflush(stdout);
    for (int i = 0; i < f->n; i++)
        if (f->kids[i].control >= 0)
            CHECK_EQ(pg_child_finish(&f->kids[i]), 0);
    size_t expected;
    unsigned bad = pg_oracle_check_puts(o, &expected);
    struct pg_leases l;
    pg_leases_read(&l, f->c, SHARDS);
    for (int i = 0; i < f->n; i++)
        pg_oracle_stale(o, &l, f->paths[i], f->names[i]);
    pg_leases_free(&l);
    bad += pg_oracle_database(f->c);
    printf("# %zu puts logged, %zu expected to fire, %u firings, %u stale starts excused by the"
           " pause\n", o->nputs, expected, o->fires, o->stale_paused);
    /* the load must have been real: many puts, and many keys whose last call was a put */
    CHECK(o->nputs > LOAD_MIN_PUTS && expected >= 20, "too little load: %zu puts, %zu expected", o->nputs,
          expected);
    CHECK_EQ(bad, 0);
    CHECK_EQ(o->early, 0);
    CHECK_EQ(o->failures, 0);
    CHECK_EQ(o->stale, 0);
    /* a handler can be caught between its fence check and its first line on each of the runtime's
     * threads: its advancing thread and 2 workers */
    CHECK(o->stale_paused <= 3, "%u stale starts on the paused node", o->stale_paused);
}

static void test_kill_and_pause_under_load_lose_nothing_and_fence_stale_epochs(void)
{
    static struct fleet f;
    fleet_start(&f, 3, "cluster", NULL);
    struct rng r = { seed };
    unsigned load_ms = env_u("CHIME_PG_LOAD_MS", 700);
    load_for(load_ms / 2 + (unsigned)rng_below(&r, load_ms));

    uint64_t t_kill = wall_ns();
    pg_child_kill(&f.kids[2]); /* n3 */
    wait_owned_by(f.c, "'n1', 'n2'");
    printf("# n3 killed; its shards taken after %.3f s\n", (double)(wall_ns() - t_kill) / 1e9);
    load_for(load_ms);

    /* n2 stops past its lease: until the database shows n1 holding everything; then continues */
    struct pg_oracle o = { 0 };
    o.paused = "n2";
    o.t_stop = wall_ns();
    kill(f.kids[1].pid, SIGSTOP);
    wait_owned_by(f.c, "'n1'");
    o.t_cont = wall_ns();
    kill(f.kids[1].pid, SIGCONT);
    printf("# n2 paused %.3f s\n", (double)(o.t_cont - o.t_stop) / 1e9);
    wait_shards_balanced(f.c, 2);
    load_at_least(&f, load_ms);
    finish_and_check(&o, &f);

    /* takeover: every acknowledged put of a shard n3 held at the kill, not fired before the kill,
     * fired within lease + bound of max(kill, due) */
    struct pg_leases l;
    pg_leases_read(&l, f.c, SHARDS);
    uint64_t bound = lease_ns + env_u("CHIME_PG_TAKEOVER_BOUND_MS", 5000) * MS, worst = 0;
    unsigned checked = 0;
    for (size_t i = 0; i < o.nputs; i++) {
        struct pg_put_info *p = &o.puts[i];
        if (!p->fires || !p->acked_at || p->acked_at > t_kill || p->first_fire < t_kill ||
            p->cancelled_at)
            continue;
        const char *held = NULL; /* who held its shard at the kill */
        for (size_t e = 1; e < l.stride; e++)
            if (l.acq[p->shard * l.stride + e] && (uint64_t)l.acq[p->shard * l.stride + e] <= t_kill)
                held = l.owner[p->shard * l.stride + e];
        if (!held || strcmp(held, "n3"))
            continue;
        uint64_t from = p->due > t_kill ? p->due : t_kill;
        if (p->first_fire - from > worst)
            worst = p->first_fire - from;
        checked++;
        CHECK(p->first_fire <= from + bound, "%s fired %.3f s after max(kill, due)", p->payload,
              (double)(p->first_fire - from) / 1e9);
    }
    printf("# takeover: %u timers of n3's shards fired again, at worst %.3f s after max(kill, due)"
           " (bound: lease %.1f s + %.1f s)\n", checked, (double)worst / 1e9,
           (double)lease_ns / 1e9, (double)(bound - lease_ns) / 1e9);
    pg_leases_free(&l);
    pg_oracle_free(&o);
    PQfinish(f.c);
}

static void test_postgres_restarted_under_load_loses_nothing_acknowledged(void)
{
    static struct fleet f;
    fleet_start(&f, 2, "restart", NULL);
    unsigned load_ms = env_u("CHIME_PG_LOAD_MS", 700);
    load_for(load_ms);
    PQfinish(f.c);
    CHECK_EQ(pg_cluster_restart(&cluster), 0);
    printf("# restarted PostgreSQL\n");
    f.c = pg_connect_or_die(f.conninfo);
    wait_shards_balanced(f.c, 2);
    load_at_least(&f, load_ms);
    struct pg_oracle o = { 0 };
    finish_and_check(&o, &f);
    pg_oracle_free(&o);
    PQfinish(f.c);
}

/* Leases renewed, timers loaded and fired, acknowledgements and puts written, all over connections
 * that die at random messages: a lost renewal must end the node's belief before the database's
 * lease ends (pg.h, P2), so nothing may fire or be acknowledged in a stale epoch, and a lost reply
 * must not lose or double what a generator was told. */
static void test_connections_cut_under_load_lose_nothing_and_fence_stale_epochs(void)
{
    static struct fleet f;
    static struct pg_proxy relay;
    CHECK_EQ(pg_proxy_listen(&relay, cluster.port), 0);
    fleet_start(&f, 2, "cuts", &relay);
    unsigned load_ms = env_u("CHIME_PG_LOAD_MS", 700);
    pg_proxy_cut_random(&relay, 10000, seed); /* 1 % of the messages each way */
    load_for(2 * load_ms);
    pg_proxy_cut_random(&relay, 0, 0);
    printf("# %d connections cut\n", pg_proxy_cuts(&relay));
    CHECK(pg_proxy_cuts(&relay) > 0, "no connection was cut: the test tested nothing");
    load_at_least(&f, load_ms);
    struct pg_oracle o = { 0 };
    finish_and_check(&o, &f);
    pg_oracle_free(&o);
    PQfinish(f.c);
    pg_proxy_stop(&relay);
}

int main(void)
{
    seed = rng_seed("test_pg_cluster");
    lease_ns = env_u("CHIME_PG_LEASE_MS", 1000) * MS;
    static const struct tap_test tests[] = {
        { "kill_and_pause_under_load_lose_nothing_and_fence_stale_epochs",
          test_kill_and_pause_under_load_lose_nothing_and_fence_stale_epochs },
        { "postgres_restarted_under_load_loses_nothing_acknowledged",
          test_postgres_restarted_under_load_loses_nothing_acknowledged },
        { "connections_cut_under_load_lose_nothing_and_fence_stale_epochs",
          test_connections_cut_under_load_lose_nothing_and_fence_stale_epochs },
    };
    return pg_tests_main(&cluster, tests, (int)(sizeof tests / sizeof *tests));
}
