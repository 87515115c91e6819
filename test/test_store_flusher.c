/* SPDX-License-Identifier: MIT */
/*
 * The journal's flusher (lib/store/compact.c) creating the log's next segment ahead of time: a
 * device error there (-EIO) fails the journal for good, as it would have failed the log's writer,
 * rather than being dropped for the writer to pass over (the directory's fsync reports an error
 * once: a later caller may see none). The fault hook fails the first write of zeros into segment 3
 * with -EIO, which only the flusher's preparation can reach here: the writer creates a segment
 * itself only when none was prepared, and segment 2 is never filled.
 */
#include "journal_util.h"

#include <fcntl.h>

static _Atomic int hits;

static int fail_segment_3_once(void *ctx, enum chime__io_op op, const char *name, int fd)
{
    (void)ctx;
    (void)name;
    if (op != CHIME_IO_ALLOCATE || fd < 0 || !is_file(fd, "/wal-0000000000000003.log"))
        return 0;
    return atomic_fetch_add(&hits, 1) == 0 ? -EIO : 0;
}

static int put(struct chime__backend *b, const char *key)
{
    struct chime__put p = { key, strlen(key), "p", 1, wall_ns() + 3600 * SEC, 0, 0, 0 };
    struct chime__put_result res;
    uint64_t ticket;
    return chime__journal_ops.put(b, &p, &res, &ticket);
}

static int found(void *ctx, const struct chime__timer *t)
{
    *(int *)ctx += t->key_len == 1 && ((const char *)t->key)[0] == 'a';
    return 0;
}

static void an_io_error_preparing_the_next_segment_fails_the_journal(void)
{
    char *dir = tmpdir_make("flusher");
    CHECK(dir != NULL, "mkdtemp");
    chime__io_set_fault(fail_segment_3_once, NULL);
    struct chime__backend *b = journal_open_hourly(dir);
    /* wal-1 sealed and flushed; the flusher then prepares wal-3 (or did at its start, if the
     * writer had made wal-2 itself), and meets the error */
    CHECK_EQ(put(b, "a"), 0);
    int rc = chime__journal_flush_all(b);
    CHECK(rc == 0 || rc == -EIO, "first flush: %s", chime_strerror(rc));
    while (!atomic_load(&hits))
        sleep_ms(1); /* a poll: the flusher prepares on its own */
    /* wal-2 sealed: the writer needs wal-3. Had the error been dropped, it would create wal-3
     * itself (the hook fails once), and this flush would succeed. */
    if (rc == 0) {
        rc = put(b, "b");
        if (rc == 0)
            rc = chime__journal_flush_all(b);
    }
    CHECK(rc == -EIO, "after the failed preparation: %s, not -EIO", chime_strerror(rc));
    CHECK_EQ(chime__journal_error(b), -EIO);
    CHECK_EQ(put(b, "c"), -EIO);
    /* The flusher met the fault (the first hit); the writer may also have made wal-3 itself for the
     * seal, if the put came before the journal's failure was published (seen under valgrind). */
    CHECK(atomic_load(&hits) >= 1, "the fault was never met");
    CHECK_EQ(chime__journal_ops.close(b), -EIO);
    chime__io_set_fault(NULL, NULL);

    b = journal_open_hourly(dir); /* nothing acknowledged is lost */
    int a = 0;
    CHECK_EQ(chime__journal_ops.load(b, 0, UINT64_MAX, found, &a), 0);
    CHECK_EQ(a, 1);
    CHECK_EQ(chime__journal_ops.close(b), 0);
    tmpdir_remove(dir);
    free(dir);
}

static const struct tap_test tests[] = {
    { "an_io_error_preparing_the_next_segment_fails_the_journal",
      an_io_error_preparing_the_next_segment_fails_the_journal },
};

int main(void)
{
    return tap_run(tests, (int)(sizeof tests / sizeof tests[0]));
}
