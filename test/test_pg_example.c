/* SPDX-License-Identifier: MIT */
/*
 * docs/examples/pg_orders.c as its comment says to run it: `chime-store --postgres CONNINFO init`,
 * then three nodes on one database. One of them is killed (SIGKILL) as soon as its orders are put:
 * the other two must take its shards and time its orders out too. Checks: every order of every
 * node timed out at least once (by a survivor, or by the killed node before it died) and none
 * early; init is idempotent; the two survivors close cleanly and `chime-store --postgres CONNINFO
 * count` then shows nothing pending, status the dead node. The orders time out 1 s after their
 * node starts (20 s under valgrind and the sanitizers, TAP_SLOW), so that the kill normally comes
 * first. Found under valgrind with three tests at once: the nodes took over a second to put their
 * orders, the killed node had timed some out itself, and the test waited for ever for a survivor
 * to print them (every order was acknowledged in the database).
 *
 * Usage (meson passes both): test_pg_example CHIME_STORE_TOOL PG_ORDERS_EXAMPLE
 */
#include "pg_test.h"

#include <poll.h>

#define NODES 3
#define ORDERS 60

static struct pg_cluster cluster;
static const char *tool, *example;

/* Run the tool with args; its standard output into out. Return: its exit status. */
static int run_tool(const char *conninfo, const char *a1, const char *a2, const char *a3,
                    char *out, size_t n)
{
    int fds[2];
    CHECK(pipe2(fds, O_CLOEXEC) == 0, "pipe");
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        pg_cluster_forked(&cluster);
        dup2(fds[1], 1);
        close(fds[0]);
        execl(tool, tool, "--postgres", conninfo, a1, a2, a3, (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    size_t len = 0;
    for (ssize_t got; (got = read(fds[0], out + len, n - 1 - len)) > 0;)
        len += (size_t)got;
    out[len] = 0;
    close(fds[0]);
    int st;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

struct node {
    pid_t pid;
    int in, out;       /* its standard input (ours to close) and output */
    char buf[1 << 16];
    size_t len;
    int ready;
};

static void start_node(struct node *nd, const char *conninfo, const char *name)
{
    int in[2], out[2];
    CHECK(pipe2(in, O_CLOEXEC) == 0 && pipe2(out, O_CLOEXEC) == 0, "pipe"); /* none leaks into another node */
    fflush(stdout);
    nd->pid = fork();
    if (nd->pid == 0) {
        pg_cluster_forked(&cluster);
        dup2(in[0], 0);
        dup2(out[1], 1);
        close(in[1]);
        close(out[0]);
        char orders[16];
        snprintf(orders, sizeof orders, "%d", ORDERS);
        execl(example, example, conninfo, name, orders, TAP_SLOW ? "20000" : "1000", (char *)NULL);
        _exit(127);
    }
    close(in[0]);
    close(out[1]);
    nd->in = in[1];
    nd->out = out[0];
}

/* Read what the nodes printed until `done` says so (each line is whole once it ends in \n). */
static void read_until(struct node *nodes, int (*done)(struct node *))
{
    while (!done(nodes)) {
        struct pollfd p[NODES];
        for (int i = 0; i < NODES; i++)
            p[i] = (struct pollfd){ nodes[i].out, POLLIN, 0 };
        CHECK(poll(p, NODES, -1) > 0, "poll");
        for (int i = 0; i < NODES; i++) {
            if (!(p[i].revents & (POLLIN | POLLHUP)) || nodes[i].out < 0)
                continue;
            struct node *nd = &nodes[i];
            ssize_t got = read(nd->out, nd->buf + nd->len, sizeof nd->buf - 1 - nd->len);
            CHECK(got >= 0, "read");
            if (got == 0) {
                close(nd->out);
                nd->out = -1;
                continue;
            }
            nd->len += (size_t)got;
            nd->buf[nd->len] = 0;
            CHECK(nd->len < sizeof nd->buf - 1, "output too long");
            nd->ready = strstr(nd->buf, "ready ") != NULL;
        }
    }
}

static int all_ready(struct node *nodes)
{
    for (int i = 0; i < NODES; i++)
        if (!nodes[i].ready)
            return 0;
    return 1;
}

static const char *const names[NODES] = { "east", "west", "north" };

/* Whether every order appears in a "timeout" line: of a survivor, or of the killed node (the last
 * of nodes), which printed its line before it acknowledged the order. */
static int all_timed_out(struct node *nodes)
{
    for (int n = 0; n < NODES; n++)
        for (int i = 0; i < ORDERS; i++) {
            char needle[64];
            snprintf(needle, sizeof needle, "timeout order-%s-%d on ", names[n], i);
            int seen = 0;
            for (int k = 0; k < NODES && !seen; k++)
                seen = strstr(nodes[k].buf, needle) != NULL;
            if (!seen)
                return 0;
        }
    return 1;
}

static void test_three_nodes_time_out_every_order_and_take_over_a_killed_one(void)
{
    PGconn *c = pg_connect_or_die(cluster.conninfo);
    CHECK(pg_command(c, "CREATE DATABASE app"), "create database");
    PQfinish(c);
    char conninfo[600], out[4096];
    snprintf(conninfo, sizeof conninfo, "host=127.0.0.1 port=%d user=postgres dbname=app",
             cluster.port);
    CHECK_EQ(run_tool(conninfo, "init", "--shards", "32", out, sizeof out), 0);
    CHECK_EQ(run_tool(conninfo, "init", "--shards", "32", out, sizeof out), 0); /* idempotent */
    CHECK(run_tool(conninfo, "init", "--shards", "64", out, sizeof out) != 0,
          "init with other shards must fail");

    static struct node nodes[NODES];
    for (int i = 0; i < NODES; i++)
        start_node(&nodes[i], conninfo, names[i]);
    read_until(nodes, all_ready);
    kill(nodes[2].pid, SIGKILL); /* north dies with its orders pending */
    waitpid(nodes[2].pid, NULL, 0);
    close(nodes[2].in);
    read_until(nodes, all_timed_out);
    for (int i = 0; i < NODES - 1; i++) {
        close(nodes[i].in); /* the end of its input: the node closes its store */
        int st;
        waitpid(nodes[i].pid, &st, 0);
        CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s did not end cleanly", names[i]);
    }
    unsigned lines = 0, early = 0;
    for (int i = 0; i < NODES - 1; i++)
        for (const char *p = nodes[i].buf; (p = strstr(p, " late ")); p++) {
            lines++;
            early += atoll(p + 6) < 0;
        }
    unsigned by_killed = 0;
    for (const char *p = nodes[NODES - 1].buf; (p = strstr(p, " late ")); p++) {
        by_killed++;
        early += atoll(p + 6) < 0;
    }
    printf("# %u timeouts handled by the survivors, %u by %s before it was killed, %u early\n",
           lines, by_killed, names[NODES - 1], early);
    CHECK_EQ(early, 0);
    CHECK(lines + by_killed >= ORDERS * NODES, "%u lines", lines + by_killed);
    CHECK_EQ(run_tool(conninfo, "count", NULL, NULL, out, sizeof out), 0);
    CHECK(strstr(out, "pending: 0 ") != NULL, "after the run: %s", out);
    CHECK_EQ(run_tool(conninfo, "status", NULL, NULL, out, sizeof out), 0);
    CHECK(strstr(out, "north") && strstr(out, "dead"), "status shows the killed node: %s", out);
    CHECK_EQ(run_tool(conninfo, "list", NULL, NULL, out, sizeof out), 0);
    CHECK_EQ(run_tool(conninfo, "dead", NULL, NULL, out, sizeof out), 0);
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        printf("Bail out! usage: test_pg_example CHIME_STORE_TOOL PG_ORDERS_EXAMPLE\n");
        return 1;
    }
    tool = argv[1];
    example = argv[2];
    static const struct tap_test tests[] = {
        { "three_nodes_time_out_every_order_and_take_over_a_killed_one",
          test_three_nodes_time_out_every_order_and_take_over_a_killed_one },
    };
    return pg_tests_main(&cluster, tests, 1);
}
