/* SPDX-License-Identifier: MIT */
/*
 * A randomised differential test of the journal backend (lib/store/journal.c) against a model
 * (review of compaction, merging and the index): puts, replacements, cancels, fire/ack, retries,
 * burials, requeues and drops of a few keys, with loads (each a flush into a run, so that the
 * flusher merges often), clean reopens, and crashes: from a random I/O operation on, every
 * operation fails (io.h's hook), which leaves the directory as a kill -9 there would. After each
 * reopen the journal's content must be the model's after some prefix of the operations that
 * returned 0 since the last sync (D1, D4; per key when several threads run), and the index must
 * agree with it (a replacement reports the model's version, a cancel or drop finds what the model
 * holds). Half the crashed reopens crash again inside open (replay's flushes and deletions, the
 * flusher's first merge). After each crash, chime-store's list and dead (the tool's path is the
 * first argument) must read the crashed directory as the reopen does. Loads of part of
 * the due-time range check the runs' sparse index; a reader beside the workers checks that
 * dead_read never reports damage. Variants: the index in files (rebuilds spill), several
 * threads, large payloads, and 4096 keys in fill and drain phases (index tables grow and shrink).
 * Prints its seed (CHIME_SEED repeats it); CHIME_JMODEL_ROUNDS sets the rounds (40; 8 in the
 * sanitizer and valgrind builds),
 * CHIME_JMODEL_IOMAX the window of I/O operations a crash falls in.
 * Written by a review of compaction, merging and the index, which found nothing with it; two
 * mutations of compact.c's orphan rule (a flush or a partial merge dropping orphan KILLs) fail it
 * at once.
 */
#include "journal_model.h"

/* Compare the journal's content with the model (all of it, versions of pending timers included),
 * then take the dead letters' versions from what was read. */
static void check_now(struct chime__backend *b, const char *when)
{
    int err = read_content(b);
    CHECK_EQ(err, 0);
    CHECK(!seen_dup, "%s: a key handed over twice", when);
    int which;
    if (!same(&model, 0, &which) || !same(&model, 0, &which)) {
        describe("model", &model);
        describe("journal", &seen);
        CHECK(0, "%s: key %d differs from the model", when, which);
    }
    for (int i = 0; i < NK; i++) {
        CHECK(!model.k[i].pver || model.k[i].pver == seen.k[i].pver, "%s: key %d's version", when,
              i);
        model.k[i].dver = seen.k[i].dver;
    }
    /* A part of the due-time range, as the keeper loads it. */
    for (int tries = 0; tries < 4; tries++) {
        uint64_t from = 990 + rng_below(&rng, big ? 1020 : 40);
        uint64_t until = from + rng_below(&rng, big ? 500 : 12);
        memset(&seen, 0, sizeof seen);
        CHECK_EQ(chime__journal_ops.load(b, from, until, got_pending, NULL), 0);
        for (int i = 0; i < NK; i++) {
            const struct kst *m = &model.k[i];
            int want = m->pver && m->pdue >= from && m->pdue < until;
            CHECK(want == !!seen.k[i].pver && (!want || seen.k[i].pver == m->pver),
                  "%s: load [%llu, %llu): key %d (due %llu, v%llu) %s", when,
                  (unsigned long long)from, (unsigned long long)until, i,
                  (unsigned long long)m->pdue, (unsigned long long)m->pver,
                  want ? "missing" : "handed over");
        }
    }
}

#define NTHREADS 3

static _Atomic int phase; /* many_keys: 0 mixed, 1 filling (mostly puts), 2 draining */

/* Run ops operations on the keys k with k % nthreads == tid. Return: 0 or the first error. */
static int worker_ops(struct chime__backend *b, unsigned ops, int crash, int tid, int nthreads)
{
    int err = 0;
    for (unsigned n = 0; n < ops && !err; n++) {
        int i = (int)rng_below(&rng, (uint64_t)(NK / nthreads)) * nthreads + tid;
        unsigned what = (unsigned)rng_below(&rng, 100);
        int bias = (int)rng_below(&rng, 100);
        if (phase == 1 && bias < 70)
            err = op_put(b, i, 0);
        else if (phase == 2 && bias < 50)
            err = op_cancel(b, i);
        else if (phase == 2 && bias < 90)
            err = op_fire(b, i) ? -EIO : op_ack(b, i, 0);
        else if (what < 25)
            err = op_put(b, i, 0);
        else if (what < 35)
            err = op_cancel(b, i);
        else if (what < 55)
            err = op_fire(b, i);
        else if (what < 67)
            err = op_ack(b, i, 0);
        else if (what < 74)
            err = op_put(b, i, 1);
        else if (what < 80)
            err = op_ack(b, i, 1);
        else if (what < 85)
            err = op_requeue(b, i);
        else if (what < 88)
            err = op_drop(b, i);
        else if (what < 94) {
            err = chime__journal_ops.sync(b);
            if (!err && nthreads == 1)
                synced();
            else if (!err)
                for (int k = tid; k < NK; k += nthreads)
                    synced_key(k);
        } else if (!crash && nthreads == 1) {
            check_now(b, "a load");
        } else {
            err = chime__journal_flush_all(b); /* a run, and maybe a merge */
        }
    }
    return err;
}

struct worker {
    struct chime__backend *b;
    unsigned ops;
    int crash, tid;
    uint64_t seed;
    int err;
};

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    rng.state = w->seed;
    w->err = worker_ops(w->b, w->ops, w->crash, w->tid, NTHREADS);
    return NULL;
}

/* ---- what the chime-store tool reads from the directory, left as the crash left it ---- */

static struct state tool_seen;

static const char *tool; /* the first argument (meson passes it) */

/* Run `chime-store cmd dir` and note each line's key, due, attempt and payload size. */
static void tool_read(const char *cmd, const char *dir, int dead)
{
    char line[512];
    snprintf(line, sizeof line, "%s %s %s", tool, cmd, dir);
    FILE *f = popen(line, "r");
    CHECK(f != NULL, "popen");
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#')
            continue;
        char when[64], key[64];
        unsigned long long due;
        unsigned att, plen;
        CHECK(sscanf(line, "%63s %llu %u %63s %u", when, &due, &att, key, &plen) == 5,
              "the tool's line: %s", line);
        int i = key_index(key, strlen(key));
        CHECK(i >= 0, "the tool's key: %s", key);
        struct kst *k = &tool_seen.k[i];
        if (dead) {
            CHECK(!k->dver, "the tool lists key %d's dead letter twice", i);
            k->dver = 1;
            k->datt = att;
            k->dgen = plen;
        } else {
            CHECK(!k->pver, "the tool lists key %d twice", i);
            k->pver = 1;
            k->pdue = due;
            k->patt = att;
            k->pgen = plen;
        }
    }
    CHECK_EQ(pclose(f), 0);
}

/* The tool's reading of dir as the crash left it. */
static void tool_before(const char *dir)
{
    memset(&tool_seen, 0, sizeof tool_seen);
    tool_read("list", dir, 0);
    tool_read("dead", dir, 1);
}

/* ... against what the reopen recovered (seen). */
static unsigned tool_compared;

static void tool_agrees(void)
{
    tool_compared++;
    for (int i = 0; i < NK; i++) {
        const struct kst *t = &tool_seen.k[i], *o = &seen.k[i];
        unsigned char buf[65536];
        CHECK(!!t->pver == !!o->pver && !!t->dver == !!o->dver,
              "key %d: the tool says pending %d dead %d, the reopen %d %d", i, !!t->pver, !!t->dver,
              !!o->pver, !!o->dver);
        if (t->pver)
            CHECK(t->pdue == o->pdue && t->patt == o->patt && t->pgen == payload_of(o->pgen, buf),
                  "key %d: the tool's pending timer differs from the reopen's", i);
        if (t->dver)
            CHECK(t->datt == o->datt && t->dgen == payload_of(o->dgen, buf),
                  "key %d: the tool's dead letter differs from the reopen's", i);
    }
}

/* A reader of dead letters beside the workers (backend.h: dead_read is not serialised with the
 * key's calls): whatever burials, drops and requeues run meanwhile, it never reports damage. */
struct reader {
    struct chime__backend *b;
    _Atomic int stop;
    uint64_t seed;
    unsigned reads, found;
};

static void *reader_main(void *arg)
{
    struct reader *r = arg;
    rng.state = r->seed;
    while (!atomic_load(&r->stop)) {
        char key[16];
        key_of((int)rng_below(&rng, (uint64_t)NK), key);
        struct chime__dead d;
        int err = chime__journal_ops.dead_read(r->b, key, strlen(key), &d);
        CHECK(err == 0, "dead_read of %s beside the key's calls: %s", key, chime_strerror(err));
        r->reads++;
        r->found += d.version != 0;
        free(d.payload);
    }
    return NULL;
}

/* After a crash: the content must be the model after one of the changes since the last sync. */
static void check_recovered(struct chime__backend *b, uint64_t seed, unsigned round)
{
    int err = read_content(b);
    CHECK_EQ(err, 0);
    CHECK(!seen_dup, "a key handed over twice after the crash");
    int which = -1;
    if (threaded) {
        for (int i = 0; i < NK; i++) {
            size_t h = nkh[i];
            if (ovf[i]) {
                model.k[i] = seen.k[i];
                continue;
            }
            while (h-- > 0)
                if (same_key(&khist[i][h], &seen.k[i]))
                    break;
            if (h == (size_t)-1) {
                static struct state one;
                memset(&one, 0, sizeof one);
                one.k[i] = khist[i][0];
                describe("key's state at its last sync", &one);
                one.k[i] = khist[i][nkh[i] - 1];
                describe("key's state at the crash", &one);
                one.k[i] = seen.k[i];
                describe("journal after reopen", &one);
                CHECK(0, "seed %llu round %u: key %d recovered in no state of its changes since "
                         "its last sync (%zu)", (unsigned long long)seed, round, i, nkh[i]);
            }
            model.k[i] = khist[i][h];
            model.k[i].pver = seen.k[i].pver;
            model.k[i].dver = seen.k[i].dver;
            model.k[i].firing = 0;
        }
        return;
    }
    for (size_t h = nhist; h-- > 0;) {
        if (same(hist_at(h), 0, &which)) {
            memcpy(model.k, hist_tmp.k, (size_t)NK * sizeof *model.k);
            for (int i = 0; i < NK; i++) {
                model.k[i].pver = seen.k[i].pver;
                model.k[i].dver = seen.k[i].dver;
                model.k[i].firing = 0; /* the logic starts afresh */
            }
            return;
        }
    }
    describe("model at the last sync", hist_at(0));
    describe("model at the crash", hist_at(nhist - 1));
    describe("journal after reopen", &seen);
    CHECK(0, "seed %llu round %u: what the journal recovered is no prefix of the changes (%zu "
             "since the last sync)", (unsigned long long)seed, round, nhist);
}

static void run_model(void)
{
    free(histk);
    histk = threaded ? NULL : calloc(MAXHIST * (size_t)NK, sizeof *histk);
    CHECK(threaded || histk, "no memory for the history");
    uint64_t seed = rng_seed("journal model");
    rng.state = seed;
    const char *env = getenv("CHIME_JMODEL_ROUNDS");
    unsigned rounds = env ? (unsigned)atoi(env) : TAP_SLOW ? 8 : 40; /* CI's time: 8 under
                                                                          sanitizers, valgrind */
    const char *io_env = getenv("CHIME_JMODEL_IOMAX"); /* crash within this many I/O operations */
    uint64_t iomax = io_env ? strtoull(io_env, NULL, 0) : NK > 16 ? 2000 : 200;
    char *dir = tmpdir_make("jmodel");
    memset(&model, 0, sizeof model);
    synced();
    atomic_store(&io_left, -1);
    chime__io_set_fault(crash_hook, NULL);
    struct chime__backend *b = journal_open_hourly(dir);
    for (unsigned round = 0; round < rounds; round++) {
        int crash = rng_below(&rng, 3) == 0;
        unsigned ops = 50 + (unsigned)rng_below(&rng, 400);
        if (NK > 16) {
            ops *= 12;
            atomic_store(&phase, (int)rng_below(&rng, 3));
            if (atomic_load(&phase) == 2)
                ops *= 4;
        }
        if (crash)
            atomic_store(&io_left, (long)rng_below(&rng, iomax));
        int err = 0;
        if (!threaded) {
            err = worker_ops(b, ops, crash, 0, 1);
        } else {
            struct worker w[NTHREADS];
            pthread_t th[NTHREADS], rt;
            struct reader rd = { b, 0, rng_next(&rng), 0, 0 };
            if (!crash)
                CHECK_EQ(pthread_create(&rt, NULL, reader_main, &rd), 0);
            for (int t = 0; t < NTHREADS; t++) {
                w[t] = (struct worker){ b, ops / NTHREADS, crash, t, rng_next(&rng), 0 };
                CHECK_EQ(pthread_create(&th[t], NULL, worker_main, &w[t]), 0);
            }
            for (int t = 0; t < NTHREADS; t++) {
                pthread_join(th[t], NULL);
                if (w[t].err && !err)
                    err = w[t].err;
            }
            if (!crash) {
                atomic_store(&rd.stop, 1);
                pthread_join(rt, NULL);
            }
        }
        int hit = atomic_load(&crashed);
        unsigned long long merges = atomic_load(&b->merges), flushes = atomic_load(&b->flushes);
        unsigned long long ixbytes = chime__index_bytes(b->ix);
        unsigned long long live = chime__index_count(b->ix, CHIME__IX_PENDING);
        if (crash) {
            /* Crash now if the countdown has not come: nothing more reaches the disk. */
            atomic_store(&crashed, 1);
        } else {
            CHECK_EQ(err, 0);
            err = chime__journal_ops.sync(b);
            CHECK_EQ(err, 0);
            synced();
        }
        chime__journal_ops.close(b);
        atomic_store(&crashed, 0);
        atomic_store(&io_left, -1);
        if (crash)
            tool_before(dir);
        if (crash && rng_below(&rng, 2)) {
            /* A crash in the middle of the recovery itself (replay's flushes and deletions, the
             * flusher's first merge), then a clean one. */
            static const struct chime__sink no_sink = { NULL, NULL, NULL, NULL };
            static struct chime_store_config cfg;
            cfg = (struct chime_store_config){ .path = dir, .sync = CHIME_SYNC_INTERVAL,
                                               .sync_interval_ns = 3600 * SEC };
            atomic_store(&io_left, (long)rng_below(&rng, 80));
            struct chime__backend *half;
            if (chime__journal_ops.open(&half, &cfg, &no_sink) == 0) {
                atomic_store(&crashed, 1);
                chime__journal_ops.close(half);
            }
            atomic_store(&crashed, 0);
            atomic_store(&io_left, -1);
        }
        b = journal_open_hourly(dir);
        if (crash) {
            check_recovered(b, seed, round);
            tool_agrees();
        } else {
            check_now(b, "after a reopen");
        }
        for (int i = 0; i < NK; i++)
            model.k[i].firing = 0; /* a restart: the logic fires what is pending afresh */
        synced();
        printf("# round %u: %s%s, %u ops, %llu flushes, %llu merges, index %llu bytes for %llu "
               "pending\n", round, crash ? "crash" : "reopen", hit ? " (mid-way)" : "", ops,
               flushes, merges, ixbytes, live);
    }
    chime__journal_ops.close(b);
    chime__io_set_fault(NULL, NULL);
    printf("# the tool's reading compared with the reopen's after %u crashes\n", tool_compared);
    tmpdir_remove(dir);
    free(dir);
}

static void random_operations_crashes_and_reopens_match_the_model(void)
{
    run_model();
}

static void the_same_from_several_threads(void)
{
    threaded = 1;
    run_model();
    threaded = 0;
}

static void the_same_with_the_index_in_files(void)
{
    chime__index_set_defaults(1024, 8, 1); /* every table in a file, small batches: rebuilds
                                              spill */
    chime__index_verify_live(1);
    run_model();
    chime__index_verify_live(0);
    chime__index_set_defaults(0, 0, 0);
}

static void the_same_from_several_threads_with_the_index_in_files(void)
{
    chime__index_set_defaults(1024, 8, 1);
    chime__index_verify_live(1);
    threaded = 1;
    run_model();
    threaded = 0;
    chime__index_verify_live(0);
    chime__index_set_defaults(0, 0, 0);
}

static void the_same_with_large_payloads(void)
{
    big = 1;
    run_model();
    big = 0;
}

/* Thousands of keys, so that index tables grow, go into files, and shrink once drained (index.c,
 * SHRINKING), and rebuilds spill. */
static void the_same_with_many_keys(void)
{
    chime__index_set_defaults(1024, 8, 1);
    chime__index_verify_live(1);
    NK = NKMAX;
    threaded = 1;
    run_model();
    threaded = 0;
    NK = 16;
    atomic_store(&phase, 0);
    chime__index_verify_live(0);
    chime__index_set_defaults(0, 0, 0);
}

static const struct tap_test tests[] = {
    { "random operations, crashes and reopens match the model",
      random_operations_crashes_and_reopens_match_the_model },
    { "the same with the index in files", the_same_with_the_index_in_files },
    { "the same from several threads", the_same_from_several_threads },
    { "the same with large payloads (runs with many marks)", the_same_with_large_payloads },
    { "the same from several threads, the index in files",
      the_same_from_several_threads_with_the_index_in_files },
    { "the same with many keys (index tables grow and shrink)", the_same_with_many_keys },
};

int main(int argc, char **argv)
{
    if (argc < 2 || access(argv[1], X_OK) != 0) {
        fprintf(stderr, "usage: test_store_journal_model PATH-TO-chime-store\n");
        return 2;
    }
    tool = argv[1];
    return tap_run(tests, (int)(sizeof tests / sizeof tests[0]));
}
