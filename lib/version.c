/* SPDX-License-Identifier: MIT */
/* chime_version: the version of the library the program runs with (CHIME_VERSION is the one it was
 * compiled against; include/meson.build checks the header's numbers against meson's). */
#include "chime.h"

CHIME_API uint32_t chime_version(void)
{
    return CHIME_VERSION;
}
