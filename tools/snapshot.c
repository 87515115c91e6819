/* SPDX-License-Identifier: MIT */
/*
 * A snapshot of the journal's files for the tool (snapshot.h). A running service replaces segments
 * and runs by merged runs as it flushes and compacts, and removes what they replace; reading
 * everything the tool lists takes longer than the flusher's cycle in a journal of some size, so a
 * read that opened each file when it came to it met one removed nearly every time (found in
 * review: 26 of 40 lists failed beside a store of 18 MB under churn, five tries each). An open
 * descriptor keeps a removed file readable, so every listed file is opened right after the
 * listing, and the library's readers, which open files by name in a directory, are given a private
 * directory where each name is a symbolic link to /proc/self/fd/N: opening one opens the held
 * file, removed or not. The journal's directory is never written. (A tool killed while it reads
 * leaves that directory behind, named chime-snapshot-*, holding links that lead nowhere.)
 */
#define _GNU_SOURCE
#include "snapshot.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "store/format.h"
#include "store/io.h"

int snapshot_list(int dir, struct chime__journal_files *f)
{
    /* A listing may miss a run renamed into place as well as the files it replaced (readdir need
     * not report a file added meanwhile): a chain that is not whole is listed again. */
    int err = 0;
    for (int tries = 0; tries < 5; tries++) {
        if (tries) {
            chime__journal_files_free(f);
            nanosleep(&(struct timespec){ 0, 20 * 1000 * 1000 }, NULL);
        }
        err = chime__journal_files_list(dir, f, 0);
        if (err || f->chain == CHIME__CHAIN_WHOLE)
            break;
    }
    return err;
}

/* The name of listed file i: the segments, then the runs. */
static void name_of(const struct chime__journal_files *f, size_t i, char name[CHIME__NAME_MAX])
{
    if (i < f->nsegs)
        chime__wal_name(name, f->segs[i]);
    else
        chime__run_name(name, f->runs[i - f->nsegs].lo, f->runs[i - f->nsegs].hi);
}

static int pin(int dir, const struct chime__journal_files *f, struct snapshot *s, size_t i)
{
    char name[CHIME__NAME_MAX], target[64];
    name_of(f, i, name);
    int fd = openat(dir, name, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    s->fds[s->n++] = fd;
    snprintf(target, sizeof target, "/proc/self/fd/%d", fd);
    if (symlinkat(target, s->dir, name) != 0)
        return errno == ENOENT ? -EIO : -errno; /* our directory, not the journal's file */
    struct stat held, linked; /* the link must open the held file (no /proc: it leads nowhere) */
    if (fstat(fd, &held) != 0 || fstatat(s->dir, name, &linked, 0) != 0 ||
        held.st_dev != linked.st_dev || held.st_ino != linked.st_ino)
        return -ENOTSUP;
    return 0;
}

int snapshot_take(int dir, const struct chime__journal_files *f, struct snapshot *s)
{
    size_t files = f->nsegs + f->nruns;
    const char *tmp = getenv("TMPDIR");
    *s = (struct snapshot){ -1, NULL, calloc(files ? files : 1, sizeof(int)), 0 };
    if (!s->fds || asprintf(&s->path, "%s/chime-snapshot-XXXXXX", tmp && *tmp ? tmp : "/tmp") < 0) {
        s->path = NULL;
        return -ENOMEM;
    }
    if (!mkdtemp(s->path)) {
        int err = errno == ENOENT ? -ENOTDIR : -errno; /* not -ENOENT: that means "list again" */
        free(s->path);
        s->path = NULL;
        return err;
    }
    s->dir = open(s->path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (s->dir < 0)
        return errno == ENOENT ? -ENOTDIR : -errno; /* as mkdtemp's */
    int err = 0;
    for (size_t i = 0; i < files && !err; i++)
        err = pin(dir, f, s, i);
    return err;
}

void snapshot_free(struct snapshot *s)
{
    if (s->dir >= 0) {
        DIR *d = fdopendir(s->dir); /* which closedir closes */
        for (struct dirent *e; d && (e = readdir(d));)
            if (e->d_name[0] != '.')
                unlinkat(s->dir, e->d_name, 0);
        if (d)
            closedir(d);
        else
            close(s->dir);
    }
    if (s->path)
        rmdir(s->path);
    for (size_t i = 0; i < s->n; i++)
        close(s->fds[i]);
    free(s->fds);
    free(s->path);
    *s = (struct snapshot){ -1, NULL, NULL, 0 };
}

void snapshot_test_stop(void)
{
    if (getenv("CHIME_STORE_TOOL_STOP_AFTER_LISTING"))
        raise(SIGSTOP);
}

static int journal_name(void *ctx, const char *name)
{
    (void)ctx;
    uint64_t lo, hi;
    return !strcmp(name, "HEAD") || !strcmp(name, "LOCK") || chime__parse_name(name, &lo, &hi);
}

int snapshot_is_journal(int dir)
{
    int rc = chime__io_list(dir, journal_name, NULL);
    return rc > 0 ? 1 : rc;
}
