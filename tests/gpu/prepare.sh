#!/bin/sh
# The FALLBACK only: `make gpu-bundle` (scripts/gpu-bundle.sh) is how the GPU
# run gets its binaries. Where a bundle cannot load on the GPU image (another
# glibc, say), tests/gpu/run.sh builds there instead, and for that it needs
# these libraries' headers. Run HERE (a Debian machine with apt): fetches
# the .deb files of every library the build links (dev packages and their
# runtime libraries) into .gpudeps/ (ignored by git), which the device call
# carries (`carry: [".gpudeps"]`). tests/gpu/run.sh unpacks them with dpkg -x
# into /tmp/gpudeps on the GPU machine, which has the CUDA toolkit and PyTorch
# but none of these libraries and no network.
#
# OpenMPI is left out on purpose: it pulls tens of MB of dependencies
# (hwloc, pmix, libfabric, ucx ...) and the GPU checks run one rank; without
# pkg-config's ompi-c the Makefile builds core/train/comm.c without MPI.
set -eu
top=$(cd "$(dirname "$0")/../.." && pwd)
dir="$top/.gpudeps"
pkgs="libmsgpack-dev libmsgpackc2 libzstd-dev libzstd1
      libopenblas-dev libopenblas-pthread-dev libopenblas0-pthread libgfortran5 libquadmath0
      libpcre2-dev libpcre2-8-0 libutf8proc-dev libutf8proc2 libjansson-dev libjansson4
      zlib1g-dev libflint-dev libflint17 libntl44 libgf2x3 libmpfr-dev libmpfr6 libgmp-dev libgmp10 libgmpxx4ldbl"
command -v apt-get >/dev/null || { echo "prepare.sh: needs apt-get (a Debian/Ubuntu machine)" >&2; exit 1; }
rm -rf "$dir.tmp" && mkdir -p "$dir.tmp"
# apt's _apt user cannot write into a root-owned folder; download as root into it
(cd "$dir.tmp" && apt-get download $pkgs 2>&1 | grep -v '^Get:\|unsandboxed' || true)
n=$(ls "$dir.tmp"/*.deb 2>/dev/null | wc -l)
want=$(echo $pkgs | wc -w)
if [ "$n" -ne "$want" ]; then
  echo "prepare.sh: got $n of $want packages (run apt-get update?)" >&2
  exit 1
fi
# cuDNN attention: the GPU machine has PyTorch's libcudnn.so.9 but no headers.
# The toolkit's cudnn*.h and the pinned frontend headers (scripts/deps.sh)
# travel in .gpudeps/cudnn/include (the build: CUDNN_INCLUDE and
# CUDNN_FRONTEND pointed there, CUDNN_LIB at a libcudnn.so link to the pip one).
cuda_home=${CUDA_HOME:-/usr/local/cuda}
if [ -f "$cuda_home/include/cudnn.h" ] && sh "$top/scripts/deps.sh" >&2 && [ -f "$top/.deps/cudnn-frontend/include/cudnn_frontend.h" ]; then
  mkdir -p "$dir.tmp/cudnn/include"
  cp "$cuda_home"/include/cudnn*.h "$dir.tmp/cudnn/include/"
  cp -R "$top/.deps/cudnn-frontend/include/." "$dir.tmp/cudnn/include/"
else
  echo "prepare.sh: no cudnn.h in $cuda_home or no cuDNN frontend headers: the GPU build will have no cuDNN attention" >&2
fi
rm -rf "$dir" && mv "$dir.tmp" "$dir"
ls "$dir" > "$dir/MANIFEST"
echo "prepare.sh: $n packages in .gpudeps: $(du -sh "$dir" | cut -f1)"
tracked=$(cd "$top" && git ls-files -z | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1)
echo "prepare.sh: tracked tree $((tracked / 1048576)) MiB + .gpudeps $(( $(du -sb "$dir" | cut -f1) / 1048576 )) MiB (device limit 64 MiB)"
echo "device call (fallback): command 'sh tests/gpu/run.sh', carry [\".gpudeps\"] (with or without .gpu-bundle), timeout_s 540"
