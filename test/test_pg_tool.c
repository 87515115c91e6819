/* SPDX-License-Identifier: MIT */
/*
 * chime-store --postgres (tools/chime-store-pg.c) against the store's own contract: init on a
 * schema of another version, keys of odd bytes printed as the journal's listing prints them
 * (tools/chime-store.c, print_key) whatever the database's bytea_output, an unreachable server,
 * and a timer that never fires (due UINT64_MAX) listed as the journal's listing lists it.
 *
 * Usage (meson passes it): test_pg_tool CHIME_STORE_TOOL
 */
#include "pg_test.h"

static struct pg_cluster cluster;
static const char *tool;
static char conninfo[600];
static char db_name[32]; /* the database fresh() made last */

/* Run the tool with args (up to three, NULL-terminated); its standard output into out, its
 * standard error into err. Return: its exit status. */
static int run_tool(const char *ci, const char *a1, const char *a2, const char *a3, char *out,
                    size_t n, char *err, size_t en)
{
    int fds[2], efds[2];
    CHECK(pipe2(fds, O_CLOEXEC) == 0 && pipe2(efds, O_CLOEXEC) == 0, "pipe");
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        pg_cluster_forked(&cluster);
        dup2(fds[1], 1);
        dup2(efds[1], 2);
        execl(tool, tool, "--postgres", ci, a1, a2, a3, (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    close(efds[1]);
    size_t len = 0;
    for (ssize_t got; (got = read(fds[0], out + len, n - 1 - len)) > 0;)
        len += (size_t)got;
    out[len] = 0;
    len = 0;
    for (ssize_t got; (got = read(efds[0], err + len, en - 1 - len)) > 0;)
        len += (size_t)got;
    err[len] = 0;
    close(fds[0]);
    close(efds[0]);
    int st;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void fresh(unsigned shards)
{
    pg_fresh_db(&cluster, "tool", shards, PG_WIDTH_S, conninfo, sizeof conninfo, db_name);
}

/* One pending timer (payload "p"), put through a node that then closes. */
static void put_through_a_node(const void *key, size_t key_len, uint64_t due_ns)
{
    chime_store *s = NULL;
    struct recorder rec;
    recorder_init(&rec, NULL);
    CHECK_EQ(pg_open_node(&s, conninfo, "a", &rec, 2 * SEC, 0), 0);
    CHECK_EQ(chime_store_put(s, key, key_len, "p", 1, due_ns), 0);
    CHECK_EQ(chime_store_close(s), 0);
    recorder_free(&rec);
}

/* init must not call a schema of another version "exists" and succeed: every open refuses it
 * (-EPROTO), and status/count say "another version". */
static void test_init_on_a_schema_of_another_version_fails(void)
{
    fresh(256); /* init's default */
    PGconn *c = pg_connect_or_die(conninfo);
    CHECK(pg_command(c, "UPDATE chime.meta SET value = '1' WHERE name = 'schema_version'"), "meta");
    PQfinish(c);
    char out[4096], err[4096];
    CHECK_EQ(run_tool(conninfo, "count", NULL, NULL, out, sizeof out, err, sizeof err), 1);
    CHECK(strstr(err, "another version") != NULL, "count: %s", err);
    int rc = run_tool(conninfo, "init", NULL, NULL, out, sizeof out, err, sizeof err);
    CHECK(rc == 1 && strstr(err, "another version") != NULL,
          "init on a version-1 schema: exit %d, stdout \"%s\", stderr \"%s\"", rc, out, err);
}

/* init's counts are decimal digits within their range: "-5" was taken as 2^64 - 5 seconds (and
 * 99999999999999 overflowed when made ns), stored as another width than the one printed. A value
 * refused is a usage error (2), before anything is created: the database keeps no schema. */
static void test_init_refuses_counts_out_of_range(void)
{
    char other[600], out[4096], err[4096];
    snprintf(other, sizeof other, "%s", cluster.conninfo); /* postgres: no schema there */
    const char *bad[][2] = { { "--partition-seconds", "-5" },
                             { "--partition-seconds", "99999999999999" },
                             { "--partition-seconds", "0" },
                             { "--shards", "+3" },
                             { "--shards", "99999999999999999999999" } };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = run_tool(other, "init", bad[i][0], bad[i][1], out, sizeof out, err, sizeof err);
        CHECK(rc == 2 && strstr(err, "init [--shards 1..") != NULL,
              "init %s %s: exit %d, stdout \"%s\", stderr \"%s\"", bad[i][0], bad[i][1], rc, out,
              err);
    }
    PGconn *c = pg_connect_or_die(other);
    CHECK_EQ(pg_value(c, "SELECT count(*) FROM pg_namespace WHERE nspname = 'chime'"), 0);
    PQfinish(c);
}

/* The journal's listing prints a key's bytes 0x21..0x7e but '\' as they are, others as \xNN. */
static const char odd_key[] = { 0x00, ' ', 'a', '\\', 'b', (char)0xff, '\n' };
static const char odd_printed[] = "\\x00\\x20a\\x5cb\\xff\\x0a";

static void check_listings(const char *what)
{
    char out[4096], err[4096];
    CHECK_EQ(run_tool(conninfo, "dead", NULL, NULL, out, sizeof out, err, sizeof err), 0);
    CHECK(strstr(out, odd_printed) != NULL, "%s: dead prints \"%s\"", what, out);
    CHECK_EQ(run_tool(conninfo, "list", NULL, NULL, out, sizeof out, err, sizeof err), 0);
    CHECK(strstr(out, odd_printed) != NULL, "%s: list prints \"%s\"", what, out);
}

static void test_odd_keys_print_as_the_journal_prints_them(void)
{
    fresh(4);
    /* one pending timer and one dead letter of the odd key, through a node */
    put_through_a_node(odd_key, sizeof odd_key, wall_ns() + 3600 * SEC);
    PGconn *c = pg_connect_or_die(conninfo);
    CHECK(pg_command(c, "INSERT INTO chime.dead (key, shard, due, attempt, payload, died)"
                        " SELECT key, shard, 1, 3, 'd'::bytea, now() FROM chime.keys"), "dead");
    check_listings("bytea_output hex");
    /* a database (or role) whose bytea_output is escape: a setting the tool does not own */
    char sql[128];
    snprintf(sql, sizeof sql, "ALTER DATABASE %s SET bytea_output = 'escape'", db_name);
    CHECK(pg_command(c, sql), "alter database");
    PQfinish(c);
    check_listings("bytea_output escape");
}

/* A put at UINT64_MAX (kept, never fired) is stored as the largest bigint; the listings print it as
 * the journal's does, "never 18446744073709551615", not as a date in 2262 (found in review). */
static void test_a_timer_that_never_fires_lists_as_never(void)
{
    fresh(4);
    put_through_a_node("forever", 7, UINT64_MAX);
    PGconn *c = pg_connect_or_die(conninfo);
    CHECK(pg_command(c, "INSERT INTO chime.dead (key, shard, due, attempt, payload, died)"
                        " VALUES ('late'::bytea, 0, 9223372036854775807, 2, 'd'::bytea, now())"),
          "dead");
    PQfinish(c);
    char out[4096], err[4096];
    CHECK_EQ(run_tool(conninfo, "list", NULL, NULL, out, sizeof out, err, sizeof err), 0);
    static const char never[] = "never 18446744073709551615 attempts 0 shard ";
    CHECK(strncmp(out, never, strlen(never)) == 0 &&
              strstr(out, " forever (1 bytes)\n") != NULL,
          "list: \"%s\"", out);
    CHECK_EQ(run_tool(conninfo, "dead", NULL, NULL, out, sizeof out, err, sizeof err), 0);
    CHECK(strcmp(out, "never 18446744073709551615 attempts 2 shard 0 late (1 bytes)\n") == 0,
          "dead: \"%s\"", out);
}

static void test_an_unreachable_server_exits_1_with_a_message(void)
{
    char ci[128], out[4096], err[4096];
    snprintf(ci, sizeof ci, "host=127.0.0.1 port=%d user=postgres dbname=x connect_timeout=2",
             pg_util_free_port());
    int rc = run_tool(ci, "count", NULL, NULL, out, sizeof out, err, sizeof err);
    CHECK(rc == 1 && strstr(err, "chime-store: ") != NULL, "exit %d: %s", rc, err);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        printf("Bail out! usage: test_pg_tool CHIME_STORE_TOOL\n");
        return 1;
    }
    tool = argv[1];
    static const struct tap_test tests[] = {
        { "init_on_a_schema_of_another_version_fails",
          test_init_on_a_schema_of_another_version_fails },
        { "odd_keys_print_as_the_journal_prints_them",
          test_odd_keys_print_as_the_journal_prints_them },
        { "an_unreachable_server_exits_1_with_a_message",
          test_an_unreachable_server_exits_1_with_a_message },
        { "a_timer_that_never_fires_lists_as_never", test_a_timer_that_never_fires_lists_as_never },
        { "init_refuses_counts_out_of_range", test_init_refuses_counts_out_of_range },
    };
    return pg_tests_main(&cluster, tests, (int)(sizeof tests / sizeof *tests));
}
