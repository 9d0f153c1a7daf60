/*
 * test_sandbox.c - the code sandbox (core/sandbox.c) and the code reward
 * (core/verify_code.c): correct programs pass, and every escape a program
 * attempts fails safely, is judged wrong with a short reason, and leaves no
 * process behind. Needs bubblewrap; without it every test SKIPs except the one
 * proving that a missing bwrap is a clear error.
 */
#define _GNU_SOURCE
#include "harness.h"
#include "verify/sandbox.h"
#include "verify/verify_task.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

static skpo_sandbox *SB;

static skpo_sandbox *sandbox(void) {
    if (SB) return SB;
    skpo_sandbox_opts o;
    skpo_sandbox_opts_default(&o);
    o.jobs = 2;
    o.cpu_s = 120;
    o.mem_mb = 1024;
    o.nproc = 48;
    skpo_err err = {{0}};
    if (skpo_sandbox_new(&o, &SB, &err) != SKPO_OK) {
        fprintf(stderr, "  %s\n", err.msg);
        SB = NULL;
    }
    return SB;
}

// Processes running under the sandbox uids (any slot of any skpo process).
static int sandbox_processes(void) {
    DIR *d = opendir("/proc");
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d))) {
        char p[300], line[256];
        snprintf(p, sizeof p, "/proc/%s/status", e->d_name);
        FILE *f = fopen(p, "r");
        if (!f) continue;
        while (fgets(line, sizeof line, f)) {
            unsigned uid;
            if (sscanf(line, "Uid: %u", &uid) == 1) {
                if (uid >= SKPO_SANDBOX_UID_BASE && uid < SKPO_SANDBOX_UID_BASE + 0x10000000u) {
                    n++;
                    char cmd[256] = "";
                    snprintf(p, sizeof p, "/proc/%s/cmdline", e->d_name);
                    FILE *c = fopen(p, "r");
                    size_t k = c ? fread(cmd, 1, sizeof cmd - 1, c) : 0;
                    if (c) fclose(c);
                    for (size_t q = 0; q < k; q++) if (!cmd[q]) cmd[q] = ' ';
                    fprintf(stderr, "  left: pid %s uid %u: %s\n", e->d_name, uid, cmd);
                }
                break;
            }
        }
        fclose(f);
    }
    if (d) closedir(d);
    return n;
}

static skpo_code_tests stdin_tests(void) {
    skpo_code_tests t;
    skpo_err err = {{0}};
    const char *j = "{\"inputs\": [\"3\\n\", \"10\\n\"], \"outputs\": [\"6\\n\", \"20\\n\"]}";
    if (skpo_code_tests_parse(j, strlen(j), &t, &err)) { fprintf(stderr, "%s\n", err.msg); exit(1); }
    return t;
}

typedef struct prog { const char *name, *code, *reason; } prog;

static void judge_all(const prog *p, int n, skpo_code_tests *t, skpo_code_item *items, double timeout) {
    for (int i = 0; i < n; i++) items[i] = (skpo_code_item){.code = p[i].code, .code_len = strlen(p[i].code), .tests = t};
    skpo_code_opts o = {.timeout_s = timeout};
    skpo_err err = {{0}};
    CHECK(skpo_code_judge(SB, &o, items, (size_t)n, &err) == SKPO_OK);
}

static void test_correct_stdin_program_passes_and_wrong_one_fails(void) {
    if (!sandbox()) SKIP("bubblewrap cannot run here");
    skpo_code_tests t = stdin_tests();
    prog p[] = {
        {"right", "n = int(input())\nprint(n * 2)\n", "passed 2/2 tests"},
        {"right, trailing spaces and float form", "import sys\nn = int(sys.stdin.buffer.readline())\nprint(f'  {2*n}.0  ')\n", "passed 2/2 tests"},
        {"wrong", "print(6)\n", "test 2/2: wrong answer"},
        {"crash", "print(1 // 0)\n", "test 1/2: runtime error: ZeroDivisionError: integer division or modulo by zero"},
        {"prelude names are there (LiveCodeBench)", "print(floor(int(input()) * 2.0))\n", "passed 2/2 tests"},
        {"syntax error", "print(int(input()) * 2\n", "test 1/2: compile error: SyntaxError: '(' was never closed (prog.py, line 37)"},
        {"sys.exit after the output (LiveCodeBench grades the output)", "print(int(input()) * 2)\nexit(3)\n", "passed 2/2 tests"},
    };
    int n = (int)(sizeof p / sizeof p[0]);
    skpo_code_item it[8];
    judge_all(p, n, &t, it, 6);
    for (int i = 0; i < n; i++) {
        CHECK_MSG(!strcmp(it[i].reason, p[i].reason), "%s: reason '%s'", p[i].name, it[i].reason);
        CHECK_MSG(it[i].correct == !strncmp(p[i].reason, "passed", 6), "%s", p[i].name);
    }
    CHECK(it[2].passed == 1);
    skpo_code_tests_free(&t);
}

static void test_functional_program_is_called_through_its_signature(void) {
    if (!sandbox()) SKIP("bubblewrap cannot run here");
    skpo_code_tests t;
    skpo_err err = {{0}};
    const char *j = "{\"inputs\": [\"[2, 7, 11, 15]\\n9\", \"[3, 3]\\n6\"], \"outputs\": [\"[0, 1]\", \"[0, 1]\"], \"fn_name\": \"twoSum\"}";
    CHECK(skpo_code_tests_parse(j, strlen(j), &t, &err) == SKPO_OK);
    prog p[] = {
        {"right, returns a tuple, prints", "class Solution:\n    def twoSum(self, nums: List[int], target: int) -> List[int]:\n"
                                           "        print('debug')\n        seen = {}\n        for i, x in enumerate(nums):\n"
                                           "            if target - x in seen: return (seen[target - x], i)\n            seen[x] = i\n",
         "passed 2/2 tests"},
        {"wrong", "class Solution:\n    def twoSum(self, nums, target):\n        return [1, 0]\n", "test 1/2: wrong answer"},
        {"missing method", "class Solution:\n    def other(self): pass\n",
         "test 1/2: runtime error: AttributeError: 'Solution' object has no attribute 'twoSum'"},
    };
    skpo_code_item it[3];
    judge_all(p, 3, &t, it, 6);
    for (int i = 0; i < 3; i++) CHECK_MSG(!strcmp(it[i].reason, p[i].reason), "%s: reason '%s'", p[i].name, it[i].reason);
    CHECK(it[0].correct && !it[1].correct && !it[2].correct);
    skpo_code_tests_free(&t);
}

static void test_every_escape_fails_safely_is_wrong_and_leaves_no_process(void) {
    if (!sandbox()) SKIP("bubblewrap cannot run here");
    // a listener on the host's loopback: a sandboxed program must not reach it
    int ls = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    CHECK(ls >= 0 && bind(ls, (struct sockaddr *)&a, sizeof a) == 0 && listen(ls, 4) == 0 &&
          getsockname(ls, (struct sockaddr *)&a, &al) == 0);
    char sock_prog[256], write_prog[512], repo_prog[512], host_file[256], cwd[256];
    snprintf(sock_prog, sizeof sock_prog,
             "import socket\ns = socket.create_connection(('127.0.0.1', %d), timeout=1)\ns.sendall(b'escaped')\nprint(6)\n",
             ntohs(a.sin_port));
    char dir[] = "/tmp/skpo-sb-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    snprintf(host_file, sizeof host_file, "%s/escaped", dir);
    snprintf(write_prog, sizeof write_prog, "open('%s', 'w').write('x')\nprint(int(input()) * 2)\n", host_file);
    CHECK(getcwd(cwd, sizeof cwd) != NULL);
    snprintf(repo_prog, sizeof repo_prog, "print(len(open('%s/Makefile').read()))\n", cwd);
    prog p[] = {
        {"socket", sock_prog, NULL}, // refused: the sandbox's loopback is its own
        {"write outside /w", write_prog, NULL},
        {"write into the root", "open('/usr/evil', 'w').write('x')\n", "test 1/2: runtime error: OSError: [Errno 30] Read-only file system: '/usr/evil'"},
        {"read /etc/passwd", "print(open('/etc/passwd').read())\n",
         "test 1/2: runtime error: FileNotFoundError: [Errno 2] No such file or directory: '/etc/passwd'"},
        {"read the repository", repo_prog, NULL},
        {"fork bomb", "import os\nwhile True:\n    try: os.fork()\n    except OSError: pass\n", "test 1/2: time limit exceeded (2 s)"},
        {"infinite loop", "while True: pass\n", "test 1/2: time limit exceeded (2 s)"},
        {"10 GB allocation", "x = bytearray(10 * 1024**3)\nprint(6)\n", "test 1/2: runtime error: MemoryError"},
        {"1 GB of output", "import sys\nfor _ in range(1024): sys.stdout.write('x' * 1048576)\n", "test 1/2: output limit exceeded (8388608 bytes)"},
        {"sleep past the wall limit", "import time\ntime.sleep(100)\n", "test 1/2: time limit exceeded (2 s)"},
        {"fill the disk", "f = open('big', 'wb')\nwhile True: f.write(b'x' * 1048576)\n", "test 1/2: runtime error: OSError: [Errno 27] File too large"},
        {"non-UTF-8 print", "import sys\nsys.stdout.buffer.write(b'\\xff\\xfe6\\n')\n", "test 1/2: output is not valid UTF-8"},
        {"forge a report on fd 3", "import os\nos.write(3, b'0 ok 2\\n6\\n1 ok 3\\n20\\n')\n",
         "test 1/2: runtime error: OSError: [Errno 9] Bad file descriptor"},
        {"kill the driver (pid 1)", "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\nos.kill(-1, signal.SIGKILL)\n", NULL},
    };
    int n = (int)(sizeof p / sizeof p[0]);
    skpo_code_tests t = stdin_tests();
    skpo_code_item it[16];
    double t0 = skpo_now();
    judge_all(p, n, &t, it, 2);
    double el = skpo_now() - t0;
    for (int i = 0; i < n; i++) {
        CHECK_MSG(!it[i].correct, "%s was judged correct", p[i].name);
        CHECK_MSG(it[i].reason[0] && strlen(it[i].reason) < sizeof it[i].reason, "%s: no reason", p[i].name);
        if (p[i].reason) CHECK_MSG(!strcmp(it[i].reason, p[i].reason), "%s: reason '%s'", p[i].name, it[i].reason);
        printf("  %-26s %s\n", p[i].name, it[i].reason);
    }
    CHECK_MSG(strstr(it[0].reason, "runtime error: ConnectionRefusedError"), "%s", it[0].reason);
    CHECK_MSG(strstr(it[1].reason, "No such file or directory"), "%s", it[1].reason);
    CHECK_MSG(strstr(it[4].reason, "No such file or directory"), "%s", it[4].reason);
    CHECK_MSG(!strncmp(it[n - 1].reason, "test 1/2: ", 10), "%s", it[n - 1].reason);
    struct stat st;
    CHECK_MSG(stat(host_file, &st) != 0, "the program wrote %s on the host", host_file);
    int c = accept(ls, NULL, NULL);
    CHECK_MSG(c < 0, "the sandbox reached the host's loopback");
    if (c >= 0) close(c);
    close(ls);
    rmdir(dir);
    CHECK_MSG(sandbox_processes() == 0, "%d sandbox processes are left", sandbox_processes());
    CHECK_MSG(el < 40, "took %.1f s", el);
    skpo_code_tests_free(&t);
}

static void test_inputs_larger_than_the_file_size_limit_still_run(void) {
    if (!sandbox()) SKIP("bubblewrap cannot run here");
    size_t big = (size_t)24 << 20; // more than RLIMIT_FSIZE (16 MiB): bwrap must still write it into /w
    char *in = skpo_xmalloc(big + 2);
    memset(in, '7', big);
    in[big] = '\n', in[big + 1] = 0;
    skpo_code_tests t = {.n = 1, .in = skpo_xcalloc(1, sizeof(char *)), .out = skpo_xcalloc(1, sizeof(char *))};
    t.in[0] = in;
    t.out[0] = skpo_xstrdup("25165824\n");
    prog p[] = {{"reads 24 MiB", "import sys\nprint(len(sys.stdin.buffer.readline().strip()))\n", "passed 1/1 tests"}};
    skpo_code_item it[1];
    judge_all(p, 1, &t, it, 6);
    CHECK_MSG(it[0].correct, "%s", it[0].reason);
    skpo_code_tests_free(&t);
}

static void test_missing_bwrap_is_a_clear_error_never_unsandboxed(void) {
    skpo_sandbox_opts o;
    skpo_sandbox_opts_default(&o);
    o.bwrap = "/nonexistent/bwrap";
    skpo_sandbox *sb = NULL;
    skpo_err err = {{0}};
    CHECK(skpo_sandbox_new(&o, &sb, &err) == SKPO_ENOTFOUND && sb == NULL);
    CHECK_MSG(strstr(err.msg, "bubblewrap") && strstr(err.msg, "never run unsandboxed"), "%s", err.msg);
}

static void test_stdout_compare_follows_livecodebench(void) {
#define EQ(a, b) skpo_code_stdout_equal(a, strlen(a), b, strlen(b))
    CHECK(EQ("1 2\n3\n", "1 2\n3"));
    CHECK(EQ("  1 2  \r\n 3 \n\n", "1 2\n3\n"));
    CHECK(EQ("1.50\n", "1.5\n"));
    CHECK(EQ("1e3 -0\n", "1000 0\n"));
    CHECK(EQ("Yes\n", "Yes"));
    CHECK(!EQ("yes\n", "Yes"));
    CHECK(!EQ("0.3333\n", "0.33333\n"));      // exact decimals, no tolerance
    CHECK(!EQ("1 2 3\n", "1 2\n"));
    CHECK(!EQ("1\n\n2\n", "1\n2\n"));          // an inner blank line is a line
    CHECK(!EQ("nan\n", "nan\n") == false);     // same text is equal even for nan
    CHECK(!EQ("1 nan\n", "1.0 nan\n"));        // but as decimals nan never equals
    CHECK(!EQ("", "1"));
    CHECK(EQ("", "\n"));
#undef EQ
#define JEQ(a, b) skpo_code_json_equal(a, strlen(a), b, strlen(b))
    CHECK(JEQ("[0, 1]", "[0,1]"));
    CHECK(JEQ("2.0", "2"));
    CHECK(JEQ("true", "1"));
    CHECK(JEQ("{\"a\": [1, \"x\"]}", "{\"a\":[1,\"x\"]}"));
    CHECK(!JEQ("[1, 0]", "[0, 1]"));
    CHECK(!JEQ("\"1\"", "1"));
    CHECK(JEQ("123456789012345678901234567890", "123456789012345678901234567890"));
    CHECK(!JEQ("123456789012345678901234567891", "123456789012345678901234567890"));
#undef JEQ
}

static void test_code_is_the_last_fenced_block(void) {
    const char *r = "Idea.\n```python\nprint(1)\n```\nBetter:\n```python\nx = 2\nprint(x)\n```\nDone.";
    char *c = skpo_code_extract(r, strlen(r));
    CHECK(c && !strcmp(c, "x = 2\nprint(x)"));
    free(c);
    CHECK(skpo_code_extract("no code at all", 14) == NULL);
    CHECK(skpo_code_extract("```python\nprint(1)\n", 19) == NULL); // unterminated
}

int main(void) {
    RUN(test_stdout_compare_follows_livecodebench);
    RUN(test_code_is_the_last_fenced_block);
    RUN(test_missing_bwrap_is_a_clear_error_never_unsandboxed);
    RUN(test_correct_stdin_program_passes_and_wrong_one_fails);
    RUN(test_functional_program_is_called_through_its_signature);
    RUN(test_inputs_larger_than_the_file_size_limit_still_run);
    RUN(test_every_escape_fails_safely_is_wrong_and_leaves_no_process);
    skpo_sandbox_free(SB);
    return TEST_SUMMARY();
}
