/* SPDX-License-Identifier: MIT */
/*
 * Group commits marked in the log (lib/store/wal_writer.c, "MARKS"; format.md, "The reader's
 * rules"), with batches of many records, written through the journal with CHIME_SYNC_INTERVAL and
 * an interval of an hour, so that each backend sync is exactly one group commit of what was put
 * since the last:
 *   - the last group commit spans pages; a page of it that never reached the disk reads as zeros
 *     while its MARK, after it, did reach it: still a torn tail, every record before the page kept;
 *   - a group commit too big for what is left of a segment goes partly in the next, each part with
 *     its own MARK, the next segment's naming where the first ended; the journal reopens with every
 *     record;
 *   - a new segment is written with zeros to its size, none of its extents left unwritten;
 *   - a journal whose files are of format version 1 (before MARKs) is refused with -EPROTO, and
 *     nothing in it is changed;
 *   - a lost last commit of a segment that a load seals is refused, however late the log's sealed
 *     callback comes.
 * test_store_torn.c cuts and flips the single-record group commits of a segment at every byte.
 */
#include "journal_util.h"

#include <fcntl.h>
#include <linux/fiemap.h>
#include <linux/fs.h> /* FS_IOC_FIEMAP */
#include <sys/ioctl.h>

#include "store/checksum.h"
#include "store/format.h"
#include "store/io.h"
#include "store/wal_impl.h"

static char *dir;

static char *path_in(const char *d, const char *name)
{
    char *p;
    CHECK(asprintf(&p, "%s/%s", d, name) >= 0, "asprintf");
    return p;
}

/* Key i's payload: `len` bytes that name it. */
static size_t payload_of(int i, size_t len, unsigned char *out)
{
    for (size_t k = 0; k < len; k++)
        out[k] = (unsigned char)(i * 31 + (int)k);
    return len;
}

static size_t payload_len_of[64];

static void put_key(struct chime__backend *b, int i, size_t len)
{
    static unsigned char payload[CHIME_STORE_PAYLOAD_MAX];
    char key[16];
    snprintf(key, sizeof key, "m%d", i);
    payload_len_of[i] = payload_of(i, len, payload);
    struct chime__put p = { key, strlen(key), payload, len, wall_ns() + 3600 * SEC, 0, 0, 0 };
    struct chime__put_result res;
    uint64_t ticket;
    CHECK_EQ(chime__journal_ops.put(b, &p, &res, &ticket), 0);
}

static int collect(void *ctx, const struct chime__timer *t)
{
    int *seen = ctx, i;
    char key[16] = { 0 };
    static unsigned char want[CHIME_STORE_PAYLOAD_MAX];
    memcpy(key, t->key, t->key_len < 15 ? t->key_len : 15);
    CHECK(sscanf(key, "m%d", &i) == 1 && i >= 0 && i < 64 && !seen[i], "key %s", key);
    seen[i] = 1;
    size_t n = payload_of(i, payload_len_of[i], want);
    CHECK(n == t->payload_len && !memcmp(want, t->payload, n), "payload of m%d", i);
    return 0;
}

/* Open the journal in `dir`; expect exactly the keys m0..m(n-1) for which keep[i] (all if !keep). */
static void expect_keys(int n, const int *keep)
{
    struct chime__backend *b = journal_open_hourly(dir);
    int seen[64] = { 0 };
    CHECK_EQ(chime__journal_ops.load(b, 0, UINT64_MAX, collect, seen), 0);
    for (int i = 0; i < 64; i++)
        CHECK(seen[i] == (i < n && (!keep || keep[i])), "m%d %s", i, seen[i] ? "kept" : "lost");
    CHECK_EQ(chime__journal_ops.close(b), 0);
}

/* A segment file's contents, walked: its records' offsets and ends, its MARKs' offsets and starts. */
struct walk {
    unsigned char *buf;
    uint64_t size;
    struct chime__file_header h;
    uint64_t rec[64], rec_end[64], mark[64], mark_start[64], mark_prev_end[64];
    int nrec, nmark;
};

static void walk_segment(const char *name, struct walk *w)
{
    char *path = path_in(dir, name);
    int fd = open(path, O_RDONLY);
    CHECK(fd >= 0, "%s is there", name);
    struct stat st;
    CHECK(fstat(fd, &st) == 0, "stat");
    memset(w, 0, sizeof *w);
    w->size = (uint64_t)st.st_size;
    CHECK(w->size >= CHIME__FILE_HEADER, "%s holds %llu bytes, less than a header", name,
          (unsigned long long)w->size);
    w->buf = malloc(w->size);
    CHECK(w->buf && pread(fd, w->buf, w->size, 0) == (ssize_t)w->size, "read");
    close(fd);
    free(path);
    CHECK_EQ(chime__header_decode(w->buf, &w->h), 0);
    for (uint64_t off = CHIME__FILE_HEADER;;) {
        struct chime__rec r;
        uint32_t len;
        enum chime__decoded d = chime__rec_decode(w->buf + off, w->size - off, &r, &len);
        if (d == CHIME__REC_END)
            break;
        CHECK(d == CHIME__REC_WHOLE && w->nrec < 64 && w->nmark < 64, "%s at %llu", name,
              (unsigned long long)off);
        if (r.type == CHIME__MARK) {
            struct chime__batch_mark m;
            CHECK(chime__mark_valid(&r, &w->h, off, &m), "a MARK of %s", name);
            w->mark[w->nmark] = off;
            w->mark_prev_end[w->nmark] = m.prev_end;
            w->mark_start[w->nmark++] = m.start;
        } else {
            w->rec[w->nrec] = off;
            w->rec_end[w->nrec++] = off + len;
        }
        off += len;
    }
}

static void a_lost_page_of_the_last_group_commit_before_its_whole_mark_is_a_torn_tail(void)
{
    /* Three group commits of one put, then one of eight puts of 1500 bytes: about 12 KiB, three
     * pages and more. */
    dir = tmpdir_make("marks");
    CHECK(dir != NULL, "mkdtemp");
    struct chime__backend *b = journal_open_hourly(dir);
    for (int i = 0; i < 3; i++) {
        put_key(b, i, 20);
        CHECK_EQ(chime__journal_ops.sync(b), 0);
    }
    for (int i = 3; i < 11; i++)
        put_key(b, i, 1500);
    CHECK_EQ(chime__journal_ops.sync(b), 0);
    CHECK_EQ(chime__journal_ops.close(b), 0);

    struct walk w;
    walk_segment("wal-0000000000000001.log", &w);
    CHECK(w.nrec == 11 && w.nmark == 4, "11 records in 4 group commits: %d in %d", w.nrec, w.nmark);
    uint64_t start = w.mark_start[3], mark = w.mark[3];
    CHECK(start == w.rec[3] && mark == w.rec_end[10], "the last MARK names its commit's first record");

    char *orig = tmpdir_make("marks-orig"), *path = path_in(dir, "wal-0000000000000001.log");
    CHECK(orig != NULL, "mkdtemp");
    tmpdir_copy(dir, orig); /* each round opens (and so flushes) a copy of the journal as written */
    int pages = 0;
    for (uint64_t page = (start + 4095) & ~(uint64_t)4095; page + 4096 <= mark; page += 4096) {
        /* That page never reached the disk: zeros, then the rest of the batch, then its MARK. */
        tmpdir_remove(dir);
        tmpdir_copy(orig, dir);
        int fd = open(path, O_WRONLY);
        CHECK(fd >= 0, "open");
        CHECK(pwrite(fd, (const unsigned char[4096]){ 0 }, 4096, (off_t)page) == 4096, "lose");
        close(fd);
        int keep[64] = { 0 };
        for (int i = 0; i < 11; i++)
            keep[i] = w.rec_end[i] <= page;
        CHECK(!keep[10] && keep[2], "records follow the lost page, and precede it");
        expect_keys(11, keep);
        pages++;
    }
    CHECK(pages >= 2, "the last group commit spans %d whole pages", pages);
    tmpdir_remove(dir);
    tmpdir_copy(orig, dir);
    expect_keys(11, NULL); /* as written: every record */
    free(path);
    free(w.buf);
    tmpdir_remove(orig);
    free(orig);
    tmpdir_remove(dir);
    free(dir);
}

/* A segment is written to its full size when it is created (wal_writer.c, SEGMENTS): its blocks are
 * allocated and hold zeros after its records, and none of its extents is unwritten, so that a
 * commit into it need not log their conversion. FIEMAP shows the extents where the file system
 * supports it (ext4, xfs, btrfs); elsewhere only the size, the blocks and the zeros are checked. */
static void a_new_segment_is_written_with_zeros_to_its_size(void)
{
    dir = tmpdir_make("marks");
    CHECK(dir != NULL, "mkdtemp");
    struct chime__backend *b = journal_open_hourly(dir);
    put_key(b, 0, 20);
    CHECK_EQ(chime__journal_ops.sync(b), 0);
    struct walk w;
    walk_segment("wal-0000000000000001.log", &w);
    CHECK(w.nrec == 1 && w.nmark == 1, "one record and its MARK: %d and %d", w.nrec, w.nmark);
    CHECK(w.size >= 1 << 20, "the segment holds %llu bytes, not its size (1 MiB at least)",
          (unsigned long long)w.size);
    for (uint64_t off = w.mark[0] + CHIME__MARK_LEN; off < w.size; off++)
        CHECK(w.buf[off] == 0, "byte %llu after the MARK is %u, not zero", (unsigned long long)off,
              w.buf[off]);
    char *path = path_in(dir, "wal-0000000000000001.log");
    int fd = open(path, O_RDONLY);
    CHECK(fd >= 0, "open");
    struct stat st;
    CHECK(fstat(fd, &st) == 0, "stat");
    CHECK((uint64_t)st.st_blocks * 512 >= w.size, "%llu bytes allocated of %llu",
          (unsigned long long)st.st_blocks * 512, (unsigned long long)w.size);
    enum { EXTENTS = 64 };
    struct fiemap *map = calloc(1, sizeof *map + EXTENTS * sizeof map->fm_extents[0]);
    CHECK(map != NULL, "calloc");
    *map = (struct fiemap){ .fm_length = FIEMAP_MAX_OFFSET, .fm_flags = FIEMAP_FLAG_SYNC,
                            .fm_extent_count = EXTENTS };
    if (ioctl(fd, FS_IOC_FIEMAP, map) == 0) {
        CHECK(map->fm_mapped_extents > 0, "no extent mapped");
        for (unsigned i = 0; i < map->fm_mapped_extents; i++)
            CHECK(!(map->fm_extents[i].fe_flags & FIEMAP_EXTENT_UNWRITTEN),
                  "extent %u (at %llu, %llu bytes) is unwritten", i,
                  (unsigned long long)map->fm_extents[i].fe_logical,
                  (unsigned long long)map->fm_extents[i].fe_length);
    } else {
        CHECK(errno == EOPNOTSUPP || errno == ENOTTY, "FIEMAP: %s", strerror(errno));
        printf("# FIEMAP not supported here: the extents were not checked\n");
    }
    free(map);
    close(fd);
    free(path);
    free(w.buf);
    CHECK_EQ(chime__journal_ops.close(b), 0);
    tmpdir_remove(dir);
    free(dir);
}

/* The fault hook, failing nothing: each time the store opens wal-1 it is copied to wal-1.saved
 * (the last open is the flusher's, reading it sealed, before it deletes it). */
static int save_wal_1(void *ctx, enum chime__io_op op, const char *name, int fd)
{
    (void)ctx;
    (void)fd;
    if (op != CHIME_IO_OPEN || !name || strcmp(name, "wal-0000000000000001.log"))
        return 0;
    char *from = path_in(dir, name), *to = path_in(dir, "wal-1.saved");
    file_copy(from, to);
    free(from);
    free(to);
    return 0;
}

static void a_group_commit_split_across_two_segments_reopens_whole(void)
{
    /* 1 MiB segments (the smallest, and the first): 17 puts of 65 452-byte payloads in one group
     * commit do not fit after a small one; two more small ones follow in the next segment. The sizes
     * are chosen so that a 17th record would fit in wal-1 but for its MARK: 64 + 80 + 64 (the small
     * commit), then 16 records of 65 520 bytes leave 65 520 + 48 bytes, so the writer, which keeps
     * room for the MARK, stops after 15. */
    dir = tmpdir_make("marks");
    CHECK(dir != NULL, "mkdtemp");
    chime__io_set_fault(save_wal_1, NULL);
    struct chime__backend *b = journal_open_hourly(dir);
    put_key(b, 0, 10);
    CHECK_EQ(chime__journal_ops.sync(b), 0);
    for (int i = 1; i < 18; i++)
        put_key(b, i, 65452);
    CHECK_EQ(chime__journal_ops.sync(b), 0);
    for (int i = 18; i < 20; i++) {
        put_key(b, i, 100);
        CHECK_EQ(chime__journal_ops.sync(b), 0);
    }
    /* Close stops the flusher without waiting for it to flush what is sealed: wait until it has
     * read wal-1 (sealed by the big commit) so that the hook's last copy is that sealed read, not
     * the empty file of wal-1's creation (seen once in CI under ASan). */
    for (;;) {
        pthread_mutex_lock(&b->lock);
        uint64_t flushed = b->flushed;
        pthread_mutex_unlock(&b->lock);
        if (flushed >= 1)
            break;
        sleep_ms(1); /* a poll: the flusher thread makes the run */
    }
    CHECK_EQ(chime__journal_ops.close(b), 0);
    chime__io_set_fault(NULL, NULL);

    struct walk one, two;
    walk_segment("wal-1.saved", &one);
    walk_segment("wal-0000000000000002.log", &two);
    /* wal-1: the small commit, then the big one's first part, each with its MARK, and the part
     * ends where a record and a MARK no longer fit. */
    CHECK(one.nmark == 2 && one.mark_start[0] == CHIME__FILE_HEADER &&
              one.mark_start[1] == one.rec[1] && one.nrec == 16,
          "wal-1: %d records, %d MARKs", one.nrec, one.nmark);
    CHECK(one.size == 1u << 20 && one.mark[1] + CHIME__MARK_LEN + (one.rec_end[1] - one.rec[1]) > one.size,
          "wal-1's part of the big commit stopped where no record and MARK fit in its 1 MiB: "
          "its MARK ends at %llu of %llu", (unsigned long long)(one.mark[1] + CHIME__MARK_LEN),
          (unsigned long long)one.size);
    /* wal-2: the rest of the big commit from its first byte, then the two small ones. */
    CHECK(two.nrec == 20 - one.nrec && two.nmark == 3 && two.mark_start[0] == CHIME__FILE_HEADER,
          "wal-2: %d records, %d MARKs", two.nrec, two.nmark);
    /* Each MARK says where the segment before its own ended: wal-2's, where wal-1's last MARK
     * ends; wal-1's, nothing (the first segment since the open). */
    for (int i = 0; i < one.nmark; i++)
        CHECK_EQ(one.mark_prev_end[i], 0);
    for (int i = 0; i < two.nmark; i++)
        CHECK_EQ(two.mark_prev_end[i], one.mark[1] + CHIME__MARK_LEN);
    free(one.buf);
    free(two.buf);
    char *saved = path_in(dir, "wal-1.saved");
    unlink(saved);
    free(saved);
    expect_keys(20, NULL);
    tmpdir_remove(dir);
    free(dir);
}

/* Rewrite the header of file `name` in dir as format version 1 wrote it (version 1, no salt). */
static void make_version_1(const char *name)
{
    char *path = path_in(dir, name);
    int fd = open(path, O_RDWR);
    CHECK(fd >= 0, "%s is there", name);
    unsigned char h[CHIME__FILE_HEADER];
    CHECK(pread(fd, h, sizeof h, 0) == (ssize_t)sizeof h, "read");
    memset(h + 8, 0, 4);
    h[8] = 1;
    memset(h + 48, 0, 8);
    uint32_t crc = chime__crc_mask(chime__crc32c(0, h, 60));
    for (int i = 0; i < 4; i++)
        h[60 + i] = (unsigned char)(crc >> (8 * i));
    CHECK(pwrite(fd, h, sizeof h, 0) == (ssize_t)sizeof h, "write");
    close(fd);
    free(path);
}

static int64_t ack(void *ctx, const struct chime_fire *f)
{
    (void)ctx;
    (void)f;
    return 0;
}

/* The bytes of file `name` in dir (*size of them). */
static unsigned char *slurp(const char *name, uint64_t *size)
{
    char *path = path_in(dir, name);
    int fd = open(path, O_RDONLY);
    struct stat st;
    CHECK(fd >= 0 && fstat(fd, &st) == 0, "%s is there", name);
    *size = (uint64_t)st.st_size;
    unsigned char *buf = malloc(*size ? *size : 1);
    CHECK(buf && pread(fd, buf, *size, 0) == (ssize_t)*size, "read %s", name);
    close(fd);
    free(path);
    return buf;
}

/* chime_store_open on dir: -EPROTO, and the file `name` is byte for byte as it was. */
static void refused_as_version_1(const char *name)
{
    uint64_t n_before, n_after;
    unsigned char *before = slurp(name, &n_before);
    struct chime_store_config cfg = { .path = dir };
    chime_store *s = NULL;
    int err = chime_store_open(&s, &cfg, ack, NULL);
    CHECK(err == -EPROTO, "a journal of format version 1 (%s): open returned %d (%s), not -EPROTO",
          name, err, chime_strerror(err));
    unsigned char *after = slurp(name, &n_after);
    CHECK(n_before == n_after && !memcmp(before, after, n_before), "open changed %s", name);
    free(before);
    free(after);
}

/* A fresh dir holding a journal of one put, in its first segment (not flushed). */
static void one_put_journal(void)
{
    dir = tmpdir_make("marks");
    CHECK(dir != NULL, "mkdtemp");
    struct chime_store_config cfg = { .path = dir };
    chime_store *s;
    CHECK_EQ(chime_store_open(&s, &cfg, ack, NULL), 0);
    CHECK_EQ(chime_store_put(s, "k", 1, "p", 1, wall_ns() + 3600 * SEC), 0);
    CHECK_EQ(chime_store_close(s), 0);
}

static void a_journal_of_format_version_1_is_refused_eproto(void)
{
    one_put_journal();
    struct chime_store_config cfg = { .path = dir };
    chime_store *s;
    /* A segment of version 1 (what this session wrote, not yet flushed). */
    make_version_1("wal-0000000000000001.log");
    refused_as_version_1("wal-0000000000000001.log");
    tmpdir_remove(dir);
    mkdir(dir, 0755);
    /* A run of version 1: the next open flushed the segment into one. */
    CHECK_EQ(chime_store_open(&s, &cfg, ack, NULL), 0);
    CHECK_EQ(chime_store_put(s, "k", 1, "p", 1, wall_ns() + 3600 * SEC), 0);
    CHECK_EQ(chime_store_close(s), 0);
    CHECK_EQ(chime_store_open(&s, &cfg, ack, NULL), 0);
    CHECK_EQ(chime_store_close(s), 0);
    make_version_1("run-0000000000000001-0000000000000001.run");
    refused_as_version_1("run-0000000000000001-0000000000000001.run");
    tmpdir_remove(dir);
    free(dir);
}

/* Found in review: formats 1 to 3 all predate the file HEAD (format.md), so a journal they wrote
 * has none, and open read it as a damaged journal (-EBADMSG, "run chime-store verify") before
 * looking at any file's version. Refused as another format now, with nothing changed: not even a
 * *.tmp file (a run not yet renamed) is dropped. */
static void a_journal_of_an_older_format_without_head_is_refused_eproto(void)
{
    one_put_journal();
    make_version_1("wal-0000000000000001.log");
    char path[600];
    snprintf(path, sizeof path, "%s/HEAD", dir);
    CHECK_EQ(unlink(path), 0);
    snprintf(path, sizeof path, "%s/run-0000000000000001-0000000000000001.run.tmp", dir);
    int fd = open(path, O_CREAT | O_WRONLY, 0644);
    CHECK(fd >= 0, "create %s", path);
    close(fd);
    refused_as_version_1("wal-0000000000000001.log");
    CHECK(access(path, F_OK) == 0, "the refused open dropped %s", path);
    tmpdir_remove(dir);
    free(dir);
}

/* The log's sealed callback for segment 1, late: as a writer thread descheduled between sealing
 * and calling back could be, it comes only once the journal counts the segment as sealed (a load's
 * flush_all does, after the seal returns) and the flusher has flushed it or failed. */
static struct chime__backend *late_journal;

static void late_sealed(void *ctx, uint64_t segment, uint64_t used)
{
    struct chime__backend *j = late_journal;
    pthread_mutex_lock(&j->lock);
    while (segment == 1 && !j->error && (j->sealed < 1 || j->flushed < 1))
        pthread_cond_wait(&j->done, &j->lock);
    pthread_mutex_unlock(&j->lock);
    chime__journal_sealed(ctx, segment, used);
}

static int count_timer(void *ctx, const struct chime__timer *t)
{
    (void)t;
    (*(int *)ctx)++;
    return 0;
}

/* A sealed segment's last group commit lost (zeros where its records and MARK were) is refused
 * when a load seals and flushes the segment, as at an open: the flusher must know how much of the
 * segment holds records before it reads it, or zeros to the end read as the end. */
static void a_lost_last_commit_is_refused_when_a_load_seals_its_segment(void)
{
    dir = tmpdir_make("marks-late");
    CHECK(dir != NULL, "mkdtemp");
    struct chime__backend *b = journal_open_hourly(dir);
    late_journal = b;
    b->wal->cfg.sealed = late_sealed; /* the writer reads it when it seals, after this put */
    put_key(b, 0, 8);
    CHECK_EQ(chime__journal_ops.sync(b), 0); /* acknowledged */
    char *path = path_in(dir, "wal-0000000000000001.log");
    int fd = open(path, O_WRONLY);
    CHECK(fd >= 0, "open");
    size_t lost = chime__rec_len(2, 8) + 64; /* the record ("m0", 8 bytes) and its MARK */
    CHECK(pwrite(fd, (const unsigned char[4096]){ 0 }, lost, CHIME__FILE_HEADER) == (ssize_t)lost,
          "lose");
    close(fd);
    int rc = chime__journal_flush_all(b), n = 0;
    if (rc == 0)
        rc = chime__journal_ops.load(b, 0, UINT64_MAX, count_timer, &n);
    CHECK(rc == -EBADMSG, "the lost commit went unseen: %s, %d timers", chime_strerror(rc), n);
    chime__journal_ops.close(b);
    free(path);
    tmpdir_remove(dir);
    free(dir);
}

static const struct tap_test tests[] = {
    { "a_lost_page_of_the_last_group_commit_before_its_whole_mark_is_a_torn_tail",
      a_lost_page_of_the_last_group_commit_before_its_whole_mark_is_a_torn_tail },
    { "a_new_segment_is_written_with_zeros_to_its_size",
      a_new_segment_is_written_with_zeros_to_its_size },
    { "a_group_commit_split_across_two_segments_reopens_whole",
      a_group_commit_split_across_two_segments_reopens_whole },
    { "a_journal_of_format_version_1_is_refused_eproto",
      a_journal_of_format_version_1_is_refused_eproto },
    { "a_journal_of_an_older_format_without_head_is_refused_eproto",
      a_journal_of_an_older_format_without_head_is_refused_eproto },
    { "a_lost_last_commit_is_refused_when_a_load_seals_its_segment",
      a_lost_last_commit_is_refused_when_a_load_seals_its_segment },
};

int main(void)
{
    return tap_run(tests, (int)(sizeof tests / sizeof tests[0]));
}
