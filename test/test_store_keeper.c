/* SPDX-License-Identifier: MIT */
/*
 * The keeper's sleep (lib/store/keeper.c). The program is linked with -Wl,--wrap=poll
 * (test/meson.build), so that the keeper's poll reaches the wrapper below, which notes the timeout
 * the keeper asks for on the watched store's event fd. A plain TAP program (tap.h).
 */
#include "store_api.h"

#include "store/store.h"

#include <limits.h>
#include <poll.h>

int __real_poll(struct pollfd *fds, nfds_t n, int ms);

static _Atomic int watched_fd = -1;  /* the event fd of the store whose keeper is watched */
static _Atomic int shortest = INT_MAX; /* the shortest sleep that keeper asked for, in ms */
static _Atomic long polls;             /* and how many times it slept */

int __wrap_poll(struct pollfd *fds, nfds_t n, int ms);
int __wrap_poll(struct pollfd *fds, nfds_t n, int ms)
{
    if (n >= 1 && fds[0].fd >= 0 && fds[0].fd == atomic_load(&watched_fd)) {
        int was = atomic_load(&shortest);
        while (ms < was && !atomic_compare_exchange_weak(&shortest, &was, ms))
            ;
        atomic_fetch_add(&polls, 1);
    }
    return __real_poll(fds, n, ms);
}

/* A horizon past the year 2554 loads everything at open: `loaded` saturates at UINT64_MAX and no
 * load is ever due again, so the keeper sleeps until it is woken (a clock step, a failed arm,
 * close). Found in review: the next load's time, loaded - horizon, was then in the past, and the
 * keeper woke every millisecond for as long as the store was open. */
static void a_keeper_with_everything_loaded_sleeps_until_woken(void)
{
    fresh();
    struct chime_store_config cfg = { .horizon_ns = UINT64_MAX };
    chime_store *s = open_store(&cfg);
    CHECK_EQ(put(s, "far", "x", wall_ns() + 3600 * SEC), 0);
    atomic_store(&watched_fd, s->event_fd);
    chime__store_settle(s); /* two whole rounds: the first one's sleep is noted */
    CHECK(atomic_load(&polls) > 0, "the keeper never slept");
    CHECK_EQ(atomic_load(&shortest), INT_MAX);
    struct chime_store_stats st;
    chime_store_stats(s, &st);
    CHECK_EQ(st.loaded, 1);
    atomic_store(&watched_fd, -1);
    CHECK_EQ(chime_store_close(s), 0);
}

static const struct tap_test tests[] = {
    { "a_keeper_with_everything_loaded_sleeps_until_woken",
      a_keeper_with_everything_loaded_sleeps_until_woken },
};

int main(void)
{
    return store_tests_run(tests, (int)(sizeof tests / sizeof tests[0]), &dir, &rec, NULL);
}
