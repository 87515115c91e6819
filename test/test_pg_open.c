/* SPDX-License-Identifier: MIT */
/*
 * chime_store_open on PostgreSQL: what it makes of its configuration, and what it tells the caller
 * (lib/store/pg/backend.c, conn.c). Found by a review's probes: a node's name that is not UTF-8,
 * and a lease over 49 days (its session settings, ints of ms, overflowed), were reported as a
 * database that cannot be reached (-ECONNREFUSED); a node's name of 53 to 63 bytes made libpq
 * print the server's notice of a cut application_name on the application's stderr, at every
 * connection; processes opening under one name at once got -EIO, not -EBUSY. One throwaway
 * cluster for the file (test/pg_util.h).
 */
#include "pg_test.h"

#include <fcntl.h>
#include <sys/wait.h>

static struct pg_cluster cluster;
static char conninfo[600];
static struct recorder rec;

static void fresh(void)
{
    pg_fresh_db(&cluster, "open", 4, PG_WIDTH_S, conninfo, sizeof conninfo, NULL);
    recorder_free(&rec);
    recorder_init(&rec, NULL);
}

static void test_a_node_name_that_is_not_utf8_or_too_long_is_einval(void)
{
    fresh();
    char long_name[65];
    memset(long_name, 'n', 64);
    long_name[64] = '\0';
    const char *bad[] = { "", "caf\xe9", "\xc0\xaf", "a\xe2\x82", long_name };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        chime_store *s = NULL;
        CHECK_EQ(pg_open_node(&s, conninfo, bad[i], &rec, 0, 0), -EINVAL);
        CHECK(s == NULL, "name %zu: out touched", i);
    }
    chime_store *s = NULL;
    CHECK_EQ(pg_open_node(&s, conninfo, "caf\xc3\xa9", &rec, 0, 0), 0); /* UTF-8: opens */
    CHECK_EQ(chime_store_close(s), 0);
}

/* What open and close write on stderr (fd 2, redirected to a file meanwhile) with the name. */
static void open_close_quietly(const char *node, char *out, size_t cap)
{
    char path[] = "/tmp/chime-pg-open-stderr-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0, "mkstemp");
    fflush(stderr);
    int saved = dup(2);
    CHECK(saved >= 0 && dup2(fd, 2) == 2, "redirect stderr");
    chime_store *s = NULL;
    int rc = pg_open_node(&s, conninfo, node, &rec, 0, 0);
    if (rc == 0)
        rc = chime_store_close(s);
    fflush(stderr);
    CHECK(dup2(saved, 2) == 2, "restore stderr");
    close(saved);
    CHECK_EQ(rc, 0);
    ssize_t n = pread(fd, out, cap - 1, 0);
    out[n > 0 ? n : 0] = '\0';
    close(fd);
    unlink(path);
}

static void test_a_63_byte_node_name_opens_without_a_word_on_stderr(void)
{
    fresh();
    char name[64], out[4096];
    memset(name, 'x', 63);
    name[63] = '\0';
    open_close_quietly(name, out, sizeof out);
    CHECK(out[0] == '\0', "stderr:\n%s", out);
}

static void test_a_lease_of_fifty_days_opens(void)
{
    fresh();
    chime_store *s = NULL;
    int rc = pg_open_node(&s, conninfo, "a", &rec, 50 * 86400 * SEC, 0);
    CHECK(rc == 0, "open: %s", chime_strerror(rc));
    CHECK_EQ(chime_store_put(s, "k", 1, "p", 1, wall_ns()), 0);
    recorder_wait_key(&rec, "k", 1, NULL);
    CHECK_EQ(chime_store_close(s), 0);
}

/* Found in review: processes opening under one name at the same moment all passed open's check of
 * the name before any heartbeat; the losers' first heartbeat found it taken, and open said -EIO
 * (with a message on stderr). One must win, and every other one get -EBUSY, whatever the order:
 * OPENERS children start together (a pipe they all wait to see closed), each writes open's return
 * to the parent, and the winners hold their stores open until the parent has read them all. */
#define OPENERS 4

static void test_processes_opening_under_one_name_at_once_get_ebusy_but_one(void)
{
    fresh();
    int go[2], hold[2], told[2];
    CHECK(pipe(go) == 0 && pipe(hold) == 0 && pipe(told) == 0, "pipe");
    fflush(stdout);
    for (int i = 0; i < OPENERS; i++) {
        pid_t pid = fork();
        CHECK(pid >= 0, "fork");
        if (pid == 0) {
            pg_cluster_forked(&cluster);
            close(go[1]);
            close(hold[1]);
            close(told[0]);
            char c;
            while (read(go[0], &c, 1) > 0) /* until the parent closes its end: all at once */
                ;
            chime_store *s = NULL;
            int rc = pg_open_node(&s, conninfo, "same", &rec, 0, 0);
            if (write(told[1], &rc, sizeof rc) != (ssize_t)sizeof rc)
                _exit(3);
            while (rc == 0 && read(hold[0], &c, 1) > 0) /* a winner holds the name till told */
                ;
            _exit(rc == 0 && chime_store_close(s) != 0 ? 2 : 0);
        }
    }
    close(go[0]);
    close(hold[0]);
    close(told[1]);
    close(go[1]); /* go */
    int won = 0, busy = 0;
    for (int i = 0; i < OPENERS; i++) {
        int rc = 1;
        CHECK_EQ(read(told[0], &rc, sizeof rc), (ssize_t)sizeof rc);
        won += rc == 0;
        busy += rc == -EBUSY;
        if (rc != 0 && rc != -EBUSY)
            printf("# an opener got %d (%s)\n", rc, chime_strerror(rc));
    }
    close(hold[1]); /* the winners may close */
    close(told[0]);
    for (int i = 0; i < OPENERS; i++) {
        int st;
        CHECK(wait(&st) > 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0, "a child failed: %d", st);
    }
    CHECK(won == 1 && busy == OPENERS - 1, "%d opened, %d got -EBUSY, of %d", won, busy, OPENERS);
}

int main(void)
{
    recorder_init(&rec, NULL);
    static const struct tap_test tests[] = {
        { "a_node_name_that_is_not_utf8_or_too_long_is_einval",
          test_a_node_name_that_is_not_utf8_or_too_long_is_einval },
        { "a_63_byte_node_name_opens_without_a_word_on_stderr",
          test_a_63_byte_node_name_opens_without_a_word_on_stderr },
        { "a_lease_of_fifty_days_opens", test_a_lease_of_fifty_days_opens },
        { "processes_opening_under_one_name_at_once_get_ebusy_but_one",
          test_processes_opening_under_one_name_at_once_get_ebusy_but_one },
    };
    int rc = pg_tests_main(&cluster, tests, (int)(sizeof tests / sizeof *tests));
    recorder_free(&rec);
    return rc;
}
