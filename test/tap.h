/* SPDX-License-Identifier: MIT */
/*
 * A minimal TAP producer for the tests that cannot use Criterion: Criterion does not start under
 * ThreadSanitizer (Snaipe/Criterion#274), and the runtime's tests must run under TSan.
 *
 * Each test is a function; CHECK prints the failing condition and ends the program with "not ok", so a
 * failed test never runs on into the next one with a runtime left in an unknown state.
 */
#ifndef CHIME_TEST_TAP_H
#define CHIME_TEST_TAP_H

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* RUNNING_ON_VALGRIND: nonzero under valgrind, for tests that scale rounds or bounds to its pace. */
#if defined(__has_include)
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#endif
#endif
#ifndef RUNNING_ON_VALGRIND
#define RUNNING_ON_VALGRIND 0
#endif

/* TAP_SANITIZED: 1 in a build under ThreadSanitizer or AddressSanitizer (gcc says so with a macro,
 * clang with __has_feature). TAP_SLOW: under valgrind or a sanitizer, where a thread may wait for
 * its turn for seconds with three tests at once on two cores: for a test whose bound is a parameter
 * of the code under test (the property holds for any value), never for a check of speed. */
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define TAP_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer) || __has_feature(address_sanitizer)
#define TAP_SANITIZED 1
#endif
#endif
#ifndef TAP_SANITIZED
#define TAP_SANITIZED 0
#endif
#define TAP_SLOW (RUNNING_ON_VALGRIND || TAP_SANITIZED)

struct tap_test {
    const char *name;
    void (*fn)(void);
};

static int tap_current;
static const char *tap_current_name;

#define CHECK(cond, ...)                                                                          \
    do {                                                                                          \
        if (!(cond)) {                                                                            \
            printf("not ok %d - %s\n# %s:%d: %s\n# ", tap_current, tap_current_name, __FILE__,    \
                   __LINE__, #cond);                                                              \
            printf(__VA_ARGS__);                                                                  \
            printf("\n");                                                                         \
            fflush(stdout);                                                                       \
            exit(1);                                                                              \
        }                                                                                         \
    } while (0)

/* Each side evaluated once: a call with effects (a cancel) must not run again to print its value. */
#define CHECK_EQ(got, want)                                                                       \
    do {                                                                                          \
        long long check_got_ = (long long)(got), check_want_ = (long long)(want);                 \
        CHECK(check_got_ == check_want_, "%s: got %lld, want %lld", #got " == " #want, check_got_, \
              check_want_);                                                                       \
    } while (0)

/* A hang is a failure with a name: a test still running after CHIME_TEST_WATCHDOG seconds (default
 * 300, far beyond any test's run even under valgrind) is reported "not ok" and the program ends. It
 * detects deadlocks; it does not judge speed. CHIME_TEST_ONLY=N runs test N alone (the others are
 * reported as skipped). */
static void tap_hung(int sig)
{
    (void)sig;
    static const char msg[] = "not ok - the test in progress hung (watchdog)\n";
    ssize_t w = write(STDOUT_FILENO, msg, sizeof(msg) - 1);
    (void)w;
    _exit(1);
}

static inline int tap_run(const struct tap_test *tests, int n)
{
    const char *wd = getenv("CHIME_TEST_WATCHDOG"), *only = getenv("CHIME_TEST_ONLY");
    signal(SIGALRM, tap_hung);
    printf("1..%d\n", n);
    fflush(stdout);
    for (int i = 0; i < n; i++) {
        tap_current = i + 1;
        tap_current_name = tests[i].name;
        if (only && atoi(only) != i + 1) {
            printf("ok %d - %s # SKIP CHIME_TEST_ONLY=%s\n", i + 1, tests[i].name, only);
            continue;
        }
        alarm(wd ? (unsigned)atoi(wd) : 300);
        tests[i].fn();
        alarm(0);
        printf("ok %d - %s\n", i + 1, tests[i].name);
        fflush(stdout);
    }
    return 0;
}

#endif /* CHIME_TEST_TAP_H */
