/*
 * verify_parse.c - recursive-descent parser from tokens (verify_lex.c) to an
 * expression tree in a fixed arena (vctx). Grammar, loosest first:
 *
 *   answer   := item (SEP item)*           SEP: , ; "and" "or" (top level: a list)
 *   item     := union (REL union)*         relation chains: a < x <= b, x = 3
 *   union    := sum (\cup sum)*
 *   sum      := term ((+ | - | \pm) term)*
 *   term     := unary ((* | / | implicit) power)*
 *   unary    := (- | + | \pm) unary | power
 *   power    := postfix (^ unary)?         right associative
 *   postfix  := primary (! | % | unit | _sub)*
 *   primary  := number | name | constant | (..) [..) {..} \{..\} |..| \frac \sqrt
 *               \binom | function | matrix | text
 *
 * Recursion depth is capped at VMAX_DEPTH and the arena at VMAX_NODES: a parse
 * that hits either fails (the answer counts as not given), so hostile input
 * costs bounded time. Not a LaTeX engine: unknown commands fail the parse.
 */
#include "verify/verify_impl.h"
#include "base/common.h"

#include <stdlib.h>
#include <string.h>

#define VMAX_TOKS 1024

typedef struct parser {
    vctx *c;
    vtok *t;
    int p, nt, depth, absdepth;
    bool fail;
} parser;

// --- arena -------------------------------------------------------------------------

void vctx_init(vctx *c) {
    c->nn = 1; // node 0 is never used, so 0 can mean "none"
    c->nk = c->nops = c->ns = c->nv = 0;
    c->full = false;
}

bool vctx_expired(vctx *c) {
    if (!c->expired && c->deadline > 0 && skpo_now() > c->deadline) c->expired = true;
    return c->expired;
}

int vnode_new(vctx *c, int kind) {
    if (c->nn >= VMAX_NODES) { c->full = true; return -1; }
    vnode *n = &c->nodes[c->nn];
    memset(n, 0, sizeof *n);
    n->kind = (uint8_t)kind;
    return c->nn++;
}

int vctx_str(vctx *c, const char *s, size_t len) {
    if (c->ns + (int)len + 1 > VMAX_STR) { c->full = true; return -1; }
    int off = c->ns;
    memcpy(c->strs + off, s, len);
    c->strs[off + len] = 0;
    c->ns += (int)len + 1;
    return off;
}

int vctx_var(vctx *c, const char *name, size_t len) {
    if (len >= sizeof c->vars[0]) return -1;
    for (int i = 0; i < c->nv; i++)
        if (strlen(c->vars[i]) == len && !memcmp(c->vars[i], name, len)) return i;
    if (c->nv >= VMAX_VARS) { c->full = true; return -1; }
    memcpy(c->vars[c->nv], name, len);
    c->vars[c->nv][len] = 0;
    return c->nv++;
}

const char *vstr(const vctx *c, const vnode *n) { return c->strs + n->str; }

static int mk(parser *P, int kind, const int *kids, int n) {
    vctx *c = P->c;
    if (c->nk + n > VMAX_KIDS) { c->full = true; P->fail = true; return -1; }
    int id = vnode_new(c, kind);
    if (id < 0) { P->fail = true; return -1; }
    c->nodes[id].kid = c->nk;
    c->nodes[id].n = n;
    for (int i = 0; i < n; i++) c->kids[c->nk++] = kids[i];
    return id;
}
static int mk1(parser *P, int kind, int a) { return mk(P, kind, &a, 1); }
static int mk2(parser *P, int kind, int a, int b) { int k[2] = {a, b}; return mk(P, kind, k, 2); }

// --- token helpers -------------------------------------------------------------------

static vtok *cur(parser *P) { return &P->t[P->p]; }
static bool is_op(parser *P, int ch) { return cur(P)->type == T_OP && cur(P)->op == ch; }
static bool eat_op(parser *P, int ch) { if (is_op(P, ch)) { P->p++; return true; } return false; }
static int fail(parser *P) { P->fail = true; return -1; }

static bool enter(parser *P) {
    if (P->fail || ++P->depth > VMAX_DEPTH) { P->fail = true; return false; }
    return true;
}
#define LEAVE(P, x) do { int r_ = (x); (P)->depth--; return (P)->fail ? -1 : r_; } while (0)

static int parse_item(parser *P);
static int parse_sum(parser *P);
static int parse_unary(parser *P);
static int parse_power(parser *P);
static int parse_items(parser *P, int *items, int cap, int *nitems, bool *semi_groups);
static int parse_term(parser *P);
static int parse_arg(parser *P);

// \sum_{k=a}^{b} body, \prod_{k=a}^{b} body: the body is one term (\sum_{k=1}^{n} 2k + 1 is (sum 2k) + 1)
static int parse_bigop(parser *P, int op) {
    if (!eat_op(P, '_') || !eat_op(P, '{')) return fail(P);
    vtok *v = cur(P);
    bool imag = v->type == T_CONST && v->op == VC_I; // \prod_{i=1}^{n} i: here i is the index
    if (v->type != T_VAR && !imag) return fail(P);
    int var = imag ? vctx_var(P->c, "i", 1) : vctx_var(P->c, v->txt, strlen(v->txt));
    P->p++;
    if (var < 0 || cur(P)->type != T_REL || cur(P)->op != VR_EQ) return fail(P);
    P->p++;
    int lo = parse_sum(P);
    if (lo < 0 || !eat_op(P, '}') || !eat_op(P, '^')) return fail(P);
    int hi = parse_arg(P);
    if (hi < 0) return fail(P);
    int n0 = P->c->nn;
    int body = parse_term(P);
    if (body < 0) return fail(P);
    for (int i = n0; imag && i < P->c->nn; i++) // the body's i are the index
        if (P->c->nodes[i].kind == VN_CONST && P->c->nodes[i].op == VC_I) {
            P->c->nodes[i].kind = VN_VAR;
            P->c->nodes[i].op = 0;
            P->c->nodes[i].aux = var;
        }
    int k[3] = {lo, hi, body};
    int r = mk(P, VN_BIGOP, k, 3);
    if (r > 0) { P->c->nodes[r].op = (uint8_t)op; P->c->nodes[r].aux = var; }
    return r;
}

static bool starts_primary(parser *P) {
    vtok *t = cur(P);
    switch (t->type) {
    case T_NUM: case T_VAR: case T_CONST: case T_FUNC: case T_FRAC: case T_SQRT: case T_BINOM: case T_BIGOP:
    case T_BEGIN: // 2\begin{pmatrix}...: a scalar times a matrix
        return true;
    case T_OP:
        return t->op == '(' || t->op == '{' || t->op == 'F' || t->op == 'C' || (t->op == '|' && P->absdepth == 0);
    default:
        return false;
    }
}

// --- primaries ------------------------------------------------------------------------

static int num_node(parser *P, const vtok *t) {
    int id = vnode_new(P->c, VN_NUM);
    if (id < 0) return fail(P);
    vnode *n = &P->c->nodes[id];
    n->q = t->q; n->d = t->d; n->flags = t->flags; n->ndec = t->ndec; n->sig = t->sig;
    if ((t->flags & NF_INTLIT) && !(t->flags & NF_EXACT) && t->src && t->srclen > 0 && t->srclen < VMAX_STR / 2) {
        // an integer past 128 bits keeps all its digits (thousands separators dropped) for GMP
        char dg[VMAX_STR / 2];
        int nd = 0;
        for (int i = 0; i < t->srclen; i++) if (t->src[i] >= '0' && t->src[i] <= '9') dg[nd++] = t->src[i];
        n->str = vctx_str(P->c, dg, (size_t)nd);
        n->slen = nd;
        if (n->str < 0) return fail(P);
        return id;
    }
    n->str = vctx_str(P->c, t->txt, strlen(t->txt));
    n->slen = (int)strlen(t->txt);
    if (n->str < 0) return fail(P);
    return id;
}

// One argument of \frac/\sqrt/\binom: a {group} or a single token.
static int parse_arg(parser *P) {
    if (!enter(P)) return -1;
    if (eat_op(P, '{')) {
        int r = parse_item(P);
        if (!eat_op(P, '}')) r = fail(P);
        LEAVE(P, r);
    }
    vtok *t = cur(P);
    if (t->type == T_NUM) { P->p++; LEAVE(P, num_node(P, t)); }
    if (t->type == T_VAR || t->type == T_CONST) LEAVE(P, parse_power(P));
    if (t->type == T_OP && t->op == '-') { P->p++; LEAVE(P, mk1(P, VN_NEG, parse_arg(P))); }
    LEAVE(P, parse_power(P));
}

static bool is_intlit(const vctx *c, int id) {
    return id > 0 && c->nodes[id].kind == VN_NUM && (c->nodes[id].flags & NF_INTLIT) && (c->nodes[id].flags & NF_EXACT);
}

// A number, and 2\frac{1}{2} read as the mixed number 5/2.
static int parse_number(parser *P) {
    vtok *t = cur(P);
    P->p++;
    int id = num_node(P, t);
    vtok *u = cur(P);
    if (id > 0 && (t->flags & NF_INTLIT) && u->type == T_NUM && (u->flags & NF_INTLIT) && u[1].type == T_OP &&
        u[1].op == '/' && u[2].type == T_NUM && (u[2].flags & NF_INTLIT) && u[2].q.n != 0 &&
        !(u[3].type == T_OP && u[3].op == '^')) { // "2 1/2": a mixed number too
        vnode *n = &P->c->nodes[id];
        vrat f;
        if (vrat_div(u->q, u[2].q, &f) && vrat_add(n->q, f, &n->q)) {
            n->d = vrat_to_double(n->q);
            n->flags = NF_EXACT;
            P->p += 3;
            return id;
        }
    }
    if (id < 0 || !(t->flags & NF_INTLIT) || cur(P)->type != T_FRAC) return id;
    int save_p = P->p, save_nn = P->c->nn, save_nk = P->c->nk;
    P->p++;
    int a = parse_arg(P), b = a > 0 ? parse_arg(P) : -1;
    if (!P->fail && is_intlit(P->c, a) && is_intlit(P->c, b) && P->c->nodes[b].q.n != 0) {
        vnode *n = &P->c->nodes[id];
        vrat f;
        if (vrat_div(P->c->nodes[a].q, P->c->nodes[b].q, &f) && vrat_add(n->q, f, &n->q)) {
            n->d = vrat_to_double(n->q);
            n->flags = NF_EXACT;
            return id;
        }
    }
    P->fail = false;
    P->p = save_p; P->c->nn = save_nn; P->c->nk = save_nk;
    return id;
}

static int parse_var(parser *P) {
    vtok *t = cur(P);
    P->p++;
    char name[24];
    if (strlen(t->txt) >= sizeof name) return fail(P);
    memcpy(name, t->txt, strlen(t->txt) + 1);
    if (is_op(P, '_')) { // subscript: part of the name
        P->p++;
        size_t k = strlen(name);
        bool br = eat_op(P, '{');
        do {
            vtok *s = cur(P);
            if (s->type != T_NUM && s->type != T_VAR && s->type != T_CONST) return fail(P);
            const char *txt = s->type == T_CONST ? (s->op == VC_E ? "e" : s->op == VC_I ? "i" : "c") : s->txt;
            if (k + 1 + strlen(txt) >= sizeof name) return fail(P);
            name[k++] = '_';
            strcpy(name + k, txt);
            k += strlen(txt);
            P->p++;
        } while (br && !is_op(P, '}') && cur(P)->type != T_END);
        if (br && !eat_op(P, '}')) return fail(P);
    }
    int v = vctx_var(P->c, name, strlen(name));
    if (v < 0) return fail(P);
    int id = vnode_new(P->c, VN_VAR);
    if (id < 0) return fail(P);
    P->c->nodes[id].aux = v;
    return id;
}

static int mk_const(parser *P, int which) {
    int id = vnode_new(P->c, VN_CONST);
    if (id < 0) return fail(P);
    P->c->nodes[id].op = (uint8_t)which;
    return id;
}

static int mk_reals(parser *P) {
    int a = mk1(P, VN_NEG, mk_const(P, VC_INF)), b = mk_const(P, VC_INF);
    int id = mk2(P, VN_BRACKET, a, b);
    if (id < 0) return -1;
    P->c->nodes[id].op = '(';
    P->c->nodes[id].aux = ')';
    return id;
}

// ( ... ), [ ... ), { ... }, \{ ... \}: a grouping, tuple, interval, list or set.
static int parse_bracket(parser *P, int open) {
    int items[64], n = 0;
    bool semi = false;
    int close;
    if (open == 'S') {
        if (cur(P)->type != T_SETCLOSE && parse_items(P, items, 64, &n, &semi) < 0) return -1;
        if (cur(P)->type != T_SETCLOSE) return fail(P);
        P->p++;
        close = 'S';
    } else {
        if (!(is_op(P, ')') || is_op(P, ']') || is_op(P, '}')) && parse_items(P, items, 64, &n, &semi) < 0) return -1;
        vtok *t = cur(P);
        if (t->type != T_OP || (t->op != ')' && t->op != ']' && t->op != '}')) return fail(P);
        close = t->op;
        if ((open == '{') != (close == '}')) return fail(P);
        P->p++;
    }
    if (n == 1 && !semi && open != 'S' && ((open == '(' && close == ')') || (open == '[' && close == ']') || open == '{'))
        return items[0];
    if (n == 0 && open != 'S') return fail(P);
    int id = mk(P, VN_BRACKET, items, n);
    if (id < 0) return -1;
    P->c->nodes[id].op = (uint8_t)(open == '{' ? 'L' : open);
    P->c->nodes[id].aux = close == '}' ? 'L' : close;
    return id;
}

static int parse_matrix(parser *P) {
    int cells[256], n = 0, rows = 0, cols = -1, rc = 0;
    for (;;) {
        vtok *t = cur(P);
        if (t->type == T_ENDENV || t->type == T_ROWSEP) {
            if (rc > 0 || t->type == T_ROWSEP) {
                if (rc == 0) return fail(P);
                if (cols >= 0 && rc != cols) return fail(P);
                cols = rc; rows++; rc = 0;
            }
            P->p++;
            if (t->type == T_ENDENV) break;
            continue;
        }
        if (t->type == T_END) return fail(P);
        if (n >= 256) return fail(P);
        int x = parse_item(P);
        if (x < 0) return -1;
        cells[n++] = x;
        rc++;
        if (is_op(P, '&')) P->p++;
        else if (cur(P)->type != T_ROWSEP && cur(P)->type != T_ENDENV) return fail(P);
    }
    if (rows == 0 || cols <= 0 || n != rows * cols) return fail(P);
    int id = mk(P, VN_MATRIX, cells, n);
    if (id >= 0) P->c->nodes[id].aux = rows;
    return id;
}

static int parse_func(parser *P) {
    vtok *t = cur(P);
    int f = t->op;
    P->p++;
    int pw = 0, base = 0;
    if (f == VF_LOG && eat_op(P, '_')) { base = parse_arg(P); if (base < 0) return -1; f = VF_LOGB; }
    if (eat_op(P, '^')) { pw = parse_unary(P); if (pw < 0) return -1; }
    int arg;
    if (is_op(P, '(')) { P->p++; arg = parse_item(P); if (!eat_op(P, ')')) return fail(P); }
    else {
        arg = parse_power(P);
        // \sin 2x is sin(2x): a number argument takes the names right after it
        while (arg > 0 && P->c->nodes[arg].kind == VN_NUM && (cur(P)->type == T_VAR || cur(P)->type == T_CONST)) {
            int v = parse_power(P);
            if (v < 0) return -1;
            arg = mk2(P, VN_MUL, arg, v);
        }
    }
    if (arg < 0) return -1;
    int fn = base ? mk2(P, VN_FUNC, arg, base) : mk1(P, VN_FUNC, arg);
    if (fn < 0) return -1;
    P->c->nodes[fn].op = (uint8_t)f;
    return pw ? mk2(P, VN_POW, fn, pw) : fn;
}

static int parse_primary(parser *P) {
    if (!enter(P)) return -1;
    vtok *t = cur(P);
    int r, a, b;
    switch (t->type) {
    case T_NUM: LEAVE(P, parse_number(P));
    case T_VAR: LEAVE(P, parse_var(P));
    case T_CONST: P->p++; LEAVE(P, mk_const(P, t->op));
    case T_BIGOP: P->p++; LEAVE(P, parse_bigop(P, t->op));
    case T_REALS: P->p++; LEAVE(P, mk_reals(P));
    case T_FUNC: LEAVE(P, parse_func(P));
    case T_TEXT:
        P->p++;
        if (!strcmp(t->txt, "all real numbers") || !strcmp(t->txt, "all reals") || !strcmp(t->txt, "real numbers"))
            LEAVE(P, mk_reals(P));
        r = vnode_new(P->c, VN_TEXT);
        if (r < 0) LEAVE(P, fail(P));
        P->c->nodes[r].str = vctx_str(P->c, t->txt, strlen(t->txt));
        P->c->nodes[r].slen = (int)strlen(t->txt);
        LEAVE(P, P->c->nodes[r].str < 0 ? fail(P) : r);
    case T_FRAC:
        P->p++;
        a = parse_arg(P); b = a > 0 ? parse_arg(P) : -1;
        LEAVE(P, b > 0 ? mk2(P, VN_DIV, a, b) : fail(P));
    case T_BINOM:
        P->p++;
        a = parse_arg(P); b = a > 0 ? parse_arg(P) : -1;
        r = b > 0 ? mk2(P, VN_FUNC, a, b) : fail(P);
        if (r > 0) P->c->nodes[r].op = VF_BINOM;
        LEAVE(P, r);
    case T_SQRT:
        P->p++;
        b = 0;
        if (eat_op(P, '[')) { b = parse_sum(P); if (b < 0 || !eat_op(P, ']')) LEAVE(P, fail(P)); }
        a = parse_arg(P);
        if (a < 0) LEAVE(P, -1);
        r = b ? mk2(P, VN_FUNC, a, b) : mk1(P, VN_FUNC, a);
        if (r > 0) P->c->nodes[r].op = b ? VF_ROOT : VF_SQRT;
        LEAVE(P, r);
    case T_SETOPEN: P->p++; LEAVE(P, parse_bracket(P, 'S'));
    case T_BEGIN: P->p++; LEAVE(P, parse_matrix(P));
    case T_OP:
        if (t->op == '(' || t->op == '[' || t->op == '{') {
            P->p++;
            r = parse_bracket(P, t->op);
            LEAVE(P, r);
        }
        if (t->op == '|' || t->op == 'F' || t->op == 'C') {
            int close = t->op == '|' ? '|' : t->op == 'F' ? 'f' : 'c';
            P->p++;
            P->absdepth++;
            a = parse_sum(P);
            P->absdepth--;
            if (a < 0 || !eat_op(P, close)) LEAVE(P, fail(P));
            r = mk1(P, VN_FUNC, a);
            if (r > 0) P->c->nodes[r].op = t->op == '|' ? VF_ABS : t->op == 'F' ? VF_FLOOR : VF_CEIL;
            LEAVE(P, r);
        }
        LEAVE(P, fail(P));
    default:
        LEAVE(P, fail(P));
    }
}

// --- operators -----------------------------------------------------------------------

static int parse_postfix(parser *P) {
    int x = parse_primary(P);
    while (x > 0 && !P->fail) {
        vtok *t = cur(P);
        if (t->type == T_OP && t->op == '!') {
            P->p++;
            x = mk1(P, VN_FUNC, x);
            if (x > 0) P->c->nodes[x].op = VF_FACT;
        } else if (t->type == T_PERCENT) {
            P->p++;
            x = mk1(P, VN_PERCENT, x);
        } else if (t->type == T_UNIT) {
            char u[64] = "";
            while (cur(P)->type == T_UNIT) {
                if (strlen(u) + strlen(cur(P)->txt) < sizeof u) strcat(u, cur(P)->txt);
                P->p++;
                const char *pw = NULL; // the power is part of the unit: m^2 is not m
                if (is_op(P, '^') && P->t[P->p + 1].type == T_NUM) { pw = P->t[P->p + 1].txt; P->p += 2; } // cm^2
                else if (is_op(P, '^') && P->t[P->p + 1].type == T_OP && P->t[P->p + 1].op == '{' &&
                         P->t[P->p + 2].type == T_NUM && P->t[P->p + 3].type == T_OP && P->t[P->p + 3].op == '}') {
                    pw = P->t[P->p + 2].txt;
                    P->p += 4; // cm^{2}
                }
                if (pw && strlen(u) + strlen(pw) + 2 < sizeof u) { strcat(u, "^"); strcat(u, pw); }
            }
            size_t ul = strlen(u); // "square meters" is m^2, "cubic feet" ft^3
            if (ul > 2 && ul + 3 < sizeof u && (!strncmp(u, "sq", 2) || !strncmp(u, "cu", 2)) && !strchr(u, '^')) {
                char p2 = u[0] == 's' ? '2' : '3';
                memmove(u, u + 2, ul - 1);
                ul -= 2;
                u[ul++] = '^'; u[ul++] = p2; u[ul] = 0;
            }
            x = mk1(P, VN_UNIT, x);
            if (x > 0) {
                P->c->nodes[x].str = vctx_str(P->c, u, strlen(u));
                P->c->nodes[x].slen = (int)strlen(u);
            }
        } else if (t->type == T_OP && t->op == '_' && P->c->nodes[x].kind == VN_NUM &&
                   (P->c->nodes[x].flags & NF_INTLIT)) {
            P->p++; // base subscript: 204_5, 52_{8}
            bool br = eat_op(P, '{');
            vtok *b = cur(P);
            if (b->type != T_NUM || !(b->flags & NF_INTLIT) || b->q.n < 2 || b->q.n > 36) return fail(P);
            P->p++;
            if (br && !eat_op(P, '}')) return fail(P);
            if (b->q.n != 10) {
                P->c->nodes[x].kind = VN_BASED;
                P->c->nodes[x].aux = (int32_t)b->q.n;
            }
        } else break;
    }
    return P->fail ? -1 : x;
}

static int parse_power(parser *P) {
    if (!enter(P)) return -1;
    int b = parse_postfix(P);
    if (b < 0) LEAVE(P, -1);
    if (eat_op(P, '^')) {
        int e;
        if (eat_op(P, '{')) { e = parse_item(P); if (!eat_op(P, '}')) e = fail(P); }
        else e = parse_unary(P);
        if (e < 0) LEAVE(P, -1);
        b = mk2(P, VN_POW, b, e);
        // postfix after a power: 2^{3}\% ...
        while (b > 0 && cur(P)->type == T_PERCENT) { P->p++; b = mk1(P, VN_PERCENT, b); }
    }
    LEAVE(P, b);
}

static int parse_unary(parser *P) {
    if (!enter(P)) return -1;
    vtok *t = cur(P);
    if (t->type == T_OP && t->op == '-') { P->p++; LEAVE(P, mk1(P, VN_NEG, parse_unary(P))); }
    if (t->type == T_OP && t->op == '+') { P->p++; LEAVE(P, parse_unary(P)); }
    if (t->type == T_PM) {
        P->p++;
        int r = mk1(P, VN_PM, parse_unary(P));
        if (r > 0) P->c->nodes[r].op = (uint8_t)t->op;
        LEAVE(P, r);
    }
    LEAVE(P, parse_power(P));
}

static int parse_term(parser *P) {
    if (!enter(P)) return -1;
    int f[64], n = 0;
    int x = parse_unary(P);
    if (x < 0) LEAVE(P, -1);
    f[n++] = x;
    for (;;) {
        if (n >= 64) LEAVE(P, fail(P));
        if (eat_op(P, '*')) { x = parse_unary(P); if (x < 0) LEAVE(P, -1); f[n++] = x; continue; }
        if (eat_op(P, '/')) {
            x = parse_unary(P);
            if (x < 0) LEAVE(P, -1);
            int lhs = n == 1 ? f[0] : mk(P, VN_MUL, f, n);
            f[0] = mk2(P, VN_DIV, lhs, x);
            n = 1;
            continue;
        }
        if (starts_primary(P)) { // implicit product; words never multiply ("Answer 9")
            if (P->c->nodes[f[n - 1]].kind == VN_TEXT) LEAVE(P, fail(P));
            x = parse_power(P);
            if (x < 0) LEAVE(P, -1);
            if (P->c->nodes[x].kind == VN_TEXT) LEAVE(P, fail(P));
            f[n++] = x;
            continue;
        }
        break;
    }
    LEAVE(P, n == 1 ? f[0] : mk(P, VN_MUL, f, n));
}

static int parse_sum(parser *P) {
    if (!enter(P)) return -1;
    int t[64], n = 0;
    int x = parse_term(P);
    if (x < 0) LEAVE(P, -1);
    t[n++] = x;
    for (;;) {
        vtok *k = cur(P);
        if (n >= 63) LEAVE(P, fail(P));
        if (k->type == T_OP && (k->op == '+' || k->op == '-')) {
            P->p++;
            x = parse_term(P);
            if (x < 0) LEAVE(P, -1);
            t[n++] = k->op == '-' ? mk1(P, VN_NEG, x) : x;
            continue;
        }
        if (k->type == T_PM) { // a ± b: one node over everything so far
            P->p++;
            x = parse_term(P);
            if (x < 0) LEAVE(P, -1);
            int lhs = n == 1 ? t[0] : mk(P, VN_ADD, t, n);
            t[0] = mk2(P, VN_PM, lhs, x);
            if (t[0] > 0) P->c->nodes[t[0]].op = (uint8_t)k->op;
            n = 1;
            continue;
        }
        break;
    }
    LEAVE(P, n == 1 ? t[0] : mk(P, VN_ADD, t, n));
}

static int parse_union(parser *P) {
    int u[32], n = 0;
    int x = parse_sum(P);
    if (x < 0) return -1;
    u[n++] = x;
    while (cur(P)->type == T_CUP && n < 32) {
        P->p++;
        x = parse_sum(P);
        if (x < 0) return -1;
        u[n++] = x;
    }
    if (cur(P)->type == T_SETMINUS) { // \mathbb{R} \setminus \{3\}
        P->p++;
        x = parse_sum(P);
        if (x < 0) return -1;
        int a = n == 1 ? u[0] : mk(P, VN_UNION, u, n);
        return a < 0 ? -1 : mk2(P, VN_SETMINUS, a, x);
    }
    if (is_op(P, ':') && n == 1) { // ratio a:b, a:b:c, ...
        int r[8], nr = 0;
        r[nr++] = u[0];
        while (is_op(P, ':')) {
            if (nr >= 8) return fail(P);
            P->p++;
            x = parse_sum(P);
            if (x < 0) return -1;
            r[nr++] = x;
        }
        return mk(P, VN_RATIO, r, nr);
    }
    return n == 1 ? u[0] : mk(P, VN_UNION, u, n);
}

static int parse_item(parser *P) {
    if (!enter(P)) return -1;
    int o[16], n = 0;
    // "\approx 2.5": the value it gives (compared like any decimal: an
    // approximation of an exact gold stays wrong)
    if (cur(P)->type == T_REL && cur(P)->op == VR_APPROX && P->t[P->p + 1].type != T_END) P->p++;
    uint8_t ops[16];
    int x = parse_union(P);
    if (x < 0) LEAVE(P, -1);
    o[n++] = x;
    while (cur(P)->type == T_REL && n < 16) {
        ops[n - 1] = (uint8_t)cur(P)->op;
        P->p++;
        x = parse_union(P);
        if (x < 0) LEAVE(P, -1);
        o[n++] = x;
    }
    if (n == 1) LEAVE(P, o[0]);
    vctx *c = P->c;
    if (c->nops + n > VMAX_KIDS) LEAVE(P, fail(P));
    int id = mk(P, VN_REL, o, n);
    if (id < 0) LEAVE(P, -1);
    c->nodes[id].aux = c->nops;
    for (int i = 0; i < n - 1; i++) c->ops[c->nops++] = ops[i];
    LEAVE(P, id);
}

static bool is_sep(parser *P) {
    vtok *t = cur(P);
    return t->type == T_SEP || (t->type == T_OP && (t->op == ',' || t->op == ';'));
}

// item (SEP item)*: separators collapse ("1, 2, and 3"). With both ';' and ','
// the ';' parts become ordered groups ("p=5,q=2;p=7,q=2").
static int parse_items(parser *P, int *items, int cap, int *nitems, bool *semi_groups) {
    int all[64], na = 0, groups[64], ng = 0, gstart = 0;
    bool comma = false, semi = false;
    while (is_sep(P)) P->p++;
    for (;;) {
        if (na >= 64) return fail(P);
        int x = parse_item(P);
        if (x < 0) return -1;
        all[na++] = x;
        bool sawsemi = false;
        if (!is_sep(P)) break;
        while (is_sep(P)) {
            vtok *t = cur(P);
            if (t->type == T_OP && t->op == ';') sawsemi = true;
            else comma = true;
            P->p++;
        }
        if (sawsemi) { semi = true; if (ng < 64) groups[ng++] = na - gstart; gstart = na; }
        if (cur(P)->type == T_END || is_op(P, ')') || is_op(P, ']') || is_op(P, '}') ||
            cur(P)->type == T_SETCLOSE) break;
    }
    *semi_groups = false;
    if (semi && comma && ng > 0) {
        if (ng < 64) groups[ng++] = na - gstart;
        int n = 0, k = 0;
        for (int g = 0; g < ng; g++) {
            if (groups[g] == 0) continue;
            if (n >= cap) return fail(P);
            if (groups[g] == 1) items[n++] = all[k];
            else {
                int id = mk(P, VN_BRACKET, all + k, groups[g]);
                if (id < 0) return -1;
                P->c->nodes[id].op = 'G';
                P->c->nodes[id].aux = 'G';
                items[n++] = id;
            }
            k += groups[g];
        }
        *nitems = n;
        *semi_groups = true;
        return 0;
    }
    if (na > cap) return fail(P);
    memcpy(items, all, sizeof(int) * (size_t)na);
    *nitems = na;
    return 0;
}

int vparse(vctx *c, const char *s, size_t len) {
    if (vctx_expired(c)) return -1;
    // every token but T_END consumes at least one byte of s
    int cap = len + 2 < VMAX_TOKS ? (int)len + 2 : VMAX_TOKS;
    vtok *toks = skpo_xmalloc(sizeof(vtok) * (size_t)cap);
    int nt = vlex(s, len, toks, cap);
    int root = -1;
    if (nt > 1) {
        parser P = {c, toks, 0, nt, 0, 0, false};
        int items[64], n = 0;
        bool semi = false;
        if (parse_items(&P, items, 64, &n, &semi) == 0 && !P.fail && cur(&P)->type == T_END && !c->full) {
            if (n == 1) root = items[0];
            else {
                root = mk(&P, VN_BRACKET, items, n);
                if (root > 0) { c->nodes[root].op = 'L'; c->nodes[root].aux = 'L'; }
            }
            if (P.fail || c->full) root = -1;
        }
    }
    free(toks);
    return root;
}
