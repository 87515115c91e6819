/* SPDX-License-Identifier: MIT */
/*
 * test_store_journal_model's model of the journal backend and its operations on it: each key's
 * pending timer, dead letter and recorded firing; the history of the model since the last sync
 * (what a crash may leave); the crash hook (io.h); reading a journal's content and comparing it
 * with the model; and the operations, each applied to the backend and to the model, checking
 * what the backend returns against what the model says it must. Included by that file alone.
 */
#ifndef CHIME_TEST_JOURNAL_MODEL_H
#define CHIME_TEST_JOURNAL_MODEL_H

#include "journal_util.h"

#include "rng.h"
#include "store/io.h"

#include <unistd.h>

#define NKMAX 4096
#define MAXHIST 4096
static int NK = 16; /* keys in use (many_keys: NKMAX) */

struct kst {
    uint64_t pver, pdue;  /* pending: version (0 none), due */
    uint32_t patt, pgen;  /* attempts recorded, generation (payload) */
    uint64_t dver;        /* dead letter version (0 none) */
    uint32_t datt, dgen;
    uint64_t firing;      /* version whose firing is recorded and not settled (logic side) */
    uint64_t fdue;
    uint32_t fatt, fgen;
};

struct state {
    struct kst k[NKMAX];
};

static struct state model;
static struct kst *histk; /* the first NK keys of the model after each change since the last sync
                             (MAXHIST of them; single thread) */
static struct state hist_tmp;
static unsigned char ovf[NKMAX]; /* a key with more changes since its last sync than KH: not
                                    checked */

static void hist_put(size_t h)
{
    memcpy(histk + h * (size_t)NK, model.k, (size_t)NK * sizeof *histk);
}

static const struct state *hist_at(size_t h)
{
    memcpy(hist_tmp.k, histk + h * (size_t)NK, (size_t)NK * sizeof *histk);
    return &hist_tmp;
}
static size_t nhist;
static _Atomic uint32_t gen;
static _Thread_local struct rng rng;
static int threaded; /* rounds run by several threads: histories per key only */
#define KH 48
static struct kst khist[NKMAX][KH]; /* each key's state after each change since its last sync */
static size_t nkh[NKMAX];

static _Atomic long io_left; /* I/O operations before the crash; < 0: no crash armed */
static _Atomic int crashed;

static int crash_hook(void *ctx, enum chime__io_op op, const char *name, int fd)
{
    (void)ctx;
    (void)op;
    (void)name;
    (void)fd;
    if (atomic_load(&crashed))
        return -EIO;
    if (atomic_load(&io_left) < 0)
        return 0;
    if (atomic_fetch_sub(&io_left, 1) == 0) {
        atomic_store(&crashed, 1);
        return -EIO;
    }
    return 0;
}

static void key_of(int i, char *out)
{
    snprintf(out, 16, "key-%04d", i);
}

static int big; /* payloads up to 48 KiB, so that runs have many marks (run.c, MARK_EVERY) */

static size_t payload_of(uint32_t g, unsigned char *buf)
{
    size_t len = big ? 8 + (g * UINT32_C(7919)) % 48000 : 8 + g % 1500;
    memset(buf, (int)(g & 0xff), len);
    memcpy(buf, &g, sizeof g);
    return len;
}

static void snap(int i)
{
    if (!threaded && histk && nhist < MAXHIST)
        hist_put(nhist++);
    if (nkh[i] < KH)
        khist[i][nkh[i]++] = model.k[i];
    else
        ovf[i] = 1;
}

static void synced_key(int i)
{
    khist[i][0] = model.k[i];
    ovf[i] = 0;
    nkh[i] = 1;
}

static void synced(void)
{
    if (histk)
        hist_put(0);
    nhist = 1;
    for (int i = 0; i < NK; i++)
        synced_key(i);
}

/* ---- reading the journal's content back ---- */

static struct state seen;
static int seen_dup;

static int key_index(const void *key, size_t len)
{
    char buf[16];
    if (len != 8 || memcmp(key, "key-", 4))
        return -1;
    memcpy(buf, (const char *)key + 4, 4);
    buf[4] = 0;
    int i = atoi(buf);
    return i >= 0 && i < NK ? i : -1;
}

static int got_pending(void *ctx, const struct chime__timer *t)
{
    (void)ctx;
    int i = key_index(t->key, t->key_len);
    if (i < 0 || seen.k[i].pver)
        seen_dup = 1;
    if (i < 0)
        return 0;
    uint32_t g;
    memcpy(&g, t->payload, sizeof g);
    seen.k[i].pver = t->ref.version;
    seen.k[i].pdue = t->due_ns;
    seen.k[i].patt = t->attempt;
    seen.k[i].pgen = g;
    return 0;
}

static int got_dead(void *ctx, const struct chime__timer *t)
{
    (void)ctx;
    int i = key_index(t->key, t->key_len);
    if (i < 0 || seen.k[i].dver)
        seen_dup = 1;
    if (i < 0)
        return 0;
    uint32_t g;
    memcpy(&g, t->payload, sizeof g);
    seen.k[i].dver = t->ref.version;
    seen.k[i].datt = t->attempt;
    seen.k[i].dgen = g;
    return 0;
}

static int read_content(struct chime__backend *b)
{
    memset(&seen, 0, sizeof seen);
    seen_dup = 0;
    int err = chime__journal_ops.load(b, 0, UINT64_MAX, got_pending, NULL);
    if (!err)
        err = chime__journal_ops.dead_list(b, got_dead, NULL);
    return err;
}

/* Whether key state a matches what was read, c (versions not compared). */
static int same_key(const struct kst *a, const struct kst *c)
{
    if (!!a->pver != !!c->pver || !!a->dver != !!c->dver)
        return 0;
    if (a->pver && (a->pdue != c->pdue || a->patt != c->patt || a->pgen != c->pgen))
        return 0;
    if (a->dver && (a->datt != c->datt || a->dgen != c->dgen))
        return 0;
    return 1;
}

/* Whether the content read matches state s (versions are compared only if `versions`). */
static int same(const struct state *s, int versions, int *which)
{
    for (int i = 0; i < NK; i++) {
        const struct kst *a = &s->k[i], *c = &seen.k[i];
        *which = i;
        if (!!a->pver != !!c->pver || !!a->dver != !!c->dver)
            return 0;
        if (a->pver && (a->pdue != c->pdue || a->patt != c->patt || a->pgen != c->pgen ||
                        (versions && a->pver != c->pver)))
            return 0;
        if (a->dver && (a->datt != c->datt || a->dgen != c->dgen ||
                        (versions && a->dver != c->dver)))
            return 0;
    }
    return 1;
}

static void describe(const char *what, const struct state *s)
{
    printf("# %s:\n", what);
    for (int i = 0; i < NK; i++) {
        const struct kst *a = &s->k[i];
        if (a->pver || a->dver)
            printf("#   key %d: pending v%llu due %llu att %u gen %u; dead v%llu att %u gen %u\n",
                   i,
                   (unsigned long long)a->pver, (unsigned long long)a->pdue, a->patt, a->pgen,
                   (unsigned long long)a->dver, a->datt, a->dgen);
    }
}

/* ---- the operations, each checked against the model ---- */

static int op_put(struct chime__backend *b, int i, int retry)
{
    char key[16];
    static _Thread_local unsigned char payload[65536];
    key_of(i, key);
    struct kst *m = &model.k[i];
    if (retry && !m->firing)
        return 0;
    uint32_t g = atomic_fetch_add(&gen, 1) + 1;
    size_t plen = payload_of(g, payload);
    uint64_t due = 1000 + rng_below(&rng, big ? 1000 : 24);
    struct chime__put p = { key, strlen(key), payload, plen, due, 0, 0, 0 };
    if (retry) {
        p.attempt = m->fatt;
        p.if_version = m->firing;
    }
    struct chime__put_result res;
    uint64_t ticket;
    int err = chime__journal_ops.put(b, &p, &res, &ticket);
    if (retry) {
        uint64_t f = m->firing;
        m->firing = 0;
        if (m->pver != f) {
            if (err == 0 || err == -ESTALE) {
                CHECK_EQ(err, -ESTALE);
                return 0;
            }
            return err;
        }
    }
    if (err) { /* its record may be in the log all the same (an index write failed after it) */
        struct kst keep = *m;
        m->pver = UINT64_MAX;
        m->pdue = due;
        m->patt = p.attempt;
        m->pgen = g;
        snap(i);
        *m = keep;
        return err;
    }
    CHECK_EQ(res.replaced.version, m->pver);
    m->pver = res.ref.version;
    m->pdue = due;
    m->patt = p.attempt;
    m->pgen = g;
    snap(i);
    return 0;
}

static int op_cancel(struct chime__backend *b, int i)
{
    char key[16];
    key_of(i, key);
    struct kst *m = &model.k[i];
    struct chime__ref victim;
    uint64_t ticket;
    int err = chime__journal_ops.cancel(b, key, strlen(key), m->firing, &victim, &ticket);
    if (err == -EIO || err == -ENOSPC)
        return err;
    if (!m->pver) {
        CHECK_EQ(err, -ENOENT);
        return 0;
    }
    if (m->firing && m->firing == m->pver) {
        CHECK_EQ(err, -EINPROGRESS);
        return 0;
    }
    CHECK_EQ(err, 0);
    CHECK_EQ(victim.version, m->pver);
    m->pver = 0;
    snap(i);
    return 0;
}

static int op_fire(struct chime__backend *b, int i)
{
    char key[16];
    key_of(i, key);
    struct kst *m = &model.k[i];
    if (!m->pver || m->firing)
        return 0;
    struct chime__firing f = { key, strlen(key), m->pdue, { m->pver, 0 }, m->patt + 1, 0 };
    int err = chime__journal_ops.fire(b, &f, 1);
    if (err) { /* its record may have reached the disk all the same: either state may come back */
        struct kst keep = *m;
        m->patt++;
        snap(i);
        *m = keep;
        return err;
    }
    CHECK_EQ(f.status, 0);
    m->patt++;
    m->firing = m->pver;
    m->fdue = m->pdue;
    m->fatt = m->patt;
    m->fgen = m->pgen;
    snap(i);
    return 0;
}

static int op_ack(struct chime__backend *b, int i, int bury)
{
    char key[16];
    static _Thread_local unsigned char payload[65536];
    key_of(i, key);
    struct kst *m = &model.k[i];
    if (!m->firing)
        return 0;
    size_t plen = payload_of(m->fgen, payload);
    struct chime__timer t = { key, strlen(key), payload, plen, m->fdue, m->fatt, { m->firing, 0 },
                              1 };
    int current = m->pver == m->firing;
    int err = bury ? chime__journal_ops.bury(b, &t) : chime__journal_ops.ack(b, &t, current);
    m->firing = 0;
    if (err && bury && current) { /* as for a put */
        struct kst keep = *m;
        m->dver = UINT64_MAX;
        m->datt = m->fatt;
        m->dgen = m->fgen;
        m->pver = 0;
        snap(i);
        *m = keep;
    }
    if (err)
        return err;
    if (current) {
        if (bury) {
            m->dver = m->pver; /* the dead letter's version is the journal's own: read it back */
            m->datt = m->fatt;
            m->dgen = m->fgen;
            m->dver = UINT64_MAX; /* unknown until read; compared without versions */
        }
        m->pver = 0;
        snap(i);
    }
    return 0;
}

static int arm_nothing(void *ctx, const struct chime__timer *t)
{
    (void)ctx;
    (void)t;
    return 0;
}

static int op_requeue(struct chime__backend *b, int i)
{
    char key[16];
    key_of(i, key);
    struct kst *m = &model.k[i];
    if (m->firing)
        return 0; /* the logic holds the key's lock across its firing's outcome */
    struct chime__dead d;
    int err = chime__journal_ops.dead_read(b, key, strlen(key), &d);
    if (err)
        return err;
    CHECK_EQ(!!d.version, !!m->dver);
    if (!d.version)
        return 0;
    uint32_t g;
    memcpy(&g, d.payload, sizeof g);
    CHECK_EQ(g, m->dgen);
    uint64_t due = 1000 + rng_below(&rng, big ? 1000 : 24), ticket;
    struct chime__put_result res;
    err = chime__journal_ops.dead_requeue(b, key, strlen(key), due, &d, &res, arm_nothing, NULL,
                                          &ticket);
    free(d.payload);
    if (err && err != -EAGAIN && err != -ENOENT) { /* as for a put */
        struct kst keep = *m;
        m->pver = UINT64_MAX;
        m->pdue = due;
        m->patt = 0;
        m->pgen = g;
        m->dver = 0;
        snap(i);
        *m = keep;
    }
    if (err)
        return err;
    CHECK_EQ(res.replaced.version, m->pver);
    m->pver = res.ref.version;
    m->pdue = due;
    m->patt = 0;
    m->pgen = g;
    m->dver = 0;
    snap(i);
    return 0;
}

static int op_drop(struct chime__backend *b, int i)
{
    char key[16];
    key_of(i, key);
    struct kst *m = &model.k[i];
    uint64_t ticket;
    int err = chime__journal_ops.dead_drop(b, key, strlen(key), &ticket);
    if (err == -EIO || err == -ENOSPC)
        return err;
    if (!m->dver) {
        CHECK_EQ(err, -ENOENT);
        return 0;
    }
    CHECK_EQ(err, 0);
    m->dver = 0;
    snap(i);
    return 0;
}

#endif /* CHIME_TEST_JOURNAL_MODEL_H */
