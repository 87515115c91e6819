/* SPDX-License-Identifier: MIT */
/* Runs: writing one, opening and checking one, reading part of one (run.h). */
#include "store/run.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "store/grow.h"
#include "store/io.h"

#define WRITE_CHUNK (256u << 10) /* bytes buffered before a write */
#define MARK_EVERY (64u << 10)   /* a sparse-index entry at least this often */

void chime__run_ref(struct chime__run *r)
{
    atomic_fetch_add_explicit(&r->refs, 1, memory_order_relaxed); /* the caller already holds one */
}

void chime__run_unref(struct chime__run *r)
{
    /* acq_rel: the last dropper sees every reader's use of the run finished before it frees it. */
    if (atomic_fetch_sub_explicit(&r->refs, 1, memory_order_acq_rel) != 1)
        return;
    if (r->fd >= 0)
        chime__io_close(r->fd);
    free(r->marks);
    free(r->dmarks);
    free(r);
}

static struct chime__run *run_new(uint64_t lo, uint64_t hi, uint64_t next_version)
{
    struct chime__run *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    r->lo = lo;
    r->hi = hi;
    r->next_version = next_version;
    r->fd = -1;
    atomic_init(&r->refs, 1);
    return r;
}

/* Note the record at `off` in the run's counts and in the index of its section: the first record
 * of each section, then one at least MARK_EVERY bytes after the last noted. */
static int account(struct chime__run *r, const struct chime__rec *rec, uint64_t off,
                   uint64_t *last_mark)
{
    r->records++;
    r->puts += rec->type == CHIME__PUT;
    r->deads += rec->type == CHIME__DEAD;
    int dead = chime__rec_section(rec);
    if (dead && r->dead_off == 0)
        r->dead_off = off;
    struct chime__mark **m = dead ? &r->dmarks : &r->marks;
    size_t *n = dead ? &r->ndmarks : &r->nmarks, *cap = dead ? &r->cdmarks : &r->cmarks;
    if (*n && off - *last_mark < MARK_EVERY)
        return 0;
    int err = chime__grow((void **)m, cap, *n, sizeof **m);
    if (err)
        return err;
    (*m)[(*n)++] = (struct chime__mark){ dead ? rec->version : rec->due, off };
    *last_mark = off;
    return 0;
}

static uint64_t realtime_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int chime__run_begin(struct chime__run_writer *w, int dir, uint64_t lo, uint64_t hi,
                     uint64_t next_version)
{
    *w = (struct chime__run_writer){ .dir = dir, .fd = -1, .cap = WRITE_CHUNK };
    char name[CHIME__NAME_MAX];
    chime__run_name(name, lo, hi);
    memcpy(w->tmp, name, strlen(name));
    memcpy(w->tmp + strlen(name), ".tmp", 5);
    w->buf = malloc(w->cap);
    w->run = run_new(lo, hi, next_version);
    if (!w->buf || !w->run) {
        free(w->buf);
        free(w->run);
        return -ENOMEM;
    }
    w->fd = chime__io_openat(dir, w->tmp, O_CREAT | O_TRUNC | O_RDWR, 0644);
    if (w->fd < 0) {
        int err = w->fd;
        free(w->buf);
        free(w->run);
        return err;
    }
    w->created = realtime_ns();
    memset(w->buf, 0, CHIME__FILE_HEADER); /* the header is written last, with the run's size */
    w->len = CHIME__FILE_HEADER;
    return 0;
}

static int write_out(struct chime__run_writer *w)
{
    int err = chime__io_pwrite(w->fd, w->buf, w->len, w->off);
    if (err)
        return err;
    w->off += w->len;
    w->len = 0;
    return 0;
}

int chime__run_add(struct chime__run_writer *w, const struct chime__rec *r)
{
    uint32_t len = chime__rec_len(r->key_len, r->payload_len);
    if (w->len + len > w->cap) {
        int err = write_out(w);
        if (err)
            return err;
    }
    int err = account(w->run, r, w->off + w->len, &w->last_mark);
    if (err)
        return err;
    if (r->raw) /* unchanged since it was decoded: its bytes, checksum and all */
        memcpy(w->buf + w->len, r->raw, len);
    else
        chime__rec_encode(w->buf + w->len, r);
    w->len += len;
    return 0;
}

int chime__run_emit(void *ctx, const struct chime__rec *r)
{
    return chime__run_add(ctx, r);
}

int chime__run_commit(struct chime__run_writer *w, struct chime__run **out)
{
    int err = w->len ? write_out(w) : 0;
    if (!err) { /* the header, with the run's size: a run cut short is then told from a whole one */
        unsigned char header[CHIME__FILE_HEADER];
        chime__header_encode(header, &(struct chime__file_header){
            .run = 1, .lo = w->run->lo, .hi = w->run->hi, .next_version = w->run->next_version,
            .created = w->created, .size = w->off });
        err = chime__io_pwrite(w->fd, header, sizeof header, 0);
    }
    if (!err)
        err = chime__io_fsync(w->fd);
    char name[CHIME__NAME_MAX];
    chime__run_name(name, w->run->lo, w->run->hi);
    if (!err)
        err = chime__io_renameat(w->dir, w->tmp, name);
    if (err) {
        chime__run_abort(w);
        return err;
    }
    /* Renamed: from here the run is the journal's whichever way the directory sync goes. */
    err = chime__io_fsync(w->dir);
    struct chime__run *r = w->run;
    r->fd = w->fd;
    r->size = w->off;
    if (r->dead_off == 0)
        r->dead_off = r->size;
    free(w->buf);
    w->buf = NULL;
    w->run = NULL;
    w->fd = -1;
    if (err) {
        chime__run_unref(r);
        return err;
    }
    *out = r;
    return 0;
}

void chime__run_abort(struct chime__run_writer *w)
{
    if (w->fd >= 0) {
        chime__io_close(w->fd);
        chime__io_unlinkat(w->dir, w->tmp);
    }
    free(w->buf);
    if (w->run)
        chime__run_unref(w->run);
    w->buf = NULL;
    w->run = NULL;
    w->fd = -1;
}

int chime__run_open(int dir, const char *name, struct chime__run **out, uint64_t *bad_off,
                    int (*scan)(void *ctx, const struct chime__rec *r), void *ctx)
{
    *bad_off = 0;
    uint64_t lo, hi;
    if (chime__parse_name(name, &lo, &hi) != 2)
        return -EINVAL;
    int fd;
    uint64_t size = 0;
    struct chime__file_header h;
    int err = chime__file_open(dir, name, &fd, &size, &h);
    if (err)
        return err;
    if (!h.run || h.lo != lo || h.hi != hi)
        err = -EBADMSG;
    else if (h.size != size) { /* cut short (or grown): its records past the cut would be lost */
        err = -EBADMSG;
        *bad_off = h.size < size ? h.size : size;
    }
    struct chime__run *r = err ? NULL : run_new(lo, hi, h.next_version);
    if (!err && !r)
        err = -ENOMEM;
    struct chime__reader rd = { .buf = NULL };
    if (!err)
        err = chime__reader_init(&rd, fd, CHIME__FILE_HEADER, size);
    struct chime__rec rec, prev = { 0 };
    uint64_t last_mark = 0;
    int have_prev = 0;
    while (!err) {
        uint64_t off = rd.off;
        int got = chime__reader_next(&rd, &rec);
        if (got == 0 && rd.off < size)
            got = -EBADMSG; /* zeros inside a run: it was written whole, so this is damage */
        if (got <= 0) {
            err = got;
            *bad_off = rd.off;
            break;
        }
        if (have_prev && chime__rec_cmp(&prev, &rec) > 0) {
            err = -EBADMSG;
            *bad_off = off;
            break;
        }
        prev = rec;
        prev.key = prev.payload = NULL;
        have_prev = 1;
        err = account(r, &rec, off, &last_mark);
        if (!err && scan)
            err = scan(ctx, &rec);
    }
    chime__reader_free(&rd);
    if (err) {
        if (r)
            chime__run_unref(r);
        chime__io_close(fd);
        return err;
    }
    r->fd = fd;
    r->size = size;
    if (r->dead_off == 0)
        r->dead_off = size;
    *out = r;
    return 0;
}

/* How many of the n index entries m (sorted by key) have a key below `key`. */
static size_t count_below(const struct chime__mark *m, size_t n, uint64_t key)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (m[mid].due < key)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* The offset of the last of the n index entries m whose key is below `key`, or `first` if none. */
static uint64_t start_below(const struct chime__mark *m, size_t n, uint64_t key, uint64_t first)
{
    size_t lo = count_below(m, n, key);
    return lo ? m[lo - 1].off : first;
}

static int source_next(struct chime__source *src, struct chime__rec *out)
{
    struct chime__run_source *s = (struct chime__run_source *)src;
    for (;;) {
        int got = chime__reader_next(&s->rd, out);
        if (got <= 0)
            return got;
        if (s->section == 1)
            return 1;
        if (out->due < s->from)
            continue;
        return out->due < s->until ? 1 : 0;
    }
}

int chime__run_source_pending(struct chime__run_source *s, struct chime__run *r, uint64_t from,
                              uint64_t until)
{
    /* Start at the last mark due before `from`: every record before it is due earlier still. */
    uint64_t start = start_below(r->marks, r->nmarks, from, CHIME__FILE_HEADER);
    *s = (struct chime__run_source){ { source_next, 0 }, .from = from, .until = until, .section = 0 };
    return chime__reader_init(&s->rd, r->fd, start, r->dead_off);
}

int chime__run_source_dead(struct chime__run_source *s, struct chime__run *r)
{
    *s = (struct chime__run_source){ { source_next, 0 }, .section = 1 };
    return chime__reader_init(&s->rd, r->fd, r->dead_off, r->size);
}

int chime__run_source_all(struct chime__run_source *s, struct chime__run *r)
{
    *s = (struct chime__run_source){ { source_next, 0 }, .section = 1 };
    return chime__reader_init(&s->rd, r->fd, CHIME__FILE_HEADER, r->size);
}

void chime__run_source_free(struct chime__run_source *s)
{
    chime__reader_free(&s->rd);
}

int chime__run_find_dead(struct chime__run *r, uint64_t version,
                         int (*found)(void *ctx, const struct chime__rec *r), void *ctx)
{
    /* Start at the last index entry below `version`: every record before it is of a smaller one
     * (section 1 is sorted by version, and a version's DEAD comes before its KILL). */
    uint64_t start = start_below(r->dmarks, r->ndmarks, version, r->dead_off), end = r->size;
    size_t above = version < UINT64_MAX ? count_below(r->dmarks, r->ndmarks, version + 1) : 0;
    if (version < UINT64_MAX && above < r->ndmarks)
        end = r->dmarks[above].off; /* an entry of a greater version: nothing wanted from there */
    struct chime__reader rd;
    int err = chime__reader_init(&rd, r->fd, start, end);
    struct chime__rec rec;
    int got = 0;
    while (!err && (got = chime__reader_next(&rd, &rec)) == 1 && rec.version <= version) {
        if (rec.version == version && rec.type == CHIME__DEAD)
            err = found(ctx, &rec);
        if (err)
            break;
    }
    if (!err && got < 0)
        err = got;
    if (!err && got == 0 && rd.off < end)
        err = -EBADMSG; /* zeros up to `end` inside a run, as chime__run_open calls them */
    chime__reader_free(&rd);
    return err;
}
