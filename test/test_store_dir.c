/* SPDX-License-Identifier: MIT */
/*
 * The journal's directory itself (lib/store/io.h, chime__io_make_dir): made if absent, its entry in
 * the parent made durable by a sync of the parent, which needs the parent opened for reading. A
 * parent the process may enter but not list (mode 0711: a home or service directory) cannot be
 * synced: a store directory that was there already must open under it (found in review: open
 * returned -EACCES, with a relative path too), and one that open would have to make there is
 * refused (-EACCES) and not left behind, its entry not durable.
 *
 * Permissions are checked as a user without privileges: root reads any directory. So each case
 * runs in a child that, run as root, becomes nobody (uid and gid 65534); as another user, it
 * takes the read permission from its own directory instead. The child reports a step's failure
 * in its exit status (a message on stderr), which the test checks. A plain TAP program (tap.h).
 */
#include "store_util.h"

#include <grp.h> /* setgroups */
#include <sys/stat.h>
#include <sys/wait.h>

#define NOBODY 65534

/* A parent directory for one case: made by this process, then mode `mode` for the child (0711:
 * entered but not listed; 0733: also written to). As root the parent stays root's and the child
 * becomes nobody; otherwise the mode drops the owner's read bit, which binds the owner as well. */
static char *parent_for(mode_t mode)
{
    char *p = tmpdir_make("dir");
    CHECK(p != NULL, "mkdtemp failed");
    CHECK(chmod(p, geteuid() == 0 ? mode : (mode & 0300)) == 0, "chmod %s", p);
    return p;
}

/* In the child: drop to nobody when root. Return: 0, or why not. */
static int become_unprivileged(void)
{
    if (geteuid() != 0)
        return 0;
    if (setgroups(0, NULL) != 0 || setgid(NOBODY) != 0 || setuid(NOBODY) != 0)
        return errno;
    return 0;
}

/* Run fn(arg) in a child as an unprivileged user; its exit status, or -1 if it did not exit. */
static int in_child(int (*fn)(const char *), const char *arg)
{
    fflush(stdout);
    pid_t pid = fork();
    CHECK(pid >= 0, "fork");
    if (pid == 0) {
        int err = become_unprivileged();
        if (err) {
            fprintf(stderr, "cannot drop to uid %d: %s\n", NOBODY, strerror(err));
            _exit(99);
        }
        _exit(fn(arg));
    }
    int status;
    CHECK_EQ(waitpid(pid, &status, 0), pid);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static int64_t done_handler(void *ctx, const struct chime_fire *f)
{
    (void)ctx;
    (void)f;
    return 0;
}

/* Open path, put a key due in an hour, close, open again and find it pending. Return: 0, or the
 * number of the step that failed. */
static int open_put_reopen(const char *path)
{
    struct chime_store_config cfg = { .path = path };
    chime_store *s = NULL;
    int err = chime_store_open(&s, &cfg, done_handler, NULL);
    if (err) {
        fprintf(stderr, "open %s: %s\n", path, chime_strerror(err));
        return 1;
    }
    if ((err = chime_store_put(s, "k", 1, "p", 1, wall_ns() + 3600 * SEC)) != 0 ||
        (err = chime_store_close(s)) != 0) {
        fprintf(stderr, "put or close: %s\n", chime_strerror(err));
        return 2;
    }
    if ((err = chime_store_open(&s, &cfg, done_handler, NULL)) != 0) {
        fprintf(stderr, "reopen %s: %s\n", path, chime_strerror(err));
        return 3;
    }
    struct chime_store_stats st;
    chime_store_stats(s, &st);
    err = chime_store_close(s);
    return st.pending == 1 && err == 0 ? 0 : 4;
}

/* As open_put_reopen, on the relative path "store" from the directory path. */
static int open_relative(const char *path)
{
    if (chdir(path) != 0) {
        fprintf(stderr, "chdir %s: %s\n", path, strerror(errno));
        return 5;
    }
    return open_put_reopen("store");
}

/* Open path, which does not exist: must be refused with -EACCES. Return: 0, or 6. */
static int open_refused(const char *path)
{
    struct chime_store_config cfg = { .path = path };
    chime_store *s = NULL;
    int err = chime_store_open(&s, &cfg, done_handler, NULL);
    if (err == 0)
        chime_store_close(s);
    if (err == -EACCES && s == NULL)
        return 0;
    fprintf(stderr, "open %s: %s, want -EACCES\n", path, err ? chime_strerror(err) : "0");
    return 6;
}

/* The store directory, made beforehand (by an operator, or a package), the child's to write. */
static char *store_in(const char *parent)
{
    char *d;
    CHECK(asprintf(&d, "%s/store", parent) >= 0, "asprintf");
    CHECK(mkdir(d, 0700) == 0, "mkdir %s", d);
    if (geteuid() == 0)
        CHECK(chown(d, NOBODY, NOBODY) == 0, "chown %s", d);
    return d;
}

static void an_existing_directory_under_a_parent_that_cannot_be_read_opens(void)
{
    char *parent = parent_for(0711), *d = store_in(parent);
    CHECK_EQ(in_child(open_put_reopen, d), 0);
    CHECK_EQ(in_child(open_relative, parent), 0); /* the current directory cannot be read either */
    CHECK(chmod(parent, 0700) == 0, "chmod");
    tmpdir_remove(parent);
    free(d);
    free(parent);
}

static void a_directory_open_cannot_make_durable_is_refused_and_removed(void)
{
    char *parent = parent_for(0733), *d;
    CHECK(asprintf(&d, "%s/new", parent) >= 0, "asprintf");
    CHECK_EQ(in_child(open_refused, d), 0);
    CHECK(chmod(parent, 0700) == 0, "chmod");
    CHECK(access(d, F_OK) != 0, "the refused open left %s behind", d);
    tmpdir_remove(parent);
    free(d);
    free(parent);
}

int main(void)
{
    static const struct tap_test tests[] = {
        { "an_existing_directory_under_a_parent_that_cannot_be_read_opens",
          an_existing_directory_under_a_parent_that_cannot_be_read_opens },
        { "a_directory_open_cannot_make_durable_is_refused_and_removed",
          a_directory_open_cannot_make_durable_is_refused_and_removed },
    };
    return tap_run(tests, (int)(sizeof tests / sizeof tests[0]));
}
