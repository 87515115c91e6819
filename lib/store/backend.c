/* SPDX-License-Identifier: MIT */
/* Which backend a store's config asks for. A backend added beside the journal adds its test here. */
#include "store/backend.h"

const struct chime__backend_ops *chime__backend_for(const struct chime_store_config *cfg)
{
    return cfg->postgres ? &chime__pg_ops : &chime__journal_ops;
}
