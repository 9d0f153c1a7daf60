#!/bin/sh
# Install the Debian packages skpo needs (when root), or print the apt line.
# Quiet when everything is present.
PKGS="build-essential pkg-config libmsgpack-dev libzstd-dev zstd libopenblas-dev libpcre2-dev libutf8proc-dev libjansson-dev libopenmpi-dev openmpi-bin gnuplot-nox clang libgmp-dev libmpfr-dev libflint-dev bubblewrap zlib1g-dev"
missing=""
for p in $PKGS; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
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
