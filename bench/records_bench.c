// records_bench.c - helper of bench/b_records.sh (built by it, not by make):
//   records_bench write N FILE   write N rollout-like records ("-" = stdout),
//                                print the seconds spent packing+compressing
//   records_bench read FILE      read every record back, print seconds and count
//   records_bench time K CMD...  run CMD K times (stdout to /dev/null), print
//                                the best wall and the best CPU (user+sys) seconds
// Records look like down records of a math rollout: 256 prompt ids, 1024
// response ids and log-probs, ~3 KB of text, ids, reward and advantage.
#include "base/rng.h"
#include "record/record.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void time_cmd(int k, char **cmd) {
    double best_wall = 1e30, best_cpu = 1e30;
    for (int i = 0; i < k; i++) {
        double t0 = skpo_now();
        pid_t pid = fork();
        if (pid < 0) skpo_die("fork failed");
        if (pid == 0) {
            int fd = open("/dev/null", O_WRONLY);
            dup2(fd, 1);
            execvp(cmd[0], cmd);
            _exit(127);
        }
        int status;
        struct rusage ru;
        if (wait4(pid, &status, 0, &ru) != pid) skpo_die("wait failed");
        if (!WIFEXITED(status) || WEXITSTATUS(status)) skpo_die("'%s' failed", cmd[0]);
        double wall = skpo_now() - t0;
        double cpu = (double)ru.ru_utime.tv_sec + 1e-6 * (double)ru.ru_utime.tv_usec + (double)ru.ru_stime.tv_sec +
                     1e-6 * (double)ru.ru_stime.tv_usec;
        if (wall < best_wall) best_wall = wall;
        if (cpu < best_cpu) best_cpu = cpu;
    }
    printf("%.4f %.4f\n", best_wall, best_cpu);
}

static uint64_t next(uint64_t *s) { return skpo_splitmix64(s); }

static void make(skpo_rec *r, long i, uint64_t *s, int32_t *ids, float *lp, char *text) {
    static const char *words[] = {"the", "sum", "of", "roots", "is", "\\frac{3}{4}", "therefore", "we", "get",
                                  "x^2", "+", "=", "answer", "\\boxed{12}", "let", "consider"};
    char buf[64];
    skpo_rec_clear(r);
    skpo_rec_set_str(r, F_KIND, SKPO_KIND_DOWN);
    snprintf(buf, sizeof buf, "p%ld.%ld", i / 8, i % 8);
    skpo_rec_set_str(r, F_UID, buf);
    snprintf(buf, sizeof buf, "p%ld", i / 8);
    skpo_rec_set_str(r, F_GID, buf);
    skpo_rec_set_str(r, F_PID, buf);
    skpo_rec_set_int(r, F_STEP, 7);
    for (int k = 0; k < 256; k++) ids[k] = (int32_t)(next(s) % 151000);
    skpo_rec_set_i32s(r, F_PROMPT, ids, 256);
    for (int k = 0; k < 1024; k++) {
        ids[k] = (int32_t)(next(s) % 151000);
        lp[k] = -(float)(next(s) % 100000) / 20000.0f;
    }
    skpo_rec_set_i32s(r, F_TOKENS, ids, 1024);
    skpo_rec_set_f32s(r, F_LOGP, lp, 1024);
    size_t n = 0;
    while (n < 3000) {
        const char *w = words[next(s) % 16];
        size_t l = strlen(w);
        memcpy(text + n, w, l);
        text[n + l] = ' ';
        n += l + 1;
    }
    skpo_rec_set_strn(r, F_TEXT, text, n);
    skpo_rec_set_str(r, F_FINISH, "stop");
    skpo_rec_set_float(r, F_REWARD, (next(s) & 1) ? 1.0 : -1.0);
    skpo_rec_set_float(r, F_ADV, (double)(next(s) % 2000) / 1000.0 - 1.0);
}

int main(int argc, char **argv) {
    skpo_err e = {0};
    skpo_rec r;
    skpo_rec_init(&r);
    if (argc == 4 && !strcmp(argv[1], "write")) {
        long n = atol(argv[2]);
        uint64_t s = 42;
        int32_t *ids = skpo_xmalloc(1024 * sizeof *ids);
        float *lp = skpo_xmalloc(1024 * sizeof *lp);
        char *text = skpo_xmalloc(4096);
        skpo_writer *w;
        double t0 = skpo_now(), c0 = cpu_now(), tgen = 0, cgen = 0;
        skpo_status st = strcmp(argv[3], "-") ? skpo_writer_open_file(argv[3], 0, &w, &e) : skpo_writer_open_fd(1, 0, &w, &e);
        if (st) skpo_die("%s", e.msg);
        for (long i = 0; i < n; i++) {
            double g = skpo_now(), cg = cpu_now();
            make(&r, i, &s, ids, lp, text);
            tgen += skpo_now() - g;
            cgen += cpu_now() - cg;
            if (skpo_writer_put(w, &r, &e)) skpo_die("%s", e.msg);
        }
        if (skpo_writer_close(w, &e)) skpo_die("%s", e.msg);
        // without the time spent generating records
        fprintf(strcmp(argv[3], "-") ? stdout : stderr, "%.4f %.4f\n", skpo_now() - t0 - tgen, cpu_now() - c0 - cgen);
        free(ids);
        free(lp);
        free(text);
    } else if (argc == 3 && !strcmp(argv[1], "read")) {
        skpo_reader *rd;
        double t0 = skpo_now(), c0 = cpu_now();
        if (skpo_reader_open(argv[2], &rd, &e)) skpo_die("%s", e.msg);
        skpo_status st;
        long n = 0;
        while ((st = skpo_reader_next(rd, &r, &e)) == SKPO_OK) n++;
        if (st != SKPO_EOF) skpo_die("%s", e.msg);
        skpo_reader_close(rd);
        printf("%.4f %.4f %ld\n", skpo_now() - t0, cpu_now() - c0, n);
    } else if (argc >= 4 && !strcmp(argv[1], "time")) {
        time_cmd(atoi(argv[2]), argv + 3);
    } else {
        fprintf(stderr, "usage: records_bench write N FILE | read FILE\n");
        return 2;
    }
    skpo_rec_free(&r);
    return 0;
}
