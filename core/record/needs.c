/*
 * needs.c - the table of what each tool needs from the records it consumes,
 * and the one check every consuming tool runs on each record (record.h).
 *
 * Why a table and not checks spread over the tools: the test
 * (tests/sh/t_needs.sh) and docs/reliability.md are generated from it, so a
 * field added here is refused when missing, tested and documented at once; a
 * tool that forgets to call the check fails its generated cases.
 */
#include "record/record.h"

#include <stdio.h>
#include <string.h>

// Rows: tool, condition (NULL: always), the options that make it hold in a
// plain run ("" = the defaults), kinds, fields, and a note for the docs.
// Fields: "name+" must also be non-empty; "a|b" is satisfied by either.
const skpo_need skpo_needs[] = {
    {"skpo-sample", NULL, NULL, "prompt", "pid+ prompt+", NULL},
    {"skpo-splice", NULL, NULL, "up", "uid+ prompt+ tokens", NULL},
    {"skpo-score", NULL, NULL, "up down full self", "prompt+ tokens", NULL},
    {"skpo-reward", NULL, NULL, "down full self", "text", NULL},
    {"skpo-reward", "answer", "", "down full self", "answer+", "math and choice tasks (every record not judged as code)"},
    {"skpo-reward", "code", "--task code", "down full self", "tests", "code task (--task code, or task=code on the record)"},
    {"skpo-reward", "overlong", "--overlong 8:4", "down full self", "tokens", NULL},
    {"skpo-advantage", "skpo", "--mode skpo", "up", "uid+ pid+ tokens", NULL},
    {"skpo-advantage", "skpo", "--mode skpo", "down", "gid+ reward tokens", NULL},
    {"skpo-advantage", "self", "--mode skpo --reward-up self", "self", "gid+ reward", NULL},
    {"skpo-advantage", "full", "--mode grpo", "full", "pid+ reward tokens", "every mode but skpo (grpo, drgrpo, dapo, spo, prime)"},
    {"skpo-advantage", "prime", "--mode prime", "full", "correct ref_logp prm_logp", NULL},
    {"skpo-update", NULL, NULL, "up down full", "prompt+ tokens", NULL},
    {"skpo-update", "adv", "", "up down full", "adv|adv_tok", "every policy loss (not --loss sft, not prm-ce)"},
    {"skpo-update", "logp", "", "up down full", "logp",
     "the rollout-mismatch correction (default tis) or --old-logp rollout; not refine records"},
    {"skpo-update", "kl", "--kl-coef 0.1", "up down full", "ref_logp", NULL},
    {"skpo-update", "old", "--old-logp field", "up down full", "old_logp", NULL},
    {"skpo-update", "prm", "--full-loss prm-ce", "full", "correct ref_logp", NULL},
    {"skpo-eval", NULL, NULL, "full", "pid+ correct|reward", NULL},
    {"skpo-critique", "critique", "critique", "full", "pid+ uid+ reward problem text", NULL},
    {"skpo-critique", "with-answer", "critique --with-answer", "full", "answer", NULL},
    {"skpo-critique", "refine", "refine", "full", "critique_of+ text", NULL},
    {"skpo-critique", "attach", "attach", "full", "critique_of+ tokens", NULL},
    {"skpo-cut", NULL, NULL, "full down", "uid+ prompt+ tokens", NULL},
    {"skpo-cut", "only-correct", "--only-correct", "full down", "correct|reward", NULL},
    {"skpo-analyze", NULL, NULL, "down", "gid+ correct|reward rel tokens", NULL},
    {NULL, NULL, NULL, NULL, NULL, NULL},
};

// The stage that writes a field, named when it is missing.
static const struct { const char *field, *hint; } hints[] = {
    {F_REWARD, "; run skpo-reward first"},
    {F_CORRECT, "; run skpo-reward first"},
    {F_ADV, "; run skpo-advantage first"},
    {F_REF_LOGP, "; add it with skpo-score --field ref_logp"},
    {F_OLD_LOGP, "; add it with skpo-score --field old_logp"},
    {F_PRM_LOGP, "; add it with skpo-score --field prm_logp"},
    {F_TESTS, "; prepare LiveCodeBench rows with skpo-prep"},
    {F_CRITIQUE_OF, "; not a record from skpo-critique"},
    {"rel", "; cut the responses with skpo-cut before skpo-splice"},
    {NULL, NULL},
};

static const char *hint_of(const char *f, size_t n) {
    for (int i = 0; hints[i].field; i++)
        if (strlen(hints[i].field) == n && !memcmp(hints[i].field, f, n)) return hints[i].hint;
    return "";
}

// Is the space-separated word w (length n) in list?
static bool in_list(const char *list, const char *w, size_t n) {
    for (const char *p = list; *p;) {
        while (*p == ' ') p++;
        size_t k = strcspn(p, " ");
        if (k == n && !memcmp(p, w, n)) return true;
        p += k;
    }
    return false;
}

static bool cond_on(const char *cond, const char *const *on) {
    if (!cond) return true;
    for (; on && *on; on++)
        if (!strcmp(*on, cond)) return true;
    return false;
}

// Is field name (length n) present, not nil, and (nonempty) not empty?
static int field_state(const skpo_rec *r, const char *name, size_t n, bool nonempty) {
    char key[64];
    if (n >= sizeof key) return 0;
    memcpy(key, name, n);
    key[n] = 0;
    const skpo_value *v = skpo_rec_get(r, key);
    if (!v) return 0;                   // absent
    if (v->type == SKPO_V_NIL) return 1; // nil
    if (nonempty && (v->type == SKPO_V_STR || v->type == SKPO_V_BIN) && v->len == 0) return 2;
    return 3;
}

skpo_status skpo_rec_check_needs(const skpo_rec *r, const char *tool, const char *const *on, const char *name,
                                 uint64_t index, skpo_err *err) {
    const char *kind = skpo_rec_str(r, F_KIND);
    if (!kind) return SKPO_OK;
    const char *uid = skpo_rec_str(r, F_UID);
    if (!uid) uid = skpo_rec_str(r, F_PID); // prompt records have no uid
    char who[160];
    if (uid) snprintf(who, sizeof who, "%s record '%.100s'", kind, uid);
    else snprintf(who, sizeof who, "%s record", kind);
    for (const skpo_need *d = skpo_needs; d->tool; d++) {
        if (strcmp(d->tool, tool) || !cond_on(d->cond, on) || !in_list(d->kinds, kind, strlen(kind))) continue;
        for (const char *p = d->fields; *p;) {
            while (*p == ' ') p++;
            size_t k = strcspn(p, " ");
            if (!k) break;
            bool plus = p[k - 1] == '+';
            size_t alt = strcspn(p, "|");
            if (alt < k) { // "a|b": either will do
                const char *h = hint_of(p + alt + 1, k - alt - 1);
                if (field_state(r, p, alt, false) != 3 && field_state(r, p + alt + 1, k - alt - 1, false) != 3)
                    return skpo_err_set(err, SKPO_ENOTFOUND, "%s has neither '%.*s' nor '%.*s' (in '%s' at record %llu%s)",
                                        who, (int)alt, p, (int)(k - alt - 1), p + alt + 1, name, (unsigned long long)index,
                                        *h ? h : hint_of(p, alt));
            } else {
                size_t fl = k - plus;
                int st = field_state(r, p, fl, plus);
                const char *h = hint_of(p, fl);
                if (st == 0)
                    return skpo_err_set(err, SKPO_ENOTFOUND, "%s has no '%.*s' (in '%s' at record %llu%s)", who, (int)fl, p,
                                        name, (unsigned long long)index, h);
                if (st == 1)
                    return skpo_err_set(err, SKPO_ENOTFOUND, "%s: field '%.*s' is nil (in '%s' at record %llu%s)", who,
                                        (int)fl, p, name, (unsigned long long)index, h);
                if (st == 2)
                    return skpo_err_set(err, SKPO_ENOTFOUND, "%s: field '%.*s' is empty (in '%s' at record %llu)", who,
                                        (int)fl, p, name, (unsigned long long)index);
            }
            p += k;
        }
    }
    return SKPO_OK;
}

skpo_status skpo_reader_next_needed(skpo_reader *rd, skpo_rec *r, const char *tool, const char *const *on,
                                    skpo_err *err) {
    skpo_status st = skpo_reader_next(rd, r, err);
    if (st) return st;
    return skpo_rec_check_needs(r, tool, on, skpo_reader_name(rd), skpo_reader_count(rd), err);
}

skpo_status skpo_read_each_needed(const char *path, const char *kind, const char *tool, const char *const *on,
                                  skpo_rec_fn fn, void *ctx, skpo_err *err) {
    skpo_reader *rd;
    skpo_status st = skpo_reader_open(path, &rd, err);
    if (st) return st;
    skpo_rec r;
    skpo_rec_init(&r);
    while ((st = skpo_reader_next_needed(rd, &r, tool, on, err)) == SKPO_OK)
        if ((!kind || skpo_rec_is_kind(&r, kind)) && (st = fn(&r, skpo_reader_name(rd), ctx, err))) break;
    skpo_rec_free(&r);
    skpo_reader_close(rd);
    return st == SKPO_EOF ? SKPO_OK : st;
}
