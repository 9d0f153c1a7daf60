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
 * device, threads, --zero, --recompute and --offload are the server's own.
 * --offload (cuda): after each step's save the fp32 masters, gradients and
 * AdamW moments go to pinned host memory and their device memory is freed;
 * the next request brings them back before it trains (bit-exact).
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

// What lives for the whole run.
typedef struct server {
    upd_args *a;
    const char *dir;
    long owner;
    skpo_comm *c, *nc;   // nc: NCCL for device gradients over several GPUs
    struct skpo_cuda *ccu;
    skpo_model *m;
    skpo_optim *o;
    skpo_policy pol;
    int64_t step;        // the next step to train
    int on_device;       // the optimizer went to the device (first request)
} server;

static void serve_start(server *S, upd_args *a) {
    memset(S, 0, sizeof *S);
    S->a = a;
    S->dir = a->serve;
    const char *own = getenv("SKPO_SERVE_OWNER");
    S->owner = own ? strtol(own, NULL, 10) : 0;
    upd_bind_device(a);
    if (a->offload && a->dev != SKPO_DEV_CUDA)
        skpo_die("--offload needs --device cuda (on the CPU the optimizer state is in host memory already)");
    double t0 = skpo_now();
    skpo_err e = {0};
    if (skpo_mkdir_p(S->dir, &e)) skpo_die("--serve '%s': %s", S->dir, e.msg);
    upd_comm_open(a, &S->c, &S->ccu);
    if (upd_lora_wanted(a)) skpo_die("--serve: LoRA is not served yet: run LoRA with one-shot updates (SERVE=)");
    upd_load(S->c, a, &S->m, &S->o, &S->step);
    S->pol = skpo_policy_of_model(S->m);
    {   // rank<r>.pid: lets the client name a rank that died (ranks on its node)
        char name[32], pid[32];
        snprintf(name, sizeof name, "rank%d.pid", S->c->rank);
        snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
        put_file(S->dir, name, pid);
    }
    upd_check(S->c, SKPO_OK, &e);   // every rank has loaded before `ready`
    if (S->c->rank == 0) {
        char msg[160];
        snprintf(msg, sizeof msg, "pid=%ld ranks=%d step=%" PRId64 " load_s=%.3f\n", (long)getpid(), S->c->size, S->step,
                 skpo_now() - t0);
        put_file(S->dir, "ready", msg);
    }
}

// The step's request as a one-shot run's arguments, with the server's own
// device, threads, --zero and --recompute. *argv / *buf are the caller's to free.
static void serve_request(server *S, upd_args *s, int *argc, char ***argv, char **buf) {
    skpo_err e = {0};
    *argv = read_request(S->dir, S->step, argc, buf);
    upd_parse_args(s, *argc, *argv);   // a bad request is a usage error: the server exits 2
    if (upd_lora_wanted(s) || s->merge_adapter)   // the server trains full weights only
        skpo_die("--serve: step request asks for LoRA (--lora-rank/--adapter): run LoRA with one-shot updates (SERVE=)");
    s->dev = S->a->dev;
    s->threads = S->a->threads;
    s->zero = S->a->zero;
    s->recompute = S->a->recompute;
    skpo_status st = SKPO_OK;
    if (s->serve || !s->out)
        st = skpo_err_set(&e, SKPO_ERANGE, "--serve: request %" PRId64 " is not a one-step command line", S->step);
    else if (s->step && s->step != S->step)
        st = skpo_err_set(&e, SKPO_ERANGE, "--serve: request for step %ld, but the server holds the state after step %" PRId64
                          " (restart it from a durable checkpoint to redo a step)", s->step, S->step - 1);
    upd_check(S->c, st, &e);
    s->u.step = S->step;
}

// The trainer state onto the device: the first request moves it there, later
// ones bring it back from host memory when it was offloaded (--offload).
static void serve_device_in(server *S, upd_args *s) {
    skpo_err e = {0};
    if (S->on_device) check_same_decay(S->c, &S->o->cfg, &s->a);
    S->o->cfg = s->a;
    if (!S->on_device) {
        upd_to_device(S->c, s, S->m, S->o, &S->nc);
        S->on_device = 1;
    } else if (skpo_optim_offloaded(S->o)) {
        skpo_dev_params d;
        skpo_status st = skpo_model_reload(S->m, &e);
        if (!st) st = skpo_model_dev_params(S->m, &d, &e);
        if (!st) st = skpo_optim_reload(S->o, &d, &e);
        upd_check(S->c, st, &e);
    }
}

// After the step's save: masters, gradients and moments to host memory so the
// samplers of the next step have the GPU (verl's offload pattern).
static void serve_device_out(server *S) {
    skpo_err e = {0};
    skpo_status st = skpo_optim_offload(S->o, &e);   // first: it keeps the masters' values
    if (!st) st = skpo_model_offload(S->m, &e);
    upd_check(S->c, st, &e);
}

// The step's checkpoint. One rank: rank 0 writes it (the device optimizer's
// moments gathered there first), as the one-shot tool does. Several ranks:
// every rank writes its weights shard and, when durable, its range of the
// optimizer state, in parallel (train/shard.h).
static void serve_save(server *S, const upd_args *s) {
    skpo_err e = {0};
    skpo_trainer_state ts = {S->step, S->o->t};
    double lr = skpo_optim_lr(&s->a, S->step);
    if (S->c->size > 1) {
        upd_check(S->c, skpo_shard_save(S->c, s->out, s->model, S->m, S->o, !s->weights_only, &ts, lr, &e), &e);
        return;
    }
    if (!s->weights_only) upd_check(S->c, skpo_optim_from_device(S->o, &e), &e);
    upd_check(S->c, skpo_checkpoint_save(s->out, s->model, S->m, skpo_model_src_dtype(S->m), s->weights_only ? NULL : S->o,
                                         &ts, lr, &e), &e);
}

static void serve_done(server *S, const upd_args *s, double tl, double tc, double ts, double te, double toff) {
    if (S->c->rank != 0) return;
    char msg[360], off[48] = "";
    if (S->a->offload) snprintf(off, sizeof off, " offload_s=%.3f", toff);
    snprintf(msg, sizeof msg,
             "step=%" PRId64 " load_s=%.3f compute_s=%.3f save_s=%.3f%s read_bytes=%.0f write_bytes=%.0f durable=%d\n",
             S->step, tc - tl, ts - tc, te - ts, off, strcmp(s->input, "-") ? file_bytes(s->input) : 0, dir_bytes(s->out),
             !s->weights_only);
    char name[64];
    snprintf(name, sizeof name, "%" PRId64 ".done", S->step);
    put_file(S->dir, name, msg);
}

static void serve_step(server *S) {
    skpo_err e = {0};
    double tl = skpo_now();
    int argc;
    char *buf, **argv;
    upd_args s;
    serve_request(S, &s, &argc, &argv, &buf);
    serve_device_in(S, &s);
    skpo_rec *recs;
    size_t n;
    upd_read_records(S->c, s.input, &s.u, &recs, &n);
    skpo_batch *b = NULL;
    upd_check(S->c, skpo_batch_new(recs, n, &s.u, S->c->rank, S->c->size, &b, &e), &e);
    int nmb = skpo_batch_minibatches(b) * s.u.epochs;
    if (nmb == 0 && S->c->rank == 0) skpo_warn("step %" PRId64 ": no trained records: writing the weights unchanged", S->step);
    skpo_update_metrics *met = skpo_xcalloc((size_t)nmb + 1, sizeof *met);
    skpo_model_set_pack(S->m, !s.no_pack);   // a per-step option like the others
    double tc = skpo_now();
    upd_check(S->c, skpo_update_step(&S->pol, S->o, S->nc ? S->nc : S->c, b, &s.u, met, &e), &e);
    double ts = skpo_now();
    serve_save(S, &s);
    upd_report(S->c, &s, argc, argv, met, nmb, b, skpo_now() - tl);
    double te = skpo_now();
    if (S->a->offload) serve_device_out(S);
    serve_done(S, &s, tl, tc, ts, te, skpo_now() - te);
    free(met);
    skpo_batch_free(b);
    skpo_recs_free(recs, n);
    free(argv);
    free(buf);
    S->step++;
}

int upd_serve(upd_args *a) {
    server S;
    serve_start(&S, a);
    while (wait_request(S.dir, S.step, S.c->rank, S.owner)) serve_step(&S);
    skpo_optim_free(S.o);
    skpo_comm_free(S.nc);
    skpo_model_free(S.m);
    upd_comm_close(S.c, S.ccu);
    return SKPO_EXIT_OK;
}
