/*
 * verify_int.h - internals of the verify module shared by its .c files
 * (text, extract, lex, parse, eval, cmp). Not a public API: tools use verify.h.
 *
 * Pipeline: response bytes -> vtext_sanitize (ASCII, unicode mapped to LaTeX)
 * -> vextract (the final answer string) -> vparse (expression tree in a fixed
 * arena) -> vcmp (gold tree vs predicted tree).
 */
#ifndef SKPO_VERIFY_INT_H
#define SKPO_VERIFY_INT_H

#include "verify/verify.h"

#include <complex.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define VMAX_NODES 2048
#define VMAX_KIDS 4096
#define VMAX_DEPTH 96
#define VMAX_VARS 16
#define VMAX_STR 8192

// --- exact rationals (128-bit, overflow reported) -----------------------------

typedef __int128 i128;
typedef struct vrat { i128 n, d; } vrat; // d > 0, gcd(n, d) == 1

bool vrat_make(i128 n, i128 d, vrat *out);
bool vrat_add(vrat a, vrat b, vrat *out);
bool vrat_mul(vrat a, vrat b, vrat *out);
bool vrat_div(vrat a, vrat b, vrat *out);
bool vrat_pow(vrat a, i128 e, vrat *out);
double vrat_to_double(vrat a);

// --- expression trees -----------------------------------------------------------

enum vkind {
    VN_NUM = 1,  // literal: q exact, flags
    VN_VAR,      // var: index into ctx->vars
    VN_CONST,    // op: VC_*
    VN_ADD,      // kids
    VN_MUL,      // kids
    VN_DIV,      // 2 kids
    VN_POW,      // 2 kids
    VN_NEG,      // 1 kid
    VN_PM,       // 1 kid (±a) or 2 kids (a ± b); op = 1 for \mp
    VN_FUNC,     // op: VF_*, kids (argument, optional second: root index, log base)
    VN_PERCENT,  // 1 kid
    VN_UNIT,     // 1 kid, str = canonical unit
    VN_BRACKET,  // op = open ('(' '[' 'S' set 'L' bare list 'G' ;-group), close char in aux
    VN_UNION,    // kids
    VN_REL,      // kids = operands, ops in ctx->ops[aux .. aux+n-2]
    VN_MATRIX,   // rows in aux, cols = n / rows
    VN_TEXT,     // str
    VN_BASED,    // str = digits, aux = base
    VN_RATIO,    // 2 kids
    VN_SETMINUS, // 2 kids: a set (intervals) minus a set of points
    VN_BIGOP,    // 3 kids (lower, upper, body): op 'S' \sum or 'P' \prod, aux = bound variable
};

enum vconst { VC_PI = 1, VC_E, VC_I, VC_INF, VC_EMPTY };
enum vfunc {
    VF_SQRT = 1, VF_ROOT, VF_SIN, VF_COS, VF_TAN, VF_SEC, VF_CSC, VF_COT,
    VF_ASIN, VF_ACOS, VF_ATAN, VF_SINH, VF_COSH, VF_TANH, VF_LN, VF_LOG, VF_LOGB,
    VF_EXP, VF_ABS, VF_FLOOR, VF_CEIL, VF_FACT, VF_BINOM,
};
enum vrelop { VR_EQ = 1, VR_LT, VR_LE, VR_GT, VR_GE, VR_NE, VR_IN, VR_APPROX };

#define NF_DECIMAL 1   // literal written with a decimal point (an approximation?)
#define NF_EXACT 2     // q holds the exact value
#define NF_INTLIT 4    // plain integer literal (no point, no exponent)
#define NF_REPEAT 8    // repeating decimal (exact)

typedef struct vnode {
    uint8_t kind, op, flags;
    int16_t ndec;      // NUM: digits after the point; sig: significant digits
    int16_t sig;
    int32_t kid, n;    // children: ctx->kids[kid .. kid+n-1]
    int32_t aux;       // see enum vkind
    int32_t str, slen; // offset/length in ctx->strs
    vrat q;            // NUM exact value
    double d;          // NUM value as double
} vnode;

typedef struct vctx {
    vnode nodes[VMAX_NODES];
    int nn;
    int32_t kids[VMAX_KIDS];
    int nk;
    uint8_t ops[VMAX_KIDS];
    int nops;
    char strs[VMAX_STR];
    int ns;
    char vars[VMAX_VARS][24];
    int nv;
    bool full;         // an arena overflowed: the parse is invalid
    // The wall-clock bound of one verification (skpo_verify_opts.timeout_s):
    // set once per skpo_verify, kept across vctx_init. 0 = none.
    double deadline;
    bool expired;      // the deadline passed: stop, the verdict is "timed out"
} vctx;

void vctx_init(vctx *c);
// Has the deadline passed? Checked where work can add up (each comparison,
// each parse, each exact or high-precision evaluation); sticky once true.
bool vctx_expired(vctx *c);
int vnode_new(vctx *c, int kind);
int vctx_str(vctx *c, const char *s, size_t len);       // returns offset or -1
int vctx_var(vctx *c, const char *name, size_t len);    // returns index or -1
const char *vstr(const vctx *c, const vnode *n);

// Parse one answer string; returns the root node or -1.
int vparse(vctx *c, const char *s, size_t len);

// --- tokens (verify_lex.c) --------------------------------------------------------

enum vtoktype {
    T_END = 0, T_NUM, T_VAR, T_CONST, T_FUNC, T_OP, T_REL, T_PM, T_SETOPEN, T_SETCLOSE,
    T_ROWSEP, T_FRAC, T_SQRT, T_BINOM, T_TEXT, T_UNIT, T_PERCENT, T_SEP, T_BEGIN, T_ENDENV,
    T_CUP, T_REALS, T_DOTS, T_SKIP, T_SETMINUS, T_BIGOP,
};

typedef struct vtok {
    uint8_t type, flags;
    int op;            // T_OP: the character; T_REL: VR_*; T_FUNC: VF_*; T_CONST: VC_*
    bool joinable;     // T_TEXT inside \text{}: later words append
    int16_t ndec, sig; // T_NUM (see vnode)
    vrat q;
    double d;
    char txt[48];      // T_NUM: integer digits; T_VAR: name; T_TEXT: words; T_UNIT: unit
    const char *src;   // T_NUM: the literal in the lexed string (all its digits: a big integer)
    int srclen;
} vtok;

// Tokenize s; returns the token count (the last is T_END) or -1 on unknown input.
int vlex(const char *s, size_t n, vtok *toks, int cap);
void vlex_set_int(vtok *t, long v);

// --- evaluation -------------------------------------------------------------------

typedef struct vpoint {
    double complex v[VMAX_VARS];
    unsigned pm;       // sign choices of VN_PM nodes, bit k for the k-th in order
    int pmi;           // running index during evaluation
} vpoint;

bool veval_exact(const vctx *c, int node, const vrat *vars, vrat *out, int depth);
double complex veval(const vctx *c, int node, vpoint *p, int depth); // NaN if undefined
int vcount_pm(const vctx *c, int node, int depth);
bool vhas_vars(const vctx *c, int node, int depth);
bool vhas_decimal(const vctx *c, int node, int depth);
bool vhas_kind(const vctx *c, int node, int kind, int depth);

// --- exact and high-precision arithmetic (verify_big.c: GMP, FLINT, MPFR) -------------
// Each returns 1 (equal), 0 (not equal) or -1 (not modelled / over a budget).

int vbig_exact(const vctx *c, int g, int p); // variable-free trees as exact rationals (GMP)
int vbig_poly(const vctx *c, int g, int p);  // rational functions, exact (FLINT fmpq_mpoly)
int vbig_real(const vctx *c, int g, int p);  // variable-free real values at 256 bits (MPFR)

// --- comparison ----------------------------------------------------------------------

bool vcmp_answers(vctx *c, int gold, int pred);

// --- text ------------------------------------------------------------------------------

// UTF-8 -> ASCII: unicode math mapped to LaTeX, invalid bytes/NUL/unknown
// characters to a space, invisible controls dropped. Returns malloc'd string.
char *vtext_sanitize(const char *s, size_t len, size_t *outlen);
// Canonical text of an answer for the string-equality shortcut (ASCII in,
// NUL-terminated out, truncated to cap).
void vtext_canon(const char *s, size_t len, char *out, size_t cap);
// If the answer names a choice letter ("C", "(C)", "\text{(C)}", "\textbf{(C) } 12"),
// return it (uppercase), else 0. strict: the whole answer must be the letter.
char vtext_choice(const char *s, size_t len, bool strict);

// --- extraction -------------------------------------------------------------------------

// Find the final answer in a sanitized response; writes it NUL-terminated into
// out (cap bytes). Returns false if none.
// c is scratch space for the bare-answer check.
bool vextract(vctx *c, const char *t, size_t n, const skpo_verify_opts *o, char *out, size_t cap);
// Unwrap a gold answer: strip $...$, \boxed{}, whitespace. Writes into out.
void vgold_clean(const char *t, size_t n, char *out, size_t cap);

// --- dapo (verify_dapo.c) ------------------------------------------------------------------

void skpo_verify_dapo(const char *resp, size_t rlen, const char *gold, size_t glen, skpo_verify_result *res);

#endif
