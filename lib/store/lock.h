/* SPDX-License-Identifier: MIT */
/*
 * Locks held for a few hundred nanoseconds (a key's stripe, the log's append): adaptive mutexes,
 * which spin briefly before sleeping. When a group commit wakes 64 threads at once and each takes
 * the same short locks, a plain mutex turns most of those handovers into futex system calls; a
 * spinning one mostly does not (the store's SYNC_EACH benchmark made 4.6 futex calls per put).
 */
#ifndef CHIME_STORE_LOCK_H
#define CHIME_STORE_LOCK_H

#include <pthread.h>

static inline void chime__short_lock_init(pthread_mutex_t *m)
{
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
#ifdef PTHREAD_ADAPTIVE_MUTEX_INITIALIZER_NP /* glibc: the adaptive kind is there */
    pthread_mutexattr_settype(&a, PTHREAD_MUTEX_ADAPTIVE_NP);
#endif
    pthread_mutex_init(m, &a);
    pthread_mutexattr_destroy(&a);
}

#endif /* CHIME_STORE_LOCK_H */
