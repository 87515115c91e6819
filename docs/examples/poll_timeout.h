/* SPDX-License-Identifier: MIT */
/*
 * How long an event loop may sleep in poll() or epoll_wait() until a chime wheel needs advancing.
 *
 * chime_wheel_next() gives a 64-bit tick; poll() takes an int of milliseconds, which holds at most
 * INT_MAX ms, 24.8 days. A plain (int)(next - now) turns a timer further away than that into a
 * negative timeout, which poll() reads as "wait forever": the loop would sleep through the timer.
 * Clamp instead. Waking early is harmless: the loop asks chime_wheel_next() again and goes back to
 * sleep, so a timer a year away costs one wake-up every 24.8 days.
 *
 * Used by event_loop.c; test/test_poll_timeout.c checks it at the edges.
 */
#ifndef CHIME_EXAMPLE_POLL_TIMEOUT_H
#define CHIME_EXAMPLE_POLL_TIMEOUT_H

#include <limits.h>
#include <stdint.h>

/* The poll() timeout in ms from now to next (both in ms): 0 if next is due, at most INT_MAX. */
static inline int poll_timeout_ms(uint64_t next, uint64_t now)
{
    if (next <= now)
        return 0;
    return next - now > INT_MAX ? INT_MAX : (int)(next - now);
}

#endif
