// test_weights_share.c - the handle file through which skpo-sample lends its
// device weights to skpo-splice (model.h, weights_share.c): round trips, every
// malformed file refused with the line named, the checkpoint identity, and the
// reasons an importer falls back to loading (a `none` file, a gone exporter,
// other weights, a CPU model). The CUDA mapping itself needs a GPU
// (docs/scaling.md says what never ran). The loan's end runs here over a
// real pipe with forked importers: the importer reads until EOF, so the
// lender must end its output before it waits (the old lender deadlocked).
#include "harness.h"
#include "gen/rollout.h"
#include "model/model.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *const CFG =
    "{\"model_type\":\"qwen2\",\"vocab_size\":32,\"hidden_size\":16,\"intermediate_size\":32,"
    "\"num_hidden_layers\":1,\"num_attention_heads\":2,\"num_key_value_heads\":1,"
    "\"max_position_embeddings\":64,\"rms_norm_eps\":1e-06,\"rope_theta\":10000.0,"
    "\"tie_word_embeddings\":true,\"torch_dtype\":\"float32\"}";

static char TMPD[64];

static char *path_in(const char *name) { return skpo_path_join(TMPD, name); }

// A saved random model in TMPD/name (the folder), or NULL.
static char *saved_model(const char *name, uint64_t seed, skpo_model **keep) {
    skpo_config c;
    skpo_err e = {0};
    if (skpo_config_parse(CFG, strlen(CFG), &c, &e)) return NULL;
    skpo_model_opts o = {.device = SKPO_DEV_CPU};
    skpo_model *m = NULL;
    if (skpo_model_init_random(&c, &o, seed, 0.1, &m, &e)) return NULL;
    char *d = path_in(name);
    mkdir(d, 0755);
    if (skpo_model_save(m, d, SKPO_DT_F32, 0, &e)) { fprintf(stderr, "  save: %s\n", e.msg); free(d); skpo_model_free(m); return NULL; }
    if (keep) *keep = m;
    else skpo_model_free(m);
    return d;
}

static int write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fputs(text, f);
    return fclose(f);
}

static skpo_weights_handle sample_handle(void) {
    skpo_weights_handle h = {.pid = 4242, .numel = 123456789};
    snprintf(h.device, sizeof h.device, "0000:1b:00.0");
    snprintf(h.weights, sizeof h.weights, "0123456789abcdef-3");
    for (int i = 0; i < 64; i++) h.ipc[i] = (unsigned char)(i * 37 + 11);
    return h;
}

static void a_handle_round_trips_exactly(void) {
    char *p = path_in("h.ipc");
    skpo_weights_handle h = sample_handle(), r;
    skpo_err e = {0};
    CHECK_MSG(skpo_weights_handle_write(p, &h, &e) == SKPO_OK, "%s", e.msg);
    CHECK_MSG(skpo_weights_handle_read(p, &r, &e) == SKPO_OK, "%s", e.msg);
    CHECK(r.pid == h.pid && r.numel == h.numel && !strcmp(r.device, h.device) && !strcmp(r.weights, h.weights));
    CHECK(!memcmp(r.ipc, h.ipc, 64) && !r.none[0]);
    free(p);
}

static void a_none_file_reads_back_its_reason(void) {
    char *p = path_in("none.ipc");
    skpo_weights_handle h = {0}, r;
    snprintf(h.none, sizeof h.none, "the cpu backend has nothing to lend");
    skpo_err e = {0};
    CHECK(skpo_weights_handle_write(p, &h, &e) == SKPO_OK);
    CHECK_MSG(skpo_weights_handle_read(p, &r, &e) == SKPO_OK, "%s", e.msg);
    CHECK(!strcmp(r.none, "the cpu backend has nothing to lend"));
    free(p);
}

static void malformed_handle_files_are_refused_naming_the_problem(void) {
    static const struct { const char *text, *want; } cases[] = {
        {"", "is empty"},
        {"skpo-weights-ipc 2\npid 1\n", "is not a weights handle file"},
        {"skpo-weights-ipc 1\npid x\ndevice a\nnumel 5\nweights w\nhandle 00\n", "line 2: bad pid"},
        {"skpo-weights-ipc 1\npid 1\ndevice a\nnumel 5\nweights w\nhandle 00\n", "line 6: the handle is not 128 hex digits"},
        {"skpo-weights-ipc 1\npid 1\ndevice a\nnumel 5\nweights w\n", "missing handle"},
        {"skpo-weights-ipc 1\npid 1\ncolour blue\n", "line 3: unknown key 'colour'"},
        {"skpo-weights-ipc 1\npid\n", "line 2: no value"},
        {"skpo-weights-ipc 1\npid 1\ndevice a\nnumel 0\n", "line 4: bad numel"},
    };
    char *p = path_in("bad.ipc");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        CHECK(write_text(p, cases[i].text) == 0);
        skpo_weights_handle r;
        skpo_err e = {0};
        CHECK_MSG(skpo_weights_handle_read(p, &r, &e) == SKPO_EFORMAT && strstr(e.msg, cases[i].want),
                  "case %zu: '%s' (want '%s')", i, e.msg, cases[i].want);
    }
    skpo_weights_handle r;
    skpo_err e = {0};
    char *gone = path_in("absent.ipc");
    CHECK(skpo_weights_handle_read(gone, &r, &e) != SKPO_OK);
    free(gone);
    free(p);
}

static void the_identity_changes_with_the_weights_and_the_folder(void) {
    char *a = saved_model("ida", 1, NULL), *b = saved_model("idb", 1, NULL);
    CHECK(a && b);
    if (!a || !b) { free(a); free(b); return; }
    char ia[48], ia2[48], ib[48], ia3[48];
    skpo_err e = {0};
    CHECK_MSG(skpo_weights_identity(a, ia, &e) == SKPO_OK, "%s", e.msg);
    CHECK(skpo_weights_identity(a, ia2, &e) == SKPO_OK && !strcmp(ia, ia2));
    CHECK(skpo_weights_identity(b, ib, &e) == SKPO_OK && strcmp(ia, ib));  // same bytes, another checkpoint
    // rewritten in place (a new step's weights in the same folder): another identity
    usleep(20000);
    skpo_model *m = NULL;
    char *a2 = saved_model("ida", 2, &m);
    skpo_model_free(m);
    CHECK(a2 && skpo_weights_identity(a, ia3, &e) == SKPO_OK && strcmp(ia, ia3));
    char *empty = path_in("empty");
    mkdir(empty, 0755);
    CHECK(skpo_weights_identity(empty, ia, &e) == SKPO_ENOTFOUND && strstr(e.msg, "no config.json or safetensors"));
    free(empty);
    free(a);
    free(a2);
    free(b);
}

static void a_cpu_model_writes_a_none_file_saying_why(void) {
    skpo_model *m = NULL;
    char *d = saved_model("cpu", 3, &m), *p = path_in("cpu.ipc");
    CHECK(d && m);
    if (!d || !m) { free(d); free(p); return; }
    skpo_err e = {0};
    CHECK(skpo_model_export_weights(m, d, p, &e) == SKPO_EUNSUPPORTED && strstr(e.msg, "cpu backend"));
    skpo_weights_handle r;
    CHECK(skpo_weights_handle_read(p, &r, &e) == SKPO_OK && strstr(r.none, "cpu backend") && strstr(r.none, "page cache"));
    skpo_model_free(m);
    free(d);
    free(p);
}

static void an_importer_refuses_what_it_must_not_map(void) {
    char *d = saved_model("imp", 4, NULL), *other = saved_model("imp2", 4, NULL), *p = path_in("imp.ipc");
    CHECK(d && other);
    if (!d || !other) { free(d); free(other); free(p); return; }
    skpo_model_opts cuda = {.device = SKPO_DEV_CUDA}, cpu = {.device = SKPO_DEV_CPU};
    skpo_model *m = NULL;
    skpo_err e = {0};
    skpo_weights_handle h = sample_handle();
    // a `none` file: its reason
    skpo_weights_handle none = {0};
    snprintf(none.none, sizeof none.none, "export failed: no IPC");
    CHECK(skpo_weights_handle_write(p, &none, &e) == SKPO_OK);
    CHECK(skpo_model_load_shared(d, p, &cuda, &m, &e) == SKPO_ENOTFOUND && strstr(e.msg, "holds no weights: export failed: no IPC"));
    // an exporter that is gone (a child that exited)
    pid_t c = fork();
    if (c == 0) _exit(0);
    waitpid(c, NULL, 0);
    h.pid = (long)c;
    CHECK(skpo_weights_identity(d, h.weights, &e) == SKPO_OK);
    CHECK(skpo_weights_handle_write(p, &h, &e) == SKPO_OK);
    CHECK(skpo_model_load_shared(d, p, &cuda, &m, &e) == SKPO_ENOTFOUND && strstr(e.msg, "that exported") && strstr(e.msg, "is gone"));
    // the weights of another checkpoint
    h.pid = (long)getpid();
    CHECK(skpo_weights_handle_write(p, &h, &e) == SKPO_OK);
    CHECK(skpo_model_load_shared(other, p, &cuda, &m, &e) == SKPO_ERANGE && strstr(e.msg, "weights of another checkpoint"));
    // right file, right weights, but a CPU (or trainable) importer
    CHECK(skpo_model_load_shared(d, p, &cpu, &m, &e) == SKPO_EUNSUPPORTED && strstr(e.msg, "inference on a CUDA device"));
    skpo_model_opts train = {.device = SKPO_DEV_CUDA, .trainable = 1};
    CHECK(skpo_model_load_shared(d, p, &train, &m, &e) == SKPO_EUNSUPPORTED);
    CHECK(m == NULL);
    free(d);
    free(other);
    free(p);
}

// --- the loan's end (model.h): the pipeline's shape with a real pipe --------------------

// The importer of skpo-splice --import-weights: marks the loan taken (it has
// mapped the weights), reads its input until EOF, then does `after` (0: works
// on, then marks the loan done; 1: dies; 2: never marks anything), telling
// `told` when its work is finished.
static void importer(const char *h, int in, int told, int after) {
    skpo_err e = {0};
    if (after != 2 && skpo_weights_mark(h, SKPO_MARK_TAKEN, &e)) _exit(2);
    char b[64];
    while (read(in, b, sizeof b) > 0) {}
    if (after == 1) raise(SIGKILL);
    usleep(200 * 1000);   // the downstream rollouts still read the weights
    if (write(told, "x", 1) != 1) _exit(2);
    if (after == 0 && skpo_weights_mark(h, SKPO_MARK_DONE, &e)) _exit(2);
    _exit(0);
}

// Lender and importer over a pipe; the lender's end of the loan, how it ended
// and whether the importer had finished its work by then.
static skpo_loan_end lend_over_a_pipe(const char *h, int after, double untaken_s, int *finished) {
    int fds[2], told[2];
    SKPO_ASSERT(pipe(fds) == 0 && pipe(told) == 0);
    skpo_weights_handle w = sample_handle();
    skpo_err e = {0};
    SKPO_ASSERT(skpo_weights_handle_write(h, &w, &e) == SKPO_OK);
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[1]);
        close(told[0]);
        importer(h, fds[0], told[1], after);
    }
    close(fds[0]);
    close(told[1]);
    deadlock_guard(20, pid);   // the old lender never returned here
    CHECK(write(fds[1], "records", 7) == 7);
    skpo_loan_end how = skpo_weights_lend_end(h, fds[1], untaken_s);
    deadlock_guard_off();
    // What the importer had told by then (non-blocking: the lender returned already).
    int fl = fcntl(told[0], F_GETFL);
    fcntl(told[0], F_SETFL, fl | O_NONBLOCK);
    char b;
    *finished = read(told[0], &b, 1) == 1;
    close(fds[1]);
    close(told[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    return how;
}

// skpo-sample --export-weights | skpo-splice --import-weights: the importer
// reads until EOF and only then finishes; the lender must end its output
// first and free the weights only after the importer's done mark. (The old
// lender held its output open until its reader was gone: neither could end.)
static void a_loan_ends_after_the_importer_read_to_eof_and_marked_it_done(void) {
    char *h = path_in("loan.ipc"), *mk = skpo_weights_mark_path(h);
    int finished = 0;
    double t0 = skpo_now();
    CHECK(lend_over_a_pipe(h, 0, 30.0, &finished) == SKPO_LOAN_DONE);
    CHECK_MSG(finished, "the lender returned before the importer was done with the weights");
    CHECK(skpo_now() - t0 < 10);
    CHECK(!skpo_path_exists(h) && !skpo_path_exists(mk));   // nothing left for a later importer to find
    free(h);
    free(mk);
}

// An importer that dies holding the weights (its exit unmaps them) ends the loan too.
static void a_loan_ends_when_the_importer_dies(void) {
    char *h = path_in("dies.ipc");
    int finished = 0;
    CHECK(lend_over_a_pipe(h, 1, 30.0, &finished) == SKPO_LOAN_GONE);
    CHECK(!finished && !skpo_path_exists(h));
    free(h);
}

// Nobody marks the loan (the reader is no importer): after untaken_s the
// handle is removed and the lender frees the weights.
static void an_untaken_loan_ends_after_its_wait_and_removes_the_handle(void) {
    char *h = path_in("untaken.ipc");
    int finished = 0;
    double t0 = skpo_now();
    CHECK(lend_over_a_pipe(h, 2, 0.3, &finished) == SKPO_LOAN_UNTAKEN);
    CHECK(skpo_now() - t0 >= 0.3 && !skpo_path_exists(h));
    free(h);
}

// A declined mark ends the wait at once; a taken mark whose pid now belongs
// to another process (another start time) counts as gone, not as alive.
static void declined_and_reused_pid_marks_end_the_loan(void) {
    char *h = path_in("marks.ipc"), *mk = skpo_weights_mark_path(h);
    skpo_err e = {0};
    int fds[2];
    CHECK(pipe(fds) == 0);
    CHECK(skpo_weights_mark(h, SKPO_MARK_DECLINED, &e) == SKPO_OK);
    double t0 = skpo_now();
    CHECK(skpo_weights_lend_end(h, fds[1], 30.0) == SKPO_LOAN_DONE && skpo_now() - t0 < 5);
    char text[64];
    snprintf(text, sizeof text, "taken %ld 1\n", (long)getpid());   // alive, but not started at tick 1
    CHECK(write_text(mk, text) == 0);
    CHECK(skpo_weights_lend_end(h, fds[1], 30.0) == SKPO_LOAN_GONE);
    CHECK(skpo_weights_mark(h, SKPO_MARK_TAKEN, &e) == SKPO_OK);   // this process, rightly marked: alive
    CHECK(write_text(h, "x") == 0);
    fflush(stdout);
    pid_t c = fork();
    if (c == 0) {   // ends the loan a moment later
        usleep(300 * 1000);
        _exit(skpo_weights_mark(h, SKPO_MARK_DONE, &e) ? 1 : 0);
    }
    t0 = skpo_now();
    CHECK(skpo_weights_lend_end(h, fds[1], 30.0) == SKPO_LOAN_DONE && skpo_now() - t0 >= 0.25);
    waitpid(c, NULL, 0);
    close(fds[0]);
    close(fds[1]);
    free(h);
    free(mk);
}

int main(void) {
    snprintf(TMPD, sizeof TMPD, "/tmp/skpo_ws_XXXXXX");
    if (!mkdtemp(TMPD)) return 1;
    RUN(a_handle_round_trips_exactly);
    RUN(a_none_file_reads_back_its_reason);
    RUN(malformed_handle_files_are_refused_naming_the_problem);
    RUN(the_identity_changes_with_the_weights_and_the_folder);
    RUN(a_cpu_model_writes_a_none_file_saying_why);
    RUN(an_importer_refuses_what_it_must_not_map);
    RUN(a_loan_ends_after_the_importer_read_to_eof_and_marked_it_done);
    RUN(a_loan_ends_when_the_importer_dies);
    RUN(an_untaken_loan_ends_after_its_wait_and_removes_the_handle);
    RUN(declined_and_reused_pid_marks_end_the_loan);
    skpo_err e = {0};
    skpo_rm_rf(TMPD, &e);
    return TEST_SUMMARY();
}
