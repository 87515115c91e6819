/* SPDX-License-Identifier: MIT */
/*
 * chime-store --postgres CONNINFO COMMAND: the PostgreSQL backend's schema and what it holds.
 *
 *   init [--shards N] [--partition-seconds S]
 *            create the schema `chime` (version 4): N shards (default 256, fixed for good), timers
 *            partitioned by due time in partitions of S seconds (default 3600). Exit 0 if it is
 *            created, or already there with the same shards; 1 otherwise.
 *   status   the nodes (alive or not, shards held), each owner's shards and epochs, the leases
 *            that have expired, and the counts below
 *   count    pending timers (of which firing), dead letters, tombstones, partitions
 *   list     pending timers by due time: due (UTC; "never" for UINT64_MAX), due_ns, attempts,
 *            firing, shard, key, payload size
 *   dead     dead letters in the order they died, the same columns
 *
 * Everything it prints can be read with psql too: the views chime.pending and chime.cluster, and
 * the tables of docs/design.md ("The schema"). It only reads, except init.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chime.h"
#include "store/pg/pg.h"

static PGresult *query(PGconn *c, const char *sql)
{
    PGresult *r = PQexec(c, sql);
    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
        fprintf(stderr, "chime-store: %s", PQerrorMessage(c));
        PQclear(r);
        return NULL;
    }
    return r;
}

/* A bytea value in hex, selected as encode(key, 'hex') (a bytea's text form follows the session's
 * bytea_output, which a database or role may set to escape), printed as text, bytes outside
 * printable ASCII (and space and backslash, as the journal's listing does, so that a key is one
 * column) as \xNN. */
static void print_key(const char *hex)
{
    if (hex[0] == '\\' && hex[1] == 'x')
        hex += 2;
    for (; hex[0] && hex[1]; hex += 2) {
        unsigned v;
        if (sscanf(hex, "%2x", &v) != 1)
            break;
        if (v > 0x20 && v < 0x7f && v != '\\')
            putchar((int)v);
        else
            printf("\\x%02x", v);
    }
}

static int cmd_counts(PGconn *c)
{
    PGresult *r = query(c, "SELECT (SELECT count(*) FROM chime.keys WHERE end_epoch IS NULL),"
                           " (SELECT count(*) FROM chime.keys WHERE end_epoch IS NULL"
                           " AND fire_epoch <> 0),"
                           " (SELECT count(*) FROM chime.dead),"
                           " (SELECT count(*) FROM chime.keys WHERE end_epoch IS NOT NULL),"
                           " (SELECT count(*) FROM pg_inherits"
                           " WHERE inhparent = 'chime.timers'::regclass)");
    if (!r)
        return 1;
    printf("pending: %s (firing: %s)\ndead letters: %s\ntombstones: %s\npartitions: %s\n",
           PQgetvalue(r, 0, 0), PQgetvalue(r, 0, 1), PQgetvalue(r, 0, 2), PQgetvalue(r, 0, 3),
           PQgetvalue(r, 0, 4));
    PQclear(r);
    return 0;
}

static int cmd_status(PGconn *c)
{
    PGresult *r = query(c, "SELECT n.node, n.expires > now(), n.joined,"
                           " (SELECT count(*) FROM chime.shards s WHERE s.owner = n.node"
                           " AND s.token = n.token AND s.expires > now()),"
                           " round(extract(epoch FROM n.expires - now())::numeric, 3)"
                           " FROM chime.nodes n ORDER BY n.node");
    if (!r)
        return 1;
    printf("nodes:\n");
    for (int i = 0; i < PQntuples(r); i++)
        printf("  %-30s %-5s shards %-5s joined %s, heartbeat expires in %s s\n",
               PQgetvalue(r, i, 0), PQgetvalue(r, i, 1)[0] == 't' ? "alive" : "dead",
               PQgetvalue(r, i, 3), PQgetvalue(r, i, 2), PQgetvalue(r, i, 4));
    PQclear(r);
    r = query(c, "SELECT coalesce(owner, '(none)'), count(*), min(shard), max(shard), min(epoch),"
                 " max(epoch), count(*) FILTER (WHERE expires <= now())"
                 " FROM chime.shards GROUP BY owner ORDER BY owner NULLS LAST");
    if (!r)
        return 1;
    printf("shards by owner:\n");
    for (int i = 0; i < PQntuples(r); i++)
        printf("  %-30s %5s shards (%s..%s), epochs %s..%s, %s expired\n", PQgetvalue(r, i, 0),
               PQgetvalue(r, i, 1), PQgetvalue(r, i, 2), PQgetvalue(r, i, 3), PQgetvalue(r, i, 4),
               PQgetvalue(r, i, 5), PQgetvalue(r, i, 6));
    PQclear(r);
    return cmd_counts(c);
}

/* A due time as the journal's listing prints it. The backend stores UINT64_MAX (a put that never
 * fires) and saturated retries as the largest bigint (lanes.c, DUE_MAX), a row no load reads: it
 * is printed as the API's UINT64_MAX, "never", not as a date in 2262 (found in review). */
#define DUE_COLUMNS(col)                                                                   \
    "CASE WHEN " col " = 9223372036854775807 THEN 'never' ELSE to_char(to_timestamp(" col  \
    " / 1e9) AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"') END, CASE WHEN " col \
    " = 9223372036854775807 THEN '18446744073709551615' ELSE " col "::text END"

static int cmd_list(PGconn *c, int dead)
{
    PGresult *r = query(c, dead ? "SELECT " DUE_COLUMNS("due") ", attempt, false, shard,"
                                  " encode(key, 'hex'), length(payload) FROM chime.dead"
                                  " ORDER BY seq"
                                : "SELECT " DUE_COLUMNS("due_ns") ", attempt, firing,"
                                  " shard, encode(key, 'hex'), payload_bytes FROM chime.pending"
                                  " ORDER BY due_ns");
    if (!r)
        return 1;
    for (int i = 0; i < PQntuples(r); i++) {
        printf("%s %s attempts %s%s shard %s ", PQgetvalue(r, i, 0), PQgetvalue(r, i, 1),
               PQgetvalue(r, i, 2), PQgetvalue(r, i, 3)[0] == 't' ? " firing" : "",
               PQgetvalue(r, i, 4));
        print_key(PQgetvalue(r, i, 5));
        printf(" (%s bytes)\n", PQgetvalue(r, i, 6));
    }
    PQclear(r);
    return 0;
}

/* A count of 1..max in decimal digits alone: strtoul also takes a sign ("-5" was 2^64 - 5) and
 * saturates, and a width in seconds times 10^9 overflowed (found in review). Return: 0, or -1. */
static int parse_count(const char *s, unsigned long max, unsigned long *out)
{
    char *end = NULL;
    errno = 0;
    unsigned long v = *s >= '0' && *s <= '9' ? strtoul(s, &end, 10) : 0;
    if (!end || *end || errno || !v || v > max)
        return -1;
    *out = v;
    return 0;
}

static int cmd_init(PGconn *c, int argc, char **argv)
{
    unsigned long shards = 256, seconds = 3600;
    const unsigned long max_seconds = (unsigned long)(INT64_MAX / 1000000000); /* 292 years */
    for (int i = 0; i < argc; i++) {
        int bad = 1;
        if (!strcmp(argv[i], "--shards") && i + 1 < argc)
            bad = parse_count(argv[++i], PG_MAX_SHARDS, &shards);
        else if (!strcmp(argv[i], "--partition-seconds") && i + 1 < argc)
            bad = parse_count(argv[++i], max_seconds, &seconds);
        if (bad) {
            fprintf(stderr, "chime-store: init [--shards 1..%u] [--partition-seconds 1..%lu]\n",
                    PG_MAX_SHARDS, max_seconds);
            return 2;
        }
    }
    struct pg_conn pc = { .c = c, .role = "init" };
    struct pg_schema found = { 0, 0 };
    int rc = chime__pg_schema_create(&pc, (unsigned)shards, (uint64_t)seconds * 1000000000u,
                                     &found);
    if (rc == 0) {
        printf("created schema chime (version %d): %lu shards, partitions of %lu s\n",
               PG_SCHEMA_VERSION, shards, seconds);
        return 0;
    }
    if (rc == -EEXIST && found.shards) {
        printf("schema chime exists: %u shards, partitions of %" PRIu64 " s\n", found.shards,
               found.partition_ns / 1000000000u);
        return found.shards == shards ? 0 : 1;
    }
    fprintf(stderr, "chime-store: init failed: %s\n",
            rc == -EEXIST ? "a schema chime of another version exists" : PQerrorMessage(c));
    return 1;
}

static int pg_usage(void)
{
    fprintf(stderr, "usage: chime-store --postgres CONNINFO init [--shards N] "
                    "[--partition-seconds S] | status | count | list | dead\n");
    return 2;
}

int chime_store_pg_main(const char *conninfo, int argc, char **argv)
{
    if (argc < 1)
        return pg_usage();
    /* The library's defaults for a server that is gone (keepalives, tcp_user_timeout), none of its
     * statement timeout: a list of millions of timers may take the server longer. A server that is
     * up but stuck keeps the tool waiting, as psql would: interrupt it. */
    PGconn *c = chime__pg_connectdb(conninfo, "chime-store");
    if (!c) {
        fprintf(stderr, "chime-store: out of memory\n");
        return 1;
    }
    if (PQstatus(c) != CONNECTION_OK) {
        fprintf(stderr, "chime-store: %s", PQerrorMessage(c));
        PQfinish(c);
        return 1;
    }
    int rc = 2;
    if (!strcmp(argv[0], "init")) {
        rc = cmd_init(c, argc - 1, argv + 1);
    } else if (argc == 1) {
        struct pg_conn pc = { .c = c, .role = "tool" };
        struct pg_schema sc;
        int err = chime__pg_schema_read(&pc, &sc);
        if (err) {
            fprintf(stderr, "chime-store: %s\n",
                    err == -ENOENT ? "no schema chime here: run chime-store --postgres ... init"
                    : err == -EPROTO ? "the schema chime is of another version"
                                     : PQerrorMessage(c));
            rc = 1;
        } else if (!strcmp(argv[0], "status")) {
            printf("schema chime version %d: %u shards, partitions of %" PRIu64 " s\n",
                   PG_SCHEMA_VERSION, sc.shards, sc.partition_ns / 1000000000u);
            rc = cmd_status(c);
        } else if (!strcmp(argv[0], "count")) {
            rc = cmd_counts(c);
        } else if (!strcmp(argv[0], "list")) {
            rc = cmd_list(c, 0);
        } else if (!strcmp(argv[0], "dead")) {
            rc = cmd_list(c, 1);
        }
    }
    PQfinish(c);
    return rc == 2 ? pg_usage() : rc;
}
