// test_comm_file.c - the host side of the NCCL shared-file bootstrap
// (comm.h): rank / size from the launcher's environment, and the 128-byte
// unique id handed from rank 0 to the others through a file (a forked
// process plays rank 1). The NCCL part needs GPUs (tests/gpu).
#include "harness.h"
#include "train/comm.h"

#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <utime.h>
#include <unistd.h>

static void rank_and_size_come_from_skpo_or_slurm_variables(void) {
    int r = -1, n = -1;
    unsetenv("SKPO_RANK"), unsetenv("SKPO_WORLD_SIZE"), unsetenv("SLURM_PROCID"), unsetenv("SLURM_NTASKS");
    CHECK(!skpo_comm_file_rank(&r, &n));
    setenv("SLURM_PROCID", "3", 1), setenv("SLURM_NTASKS", "8", 1);
    CHECK(skpo_comm_file_rank(&r, &n) && r == 3 && n == 8);
    setenv("SKPO_RANK", "1", 1), setenv("SKPO_WORLD_SIZE", "2", 1);   // ours win
    CHECK(skpo_comm_file_rank(&r, &n) && r == 1 && n == 2);
    setenv("SKPO_RANK", "2", 1);   // rank outside the world: refused
    unsetenv("SLURM_PROCID");
    CHECK(!skpo_comm_file_rank(&r, &n));
    unsetenv("SKPO_RANK"), unsetenv("SKPO_WORLD_SIZE"), unsetenv("SLURM_NTASKS");
}

static void id_written_by_rank_0_reaches_a_waiting_rank(void) {
    char dir[] = "/tmp/skpo-ncclid-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char *path = skpo_path_join(dir, "id");
    unsigned char id[128];
    for (int i = 0; i < 128; i++) id[i] = (unsigned char)(i * 7 + 3);
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {   // rank 1: starts first, waits for the file
        unsigned char got[128] = {0};
        skpo_err e = {0};
        int ok = skpo_comm_file_id(path, 1, got, 20.0, &e) == SKPO_OK && !memcmp(got, id, 128);
        _exit(ok ? 0 : 1);
    }
    usleep(200 * 1000);
    skpo_err e = {0};
    CHECK(skpo_comm_file_id(path, 0, id, 0, &e) == SKPO_OK);
    int status = -1;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    skpo_rm_rf(dir, &e);
    free(path);
}

static void waiting_rank_gives_up_naming_the_file(void) {
    unsigned char got[128];
    skpo_err e = {0};
    CHECK(skpo_comm_file_id("/tmp/skpo-no-such-dir/id", 2, got, 0.2, &e) == SKPO_EIO);
    CHECK(strstr(e.msg, "/tmp/skpo-no-such-dir/id") && strstr(e.msg, "rank 2"));
}

// An id file left by a crashed run (an hour old here) is not joined: the
// waiting rank fails naming it instead of hanging in ncclCommInitRank.
static void stale_id_file_from_a_crashed_run_fails_clearly(void) {
    char dir[] = "/tmp/skpo-ncclid-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char *path = skpo_path_join(dir, "id");
    unsigned char id[128] = {1}, got[128];
    skpo_err e = {0};
    CHECK(skpo_comm_file_id(path, 0, id, 0, &e) == SKPO_OK);
    struct utimbuf old = {time(NULL) - 3600, time(NULL) - 3600};
    CHECK(utime(path, &old) == 0);
    CHECK(skpo_comm_file_id(path, 1, got, 0.2, &e) == SKPO_EIO);
    CHECK_MSG(strstr(e.msg, "stale") && strstr(e.msg, path) && strstr(e.msg, "rank 1"), "%s", e.msg);
    CHECK(utime(path, NULL) == 0);   // rewritten now: taken
    CHECK(skpo_comm_file_id(path, 1, got, 0.2, &e) == SKPO_OK && !memcmp(got, id, 128));
    skpo_rm_rf(dir, &e);
    free(path);
}

int main(void) {
    RUN(rank_and_size_come_from_skpo_or_slurm_variables);
    RUN(id_written_by_rank_0_reaches_a_waiting_rank);
    RUN(waiting_rank_gives_up_naming_the_file);
    RUN(stale_id_file_from_a_crashed_run_fails_clearly);
    return TEST_SUMMARY();
}
