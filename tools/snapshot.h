/* SPDX-License-Identifier: MIT */
/*
 * The journal's files as one moment's listing, held open, so that the tool reads what it listed
 * while a running service compacts those files away (chime-store.c's list, count, dead).
 */
#ifndef CHIME_TOOLS_SNAPSHOT_H
#define CHIME_TOOLS_SNAPSHOT_H

#include <stddef.h>

#include "store/files.h"

/* List the directory; keep the runs no other run contains and the segments above them. Read-only:
 * *.tmp files are left where they are. A listing that is not whole is made again a few times
 * before it counts as damage (snapshot.c). Return: as chime__journal_files_list. */
int snapshot_list(int dir, struct chime__journal_files *f);

/* Whether dir shows a journal: HEAD, LOCK, or a segment or run by its name. One with none is not
 * (every command read it as an empty journal, and verify said ok, of any directory: found in
 * review). Return: 1, 0, or an error reading the directory. */
int snapshot_is_journal(int dir);

struct snapshot {
    int dir;        /* a directory in which f's files open as they were listed; -1: not made */
    char *path;     /* that directory, in $TMPDIR (or /tmp) */
    int *fds;       /* the files, held open */
    size_t n;
};

/*
 * Open every file of listing f in journal directory dir, and make s->dir a private directory where
 * each opens by its name as the file listed, even once the service has removed it. Return: 0;
 * -ENOENT a listed file was gone already (list again); another error making the directory (the
 * caller may read dir itself instead). snapshot_free frees s whatever the return.
 */
int snapshot_take(int dir, const struct chime__journal_files *f, struct snapshot *s);
void snapshot_free(struct snapshot *s);

/* For tests: CHIME_STORE_TOOL_STOP_AFTER_LISTING in the environment makes the tool stop itself
 * (SIGSTOP) after each listing is taken, so that a test can change the journal then. */
void snapshot_test_stop(void);

#endif /* CHIME_TOOLS_SNAPSHOT_H */
