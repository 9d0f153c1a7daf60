// killshim.c - LD_PRELOAD shim for tests/sh/t_faults.sh: SIGKILLs the process
// at its Nth file-system event, so "killed while it writes" is deterministic.
// Events are calls of fwrite, write (regular files only), fflush, fclose,
// fsync, rename, renameat2 and mkdir, counted together in call order. A write event
// first writes half of its bytes (a torn write), then dies.
//   SKPO_FAULT_KILL_AT=N    die at event N (1-based); unset or 0: never
//   SKPO_FAULT_COUNT=FILE   at exit, write the number of events seen to FILE
//   SKPO_FAULT_ARM=PATH     count only events that happen once PATH exists (a
//                           long-lived process killed inside one later step)
// Built by t_faults.sh with `cc -shared -fPIC`; not part of any tool.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

static long events, kill_at = -1;

static void count_at_exit(void) {
    const char *f = getenv("SKPO_FAULT_COUNT");
    if (!f) return;
    int fd = open(f, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return;
    char b[32];
    int n = snprintf(b, sizeof b, "%ld\n", events);
    if (write(fd, b, (size_t)n) < 0) {}
    close(fd);
}

// True when this event is the one to die at.
static int event(void) {
    if (kill_at < 0) {
        const char *s = getenv("SKPO_FAULT_KILL_AT");
        kill_at = s ? atol(s) : 0;
        atexit(count_at_exit);
    }
    const char *arm = getenv("SKPO_FAULT_ARM");
    if (arm && *arm && access(arm, F_OK) != 0) return 0;
    return ++events == kill_at;
}

static void die(void) {
    raise(SIGKILL);
    _exit(137);
}

#define REAL(name) static __typeof__(name) *real; if (!real) real = (__typeof__(name) *)dlsym(RTLD_NEXT, #name)

size_t fwrite(const void *p, size_t size, size_t n, FILE *f) {
    REAL(fwrite);
    if (event()) {
        real(p, size, n / 2, f);
        fflush(f);
        die();
    }
    return real(p, size, n, f);
}

ssize_t write(int fd, const void *p, size_t n) {
    REAL(write);
    struct stat st;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && event()) {
        real(fd, p, n / 2);
        die();
    }
    return real(fd, p, n);
}

int fflush(FILE *f) {
    REAL(fflush);
    if (f && event()) die();
    return real(f);
}

int fclose(FILE *f) {
    REAL(fclose);
    if (event()) die();
    return real(f);
}

int fsync(int fd) {
    REAL(fsync);
    if (event()) die();
    return real(fd);
}

int rename(const char *a, const char *b) {
    REAL(rename);
    if (event()) die();
    return real(a, b);
}

int renameat2(int da, const char *a, int db, const char *b, unsigned flags) {
    REAL(renameat2);
    if (event()) die();
    return real(da, a, db, b, flags);
}

int mkdir(const char *p, mode_t m) {
    REAL(mkdir);
    if (event()) die();
    return real(p, m);
}
