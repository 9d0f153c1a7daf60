/*
 * tracker.c - per-prompt SPO/SKPO tracker state: an insertion-ordered array of
 * entries plus a map from pid to its index (base/strmap.h), and its on-disk form as a record
 * stream (see tracker.h for the math and the folder layout).
 * Not here: the divergence D (needs a model) and advantages (advantage.c).
 */
#include "rl/tracker.h"
#include "base/strmap.h"
#include "record/record.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct entry {
    char *pid;
    double V, N, L, NL;
    int64_t visits, last_step;
    int32_t *seg_tokens; size_t ntok;
    float *seg_logp;     // (ntok) or NULL
    int32_t *seg_prompt; size_t nprompt;
} entry;

struct skpo_tracker {
    skpo_tracker_params p;
    int64_t step;
    entry *e;
    size_t n, cap;
    skpo_strmap idx; // pid (borrowed from e[i].pid, which never moves) -> i
};

#define STATE_PREFIX "state-"
#define STATE_SUFFIX ".msgpack.zst"

// --- params, index ----------------------------------------------------------------

void skpo_tracker_params_default(skpo_tracker_params *p) {
    p->rho_min = 0.875;
    p->rho_max = 0.96;
    p->tau = 8.0;
    p->eps = 0.05;
    p->len_init = 1024.0;
}

static entry *find(const skpo_tracker *t, const char *pid) {
    SKPO_ASSERT(pid != NULL);
    const size_t *i = skpo_strmap_get(&t->idx, pid);
    return i ? &t->e[*i] : NULL;
}

// The entry of pid, created unseen (V 0, N 0, L len_init) when absent.
static entry *find_or_add(skpo_tracker *t, const char *pid) {
    entry *e = find(t, pid);
    if (e) return e;
    skpo_xgrow((void **)&t->e, &t->cap, t->n + 1, sizeof *t->e);
    e = &t->e[t->n];
    memset(e, 0, sizeof *e);
    e->pid = skpo_xstrdup(pid);
    e->L = t->p.len_init;
    skpo_strmap_add(&t->idx, e->pid, t->n++, NULL);
    return e;
}

static void entry_clear_seg(entry *e) {
    free(e->seg_tokens); free(e->seg_logp); free(e->seg_prompt);
    e->seg_tokens = NULL; e->seg_logp = NULL; e->seg_prompt = NULL;
    e->ntok = e->nprompt = 0;
}

// Replace the stored segment by copies of seg's arrays.
static void entry_set_seg(entry *e, const skpo_tracker_seg *seg) {
    entry_clear_seg(e);
    size_t nt = seg->ntokens, np = seg->nprompt;
    e->ntok = nt;
    e->seg_tokens = skpo_xmalloc((nt ? nt : 1) * sizeof(int32_t));
    if (nt) memcpy(e->seg_tokens, seg->tokens, nt * sizeof(int32_t));
    if (seg->logp) {
        e->seg_logp = skpo_xmalloc((nt ? nt : 1) * sizeof(float));
        if (nt) memcpy(e->seg_logp, seg->logp, nt * sizeof(float));
    }
    if (seg->prompt) {
        e->nprompt = np;
        e->seg_prompt = skpo_xmalloc((np ? np : 1) * sizeof(int32_t));
        if (np) memcpy(e->seg_prompt, seg->prompt, np * sizeof(int32_t));
    }
}

// --- open / free -------------------------------------------------------------------

skpo_tracker *skpo_tracker_new(const skpo_tracker_params *p) {
    skpo_tracker *t = skpo_xcalloc(1, sizeof *t);
    if (p) t->p = *p;
    else skpo_tracker_params_default(&t->p);
    return t;
}

void skpo_tracker_free(skpo_tracker *t) {
    if (!t) return;
    for (size_t i = 0; i < t->n; i++) {
        entry_clear_seg(&t->e[i]);
        free(t->e[i].pid);
    }
    free(t->e);
    skpo_strmap_free(&t->idx);
    free(t);
}

// --- read --------------------------------------------------------------------------

const skpo_tracker_params *skpo_tracker_get_params(const skpo_tracker *t) { return &t->p; }
int64_t skpo_tracker_step(const skpo_tracker *t) { return t->step; }
void skpo_tracker_set_step(skpo_tracker *t, int64_t step) { t->step = step; }
void skpo_tracker_set_params(skpo_tracker *t, const skpo_tracker_params *p) { t->p = *p; }
size_t skpo_tracker_size(const skpo_tracker *t) { return t->n; }
int skpo_tracker_seen(const skpo_tracker *t, const char *pid) { return find(t, pid) != NULL; }

double skpo_tracker_len(const skpo_tracker *t, const char *pid) {
    const entry *e = find(t, pid);
    return e ? e->L : t->p.len_init;
}

double skpo_tracker_value(const skpo_tracker *t, const char *pid) {
    const entry *e = find(t, pid);
    return e ? e->V : 0.0;
}

double skpo_tracker_count(const skpo_tracker *t, const char *pid) {
    const entry *e = find(t, pid);
    return e ? e->N : 0.0;
}

int64_t skpo_tracker_visits(const skpo_tracker *t, const char *pid) {
    const entry *e = find(t, pid);
    return e ? e->visits : 0;
}

// Rewards outside [-1, 1] (e.g. DAPO's overlong penalty) can push V out of
// range; p is clamped so the weight stays a real number.
double skpo_prio_weight(double v, double eps) {
    double p = (v + 1.0) / 2.0;
    if (!(p > 0)) p = 0;   // also NaN: V is clamped, never trusted outside [-1, 1]
    if (p > 1) p = 1;
    return sqrt(p * (1.0 - p)) + eps;
}

double skpo_tracker_weight(const skpo_tracker *t, const char *pid) {
    return skpo_prio_weight(skpo_tracker_value(t, pid), t->p.eps);
}

int skpo_tracker_last_seg(const skpo_tracker *t, const char *pid, skpo_tracker_seg *seg) {
    const entry *e = find(t, pid);
    memset(seg, 0, sizeof *seg);
    if (!e || !e->seg_tokens) return 0;
    seg->tokens = e->seg_tokens; seg->ntokens = e->ntok;
    seg->logp = e->seg_logp;
    seg->prompt = e->seg_prompt; seg->nprompt = e->nprompt;
    return 1;
}

// --- update ------------------------------------------------------------------------

double skpo_tracker_rho(const skpo_tracker *t, double D, int *clipped) {
    SKPO_ASSERT(D >= 0 && isfinite(D));
    double r = exp2(-D / t->p.tau), c = r;
    if (c < t->p.rho_min) c = t->p.rho_min;
    if (c > t->p.rho_max) c = t->p.rho_max;
    if (clipped) *clipped = c != r;
    return c;
}

skpo_status skpo_tracker_update(skpo_tracker *t, const char *pid, double R, double ell, double rho,
                                const skpo_tracker_seg *seg, skpo_err *err) {
    if (!isfinite(R)) return skpo_err_set(err, SKPO_ENUMERIC, "non-finite reward for prompt '%s'", pid);
    if (!isnan(ell) && !(isfinite(ell) && ell >= 0))
        return skpo_err_set(err, SKPO_ENUMERIC, "bad length observation %g for prompt '%s'", ell, pid);
    if (!(rho > 0 && rho <= 1)) return skpo_err_set(err, SKPO_ERANGE, "rho %g out of (0, 1] for prompt '%s'", rho, pid);
    entry *e = find_or_add(t, pid);
    double eta = 1.0 / (rho * e->N + 1.0);
    e->V += eta * (R - e->V);
    e->N = rho * e->N + 1.0;
    if (!isnan(ell)) {
        double etaL = 1.0 / (rho * e->NL + 1.0);
        e->L += etaL * (ell - e->L);
        e->NL = rho * e->NL + 1.0;
    }
    e->visits++;
    e->last_step = t->step;
    if (seg) entry_set_seg(e, seg);
    return SKPO_OK;
}

// --- on disk -----------------------------------------------------------------------

static char *state_name(int64_t step) {
    char buf[64];
    snprintf(buf, sizeof buf, STATE_PREFIX "%06" PRId64 STATE_SUFFIX, step);
    return skpo_xstrdup(buf);
}

// Step number of a state file name, -1 when the name is not one.
static int64_t parse_state_name(const char *name) {
    size_t n = strlen(name), lp = strlen(STATE_PREFIX), ls = strlen(STATE_SUFFIX);
    if (n <= lp + ls || strncmp(name, STATE_PREFIX, lp) || strcmp(name + n - ls, STATE_SUFFIX)) return -1;
    int64_t v = 0;
    for (size_t i = lp; i < n - ls; i++) {
        if (name[i] < '0' || name[i] > '9' || v > INT64_MAX / 10 - 10) return -1;
        v = v * 10 + (name[i] - '0');
    }
    return v;
}

static skpo_status need_float(const skpo_rec *r, const char *key, double *out, const char *path, skpo_err *err) {
    if (!skpo_rec_float(r, key, out) || !isfinite(*out))
        return skpo_err_set(err, SKPO_EFORMAT, "state file '%s': record of prompt '%s' lacks a finite '%s'", path,
                            skpo_rec_str(r, F_PID) ? skpo_rec_str(r, F_PID) : "?", key);
    return SKPO_OK;
}

static skpo_status load_meta(skpo_tracker *t, const skpo_rec *r, const char *path, skpo_err *err) {
    int64_t ver, step;
    if (!skpo_rec_is_kind(r, SKPO_KIND_META) || !skpo_rec_int(r, "tracker_version", &ver))
        return skpo_err_set(err, SKPO_EFORMAT, "state file '%s' does not start with a tracker meta record", path);
    if (ver != SKPO_TRACKER_VERSION)
        return skpo_err_set(err, SKPO_EFORMAT, "state file '%s' has tracker version %" PRId64 ", this build reads %d"
                            " (re-create the state or use a matching build)", path, ver, SKPO_TRACKER_VERSION);
    if (!skpo_rec_int(r, F_STEP, &step) || step < 0)
        return skpo_err_set(err, SKPO_EFORMAT, "state file '%s' meta lacks a valid 'step'", path);
    t->step = step;
    skpo_status st;
    if ((st = need_float(r, "rho_min", &t->p.rho_min, path, err)) || (st = need_float(r, "rho_max", &t->p.rho_max, path, err)) ||
        (st = need_float(r, "tau", &t->p.tau, path, err)) || (st = need_float(r, "eps", &t->p.eps, path, err)) ||
        (st = need_float(r, "len_init", &t->p.len_init, path, err)))
        return st;
    return SKPO_OK;
}

static skpo_status load_entry(skpo_tracker *t, const skpo_rec *r, const char *path, skpo_err *err) {
    const char *pid = skpo_rec_str(r, F_PID);
    if (!pid) return skpo_err_set(err, SKPO_EFORMAT, "state file '%s': state record without pid", path);
    if (find(t, pid)) return skpo_err_set(err, SKPO_EFORMAT, "state file '%s': prompt '%s' appears twice", path, pid);
    double V, N, L, NL;
    skpo_status st;
    if ((st = need_float(r, "value", &V, path, err)) || (st = need_float(r, "count", &N, path, err)) ||
        (st = need_float(r, "len", &L, path, err)) || (st = need_float(r, "len_count", &NL, path, err)))
        return st;
    if (N < 0 || NL < 0 || L < 0)
        return skpo_err_set(err, SKPO_EFORMAT, "state file '%s': prompt '%s' has a negative count or length", path, pid);
    entry *e = find_or_add(t, pid);
    e->V = V; e->N = N; e->L = L; e->NL = NL;
    skpo_rec_int(r, "visits", &e->visits);
    skpo_rec_int(r, "last_step", &e->last_step);
    size_t nt = 0, nl = 0, np = 0;
    const int32_t *tok = skpo_rec_i32s(r, "seg_tokens", &nt);
    const float *lp = skpo_rec_f32s(r, "seg_logp", &nl);
    const int32_t *pr = skpo_rec_i32s(r, "seg_prompt", &np);
    if (tok) {
        if (lp && nl != nt)
            return skpo_err_set(err, SKPO_EFORMAT, "state file '%s': prompt '%s' has %zu segment tokens but %zu log-probs",
                                path, pid, nt, nl);
        skpo_tracker_seg seg = {tok, nt, lp, pr, np};
        entry_set_seg(e, &seg);
    }
    return SKPO_OK;
}

static skpo_status load_file(skpo_tracker *t, const char *path, skpo_err *err) {
    skpo_reader *rd;
    skpo_status st = skpo_reader_open(path, &rd, err);
    if (st) return st;
    skpo_rec r;
    skpo_rec_init(&r);
    int have_meta = 0;
    while ((st = skpo_reader_next(rd, &r, err)) == SKPO_OK) {
        if (!have_meta) { st = load_meta(t, &r, path, err); have_meta = 1; }
        else if (skpo_rec_is_kind(&r, SKPO_KIND_STATE)) st = load_entry(t, &r, path, err);
        if (st) break;
    }
    if (st == SKPO_EOF) st = have_meta ? SKPO_OK : skpo_err_set(err, SKPO_EFORMAT, "state file '%s' is empty", path);
    skpo_rec_free(&r);
    skpo_reader_close(rd);
    return st;
}

// 1 when dir holds a state-*.msgpack.zst file.
static int has_state_files(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    struct dirent *de;
    int found = 0;
    while (!found && (de = readdir(d)) != NULL) found = parse_state_name(de->d_name) >= 0;
    closedir(d);
    return found;
}

// Name in DIR/CURRENT, NULL (and OK) when there is none. State files without a
// CURRENT are an error rather than a silent fresh start.
static skpo_status read_current(const char *dir, char **name, skpo_err *err) {
    *name = NULL;
    char *cur = skpo_path_join(dir, "CURRENT");
    if (!skpo_path_exists(cur)) {
        free(cur);
        if (has_state_files(dir))
            return skpo_err_set(err, SKPO_EFORMAT, "state folder '%s' has state files but no CURRENT (write the name of"
                                " the latest complete one into %s/CURRENT)", dir, dir);
        return SKPO_OK;
    }
    char *data; size_t len;
    skpo_status st = skpo_read_file(cur, &data, &len, err);
    if (st) { free(cur); return st; }
    while (len && (data[len - 1] == '\n' || data[len - 1] == ' ')) data[--len] = 0;
    if (parse_state_name(data) < 0 || strchr(data, '/')) {
        st = skpo_err_set(err, SKPO_EFORMAT, "'%s' does not name a state file (holds '%.64s')", cur, data);
        free(data);
    } else {
        *name = data;
    }
    free(cur);
    return st;
}

static skpo_status load_named(const char *dir, const char *name, skpo_tracker **out, skpo_err *err) {
    char *path = skpo_path_join(dir, name);
    skpo_tracker *t = skpo_tracker_new(NULL);
    skpo_status st = load_file(t, path, err);
    if (!st && t->step != parse_state_name(name))
        st = skpo_err_set(err, SKPO_EFORMAT, "state file '%s' holds step %" PRId64 ", its name says otherwise", path, t->step);
    free(path);
    if (st) { skpo_tracker_free(t); return st; }
    *out = t;
    return SKPO_OK;
}

skpo_status skpo_tracker_load(const char *state_dir, skpo_tracker **out, skpo_err *err) {
    char *name;
    skpo_status st = read_current(state_dir, &name, err);
    if (st) return st;
    if (!name) { *out = skpo_tracker_new(NULL); return SKPO_OK; }
    st = load_named(state_dir, name, out, err);
    free(name);
    return st;
}

skpo_status skpo_tracker_load_step(const char *state_dir, int64_t step, skpo_tracker **out, skpo_err *err) {
    char *name;
    skpo_status st = read_current(state_dir, &name, err);
    if (st) return st;
    if (!name) {
        *out = skpo_tracker_new(NULL);
        (*out)->step = step;
        return SKPO_OK;
    }
    int64_t latest = parse_state_name(name);
    free(name);
    name = state_name(step);
    char *path = skpo_path_join(state_dir, name);
    if (!skpo_path_exists(path))
        st = skpo_err_set(err, SKPO_ENOTFOUND, "no state for step %" PRId64 " in '%s' (latest is step %" PRId64
                          "; only the last two are kept)", step, state_dir, latest);
    else
        st = load_named(state_dir, name, out, err);
    free(path);
    free(name);
    return st;
}

static void put_entry(skpo_rec *r, const entry *e) {
    skpo_rec_clear(r);
    skpo_rec_set_str(r, F_KIND, SKPO_KIND_STATE);
    skpo_rec_set_str(r, F_PID, e->pid);
    skpo_rec_set_float(r, "value", e->V);
    skpo_rec_set_float(r, "count", e->N);
    skpo_rec_set_float(r, "len", e->L);
    skpo_rec_set_float(r, "len_count", e->NL);
    skpo_rec_set_int(r, "visits", e->visits);
    skpo_rec_set_int(r, "last_step", e->last_step);
    if (e->seg_tokens) {
        skpo_rec_set_i32s(r, "seg_tokens", e->seg_tokens, e->ntok);
        if (e->seg_logp) skpo_rec_set_f32s(r, "seg_logp", e->seg_logp, e->ntok);
        if (e->seg_prompt) skpo_rec_set_i32s(r, "seg_prompt", e->seg_prompt, e->nprompt);
    }
}

static skpo_status write_state(const skpo_tracker *t, const char *path, skpo_err *err) {
    skpo_writer *w;
    skpo_status st = skpo_writer_open_file(path, 0, &w, err);
    if (st) return st;
    skpo_rec r;
    skpo_rec_init(&r);
    skpo_rec_set_str(&r, F_KIND, SKPO_KIND_META);
    skpo_rec_set_int(&r, F_SCHEMA, SKPO_SCHEMA_VERSION);
    skpo_rec_set_str(&r, "tool", "skpo-tracker");
    skpo_rec_set_int(&r, "tracker_version", SKPO_TRACKER_VERSION);
    skpo_rec_set_int(&r, F_STEP, t->step);
    skpo_rec_set_float(&r, "rho_min", t->p.rho_min);
    skpo_rec_set_float(&r, "rho_max", t->p.rho_max);
    skpo_rec_set_float(&r, "tau", t->p.tau);
    skpo_rec_set_float(&r, "eps", t->p.eps);
    skpo_rec_set_float(&r, "len_init", t->p.len_init);
    skpo_rec_set_int(&r, "prompts", (int64_t)t->n);
    st = skpo_writer_put(w, &r, err);
    for (size_t i = 0; !st && i < t->n; i++) {
        put_entry(&r, &t->e[i]);
        st = skpo_writer_put(w, &r, err);
    }
    skpo_rec_free(&r);
    if (st) { skpo_writer_abort(w); return st; }
    return skpo_writer_close(w, err);
}

// Remove state files older than step keep_from (best effort: a leftover file
// costs disk, not correctness).
static void prune(const char *dir, int64_t keep_from) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        int64_t s = parse_state_name(de->d_name);
        if (s >= 0 && s < keep_from) {
            char *p = skpo_path_join(dir, de->d_name);
            if (unlink(p) != 0) skpo_warn("cannot remove old state '%s': %s", p, strerror(errno));
            free(p);
        }
    }
    closedir(d);
}

skpo_status skpo_tracker_save(skpo_tracker *t, const char *state_dir, skpo_err *err) {
    skpo_status st = skpo_mkdir_p(state_dir, err);
    if (st) return st;
    char *name = state_name(t->step), *path = skpo_path_join(state_dir, name);
    st = write_state(t, path, err);
    if (!st) {
        char *cur = skpo_path_join(state_dir, "CURRENT");
        size_t n = strlen(name);
        char *line = skpo_xmalloc(n + 2);
        memcpy(line, name, n);
        line[n] = '\n'; line[n + 1] = 0;
        st = skpo_write_file_atomic(cur, line, n + 1, err);
        free(line);
        free(cur);
    }
    if (!st) prune(state_dir, t->step - 1);
    free(path);
    free(name);
    return st;
}
