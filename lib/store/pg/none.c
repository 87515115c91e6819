/* SPDX-License-Identifier: MIT */
/*
 * The PostgreSQL backend in a build without libpq (meson -Dpostgres=disabled, or libpq-dev absent):
 * a store whose config names a database cannot open. Every other operation is unreachable.
 */
#include <errno.h>

#include "store/backend.h"

static int none_open(struct chime__backend **out, const struct chime_store_config *cfg,
                     const struct chime__sink *sink)
{
    (void)out;
    (void)cfg;
    (void)sink;
    return -ENOTSUP; /* this build of chime has no PostgreSQL support */
}

const struct chime__backend_ops chime__pg_ops = { .name = "postgres (not built)", .open = none_open };
