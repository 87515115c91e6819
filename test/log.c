/* SPDX-License-Identifier: MIT */
#include "log.h"

#include <stdlib.h>

struct fired fired_log[LOG_MAX];
size_t fired_count;
chime_wheel *log_wheel;

void log_fire(void *arg)
{
    if (fired_count == LOG_MAX)
        abort(); /* a test fired far more than it meant to */
    fired_log[fired_count++] = (struct fired){ (uintptr_t)arg, log_wheel ? chime_wheel_now(log_wheel) : 0 };
}

void log_reset(chime_wheel *w)
{
    fired_count = 0;
    log_wheel = w;
}
