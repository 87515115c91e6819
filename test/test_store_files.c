/* SPDX-License-Identifier: MIT */
/*
 * The journal's files as a whole (lib/store/files.h): a file that is lost, or a run cut short or
 * grown, is damage that open must refuse (-EBADMSG, nothing changed on disk) rather than open the
 * journal without the records that file held: the newest files too, which leave no gap, and HEAD
 * itself (lib/store/head.h). The journal under test holds runs 1-1, 2-2 and 3-3 and segment 4, each
 * with its own keys; each of its runs is deleted in turn, and one run is cut at every record
 * boundary (where every record before the cut is whole, so only its length tells).
 */
#include "store_util.h"

#include <dirent.h>
#include <fcntl.h>

#include "store/backend.h"
#include "store/format.h"
#include "store/io.h"

#define SESSIONS 4 /* sessions build the journal; session k's puts end in segment k */
#define KEYS 5     /* puts per session: keys s<k>-<i> */

static char *dir, *scratch;
static const struct chime__sink no_sink = { NULL, NULL, NULL, NULL };

static const char *const files[] = {
    "run-0000000000000001-0000000000000001.run", "run-0000000000000002-0000000000000002.run",
    "run-0000000000000003-0000000000000003.run", "wal-0000000000000004.log",
};

static char *path_in(const char *d, const char *name)
{
    char *p;
    CHECK(asprintf(&p, "%s/%s", d, name) >= 0, "asprintf");
    return p;
}

/* The journal's files in d other than LOCK, sorted, in out (one name per line). */
static void listing(const char *d, char *out, size_t cap)
{
    struct dirent **names;
    int n = scandir(d, &names, NULL, alphasort);
    CHECK(n >= 0, "scandir %s", d);
    size_t len = 0;
    out[0] = 0;
    for (int i = 0; i < n; i++) {
        if (names[i]->d_name[0] != '.' && strcmp(names[i]->d_name, "LOCK") != 0)
            len += (size_t)snprintf(out + len, len < cap ? cap - len : 0, "%s\n", names[i]->d_name);
        free(names[i]);
    }
    free(names);
    CHECK(len < cap, "listing too long");
}

/* Four sessions, each opening the journal (which flushes the previous session's segment into a
 * run), putting its keys and closing; the last session's segment stays a segment. */
static void build(void)
{
    dir = tmpdir_make("files");
    scratch = tmpdir_make("files-scratch");
    CHECK(dir && scratch, "mkdtemp");
    struct chime_store_config cfg = { .path = dir };
    for (int k = 1; k <= SESSIONS; k++) {
        struct chime__backend *b;
        CHECK_EQ(chime__journal_ops.open(&b, &cfg, &no_sink), 0);
        for (int i = 0; i < KEYS; i++) {
            char key[16];
            snprintf(key, sizeof key, "s%d-%d", k, i);
            struct chime__put p = { key, strlen(key), "payload", 7, wall_ns() + 3600 * SEC, 0, 0, 0 };
            struct chime__put_result res;
            uint64_t ticket;
            CHECK_EQ(chime__journal_ops.put(b, &p, &res, &ticket), 0);
            CHECK_EQ(chime__journal_ops.wait(b, ticket), 0);
        }
        CHECK_EQ(chime__journal_ops.close(b), 0);
    }
    char got[1024], want[1024] = "HEAD\n";
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++)
        strcat(strcat(want, files[i]), "\n");
    listing(dir, got, sizeof got);
    CHECK(strcmp(got, want) == 0, "the journal under test is not as built:\n%s", got);
}

static int count_keys(void *ctx, const struct chime__timer *t)
{
    (void)t;
    (*(int *)ctx)++;
    return 0;
}

/* Open scratch: -EBADMSG, with its files (names and bytes) as they were. */
static void refused(const char *what)
{
    char before[1024], after[1024];
    listing(scratch, before, sizeof before);
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "cd '%s' && cat $(ls | grep -v LOCK) | md5sum", scratch);
    FILE *p = popen(cmd, "r");
    char sum_before[64] = { 0 }, sum_after[64] = { 0 };
    CHECK(p && fgets(sum_before, sizeof sum_before, p), "md5sum");
    pclose(p);
    struct chime_store_config cfg = { .path = scratch };
    struct chime__backend *b;
    int err = chime__journal_ops.open(&b, &cfg, &no_sink);
    CHECK(err == -EBADMSG, "%s: open returned %d (%s), not -EBADMSG", what, err, chime_strerror(err));
    listing(scratch, after, sizeof after);
    CHECK(strcmp(before, after) == 0, "%s: open changed the files:\n%s\nto\n%s", what, before, after);
    p = popen(cmd, "r");
    CHECK(p && fgets(sum_after, sizeof sum_after, p), "md5sum");
    pclose(p);
    CHECK(strcmp(sum_before, sum_after) == 0, "%s: open changed the files' bytes", what);
}

static void fresh_copy(void)
{
    tmpdir_remove(scratch);
    tmpdir_copy(dir, scratch);
}

/* Open scratch: it opens, with every key. */
static void opens_with_every_key(void)
{
    struct chime_store_config cfg = { .path = scratch };
    struct chime__backend *b;
    CHECK_EQ(chime__journal_ops.open(&b, &cfg, &no_sink), 0);
    int n = 0;
    CHECK_EQ(chime__journal_ops.load(b, 0, UINT64_MAX, count_keys, &n), 0);
    CHECK_EQ(n, SESSIONS * KEYS);
    CHECK_EQ(chime__journal_ops.close(b), 0);
}

static void the_intact_journal_opens_with_every_key(void)
{
    fresh_copy();
    opens_with_every_key();
}

static void unlink_in_scratch(const char *name)
{
    char *path = path_in(scratch, name);
    CHECK(unlink(path) == 0, "unlink %s", path);
    free(path);
}

static void a_lost_run_refuses_to_open_ebadmsg(void)
{
    for (int k = 0; k < 3; k++) { /* each run in turn: the first, one between runs, the last */
        fresh_copy();
        unlink_in_scratch(files[k]);
        refused(files[k]);
    }
}

static void every_run_lost_before_a_segment_refuses_to_open_ebadmsg(void)
{
    fresh_copy(); /* segment 4 alone: segments 1 to 3 are in no file */
    for (int k = 0; k < 3; k++)
        unlink_in_scratch(files[k]);
    refused("runs 1 to 3 lost");
}

/* The newest files leave no gap in the chain: HEAD names segment 4 (head.h). */
static void the_newest_files_lost_refuse_to_open_ebadmsg(void)
{
    fresh_copy();
    unlink_in_scratch(files[3]);
    refused("segment 4 lost");
    fresh_copy();
    unlink_in_scratch(files[3]);
    unlink_in_scratch(files[2]);
    refused("run 3-3 and segment 4 lost");
}

static void a_lost_head_refuses_to_open_ebadmsg(void)
{
    fresh_copy();
    unlink_in_scratch("HEAD");
    refused("HEAD lost");
}

/* HEAD's two slots: which one is the newer, and what each names. */
static void head_slots(const char *d, int *newer, uint64_t n[2])
{
    char *path = path_in(d, "HEAD");
    int fd = open(path, O_RDONLY);
    CHECK(fd >= 0, "%s", path);
    uint64_t seq[2];
    for (int i = 0; i < 2; i++) {
        unsigned char slot[CHIME__HEAD_SLOT];
        CHECK(pread(fd, slot, sizeof slot, i * CHIME__HEAD_STRIDE) == (ssize_t)sizeof slot, "read");
        CHECK_EQ(chime__head_slot_decode(slot, &seq[i], &n[i]), 0);
    }
    close(fd);
    free(path);
    *newer = seq[1] > seq[0];
}

static void flip_head_slot(int slot)
{
    char *path = path_in(scratch, "HEAD");
    int fd = open(path, O_RDWR);
    unsigned char c;
    off_t at = (off_t)slot * CHIME__HEAD_STRIDE + 20; /* in its sequence number */
    CHECK(fd >= 0 && pread(fd, &c, 1, at) == 1, "%s", path);
    c ^= 0xff;
    CHECK(pwrite(fd, &c, 1, at) == 1, "flip");
    close(fd);
    free(path);
}

/* A write of HEAD that a crash tore leaves the other slot, one head older: the journal opens with
 * every key (the segment the torn write named had no acknowledged record, as far as open can know).
 * Both slots damaged is a lost HEAD. */
static void a_torn_head_slot_falls_back_to_the_other(void)
{
    int newer;
    uint64_t n[2];
    head_slots(dir, &newer, n);
    CHECK_EQ(n[newer], 4);
    CHECK_EQ(n[!newer], 3); /* each session's open named its own segment */
    fresh_copy();
    flip_head_slot(newer);
    opens_with_every_key();
    fresh_copy();
    flip_head_slot(0);
    flip_head_slot(1);
    refused("both of HEAD's slots damaged");
}

/* Offsets at which run-2-2's records begin, and its size. */
static size_t record_starts(uint64_t *starts, size_t cap, uint64_t *size)
{
    char *run = path_in(dir, files[1]);
    int fd = open(run, O_RDONLY);
    struct stat st;
    CHECK(fd >= 0 && fstat(fd, &st) == 0, "%s", run);
    *size = (uint64_t)st.st_size;
    unsigned char *buf = malloc(*size);
    CHECK(buf && pread(fd, buf, *size, 0) == (ssize_t)*size, "read");
    close(fd);
    size_t n = 0;
    for (uint64_t off = CHIME__FILE_HEADER; off < *size;) {
        struct chime__rec r;
        uint32_t len;
        CHECK_EQ(chime__rec_decode(buf + off, *size - off, &r, &len), CHIME__REC_WHOLE);
        CHECK(n < cap, "too many records");
        starts[n++] = off;
        off += len;
    }
    free(buf);
    free(run);
    return n;
}

static void a_run_cut_at_a_record_boundary_or_grown_refuses_to_open_ebadmsg(void)
{
    uint64_t starts[64], size;
    size_t n = record_starts(starts, 64, &size);
    CHECK_EQ(n, KEYS); /* session 2's puts */
    for (size_t i = 0; i <= n; i++) { /* cut before record i: every record before it is whole */
        uint64_t cut = i < n ? starts[i] : size + 8; /* i == n: grown by 8 zero bytes */
        fresh_copy();
        char *run = path_in(scratch, files[1]);
        CHECK(truncate(run, (off_t)cut) == 0, "truncate %s", run);
        char what[64];
        snprintf(what, sizeof what, "run 2-2 made %llu bytes long", (unsigned long long)cut);
        refused(what);
        free(run);
    }
}

/* The journal's size (chime_store_stats' bytes) counted by several threads at once, on one
 * descriptor of the directory: each listing reads the directory through a description of its own,
 * so none sees another's position (a dup shared it: two listings interleaved, and one found no
 * files at all; found in review). */
enum { SIZE_ROUNDS = 2000 };
static int sized_dir;
static uint64_t size_want;

static void *size_again_and_again(void *arg)
{
    (void)arg;
    for (int i = 0; i < SIZE_ROUNDS; i++)
        if (chime__io_dir_bytes(sized_dir) != size_want)
            return (void *)1;
    return NULL;
}

static void the_journals_size_counted_on_two_threads_at_once_is_whole_on_each(void)
{
    fresh_copy();
    sized_dir = chime__io_open_dir(scratch);
    CHECK(sized_dir >= 0, "open %s: %d", scratch, sized_dir);
    size_want = chime__io_dir_bytes(sized_dir);
    CHECK(size_want > 0, "an empty journal");
    pthread_t t[2];
    void *wrong[2];
    for (int i = 0; i < 2; i++)
        CHECK_EQ(pthread_create(&t[i], NULL, size_again_and_again, NULL), 0);
    for (int i = 0; i < 2; i++)
        CHECK_EQ(pthread_join(t[i], &wrong[i]), 0);
    CHECK(!wrong[0] && !wrong[1], "a count of the journal's bytes missed files");
    chime__io_close(sized_dir);
}

static const struct tap_test tests[] = {
    { "the_intact_journal_opens_with_every_key", the_intact_journal_opens_with_every_key },
    { "a_lost_run_refuses_to_open_ebadmsg", a_lost_run_refuses_to_open_ebadmsg },
    { "every_run_lost_before_a_segment_refuses_to_open_ebadmsg",
      every_run_lost_before_a_segment_refuses_to_open_ebadmsg },
    { "a_run_cut_at_a_record_boundary_or_grown_refuses_to_open_ebadmsg",
      a_run_cut_at_a_record_boundary_or_grown_refuses_to_open_ebadmsg },
    { "the_newest_files_lost_refuse_to_open_ebadmsg",
      the_newest_files_lost_refuse_to_open_ebadmsg },
    { "a_lost_head_refuses_to_open_ebadmsg", a_lost_head_refuses_to_open_ebadmsg },
    { "a_torn_head_slot_falls_back_to_the_other", a_torn_head_slot_falls_back_to_the_other },
    { "the_journals_size_counted_on_two_threads_at_once_is_whole_on_each",
      the_journals_size_counted_on_two_threads_at_once_is_whole_on_each },
};

int main(void)
{
    build();
    int rc = tap_run(tests, (int)(sizeof tests / sizeof tests[0]));
    tmpdir_remove(dir);
    tmpdir_remove(scratch);
    free(dir);
    free(scratch);
    return rc;
}
