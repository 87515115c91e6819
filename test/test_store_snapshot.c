/* SPDX-License-Identifier: MIT */
/*
 * chime-store's snapshot of the files it lists (tools/snapshot.c): list reads what it listed while
 * the service removes those files; with no snapshot to be had ($TMPDIR missing, no /proc) it reads
 * the journal as it is; `list | head` leaves nothing behind. The tool's path is the first argument
 * (meson passes it).
 */
#include "journal_util.h"

#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>

static const char *tool;

/* Put key on the journal backend b, due in an hour, payload "p". */
static void put_key(struct chime__backend *b, const char *key)
{
    struct chime__put p = { key, strlen(key), "p", 1, wall_ns() + 3600 * SEC, 0, 0, 0 };
    struct chime__put_result res;
    uint64_t ticket;
    CHECK_EQ(chime__journal_ops.put(b, &p, &res, &ticket), 0);
}

/* Put key "k<i>" and flush: the segment it went to becomes a run, and is removed. */
static void put_and_flush(struct chime__backend *b, int i)
{
    char key[16];
    snprintf(key, sizeof key, "k%d", i);
    put_key(b, key);
    CHECK_EQ(chime__journal_flush_all(b), 0);
}

/* list beside a service that flushes: after each listing (where the tool stops itself, as
 * CHIME_STORE_TOOL_STOP_AFTER_LISTING asks) the service turns the segment it listed into a run
 * and removes it. list reads what it listed (tools/snapshot.c); before, it met the removed file on
 * each of its five tries and gave up ("kept changing"). */
static void list_reads_what_it_listed_while_the_service_removes_those_files(void)
{
    char *d = tmpdir_make("tool-live");
    CHECK(d != NULL, "mkdtemp");
    struct chime__backend *b = journal_open_hourly(d);
    put_and_flush(b, 0);
    FILE *out = tmpfile();
    CHECK(out != NULL, "tmpfile");
    setenv("CHIME_STORE_TOOL_STOP_AFTER_LISTING", "1", 1); /* before fork: the child only execs */
    pid_t pid = fork();
    CHECK(pid >= 0, "fork");
    if (pid == 0) {
        dup2(fileno(out), 1);
        dup2(fileno(out), 2);
        execl(tool, tool, "list", d, (char *)NULL);
        _exit(127);
    }
    unsetenv("CHIME_STORE_TOOL_STOP_AFTER_LISTING");
    int status, stops = 0;
    while (waitpid(pid, &status, WUNTRACED) == pid && WIFSTOPPED(status)) {
        put_and_flush(b, ++stops); /* removes the segment just listed */
        kill(pid, SIGCONT);
    }
    char text[4096];
    size_t n = fseek(out, 0, SEEK_SET) == 0 ? fread(text, 1, sizeof text - 1, out) : 0;
    text[n] = 0;
    fclose(out);
    int listed = strstr(text, " k0 ") != NULL;
    printf("# the tool stopped after %d listing(s); it said:\n", stops);
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n"))
        printf("#   %s\n", line);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "list failed (status %d)", status);
    CHECK(listed, "list did not print the timer it listed");
    CHECK_EQ(chime__journal_ops.close(b), 0);
    tmpdir_remove(d);
    free(d);
}

/* A journal of its own (the shared one is damaged by the tests before): k0 in a run, k1 in a
 * segment. */
static char *small_journal(void)
{
    char *d = tmpdir_make("tool-nosnap");
    CHECK(d != NULL, "mkdtemp");
    struct chime__backend *b = journal_open_hourly(d);
    put_and_flush(b, 0);
    put_key(b, "k1");
    CHECK_EQ(chime__journal_ops.close(b), 0);
    return d;
}

/* No snapshot can be made ($TMPDIR is not there): list reads the journal as it is, as
 * tools/snapshot.c promises, rather than take the failure for a file the service removed. */
static void list_reads_the_journal_as_it_is_when_tmpdir_is_missing(void)
{
    char *d = small_journal(), out[4096];
    int status =
        run_line(out, sizeof out, "TMPDIR='%s/no-such-dir' '%s' list '%s' 2>&1", d, tool, d);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0 && strstr(out, " k0 ") &&
          strstr(out, " k1 "), "status %d:\n%s", status, out);
    tmpdir_remove(d);
    free(d);
}

/* No /proc (a container or chroot without it; here a mount namespace with an empty /proc): the
 * links to /proc/self/fd/N lead nowhere, and list must still read the journal. */
static void list_reads_the_journal_without_proc(void)
{
    if (system("unshare -rm sh -c 'mount -t tmpfs none /proc' >/dev/null 2>&1") != 0) {
        printf("# no user and mount namespaces here: not checked\n");
        return;
    }
    if (TAP_SANITIZED) { /* ASan's runtime ends a program that has no /proc in a fatal error */
        printf("# the sanitizers' runtime needs /proc: checked in the plain and valgrind builds\n");
        return;
    }
    char *d = small_journal(), out[4096];
    int status = run_line(out, sizeof out, "unshare -rm sh -c 'mount -t tmpfs none /proc && exec "
                          "\"$0\" list \"$1\"' '%s' '%s' 2>&1", tool, d);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0 && strstr(out, " k0 ") &&
          strstr(out, " k1 "), "status %d:\n%s", status, out);
    tmpdir_remove(d);
    free(d);
}

/* The usual way to look at a long listing: chime-store list DIR | head. The tool dies of SIGPIPE
 * while it prints, that is while its snapshot (tools/snapshot.c) is held: no directory of it may
 * be left in $TMPDIR. */
static void list_into_a_closed_pipe_leaves_nothing_in_tmpdir(void)
{
    char *d = tmpdir_make("tool-pipe"), *tmp = tmpdir_make("tool-tmp"), out[4096];
    CHECK(d != NULL && tmp != NULL, "mkdtemp");
    struct chime__backend *b = journal_open_hourly(d);
    for (int i = 0; i < 5000; i++) { /* ~300 KiB of listing: more than a pipe holds */
        char key[16];
        snprintf(key, sizeof key, "key-%d", i);
        put_key(b, key);
    }
    CHECK_EQ(chime__journal_ops.close(b), 0);
    run_line(out, sizeof out, "TMPDIR='%s' '%s' list '%s' | head -2", tmp, tool, d);
    CHECK(strstr(out, " key-") != NULL, "list printed no timer:\n%s", out);
    DIR *dd = opendir(tmp);
    CHECK(dd != NULL, "opendir %s", tmp);
    int left = 0;
    for (struct dirent *e; (e = readdir(dd));)
        if (e->d_name[0] != '.') {
            printf("# left in $TMPDIR: %s\n", e->d_name);
            left++;
        }
    closedir(dd);
    CHECK_EQ(left, 0);
    tmpdir_remove(d);
    tmpdir_remove(tmp);
    free(d);
    free(tmp);
}

static const struct tap_test tests[] = {
    { "list_reads_what_it_listed_while_the_service_removes_those_files",
      list_reads_what_it_listed_while_the_service_removes_those_files },
    { "list_reads_the_journal_as_it_is_when_tmpdir_is_missing",
      list_reads_the_journal_as_it_is_when_tmpdir_is_missing },
    { "list_reads_the_journal_without_proc", list_reads_the_journal_without_proc },
    { "list_into_a_closed_pipe_leaves_nothing_in_tmpdir",
      list_into_a_closed_pipe_leaves_nothing_in_tmpdir },
};

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: test_store_snapshot PATH-TO-chime-store\n");
        return 2;
    }
    tool = argv[1];
    return tap_run(tests, (int)(sizeof tests / sizeof tests[0]));
}
