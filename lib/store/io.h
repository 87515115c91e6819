/* SPDX-License-Identifier: MIT */
/*
 * The store's file I/O: every system call that touches the journal goes through here, so that tests
 * can make any of them fail (-EIO, -ENOSPC) or end the process at an exact point (a crash between a
 * rename and the unlinks that follow it, say). No other part of the store calls the file system.
 *
 * Every function returns 0 (or a count, or a descriptor) on success and a negative errno on failure,
 * retries EINTR, and loops over short reads and writes. Paths are names inside a directory given by
 * its descriptor (the journal's), except for chime__io_mkdir and chime__io_open_dir.
 */
#ifndef CHIME_STORE_IO_H
#define CHIME_STORE_IO_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

enum chime__io_op {
    CHIME_IO_OPEN,     /* open, openat, O_TMPFILE */
    CHIME_IO_READ,     /* pread */
    CHIME_IO_WRITE,    /* pwrite */
    CHIME_IO_SYNC,     /* fsync, fdatasync (of a file or a directory) */
    CHIME_IO_ALLOCATE, /* chime__io_zero_fill: the writes that reserve a segment's blocks */
    CHIME_IO_RENAME,
    CHIME_IO_UNLINK,
    CHIME_IO_MKDIR,
    CHIME_IO_TRUNCATE, /* ftruncate */
    CHIME_IO_LOCK,     /* flock */
};

/*
 * The fault hook (tests only): called before each operation with its kind, the name it acts on (NULL
 * for operations on a descriptor) and the descriptor (-1 for operations on a name). A nonzero return
 * (a negative errno) makes the operation fail with that error without touching the file system. The
 * hook may also end the process. Set it while no store is open; a hook that changes its behaviour
 * while stores run keeps that state in its context, with atomics.
 */
typedef int chime__io_fault_fn(void *ctx, enum chime__io_op op, const char *name, int fd);
void chime__io_set_fault(chime__io_fault_fn *fn, void *ctx);

int chime__io_mkdir(const char *path);                    /* 1: made; 0: it exists already */
/* The journal's directory, made if absent, its entry durable: mkdir, then the parent synced at
 * every open (an earlier one may have crashed between its mkdir and that sync). A parent this
 * process may enter but not read (mode 0711, or a current directory it cannot list, for a relative
 * path) cannot be opened to be synced: a directory that was there already is used as it is (found
 * in review: such a store could not be opened at all), and one made now is removed again and
 * refused (-EACCES), its entry not durable. Return: 0; a negative errno. */
int chime__io_make_dir(const char *path);
/* fsync the directory that holds path (its entry for path: a new directory is durable only then).
 * The fault hook sees CHIME_IO_SYNC with path as the name. */
int chime__io_sync_parent(const char *path);
int chime__io_open_dir(const char *path);                      /* a descriptor of the directory */
int chime__io_openat(int dir, const char *name, int flags, mode_t mode);
int chime__io_tmpfile(int dir);                                /* an unnamed file in dir (O_TMPFILE) */
int chime__io_close(int fd);
ssize_t chime__io_pread(int fd, void *buf, size_t n, uint64_t off); /* bytes read; < n only at EOF */
int chime__io_pwrite(int fd, const void *buf, size_t n, uint64_t off);
/* a, then b right after it, at off: one pwritev (the fault hook sees one CHIME_IO_WRITE) */
int chime__io_pwrite2(int fd, const void *a, size_t na, const void *b, size_t nb, uint64_t off);
int chime__io_fdatasync(int fd);
int chime__io_fsync(int fd);                                   /* also directories */
/* Write zeros over [off, off + len): the blocks are allocated (no ENOSPC later) and written, so
 * a later fdatasync of data written over them need not log the conversion of unwritten extents
 * (the cost of a fallocate'd file: wal_writer.c, SEGMENTS). The fault hook sees one
 * CHIME_IO_ALLOCATE. */
int chime__io_zero_fill(int fd, uint64_t off, uint64_t len);
int chime__io_ftruncate(int fd, uint64_t len);
int chime__io_renameat(int dir, const char *from, const char *to);
int chime__io_unlinkat(int dir, const char *name);
int chime__io_lock(int fd);                                    /* exclusive flock; -EBUSY if held */
int chime__io_size(int fd, uint64_t *size);                    /* st_size */
/* Call fn(ctx, name) for each entry of the directory (not . and ..), in no order; stop early when fn
 * returns nonzero. Return: 0, what fn returned, or an error reading the directory. */
int chime__io_list(int dir, int (*fn)(void *ctx, const char *name), void *ctx);
/* Bytes of disk the directory's regular files hold (st_blocks). */
uint64_t chime__io_dir_bytes(int dir);

#endif /* CHIME_STORE_IO_H */
