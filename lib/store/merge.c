/* SPDX-License-Identifier: MIT */
/* Merging and collapsing run-ordered streams of records (merge.h). */
#include "store/merge.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static int array_next(struct chime__source *src, struct chime__rec *out)
{
    struct chime__array_source *s = (struct chime__array_source *)src;
    if (s->i == s->n)
        return 0;
    *out = *s->recs[s->i++];
    return 1;
}

void chime__array_source_init(struct chime__array_source *s, struct chime__rec *const *recs,
                              size_t n)
{
    *s = (struct chime__array_source){ { array_next, 1 }, recs, n, 0 };
}

void chime__collapse_init(struct chime__collapse *c, enum chime__collapse_mode mode,
                          int drop_orphans, chime__emit_fn *emit, void *ctx)
{
    *c = (struct chime__collapse){ .mode = mode, .drop_orphans = drop_orphans, .emit = emit,
                                   .ctx = ctx };
}

void chime__collapse_free(struct chime__collapse *c)
{
    free(c->buf);
    c->buf = NULL;
}

/* Room for the copies: the put's key and payload at 0, the kill's key, then the fire's. */
#define KILL_KEY(c) ((c)->buf + CHIME_STORE_KEY_MAX + CHIME_STORE_PAYLOAD_MAX)
#define FIRE_KEY(c) (KILL_KEY(c) + CHIME_STORE_KEY_MAX)

static int ensure_buf(struct chime__collapse *c)
{
    if (c->buf)
        return 0;
    c->cap = CHIME_STORE_KEY_MAX * 3 + CHIME_STORE_PAYLOAD_MAX;
    c->buf = malloc(c->cap);
    return c->buf ? 0 : -ENOMEM;
}

/* Emit what survives of the group, and close it. */
static int flush_group(struct chime__collapse *c)
{
    if (!c->open)
        return 0;
    c->open = 0;
    if (c->has_put) {
        if (c->has_kill)
            return 0; /* both ends are here: the version is gone */
        struct chime__rec r = c->put;
        if (c->has_fire && c->fire_max > r.attempt) {
            r.attempt = c->fire_max;
            r.raw = NULL; /* changed: it is encoded afresh */
        }
        return c->emit(c->ctx, &r);
    }
    if (c->mode == CHIME__KEEP_LIVE || c->drop_orphans)
        return 0;
    if (c->has_kill) /* a FIRE of an ended version is of no use to anyone */
        return c->emit(c->ctx, &c->kill);
    return c->emit(c->ctx, &c->fire); /* the one with the highest attempt */
}

/* Gather r into the group. Unless the source is stable, r is copied: its source moves on before the
 * group ends. */
static int add(struct chime__collapse *c, const struct chime__rec *r, int stable)
{
    int section = chime__rec_section(r);
    if (c->open && (section != c->section || r->version != c->version)) {
        int rc = flush_group(c);
        if (rc)
            return rc;
    }
    if (!c->open) {
        c->open = 1;
        c->section = section;
        c->version = r->version;
        c->has_put = c->has_kill = c->has_fire = 0;
        c->fire_max = 0;
    }
    switch (r->type) {
    case CHIME__PUT:
    case CHIME__DEAD:
        c->has_put = 1;
        c->put = *r;
        if (!stable) {
            memcpy(c->buf, r->key, r->key_len);
            memcpy(c->buf + r->key_len, r->payload, r->payload_len);
            c->put.key = c->buf;
            c->put.payload = c->buf + r->key_len;
            c->put.raw = NULL;
        }
        break;
    case CHIME__KILL:
        c->has_kill = 1;
        c->kill = *r;
        if (!stable) {
            memcpy(KILL_KEY(c), r->key, r->key_len);
            c->kill.key = KILL_KEY(c);
            c->kill.raw = NULL;
        }
        break;
    case CHIME__FIRE:
        if (!c->has_fire || r->attempt > c->fire_max) {
            c->fire = *r;
            if (!stable) {
                memcpy(FIRE_KEY(c), r->key, r->key_len);
                c->fire.key = FIRE_KEY(c);
                c->fire.raw = NULL;
            }
            c->fire_max = r->attempt;
        }
        c->has_fire = 1;
        break;
    default:
        return -EBADMSG;
    }
    return 0;
}

int chime__merge(struct chime__source **src, size_t n, struct chime__collapse *c)
{
    int rc = ensure_buf(c);
    if (rc)
        return rc;
    struct chime__rec *head = n ? malloc(n * sizeof *head) : NULL;
    int *live = n ? malloc(n * sizeof *live) : NULL;
    if (n && (!head || !live)) {
        free(head);
        free(live);
        return -ENOMEM;
    }
    for (size_t i = 0; i < n && !rc; i++) {
        live[i] = src[i]->next(src[i], &head[i]);
        if (live[i] < 0)
            rc = live[i];
    }
    while (!rc) {
        /* A handful of sources (runs): a linear scan for the least head beats a heap. */
        size_t best = n;
        for (size_t i = 0; i < n; i++)
            if (live[i] == 1 && (best == n || chime__rec_cmp(&head[i], &head[best]) < 0))
                best = i;
        if (best == n)
            break;
        rc = add(c, &head[best], src[best]->stable);
        if (rc)
            break;
        live[best] = src[best]->next(src[best], &head[best]);
        if (live[best] < 0)
            rc = live[best];
    }
    if (!rc)
        rc = flush_group(c);
    free(head);
    free(live);
    return rc;
}
