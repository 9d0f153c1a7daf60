/*
 * serve.c - skpo-update --serve DIR: one trainer for the whole run.
 *
 * The one-shot tool loads the model and the AdamW state and writes both back
 * every step: at 7B that is ~14 GB of weights plus ~84 GB of float32 moments
 * and masters through one rank per step. The server loads them once (--model:
 * the initial model or a durable checkpoint) and keeps the optimizer state
 * resident (host memory on CPU, the device optimizer on CUDA), so a step
 * writes only what the samplers need next: the new weights.
 *
 * Protocol (a folder every rank sees; pipelines/common.sh drives it):
 *   DIR/rank<r>.pid    each rank's pid (the client names a rank that died)
 *   DIR/ready          written once by rank 0 after every rank loaded:
 *                      "pid=P ranks=N step=S load_s=X" (S = next step to train)
 *   DIR/<S>.req        the step's one-shot command line, one argument a line
 *                      (--model CK --out OUT --step S ... FILE); renamed into
 *                      place by the client after FILE is complete
 *   DIR/<S>.done       rank 0, after OUT and the metrics are in place:
 *                      "step=S load_s= compute_s= save_s= read_bytes= write_bytes="
 *   DIR/stop           ends the server between steps (or the owner pid of
 *                      SKPO_SERVE_OWNER goes away: rank 0 then writes stop)
 * Every rank polls the folder itself (no MPI call spins while the samplers
 * run). Requests must come in step order (S, S+1, ...): a request for another
 * step is refused, because the state in memory is that after step S-1. Any
 * failure ends the server (the state in memory may be half-updated); the
 * client sees it gone and the run resumes from the newest durable checkpoint.
 * The per-step options are parsed exactly as a one-shot run parses them; the
 * device, threads, --zero and --recompute are the server's own.
 */
#define _GNU_SOURCE
#include "tool.h"

#include "base/cli.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static char *path_of(const char *dir, const char *fmt, int64_t step) {
    char name[64];
    snprintf(name, sizeof name, fmt, step);
    return skpo_path_join(dir, name);
}

static void put_file(const char *dir, const char *name, const char *text) {
    skpo_err e = {0};
    char *p = skpo_path_join(dir, name);
    if (skpo_write_file_atomic(p, text, strlen(text), &e)) skpo_die("%s", e.msg);
    free(p);
}

static void nap(void) {
    struct timespec ts = {0, 20 * 1000 * 1000};
    nanosleep(&ts, NULL);
}

// Wait for DIR/<step>.req (1) or DIR/stop (0).
static int wait_request(const char *dir, int64_t step, int rank, long owner) {
    char *req = path_of(dir, "%" PRId64 ".req", step), *stop = skpo_path_join(dir, "stop");
    int got = -1;
    for (long n = 0; got < 0; n++) {
        if (skpo_path_exists(req)) got = 1;
        else if (skpo_path_exists(stop)) got = 0;
        else {
            if (rank == 0 && owner > 0 && n % 25 == 0 && kill((pid_t)owner, 0) != 0 && errno == ESRCH)
                put_file(dir, "stop", "owner gone\n");
            nap();
        }
    }
    free(req);
    free(stop);
    return got;
}

// The request's lines as an argv (argv[0] = the program); *buf owns the strings.
static char **read_request(const char *dir, int64_t step, int *argc, char **buf) {
    skpo_err e = {0};
    char *p = path_of(dir, "%" PRId64 ".req", step);
    size_t len;
    if (skpo_read_file(p, buf, &len, &e)) skpo_die("%s", e.msg);
    free(p);
    size_t cap = 8;
    char **argv = skpo_xcalloc(cap, sizeof *argv);
    *argc = 0;
    argv[(*argc)++] = (char *)skpo_progname();
    for (char *s = *buf, *nl; s < *buf + len && *s; s = nl + 1) {
        nl = strchr(s, '\n');
        if (!nl) nl = s + strlen(s);
        *nl = 0;
        skpo_xgrow((void **)&argv, &cap, (size_t)*argc + 2, sizeof *argv);
        argv[(*argc)++] = s;
        if (nl >= *buf + len - 1) break;
    }
    argv[*argc] = NULL;
    return argv;
}

// Bytes of the regular files directly in dir (a checkpoint folder).
static double dir_bytes(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    double n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        char *p = skpo_path_join(dir, e->d_name);
        struct stat sb;
        if (stat(p, &sb) == 0 && S_ISREG(sb.st_mode)) n += (double)sb.st_size;
        free(p);
    }
    closedir(d);
    return n;
}

static double file_bytes(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0 ? (double)sb.st_size : 0;
}

// Options that decide the device optimizer's layout must not change mid-run.
static void check_same_decay(skpo_comm *c, const skpo_adamw_cfg *was, const skpo_adamw_cfg *now) {
    skpo_err e = {0};
    skpo_status st = SKPO_OK;
    if ((was->weight_decay != 0) != (now->weight_decay != 0) || was->decay_matrices_only != now->decay_matrices_only)
        st = skpo_err_set(&e, SKPO_ERANGE, "--serve: --weight-decay 0 / --decay cannot change while the server runs");
    upd_check(c, st, &e);
}

int upd_serve(upd_args *a) {
    const char *dir = a->serve;
    const char *own = getenv("SKPO_SERVE_OWNER");
    long owner = own ? strtol(own, NULL, 10) : 0;
    upd_bind_device(a);
    double t0 = skpo_now();
    skpo_err e = {0};
    if (skpo_mkdir_p(dir, &e)) skpo_die("--serve '%s': %s", dir, e.msg);
    skpo_comm *c = NULL;
    struct skpo_cuda *ccu = NULL;
    upd_comm_open(a, &c, &ccu);
    skpo_model *m;
    skpo_optim *o;
    int64_t step;
    if (upd_lora_wanted(a)) skpo_die("--serve: LoRA is not served yet: run LoRA with one-shot updates (SERVE=)");
    upd_load(c, a, &m, &o, &step);
    skpo_policy pol = skpo_policy_of_model(m);
    skpo_comm *nc = NULL;
    int on_device = 0;
    {   // rank<r>.pid: lets the client name a rank that died (ranks on its node)
        char name[32], pid[32];
        snprintf(name, sizeof name, "rank%d.pid", c->rank);
        snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
        put_file(dir, name, pid);
    }
    upd_check(c, SKPO_OK, &e);   // every rank has loaded before `ready`
    if (c->rank == 0) {
        char msg[160];
        snprintf(msg, sizeof msg, "pid=%ld ranks=%d step=%" PRId64 " load_s=%.3f\n", (long)getpid(), c->size, step,
                 skpo_now() - t0);
        put_file(dir, "ready", msg);
    }
    for (;;) {
        if (!wait_request(dir, step, c->rank, owner)) break;
        double tl = skpo_now();
        int argc;
        char *buf;
        char **argv = read_request(dir, step, &argc, &buf);
        upd_args s;
        upd_parse_args(&s, argc, argv);   // a bad request is a usage error: the server exits 2
        if (upd_lora_wanted(&s) || s.merge_adapter)   // the server trains full weights only
            skpo_die("--serve: step request asks for LoRA (--lora-rank/--adapter): run LoRA with one-shot updates (SERVE=)");
        s.dev = a->dev;
        s.threads = a->threads;
        s.zero = a->zero;
        s.recompute = a->recompute;
        skpo_status st = SKPO_OK;
        if (s.serve || !s.out)
            st = skpo_err_set(&e, SKPO_ERANGE, "--serve: request %" PRId64 " is not a one-step command line", step);
        else if (s.step && s.step != step)
            st = skpo_err_set(&e, SKPO_ERANGE, "--serve: request for step %ld, but the server holds the state after step %" PRId64
                              " (restart it from a durable checkpoint to redo a step)", s.step, step - 1);
        upd_check(c, st, &e);
        s.u.step = step;
        if (on_device) check_same_decay(c, &o->cfg, &s.a);
        o->cfg = s.a;
        if (!on_device) {
            upd_to_device(c, &s, m, o, &nc);
            on_device = 1;
        }
        skpo_rec *recs;
        size_t n;
        upd_read_records(c, s.input, &recs, &n);
        skpo_batch *b = NULL;
        upd_check(c, skpo_batch_new(recs, n, &s.u, c->rank, c->size, &b, &e), &e);
        int nmb = skpo_batch_minibatches(b) * s.u.epochs;
        if (nmb == 0 && c->rank == 0) skpo_warn("step %" PRId64 ": no trained records: writing the weights unchanged", step);
        skpo_update_metrics *met = skpo_xcalloc((size_t)nmb + 1, sizeof *met);
        double tc = skpo_now();
        upd_check(c, skpo_update_step(&pol, o, nc ? nc : c, b, &s.u, met, &e), &e);
        double ts_ = skpo_now();
        // Durable on several CPU ranks: every rank writes its share of the
        // optimizer state in parallel (shard.c); otherwise rank 0 writes it.
        int by_rank = !s.weights_only && c->size > 1 && !o->dev;
        if (!s.weights_only && !by_rank) upd_check(c, skpo_optim_from_device(o, &e), &e);
        skpo_trainer_state ts = {step, o->t};
        st = SKPO_OK;
        if (c->rank == 0)
            st = skpo_checkpoint_save(s.out, s.model, m, skpo_model_src_dtype(m),
                                      s.weights_only || by_rank ? NULL : o, &ts, skpo_optim_lr(&s.a, step), &e);
        upd_check(c, st, &e);
        if (by_rank) upd_check(c, upd_save_optim_shards(c, s.out, m, o, &e), &e);
        upd_report(c, &s, argc, argv, met, nmb, b, skpo_now() - tl);
        double te = skpo_now();
        if (c->rank == 0) {
            char msg[320];
            snprintf(msg, sizeof msg,
                     "step=%" PRId64 " load_s=%.3f compute_s=%.3f save_s=%.3f read_bytes=%.0f write_bytes=%.0f durable=%d\n",
                     step, tc - tl, ts_ - tc, te - ts_, strcmp(s.input, "-") ? file_bytes(s.input) : 0, dir_bytes(s.out),
                     !s.weights_only);
            char name[64];
            snprintf(name, sizeof name, "%" PRId64 ".done", step);
            put_file(dir, name, msg);
        }
        free(met);
        skpo_batch_free(b);
        skpo_recs_free(recs, n);
        free(argv);
        free(buf);
        step++;
    }
    skpo_optim_free(o);
    skpo_comm_free(nc);
    skpo_model_free(m);
    upd_comm_close(c, ccu);
    return SKPO_EXIT_OK;
}
