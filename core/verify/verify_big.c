/*
 * verify_big.c - equality decided by well-kept arithmetic libraries:
 *
 *   GMP    exact rationals of any size for variable-free trees (integers past
 *          2^125, 2^{200} vs its 61 digits, 300!), under a work budget;
 *   FLINT  rational functions with rational coefficients (fmpq_mpoly numerator
 *          and denominator): an exact canonical comparison, a/b = c/d iff
 *          a*d = c*b as polynomials, so commuted, distributed and factored forms
 *          are decided without sampling;
 *   MPFR   256-bit real evaluation of variable-free trees with radicals,
 *          constants and elementary functions: two values are equal when they
 *          agree to 2^-200 relative, a near-coincidence that doubles (1e-9)
 *          would call equal is told apart.
 *
 * Each returns 1 (equal), 0 (not equal) or -1 (no opinion: the tree has
 * something the method does not model, or a budget was exceeded); the caller
 * (verify_cmp.c) then falls back to the double-precision comparison.
 * No global state: every call makes and clears its own numbers.
 */
// FLINT first: its prototypes name parameters I, which <complex.h> (verify_int.h) defines
#include <gmp.h>
#include <mpfr.h>
#include <flint/fmpq.h>
#include <flint/fmpq_mpoly.h>

#include "verify/verify_impl.h"

#include <stdlib.h>
#include <string.h>

#define BIG_BITS (1L << 20)   // largest exact intermediate (bits of numerator + denominator)
#define BIG_EXP 100000        // largest exponent / factorial argument evaluated exactly
#define POLY_TERMS 4096       // largest polynomial (terms) built
#define POLY_DEG 512          // largest exponent of a polynomial power
#define MP_PREC 256

static int kid(const vctx *c, int id, int i) { return c->kids[c->nodes[id].kid + i]; }

static void mpz_set_i128(mpz_t z, i128 v) {
    unsigned __int128 u = v < 0 ? (unsigned __int128)(-(v + 1)) + 1 : (unsigned __int128)v;
    mpz_set_ui(z, (unsigned long)(u >> 64));
    mpz_mul_2exp(z, z, 64);
    mpz_add_ui(z, z, (unsigned long)(u & 0xFFFFFFFFFFFFFFFFull));
    if (v < 0) mpz_neg(z, z);
}

static bool too_big(const mpq_t q) {
    return (long)(mpz_sizeinbase(mpq_numref(q), 2) + mpz_sizeinbase(mpq_denref(q), 2)) > BIG_BITS;
}

// A literal's exact value: from its 128-bit rational, or (an integer literal
// beyond 128 bits) from its digits.
static bool num_value(const vctx *c, const vnode *n, mpq_t out) {
    if (n->flags & NF_EXACT) {
        mpz_set_i128(mpq_numref(out), n->q.n);
        mpz_set_i128(mpq_denref(out), n->q.d);
        mpq_canonicalize(out);
        return true;
    }
    if (!(n->flags & NF_INTLIT) || n->slen <= 0) return false;
    const char *s = vstr(c, n);
    for (int i = 0; i < n->slen; i++) if (s[i] < '0' || s[i] > '9') return false;
    char *d = malloc((size_t)n->slen + 1);
    if (!d) return false;
    memcpy(d, s, (size_t)n->slen);
    d[n->slen] = 0;
    int r = mpz_set_str(mpq_numref(out), d, 10);
    free(d);
    mpz_set_ui(mpq_denref(out), 1);
    return r == 0;
}

// Exact k-th root of a nonnegative rational, if it is one.
static bool q_root(mpq_t q, unsigned long k) {
    if (mpq_sgn(q) < 0 && k % 2 == 0) return false;
    mpz_t r;
    mpz_init(r);
    bool ok = mpz_root(r, mpq_numref(q), k) != 0;
    if (ok) {
        mpz_set(mpq_numref(q), r);
        ok = mpz_root(r, mpq_denref(q), k) != 0;
        if (ok) mpz_set(mpq_denref(q), r);
    }
    mpz_clear(r);
    return ok;
}

static bool q_pow(mpq_t base, const mpq_t e) {
    if (mpz_cmp_ui(mpq_denref(e), 1) != 0) {
        // a rational exponent p/q: exact only when the q-th root is
        if (mpz_cmp_ui(mpq_denref(e), 16) > 0 || mpq_sgn(base) < 0) return false;
        unsigned long q = mpz_get_ui(mpq_denref(e));
        if (!q_root(base, q)) return false;
        mpq_t e2;
        mpq_init(e2);
        mpz_set(mpq_numref(e2), mpq_numref(e));
        bool ok = q_pow(base, e2);
        mpq_clear(e2);
        return ok;
    }
    if (!mpz_fits_slong_p(mpq_numref(e))) return false;
    long k = mpz_get_si(mpq_numref(e));
    if (k > BIG_EXP || k < -BIG_EXP) return false;
    unsigned long ak = (unsigned long)(k < 0 ? -k : k);
    if (mpq_sgn(base) == 0) { if (k < 0) return false; mpq_set_ui(base, k == 0 ? 1 : 0, 1); return true; }
    long bits = (long)(mpz_sizeinbase(mpq_numref(base), 2) + mpz_sizeinbase(mpq_denref(base), 2));
    bool unit = mpz_cmpabs_ui(mpq_numref(base), 1) == 0 && mpz_cmp_ui(mpq_denref(base), 1) == 0;
    if (!unit && (double)bits * (double)ak > (double)BIG_BITS) return false;
    mpz_pow_ui(mpq_numref(base), mpq_numref(base), ak);
    mpz_pow_ui(mpq_denref(base), mpq_denref(base), ak);
    if (k < 0) mpq_inv(base, base);
    return true;
}

static bool qeval(const vctx *c, int id, mpq_t out, int depth) {
    if (id <= 0 || depth > VMAX_DEPTH * 2) return false;
    const vnode *n = &c->nodes[id];
    bool ok = false;
    mpq_t a;
    switch (n->kind) {
    case VN_NUM: return num_value(c, n, out);
    case VN_NEG:
        if (!qeval(c, kid(c, id, 0), out, depth + 1)) return false;
        mpq_neg(out, out);
        return true;
    case VN_PERCENT: case VN_UNIT:
        return qeval(c, kid(c, id, 0), out, depth + 1);
    case VN_ADD: case VN_MUL: case VN_DIV: case VN_POW:
        mpq_init(a);
        ok = qeval(c, kid(c, id, 0), out, depth + 1);
        for (int i = 1; ok && i < n->n; i++) {
            ok = qeval(c, kid(c, id, i), a, depth + 1);
            if (!ok) break;
            if (n->kind == VN_ADD) mpq_add(out, out, a);
            else if (n->kind == VN_MUL) mpq_mul(out, out, a);
            else if (n->kind == VN_DIV) { if (mpq_sgn(a) == 0) ok = false; else mpq_div(out, out, a); }
            else ok = q_pow(out, a);
            if (ok && too_big(out)) ok = false;
        }
        mpq_clear(a);
        return ok;
    case VN_FUNC:
        if (!qeval(c, kid(c, id, 0), out, depth + 1)) return false;
        switch (n->op) {
        case VF_SQRT: return q_root(out, 2);
        case VF_ROOT: {
            mpq_init(a);
            ok = n->n > 1 && qeval(c, kid(c, id, 1), a, depth + 1) && mpz_cmp_ui(mpq_denref(a), 1) == 0 &&
                 mpz_cmp_ui(mpq_numref(a), 2) >= 0 && mpz_cmp_ui(mpq_numref(a), 64) <= 0 &&
                 q_root(out, mpz_get_ui(mpq_numref(a)));
            mpq_clear(a);
            return ok;
        }
        case VF_ABS: mpq_abs(out, out); return true;
        case VF_FLOOR: case VF_CEIL:
            if (n->op == VF_FLOOR) mpz_fdiv_q(mpq_numref(out), mpq_numref(out), mpq_denref(out));
            else mpz_cdiv_q(mpq_numref(out), mpq_numref(out), mpq_denref(out));
            mpz_set_ui(mpq_denref(out), 1);
            return true;
        case VF_FACT:
            if (mpz_cmp_ui(mpq_denref(out), 1) || mpq_sgn(out) < 0 || mpz_cmp_ui(mpq_numref(out), 20000) > 0) return false;
            mpz_fac_ui(mpq_numref(out), mpz_get_ui(mpq_numref(out)));
            return true;
        case VF_BINOM: {
            mpq_init(a);
            ok = n->n > 1 && qeval(c, kid(c, id, 1), a, depth + 1) && !mpz_cmp_ui(mpq_denref(out), 1) &&
                 !mpz_cmp_ui(mpq_denref(a), 1) && mpq_sgn(a) >= 0 && mpq_sgn(out) >= 0 &&
                 mpz_cmp_ui(mpq_numref(out), BIG_EXP) <= 0 && mpq_cmp(a, out) <= 0;
            if (ok) mpz_bin_ui(mpq_numref(out), mpq_numref(out), mpz_get_ui(mpq_numref(a)));
            mpq_clear(a);
            return ok;
        }
        default: return false;
        }
    default:
        return false;
    }
}

int vbig_exact(const vctx *c, int g, int p) {
    mpq_t a, b;
    mpq_init(a);
    mpq_init(b);
    int v = qeval(c, g, a, 0) && qeval(c, p, b, 0) ? mpq_equal(a, b) != 0 : -1;
    mpq_clear(a);
    mpq_clear(b);
    return v;
}

// --- FLINT: rational functions -----------------------------------------------------------

typedef struct rf { fmpq_mpoly_t n, d; } rf;

static void rf_init(rf *r, const fmpq_mpoly_ctx_t x) { fmpq_mpoly_init(r->n, x); fmpq_mpoly_init(r->d, x); fmpq_mpoly_one(r->d, x); }
static void rf_clear(rf *r, const fmpq_mpoly_ctx_t x) { fmpq_mpoly_clear(r->n, x); fmpq_mpoly_clear(r->d, x); }
static bool rf_small(const rf *r, const fmpq_mpoly_ctx_t x) {
    return fmpq_mpoly_length(r->n, x) <= POLY_TERMS && fmpq_mpoly_length(r->d, x) <= POLY_TERMS;
}

static bool peval(const vctx *c, int id, rf *out, const fmpq_mpoly_ctx_t x, int depth);

// A variable-free subtree as a constant rational function (false: not exact).
static bool peval_const(const vctx *c, int id, rf *out, const fmpq_mpoly_ctx_t x, int depth) {
    mpq_t q;
    mpq_init(q);
    bool ok = qeval(c, id, q, depth);
    if (ok) {
        fmpq_t f;
        fmpq_init(f);
        fmpq_set_mpq(f, q);
        fmpq_mpoly_set_fmpq(out->n, f, x);
        fmpq_mpoly_one(out->d, x);
        fmpq_clear(f);
    }
    mpq_clear(q);
    return ok;
}

// out = out (+ * /) a as n/d fractions, refused before a product could grow
// past the term budget (s and t terms multiply to up to s*t).
static bool rf_combine(rf *out, rf *a, int kind, const fmpq_mpoly_ctx_t x) {
    fmpq_mpoly_struct *on = out->n, *od = out->d, *an = a->n, *ad = a->d;
    double lo = (double)fmpq_mpoly_length(on, x), ld = (double)fmpq_mpoly_length(od, x);
    double la = (double)fmpq_mpoly_length(an, x), lb = (double)fmpq_mpoly_length(ad, x);
    double m1 = lo > ld ? lo : ld, m2 = la > lb ? la : lb;
    if (m1 * m2 > POLY_TERMS * 8.0) return false;
    if (kind == VN_ADD) { // n/d + an/ad = (n ad + an d) / (d ad)
        if (fmpq_mpoly_equal(od, ad, x)) fmpq_mpoly_add(on, on, an, x);
        else {
            fmpq_mpoly_mul(on, on, ad, x);
            fmpq_mpoly_mul(an, an, od, x);
            fmpq_mpoly_add(on, on, an, x);
            fmpq_mpoly_mul(od, od, ad, x);
        }
    } else if (kind == VN_MUL) {
        fmpq_mpoly_mul(on, on, an, x);
        fmpq_mpoly_mul(od, od, ad, x);
    } else {
        if (fmpq_mpoly_is_zero(an, x)) return false;
        fmpq_mpoly_mul(on, on, ad, x);
        fmpq_mpoly_mul(od, od, an, x);
    }
    return rf_small(out, x);
}

// The kids of an ADD, MUL or DIV node folded left to right.
static bool peval_fold(const vctx *c, int id, rf *out, const fmpq_mpoly_ctx_t x, int depth) {
    const vnode *n = &c->nodes[id];
    if (!peval(c, kid(c, id, 0), out, x, depth + 1)) return false;
    bool ok = true;
    rf a;
    rf_init(&a, x);
    for (int i = 1; ok && i < n->n; i++) {
        if (!(ok = peval(c, kid(c, id, i), &a, x, depth + 1))) break;
        ok = rf_combine(out, &a, n->kind, x);
    }
    rf_clear(&a, x);
    return ok;
}

// base ^ k for a constant integer |k| <= POLY_DEG; (t terms)^k has up to
// C(k + t - 1, t - 1) terms: bounded before expanding.
static bool peval_pow(const vctx *c, int id, rf *out, const fmpq_mpoly_ctx_t x, int depth) {
    mpq_t e;
    mpq_init(e);
    bool ok = !vhas_vars(c, kid(c, id, 1), 0) && qeval(c, kid(c, id, 1), e, depth + 1) &&
              mpz_cmp_ui(mpq_denref(e), 1) == 0 && mpz_cmpabs_ui(mpq_numref(e), POLY_DEG) <= 0;
    long k = ok ? mpz_get_si(mpq_numref(e)) : 0;
    mpq_clear(e);
    if (!ok || !peval(c, kid(c, id, 0), out, x, depth + 1)) return false;
    unsigned long ak = (unsigned long)(k < 0 ? -k : k);
    double t1 = (double)fmpq_mpoly_length(out->n, x), t2 = (double)fmpq_mpoly_length(out->d, x);
    double t = t1 > t2 ? t1 : t2, bound = 1;
    for (double j = 1; j < t && bound <= POLY_TERMS; j++) bound = bound * ((double)ak + j) / j;
    if (bound > POLY_TERMS) return false;
    if (!fmpq_mpoly_pow_ui(out->n, out->n, ak, x) || !fmpq_mpoly_pow_ui(out->d, out->d, ak, x)) return false;
    if (k < 0) {
        if (fmpq_mpoly_is_zero(out->n, x)) return false;
        fmpq_mpoly_swap(out->n, out->d, x);
    }
    return rf_small(out, x);
}

static bool peval(const vctx *c, int id, rf *out, const fmpq_mpoly_ctx_t x, int depth) {
    if (id <= 0 || depth > VMAX_DEPTH * 2) return false;
    const vnode *n = &c->nodes[id];
    if (n->kind == VN_VAR) {
        if (n->aux < 0 || n->aux >= c->nv) return false;
        fmpq_mpoly_gen(out->n, (slong)n->aux, x);
        fmpq_mpoly_one(out->d, x);
        return true;
    }
    if (!vhas_vars(c, id, 0)) return peval_const(c, id, out, x, depth); // a constant: exact or not modelled
    switch (n->kind) {
    case VN_NEG:
        if (!peval(c, kid(c, id, 0), out, x, depth + 1)) return false;
        fmpq_mpoly_neg(out->n, out->n, x);
        return true;
    case VN_UNIT: return peval(c, kid(c, id, 0), out, x, depth + 1);
    case VN_ADD: case VN_MUL: case VN_DIV: return peval_fold(c, id, out, x, depth);
    case VN_POW: return peval_pow(c, id, out, x, depth);
    default: return false;
    }
}

int vbig_poly(const vctx *c, int g, int p) {
    if (c->nv <= 0 || c->nv > VMAX_VARS) return -1;
    fmpq_mpoly_ctx_t x;
    fmpq_mpoly_ctx_init(x, (slong)c->nv, ORD_LEX);
    rf a, b;
    rf_init(&a, x);
    rf_init(&b, x);
    int v = -1;
    if (peval(c, g, &a, x, 0) && peval(c, p, &b, x, 0)) {
        fmpq_mpoly_mul(a.n, a.n, b.d, x);
        fmpq_mpoly_mul(b.n, b.n, a.d, x);
        v = fmpq_mpoly_equal(a.n, b.n, x) != 0;
    }
    rf_clear(&a, x);
    rf_clear(&b, x);
    fmpq_mpoly_ctx_clear(x);
    return v;
}

// --- MPFR: high-precision real values ----------------------------------------------------------

static bool feval(const vctx *c, int id, mpfr_t out, int depth);

// out = f(out) (a: f's second argument, the root's degree or the log's base),
// false where f is undefined or not modelled.
static bool mpfr_func(int op, mpfr_t out, mpfr_t a) {
    bool ok = true;
    switch (op) {
    case VF_SQRT: ok = mpfr_sgn(out) >= 0; if (ok) mpfr_sqrt(out, out, MPFR_RNDN); break;
    case VF_ROOT:
        ok = mpfr_integer_p(a) && mpfr_cmp_ui(a, 2) >= 0 && mpfr_cmp_ui(a, 64) <= 0;
        if (ok) {
            unsigned long k = mpfr_get_ui(a, MPFR_RNDN);
            ok = mpfr_sgn(out) >= 0 || k % 2;
            if (ok) mpfr_rootn_ui(out, out, k, MPFR_RNDN);
        }
        break;
    case VF_SIN: mpfr_sin(out, out, MPFR_RNDN); break;
    case VF_COS: mpfr_cos(out, out, MPFR_RNDN); break;
    case VF_TAN: mpfr_tan(out, out, MPFR_RNDN); break;
    case VF_SEC: mpfr_sec(out, out, MPFR_RNDN); break;
    case VF_CSC: mpfr_csc(out, out, MPFR_RNDN); break;
    case VF_COT: mpfr_cot(out, out, MPFR_RNDN); break;
    case VF_ASIN: ok = mpfr_cmpabs_ui(out, 1) <= 0; if (ok) mpfr_asin(out, out, MPFR_RNDN); break;
    case VF_ACOS: ok = mpfr_cmpabs_ui(out, 1) <= 0; if (ok) mpfr_acos(out, out, MPFR_RNDN); break;
    case VF_ATAN: mpfr_atan(out, out, MPFR_RNDN); break;
    case VF_SINH: mpfr_sinh(out, out, MPFR_RNDN); break;
    case VF_COSH: mpfr_cosh(out, out, MPFR_RNDN); break;
    case VF_TANH: mpfr_tanh(out, out, MPFR_RNDN); break;
    case VF_LN: case VF_LOG: ok = mpfr_sgn(out) > 0; if (ok) mpfr_log(out, out, MPFR_RNDN); break;
    case VF_LOGB:
        ok = mpfr_sgn(out) > 0 && mpfr_sgn(a) > 0 && mpfr_cmp_ui(a, 1) != 0;
        if (ok) { mpfr_log(out, out, MPFR_RNDN); mpfr_log(a, a, MPFR_RNDN); mpfr_div(out, out, a, MPFR_RNDN); }
        break;
    case VF_EXP: ok = mpfr_cmp_ui(out, 100000) < 0; if (ok) mpfr_exp(out, out, MPFR_RNDN); break;
    case VF_ABS: mpfr_abs(out, out, MPFR_RNDN); break;
    case VF_FLOOR: mpfr_floor(out, out); break;
    case VF_CEIL: mpfr_ceil(out, out); break;
    case VF_FACT:
        ok = mpfr_integer_p(out) && mpfr_sgn(out) >= 0 && mpfr_cmp_ui(out, 10000) <= 0;
        if (ok) mpfr_fac_ui(out, mpfr_get_ui(out, MPFR_RNDN), MPFR_RNDN);
        break;
    default: ok = false;
    }
    return ok;
}

// A number literal: exact where it is, its double where it is a long decimal.
static bool feval_num(const vctx *c, const vnode *n, mpfr_t out) {
    bool ok = true;
    mpq_t q;
    mpq_init(q);
    if (num_value(c, n, q)) mpfr_set_q(out, q, MPFR_RNDN);
    else if (n->flags & (NF_EXACT | NF_INTLIT)) ok = false;
    else mpfr_set_d(out, n->d, MPFR_RNDN); // a long decimal: its double
    mpq_clear(q);
    return ok && mpfr_number_p(out);
}

// The kids of an ADD, MUL, DIV or POW node folded left to right.
static bool feval_fold(const vctx *c, int id, mpfr_t out, int depth) {
    const vnode *n = &c->nodes[id];
    if (!feval(c, kid(c, id, 0), out, depth + 1)) return false;
    bool ok = true;
    mpfr_t a;
    mpfr_init2(a, MP_PREC);
    for (int i = 1; ok && i < n->n; i++) {
        if (!(ok = feval(c, kid(c, id, i), a, depth + 1))) break;
        if (n->kind == VN_ADD) mpfr_add(out, out, a, MPFR_RNDN);
        else if (n->kind == VN_MUL) mpfr_mul(out, out, a, MPFR_RNDN);
        else if (n->kind == VN_DIV) { if (mpfr_zero_p(a)) ok = false; else mpfr_div(out, out, a, MPFR_RNDN); }
        else {
            if (mpfr_sgn(out) < 0 && !mpfr_integer_p(a)) ok = false; // complex: not modelled here
            else mpfr_pow(out, out, a, MPFR_RNDN);
        }
        if (ok && !mpfr_number_p(out)) ok = false;
    }
    mpfr_clear(a);
    return ok;
}

static bool feval_func(const vctx *c, int id, mpfr_t out, int depth) {
    const vnode *n = &c->nodes[id];
    if (!feval(c, kid(c, id, 0), out, depth + 1)) return false;
    bool ok = true;
    mpfr_t a;
    mpfr_init2(a, MP_PREC);
    if (n->n > 1 && !feval(c, kid(c, id, 1), a, depth + 1)) ok = false;
    if (ok) ok = mpfr_func(n->op, out, a);
    mpfr_clear(a);
    return ok && mpfr_number_p(out);
}

static bool feval(const vctx *c, int id, mpfr_t out, int depth) {
    if (id <= 0 || depth > VMAX_DEPTH * 2) return false;
    const vnode *n = &c->nodes[id];
    switch (n->kind) {
    case VN_NUM: return feval_num(c, n, out);
    case VN_CONST:
        if (n->op == VC_PI) { mpfr_const_pi(out, MPFR_RNDN); return true; }
        if (n->op == VC_E) { mpfr_set_ui(out, 1, MPFR_RNDN); mpfr_exp(out, out, MPFR_RNDN); return true; }
        return false;
    case VN_NEG:
        if (!feval(c, kid(c, id, 0), out, depth + 1)) return false;
        mpfr_neg(out, out, MPFR_RNDN);
        return true;
    case VN_PERCENT: case VN_UNIT: return feval(c, kid(c, id, 0), out, depth + 1);
    case VN_ADD: case VN_MUL: case VN_DIV: case VN_POW: return feval_fold(c, id, out, depth);
    case VN_FUNC: return feval_func(c, id, out, depth);
    default: return false;
    }
}

int vbig_real(const vctx *c, int g, int p) {
    mpfr_t a, b;
    mpfr_init2(a, MP_PREC);
    mpfr_init2(b, MP_PREC);
    int v = -1;
    if (feval(c, g, a, 0) && feval(c, p, b, 0)) {
        // equal when |a - b| <= 2^-200 max(1, |a|, |b|)
        mpfr_t d, m;
        mpfr_init2(d, MP_PREC);
        mpfr_init2(m, MP_PREC);
        mpfr_sub(d, a, b, MPFR_RNDN);
        mpfr_abs(d, d, MPFR_RNDN);
        mpfr_set_ui(m, 1, MPFR_RNDN);
        if (mpfr_cmpabs(a, m) > 0) mpfr_abs(m, a, MPFR_RNDN);
        if (mpfr_cmpabs(b, m) > 0) mpfr_abs(m, b, MPFR_RNDN);
        mpfr_mul_2si(m, m, -200, MPFR_RNDN);
        v = mpfr_lessequal_p(d, m) != 0;
        mpfr_clear(d);
        mpfr_clear(m);
    }
    mpfr_clear(a);
    mpfr_clear(b);
    return v;
}
