/* SPDX-License-Identifier: MIT */
/*
 * A slow network between a node and its server: test/pg_proxy.h relays the node's connections and
 * carries what the node sends at a set rate. One throwaway cluster for the file (test/pg_util.h),
 * one database per test.
 */
#include "pg_test.h"

#include "pg_proxy.h"

static struct pg_cluster cluster;
static struct pg_proxy proxy;
static struct recorder rec;

/*
 * PostgreSQL counts the time it takes to receive a message toward idle_in_transaction_session_
 * timeout, and a lane's batch sends each statement's arrays, every key and payload of the batch,
 * as one message inside its transaction (lanes.c, THE BYTE BOUND). Found under TSan on a loaded
 * machine: a 12 MiB batch reached the server more slowly than the timeout allowed, the server
 * ended the session, the lane ran the batch again on a new connection, as slowly, and the test
 * hung. Here the link carries 2 MiB a second, and 400 puts of 32 KiB (12.5 MiB, 6 s on the link)
 * queue up while the relay holds the server's replies. The lease is 2 s, so the timeout is 1 s
 * (5 s with valgrind and the sanitizers, where the lease is 10 s): in one batch they never
 * commit, and the watchdog fails the test; in batches of 1 MiB they commit in about 7 s.
 */
static void test_a_batch_slower_on_the_link_than_the_idle_timeout_is_split_and_commits(void)
{
    enum { PUTS = 400, PAYLOAD = 32 << 10 };
    char direct[600], relayed[600];
    CHECK_EQ(pg_cluster_db(&cluster, "link_1", 8, PG_WIDTH_S, direct, sizeof direct), 0);
    CHECK_EQ(pg_proxy_start(&proxy, cluster.port), 0);
    pg_proxy_conninfo(&proxy, "link_1", relayed, sizeof relayed);
    recorder_init(&rec, NULL);
    struct chime_store_config cfg;
    pg_node_config(&cfg, relayed, "a", (TAP_SLOW ? 10 : 2) * SEC, 0);
    cfg.sync = CHIME_SYNC_INTERVAL; /* the puts queue up behind the lane's first batch */
    chime_store *s = NULL;
    int rc = pg_open_config(&s, &cfg, &rec);
    CHECK(rc == 0, "open: %s", chime_strerror(rc));
    pg_proxy_rate(&proxy, (size_t)2 << 20);
    pg_proxy_hold(&proxy, 1); /* the lane cannot finish a batch while the puts are queued */
    static char payload[PAYLOAD];
    memset(payload, 'p', sizeof payload);
    pg_put_far(s, "big", PUTS, payload, sizeof payload);
    pg_proxy_hold(&proxy, 0);
    rc = chime_store_sync(s);
    CHECK(rc == 0, "sync: %s", chime_strerror(rc));
    CHECK_EQ(pg_pending_of(direct, "big"), PUTS);
    CHECK_EQ(chime_store_close(s), 0);
    pg_proxy_stop(&proxy);
    recorder_free(&rec);
}

int main(void)
{
    static const struct tap_test tests[] = {
        { "a_batch_slower_on_the_link_than_the_idle_timeout_is_split_and_commits",
          test_a_batch_slower_on_the_link_than_the_idle_timeout_is_split_and_commits },
    };
    return pg_tests_main(&cluster, tests, (int)(sizeof tests / sizeof *tests));
}
