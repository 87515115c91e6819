/* SPDX-License-Identifier: MIT */
/* The journal's files as a whole (files.h). */
#include "store/files.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "store/format.h"
#include "store/grow.h"
#include "store/head.h"
#include "store/io.h"
#include "store/reader.h"

struct listing {
    struct chime__journal_files *f;
    size_t cruns, csegs;
    int dir, drop_tmp;
};

static int list_one(void *ctx, const char *name)
{
    struct listing *l = ctx;
    struct chime__journal_files *f = l->f;
    size_t len = strlen(name);
    if (len > 4 && !strcmp(name + len - 4, ".tmp"))
        return 0; /* dropped once the listing is judged (chime__journal_files_list) */
    uint64_t lo, hi;
    switch (chime__parse_name(name, &lo, &hi)) {
    case 1:
        if (chime__grow((void **)&f->segs, &l->csegs, f->nsegs, sizeof *f->segs))
            return -ENOMEM;
        f->segs[f->nsegs++] = lo;
        return 0;
    case 2:
        if (lo > hi || lo == 0)
            return -EBADMSG; /* a run's name the journal never writes */
        if (chime__grow((void **)&f->runs, &l->cruns, f->nruns, sizeof *f->runs))
            return -ENOMEM;
        f->runs[f->nruns++] = (struct chime__range){ lo, hi };
        return 0;
    default:
        return 0; /* LOCK, or a file that is none of the journal's */
    }
}

static int cmp_range(const void *a, const void *b)
{
    const struct chime__range *x = a, *y = b;
    return x->lo != y->lo ? (x->lo < y->lo ? -1 : 1) : (x->hi > y->hi ? -1 : x->hi < y->hi);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Note numbers [expect, lo) as missing if lo is not the next one; return the number after hi. */
static uint64_t follow(struct chime__journal_files *f, uint64_t expect, uint64_t lo, uint64_t hi)
{
    if (lo != expect && f->chain == CHIME__CHAIN_WHOLE) {
        f->chain = CHIME__CHAIN_GAP;
        f->missing = (struct chime__range){ expect, lo - 1 };
    }
    return hi + 1;
}

static int drop_one_tmp(void *ctx, const char *name)
{
    size_t len = strlen(name);
    return len > 4 && !strcmp(name + len - 4, ".tmp") ? chime__io_unlinkat(*(int *)ctx, name) : 0;
}

/* Whether file `name` has a whole header of another format version. */
static int other_version(int dir, const char *name)
{
    int fd;
    uint64_t size;
    struct chime__file_header h;
    int err = chime__file_open(dir, name, &fd, &size, &h);
    if (!err)
        chime__io_close(fd);
    return err == -EPROTO;
}

/* A chain that is not whole, or no HEAD, in a journal of an older format: formats before HEAD
 * existed wrote none (format.md), so their journals read as headless. Return: -EPROTO if a listed
 * file is of another format version, else 0. */
static int older_format(int dir, const struct chime__journal_files *f)
{
    char name[CHIME__NAME_MAX];
    for (size_t i = 0; i < f->nruns; i++) {
        chime__run_name(name, f->runs[i].lo, f->runs[i].hi);
        if (other_version(dir, name))
            return -EPROTO;
    }
    for (size_t i = 0; i < f->nsegs; i++) {
        chime__wal_name(name, f->segs[i]);
        if (other_version(dir, name))
            return -EPROTO;
    }
    return 0;
}

int chime__journal_files_list(int dir, struct chime__journal_files *f, int drop_tmp)
{
    memset(f, 0, sizeof *f);
    int head = chime__head_read(dir, &f->head);
    if (head && head != -ENOENT && head != -EBADMSG)
        return head;
    struct listing l = { .f = f, .dir = dir, .drop_tmp = drop_tmp };
    int err = chime__io_list(dir, list_one, &l);
    if (err)
        return err;
    if (f->nruns)
        qsort(f->runs, f->nruns, sizeof *f->runs, cmp_range);
    if (f->nsegs)
        qsort(f->segs, f->nsegs, sizeof *f->segs, cmp_u64);

    size_t kept = 0, cgone = 0;
    for (size_t i = 0; i < f->nruns; i++) {
        const struct chime__range *last = kept ? &f->runs[kept - 1] : NULL;
        /* Sorted by lo, widest first: a run is contained in another iff in the last one kept. */
        if (last && f->runs[i].hi <= last->hi) {
            if (chime__grow((void **)&f->gone_runs, &cgone, f->ngone_runs, sizeof *f->gone_runs))
                return -ENOMEM;
            f->gone_runs[f->ngone_runs++] = f->runs[i];
            continue;
        }
        if (last && f->runs[i].lo <= last->hi && f->chain == CHIME__CHAIN_WHOLE) {
            /* No crash leaves that: a merge's run contains its inputs. */
            f->chain = CHIME__CHAIN_OVERLAP;
            f->missing = (struct chime__range){ last->lo, f->runs[i].lo };
        }
        f->runs[kept++] = f->runs[i];
    }
    f->nruns = kept;

    uint64_t covered = kept ? f->runs[kept - 1].hi : 0;
    kept = cgone = 0;
    for (size_t i = 0; i < f->nsegs; i++) {
        if (f->segs[i] <= covered) {
            if (chime__grow((void **)&f->gone_segs, &cgone, f->ngone_segs, sizeof *f->gone_segs))
                return -ENOMEM;
            f->gone_segs[f->ngone_segs++] = f->segs[i];
            continue;
        }
        f->segs[kept++] = f->segs[i];
    }
    f->nsegs = kept;

    uint64_t expect = 1; /* the chain (files.h) */
    for (size_t i = 0; i < f->nruns; i++)
        expect = follow(f, expect, f->runs[i].lo, f->runs[i].hi);
    for (size_t i = 0; i < f->nsegs; i++)
        expect = follow(f, expect, f->segs[i], f->segs[i]);
    if (head) { /* no whole HEAD: fine in a journal with no file yet, a lost file otherwise */
        f->head = 0;
        int files = f->nruns || f->nsegs || f->ngone_runs || f->ngone_segs;
        if (files && f->chain == CHIME__CHAIN_WHOLE)
            f->chain = CHIME__CHAIN_HEADLESS;
    } else if (f->head >= expect && f->chain == CHIME__CHAIN_WHOLE) { /* the newest are lost */
        f->chain = CHIME__CHAIN_GAP;
        f->missing = (struct chime__range){ expect, f->head };
    }
    if (f->chain != CHIME__CHAIN_WHOLE && (err = older_format(dir, f)) != 0)
        return err; /* refused as another format, with nothing changed */
    return drop_tmp ? chime__io_list(dir, drop_one_tmp, &dir) : 0;
}

void chime__journal_files_free(struct chime__journal_files *f)
{
    free(f->runs);
    free(f->segs);
    free(f->gone_runs);
    free(f->gone_segs);
    memset(f, 0, sizeof *f);
}
