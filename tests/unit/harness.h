/*
 * harness.h - the unit-test harness: each test is a function named after the
 * behaviour it proves; RUN() calls it and prints "PASS name" or "FAIL name".
 * main() ends with `return TEST_SUMMARY();`, which prints
 * "N passed, N failed" and exits nonzero on any failure. tests/run.sh adds up
 * the PASS/FAIL/SKIP lines of every binary and script.
 */
#ifndef SKPO_TEST_HARNESS_H
#define SKPO_TEST_HARNESS_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct test_state {
    int cur_failed, passed, failed, skipped, cur_skipped;
} test_state;

static test_state T_;

#define CHECK(cond) do { if (!(cond)) { \
    fprintf(stderr, "  %s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
    T_.cur_failed = 1; } } while (0)

#define CHECK_MSG(cond, ...) do { if (!(cond)) { \
    fprintf(stderr, "  %s:%d: check failed: %s: ", __FILE__, __LINE__, #cond); \
    fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); T_.cur_failed = 1; } } while (0)

// |a - b| <= tol, and both finite (NaN never compares equal).
#define CHECK_NEAR(a, b, tol) do { double a_ = (a), b_ = (b); \
    if (!(isfinite(a_) && isfinite(b_) && fabs(a_ - b_) <= (tol))) { \
    fprintf(stderr, "  %s:%d: %s = %.9g, %s = %.9g, tol %g\n", __FILE__, __LINE__, #a, a_, #b, b_, (double)(tol)); \
    T_.cur_failed = 1; } } while (0)

#define SKIP(why) do { printf("SKIP %s: %s\n", __func__, why); T_.cur_skipped = 1; return; } while (0)

// SKPO_TEST_CASE=substring runs only the tests whose name contains it (for
// slow runs by hand, e.g. on the CUDA emulator); the others are not counted.
#define RUN(fn) do { const char *only_ = getenv("SKPO_TEST_CASE"); if (only_ && *only_ && !strstr(#fn, only_)) break; \
    T_.cur_failed = 0; T_.cur_skipped = 0; fn(); \
    if (T_.cur_skipped) T_.skipped++; \
    else if (T_.cur_failed) { T_.failed++; printf("FAIL %s\n", #fn); } \
    else { T_.passed++; printf("PASS %s\n", #fn); } fflush(stdout); } while (0)

#define TEST_SUMMARY() (printf("%d passed, %d failed, %d skipped\n", T_.passed, T_.failed, T_.skipped), \
    T_.failed ? 1 : 0)

// A wait that may never end (a deadlock under test) fails after `seconds`
// instead of hanging the suite: a FAIL line, then victim (a child, or 0) is
// killed and the process exits 1. deadlock_guard_off() disarms it.
#include <signal.h>
#include <unistd.h>
static pid_t T_victim_;
static inline void T_deadlock_(int sig) {
    (void)sig;
    static const char msg[] = "FAIL deadlock: a wait under test did not end (the guard's alarm went off)\n";
    if (write(1, msg, sizeof msg - 1) < 0) _exit(3);
    if (T_victim_ > 0) kill(T_victim_, SIGKILL);
    _exit(1);
}
static inline void deadlock_guard(unsigned seconds, pid_t victim) {
    T_victim_ = victim;
    signal(SIGALRM, T_deadlock_);
    alarm(seconds);
}
static inline void deadlock_guard_off(void) {
    alarm(0);
    T_victim_ = 0;
}

// The whole file of a build that cannot run it (no CUDA, or the real backend
// linked where the fake one is tested): one test, fn, that says why.
#define SKIP_ONLY_MAIN(fn, why) \
    static void fn(void) { SKIP(why); } \
    int main(void) { RUN(fn); return TEST_SUMMARY(); }

#endif
