/* SPDX-License-Identifier: MIT */
/*
 * The journal's backlog (lib/store/compact.c, THROTTLE): while the flusher is held, puts are held
 * back before the segments waiting for it pile up, counting the records the log still holds in
 * memory as well as the sealed segments; once the flusher goes on, the held puts complete and
 * none is lost. The fault hook holds the flusher (its first run's .tmp file is not created until
 * the test lets it) and counts the segment files that exist at once. Then the unit the throttle
 * counts the log's records in, on the log alone: never smaller than the segment being written.
 */
#include "journal_util.h"

#include <fcntl.h>

#include "store/wal.h"

#define KEYS 16000 /* 64 MB of records: 64 segments, were none held back */
#define PAYLOAD 4000 /* 4 KB records: a 1 MiB segment holds about 260 */

static char *dir;

/* The hook's state besides the gate (journal_util.h): the segment files (wal-*) that exist. */
static pthread_mutex_t hook_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t hook_cond = PTHREAD_COND_INITIALIZER; /* hold_writes' (the second test) */
static char segments[64][32];
static int nsegments;

static int is_segment(const char *name)
{
    return name && !strncmp(name, "wal-", 4) && strlen(name) < sizeof segments[0];
}

static int hold_flusher(void *ctx, enum chime__io_op op, const char *name, int fd)
{
    (void)ctx;
    (void)fd;
    flusher_gate(op, name);
    pthread_mutex_lock(&hook_lock);
    if (op == CHIME_IO_OPEN && is_segment(name)) {
        int seen = 0;
        for (int i = 0; i < nsegments; i++)
            seen |= !strcmp(segments[i], name);
        if (!seen && nsegments < 64)
            strcpy(segments[nsegments++], name);
    } else if (op == CHIME_IO_UNLINK && is_segment(name)) {
        for (int i = 0; i < nsegments; i++)
            if (!strcmp(segments[i], name)) {
                if (i != --nsegments) /* the last one takes its place */
                    memcpy(segments[i], segments[nsegments], sizeof segments[i]);
                break;
            }
    }
    pthread_mutex_unlock(&hook_lock);
    return 0;
}

static void payload_of(int i, unsigned char *out)
{
    for (int k = 0; k < PAYLOAD; k++)
        out[k] = (unsigned char)(i * 7 + k);
}

static _Atomic int putter_done;

static void *putter(void *arg)
{
    struct chime__backend *b = arg;
    static unsigned char payload[PAYLOAD];
    uint64_t due = wall_ns() + 3600 * SEC;
    for (int i = 0; i < KEYS; i++) {
        char key[16];
        snprintf(key, sizeof key, "b%d", i);
        payload_of(i, payload);
        struct chime__put p = { key, strlen(key), payload, PAYLOAD, due, 0, 0, 0 };
        struct chime__put_result res;
        uint64_t ticket;
        CHECK_EQ(chime__journal_ops.admit(b), 0); /* as the logic does before a user's put */
        CHECK_EQ(chime__journal_ops.put(b, &p, &res, &ticket), 0);
    }
    atomic_store(&putter_done, 1);
    return NULL;
}

static int collect(void *ctx, const struct chime__timer *t)
{
    int *seen = ctx, i;
    char key[16] = { 0 };
    static unsigned char want[PAYLOAD];
    memcpy(key, t->key, t->key_len < 15 ? t->key_len : 15);
    CHECK(sscanf(key, "b%d", &i) == 1 && i >= 0 && i < KEYS && !seen[i], "key %s", key);
    seen[i] = 1;
    payload_of(i, want);
    CHECK(t->payload_len == PAYLOAD && !memcmp(want, t->payload, PAYLOAD), "payload of b%d", i);
    return 0;
}

static void puts_wait_for_a_held_flusher_before_segments_pile_up(void)
{
    dir = tmpdir_make("backlog");
    CHECK(dir != NULL, "mkdtemp");
    chime__io_set_fault(hold_flusher, NULL);
    struct chime__backend *b = journal_open_hourly(dir);
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, putter, b), 0);
    flusher_gate_wait_throttled(b, &putter_done); /* held back then, the put waits for a flush */
    /* Held there, what the log holds unwritten goes to segments of its own once written, the
     * flusher held or not: it counts with the files. The throttle let the last put through when
     * the sealed segments waiting plus the whole segments of unwritten records numbered at most
     * BACKLOG_MAX (it reads them so as to count a byte twice rather than miss it). Since then: that
     * put's record (one more segment at most, as a record is smaller than one), the records of the
     * segment being written then, which the throttle does not count (one), the segment being
     * written now and one created ahead of time (two), and one being created while the writer
     * writes on: BACKLOG_MAX + 5 in all. The flusher held at its first flush, no segment is bigger
     * than the first (1 MiB). Counting only the sealed segments, 16 to 25 were seen here. */
    uint64_t seg = chime__wal_segment_bytes(b->wal), unwritten = chime__wal_unwritten(b->wal);
    pthread_mutex_lock(&hook_lock);
    int admitted = nsegments + (int)((unwritten + seg - 1) / seg);
    printf("# held back with %d segment files and %llu bytes unwritten\n", nsegments,
           (unsigned long long)unwritten);
    CHECK(admitted <= CHIME__JOURNAL_BACKLOG_MAX + 5,
          "admitted: %d segment files and %llu bytes unwritten, %d segments in all", nsegments,
          (unsigned long long)unwritten, admitted);
    pthread_mutex_unlock(&hook_lock);
    flusher_gate_release();
    CHECK_EQ(pthread_join(t, NULL), 0);
    CHECK_EQ(chime__journal_ops.sync(b), 0);
    CHECK_EQ(chime__journal_ops.close(b), 0);
    chime__io_set_fault(NULL, NULL);

    b = journal_open_hourly(dir);
    static int seen[KEYS];
    CHECK_EQ(chime__journal_ops.load(b, 0, UINT64_MAX, collect, seen), 0);
    for (int i = 0; i < KEYS; i++)
        CHECK(seen[i], "b%d lost", i);
    CHECK_EQ(chime__journal_ops.close(b), 0);
    tmpdir_remove(dir);
    free(dir);
}

/* Holds the log's writer at its first write of records until writes_go (the next test). */
static int writes_go;

static int hold_writes(void *ctx, enum chime__io_op op, const char *name, int fd)
{
    (void)ctx;
    (void)name;
    (void)fd;
    pthread_mutex_lock(&hook_lock);
    while (op == CHIME_IO_WRITE && !writes_go)
        pthread_cond_wait(&hook_cond, &hook_lock);
    pthread_mutex_unlock(&hook_lock);
    return 0;
}

/* The throttle's wait ends with a flush, and only a sealed segment brings one (THROTTLE). Records
 * the log holds unwritten are counted in whole segments of the larger of the current segment's size
 * and the next one's: counted in the next size alone, when segments shrink (the live data fell),
 * records that all fit in the current segment could count as more than BACKLOG_MAX segments, and
 * writing them would seal nothing: the wait would have nothing to end it. On the log alone, with
 * no flusher: a first segment of 16 MiB, the next ones of 1 MiB, and the writer held before it
 * writes any record (it writes at once beyond 4 MB). */
static void records_are_counted_in_segments_no_smaller_than_the_one_they_go_to(void)
{
    char *wdir = tmpdir_make("backlog-unit");
    CHECK(wdir != NULL, "mkdtemp");
    int dfd = open(wdir, O_RDONLY | O_DIRECTORY);
    CHECK(dfd >= 0, "open %s", wdir);
    const uint64_t big = 16u << 20, small = 1u << 20;
    struct chime__wal_config cfg = { .dir = dfd, .segment = 1, .next_version = 1,
                                     .interval_ns = 3600 * SEC, .segment_bytes = big };
    struct chime__wal *w;
    CHECK_EQ(chime__wal_open(&w, &cfg), 0);
    chime__io_set_fault(hold_writes, NULL); /* after the open's writes: the header, the zeros */
    chime__wal_set_segment_bytes(w, small);
    CHECK_EQ(chime__wal_segment_bytes(w), big); /* the current segment's size, not the next's */

    /* 5 MiB of records: more than BACKLOG_MAX (4) segments of the next size */
    static unsigned char payload[4000];
    uint64_t end = 0;
    for (int i = 0; i < 1300; i++) {
        char key[16];
        snprintf(key, sizeof key, "u%d", i);
        struct chime__rec r = { .type = CHIME__PUT, .key_len = (uint16_t)strlen(key), .key = key,
                                .payload_len = sizeof payload, .payload = payload,
                                .due = wall_ns() + 3600 * SEC };
        CHECK_EQ(chime__wal_append(w, &r, 1, &end), 0);
    }
    uint64_t unwritten = chime__wal_unwritten(w), seg = chime__wal_segment_bytes(w);
    printf("# %llu bytes unwritten, counted in segments of %llu bytes\n",
           (unsigned long long)unwritten, (unsigned long long)seg);
    CHECK(unwritten > CHIME__JOURNAL_BACKLOG_MAX * small, "%llu bytes unwritten",
          (unsigned long long)unwritten);
    CHECK(unwritten / seg <= CHIME__JOURNAL_BACKLOG_MAX, "counted as %llu segments",
          (unsigned long long)(unwritten / seg));
    /* and indeed writing them seals nothing: they all go to the first segment */
    pthread_mutex_lock(&hook_lock);
    writes_go = 1;
    pthread_cond_broadcast(&hook_cond);
    pthread_mutex_unlock(&hook_lock);
    CHECK_EQ(chime__wal_sync(w), 0);
    CHECK_EQ(chime__wal_unwritten(w), 0);
    CHECK_EQ(chime__wal_current(w), 1);

    /* Once the log has moved to a segment of the new size, that size is the unit. */
    uint64_t sealed = 0;
    CHECK_EQ(chime__wal_seal(w, &sealed, NULL), 0);
    CHECK_EQ(sealed, 1);
    CHECK_EQ(chime__wal_segment_bytes(w), small);
    CHECK_EQ(chime__wal_close(w), 0);
    chime__io_set_fault(NULL, NULL);
    close(dfd);
    tmpdir_remove(wdir);
    free(wdir);
}

static const struct tap_test tests[] = {
    { "puts_wait_for_a_held_flusher_before_segments_pile_up",
      puts_wait_for_a_held_flusher_before_segments_pile_up },
    { "records_are_counted_in_segments_no_smaller_than_the_one_they_go_to",
      records_are_counted_in_segments_no_smaller_than_the_one_they_go_to },
};

int main(void)
{
    return tap_run(tests, (int)(sizeof tests / sizeof tests[0]));
}
