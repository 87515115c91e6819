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

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
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

/* A failed check: "not ok" and the reason on stdout (the TAP stream), and the reason on stderr,
 * which `meson test --print-errorlogs` shows (it parses stdout and does not print it). */
static inline __attribute__((format(printf, 4, 5))) void tap_fail(const char *file, int line,
                                                                  const char *cond,
                                                                  const char *fmt, ...)
{
    va_list ap, again;
    va_start(ap, fmt);
    va_copy(again, ap);
    printf("not ok %d - %s\n# %s:%d: %s\n# ", tap_current, tap_current_name, file, line, cond);
    vprintf(fmt, ap);
    printf("\n");
    fflush(stdout);
    fprintf(stderr, "test %d (%s) failed: %s:%d: %s: ", tap_current, tap_current_name, file, line,
            cond);
    vfprintf(stderr, fmt, again);
    fprintf(stderr, "\n");
    va_end(again);
    va_end(ap);
    exit(1);
}

#define CHECK(cond, ...)                                                                          \
    do {                                                                                          \
        if (!(cond))                                                                              \
            tap_fail(__FILE__, __LINE__, #cond, __VA_ARGS__);                                     \
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
 * detects deadlocks; it does not judge speed. Before it ends, where gdb is installed (CI installs
 * it) and the program does not run under valgrind, gdb prints every thread's stack on stderr: a
 * hang that happens once in many runs is then seen where it waited. CHIME_TEST_ONLY=N runs test N
 * alone (the others are reported as skipped). Only async-signal-safe calls in the handler. */
static void tap_backtraces(void)
{
    static const char gdb[] = "/usr/bin/gdb";
    if (RUNNING_ON_VALGRIND || access(gdb, X_OK) != 0)
        return;
    char pid[24], *p = pid + sizeof pid;
    *--p = 0;
    pid_t v = getpid();
    do
        *--p = (char)('0' + v % 10);
    while (v /= 10);
    prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0); /* Yama: let a child attach to its parent */
    pid_t child = fork();
    if (child == 0) {
        dup2(STDERR_FILENO, STDOUT_FILENO);
        static char a0[] = "gdb", a1[] = "-batch", a2[] = "-nx", a3[] = "-p", a5[] = "-ex",
                    a6[] = "thread apply all bt";
        char *argv[] = { a0, a1, a2, a3, p, a5, a6, NULL };
        execv(gdb, argv);
        _exit(127);
    }
    if (child > 0)
        while (waitpid(child, NULL, 0) < 0 && errno == EINTR) {
        }
}

static void tap_hung(int sig)
{
    (void)sig;
    static const char msg[] = "not ok - the test in progress hung (watchdog)\n";
    ssize_t w = write(STDOUT_FILENO, msg, sizeof(msg) - 1);
    w = write(STDERR_FILENO, msg + 9, sizeof(msg) - 10); /* without "not ok - " */
    (void)w;
    tap_backtraces();
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
