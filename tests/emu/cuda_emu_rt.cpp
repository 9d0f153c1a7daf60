// cuda_emu_rt.cpp - host side of the CUDA emulator (tests/emu/README.md):
// the CUDA runtime, cuBLAS and NCCL calls the backend makes, on the CPU.
//   - memory: cudaMalloc'd buffers end at a PROT_NONE page (an overrun faults
//     at once) and start as garbage (0xA5); leaks are counted at exit;
//   - streams are queues: kernels, copies and GEMMs run at the next
//     synchronisation (stream/device sync, a blocking copy to pageable host
//     memory), so host reads of device results without a sync see stale data
//     like on a GPU; H2D from pageable memory snapshots the source at the call
//     (as the driver stages it), from pinned memory reads it when it runs;
//   - graph capture records the queued work; replays run it again with the
//     pointers and scalars baked in; sync, malloc and blocking copies during a
//     capture fail it (cudaStreamCaptureModeThreadLocal's rules);
//   - cublasGemmEx checks its arguments like cuBLAS (lda >= rows of A as
//     stored, ...) and computes in double; NCCL works for one rank.
#include <cblas.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <nccl.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <set>
#include <vector>

#include "cuda_emu.h"

uint3 emu_tid, emu_bid;
dim3 emu_bdim, emu_gdim;

static void die(const char *fmt, const char *a = "", const char *b = "") {
    fprintf(stderr, "cuda-emu: ");
    fprintf(stderr, fmt, a, b);
    fputc('\n', stderr);
    abort();
}

// --- fibers: one per thread of the running block -------------------------------------

namespace {
enum fstate { F_READY, F_BAR, F_WARP, F_DONE };
struct fiber {
    ucontext_t ctx;
    char *stack;
    fstate st;
    uint3 tid;
    int lin;
};
const size_t STACK = 256 << 10;
std::vector<fiber> fibers;
std::vector<char *> stacks;
ucontext_t sched_ctx;
fiber *cur;
std::function<void()> *cur_body;
std::vector<double> shfl_slot;
std::vector<int> shfl_gen;
std::vector<char> dyn_smem_buf;
const char *cur_kernel = "";

void fiber_main() {
    (*cur_body)();
    cur->st = F_DONE;
    swapcontext(&cur->ctx, &sched_ctx);
}

void block_wait(fstate s) {
    cur->st = s;
    fiber *me = cur;
    swapcontext(&me->ctx, &sched_ctx);
}

void report_deadlock(int n, int bx, int by, int bz) {
    int at_bar = 0, at_warp = 0, done = 0;
    for (int i = 0; i < n; i++) {
        at_bar += fibers[i].st == F_BAR;
        at_warp += fibers[i].st == F_WARP;
        done += fibers[i].st == F_DONE;
    }
    fprintf(stderr,
            "cuda-emu: kernel %s block (%d,%d,%d): deadlock: %d threads at __syncthreads, %d at a warp "
            "barrier (shuffle/__syncwarp), %d exited\n",
            cur_kernel, bx, by, bz, at_bar, at_warp, done);
    abort();
}

void run_block(int n, std::function<void()> &body, int bx, int by, int bz) {
    if ((int)stacks.size() < n)
        for (int i = (int)stacks.size(); i < n; i++) {
            char *s = (char *)mmap(NULL, STACK + 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (s == MAP_FAILED) die("cannot map a fiber stack");
            mprotect(s, 4096, PROT_NONE);  // stack overflow faults
            stacks.push_back(s + 4096);
        }
    fibers.assign(n, fiber{});
    shfl_slot.assign(2 * (size_t)n, 0.0);
    shfl_gen.assign(n, 0);
    cur_body = &body;
    for (int i = 0; i < n; i++) {
        fiber &f = fibers[i];
        f.lin = i;
        f.tid.x = i % emu_bdim.x;
        f.tid.y = (i / emu_bdim.x) % emu_bdim.y;
        f.tid.z = i / (emu_bdim.x * emu_bdim.y);
        f.st = F_READY;
        getcontext(&f.ctx);
        f.ctx.uc_stack.ss_sp = stacks[i];
        f.ctx.uc_stack.ss_size = STACK;
        f.ctx.uc_link = NULL;
        makecontext(&f.ctx, fiber_main, 0);
    }
    int live = n;
    for (;;) {
        for (int i = 0; i < n; i++) {
            if (fibers[i].st != F_READY) continue;
            cur = &fibers[i];
            emu_tid = cur->tid;
            swapcontext(&sched_ctx, &cur->ctx);
        }
        live = 0;
        int bar = 0;
        for (int i = 0; i < n; i++) {
            live += fibers[i].st != F_DONE;
            bar += fibers[i].st == F_BAR;
        }
        if (!live) break;
        int released = 0;
        if (bar == live) {  // exited threads count as arrived, as on the hardware
            for (int i = 0; i < n; i++)
                if (fibers[i].st == F_BAR) fibers[i].st = F_READY;
            continue;
        }
        for (int w = 0; w * 32 < n; w++) {
            int lo = w * 32, hi = lo + 32 < n ? lo + 32 : n, at = 0;
            for (int i = lo; i < hi; i++) at += fibers[i].st == F_WARP;
            if (at == hi - lo) {
                for (int i = lo; i < hi; i++) fibers[i].st = F_READY;
                released = 1;
            }
        }
        if (!released) report_deadlock(n, bx, by, bz);
    }
}
}  // namespace

namespace emu {
void syncthreads() { block_wait(F_BAR); }
void syncwarp() { block_wait(F_WARP); }
// Two slot generations, alternating per shuffle: a lane that runs ahead to its
// next shuffle writes the other generation, so one barrier per shuffle is enough.
double shfl_xor_d(double v, int o) {
    int me = cur->lin, lane = me & 31, src = (me - lane) + (lane ^ o), n = (int)fibers.size();
    int g = shfl_gen[me];
    shfl_gen[me] ^= 1;
    shfl_slot[(size_t)g * n + me] = v;
    block_wait(F_WARP);
    if (src >= n) die("kernel %s: shuffle from a lane past the end of the block", cur_kernel);
    return shfl_slot[(size_t)g * n + src];
}
double shfl_up_d(double v, int d) {
    int me = cur->lin, lane = me & 31, src = lane >= d ? me - d : me, n = (int)fibers.size();
    int g = shfl_gen[me];
    shfl_gen[me] ^= 1;
    shfl_slot[(size_t)g * n + me] = v;
    block_wait(F_WARP);
    return shfl_slot[(size_t)g * n + src];
}
void *dyn_smem() { return dyn_smem_buf.data(); }
}  // namespace emu

// --- errors, streams, deferred work ---------------------------------------------------------

namespace {
cudaError_t last_error = cudaSuccess;
std::deque<std::function<void()>> queue;  // one in-order queue for every stream
bool capturing = false, capture_broken = false;
std::vector<std::function<void()>> captured;
std::map<const void *, int> max_dyn_smem;
struct alloc { char *base; size_t len; };
std::map<void *, alloc> dev_allocs;
long n_launches;
uint64_t block_seed = getenv("CUDA_EMU_BLOCK_ORDER") ? strtoull(getenv("CUDA_EMU_BLOCK_ORDER"), NULL, 10) : 0;

cudaError_t fail(cudaError_t e) {
    last_error = e;
    return e;
}
long queued_total, ran_total;   // work items ever queued / ever run (events compare them)
void enqueue(std::function<void()> f) {
    if (capturing) captured.push_back(f);
    else {
        queue.push_back(std::move(f));
        queued_total++;
    }
}
void drain() {
    while (!queue.empty()) {
        auto f = std::move(queue.front());
        queue.pop_front();
        ran_total++;
        f();
    }
}
std::map<const void *, size_t> pinned_len;
bool host_pinned(const void *p) {
    auto it = pinned_len.upper_bound(p);
    if (it == pinned_len.begin()) return false;
    --it;
    return (const char *)p < (const char *)it->first + it->second;
}
bool is_device(const void *p) {
    auto it = dev_allocs.upper_bound((void *)p);
    if (it == dev_allocs.begin()) return false;
    --it;
    return (const char *)p >= it->second.base && (const char *)p < it->second.base + it->second.len;
}
struct at_exit {
    ~at_exit() {
        if (!dev_allocs.empty())
            fprintf(stderr, "cuda-emu: %zu device allocations never freed\n", dev_allocs.size());
        if (getenv("CUDA_EMU_STATS")) fprintf(stderr, "cuda-emu: %ld kernel launches\n", n_launches);
    }
} at_exit_;
}  // namespace

void emu::launch(const char *name, const void *fn, const cfg &c, std::function<void()> body) {
    unsigned nt = c.b.x * c.b.y * c.b.z;
    const char *why = NULL;
    if (!c.g.x || !c.g.y || !c.g.z || !nt) why = "an empty grid or block";
    else if (c.g.x > 2147483647u || c.g.y > 65535 || c.g.z > 65535) why = "grid beyond (2^31-1, 65535, 65535)";
    else if (c.b.x > 1024 || c.b.y > 1024 || c.b.z > 64 || nt > 1024) why = "block beyond 1024 threads";
    else {
        int lim = 48 << 10;
        auto it = max_dyn_smem.find(fn);
        if (it != max_dyn_smem.end()) lim = it->second;
        if (c.shm > (size_t)lim) why = "dynamic shared memory beyond the kernel's limit (48 KiB unless raised)";
    }
    if (capturing && c.s != 0 && false) why = "";
    if (why) {
        fprintf(stderr, "cuda-emu: launch of %s (grid %u,%u,%u block %u,%u,%u smem %zu): %s\n", name, c.g.x, c.g.y,
                c.g.z, c.b.x, c.b.y, c.b.z, c.shm, why);
        fail(cudaErrorInvalidConfiguration);
        return;
    }
    cfg cc = c;
    enqueue([=]() {
        std::function<void()> b = body;
        cur_kernel = name;
        n_launches++;
        emu_gdim = cc.g;
        emu_bdim = cc.b;
        dyn_smem_buf.assign(cc.shm + 16, (char)0xA5);
        // Blocks one after another: in index order, or shuffled (block_seed):
        // a GPU runs them in no set order, so sums by atomics across blocks
        // come out in another order each run.
        size_t nb = (size_t)cc.g.x * cc.g.y * cc.g.z;
        std::vector<size_t> order(nb);
        for (size_t i = 0; i < nb; i++) order[i] = i;
        if (block_seed) {
            uint64_t r = block_seed * 0x9E3779B97F4A7C15ull + (uint64_t)n_launches;
            for (size_t i = nb; i > 1; i--) {
                r ^= r << 13, r ^= r >> 7, r ^= r << 17;
                std::swap(order[i - 1], order[r % i]);
            }
        }
        for (size_t i = 0; i < nb; i++) {
            unsigned x = (unsigned)(order[i] % cc.g.x), y = (unsigned)(order[i] / cc.g.x % cc.g.y);
            unsigned z = (unsigned)(order[i] / cc.g.x / cc.g.y);
            emu_bid.x = x, emu_bid.y = y, emu_bid.z = z;
            run_block((int)(cc.b.x * cc.b.y * cc.b.z), b, x, y, z);
        }
    });
}

// Tests (test_cuda_ops' deterministic-kernel test) and CUDA_EMU_BLOCK_ORDER=N
// choose the order of blocks: 0 in index order, else shuffled from seed N.
extern "C" void cuda_emu_block_order(unsigned long seed) { block_seed = seed; }

extern "C" {

cudaError_t cudaGetLastError(void) {
    cudaError_t e = last_error;
    last_error = cudaSuccess;
    return e;
}
cudaError_t cudaPeekAtLastError(void) { return last_error; }
const char *cudaGetErrorString(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument (emulated)";
    case cudaErrorMemoryAllocation: return "out of memory (emulated)";
    case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing (emulated)";
    case cudaErrorStreamCaptureInvalidated: return "capture invalidated (emulated)";
    default: return "error (emulated)";
    }
}
cudaError_t cudaGetDeviceCount(int *n) {
    *n = getenv("CUDA_EMU_NO_DEVICE") ? 0 : 1;
    return cudaSuccess;
}
cudaError_t cudaSetDevice(int d) { return d == 0 ? cudaSuccess : fail(cudaErrorInvalidDevice); }
cudaError_t cudaDeviceGetAttribute(int *v, cudaDeviceAttr a, int d) {
    *v = a == cudaDevAttrMultiProcessorCount ? 132 : 0;
    return cudaSuccess;
}
// Occupancy as the hardware would bound it for an sm_90 SM: 2048 threads, 32
// blocks, 228 KiB of shared memory (1 KiB reserved per block); registers are
// not modelled (nvcc -Xptxas -v reports them).
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int *n, const void *f, int threads, size_t smem,
                                                                   unsigned int flags) {
    if (threads <= 0 || threads > 1024) return fail(cudaErrorInvalidValue);
    int lim = 48 << 10;
    auto it = max_dyn_smem.find(f);
    if (it != max_dyn_smem.end()) lim = it->second;
    if (smem > (size_t)lim) {
        *n = 0;
        return cudaSuccess;
    }
    int by_threads = 2048 / threads, by_smem = (int)((228u << 10) / (smem + 1024));
    *n = by_threads < by_smem ? by_threads : by_smem;
    if (*n > 32) *n = 32;
    return cudaSuccess;
}
cudaError_t cudaFuncSetAttribute(const void *f, cudaFuncAttribute a, int v) {
    if (a == cudaFuncAttributeMaxDynamicSharedMemorySize) {
        if (v > 227 << 10) return fail(cudaErrorInvalidValue);
        max_dyn_smem[f] = v;
    }
    return cudaSuccess;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int flags) {
    static char tokens[64];
    static int n;
    *s = (cudaStream_t)&tokens[n++ % 64];
    return cudaSuccess;
}
cudaError_t cudaStreamCreate(cudaStream_t *s) { return cudaStreamCreateWithFlags(s, 0); }
cudaError_t cudaStreamDestroy(cudaStream_t s) { drain(); return cudaSuccess; }

static cudaError_t capture_violation(const char *what) {
    if (!capturing) return cudaSuccess;
    fprintf(stderr, "cuda-emu: %s during stream capture (invalidates it)\n", what);
    capture_broken = true;
    return fail(cudaErrorStreamCaptureUnsupported);
}

cudaError_t cudaStreamIsCapturing(cudaStream_t s, cudaStreamCaptureStatus *st) {
    *st = capturing ? cudaStreamCaptureStatusActive : cudaStreamCaptureStatusNone;
    return cudaSuccess;
}
// The queued work runs now (as at a synchronisation): the query then finds it done.
cudaError_t cudaStreamQuery(cudaStream_t s) {
    if (capturing) return capture_violation("cudaStreamQuery");
    drain();
    return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t s) {
    if (capturing) return capture_violation("cudaStreamSynchronize");
    drain();
    return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize(void) {
    if (capturing) return capture_violation("cudaDeviceSynchronize");
    drain();
    return cudaSuccess;
}
cudaError_t cudaMemGetInfo(size_t *f, size_t *t) {
    const char *e = getenv("CUDA_EMU_FREE_MIB");
    *t = (size_t)141 << 30;
    *f = e ? (size_t)atol(e) << 20 : (size_t)140 << 30;
    return cudaSuccess;
}
cudaError_t cudaMalloc(void **p, size_t bytes) {
    if (capturing) return capture_violation("cudaMalloc");
    size_t free_b, tot;
    cudaMemGetInfo(&free_b, &tot);
    if (bytes > free_b || bytes > ((size_t)64 << 30)) {
        *p = NULL;
        return fail(cudaErrorMemoryAllocation);
    }
    size_t pg = 4096, body = (bytes + 15) / 16 * 16, len = (body + pg - 1) / pg * pg + pg;
    char *b = (char *)mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (b == MAP_FAILED) {
        *p = NULL;
        return fail(cudaErrorMemoryAllocation);
    }
    mprotect(b + len - pg, pg, PROT_NONE);
    char *q = b + len - pg - body;
    if (bytes < ((size_t)1 << 28)) memset(q, 0xA5, body);  // fresh device memory is garbage
    dev_allocs[q] = alloc{b, len};
    *p = q;
    return cudaSuccess;
}
cudaError_t cudaFree(void *p) {
    if (!p) return cudaSuccess;
    drain();  // cudaFree synchronises the device
    auto it = dev_allocs.find(p);
    if (it == dev_allocs.end()) die("cudaFree of a pointer cudaMalloc did not return");
    munmap(it->second.base, it->second.len);
    dev_allocs.erase(it);
    return cudaSuccess;
}
// CUDA IPC: the emulated device memory lives in this process only, so a
// handle can be made (the exporter's side, and its file protocol, run as on a
// GPU) but never opened: cudaIpcOpenMemHandle fails as on a GPU without IPC,
// which is the importer's fall-back path.
cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t *h, void *p) {
    if (dev_allocs.find(p) == dev_allocs.end()) return fail(cudaErrorInvalidValue);
    memset(h, 0, sizeof *h);
    long pid = (long)getpid();
    memcpy(h->reserved, &pid, sizeof pid);
    memcpy(h->reserved + sizeof pid, &p, sizeof p);
    return cudaSuccess;
}
cudaError_t cudaIpcOpenMemHandle(void **p, cudaIpcMemHandle_t, unsigned int) {
    *p = NULL;
    return fail(cudaErrorNotSupported);
}
cudaError_t cudaIpcCloseMemHandle(void *) { return fail(cudaErrorInvalidValue); }
cudaError_t cudaDeviceGetPCIBusId(char *out, int len, int d) {
    if (d != 0) return fail(cudaErrorInvalidDevice);
    snprintf(out, (size_t)len, "0000:00:00.0");
    return cudaSuccess;
}
cudaError_t cudaMallocHost(void **p, size_t bytes) {
    *p = malloc(bytes ? bytes : 1);
    pinned_len[*p] = bytes ? bytes : 1;
    return cudaSuccess;
}
// Registered host memory behaves as pinned (copies read it when they run).
cudaError_t cudaHostRegister(void *p, size_t bytes, unsigned int flags) {
    if (!p || !bytes) return fail(cudaErrorInvalidValue);
    if (host_pinned(p)) return fail(cudaErrorHostMemoryAlreadyRegistered);
    pinned_len[p] = bytes;
    return cudaSuccess;
}
cudaError_t cudaHostUnregister(void *p) {
    drain();
    return pinned_len.erase(p) ? cudaSuccess : fail(cudaErrorHostMemoryNotRegistered);
}
cudaError_t cudaFreeHost(void *p) {
    drain();
    pinned_len.erase(p);
    free(p);
    return cudaSuccess;
}

static void check_dir(const void *dst, const void *src, cudaMemcpyKind k) {
    bool dd = is_device(dst), sd = is_device(src);
    bool ok = k == cudaMemcpyHostToDevice ? dd && !sd
            : k == cudaMemcpyDeviceToHost ? !dd && sd
            : k == cudaMemcpyDeviceToDevice ? dd && sd
            : true;
    if (!ok) die("cudaMemcpy with a kind that does not match the pointers (%s)",
                 k == cudaMemcpyHostToDevice ? "HostToDevice" : k == cudaMemcpyDeviceToHost ? "DeviceToHost" : "DeviceToDevice");
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, cudaMemcpyKind k, cudaStream_t s) {
    if (!n) return cudaSuccess;
    check_dir(dst, src, k);
    if (k == cudaMemcpyHostToDevice && !host_pinned(src)) {
        if (capturing) return capture_violation("cudaMemcpyAsync from pageable host memory");
        std::vector<char> snap((const char *)src, (const char *)src + n);  // staged now
        enqueue([=]() { memcpy(dst, snap.data(), n); });
        return cudaSuccess;
    }
    if (k == cudaMemcpyDeviceToHost && !host_pinned(dst)) {
        if (capturing) return capture_violation("cudaMemcpyAsync to pageable host memory");
        drain();  // synchronous for pageable memory
        memcpy(dst, src, n);
        return cudaSuccess;
    }
    enqueue([=]() { memmove(dst, src, n); });
    return cudaSuccess;
}
cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, cudaMemcpyKind k) {
    if (capturing) return capture_violation("cudaMemcpy");
    cudaError_t e = cudaMemcpyAsync(dst, src, n, k, 0);
    drain();
    return e;
}
cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t s) {
    if (!is_device(p) || (n && !is_device((char *)p + n - 1))) die("cudaMemsetAsync outside a device allocation");
    enqueue([=]() { memset(p, v, n); });
    return cudaSuccess;
}
cudaError_t cudaMemset(void *p, int v, size_t n) {
    cudaMemsetAsync(p, v, n, 0);
    drain();
    return cudaSuccess;
}

// --- events: a host wait on an event runs the queue up to where it was recorded --------------
// (every stream is one queue here, so "up to" is "everything queued before").

struct CUevent_st { long pending; };   // work items queued before the record (queued_total then)

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned int flags) {
    *e = new CUevent_st{0};
    return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t *e) { return cudaEventCreateWithFlags(e, 0); }
cudaError_t cudaEventDestroy(cudaEvent_t e) { delete e; return cudaSuccess; }
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
    if (capturing) return capture_violation("cudaEventRecord");
    e->pending = queued_total;
    return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t e) {
    if (capturing) return capture_violation("cudaEventSynchronize");
    while (ran_total < e->pending && !queue.empty()) {
        auto f = std::move(queue.front());
        queue.pop_front();
        ran_total++;
        f();
    }
    return cudaSuccess;
}
cudaError_t cudaEventQuery(cudaEvent_t e) { return ran_total >= e->pending ? cudaSuccess : cudaErrorNotReady; }

// --- graphs -------------------------------------------------------------------------------

struct CUgraph_st { std::vector<std::function<void()>> ops; };
struct CUgraphExec_st { std::vector<std::function<void()>> ops; };

cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode m) {
    if (capturing) return fail(cudaErrorIllegalState);
    capturing = true;
    capture_broken = false;
    captured.clear();
    return cudaSuccess;
}
cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *g) {
    if (!capturing) return fail(cudaErrorIllegalState);
    capturing = false;
    if (capture_broken) {
        *g = NULL;
        captured.clear();
        return fail(cudaErrorStreamCaptureInvalidated);
    }
    *g = new CUgraph_st{captured};
    captured.clear();
    return cudaSuccess;
}
cudaError_t cudaGraphInstantiate(cudaGraphExec_t *x, cudaGraph_t g, unsigned long long flags) {
    *x = new CUgraphExec_st{g->ops};
    return cudaSuccess;
}
cudaError_t cudaGraphLaunch(cudaGraphExec_t x, cudaStream_t s) {
    for (auto &f : x->ops) enqueue(f);
    return cudaSuccess;
}
cudaError_t cudaGraphDestroy(cudaGraph_t g) { delete g; return cudaSuccess; }
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t x) { delete x; return cudaSuccess; }

// --- cuBLAS ---------------------------------------------------------------------------------

struct cublasContext { cudaStream_t s; };
cublasStatus_t cublasCreate_v2(cublasHandle_t *h) { *h = new cublasContext{0}; return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasDestroy_v2(cublasHandle_t h) { drain(); delete h; return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasSetStream_v2(cublasHandle_t h, cudaStream_t s) { h->s = s; return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t m) { return CUBLAS_STATUS_SUCCESS; }

static double ld_elem(const void *p, cudaDataType t, size_t i) {
    if (t == CUDA_R_32F) return ((const float *)p)[i];
    if (t == CUDA_R_16BF) {
        uint32_t u = (uint32_t)((const uint16_t *)p)[i] << 16;
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    die("cublasGemmEx: unsupported data type in the emulator");
    return 0;
}
static void st_elem(void *p, cudaDataType t, size_t i, double v) {
    if (t == CUDA_R_32F) ((float *)p)[i] = (float)v;
    else ((__nv_bfloat16 *)p)[i] = __float2bfloat16((float)v);
}

cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                            const void *alpha, const void *A, cudaDataType At, int lda, const void *B, cudaDataType Bt,
                            int ldb, const void *beta, void *C, cudaDataType Ct, int ldc, cublasComputeType_t ct,
                            cublasGemmAlgo_t algo) {
    // cuBLAS's own argument rules (column-major): A is m x k (ta = N) stored with lda >= m, or k x m (ta = T)
    // with lda >= k; likewise B; C is m x n with ldc >= m.
    if (m < 0 || n < 0 || k < 0) return CUBLAS_STATUS_INVALID_VALUE;
    if (lda < (ta == CUBLAS_OP_N ? (m > 1 ? m : 1) : (k > 1 ? k : 1))) return CUBLAS_STATUS_INVALID_VALUE;
    if (ldb < (tb == CUBLAS_OP_N ? (k > 1 ? k : 1) : (n > 1 ? n : 1))) return CUBLAS_STATUS_INVALID_VALUE;
    if (ldc < (m > 1 ? m : 1)) return CUBLAS_STATUS_INVALID_VALUE;
    if (ct != CUBLAS_COMPUTE_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (!m || !n) return CUBLAS_STATUS_SUCCESS;
    // every element each operand may touch must lie in a device allocation
    size_t a_cols = ta == CUBLAS_OP_N ? k : m, a_rows = ta == CUBLAS_OP_N ? m : k;
    size_t b_cols = tb == CUBLAS_OP_N ? n : k, b_rows = tb == CUBLAS_OP_N ? k : n;
    int esz_a = At == CUDA_R_32F ? 4 : 2, esz_b = Bt == CUDA_R_32F ? 4 : 2, esz_c = Ct == CUDA_R_32F ? 4 : 2;
    if (k && (!is_device(A) || !is_device((const char *)A + ((a_cols - 1) * lda + a_rows) * esz_a - 1)))
        die("cublasGemmEx: A outside a device allocation");
    if (k && (!is_device(B) || !is_device((const char *)B + ((b_cols - 1) * ldb + b_rows) * esz_b - 1)))
        die("cublasGemmEx: B outside a device allocation");
    if (!is_device(C) || !is_device((const char *)C + (((size_t)n - 1) * ldc + m) * esz_c - 1))
        die("cublasGemmEx: C outside a device allocation");
    double al = *(const float *)alpha, be = *(const float *)beta;  // host pointer mode: read at the call
    enqueue([=]() {
        // op(A) (m x k) and op(B) (k x n) widened to double, row-major; OpenBLAS multiplies
        std::vector<double> a((size_t)m * k), b((size_t)k * n), c((size_t)m * n);
        for (int i = 0; i < m; i++)
            for (int l = 0; l < k; l++)
                a[(size_t)i * k + l] = ld_elem(A, At, ta == CUBLAS_OP_N ? (size_t)l * lda + i : (size_t)i * lda + l);
        for (int l = 0; l < k; l++)
            for (int j = 0; j < n; j++)
                b[(size_t)l * n + j] = ld_elem(B, Bt, tb == CUBLAS_OP_N ? (size_t)j * ldb + l : (size_t)l * ldb + j);
        if (k) cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0, a.data(), k, b.data(), n, 0.0, c.data(), n);
        for (int j = 0; j < n; j++)
            for (int i = 0; i < m; i++) {
                size_t ci = (size_t)j * ldc + i;
                double old = be != 0 ? ld_elem(C, Ct, ci) : 0;
                st_elem(C, Ct, ci, al * c[(size_t)i * n + j] + be * old);
            }
    });
    return CUBLAS_STATUS_SUCCESS;
}

// --- NCCL (one rank) --------------------------------------------------------------------------

struct ncclComm { int n; };
ncclResult_t ncclGetUniqueId(ncclUniqueId *u) { memset(u, 7, sizeof *u); return ncclSuccess; }
ncclResult_t ncclCommInitRank(ncclComm_t *c, int n, ncclUniqueId u, int r) {
    if (n != 1 || r != 0) return ncclInvalidArgument;
    *c = new ncclComm{n};
    return ncclSuccess;
}
ncclResult_t ncclCommDestroy(ncclComm_t c) { delete c; return ncclSuccess; }
const char *ncclGetErrorString(ncclResult_t r) { return r == ncclSuccess ? "no error" : "nccl error (emulated)"; }
static size_t nccl_size(ncclDataType_t t) {
    return t == ncclFloat32 || t == ncclInt32 ? 4 : t == ncclFloat64 ? 8 : t == ncclChar || t == ncclUint8 ? 1 : 2;
}
ncclResult_t ncclAllReduce(const void *s, void *r, size_t n, ncclDataType_t t, ncclRedOp_t op, ncclComm_t c,
                           cudaStream_t st) {
    if (!is_device(s) || !is_device(r)) return ncclInvalidArgument;
    size_t b = n * nccl_size(t);
    if (s != r) enqueue([=]() { memmove(r, s, b); });
    return ncclSuccess;
}
ncclResult_t ncclReduceScatter(const void *s, void *r, size_t n, ncclDataType_t t, ncclRedOp_t op, ncclComm_t c,
                               cudaStream_t st) {
    return ncclAllReduce(s, r, n, t, op, c, st);
}
ncclResult_t ncclBroadcast(const void *s, void *r, size_t n, ncclDataType_t t, int root, ncclComm_t c,
                           cudaStream_t st) {
    if (!is_device(s) || !is_device(r) || root != 0) return ncclInvalidArgument;
    size_t b = n * nccl_size(t);
    if (s != r) enqueue([=]() { memmove(r, s, b); });
    return ncclSuccess;
}
ncclResult_t ncclAllGather(const void *s, void *r, size_t n, ncclDataType_t t, ncclComm_t c, cudaStream_t st) {
    if (!is_device(s) || !is_device(r)) return ncclInvalidArgument;
    size_t b = n * nccl_size(t);
    if (s != r) enqueue([=]() { memmove(r, s, b); });
    return ncclSuccess;
}
// One rank never waits on a peer: no asynchronous error; an abort frees the communicator.
ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t *e) { *e = ncclSuccess; return ncclSuccess; }
ncclResult_t ncclCommAbort(ncclComm_t c) { delete c; return ncclSuccess; }

}  // extern "C"
