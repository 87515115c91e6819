/* SPDX-License-Identifier: MIT */
/* chime_strerror: the names of the error codes chime returns. */
#define _GNU_SOURCE /* strerrordesc_np: glibc's static descriptions, thread-safe */
#include <errno.h>
#include <string.h>

#include "chime.h"

CHIME_API const char *chime_strerror(int err)
{
    switch (err) {
    case 0: return "success";
    case -EINVAL: return "invalid argument";
    case -ENOMEM: return "out of memory";
    case -ENOENT: return "no such pending timer or dead letter (open: no such directory or schema)";
    case -EAGAIN: return "too many pending timers";
    case -ESHUTDOWN: return "timer is stopped";
    case -EDEADLK: return "would deadlock: called from a callback";
    case -ERANGE: return "deadline beyond the clock's range";
    case -ECHILD: return "a thread could not be started";
    /* the durable store's */
    case -EBUSY: return "the store's directory is open in another process (or store)";
    case -EINPROGRESS: return "the timer's handler is running: it cannot be cancelled";
    case -EIO: return "I/O error: the store has failed; reopen it";
    case -ENOSPC: return "no space left on the device: the store has failed; reopen it";
    case -EBADMSG: return "the journal is damaged (run chime-store verify)";
    case -EPROTO: return "the journal's files (or the database's schema) are another format version";
    case -EACCES: return "permission denied";
    case -ENOTDIR: return "not a directory";
    /* the other errors chime_store_open documents (the file system's, PostgreSQL's) */
    case -ECONNREFUSED: return "the database cannot be reached";
    case -ENOTSUP: return "this build has no PostgreSQL support (libpq)";
    case -EROFS: return "read-only file system";
    case -ENAMETOOLONG: return "file name too long";
    case -ELOOP: return "too many levels of symbolic links";
    case -EMFILE: return "too many open files";
    case -ENFILE: return "too many open files in the system";
    case -EPERM: return "operation not permitted";
    case -EDQUOT: return "disk quota exceeded";
    case -EISDIR: return "is a directory (where the store expects a file)";
    default: break;
    }
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 32))
    /* Any other errno the file system may return through open (the header says "other negative
     * errno"): the C library's static text, never a buffer that strerror() might reuse. */
    const char *d = err < 0 && err > -4096 ? strerrordesc_np(-err) : NULL;
    if (d)
        return d;
#endif
    return "unknown error";
}
