/* SPDX-License-Identifier: MIT */
/* A timed wait's deadline: the store's threads wait on condition variables for a while at most
 * (the flusher's idle spell, the dispatcher's rate limit, a settle's poll). */
#ifndef CHIME_STORE_DEADLINE_H
#define CHIME_STORE_DEADLINE_H

#include <stdint.h>
#include <time.h>

/* The time ns after now on `clock` (the condition variable's), as pthread_cond_timedwait takes
 * it. */
static inline struct timespec chime__deadline_after(clockid_t clock, uint64_t ns)
{
    struct timespec ts;
    clock_gettime(clock, &ts);
    uint64_t at = (uint64_t)ts.tv_nsec + ns;
    ts.tv_sec += (time_t)(at / 1000000000u);
    ts.tv_nsec = (long)(at % 1000000000u);
    return ts;
}

#endif /* CHIME_STORE_DEADLINE_H */
