/* SPDX-License-Identifier: MIT */
/* A log of which callbacks ran and what the wheel's time was when they did, shared by the tests. */
#ifndef CHIME_TEST_LOG_H
#define CHIME_TEST_LOG_H

#include <stddef.h>
#include <stdint.h>

#include "chime.h"

#define LOG_MAX 4096

struct fired {
    uintptr_t tag;
    uint64_t now;
};

extern struct fired fired_log[LOG_MAX];
extern size_t fired_count;
extern chime_wheel *log_wheel; /* whose time a callback records */

/* A callback that appends (arg, chime_wheel_now(log_wheel)) to the log. */
void log_fire(void *arg);
void log_reset(chime_wheel *w);

#define TAG(x) ((void *)(uintptr_t)(x))

#endif /* CHIME_TEST_LOG_H */
