/* SPDX-License-Identifier: MIT */
/*
 * The oracle of the PostgreSQL cluster tests: it reads the node logs (pg_node.h) and the database
 * after a run, and checks
 *   O1 every acknowledged put that is its key's last acknowledged call (with no call begun after it
 *      that a kill cut short) fired at least once;
 *   O2 no handler started before its due time;
 *   O3 no handler of a version an acknowledged cancel ended started after that cancel returned;
 *   O4 no handler started in an epoch that had been superseded (the next epoch of its shard was
 *      acquired before the start), except on the node that was paused, for an epoch still current
 *      when it was paused, at most `stale_allowed` times: a handler checked its fence, then the
 *      process stopped before the handler's first line (pg.h, P2: only fencing downstream, with
 *      chime_fire.fence, closes that window, and the oracle plays that downstream: each such start
 *      carries a fence smaller than one the key's new owner already used or will use);
 *   O5 no acknowledgement committed in an epoch after its shard's next epoch was acquired (the
 *      database's own clock on both sides);
 *   O6 nothing is left pending in the database, and no call failed other than as documented.
 */
#ifndef CHIME_TEST_PG_ORACLE_H
#define CHIME_TEST_PG_ORACLE_H

#include "pg_node.h"

#include <inttypes.h>

struct pg_put_info {          /* one put, by its unique payload */
    char payload[64];
    char key[64];
    uint64_t due, acked_at;   /* acked_at 0: never acknowledged */
    uint64_t cancelled_at;    /* an acknowledged cancel ended it then (0: none) */
    uint64_t first_fire;      /* 0: never fired */
    unsigned fires;
    int expected;             /* O1 applies */
    unsigned shard;
};

struct pg_oracle {
    struct pg_put_info *puts;
    size_t nputs, cap;
    size_t *slots;            /* open addressing on payload: index + 1, 0 empty */
    size_t nslots;
    unsigned shards;
    unsigned failures, fires, early, stale, stale_paused;
    uint64_t t_stop, t_cont;  /* the pause of `paused` (0: none) */
    const char *paused;
};

static inline uint64_t pg_oracle_hash(const char *s)
{
    uint64_t h = 1469598103934665603u;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211u;
    return h;
}

static inline struct pg_put_info *pg_oracle_put(struct pg_oracle *o, const char *payload, int add)
{
    if (add && (o->nputs + 1) * 2 > o->nslots) {
        size_t n = o->nslots ? o->nslots * 2 : 1 << 14;
        size_t *slots = calloc(n, sizeof *slots);
        CHECK(slots != NULL, "out of memory");
        for (size_t i = 0; i < o->nputs; i++) {
            size_t j = pg_oracle_hash(o->puts[i].payload) & (n - 1);
            while (slots[j])
                j = (j + 1) & (n - 1);
            slots[j] = i + 1;
        }
        free(o->slots);
        o->slots = slots;
        o->nslots = n;
    }
    if (!o->nslots)
        return NULL;
    size_t j = pg_oracle_hash(payload) & (o->nslots - 1);
    for (; o->slots[j]; j = (j + 1) & (o->nslots - 1))
        if (!strcmp(o->puts[o->slots[j] - 1].payload, payload))
            return &o->puts[o->slots[j] - 1];
    if (!add)
        return NULL;
    if (o->nputs == o->cap) {
        o->cap = o->cap ? o->cap * 2 : 4096;
        o->puts = realloc(o->puts, o->cap * sizeof *o->puts);
        CHECK(o->puts != NULL, "out of memory");
    }
    struct pg_put_info *p = &o->puts[o->nputs];
    memset(p, 0, sizeof *p);
    snprintf(p->payload, sizeof p->payload, "%s", payload);
    o->slots[j] = ++o->nputs;
    return p;
}

/* The state of one key while its generator's lines are read in order. */
struct pg_key_state {
    char key[64];
    size_t last_put;              /* the latest acknowledged put (the victim of a cancel): its
                                     index in puts + 1 (puts moves as it grows), 0 if none */
    char last;                    /* 'P' or 'C': the latest acknowledged call */
    int open;                     /* a call began and has not ended (a kill cut it short) */
};

/* Read one node's log: the calls (O1, O3's cancels) of its generators, and every firing. */
static inline void pg_oracle_read(struct pg_oracle *o, const char *path, const char *node)
{
    FILE *f = fopen(path, "r");
    CHECK(f != NULL, "no log %s", path);
    struct pg_key_state *ks = NULL;
    size_t nks = 0, capks = 0;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        char op, key[64], payload[64];
        uint64_t a = 0, b = 0, c = 0, d = 0;
        unsigned attempt = 0;
        if (sscanf(line, "%c %63s", &op, key) != 2 || !strchr(line, '\n'))
            continue; /* only a line cut by a kill can be partial, and only the last */
        if (op == 'E') {
            printf("# %s: a call failed: %s", node, line);
            o->failures++;
            continue;
        }
        if (op == 'F') {
            CHECK(sscanf(line, "F %63s %63s %" SCNu64 " %u %" SCNu64 " %" SCNu64, key, payload, &a,
                         &attempt, &b, &c) == 6, "bad line %s", line);
            (void)d;
            struct pg_put_info *p = pg_oracle_put(o, payload, 1);
            o->fires++;
            if (c < a) {
                printf("# O2: %s fired %" PRIu64 " ns early on %s\n", payload, a - c, node);
                o->early++;
            }
            if (!p->first_fire || c < p->first_fire)
                p->first_fire = c;
            p->fires++;
            continue; /* firings are checked against the leases later (pg_oracle_stale) */
        }
        struct pg_key_state *k = NULL;
        for (size_t i = nks; i-- > 0;)
            if (!strcmp(ks[i].key, key)) {
                k = &ks[i];
                break;
            }
        if (!k) {
            if (nks == capks) {
                capks = capks ? capks * 2 : 256;
                ks = realloc(ks, capks * sizeof *ks);
                CHECK(ks != NULL, "out of memory");
            }
            k = &ks[nks++];
            memset(k, 0, sizeof *k);
            snprintf(k->key, sizeof k->key, "%s", key);
        }
        if (op == 'B') {
            k->open = 1;
        } else if (op == 'P') {
            CHECK(sscanf(line, "P %63s %63s %" SCNu64 " %" SCNu64, key, payload, &a, &b) == 4,
                  "bad line %s", line);
            struct pg_put_info *p = pg_oracle_put(o, payload, 1);
            snprintf(p->key, sizeof p->key, "%s", key);
            p->due = a;
            p->acked_at = b;
            k->last_put = (size_t)(p - o->puts) + 1;
            k->last = 'P';
            k->open = 0;
        } else if (op == 'C') {
            CHECK(sscanf(line, "C %63s %" SCNu64, key, &a) == 2, "bad line %s", line);
            CHECK(k->last_put != 0, "%s: a cancel of %s returned 0 with no put before it", node,
                  key);
            /* the last put is the version it ended (nothing of this key began in between) */
            struct pg_put_info *victim = &o->puts[k->last_put - 1];
            if (!victim->cancelled_at)
                victim->cancelled_at = a;
            k->last = 'C';
            k->open = 0;
        } else if (op == 'c') {
            k->open = 0;
        }
    }
    fclose(f);
    for (size_t i = 0; i < nks; i++)
        if (ks[i].last == 'P' && !ks[i].open)
            o->puts[ks[i].last_put - 1].expected = 1;
    free(ks);
}

/* O1 and O3 (after every log was read). Return: the number of violations. */
static inline unsigned pg_oracle_check_puts(struct pg_oracle *o, size_t *expected)
{
    unsigned bad = 0;
    *expected = 0;
    for (size_t i = 0; i < o->nputs; i++) {
        struct pg_put_info *p = &o->puts[i];
        p->shard = chime__pg_shard_of(p->key, strlen(p->key), o->shards);
        if (p->expected) {
            ++*expected;
            if (!p->fires && bad++ < 10)
                printf("# O1: %s (key %s, due %" PRIu64 ") never fired\n", p->payload, p->key,
                       p->due);
        }
    }
    return bad;
}

/* How many expected puts have not fired yet (the test waits for 0). */
static inline size_t pg_oracle_unfired(const struct pg_oracle *o)
{
    size_t n = 0;
    for (size_t i = 0; i < o->nputs; i++)
        n += o->puts[i].expected && !o->puts[i].fires;
    return n;
}

/* The acquisitions of the database: (shard, epoch) -> acquired (ns), for O4 and takeovers. */
struct pg_leases {
    int64_t *acq; /* [shard * stride + epoch], 0 if none */
    char (*owner)[16];
    size_t stride;
    unsigned shards;
};

static inline void pg_leases_read(struct pg_leases *l, PGconn *c, unsigned shards)
{
    PGresult *r = PQexec(c, "SELECT shard, epoch, owner,"
                            " (extract(epoch FROM acquired) * 1e6)::int8 * 1000 FROM chime.leases");
    CHECK(PQresultStatus(r) == PGRES_TUPLES_OK, "%s", PQerrorMessage(c));
    size_t maxe = 1;
    for (int i = 0; i < PQntuples(r); i++)
        if ((size_t)atoll(PQgetvalue(r, i, 1)) + 2 > maxe)
            maxe = (size_t)atoll(PQgetvalue(r, i, 1)) + 2;
    l->stride = maxe;
    l->shards = shards;
    l->acq = calloc(shards * maxe, sizeof *l->acq);
    l->owner = calloc(shards * maxe, sizeof *l->owner);
    CHECK(l->acq && l->owner, "out of memory");
    for (int i = 0; i < PQntuples(r); i++) {
        size_t s = (size_t)atoi(PQgetvalue(r, i, 0)), e = (size_t)atoll(PQgetvalue(r, i, 1));
        CHECK(s < shards, "shard %zu", s);
        l->acq[s * maxe + e] = atoll(PQgetvalue(r, i, 3));
        snprintf(l->owner[s * maxe + e], 16, "%s", PQgetvalue(r, i, 2));
    }
    PQclear(r);
}

static inline void pg_leases_free(struct pg_leases *l)
{
    free(l->acq);
    free(l->owner);
}

/* When (shard, epoch) was superseded: the next epoch's acquisition (0: never). */
static inline uint64_t pg_leases_end(const struct pg_leases *l, unsigned shard, uint64_t epoch)
{
    if (shard >= l->shards || epoch + 1 >= l->stride)
        return 0;
    return (uint64_t)l->acq[shard * l->stride + epoch + 1];
}

/* O4 over one node's firings. */
static inline void pg_oracle_stale(struct pg_oracle *o, const struct pg_leases *l, const char *path,
                                   const char *node)
{
    FILE *f = fopen(path, "r");
    CHECK(f != NULL, "no log %s", path);
    char line[512], key[64], payload[64];
    uint64_t due, fence, at;
    unsigned attempt;
    while (fgets(line, sizeof line, f)) {
        if (line[0] != 'F' || sscanf(line, "F %63s %63s %" SCNu64 " %u %" SCNu64 " %" SCNu64, key,
                                     payload, &due, &attempt, &fence, &at) != 6)
            continue;
        uint64_t end = pg_leases_end(l, pg_fence_shard(fence), pg_fence_epoch(fence));
        if (!end || at <= end)
            continue;
        int excused = o->paused && !strcmp(node, o->paused) && end > o->t_stop && at >= o->t_cont;
        if (excused) {
            o->stale_paused++;
            printf("# O4: %s started on %s, paused, in shard %u's superseded epoch %" PRIu64
                   " (checked before the pause)\n", payload, node, pg_fence_shard(fence),
                   pg_fence_epoch(fence));
        } else {
            o->stale++;
            printf("# O4: %s started on %s in shard %u's epoch %" PRIu64 ", %" PRIu64
                   " ns after the next epoch began\n", payload, node, pg_fence_shard(fence),
                   pg_fence_epoch(fence), at - end);
        }
    }
    fclose(f);
}

/* O5 and O6 from the database. Return: violations. */
static inline unsigned pg_oracle_database(PGconn *c)
{
    unsigned bad = 0;
    long long late = pg_value(c, "SELECT count(*) FROM chime.keys k JOIN chime.leases l"
                                 " ON l.shard = k.shard AND l.epoch = k.end_epoch + 1"
                                 " WHERE k.end_epoch > 0 AND k.ended_at >= l.acquired");
    if (late != 0) {
        printf("# O5: %lld acknowledgements committed in a superseded epoch\n", late);
        bad++;
    }
    long long pending = pg_value(c, "SELECT count(*) FROM chime.pending");
    if (pending != 0) {
        printf("# O6: %lld timers still pending\n", pending);
        bad++;
    }
    return bad;
}

/* Free what was read; the pause (paused, t_stop, t_cont) is kept for another reading. */
static inline void pg_oracle_free(struct pg_oracle *o)
{
    free(o->puts);
    free(o->slots);
    struct pg_oracle keep = { .paused = o->paused, .t_stop = o->t_stop, .t_cont = o->t_cont };
    *o = keep;
}

#endif /* CHIME_TEST_PG_ORACLE_H */
