/* SPDX-License-Identifier: MIT */
/* lib/version.c: the library's version is the header's, which is meson's (include/meson.build). */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <stdio.h>

#include "chime.h"

Test(version, the_library_reports_the_headers_version)
{
    cr_assert(eq(u32, chime_version(), CHIME_VERSION));
}

Test(version, the_packed_version_is_major_minor_patch_in_that_order)
{
    cr_assert(eq(u32, CHIME_VERSION >> 16, CHIME_VERSION_MAJOR));
    cr_assert(eq(u32, (CHIME_VERSION >> 8) & 0xff, CHIME_VERSION_MINOR));
    cr_assert(eq(u32, CHIME_VERSION & 0xff, CHIME_VERSION_PATCH));
    cr_assert(lt(u32, (uint32_t)(CHIME_VERSION_MAJOR << 16 | CHIME_VERSION_MINOR << 8 | 0xff),
                 (uint32_t)(CHIME_VERSION_MAJOR << 16 | (CHIME_VERSION_MINOR + 1) << 8)),
              "a patch release sorts below the next minor one");
}

Test(version, the_header_says_the_meson_project_version)
{
    char got[32];
    snprintf(got, sizeof got, "%d.%d.%d", CHIME_VERSION_MAJOR, CHIME_VERSION_MINOR, CHIME_VERSION_PATCH);
    cr_assert(eq(str, got, CHIME_TEST_PROJECT_VERSION));
}
