/*
 * read.c - gather rewarded down records into prefixes, keyed by gid (the
 * segment's uid), in order of first appearance. Input order between
 * segments does not matter; within a segment the continuations keep theirs.
 */
#include "analyze.h"

#include <stdlib.h>
#include <string.h>

// Segments are keyed by label and gid: the same response cut for several
// layouts or methods gives the same segment uids under different labels.
static prefix *prefix_of(prefixes *ps, const skpo_rec *r, const char *gid, const char *where) {
    const char *label = skpo_rec_str(r, "label");
    label = label && *label ? label : "-";
    char key[2048];
    if ((size_t)snprintf(key, sizeof key, "%s\x1f%s", label, gid) >= sizeof key)
        skpo_die("down record (%s): label and gid longer than %zu bytes", where, sizeof key);
    const size_t *i = skpo_strmap_get(&ps->by_gid, key);
    if (i) return &ps->p[*i];
    double rel;
    if (!skpo_rec_float(r, "rel", &rel))
        skpo_die("down record of segment '%s' (%s) has no 'rel': cut the responses with skpo-cut before skpo-splice",
                 gid, where);
    if (!(rel >= 0 && rel <= 1)) skpo_die("down record of segment '%s' (%s): 'rel' is %g, not a cut position in [0, 1]", gid, where, rel);
    skpo_xgrow((void **)&ps->p, &ps->cap, ps->n + 1, sizeof *ps->p);
    prefix *p = &ps->p[ps->n];
    memset(p, 0, sizeof *p);
    const char *pid = skpo_rec_str(r, F_PID), *sg = skpo_rec_str(r, "src_gid");
    p->gid = skpo_xstrdup(gid);
    p->pid = skpo_xstrdup(pid ? pid : "?");
    p->label = skpo_xstrdup(label);
    p->src_gid = skpo_xstrdup(sg ? sg : p->pid);
    p->rel = rel;
    bool c;
    p->src_ok = skpo_rec_bool(r, "src_correct", &c) ? c : -1;
    if (!skpo_rec_int(r, "seg", &p->seg)) p->seg = -1;
    skpo_strmap_add(&ps->by_gid, key, ps->n, NULL);
    ps->n++;
    return p;
}

static skpo_status add_down(const skpo_rec *r, const char *where, void *ctx, skpo_err *err) {
    prefixes *ps = ctx;
    const char *gid = skpo_rec_str(r, F_GID), *uid = skpo_rec_str(r, F_UID), *pred = skpo_rec_str(r, F_PRED);
    if (!gid) skpo_die("down record '%s' (%s) has no 'gid'", uid ? uid : "?", where);
    bool c;
    double rew;
    if (!skpo_rec_bool(r, F_CORRECT, &c)) {
        if (!skpo_rec_float(r, F_REWARD, &rew))
            skpo_die("down record '%s' (%s) has neither 'correct' nor 'reward' (run skpo-reward first)",
                     uid ? uid : gid, where);
        c = rew > 0;
    }
    prefix *p = prefix_of(ps, r, gid, where);
    if (p->n == p->cap) {
        p->cap = p->cap ? 2 * p->cap : 8;
        p->ok = skpo_xrealloc(p->ok, (size_t)p->cap * sizeof *p->ok);
        p->pred = skpo_xrealloc(p->pred, (size_t)p->cap * sizeof *p->pred);
        p->len = skpo_xrealloc(p->len, (size_t)p->cap * sizeof *p->len);
    }
    size_t nt = 0;
    if (!skpo_rec_i32s(r, F_TOKENS, &nt)) nt = 0;
    p->ok[p->n] = c;
    p->pred[p->n] = pred ? skpo_xstrdup(pred) : NULL;
    p->len[p->n] = (int64_t)nt;
    p->n++;
    return SKPO_OK;
}

void prefixes_read(prefixes *ps, const char *path) {
    skpo_err err = {{0}};
    if (skpo_read_each_needed(path, SKPO_KIND_DOWN, "skpo-analyze", NULL, add_down, ps, &err)) skpo_die("%s", err.msg);
}

void prefixes_free(prefixes *ps) {
    for (size_t i = 0; i < ps->n; i++) {
        prefix *p = &ps->p[i];
        for (int j = 0; j < p->n; j++) free(p->pred[j]);
        free(p->gid); free(p->pid); free(p->label); free(p->src_gid);
        free(p->ok); free(p->pred); free(p->len);
    }
    free(ps->p);
    skpo_strmap_free(&ps->by_gid);
    memset(ps, 0, sizeof *ps);
}
