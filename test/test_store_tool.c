/* SPDX-License-Identifier: MIT */
/*
 * chime-store, the operator's tool (tools/chime-store.c), on a journal this test builds through the
 * API: list (pending by due time), dead, count, and verify on an intact journal, a torn tail, zeros
 * before records in a sealed segment, a segment's damaged header, a sealed segment's lost last
 * group commit (on a log of its own), a damaged run, a lost HEAD and a lost run. The tool's path is
 * the first argument (meson passes it); and a timer that never fires (due UINT64_MAX) listed as
 * "never". Its snapshot of the files it lists: test_store_snapshot.c.
 */
#include "journal_util.h"

#include <fcntl.h>
#include <sys/wait.h>

#include "store/format.h"
#include "store/wal.h"

static const char *tool;
static char *dir;
static struct recorder rec;

/* Run the tool; its output into out (NUL-terminated). Return: its exit status. */
static int run_tool(const char *cmd, char *out, size_t cap)
{
    int status = run_line(out, cap, "'%s' %s '%s' 2>&1", tool, cmd, dir);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static int64_t bury_x(struct recorder *r, const struct chime_fire *f)
{
    (void)r;
    return f->key_len == 1 && ((const char *)f->key)[0] == 'x' ? CHIME_STORE_DEAD : 0;
}

static void build(void)
{
    dir = tmpdir_make("tool");
    CHECK(dir != NULL, "mkdtemp");
    rec.reply = bury_x;
    struct chime_store_config cfg = { .path = dir };
    chime_store *s;
    uint64_t far = wall_ns() + 7 * 86400 * SEC;
    for (int round = 0; round < 2; round++) { /* two sessions: a run, then a segment */
        CHECK_EQ(chime_store_open(&s, &cfg, recorder_handler, &rec), 0);
        if (round == 0) {
            CHECK_EQ(chime_store_put(s, "order-2", 7, "p2", 2, far + 2 * SEC), 0);
            CHECK_EQ(chime_store_put(s, "x", 1, "dead body", 9, 0), 0);
            CHECK_EQ(chime_store_put(s, "gone", 4, "p", 1, far), 0);
            CHECK_EQ(chime_store_cancel(s, "gone", 4), 0);
            recorder_wait(&rec, 1);
            struct chime_store_stats st;
            do { /* buried: its record appended once the handler's outcome is */
                sleep_ms(1);
                chime_store_stats(s, &st);
            } while (st.dead != 1 || st.running);
        } else {
            CHECK_EQ(chime_store_put(s, "order-1", 7, "p1", 2, far + 1 * SEC), 0);
            CHECK_EQ(chime_store_put(s, "order\n3", 7, "p3", 2, far + 3 * SEC), 0);
        }
        CHECK_EQ(chime_store_close(s), 0);
    }
}

static void list_shows_pending_timers_by_due_time_and_dead_shows_dead_letters(void)
{
    char out[4096];
    CHECK_EQ(run_tool("list", out, sizeof out), 0);
    char *a = strstr(out, " order-1 "), *b = strstr(out, " order-2 "), *c = strstr(out, " order\\x0a3 ");
    CHECK(a && b && c && a < b && b < c, "by due time, keys escaped:\n%s", out);
    CHECK(!strstr(out, " gone ") && !strstr(out, " x "), "cancelled or dead in the list:\n%s", out);
    CHECK_EQ(run_tool("dead", out, sizeof out), 0);
    CHECK(strstr(out, " 1 x 9\n") != NULL, "the dead letter (1 attempt, 9 bytes):\n%s", out);
    CHECK_EQ(run_tool("count", out, sizeof out), 0);
    CHECK(strstr(out, "pending 3\ndead 1\n") != NULL, "%s", out);
}

/* A put at UINT64_MAX is kept and never fires (chime_store.h): listed as "never", not as a date in
 * the year 2554, as the PostgreSQL listing prints it too (test_pg_tool). */
static void a_timer_that_never_fires_lists_as_never(void)
{
    char *shared = dir;
    dir = tmpdir_make("never");
    CHECK(dir != NULL, "mkdtemp");
    struct chime_store_config cfg = { .path = dir };
    chime_store *s;
    CHECK_EQ(chime_store_open(&s, &cfg, recorder_handler, &rec), 0);
    CHECK_EQ(chime_store_put(s, "forever", 7, "p", 1, UINT64_MAX), 0);
    CHECK_EQ(chime_store_close(s), 0);
    char out[4096];
    CHECK_EQ(run_tool("list", out, sizeof out), 0);
    const char *line = strstr(out, "never 18446744073709551615 0 forever 1\n");
    CHECK(line && (line == out || line[-1] == '\n'), "list:\n%s", out);
    tmpdir_remove(dir);
    free(dir);
    dir = shared;
}

/* Flip byte `at` of wal-2 (twice: back as it was). */
static void flip_wal_2(uint64_t at)
{
    char *wal;
    CHECK(asprintf(&wal, "%s/wal-0000000000000002.log", dir) >= 0, "asprintf");
    int fd = open(wal, O_RDWR);
    unsigned char c;
    CHECK(fd >= 0 && pread(fd, &c, 1, (off_t)at) == 1, "read %s", wal);
    c ^= 0x20;
    CHECK(pwrite(fd, &c, 1, (off_t)at) == 1, "flip");
    close(fd);
    free(wal);
}

static void verify_names_damage_before_a_later_group_commit_in_the_newest_segment_and_fails(void)
{
    /* wal-2 holds two group commits (a put each, with its MARK). A flipped byte in the first: the
     * second's MARK shows the first had been synced, so it is damage, not a torn tail. */
    char out[4096];
    flip_wal_2(CHIME__FILE_HEADER + 20);
    CHECK_EQ(run_tool("verify", out, sizeof out), 1);
    CHECK(strstr(out, "wal-0000000000000002.log: DAMAGED at offset 64: the group commit marked at "
                      "offset ") != NULL, "wal-2 named with the damage's offset:\n%s", out);
    CHECK(strstr(out, "\nDAMAGED") != NULL, "%s", out);
    flip_wal_2(CHIME__FILE_HEADER + 20);
    CHECK_EQ(run_tool("verify", out, sizeof out), 0);
    CHECK(strstr(out, "wal-0000000000000002.log: ") && strstr(out, " 2 records in 2 group commits, ok\n"),
          "%s", out);
}

static void verify_names_a_damaged_header_of_a_written_segment_and_fails(void)
{
    /* wal-2's header with a flipped byte, its records after it: damage, as open says (-EBADMSG),
     * not a creation a crash cut. */
    char out[4096];
    flip_wal_2(20);
    CHECK_EQ(run_tool("verify", out, sizeof out), 1);
    CHECK(strstr(out, "wal-0000000000000002.log: DAMAGED: its header is not whole") != NULL,
          "wal-2 named:\n%s", out);
    flip_wal_2(20);
    CHECK_EQ(run_tool("verify", out, sizeof out), 0);
}

static void verify_passes_an_intact_journal_and_tolerates_a_torn_tail(void)
{
    char out[4096];
    CHECK_EQ(run_tool("verify", out, sizeof out), 0);
    CHECK(strstr(out, "\nok\n") != NULL, "%s", out);
    /* Cut the last record of the segment in half: a torn tail (it is the last group commit's; each
     * put was its own, a record and its MARK). */
    char *wal;
    CHECK(asprintf(&wal, "%s/wal-0000000000000002.log", dir) >= 0, "asprintf");
    int fd = open(wal, O_RDWR);
    CHECK(fd >= 0, "segment %s", wal);
    unsigned char buf[4096];
    CHECK(pread(fd, buf, sizeof buf, 0) > 0, "read");
    uint32_t len1 = buf[68] | buf[69] << 8, off2 = 64 + len1 + CHIME__MARK_LEN; /* the second's */
    uint32_t len2 = buf[off2 + 4] | buf[off2 + 5] << 8;
    memset(buf, 0, sizeof buf);
    CHECK(pwrite(fd, buf, len2 / 2, off2 + len2 / 2) == (ssize_t)(len2 / 2), "tear");
    close(fd);
    free(wal);
    CHECK_EQ(run_tool("verify", out, sizeof out), 0);
    CHECK(strstr(out, "torn tail") != NULL, "%s", out);
    CHECK_EQ(run_tool("count", out, sizeof out), 0);
    CHECK(strstr(out, "pending 2\n") != NULL, "the torn record is not counted:\n%s", out);
}

static void verify_names_zeros_before_records_in_a_sealed_segment_and_fails(void)
{
    /* The first record of wal-2 reads back as zeros (a lost write), and wal-3 holds a record: wal-2
     * had been synced whole before wal-3 was written to, so its zeros, which data follows, are
     * damage, not its end (lib/store/format.md, "The reader's rules"). */
    char *wal;
    CHECK(asprintf(&wal, "%s/wal-0000000000000002.log", dir) >= 0, "asprintf");
    int fd = open(wal, O_RDWR);
    CHECK(fd >= 0, "segment %s", wal);
    CHECK(pwrite(fd, (const unsigned char[8]){ 0 }, 8, CHIME__FILE_HEADER) == 8, "zeros");
    close(fd);
    free(wal);
    unsigned char three[CHIME__FILE_HEADER + 128] = { 0 };
    chime__header_encode(three, &(struct chime__file_header){ .lo = 3, .hi = 3, .next_version = 1000,
                                                              .salt = 1 });
    struct chime__rec r = { .type = CHIME__PUT, .key_len = 4, .key = "late", .payload_len = 1,
                            .payload = "x", .version = 1000, .due = 1 };
    chime__rec_encode(three + CHIME__FILE_HEADER, &r);
    CHECK(asprintf(&wal, "%s/wal-0000000000000003.log", dir) >= 0, "asprintf");
    fd = open(wal, O_CREAT | O_WRONLY, 0644);
    CHECK(fd >= 0, "segment %s", wal);
    CHECK(pwrite(fd, three, sizeof three, 0) == (ssize_t)sizeof three, "write");
    close(fd);
    free(wal);
    char out[4096];
    CHECK_EQ(run_tool("verify", out, sizeof out), 1);
    const char *line = strstr(out, "wal-0000000000000002.log: "), *eol = line ? strchr(line, '\n') : NULL;
    const char *what = line ? strstr(line, " 0 records in 0 group commits, then not a whole record at offset 64\n") : NULL;
    CHECK(what && strchr(what, '\n') == eol, "wal-2 named with the zeros' offset:\n%s", out);
    CHECK(strstr(out, "\nDAMAGED") != NULL, "%s", out);
}

/* A log of its own, written by the log's writer alone: wal-1 with two group commits, sealed, then
 * wal-2 with one. Return: its directory; *end1 where wal-1's records end, *last1 where its last
 * group commit begins. */
static char *two_segment_log(uint64_t *end1, uint64_t *last1)
{
    char *d = tmpdir_make("tool-log");
    CHECK(d != NULL, "mkdtemp");
    int dfd = open(d, O_RDONLY | O_DIRECTORY);
    CHECK(dfd >= 0, "open %s", d);
    struct chime__wal_config cfg = { .dir = dfd, .segment = 1, .next_version = 1,
                                     .interval_ns = 3600 * SEC, .segment_bytes = 1u << 20 };
    struct chime__wal *w;
    CHECK_EQ(chime__wal_open(&w, &cfg), 0);
    uint64_t end = 0, sealed = 0;
    for (int i = 0; i < 3; i++) {
        char key[8];
        snprintf(key, sizeof key, "log%d", i);
        struct chime__rec r = { .type = CHIME__PUT, .key_len = (uint16_t)strlen(key), .key = key,
                                .payload_len = 1, .payload = "x", .due = wall_ns() + 3600 * SEC };
        CHECK_EQ(chime__wal_append(w, &r, 1, &end), 0);
        CHECK_EQ(chime__wal_sync(w), 0); /* a group commit each */
        if (i == 0)
            *last1 = CHIME__FILE_HEADER + chime__rec_len(r.key_len, 1) + CHIME__MARK_LEN;
        if (i == 1) {
            *end1 = *last1 + chime__rec_len(r.key_len, 1) + CHIME__MARK_LEN;
            CHECK_EQ(chime__wal_seal(w, &sealed, NULL), 0);
            CHECK_EQ(sealed, 1);
        }
    }
    CHECK_EQ(chime__wal_close(w), 0);
    close(dfd);
    return d;
}

static void verify_names_a_lost_last_batch_of_a_sealed_segment_and_fails(void)
{
    uint64_t end1 = 0, last1 = 0;
    char *d = two_segment_log(&end1, &last1);
    char out[4096], *saved = dir;
    dir = d;
    CHECK_EQ(run_tool("verify", out, sizeof out), 0);
    CHECK(strstr(out, "\nok\n") != NULL, "%s", out);
    /* wal-1's last group commit lost: zeros up to its end, as if never used */
    char *wal;
    CHECK(asprintf(&wal, "%s/wal-0000000000000001.log", d) >= 0, "asprintf");
    int fd = open(wal, O_RDWR);
    static const unsigned char zeros[4096];
    CHECK(fd >= 0 && pwrite(fd, zeros, end1 - last1, (off_t)last1) == (ssize_t)(end1 - last1),
          "zero %s", wal);
    close(fd);
    free(wal);
    CHECK_EQ(run_tool("verify", out, sizeof out), 1);
    char want[200];
    snprintf(want, sizeof want, "wal-0000000000000002.log: DAMAGED: its group commits say the "
             "segment before it ended at offset %llu, where its records end at %llu",
             (unsigned long long)end1, (unsigned long long)last1);
    CHECK(strstr(out, want) != NULL, "wanted \"%s\" in:\n%s", want, out);
    dir = saved;
    tmpdir_remove(d);
    free(d);
}

/* list and count read every segment, not only up to the first one's end: on two_segment_log's
 * journal (wal-1 sealed with log0 and log1, not full; wal-2 with log2) they show all three. */
static void list_and_count_read_every_segment(void)
{
    uint64_t end1 = 0, last1 = 0;
    char *d = two_segment_log(&end1, &last1);
    char out[4096], *saved = dir;
    dir = d;
    CHECK_EQ(run_tool("count", out, sizeof out), 0);
    CHECK(strstr(out, "pending 3\n") != NULL, "every segment counted:\n%s", out);
    CHECK_EQ(run_tool("list", out, sizeof out), 0);
    CHECK(strstr(out, " log0 ") && strstr(out, " log1 ") && strstr(out, " log2 "), "%s", out);
    dir = saved;
    tmpdir_remove(d);
    free(d);
}

/* Overwrite n bytes of d's segment `number` at `at` with `bytes` (zeros if NULL). */
static void damage_segment(const char *d, int number, uint64_t at, const unsigned char *bytes,
                           size_t n)
{
    static const unsigned char zeros[4096];
    char *wal;
    CHECK(asprintf(&wal, "%s/wal-%016x.log", d, number) >= 0, "asprintf");
    int fd = open(wal, O_RDWR);
    CHECK(fd >= 0 && pwrite(fd, bytes ? bytes : zeros, n, (off_t)at) == (ssize_t)n, "damage %s",
          wal);
    close(fd);
    free(wal);
}

/* Journal d is damaged: verify names `damaged` and fails, list fails, and open refuses it
 * (-EBADMSG), as they must agree; then d is removed. */
static void expect_refused(char *d, const char *damaged)
{
    char out[4096], *saved = dir;
    dir = d;
    CHECK_EQ(run_tool("verify", out, sizeof out), 1);
    CHECK(strstr(out, damaged) != NULL, "%s", out);
    CHECK_EQ(run_tool("list", out, sizeof out), 1);
    chime_store *s = NULL;
    struct chime_store_config cfg = { .path = d };
    CHECK_EQ(chime_store_open(&s, &cfg, recorder_handler, &rec), -EBADMSG);
    dir = saved;
    tmpdir_remove(d);
    free(d);
}

/* list and count fail (exit 1) on every journal that open refuses, as they do for a lost file:
 * damage that verify names in a segment is no less a loss. On two_segment_log's journal: wal-1's
 * last group commit lost (zeros, which only wal-2's MARK tells from unused space), and a flipped
 * byte in wal-1's first record (a sealed segment, followed by one written to). */
static void list_and_count_refuse_a_journal_with_a_damaged_segment(void)
{
    for (int variant = 0; variant < 2; variant++) {
        uint64_t end1 = 0, last1 = 0;
        char *d = two_segment_log(&end1, &last1);
        char out[4096], *saved = dir;
        dir = d;
        if (variant == 0)
            damage_segment(d, 1, last1, NULL, end1 - last1);
        else
            damage_segment(d, 1, CHIME__FILE_HEADER + 20, (const unsigned char[]){ 0x5a }, 1);
        CHECK_EQ(run_tool("verify", out, sizeof out), 1);
        chime_store *s = NULL;
        struct chime_store_config cfg = { .path = d };
        CHECK_EQ(chime_store_open(&s, &cfg, recorder_handler, &rec), -EBADMSG);
        CHECK_EQ(run_tool("count", out, sizeof out), 1);
        CHECK_EQ(run_tool("list", out, sizeof out), 1);
        CHECK(strstr(out, " log2 ") == NULL, "variant %d: list printed a damaged journal:\n%s",
              variant, out);
        dir = saved;
        tmpdir_remove(d);
        free(d);
    }
}

/* A log sealed after two group commits, and closed before the next segment got any: HEAD names
 * wal-2, empty. A flipped byte in wal-1's last record: wal-1 had been synced whole before HEAD
 * named wal-2, so it is damage (open refuses it), not a torn tail. */
static void verify_and_list_name_a_torn_point_below_the_head(void)
{
    char *d = tmpdir_make("tool-head");
    CHECK(d != NULL, "mkdtemp");
    int dfd = open(d, O_RDONLY | O_DIRECTORY);
    CHECK(dfd >= 0, "open %s", d);
    struct chime__wal_config cfg = { .dir = dfd, .segment = 1, .next_version = 1,
                                     .interval_ns = 3600 * SEC, .segment_bytes = 1u << 20 };
    struct chime__wal *w;
    CHECK_EQ(chime__wal_open(&w, &cfg), 0);
    uint64_t end = 0, sealed = 0, last = CHIME__FILE_HEADER;
    for (int i = 0; i < 2; i++) {
        char key[8];
        snprintf(key, sizeof key, "log%d", i);
        struct chime__rec r = { .type = CHIME__PUT, .key_len = (uint16_t)strlen(key), .key = key,
                                .payload_len = 1, .payload = "x", .due = wall_ns() + 3600 * SEC };
        CHECK_EQ(chime__wal_append(w, &r, 1, &end), 0);
        CHECK_EQ(chime__wal_sync(w), 0);
        if (i == 0)
            last += chime__rec_len(r.key_len, 1) + CHIME__MARK_LEN;
    }
    CHECK_EQ(chime__wal_seal(w, &sealed, NULL), 0);
    CHECK_EQ(chime__wal_close(w), 0);
    close(dfd);
    char out[4096], *saved = dir;
    dir = d;
    CHECK_EQ(run_tool("verify", out, sizeof out), 0);
    dir = saved;
    damage_segment(d, 1, last + 20, (const unsigned char[]){ 0x5a }, 1);
    expect_refused(d, "wal-0000000000000001.log: DAMAGED at offset");
}

/* HEAD names a segment only once its header is synced (lib/store/head.h): the newest segment cut
 * to nothing while HEAD names it is a lost file, as a deleted one is, not a creation a crash cut.
 * Open refused a deleted one but accepted this one, and its acknowledged records were gone. */
static void a_newest_segment_cut_to_nothing_that_head_names_is_damage(void)
{
    uint64_t end1 = 0, last1 = 0;
    char *d = two_segment_log(&end1, &last1), *wal;
    CHECK(asprintf(&wal, "%s/wal-0000000000000002.log", d) >= 0, "asprintf");
    CHECK(truncate(wal, 0) == 0, "truncate %s", wal);
    free(wal);
    expect_refused(d, "wal-0000000000000002.log: DAMAGED");
}

/* A segment is created whole and synced before any record goes in (lib/store/format.md), so one
 * of another size that was written to was cut (or grown) after the fact. wal-2 cut inside its only
 * group commit read as a torn tail: open succeeded without that commit, acknowledged. */
static void a_newest_segment_cut_part_way_is_damage(void)
{
    uint64_t end1 = 0, last1 = 0;
    char *d = two_segment_log(&end1, &last1), *wal;
    CHECK(asprintf(&wal, "%s/wal-0000000000000002.log", d) >= 0, "asprintf");
    CHECK(truncate(wal, CHIME__FILE_HEADER + 8) == 0, "truncate %s", wal);
    free(wal);
    expect_refused(d, "wal-0000000000000002.log: DAMAGED: it is 72 bytes, created as 1048576, and "
                      "records follow its header");
}

static void verify_names_a_damaged_run_and_fails(void)
{
    char *run;
    CHECK(asprintf(&run, "%s/run-0000000000000001-0000000000000001.run", dir) >= 0, "asprintf");
    int fd = open(run, O_RDWR);
    CHECK(fd >= 0, "run %s", run);
    unsigned char c;
    CHECK(pread(fd, &c, 1, 100) == 1, "read");
    c ^= 0x40;
    CHECK(pwrite(fd, &c, 1, 100) == 1, "write");
    close(fd);
    free(run);
    char out[4096];
    CHECK_EQ(run_tool("verify", out, sizeof out), 1);
    CHECK(strstr(out, "run-0000000000000001-0000000000000001.run: DAMAGED at offset 64") != NULL,
          "%s", out);
    CHECK_EQ(run_tool("nonsense", out, sizeof out), 2);
}

/* A lost HEAD: verify says so and fails, and list refuses; with HEAD back, verify no longer says so
 * (the journal stays damaged by the tests before). */
static void verify_names_a_lost_head_and_list_refuses(void)
{
    char *head, *aside;
    CHECK(asprintf(&head, "%s/HEAD", dir) >= 0 && asprintf(&aside, "%s/HEAD.aside", dir) >= 0,
          "asprintf");
    CHECK(rename(head, aside) == 0, "rename %s", head);
    char out[4096];
    CHECK_EQ(run_tool("verify", out, sizeof out), 1);
    CHECK(strstr(out, "MISSING: HEAD") != NULL, "%s", out);
    CHECK_EQ(run_tool("list", out, sizeof out), 1);
    CHECK(strstr(out, "order-1") == NULL, "list printed a journal without HEAD:\n%s", out);
    CHECK(rename(aside, head) == 0, "rename %s", aside);
    run_tool("verify", out, sizeof out);
    CHECK(strstr(out, "MISSING") == NULL, "%s", out);
    free(head);
    free(aside);
}

/* A directory with no HEAD, LOCK, segment or run is not a journal: every command says so and
 * fails (each read any directory, /etc say, as an empty journal, and verify said ok). */
static void a_directory_that_is_no_journal_is_refused(void)
{
    char *other = tmpdir_make("notjournal"), *file, out[1024];
    CHECK(other != NULL, "mkdtemp");
    CHECK(asprintf(&file, "%s/notes.txt", other) >= 0, "asprintf");
    FILE *f = fopen(file, "w");
    CHECK(f && fputs("not a journal\n", f) >= 0 && fclose(f) == 0, "write %s", file);
    const char *cmds[] = { "list", "dead", "count", "verify" };
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        int status = run_line(out, sizeof out, "'%s' %s '%s' 2>&1", tool, cmds[i], other);
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 1, "%s: status %d:\n%s", cmds[i],
              status, out);
        CHECK(strstr(out, ": not a journal (no HEAD, LOCK, segment or run in it)\n") != NULL,
              "%s:\n%s", cmds[i], out);
    }
    tmpdir_remove(other);
    free(file);
    free(other);
}

/* (Runs last: it deletes the run.) A lost run leaves segment 1 in no file: verify names the missing
 * numbers and fails, and list refuses rather than list what is left as if it were all. */
static void verify_names_a_lost_run_and_list_refuses(void)
{
    char *run;
    CHECK(asprintf(&run, "%s/run-0000000000000001-0000000000000001.run", dir) >= 0, "asprintf");
    CHECK(unlink(run) == 0, "unlink %s", run);
    free(run);
    char out[4096];
    CHECK_EQ(run_tool("verify", out, sizeof out), 1);
    CHECK(strstr(out, "MISSING: segments 1 to 1 are in no file") != NULL, "%s", out);
    CHECK(strstr(out, "\nDAMAGED") != NULL, "%s", out);
    CHECK_EQ(run_tool("list", out, sizeof out), 1);
    CHECK(strstr(out, "order-1") == NULL, "list printed timers of a journal missing a file:\n%s", out);
}

static const struct tap_test tests[] = {
    { "list_shows_pending_timers_by_due_time_and_dead_shows_dead_letters",
      list_shows_pending_timers_by_due_time_and_dead_shows_dead_letters },
    { "verify_names_damage_before_a_later_group_commit_in_the_newest_segment_and_fails",
      verify_names_damage_before_a_later_group_commit_in_the_newest_segment_and_fails },
    { "verify_names_a_damaged_header_of_a_written_segment_and_fails",
      verify_names_a_damaged_header_of_a_written_segment_and_fails },
    { "verify_passes_an_intact_journal_and_tolerates_a_torn_tail",
      verify_passes_an_intact_journal_and_tolerates_a_torn_tail },
    { "verify_names_zeros_before_records_in_a_sealed_segment_and_fails",
      verify_names_zeros_before_records_in_a_sealed_segment_and_fails },
    { "verify_names_a_lost_last_batch_of_a_sealed_segment_and_fails",
      verify_names_a_lost_last_batch_of_a_sealed_segment_and_fails },
    { "verify_names_a_damaged_run_and_fails", verify_names_a_damaged_run_and_fails },
    { "list_and_count_read_every_segment", list_and_count_read_every_segment },
    { "a_timer_that_never_fires_lists_as_never", a_timer_that_never_fires_lists_as_never },
    { "verify_and_list_name_a_torn_point_below_the_head",
      verify_and_list_name_a_torn_point_below_the_head },
    { "list_and_count_refuse_a_journal_with_a_damaged_segment",
      list_and_count_refuse_a_journal_with_a_damaged_segment },
    { "a_newest_segment_cut_to_nothing_that_head_names_is_damage",
      a_newest_segment_cut_to_nothing_that_head_names_is_damage },
    { "a_newest_segment_cut_part_way_is_damage", a_newest_segment_cut_part_way_is_damage },
    { "verify_names_a_lost_head_and_list_refuses", verify_names_a_lost_head_and_list_refuses },
    { "a_directory_that_is_no_journal_is_refused", a_directory_that_is_no_journal_is_refused },
    { "verify_names_a_lost_run_and_list_refuses", verify_names_a_lost_run_and_list_refuses },
};

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: test_store_tool PATH-TO-chime-store\n");
        return 2;
    }
    tool = argv[1];
    recorder_init(&rec, NULL);
    build();
    int rc = tap_run(tests, (int)(sizeof tests / sizeof tests[0]));
    tmpdir_remove(dir);
    free(dir);
    recorder_free(&rec);
    return rc;
}
