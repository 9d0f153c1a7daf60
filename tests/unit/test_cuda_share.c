// test_cuda_share.c - one weights load per GPU (model.h "weights_share"): a
// process that loaded a checkpoint on the GPU exports its device weights, and
// a child process maps them (skpo_model_load_shared) and computes the same
// logits, bit for bit, as the exporter and as an ordinary load of the same
// folder; and the pipeline's shape (skpo-sample --export-weights | skpo-splice
// --import-weights) over a real pipe: the importer reads to EOF before it is
// done, and the loan ends only after its done mark (the old lender held its
// output open until its reader was gone: a deadlock). Needs a GPU with CUDA
// IPC; without one it says SKIP. On the CPU emulator (tests/emu) the export
// runs and the mapping fails with the driver's error, which is the importer's
// fall-back (checked here too). test_cuda_share_fake.c runs it on the host
// fake (fake_cuda.h: the handle carries a pointer, so the importer is a fork
// of the exporter, not a new process).
#include "harness.h"
#include "model/kvcache.h"
#include "model/model.h"
#ifdef SKPO_HAVE_CUDA
#include "cuda/cuda.h"
#endif

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *const CFG =
    "{\"model_type\":\"qwen2\",\"vocab_size\":48,\"hidden_size\":32,\"intermediate_size\":64,"
    "\"num_hidden_layers\":2,\"num_attention_heads\":4,\"num_key_value_heads\":2,"
    "\"max_position_embeddings\":64,\"rms_norm_eps\":1e-06,\"rope_theta\":10000.0,"
    "\"tie_word_embeddings\":false,\"torch_dtype\":\"float32\"}";
enum { V = 48, NT = 5 };
static const int32_t TOKS[NT] = {3, 17, 9, 40, 1};

static const char *ARGV0;

// Logits of TOKS' last position under m (0 on success).
static int logits_of(skpo_model *m, float *out) {
    skpo_err e = {0};
    skpo_kv *kv = skpo_model_kv_new(m, 64, 2, &e);
    if (!kv) return -1;
    int seq = skpo_kv_seq_new(kv), off[2] = {0, NT};
    int rc = seq < 0 || skpo_model_step(m, kv, &seq, 1, TOKS, off, out, &e) != SKPO_OK;
    if (rc) fprintf(stderr, "  step: %s\n", e.msg);
    skpo_kv_free(kv);
    return rc ? -1 : 0;
}

static int import_main(const char *dir, const char *h);
static int import_pipe_main(const char *dir, const char *h);

// The importer: a new process running this test binary in `mode` (CUDA cannot
// be used in a fork of an initialised process); on the fake backend a fork
// (its handle is a pointer into this address space). in (or -1) becomes its
// standard input, and it does not keep mine (or -1), the other end of in's
// pipe: a reader that holds a writer's end never sees EOF. *out reads its
// standard output.
static pid_t spawn_importer(const char *mode, const char *dir, const char *h, int in, int mine, int *out) {
    int r[2];
    if (pipe(r)) return -1;
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        if (mine >= 0) close(mine);
        if (in >= 0) dup2(in, 0);
        dup2(r[1], 1);
        close(r[0]);
        close(r[1]);
#ifdef SKPO_FAKE_CUDA
        int rc = !strcmp(mode, "--import") ? import_main(dir, h) : import_pipe_main(dir, h);
        fflush(stdout);
        _exit(rc);
#else
        execl(ARGV0, ARGV0, mode, dir, h, (char *)NULL);
        _exit(127);
#endif
    }
    close(r[1]);
    *out = r[0];
    return pid;
}

#ifdef SKPO_HAVE_CUDA
#define NEED_GPU() do { if (skpo_cuda_device_count() == 0) SKIP("skipped: no GPU"); } while (0)
#else
#define NEED_GPU() SKIP("skipped: built without CUDA")
#endif

// A random model saved in a new folder dir (a mkdtemp template) and loaded on
// the GPU, with its logits (NULL: failed).
static skpo_model *gpu_model(char *dir, float *want) {
    if (!mkdtemp(dir)) {
        CHECK(0);
        return NULL;
    }
    skpo_config c;
    skpo_err e = {0};
    CHECK(skpo_config_parse(CFG, strlen(CFG), &c, &e) == SKPO_OK);
    skpo_model_opts cpu = {.device = SKPO_DEV_CPU}, gpu = {.device = SKPO_DEV_CUDA};
    skpo_model *r = NULL, *m = NULL;
    CHECK(skpo_model_init_random(&c, &cpu, 11, 0.2, &r, &e) == SKPO_OK);
    CHECK_MSG(r && skpo_model_save(r, dir, SKPO_DT_BF16, 0, &e) == SKPO_OK, "%s", e.msg);
    skpo_model_free(r);
    CHECK_MSG(skpo_model_load(dir, &gpu, &m, &e) == SKPO_OK, "%s", e.msg);
    if (m) CHECK(logits_of(m, want) == 0);
    return m;
}

// The importer's answer on fd: 'y' and its logits (compared with want), or 'n'
// (no CUDA IPC here: it fell back cleanly). 1 when it mapped.
static int importer_answer(int fd, const float *want, const char *test) {
    FILE *f = fdopen(fd, "r");
    char flag = 0;
    float got[V];
    int mapped = 0;
    if (f && fread(&flag, 1, 1, f) == 1 && flag == 'y') {
        CHECK(fread(got, sizeof got, 1, f) == 1);
        CHECK(!memcmp(got, want, sizeof got));
        mapped = 1;
    } else if (flag == 'n') {
        printf("SKIP %s: the mapping failed (no CUDA IPC here); the fall-back path ran\n", test);
    } else {
        CHECK_MSG(flag == 'y', "importer said '%c'", flag ? flag : '?');
    }
    if (f) fclose(f);
    return mapped;
}

// gpu_model, its weights exported through *h (dir/w.ipc).
static skpo_model *exported(char *dir, float *want, char **h) {
    skpo_err e = {0};
    skpo_model *m = gpu_model(dir, want);
    *h = skpo_path_join(dir, "w.ipc");
    if (m) CHECK_MSG(skpo_model_export_weights(m, dir, *h, &e) == SKPO_OK, "export: %s", e.msg);
    return m;
}

static void a_child_maps_the_exported_weights_and_computes_the_same_logits(void) {
    NEED_GPU();
    char dir[] = "/tmp/skpo_share_XXXXXX", *h;
    float want[V];
    skpo_err e = {0};
    skpo_model *m = exported(dir, want, &h);
    if (!m) { free(h); return; }
    int out = -1, st = -1;
    pid_t c = spawn_importer("--import", dir, h, -1, -1, &out);
    CHECK(c > 0);
    if (c > 0) {
        importer_answer(out, want, __func__);
        waitpid(c, &st, 0);
        CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    skpo_model_free(m);
    free(h);
    skpo_rm_rf(dir, &e);
}

static void a_lent_model_comes_back_after_the_importer_read_to_eof_and_marked_it_done(void) {
    NEED_GPU();
    char dir[] = "/tmp/skpo_share_XXXXXX", *h;
    float want[V];
    skpo_err e = {0};
    skpo_model *m = exported(dir, want, &h);
    if (!m) { free(h); return; }
    char *mk = skpo_weights_mark_path(h);
    int fds[2], out = -1, st = -1;
    CHECK(pipe(fds) == 0);
    pid_t pid = spawn_importer("--import-pipe", dir, h, fds[0], fds[1], &out);
    close(fds[0]);
    CHECK(pid > 0);
    deadlock_guard(60, pid);   // the old lender never returned here
    CHECK(write(fds[1], "records", 7) == 7);   // the sampler's output
    skpo_loan_end how = skpo_weights_lend_end(h, fds[1], 30.0);
    deadlock_guard_off();
    CHECK_MSG(how == SKPO_LOAN_DONE, "the loan ended %s", how == SKPO_LOAN_GONE ? "with the importer gone" : "untaken");
    CHECK(!skpo_path_exists(h) && !skpo_path_exists(mk));
    importer_answer(out, want, __func__);   // its logits were computed while the loan lasted
    waitpid(pid, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    close(fds[1]);
    skpo_model_free(m);   // only now may the lender free its weights
    free(h);
    free(mk);
    skpo_rm_rf(dir, &e);
}

// The importer's side (a child of the test): map, compute, report on stdout.
static int import_main(const char *dir, const char *h) {
    skpo_model_opts gpu = {.device = SKPO_DEV_CUDA};
    skpo_model *s = NULL;
    skpo_err e = {0};
    int ok = skpo_model_load_shared(dir, h, &gpu, &s, &e) == SKPO_OK;
    if (!ok) fprintf(stderr, "  import: %s\n", e.msg);
    float l[V];
    char flag = ok ? (logits_of(s, l) == 0 ? 'y' : 's') : 'n';
    fwrite(&flag, 1, 1, stdout);
    if (flag == 'y') fwrite(l, sizeof l, 1, stdout);
    if (s) skpo_model_free(s);  // unmaps before exiting: the exporter frees only after this
    return fflush(stdout) != 0;
}

// skpo-splice's side of the loan: map and mark it taken (or declined), read
// the input until EOF, compute, close the model (unmaps), mark it done, answer.
static int import_pipe_main(const char *dir, const char *h) {
    skpo_model_opts gpu = {.device = SKPO_DEV_CUDA};
    skpo_model *s = NULL;
    skpo_err e = {0};
    int ok = skpo_model_load_shared(dir, h, &gpu, &s, &e) == SKPO_OK;
    if (!ok) fprintf(stderr, "  import: %s\n", e.msg);
    if (skpo_weights_mark(h, ok ? SKPO_MARK_TAKEN : SKPO_MARK_DECLINED, &e)) return 2;
    char b[64];
    while (read(0, b, sizeof b) > 0) {}
    float l[V];
    char flag = ok ? (logits_of(s, l) == 0 ? 'y' : 's') : 'n';
    if (s) skpo_model_free(s);
    if (ok && skpo_weights_mark(h, SKPO_MARK_DONE, &e)) return 2;
    fwrite(&flag, 1, 1, stdout);
    if (flag == 'y') fwrite(l, sizeof l, 1, stdout);
    return fflush(stdout) != 0;
}

int main(int argc, char **argv) {
    ARGV0 = argv[0];
    if (argc == 4 && !strcmp(argv[1], "--import")) return import_main(argv[2], argv[3]);
    if (argc == 4 && !strcmp(argv[1], "--import-pipe")) return import_pipe_main(argv[2], argv[3]);
    RUN(a_child_maps_the_exported_weights_and_computes_the_same_logits);
    RUN(a_lent_model_comes_back_after_the_importer_read_to_eof_and_marked_it_done);
    return TEST_SUMMARY();
}
