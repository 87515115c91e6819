/* SPDX-License-Identifier: MIT */
/*
 * Power loss, simulated: what is on disk after a crash is only what was synced. A child runs the
 * journal (CHIME_SYNC_EACH, or in odd rounds CHIME_SYNC_INTERVAL with a sync after each call: puts
 * and cancels, firings and outcomes, loads that flush and merge, closes and reopens) with
 * io.h's fault hook recording, in memory shared with the parent, what each fsync/fdatasync made
 * durable: a file's bytes up to its last non-zero byte and its size (HEAD: its whole content), and
 * a directory's entries. (A segment or a run is only ever written above the bytes it held at its
 * last sync, so those are read back from the file at the end; HEAD is rewritten in place, so it is
 * copied. A file unlinked meanwhile is kept under a hard link, as an older entry may name it.)
 * The child ends itself (as kill -9) before a chosen file-system step. The parent then builds the
 * directory a power loss could leave:
 *   A. the entries of the last directory sync, each file as last synced (empty if never);
 *   B. the entries at the crash (every metadata step reached the disk), files as last synced;
 *   P. the entries before a random metadata step since the last directory sync.
 *   T. the entries at the crash, and each page written since its file's last sync there or not.
 * Each must open, and hold every put, cancel and outcome acknowledged before the crash (a call in
 * flight either way). Three threads call at once (group commits of several), with loads between
 * (seals, flushes, merges) and a close and reopen (replay) between phases; payloads of up to 40 kB
 * fill segments, so that batches cross into the next one. The steps vary from run
 * to run with the threads' timing, so a seed repeats a failure only sometimes; the listing and the
 * directory a failure opened are printed and kept. CHIME_POWER_ROUNDS (default 24) sets the crash
 * points (each a fresh journal); CHIME_SEED the seed.
 */
#include "store_util.h"

#include <fcntl.h>
#include <sys/mman.h>

#include "rng.h"
#include "store/backend.h"

#define KEYS 48
#define OPS 900
#define MAXE 160  /* entries in a listing */
#define MAXH 512  /* metadata steps since the last directory sync */
#define MAXI 8192 /* inodes */

struct entry {
    char name[48];
    uint64_t ino;
};
struct listing {
    int n;
    struct entry e[MAXE];
};
struct inode {
    uint64_t ino, frontier, size;
};
struct shadow {
    _Atomic long steps; /* file-system steps seen */
    long crash_at;      /* end the process before this step (0: never) */
    int ninos;
    struct inode inos[MAXI];
    uint64_t head_ino;
    unsigned char head[8192];
    size_t head_len;
    struct listing durable;  /* at the last directory sync */
    int nhist, overflow;
    struct listing hist[MAXH]; /* before each metadata step since */
};

static struct shadow *sh;
static const char *opened; /* the directory verify opened */
static void dump(const char *path);
/* File-scope, so that a child that runs to its end finds them reachable at its leak check: a
 * local the compiler kept only in a register, dead across the child's call (it never returns), was
 * "definitely lost" under valgrind once CHECK became a function call (tap.h). */
static char *dir, *grave, *built;
static pthread_mutex_t hook_lock = PTHREAD_MUTEX_INITIALIZER;

static void list_once(const char *path, struct listing *l);

/* readdir is not atomic with a rename or unlink another thread makes meanwhile: list until two
 * listings agree. */
static void list_dir(const char *path, struct listing *l)
{
    static struct listing again;
    list_once(path, l);
    for (int i = 0; i < 20; i++) {
        list_once(path, &again);
        if (again.n == l->n && !memcmp(again.e, l->e, sizeof l->e[0] * (size_t)l->n))
            return;
        *l = again;
    }
}

static void list_once(const char *path, struct listing *l)
{
    l->n = 0;
    DIR *d = opendir(path);
    if (!d)
        return;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.' || l->n == MAXE || strlen(e->d_name) >= 48)
            continue;
        struct stat st;
        char p[512];
        snprintf(p, sizeof p, "%s/%s", path, e->d_name);
        if (stat(p, &st) != 0 || !S_ISREG(st.st_mode))
            continue;
        memset(l->e[l->n].name, 0, 48);
        snprintf(l->e[l->n].name, 48, "%s", e->d_name);
        l->e[l->n++].ino = (uint64_t)st.st_ino;
    }
    closedir(d);
}

static struct inode *inode_of(uint64_t ino)
{
    for (int i = 0; i < sh->ninos; i++)
        if (sh->inos[i].ino == ino)
            return &sh->inos[i];
    CHECK(sh->ninos < MAXI, "too many inodes");
    sh->inos[sh->ninos] = (struct inode){ ino, 0, 0 };
    return &sh->inos[sh->ninos++];
}

/* A file's fsync: it holds what it holds now. */
static void synced_file(int fd, const struct stat *st)
{
    char path[512] = "";
    fd_path(fd, path, sizeof path);
    const char *base = strrchr(path, '/');
    if (base && !strcmp(base, "/HEAD")) {
        sh->head_ino = (uint64_t)st->st_ino;
        ssize_t got = pread(fd, sh->head, sizeof sh->head, 0);
        sh->head_len = got > 0 ? (size_t)got : 0;
        return;
    }
    uint64_t size = (uint64_t)st->st_size, end = size;
    static unsigned char buf[1 << 16];
    while (end > 0) { /* the last byte that is not zero */
        uint64_t from = end > sizeof buf ? end - sizeof buf : 0;
        ssize_t got = pread(fd, buf, end - from, (off_t)from);
        CHECK(got == (ssize_t)(end - from), "pread");
        size_t k = (size_t)got;
        while (k > 0 && !buf[k - 1])
            k--;
        if (k) {
            end = from + k;
            break;
        }
        end = from;
    }
    struct inode *i = inode_of((uint64_t)st->st_ino);
    i->frontier = end;
    i->size = size;
}

static int hook(void *ctx, enum chime__io_op op, const char *name, int fd)
{
    (void)ctx;
    if (op == CHIME_IO_READ || op == CHIME_IO_LOCK)
        return 0;
    /* Under the lock: a thread stopped halfway through recording a step would leave it torn. */
    pthread_mutex_lock(&hook_lock);
    long step = atomic_fetch_add(&sh->steps, 1) + 1;
    if (sh->crash_at && step == sh->crash_at)
        crash_now();
    if (op == CHIME_IO_SYNC && fd >= 0) {
        struct stat st;
        if (fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
            list_dir(dir, &sh->durable);
            sh->nhist = sh->overflow = 0;
        } else if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
            synced_file(fd, &st);
        }
    } else if (op == CHIME_IO_OPEN || op == CHIME_IO_RENAME || op == CHIME_IO_UNLINK) {
        if (sh->nhist < MAXH)
            list_dir(dir, &sh->hist[sh->nhist++]);
        else
            sh->overflow = 1;
        if (op == CHIME_IO_UNLINK && name) { /* keep its bytes: an older entry may name it */
            char p[512], g[512];
            struct stat st;
            snprintf(p, sizeof p, "%s/%s", dir, name);
            if (stat(p, &st) == 0) {
                snprintf(g, sizeof g, "%s/%llu", grave, (unsigned long long)st.st_ino);
                (void)link(p, g);
            }
        }
    }
    pthread_mutex_unlock(&hook_lock);
    return 0;
}

/* ---- the child's work, and its log ---- */

enum { BEGIN = 1, DONE = 2 };
enum { OP_PUT = 1, OP_CANCEL = 2, OP_ACK = 3, OP_BURY = 4 };
struct logrec {
    uint8_t phase, op;
    uint16_t key;
    int32_t rc;
    uint64_t due;
};

static uint64_t base_due;

static size_t payload_for(unsigned key, uint64_t due, unsigned char *out)
{
    uint64_t x = due * UINT64_C(0x9e3779b97f4a7c15) ^ key;
    size_t n = 200 + (size_t)(x % 40000); /* segments fill: batches cross into the next */
    for (size_t i = 0; i < n; i++) {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        out[i] = (unsigned char)(x >> 56);
    }
    return n;
}

static const struct chime__sink no_sink = { NULL, NULL, NULL, NULL };

static int interval; /* the child's mode: CHIME_SYNC_INTERVAL, each call followed by a sync */

static struct chime__backend *open_each(const char *path)
{
    static struct chime_store_config cfg;
    cfg = (struct chime_store_config){ .path = path, .sync = CHIME_SYNC_EACH };
    if (interval)
        cfg = (struct chime_store_config){ .path = path, .sync = CHIME_SYNC_INTERVAL,
                                           .sync_interval_ns = 5 * MS };
    struct chime__backend *b;
    int err = chime__journal_ops.open(&b, &cfg, &no_sink);
    CHECK(err == 0, "open %s: %s", path, chime_strerror(err));
    return b;
}

static int ignore(void *ctx, const struct chime__timer *t)
{
    (void)ctx;
    (void)t;
    return 0;
}

static void emit(int fd, struct logrec r)
{
    CHECK(write(fd, &r, sizeof r) == (ssize_t)sizeof r, "log");
}

#define THREADS 3

struct worker {
    pthread_t thread;
    int id, logfd, ops;
    struct rng rng;
    struct chime__backend *b;
};

static uint64_t live[KEYS], dues[KEYS]; /* the child's: pending versions and due times */

/* One thread's calls, on its own keys (key % THREADS == id), each logged before and after. */
static void *work(void *arg)
{
    struct worker *w = arg;
    struct chime__backend *b = w->b;
    static _Thread_local unsigned char payload[CHIME_STORE_PAYLOAD_MAX];
    for (int i = 0; i < w->ops; i++) {
        unsigned key = (unsigned)(rng_below(&w->rng, KEYS / THREADS) * THREADS + (uint64_t)w->id);
        char name[16];
        snprintf(name, sizeof name, "k%u", key);
        uint64_t ticket = 0;
        int logfd = w->logfd;
        if (rng_below(&w->rng, 10) < 7) {
            uint64_t due = base_due + rng_below(&w->rng, 1000000) * 1000;
            size_t n = payload_for(key, due, payload);
            emit(logfd, (struct logrec){ BEGIN, OP_PUT, (uint16_t)key, 0, due });
            struct chime__put p = { name, strlen(name), payload, n, due, 0, 0, 0 };
            struct chime__put_result res;
            int rc = chime__journal_ops.put(b, &p, &res, &ticket);
            if (!rc)
                rc = interval ? chime__journal_ops.sync(b) : chime__journal_ops.wait(b, ticket);
            CHECK_EQ(rc, 0);
            live[key] = res.ref.version;
            dues[key] = due;
            emit(logfd, (struct logrec){ DONE, OP_PUT, (uint16_t)key, rc, due });
        } else if (live[key] && rng_below(&w->rng, 2)) { /* its firing, then an outcome */
            int bury = rng_below(&w->rng, 3) == 0;
            emit(logfd, (struct logrec){ BEGIN, bury ? OP_BURY : OP_ACK, (uint16_t)key, 0, 0 });
            struct chime__firing f = { name, strlen(name), dues[key], { live[key], 0 }, 1, 0 };
            CHECK_EQ(chime__journal_ops.fire(b, &f, 1), 0);
            size_t n = payload_for(key, dues[key], payload);
            struct chime__timer t = { name, strlen(name), payload, n, dues[key], 1,
                                      { live[key], 0 }, 1 };
            CHECK_EQ(bury ? chime__journal_ops.bury(b, &t) : chime__journal_ops.ack(b, &t, 1), 0);
            CHECK_EQ(chime__journal_ops.sync(b), 0);
            live[key] = 0;
            emit(logfd, (struct logrec){ DONE, bury ? OP_BURY : OP_ACK, (uint16_t)key, 0, 0 });
        } else {
            live[key] = 0;
            emit(logfd, (struct logrec){ BEGIN, OP_CANCEL, (uint16_t)key, 0, 0 });
            struct chime__ref victim;
            int rc = chime__journal_ops.cancel(b, name, strlen(name), 0, &victim, &ticket);
            if (!rc)
                rc = interval ? chime__journal_ops.sync(b) : chime__journal_ops.wait(b, ticket);
            CHECK(rc == 0 || rc == -ENOENT, "cancel: %d", rc);
            emit(logfd, (struct logrec){ DONE, OP_CANCEL, (uint16_t)key, rc, 0 });
        }
    }
    return NULL;
}

/* Phases of THREADS threads at work while this one loads (seals, flushes, merges); a close and a
 * reopen between phases. */
static void child(int logfd, uint64_t seed)
{
    struct rng rng = { seed };
    chime__io_set_fault(hook, NULL);
    for (int phase = 0; phase < 4; phase++) {
        struct chime__backend *b = open_each(dir);
        struct worker w[THREADS];
        for (int t = 0; t < THREADS; t++) {
            w[t] = (struct worker){ .id = t, .logfd = logfd, .ops = OPS / THREADS / 4,
                                    .rng = { rng_next(&rng) }, .b = b };
            CHECK_EQ(pthread_create(&w[t].thread, NULL, work, &w[t]), 0);
        }
        for (int i = 0; i < 3; i++) {
            sleep_ms((unsigned)rng_below(&rng, 40));
            CHECK_EQ(chime__journal_ops.load(b, 0, 1, ignore, NULL), 0);
        }
        for (int t = 0; t < THREADS; t++)
            pthread_join(w[t].thread, NULL);
        CHECK_EQ(chime__journal_ops.close(b), 0);
    }
    _exit(0);
}

/* ---- the parent: a directory as a power loss leaves it, opened, checked ---- */

static struct rng torn_rng;
static int torn; /* build: unsynced pages of each file reach the disk or not, at random */

/* Copy [from, to) of src into fd at the same offsets. */
static void copy_range(int sfd, int fd, uint64_t from, uint64_t to)
{
    static unsigned char buf[1 << 16];
    for (uint64_t off = from; off < to;) {
        size_t want = to - off < sizeof buf ? (size_t)(to - off) : sizeof buf;
        ssize_t got = pread(sfd, buf, want, (off_t)off);
        CHECK(got >= 0, "read");
        if (got == 0)
            break;
        CHECK(pwrite(fd, buf, (size_t)got, (off_t)off) == got, "write");
        off += (uint64_t)got;
    }
}

static void build(const char *out, const struct listing *l, const struct listing *now)
{
    tmpdir_remove(out);
    CHECK(mkdir(out, 0755) == 0, "mkdir %s", out);
    for (int i = 0; i < l->n; i++) {
        char dst[512], src[512];
        snprintf(dst, sizeof dst, "%s/%s", out, l->e[i].name);
        int fd = open(dst, O_CREAT | O_WRONLY | O_TRUNC, 0644);
        CHECK(fd >= 0, "create %s", dst);
        uint64_t ino = l->e[i].ino;
        src[0] = 0;
        for (int k = 0; k < now->n; k++)
            if (now->e[k].ino == ino)
                snprintf(src, sizeof src, "%s/%s", dir, now->e[k].name);
        if (!src[0])
            snprintf(src, sizeof src, "%s/%llu", grave, (unsigned long long)ino);
        if (ino == sh->head_ino && torn && rng_below(&torn_rng, 2)) { /* its last write made it */
            int sfd = open(src, O_RDONLY);
            CHECK(sfd >= 0, "HEAD");
            copy_range(sfd, fd, 0, 8192);
            close(sfd);
            close(fd);
            continue;
        }
        if (ino == sh->head_ino) {
            CHECK(write(fd, sh->head, sh->head_len) == (ssize_t)sh->head_len, "HEAD");
            close(fd);
            continue;
        }
        struct inode *in = NULL;
        for (int k = 0; k < sh->ninos; k++)
            if (sh->inos[k].ino == ino)
                in = &sh->inos[k];
        if (!in && !torn) { /* never synced: its data may be nowhere */
            close(fd);
            continue;
        }
        int sfd = open(src, O_RDONLY);
        CHECK(sfd >= 0, "the bytes of inode %llu (%s)", (unsigned long long)ino, l->e[i].name);
        uint64_t frontier = in ? in->frontier : 0, size = in ? in->size : 0;
        copy_range(sfd, fd, 0, frontier);
        if (torn) { /* the pages written since the last sync: each made it or not */
            struct stat st;
            CHECK(fstat(sfd, &st) == 0, "stat");
            if ((uint64_t)st.st_size > size)
                size = (uint64_t)st.st_size;
            uint64_t end = (uint64_t)st.st_size;
            for (uint64_t pg = frontier / 4096 * 4096; pg < end; pg += 4096)
                if (rng_below(&torn_rng, 2))
                    copy_range(sfd, fd, pg, pg + 4096 < end ? pg + 4096 : end);
        }
        CHECK(ftruncate(fd, (off_t)size) == 0, "size");
        close(sfd);
        close(fd);
    }
}

struct expect {
    int state[KEYS];      /* 0 absent, 1 pending at due[] */
    uint64_t due[KEYS];
    int alt[KEYS];        /* a call in flight on the key: it may be in alt_state instead */
    int alt_state[KEYS];
    uint64_t alt_due[KEYS];
    int seen[KEYS];
    const char *variant;
};

static int check_one(void *ctx, const struct chime__timer *t)
{
    struct expect *x = ctx;
    unsigned key;
    char name[16] = { 0 };
    memcpy(name, t->key, t->key_len < 15 ? t->key_len : 15);
    CHECK(sscanf(name, "k%u", &key) == 1 && key < KEYS, "key %s", name);
    CHECK(!x->seen[key], "%s: k%u twice", x->variant, key);
    x->seen[key] = 1;
    int ok = x->state[key] == 1 && x->due[key] == t->due_ns;
    if (x->alt[key] && x->alt_state[key] == 1 && x->alt_due[key] == t->due_ns)
        ok = 1;
    if (!ok)
        dump(opened);
    CHECK(ok, "%s: k%u pending at %llu, resurrected or stale (acknowledged: %s at %llu)",
          x->variant, key, (unsigned long long)t->due_ns, x->state[key] ? "pending" : "absent",
          (unsigned long long)x->due[key]);
    static unsigned char want[CHIME_STORE_PAYLOAD_MAX];
    size_t n = payload_for(key, t->due_ns, want);
    CHECK(n == t->payload_len && !memcmp(want, t->payload, n), "%s: payload of k%u", x->variant,
          key);
    return 0;
}

static const struct listing *used_listing, *now_listing;

static void dump(const char *path)
{
    printf("# listing used (durable had %d, hist %d):\n", sh->durable.n, sh->nhist);
    for (int i = 0; used_listing && i < used_listing->n; i++)
        printf("#   %s ino %llu\n", used_listing->e[i].name,
               (unsigned long long)used_listing->e[i].ino);
    printf("# at the crash:\n");
    for (int i = 0; now_listing && i < now_listing->n; i++)
        printf("#   %s ino %llu\n", now_listing->e[i].name,
               (unsigned long long)now_listing->e[i].ino);
    printf("# the directory opened is left in %s (the journal as it ran, in %s)\n", path, dir);
}

static void verify(const char *path, struct expect *x)
{
    opened = path;
    static struct chime_store_config cfg;
    cfg = (struct chime_store_config){ .path = path, .sync = CHIME_SYNC_EACH };
    struct chime__backend *b;
    int err = chime__journal_ops.open(&b, &cfg, &no_sink);
    if (err)
        dump(path);
    CHECK(err == 0, "%s: open after the power loss at step %ld: %s", x->variant, sh->crash_at,
          chime_strerror(err));
    memset(x->seen, 0, sizeof x->seen);
    CHECK_EQ(chime__journal_ops.load(b, 0, UINT64_MAX, check_one, x), 0);
    for (int k = 0; k < KEYS; k++) {
        int may_absent = x->state[k] == 0 || (x->alt[k] && x->alt_state[k] == 0);
        if (!x->seen[k] && !may_absent)
            dump(path);
        CHECK(x->seen[k] || may_absent, "%s (step %ld): k%d, acknowledged pending at %llu, lost",
              x->variant, sh->crash_at, k, (unsigned long long)x->due[k]);
    }
    CHECK_EQ(chime__journal_ops.close(b), 0);
}

static void replay_log(const unsigned char *buf, size_t len, struct expect *x)
{
    memset(x, 0, sizeof *x);
    for (size_t off = 0; off + sizeof(struct logrec) <= len; off += sizeof(struct logrec)) {
        struct logrec r;
        memcpy(&r, buf + off, sizeof r);
        if (r.phase == BEGIN) {
            x->alt[r.key] = 1;
            x->alt_state[r.key] = r.op == OP_PUT;
            x->alt_due[r.key] = r.op == OP_PUT ? r.due : 0;
            continue;
        }
        x->alt[r.key] = 0;
        if (r.rc != 0)
            continue;
        x->state[r.key] = r.op == OP_PUT;
        if (r.op == OP_PUT)
            x->due[r.key] = r.due;
    }
}

static void power_loss_at_every_kind_of_step(void)
{
    uint64_t seed = rng_seed("powerloss");
    struct rng rng = { seed };
    const char *env = getenv("CHIME_POWER_ROUNDS");
    int rounds = env ? atoi(env) : 24;
    sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(sh != MAP_FAILED, "mmap");
    built = tmpdir_make_fast("power-out");
    CHECK(built != NULL, "mkdtemp");
    long total = 0;
    for (int round = 0; round <= rounds; round++) {
        dir = tmpdir_make_fast("power");
        grave = tmpdir_make_fast("power-grave");
        CHECK(dir && grave, "mkdtemp");
        memset(sh, 0, sizeof *sh);
        sh->crash_at = round == 0 ? 0 : 1 + (long)rng_below(&rng, (uint64_t)total);
        base_due = wall_ns() + 3600 * SEC;
        uint64_t child_seed = rng_next(&rng);
        interval = round % 2;
        int fd;
        pid_t pid = fork_piped(&fd);
        if (pid == 0)
            child(fd, child_seed);
        fcntl(fd, F_SETFL, O_NONBLOCK);
        unsigned char *buf = NULL;
        size_t len = 0, cap = 0;
        int how = reap_child(pid, fd, &buf, &len, &cap);
        close(fd);
        CHECK(how >= 0, "the child failed (round %d, step %ld)", round, sh->crash_at);
        if (round == 0) {
            total = atomic_load(&sh->steps);
            printf("# %ld file-system steps in a run\n", total);
        }
        struct expect x;
        replay_log(buf, len, &x);
        struct listing now;
        list_dir(dir, &now);
        now_listing = used_listing = &now;
        x.variant = "B (every metadata step)";
        build(built, &now, &now);
        verify(built, &x);
        if (round > 0) {
            torn_rng.state = rng_next(&rng);
            torn = 1;
            x.variant = "T (every metadata step, unsynced pages at random)";
            used_listing = &now;
            build(built, &now, &now);
            verify(built, &x);
            torn = 0;
            x.variant = "A (the last directory sync)";
            used_listing = &sh->durable;
            build(built, &sh->durable, &now);
            verify(built, &x);
            if (sh->nhist && !sh->overflow) {
                int h = (int)rng_below(&rng, (uint64_t)sh->nhist);
                x.variant = "P (a prefix of the metadata steps)";
                used_listing = &sh->hist[h];
                build(built, &sh->hist[h], &now);
                verify(built, &x);
            }
        }
        free(buf);
        tmpdir_remove(dir);
        tmpdir_remove(grave);
        free(dir);
        free(grave);
    }
    tmpdir_remove(built);
    free(built);
}

int main(void)
{
    static const struct tap_test tests[] = {
        { "power_loss_at_every_kind_of_step", power_loss_at_every_kind_of_step },
    };
    return tap_run(tests, 1);
}
