/* SPDX-License-Identifier: MIT */
/*
 * chime_store: the public API, and the table of loaded timers (store.h describes both).
 *
 * A put or cancel is decided with the key's stripe locked: the backend records the change (its order
 * for one key is therefore the table's order), then the table follows. With CHIME_SYNC_EACH the
 * caller then waits for the backend's group commit, with the stripe unlocked, so that one key's
 * commit does not hold up the keys that share its stripe.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "store/hash.h"
#include "store/store.h"

/* ---- the table ---- */

uint64_t chime__store_hash(const struct chime_store *s, const void *key, size_t len)
{
    return chime__siphash128(s->hash_k0, s->hash_k1, key, len).lo;
}

struct hot_stripe *chime__store_stripe(struct chime_store *s, uint64_t hash)
{
    _Static_assert(HOT_STRIPES == 64, "the stripe is the hash's top 6 bits");
    return &s->stripes[hash >> 58];
}

static int same_key(const struct hot *e, uint64_t hash, const void *key, size_t len)
{
    return e->hash == hash && e->key_len == len && memcmp(e->data, key, len) == 0;
}

void chime__store_find(struct hot_stripe *st, uint64_t hash, const void *key, size_t len,
                       struct hot **pending, struct hot **running)
{
    *pending = *running = NULL;
    if (!st->nbuckets)
        return;
    for (struct hot *e = st->buckets[hash & (st->nbuckets - 1)]; e; e = e->next)
        if (same_key(e, hash, key, len)) {
            if (e->state == HOT_FIRING || e->state == HOT_RUNNING)
                *running = e;
            else
                *pending = e;
        }
}

struct hot *chime__store_entry(struct chime_store *s, uint64_t hash, const void *key, size_t key_len,
                               const void *payload, size_t payload_len)
{
    struct hot *e = malloc(sizeof *e + key_len + payload_len);
    if (!e)
        return NULL;
    memset(e, 0, sizeof *e);
    e->s = s;
    e->hash = hash;
    e->key_len = (uint16_t)key_len;
    e->payload_len = (uint32_t)payload_len;
    memcpy(e->data, key, key_len);
    memcpy(e->data + key_len, payload, payload_len);
    return e;
}

void chime__store_free_entry(struct hot *e)
{
    free(e);
}

/* Double the buckets when there are more entries than buckets. Best effort: a failed allocation
 * leaves longer chains, never a wrong answer. */
static void grow(struct hot_stripe *st)
{
    size_t n = st->nbuckets ? st->nbuckets * 2 : 16;
    struct hot **b = calloc(n, sizeof *b);
    if (!b)
        return;
    for (size_t i = 0; i < st->nbuckets; i++)
        for (struct hot *e = st->buckets[i], *next; e; e = next) {
            next = e->next;
            struct hot **head = &b[e->hash & (n - 1)];
            e->next = *head;
            if (*head)
                (*head)->pprev = &e->next;
            *head = e;
            e->pprev = head;
        }
    free(st->buckets);
    st->buckets = b;
    st->nbuckets = n;
}

void chime__store_insert(struct hot_stripe *st, struct hot *e)
{
    if (st->count >= st->nbuckets)
        grow(st); /* open gave every stripe its first buckets: nbuckets is never 0 here */
    struct hot **head = &st->buckets[e->hash & (st->nbuckets - 1)];
    e->next = *head;
    if (*head)
        (*head)->pprev = &e->next;
    *head = e;
    e->pprev = head;
    st->count++;
}

void chime__store_unlink(struct hot_stripe *st, struct hot *e)
{
    /* No walk from the bucket: at 10^6 loaded timers each step of one was a cache miss, and the
     * acknowledgements' thread spent a tenth of its time there. */
    if (!e->pprev)
        return;
    *e->pprev = e->next;
    if (e->next)
        e->next->pprev = e->pprev;
    e->pprev = NULL;
    e->next = NULL;
    st->count--;
    if (e->superseded)
        st->superseded--; /* its outcome is being recorded, or it was refused: no longer pending */
}

void chime__store_supersede(struct hot_stripe *st, struct hot *r)
{
    if (!r->superseded && r->pprev)
        st->superseded++;
    r->superseded = 1;
}

void chime__store_drop(struct chime_store *s, struct hot_stripe *st, struct hot *e)
{
    chime__store_unlink(st, e);
    switch (e->state) {
    case HOT_ARMED:
        if (e->rid == 0) { /* never armed, or unfired at close: nobody else holds it */
            atomic_fetch_sub_explicit(&s->unarmed, 1, memory_order_relaxed);
            break;
        }
        if (chime_timer_cancel(s->rt, e->rid) == 0)
            break; /* the runtime will not call back: ours to free */
        /* Its callback (chime__store_due, or unfired at close: lifecycle.c) has begun and waits
         * for this lock: it frees it. After the runtime has stopped, nothing armed has a rid. */
        e->detached = 1;
        return;
    case HOT_QUEUED: {
        /* In the dispatcher's queue: the dispatcher frees it, or close's seal (lifecycle.c), which
         * takes dlock to walk the queue; once the queue is given up, nothing else holds it. */
        pthread_mutex_lock(&s->dlock);
        int sealed = s->sealed;
        e->detached = !sealed;
        pthread_mutex_unlock(&s->dlock);
        if (!sealed)
            return;
        break;
    }
    default: /* HELD: in no queue, no runtime timer */
        break;
    }
    free(e);
}

void chime__store_fail(struct chime_store *s, int err)
{
    int none = 0;
    atomic_compare_exchange_strong_explicit(&s->error, &none, err, memory_order_relaxed,
                                            memory_order_relaxed);
}

void chime__store_install(struct chime_store *s, struct hot_stripe *st, uint64_t hash,
                          const struct chime__timer *t, int check_tombs)
{
    struct hot *p, *r;
    chime__store_find(st, hash, t->key, t->key_len, &p, &r);
    if ((p && chime__ref_at_least(&p->ref, &t->ref)) || (r && chime__ref_at_least(&r->ref, &t->ref)))
        return; /* the table holds this timer (under this fence) or a newer one */
    if (check_tombs && chime__store_tombstoned(s, hash, t->key, t->key_len))
        return; /* changed while the load ran: the change is what counts (keeper.c) */
    if (t->attempt >= s->cfg.max_attempts) {
        /* A restart found its last allowed firing unacknowledged: it goes to the dead letters. */
        int err = s->ops->bury(s->b, t);
        if (err == 0)
            st->buried++;
        else if (err != -ESTALE) /* still pending on disk, and no load reads it again */
            chime__store_fail(s, err);
        return;
    }
    struct hot *e = chime__store_entry(s, hash, t->key, t->key_len, t->payload, t->payload_len);
    if (!e) { /* the timer stays recorded; it fires after a restart */
        chime__store_fail(s, -ENOMEM);
        return;
    }
    if (p)
        chime__store_drop(s, st, p);
    e->ref = t->ref;
    e->due_ns = t->due_ns;
    e->attempt = t->attempt;
    chime__store_wait_for(e, r);
    chime__store_insert(st, e);
    chime__store_arm(s, e);
}

/* ---- placing a timer the logic decided on ---- */

/*
 * After the backend recorded a put (a user's, a retry, a requeue) of `e`'s key: keep e in the table
 * and arm it if this process fires it and it is due within what is loaded; otherwise it waits on disk.
 * During a load its key is noted either way, so that the load does not resurrect the version it
 * replaced (keeper.c, LOADING 2). Consumes e. Stripe locked.
 */
static void place(struct chime_store *s, struct hot_stripe *st, struct hot *e, int owned)
{
    uint64_t loading; /* the load running when looked at (its boundary), or 0 */
    uint64_t limit = chime__store_limit(s, &loading);
    if (loading)
        chime__store_tomb(s, e->hash, e->data, e->key_len, loading);
    if (owned && e->due_ns < limit) {
        chime__store_insert(st, e);
        chime__store_arm(s, e);
        return;
    }
    free(e);
}

void chime__store_place(struct chime_store *s, struct hot_stripe *st, struct hot *e, int owned)
{
    place(s, st, e, owned);
}

/* ---- the API ---- */

static int check_key(const void *key, size_t len)
{
    return key && len && len <= CHIME_STORE_KEY_MAX;
}

static int usable(const chime_store *s)
{
    if (atomic_load_explicit(&s->closing, memory_order_acquire)) /* pairs with close's store */
        return -ESHUTDOWN;
    return atomic_load_explicit(&s->error, memory_order_relaxed);
}

/* Whether a call on one key may go on. Return: 0 or the error. */
static int check_call(const chime_store *s, const void *key, size_t key_len)
{
    if (!s || !check_key(key, key_len))
        return -EINVAL;
    return usable(s);
}

/* The start of every call on one key: check it, and lock its stripe. Return: 0 (locked) or the error. */
static int begin(chime_store *s, const void *key, size_t key_len, uint64_t *hash,
                 struct hot_stripe **st)
{
    int err = check_call(s, key, key_len);
    if (!err && s->ops->admit) /* before any lock: it may wait for the backend (backend.h) */
        err = s->ops->admit(s->b);
    if (err)
        return err;
    *hash = chime__store_hash(s, key, key_len);
    *st = chime__store_stripe(s, *hash);
    pthread_mutex_lock(&(*st)->lock);
    return 0;
}

/* After a change was recorded: wait for its commit if the mode says so. */
static int durable(chime_store *s, uint64_t ticket)
{
    return s->cfg.sync == CHIME_SYNC_EACH ? s->ops->wait(s->b, ticket) : 0;
}

CHIME_API int chime_store_put(chime_store *s, const void *key, size_t key_len, const void *payload,
                              size_t payload_len, uint64_t due_ns)
{
    if (!payload || !payload_len || payload_len > CHIME_STORE_PAYLOAD_MAX)
        return -EINVAL;
    uint64_t hash, ticket = 0;
    struct hot_stripe *st;
    int err = begin(s, key, key_len, &hash, &st);
    if (err)
        return err;
    /* The entry first if it will be loaded (a far timer needs none): once the backend has recorded
     * the put, nothing may fail. */
    uint64_t loading; /* the load running when looked at (its boundary), or 0 */
    int hot = due_ns < chime__store_limit(s, &loading);
    struct hot *e = hot ? chime__store_entry(s, hash, key, key_len, payload, payload_len) : NULL;
    struct hot *p, *r;
    chime__store_find(st, hash, key, key_len, &p, &r);
    struct chime__put put = { key, key_len, payload, payload_len, due_ns, 0, 0, 0 };
    struct chime__put_result res;
    err = hot && !e ? -ENOMEM : s->ops->put(s->b, &put, &res, &ticket);
    if (!err) {
        if (p)
            chime__store_drop(s, st, p);
        if (r)
            chime__store_supersede(st, r);
        if (!res.ref.version) {
            /* Deferred (backend.h, chime__put_result): the backend arms it once it is recorded. No
             * tomb: a load may hand over what the backend holds, the old version at worst, which
             * the arm replaces or the backend refuses to fire. */
            free(e);
            e = NULL;
        } else if (!e && res.owned && due_ns < chime__store_limit(s, &loading)) {
            /* A load began meanwhile and now covers it: it needs an entry after all. */
            e = chime__store_entry(s, hash, key, key_len, payload, payload_len);
            if (!e) /* recorded but not loadable until a restart: stop rather than miss it */
                chime__store_fail(s, -ENOMEM);
        }
        if (e) {
            e->ref = res.ref;
            e->due_ns = due_ns;
            chime__store_wait_for(e, r);
            place(s, st, e, res.owned);
        } else if (loading && res.ref.version) {
            chime__store_tomb(s, hash, key, key_len, loading); /* as place does */
        }
    }
    pthread_mutex_unlock(&st->lock);
    if (err) {
        free(e);
        return err;
    }
    return durable(s, ticket);
}

CHIME_API int chime_store_cancel(chime_store *s, const void *key, size_t key_len)
{
    uint64_t hash, ticket = 0;
    struct hot_stripe *st;
    int err = begin(s, key, key_len, &hash, &st);
    if (err)
        return err;
    struct hot *p, *r;
    chime__store_find(st, hash, key, key_len, &p, &r);
    struct chime__ref victim;
    /* A firing taken by the dispatcher is not cancellable even before the backend has recorded it. */
    err = s->ops->cancel(s->b, key, key_len, r ? r->ref.version : 0, &victim, &ticket);
    if (err == -ENOENT && r)
        err = -EINPROGRESS; /* nothing pending, but a firing runs: it cannot be stopped */
    if (!err) {
        if (p)
            chime__store_drop(s, st, p);
        if (r) /* it killed a newer put, which had marked r already; kept for clarity */
            chime__store_supersede(st, r);
        uint64_t loading; /* the load running when looked at (its boundary), or 0 */
        chime__store_limit(s, &loading);
        if (loading)
            chime__store_tomb(s, hash, key, key_len, loading);
    }
    pthread_mutex_unlock(&st->lock);
    return err ? err : durable(s, ticket);
}

CHIME_API int chime_store_sync(chime_store *s)
{
    if (!s)
        return -EINVAL;
    int err = usable(s);
    if (err)
        return err;
    chime__store_outcomes_wait(s); /* outcomes of handlers that returned before this call... */
    chime__store_acks_flush(s);    /* ...are appended, or queued: record the queue (acks.c) */
    return s->ops->sync(s->b);
}

struct dead_list {
    chime_dead_fn *fn;
    void *ctx;
};

static int dead_one(void *ctx, const struct chime__timer *t)
{
    struct dead_list *d = ctx;
    struct chime_fire f = { t->key, t->key_len, t->payload, t->payload_len, t->due_ns, t->attempt,
                             0 /* a dead letter has no fence */ };
    return d->fn(d->ctx, &f);
}

CHIME_API int chime_store_dead_list(chime_store *s, chime_dead_fn *fn, void *ctx)
{
    if (!s || !fn)
        return -EINVAL;
    int err = usable(s);
    struct dead_list d = { fn, ctx };
    return err ? err : s->ops->dead_list(s->b, dead_one, &d);
}

struct requeue {
    struct chime_store *s;
    struct hot_stripe *st;
    uint64_t hash;
    struct hot *pending, *running;
    const struct chime__put_result *res; /* filled by the backend before it calls requeued */
    int err;
};

/* The backend hands over the requeued timer (with the key's stripe locked by us). */
static int requeued(void *ctx, const struct chime__timer *t)
{
    struct requeue *q = ctx;
    struct hot *e = chime__store_entry(q->s, q->hash, t->key, t->key_len, t->payload,
                                       t->payload_len);
    if (q->pending)
        chime__store_drop(q->s, q->st, q->pending);
    if (!e) { /* recorded, but not armed: it fires after a restart */
        chime__store_fail(q->s, -ENOMEM);
        return 0;
    }
    e->ref = t->ref;
    e->due_ns = t->due_ns;
    chime__store_wait_for(e, q->running);
    place(q->s, q->st, e, q->res->owned); /* another node's shard: it waits there (found in review:
                                              this node held it with fence 0, which fire refuses) */
    return 0;
}

/*
 * The dead letter is read first, with the stripe unlocked (backend.h, dead_read): the journal's
 * read may flush its log into a run, and with the stripe locked every call on the keys that share
 * it waited for that (found in review). The requeue itself is decided with the stripe
 * locked, as a put is, and only if the key's dead letter is still the one read: if a bury, drop
 * or requeue of the key came in between (-EAGAIN), it is read again. Each retry follows another
 * call that changed the key's dead letter.
 */
CHIME_API int chime_store_dead_requeue(chime_store *s, const void *key, size_t key_len,
                                       uint64_t due_ns)
{
    struct chime__put_result res;
    uint64_t ticket = 0;
    int err;
    do {
        struct chime__dead seen = { 0, NULL, 0 };
        err = check_call(s, key, key_len);
        if (!err && s->ops->dead_read)
            err = s->ops->dead_read(s->b, key, key_len, &seen);
        struct requeue q = { s, NULL, 0, NULL, NULL, &res, 0 };
        if (!err)
            err = begin(s, key, key_len, &q.hash, &q.st);
        if (err) {
            free(seen.payload);
            return err;
        }
        chime__store_find(q.st, q.hash, key, key_len, &q.pending, &q.running);
        err = s->ops->dead_requeue(s->b, key, key_len, due_ns, s->ops->dead_read ? &seen : NULL,
                                   &res, requeued, &q, &ticket);
        if (!err && q.running)
            chime__store_supersede(q.st, q.running);
        pthread_mutex_unlock(&q.st->lock);
        free(seen.payload);
    } while (err == -EAGAIN);
    return err ? err : durable(s, ticket);
}

CHIME_API int chime_store_dead_drop(chime_store *s, const void *key, size_t key_len)
{
    uint64_t hash, ticket = 0;
    struct hot_stripe *st;
    int err = begin(s, key, key_len, &hash, &st); /* the backend wants one key's calls in order */
    if (err)
        return err;
    err = s->ops->dead_drop(s->b, key, key_len, &ticket);
    pthread_mutex_unlock(&st->lock);
    return err ? err : durable(s, ticket);
}

CHIME_API void chime_store_stats(const chime_store *s, struct chime_store_stats *out)
{
    if (!s || !out)
        return;
    /* running first, acquire: pairs with handler_ended's release decrements (fire.c), so a count
     * of handlers that are over is read with their outcomes already in the tally below; read after
     * it, a 0 could follow a tally that missed them (found by the fire benchmark once outcomes were
     * recorded in groups: acks.c). */
    uint64_t running = atomic_load_explicit(&s->running, memory_order_acquire);
    struct chime__backend_stats b = { 0, 0, 0 };
    s->ops->stats(s->b, &b);
    uint64_t superseded = chime__store_tally(s, out);
    out->pending = b.pending + superseded; /* the backend counts a key once (hot_stripe) */
    out->running = running;
    out->dead = b.dead;
    out->journal_bytes = b.bytes;
    out->error = atomic_load_explicit(&s->error, memory_order_relaxed);
    out->lead_ns = chime__lead_ns(&s->lead);
}

const char *chime__store_check(struct chime_store *s)
{
    const char *why = NULL;
    for (int i = 0; i < HOT_STRIPES && !why; i++) {
        struct hot_stripe *st = &s->stripes[i];
        pthread_mutex_lock(&st->lock);
        size_t n = 0, superseded = 0;
        for (size_t b = 0; b < st->nbuckets && !why; b++) {
            struct hot **at = &st->buckets[b];
            for (struct hot *e = *at; e && !why; at = &e->next, e = e->next, n++) {
                superseded += e->superseded;
                if (e->pprev != at)
                    why = "an entry's pprev is not what points at it";
                else if ((e->hash & (st->nbuckets - 1)) != b || (e->hash >> 58) != (uint64_t)i)
                    why = "an entry is in another bucket or stripe than its hash's";
                else if (e->state > HOT_RUNNING)
                    why = "an entry has no state";
                int waits_for = 0; /* the running entry e waits for, knowing it (waited_for) */
                for (struct hot *o = st->buckets[b]; o && !why; o = o->next) { /* chains are short */
                    if (o == e || !same_key(o, e->hash, e->data, e->key_len))
                        continue;
                    if ((o->state >= HOT_FIRING) == (e->state >= HOT_FIRING))
                        why = "a key has two pending or two running entries";
                    waits_for |= o->state >= HOT_FIRING && o->waited_for;
                }
                if (!why && e->wait_prev && e->state < HOT_FIRING && !waits_for)
                    why = "a held entry waits for no running entry that will release it";
            }
        }
        if (!why && n != st->count)
            why = "a stripe's count is not its entries'";
        if (!why && superseded != st->superseded)
            why = "a stripe's count of superseded firings is not its entries'";
        pthread_mutex_unlock(&st->lock);
    }
    return why;
}

uint64_t chime__store_tally(const struct chime_store *s, struct chime_store_stats *out)
{
    uint64_t superseded = 0;
    *out = (struct chime_store_stats){ 0 };
    for (int i = 0; i < HOT_STRIPES; i++) { /* the counts are the stripes' (store.h) */
        struct hot_stripe *st = (struct hot_stripe *)&s->stripes[i]; /* its lock is not const */
        pthread_mutex_lock(&st->lock);
        out->loaded += st->count;
        out->fired += st->fired;
        out->acked += st->acked;
        out->retried += st->retried;
        out->buried += st->buried;
        superseded += st->superseded;
        pthread_mutex_unlock(&st->lock);
    }
    return superseded;
}
