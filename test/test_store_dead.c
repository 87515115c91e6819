/* SPDX-License-Identifier: MIT */
/*
 * A dead-letter requeue beside its key's other calls. The journal reads the dead letter (its
 * payload is in the runs, or in the log until a flush puts it in a run) before the requeue locks
 * its key's stripe, so that the flush holds up no other key; the key's own calls go on meanwhile,
 * and the requeue is decided under the lock only if the dead letter is still the one read. A plain
 * TAP program (tap.h).
 */
#include "store_api.h"

#include "store/backend.h"
#include "store/journal.h"
#include "store/store.h"

/* The journal's flusher held where it begins a run (its .tmp file), while armed, until let go. */
static struct {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int armed, held, go;
} flush_gate = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, 0 };

static int hold_flush(void *ctx, enum chime__io_op op, const char *name, int fd)
{
    (void)ctx;
    (void)fd;
    if (op != CHIME_IO_OPEN || !name || !strstr(name, ".tmp"))
        return 0;
    pthread_mutex_lock(&flush_gate.lock);
    if (flush_gate.armed) {
        flush_gate.held = 1;
        pthread_cond_broadcast(&flush_gate.cond);
        while (!flush_gate.go)
            pthread_cond_wait(&flush_gate.cond, &flush_gate.lock);
    }
    pthread_mutex_unlock(&flush_gate.lock);
    return 0;
}

/* Arm the gate (the flusher stops at its next run), or let the flusher go on and disarm it. */
static void flush_gate_arm(void)
{
    pthread_mutex_lock(&flush_gate.lock);
    flush_gate.armed = 1;
    flush_gate.held = flush_gate.go = 0;
    pthread_mutex_unlock(&flush_gate.lock);
    chime__io_set_fault(hold_flush, NULL);
}

static void flush_gate_wait_held(void)
{
    pthread_mutex_lock(&flush_gate.lock);
    while (!flush_gate.held)
        pthread_cond_wait(&flush_gate.cond, &flush_gate.lock);
    pthread_mutex_unlock(&flush_gate.lock);
}

static void flush_gate_release(void)
{
    pthread_mutex_lock(&flush_gate.lock);
    flush_gate.armed = 0;
    flush_gate.go = 1;
    pthread_cond_broadcast(&flush_gate.cond);
    pthread_mutex_unlock(&flush_gate.lock);
}

/* A fresh store whose key "dead" is a dead letter ("older"); every firing is buried at once. */
static chime_store *open_with_a_dead_letter(void)
{
    fresh();
    gate_reset();
    gate.outcome = CHIME_STORE_DEAD; /* and the gate open: every firing is buried at once */
    gate_open();
    rec.reply = gated;
    chime_store *s = open_store(NULL);
    CHECK_EQ(put(s, "dead", "older", 0), 0);
    recorder_wait(&rec, 1);
    store_wait_idle(s); /* buried */
    return s;
}

static _Atomic int requeue_rc = 1;

static void *requeue_dead(void *arg)
{
    atomic_store(&requeue_rc, chime_store_dead_requeue(arg, "dead", 4, 0));
    return NULL;
}

/* A requeue reads its dead letter from the journal's runs, after a flush of what the log holds
 * (disk writes and syncs). Found in review: it did so with its key's stripe locked, so that every
 * put, cancel and firing of the keys sharing the stripe (1/64 of them) waited for the flush. With
 * the flusher held, another key of that stripe is put, and the key itself fires and is buried
 * again: the requeue, let go, requeues that newer dead letter. */
static void a_dead_requeue_holds_no_other_key_back_while_the_journal_flushes(void)
{
    chime_store *s = open_with_a_dead_letter();
    char other[16];
    struct hot_stripe *st = chime__store_stripe(s, chime__store_hash(s, "dead", 4));
    for (int i = 0;; i++) { /* a key of the same stripe: 64 tries or so */
        snprintf(other, sizeof other, "n%d", i);
        if (chime__store_stripe(s, chime__store_hash(s, other, strlen(other))) == st)
            break;
    }
    chime__store_settle(s); /* the keeper's first load is over: nothing else flushes now */
    flush_gate_arm();
    atomic_store(&requeue_rc, 1);
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, requeue_dead, s), 0);
    flush_gate_wait_held();
    int busy = pthread_mutex_trylock(&st->lock); /* what the other key's put would take */
    if (!busy)
        pthread_mutex_unlock(&st->lock);
    CHECK(!busy, "the key's stripe is locked while the requeue waits for the journal's flush");
    CHECK_EQ(put(s, other, "x", wall_ns() + 3600 * SEC), 0);
    CHECK_EQ(put(s, "dead", "newer", 0), 0); /* fires, and is buried over the one being read */
    recorder_wait_key(&rec, "dead", 2, NULL);
    store_wait_handlers(s);
    CHECK_EQ(atomic_load(&requeue_rc), 1); /* still waiting for the flush */
    rec.reply = NULL;
    flush_gate_release();
    CHECK_EQ(pthread_join(t, NULL), 0);
    chime__io_set_fault(NULL, NULL);
    CHECK_EQ(atomic_load(&requeue_rc), 0);
    struct firing f;
    recorder_wait_key(&rec, "dead", 3, &f);
    CHECK(strcmp(f.payload, "newer") == 0, "the requeue fired the dead letter %s", f.payload);
    store_wait_handlers(s);
    struct chime_store_stats stats;
    chime_store_stats(s, &stats);
    CHECK(stats.pending == 1 && stats.dead == 0, "pending %llu, dead %llu",
          (unsigned long long)stats.pending, (unsigned long long)stats.dead);
    CHECK_EQ(chime_store_close(s), 0);
}

/* How many segments the journal's log has sealed (under its lock). */
static uint64_t sealed(chime_store *s)
{
    struct chime__backend *j = s->b;
    pthread_mutex_lock(&j->lock);
    uint64_t n = j->sealed;
    pthread_mutex_unlock(&j->lock);
    return n;
}

static void *flush_journal(void *arg)
{
    chime_store *s = arg;
    return (void *)(intptr_t)chime__journal_flush_all(s->b);
}

/*
 * The dead letter the requeue looked up is dropped before its scan of the runs, and the drop is in
 * the runs it scans: the scan finds no live dead letter of that version. Found in review of the
 * read outside the lock: the requeue returned -EBADMSG ("the journal does not hold the dead letter
 * its index names") for a journal in order. It looks at the index again: the key has no dead
 * letter any more, so -ENOENT, as if the drop had come first (it did). The flusher is held at a
 * run of its own first, so that the requeue's segment and the drop's go into one run together.
 */
static void a_requeue_whose_dead_letter_is_dropped_while_it_reads_is_enoent(void)
{
    chime_store *s = open_with_a_dead_letter();
    rec.reply = NULL;
    chime__store_settle(s); /* the keeper's first load is over: nothing else flushes now */
    CHECK_EQ(put(s, "far", "x", wall_ns() + 3600 * SEC), 0); /* something for the first run */
    flush_gate_arm();
    pthread_t f1, f2, t;
    CHECK_EQ(pthread_create(&f1, NULL, flush_journal, s), 0);
    flush_gate_wait_held(); /* the flusher is at a run of the segment before the requeue's */
    CHECK_EQ(put(s, "far2", "x", wall_ns() + 3600 * SEC), 0); /* so the requeue's seal seals */
    uint64_t before = sealed(s);
    atomic_store(&requeue_rc, 1);
    CHECK_EQ(pthread_create(&t, NULL, requeue_dead, s), 0);
    while (sealed(s) == before)
        sleep_ms(1); /* a poll: the requeue has looked its dead letter up and seals its segment */
    CHECK_EQ(chime_store_dead_drop(s, "dead", 4), 0); /* in the next segment */
    before = sealed(s);
    CHECK_EQ(pthread_create(&f2, NULL, flush_journal, s), 0);
    while (sealed(s) == before)
        sleep_ms(1); /* a poll: the drop's segment is sealed too, while the flusher is held */
    flush_gate_release(); /* its next run holds both segments: the drop with the requeue's */
    void *rc1, *rc2;
    CHECK_EQ(pthread_join(f1, &rc1), 0);
    CHECK_EQ(pthread_join(f2, &rc2), 0);
    CHECK_EQ(pthread_join(t, NULL), 0);
    chime__io_set_fault(NULL, NULL);
    CHECK_EQ((intptr_t)rc1, 0);
    CHECK_EQ((intptr_t)rc2, 0);
    CHECK_EQ(atomic_load(&requeue_rc), -ENOENT);
    struct chime_store_stats stats;
    chime_store_stats(s, &stats);
    CHECK(stats.error == 0 && stats.pending == 2 && stats.dead == 0, /* far, far2 */
          "error %d, pending %llu, dead %llu", stats.error, (unsigned long long)stats.pending,
          (unsigned long long)stats.dead);
    CHECK_EQ(chime_store_close(s), 0);
}

static const struct tap_test tests[] = {
    { "a_dead_requeue_holds_no_other_key_back_while_the_journal_flushes",
      a_dead_requeue_holds_no_other_key_back_while_the_journal_flushes },
    { "a_requeue_whose_dead_letter_is_dropped_while_it_reads_is_enoent",
      a_requeue_whose_dead_letter_is_dropped_while_it_reads_is_enoent },
};

int main(void)
{
    return store_tests_run(tests, (int)(sizeof tests / sizeof tests[0]), &dir, &rec, NULL);
}
