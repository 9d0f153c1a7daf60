# skpo - one Makefile: libskpo.a from core/*/ (layers: docs/architecture.md), one binary per tools/<name>/ into
# bin/skpo-<name>, unit tests from tests/unit/test_*.c. CUDA sources
# (core/cuda/*.cu) are compiled when nvcc is on the PATH; `make CUDA=0` forces
# a CPU-only build. Attention through cuDNN (core/cuda/sdpa_cudnn.cpp) is
# compiled when cudnn.h and the cuDNN frontend headers are found (`make deps`
# fetches the pinned frontend into .deps/); `make CUDNN=0` leaves it out. See README.md for the user-facing targets.

CC      ?= cc
NVCC    ?= nvcc
BUILD   ?= build
SAN     ?=
OPT     ?= -O2
CUDA_HOME ?= /usr/local/cuda
BIN     ?= bin
# BUNDLE=1: the GPU bundle's flavour (scripts/gpu-bundle.sh): position-independent
# objects linked into one libskpo.so that every binary loads from $$ORIGIN/../lib,
# so the CUDA fatbin is carried once; sm_90 machine code plus its PTX, -lineinfo
# for the sanitizer's and ncu's source lines. The bundle builds without MPI.
BUNDLE  ?=

ifeq ($(origin CUDA), undefined)
  CUDA := $(if $(shell command -v $(NVCC) 2>/dev/null),1,0)
endif

MPI_CFLAGS := $(shell pkg-config --cflags ompi-c 2>/dev/null)
MPI_LIBS   := $(shell pkg-config --libs ompi-c 2>/dev/null)

WARN    = -Wall -Wextra -Werror -Wno-unused-parameter
CFLAGS  += $(OPT) -g -std=gnu11 -fopenmp -fno-fast-math $(WARN) -Icore -I/usr/include/x86_64-linux-gnu/openblas-pthread $(MPI_CFLAGS) $(SAN)
LDLIBS  += -lmsgpackc -lzstd -lz -lopenblas -lpcre2-8 -lutf8proc -ljansson -lflint -lmpfr -lgmp -lm -lpthread $(MPI_LIBS)
LDFLAGS += -fopenmp -Wl,--as-needed $(SAN)

ifeq ($(CUDA),1)
  CFLAGS    += -DSKPO_HAVE_CUDA -I$(CUDA_HOME)/include
  NVCC_ARCH ?= -gencode arch=compute_90,code=sm_90 -gencode arch=compute_80,code=sm_80 \
               -gencode arch=compute_90,code=compute_90
  ifeq ($(BUNDLE),1)
    NVCC_ARCH := -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90 -lineinfo
  endif
  NVCCFLAGS ?= -O2 -g -std=c++17 -Icore --compiler-options -Wall,-Wextra,-Wno-unused-parameter,-fPIC -Werror all-warnings \
               $(NVCC_ARCH)
  # cuBLAS is dlopened on first use (core/cuda/cublas_load.c), not linked.
  LDLIBS    += -L$(CUDA_HOME)/lib64 -lnccl -lcudart -lstdc++ -ldl
  # NCCL outside CUDA_HOME (e.g. the pip package nvidia-nccl-cu13; tests/gpu/run.sh sets it)
  ifneq ($(NCCL_HOME),)
    NVCCFLAGS += -I$(NCCL_HOME)/include
    CFLAGS    += -I$(NCCL_HOME)/include
    LDLIBS    += -L$(NCCL_HOME)/lib
  endif
  CU_SRC    := $(wildcard core/cuda/*.cu)
  CU_OBJ    := $(CU_SRC:%.cu=$(BUILD)/%.o)
  # Host C++ of the backend (the cuDNN graph API): g++, no device code.
  CPP_SRC   := $(wildcard core/cuda/*.cpp)
  CU_OBJ    += $(CPP_SRC:%.cpp=$(BUILD)/%.o)
endif

# cuDNN: headers and library (default: the CUDA toolkit's), and the frontend
# headers (default: where scripts/deps.sh puts them); NVRTC from the toolkit
# (or CUDNN_LIB). tests/gpu/run.sh points them at the carried headers and
# PyTorch's pip package (libcudnn.so.9).
CUDNN_INCLUDE  ?= $(CUDA_HOME)/include
CUDNN_LIB      ?= $(CUDA_HOME)/lib64
CUDNN_FRONTEND ?= .deps/cudnn-frontend/include
ifneq ($(CUDA),1)
  CUDNN := 0
else ifeq ($(origin CUDNN), undefined)
  CUDNN := $(if $(and $(wildcard $(CUDNN_INCLUDE)/cudnn.h),$(wildcard $(CUDNN_FRONTEND)/cudnn_frontend.h),\
                      $(wildcard $(CUDNN_LIB)/libcudnn.so),$(wildcard $(CUDA_HOME)/lib64/libnvrtc.so $(CUDNN_LIB)/libnvrtc.so)),1,0)
endif
CXXFLAGS_DNN = -std=c++17 -O1 -fPIC $(WARN) -Icore -isystem $(CUDA_HOME)/include $(SAN)
ifeq ($(CUDNN),1)
  CXXFLAGS_DNN += -DSKPO_HAVE_CUDNN -isystem $(CUDNN_INCLUDE) -isystem $(CUDNN_FRONTEND)
  # libcudnn and NVRTC: dlopened by the frontend (core/cuda/sdpa_cudnn.cpp), not linked
endif

CORE_SRC := $(wildcard core/*/*.c)
CORE_OBJ := $(CORE_SRC:%.c=$(BUILD)/%.o)
LIB      := $(BUILD)/libskpo.a
ifeq ($(BUNDLE),1)
  CFLAGS  += -fPIC
  LIB     := $(BUILD)/libskpo.so
  # DT_RPATH (not RUNPATH): it also applies to what the bundled libraries load (libopenblas -> libgfortran)
  LDFLAGS += -Wl,--disable-new-dtags -Wl,-rpath,'$$ORIGIN/../lib'
endif

TOOL_DIRS := $(patsubst tools/%/,%,$(sort $(dir $(wildcard tools/*/main.c))))
TOOLS     := $(TOOL_DIRS:%=$(BIN)/skpo-%)

TEST_SRC  := $(wildcard tests/unit/test_*.c)
TESTS     := $(TEST_SRC:tests/unit/%.c=$(BUILD)/tests/%)

# GPU benchmarks (tests/gpu/*.c -> build/gpu/*): built everywhere, so CI checks
# that they compile; without a GPU they print "skipped: no GPU".
GPU_SRC   := $(wildcard tests/gpu/*.c)
GPU_BINS  := $(GPU_SRC:tests/gpu/%.c=$(BUILD)/gpu/%)

.PHONY: all deps test test-long demo bench asan fuzz clean tools tests gpu-test gpu-bundle gpu-rehearsal
.SECONDARY:

all: $(TOOLS) $(TESTS)
all: $(GPU_BINS)
tools: $(TOOLS)
tests: $(TESTS)

# Objects remember the flavour they were built for: switching CUDA=0/1 in one
# build folder rebuilds everything (else a CUDA build would keep the empty
# CPU-only objects of core/model/model_cuda*.c, and the reverse).
# The stamps are made when the Makefile is read, not by a rule: .SECONDARY
# (every target secondary) would let a missing stamp pass as up to date.
FLAVOUR := $(BUILD)/.flavour-cuda$(CUDA)
stamp = $(shell mkdir -p $(BUILD) && { [ -e $(1) ] || { rm -f $(BUILD)/$(2)*; touch $(1); }; })
$(call stamp,$(FLAVOUR),.flavour-cuda)

$(BUILD)/%.o: %.c $(wildcard core/*/*.h) $(FLAVOUR)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -c $< -o $@

$(BUILD)/%.o: %.cu $(wildcard core/base/*.h core/cuda/*.h core/cuda/*.cuh) $(FLAVOUR)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -c $< -o $@

# The frontend is heavy (about a minute of g++): only this object knows CUDNN.
DNN_STAMP := $(BUILD)/.cudnn$(CUDNN)
$(call stamp,$(DNN_STAMP),.cudnn)

$(BUILD)/%.o: %.cpp $(wildcard core/base/*.h core/cuda/*.h) $(FLAVOUR) $(DNN_STAMP)
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS_DNN) -c $< -o $@

$(BUILD)/libskpo.a: $(CORE_OBJ) $(CU_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/libskpo.so: $(CORE_OBJ) $(CU_OBJ)
	@mkdir -p $(dir $@)
	$(CC) -shared -Wl,-soname,libskpo.so $(LDFLAGS) -o $@ $^ $(LDLIBS)

.SECONDEXPANSION:
$(BIN)/skpo-%: $$(addprefix $(BUILD)/,$$(addsuffix .o,$$(basename $$(wildcard tools/$$*/*.c)))) $(LIB)
	@mkdir -p $(BIN)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(LIB) $(LDLIBS)

$(BUILD)/tests/%: tests/unit/%.c tests/unit/harness.h $(LIB) $(FLAVOUR)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -Itests/unit -o $@ $< $(LIB) $(LDFLAGS) $(LDLIBS)

$(BUILD)/gpu/%: tests/gpu/%.c $(wildcard tests/gpu/*.h) $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Itests/gpu -o $@ $< $(LIB) $(LDFLAGS) $(LDLIBS)

-include $(CORE_OBJ:.o=.d) $(TESTS:=.d) $(patsubst %.c,$(BUILD)/%.d,$(wildcard tools/*/*.c))

deps:
	@sh scripts/deps.sh

test: deps
	@$(MAKE) --no-print-directory all
	@sh tests/run.sh

test-long: deps
	@$(MAKE) --no-print-directory all
	@SKPO_TEST_LONG=1 sh tests/run.sh

demo: deps
	@$(MAKE) --no-print-directory all
	@sh pipelines/demo.sh

bench: deps
	@$(MAKE) --no-print-directory all
	@sh bench/run.sh

# The whole suite under AddressSanitizer + UndefinedBehaviorSanitizer, in a
# separate build tree so it never mixes with the normal objects.
# bin/ is shared with the normal build, so the sanitized tools are removed
# afterwards: the next plain `make` relinks them.
asan: deps
	@rm -f bin/skpo-*
	@$(MAKE) --no-print-directory CUDA=0 BUILD=build-asan OPT=-O1 \
	  SAN="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined" all \
	  && SKPO_BUILD=build-asan ASAN_OPTIONS=detect_leaks=1 sh tests/run.sh; rc=$$?; rm -f bin/skpo-*; exit $$rc

fuzz: deps
	@sh tests/fuzz/run.sh $${FUZZ_SECONDS:-600}

gpu-test:
	@sh tests/gpu/run.sh

# The device run's binaries, built here and carried there (tests/gpu/README.md):
# .gpu-bundle/ (git-ignored) holds bundle.tar.xz and its MANIFEST.
gpu-bundle: deps
	@sh scripts/gpu-bundle.sh

# tests/gpu/run.sh end to end from the bundle on this machine (no GPU: every
# GPU part in its skip mode), checking paths, the summary parser and budgets.
gpu-rehearsal: gpu-bundle
	@sh tests/gpu/rehearsal.sh

clean:
	rm -rf build build-asan build-fuzz build-gpu .gpu-bundle bin/skpo-*
