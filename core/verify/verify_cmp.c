/*
 * verify_cmp.c - deciding whether a predicted answer tree equals the gold one.
 *
 * Numbers: exact rationals when both sides have them; otherwise complex double
 * evaluation with a relative tolerance of 1e-9. Decimal conventions (from the
 * verifier case set): a decimal approximation of an exact value is wrong unless
 * it carries >= 10 significant digits; a decimal gold accepts an exact value
 * that rounds to it, unless that value has a short exact decimal of its own.
 * Expressions with variables: evaluated at deterministic points (positive and
 * negative; points where a side leaves the reals are skipped on the negative
 * ones). Structures: tuples and intervals keep order and brackets, sets and
 * answer lists match as multisets (\pm expands to both values), equations
 * compare right-hand sides under a named left side or as proportional
 * "lhs - rhs" forms, inequalities as positive multiples or as interval sets.
 */
#include "verify/verify_impl.h"

#include <math.h>
#include <string.h>

#define MAXITEMS 64
#define VARIANT 0x80000000u // mask bit: this item is one expanded \pm variant

static bool cmp(vctx *c, int g, unsigned gm, int p, unsigned pm, int depth);

static vnode *N(vctx *c, int id) { return &c->nodes[id]; }
static int kid(const vctx *c, int id, int i) { return c->kids[c->nodes[id].kid + i]; }

static int new_node(vctx *c, int kind, int a, int b) {
    if (c->nk + 2 > VMAX_KIDS) return -1;
    int id = vnode_new(c, kind);
    if (id < 0) return -1;
    vnode *n = N(c, id);
    n->kid = c->nk;
    n->n = b > 0 ? 2 : 1;
    c->kids[c->nk++] = a;
    if (b > 0) c->kids[c->nk++] = b;
    return id;
}

static int new_num(vctx *c, long v) {
    int id = vnode_new(c, VN_NUM);
    if (id < 0) return -1;
    N(c, id)->q = (vrat){v, 1};
    N(c, id)->d = (double)v;
    N(c, id)->flags = NF_EXACT | NF_INTLIT;
    return id;
}

// --- numbers ---------------------------------------------------------------------------

static bool approx_eq(double complex x, double complex y, double tol) {
    if (isinf(creal(x)) || isinf(creal(y))) return creal(x) == creal(y) && cimag(x) == 0 && cimag(y) == 0;
    double s = fmax(1.0, fmax(cabs(x), cabs(y)));
    return cabs(x - y) <= tol * s;
}

// A decimal literal, possibly negated: its node, else 0.
static int decimal_literal(const vctx *c, int id) {
    if (id <= 0) return 0;
    if (c->nodes[id].kind == VN_NEG) id = kid(c, id, 0);
    if (c->nodes[id].kind == VN_NUM && (c->nodes[id].flags & NF_DECIMAL)) return id;
    return 0;
}

static bool terminates(vrat q) {
    i128 d = q.d;
    while (d % 2 == 0) d /= 2;
    while (d % 5 == 0) d /= 5;
    return d == 1;
}

// Gold decimal with ndec places vs a pred value x that is not itself decimal.
static bool rounds_to(double gold, int ndec, double x) {
    double h = 0.5 * pow(10.0, -ndec);
    return fabs(x - gold) <= h * (1 + 1e-9) + 1e-15 * fabs(gold);
}

// A predicted decimal with >= 10 significant digits that is the exact value x
// rounded or truncated at its last digit (0.0833333333333333 for 1/12).
static bool long_decimal_of(double x, const vnode *lit, double y) {
    if (lit->sig < 10) return false;
    double ulp = pow(10.0, -lit->ndec), noise = 1e-15 * fabs(x);
    if (fabs(x - y) <= 0.5 * ulp * (1 + 1e-9) + noise) return true;
    double d = fabs(x) - fabs(y);
    return (x >= 0) == (y >= 0) && d >= -noise && d < ulp;
}

static bool huge_int_literal(const vctx *c, int id) {
    if (c->nodes[id].kind == VN_NEG) id = kid(c, id, 0);
    return c->nodes[id].kind == VN_NUM && (c->nodes[id].flags & NF_INTLIT) && !(c->nodes[id].flags & NF_EXACT);
}

static bool numeric_eq(vctx *c, int g, unsigned gm, int p, unsigned pm) {
    vrat a, b;
    // integers beyond 2^125 have no exact value here: a double would call
    // 2^200 and 2^200 + 1 equal, so only the identical string (canon) matches
    bool pmfree = vcount_pm(c, g, 0) == 0 && vcount_pm(c, p, 0) == 0;
    int gl = decimal_literal(c, g), pl = decimal_literal(c, p);
    bool gd = vhas_decimal(c, g, 0), pd = vhas_decimal(c, p, 0);
    if (pmfree) { // exact rationals of any size (GMP): equal is equal; unequal decides without decimals
        int v = vbig_exact(c, g, p);
        if (v == 1) return true;
        if (v == 0 && !gd && !pd) return false;
    }
    if (huge_int_literal(c, g) || huge_int_literal(c, p)) return false;
    if (pmfree && veval_exact(c, g, NULL, &a, 0) && veval_exact(c, p, NULL, &b, 0)) {
        if (a.n == b.n && a.d == b.d) return true;
        if (gl && !pd && !terminates(b)) return rounds_to(vrat_to_double(a), N(c, gl)->ndec, vrat_to_double(b));
        if (pl && !gd) return long_decimal_of(vrat_to_double(a), N(c, pl), vrat_to_double(b));
        return false;
    }
    vpoint P = {.pm = gm};
    double complex x = veval(c, g, &P, 0);
    P.pm = pm; P.pmi = 0;
    double complex y = veval(c, p, &P, 0);
    if (isnan(creal(x)) || isnan(creal(y)) || isnan(cimag(x)) || isnan(cimag(y))) return false;
    if (gl && !pd) return cimag(y) == 0 ? rounds_to(creal(x), N(c, gl)->ndec, creal(y)) : false;
    if (pd && !gd) return pl && cimag(x) == 0 && cimag(y) == 0 && long_decimal_of(creal(x), N(c, pl), creal(y));
    if (pmfree) { // real values at 256 bits (MPFR) decide what doubles only approximate
        int v = vbig_real(c, g, p);
        if (v >= 0) return v == 1;
    }
    return approx_eq(x, y, 1e-9);
}

// Symbolic comparison at deterministic points. Point k: variable j gets a
// value from a fixed LCG; the last two points are negative.
static bool symbolic_eq(vctx *c, int g, unsigned gm, int p, unsigned pm) {
    if (vcount_pm(c, g, 0) == 0 && vcount_pm(c, p, 0) == 0) { // rational functions: exact (FLINT)
        int v = vbig_poly(c, g, p);
        if (v >= 0) return v == 1;
    }
    uint64_t s = 0x9E3779B97F4A7C15ull;
    int compared = 0;
    for (int k = 0; k < 8; k++) {
        vpoint P;
        memset(&P, 0, sizeof P);
        for (int j = 0; j < VMAX_VARS; j++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            double u = (double)(s >> 11) / 9007199254740992.0;
            P.v[j] = (k < 6 ? 0.35 + 2.4 * u : -(0.35 + 2.4 * u));
        }
        P.pm = gm;
        double complex x = veval(c, g, &P, 0);
        P.pm = pm; P.pmi = 0;
        double complex y = veval(c, p, &P, 0);
        bool xn = isnan(creal(x)) || isnan(cimag(x)), yn = isnan(creal(y)) || isnan(cimag(y));
        if (xn || yn) { if (xn != yn && k < 6) return false; continue; }
        if (k >= 6 && (fabs(cimag(x)) > 1e-9 * (1 + cabs(x)) || fabs(cimag(y)) > 1e-9 * (1 + cabs(y)))) continue;
        if (!approx_eq(x, y, 1e-8)) return false;
        compared++;
    }
    return compared >= 3;
}

static bool scalar_eq(vctx *c, int g, unsigned gm, int p, unsigned pm) {
    if (vhas_vars(c, g, 0) || vhas_vars(c, p, 0)) return symbolic_eq(c, g, gm, p, pm);
    return numeric_eq(c, g, gm, p, pm);
}

// --- names and relations ------------------------------------------------------------------

static bool is_name(const vctx *c, int id) {
    const vnode *n = &c->nodes[id];
    if (n->kind == VN_VAR) return true;
    if (n->kind == VN_MUL || (n->kind == VN_BRACKET && n->op == '(')) {
        for (int i = 0; i < n->n; i++) if (!is_name(c, kid(c, id, i))) return false;
        return n->n > 0;
    }
    return false;
}

// The left side of a labelled value: a name, a function value f(2), |AB|, A_{\max},
// m\angle ABC, S_1 : S_2 -- something with a variable and no arithmetic.
static bool is_label(const vctx *c, int id, int depth) {
    const vnode *n = &c->nodes[id];
    if (depth > 8) return false;
    if (n->kind == VN_VAR) return true;
    if (n->kind == VN_FUNC && n->op == VF_ABS) return is_label(c, kid(c, id, 0), depth + 1);
    if (n->kind == VN_RATIO) {
        for (int i = 0; i < n->n; i++) if (!is_label(c, kid(c, id, i), depth + 1)) return false;
        return true;
    }
    if (n->kind == VN_MUL) {
        bool var = false;
        for (int i = 0; i < n->n; i++) {
            const vnode *k = &c->nodes[kid(c, id, i)];
            if (i > 0 && var && ((k->kind == VN_BRACKET && k->op == '(') || k->kind == VN_NUM)) continue; // f(2)
            if (!is_label(c, kid(c, id, i), depth + 1)) return false;
            var = true;
        }
        return var;
    }
    return false;
}

static bool same_tree(const vctx *c, int a, int b) {
    const vnode *x = &c->nodes[a], *y = &c->nodes[b];
    if (x->kind != y->kind || x->n != y->n || x->op != y->op) return false;
    if (x->kind == VN_VAR) return x->aux == y->aux;
    for (int i = 0; i < x->n; i++) if (!same_tree(c, kid(c, a, i), kid(c, b, i))) return false;
    return true;
}

static uint8_t rel_op(const vctx *c, int id, int i) { return c->ops[c->nodes[id].aux + i]; }
static bool is_ineq(int op) { return op == VR_LT || op == VR_LE || op == VR_GT || op == VR_GE; }

// f = lhs - rhs for "f op 0", oriented so the relation reads f > 0 / f >= 0.
static int rel_form(vctx *c, int r, bool *strict) {
    int op = rel_op(c, r, 0), l = kid(c, r, 0), rr = kid(c, r, 1);
    *strict = op == VR_LT || op == VR_GT;
    int neg = new_node(c, VN_NEG, (op == VR_LT || op == VR_LE) ? l : rr, 0);
    return new_node(c, VN_ADD, (op == VR_LT || op == VR_LE) ? rr : l, neg);
}

// f1 = k f2 at every point (k > 0 if positive): the same equation/inequality.
static bool proportional(vctx *c, int f1, int f2, bool positive) {
    if (f1 < 0 || f2 < 0 || (!vhas_vars(c, f1, 0) && !vhas_vars(c, f2, 0))) return false;
    uint64_t s = 0x2545F4914F6CDD1Dull;
    double complex k0 = 0;
    int n = 0;
    for (int k = 0; k < 8; k++) {
        vpoint P;
        memset(&P, 0, sizeof P);
        for (int j = 0; j < VMAX_VARS; j++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            P.v[j] = (k % 2 ? -1 : 1) * (0.35 + 2.4 * (double)(s >> 11) / 9007199254740992.0);
        }
        double complex a = veval(c, f1, &P, 0);
        P.pmi = 0;
        double complex b = veval(c, f2, &P, 0);
        if (isnan(creal(a)) || isnan(creal(b)) || isnan(cimag(a)) || isnan(cimag(b))) continue;
        bool az = cabs(a) < 1e-12, bz = cabs(b) < 1e-12;
        if (az && bz) continue;
        if (az != bz) return false;
        double complex r = a / b;
        if (n == 0) k0 = r;
        else if (!approx_eq(r, k0, 1e-8)) return false;
        n++;
    }
    if (n < 3) return false;
    return !positive || (creal(k0) > 0 && fabs(cimag(k0)) < 1e-9);
}

// --- intervals ----------------------------------------------------------------------------

typedef struct ivl { int lo, hi; bool lc, hc; } ivl;

static int inf_node(vctx *c, bool neg) {
    int id = vnode_new(c, VN_CONST);
    if (id < 0) return -1;
    N(c, id)->op = VC_INF;
    return neg ? new_node(c, VN_NEG, id, 0) : id;
}

static int push(ivl *out, int n, int cap, int lo, int hi, bool lc, bool hc) {
    if (n < 0 || n >= cap || lo < 0 || hi < 0) return -1;
    out[n] = (ivl){lo, hi, lc, hc};
    return n + 1;
}

// x op a for a variable side x: append the solution set.
static int ray(vctx *c, ivl *out, int n, int cap, int op, int a, bool var_left) {
    if (!var_left) op = op == VR_LT ? VR_GT : op == VR_GT ? VR_LT : op == VR_LE ? VR_GE : op == VR_GE ? VR_LE : op;
    switch (op) {
    case VR_LT: return push(out, n, cap, inf_node(c, true), a, false, false);
    case VR_LE: return push(out, n, cap, inf_node(c, true), a, false, true);
    case VR_GT: return push(out, n, cap, a, inf_node(c, false), false, false);
    case VR_GE: return push(out, n, cap, a, inf_node(c, false), true, false);
    case VR_NE:
        n = push(out, n, cap, inf_node(c, true), a, false, false);
        return push(out, n, cap, a, inf_node(c, false), false, false);
    default: return -1;
    }
}

static bool is_abs_name(const vctx *c, int id) {
    return c->nodes[id].kind == VN_FUNC && c->nodes[id].op == VF_ABS && is_name(c, kid(c, id, 0));
}

static int to_intervals(vctx *c, int id, ivl *out, int n, int cap, int depth);

static double real_of(vctx *c, int id) {
    double complex z = veval(c, id, NULL, 0);
    return cimag(z) == 0 ? creal(z) : NAN;
}

// A \setminus {p1, p2, ...}: every interval holding a point is split there.
static int minus_points(vctx *c, int id, ivl *out, int n, int cap, int depth) {
    int pts = kid(c, id, 1);
    int n0 = n;
    n = to_intervals(c, kid(c, id, 0), out, n, cap, depth + 1);
    const vnode *s = &c->nodes[pts];
    int np = s->kind == VN_BRACKET && s->op == 'S' ? s->n : 1;
    for (int k = 0; k < np && n >= 0; k++) {
        int pn = s->kind == VN_BRACKET && s->op == 'S' ? kid(c, pts, k) : pts;
        double p = real_of(c, pn);
        if (!isfinite(p) || vhas_vars(c, pn, 0)) return -1;
        for (int i = n0; i < n; i++) {
            double lo = real_of(c, out[i].lo), hi = real_of(c, out[i].hi);
            if (isnan(lo) || isnan(hi)) return -1;
            if (p == lo && out[i].lc) out[i].lc = false;
            else if (p == hi && out[i].hc) out[i].hc = false;
            else if (p > lo && p < hi) {
                if (n >= cap) return -1;
                out[n] = (ivl){pn, out[i].hi, false, out[i].hc};
                out[i].hi = pn;
                out[i].hc = false;
                n++;
            }
        }
    }
    return n;
}

static int to_intervals(vctx *c, int id, ivl *out, int n, int cap, int depth) {
    if (id <= 0 || n < 0 || depth > 8) return -1;
    vnode *x = N(c, id);
    if (x->kind == VN_BRACKET && x->n == 2 && (x->op == '(' || x->op == '[') && (x->aux == ')' || x->aux == ']'))
        return push(out, n, cap, kid(c, id, 0), kid(c, id, 1), x->op == '[', x->aux == ']');
    if (x->kind == VN_BRACKET && x->op == 'S') {
        for (int i = 0; i < x->n && n >= 0; i++) n = push(out, n, cap, kid(c, id, i), kid(c, id, i), true, true);
        return n;
    }
    if (x->kind == VN_UNION || (x->kind == VN_BRACKET && x->op == 'L')) {
        for (int i = 0; i < x->n && n >= 0; i++) n = to_intervals(c, kid(c, id, i), out, n, cap, depth + 1);
        return n;
    }
    if (x->kind == VN_SETMINUS) return minus_points(c, id, out, n, cap, depth);
    if (x->kind != VN_REL) return -1;
    int a = kid(c, id, 0), b = kid(c, id, 1), op = rel_op(c, id, 0);
    if (x->n == 2 && op == VR_IN && is_name(c, a)) return to_intervals(c, b, out, n, cap, depth + 1);
    if (x->n == 2 && (is_ineq(op) || op == VR_NE)) {
        bool al = is_name(c, a) && !vhas_vars(c, b, 0), ar = is_name(c, b) && !vhas_vars(c, a, 0);
        if (al || ar) return ray(c, out, n, cap, op, al ? b : a, al);
        bool bl = is_abs_name(c, a) && !vhas_vars(c, b, 0), br = is_abs_name(c, b) && !vhas_vars(c, a, 0);
        if (!bl && !br) return -1;
        int k = bl ? b : a;
        if (!bl) op = op == VR_LT ? VR_GT : op == VR_GT ? VR_LT : op == VR_LE ? VR_GE : VR_LE;
        int nk = new_node(c, VN_NEG, k, 0);
        if (op == VR_LT || op == VR_LE) return push(out, n, cap, nk, k, op == VR_LE, op == VR_LE);
        n = push(out, n, cap, inf_node(c, true), nk, false, op == VR_GE);
        return push(out, n, cap, k, inf_node(c, false), op == VR_GE, false);
    }
    if (x->n == 3) {
        int m = b, hi = kid(c, id, 2), op2 = rel_op(c, id, 1);
        if (vhas_vars(c, a, 0) || vhas_vars(c, hi, 0)) return -1;
        bool up = (op == VR_LT || op == VR_LE) && (op2 == VR_LT || op2 == VR_LE);
        bool down = (op == VR_GT || op == VR_GE) && (op2 == VR_GT || op2 == VR_GE);
        if (!up && !down) return -1;
        int lo = up ? a : hi, top = up ? hi : a;
        bool lc = up ? op == VR_LE : op2 == VR_GE, hc = up ? op2 == VR_LE : op == VR_GE;
        if (is_name(c, m)) return push(out, n, cap, lo, top, lc, hc);
        if (is_abs_name(c, m)) { // lo <= |x| <= hi
            n = push(out, n, cap, new_node(c, VN_NEG, top, 0), new_node(c, VN_NEG, lo, 0), hc, lc);
            return push(out, n, cap, lo, top, lc, hc);
        }
    }
    return -1;
}

static bool intervals_eq(vctx *c, int g, int p) {
    ivl a[16], b[16];
    int na = to_intervals(c, g, a, 0, 16, 0), nb = to_intervals(c, p, b, 0, 16, 0);
    if (na <= 0 || na != nb) return false;
    bool used[16] = {0};
    for (int i = 0; i < na; i++) {
        bool found = false;
        for (int j = 0; j < nb && !found; j++) {
            if (used[j] || a[i].lc != b[j].lc || a[i].hc != b[j].hc) continue;
            if (scalar_eq(c, a[i].lo, 0, b[j].lo, 0) && scalar_eq(c, a[i].hi, 0, b[j].hi, 0)) used[j] = found = true;
        }
        if (!found) return false;
    }
    return true;
}

static bool interval_like(const vctx *c, int id) {
    const vnode *x = &c->nodes[id];
    if (x->kind == VN_UNION || x->kind == VN_REL || x->kind == VN_SETMINUS) return true;
    if (x->kind == VN_BRACKET && x->op == 'L') {
        for (int i = 0; i < x->n; i++) if (c->nodes[kid(c, id, i)].kind != VN_REL) return false;
        return true;
    }
    return false;
}

static bool rel_eq(vctx *c, int g, int p, int depth) {
    vnode *x = N(c, g), *y = N(c, p);
    if (x->n == 2 && y->n == 2) {
        int og = rel_op(c, g, 0), op = rel_op(c, p, 0);
        int gl = kid(c, g, 0), gr = kid(c, g, 1), pl = kid(c, p, 0), pr = kid(c, p, 1);
        if ((og == VR_EQ || og == VR_IN) && og == op && is_name(c, gl) && is_name(c, pl) && same_tree(c, gl, pl))
            return cmp(c, gr, 0, pr, 0, depth + 1);
        // x = 1 against y = 1: a value labelled with another name answers another question
        if (og == VR_EQ && op == VR_EQ && is_name(c, gl) && is_name(c, pl) && !same_tree(c, gl, pl) &&
            !vhas_vars(c, gr, 0) && !vhas_vars(c, pr, 0))
            return false;
        if ((og == VR_EQ && op == VR_EQ) || (og == VR_NE && op == VR_NE)) {
            int f1 = new_node(c, VN_ADD, gl, new_node(c, VN_NEG, gr, 0));
            int f2 = new_node(c, VN_ADD, pl, new_node(c, VN_NEG, pr, 0));
            return proportional(c, f1, f2, false);
        }
        if (is_ineq(og) && is_ineq(op)) {
            bool s1, s2;
            int f1 = rel_form(c, g, &s1), f2 = rel_form(c, p, &s2);
            if (s1 != s2) return false;
            if (proportional(c, f1, f2, true)) return true;
        }
    }
    return intervals_eq(c, g, p);
}

// --- structures ---------------------------------------------------------------------------

typedef struct item { int id; unsigned m; } item;

// Items of a list/set; each \pm item expands into its sign variants.
static int items_of(const vctx *c, int id, item *out, int cap) {
    const vnode *x = &c->nodes[id];
    int n = 0;
    bool list = x->kind == VN_BRACKET && (x->op == 'L' || x->op == 'S');
    int cnt = list ? x->n : 1;
    for (int i = 0; i < cnt; i++) {
        int k = list ? kid(c, id, i) : id;
        int npm = vcount_pm(c, k, 0);
        if (npm > 3) return -1;
        for (unsigned m = 0; m < (1u << npm); m++) {
            if (n >= cap) return -1;
            out[n++] = (item){k, m | VARIANT};
        }
    }
    return n;
}

// Set semantics: every gold item is in the prediction and every predicted item
// is in the gold (a repeated item is harmless, a missing or extra one is not).
static bool multiset_eq(vctx *c, int g, int p, int depth) {
    item a[MAXITEMS], b[MAXITEMS];
    int na = items_of(c, g, a, MAXITEMS), nb = items_of(c, p, b, MAXITEMS);
    if (na <= 0 || nb <= 0) return false;
    bool hit[MAXITEMS] = {0};
    for (int i = 0; i < na; i++) {
        bool found = false;
        for (int j = 0; j < nb; j++)
            if ((!found || !hit[j]) && cmp(c, a[i].id, a[i].m, b[j].id, b[j].m, depth + 1)) hit[j] = found = true;
        if (!found) return false;
    }
    for (int j = 0; j < nb; j++) if (!hit[j]) return false;
    return true;
}

// Elements of an ordered sequence: tuple, bare list, group, or a vector matrix.
static int seq_of(const vctx *c, int id, int *out, int cap) {
    const vnode *x = &c->nodes[id];
    if (x->kind == VN_MATRIX && x->aux != 1 && x->n / x->aux != 1) return -1;
    if (x->kind != VN_MATRIX && x->kind != VN_BRACKET) return -1;
    if (x->n > cap) return -1;
    for (int i = 0; i < x->n; i++) out[i] = kid(c, id, i);
    return x->n;
}

static bool ordered_eq(vctx *c, int g, int p, int depth) {
    int a[MAXITEMS], b[MAXITEMS];
    int na = seq_of(c, g, a, MAXITEMS), nb = seq_of(c, p, b, MAXITEMS);
    if (na <= 0 || na != nb) return false;
    for (int i = 0; i < na; i++) if (!cmp(c, a[i], 0, b[i], 0, depth + 1)) return false;
    return true;
}

static bool is_tuple(const vnode *x) { return x->kind == VN_BRACKET && (x->op == '(' || x->op == '['); }
static bool is_bag(const vnode *x) { return x->kind == VN_BRACKET && (x->op == 'L' || x->op == 'S'); }

// Are the items of a bare list "name = value" with distinct names (1: all, 0:
// none, or one name for all, as the roots x = 2, x = 3; -1: some)?
static int named_items(const vctx *c, int id) {
    const vnode *x = &c->nodes[id];
    int named = 0;
    bool distinct = true;
    for (int i = 0; i < x->n; i++) {
        int k = kid(c, id, i);
        const vnode *r = &c->nodes[k];
        if (!(r->kind == VN_REL && r->n == 2 && rel_op(c, k, 0) == VR_EQ && is_name(c, kid(c, k, 0)))) continue;
        named++;
        for (int j = 0; j < i; j++)
            if (c->nodes[kid(c, id, j)].kind == VN_REL && same_tree(c, kid(c, kid(c, id, j), 0), kid(c, k, 0))) distinct = false;
    }
    if (named == x->n) return distinct ? 1 : 0;
    return named == 0 ? 0 : -1;
}

static bool struct_eq(vctx *c, int g, unsigned gm, int p, unsigned pm, int depth) {
    vnode *x = N(c, g), *y = N(c, p);
    // "x=2, y=3" against "2, 3": the labels give the values an order, so the bare
    // list must follow it ("3, 2" is x=3, y=2); two labelled lists match by name
    if (x->kind == VN_BRACKET && x->op == 'L' && y->kind == VN_BRACKET && y->op == 'L' && x->n == y->n) {
        int a = named_items(c, g), b = named_items(c, p);
        if (a != b && a >= 0 && b >= 0) return ordered_eq(c, g, p, depth);
    }
    if (x->kind == VN_MATRIX && y->kind == VN_MATRIX) {
        if (x->n != y->n || x->aux != y->aux) return false;
        for (int i = 0; i < x->n; i++) if (!cmp(c, kid(c, g, i), 0, kid(c, p, i), 0, depth + 1)) return false;
        return true;
    }
    if (is_tuple(x) && is_tuple(y))
        return x->op == y->op && x->aux == y->aux && ordered_eq(c, g, p, depth);
    if (x->kind == VN_BRACKET && x->op == 'S' && is_tuple(y)) return false;
    if (y->kind == VN_BRACKET && y->op == 'S' && is_tuple(x)) return false;
    bool xv = x->kind == VN_MATRIX || is_tuple(x) || (x->kind == VN_BRACKET && x->op == 'G');
    bool yv = y->kind == VN_MATRIX || is_tuple(y) || (y->kind == VN_BRACKET && y->op == 'G');
    if ((xv && (yv || (y->kind == VN_BRACKET && y->op == 'L'))) || (yv && x->kind == VN_BRACKET && x->op == 'L'))
        return ordered_eq(c, g, p, depth);
    if (is_bag(x) || is_bag(y) || vcount_pm(c, g, 0) || vcount_pm(c, p, 0)) {
        if (((gm | pm) & VARIANT) && !is_bag(x) && !is_bag(y)) return scalar_eq(c, g, gm, p, pm);
        return multiset_eq(c, g, p, depth);
    }
    if (x->kind == VN_BRACKET || y->kind == VN_BRACKET || x->kind == VN_MATRIX || y->kind == VN_MATRIX ||
        x->kind == VN_UNION || y->kind == VN_UNION)
        return false;
    return scalar_eq(c, g, gm, p, pm);
}

// --- dispatch ----------------------------------------------------------------------------------

// A predicted chain "x = a = b" or "a \approx b" that reduces to one value:
// returns the operand that is the answer (before the first \approx), or 0.
static int eq_chain_value(const vctx *c, int r) {
    const vnode *x = &c->nodes[r];
    int last = x->n - 1;
    for (int i = 0; i < x->n - 1; i++) {
        int op = rel_op(c, r, i);
        if (op == VR_APPROX) { last = i; break; }
        if (op != VR_EQ && !(i == 0 && op == VR_IN)) return 0;
    }
    if (last == 0) return is_name(c, kid(c, r, 0)) ? 0 : kid(c, r, 0);
    if (is_name(c, kid(c, r, 0))) return kid(c, r, last);
    if (is_label(c, kid(c, r, 0), 0) && !vhas_vars(c, kid(c, r, last), 0)) return kid(c, r, last);
    for (int i = 0; i < last; i++) if (vhas_vars(c, kid(c, r, i), 0)) return 0;
    return kid(c, r, last);
}

// "E \approx w": the approximate value w (the last operand, after an \approx), or 0.
static int approx_value(const vctx *c, int r) {
    const vnode *x = &c->nodes[r];
    for (int i = 0; i < x->n - 1; i++)
        if (rel_op(c, r, i) == VR_APPROX) return vhas_vars(c, kid(c, r, x->n - 1), 0) ? 0 : kid(c, r, x->n - 1);
    return 0;
}

// Is w a fair rounding of E: E within half a unit of w's last digit? (Both
// variable-free; w a plain number. Anything else is not judged here: true.)
static bool consistent(vctx *c, int e, int w) {
    int lit = w;
    if (c->nodes[lit].kind == VN_NEG) lit = kid(c, lit, 0);
    if (c->nodes[lit].kind != VN_NUM || vhas_vars(c, e, 0)) return true;
    vpoint P = {0};
    double complex x = veval(c, e, &P, 0);
    P.pmi = 0;
    double complex y = veval(c, w, &P, 0);
    if (isnan(creal(x)) || isnan(creal(y)) || cimag(x) != 0) return true;
    int nd = c->nodes[lit].flags & NF_DECIMAL ? c->nodes[lit].ndec : 0;
    return rounds_to(creal(y), nd, creal(x));
}

// k * matrix (or matrix * k) as the matrix of k * entries: 2\begin{pmatrix}1\\2\end{pmatrix}
static int scale_matrix(vctx *c, int id) {
    const vnode *x = N(c, id);
    if (x->kind != VN_MUL || x->n != 2) return id;
    int a = kid(c, id, 0), b = kid(c, id, 1);
    int m = N(c, b)->kind == VN_MATRIX ? b : N(c, a)->kind == VN_MATRIX ? a : 0;
    if (!m) return id;
    int s = m == b ? a : b, cnt = N(c, m)->n;
    if (N(c, s)->kind == VN_MATRIX || N(c, s)->kind == VN_BRACKET || cnt > 256 || cnt <= 0) return id;
    int ids[256];
    for (int i = 0; i < cnt; i++)
        if ((ids[i] = new_node(c, VN_MUL, s, kid(c, m, i))) < 0) return id;
    if (c->nk + cnt > VMAX_KIDS) return id;
    int r = vnode_new(c, VN_MATRIX);
    if (r < 0) return id;
    *N(c, r) = *N(c, m);
    N(c, r)->kid = c->nk;
    memcpy(c->kids + c->nk, ids, sizeof(int32_t) * (size_t)cnt);
    c->nk += cnt;
    return r;
}

static bool cmp(vctx *c, int g, unsigned gm, int p, unsigned pm, int depth) {
    // every comparison is bounded, but a set of 64 items against 64 is 4096 of them
    if (g <= 0 || p <= 0 || depth > 24 || vctx_expired(c)) return false;
    g = scale_matrix(c, g);
    p = scale_matrix(c, p);
    vnode *x = N(c, g), *y = N(c, p);
    if (x->kind == VN_UNIT || y->kind == VN_UNIT) {
        if (x->kind == VN_UNIT && y->kind == VN_UNIT && x->slen && y->slen && strcmp(vstr(c, x), vstr(c, y)))
            return false;
        // a percent against a named unit ("60 degrees" for 60\%): an explicit wrong unit
        if ((x->kind == VN_PERCENT && y->slen) || (y->kind == VN_PERCENT && x->slen)) return false;
        return cmp(c, x->kind == VN_UNIT ? kid(c, g, 0) : g, gm, y->kind == VN_UNIT ? kid(c, p, 0) : p, pm, depth + 1);
    }
    if (x->kind == VN_PERCENT && y->kind == VN_PERCENT) return cmp(c, kid(c, g, 0), gm, kid(c, p, 0), pm, depth + 1);
    if (x->kind == VN_PERCENT) {
        int v = kid(c, g, 0);
        if (cmp(c, v, gm, p, pm, depth + 1)) return true;
        int h = new_node(c, VN_DIV, v, new_num(c, 100)); // 40\% = 0.4
        return h > 0 && cmp(c, h, gm, p, pm, depth + 1);
    }
    if (y->kind == VN_PERCENT) { // 50\% for a gold 50 or 0.5
        int v = kid(c, p, 0);
        if (cmp(c, g, gm, v, pm, depth + 1)) return true;
        int h = new_node(c, VN_DIV, v, new_num(c, 100));
        return h > 0 && cmp(c, g, gm, h, pm, depth + 1);
    }
    bool xe = (x->kind == VN_CONST && x->op == VC_EMPTY) || (x->kind == VN_BRACKET && x->op == 'S' && x->n == 0);
    bool ye = (y->kind == VN_CONST && y->op == VC_EMPTY) || (y->kind == VN_BRACKET && y->op == 'S' && y->n == 0);
    if (xe || ye) return xe && ye;
    if (x->kind == VN_TEXT || y->kind == VN_TEXT)
        return x->kind == y->kind && !strcmp(vstr(c, x), vstr(c, y));
    if (x->kind == VN_BASED || y->kind == VN_BASED) {
        const vnode *o = x->kind == VN_BASED ? y : x;
        if (x->kind == VN_BASED && y->kind == VN_BASED && x->aux != y->aux) return false;
        if (o->kind != VN_NUM && o->kind != VN_BASED) return false;
        if (!(o->flags & NF_INTLIT) && o->kind != VN_BASED) return false;
        const char *s1 = vstr(c, x), *s2 = vstr(c, y);
        while (*s1 == '0' && s1[1]) s1++;
        while (*s2 == '0' && s2[1]) s2++;
        return !strcmp(s1, s2);
    }
    if (x->kind == VN_REL && y->kind == VN_REL) return rel_eq(c, g, p, depth);
    if (x->kind == VN_REL) {
        int op = rel_op(c, g, 0);
        if (x->n == 2 && (op == VR_EQ || op == VR_IN) &&
            (is_name(c, kid(c, g, 0)) || (is_label(c, kid(c, g, 0), 0) && !vhas_vars(c, kid(c, g, 1), 0))))
            return cmp(c, kid(c, g, 1), gm, p, pm, depth + 1);
        return interval_like(c, g) && intervals_eq(c, g, p);
    }
    if (y->kind == VN_REL) {
        int v = eq_chain_value(c, p), w = approx_value(c, p);
        if (w > 0) { // "E \approx w", "x \approx w", "\approx w"
            if (v > 0 && !consistent(c, v, w)) return false; // the answer contradicts itself: 4\sqrt3 \approx 6.98
            if (v > 0 && cmp(c, g, gm, v, pm, depth + 1)) return true;
            // the decimal it commits to answers a rounded gold (or a plain one when E is only a name)
            return (v <= 0 || vhas_decimal(c, g, 0)) && cmp(c, g, gm, w, pm, depth + 1);
        }
        if (v > 0) return cmp(c, g, gm, v, pm, depth + 1);
        return intervals_eq(c, g, p);
    }
    // a ratio a:b(:c...) equals another with the same proportions (after any label is off)
    if (x->kind == VN_RATIO || y->kind == VN_RATIO) {
        if (x->kind != y->kind || x->n != y->n) return false;
        for (int i = 1; i < x->n; i++) {
            int a = new_node(c, VN_DIV, kid(c, g, i), kid(c, g, 0)), b = new_node(c, VN_DIV, kid(c, p, i), kid(c, p, 0));
            if (a <= 0 || b <= 0 || !scalar_eq(c, a, 0, b, 0)) return false;
        }
        return true;
    }
    if ((interval_like(c, g) || interval_like(c, p)) && intervals_eq(c, g, p)) return true;
    if (x->kind == VN_UNION && y->kind == VN_UNION) return false;
    return struct_eq(c, g, gm, p, pm, depth);
}

bool vcmp_answers(vctx *c, int gold, int pred) { return cmp(c, gold, 0, pred, 0, 0); }
