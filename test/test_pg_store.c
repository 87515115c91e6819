/* SPDX-License-Identifier: MIT */
/*
 * The store's contract on PostgreSQL (lib/store/pg/): put, replace, cancel, fire, acknowledge, retry,
 * dead letters, restart, and what the rows in the database say afterwards. One throwaway cluster for
 * the file (test/pg_util.h), one database per test, one node unless a test says otherwise.
 */
#include "pg_test.h"

#include <netinet/tcp.h>

static struct pg_cluster cluster;
static char conninfo[600];
static struct recorder rec;

#define SHARDS 16

/* A fresh database with the schema, and a fresh recorder. */
static void fresh(void)
{
    pg_fresh_db(&cluster, "store", SHARDS, PG_WIDTH_S, conninfo, sizeof conninfo, NULL);
    recorder_free(&rec);
    recorder_init(&rec, NULL);
}

static chime_store *open_node(const char *node)
{
    chime_store *s = NULL;
    int rc = pg_open_node(&s, conninfo, node, &rec, 2 * SEC, 0);
    CHECK(rc == 0, "open: %s", chime_strerror(rc));
    return s;
}

static void test_put_fires_once_at_its_due_time_and_is_acknowledged(void)
{
    fresh();
    chime_store *s = open_node("a");
    uint64_t due = wall_ns() + 200 * MS;
    CHECK_EQ(chime_store_put(s, "order-1", 7, "cancel", 6, due), 0);
    struct firing f;
    recorder_wait_key(&rec, "order-1", 1, &f);
    CHECK(f.at_wall >= due, "fired %lld ns early", (long long)(due - f.at_wall));
    CHECK_EQ(f.due, due);
    CHECK_EQ(f.attempt, 1);
    CHECK(!strcmp(f.payload, "cancel"), "payload %s", f.payload);
    CHECK(f.fence != 0, "a PostgreSQL firing carries a fence");
    pg_wait_idle(s, conninfo);
    CHECK_EQ(chime_store_close(s), 0);
    PGconn *c = pg_connect_or_die(conninfo);
    CHECK_EQ(pg_value(c, "SELECT count(*) FROM chime.pending"), 0);
    CHECK_EQ(pg_value(c, "SELECT count(*) FROM chime.keys WHERE end_epoch > 0"), 1);
    PQfinish(c);
    CHECK_EQ(recorder_count_key(&rec, "order-1"), 1);
}

/* Put k due at now + window, replace it with now + 2 window: only the second fires, if the replace
 * returned within the window. */
static bool replace_in(uint64_t window)
{
    fresh();
    chime_store *s = open_node("a");
    uint64_t now = wall_ns();
    CHECK_EQ(chime_store_put(s, "k", 1, "first", 5, now + window), 0);
    CHECK_EQ(chime_store_put(s, "k", 1, "second", 6, now + 2 * window), 0);
    bool fit = in_time(now + window);
    CHECK_EQ(chime_store_put(s, "other", 5, "x", 1, now + 3 * window), 0);
    recorder_wait_key(&rec, "other", 1, NULL);
    pg_wait_idle(s, conninfo);
    if (fit) {
        CHECK_EQ(recorder_count_key(&rec, "k"), 1);
        struct firing f;
        recorder_wait_key(&rec, "k", 1, &f);
        CHECK(!strcmp(f.payload, "second"), "payload %s", f.payload);
        CHECK_EQ(f.due, now + 2 * window);
        CHECK(f.at_wall >= f.due, "early");
    }
    CHECK_EQ(chime_store_close(s), 0);
    return fit;
}

static void test_replace_fires_only_the_last_due_time_and_payload(void)
{
    in_window(replace_in);
}

/* A cancel that returns 0 guarantees the handler never starts, however late it returned; one that
 * found the timer firing is a failure only if it returned within the window. */
static bool cancel_in(uint64_t window)
{
    fresh();
    chime_store *s = open_node("a");
    CHECK_EQ(chime_store_put(s, "far", 3, "x", 1, wall_ns() + 3600 * SEC), 0);
    uint64_t gone_due = wall_ns() + window;
    CHECK_EQ(chime_store_put(s, "gone", 4, "x", 1, gone_due), 0);
    int got = chime_store_cancel(s, "gone", 4);
    if (got != 0 && !in_time(gone_due)) {
        store_wait_handlers(s);
        CHECK_EQ(chime_store_close(s), 0);
        return false;
    }
    CHECK_EQ(got, 0);
    CHECK_EQ(chime_store_cancel(s, "gone", 4), -ENOENT);
    CHECK_EQ(chime_store_cancel(s, "far", 3), 0); /* beyond the horizon: only in the database */
    CHECK_EQ(chime_store_cancel(s, "never", 5), -ENOENT);
    /* Due after "gone" was: had "gone" fired, it would have fired first. */
    CHECK_EQ(chime_store_put(s, "marker", 6, "x", 1, gone_due + window), 0);
    recorder_wait_key(&rec, "marker", 1, NULL);
    pg_wait_idle(s, conninfo);
    CHECK_EQ(recorder_count_key(&rec, "gone"), 0);
    CHECK_EQ(chime_store_close(s), 0);
    PGconn *c = pg_connect_or_die(conninfo);
    CHECK_EQ(pg_value(c, "SELECT count(*) FROM chime.keys WHERE end_epoch = 0"), 2);
    PQfinish(c);
    return true;
}

static void test_cancel_stops_a_pending_timer_and_a_second_cancel_is_enoent(void)
{
    in_window(cancel_in);
}

static int64_t retry_twice(struct recorder *r, const struct chime_fire *fire)
{
    (void)r;
    if (fire->key_len == 5 && !memcmp(fire->key, "retry", 5))
        return fire->attempt < 3 ? (int64_t)(50 * MS) : 0;
    return CHIME_STORE_DEAD;
}

static void test_retries_count_attempts_and_dead_letters_can_be_requeued(void)
{
    fresh();
    rec.reply = retry_twice;
    chime_store *s = open_node("a");
    uint64_t now = wall_ns();
    CHECK_EQ(chime_store_put(s, "retry", 5, "r", 1, now + 100 * MS), 0);
    CHECK_EQ(chime_store_put(s, "doomed", 6, "d", 1, now + 100 * MS), 0);
    struct firing f;
    recorder_wait_key(&rec, "retry", 3, &f);
    CHECK_EQ(f.attempt, 3);
    recorder_wait_key(&rec, "doomed", 1, NULL);
    pg_wait_idle(s, conninfo);
    CHECK_EQ(chime_store_sync(s), 0);
    size_t n = 0;
    CHECK_EQ(chime_store_dead_list(s, store_count_dead, &n), 0);
    CHECK_EQ(n, 1);
    rec.reply = NULL;
    CHECK_EQ(chime_store_dead_requeue(s, "doomed", 6, wall_ns() + 50 * MS), 0);
    CHECK_EQ(chime_store_dead_requeue(s, "doomed", 6, wall_ns() + 50 * MS), -ENOENT);
    recorder_wait_key(&rec, "doomed", 2, &f);
    CHECK_EQ(f.attempt, 1);
    CHECK(!strcmp(f.payload, "d"), "the dead letter's payload");
    pg_wait_idle(s, conninfo);
    CHECK_EQ(chime_store_sync(s), 0);
    n = 0;
    CHECK_EQ(chime_store_dead_list(s, store_count_dead, &n), 0);
    CHECK_EQ(n, 0);
    pg_wait_settled(s); /* acknowledged, retried twice, buried */
    CHECK_EQ(chime_store_close(s), 0);
}

/* Until `n` more polls of the node's loader have ended. */
static void wait_polls(chime_store *s, uint64_t n)
{
    uint64_t until = atomic_load(&s->b->polls) + n;
    while (atomic_load(&s->b->polls) < until)
        sleep_ms(10); /* a poll: the loader polls on its own, once a second */
}

static void test_a_requeued_dead_letter_is_read_back_by_the_poll(void)
{
    /* Its caller arms it with the epoch it read before the commit; a takeover in between would
     * read the shard without it and make that epoch stale, so the requeue's transaction is never
     * one the poll skips (found in review: with the notification lost too, the timer never fired).
     * Here the node holds the shard throughout: the poll must still read the row and arm it. */
    fresh();
    rec.reply = retry_twice; /* "doomed" goes to the dead letters */
    chime_store *s = open_node("a");
    CHECK_EQ(chime_store_put(s, "doomed", 6, "d", 1, wall_ns() + 100 * MS), 0);
    recorder_wait_key(&rec, "doomed", 1, NULL);
    pg_wait_idle(s, conninfo);
    CHECK_EQ(chime_store_sync(s), 0);
    rec.reply = NULL;
    wait_polls(s, 2);
    uint64_t armed = atomic_load(&s->b->armed);
    CHECK_EQ(chime_store_dead_requeue(s, "doomed", 6, wall_ns() + 20 * SEC), 0);
    wait_polls(s, 2); /* the second began after the requeue's commit */
    CHECK(atomic_load(&s->b->armed) > armed, "the poll skipped the requeue's transaction");
    CHECK_EQ(chime_store_close(s), 0);
}

/* Put a timer due at now + window and close: if close returned within the window, the timer has
 * not fired, and fires after the reopen, as its first attempt. */
static bool survive_in(uint64_t window)
{
    fresh();
    chime_store *s = open_node("a");
    uint64_t due = wall_ns() + window;
    CHECK_EQ(chime_store_put(s, "survivor", 8, "p", 1, due), 0);
    CHECK_EQ(chime_store_close(s), 0);
    if (!in_time(due))
        return false; /* it may have fired before the close */
    CHECK_EQ(recorder_count_key(&rec, "survivor"), 0);
    s = open_node("a");
    struct firing f;
    recorder_wait_key(&rec, "survivor", 1, &f);
    CHECK(f.at_wall >= due, "early");
    CHECK_EQ(f.attempt, 1);
    pg_wait_idle(s, conninfo);
    CHECK_EQ(chime_store_close(s), 0);
    return true;
}

static void test_pending_timers_survive_a_close_and_fire_after_reopen(void)
{
    in_window(survive_in);
}

/* Put, through node b, a key of a shard node a owns, due soon; wait for a's firing. */
static void put_through_other_node(chime_store *a, chime_store *b, struct recorder *ra, const char *prefix)
{
    PGconn *c = pg_connect_or_die(conninfo);
    long long shard = pg_value(c, "SELECT min(shard) FROM chime.shards WHERE owner = 'a'"
                                  " AND expires > now()");
    PQfinish(c);
    CHECK(shard >= 0, "a owns no shard");
    char key[64];
    pg_key_in_shard(key, sizeof key, prefix, (unsigned)shard, SHARDS);
    uint64_t due = wall_ns() + 300 * MS;
    CHECK_EQ(chime_store_put(b, key, strlen(key), "x", 1, due), 0);
    struct firing f;
    recorder_wait_key(ra, key, 1, &f);
    CHECK(f.at_wall >= due, "early");
    pg_wait_idle(a, conninfo);
}

static void test_a_put_for_another_nodes_shard_reaches_it_with_or_without_notifications(void)
{
    fresh();
    struct recorder ra;
    recorder_init(&ra, NULL);
    chime_store *a = NULL, *b = NULL;
    CHECK_EQ(pg_open_node(&a, conninfo, "a", &ra, 2 * SEC, 0), 0);
    CHECK_EQ(pg_open_node(&b, conninfo, "b", &rec, 2 * SEC, 0), 0);
    struct chime__backend *ab = a->b;
    /* notifications lost: only the owner's poll can deliver it (pg.h, P7) */
    chime__pg_drop_notifications(1);
    put_through_other_node(a, b, &ra, "lost");
    CHECK_EQ(atomic_load(&ab->notified), 0);
    chime__pg_drop_notifications(0);
    /* and with them, the hint */
    put_through_other_node(a, b, &ra, "hinted");
    CHECK(atomic_load(&ab->notified) >= 1, "no notification arrived");
    CHECK_EQ(chime_store_close(b), 0);
    CHECK_EQ(chime_store_close(a), 0);
    recorder_free(&ra);
}

/* Found in review: a dead letter requeued through a node that does not own its shard was held in
 * that node's memory (with fence 0, which fire refuses) as if it were its own. It waits on the
 * owner's side only. */
static void test_a_requeue_through_another_node_is_held_by_the_owner_only(void)
{
    fresh();
    struct recorder ra;
    recorder_init(&ra, NULL);
    ra.reply = retry_twice; /* everything but "retry" goes to the dead letters */
    chime_store *a = NULL, *b = NULL;
    CHECK_EQ(pg_open_node(&a, conninfo, "a", &ra, 2 * SEC, 0), 0);
    CHECK_EQ(pg_open_node(&b, conninfo, "b", &rec, 2 * SEC, 0), 0);
    PGconn *c = pg_connect_or_die(conninfo);
    while (pg_value(c, "SELECT count(*) FROM chime.shards WHERE owner = 'a' AND expires > now()") !=
               SHARDS / 2 ||
           pg_value(c, "SELECT count(*) FROM chime.shards WHERE owner = 'b' AND expires > now()") !=
               SHARDS / 2)
        sleep_ms(20); /* a poll: the nodes balance the shards between them, round by round */
    long long shard = pg_value(c, "SELECT min(shard) FROM chime.shards WHERE owner = 'a'");
    PQfinish(c);
    char key[64];
    pg_key_in_shard(key, sizeof key, "requeued", (unsigned)shard, SHARDS);
    CHECK_EQ(chime_store_put(a, key, strlen(key), "d", 1, wall_ns() + 100 * MS), 0);
    recorder_wait_key(&ra, key, 1, NULL); /* a fires it; its handler sends it to the dead letters */
    pg_wait_idle(a, conninfo);
    CHECK_EQ(chime_store_sync(a), 0);
    CHECK_EQ(chime_store_dead_requeue(b, key, strlen(key), wall_ns() + 600 * SEC), 0);
    struct chime_store_stats st;
    chime_store_stats(b, &st);
    CHECK_EQ(st.loaded, 0); /* not b's to hold */
    CHECK_EQ(chime_store_close(b), 0);
    CHECK_EQ(chime_store_close(a), 0);
    recorder_free(&ra);
}

/* Rows chime.pending shows (the operators' view: committed, unfired timers), polled until it shows
 * want; the test's timeout bounds the wait. */
static void wait_pending_rows(PGconn *c, long long want)
{
    long long got;
    while ((got = pg_value(c, "SELECT count(*) FROM chime.pending")) != want) {
        CHECK(got >= 0 && got < want, "%lld rows pending, waiting for %lld", got, want);
        sleep_ms(2); /* a poll of the database: there is nothing to wait on */
    }
}

/*
 * CHIME_SYNC_INTERVAL: puts and cancels return before their transaction commits. chime_store_sync
 * returns only once every earlier one is committed, which another connection then sees at once;
 * without a sync, the interval's own commit gets them there.
 */
static void test_sync_interval_commits_at_sync_and_on_its_own(void)
{
    fresh();
    struct chime_store_config cfg;
    pg_node_config(&cfg, conninfo, "a", 2 * SEC, 0);
    cfg.sync = CHIME_SYNC_INTERVAL;
    cfg.sync_interval_ns = 20 * MS;
    chime_store *s = NULL;
    CHECK_EQ(pg_open_config(&s, &cfg, &rec), 0);
    PGconn *c = pg_connect_or_die(conninfo);
    uint64_t due = wall_ns() + 3600 * SEC; /* nothing fires during the test */
    char key[32];
    enum { N = 2000 };
    for (int i = 0; i < N; i++) {
        snprintf(key, sizeof key, "iv-%d", i);
        CHECK_EQ(chime_store_put(s, key, strlen(key), "p", 1, due + (uint64_t)i), 0);
    }
    CHECK_EQ(chime_store_sync(s), 0);
    CHECK_EQ(pg_value(c, "SELECT count(*) FROM chime.pending"), N);
    for (int i = 0; i < N; i += 2) {
        snprintf(key, sizeof key, "iv-%d", i);
        CHECK_EQ(chime_store_cancel(s, key, strlen(key)), 0);
    }
    CHECK_EQ(chime_store_sync(s), 0);
    CHECK_EQ(pg_value(c, "SELECT count(*) FROM chime.pending"), N / 2);
    for (int i = 0; i < N; i++) { /* no sync: the interval commits them */
        snprintf(key, sizeof key, "iv-late-%d", i);
        CHECK_EQ(chime_store_put(s, key, strlen(key), "p", 1, due), 0);
    }
    wait_pending_rows(c, N / 2 + N);
    PQfinish(c);
    CHECK_EQ(chime_store_close(s), 0);
    CHECK_EQ(recorder_count(&rec), 0);
}

/*
 * CHIME_SYNC_EACH from many threads at once: a lane's commit serves every caller in its batch, and
 * wakes them as a tree (lanes.c, SETTLING A BATCH). Every caller returns, and what each put
 * returned for is committed: another connection sees all of it without a sync. A caller that no
 * wake reaches hangs, and the test's timeout fails it.
 */
enum { PUTTERS = 64, PUTS_EACH = 25 };

struct putter {
    chime_store *s;
    int index;
    pthread_barrier_t *start;
    int failed;
};

static void *putter_main(void *arg)
{
    struct putter *p = arg;
    uint64_t due = wall_ns() + 3600 * SEC; /* nothing fires during the test */
    pthread_barrier_wait(p->start);
    for (int i = 0; i < PUTS_EACH; i++) {
        char key[32];
        snprintf(key, sizeof key, "many-%d-%d", p->index, i);
        p->failed += chime_store_put(p->s, key, strlen(key), "p", 1, due) != 0;
    }
    return NULL;
}

static void test_every_caller_of_a_shared_commit_returns_once_it_is_committed(void)
{
    fresh();
    chime_store *s = open_node("a");
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, PUTTERS);
    struct putter p[PUTTERS];
    pthread_t t[PUTTERS];
    for (int i = 0; i < PUTTERS; i++) {
        p[i] = (struct putter){ s, i, &start, 0 };
        CHECK_EQ(pthread_create(&t[i], NULL, putter_main, &p[i]), 0);
    }
    int failed = 0;
    for (int i = 0; i < PUTTERS; i++) {
        pthread_join(t[i], NULL);
        failed += p[i].failed;
    }
    pthread_barrier_destroy(&start);
    CHECK_EQ(failed, 0);
    PGconn *c = pg_connect_or_die(conninfo);
    CHECK_EQ(pg_value(c, "SELECT count(*) FROM chime.pending"), PUTTERS * PUTS_EACH);
    PQfinish(c);
    CHECK_EQ(chime_store_close(s), 0);
    CHECK_EQ(recorder_count(&rec), 0);
}

/*
 * A backend that has failed for good refuses what a call hands it, and the call frees what it made
 * for it exactly once: the lane's queue refuses the operation and leaves it to its maker. Called on
 * the backend directly, as a call that passed the store's own check just before the failure does.
 * (The cancel, requeue and drop here freed their operation twice, which ASan reports.)
 */
static void test_calls_refused_after_a_failure_free_their_operation_once(void)
{
    fresh();
    chime_store *s = open_node("a");
    CHECK_EQ(chime_store_put(s, "k", 1, "p", 1, wall_ns() + 3600 * SEC), 0);
    chime__pg_fail(s->b, -EIO);
    struct chime__ref victim;
    struct chime__put_result res;
    uint64_t ticket = 1;
    CHECK_EQ(s->ops->cancel(s->b, "k", 1, 0, &victim, &ticket), -EIO);
    CHECK_EQ(s->ops->dead_drop(s->b, "k", 1, &ticket), -EIO);
    CHECK_EQ(s->ops->dead_requeue(s->b, "k", 1, wall_ns(), NULL, &res, NULL, NULL, &ticket), -EIO);
    struct chime__put put = { "k", 1, "p", 1, wall_ns() + 3600 * SEC, 0, 0, 0 };
    CHECK_EQ(s->ops->put(s->b, &put, &res, &ticket), -EIO);
    chime_store_close(s); /* failed: its result is the failure's, not this test's subject */
}

/* Node o's clock, SKEW behind the machine's (and node x's). */
#define SKEW (5 * SEC)
static uint64_t behind(void)
{
    return wall_ns() - SKEW;
}

/*
 * Clocks that disagree by more than the horizon: node x, whose clock is ahead, puts a timer in the
 * shard node o owns, due at o's now. Its row's part is x's now, beyond everything o has loaded and
 * polls for, and its due time is before o's boundary, where o's later loads used to start: it was
 * never read again until the shard changed hands. It fires, late by the skew at most, and from the
 * owner that held the shard all along. Once o's boundary has passed the row's part, the load that
 * read it has ended: the timer is in o's table or has fired.
 */
static void test_a_put_due_before_the_owners_boundary_from_a_clock_ahead_still_fires(void)
{
    pg_fresh_db(&cluster, "store", 1, PG_WIDTH_S, conninfo, sizeof conninfo, NULL);
    struct recorder ro;
    recorder_init(&ro, behind);
    recorder_free(&rec);
    recorder_init(&rec, NULL);
    chime_store *o = NULL, *x = NULL;
    chime__store_set_clock(behind);
    int rc = pg_open_node(&o, conninfo, "o", &ro, 2 * SEC, SEC);
    chime__store_set_clock(NULL);
    CHECK_EQ(rc, 0);
    PGconn *c = pg_connect_or_die(conninfo);
    char owner[64] = "";
    long long epoch;
    while (!(epoch = pg_owner(c, 0, owner, sizeof owner)) || strcmp(owner, "o"))
        sleep_ms(2); /* a poll of the database: there is nothing to wait on */
    CHECK_EQ(pg_open_node(&x, conninfo, "x", &rec, 2 * SEC, SEC), 0);
    CHECK_EQ(chime_store_put(x, "late", 4, "p", 1, behind()), 0);
    long long part = pg_value(c, "SELECT part FROM chime.timers WHERE key = 'late'");
    CHECK(part > 0, "the put's row");
    while (atomic_load_explicit(&o->loaded, memory_order_acquire) <= (uint64_t)part)
        sleep_ms(2); /* as above: o's keeper moves its boundary as o's clock goes */
    CHECK(in_table(o, "late") || recorder_count_key(&ro, "late") == 1,
          "o loaded past the row's part (%lld) without reading it", part);
    struct firing f;
    recorder_wait_key(&ro, "late", 1, &f);
    CHECK_EQ(pg_fence_epoch(f.fence), (uint64_t)epoch); /* o's own epoch: no takeover read it */
    CHECK_EQ(pg_owner(c, 0, owner, sizeof owner), epoch);
    pg_wait_idle(o, conninfo);
    PQfinish(c);
    CHECK_EQ(chime_store_close(x), 0);
    CHECK_EQ(chime_store_close(o), 0);
    CHECK_EQ(recorder_count_key(&ro, "late"), 1);
    CHECK_EQ(recorder_count(&rec), 0);
    recorder_free(&ro);
}

/* One option of a connection's socket. */
static int sockopt(PGconn *c, int level, int name)
{
    int v = -1;
    socklen_t len = sizeof v;
    CHECK_EQ(getsockopt(PQsocket(c), level, name, &v, &len), 0);
    return v;
}

/* A server whose machine died answers nothing, and closes nothing: without TCP's own checks, a
 * node's threads would wait hours for it (conn.c, DEAD PEERS). Each connection sets them, and a
 * connection string that sets its own wins. What they do when the peer is gone is TCP's: a test
 * would need a network that drops packets, which a test cannot make without root. */
static void test_connections_give_up_on_a_silent_server_unless_the_string_says_otherwise(void)
{
    fresh();
    struct pg_conn pc = { .conninfo = conninfo, .role = "test", .lease_ns = 2 * SEC };
    CHECK_EQ(chime__pg_connect(&pc), 0);
    CHECK_EQ(sockopt(pc.c, SOL_SOCKET, SO_KEEPALIVE), 1);
    CHECK_EQ(sockopt(pc.c, IPPROTO_TCP, TCP_KEEPIDLE), 5);
    CHECK_EQ(sockopt(pc.c, IPPROTO_TCP, TCP_KEEPINTVL), 2);
    CHECK_EQ(sockopt(pc.c, IPPROTO_TCP, TCP_KEEPCNT), 3);
    CHECK_EQ(sockopt(pc.c, IPPROTO_TCP, TCP_USER_TIMEOUT), 75000);
    chime__pg_disconnect(&pc);

    char own[700];
    snprintf(own, sizeof own, "%s keepalives_idle=30 tcp_user_timeout=90000", conninfo);
    pc.conninfo = own;
    CHECK_EQ(chime__pg_connect(&pc), 0);
    CHECK_EQ(sockopt(pc.c, IPPROTO_TCP, TCP_KEEPIDLE), 30);
    CHECK_EQ(sockopt(pc.c, IPPROTO_TCP, TCP_USER_TIMEOUT), 90000);
    CHECK_EQ(sockopt(pc.c, IPPROTO_TCP, TCP_KEEPCNT), 3); /* the rest are still ours */
    chime__pg_disconnect(&pc);
}

static void test_open_refuses_a_database_without_the_schema(void)
{
    chime_store *s = NULL;
    char other[600];
    snprintf(other, sizeof other, "%s", cluster.conninfo); /* the database postgres: no schema */
    CHECK_EQ(pg_open_node(&s, other, "a", &rec, 0, 0), -ENOENT);
    CHECK(s == NULL, "untouched");
}

/* A put due at UINT64_MAX is kept and never fires (chime_store.h), as with the journal; other due
 * times from INT64_MAX on (the year 2262) do not fit the database's bigint and are -EINVAL. Found
 * in review: every due time beyond INT64_MAX was refused; and a put at INT64_MAX itself returned 0
 * and never fired (stored as UINT64_MAX is). */
static void test_a_put_due_at_uint64_max_is_kept_and_never_fires(void)
{
    fresh();
    chime_store *s = open_node("a");
    CHECK_EQ(chime_store_put(s, "held", 4, "x", 1, UINT64_MAX), 0);
    CHECK_EQ(chime_store_put(s, "late", 4, "x", 1, (uint64_t)INT64_MAX + 1), -EINVAL);
    CHECK_EQ(chime_store_put(s, "edge", 4, "x", 1, (uint64_t)INT64_MAX), -EINVAL);
    CHECK_EQ(chime_store_put(s, "last", 4, "x", 1, (uint64_t)INT64_MAX - 1), 0); /* fits */
    CHECK_EQ(chime_store_put(s, "marker", 6, "x", 1, wall_ns() + 100 * MS), 0);
    recorder_wait_key(&rec, "marker", 1, NULL); /* fired after "held" would have been loaded */
    CHECK_EQ(recorder_count_key(&rec, "held"), 0);
    CHECK_EQ(chime_store_cancel(s, "held", 4), 0); /* it was pending */
    CHECK_EQ(chime_store_cancel(s, "late", 4), -ENOENT);
    CHECK_EQ(chime_store_close(s), 0);
}

int main(void)
{
    recorder_init(&rec, NULL);
    static const struct tap_test tests[] = {
        { "a_put_due_at_uint64_max_is_kept_and_never_fires",
          test_a_put_due_at_uint64_max_is_kept_and_never_fires },
        { "put_fires_once_at_its_due_time_and_is_acknowledged",
          test_put_fires_once_at_its_due_time_and_is_acknowledged },
        { "replace_fires_only_the_last_due_time_and_payload",
          test_replace_fires_only_the_last_due_time_and_payload },
        { "cancel_stops_a_pending_timer_and_a_second_cancel_is_enoent",
          test_cancel_stops_a_pending_timer_and_a_second_cancel_is_enoent },
        { "retries_count_attempts_and_dead_letters_can_be_requeued",
          test_retries_count_attempts_and_dead_letters_can_be_requeued },
        { "a_requeued_dead_letter_is_read_back_by_the_poll",
          test_a_requeued_dead_letter_is_read_back_by_the_poll },
        { "a_requeue_through_another_node_is_held_by_the_owner_only",
          test_a_requeue_through_another_node_is_held_by_the_owner_only },
        { "pending_timers_survive_a_close_and_fire_after_reopen",
          test_pending_timers_survive_a_close_and_fire_after_reopen },
        { "a_put_for_another_nodes_shard_reaches_it_with_or_without_notifications",
          test_a_put_for_another_nodes_shard_reaches_it_with_or_without_notifications },
        { "sync_interval_commits_at_sync_and_on_its_own",
          test_sync_interval_commits_at_sync_and_on_its_own },
        { "every_caller_of_a_shared_commit_returns_once_it_is_committed",
          test_every_caller_of_a_shared_commit_returns_once_it_is_committed },
        { "calls_refused_after_a_failure_free_their_operation_once",
          test_calls_refused_after_a_failure_free_their_operation_once },
        { "a_put_due_before_the_owners_boundary_from_a_clock_ahead_still_fires",
          test_a_put_due_before_the_owners_boundary_from_a_clock_ahead_still_fires },
        { "open_refuses_a_database_without_the_schema", test_open_refuses_a_database_without_the_schema },
        { "connections_give_up_on_a_silent_server_unless_the_string_says_otherwise",
          test_connections_give_up_on_a_silent_server_unless_the_string_says_otherwise },
    };
    int rc = pg_tests_main(&cluster, tests, (int)(sizeof tests / sizeof *tests));
    recorder_free(&rec);
    return rc;
}
