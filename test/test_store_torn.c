/* SPDX-License-Identifier: MIT */
/*
 * Torn tails and damage (lib/store/format.md, "The reader's rules"): a journal whose newest segment
 * holds N puts is cut at every byte offset of its last records (truncated, and zero-filled as a
 * preallocated file is after a torn write), and has every byte of those records flipped. Each time
 * the journal must open, and hold exactly the puts whose records end before the damage. Damage
 * anywhere else (a sealed segment followed by whole records, a run) must refuse to open with
 * -EBADMSG. CHIME_TORN_RECORDS (default 3) sets how many of the last records are cut at every byte.
 */
#include "store_util.h"

#include <fcntl.h>

#include "store/backend.h"
#include "store/format.h"
#include "store/reader.h"

#define N 40 /* puts in the segment */

static char *dir, *scratch;
static unsigned char *segment; /* the newest segment, as written */
static uint64_t seg_size;
static uint64_t rec_start[N], rec_end[N];

static const struct chime__sink no_sink = { NULL, NULL, NULL, NULL };

static char *path_in(const char *d, const char *name)
{
    char *p;
    CHECK(asprintf(&p, "%s/%s", d, name) >= 0, "asprintf");
    return p;
}

/* A journal in `dir` whose only file but LOCK is wal-1 with N puts, keys k0..k39, far in the future
 * (CHIME_SYNC_EACH: each put its own commit, so each record is whole on disk before the next). */
static void build(void)
{
    dir = tmpdir_make("torn");
    scratch = tmpdir_make_fast("torn-scratch"); /* hundreds of opens: see tmpdir_make_fast */
    CHECK(dir && scratch, "mkdtemp");
    struct chime_store_config cfg = { .path = dir };
    struct chime__backend *b;
    CHECK_EQ(chime__journal_ops.open(&b, &cfg, &no_sink), 0);
    for (int i = 0; i < N; i++) {
        char key[8], payload[40];
        snprintf(key, sizeof key, "k%d", i);
        int n = snprintf(payload, sizeof payload, "payload of %d %.*s", i, i % 17, "xxxxxxxxxxxxxxxxx");
        struct chime__put p = { key, strlen(key), payload, (size_t)n, wall_ns() + 3600 * SEC, 0, 0, 0 };
        struct chime__put_result res;
        uint64_t ticket;
        CHECK_EQ(chime__journal_ops.put(b, &p, &res, &ticket), 0);
        CHECK_EQ(chime__journal_ops.wait(b, ticket), 0);
    }
    CHECK_EQ(chime__journal_ops.close(b), 0);

    char *wal = path_in(dir, "wal-0000000000000001.log");
    int fd = open(wal, O_RDONLY);
    CHECK(fd >= 0, "the segment is there");
    struct stat st;
    fstat(fd, &st);
    seg_size = (uint64_t)st.st_size;
    segment = malloc(seg_size);
    CHECK(pread(fd, segment, seg_size, 0) == (ssize_t)seg_size, "read");
    struct chime__reader rd;
    CHECK_EQ(chime__reader_init(&rd, fd, CHIME__FILE_HEADER, seg_size), 0);
    struct chime__rec r;
    for (int i = 0; i < N; i++) {
        rec_start[i] = rd.off;
        CHECK_EQ(chime__reader_next(&rd, &r), 1);
        rec_end[i] = rd.off;
    }
    CHECK_EQ(chime__reader_next(&rd, &r), 0);
    chime__reader_free(&rd);
    close(fd);
    free(wal);
}

static int collect(void *ctx, const struct chime__timer *t)
{
    int *seen = ctx;
    int i;
    char key[16] = { 0 };
    memcpy(key, t->key, t->key_len < 15 ? t->key_len : 15);
    CHECK(sscanf(key, "k%d", &i) == 1 && i >= 0 && i < N, "key %s", key);
    CHECK(!seen[i], "k%d handed over twice", i);
    seen[i] = 1;
    char want[40];
    int n = snprintf(want, sizeof want, "payload of %d %.*s", i, i % 17, "xxxxxxxxxxxxxxxxx");
    CHECK((size_t)n == t->payload_len && !memcmp(want, t->payload, (size_t)n), "payload of k%d", i);
    return 0;
}

/* Put `bytes` bytes of the segment (with byte `flip` inverted, if not UINT64_MAX) in scratch as its
 * newest segment, the file `size` bytes long (zeros after `bytes`); open; expect exactly k0..k(keep-1). */
static void trial(uint64_t bytes, uint64_t size, uint64_t flip, int keep)
{
    tmpdir_remove(scratch);
    mkdir(scratch, 0755);
    char *wal = path_in(scratch, "wal-0000000000000001.log");
    int fd = open(wal, O_CREAT | O_WRONLY | O_TRUNC, 0644);
    CHECK(fd >= 0, "create");
    CHECK(pwrite(fd, segment, bytes, 0) == (ssize_t)bytes, "write");
    if (flip != UINT64_MAX) {
        unsigned char c = segment[flip] ^ 0xff;
        CHECK(pwrite(fd, &c, 1, (off_t)flip) == 1, "flip");
    }
    CHECK(ftruncate(fd, (off_t)size) == 0, "size");
    close(fd);
    free(wal);

    struct chime_store_config cfg = { .path = scratch };
    struct chime__backend *b;
    int err = chime__journal_ops.open(&b, &cfg, &no_sink);
    CHECK(err == 0, "open after a cut at %llu (flip %lld): %s", (unsigned long long)bytes,
          (long long)(flip == UINT64_MAX ? -1 : (int64_t)flip), chime_strerror(err));
    int seen[N] = { 0 };
    CHECK_EQ(chime__journal_ops.load(b, 0, UINT64_MAX, collect, seen), 0);
    for (int i = 0; i < N; i++)
        CHECK(seen[i] == (i < keep), "cut %llu flip %lld: k%d %s", (unsigned long long)bytes,
              (long long)(flip == UINT64_MAX ? -1 : (int64_t)flip), i,
              seen[i] ? "kept, though at or after the damage" : "lost, though before the damage");
    CHECK_EQ(chime__journal_ops.close(b), 0);
}

static int records_to_cut(void)
{
    const char *env = getenv("CHIME_TORN_RECORDS");
    int k = env ? atoi(env) : 3;
    return k < 1 ? 1 : k > N ? N : k;
}

/* Records wholly before offset x. */
static int whole_before(uint64_t x)
{
    int n = 0;
    while (n < N && rec_end[n] <= x)
        n++;
    return n;
}

static void a_truncated_tail_keeps_every_record_before_the_cut(void)
{
    for (uint64_t x = rec_start[N - records_to_cut()]; x <= rec_end[N - 1]; x++)
        trial(x, x, UINT64_MAX, whole_before(x));
}

static void a_torn_preallocated_tail_keeps_every_record_before_the_zeros(void)
{
    for (uint64_t x = rec_start[N - records_to_cut()]; x <= rec_end[N - 1]; x++) {
        /* Zeros over a record's own zero padding leave it whole. */
        int keep = whole_before(x);
        if (keep < N) {
            int intact = 1;
            for (uint64_t b = x; b < rec_end[keep]; b++)
                intact &= segment[b] == 0;
            keep += intact;
        }
        trial(x, seg_size, UINT64_MAX, keep);
    }
}

static void a_flipped_byte_keeps_every_record_before_the_damaged_one(void)
{
    for (int i = N - records_to_cut(); i < N; i++)
        for (uint64_t x = rec_start[i]; x < rec_end[i]; x++)
            trial(rec_end[N - 1], seg_size, x, i);
}

static void damage_in_a_sealed_segment_refuses_to_open_ebadmsg(void)
{
    /* wal-1 damaged in its middle, then wal-2 with a whole record: not a torn tail. */
    tmpdir_remove(scratch);
    mkdir(scratch, 0755);
    char *wal1 = path_in(scratch, "wal-0000000000000001.log");
    char *wal2 = path_in(scratch, "wal-0000000000000002.log");
    int fd = open(wal1, O_CREAT | O_WRONLY, 0644);
    unsigned char c = segment[rec_start[N / 2] + 20] ^ 0x01;
    CHECK(pwrite(fd, segment, rec_end[N - 1], 0) == (ssize_t)rec_end[N - 1], "write");
    CHECK(pwrite(fd, &c, 1, (off_t)(rec_start[N / 2] + 20)) == 1, "flip");
    close(fd);
    unsigned char two[CHIME__FILE_HEADER + 128];
    chime__header_encode(two, &(struct chime__file_header){ .lo = 2, .hi = 2, .next_version = 1000 });
    struct chime__rec r = { .type = CHIME__PUT, .key_len = 4, .key = "late", .payload_len = 1,
                            .payload = "x", .version = 1000, .due = 1 };
    chime__rec_encode(two + CHIME__FILE_HEADER, &r);
    fd = open(wal2, O_CREAT | O_WRONLY, 0644);
    size_t len = CHIME__FILE_HEADER + chime__rec_len(4, 1);
    CHECK(pwrite(fd, two, len, 0) == (ssize_t)len, "write");
    close(fd);
    struct chime_store_config cfg = { .path = scratch };
    struct chime__backend *b;
    CHECK_EQ(chime__journal_ops.open(&b, &cfg, &no_sink), -EBADMSG);
    /* Nothing was changed: both segments are still there for an operator to look at. */
    CHECK(access(wal1, F_OK) == 0 && access(wal2, F_OK) == 0, "open changed a damaged journal");
    free(wal1);
    free(wal2);
}

static void damage_in_a_run_refuses_to_open_ebadmsg(void)
{
    /* Open and close the intact journal: the segment becomes a run. Then flip a byte of a record. */
    tmpdir_remove(scratch);
    tmpdir_copy(dir, scratch);
    struct chime_store_config cfg = { .path = scratch };
    struct chime__backend *b;
    CHECK_EQ(chime__journal_ops.open(&b, &cfg, &no_sink), 0);
    CHECK_EQ(chime__journal_ops.close(b), 0);
    char *run = path_in(scratch, "run-0000000000000001-0000000000000001.run");
    int fd = open(run, O_RDWR);
    CHECK(fd >= 0, "the run is there");
    unsigned char c;
    CHECK(pread(fd, &c, 1, CHIME__FILE_HEADER + 70) == 1, "read");
    c ^= 0x10;
    CHECK(pwrite(fd, &c, 1, CHIME__FILE_HEADER + 70) == 1, "write");
    close(fd);
    free(run);
    CHECK_EQ(chime__journal_ops.open(&b, &cfg, &no_sink), -EBADMSG);
}

static const struct tap_test tests[] = {
    { "a_truncated_tail_keeps_every_record_before_the_cut",
      a_truncated_tail_keeps_every_record_before_the_cut },
    { "a_torn_preallocated_tail_keeps_every_record_before_the_zeros",
      a_torn_preallocated_tail_keeps_every_record_before_the_zeros },
    { "a_flipped_byte_keeps_every_record_before_the_damaged_one",
      a_flipped_byte_keeps_every_record_before_the_damaged_one },
    { "damage_in_a_sealed_segment_refuses_to_open_ebadmsg",
      damage_in_a_sealed_segment_refuses_to_open_ebadmsg },
    { "damage_in_a_run_refuses_to_open_ebadmsg", damage_in_a_run_refuses_to_open_ebadmsg },
};

int main(void)
{
    build();
    int rc = tap_run(tests, (int)(sizeof tests / sizeof tests[0]));
    tmpdir_remove(dir);
    tmpdir_remove(scratch);
    free(dir);
    free(scratch);
    free(segment);
    return rc;
}
