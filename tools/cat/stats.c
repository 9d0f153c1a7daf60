/*
 * stats.c - `skpo-cat --stats`: one table row per record kind (in order of
 * first appearance) and a total row: record count, mean reward, response
 * length percentiles (p50/p90/max of the `tokens` count, nearest rank) and
 * advantage mean/std (population std, Welford). Non-finite rewards or
 * advantages are counted apart, never averaged in.
 */
#include "cat.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static cat_kstats *kind_slot(cat_stats *s, const char *kind) {
    for (size_t i = 0; i < s->n; i++)
        if (!strcmp(s->k[i].kind, kind)) return &s->k[i];
    skpo_xgrow((void **)&s->k, &s->cap, s->n + 1, sizeof *s->k);
    cat_kstats *k = &s->k[s->n++];
    memset(k, 0, sizeof *k);
    k->kind = skpo_xstrdup(kind);
    return k;
}

static void add_adv(cat_kstats *k, double a) {
    k->nadv++;
    double d = a - k->adv_mean;
    k->adv_mean += d / (double)k->nadv;
    k->adv_m2 += d * (a - k->adv_mean);
}

void cat_stats_add(cat_stats *s, const skpo_rec *r) {
    const char *kind = skpo_rec_str(r, F_KIND);
    cat_kstats *k = kind_slot(s, kind ? kind : "(none)");
    k->n++;
    double f;
    if (skpo_rec_float(r, F_REWARD, &f)) {
        if (isfinite(f)) { k->nreward++; k->reward_sum += f; }
        else k->nonfinite++;
    }
    if (skpo_rec_float(r, F_ADV, &f)) {
        if (isfinite(f)) add_adv(k, f);
        else k->nonfinite++;
    }
    size_t n;
    if (skpo_rec_i32s(r, F_TOKENS, &n)) {
        skpo_xgrow((void **)&k->len, &k->cap, k->nlen + 1, sizeof *k->len);
        k->len[k->nlen++] = n > UINT32_MAX ? UINT32_MAX : (uint32_t)n;
    }
}

static int cmp_u32(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

// Nearest-rank percentile of sorted v.
static uint32_t pct(const uint32_t *v, size_t n, double p) {
    size_t rank = (size_t)ceil(p * (double)n);
    return v[rank ? rank - 1 : 0];
}

static void row(FILE *out, cat_kstats *k) {
    fprintf(out, "%-10s %9llu", k->kind, (unsigned long long)k->n);
    if (k->nreward) fprintf(out, " %9.4f %8llu", k->reward_sum / (double)k->nreward, (unsigned long long)k->nreward);
    else fprintf(out, " %9s %8s", "-", "0");
    if (k->nlen) {
        qsort(k->len, k->nlen, sizeof *k->len, cmp_u32);
        fprintf(out, " %7u %7u %7u", pct(k->len, k->nlen, 0.5), pct(k->len, k->nlen, 0.9), k->len[k->nlen - 1]);
    } else {
        fprintf(out, " %7s %7s %7s", "-", "-", "-");
    }
    if (k->nadv) fprintf(out, " %9.4f %9.4f", k->adv_mean, sqrt(k->adv_m2 / (double)k->nadv));
    else fprintf(out, " %9s %9s", "-", "-");
    if (k->nonfinite) fprintf(out, "  (%llu non-finite reward/adv values left out)", (unsigned long long)k->nonfinite);
    fputc('\n', out);
}

void cat_stats_print(cat_stats *s, FILE *out) {
    fprintf(out, "%-10s %9s %9s %8s %7s %7s %7s %9s %9s\n", "kind", "records", "reward", "rewarded", "len_p50",
            "len_p90", "len_max", "adv_mean", "adv_std");
    cat_kstats all = {.kind = "all"};
    for (size_t i = 0; i < s->n; i++) {
        cat_kstats *k = &s->k[i];
        row(out, k);
        all.n += k->n;
        all.nreward += k->nreward;
        all.reward_sum += k->reward_sum;
        all.nonfinite += k->nonfinite;
        if (k->nadv) { // merge Welford states (Chan et al.)
            double n = (double)(all.nadv + k->nadv), d = k->adv_mean - all.adv_mean;
            all.adv_m2 += k->adv_m2 + d * d * (double)all.nadv * (double)k->nadv / n;
            all.adv_mean += d * (double)k->nadv / n;
            all.nadv += k->nadv;
        }
        skpo_xgrow((void **)&all.len, &all.cap, all.nlen + k->nlen, sizeof *all.len);
        if (k->nlen) memcpy(all.len + all.nlen, k->len, k->nlen * sizeof *k->len);
        all.nlen += k->nlen;
    }
    row(out, &all);
    free(all.len);
}

void cat_stats_free(cat_stats *s) {
    for (size_t i = 0; i < s->n; i++) {
        free(s->k[i].kind);
        free(s->k[i].len);
    }
    free(s->k);
    memset(s, 0, sizeof *s);
}
