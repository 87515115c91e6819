/* SPDX-License-Identifier: MIT */
/*
 * The backend reads PostgreSQL's errors by their fields, never by their text, which the server
 * writes in its lc_messages language: a put due beyond the partitions made so far meets "no
 * partition of relation ... found for row" (SQLSTATE 23514), and its lane makes the partition and
 * runs the batch again (lib/store/pg/conn.c). Read by its English text, the German server's
 * message was not recognised, and the store failed with -EIO (found in review).
 *
 * The server speaks German here: the locale is compiled into a temporary directory with localedef
 * (Debian's package locales holds its definition) and reaches the server through LOCPATH; the
 * database is set to lc_messages 'de_DE.UTF-8', and the test checks that an error comes back
 * translated before it relies on it. Then the application does, for libpq's own messages: a
 * malformed connection string is still -EINVAL. Without the definition the test skips.
 */
#include "pg_test.h"

#include <locale.h>
#include <sys/stat.h>
#include <sys/wait.h>

static struct pg_cluster cluster;
static struct recorder rec;

static void test_a_put_beyond_the_partitions_on_a_german_server_makes_its_partition(void)
{
    char conninfo[600];
    CHECK_EQ(pg_cluster_db(&cluster, "sprache", 4, PG_WIDTH_S, conninfo, sizeof conninfo), 0);
    PGconn *c = pg_connect_or_die(conninfo);
    CHECK(pg_command(c, "ALTER DATABASE sprache SET lc_messages = 'de_DE.UTF-8'"), "lc_messages");
    PQfinish(c);
    c = pg_connect_or_die(conninfo); /* the setting applies to new sessions */
    PGresult *r = PQexec(c, "SELECT 1 / 0");
    const char *text = PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY);
    printf("# the server's error for 1 / 0: %s\n", text ? text : "(none)");
    CHECK(text && !strstr(text, "division by zero"), "the server does not speak German");
    PQclear(r);

    recorder_init(&rec, NULL);
    chime_store *s = NULL;
    CHECK_EQ(pg_open_node(&s, conninfo, "a", &rec, 2 * SEC, 0), 0);
    /* a month ahead: far beyond the partitions (60 s wide) made so far */
    int rc = chime_store_put(s, "k", 1, "p", 1, wall_ns() + 30 * 86400 * SEC);
    CHECK(rc == 0, "a put beyond the partitions: %s", chime_strerror(rc));
    CHECK_EQ(pg_value(c, "SELECT count(*) FROM chime.pending WHERE key = 'k'"), 1);
    CHECK_EQ(chime_store_close(s), 0);
    recorder_free(&rec);
    PQfinish(c);
}

/* The client's language as well: libpq writes its own messages in the application's. */
static void test_a_malformed_connection_string_is_einval_in_a_german_application(void)
{
    const char *bad = "host=127.0.0.1 port"; /* no "=" after port */
    CHECK(setlocale(LC_MESSAGES, "de_DE.UTF-8") != NULL, "setlocale");
    char *text = NULL;
    PQconninfoOption *o = PQconninfoParse(bad, &text);
    CHECK(!o && text, "libpq parsed %s", bad);
    printf("# libpq's error for it: %s", text);
    CHECK(!strstr(text, "missing"), "libpq does not speak German");
    PQfreemem(text);
    recorder_init(&rec, NULL);
    struct chime_store_config cfg;
    pg_node_config(&cfg, bad, "a", 2 * SEC, 0);
    chime_store *s = NULL;
    CHECK_EQ(pg_open_config(&s, &cfg, &rec), -EINVAL);
    recorder_free(&rec);
    setlocale(LC_MESSAGES, "C");
}

/* Compile de_DE.UTF-8 into dir. Return: whether it worked. */
static bool make_locale(const char *dir)
{
    char out[300];
    snprintf(out, sizeof out, "%s/de_DE.UTF-8", dir);
    pid_t pid = fork();
    if (pid == 0) {
        freopen("/dev/null", "w", stdout);
        freopen("/dev/null", "w", stderr);
        execlp("localedef", "localedef", "-i", "de_DE", "-f", "UTF-8", out, (char *)NULL);
        _exit(127);
    }
    int status;
    return pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
           WEXITSTATUS(status) == 0;
}

int main(void)
{
    char *dir = tmpdir_make("locale");
    if (!dir || chmod(dir, 0755) != 0) { /* the server's user reads it */
        printf("Bail out! no temporary directory\n");
        return 1;
    }
    int rc = 0;
    if (!make_locale(dir)) {
        printf("1..0 # SKIP localedef could not make de_DE.UTF-8 (install the package locales)\n");
    } else {
        setenv("LOCPATH", dir, 1); /* for the server this test starts, and only it */
        static const struct tap_test tests[] = {
            { "a_put_beyond_the_partitions_on_a_german_server_makes_its_partition",
              test_a_put_beyond_the_partitions_on_a_german_server_makes_its_partition },
            { "a_malformed_connection_string_is_einval_in_a_german_application",
              test_a_malformed_connection_string_is_einval_in_a_german_application },
        };
        rc = pg_tests_main(&cluster, tests, (int)(sizeof tests / sizeof *tests));
    }
    pg_util_remove_dir(dir); /* the locale is a directory of files and directories */
    free(dir);
    return rc;
}
