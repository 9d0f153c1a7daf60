/*
 * view.c - `skpo-cat --view`: rollouts for a person. Records print as they
 * arrive (so it works at the end of a live pipeline); down records are
 * grouped under their up segment by gid, full records under a header per
 * group. When a group's records are not contiguous in the stream the group
 * header is repeated with "(continued)"; this view never reorders records.
 */
#include "cat.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

// Print text with every line indented; no trailing newline handling surprises.
static void put_text(FILE *out, const char *label, const char *s, const char *indent) {
    if (!s) return;
    fprintf(out, "%s%s:", indent, label);
    if (!strchr(s, '\n')) {
        fprintf(out, " %s\n", s);
        return;
    }
    fprintf(out, "\n%s  ", indent);
    for (const char *p = s; *p; p++) {
        fputc(*p, out);
        if (*p == '\n' && p[1]) fprintf(out, "%s  ", indent);
    }
    if (s[strlen(s) - 1] != '\n') fputc('\n', out);
}

static void put_num(FILE *out, const skpo_rec *r, const char *key, const char *label, bool sign) {
    double f;
    if (!skpo_rec_float(r, key, &f)) return;
    if (!isfinite(f)) fprintf(out, "  %s=%s", label, isnan(f) ? "NaN" : f > 0 ? "Infinity" : "-Infinity");
    else fprintf(out, sign ? "  %s=%+.4g" : "  %s=%.4g", label, f);
}

static void put_str(FILE *out, const skpo_rec *r, const char *key, const char *label) {
    const char *s = skpo_rec_str(r, key);
    if (s) fprintf(out, "  %s=%s", label, s);
}

static void put_len(FILE *out, const skpo_rec *r, const char *key, const char *label) {
    size_t n;
    if (skpo_rec_i32s(r, key, &n)) fprintf(out, "  %s=%zu", label, n);
}

// The one-line summary every rollout record gets, then its texts.
static void rollout(FILE *out, const skpo_rec *r, const char *indent, bool with_problem) {
    const char *kind = skpo_rec_str(r, F_KIND);
    fprintf(out, "%s%s %s", indent, *indent ? "--" : "==", kind ? kind : "?");
    put_str(out, r, F_UID, "uid");
    if (!*indent) put_str(out, r, F_PID, "pid");
    int64_t i;
    if (!*indent && skpo_rec_int(r, F_STEP, &i)) fprintf(out, "  step=%lld", (long long)i);
    put_num(out, r, F_REWARD, "reward", true);
    put_num(out, r, F_ADV, "adv", true);
    put_len(out, r, F_PROMPT, "prompt_len");
    put_len(out, r, F_TOKENS, "len");
    if (skpo_rec_int(r, F_CUT, &i)) fprintf(out, "  cut=%lld", (long long)i);
    put_num(out, r, F_NLL, "nll", false);
    put_str(out, r, F_FINISH, "finish");
    put_str(out, r, F_PRED, "pred");
    fputc('\n', out);
    char in2[16];
    snprintf(in2, sizeof in2, "%s   ", indent);
    if (with_problem) {
        put_text(out, "problem", skpo_rec_str(r, F_PROBLEM), in2);
        put_text(out, "answer", skpo_rec_str(r, F_ANSWER), in2);
    }
    put_text(out, "text", skpo_rec_str(r, F_TEXT), in2);
}

static bool seen_up(const cat_view *v, const char *uid) {
    for (size_t i = v->nups; i-- > 0;)
        if (!strcmp(v->ups[i], uid)) return true;
    return false;
}

static void set_group(cat_view *v, const char *gid) {
    free(v->group);
    v->group = gid ? skpo_xstrdup(gid) : NULL;
}

// Records of the kinds a person reads as text; anything else as one JSON line.
static void other(cat_view *v, const skpo_rec *r, FILE *out) {
    const char *kind = skpo_rec_str(r, F_KIND);
    v->tmp.n = 0;
    skpo_rec_to_json(r, NULL, 0, &v->tmp);
    fprintf(out, "# %s %s\n", kind ? kind : "(no kind)", skpo_jbuf_cstr(&v->tmp));
}

void cat_view_put(cat_view *v, const skpo_rec *r, FILE *out) {
    const char *gid = skpo_rec_str(r, F_GID), *uid = skpo_rec_str(r, F_UID);
    if (skpo_rec_is_kind(r, SKPO_KIND_UP)) {
        fputc('\n', out);
        rollout(out, r, "", true);
        set_group(v, uid);
        if (uid) {
            skpo_xgrow((void **)&v->ups, &v->cap, v->nups + 1, sizeof *v->ups);
            v->ups[v->nups++] = skpo_xstrdup(uid);
        }
    } else if (skpo_rec_is_kind(r, SKPO_KIND_DOWN) || skpo_rec_is_kind(r, SKPO_KIND_FULL)) {
        bool down = skpo_rec_is_kind(r, SKPO_KIND_DOWN);
        if (!gid || !v->group || strcmp(gid, v->group)) {
            fprintf(out, "\n== group %s", gid ? gid : "(no gid)");
            if (down && gid) fputs(seen_up(v, gid) ? " (continued)" : " (its up segment is not in this stream)", out);
            fputc('\n', out);
            if (!down) {
                put_text(out, "problem", skpo_rec_str(r, F_PROBLEM), "   ");
                put_text(out, "answer", skpo_rec_str(r, F_ANSWER), "   ");
            }
            set_group(v, gid);
        }
        rollout(out, r, "   ", false);
    } else if (skpo_rec_is_kind(r, SKPO_KIND_PROMPT)) {
        fputc('\n', out);
        rollout(out, r, "", true);
        set_group(v, NULL);
    } else {
        other(v, r, out);
    }
}

void cat_view_free(cat_view *v) {
    for (size_t i = 0; i < v->nups; i++) free(v->ups[i]);
    free(v->ups);
    free(v->group);
    skpo_jbuf_free(&v->tmp);
    memset(v, 0, sizeof *v);
}
