/*
 * verify_code.c - code-generation reward: extract the program, run it on the
 * tests in the sandbox, compare outputs as LiveCodeBench does (verify_task.h).
 *
 * Inside each sandbox a small trusted driver (DRIVER below, /w/driver.py)
 * compiles the program once, imports LiveCodeBench's prelude modules once, and
 * forks one process per test (a fork server: no interpreter start or prelude
 * import per test). The test process starts a new session, gets the test's
 * pipes as fd 0/1/2 and nothing else (the report pipe is closed), sets
 * RLIMIT_CPU = the per-test timeout + 1 s, and runs the program as __main__
 * (SystemExit ends it normally, as in lcb_runner) or, for a functional test,
 * calls the method and writes the result's JSON to its stdout while the
 * program's own prints go to /dev/null. The driver kills the test's process
 * group at the per-test wall timeout, reads at most OUT_CAP bytes of its
 * stdout, keeps the tail of its stderr, and reports each test on fd 3 as
 * "INDEX STATUS LENGTH\n" + LENGTH bytes (status ok: the output; otherwise a
 * short reason). The parent compares while the job runs and stops it at the
 * first failure. The expected outputs stay in the parent.
 */
#define _GNU_SOURCE
#include "verify/verify_task.h"
#include "record/record.h"

#include <ctype.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// LiveCodeBench's import prelude (testing_util.import_string), put before
// every program, stdin and functional alike.
static const char PRELUDE[] =
    "from string import *\nfrom re import *\nfrom datetime import *\nfrom collections import *\nfrom heapq import *\n"
    "from bisect import *\nfrom copy import *\nfrom math import *\nfrom random import *\nfrom statistics import *\n"
    "from itertools import *\nfrom functools import *\nfrom operator import *\nfrom io import *\nfrom sys import *\n"
    "from json import *\nfrom builtins import *\nfrom typing import *\nimport string\nimport re\nimport datetime\n"
    "import collections\nimport heapq\nimport bisect\nimport copy\nimport math\nimport random\nimport statistics\n"
    "import itertools\nimport functools\nimport operator\nimport io\nimport sys\nimport json\n"
    "sys.setrecursionlimit(50000)\n\n";

// Runs in the sandbox as pid 1 of its namespace: one forked process per test, results framed on fd 3.
static const char DRIVER[] =
    "import json, os, resource, selectors, signal, sys, time, traceback\n"
    "spec = json.load(open('/w/tests.json'))\n"
    "T = float(spec['timeout']); CAP = int(spec['out_max']); FSIZE = int(spec['fsize']); fn = spec.get('fn_name')\n"
    "SRC = open('/w/prog.py').read()\n"
    "try:\n"
    "    CODE = compile(SRC, '/w/prog.py', 'exec')\n"
    "except (SyntaxError, ValueError) as e:\n"
    "    os.write(3, b'0 error %d\\n' % len(m := ('compile error: %s: %s' % (type(e).__name__, e)).encode()[:150]) + m)\n"
    "    sys.exit(0)\n"
    "# the prelude's modules, loaded once here and inherited by every test process\n"
    "exec(compile(SRC[:SRC.index('\\n\\n') + 1], '/w/prelude', 'exec'), {'__name__': 'prelude'})\n"
    "def frame(i, st, payload):\n"
    "    b = b'%d %s %d\\n' % (i, st.encode(), len(payload)) + payload\n"
    "    while b:\n"
    "        b = b[os.write(3, b):]\n"
    "def last_line(err):\n"
    "    lines = [l for l in err.decode('utf-8', 'replace').strip().split('\\n') if l.strip()]\n"
    "    return (lines[-1].strip() if lines else '')[:150]\n"
    "def child(r0, w1, w2):\n"
    "    # a test process: fd 0/1/2 are the test's pipes, nothing else is open\n"
    "    os.setsid()\n"
    "    os.dup2(r0, 0); os.dup2(w1, 1); os.dup2(w2, 2)\n"
    "    os.closerange(3, 4096)\n"
    "    c = int(T) + 1\n"
    "    resource.setrlimit(resource.RLIMIT_CPU, (c, c + 1))\n"
    "    resource.setrlimit(resource.RLIMIT_FSIZE, (FSIZE, FSIZE))\n"
    "    signal.signal(signal.SIGPIPE, signal.SIG_DFL)\n"
    "    rc = 0\n"
    "    try:\n"
    "        if fn is None:\n"
    "            exec(CODE, {'__name__': '__main__', '__builtins__': __builtins__})\n"
    "        else:\n"
    "            args = [json.loads(line) for line in sys.stdin.read().split('\\n')]\n"
    "            res = os.dup(1)\n"
    "            nul = os.open('/dev/null', os.O_WRONLY); os.dup2(nul, 1); os.close(nul)\n"
    "            g = {'__name__': 'tmp_sol', '__builtins__': __builtins__}\n"
    "            exec(CODE, g)\n"
    "            obj = g['Solution']() if 'class Solution' in SRC else None\n"
    "            m = getattr(obj, fn) if obj is not None else g[fn]\n"
    "            r = m(*args)\n"
    "            if isinstance(r, tuple): r = list(r)\n"
    "            sys.stdout.flush()\n"
    "            b = json.dumps(r).encode()\n"
    "            while b: b = b[os.write(res, b):]\n"
    "    except SystemExit:\n"
    "        pass  # LiveCodeBench catches SystemExit and grades the output\n"
    "    except BaseException:\n"
    "        try: traceback.print_exc()\n"
    "        except BaseException: pass\n"
    "        rc = 1\n"
    "    try: sys.stdout.flush()\n"
    "    except BaseException: rc = rc or 1\n"
    "    os._exit(rc)\n"
    "for i, data in enumerate(spec['inputs']):\n"
    "    data = data.encode('utf-8', 'surrogatepass')\n"
    "    p0 = os.pipe(); p1 = os.pipe(); p2 = os.pipe()\n"
    "    sys.stdout.flush(); sys.stderr.flush()\n"
    "    try:\n"
    "        pid = os.fork()\n"
    "    except OSError as e:\n"
    "        frame(i, 'error', ('cannot start the program: %s' % e.strerror).encode()); break\n"
    "    if pid == 0:\n"
    "        try: child(p0[0], p1[1], p2[1])\n"
    "        finally: os._exit(1)\n"
    "    os.close(p0[0]); os.close(p1[1]); os.close(p2[1])\n"
    "    pidfd = os.pidfd_open(pid)\n"
    "    sel = selectors.DefaultSelector()\n"
    "    out = bytearray(); err = bytearray(); pos = 0; view = memoryview(data); st = None; status = None\n"
    "    win, rout, rerr = p0[1], p1[0], p2[0]\n"
    "    os.set_blocking(win, False)\n"
    "    if data: sel.register(win, selectors.EVENT_WRITE)\n"
    "    else: os.close(win)\n"
    "    sel.register(rout, selectors.EVENT_READ); sel.register(rerr, selectors.EVENT_READ); sel.register(pidfd, selectors.EVENT_READ)\n"
    "    end = time.monotonic() + T\n"
    "    while st is None and (status is None or len(sel.get_map()) > 0):\n"
    "        left = end - time.monotonic()\n"
    "        if left <= 0: st = 'timeout'; break\n"
    "        ev = sel.select(left if status is None else min(left, 0.05))\n"
    "        if status is not None and not ev: break  # exited; its pipes are drained\n"
    "        for key, _ in ev:\n"
    "            f = key.fd\n"
    "            if f == pidfd:\n"
    "                sel.unregister(f); status = os.waitpid(pid, 0)[1]\n"
    "            elif f == win:\n"
    "                try: pos += os.write(f, view[pos:pos + 65536])\n"
    "                except BlockingIOError: pass\n"
    "                except BrokenPipeError: pos = len(data)\n"
    "                if pos >= len(data): sel.unregister(f); os.close(f)\n"
    "            else:\n"
    "                chunk = os.read(f, 65536)\n"
    "                if not chunk: sel.unregister(f); continue\n"
    "                if f == rout:\n"
    "                    out += chunk\n"
    "                    if len(out) > CAP: st = 'olimit'; break\n"
    "                else:\n"
    "                    err += chunk; del err[:-4096]\n"
    "    try: os.killpg(pid, signal.SIGKILL)\n"
    "    except OSError: pass\n"
    "    if status is None: status = os.waitpid(pid, 0)[1]\n"
    "    for f in list(sel.get_map()):\n"
    "        if f != pidfd: os.close(f)\n"
    "    sel.close(); os.close(pidfd)\n"
    "    if st == 'timeout': frame(i, 'timeout', b'time limit exceeded (%g s)' % T); break\n"
    "    if st == 'olimit': frame(i, 'olimit', b'output limit exceeded (%d bytes)' % CAP); break\n"
    "    if os.WIFSIGNALED(status):\n"
    "        s = os.WTERMSIG(status)\n"
    "        if s == signal.SIGXCPU: frame(i, 'timeout', b'CPU time limit exceeded (%d s)' % (int(T) + 1)); break\n"
    "        frame(i, 'signal', ('killed by signal %d (%s)' % (s, signal.Signals(s).name)).encode()); break\n"
    "    rc = os.WEXITSTATUS(status)\n"
    "    if rc != 0: frame(i, 'error', ('runtime error: %s' % (last_line(err) or 'exit %d' % rc)).encode()); break\n"
    "    frame(i, 'ok', bytes(out))\n";

#define OUT_CAP ((size_t)8 << 20)
#define FSIZE_CAP ((size_t)16 << 20) // largest file a test process may write

// --- tests ----------------------------------------------------------------------------

void skpo_code_tests_free(skpo_code_tests *t) {
    for (size_t i = 0; i < t->n; i++) free(t->in[i]), free(t->out[i]);
    free(t->in), free(t->out), free(t->fn_name);
    memset(t, 0, sizeof *t);
}

skpo_status skpo_code_tests_parse(const char *json, size_t len, skpo_code_tests *t, skpo_err *err) {
    memset(t, 0, sizeof *t);
    json_error_t je;
    json_t *root = json_loadb(json, len, 0, &je);
    if (!json_is_object(root)) {
        json_decref(root);
        return skpo_err_set(err, SKPO_EFORMAT, "tests: not a JSON object (%s)", root ? "wrong type" : je.text);
    }
    json_t *in = json_object_get(root, "inputs"), *out = json_object_get(root, "outputs"), *fn = json_object_get(root, "fn_name");
    skpo_status st = SKPO_OK;
    if (!json_is_array(in) || !json_is_array(out) || json_array_size(in) != json_array_size(out) || json_array_size(in) == 0)
        st = skpo_err_set(err, SKPO_EFORMAT, "tests: need non-empty 'inputs' and 'outputs' arrays of one length");
    else if (fn && !json_is_null(fn) && (!json_is_string(fn) || !json_string_length(fn)))
        st = skpo_err_set(err, SKPO_EFORMAT, "tests: 'fn_name' is not a non-empty string");
    if (st == SKPO_OK) {
        t->n = json_array_size(in);
        t->in = skpo_xcalloc(t->n, sizeof *t->in);
        t->out = skpo_xcalloc(t->n, sizeof *t->out);
        if (json_is_string(fn)) t->fn_name = skpo_xstrdup(json_string_value(fn));
        for (size_t i = 0; i < t->n && st == SKPO_OK; i++) {
            json_t *a = json_array_get(in, i), *b = json_array_get(out, i);
            if (!json_is_string(a) || !json_is_string(b))
                st = skpo_err_set(err, SKPO_EFORMAT, "tests: input/output %zu is not a string", i);
            else t->in[i] = skpo_xstrdup(json_string_value(a)), t->out[i] = skpo_xstrdup(json_string_value(b));
        }
        if (st != SKPO_OK) skpo_code_tests_free(t);
    }
    json_decref(root);
    return st;
}

// --- extraction -----------------------------------------------------------------------

char *skpo_code_extract(const char *text, size_t len) {
    // lines holding ```: the program is between the last two
    const char *a = NULL, *b = NULL; // starts of the last two such lines
    for (size_t i = 0; i < len;) {
        size_t e = i;
        while (e < len && text[e] != '\n') e++;
        if (memmem(text + i, e - i, "```", 3)) a = b, b = text + i;
        i = e + 1;
    }
    if (!a) return NULL;
    const char *s = memchr(a, '\n', (size_t)(text + len - a));
    if (!s || s + 1 > b) return skpo_xstrdup("");
    s++;
    size_t n = (size_t)(b - s);
    if (n > 0 && s[n - 1] == '\n') n--;
    return skpo_xstrndup(s, n);
}

// --- comparison -----------------------------------------------------------------------

static bool py_space(unsigned char c) { return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f); }

static void strip(const char **s, size_t *n) {
    while (*n && py_space((unsigned char)**s)) (*s)++, (*n)--;
    while (*n && py_space((unsigned char)(*s)[*n - 1])) (*n)--;
}

// Python's Decimal(token) as (special, sign, digits without leading/trailing
// zeros, exponent). Returns false when Decimal() would raise.
typedef struct dec { int special; int neg; char d[512]; size_t nd; long exp; } dec; // special: 0 finite, 1 inf, 2 nan
static bool dec_parse(const char *s, size_t n, dec *x) {
    memset(x, 0, sizeof *x);
    size_t i = 0;
    if (i < n && (s[i] == '+' || s[i] == '-')) x->neg = s[i] == '-', i++;
    const char *r = s + i;
    size_t rn = n - i;
    if ((rn == 3 && !strncasecmp(r, "inf", 3)) || (rn == 8 && !strncasecmp(r, "infinity", 8))) return x->special = 1, true;
    if ((rn >= 3 && !strncasecmp(r, "nan", 3)) || (rn >= 4 && !strncasecmp(r, "snan", 4))) {
        size_t k = r[0] == 's' || r[0] == 'S' ? 4 : 3;
        for (; k < rn; k++)
            if (!isdigit((unsigned char)r[k])) return false;
        return x->special = 2, true;
    }
    bool any = false, dot = false;
    long frac = 0;
    char prev = 0;
    for (; i < n; i++) {
        char c = s[i];
        if (c == '_') { // Decimal accepts underscores between digits
            if (!isdigit((unsigned char)prev) || i + 1 >= n || !isdigit((unsigned char)s[i + 1])) return false;
        } else if (isdigit((unsigned char)c)) {
            any = true;
            if (x->nd || c != '0') {
                if (x->nd >= sizeof x->d) return false;
                x->d[x->nd++] = c;
            }
            if (dot) frac++;
        } else if (c == '.' && !dot) dot = true;
        else break;
        prev = c;
    }
    if (!any) return false;
    long e = 0;
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        i++;
        int eneg = 0;
        if (i < n && (s[i] == '+' || s[i] == '-')) eneg = s[i] == '-', i++;
        if (i >= n || !isdigit((unsigned char)s[i])) return false;
        for (; i < n && isdigit((unsigned char)s[i]); i++)
            if (e < 100000000) e = e * 10 + (s[i] - '0');
        if (eneg) e = -e;
    }
    if (i != n) return false;
    x->exp = e - frac;
    while (x->nd && x->d[x->nd - 1] == '0') x->nd--, x->exp++;
    if (!x->nd) x->neg = 0, x->exp = 0; // every zero is equal
    return true;
}
static bool dec_eq(const dec *a, const dec *b) {
    if (a->special == 2 || b->special == 2) return false;
    if (a->special || b->special) return a->special == b->special && a->neg == b->neg;
    return a->neg == b->neg && a->nd == b->nd && a->exp == b->exp && !memcmp(a->d, b->d, a->nd);
}

// One line: equal text, or the same number of whitespace-separated tokens,
// each an equal Decimal.
static bool line_equal(const char *a, size_t an, const char *b, size_t bn) {
    if (an == bn && !memcmp(a, b, an)) return true;
    size_t i = 0, j = 0;
    for (;;) {
        while (i < an && py_space((unsigned char)a[i])) i++;
        while (j < bn && py_space((unsigned char)b[j])) j++;
        if (i == an || j == bn) return i == an && j == bn;
        size_t ie = i, je = j;
        while (ie < an && !py_space((unsigned char)a[ie])) ie++;
        while (je < bn && !py_space((unsigned char)b[je])) je++;
        dec x, y;
        if (!dec_parse(a + i, ie - i, &x) || !dec_parse(b + j, je - j, &y) || !dec_eq(&x, &y)) return false;
        i = ie, j = je;
    }
}

bool skpo_code_stdout_equal(const char *got, size_t glen, const char *want, size_t wlen) {
    strip(&got, &glen);
    strip(&want, &wlen);
    for (;;) {
        const char *ge = memchr(got, '\n', glen), *we = memchr(want, '\n', wlen);
        size_t gl = ge ? (size_t)(ge - got) : glen, wl = we ? (size_t)(we - want) : wlen;
        const char *g = got, *w = want;
        size_t gn = gl, wn = wl;
        strip(&g, &gn);
        strip(&w, &wn);
        if (!line_equal(g, gn, w, wn)) return false;
        if (!ge || !we) return !ge && !we;
        got = ge + 1, glen -= gl + 1;
        want = we + 1, wlen -= wl + 1;
    }
}

// Python == on decoded JSON values: numbers (bools count as 0/1) by value,
// arrays element-wise, objects by key set and values, strings exactly.
static bool num_of(const json_t *v, double *d, long long *i, bool *is_int) {
    if (json_is_integer(v)) return *i = json_integer_value(v), *d = (double)*i, *is_int = true, true;
    if (json_is_boolean(v)) return *i = json_is_true(v), *d = (double)*i, *is_int = true, true;
    if (json_is_real(v)) return *d = json_real_value(v), *is_int = false, true;
    return false;
}
static bool py_eq(const json_t *a, const json_t *b) {
    double da, db;
    long long ia, ib;
    bool ai, bi;
    if (num_of(a, &da, &ia, &ai) && num_of(b, &db, &ib, &bi)) {
        if (ai && bi) return ia == ib;
        return da == db;
    }
    if (json_typeof(a) != json_typeof(b)) return false;
    switch (json_typeof(a)) {
    case JSON_STRING:
        return json_string_length(a) == json_string_length(b) && !memcmp(json_string_value(a), json_string_value(b), json_string_length(a));
    case JSON_NULL: return true;
    case JSON_ARRAY: {
        if (json_array_size(a) != json_array_size(b)) return false;
        for (size_t i = 0; i < json_array_size(a); i++)
            if (!py_eq(json_array_get(a, i), json_array_get(b, i))) return false;
        return true;
    }
    case JSON_OBJECT: {
        if (json_object_size(a) != json_object_size(b)) return false;
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)a, k, v) {
            json_t *w = json_object_get(b, k);
            if (!w || !py_eq(v, w)) return false;
        }
        return true;
    }
    default: return false;
    }
}

bool skpo_code_json_equal(const char *got, size_t glen, const char *want, size_t wlen) {
    json_t *a = json_loadb(got, glen, JSON_DECODE_ANY, NULL), *b = json_loadb(want, wlen, JSON_DECODE_ANY, NULL);
    bool eq;
    if (a && b) eq = py_eq(a, b);
    else { // beyond jansson (integers over 64 bits, NaN): the same text
        strip(&got, &glen);
        strip(&want, &wlen);
        eq = glen == wlen && !memcmp(got, want, glen);
    }
    json_decref(a), json_decref(b);
    return eq;
}

// --- judging --------------------------------------------------------------------------

typedef struct judge_ctx {
    skpo_code_item *it;
    size_t pos;     // parsed up to here in the result buffer
    size_t next;    // next test index expected
    bool decided;
} judge_ctx;

// A reason text from program-controlled bytes: valid UTF-8, printable, short.
static void set_reason(skpo_code_item *it, const char *prefix, const char *msg, size_t n) {
    char clean[160];
    size_t k = 0;
    for (size_t i = 0; i < n && k + 1 < sizeof clean; i++) {
        unsigned char c = (unsigned char)msg[i];
        clean[k++] = c >= 0x20 && c < 0x7f ? (char)c : '?';
    }
    clean[k] = 0;
    snprintf(it->reason, sizeof it->reason, "%s%s", prefix, clean);
}

static bool on_result(void *vctx, const char *buf, size_t len) {
    judge_ctx *c = vctx;
    skpo_code_item *it = c->it;
    const skpo_code_tests *t = it->tests;
    while (!c->decided) {
        const char *nl = memchr(buf + c->pos, '\n', len - c->pos);
        if (!nl) return false;
        size_t idx, plen;
        char status[16];
        char head[96];
        size_t hl = (size_t)(nl - (buf + c->pos));
        if (hl >= sizeof head) {
            c->decided = true;
            it->status = SKPO_JUDGE_ERROR;
            snprintf(it->reason, sizeof it->reason, "sandbox: bad driver report");
            return true;
        }
        memcpy(head, buf + c->pos, hl);
        head[hl] = 0;
        if (sscanf(head, "%zu %15s %zu", &idx, status, &plen) != 3 || idx != c->next || idx >= t->n) {
            c->decided = true;
            it->status = SKPO_JUDGE_ERROR;
            snprintf(it->reason, sizeof it->reason, "sandbox: bad driver report");
            return true;
        }
        size_t body = (size_t)(nl + 1 - buf);
        if (len - body < plen) return false; // wait for the rest
        const char *p = buf + body;
        c->pos = body + plen;
        c->next++;
        char pre[64];
        snprintf(pre, sizeof pre, "test %zu/%zu: ", idx + 1, t->n);
        if (strcmp(status, "ok")) {
            set_reason(it, pre, p, plen);
            c->decided = true;
            return true;
        }
        if (!skpo_utf8_valid(p, plen)) {
            snprintf(it->reason, sizeof it->reason, "%soutput is not valid UTF-8", pre);
            c->decided = true;
            return true;
        }
        bool eq = t->fn_name ? skpo_code_json_equal(p, plen, t->out[idx], strlen(t->out[idx]))
                             : skpo_code_stdout_equal(p, plen, t->out[idx], strlen(t->out[idx]));
        if (!eq) {
            snprintf(it->reason, sizeof it->reason, "%swrong answer", pre);
            c->decided = true;
            return true;
        }
        it->passed++;
        if (c->next == t->n) {
            it->correct = true;
            snprintf(it->reason, sizeof it->reason, "passed %zu/%zu tests", t->n, t->n);
            c->decided = true;
            return true;
        }
    }
    return true;
}

static char *tests_spec(const skpo_code_tests *t, double timeout) {
    json_t *o = json_object(), *in = json_array();
    for (size_t i = 0; i < t->n; i++) json_array_append_new(in, json_string(t->in[i]));
    json_object_set_new(o, "inputs", in);
    json_object_set_new(o, "timeout", json_real(timeout));
    json_object_set_new(o, "out_max", json_integer((json_int_t)OUT_CAP));
    json_object_set_new(o, "fsize", json_integer((json_int_t)FSIZE_CAP));
    if (t->fn_name) json_object_set_new(o, "fn_name", json_string(t->fn_name));
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    if (!s) skpo_die("out of memory writing a test spec");
    return s;
}

skpo_status skpo_code_judge(skpo_sandbox *sb, const skpo_code_opts *o, skpo_code_item *items, size_t n, skpo_err *err) {
    skpo_sandbox_job *jobs = skpo_xcalloc(n ? n : 1, sizeof *jobs);
    judge_ctx *ctx = skpo_xcalloc(n ? n : 1, sizeof *ctx);
    char **progs = skpo_xcalloc(n ? n : 1, sizeof *progs), **specs = skpo_xcalloc(n ? n : 1, sizeof *specs);
    size_t *map = skpo_xcalloc(n ? n : 1, sizeof *map), nj = 0;
    static const char *const argv[] = {"python", "-S", "/w/driver.py", NULL};
    for (size_t i = 0; i < n; i++) {
        skpo_code_item *it = &items[i];
        it->correct = false;
        it->passed = 0;
        it->status = SKPO_JUDGED;
        if (!it->code) { snprintf(it->reason, sizeof it->reason, "no fenced code block"); continue; }
        if (!it->tests || !it->tests->n) { snprintf(it->reason, sizeof it->reason, "no tests"); continue; }
        if (memchr(it->code, 0, it->code_len)) { snprintf(it->reason, sizeof it->reason, "program holds a NUL byte"); continue; }
        size_t pl = sizeof PRELUDE - 1;
        progs[nj] = skpo_xmalloc(pl + it->code_len + 2);
        memcpy(progs[nj], PRELUDE, pl);
        memcpy(progs[nj] + pl, it->code, it->code_len);
        progs[nj][pl + it->code_len] = '\n';
        progs[nj][pl + it->code_len + 1] = 0;
        specs[nj] = tests_spec(it->tests, o->timeout_s);
        skpo_sandbox_job *j = &jobs[nj];
        j->argv = argv;
        j->files[0] = (skpo_sandbox_file){"driver.py", DRIVER, sizeof DRIVER - 1};
        j->files[1] = (skpo_sandbox_file){"prog.py", progs[nj], pl + it->code_len + 1};
        j->files[2] = (skpo_sandbox_file){"tests.json", specs[nj], strlen(specs[nj])};
        j->nfiles = 3;
        // LiveCodeBench's global budget: (timeout + 1) per test + 5 s, or the record bound
        j->wall_s = (o->timeout_s + 1) * (double)it->tests->n + 5;
        if (o->record_s > 0 && o->record_s < j->wall_s) j->wall_s = o->record_s;
        ctx[nj] = (judge_ctx){.it = it};
        j->on_result = on_result;
        j->ctx = &ctx[nj];
        map[nj++] = i;
    }
    skpo_status st = nj ? skpo_sandbox_run(sb, jobs, nj, err) : SKPO_OK;
    for (size_t k = 0; k < nj; k++) {
        skpo_sandbox_job *j = &jobs[k];
        skpo_code_item *it = &items[map[k]];
        if (st == SKPO_OK && !ctx[k].decided) {
            // the driver ended without a verdict: no verdict, counted as a timeout
            // (the record's wall bound) or an error (the sandbox went down)
            char why[128];
            it->correct = false;
            it->status = j->end == SKPO_SB_WALL ? SKPO_JUDGE_TIMEOUT : SKPO_JUDGE_ERROR;
            if (j->end == SKPO_SB_EXITED && j->code == 0) snprintf(it->reason, sizeof it->reason, "sandbox: driver ended early");
            else {
                char pre[160];
                snprintf(pre, sizeof pre, "test %zu/%zu: sandbox %s", ctx[k].next + 1, it->tests->n, skpo_sandbox_end_text(j, why, sizeof why));
                const char *e = j->err;
                size_t el = j->err_len;
                while (el && py_space((unsigned char)e[el - 1])) el--;
                const char *ls = e + el;
                while (ls > e && ls[-1] != '\n') ls--;
                if (ls < e + el) strcat(pre, ": ");
                set_reason(it, pre, ls, (size_t)(e + el - ls));
            }
        }
        skpo_sandbox_job_free(j);
        free(progs[k]), free(specs[k]);
    }
    free(jobs), free(ctx), free(progs), free(specs), free(map);
    return st;
}
