// test_cuda_model_fake.c - test_cuda_model.c's GPU comparisons, run in CPU
// builds against fake_cuda.h (host-memory kernels with bf16 storage) and
// core/model/model_cuda.c compiled with SKPO_HAVE_CUDA (and backends.c, so the
// CPU build's library finds the CUDA backend): the host side of the CUDA
// inference path (offsets, staging, device KV pool, copy-on-write, scratch,
// sync, errors) is exercised in CI although no GPU is there. The kernels
// themselves are only tested on a GPU (test_cuda_ops, test_cuda_model).
#ifndef SKPO_HAVE_CUDA
#define SKPO_HAVE_CUDA 1
#define SKPO_FAKE_CUDA 1
#include "fake_cuda.h"
#include "fake_cuda_train.h"
#include "../../core/model/model_cuda.c"
#include "../../core/model/model_cuda_sample.c"   // its device sampler
#include "../../core/model/model_cuda_devops.c"   // its device optimizer's primitives
#include "../../core/model/model_cuda_train.c"  // the rest of the CUDA backend's table
#include "../../core/model/lora_cuda.c"         // the CUDA backend's LoRA (a CPU build has none)
#include "../../core/model/backends.c"          // a backend list that has it
#include "test_cuda_model.c"
#else
#include "harness.h"
SKIP_ONLY_MAIN(fake_backend_runs_in_cpu_builds_only, "the real CUDA backend is linked in this build")
#endif
