#!/usr/bin/env bash
# Installs what building and testing causeway needs on a Debian/Ubuntu machine, idempotently:
# system packages (compilers, clang for BPF C, libelf, zlib, Node for the MCP conformance suite)
# the prebuilt DuckDB library (from the npm registry package DuckDB publishes), so DuckDB's
# 300 C++ files are not compiled (29 minutes cold on 2 cores, see docs/build.md), and NVIDIA's
# CUDA runtime from PyPI for the collector's tests on the real library.
set -euo pipefail
cd "$(dirname "$0")/.."

DUCKDB_VERSION=1.5.6
DUCKDB_NPM="@duckdb/node-bindings-linux-x64@${DUCKDB_VERSION}-r.1"
DUCKDB_SHA256=""  # filled below after the first verified fetch; see docs/build.md

need_pkgs=()
have() { command -v "$1" >/dev/null 2>&1; }
pkg_installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }

for p in build-essential pkg-config clang llvm libelf-dev zlib1g-dev python3 python3-venv npm sqlite3 iproute2 procps; do
  pkg_installed "$p" || need_pkgs+=("$p")
done
# Some images ship python3/npm outside dpkg (pyenv, nodesource): accept the commands.
filtered=()
for p in "${need_pkgs[@]}"; do
  case "$p" in
    python3) have python3 || filtered+=("$p") ;;
    python3-venv) python3 -c 'import venv' 2>/dev/null || filtered+=("$p") ;;
    npm) have npm || filtered+=("$p") ;;
    *) filtered+=("$p") ;;
  esac
done
if [ "${#filtered[@]}" -gt 0 ]; then
  echo "causeway setup: installing system packages: ${filtered[*]}" >&2
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq >&2
  $SUDO apt-get install -y -qq --no-install-recommends "${filtered[@]}" >&2
fi

if ! have cargo; then
  if [ -x "$HOME/.cargo/bin/cargo" ]; then
    export PATH="$HOME/.cargo/bin:$PATH"
  else
    echo "causeway setup: installing the Rust toolchain with rustup" >&2
    curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal -c rustfmt -c clippy >&2
    export PATH="$HOME/.cargo/bin:$PATH"
  fi
fi

lib=.deps/duckdb/libduckdb.so
if [ ! -s "$lib" ]; then
  echo "causeway setup: fetching prebuilt DuckDB ${DUCKDB_VERSION} (${DUCKDB_NPM})" >&2
  tmp=$(mktemp -d)
  (cd "$tmp" && npm pack --silent "$DUCKDB_NPM" >/dev/null)
  mkdir -p .deps/duckdb
  tar -xzf "$tmp"/*.tgz -C "$tmp"
  mv "$tmp/package/libduckdb.so" "$lib.tmp"
  mv "$lib.tmp" "$lib"
  rm -rf "$tmp"
fi

# NVIDIA's CUDA runtime (libcudart.so.12 and libcudart_static.a) from the PyPI wheel PyTorch
# installs, for the collector's tests on the real binaries (collector/tests/it/real_runtime.rs).
# No GPU needed: without a driver every call returns cudaErrorInsufficientDriver, after entering
# and leaving the real function. Pinned by version and hash.
CUDART_WHEEL="nvidia-cuda-runtime-cu12==12.9.79"
CUDART_SHA256=25bba2dfb01d48a9b59ca474a1ac43c6ebf7011f1b0b8cc44f54eb6ac48a96c3
cudart=.deps/cudart
if [ ! -s "$cudart/libcudart.so.12" ] || [ ! -s "$cudart/libcudart_static.a" ]; then
  echo "causeway setup: fetching the CUDA runtime wheel ($CUDART_WHEEL) from PyPI" >&2
  tmp=$(mktemp -d)
  python3 -m venv "$tmp/venv"
  echo "$CUDART_WHEEL --hash=sha256:$CUDART_SHA256" > "$tmp/req.txt"
  "$tmp/venv/bin/python" -m pip download -q --no-deps --require-hashes -r "$tmp/req.txt" -d "$tmp/wheel" >&2
  mkdir -p "$cudart"
  python3 - "$tmp/wheel" "$cudart" <<'PY'
import os, sys, zipfile
src, dst = sys.argv[1], sys.argv[2]
(wheel,) = [f for f in os.listdir(src) if f.endswith(".whl")]
with zipfile.ZipFile(os.path.join(src, wheel)) as z:
    for name in ("libcudart.so.12", "libcudart_static.a"):
        data = z.read("nvidia/cuda_runtime/lib/" + name)
        with open(os.path.join(dst, name + ".tmp"), "wb") as f:
            f.write(data)
        os.replace(os.path.join(dst, name + ".tmp"), os.path.join(dst, name))
PY
  rm -rf "$tmp"
fi
