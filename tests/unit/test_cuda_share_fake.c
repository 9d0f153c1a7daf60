// test_cuda_share_fake.c - test_cuda_share.c in CPU builds against fake_cuda.h
// (host-memory kernels; its IPC handle carries the pointer, so the importer is
// a fork of the exporter) and core/model/model_cuda.c compiled with
// SKPO_HAVE_CUDA: the export, the mapping and the loan's end over a real pipe
// (the importer reading to EOF before it is done) run in CI although no GPU is
// there. The driver's IPC itself is only tested on a GPU (test_cuda_share).
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
#include "test_cuda_share.c"
#else
#include "harness.h"
SKIP_ONLY_MAIN(fake_backend_runs_in_cpu_builds_only, "the real CUDA backend is linked in this build")
#endif
