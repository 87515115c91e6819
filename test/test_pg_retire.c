/* SPDX-License-Identifier: MIT */
/*
 * Settled partitions dropped beside a running node (lib/store/pg/schema.c, house.c), and the
 * loader's boundaries. Tests 1-5 run a node while a housekeeper of the test's, whose clock is an
 * hour ahead, drops every partition it considers settled (chime__pg_partitions_retire with
 * now = wall + 1 h) every 20 ms: only partitions with a pending version may survive, so whatever is
 * pending must be in one of them, and fire once, never early (boundaries, a firing held, retries
 * and replaces moving partitions, another node's puts with notifications lost). Test 6: a put due
 * UINT64_MAX with an endless horizon stays out of memory. Tests 7 and 9: a tombstone kept until no
 * statement that began before its version can still be running (P4), at the level of the lane's
 * statements and as a user meets it (a put lost until a takeover). Test 8: puts at the loaded
 * boundary and 1 ns either side. Partitions here are 1 s wide, the smallest init allows. Written
 * by a review of partitions and the loader (session 22), which found the defects of 6, 7 and 9.
 */
#include "pg_test.h"
#include "store/pg/statements.h"

static struct pg_cluster cluster;
static char conninfo[600];

#define WIDTH SEC
/* Leases longer under valgrind and the sanitizers, where a thread may stall past a short one. */
#define LEASE ((TAP_SLOW ? 10 : 2) * SEC)

static void fresh(void)
{
    pg_fresh_db(&cluster, "retire", 1, (unsigned)(WIDTH / SEC), conninfo, sizeof conninfo, NULL);
}

struct house {
    struct pg_conn pc;
    struct pg_schema sc;
    pthread_t t;
    _Atomic int stop;
    _Atomic unsigned rounds, dropped;
    uint64_t ahead;
};

static void house_open(struct house *h, uint64_t ahead)
{
    *h = (struct house){ .pc = { .conninfo = conninfo, .role = "house" }, .ahead = ahead };
    CHECK_EQ(chime__pg_connect(&h->pc), 0);
    CHECK_EQ(chime__pg_schema_read(&h->pc, &h->sc), 0);
}

static int house_once(struct house *h)
{
    unsigned d = 0;
    int rc = chime__pg_partitions_retire(&h->pc, &h->sc, wall_ns() + h->ahead, &d);
    atomic_fetch_add(&h->dropped, d);
    atomic_fetch_add(&h->rounds, 1);
    return rc;
}

static void *house_loop(void *arg)
{
    struct house *h = arg;
    while (!atomic_load(&h->stop)) {
        int rc = house_once(h);
        CHECK(rc == PG_OK, "retire: %d", rc);
        sleep_ms(20); /* the pace of the test's housekeeper, not a synchronisation */
    }
    return NULL;
}

static void house_start(struct house *h, uint64_t ahead)
{
    house_open(h, ahead);
    CHECK_EQ(pthread_create(&h->t, NULL, house_loop, h), 0);
}

static void house_stop(struct house *h)
{
    atomic_store(&h->stop, 1);
    CHECK_EQ(pthread_join(h->t, NULL), 0);
    printf("# the housekeeper ran %u rounds and dropped %u partitions\n", atomic_load(&h->rounds),
           atomic_load(&h->dropped));
    chime__pg_disconnect(&h->pc);
}

/* A node (n1, horizon 1 s) whose handler answers with reply (NULL: acknowledge). */
static chime_store *one_node(struct recorder *rec,
                             int64_t (*reply)(struct recorder *, const struct chime_fire *))
{
    recorder_init(rec, NULL);
    rec->reply = reply;
    chime_store *s = NULL;
    CHECK_EQ(pg_open_node(&s, conninfo, "n1", rec, LEASE, SEC), 0);
    return s;
}

/* Timers due exactly on partition boundaries and one ns before, beyond the horizon, while every
 * partition without a pending version is dropped: each fires once, not early. */
static void test_boundaries_under_an_eager_housekeeper(void)
{
    fresh();
    struct recorder rec;
    chime_store *s = one_node(&rec, NULL);
    struct house h;
    house_start(&h, 3600 * SEC);
    uint64_t k0 = wall_ns() / WIDTH + 3;
    char key[32];
    for (int i = 0; i < 6; i++) {
        snprintf(key, sizeof key, "b%d", i);
        CHECK_EQ(chime_store_put(s, key, strlen(key), "x", 1, (k0 + (uint64_t)i) * WIDTH), 0);
        snprintf(key, sizeof key, "m%d", i);
        CHECK_EQ(chime_store_put(s, key, strlen(key), "x", 1, (k0 + (uint64_t)i) * WIDTH - 1), 0);
    }
    recorder_wait(&rec, 12);
    house_stop(&h);
    pg_wait_idle(s, conninfo);
    for (int i = 0; i < 6; i++) {
        snprintf(key, sizeof key, "b%d", i);
        CHECK_EQ(recorder_count_key(&rec, key), 1);
        snprintf(key, sizeof key, "m%d", i);
        CHECK_EQ(recorder_count_key(&rec, key), 1);
    }
    CHECK(!atomic_load(&rec.early), "a timer fired early");
    CHECK_EQ(chime_store_close(s), 0);
    recorder_free(&rec);
}

/* ---- a handler held ---- */

static _Atomic int held_started, held_release;

static int64_t hold_first(struct recorder *r, const struct chime_fire *f)
{
    (void)r;
    if (f->attempt == 1) {
        atomic_store(&held_started, 1);
        while (!atomic_load(&held_release))
            sleep_ms(2); /* the test releases it */
    }
    return 0;
}

/* A fired, unacknowledged timer keeps its partition, however far past it is. */
static void test_a_firing_keeps_its_partition(void)
{
    fresh();
    atomic_store(&held_started, 0);
    atomic_store(&held_release, 0);
    struct recorder rec;
    chime_store *s = one_node(&rec, hold_first);
    uint64_t due = wall_ns() + 300 * MS;
    CHECK_EQ(chime_store_put(s, "held", 4, "x", 1, due), 0);
    while (!atomic_load(&held_started))
        sleep_ms(2);
    struct house h;
    house_open(&h, 3600 * SEC);
    CHECK_EQ(house_once(&h), PG_OK);
    PGconn *c = pg_connect_or_die(conninfo);
    CHECK_EQ(pg_value(c, "SELECT count(*) FROM chime.pending WHERE key = 'held'::bytea"), 1);
    atomic_store(&held_release, 1);
    recorder_wait(&rec, 1);
    pg_wait_idle(s, conninfo); /* the acknowledgement is committed */
    CHECK_EQ(house_once(&h), PG_OK);
    CHECK_EQ(pg_value(c, "SELECT count(*) FROM chime.pending"), 0);
    CHECK_EQ(recorder_count_key(&rec, "held"), 1);
    PQfinish(c);
    chime__pg_disconnect(&h.pc);
    CHECK_EQ(chime_store_close(s), 0);
    recorder_free(&rec);
}

/* ---- retries ---- */

static int64_t retry_once(struct recorder *r, const struct chime_fire *f)
{
    (void)r;
    return f->attempt == 1 ? (int64_t)(2500 * MS) : 0;
}

/* A retry moves the timer to a later partition; the old one is dropped; the retry fires, once. */
static void test_a_retry_moves_partitions(void)
{
    fresh();
    struct recorder rec;
    chime_store *s = one_node(&rec, retry_once);
    struct house h;
    house_start(&h, 3600 * SEC);
    char key[32];
    for (int i = 0; i < 8; i++) {
        snprintf(key, sizeof key, "r%d", i);
        uint64_t due = wall_ns() + (uint64_t)i * 400 * MS;
        CHECK_EQ(chime_store_put(s, key, strlen(key), "x", 1, due), 0);
    }
    recorder_wait(&rec, 16);
    house_stop(&h);
    pg_wait_idle(s, conninfo);
    for (int i = 0; i < 8; i++) {
        snprintf(key, sizeof key, "r%d", i);
        struct firing f = { 0 };
        CHECK_EQ(recorder_count_key(&rec, key), 2);
        CHECK(recorder_last(&rec, key, &f) && f.attempt == 2, "%s: attempt %u", key, f.attempt);
    }
    CHECK(!atomic_load(&rec.early), "a timer fired early");
    CHECK_EQ(chime_store_close(s), 0);
    recorder_free(&rec);
}

/* A replace moves a key between partitions, both ways; each fires once, with its last payload. */
static void test_a_replace_moves_partitions(void)
{
    fresh();
    struct recorder rec;
    chime_store *s = one_node(&rec, NULL);
    struct house h;
    house_start(&h, 3600 * SEC);
    uint64_t now = wall_ns();
    CHECK_EQ(chime_store_put(s, "nearer", 6, "a", 1, now + 6 * SEC), 0);
    CHECK_EQ(chime_store_put(s, "farther", 7, "a", 1, now + 1500 * MS), 0);
    sleep_ms(300); /* let the housekeeper have a go between the puts; not a synchronisation */
    CHECK_EQ(chime_store_put(s, "nearer", 6, "b", 1, now + 2 * SEC), 0);
    CHECK_EQ(chime_store_put(s, "farther", 7, "b", 1, now + 5 * SEC), 0);
    recorder_wait(&rec, 2);
    /* both have fired; wait for anything more that might come within the later one's time */
    recorder_wait_key(&rec, "farther", 1, NULL);
    house_stop(&h);
    pg_wait_idle(s, conninfo);
    CHECK_EQ(recorder_count_key(&rec, "nearer"), 1);
    CHECK_EQ(recorder_count_key(&rec, "farther"), 1);
    CHECK_EQ(recorder_count_with(&rec, "nearer", "b"), 1);
    CHECK_EQ(recorder_count_with(&rec, "farther", "b"), 1);
    CHECK(!atomic_load(&rec.early), "a timer fired early");
    CHECK_EQ(chime_store_close(s), 0);
    recorder_free(&rec);
}

/* Nodes a (the one shard's owner, opened first) and b, horizon 1 s, every notification lost. */
static void two_nodes_open(chime_store **a, chime_store **b, struct recorder *ra,
                           struct recorder *rb)
{
    recorder_init(ra, NULL);
    recorder_init(rb, NULL);
    CHECK_EQ(pg_open_node(a, conninfo, "a", ra, LEASE, SEC), 0);
    CHECK_EQ(pg_open_node(b, conninfo, "b", rb, LEASE, SEC), 0);
    chime__pg_drop_notifications(1);
}

/* Notifications back; neither fired anything early; both closed. */
static void two_nodes_close(chime_store *a, chime_store *b, struct recorder *ra,
                            struct recorder *rb)
{
    chime__pg_drop_notifications(0);
    CHECK(!atomic_load(&ra->early) && !atomic_load(&rb->early), "a timer fired early");
    CHECK_EQ(chime_store_close(b), 0);
    CHECK_EQ(chime_store_close(a), 0);
    recorder_free(ra);
    recorder_free(rb);
}

/* Another node's puts beyond the owner's horizon, with every notification lost and every empty
 * partition dropped: the owner's loads and polls find them. */
static void test_another_nodes_puts_without_notifications(void)
{
    fresh();
    struct recorder ra, rb;
    chime_store *a, *b;
    two_nodes_open(&a, &b, &ra, &rb);
    struct house h;
    house_start(&h, 3600 * SEC);
    char key[32];
    for (int i = 0; i < 10; i++) {
        snprintf(key, sizeof key, "o%d", i);
        uint64_t due = i % 2 ? wall_ns() - SEC : wall_ns() + (uint64_t)i * 500 * MS;
        CHECK_EQ(chime_store_put(b, key, strlen(key), "x", 1, due), 0);
    }
    /* a or b fires each (b may have been given the shard meanwhile) */
    for (;;) {
        size_t n = 0;
        for (int i = 0; i < 10; i++) {
            snprintf(key, sizeof key, "o%d", i);
            n += recorder_count_key(&ra, key) + recorder_count_key(&rb, key) > 0;
        }
        if (n == 10)
            break;
        sleep_ms(10);
    }
    house_stop(&h);
    two_nodes_close(a, b, &ra, &rb);
}

/* UINT64_MAX is kept and never fires; with a horizon of UINT64_MAX ("everything in memory") the
 * journal keeps it out of memory (due < loaded is false). */
static void test_due_uint64_max_with_an_endless_horizon(void)
{
    fresh();
    struct recorder rec;
    recorder_init(&rec, NULL);
    chime_store *s;
    CHECK_EQ(pg_open_node(&s, conninfo, "n1", &rec, LEASE, UINT64_MAX), 0);
    CHECK_EQ(chime_store_put(s, "never", 5, "x", 1, UINT64_MAX), 0);
    CHECK_EQ(chime_store_put(s, "soon", 4, "x", 1, wall_ns() + 100 * MS), 0);
    recorder_wait_key(&rec, "soon", 1, NULL);
    CHECK_EQ(chime_store_sync(s), 0);
    /* every arm the lanes queued (before sync returned) has been run by the loader */
    for (;;) {
        pthread_mutex_lock(&s->b->task_lock);
        int empty = s->b->tasks == NULL;
        pthread_mutex_unlock(&s->b->task_lock);
        if (empty)
            break;
        sleep_ms(2); /* a poll: the loader tells nobody */
    }
    struct chime_store_stats st;
    chime_store_stats(s, &st);
    printf("# in_table(never) = %d, stats.loaded = %llu\n", in_table(s, "never"),
           (unsigned long long)st.loaded);
    CHECK(!in_table(s, "never"), "a timer due UINT64_MAX was armed in memory");
    CHECK_EQ(chime_store_close(s), 0);
    recorder_free(&rec);
}

/* A put of one key, as a lane sends it (statements.h), shard 0, payload "p"; due = part. */
static void put_params(const char *keys, const char *parts, const char *zeros, const char **v)
{
    v[0] = keys;
    v[1] = parts;
    v[2] = parts;
    v[3] = zeros;
    v[4] = zeros;
    v[5] = strchr(keys, ',') ? "{p,p}" : "{p}";
}

/* The race of tests 7 and 9, with the lane's own statements on sessions of the test's: a lane's
 * put of a-0 and k-0 waits for a-0's row (held), its version base drawn; meanwhile another node
 * puts k-0 (version vq) and cancels it, and k-0's partition settles. */
struct race {
    PGconn *obs, *hold, *lane, *other;
    struct house h;
    uint64_t far;
};

/* Sessions, a housekeeper of the test's (not started: the test calls house_once), partitions for
 * `width_ahead` widths from now and the one of `far` (an hour on). */
static void race_open(struct race *x, uint64_t widths_ahead)
{
    x->obs = pg_connect_or_die(conninfo);
    x->hold = pg_connect_or_die(conninfo);
    x->lane = pg_connect_or_die(conninfo);
    x->other = pg_connect_or_die(conninfo);
    house_open(&x->h, 0);
    uint64_t now = wall_ns();
    x->far = now + 3600 * SEC;
    CHECK_EQ(chime__pg_partitions_ensure(&x->h.pc, &x->h.sc, now, now + widths_ahead * WIDTH),
             PG_OK);
    CHECK_EQ(chime__pg_partitions_ensure(&x->h.pc, &x->h.sc, x->far, x->far), PG_OK);
}

/* a-0's row (which exists) held, then the lane's put of a-0 (far) and k-0 (part kpart) sent;
 * returns once it waits for a-0's row. */
static void race_lane_waits(struct race *x, uint64_t kpart)
{
    pg_hold_key(x->hold, "a-0");
    char parts[64];
    const char *v[6];
    snprintf(parts, sizeof parts, "{%llu,%llu}", (unsigned long long)x->far,
             (unsigned long long)kpart);
    put_params("{a-0,k-0}", parts, "{0,0}", v);
    CHECK(PQsendQueryParams(x->lane, PG_SQL_PUT, 6, NULL, v, NULL, NULL, 0), "send");
    while (!pg_blocked(x->obs, PQbackendPID(x->lane)))
        sleep_ms(2); /* a poll of the server's lock table */
}

/* Another node puts k-0 in the partition of kp (now). Return: its version. */
static uint64_t race_other_puts(struct race *x, uint64_t kp)
{
    char kpart[32];
    const char *v[6];
    snprintf(kpart, sizeof kpart, "{%llu}", (unsigned long long)kp);
    put_params("{k-0}", kpart, "{0}", v);
    PGresult *r = PQexecParams(x->other, PG_SQL_PUT, 6, NULL, v, NULL, NULL, 0);
    CHECK(PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1, "k-0: %s",
          PQerrorMessage(x->other));
    uint64_t vq = (uint64_t)atoll(PQgetvalue(r, 0, 1));
    PQclear(r);
    return vq;
}

/* The other node cancels k-0; once its partition (that of kp) is settled, by the real clock, the
 * housekeeper has its round; then a-0 is let go and the lane's put commits. */
static void race_settle_and_commit(struct race *x, uint64_t kp)
{
    const char *cv[2] = { "{k-0}", "{0}" };
    PGresult *r = PQexecParams(x->other, PG_SQL_CANCEL, 2, NULL, cv, NULL, NULL, 0);
    CHECK(PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1, "cancel: %s",
          PQerrorMessage(x->other));
    PQclear(r);
    uint64_t settled = (kp / WIDTH + 2) * WIDTH; /* one width after its range ends */
    while (wall_ns() < settled)
        sleep_ms(10); /* waits for the clock to reach a time, polled */
    CHECK_EQ(house_once(&x->h), PG_OK);
    printf("# the housekeeper dropped %u partitions; k-0's rows in keys: %lld\n",
           atomic_load(&x->h.dropped),
           pg_value(x->obs, "SELECT count(*) FROM chime.keys WHERE key = 'k-0'::bytea"));
    CHECK(pg_command(x->hold, "ROLLBACK"), "release a-0");
    while ((r = PQgetResult(x->lane))) {
        CHECK(PQresultStatus(r) == PGRES_TUPLES_OK, "the lane's put: %s", PQerrorMessage(x->lane));
        PQclear(r);
    }
}

static void race_close(struct race *x)
{
    PQfinish(x->obs);
    PQfinish(x->hold);
    PQfinish(x->lane);
    PQfinish(x->other);
    chime__pg_disconnect(&x->h.pc);
}

/*
 * P4 (pg.h): "Versions of one key only grow ... Rows of ended timers stay as tombstones until
 * their partition is dropped ..., so a put of the same key always meets its predecessor." A lane's
 * put statement draws its base version at its start (PG_VERSION_BASE) and uses it for keys that
 * have no row. While it waits on another key's row (a-0, held by a third session, as in
 * test_pg_versions), k-0 is put by someone else (a larger version vq), cancelled, and its
 * partition comes to be settled (one width later: widths here are 1 s, the smallest init allows).
 * The housekeeper's first, unlocked deletion removed k-0's tombstone (whether or not the drop then
 * succeeded). The waiting put then found no row for k-0 and inserted it with its start's base: a
 * version smaller than vq. Tombstones are kept two minutes now (schema.c, TOMBSTONE_AGE).
 */
static void test_a_waiting_put_meets_no_predecessor(void)
{
    fresh();
    struct race x;
    race_open(&x, 3);
    char farpart[32];
    const char *v[6];
    snprintf(farpart, sizeof farpart, "{%llu}", (unsigned long long)x.far);
    put_params("{a-0}", farpart, "{0}", v); /* a-0 first, for the lane's put to wait on */
    PGresult *r = PQexecParams(x.obs, PG_SQL_PUT, 6, NULL, v, NULL, NULL, 0);
    CHECK(PQresultStatus(r) == PGRES_TUPLES_OK, "a-0: %s", PQerrorMessage(x.obs));
    PQclear(r);
    race_lane_waits(&x, x.far);
    uint64_t kp = wall_ns();
    uint64_t vq = race_other_puts(&x, kp);
    race_settle_and_commit(&x, kp);
    long long vp = pg_value(x.obs, "SELECT version FROM chime.keys WHERE key = 'k-0'::bytea");
    printf("# k-0: version %llu put and cancelled by the other node, then %lld by the lane\n",
           (unsigned long long)vq, vp);
    CHECK(vp > (long long)vq, "k-0's version went down: %lld after %llu (P4)", vp,
          (unsigned long long)vq);
    race_close(&x);
}

/* Timers due exactly at the boundary of what is loaded, one ns before and after it, put by the
 * owner and by another node (notifications lost): each fires once, never early. */
static void test_due_at_the_loaded_boundary(void)
{
    fresh();
    struct recorder ra, rb;
    chime_store *a, *b;
    two_nodes_open(&a, &b, &ra, &rb);
    char key[32];
    int n = 0;
    for (int round = 0; round < 6; round++) {
        for (int who = 0; who < 2; who++) {
            /* whichever holds the shard: the boundary of each */
            uint64_t l = atomic_load(who ? &b->loaded : &a->loaded);
            for (int d = -1; d <= 1; d++) {
                snprintf(key, sizeof key, "L%d-%d-%d", round, who, d + 1);
                CHECK_EQ(chime_store_put(who ? b : a, key, strlen(key), "x", 1,
                                         l + (uint64_t)(int64_t)d), 0);
                n++;
            }
        }
        sleep_ms(150); /* let the boundary move on between rounds; not a synchronisation */
    }
    for (;;) {
        int fired = 0;
        for (int round = 0; round < 6; round++)
            for (int who = 0; who < 2; who++)
                for (int d = 0; d < 3; d++) {
                    snprintf(key, sizeof key, "L%d-%d-%d", round, who, d);
                    fired += recorder_count_key(&ra, key) + recorder_count_key(&rb, key) > 0;
                }
        if (fired == n)
            break;
        sleep_ms(10);
    }
    two_nodes_close(a, b, &ra, &rb);
}

/* The version of key in s's table (pending or running), 0 if none. */
static uint64_t table_version(chime_store *s, const char *key)
{
    uint64_t hash = chime__store_hash(s, key, strlen(key));
    struct hot_stripe *st = chime__store_stripe(s, hash);
    struct hot *p, *r;
    pthread_mutex_lock(&st->lock);
    chime__store_find(st, hash, key, strlen(key), &p, &r);
    uint64_t v = p ? p->ref.version : r ? r->ref.version : 0;
    pthread_mutex_unlock(&st->lock);
    return v;
}

/*
 * What a_waiting_put_meets_no_predecessor costs a user. The owner (rate-limited to 1 firing a
 * second, with a backlog) holds k-0's version vq, put by another node and cancelled there: the
 * owner is not told, and would find out when it fires it (-ESTALE). Meanwhile the lane's put of
 * k-0, waiting since before vq on another key's row, commits with a version vp < vq (the tombstone
 * went at the housekeeper's round). The owner's poll reads vp and installs nothing: it holds a
 * newer version (store.c, chime__store_install). Then vq's firing is refused and leaves the table.
 * vp is pending, due, and owned by a node that will not read it again: no load covers its part
 * any more, and polls read only transactions committed since. It fires only when the shard
 * changes hands or the owner restarts.
 */
static void test_a_put_lost_behind_a_stale_newer_version(void)
{
    fresh();
    struct recorder rec;
    recorder_init(&rec, NULL);
    struct chime_store_config cfg;
    pg_node_config(&cfg, conninfo, "a", LEASE, SEC);
    cfg.max_fires_per_s = 1;
    chime_store *a;
    CHECK_EQ(pg_open_config(&a, &cfg, &rec), 0);
    struct race x;
    race_open(&x, 10);
    uint64_t now = wall_ns();
    CHECK_EQ(chime_store_put(a, "a-0", 3, "x", 1, x.far), 0);
    char key[32];
    /* the backlog: 12 s of firings at 1/s (24 under valgrind and the sanitizers, where the steps
     * below take longer, so that k-0 is still behind it when the test looks) */
    for (int i = 0; i < (TAP_SLOW ? 24 : 12); i++) {
        snprintf(key, sizeof key, "f%d", i);
        CHECK_EQ(chime_store_put(a, key, strlen(key), "x", 1, now), 0);
    }
    CHECK_EQ(chime_store_sync(a), 0);
    uint64_t kdue = now + 4 * SEC;
    race_lane_waits(&x, kdue); /* the lane's k-0 is due in 4 s */
    /* another node puts k-0, due now, in a partition after the backlog's (which stays pending);
     * the owner's poll arms it behind the backlog */
    while (wall_ns() < (now / WIDTH + 1) * WIDTH)
        sleep_ms(10); /* waits for the clock to reach a time, polled */
    uint64_t kp = wall_ns();
    uint64_t vq = race_other_puts(&x, kp);
    while (table_version(a, "k-0") != vq)
        sleep_ms(5); /* a poll of the owner's table: its loader arms it */
    race_settle_and_commit(&x, kp); /* the owner is not told of the cancel */
    long long vp = pg_value(x.obs, "SELECT version FROM chime.keys WHERE key = 'k-0'::bytea"
                                   " AND end_epoch IS NULL");
    printf("# k-0: vq %llu (held by the owner, cancelled), vp %lld (pending)\n",
           (unsigned long long)vq, vp);
    CHECK(table_version(a, "k-0") == vq, "the backlog ran out before the test could look");
    /* until k-0 fires, or has left the owner's table and three polls have gone by since */
    uint64_t polls_at = 0;
    for (;;) {
        if (recorder_count_key(&rec, "k-0"))
            break;
        uint64_t polls = atomic_load(&a->b->polls);
        if (table_version(a, "k-0") == 0) {
            if (!polls_at)
                polls_at = polls;
            else if (polls >= polls_at + 3)
                break;
        }
        sleep_ms(10); /* a poll of the owner's state */
    }
    long long pending = pg_value(x.obs, "SELECT count(*) FROM chime.pending"
                                        " WHERE key = 'k-0'::bytea AND NOT firing");
    CHECK(recorder_count_key(&rec, "k-0") == 1,
          "k-0 (version %lld, due %llu ns ago) is pending in the database (%lld), its shard held by"
          " the owner, and neither in its table nor fired: no load or poll reads it again", vp,
          (unsigned long long)(wall_ns() - kdue), pending);
    race_close(&x);
    CHECK_EQ(chime_store_close(a), 0);
    recorder_free(&rec);
}

int main(void)
{
    static const struct tap_test tests[] = {
        { "boundaries_under_an_eager_housekeeper", test_boundaries_under_an_eager_housekeeper },
        { "a_firing_keeps_its_partition", test_a_firing_keeps_its_partition },
        { "a_retry_moves_partitions", test_a_retry_moves_partitions },
        { "a_replace_moves_partitions", test_a_replace_moves_partitions },
        { "another_nodes_puts_without_notifications",
          test_another_nodes_puts_without_notifications },
        { "due_uint64_max_with_an_endless_horizon", test_due_uint64_max_with_an_endless_horizon },
        { "a_waiting_put_meets_no_predecessor", test_a_waiting_put_meets_no_predecessor },
        { "due_at_the_loaded_boundary", test_due_at_the_loaded_boundary },
        { "a_put_lost_behind_a_stale_newer_version", test_a_put_lost_behind_a_stale_newer_version },
    };
    return pg_tests_main(&cluster, tests, (int)(sizeof tests / sizeof *tests));
}
