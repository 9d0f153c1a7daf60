/*
 * sandbox.h - run untrusted programs (model-written code) isolated with
 * bubblewrap, many at once.
 *
 * Each job runs as `bwrap ... PROGRAM ARGS` with:
 *   - every namespace unshared (no network: only a private loopback; own pid,
 *     ipc, uts, user namespace), --die-with-parent, a new session;
 *   - a read-only root holding only the interpreter: the program binary, the
 *     folders given in ro_paths (for Debian's python3: its stdlib and the shared
 *     libraries) and a minimal /dev; no /etc, /home, /proc, no repository;
 *   - a fresh tmpfs working folder /w (size-capped) holding the job's files,
 *     bind-mounted read-only from memory (--ro-bind-data);
 *   - kernel limits set in the forked child before exec (setrlimit):
 *     RLIMIT_CPU (SIGXCPU, then SIGKILL one second later), RLIMIT_AS (memory),
 *     RLIMIT_NPROC (processes; counted per uid, so when run as root every
 *     parallel slot runs under its own otherwise unused uid, see below),
 *     RLIMIT_FSIZE (largest file written: fsize_mb plus the size of the job's
 *     files, which bwrap writes into /w; a driver can lower it for what it
 *     runs), RLIMIT_NOFILE, RLIMIT_CORE = 0;
 *   - wall time: the parent SIGKILLs the job's process group at its deadline
 *     (and bwrap's pid namespace takes every process inside with it);
 *   - output size: stdout, stderr and the result pipe (fd 3) are read by the
 *     parent into bounded buffers; a job that writes more is killed.
 * The pool runs up to `jobs` programs at once and waits in poll() on their
 * pipes and pidfds (no busy polling). Nothing is left running when
 * skpo_sandbox_run returns: every child is reaped.
 *
 * Uids: as root, the child drops to uid/gid SKPO_SANDBOX_UID_BASE + (pid mod
 * 2^22) * 64 + slot before exec, so RLIMIT_NPROC is enforced (it is not for
 * uid 0) and a fork bomb in one slot cannot take process slots from another
 * slot or another skpo process. As another user the job runs under that user
 * (then RLIMIT_NPROC counts all of the user's processes).
 *
 * There is no fallback: when bwrap is missing or cannot create namespaces,
 * skpo_sandbox_new fails with a message saying so; nothing ever runs
 * unsandboxed.
 */
#ifndef SKPO_SANDBOX_H
#define SKPO_SANDBOX_H

#include "base/common.h"

#include <stdbool.h>
#include <stddef.h>

#define SKPO_SANDBOX_UID_BASE 0x40000000u
#define SKPO_SANDBOX_MAX_FILES 8
#define SKPO_SANDBOX_MAX_RO 8

typedef struct skpo_sandbox_opts {
    const char *bwrap;          // path of bwrap (default "bwrap" looked up on PATH)
    const char *python;         // interpreter on the host (default /usr/bin/python3)
    const char *ro_paths[SKPO_SANDBOX_MAX_RO]; // extra read-only host folders (NULL-ended); default: probed for python
    int jobs;                   // programs at once (default: online CPUs)
    double cpu_s;               // RLIMIT_CPU per process, seconds (default 10)
    double wall_s;              // default wall limit per job, seconds (default 30)
    long mem_mb;                // RLIMIT_AS per process, MiB (default 2048)
    long nproc;                 // RLIMIT_NPROC (default 64)
    long fsize_mb;              // RLIMIT_FSIZE, MiB; also the tmpfs size cap x4 (default 16)
    size_t out_bytes;           // cap on each of stdout and fd 3 (default 16 MiB); stderr keeps 4 KiB
} skpo_sandbox_opts;

typedef struct skpo_sandbox_file {
    const char *name;           // file name inside /w (no '/')
    const char *data;
    size_t len;
} skpo_sandbox_file;

typedef enum skpo_sandbox_end {
    SKPO_SB_EXITED = 0,         // exited by itself (code)
    SKPO_SB_SIGNALED,           // killed by a signal it got (code = signal), e.g. SIGXCPU/SIGKILL at the CPU limit
    SKPO_SB_WALL,               // killed at the wall-time limit
    SKPO_SB_OUTPUT,             // killed for writing more than the output cap
    SKPO_SB_STOPPED,            // killed because on_result asked (the verdict was known)
} skpo_sandbox_end;

typedef struct skpo_sandbox_job {
    // input
    const char *const *argv;    // argv inside the sandbox, NULL-ended; argv[0] = "python" means the interpreter
    skpo_sandbox_file files[SKPO_SANDBOX_MAX_FILES];
    int nfiles;
    double wall_s;              // 0: opts.wall_s
    // Called with everything read from fd 3 so far; return true to stop the
    // job now (its verdict is known). May be NULL.
    bool (*on_result)(void *ctx, const char *buf, size_t len);
    void *ctx;
    // output (owned by the job; skpo_sandbox_job_free)
    skpo_sandbox_end end;
    int code;                   // exit code (EXITED) or signal (SIGNALED)
    char *out, *res, *err;      // stdout, fd 3, first 4 KiB of stderr; NUL-terminated
    size_t out_len, res_len, err_len;
    double wall;                // seconds it ran
} skpo_sandbox_job;

typedef struct skpo_sandbox skpo_sandbox;

void skpo_sandbox_opts_default(skpo_sandbox_opts *o);
// Find bwrap and the interpreter and run one probe program in the sandbox; a
// clear error when bwrap is missing or cannot set up the namespaces.
skpo_status skpo_sandbox_new(const skpo_sandbox_opts *o, skpo_sandbox **out, skpo_err *err);
void skpo_sandbox_free(skpo_sandbox *sb);
// Run n jobs, up to opts.jobs at once; returns when every job has ended and
// been reaped. Fails only when the host cannot start processes (pipe/fork).
skpo_status skpo_sandbox_run(skpo_sandbox *sb, skpo_sandbox_job *jobs, size_t n, skpo_err *err);
void skpo_sandbox_job_free(skpo_sandbox_job *j);
// A short human reason for how a job ended ("exit 1", "killed at the wall limit
// 2.0 s", ...), written into buf.
const char *skpo_sandbox_end_text(const skpo_sandbox_job *j, char *buf, size_t cap);

#endif
