/* SPDX-License-Identifier: MIT */
/*
 * A failure of the journal outside its log stops the log too (journal.c, chime__journal_fail):
 * chime_store.h says that once a call has returned -EIO nothing is reported durable, and a batch
 * the log's writer holds at that moment is no exception. The failure here is the flusher's: the
 * fsync of the directory after it prepares the next segment fails with -EIO (compact.c, which makes
 * that failure final because a directory's fsync may report an error once and then pass; the
 * writer, not told, went on to create that segment itself and named it in HEAD: found in review).
 *
 * The interleaving is made with the I/O fault hook (lib/store/io.h), which holds the flusher in
 * that fsync and the writer in its fdatasync of a put's batch until the test lets each go; the test
 * waits for each to be held, and for the store to report the failure, by polling flags (no timing).
 */
#include "store_util.h"

#include <limits.h>

#include "store/io.h"

static char *dir;
static struct recorder rec;
static char real_dir[PATH_MAX];

static struct {
    pthread_t main, flusher;
    _Atomic int flusher_known, flusher_held, release_flusher;
    _Atomic int writer_armed, writer_held, release_writer;
} h;

/* Whether fd is the journal's directory itself (is_file would also take the files in it). */
static int is_dir(int fd)
{
    char path[PATH_MAX];
    return fd_path(fd, path, sizeof path) && !strcmp(path, real_dir);
}

static int hook(void *ctx, enum chime__io_op op, const char *name, int fd)
{
    (void)ctx;
    bool from_main = pthread_equal(pthread_self(), h.main);
    if (op == CHIME_IO_OPEN && name && !strcmp(name, "wal-0000000000000002.log") && !from_main &&
        !atomic_load(&h.flusher_known)) {
        h.flusher = pthread_self(); /* the flusher prepares the next segment once the store opens */
        atomic_store(&h.flusher_known, 1);
        return 0;
    }
    if (op != CHIME_IO_SYNC || fd < 0 || from_main)
        return 0;
    bool from_flusher = atomic_load(&h.flusher_known) && pthread_equal(pthread_self(), h.flusher);
    if (from_flusher && is_dir(fd) && !atomic_load(&h.flusher_held)) {
        atomic_store(&h.flusher_held, 1);
        while (!atomic_load(&h.release_flusher))
            sleep_ms(1); /* held until the test lets it fail */
        return -EIO;
    }
    if (!from_flusher && atomic_load(&h.writer_armed) && is_file(fd, "/wal-") &&
        !atomic_load(&h.writer_held)) {
        atomic_store(&h.writer_held, 1);
        while (!atomic_load(&h.release_writer))
            sleep_ms(1); /* the batch is written; its fdatasync waits for the test */
    }
    return 0;
}

static chime_store *store;
static _Atomic int put_rc = 1;

static void *put_one(void *arg)
{
    (void)arg;
    atomic_store(&put_rc, chime_store_put(store, "k", 1, "p", 1, wall_ns() + 3600 * SEC));
    return NULL;
}

static void poll_until(_Atomic int *flag)
{
    while (!atomic_load(flag))
        sleep_ms(1); /* a flag the fault hook sets */
}

static void test_a_batch_in_the_writers_hands_is_not_durable_once_the_flusher_failed(void)
{
    store_test_fresh(&dir, "failstop", &rec);
    CHECK(realpath(dir, real_dir) != NULL, "realpath");
    h.main = pthread_self();
    chime__io_set_fault(hook, NULL);
    struct chime_store_config cfg = { .path = dir, .sync = CHIME_SYNC_EACH };
    CHECK_EQ(chime_store_open(&store, &cfg, recorder_handler, &rec), 0);
    poll_until(&h.flusher_held); /* in the fsync of the directory after creating wal-2 */

    atomic_store(&h.writer_armed, 1);
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, put_one, NULL), 0);
    poll_until(&h.writer_held); /* the put's record is written, its fdatasync held */

    atomic_store(&h.release_flusher, 1); /* its fsync fails: the journal fails with -EIO */
    struct chime_store_stats st = { 0 };
    while (chime_store_stats(store, &st), st.error == 0)
        sleep_ms(1); /* a poll of the store's state */
    CHECK_EQ(st.error, -EIO);

    atomic_store(&h.release_writer, 1); /* the batch's fdatasync passes, after the failure */
    CHECK_EQ(pthread_join(t, NULL), 0);
    CHECK(atomic_load(&put_rc) == -EIO,
          "the put returned %d after the store had failed with -EIO (nothing is reported durable"
          " after it)", atomic_load(&put_rc));
    CHECK_EQ(chime_store_put(store, "k2", 2, "p", 1, wall_ns() + 3600 * SEC), -EIO);
    CHECK_EQ(chime_store_close(store), -EIO);
    chime__io_set_fault(NULL, NULL);
}

int main(void)
{
    static const struct tap_test tests[] = {
        { "a_batch_in_the_writers_hands_is_not_durable_once_the_flusher_failed",
          test_a_batch_in_the_writers_hands_is_not_durable_once_the_flusher_failed },
    };
    return store_tests_run(tests, (int)(sizeof tests / sizeof tests[0]), &dir, &rec, NULL);
}
