/* chime_strerror: the names of the error codes chime returns. */
#include <errno.h>

#include "chime.h"

CHIME_API const char *chime_strerror(int err)
{
    switch (err) {
    case 0: return "success";
    case -EINVAL: return "invalid argument";
    case -ENOMEM: return "out of memory";
    case -ENOENT: return "no such pending timer";
    case -EAGAIN: return "too many pending timers";
    case -ESHUTDOWN: return "timer is stopped";
    case -EDEADLK: return "would deadlock: called from a callback";
    case -ERANGE: return "deadline beyond the clock's range";
    case -ECHILD: return "a thread could not be started";
    default: return "unknown error";
    }
}
