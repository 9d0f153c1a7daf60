// test_comm_file.c - the host side of the NCCL shared-file bootstrap
// (comm.h): rank / size from the launcher's environment, and the 128-byte
// unique id handed from rank 0 to the others through a file (a forked
// process plays rank 1), the run nonce that keeps another run's id file from
// being joined, and the wait on a device collective: another rank's failure
// notice, a timeout or NCCL's asynchronous error abort it instead of waiting
// forever. The NCCL part needs GPUs (tests/gpu).
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
// (Without a run nonce: then the file's age is all there is.)
static void stale_id_file_from_a_crashed_run_fails_clearly(void) {
    unsetenv("SKPO_RUN_NONCE"), unsetenv("SLURM_JOB_ID");
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

// With a run nonce (SKPO_RUN_NONCE, or Slurm's job and step) a file another
// run wrote is never joined, however recent: a crash and a restart within
// the max age (the old test's blind spot) would hang every rank in
// ncclCommInitRank. The waiting rank goes on waiting for its own run's file.
static void an_id_file_of_another_run_is_never_joined_however_recent(void) {
    char dir[] = "/tmp/skpo-ncclid-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char *path = skpo_path_join(dir, "id");
    unsigned char crashed[128], ours[128], got[128];
    for (int i = 0; i < 128; i++) crashed[i] = (unsigned char)i, ours[i] = (unsigned char)(255 - i);
    skpo_err e = {0};
    unsetenv("SLURM_JOB_ID");
    setenv("SKPO_RUN_NONCE", "run-a", 1);
    CHECK(skpo_comm_file_id(path, 0, crashed, 0, &e) == SKPO_OK);   // written a second ago
    setenv("SKPO_RUN_NONCE", "run-b", 1);
    CHECK(skpo_comm_file_id(path, 1, got, 0.3, &e) == SKPO_EIO);
    CHECK_MSG(strstr(e.msg, "another run") && strstr(e.msg, "run-a") && strstr(e.msg, "run-b") && strstr(e.msg, path),
              "%s", e.msg);
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {   // run b's rank 1, waiting while its rank 0 starts
        skpo_err ce = {0};
        int ok = skpo_comm_file_id(path, 1, got, 20.0, &ce) == SKPO_OK && !memcmp(got, ours, 128);
        _exit(ok ? 0 : 1);
    }
    usleep(300 * 1000);
    CHECK(skpo_comm_file_id(path, 0, ours, 0, &e) == SKPO_OK);
    int status = -1;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    // Slurm's job and step are a nonce too; a file of the older format is refused by name.
    unsetenv("SKPO_RUN_NONCE");
    setenv("SLURM_JOB_ID", "77", 1);
    CHECK(skpo_comm_file_id(path, 1, got, 0.2, &e) == SKPO_EIO && strstr(e.msg, "slurm-77.0"));
    unsetenv("SLURM_JOB_ID");
    FILE *f = fopen(path, "wb");
    CHECK(f && fwrite(crashed, 1, 128, f) == 128 && fclose(f) == 0);
    CHECK(skpo_comm_file_id(path, 1, got, 0.2, &e) == SKPO_EFORMAT && strstr(e.msg, "not an NCCL id file"));
    skpo_rm_rf(dir, &e);
    free(path);
}

// --- a rank's failure while another waits in a device collective (comm.h) ------------------
// The waiting side is the same code for every NCCL collective; a stand-in
// collective here never finishes (or fails, or finishes), and its abort is seen.

typedef struct stuck {
    int polls, finish_after, fail, aborted;
} stuck;
static int stuck_poll(void *ctx, skpo_err *err) {
    stuck *s = ctx;
    s->polls++;
    if (s->fail) return skpo_err_set(err, SKPO_EDEVICE, "nccl: remote error (stand-in)"), -1;
    return s->finish_after && s->polls >= s->finish_after;
}
static void stuck_abort(void *ctx) { ((stuck *)ctx)->aborted++; }

// Two ranks through a notice file (the shared-file bootstrap's channel).
static skpo_comm *two_ranks(int rank, const char *notice) {
    skpo_comm *c = NULL;
    skpo_err e = {0};
    SKPO_ASSERT(skpo_comm_init(SKPO_COMM_LOCAL, &c, &e) == SKPO_OK);
    c->rank = rank, c->size = 2;
    skpo_comm_set_notice_file(c, notice);
    return c;
}

// Rank 1 fails before the collective rank 0 waits in (skpo_comm_agree posts
// its notice before agreeing); rank 0 stops waiting, aborts, and says who
// failed and why, instead of waiting forever.
static void a_rank_waiting_in_a_collective_stops_on_another_ranks_failure(void) {
    char dir[] = "/tmp/skpo-notice-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char *np = skpo_path_join(dir, "id.failed-0123");
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        usleep(200 * 1000);
        skpo_comm *c1 = two_ranks(1, np);
        skpo_err e = {0};
        skpo_err_set(&e, SKPO_ENOMEM, "out of GPU memory in the forward");
        _exit(skpo_comm_agree(c1, SKPO_ENOMEM, &e) == SKPO_ENOMEM && c1->broken ? 0 : 1);   // no agreement over a broken NCCL
    }
    skpo_comm *c0 = two_ranks(0, np);
    stuck s = {0};
    skpo_comm_op op = {stuck_poll, stuck_abort, &s};
    skpo_err e = {0};
    setenv("SKPO_NCCL_TIMEOUT", "30", 1);
    double t0 = skpo_now();
    CHECK(skpo_comm_wait(c0, &op, "nccl all-reduce", &e) == SKPO_EIO);
    CHECK_MSG(skpo_now() - t0 < 10 && s.aborted == 1, "%.1f s, %d aborts", skpo_now() - t0, s.aborted);
    CHECK_MSG(strstr(e.msg, "rank 1 failed") && strstr(e.msg, "out of GPU memory") && strstr(e.msg, "all-reduce"), "%s", e.msg);
    int status = -1;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    unsetenv("SKPO_NCCL_TIMEOUT");
    skpo_comm_free(c0);
    skpo_rm_rf(dir, &e);
    free(np);
}

// No notice and no end: SKPO_NCCL_TIMEOUT ends the wait with an abort; NCCL's
// asynchronous error (a peer gone) too; a collective that ends is not aborted.
static void a_collective_is_aborted_on_timeout_or_async_error_and_left_alone_when_it_ends(void) {
    skpo_comm *c = two_ranks(0, "/tmp/skpo-no-such-dir/notice");
    skpo_err e = {0};
    stuck s = {0};
    skpo_comm_op op = {stuck_poll, stuck_abort, &s};
    setenv("SKPO_NCCL_TIMEOUT", "0.3", 1);
    double t0 = skpo_now();
    CHECK(skpo_comm_wait(c, &op, "nccl reduce-scatter", &e) == SKPO_EIO && s.aborted == 1);
    CHECK(skpo_now() - t0 >= 0.3 && skpo_now() - t0 < 5);
    CHECK_MSG(strstr(e.msg, "did not finish in 0.3 s") && strstr(e.msg, "SKPO_NCCL_TIMEOUT"), "%s", e.msg);
    s = (stuck){.fail = 1};
    CHECK(skpo_comm_wait(c, &op, "nccl all-gather", &e) == SKPO_EDEVICE && s.aborted == 1 && strstr(e.msg, "remote error"));
    s = (stuck){.finish_after = 5};
    CHECK(skpo_comm_wait(c, &op, "nccl all-gather", &e) == SKPO_OK && s.aborted == 0 && s.polls == 5);
    unsetenv("SKPO_NCCL_TIMEOUT");
    skpo_comm_free(c);
}

int main(void) {
    RUN(rank_and_size_come_from_skpo_or_slurm_variables);
    RUN(id_written_by_rank_0_reaches_a_waiting_rank);
    RUN(waiting_rank_gives_up_naming_the_file);
    RUN(stale_id_file_from_a_crashed_run_fails_clearly);
    RUN(an_id_file_of_another_run_is_never_joined_however_recent);
    RUN(a_rank_waiting_in_a_collective_stops_on_another_ranks_failure);
    RUN(a_collective_is_aborted_on_timeout_or_async_error_and_left_alone_when_it_ends);
    return TEST_SUMMARY();
}
