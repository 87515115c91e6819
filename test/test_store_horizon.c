/* SPDX-License-Identifier: MIT */
/*
 * The cold tier's boundary (lib/store/keeper.c, THE COLD TIER): a timer due later than now +
 * horizon + horizon/8 is on disk only, and each load keeps `loaded` within a granule (horizon/8)
 * of now + horizon. Found in review: the keeper rounded its target up to a whole granule, so
 * `loaded` reached now + horizon + 2 granules after every load, and a put due that far was held in
 * memory. On the store's fake wall clock (store_util.h). A plain TAP program (tap.h).
 */
#include "store_util.h"

static char *dir;
static struct recorder rec;

/* Open's first load, from a wall clock 1 ms into a second (a granule of 1 s). */
static void a_timer_due_beyond_the_horizon_is_kept_on_disk_only(void)
{
    store_test_fresh(&dir, "horizon", &rec);
    uint64_t t0 = wall_ns() / SEC * SEC + MS;
    fake_freeze(NULL, t0);
    struct chime_store_config cfg = { .horizon_ns = 8 * SEC }; /* granule: 1 s */
    chime_store *s = store_open_on_fake_clock(dir, &rec, &cfg);
    uint64_t due = t0 + 8 * SEC + 1900 * MS; /* 1.9 s beyond the horizon: more than a granule */
    CHECK_EQ(chime_store_put(s, "far", 3, "x", 1, due), 0);
    struct chime_store_stats st;
    chime_store_stats(s, &st);
    printf("# loaded boundary: now + horizon + %.3f s; timers in memory: %llu\n",
           (double)(atomic_load(&s->loaded) - t0 - 8 * SEC) / 1e9, (unsigned long long)st.loaded);
    CHECK_EQ(st.loaded, 0); /* "kept on disk only" */
    fake_freeze(NULL, 0);
    CHECK_EQ(chime_store_close(s), 0);
}

/* The keeper's own loads, the clock running: right after each, loaded - (now + horizon). */
static void the_keepers_loads_stay_within_a_granule_of_the_horizon(void)
{
    store_test_fresh(&dir, "horizon", &rec);
    struct chime_store_config cfg = { .horizon_ns = 8 * SEC };
    chime_store *s = store_open_on_fake_clock(dir, &rec, &cfg);
    uint64_t worst = 0;
    for (int i = 0; i < 4; i++) {
        uint64_t l0 = atomic_load(&s->loaded);
        fake_step(NULL, (int64_t)(l0 - 8 * SEC - fake_wall()) + (int64_t)MS); /* the next load is due */
        chime__store_wake(s);
        while (atomic_load(&s->loaded) == l0)
            sleep_ms(1);
        uint64_t over = atomic_load(&s->loaded) - (fake_wall() + 8 * SEC);
        printf("# load %d: loaded = now + horizon + %.3f s\n", i, (double)over / 1e9);
        worst = over > worst ? over : worst;
    }
    CHECK(worst <= SEC, "loaded went %.3f s beyond now + horizon (horizon/8 = 1 s)",
          (double)worst / 1e9);
    CHECK_EQ(chime_store_close(s), 0);
}

static const struct tap_test tests[] = {
    { "a_timer_due_beyond_the_horizon_is_kept_on_disk_only",
      a_timer_due_beyond_the_horizon_is_kept_on_disk_only },
    { "the_keepers_loads_stay_within_a_granule_of_the_horizon",
      the_keepers_loads_stay_within_a_granule_of_the_horizon },
};

int main(void)
{
    return store_tests_run(tests, (int)(sizeof tests / sizeof tests[0]), &dir, &rec, fake_wall);
}
