// sdpa_cudnn.cpp - attention through cuDNN's fused SDPA (cuda_dnn.h), as a
// graph of the cudnn-frontend headers. Host C++ only (g++): the kernels are
// cuDNN's, the index tensors come from attention.cu.
//
// Layouts, all in place (no copies): the packed activations (T, heads * hs) of
// a batch of B sequences are cuDNN's "ragged" BSHD tensors: dims (B, H, S, D),
// strides (S*H*D, D, H*D, 1), and a ragged-offset tensor (B+1 element offsets)
// saying where each sequence starts; S is any bound on the longest sequence and
// the padding mask (per-sequence lengths) keeps every sequence to its own rows.
// Grouped-query attention is the head count of K/V (nkv) dividing that of Q
// (nh). The log-sum-exp statistics (T, nh) are the ragged tensor (B, nh, S, 1)
// with strides (S*nh, 1, nh, 1): the layout the own kernels use, so the paths
// can be mixed between forward and backward. The KV pool of a layer is cuDNN's
// paged "container" (n_blocks, nkv, block_size, hs) with strides
// (n_layers*block_size*nkv*hs, hs, nkv*hs, 1), read through the block table.
extern "C" {
#include "base/common.h"
}
#include "cuda/cuda_dnn.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef SKPO_HAVE_CUDNN

static const char *no_cudnn =
    "cuDNN attention is not in this build (cudnn.h, libcudnn.so or the cuDNN frontend headers were not found when it "
    "was compiled: run scripts/deps.sh and rebuild; CUDNN_INCLUDE, CUDNN_LIB, CUDNN_FRONTEND point elsewhere)";

extern "C" int skpo_cudnn_compiled(void) { return 0; }
extern "C" skpo_status skpo_cudnn_check(skpo_cuda *c, skpo_err *err) {
    return skpo_err_set(err, SKPO_EUNSUPPORTED, "%s", no_cudnn);
}
extern "C" const char *skpo_cudnn_version(skpo_cuda *c) { return "not built"; }
extern "C" skpo_status skpo_cudnn_attention(skpo_cuda *c, skpo_bf16 *out, float *lse, const skpo_bf16 *q,
                                            const skpo_bf16 *k, const skpo_bf16 *v, const int32_t *seq_start, int nseq,
                                            int max_len, int T, int nh, int nkv, int hs, skpo_err *err) {
    return skpo_cudnn_check(c, err);
}
extern "C" skpo_status skpo_cudnn_attention_backward(skpo_cuda *c, skpo_bf16 *dq, skpo_bf16 *dk, skpo_bf16 *dv,
                                                     const skpo_bf16 *dout, const skpo_bf16 *out, const float *lse,
                                                     const skpo_bf16 *q, const skpo_bf16 *k, const skpo_bf16 *v,
                                                     const int32_t *seq_start, int nseq, int max_len, int T, int nh,
                                                     int nkv, int hs, skpo_err *err) {
    return skpo_cudnn_check(c, err);
}
extern "C" skpo_status skpo_cudnn_attention_paged(skpo_cuda *c, skpo_bf16 *out, const skpo_bf16 *q,
                                                  const skpo_bf16 *pool_k, const skpo_bf16 *pool_v,
                                                  const int32_t *block_table, int max_blocks, const int32_t *last,
                                                  const int32_t *pos, int nseq, int max_q, int N, int n_layers,
                                                  int layer, int n_blocks, int block_size, int nh, int nkv, int hs,
                                                  skpo_err *err) {
    return skpo_cudnn_check(c, err);
}
extern "C" void skpo_cudnn_free_state(void *state) {}

#else

// libcudnn (and the NVRTC its run-time engines use) are loaded by the
// frontend through dlsym on first use, not linked: linked, every tool paid
// ~10 ms at start for them, CPU runs included (see cublas_load.c).
#define NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING 1
#include <cuda_runtime.h>
#include <cudnn.h>
#include <cudnn_frontend.h>
#include <dlfcn.h>

#include <math.h>

#include <exception>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace cudnn_frontend {
void *cudnn_dlhandle = nullptr; // the frontend's dlsym handle, set by load_cudnn
}
namespace fe_detail = cudnn_frontend::detail;

static const char CUDNN_LIB[] = "libcudnn.so.9";

// NULL when libcudnn is loaded, else why not.
static const char *load_cudnn(void) {
    static char why[256];
    if (cudnn_frontend::cudnn_dlhandle) return nullptr;
    if (why[0]) return why;
    cudnn_frontend::cudnn_dlhandle = dlopen(CUDNN_LIB, RTLD_NOW | RTLD_LOCAL);
    if (!cudnn_frontend::cudnn_dlhandle) snprintf(why, sizeof why, "cannot load %s: %s", CUDNN_LIB, dlerror());
    return cudnn_frontend::cudnn_dlhandle ? nullptr : why;
}

namespace fe = cudnn_frontend;
using tensor_t = std::shared_ptr<fe::graph::Tensor_attributes>;

enum { MAX_GRAPHS = 32 };
enum kind { FWD, FWD_STATS, BWD, PAGED };
enum uid : int64_t {
    U_Q = 1, U_K, U_V, U_O, U_STATS, U_DO, U_DQ, U_DK, U_DV,
    U_LEN_Q, U_LEN_KV, U_OFF_Q, U_OFF_KV, U_OFF_ST, U_PT_K, U_PT_V
};

// What a graph is built for; everything else (pointers, lengths, offsets,
// tables) is a runtime input.
struct shape {
    int kind, B, S, nh, nkv, hs;
    int64_t T;                               // BWD: tokens bound (workspace size)
    int max_blocks, n_blocks, n_layers, bs;  // PAGED
    bool operator==(const shape &o) const { return !memcmp(this, &o, sizeof o); }
};

struct entry {
    shape s;
    std::shared_ptr<fe::graph::Graph> g;
    int64_t ws;
    unsigned long used;
};

struct dnn_state {
    cudnnHandle_t h = nullptr;
    int usable = 0;   // 1 ok, -1 not (why says why)
    char why[320] = "";
    char version[96] = "";
    std::vector<entry> graphs;
    unsigned long clock = 0;
    void *ws = nullptr;
    size_t ws_cap = 0;
    int32_t *idx = nullptr;
    size_t idx_cap = 0;
    int32_t *table = nullptr;   // a prefill's block table padded to the batch bucket
    size_t table_cap = 0;
};

static dnn_state *state_of(skpo_cuda *c) {
    void **slot = skpo_cuda_dnn_slot(c);
    if (!*slot) *slot = new dnn_state();
    return (dnn_state *)*slot;
}

extern "C" void skpo_cudnn_free_state(void *p) {
    dnn_state *d = (dnn_state *)p;
    if (!d) return;
    d->graphs.clear();
    if (d->ws) cudaFree(d->ws);
    if (d->idx) cudaFree(d->idx);
    if (d->table) cudaFree(d->table);
    if (d->h) fe_detail::destroy_handle(d->h);
    delete d;
}

extern "C" int skpo_cudnn_compiled(void) { return 1; }

static void ver(char *out, size_t n, size_t v) {
    snprintf(out, n, "%zu.%zu.%zu", v / 10000, v % 10000 / 100, v % 100);
}

extern "C" skpo_status skpo_cudnn_check(skpo_cuda *c, skpo_err *err) {
    if (!c) return skpo_err_set(err, SKPO_EUNSUPPORTED, "cuDNN attention: no CUDA context");
    dnn_state *d = state_of(c);
    const char *unloaded = d->usable ? nullptr : load_cudnn();
    if (unloaded) {
        d->usable = -1;
        snprintf(d->why, sizeof d->why, "cuDNN attention: %s", unloaded);
    }
    if (!d->usable) {
        char lib[24], hdr[24];
        size_t v = fe_detail::get_backend_version();
        ver(lib, sizeof lib, v);
        ver(hdr, sizeof hdr, CUDNN_VERSION);
        snprintf(d->version, sizeof d->version, "%s (headers %s, frontend %d.%d.%d)", lib, hdr,
                 CUDNN_FRONTEND_MAJOR_VERSION, CUDNN_FRONTEND_MINOR_VERSION, CUDNN_FRONTEND_PATCH_VERSION);
        int dev = 0, major = 0;
        cudaError_t ce = cudaGetDevice(&dev);
        if (ce == cudaSuccess) ce = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
        cudnnStatus_t s = CUDNN_STATUS_SUCCESS;
        d->usable = -1;
        if (ce != cudaSuccess) {
            cudaGetLastError();
            snprintf(d->why, sizeof d->why, "cuDNN attention: no device (%s)", cudaGetErrorString(ce));
        } else if (v < 90600) {
            // Grouped-query attention on ragged (packed) tensors needs 9.6.
            snprintf(d->why, sizeof d->why, "cuDNN attention needs cuDNN >= 9.6.0 at run time; libcudnn is %s", lib);
        } else if (major != 9 && major != 10) {
            // Ragged (packed) log-sum-exp in the backward: sm_90 and sm_100 only.
            snprintf(d->why, sizeof d->why, "cuDNN attention on packed batches needs an sm_90 or sm_100 GPU (this is sm_%d)",
                     10 * major);
        } else if ((s = fe_detail::create_handle(&d->h)) != CUDNN_STATUS_SUCCESS) {
            d->h = nullptr;
            snprintf(d->why, sizeof d->why, "cudnnCreate: %s (libcudnn %s)", fe_detail::get_error_string(s), lib);
        } else if ((s = fe_detail::set_stream(d->h, (cudaStream_t)skpo_cuda_stream_of(c))) != CUDNN_STATUS_SUCCESS) {
            snprintf(d->why, sizeof d->why, "cudnnSetStream: %s", fe_detail::get_error_string(s));
        } else {
            d->usable = 1;
        }
    }
    if (d->usable < 0) return skpo_err_set(err, SKPO_EUNSUPPORTED, "%s", d->why);
    return SKPO_OK;
}

extern "C" const char *skpo_cudnn_version(skpo_cuda *c) {
    if (!c) return "no CUDA context";
    dnn_state *d = state_of(c);
    skpo_cudnn_check(c, NULL);
    return d->usable > 0 ? d->version : d->why;
}

// --- graphs -------------------------------------------------------------------------

static tensor_t index_tensor(fe::graph::Graph &g, const char *name, int64_t uid, int64_t n) {
    return g.tensor(fe::graph::Tensor_attributes()
                        .set_name(name)
                        .set_uid(uid)
                        .set_dim({n, 1, 1, 1})
                        .set_stride({1, 1, 1, 1})
                        .set_data_type(fe::DataType_t::INT32));
}

// A packed (T, H*D) activation as the ragged (B, H, S, D) tensor.
static fe::graph::Tensor_attributes &packed(fe::graph::Tensor_attributes &t, const shape &s, int H, const tensor_t &off) {
    int64_t S = s.S, D = s.hs;
    return t.set_dim({s.B, H, S, D}).set_stride({S * H * D, D, H * D, 1}).set_ragged_offset(off);
}

static tensor_t packed_input(fe::graph::Graph &g, const char *name, int64_t uid, const shape &s, int H,
                             const tensor_t &off) {
    fe::graph::Tensor_attributes t;
    t.set_name(name).set_uid(uid);
    return g.tensor(packed(t, s, H, off));
}

static void packed_output(const tensor_t &t, int64_t uid, const shape &s, int H, const tensor_t &off) {
    t->set_output(true).set_uid(uid);
    packed(*t, s, H, off);
}

static fe::graph::Tensor_attributes &stats_layout(fe::graph::Tensor_attributes &t, const shape &s, const tensor_t &off) {
    int64_t S = s.S, H = s.nh;
    return t.set_dim({s.B, H, S, 1}).set_stride({S * H, 1, H, 1}).set_ragged_offset(off).set_data_type(
        fe::DataType_t::FLOAT);
}

static std::shared_ptr<fe::graph::Graph> new_graph() {
    auto g = std::make_shared<fe::graph::Graph>();
    g->set_io_data_type(fe::DataType_t::BFLOAT16)
        .set_intermediate_data_type(fe::DataType_t::FLOAT)
        .set_compute_data_type(fe::DataType_t::FLOAT);
    return g;
}

// What every graph starts with: sequence lengths, offsets, the ragged Q and
// (not paged) the ragged K and V.
struct inputs {
    tensor_t len_q, len_kv, off_q, off_kv, Q, K, V;
};

static inputs common_inputs(fe::graph::Graph &g, const shape &s) {
    inputs in;
    in.len_q = index_tensor(g, "len_q", U_LEN_Q, s.B);
    in.len_kv = index_tensor(g, "len_kv", U_LEN_KV, s.B);
    in.off_q = index_tensor(g, "off_q", U_OFF_Q, s.B + 1);
    in.Q = packed_input(g, "Q", U_Q, s, s.nh, in.off_q);
    if (s.kind != PAGED) {
        in.off_kv = index_tensor(g, "off_kv", U_OFF_KV, s.B + 1);
        in.K = packed_input(g, "K", U_K, s, s.nkv, in.off_kv);
        in.V = packed_input(g, "V", U_V, s, s.nkv, in.off_kv);
    }
    return in;
}

// Causal (the diagonal from `corner` of each sequence's score matrix), each
// sequence to its own rows (padding mask over the lengths), scale 1/sqrt(hs).
template <class A>
static A &masked(A &&a, const char *name, const shape &s, const inputs &in, fe::DiagonalAlignment_t corner) {
    a.set_name(name)
        .set_attn_scale(1.f / sqrtf((float)s.hs))
        .set_diagonal_alignment(corner)
        .set_diagonal_band_right_bound(0)
        .set_padding_mask(true)
        .set_seq_len_q(in.len_q)
        .set_seq_len_kv(in.len_kv);
    return a;
}

static std::shared_ptr<fe::graph::Graph> build_fwd(const shape &s) {
    auto g = new_graph();
    inputs in = common_inputs(*g, s);
    bool stats = s.kind == FWD_STATS;
    fe::graph::SDPA_attributes o;
    masked(o, "sdpa_fwd", s, in, fe::DiagonalAlignment_t::TOP_LEFT)
        .set_implementation(fe::AttentionImplementation_t::COMPOSITE)
        .set_generate_stats(stats);
    auto [O, Stats] = g->sdpa(in.Q, in.K, in.V, o);
    packed_output(O, U_O, s, s.nh, in.off_q);
    if (stats) {
        auto off_st = index_tensor(*g, "off_stats", U_OFF_ST, s.B + 1);
        Stats->set_output(true).set_uid(U_STATS);
        stats_layout(*Stats, s, off_st);
    }
    return g;
}

static std::shared_ptr<fe::graph::Graph> build_bwd(const shape &s) {
    auto g = new_graph();
    inputs in = common_inputs(*g, s);
    auto off_st = index_tensor(*g, "off_stats", U_OFF_ST, s.B + 1);
    auto O = packed_input(*g, "O", U_O, s, s.nh, in.off_q);
    auto dO = packed_input(*g, "dO", U_DO, s, s.nh, in.off_q);
    fe::graph::Tensor_attributes st;
    st.set_name("stats").set_uid(U_STATS);
    auto Stats = g->tensor(stats_layout(st, s, off_st));
    fe::graph::SDPA_backward_attributes o;
    masked(o, "sdpa_bwd", s, in, fe::DiagonalAlignment_t::TOP_LEFT)
        .set_max_total_seq_len_q(s.T)      // workspace (dQ and the GQA dK/dV sums) by tokens,
        .set_max_total_seq_len_kv(s.T);    // not by B x S
    auto [dQ, dK, dV] = g->sdpa_backward(in.Q, in.K, in.V, O, dO, Stats, o);
    packed_output(dQ, U_DQ, s, s.nh, in.off_q);
    packed_output(dK, U_DK, s, s.nkv, in.off_kv);
    packed_output(dV, U_DV, s, s.nkv, in.off_kv);
    return g;
}

static std::shared_ptr<fe::graph::Graph> build_paged(const shape &s) {
    auto g = new_graph();
    inputs in = common_inputs(*g, s);
    int64_t kvd = (int64_t)s.nkv * s.hs, bs = s.bs, mb = s.max_blocks;
    auto container = [&](const char *name, int64_t uid) {
        return g->tensor(fe::graph::Tensor_attributes()
                             .set_name(name)
                             .set_uid(uid)
                             .set_dim({s.n_blocks, s.nkv, bs, s.hs})
                             .set_stride({(int64_t)s.n_layers * bs * kvd, s.hs, kvd, 1}));
    };
    auto table = [&](const char *name, int64_t uid) {
        return g->tensor(fe::graph::Tensor_attributes()
                             .set_name(name)
                             .set_uid(uid)
                             .set_dim({s.B, 1, mb, 1})
                             .set_stride({mb, mb, 1, 1})
                             .set_data_type(fe::DataType_t::INT32));
    };
    // The new rows are the last len_q of len_kv positions: causal from the
    // bottom-right corner of each sequence's score matrix.
    fe::graph::SDPA_attributes o;
    masked(o, "sdpa_prefill", s, in, fe::DiagonalAlignment_t::BOTTOM_RIGHT)
        .set_implementation(fe::AttentionImplementation_t::COMPOSITE)
        .set_generate_stats(false)
        .set_paged_attention_k_table(table("table_k", U_PT_K))
        .set_paged_attention_v_table(table("table_v", U_PT_V))
        .set_paged_attention_max_seq_len_kv((int)(mb * bs));
    auto [O, Stats] = g->sdpa(in.Q, container("K_pool", U_K), container("V_pool", U_V), o);
    (void)Stats;
    packed_output(O, U_O, s, s.nh, in.off_q);
    return g;
}

static int pow2_at_least(int64_t n, int64_t lo) {
    int64_t p = lo;
    while (p < n) p *= 2;
    return (int)p;
}

// The graph for shape s: cached, else built (validate, operation graph,
// heuristics A, plan) and cached, evicting the least recently used.
static skpo_status graph_for(dnn_state *d, const shape &s, entry **out, skpo_err *err) {
    entry *lru = nullptr;
    for (auto &e : d->graphs) {
        if (e.s == s) {
            e.used = ++d->clock;
            *out = &e;
            return SKPO_OK;
        }
        if (!lru || e.used < lru->used) lru = &e;
    }
    static const char *kinds[] = {"forward", "forward", "backward", "prefill"};
    std::shared_ptr<fe::graph::Graph> g =
        s.kind == BWD ? build_bwd(s) : s.kind == PAGED ? build_paged(s) : build_fwd(s);
    fe::error_t e = g->build(d->h, {fe::HeurMode_t::A});
    if (e.is_bad())
        return skpo_err_set(err, SKPO_EUNSUPPORTED, "cuDNN attention %s (batch %d, length <= %d, %d/%d heads, head_dim %d): %s",
                            kinds[s.kind], s.B, s.S, s.nh, s.nkv, s.hs, e.get_message().c_str());
    int64_t ws = 0;
    e = g->get_workspace_size(ws);
    if (e.is_bad()) return skpo_err_set(err, SKPO_EUNSUPPORTED, "cuDNN attention workspace: %s", e.get_message().c_str());
    entry fresh{s, g, ws, ++d->clock};
    if (d->graphs.size() < MAX_GRAPHS) {
        d->graphs.push_back(fresh);
        *out = &d->graphs.back();
    } else {
        *lru = fresh;
        *out = lru;
    }
    return SKPO_OK;
}

// Grow-only device buffers (a rare cudaMalloc; cudaFree waits for the device).
static skpo_status grow(skpo_cuda *c, void **p, size_t *cap, size_t need, const char *what, skpo_err *err) {
    if (need <= *cap) return SKPO_OK;
    if (*p) cudaFree(*p);
    *p = nullptr;
    *cap = 0;
    size_t bytes = need + need / 4;
    skpo_status st = skpo_cuda_malloc(c, p, bytes, what, err);
    if (!st) *cap = bytes;
    return st;
}

static skpo_status run(skpo_cuda *c, dnn_state *d, entry *en, std::unordered_map<int64_t, void *> &pack, skpo_err *err) {
    skpo_status st = grow(c, &d->ws, &d->ws_cap, (size_t)en->ws, "cuDNN attention workspace", err);
    if (st) return st;
    fe::error_t e = en->g->execute(d->h, pack, d->ws);
    if (e.is_bad()) return skpo_err_set(err, SKPO_EDEVICE, "cuDNN attention: execute: %s", e.get_message().c_str());
    cudaError_t ce = cudaGetLastError();
    if (ce != cudaSuccess) return skpo_err_set(err, SKPO_EDEVICE, "cuDNN attention: %s", cudaGetErrorString(ce));
    return SKPO_OK;
}

// The index tensors for B sequences, in the context's buffer.
static skpo_status index_pack(skpo_cuda *c, dnn_state *d, int B, std::unordered_map<int64_t, void *> &pack,
                              skpo_err *err) {
    size_t n = SKPO_SDPA_INDEX_INTS(B);
    skpo_status st = grow(c, (void **)&d->idx, &d->idx_cap, n * sizeof(int32_t), "cuDNN attention indices", err);
    if (st) return st;
    pack[U_LEN_Q] = d->idx;
    pack[U_LEN_KV] = d->idx + B;
    pack[U_OFF_Q] = d->idx + 2 * B;
    pack[U_OFF_KV] = d->idx + 3 * B + 1;
    pack[U_OFF_ST] = d->idx + 4 * B + 2;
    return SKPO_OK;
}

// Checks, the graph of shape s (cached or built) and the index tensors' place
// in the variant pack; T: rows of the packed q.
static skpo_status begin(skpo_cuda *c, const shape &s, int T, dnn_state **d, entry **en,
                         std::unordered_map<int64_t, void *> &pack, skpo_err *err) {
    skpo_status st = skpo_cudnn_check(c, err);
    if (st) return st;
    if (s.nkv <= 0 || s.nh % s.nkv || s.hs % 8 || s.hs > 256)
        return skpo_err_set(err, SKPO_EUNSUPPORTED, "cuDNN attention: %d/%d heads, head_dim %d unsupported", s.nh, s.nkv,
                            s.hs);
    if ((int64_t)T * s.nh * s.hs >= INT32_MAX)
        return skpo_err_set(err, SKPO_EUNSUPPORTED, "cuDNN attention: %d tokens x %d x %d overflow its int32 offsets", T,
                            s.nh, s.hs);
    *d = state_of(c);
    if ((st = graph_for(*d, s, en, err))) return st;
    return index_pack(c, *d, s.B, pack, err);
}

// Batch sizes a graph is built for: 1, 2, 3, 4, 6, 8, 12, 16, 24, ... (powers
// of two and 1.5 x powers of two, at most 1.5x the batch), the rest of the
// bucket empty sequences; SKPO_CUDNN_EXACT_BATCH=1: the batch itself.
static int batch_bucket(int n) {
    const char *exact = getenv("SKPO_CUDNN_EXACT_BATCH");
    if (exact && *exact && strcmp(exact, "0")) return n;
    int p = 1;
    while (p < n) p *= 2;
    return p >= 4 && n <= p / 4 * 3 ? p / 4 * 3 : p;
}

static shape shape_of(int kind, int B, int max_len, int nh, int nkv, int hs) {
    shape s{};
    s.kind = kind, s.B = batch_bucket(B), s.S = pow2_at_least(max_len, 64), s.nh = nh, s.nkv = nkv, s.hs = hs;
    return s;
}

#define GUARD_BEGIN try {
#define GUARD_END                                                                          \
    }                                                                                      \
    catch (const std::exception &x) {                                                      \
        return skpo_err_set(err, SKPO_EDEVICE, "cuDNN attention: %s", x.what());           \
    }

static void *P(const void *p) { return const_cast<void *>(p); }

extern "C" skpo_status skpo_cudnn_attention(skpo_cuda *c, skpo_bf16 *out, float *lse, const skpo_bf16 *q,
                                            const skpo_bf16 *k, const skpo_bf16 *v, const int32_t *seq_start, int nseq,
                                            int max_len, int T, int nh, int nkv, int hs, skpo_err *err) {
    if (!T) return SKPO_OK;
    GUARD_BEGIN
    dnn_state *d;
    entry *en;
    std::unordered_map<int64_t, void *> pack;
    skpo_status st = begin(c, shape_of(lse ? FWD_STATS : FWD, nseq, max_len, nh, nkv, hs), T, &d, &en, pack, err);
    if (!st) st = skpo_cuda_sdpa_index(c, d->idx, seq_start, nseq, batch_bucket(nseq), nh, nkv, hs, err);
    if (st) return st;
    pack[U_Q] = P(q), pack[U_K] = P(k), pack[U_V] = P(v), pack[U_O] = out;
    if (lse) pack[U_STATS] = lse;
    else pack.erase(U_OFF_ST);
    return run(c, d, en, pack, err);
    GUARD_END
}

extern "C" skpo_status skpo_cudnn_attention_backward(skpo_cuda *c, skpo_bf16 *dq, skpo_bf16 *dk, skpo_bf16 *dv,
                                                     const skpo_bf16 *dout, const skpo_bf16 *out, const float *lse,
                                                     const skpo_bf16 *q, const skpo_bf16 *k, const skpo_bf16 *v,
                                                     const int32_t *seq_start, int nseq, int max_len, int T, int nh,
                                                     int nkv, int hs, skpo_err *err) {
    if (!T) return SKPO_OK;
    GUARD_BEGIN
    dnn_state *d;
    entry *en;
    std::unordered_map<int64_t, void *> pack;
    shape s = shape_of(BWD, nseq, max_len, nh, nkv, hs);
    s.T = pow2_at_least(T, 1024);
    skpo_status st = begin(c, s, T, &d, &en, pack, err);
    if (!st) st = skpo_cuda_sdpa_index(c, d->idx, seq_start, nseq, s.B, nh, nkv, hs, err);
    if (st) return st;
    pack[U_Q] = P(q), pack[U_K] = P(k), pack[U_V] = P(v), pack[U_O] = P(out), pack[U_DO] = P(dout);
    pack[U_STATS] = P(lse), pack[U_DQ] = dq, pack[U_DK] = dk, pack[U_DV] = dv;
    return run(c, d, en, pack, err);
    GUARD_END
}

extern "C" skpo_status skpo_cudnn_attention_paged(skpo_cuda *c, skpo_bf16 *out, const skpo_bf16 *q,
                                                  const skpo_bf16 *pool_k, const skpo_bf16 *pool_v,
                                                  const int32_t *block_table, int max_blocks, const int32_t *last,
                                                  const int32_t *pos, int nseq, int max_q, int N, int n_layers,
                                                  int layer, int n_blocks, int block_size, int nh, int nkv, int hs,
                                                  skpo_err *err) {
    if (!N) return SKPO_OK;
    GUARD_BEGIN
    dnn_state *d;
    entry *en;
    std::unordered_map<int64_t, void *> pack;
    shape s = shape_of(PAGED, nseq, max_q, nh, nkv, hs);
    s.max_blocks = max_blocks, s.n_blocks = n_blocks, s.n_layers = n_layers, s.bs = block_size;
    skpo_status st = begin(c, s, N, &d, &en, pack, err);
    if (!st) st = skpo_cuda_sdpa_index_paged(c, d->idx, last, pos, nseq, s.B, nh, nkv, hs, err);
    if (!st && s.B > nseq) {   // table rows for the empty sequences of the bucket (never read: zeros)
        size_t row = (size_t)max_blocks * sizeof(int32_t);
        cudaStream_t stream = (cudaStream_t)skpo_cuda_stream_of(c);
        st = grow(c, (void **)&d->table, &d->table_cap, (size_t)s.B * row, "cuDNN attention block table", err);
        cudaError_t ce = cudaSuccess;
        if (!st) ce = cudaMemcpyAsync(d->table, block_table, (size_t)nseq * row, cudaMemcpyDeviceToDevice, stream);
        if (!st && ce == cudaSuccess)
            ce = cudaMemsetAsync(d->table + (size_t)nseq * max_blocks, 0, (size_t)(s.B - nseq) * row, stream);
        if (!st && ce != cudaSuccess) st = skpo_err_set(err, SKPO_EDEVICE, "cuDNN attention: %s", cudaGetErrorString(ce));
        block_table = d->table;
    }
    if (st) return st;
    pack.erase(U_OFF_KV);
    pack.erase(U_OFF_ST);
    size_t layer_off = (size_t)layer * block_size * nkv * hs;   // the layer's rows inside each block
    pack[U_Q] = P(q), pack[U_O] = out;
    pack[U_K] = P(pool_k + layer_off), pack[U_V] = P(pool_v + layer_off);
    pack[U_PT_K] = P(block_table), pack[U_PT_V] = P(block_table);
    return run(c, d, en, pack, err);
    GUARD_END
}

#endif /* SKPO_HAVE_CUDNN */
