#!/bin/sh
# Install what skpo builds with: the Debian packages (when root, else print the
# apt line) and, for a CUDA build, the cuDNN frontend headers (header-only C++,
# the pinned PyPI package nvidia-cudnn-frontend) into .deps/cudnn-frontend/,
# which the Makefile looks in. Quiet when everything is present.
top=$(cd "$(dirname "$0")/.." && pwd)
PKGS="build-essential pkg-config libmsgpack-dev libzstd-dev zstd libopenblas-dev libpcre2-dev libutf8proc-dev libjansson-dev libopenmpi-dev openmpi-bin gnuplot-nox clang libgmp-dev libmpfr-dev libflint-dev bubblewrap zlib1g-dev"
missing=""
for p in $PKGS; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
  if [ "$(id -u)" = 0 ]; then
    echo "skpo: installing:$missing" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null && apt-get install -y -qq $missing >/dev/null || {
      echo "skpo: apt-get install failed for:$missing" >&2; exit 1; }
  else
    echo "skpo: missing Debian packages; run as root:" >&2
    echo "  apt-get install -y$missing" >&2
    exit 1
  fi
fi

# cuDNN attention (core/cuda/sdpa_cudnn.cpp) is compiled when nvcc, cudnn.h and
# these headers are all present; without them the build still works and
# SKPO_ATTN=cudnn says why it is unavailable. The pin is the version the code
# was written and checked against.
FE_VERSION=1.32.0
fe="$top/.deps/cudnn-frontend"
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
command -v "${NVCC:-nvcc}" >/dev/null 2>&1 || exit 0
[ -f "$CUDA_HOME/include/cudnn.h" ] || [ -n "${CUDNN_INCLUDE:-}" ] || exit 0
[ "$(cat "$fe/VERSION" 2>/dev/null)" = "$FE_VERSION" ] && [ -f "$fe/include/cudnn_frontend.h" ] && exit 0
echo "skpo: fetching the cuDNN frontend headers (nvidia-cudnn-frontend==$FE_VERSION) into .deps/cudnn-frontend" >&2
tmp=$(mktemp -d)
rm -rf "$fe.new"
trap 'rm -rf "$tmp"' EXIT
if ! python3 -m pip download -q --no-deps --disable-pip-version-check -d "$tmp" "nvidia-cudnn-frontend==$FE_VERSION" >"$tmp/log" 2>&1; then
  cat "$tmp/log" >&2
  echo "skpo: cannot download nvidia-cudnn-frontend==$FE_VERSION with pip; without it cuDNN attention is not built" >&2
  echo "  (put its include/ folder at .deps/cudnn-frontend/include, or build with CUDNN=0)" >&2
  exit 1
fi
# The package (a wheel, or the source archive) carries the C++ headers in include/.
python3 - "$tmp" "$fe.new" <<'PY' || { echo "skpo: no include/ folder in the downloaded nvidia-cudnn-frontend" >&2; exit 1; }
import os, sys, tarfile, zipfile
src, dst = sys.argv[1], sys.argv[2]
pkg = [f for f in os.listdir(src) if f.endswith((".whl", ".tar.gz"))][0]
path = os.path.join(src, pkg)
def keep(name):
    parts = name.split("/")
    i = parts.index("include") if "include" in parts else -1
    return i >= 0 and i <= 1 and not name.endswith("/"), "/".join(parts[i:])
n = 0
if pkg.endswith(".whl"):
    with zipfile.ZipFile(path) as z:
        for info in z.infolist():
            ok, rel = keep(info.filename)
            if ok:
                out = os.path.join(dst, rel)
                os.makedirs(os.path.dirname(out), exist_ok=True)
                with open(out, "wb") as f:
                    f.write(z.read(info))
                n += 1
else:
    with tarfile.open(path) as t:
        for m in t.getmembers():
            ok, rel = keep(m.name)
            if ok and m.isfile():
                out = os.path.join(dst, rel)
                os.makedirs(os.path.dirname(out), exist_ok=True)
                with open(out, "wb") as f:
                    f.write(t.extractfile(m).read())
                n += 1
sys.exit(0 if os.path.exists(os.path.join(dst, "include", "cudnn_frontend.h")) else 1)
PY
echo "$FE_VERSION" >"$fe.new/VERSION"
rm -rf "$fe" && mv "$fe.new" "$fe"
