// test_cuda_train_fake.c - test_cuda_train.c's GPU-vs-CPU comparisons, run in
// CPU builds against fake_cuda.h + fake_cuda_train.h (host-memory kernels with
// bf16 storage) and core/model/model_cuda.c, model_cuda_train.c, lora_cuda.c, optim_dev.c compiled
// with SKPO_HAVE_CUDA: the host side of device training (parameter offsets,
// the activation arena, scored-row chunks of the lm_head (shrunk here to 4096
// logits so every test runs many), recomputation, the device optimizer and its
// state round trip, the update step wiring) runs in CI without a GPU. The
// kernels themselves are only tested on a GPU (test_cuda_ops, test_cuda_train).
#ifndef SKPO_HAVE_CUDA
#define SKPO_HAVE_CUDA 1
#define SKPO_FAKE_CUDA 1
#define LOGIT_CHUNK_ELEMS ((size_t)1 << 12)
#include "fake_cuda.h"
#include "fake_cuda_train.h"
#include "../../core/model/model_cuda.c"
#include "../../core/model/model_cuda_sample.c"   // its device sampler
#include "../../core/model/model_cuda_devops.c"   // its device optimizer's primitives
#include "../../core/model/model_cuda_train.c"
#include "../../core/model/lora_cuda.c"         // the CUDA backend's LoRA (a CPU build has none)
#include "../../core/train/optim_dev.c"
#include "../../core/model/backends.c"          // a backend list that has the CUDA backend
#include "test_cuda_train.c"
#else
#include "harness.h"
SKIP_ONLY_MAIN(fake_backend_runs_in_cpu_builds_only, "the real CUDA backend is linked in this build")
#endif
