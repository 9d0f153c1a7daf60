/*
 * sandbox.c - bubblewrap jobs with kernel limits and a poll()-driven pool
 * (see sandbox.h for the isolation it gives and why).
 */
#define _GNU_SOURCE
#include "verify/sandbox.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define ERR_KEEP 4096
#define SANDBOX_PY "/usr/bin/python3"

struct skpo_sandbox {
    skpo_sandbox_opts o;
    char bwrap[PATH_MAX], python[PATH_MAX];
    char *ro[SKPO_SANDBOX_MAX_RO + 4];
    int nro;
    bool lib64_link; // /lib64 -> usr/lib64 inside (merged /usr hosts)
    unsigned uid_base;
    bool as_root;
};

void skpo_sandbox_opts_default(skpo_sandbox_opts *o) {
    memset(o, 0, sizeof *o);
    o->bwrap = "bwrap";
    o->python = SANDBOX_PY;
    long nc = sysconf(_SC_NPROCESSORS_ONLN);
    o->jobs = nc > 0 ? (int)nc : 1;
    o->cpu_s = 10;
    o->wall_s = 30;
    o->mem_mb = 2048;
    o->nproc = 64;
    o->fsize_mb = 16;
    o->out_bytes = (size_t)16 << 20;
}

static bool find_exe(const char *name, char *out, size_t cap) {
    if (strchr(name, '/')) {
        if (access(name, X_OK)) return false;
        snprintf(out, cap, "%s", name);
        return true;
    }
    const char *path = getenv("PATH");
    if (!path) path = "/usr/bin:/bin";
    char *dup = skpo_xstrdup(path), *save = NULL;
    bool ok = false;
    for (char *d = strtok_r(dup, ":", &save); d && !ok; d = strtok_r(NULL, ":", &save)) {
        snprintf(out, cap, "%s/%s", *d ? d : ".", name);
        ok = access(out, X_OK) == 0;
    }
    free(dup);
    return ok;
}

static bool is_dir(const char *p) {
    struct stat st;
    return lstat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static void add_ro(skpo_sandbox *sb, const char *p) {
    if (sb->nro < (int)(sizeof sb->ro / sizeof sb->ro[0]) && is_dir(p)) sb->ro[sb->nro++] = skpo_xstrdup(p);
}

const char *skpo_sandbox_end_text(const skpo_sandbox_job *j, char *buf, size_t cap) {
    switch (j->end) {
    case SKPO_SB_EXITED: snprintf(buf, cap, "exit %d", j->code); break;
    case SKPO_SB_SIGNALED: snprintf(buf, cap, "killed by signal %d (%s)", j->code, strsignal(j->code)); break;
    case SKPO_SB_WALL: snprintf(buf, cap, "killed at the wall-time limit (%.1f s)", j->wall); break;
    case SKPO_SB_OUTPUT: snprintf(buf, cap, "killed for exceeding the output limit"); break;
    case SKPO_SB_STOPPED: snprintf(buf, cap, "stopped: verdict known"); break;
    }
    return buf;
}

void skpo_sandbox_job_free(skpo_sandbox_job *j) {
    free(j->out), free(j->res), free(j->err);
    j->out = j->res = j->err = NULL;
    j->out_len = j->res_len = j->err_len = 0;
}

// --- one job ---------------------------------------------------------------------

typedef struct slot {
    skpo_sandbox_job *job;
    pid_t pid;
    int fd[3];        // stdout, stderr, fd 3 (result); -1 when closed
    int info;         // bwrap --info-fd: its JSON names the namespace's init ("child-pid")
    char info_buf[512];
    size_t info_len;
    pid_t init;       // that pid (0 until known)
    int pidfd;        // -1: none (then poll ticks)
    bool reaped, killed;
    double t0, deadline, kill_deadline;
    size_t cap[3], err_total;
    char **buf[3];
    size_t *len[3];
} slot;

static int make_memfd(const char *name, const char *data, size_t len) {
    int fd = (int)syscall(SYS_memfd_create, name, MFD_CLOEXEC);
    if (fd < 0) return -1;
    size_t off = 0;
    while (off < len) {
        ssize_t w = write(fd, data + off, len - off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) { close(fd); return -1; }
        off += (size_t)w;
    }
    if (lseek(fd, 0, SEEK_SET) != 0) { close(fd); return -1; }
    return fd;
}

typedef struct argvb { char **v; size_t n, cap; } argvb;
static void push(argvb *a, const char *s) {
    skpo_xgrow((void **)&a->v, &a->cap, a->n + 2, sizeof *a->v);
    a->v[a->n++] = skpo_xstrdup(s);
    a->v[a->n] = NULL;
}
static void argv_free(argvb *a) {
    for (size_t i = 0; i < a->n; i++) free(a->v[i]);
    free(a->v);
}

static size_t job_bytes(const skpo_sandbox_job *j) {
    size_t n = 0;
    for (int i = 0; i < j->nfiles; i++) n += j->files[i].len;
    return n;
}

// bwrap's command line for job j whose files arrive on fds 10, 11, ...
static void build_argv(const skpo_sandbox *sb, const skpo_sandbox_job *j, argvb *a) {
    char num[64];
    push(a, sb->bwrap);
    const char *fixed[] = {"--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent", "--as-pid-1", "--info-fd", "4",
                           "--hostname", "sandbox",
                           "--ro-bind", sb->python, SANDBOX_PY, NULL};
    for (int i = 0; fixed[i]; i++) push(a, fixed[i]);
    for (int i = 0; i < sb->nro; i++) push(a, "--ro-bind"), push(a, sb->ro[i]), push(a, sb->ro[i]);
    if (sb->lib64_link) push(a, "--symlink"), push(a, "usr/lib64"), push(a, "/lib64");
    push(a, "--symlink"), push(a, "usr/lib"), push(a, "/lib");
    push(a, "--symlink"), push(a, "usr/bin"), push(a, "/bin");
    push(a, "--dev"), push(a, "/dev");
    snprintf(num, sizeof num, "%zu", (size_t)sb->o.fsize_mb * 4 * 1048576 + job_bytes(j)); // room for the job's files
    push(a, "--size"), push(a, num), push(a, "--tmpfs"), push(a, "/w");
    push(a, "--tmpfs"), push(a, "/tmp");
    push(a, "--remount-ro"), push(a, "/");
    for (int i = 0; i < j->nfiles; i++) {
        char dest[256];
        snprintf(num, sizeof num, "%d", 10 + i);
        snprintf(dest, sizeof dest, "/w/%s", j->files[i].name);
        push(a, "--perms"), push(a, "0444"), push(a, "--ro-bind-data"), push(a, num), push(a, dest);
    }
    const char *env[] = {"--chdir", "/w", "--clearenv", "--setenv", "PATH", "/usr/bin", "--setenv", "HOME", "/w",
                         "--setenv", "LANG", "C.UTF-8", "--setenv", "PYTHONDONTWRITEBYTECODE", "1", "--", NULL};
    for (int i = 0; env[i]; i++) push(a, env[i]);
    for (int i = 0; j->argv[i]; i++) push(a, i == 0 && !strcmp(j->argv[0], "python") ? SANDBOX_PY : j->argv[i]);
}

static void set_limit(int res, rlim_t soft, rlim_t hard) {
    struct rlimit rl = {soft, hard};
    (void)setrlimit(res, &rl);
}

// In the forked child: async-signal-safe calls only. fds: [0]=stdin [1]=out
// [2]=err [3]=result [4]=bwrap's info, then the file memfds -> 10, 11, ...
static void child(const skpo_sandbox *sb, int slotno, int *fds, int nfds, char **argv, size_t files) {
    if (setsid() < 0) _exit(126);
    int tmp[5 + SKPO_SANDBOX_MAX_FILES];
    for (int i = 0; i < nfds; i++)
        if ((tmp[i] = fcntl(fds[i], F_DUPFD_CLOEXEC, 100)) < 0) _exit(126);
    for (int i = 0; i < nfds; i++) {
        int target = i < 5 ? i : 10 + (i - 5);
        if (dup2(tmp[i], target) < 0) _exit(126);
    }
    for (int f = 5; f < 10; f++) close(f);
    if (syscall(SYS_close_range, 10 + (nfds - 5), ~0U, 0) < 0)
        for (int f = 10 + (nfds - 5); f < 1024; f++) close(f);
    rlim_t cpu = (rlim_t)ceil(sb->o.cpu_s);
    set_limit(RLIMIT_CPU, cpu, cpu + 1);
    set_limit(RLIMIT_AS, (rlim_t)sb->o.mem_mb << 20, (rlim_t)sb->o.mem_mb << 20);
    // bwrap itself writes the job's files into /w: the largest of them must fit
    rlim_t fsz = ((rlim_t)sb->o.fsize_mb << 20) + (rlim_t)files;
    set_limit(RLIMIT_FSIZE, fsz, fsz);
    set_limit(RLIMIT_NOFILE, 256, 256);
    set_limit(RLIMIT_CORE, 0, 0);
    set_limit(RLIMIT_NPROC, (rlim_t)sb->o.nproc, (rlim_t)sb->o.nproc);
    if (sb->as_root) {
        unsigned uid = sb->uid_base + (unsigned)slotno;
        if (setgroups(0, NULL) || setgid(uid) || setuid(uid)) {
            static const char m[] = "sandbox: cannot drop to the sandbox uid\n";
            (void)!write(2, m, sizeof m - 1);
            _exit(126);
        }
    }
    prctl(PR_SET_PDEATHSIG, SIGKILL); // after setuid, which clears it
    if (getppid() == 1) _exit(126);   // the parent is already gone
    execv(argv[0], argv);
    static const char m[] = "sandbox: cannot exec bwrap\n";
    (void)!write(2, m, sizeof m - 1);
    _exit(127);
}

// Killing the namespace's init makes the kernel kill and reap every process
// in the namespace before init itself exits; bwrap then exits, and once it is
// reaped nothing of the job is left. Before init is known (or if bwrap does not
// exit within 5 s) the whole process group goes.
static void slot_read_info(slot *s);
static void slot_kill(slot *s, skpo_sandbox_end why) {
    if (s->reaped) return;
    if (!s->init && s->info >= 0) slot_read_info(s); // written before the program starts
    if (!s->killed) {
        s->killed = true;
        s->job->end = why;
        s->kill_deadline = skpo_now() + 5;
        for (int k = 0; k < 3; k++)
            if (s->fd[k] >= 0) close(s->fd[k]), s->fd[k] = -1;
    }
    if (s->init > 0) kill(s->init, SIGKILL);
    else kill(-s->pid, SIGKILL);
}

// bwrap's info JSON: {"child-pid": N, ...}
static void slot_read_info(slot *s) {
    for (;;) {
        ssize_t r = read(s->info, s->info_buf + s->info_len, sizeof s->info_buf - 1 - s->info_len);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return;
        if (r == 0 || (s->info_len += (size_t)r) >= sizeof s->info_buf - 1) { close(s->info); s->info = -1; }
        s->info_buf[s->info_len] = 0;
        const char *k = strstr(s->info_buf, "\"child-pid\":");
        if (k && !s->init) {
            long v = strtol(k + 12, NULL, 10);
            if (v > 1 && strchr(k, ',')) {
                s->init = (pid_t)v;
                if (s->killed) kill(s->init, SIGKILL);
            }
        }
        if (s->info < 0) return;
    }
}

static skpo_status slot_start(skpo_sandbox *sb, slot *s, int slotno, skpo_sandbox_job *j, skpo_err *err) {
    memset(s, 0, sizeof *s);
    s->job = j;
    s->pidfd = -1;
    j->end = SKPO_SB_EXITED;
    j->code = 0;
    j->out = skpo_xcalloc(1, 1), j->res = skpo_xcalloc(1, 1), j->err = skpo_xcalloc(1, 1);
    j->out_len = j->res_len = j->err_len = 0;
    int p[4][2], fds[5 + SKPO_SANDBOX_MAX_FILES], nfds = 5;
    for (int k = 0; k < 4; k++)
        if (pipe2(p[k], O_CLOEXEC)) {
            for (int q = 0; q < k; q++) close(p[q][0]), close(p[q][1]);
            return skpo_err_set(err, SKPO_EIO, "sandbox: pipe: %s", strerror(errno));
        }
    int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
    fds[0] = devnull, fds[1] = p[0][1], fds[2] = p[1][1], fds[3] = p[2][1], fds[4] = p[3][1];
    skpo_status st = SKPO_OK;
    if (devnull < 0) st = skpo_err_set(err, SKPO_EIO, "sandbox: /dev/null: %s", strerror(errno));
    for (int i = 0; st == SKPO_OK && i < j->nfiles; i++) {
        if (!j->files[i].name || strchr(j->files[i].name, '/'))
            st = skpo_err_set(err, SKPO_EFORMAT, "sandbox: bad file name '%s'", j->files[i].name ? j->files[i].name : "");
        else if ((fds[nfds] = make_memfd(j->files[i].name, j->files[i].data, j->files[i].len)) < 0)
            st = skpo_err_set(err, SKPO_EIO, "sandbox: memfd: %s", strerror(errno));
        else nfds++;
    }
    argvb a = {0};
    if (st == SKPO_OK) {
        build_argv(sb, j, &a);
        s->t0 = skpo_now();
        s->pid = fork();
        if (s->pid == 0) child(sb, slotno, fds, nfds, a.v, job_bytes(j));
        if (s->pid < 0) st = skpo_err_set(err, SKPO_EIO, "sandbox: fork: %s", strerror(errno));
    }
    argv_free(&a);
    if (devnull >= 0) close(devnull);
    for (int i = 5; i < nfds; i++) close(fds[i]);
    for (int k = 0; k < 4; k++) close(p[k][1]);
    if (st != SKPO_OK) {
        for (int k = 0; k < 4; k++) close(p[k][0]);
        s->job = NULL;
        return st;
    }
    for (int k = 0; k < 3; k++) {
        s->fd[k] = p[k][0];
        fcntl(s->fd[k], F_SETFL, O_NONBLOCK);
    }
    s->info = p[3][0];
    fcntl(s->info, F_SETFL, O_NONBLOCK);
    s->pidfd = (int)syscall(SYS_pidfd_open, s->pid, 0);
    double wall = j->wall_s > 0 ? j->wall_s : sb->o.wall_s;
    s->deadline = s->t0 + wall;
    s->buf[0] = &j->out, s->len[0] = &j->out_len;
    s->buf[1] = &j->err, s->len[1] = &j->err_len;
    s->buf[2] = &j->res, s->len[2] = &j->res_len;
    for (int k = 0; k < 3; k++) s->cap[k] = 1;
    return SKPO_OK;
}

// Read what is there on pipe k of slot s.
static void slot_read(const skpo_sandbox *sb, slot *s, int k) {
    char chunk[65536];
    for (;;) {
        ssize_t r = read(s->fd[k], chunk, sizeof chunk);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return; // EAGAIN
        if (r == 0) { close(s->fd[k]); s->fd[k] = -1; return; }
        size_t n = (size_t)r, *len = s->len[k];
        char **buf = s->buf[k];
        if (k == 1) { // stderr: keep the last ERR_KEEP bytes, and no more than out_bytes in all
            if ((s->err_total += n) > sb->o.out_bytes) {
                slot_kill(s, SKPO_SB_OUTPUT);
                return;
            }
            if (n >= ERR_KEEP) { memmove(chunk, chunk + n - ERR_KEEP, ERR_KEEP); n = ERR_KEEP; }
            if (*len + n > ERR_KEEP) {
                size_t drop = *len + n - ERR_KEEP;
                memmove(*buf, *buf + drop, *len - drop);
                *len -= drop;
            }
        } else if (*len + n > sb->o.out_bytes) {
            slot_kill(s, SKPO_SB_OUTPUT);
            return;
        }
        skpo_xgrow((void **)buf, &s->cap[k], *len + n + 1, 1);
        memcpy(*buf + *len, chunk, n);
        *len += n;
        (*buf)[*len] = 0;
        if (k == 2 && s->job->on_result && s->job->on_result(s->job->ctx, *buf, *len)) {
            slot_kill(s, SKPO_SB_STOPPED);
            return;
        }
    }
}

static void slot_try_reap(slot *s) {
    if (s->reaped) return;
    int st;
    pid_t r = waitpid(s->pid, &st, WNOHANG);
    if (r != s->pid) return;
    s->reaped = true;
    s->job->wall = skpo_now() - s->t0;
    if (!s->killed) {
        if (WIFEXITED(st)) s->job->end = SKPO_SB_EXITED, s->job->code = WEXITSTATUS(st);
        else s->job->end = SKPO_SB_SIGNALED, s->job->code = WTERMSIG(st);
    }
    if (s->pidfd >= 0) close(s->pidfd), s->pidfd = -1;
    if (s->info >= 0) close(s->info), s->info = -1;
}

static bool slot_done(const slot *s) {
    return s->job && s->reaped && s->fd[0] < 0 && s->fd[1] < 0 && s->fd[2] < 0 && s->info < 0;
}

skpo_status skpo_sandbox_run(skpo_sandbox *sb, skpo_sandbox_job *jobs, size_t n, skpo_err *err) {
    int par = sb->o.jobs > 0 ? sb->o.jobs : 1;
    if (par > 64) par = 64;
    slot *slots = skpo_xcalloc((size_t)par, sizeof *slots);
    struct pollfd *pfd = skpo_xcalloc((size_t)par * 5, sizeof *pfd);
    int *pslot = skpo_xcalloc((size_t)par * 5, sizeof *pslot), *pkind = skpo_xcalloc((size_t)par * 5, sizeof *pkind);
    size_t next = 0, running = 0;
    skpo_status st = SKPO_OK;
    for (;;) {
        for (int i = 0; i < par && next < n && st == SKPO_OK; i++)
            if (!slots[i].job) {
                st = slot_start(sb, &slots[i], i, &jobs[next], err);
                if (st == SKPO_OK) next++, running++;
            }
        if (st != SKPO_OK) { // stop starting; kill what runs and reap it
            for (int i = 0; i < par; i++)
                if (slots[i].job) slot_kill(&slots[i], SKPO_SB_STOPPED);
        }
        if (running == 0) break;
        int np = 0;
        double now = skpo_now(), wake = INFINITY;
        bool tick = false;
        for (int i = 0; i < par; i++) {
            slot *s = &slots[i];
            if (!s->job) continue;
            if (s->info >= 0) pfd[np] = (struct pollfd){s->info, POLLIN, 0}, pslot[np] = i, pkind[np++] = 4;
            for (int k = 0; k < 3; k++)
                if (s->fd[k] >= 0) pfd[np] = (struct pollfd){s->fd[k], POLLIN, 0}, pslot[np] = i, pkind[np++] = k;
            if (!s->reaped && s->pidfd >= 0) pfd[np] = (struct pollfd){s->pidfd, POLLIN, 0}, pslot[np] = i, pkind[np++] = 3;
            if (!s->reaped && s->pidfd < 0) tick = true;
            if (!s->killed && !s->reaped && s->deadline < wake) wake = s->deadline;
            if (s->killed && !s->reaped && s->kill_deadline < wake) wake = s->kill_deadline;
        }
        int timeout = -1;
        if (isfinite(wake)) timeout = wake <= now ? 0 : (int)ceil((wake - now) * 1000);
        if (tick && (timeout < 0 || timeout > 20)) timeout = 20;
        int r = poll(pfd, (nfds_t)np, timeout);
        if (r < 0 && errno != EINTR) {
            st = skpo_err_set(err, SKPO_EIO, "sandbox: poll: %s", strerror(errno));
            continue;
        }
        for (int q = 0; q < np && r > 0; q++) {
            if (!pfd[q].revents) continue;
            slot *s = &slots[pslot[q]];
            if (pkind[q] < 3) {
                if (s->fd[pkind[q]] == pfd[q].fd) slot_read(sb, s, pkind[q]);
            } else if (pkind[q] == 4) {
                if (s->info == pfd[q].fd) slot_read_info(s);
            } else slot_try_reap(s);
        }
        now = skpo_now();
        for (int i = 0; i < par; i++) {
            slot *s = &slots[i];
            if (!s->job) continue;
            if (!s->reaped && !s->killed && now >= s->deadline) slot_kill(s, SKPO_SB_WALL);
            if (!s->reaped && s->killed && now >= s->kill_deadline) kill(-s->pid, SIGKILL), kill(s->pid, SIGKILL);
            if (!s->reaped && (s->pidfd < 0 || s->killed)) slot_try_reap(s);
            if (slot_done(s)) {
                s->job = NULL;
                running--;
            }
        }
    }
    free(slots), free(pfd), free(pslot), free(pkind);
    return st;
}

// --- setup -------------------------------------------------------------------------

skpo_status skpo_sandbox_new(const skpo_sandbox_opts *o, skpo_sandbox **out, skpo_err *err) {
    *out = NULL;
    skpo_sandbox *sb = skpo_xcalloc(1, sizeof *sb);
    sb->o = *o;
    if (!find_exe(o->bwrap ? o->bwrap : "bwrap", sb->bwrap, sizeof sb->bwrap)) {
        free(sb);
        return skpo_err_set(err, SKPO_ENOTFOUND,
                            "sandbox: bubblewrap ('%s') not found; install it (apt-get install bubblewrap): "
                            "model-written code is never run unsandboxed",
                            o->bwrap ? o->bwrap : "bwrap");
    }
    const char *py = o->python ? o->python : SANDBOX_PY;
    if (!realpath(py, sb->python) || access(sb->python, X_OK)) {
        free(sb);
        return skpo_err_set(err, SKPO_ENOTFOUND, "sandbox: interpreter '%s' not found", py);
    }
    int given = 0;
    for (; given < SKPO_SANDBOX_MAX_RO && o->ro_paths[given]; given++) add_ro(sb, o->ro_paths[given]);
    if (!given) { // the interpreter's stdlib and the shared libraries
        const char *base = strrchr(sb->python, '/') + 1;
        char lib[PATH_MAX + 16];
        snprintf(lib, sizeof lib, "/usr/lib/%s", base);
        add_ro(sb, lib);
        add_ro(sb, "/usr/lib/x86_64-linux-gnu");
        add_ro(sb, "/usr/lib/aarch64-linux-gnu");
        add_ro(sb, "/usr/lib64");
    }
    struct stat stl;
    sb->lib64_link = is_dir("/usr/lib64") && lstat("/lib64", &stl) == 0 && S_ISLNK(stl.st_mode);
    if (!sb->lib64_link && is_dir("/lib64")) add_ro(sb, "/lib64");
    sb->as_root = geteuid() == 0;
    sb->uid_base = SKPO_SANDBOX_UID_BASE + ((unsigned)getpid() & 0x3fffffu) * 64u;
    // probe: the sandbox must start and run the interpreter
    const char *argv[] = {"python", "-I", "-S", "-c", "import os; os.write(3, b'ok')", NULL};
    skpo_sandbox_job j = {.argv = argv, .wall_s = 30};
    skpo_sandbox_opts saved = sb->o;
    sb->o.jobs = 1;
    skpo_status st = skpo_sandbox_run(sb, &j, 1, err);
    sb->o = saved;
    if (st == SKPO_OK && (j.end != SKPO_SB_EXITED || j.code != 0 || strcmp(j.res, "ok"))) {
        char why[128], *nl;
        while ((nl = strchr(j.err, '\n')) && nl[1] == 0) *nl = 0;
        st = skpo_err_set(err, SKPO_EUNSUPPORTED, "sandbox: bwrap cannot run programs here (%s: %.200s); "
                          "model-written code is never run unsandboxed", skpo_sandbox_end_text(&j, why, sizeof why), j.err);
    }
    skpo_sandbox_job_free(&j);
    if (st != SKPO_OK) { skpo_sandbox_free(sb); return st; }
    *out = sb;
    return SKPO_OK;
}

void skpo_sandbox_free(skpo_sandbox *sb) {
    if (!sb) return;
    for (int i = 0; i < sb->nro; i++) free(sb->ro[i]);
    free(sb);
}
