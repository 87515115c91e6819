/* SPDX-License-Identifier: MIT */
/*
 * One node of an order-timeout service on PostgreSQL: run three of these on one machine (or on
 * three) against one database, and they share the timers. Each node puts the timeouts of its own
 * orders; whichever node owns an order's shard cancels it when it times out; if a node dies, the
 * others take its shards over and cancel its orders too.
 *
 *   chime-store --postgres "host=127.0.0.1 dbname=app" init      (once: the schema)
 *   pg_orders "host=127.0.0.1 dbname=app" east 100 &
 *   pg_orders "host=127.0.0.1 dbname=app" west 100 &
 *   pg_orders "host=127.0.0.1 dbname=app" north 100 &
 * An optional fourth argument sets how long after start the orders time out, in ms (default 1000:
 * they are spread over the second after that).
 *
 * Each node prints a line per timeout it handled ("timeout order-east-7 on west attempt 1 late 3051 us
 * fence 0x20005") and ends, closing its store, when its standard input ends (Ctrl-D, or the end of
 * a pipe: test/test_pg_example.c drives three of them that way).
 *
 * The handler is idempotent, as every chime_store handler must be (a timer fires at least once):
 * cancelling an order that is already cancelled changes nothing. A real service would pass the
 * fence to the order database ("cancel if unpaid and the fence is not older than the last one"), so
 * that a node paused past its lease cannot act on an order another node has taken over.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <chime.h>

static uint64_t wall_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

struct node {
    const char *name;
};

static int64_t order_timed_out(void *ctx, const struct chime_fire *f)
{
    const struct node *n = ctx;
    uint64_t now = wall_ns();
    /* here: UPDATE orders SET state = 'cancelled' WHERE id = key AND state = 'unpaid' */
    printf("timeout %.*s on %s attempt %" PRIu32 " late %" PRId64 " us fence 0x%" PRIx64 "\n",
           (int)f->key_len, (const char *)f->key, n->name, f->attempt,
           ((int64_t)now - (int64_t)f->due_ns) / 1000, f->fence);
    fflush(stdout);
    return 0; /* done: acknowledged, removed for good */
}

int main(int argc, char **argv)
{
    if (argc != 4 && argc != 5) {
        fprintf(stderr, "usage: pg_orders CONNINFO NODE ORDERS [DELAY_MS]\n");
        return 2;
    }
    uint64_t delay_ns = (argc == 5 ? strtoull(argv[4], NULL, 10) : 1000) * 1000000u;
    struct node n = { argv[2] };
    struct chime_store_config cfg = {
        .postgres = argv[1],        /* the database that chime-store init prepared */
        .node = argv[2],            /* unique among the live nodes */
        .lease_ns = 2000000000u,    /* a silent node's shards move after 2 s */
        .runtime = { .workers = 2 },
    };
    chime_store *s;
    int rc = chime_store_open(&s, &cfg, order_timed_out, &n);
    if (rc != 0) {
        fprintf(stderr, "%s: chime_store_open: %s\n", n.name, chime_strerror(rc));
        return 1;
    }
    int orders = atoi(argv[3]);
    uint64_t now = wall_ns();
    for (int i = 0; i < orders; i++) {
        char key[64], payload[32];
        int klen = snprintf(key, sizeof key, "order-%s-%d", n.name, i);
        int plen = snprintf(payload, sizeof payload, "unpaid order %d", i);
        /* every order times out within a second after the delay; returns once PostgreSQL has
         * committed it */
        rc = chime_store_put(s, key, (size_t)klen, payload, (size_t)plen,
                             now + delay_ns + (uint64_t)i * 1000000000u / (uint64_t)orders);
        if (rc != 0) {
            fprintf(stderr, "%s: chime_store_put: %s\n", n.name, chime_strerror(rc));
            break;
        }
    }
    printf("ready %s %d\n", n.name, orders);
    fflush(stdout);
    for (int c; (c = getchar()) != EOF;)
        ; /* serve until standard input ends */
    int err = chime_store_close(s); /* hands this node's shards to the others at once */
    if (err != 0)
        fprintf(stderr, "%s: chime_store_close: %s\n", n.name, chime_strerror(err));
    return rc != 0 || err != 0;
}
