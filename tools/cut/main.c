/*
 * skpo-cut - cut responses at relative positions into segment records that
 * skpo-splice continues: the record filter behind the analyses of
 * docs/analyses.md (sign consistency on real rollouts, shortcut validation,
 * implicit advantage).
 *
 * Each `full` or `down` record (a response with `prompt` and `tokens`) is
 * replaced by one `up` record per position r in --at: the same record with
 * tokens (and logp) cut to the first floor(r * len) tokens, where len is the
 * response length, and these fields added:
 *   uid "<source uid>@<i>[/<label>]" (i = index of r in --at), rel = r,
 *   seg = segment length (int), src = source uid, src_gid = source gid,
 *   src_len = source length, src_correct / src_reward = the source's outcome
 *   (when it had one), label = --label (when given).
 * The source's text, reward, correct, pred, adv, weight, finish, cut, nll and
 * per-token side arrays other than logp are dropped: they describe the whole
 * response, not the segment. --empty writes segments of zero tokens (the
 * "Unconditional" baseline: the continuation sees q only) while keeping the
 * position fields. Every other record passes through unchanged, unless
 * --cuts-only: cutting skpo-splice output would otherwise hand its `up`
 * records to the next skpo-splice, which would continue them too.
 * Group modes (rl/groups.h), instead of --at: the sampling filters of the
 * pipelines over the `full` records of each prompt. --keep-informative N
 * (DAPO) drops the informative groups after the first N; --keep-accuracy N
 * with --accuracy LOW:HIGH (PRIME) keeps N groups, those with accuracy in
 * [LOW, HIGH] first; --count-informative prints the number of informative
 * groups (one line on stdout, as skpo-cat --count). They read the whole
 * input first (a group's records may be anywhere in it).
 * Not here: continuing the segments (skpo-splice --layout continual|skip).
 */
#include "base/cli.h"
#include "base/common.h"
#include "record/record.h"
#include "rl/groups.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MAX_AT 1024

static const char synopsis[] = "--at R1,R2,... [--label NAME] [--only-correct] [--empty] [--cuts-only] [FILE...]\n"
                               "       --keep-informative N | --keep-accuracy N --accuracy LOW:HIGH | --count-informative [FILE]";
static const char about[] =
    "Replaces each full/down response record by one `up` record per relative position R in [0, 1]:\n"
    "the response cut to its first floor(R * length) tokens, with rel, seg, src, src_gid, src_len and the\n"
    "source outcome added, ready for skpo-splice. Other records pass through. Reads FILEs or stdin.\n"
    "Group modes filter the `full` records of each prompt instead (rl/groups.h): --keep-informative N\n"
    "drops the groups with mixed outcomes after the first N (DAPO's dynamic sampling), --keep-accuracy N\n"
    "keeps N groups, those with mean `correct` in --accuracy LOW:HIGH first (PRIME), --count-informative\n"
    "prints how many groups have mixed outcomes. Other records pass through.";

typedef struct cut_cfg {
    double at[MAX_AT];
    int n_at;
    const char *label;
    int only_correct, empty, cuts_only;
} cut_cfg;

static int parse_at(const char *s, double *out) {
    int n = 0;
    char *copy = skpo_xstrdup(s), *save = NULL;
    for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (n == MAX_AT) skpo_cli_usage_error(synopsis, "--at: more than %d positions", MAX_AT);
        if (skpo_parse_double(tok, 0, 1, &out[n])) skpo_cli_usage_error(synopsis, "--at: '%s' is not a number in [0, 1]", tok);
        n++;
    }
    free(copy);
    if (n == 0) skpo_cli_usage_error(synopsis, "--at: no positions");
    return n;
}

// The source outcome: 1 correct, 0 wrong, -1 unknown.
static int outcome(const skpo_rec *r) {
    bool c;
    double rew;
    if (skpo_rec_bool(r, F_CORRECT, &c)) return c;
    if (skpo_rec_float(r, F_REWARD, &rew)) return rew > 0;
    return -1;
}

static const char *const dropped[] = {F_TEXT, F_REWARD, F_CORRECT, F_PRED, F_ADV, F_WEIGHT, F_FINISH,
                                      F_CUT, F_NLL, F_REF_LOGP, F_OLD_LOGP, NULL};

// Write the cuts of one response record r (read from `where`, record number k).
static void cut_one(const cut_cfg *c, const skpo_rec *r, const char *where, uint64_t k, skpo_writer *w) {
    const char *uid = skpo_rec_str(r, F_UID);
    size_t nt = 0, nq = 0, nl = 0;
    const int32_t *tok = skpo_rec_i32s(r, F_TOKENS, &nt);
    if (!uid) skpo_die("record %llu of %s: a response without a 'uid' string", (unsigned long long)k, where);
    if (!tok) skpo_die("response '%s' (%s): no 'tokens' int32 ids", uid, where);
    if (!skpo_rec_i32s(r, F_PROMPT, &nq) || nq == 0) skpo_die("response '%s' (%s): no 'prompt' token ids", uid, where);
    int ok = outcome(r);
    if (c->only_correct && ok < 0) skpo_die("response '%s' (%s): --only-correct needs 'correct' or 'reward' (run skpo-reward first)", uid, where);
    if (c->only_correct && ok != 1) return;
    const float *lp = skpo_rec_f32s(r, F_LOGP, &nl);
    if (lp && nl != nt) skpo_die("response '%s' (%s): 'logp' has %zu values for %zu tokens", uid, where, nl, nt);
    int32_t *t = skpo_xmalloc((nt + 1) * sizeof *t); // copies: the setters free the fields they replace
    float *l = skpo_xmalloc((nt + 1) * sizeof *l);
    memcpy(t, tok, nt * sizeof *t);
    if (lp && nl == nt) memcpy(l, lp, nt * sizeof *l);
    double rew;
    int has_rew = skpo_rec_float(r, F_REWARD, &rew);
    const char *gid = skpo_rec_str(r, F_GID);
    for (int i = 0; i < c->n_at; i++) {
        size_t seg = c->empty ? 0 : (size_t)floor(c->at[i] * (double)nt);
        skpo_rec o;
        skpo_rec_init(&o);
        skpo_rec_copy(&o, r);
        skpo_rec_set_str(&o, F_KIND, SKPO_KIND_UP);
        char id[1200];
        int len = c->label ? snprintf(id, sizeof id, "%s@%d/%s", uid, i, c->label) : snprintf(id, sizeof id, "%s@%d", uid, i);
        if (len < 0 || (size_t)len >= sizeof id) skpo_die("response '%s' (%s): uid with position and label too long", uid, where);
        skpo_rec_set_str(&o, F_UID, id);
        skpo_rec_set_i32s(&o, F_TOKENS, t, seg);
        if (lp && nl == nt) skpo_rec_set_f32s(&o, F_LOGP, l, seg);
        else skpo_rec_del(&o, F_LOGP);
        for (int d = 0; dropped[d]; d++) skpo_rec_del(&o, dropped[d]);
        skpo_rec_set_float(&o, "rel", c->at[i]);
        skpo_rec_set_int(&o, "seg", (int64_t)seg);
        skpo_rec_set_str(&o, "src", uid);
        skpo_rec_set_str(&o, "src_gid", gid ? gid : uid);
        skpo_rec_set_int(&o, "src_len", (int64_t)nt);
        if (ok >= 0) skpo_rec_set_bool(&o, "src_correct", ok);
        if (has_rew) skpo_rec_set_float(&o, "src_reward", rew);
        if (c->label) skpo_rec_set_str(&o, "label", c->label);
        skpo_err err = {{0}};
        if (skpo_writer_put(w, &o, &err)) skpo_die("%s", err.msg);
        skpo_rec_free(&o);
    }
    free(t);
    free(l);
}

static void run(const cut_cfg *c, const char *path, skpo_writer *w) {
    skpo_err err = {{0}};
    skpo_reader *rd;
    if (skpo_reader_open(path, &rd, &err)) skpo_die("%s", err.msg);
    skpo_rec r;
    skpo_rec_init(&r);
    skpo_status st;
    const char *on[] = {c->only_correct ? "only-correct" : NULL, NULL};
    while ((st = skpo_reader_next_needed(rd, &r, "skpo-cut", on, &err)) == SKPO_OK) {
        if (skpo_rec_is_kind(&r, SKPO_KIND_FULL) || skpo_rec_is_kind(&r, SKPO_KIND_DOWN))
            cut_one(c, &r, skpo_reader_name(rd), skpo_reader_count(rd), w);
        else if (!c->cuts_only && skpo_writer_put(w, &r, &err)) // meta records too: the provenance chain
            skpo_die("%s", err.msg);
        if (skpo_reader_count(rd) % SKPO_FLUSH_RECORDS == 0 && skpo_writer_flush(w, &err)) skpo_die("%s", err.msg);
    }
    if (st != SKPO_EOF) skpo_die("%s", err.msg);
    skpo_rec_free(&r);
    skpo_reader_close(rd);
}

// The group modes: --keep-informative, --keep-accuracy, --count-informative.
typedef struct group_cfg {
    long keep_informative, keep_accuracy;   // -1 = not given
    const char *accuracy;
    int count_informative;
} group_cfg;

static void parse_accuracy(const char *s, double *lo, double *hi) {
    const char *colon = s ? strchr(s, ':') : NULL;
    char a[64];
    if (!colon || (size_t)(colon - s) >= sizeof a) skpo_cli_usage_error(synopsis, "--accuracy: '%s' is not LOW:HIGH", s ? s : "");
    memcpy(a, s, (size_t)(colon - s));
    a[colon - s] = 0;
    if (skpo_parse_double(a, 0, 1, lo) || skpo_parse_double(colon + 1, 0, 1, hi) || *lo > *hi)
        skpo_cli_usage_error(synopsis, "--accuracy: '%s' is not LOW:HIGH with 0 <= LOW <= HIGH <= 1", s);
}

static int run_groups(const group_cfg *g, int npos, const char **pos, int argc, char **argv) {
    if (npos > 1) skpo_cli_usage_error(synopsis, "the group modes read one FILE (or stdin)");
    double lo = 0, hi = 1;
    if (g->keep_accuracy >= 0) parse_accuracy(g->accuracy, &lo, &hi);
    else if (g->accuracy) skpo_cli_usage_error(synopsis, "--accuracy goes with --keep-accuracy");
    skpo_err err = {{0}};
    skpo_rec *recs;
    size_t n;
    if (skpo_read_all(npos ? pos[0] : "-", &recs, &n, &err)) skpo_die("%s", err.msg);
    if (g->count_informative) {
        printf("%zu\n", skpo_groups_count_informative(recs, n));
    } else {
        unsigned char *keep = skpo_xmalloc(n + 1);
        if (g->keep_informative >= 0) skpo_groups_keep_informative(recs, n, (size_t)g->keep_informative, keep);
        else skpo_groups_keep_accuracy(recs, n, (size_t)g->keep_accuracy, lo, hi, keep);
        skpo_writer *w;
        if (skpo_writer_open_fd(1, 0, &w, &err) || skpo_writer_meta(w, argc, argv, NULL, &err)) skpo_die("%s", err.msg);
        for (size_t i = 0; i < n; i++)
            if (keep[i] && skpo_writer_put(w, &recs[i], &err)) skpo_die("%s", err.msg);
        if (skpo_writer_close(w, &err)) skpo_die("%s", err.msg);
        free(keep);
    }
    skpo_recs_free(recs, n);
    skpo_close_stdout_or_die();
    return SKPO_EXIT_OK;
}

int main(int argc, char **argv) {
    cut_cfg c = {0};
    group_cfg g = {.keep_informative = -1, .keep_accuracy = -1};
    const char *at = NULL;
    const skpo_opt opts[] = {
        SKPO_OPT_STR("at", 0, &at, "LIST", "relative cut positions in [0, 1], comma-separated"),
        SKPO_OPT_STR("label", 0, &c.label, "NAME", "set field `label` (method, layout) on every cut"),
        SKPO_OPT_FLAG("only-correct", 0, &c.only_correct, "cut only responses that are correct"),
        SKPO_OPT_FLAG("empty", 0, &c.empty, "zero-token segments (unconditional baseline)"),
        SKPO_OPT_FLAG("cuts-only", 0, &c.cuts_only, "drop every other record (e.g. the up records of splice output)"),
        SKPO_OPT_LONG("keep-informative", 0, &g.keep_informative, 0, 1e12, "N", "group mode: drop the groups with mixed outcomes after the first N"),
        SKPO_OPT_LONG("keep-accuracy", 0, &g.keep_accuracy, 0, 1e12, "N", "group mode: keep N groups, those in --accuracy first"),
        SKPO_OPT_STR("accuracy", 0, &g.accuracy, "LOW:HIGH", "--keep-accuracy: the preferred range of a group's mean `correct`"),
        SKPO_OPT_FLAG("count-informative", 0, &g.count_informative, "group mode: print how many groups have mixed outcomes"),
        {0},
    };
    const char **pos = skpo_xcalloc((size_t)argc, sizeof *pos);
    int npos = skpo_cli_parse(synopsis, about, opts, argc, argv, pos);
    int modes = (g.keep_informative >= 0) + (g.keep_accuracy >= 0) + g.count_informative;
    if (modes > 1 || (modes && at)) skpo_cli_usage_error(synopsis, "one of --at, --keep-informative, --keep-accuracy, --count-informative");
    if (modes) {
        int rc = run_groups(&g, npos, pos, argc, argv);
        free(pos);
        return rc;
    }
    if (!at) skpo_cli_usage_error(synopsis, "--at is required");
    c.n_at = parse_at(at, c.at);
    skpo_err err = {{0}};
    skpo_writer *w;
    if (skpo_writer_open_fd(1, 0, &w, &err) || skpo_writer_meta(w, argc, argv, NULL, &err)) skpo_die("%s", err.msg);
    if (npos == 0) run(&c, "-", w);
    for (int i = 0; i < npos; i++) run(&c, pos[i], w);
    if (skpo_writer_close(w, &err)) skpo_die("%s", err.msg);
    skpo_close_stdout_or_die();
    free(pos);
    return SKPO_EXIT_OK;
}
