#!/usr/bin/env bash
# Builds the lab's stand-in CUDA stack from C into OUT, laid out as a pip-installed PyTorch
# environment is: a virtual environment whose site-packages holds nvidia/cuda_runtime/lib/
# libcudart.so.12, nvidia/nccl/lib/libnccl.so.2 (where causeway looks for a Python
# program's CUDA libraries) and nvidia/nvtx/lib/libnvToolsExt.so.1, the kernel modules in site-packages/lab_kernels/, and the driver
# (libcuda.so.1) in OUT/driver, which the workloads put on LD_LIBRARY_PATH as a driver
# install puts it on the loader's path.
#
#   build.sh OUT [PYTHON]      PYTHON: the interpreter of the venv (default /usr/bin/python3)
set -euo pipefail
out=${1:?usage: build.sh OUT [PYTHON]}
python=${2:-/usr/bin/python3}
src=$(cd "$(dirname "$0")" && pwd)
cc=${CC:-cc}
# Frame pointers, so that causeway --stacks can walk through the stand-in; no sibling calls,
# so that a kernel's host stub stays on the stack of its cudaLaunchKernel.
cflags=(-O2 -g -fPIC -fno-omit-frame-pointer -fno-optimize-sibling-calls -Wall -Wextra -pthread)

mkdir -p "$out"
rm -rf "$out/venv" "$out/driver"
"$python" -m venv --without-pip "$out/venv"
pyver=$("$out/venv/bin/python3" -c 'import sys; print("python%d.%d" % sys.version_info[:2])')
site="$out/venv/lib/$pyver/site-packages"
mkdir -p "$out/driver" "$site/nvidia/cuda_runtime/lib" "$site/nvidia/nccl/lib" "$site/nvidia/nvtx/lib" \
	"$site/lab_kernels"

so() { # so OUTPUT SONAME MAP SOURCES... [-- LDFLAGS...]
	local o=$1 soname=$2 map=$3
	shift 3
	"$cc" "${cflags[@]}" -shared "-Wl,-soname,$soname" "-Wl,--version-script,$src/$map" -o "$o" "$@"
}
so "$out/driver/libcuda.so.1" libcuda.so.1 cuda.map "$src/cuda.c" "$src/device.c"
ln -sf libcuda.so.1 "$out/driver/libcuda.so"
so "$site/nvidia/cuda_runtime/lib/libcudart.so.12" libcudart.so.12 cudart.map "$src/cudart.c" -ldl
so "$site/nvidia/nccl/lib/libnccl.so.2" libnccl.so.2 nccl.map "$src/nccl.c" -ldl
# NVTX's loader is the collector's (one copy, beside the injection library it loads)
so "$site/nvidia/nvtx/lib/libnvToolsExt.so.1" libnvToolsExt.so.1 nvtx.map -I"$src/../../../crates/collector/nvtx" \
	"$src/nvtx.c" -ldl
for variant in "liblab_kernels.so 0" "liblab_kernels_ptx.so 1"; do
	set -- $variant
	so "$site/lab_kernels/$1" "$1" kernels.map "-DLAB_PTX_ONLY=$2" "$src/kernels.c" \
		-L"$site/nvidia/cuda_runtime/lib" -l:libcudart.so.12 '-Wl,-rpath,$ORIGIN/../nvidia/cuda_runtime/lib'
done
echo "$out"
