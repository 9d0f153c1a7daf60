/*
 * verify_eval.c - evaluation of answer trees: exact 128-bit rationals (every
 * operation checks overflow and reports it instead of wrapping) and complex
 * double evaluation at a point (variables bound, \pm signs chosen). Undefined
 * or overflowing values evaluate to NaN, which never compares equal.
 * Recursion is bounded by the parser's depth cap.
 */
#include "verify/verify_impl.h"

#include <math.h>

// --- rationals ---------------------------------------------------------------------

static i128 iabs128(i128 x) { return x < 0 ? -x : x; }
static i128 gcd128(i128 a, i128 b) {
    a = iabs128(a); b = iabs128(b);
    while (b) { i128 t = a % b; a = b; b = t; }
    return a;
}
static const i128 LIM = ((i128)1 << 125);

bool vrat_make(i128 n, i128 d, vrat *out) {
    if (d == 0) return false;
    if (iabs128(n) >= LIM || iabs128(d) >= LIM) return false;
    if (d < 0) { n = -n; d = -d; }
    i128 g = gcd128(n, d);
    if (g > 1) { n /= g; d /= g; }
    if (n == 0) d = 1;
    out->n = n; out->d = d;
    return true;
}

static bool mul_ok(i128 a, i128 b, i128 *r) { return !__builtin_mul_overflow(a, b, r) && iabs128(*r) < LIM; }

bool vrat_add(vrat a, vrat b, vrat *out) {
    i128 g = gcd128(a.d, b.d), x, y, d;
    if (!mul_ok(a.n, b.d / g, &x) || !mul_ok(b.n, a.d / g, &y) || !mul_ok(a.d / g, b.d, &d)) return false;
    i128 s;
    if (__builtin_add_overflow(x, y, &s)) return false;
    return vrat_make(s, d, out);
}

bool vrat_mul(vrat a, vrat b, vrat *out) {
    i128 g1 = gcd128(a.n, b.d), g2 = gcd128(b.n, a.d);
    if (g1 == 0) g1 = 1;
    if (g2 == 0) g2 = 1;
    i128 n, d;
    if (!mul_ok(a.n / g1, b.n / g2, &n) || !mul_ok(a.d / g2, b.d / g1, &d)) return false;
    return vrat_make(n, d, out);
}

bool vrat_div(vrat a, vrat b, vrat *out) {
    if (b.n == 0) return false;
    return vrat_mul(a, (vrat){b.d, b.n}, out) && vrat_make(out->n, out->d, out);
}

bool vrat_pow(vrat a, i128 e, vrat *out) {
    if (e < 0) {
        if (a.n == 0) return false;
        a = (vrat){a.d, a.n};
        if (!vrat_make(a.n, a.d, &a)) return false;
        e = -e;
    }
    vrat r = {1, 1};
    if (a.n == 0) { *out = e == 0 ? r : a; return true; }
    if (iabs128(a.n) == 1 && a.d == 1) { *out = (vrat){(a.n < 0 && (e & 1)) ? -1 : 1, 1}; return true; }
    if (e > 130) return false; // |a| != 1: overflows 2^125 anyway
    while (e > 0) {
        if (e & 1) { if (!vrat_mul(r, a, &r)) return false; }
        e >>= 1;
        if (e && !vrat_mul(a, a, &a)) return false;
    }
    *out = r;
    return true;
}

double vrat_to_double(vrat a) { return (double)a.n / (double)a.d; }

// Exact integer square root of a perfect square, else false.
static bool isqrt_exact(i128 x, i128 *r) {
    if (x < 0) return false;
    double g = sqrt((double)x);
    i128 s = (i128)g;
    for (i128 k = s > 2 ? s - 2 : 0; k <= s + 2; k++)
        if (k * k == x) { *r = k; return true; }
    return false;
}

// --- exact evaluation ------------------------------------------------------------------

bool veval_exact(const vctx *c, int id, const vrat *vars, vrat *out, int depth) {
    if (id <= 0 || depth > VMAX_DEPTH * 2) return false;
    const vnode *n = &c->nodes[id];
    const int32_t *k = c->kids + n->kid;
    vrat a, b;
    switch (n->kind) {
    case VN_NUM:
        if (!(n->flags & NF_EXACT)) return false;
        *out = n->q;
        return true;
    case VN_VAR:
        if (!vars) return false;
        *out = vars[n->aux];
        return true;
    case VN_NEG:
        if (!veval_exact(c, k[0], vars, &a, depth + 1)) return false;
        out->n = -a.n; out->d = a.d;
        return true;
    case VN_ADD:
    case VN_MUL:
        *out = (vrat){n->kind == VN_ADD ? 0 : 1, 1};
        for (int i = 0; i < n->n; i++) {
            if (!veval_exact(c, k[i], vars, &a, depth + 1)) return false;
            if (!(n->kind == VN_ADD ? vrat_add(*out, a, out) : vrat_mul(*out, a, out))) return false;
        }
        return true;
    case VN_DIV:
        return veval_exact(c, k[0], vars, &a, depth + 1) && veval_exact(c, k[1], vars, &b, depth + 1) &&
               vrat_div(a, b, out);
    case VN_POW:
        if (!veval_exact(c, k[0], vars, &a, depth + 1) || !veval_exact(c, k[1], vars, &b, depth + 1)) return false;
        if (b.d == 1) return vrat_pow(a, b.n, out);
        if (b.d == 2 && b.n > 0 && b.n < 64) { // perfect-square roots stay exact
            i128 rn, rd;
            if (!isqrt_exact(a.n, &rn) || !isqrt_exact(a.d, &rd)) return false;
            return vrat_pow((vrat){rn, rd}, b.n, out);
        }
        return false;
    case VN_FUNC:
        if (!veval_exact(c, k[0], vars, &a, depth + 1)) return false;
        switch (n->op) {
        case VF_SQRT: {
            i128 rn, rd;
            if (!isqrt_exact(a.n, &rn) || !isqrt_exact(a.d, &rd)) return false;
            return vrat_make(rn, rd, out);
        }
        case VF_ABS: *out = (vrat){iabs128(a.n), a.d}; return true;
        case VF_FLOOR: case VF_CEIL: {
            i128 q = a.n / a.d;
            if (a.n % a.d != 0) { if (n->op == VF_FLOOR && a.n < 0) q--; if (n->op == VF_CEIL && a.n > 0) q++; }
            *out = (vrat){q, 1};
            return true;
        }
        case VF_FACT: {
            if (a.d != 1 || a.n < 0 || a.n > 33) return false;
            vrat r = {1, 1};
            for (i128 i = 2; i <= a.n; i++) if (!vrat_mul(r, (vrat){i, 1}, &r)) return false;
            *out = r;
            return true;
        }
        case VF_BINOM: {
            if (!veval_exact(c, k[1], vars, &b, depth + 1)) return false;
            if (a.d != 1 || b.d != 1 || b.n < 0 || a.n < 0 || b.n > a.n || a.n > 1000) return false;
            vrat r = {1, 1};
            i128 kk = b.n < a.n - b.n ? b.n : a.n - b.n;
            for (i128 i = 1; i <= kk; i++)
                if (!vrat_mul(r, (vrat){a.n - kk + i, i}, &r)) return false;
            *out = r;
            return true;
        }
        default: return false;
        }
    case VN_PERCENT: case VN_UNIT:
        return veval_exact(c, k[0], vars, out, depth + 1);
    default:
        return false;
    }
}

// --- numeric evaluation -------------------------------------------------------------------

static double complex nan_c(void) { return NAN; }

static bool is_real(double complex z) { return fabs(cimag(z)) <= 1e-12 * (1 + fabs(creal(z))); }

static double complex cpow_real_aware(double complex a, double complex b) {
    if (is_real(a) && is_real(b)) {
        double x = creal(a), y = creal(b);
        if (x >= 0 || y == floor(y)) return pow(x, y);
        // odd roots of negatives stay real: (-8)^(1/3) = -2
        double r = 1.0 / y;
        if (fabs(r - round(r)) < 1e-9 && ((long long)llround(r)) % 2 != 0) return -pow(-x, y);
    }
    if (a == 0) return creal(b) > 0 ? 0 : nan_c();
    return cpow(a, b);
}

static double complex func_eval(int f, double complex x, double complex y) {
    switch (f) {
    case VF_SQRT: return is_real(x) && creal(x) >= 0 ? sqrt(creal(x)) : csqrt(x);
    case VF_ROOT: return cpow_real_aware(x, 1.0 / y);
    case VF_SIN: return csin(x);
    case VF_COS: return ccos(x);
    case VF_TAN: return ctan(x);
    case VF_SEC: return 1.0 / ccos(x);
    case VF_CSC: return 1.0 / csin(x);
    case VF_COT: return ccos(x) / csin(x);
    case VF_ASIN: return casin(x);
    case VF_ACOS: return cacos(x);
    case VF_ATAN: return catan(x);
    case VF_SINH: return csinh(x);
    case VF_COSH: return ccosh(x);
    case VF_TANH: return ctanh(x);
    case VF_LN: case VF_LOG: return x == 0 ? nan_c() : clog(x);
    case VF_LOGB: return (x == 0 || y == 0 || y == 1) ? nan_c() : clog(x) / clog(y);
    case VF_EXP: return cexp(x);
    case VF_ABS: return cabs(x);
    case VF_FLOOR: return is_real(x) ? floor(creal(x)) : nan_c();
    case VF_CEIL: return is_real(x) ? ceil(creal(x)) : nan_c();
    case VF_FACT:
        if (!is_real(x) || creal(x) < 0 || creal(x) > 170) return nan_c();
        return tgamma(creal(x) + 1);
    case VF_BINOM: {
        if (!is_real(x) || !is_real(y)) return nan_c();
        double n = creal(x), k = creal(y);
        if (k < 0 || k > n || n > 1000) return nan_c();
        return exp(lgamma(n + 1) - lgamma(k + 1) - lgamma(n - k + 1));
    }
    default: return nan_c();
    }
}

static double complex fin(double complex z) {
    if (!isfinite(creal(z)) || !isfinite(cimag(z)) || cabs(z) > 1e250) return nan_c();
    return z;
}

double complex veval(const vctx *c, int id, vpoint *p, int depth) {
    if (id <= 0 || depth > VMAX_DEPTH * 2) return nan_c();
    const vnode *n = &c->nodes[id];
    const int32_t *k = c->kids + n->kid;
    double complex a, b;
    switch (n->kind) {
    case VN_NUM: return n->d;
    case VN_VAR: return p ? p->v[n->aux] : nan_c();
    case VN_CONST:
        switch (n->op) {
        case VC_PI: return M_PI;
        case VC_E: return M_E;
        case VC_I: return I;
        case VC_INF: return INFINITY;
        default: return nan_c();
        }
    case VN_NEG: { // keep +0 imaginary parts: csqrt(-1 - 0i) would be -i
        a = -veval(c, k[0], p, depth + 1);
        return cimag(a) == 0 ? CMPLX(creal(a), 0.0) : a;
    }
    case VN_ADD:
        a = 0;
        for (int i = 0; i < n->n; i++) a += veval(c, k[i], p, depth + 1);
        return a;
    case VN_MUL:
        a = 1;
        for (int i = 0; i < n->n; i++) a = fin(a * veval(c, k[i], p, depth + 1));
        return a;
    case VN_DIV:
        a = veval(c, k[0], p, depth + 1);
        b = veval(c, k[1], p, depth + 1);
        return b == 0 ? nan_c() : fin(a / b);
    case VN_POW:
        a = veval(c, k[0], p, depth + 1);
        b = veval(c, k[1], p, depth + 1);
        if (cabs(b) > 1e6 && cabs(a) != 1) return nan_c();
        return fin(cpow_real_aware(a, b));
    case VN_PM: {
        int idx = p ? p->pmi++ : 0;
        double sign = (p && ((p->pm >> idx) & 1)) ? -1 : 1;
        if (n->op == 1) sign = -sign;
        if (n->n == 1) return sign * veval(c, k[0], p, depth + 1);
        a = veval(c, k[0], p, depth + 1);
        return a + sign * veval(c, k[1], p, depth + 1);
    }
    case VN_FUNC:
        a = veval(c, k[0], p, depth + 1);
        b = n->n > 1 ? veval(c, k[1], p, depth + 1) : 0;
        return fin(func_eval(n->op, a, b));
    case VN_PERCENT: case VN_UNIT:
        return veval(c, k[0], p, depth + 1);
    case VN_BIGOP: { // integer bounds, at most 100000 terms, the bound variable restored after
        if (!p || n->aux < 0 || n->aux >= VMAX_VARS) return nan_c();
        a = veval(c, k[0], p, depth + 1);
        b = veval(c, k[1], p, depth + 1);
        if (cimag(a) != 0 || cimag(b) != 0 || creal(a) != floor(creal(a)) || creal(b) != floor(creal(b)) ||
            creal(b) - creal(a) > 100000)
            return nan_c();
        double complex save = p->v[n->aux], acc = n->op == 'S' ? 0 : 1;
        for (double v = creal(a); v <= creal(b); v++) {
            // 100000 terms of a costly body is the one long loop here: stop at the deadline
            if (((long)v & 255) == 0 && c->deadline > 0 && skpo_now() > c->deadline) { p->v[n->aux] = save; return nan_c(); }
            p->v[n->aux] = v;
            double complex t = veval(c, k[2], p, depth + 1);
            acc = n->op == 'S' ? acc + t : fin(acc * t);
        }
        p->v[n->aux] = save;
        return fin(acc);
    }
    default:
        return nan_c();
    }
}

// --- tree queries ---------------------------------------------------------------------------

int vcount_pm(const vctx *c, int id, int depth) {
    if (id <= 0 || depth > VMAX_DEPTH * 2) return 0;
    const vnode *n = &c->nodes[id];
    int s = n->kind == VN_PM;
    for (int i = 0; i < n->n; i++) s += vcount_pm(c, c->kids[n->kid + i], depth + 1);
    return s;
}

bool vhas_vars(const vctx *c, int id, int depth) {
    if (id <= 0 || depth > VMAX_DEPTH * 2) return false;
    const vnode *n = &c->nodes[id];
    if (n->kind == VN_VAR) return true;
    for (int i = 0; i < n->n; i++) if (vhas_vars(c, c->kids[n->kid + i], depth + 1)) return true;
    return false;
}

bool vhas_decimal(const vctx *c, int id, int depth) {
    if (id <= 0 || depth > VMAX_DEPTH * 2) return false;
    const vnode *n = &c->nodes[id];
    if (n->kind == VN_NUM && (n->flags & NF_DECIMAL)) return true;
    for (int i = 0; i < n->n; i++) if (vhas_decimal(c, c->kids[n->kid + i], depth + 1)) return true;
    return false;
}

bool vhas_kind(const vctx *c, int id, int kind, int depth) {
    if (id <= 0 || depth > VMAX_DEPTH * 2) return false;
    const vnode *n = &c->nodes[id];
    if (n->kind == kind) return true;
    for (int i = 0; i < n->n; i++) if (vhas_kind(c, c->kids[n->kid + i], kind, depth + 1)) return true;
    return false;
}
