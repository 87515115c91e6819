/* SPDX-License-Identifier: MIT */
/* The store's file I/O (see io.h): thin wrappers with one fault-injection point. */
#define _GNU_SOURCE /* O_TMPFILE, pwritev: Linux interfaces beyond C11 */
#include "store/io.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h> /* PATH_MAX */
#include <stdatomic.h>
#include <stdio.h> /* renameat */
#include <sys/file.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

struct fault {
    chime__io_fault_fn *fn;
    void *ctx;
};

/* Tests set the hook while no store is open; the acquire load in `fault` pairs with this release
 * store, so a store's threads started afterwards see the hook and its context. */
static _Atomic(struct fault *) hook;
static struct fault hook_storage;

void chime__io_set_fault(chime__io_fault_fn *fn, void *ctx)
{
    if (fn)
        hook_storage = (struct fault){ fn, ctx };
    atomic_store_explicit(&hook, fn ? &hook_storage : NULL, memory_order_release);
}

static int fault(enum chime__io_op op, const char *name, int fd)
{
    struct fault *f = atomic_load_explicit(&hook, memory_order_acquire); /* pairs with set_fault */
    return f ? f->fn(f->ctx, op, name, fd) : 0;
}

#define CHECK_FAULT(op, name, fd)                                                                 \
    do {                                                                                          \
        int injected_ = fault(op, name, fd);                                                      \
        if (injected_)                                                                            \
            return injected_;                                                                     \
    } while (0)

int chime__io_mkdir(const char *path)
{
    CHECK_FAULT(CHIME_IO_MKDIR, path, -1);
    if (mkdir(path, 0755) == 0)
        return 1;
    return errno == EEXIST ? 0 : -errno;
}

int chime__io_sync_parent(const char *path)
{
    CHECK_FAULT(CHIME_IO_SYNC, path, -1);
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/')
        n--; /* "a/b/" names b too */
    while (n > 0 && path[n - 1] != '/')
        n--; /* n: the length of the parent's name with its slash, 0 if path has none */
    char parent[PATH_MAX];
    if (n >= sizeof parent)
        return -ENAMETOOLONG;
    if (n == 0) {
        strcpy(parent, ".");
    } else {
        memcpy(parent, path, n);
        parent[n] = '\0'; /* "/x" gives "/", "a/x" gives "a/" */
    }
    int fd;
    do
        fd = open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    while (fd < 0 && errno == EINTR);
    if (fd < 0)
        return -errno;
    int err = fsync(fd) == 0 ? 0 : -errno;
    close(fd);
    return err;
}

int chime__io_make_dir(const char *path)
{
    int made = chime__io_mkdir(path);
    int err = made < 0 ? made : chime__io_sync_parent(path);
    if (err == -EACCES && made == 0)
        return 0;
    if (err && made == 1)
        rmdir(path); /* empty: nothing was put in it */
    return err;
}

int chime__io_open_dir(const char *path)
{
    CHECK_FAULT(CHIME_IO_OPEN, path, -1);
    int fd;
    do
        fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    while (fd < 0 && errno == EINTR);
    return fd < 0 ? -errno : fd;
}

int chime__io_openat(int dir, const char *name, int flags, mode_t mode)
{
    CHECK_FAULT(CHIME_IO_OPEN, name, -1);
    int fd;
    do
        fd = openat(dir, name, flags | O_CLOEXEC, mode);
    while (fd < 0 && errno == EINTR);
    return fd < 0 ? -errno : fd;
}

int chime__io_tmpfile(int dir)
{
    CHECK_FAULT(CHIME_IO_OPEN, ".", -1);
    int fd;
    do
        fd = openat(dir, ".", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    while (fd < 0 && errno == EINTR);
    return fd < 0 ? -errno : fd;
}

int chime__io_close(int fd)
{
    /* Linux releases the descriptor even when close fails (EINTR included): never retry. Errors
     * of written data are reported by the syncs that precede every close that matters. */
    return close(fd) == 0 ? 0 : -errno;
}

ssize_t chime__io_pread(int fd, void *buf, size_t n, uint64_t off)
{
    CHECK_FAULT(CHIME_IO_READ, NULL, fd);
    size_t done = 0;
    while (done < n) {
        ssize_t r = pread(fd, (char *)buf + done, n - done, (off_t)(off + done));
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -errno;
        if (r == 0)
            break; /* end of file */
        done += (size_t)r;
    }
    return (ssize_t)done;
}

int chime__io_pwrite(int fd, const void *buf, size_t n, uint64_t off)
{
    CHECK_FAULT(CHIME_IO_WRITE, NULL, fd);
    size_t done = 0;
    while (done < n) {
        ssize_t r = pwrite(fd, (const char *)buf + done, n - done, (off_t)(off + done));
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -errno;
        if (r == 0)
            return -EIO; /* cannot happen for a regular file; never loop forever */
        done += (size_t)r;
    }
    return 0;
}

int chime__io_pwrite2(int fd, const void *a, size_t na, const void *b, size_t nb, uint64_t off)
{
    CHECK_FAULT(CHIME_IO_WRITE, NULL, fd);
    struct iovec iov[2] = { { (void *)a, na }, { (void *)b, nb } };
    size_t done = 0;
    while (done < na + nb) {
        /* After a short write, the buffers' rest: a's tail (if any) and b, or b's tail. */
        int first = done < na ? 0 : 1;
        size_t skip = first ? done - na : done;
        struct iovec rest[2] = { iov[first], iov[1] };
        rest[0].iov_base = (char *)rest[0].iov_base + skip;
        rest[0].iov_len -= skip;
        ssize_t r = pwritev(fd, rest, 2 - first, (off_t)(off + done));
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -errno;
        if (r == 0)
            return -EIO; /* as chime__io_pwrite */
        done += (size_t)r;
    }
    return 0;
}

int chime__io_fdatasync(int fd)
{
    CHECK_FAULT(CHIME_IO_SYNC, NULL, fd);
    int r;
    do
        r = fdatasync(fd);
    while (r < 0 && errno == EINTR);
    return r < 0 ? -errno : 0;
}

int chime__io_fsync(int fd)
{
    CHECK_FAULT(CHIME_IO_SYNC, NULL, fd);
    int r;
    do
        r = fsync(fd);
    while (r < 0 && errno == EINTR);
    return r < 0 ? -errno : 0;
}

int chime__io_zero_fill(int fd, uint64_t off, uint64_t len)
{
    CHECK_FAULT(CHIME_IO_ALLOCATE, NULL, fd);
    enum { CHUNK = 64 * 1024, CHUNKS = 16 };
    static const unsigned char zeros[CHUNK];
    const uint64_t end = off + len;
    while (off < end) {
        struct iovec iov[CHUNKS];
        int n = 0;
        for (uint64_t left = end - off; left && n < CHUNKS; n++) {
            iov[n] = (struct iovec){ (void *)zeros, left < CHUNK ? (size_t)left : CHUNK };
            left -= iov[n].iov_len;
        }
        ssize_t r = pwritev(fd, iov, n, (off_t)off);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return r < 0 ? -errno : -EIO; /* as chime__io_pwrite */
        off += (uint64_t)r;
    }
    return 0;
}

int chime__io_ftruncate(int fd, uint64_t len)
{
    CHECK_FAULT(CHIME_IO_TRUNCATE, NULL, fd);
    int r;
    do
        r = ftruncate(fd, (off_t)len);
    while (r < 0 && errno == EINTR);
    return r < 0 ? -errno : 0;
}

int chime__io_renameat(int dir, const char *from, const char *to)
{
    CHECK_FAULT(CHIME_IO_RENAME, to, -1);
    return renameat(dir, from, dir, to) == 0 ? 0 : -errno;
}

int chime__io_unlinkat(int dir, const char *name)
{
    CHECK_FAULT(CHIME_IO_UNLINK, name, -1);
    return unlinkat(dir, name, 0) == 0 || errno == ENOENT ? 0 : -errno;
}

int chime__io_lock(int fd)
{
    CHECK_FAULT(CHIME_IO_LOCK, NULL, fd);
    int r;
    do
        r = flock(fd, LOCK_EX | LOCK_NB);
    while (r < 0 && errno == EINTR);
    if (r < 0)
        return errno == EWOULDBLOCK ? -EBUSY : -errno;
    return 0;
}

int chime__io_size(int fd, uint64_t *size)
{
    struct stat st;
    if (fstat(fd, &st) != 0)
        return -errno;
    *size = (uint64_t)st.st_size;
    return 0;
}

int chime__io_list(int dir, int (*fn)(void *ctx, const char *name), void *ctx)
{
    CHECK_FAULT(CHIME_IO_READ, ".", dir);
    /* A description of its own, so that its position is its own: a dup would share the journal's,
     * and two listings at once (two callers of chime_store_stats) would read past each other's
     * entries (found in review). closedir closes it. */
    int fd = openat(dir, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    DIR *d = fdopendir(fd);
    if (!d) {
        int err = -errno;
        close(fd);
        return err;
    }
    int rc = 0;
    errno = 0;
    for (struct dirent *e; !rc && (e = readdir(d));) {
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
            rc = fn(ctx, e->d_name);
        errno = 0;
    }
    if (!rc && errno)
        rc = -errno;
    closedir(d);
    return rc;
}

struct dir_bytes {
    int dir;
    uint64_t total;
};

static int add_bytes(void *ctx, const char *name)
{
    struct dir_bytes *b = ctx;
    struct stat st;
    if (fstatat(b->dir, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode))
        b->total += (uint64_t)st.st_blocks * 512u;
    return 0;
}

uint64_t chime__io_dir_bytes(int dir)
{
    struct dir_bytes b = { dir, 0 };
    chime__io_list(dir, add_bytes, &b);
    return b.total;
}
