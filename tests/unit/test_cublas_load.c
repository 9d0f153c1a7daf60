// test_cublas_load.c - cuBLAS, cuDNN and NVRTC are not linked but loaded on
// first use (core/cuda/cublas_load.c, core/cuda/sdpa_cudnn.cpp): a process
// that never asks for them never maps them (linked, they cost every tool
// ~65 ms at start, CPU runs included), and the first ask for cuBLAS maps it or
// says in one line why it cannot. (cuDNN's first ask needs a GPU context:
// tests/gpu/run.sh.)
#include "harness.h"
#include "base/common.h"

#ifndef SKPO_HAVE_CUDA
SKIP_ONLY_MAIN(cublas_loads_on_first_use_only, "built without CUDA (no nvcc)")
#else
#include "cuda/cuda.h"

#include <stdio.h>
#include <string.h>

// Whether a library whose name holds `name` is mapped into this process.
static int mapped(const char *name) {
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f) return -1;
    char line[4096];
    int hit = 0;
    while (!hit && fgets(line, sizeof line, f)) hit = strstr(line, name) != NULL;
    fclose(f);
    return hit;
}

static void cudnn_and_nvrtc_are_not_mapped_at_start(void) {
    CHECK_MSG(mapped("libcudnn") == 0, "libcudnn is mapped before anything asked for it (linked again?)");
    CHECK_MSG(mapped("libnvrtc") == 0, "libnvrtc is mapped before anything asked for it (linked again?)");
}

static void cublas_loads_on_first_use_only(void) {
    CHECK_MSG(mapped("libcublas") == 0, "libcublas is mapped before anything asked for it (linked again?)");
    const char *why = skpo_cublas_load_error();
    if (why) {
        CHECK_MSG(strncmp(why, "cannot load libcublas.so.", 25) == 0, "unexpected reason: %s", why);
        CHECK(mapped("libcublas") == 0);
        SKIP("cuBLAS is not installed here; its absence is reported in one line");
    }
    CHECK_MSG(mapped("libcublas") == 1, "skpo_cublas_load_error said loaded, but libcublas is not mapped");
    CHECK(skpo_cublas_load_error() == NULL); // once: the same answer
}

int main(void) {
    RUN(cudnn_and_nvrtc_are_not_mapped_at_start);
    RUN(cublas_loads_on_first_use_only);
    return TEST_SUMMARY();
}
#endif
