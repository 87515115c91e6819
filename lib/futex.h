/* SPDX-License-Identifier: MIT */
/*
 * The futex calls chime makes, in one place, below the layers that sleep on a word: the runtime's
 * advancing thread and its sync (runtime/wake.h), the journal's group-commit waiters
 * (store/waiters.c) and the PostgreSQL backend's lane (store/pg/lanes.c). Process-private futexes
 * only. Each caller keeps its own handshake (what it changes before a wake, what it checks before a
 * wait); these are only the system calls.
 */
#ifndef CHIME_FUTEX_H
#define CHIME_FUTEX_H

#include <stdatomic.h>
#include <stdint.h>

/* Wake up to n threads waiting on word (INT_MAX: every one). A system call. */
void chime__futex_wake(_Atomic uint32_t *word, int n);

/* Wake every thread waiting on word. */
void chime__futex_wake_all(_Atomic uint32_t *word);

/* Wait while *word == seen, until deadline_ns on CLOCK_MONOTONIC (UINT64_MAX: no timeout). It may
 * return early (a signal, a wake meant for another value): every caller checks again what it waits
 * for. */
void chime__futex_wait(_Atomic uint32_t *word, uint32_t seen, uint64_t deadline_ns);

#endif /* CHIME_FUTEX_H */
