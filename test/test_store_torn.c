/* SPDX-License-Identifier: MIT */
/*
 * Torn tails and damage (lib/store/format.md, "The reader's rules"): a journal whose newest segment
 * holds N puts, each its own group commit (a record and its MARK), is cut at every byte offset of
 * its last records, zero-filled as a preallocated file is after a torn write: each time the journal
 * must open, and hold exactly the puts whose records end before the cut; truncated there instead,
 * it must refuse (a segment is created whole, so no crash cuts one short). Every
 * byte of the last group commit is flipped, and zeroed: a torn tail as well. Every byte of the
 * acknowledged group commits before it is flipped, and zeroed: the later commit's MARK shows they
 * had been synced, so that is damage, and open must refuse with -EBADMSG and change nothing. Damage
 * anywhere else (a sealed segment followed by whole records, a run) must refuse likewise.
 * CHIME_TORN_RECORDS (default 3) sets how many of the last records are cut at every byte.
 */
#include "store_util.h"

#include <fcntl.h>

#include "store/backend.h"
#include "store/format.h"
#include "store/head.h"
#include "store/reader.h"

#define N 40 /* puts in the segment */

static char *dir, *scratch;
static unsigned char *segment; /* the newest segment, as written */
static uint64_t seg_size;
static unsigned char head[2 * CHIME__HEAD_STRIDE]; /* HEAD, as written: it names segment 1 */
static uint64_t rec_start[N], rec_end[N]; /* put i's record; its group commit's MARK follows it */
static uint64_t written;                  /* the end of the last MARK: what the writer wrote */

static const struct chime__sink no_sink = { NULL, NULL, NULL, NULL };

static char *path_in(const char *d, const char *name)
{
    char *p;
    CHECK(asprintf(&p, "%s/%s", d, name) >= 0, "asprintf");
    return p;
}

/* A journal in `dir` whose only files but LOCK and HEAD are wal-1 with N puts, keys k0..k39, far in
 * the future (CHIME_SYNC_EACH: each put its own commit, so each record is whole on disk before the
 * next). */
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

    char *head_path = path_in(dir, "HEAD");
    int fd = open(head_path, O_RDONLY);
    CHECK(fd >= 0 && pread(fd, head, sizeof head, 0) == (ssize_t)sizeof head, "HEAD");
    close(fd);
    free(head_path);
    char *wal = path_in(dir, "wal-0000000000000001.log");
    fd = open(wal, O_RDONLY);
    CHECK(fd >= 0, "the segment is there");
    struct stat st;
    fstat(fd, &st);
    seg_size = (uint64_t)st.st_size;
    segment = malloc(seg_size);
    CHECK(pread(fd, segment, seg_size, 0) == (ssize_t)seg_size, "read");
    /* Each put was its own group commit: its record, then a MARK naming the record's offset. */
    struct chime__file_header h;
    CHECK_EQ(chime__header_decode(segment, &h), 0);
    uint64_t off = CHIME__FILE_HEADER;
    for (int i = 0; i < N; i++) {
        struct chime__rec r;
        uint32_t len;
        rec_start[i] = off;
        CHECK_EQ(chime__rec_decode(segment + off, seg_size - off, &r, &len), CHIME__REC_WHOLE);
        CHECK(r.type == CHIME__PUT, "put %d's record", i);
        rec_end[i] = off += len;
        struct chime__batch_mark m;
        CHECK_EQ(chime__rec_decode(segment + off, seg_size - off, &r, &len), CHIME__REC_WHOLE);
        CHECK(chime__mark_valid(&r, &h, off, &m) && m.start == rec_start[i], "put %d's MARK", i);
        off += len;
    }
    written = off;
    struct chime__reader rd;
    struct chime__rec r;
    CHECK_EQ(chime__reader_init_segment(&rd, fd, &h, seg_size), 0);
    for (int i = 0; i < N; i++)
        CHECK_EQ(chime__reader_next(&rd, &r), 1);
    CHECK_EQ(chime__reader_next(&rd, &r), 0);
    CHECK_EQ(rd.marks, N);
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

/* Put `bytes` bytes of the segment (with byte `flip` inverted, and 8 zero bytes at `zero`, each if
 * not UINT64_MAX) in scratch as its newest segment, the file `size` bytes long (zeros after
 * `bytes`). Return: the file's path. */
static char *damaged_copy(uint64_t bytes, uint64_t size, uint64_t flip, uint64_t zero)
{
    tmpdir_remove(scratch);
    mkdir(scratch, 0755);
    char *head_path = path_in(scratch, "HEAD");
    int fd = open(head_path, O_CREAT | O_WRONLY | O_TRUNC, 0644);
    CHECK(fd >= 0 && pwrite(fd, head, sizeof head, 0) == (ssize_t)sizeof head, "HEAD");
    close(fd);
    free(head_path);
    char *wal = path_in(scratch, "wal-0000000000000001.log");
    fd = open(wal, O_CREAT | O_WRONLY | O_TRUNC, 0644);
    CHECK(fd >= 0, "create");
    CHECK(pwrite(fd, segment, bytes, 0) == (ssize_t)bytes, "write");
    if (flip != UINT64_MAX) {
        unsigned char c = segment[flip] ^ 0xff;
        CHECK(pwrite(fd, &c, 1, (off_t)flip) == 1, "flip");
    }
    if (zero != UINT64_MAX)
        CHECK(pwrite(fd, (const unsigned char[8]){ 0 }, 8, (off_t)zero) == 8, "zeros");
    CHECK(ftruncate(fd, (off_t)size) == 0, "size");
    close(fd);
    return wal;
}

/* damaged_copy, open, expect exactly k0..k(keep-1). */
static void trial(uint64_t bytes, uint64_t size, uint64_t flip, uint64_t zero, int keep)
{
    free(damaged_copy(bytes, size, flip, zero));
    struct chime_store_config cfg = { .path = scratch };
    struct chime__backend *b;
    int err = chime__journal_ops.open(&b, &cfg, &no_sink);
    CHECK(err == 0, "open after a cut at %llu (flip %lld, zeros %lld): %s",
          (unsigned long long)bytes, (long long)(flip == UINT64_MAX ? -1 : (int64_t)flip),
          (long long)(zero == UINT64_MAX ? -1 : (int64_t)zero), chime_strerror(err));
    int seen[N] = { 0 };
    CHECK_EQ(chime__journal_ops.load(b, 0, UINT64_MAX, collect, seen), 0);
    for (int i = 0; i < N; i++)
        CHECK(seen[i] == (i < keep), "cut %llu flip %lld: k%d %s", (unsigned long long)bytes,
              (long long)(flip == UINT64_MAX ? -1 : (int64_t)flip), i,
              seen[i] ? "kept, though at or after the damage" : "lost, though before the damage");
    CHECK_EQ(chime__journal_ops.close(b), 0);
}

/* damaged_copy of the segment cut to `size` bytes (seg_size: whole), open: -EBADMSG, and the
 * segment is as it was (bytes and size), and no run was written. */
static void refused_sized(uint64_t size, uint64_t flip, uint64_t zero)
{
    char *wal = damaged_copy(written < size ? written : size, size, flip, zero);
    int fd = open(wal, O_RDONLY);
    CHECK(fd >= 0, "open %s", wal);
    unsigned char *before = malloc(size + 1), *after = malloc(size + 1);
    CHECK(before && after && pread(fd, before, size, 0) == (ssize_t)size, "read");
    close(fd);
    struct chime_store_config cfg = { .path = scratch };
    struct chime__backend *b;
    int err = chime__journal_ops.open(&b, &cfg, &no_sink);
    CHECK(err == -EBADMSG, "flip %lld, zeros %lld, size %llu: open returned %d (%s), not -EBADMSG",
          (long long)(flip == UINT64_MAX ? -1 : (int64_t)flip),
          (long long)(zero == UINT64_MAX ? -1 : (int64_t)zero), (unsigned long long)size, err,
          chime_strerror(err));
    fd = open(wal, O_RDONLY);
    struct stat st;
    CHECK(fd >= 0 && fstat(fd, &st) == 0 && (uint64_t)st.st_size == size &&
              pread(fd, after, size, 0) == (ssize_t)size && !memcmp(before, after, size),
          "open changed the damaged segment");
    close(fd);
    char *run = path_in(scratch, "run-0000000000000001-0000000000000001.run");
    CHECK(access(run, F_OK) != 0, "open wrote a run of a damaged segment");
    free(run);
    free(before);
    free(after);
    free(wal);
}

#define refused(flip, zero) refused_sized(seg_size, flip, zero) /* the whole segment */

static int records_to_cut(void)
{
    const char *env = getenv("CHIME_TORN_RECORDS");
    int k = env ? atoi(env) : 3;
    return k < 1 ? 1 : k > N ? N : k;
}

/* The first of the group commits before the last one that the refusal tests damage: at least one,
 * whatever CHIME_TORN_RECORDS says (with 1, as the valgrind stage sets, a loop from
 * N - records_to_cut() to N - 1 would damage none and assert nothing). */
static int first_before_last(void)
{
    int first = N - records_to_cut();
    return first > N - 2 ? N - 2 : first;
}

/* Records wholly before offset x. */
static int whole_before(uint64_t x)
{
    int n = 0;
    while (n < N && rec_end[n] <= x)
        n++;
    return n;
}

/* Cut short anywhere, even at a record's end, the segment was cut after the fact, not by a crash:
 * it read as a torn tail, and every group commit after the cut, acknowledged, was lost without an
 * error (found in review; its header now records its size). */
static void a_newest_segment_cut_short_refuses_to_open_ebadmsg(void)
{
    for (uint64_t x = rec_start[N - records_to_cut()]; x <= written; x++)
        refused_sized(x, UINT64_MAX, UINT64_MAX);
}

static void a_torn_preallocated_tail_keeps_every_record_before_the_zeros(void)
{
    for (uint64_t x = rec_start[N - records_to_cut()]; x <= written; x++) {
        /* Zeros over a record's own zero padding leave it whole. */
        int keep = whole_before(x);
        if (keep < N) {
            int intact = 1;
            for (uint64_t b = x; b < rec_end[keep]; b++)
                intact &= segment[b] == 0;
            keep += intact;
        }
        trial(x, seg_size, UINT64_MAX, UINT64_MAX, keep);
    }
}

static void a_flipped_byte_in_the_last_group_commit_keeps_every_record_before_it(void)
{
    /* Its record or its MARK: the MARK names the record's offset, not after the damage. */
    for (uint64_t x = rec_start[N - 1]; x < written; x++)
        trial(written, seg_size, x, UINT64_MAX, x < rec_end[N - 1] ? N - 1 : N);
}

static void zeros_in_the_last_group_commit_are_a_torn_tail(void)
{
    /* A crash can leave them: the last batch's pages reach the disk in any order before its sync,
     * and a page never written reads as zeros. Nothing after the zeros was acknowledged. */
    trial(written, seg_size, UINT64_MAX, rec_start[N - 1], N - 1);
    trial(written, seg_size, UINT64_MAX, rec_end[N - 1], N); /* over its MARK */
}

static void a_flipped_byte_before_the_last_group_commit_refuses_to_open_ebadmsg(void)
{
    /* Bug B: a later group commit's MARK, whole, shows that the damaged one had been synced, and
     * acknowledged: before, open took the damage for a torn tail and dropped the puts after it. */
    for (int i = first_before_last(); i < N - 1; i++)
        for (uint64_t x = rec_start[i]; x < rec_start[i + 1]; x++)
            refused(x, UINT64_MAX);
}

/* The last group commit's MARK did not reach the disk (a crash cut it), its record did: that
 * record was written only once the group commit before it had been synced, so damage in that one
 * is damage, as it is before a later whole MARK (its own MARK, whole, shows where it ended). Open
 * took it for a torn tail and dropped its acknowledged put. */
static void damage_before_a_later_group_commit_whose_mark_was_cut_refuses_to_open_ebadmsg(void)
{
    for (uint64_t x = rec_start[N - 2]; x < rec_end[N - 2]; x += 7) {
        free(damaged_copy(rec_end[N - 1], seg_size, x, UINT64_MAX));
        struct chime_store_config cfg = { .path = scratch };
        struct chime__backend *b;
        int err = chime__journal_ops.open(&b, &cfg, &no_sink);
        CHECK(err == -EBADMSG, "flip %llu in the last but one group commit, the last one's MARK "
              "cut: open returned %d (%s), not -EBADMSG", (unsigned long long)x, err,
              chime_strerror(err));
    }
    /* Without the damage, the same cut is a torn tail that keeps every put (the last one's record
     * is whole; its MARK is not needed). */
    trial(rec_end[N - 1], seg_size, UINT64_MAX, UINT64_MAX, N);
}

static void zeros_before_the_last_group_commit_refuse_to_open_ebadmsg(void)
{
    /* A lost write in the middle of the newest segment: over a record, over a MARK. */
    for (int i = first_before_last(); i < N - 1; i++) {
        refused(UINT64_MAX, rec_start[i]);
        refused(UINT64_MAX, rec_end[i]);
    }
    refused(UINT64_MAX, rec_start[0]);
}

/* Segment `number` in scratch: a header, then records of keys late0..late(n-1) and their group
 * commit's MARK, which says the segment before ended at `written` (wal-1, whole), then zeros to
 * 4096 bytes, as if preallocated; 8 zero bytes over the start of its first record if
 * `zero_first`. */
static void late_segment(uint64_t number, int n, int zero_first)
{
    unsigned char seg[4096] = { 0 };
    chime__header_encode(seg, &(struct chime__file_header){ .lo = number, .hi = number,
                                                             .next_version = 1000, .salt = 1,
                                                             .size = sizeof seg });
    size_t off = CHIME__FILE_HEADER;
    for (int i = 0; i < n; i++) {
        char key[8];
        snprintf(key, sizeof key, "late%d", i);
        struct chime__rec r = { .type = CHIME__PUT, .key_len = (uint16_t)strlen(key), .key = key,
                                .payload_len = 1, .payload = "x", .version = 1000 + (uint64_t)i,
                                .due = 1 };
        chime__rec_encode(seg + off, &r);
        off += chime__rec_len(r.key_len, r.payload_len);
    }
    if (n)
        chime__mark_encode(seg + off, &(struct chime__batch_mark){
                                          .start = CHIME__FILE_HEADER, .segment = number, .salt = 1,
                                          .prev_end = written });
    if (zero_first)
        memset(seg + CHIME__FILE_HEADER, 0, 8);
    char name[CHIME__NAME_MAX];
    chime__wal_name(name, number);
    char *path = path_in(scratch, name);
    int fd = open(path, O_CREAT | O_WRONLY | O_TRUNC, 0644);
    CHECK(fd >= 0, "create %s", name);
    CHECK(pwrite(fd, seg, sizeof seg, 0) == (ssize_t)sizeof seg, "write");
    close(fd);
    free(path);
}

/* In scratch: wal-1 holding the N records with `n` bytes at `at` overwritten by `bytes` (none if
 * n is 0), then zeros to seg_size (its preallocated space); wal-2 as late_segment(2, late,
 * zero_first); and HEAD naming 2, as the writer left it when it moved to wal-2. */
static void two_segments(uint64_t at, const unsigned char *bytes, size_t n, int late,
                         int zero_first)
{
    tmpdir_remove(scratch);
    mkdir(scratch, 0755);
    int dfd = open(scratch, O_RDONLY | O_DIRECTORY);
    struct chime__head h;
    CHECK(dfd >= 0 && chime__head_open(dfd, 2, &h) == 0, "HEAD naming 2");
    chime__head_close(&h);
    close(dfd);
    char *wal1 = path_in(scratch, "wal-0000000000000001.log");
    int fd = open(wal1, O_CREAT | O_WRONLY, 0644);
    CHECK(fd >= 0, "create");
    CHECK(pwrite(fd, segment, written, 0) == (ssize_t)written, "write");
    CHECK(n == 0 || pwrite(fd, bytes, n, (off_t)at) == (ssize_t)n, "damage");
    CHECK(ftruncate(fd, (off_t)seg_size) == 0, "size");
    close(fd);
    free(wal1);
    late_segment(2, late, zero_first);
}

/* two_segments with the damage: open must refuse with -EBADMSG and leave both files for an
 * operator to look at. */
static void expect_damage(uint64_t at, const unsigned char *bytes, size_t n, int late,
                          int zero_first)
{
    two_segments(at, bytes, n, late, zero_first);
    char *wal1 = path_in(scratch, "wal-0000000000000001.log");
    char *wal2 = path_in(scratch, "wal-0000000000000002.log");
    struct chime_store_config cfg = { .path = scratch };
    struct chime__backend *b;
    int err = chime__journal_ops.open(&b, &cfg, &no_sink);
    CHECK(err == -EBADMSG, "damage at %llu of wal-1 (%zu bytes), wal-2 with %d records%s: open "
          "returned %d (%s), not -EBADMSG", (unsigned long long)at, n, late,
          zero_first ? ", the first zeroed" : "", err, err ? chime_strerror(err) : "ok");
    if (err == 0)
        chime__journal_ops.close(b);
    /* Nothing was changed: both segments are still there. */
    CHECK(access(wal1, F_OK) == 0 && access(wal2, F_OK) == 0, "open changed a damaged journal");
    free(wal1);
    free(wal2);
}

static int count_keys(void *ctx, const struct chime__timer *t)
{
    int *n = ctx; /* n[0]: keys k*, n[1]: keys late* */
    n[t->key_len >= 4 && !memcmp(t->key, "late", 4)]++;
    return 0;
}

static void two_segments_undamaged_open_with_every_record(void)
{
    /* The setup of the damage tests below, without the damage: so that their refusals are the
     * damage's doing (they were not: without HEAD, every one of them was refused as a journal
     * missing its head, damaged or not; found in review). */
    two_segments(0, NULL, 0, 2, 0);
    struct chime_store_config cfg = { .path = scratch };
    struct chime__backend *b;
    CHECK_EQ(chime__journal_ops.open(&b, &cfg, &no_sink), 0);
    int n[2] = { 0, 0 };
    CHECK_EQ(chime__journal_ops.load(b, 0, UINT64_MAX, count_keys, n), 0);
    CHECK(n[0] == N && n[1] == 2, "%d of the %d puts of wal-1 and %d of the 2 of wal-2", n[0], N,
          n[1]);
    CHECK_EQ(chime__journal_ops.close(b), 0);
}

static void a_lost_write_of_a_sealed_segments_last_batch_refuses_to_open_ebadmsg(void)
{
    /* wal-1's last group commit (its record and MARK) reads back as zeros up to the segment's end,
     * like unused space; wal-2's MARK says wal-1 ended after it (found in review: open kept going
     * without it). Also the last batch's MARK alone lost. */
    static const unsigned char zeros[4096];
    expect_damage(rec_start[N - 1], zeros, written - rec_start[N - 1], 1, 0);
    expect_damage(rec_end[N - 1], zeros, written - rec_end[N - 1], 1, 0);
}

static void damage_in_a_sealed_segment_refuses_to_open_ebadmsg(void)
{
    /* wal-1 damaged in its middle, then wal-2 with a whole record: not a torn tail. */
    unsigned char c = segment[rec_start[N / 2] + 20] ^ 0x01;
    expect_damage(rec_start[N / 2] + 20, &c, 1, 1, 0);
}

static void zeros_in_a_sealed_segment_refuse_to_open_ebadmsg(void)
{
    /* A lost write reads back as zeros: at a record boundary they look like the segment's unused
     * space, but the rest of a record follows them, so they are damage, not the segment's end. */
    static const unsigned char zeros[8] = { 0 };
    const int at[] = { 0, 1, N / 2, N - 1 };
    for (size_t i = 0; i < sizeof at / sizeof at[0]; i++)
        expect_damage(rec_start[at[i]], zeros, sizeof zeros, 1, 0);
}

static void a_written_segment_after_a_torn_one_refuses_to_open_ebadmsg(void)
{
    /* wal-1 looks torn (a flipped byte); wal-2 was written to, so wal-1 had been synced whole:
     * whatever wal-2 holds after its header, a record whose start reads as zeros or one that is not
     * whole, it makes wal-1's flaw damage. */
    unsigned char c = segment[rec_start[N / 2] + 20] ^ 0x01;
    expect_damage(rec_start[N / 2] + 20, &c, 1, 2, 1); /* zeros, then a whole record */
    expect_damage(rec_start[N / 2] + 20, &c, 1, 1, 1); /* zeros, then the rest of a record */
}

/* HEAD names a segment only once the writer moved there, after syncing the segment before it whole
 * (head.h): a torn point in a segment below the head is damage, though the next segment holds
 * nothing yet (a seal, then a crash before the next commit). wal-1's last group commit with a
 * flipped byte, then its MARK zeroed, and an empty wal-2 that HEAD names: each put was
 * acknowledged, open cut them as a torn tail. */
static void a_torn_point_in_a_segment_below_the_head_refuses_to_open_ebadmsg(void)
{
    unsigned char c = segment[rec_start[N - 1] + 20] ^ 0x01;
    expect_damage(rec_start[N - 1] + 20, &c, 1, 0, 0);
    static const unsigned char zeros[8];
    expect_damage(rec_end[N - 1] + 16, zeros, sizeof zeros, 0, 0);
}

static void a_flipped_byte_in_the_newest_segment_header_refuses_to_open_ebadmsg(void)
{
    /* The header was synced before any record went in: records after a bad header are damage.
     * Taken for a creation a crash cut, the segment was deleted with every acknowledged put in it
     * (found in review). */
    for (uint64_t x = 0; x < CHIME__FILE_HEADER; x++)
        refused(x, UINT64_MAX);
}

/* wal-2 being made ahead when the process died, HEAD naming wal-1: its header half written (whole
 * 0), or whole and half its zeros. Open keeps wal-1's puts and deletes wal-2. */
static void creation_cut(int whole)
{
    free(damaged_copy(written, seg_size, UINT64_MAX, UINT64_MAX));
    unsigned char seg[4096] = { 0 };
    chime__header_encode(seg, &(struct chime__file_header){ .lo = 2, .hi = 2, .next_version = 1000,
                                                             .salt = 1, .size = 2 * sizeof seg });
    if (!whole)
        memset(seg + CHIME__FILE_HEADER / 2, 0, CHIME__FILE_HEADER / 2);
    char *wal2 = path_in(scratch, "wal-0000000000000002.log");
    int fd = open(wal2, O_CREAT | O_WRONLY | O_TRUNC, 0644);
    CHECK(fd >= 0 && pwrite(fd, seg, sizeof seg, 0) == (ssize_t)sizeof seg, "write wal-2");
    close(fd);
    struct chime_store_config cfg = { .path = scratch };
    struct chime__backend *b;
    CHECK_EQ(chime__journal_ops.open(&b, &cfg, &no_sink), 0);
    int seen[N] = { 0 };
    CHECK_EQ(chime__journal_ops.load(b, 0, UINT64_MAX, collect, seen), 0);
    for (int i = 0; i < N; i++)
        CHECK(seen[i], "k%d lost", i);
    CHECK_EQ(chime__journal_ops.close(b), 0);
    /* The log starts again at number 2: a wal-2 is there, made anew with a whole header. */
    unsigned char now[CHIME__FILE_HEADER];
    struct chime__file_header h;
    fd = open(wal2, O_RDONLY);
    CHECK(fd >= 0 && pread(fd, now, sizeof now, 0) == (ssize_t)sizeof now, "read wal-2");
    close(fd);
    CHECK(chime__header_decode(now, &h) == 0 && h.lo == 2 && h.size != 2 * sizeof seg,
          "wal-2's header is still the cut one");
    free(wal2);
}

static void a_segment_whose_creation_a_crash_cut_is_dropped(void)
{
    creation_cut(0);
    creation_cut(1);
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

/* A damaged run that contains another run's range (a merge whose inputs a crash left behind), and a
 * segment it covers: open refuses with -EBADMSG and deletes neither the contained run nor the
 * covered segment before it has read the run that replaces them (found in review: they were deleted
 * first, so the evidence, and the only good copy of their records, went with a failed open). */
static void a_damaged_replacing_run_refuses_to_open_and_keeps_what_it_replaces(void)
{
    tmpdir_remove(scratch);
    tmpdir_copy(dir, scratch);
    struct chime_store_config cfg = { .path = scratch };
    struct chime__backend *b;
    CHECK_EQ(chime__journal_ops.open(&b, &cfg, &no_sink), 0); /* wal-1 becomes run 1-1 */
    CHECK_EQ(chime__journal_ops.close(b), 0);
    char *run = path_in(scratch, "run-0000000000000001-0000000000000001.run");
    char *wider = path_in(scratch, "run-0000000000000001-0000000000000002.run");
    char *wal = path_in(scratch, "wal-0000000000000001.log");
    char *orig_wal = path_in(dir, "wal-0000000000000001.log");
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "cp '%s' '%s' && cp '%s' '%s'", run, wider, orig_wal, wal);
    CHECK_EQ(system(cmd), 0); /* the wider run's header names 1-1: damage by the name's account */
    CHECK_EQ(chime__journal_ops.open(&b, &cfg, &no_sink), -EBADMSG);
    CHECK(access(run, F_OK) == 0, "the contained run was deleted by an open that failed");
    CHECK(access(wal, F_OK) == 0, "the covered segment was deleted by an open that failed");
    free(run);
    free(wider);
    free(wal);
    free(orig_wal);
}

static const struct tap_test tests[] = {
    { "a_newest_segment_cut_short_refuses_to_open_ebadmsg",
      a_newest_segment_cut_short_refuses_to_open_ebadmsg },
    { "a_torn_preallocated_tail_keeps_every_record_before_the_zeros",
      a_torn_preallocated_tail_keeps_every_record_before_the_zeros },
    { "a_flipped_byte_in_the_last_group_commit_keeps_every_record_before_it",
      a_flipped_byte_in_the_last_group_commit_keeps_every_record_before_it },
    { "zeros_in_the_last_group_commit_are_a_torn_tail", zeros_in_the_last_group_commit_are_a_torn_tail },
    { "a_flipped_byte_before_the_last_group_commit_refuses_to_open_ebadmsg",
      a_flipped_byte_before_the_last_group_commit_refuses_to_open_ebadmsg },
    { "zeros_before_the_last_group_commit_refuse_to_open_ebadmsg",
      zeros_before_the_last_group_commit_refuse_to_open_ebadmsg },
    { "two_segments_undamaged_open_with_every_record",
      two_segments_undamaged_open_with_every_record },
    { "a_lost_write_of_a_sealed_segments_last_batch_refuses_to_open_ebadmsg",
      a_lost_write_of_a_sealed_segments_last_batch_refuses_to_open_ebadmsg },
    { "damage_in_a_sealed_segment_refuses_to_open_ebadmsg",
      damage_in_a_sealed_segment_refuses_to_open_ebadmsg },
    { "zeros_in_a_sealed_segment_refuse_to_open_ebadmsg",
      zeros_in_a_sealed_segment_refuse_to_open_ebadmsg },
    { "a_written_segment_after_a_torn_one_refuses_to_open_ebadmsg",
      a_written_segment_after_a_torn_one_refuses_to_open_ebadmsg },
    { "a_flipped_byte_in_the_newest_segment_header_refuses_to_open_ebadmsg",
      a_flipped_byte_in_the_newest_segment_header_refuses_to_open_ebadmsg },
    { "damage_before_a_later_group_commit_whose_mark_was_cut_refuses_to_open_ebadmsg",
      damage_before_a_later_group_commit_whose_mark_was_cut_refuses_to_open_ebadmsg },
    { "a_torn_point_in_a_segment_below_the_head_refuses_to_open_ebadmsg",
      a_torn_point_in_a_segment_below_the_head_refuses_to_open_ebadmsg },
    { "a_segment_whose_creation_a_crash_cut_is_dropped",
      a_segment_whose_creation_a_crash_cut_is_dropped },
    { "damage_in_a_run_refuses_to_open_ebadmsg", damage_in_a_run_refuses_to_open_ebadmsg },
    { "a_damaged_replacing_run_refuses_to_open_and_keeps_what_it_replaces",
      a_damaged_replacing_run_refuses_to_open_and_keeps_what_it_replaces },
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
