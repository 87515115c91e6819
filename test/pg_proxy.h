/* SPDX-License-Identifier: MIT */
/*
 * A connection cutter for the PostgreSQL backend's tests: a TCP relay between chime and the real
 * server of test/pg_util.h, which follows the wire protocol (version 3) as it passes and cuts a
 * connection at a chosen point, as a network or a server crash would. Nothing is answered in the
 * server's place: every byte that is not cut comes from PostgreSQL.
 *
 *   pg_proxy_listen       listen on a free port of 127.0.0.1, for the server's port
 *   pg_proxy_serve        start relaying (connections made before wait in the listening queue);
 *                         a test that forks processes does so before: ThreadSanitizer refuses to
 *                         start threads in a child of a process that has several
 *   pg_proxy_start        both
 *   pg_proxy_conninfo     a connection string through the relay (SSL and GSS encryption off: the
 *                         relay reads the messages, which must therefore be in the clear)
 *   pg_proxy_cut_commit   cut the next n connections whose transaction ran the prepared statement
 *                         `statement` (or, given as "sql:TEXT", a statement whose text holds TEXT,
 *                         prepared or not), at its COMMIT: the server has committed, and its reply
 *                         "COMMIT" is dropped with the connection. The client cannot tell a commit
 *                         from a rollback, and must ask the server afterwards.
 *   pg_proxy_stall_commit the same point of the next n such transactions (or, for a statement run
 *                         outside BEGIN, the end of its implicit transaction), but instead of
 *                         cutting, withhold that reply and all that follows on the connection, and
 *                         keep it open: a server alive but stuck, whose kernel still answers. Only
 *                         the client giving up ends it.
 *   pg_proxy_stall_bind   stop reading from chime, for the next n connections that send a Bind
 *                         (a statement's parameters) of more than `over` bytes, at that Bind's
 *                         head: a server that reads no more, whose kernel still acknowledges, so
 *                         that chime's sends fill the sockets and block
 *   pg_proxy_keep_server  while on, a connection stalled at a Bind keeps its server end open once
 *                         chime's end closes: the session stays, waiting for the rest
 *   pg_proxy_rate         carry chime's messages to the server at most at `rate` bytes a second
 *                         (0: as fast as it can), as a slow link would
 *   pg_proxy_hold         hold (1) or release (0) every message from the server on every
 *                         connection: while held, nothing reaches chime, and so a node's lane
 *                         cannot finish a batch while the test queues the next one
 *   pg_proxy_cut_random   cut connections at random messages, each in either direction with a
 *                         chance of per_million in a million (0: off), from a seeded generator
 *   pg_proxy_cuts         connections cut so far
 *   pg_proxy_stalls       connections stalled so far (either way)
 *   pg_proxy_stop         cut everything, join the relay's threads, close the sockets
 *
 * Two threads per connection, one per direction, each reading whole messages with blocking calls
 * and writing them on: one thread for both would deadlock when the server and chime both write
 * more than the sockets hold. A cut shuts both sockets down, which ends both threads' reads.
 */
#ifndef CHIME_TEST_PG_PROXY_H
#define CHIME_TEST_PG_PROXY_H

#include "pg_util.h" /* first: it asks for _GNU_SOURCE */
#include "rng.h"

#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

struct pg_proxy;

struct pg_proxy_conn {
    struct pg_proxy *p;
    struct pg_proxy_conn *next;
    int cfd, sfd;             /* chime's end, the server's end */
    pthread_t up, down;       /* chime -> server, server -> chime */
    _Atomic int in_target;    /* the transaction under way ran the target statement */
    int stalled;              /* (the down thread's) nothing more goes to chime */
    _Atomic int stalled_up;   /* nothing more is read from chime, and its end stays open */
};

struct pg_proxy {
    int lfd, port, upstream;
    int serving;              /* the acceptor runs */
    pthread_t acceptor;
    pthread_mutex_t lock;     /* everything below */
    pthread_cond_t released;  /* hold became 0, or the relay stops */
    int hold, stopping;
    int keep_server;          /* pg_proxy_keep_server's */
    char target[64];          /* pg_proxy_cut_commit's statement */
    int commits_to_cut;
    int commits_to_stall;
    int binds_to_stall;       /* pg_proxy_stall_bind's */
    size_t stall_bind_over;
    unsigned per_million;     /* pg_proxy_cut_random's chance */
    struct rng rng;
    int cuts, stalls;
    size_t up_rate;           /* pg_proxy_rate's */
    struct pg_proxy_conn *conns;
};

/* ---- one message ---- */

struct pg_proxy_msg {
    unsigned char *b;
    size_t len, cap;
};

static inline int pg_proxy_read_all(int fd, unsigned char *to, size_t n)
{
    while (n) {
        ssize_t got = read(fd, to, n);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            return -1;
        to += got;
        n -= (size_t)got;
    }
    return 0;
}

static inline int pg_proxy_write_all(int fd, const unsigned char *from, size_t n)
{
    while (n) {
        ssize_t put = send(fd, from, n, MSG_NOSIGNAL);
        if (put < 0 && errno == EINTR)
            continue;
        if (put <= 0)
            return -1;
        from += put;
        n -= (size_t)put;
    }
    return 0;
}

/* Read the head of one message: typed (a type byte, then a 4-byte length that counts itself and
 * the body), or the untyped startup message (the length, then the body). m->len is then the
 * whole message's, whose body pg_proxy_read_body reads into m->b[head .. m->len).
 * Return: 0, or -1 at the end of the stream or on an error. */
static inline int pg_proxy_read_head(int fd, struct pg_proxy_msg *m, int typed)
{
    size_t head = typed ? 5 : 4;
    if (m->cap < head) {
        m->b = realloc(m->b, 4096);
        m->cap = 4096;
    }
    if (pg_proxy_read_all(fd, m->b, head))
        return -1;
    const unsigned char *l = m->b + head - 4;
    size_t len = (size_t)l[0] << 24 | (size_t)l[1] << 16 | (size_t)l[2] << 8 | l[3];
    if (len < 4 || len > ((size_t)1 << 30))
        return -1; /* not the protocol this relay reads */
    m->len = head - 4 + len;
    if (m->len > m->cap) {
        m->b = realloc(m->b, m->len);
        m->cap = m->len;
    }
    return 0;
}

static inline int pg_proxy_read_body(int fd, struct pg_proxy_msg *m, int typed)
{
    size_t head = typed ? 5 : 4;
    return pg_proxy_read_all(fd, m->b + head, m->len - head);
}

/* The whole message, as above. */
static inline int pg_proxy_read_msg(int fd, struct pg_proxy_msg *m, int typed)
{
    return pg_proxy_read_head(fd, m, typed) || pg_proxy_read_body(fd, m, typed);
}

/* ---- cutting ---- */

static inline void pg_proxy_cut(struct pg_proxy_conn *c)
{
    shutdown(c->cfd, SHUT_RDWR);
    shutdown(c->sfd, SHUT_RDWR);
}

/* Whether a random cut falls on this message; counted if so. */
static inline int pg_proxy_chance(struct pg_proxy *p)
{
    pthread_mutex_lock(&p->lock);
    int cut = p->per_million && rng_below(&p->rng, 1000000) < p->per_million;
    p->cuts += cut;
    pthread_mutex_unlock(&p->lock);
    return cut;
}

/* Whether an upstream stall falls on a Bind of len bytes; counted if so. */
static inline int pg_proxy_stall_here(struct pg_proxy *p, size_t len)
{
    pthread_mutex_lock(&p->lock);
    int stall = p->binds_to_stall > 0 && len > p->stall_bind_over;
    p->binds_to_stall -= stall;
    p->stalls += stall;
    pthread_mutex_unlock(&p->lock);
    return stall;
}

/* Write on to the server at pg_proxy_rate's rate: a chunk of 1/20 s's worth at a time, each
 * followed by the time the link would take to carry it (a pace, not a wait for anything). */
static inline int pg_proxy_write_paced(struct pg_proxy *p, int fd, const unsigned char *from,
                                       size_t n)
{
    pthread_mutex_lock(&p->lock);
    size_t rate = p->up_rate;
    pthread_mutex_unlock(&p->lock);
    if (!rate)
        return pg_proxy_write_all(fd, from, n);
    size_t chunk = rate / 20 ? rate / 20 : 1;
    while (n) {
        size_t k = n < chunk ? n : chunk;
        if (pg_proxy_write_all(fd, from, k))
            return -1;
        uint64_t ns = (uint64_t)k * 1000000000u / rate;
        struct timespec ts = { (time_t)(ns / 1000000000u), (long)(ns % 1000000000u) };
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
            ;
        from += k;
        n -= k;
    }
    return 0;
}

/* chime -> server. A Bind ('B': portal name, statement name, ...) of the target statement marks the
 * transaction under way. */
static inline void *pg_proxy_up(void *arg)
{
    struct pg_proxy_conn *c = arg;
    struct pg_proxy *p = c->p;
    struct pg_proxy_msg m = { 0 };
    for (int typed = 0; pg_proxy_read_head(c->cfd, &m, typed) == 0; typed = 1) {
        if (typed && m.b[0] == 'B' && pg_proxy_stall_here(p, m.len)) {
            /* Read nothing more: chime's writes fill the sockets and stop. Until chime's end is
             * gone or pg_proxy_stop shuts this one down. */
            atomic_store(&c->stalled_up, 1);
            struct pollfd pfd = { .fd = c->cfd, .events = POLLRDHUP };
            while (poll(&pfd, 1, -1) < 0 && errno == EINTR)
                ;
            pthread_mutex_lock(&p->lock); /* chime's end is gone; the server's may stay open */
            while (p->keep_server && !p->stopping)
                pthread_cond_wait(&p->released, &p->lock);
            pthread_mutex_unlock(&p->lock);
            break;
        }
        if (pg_proxy_read_body(c->cfd, &m, typed))
            break;
        if (typed && m.b[0] == 'P' && m.len > 6) { /* Parse: name, then the statement's text */
            const char *name = (const char *)m.b + 5, *text = name + strnlen(name, m.len - 5) + 1;
            size_t rest = (size_t)((const char *)m.b + m.len - text);
            pthread_mutex_lock(&p->lock);
            int hit = text < (const char *)m.b + m.len && !strncmp(p->target, "sql:", 4) &&
                      memmem(text, rest, p->target + 4, strlen(p->target + 4));
            pthread_mutex_unlock(&p->lock);
            if (hit)
                atomic_store(&c->in_target, 1);
        }
        if (typed && m.b[0] == 'B' && m.len > 6) {
            const char *portal = (const char *)m.b + 5;
            size_t plen = strnlen(portal, m.len - 5);
            const char *stmt = portal + plen + 1;
            size_t rest = m.len - 5 - plen - 1;
            if (5 + plen + 1 < m.len && strnlen(stmt, rest) < rest) {
                pthread_mutex_lock(&p->lock);
                int hit = p->target[0] && strcmp(stmt, p->target) == 0;
                pthread_mutex_unlock(&p->lock);
                if (hit)
                    atomic_store(&c->in_target, 1);
            }
        }
        if ((typed && pg_proxy_chance(p)) || pg_proxy_write_paced(p, c->sfd, m.b, m.len))
            break;
    }
    free(m.b);
    pg_proxy_cut(c); /* also when chime closed: the server's end goes with it */
    return NULL;
}

/* server -> chime. A target transaction ends at its COMMIT's CommandComplete ('C'), or, if it had
 * no BEGIN, at the ReadyForQuery ('Z') with status 'I' that ends it: that is where
 * pg_proxy_cut_commit cuts and pg_proxy_stall_commit stalls. */
static inline void *pg_proxy_down(void *arg)
{
    struct pg_proxy_conn *c = arg;
    struct pg_proxy *p = c->p;
    struct pg_proxy_msg m = { 0 };
    while (pg_proxy_read_msg(c->sfd, &m, 1) == 0) {
        int idle = m.b[0] == 'Z' && m.len == 6 && m.b[5] == 'I';
        int commit = m.b[0] == 'C' && m.len == 5 + 7 && memcmp(m.b + 5, "COMMIT", 7) == 0;
        if ((idle || commit) && atomic_exchange(&c->in_target, 0)) {
            pthread_mutex_lock(&p->lock);
            int cut = p->commits_to_cut > 0;
            int stall = !cut && p->commits_to_stall > 0;
            p->commits_to_cut -= cut;
            p->commits_to_stall -= stall;
            p->cuts += cut;
            p->stalls += stall;
            pthread_mutex_unlock(&p->lock);
            if (cut)
                break;
            c->stalled |= stall;
        }
        if (c->stalled)
            continue; /* read on and drop, until chime's end closes and takes this one with it */
        pthread_mutex_lock(&p->lock);
        while (p->hold && !p->stopping)
            pthread_cond_wait(&p->released, &p->lock);
        pthread_mutex_unlock(&p->lock);
        if (pg_proxy_chance(p) || pg_proxy_write_all(c->cfd, m.b, m.len))
            break;
    }
    free(m.b);
    if (atomic_load(&c->stalled_up))
        shutdown(c->sfd, SHUT_RDWR); /* the server gave up on it; chime must find out by itself */
    else
        pg_proxy_cut(c);
    return NULL;
}

static inline void *pg_proxy_accept(void *arg)
{
    struct pg_proxy *p = arg;
    for (;;) {
        int cfd = accept(p->lfd, NULL, NULL);
        if (cfd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            return NULL; /* pg_proxy_stop shut the listening socket down */
        }
        struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)p->upstream),
                                 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        int sfd = socket(AF_INET, SOCK_STREAM, 0);
        struct pg_proxy_conn *c = calloc(1, sizeof *c);
        if (sfd < 0 || !c || connect(sfd, (struct sockaddr *)&a, sizeof a) != 0) {
            close(cfd);
            if (sfd >= 0)
                close(sfd);
            free(c);
            continue; /* chime sees a refused connection, and tries again */
        }
        /* Each message is written as it is read: without this, Nagle's algorithm holds a small
         * one back until the previous is acknowledged, and a delayed acknowledgement makes that
         * 40 ms. */
        int one = 1;
        setsockopt(cfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        setsockopt(sfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        c->p = p;
        c->cfd = cfd;
        c->sfd = sfd;
        pthread_mutex_lock(&p->lock);
        c->next = p->conns;
        p->conns = c;
        pthread_mutex_unlock(&p->lock);
        pthread_create(&c->up, NULL, pg_proxy_up, c);
        pthread_create(&c->down, NULL, pg_proxy_down, c);
    }
}

/* ---- the relay ---- */

/* Return: 0, or -1 if no socket could be had. */
static inline int pg_proxy_listen(struct pg_proxy *p, int upstream)
{
    memset(p, 0, sizeof *p);
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->released, NULL);
    p->upstream = upstream;
    p->lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = 0,
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t len = sizeof a;
    if (p->lfd < 0 || bind(p->lfd, (struct sockaddr *)&a, sizeof a) != 0 || listen(p->lfd, 64) ||
        getsockname(p->lfd, (struct sockaddr *)&a, &len) != 0)
        return -1;
    p->port = ntohs(a.sin_port);
    return 0;
}

static inline int pg_proxy_serve(struct pg_proxy *p)
{
    p->serving = pthread_create(&p->acceptor, NULL, pg_proxy_accept, p) == 0;
    return p->serving ? 0 : -1;
}

static inline int pg_proxy_start(struct pg_proxy *p, int upstream)
{
    return pg_proxy_listen(p, upstream) == 0 ? pg_proxy_serve(p) : -1;
}

/* Database `dbname` through the relay. */
static inline void pg_proxy_conninfo(const struct pg_proxy *p, const char *dbname, char *out,
                                     size_t n)
{
    snprintf(out, n, "host=127.0.0.1 port=%d user=postgres dbname=%s sslmode=disable "
                     "gssencmode=disable", p->port, dbname);
}

static inline void pg_proxy_cut_commit(struct pg_proxy *p, const char *statement, int n)
{
    pthread_mutex_lock(&p->lock);
    snprintf(p->target, sizeof p->target, "%s", statement);
    p->commits_to_cut = n;
    pthread_mutex_unlock(&p->lock);
}

static inline void pg_proxy_stall_commit(struct pg_proxy *p, const char *statement, int n)
{
    pthread_mutex_lock(&p->lock);
    snprintf(p->target, sizeof p->target, "%s", statement);
    p->commits_to_stall = n;
    pthread_mutex_unlock(&p->lock);
}

static inline void pg_proxy_stall_bind(struct pg_proxy *p, size_t over, int n)
{
    pthread_mutex_lock(&p->lock);
    p->stall_bind_over = over;
    p->binds_to_stall = n;
    pthread_mutex_unlock(&p->lock);
}

/* While on, a connection stalled by pg_proxy_stall_bind keeps its server end open after chime's
 * end closes: the server never hears of the client again, as behind a middlebox that lost the
 * flow (or a proxy that keeps its server connections). */
static inline void pg_proxy_keep_server(struct pg_proxy *p, int on)
{
    pthread_mutex_lock(&p->lock);
    p->keep_server = on;
    pthread_cond_broadcast(&p->released);
    pthread_mutex_unlock(&p->lock);
}

static inline void pg_proxy_rate(struct pg_proxy *p, size_t rate)
{
    pthread_mutex_lock(&p->lock);
    p->up_rate = rate;
    pthread_mutex_unlock(&p->lock);
}

static inline void pg_proxy_hold(struct pg_proxy *p, int on)
{
    pthread_mutex_lock(&p->lock);
    p->hold = on;
    pthread_cond_broadcast(&p->released);
    pthread_mutex_unlock(&p->lock);
}

static inline void pg_proxy_cut_random(struct pg_proxy *p, unsigned per_million, uint64_t seed)
{
    pthread_mutex_lock(&p->lock);
    p->per_million = per_million;
    p->rng.state = seed;
    pthread_mutex_unlock(&p->lock);
}

static inline int pg_proxy_cuts(struct pg_proxy *p)
{
    pthread_mutex_lock(&p->lock);
    int n = p->cuts;
    pthread_mutex_unlock(&p->lock);
    return n;
}

static inline int pg_proxy_stalls(struct pg_proxy *p)
{
    pthread_mutex_lock(&p->lock);
    int n = p->stalls;
    pthread_mutex_unlock(&p->lock);
    return n;
}

static inline void pg_proxy_stop(struct pg_proxy *p)
{
    pthread_mutex_lock(&p->lock);
    p->stopping = 1;
    pthread_cond_broadcast(&p->released);
    pthread_mutex_unlock(&p->lock);
    shutdown(p->lfd, SHUT_RDWR);
    if (p->serving)
        pthread_join(p->acceptor, NULL);
    close(p->lfd);
    for (struct pg_proxy_conn *c = p->conns, *next; c; c = next) {
        next = c->next;
        pg_proxy_cut(c);
        pthread_join(c->up, NULL);
        pthread_join(c->down, NULL);
        close(c->cfd);
        close(c->sfd);
        free(c);
    }
    pthread_cond_destroy(&p->released);
    pthread_mutex_destroy(&p->lock);
}

#endif /* CHIME_TEST_PG_PROXY_H */
