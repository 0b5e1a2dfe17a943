# The lab's shell library, sourced by every case's `run` script: arguments, the stand-in build,
# the datasets, and the recording itself (`causeway trace`).
#
#   run problem|healthy OUT_DIR     records the case's variant into OUT_DIR/trace.duckdb; the
#                                   trace summary goes to OUT_DIR/trace.json, the collector's
#                                   and the workload's messages to OUT_DIR/trace.log
#
# Environment: CAUSEWAY (the binary, default `causeway` on PATH), LAB_BUILD (where the stand-in
# is built and the datasets are written, default $TMPDIR/causeway-lab; built when missing or
# older than its sources).
set -euo pipefail

LAB=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
W=$LAB/workloads
CASE=$(basename "$(cd "$(dirname "$0")" && pwd)")
VARIANT=${1:-}
OUT=${2:-}
if [[ $VARIANT != problem && $VARIANT != healthy || -z $OUT ]]; then
	echo "usage: $0 problem|healthy OUT_DIR" >&2
	exit 2
fi
CAUSEWAY=${CAUSEWAY:-causeway}
LAB_BUILD=${LAB_BUILD:-${TMPDIR:-/tmp}/causeway-lab}
PY=$LAB_BUILD/venv/bin/python3

lab_build() {
	local stamp=$LAB_BUILD/.built newer
	# the stand-in's sources, and NVTX's loader, which its libnvToolsExt includes
	newer=$(find "$LAB/standin" "$LAB/../../crates/collector/nvtx/loader.h" -newer "$stamp" -print -quit 2>/dev/null ||
		echo missing)
	if [[ ! -e $stamp || -n $newer ]]; then
		(
			flock 9
			bash "$LAB/standin/build.sh" "$LAB_BUILD" >/dev/null
			touch "$stamp"
		) 9>"$LAB_BUILD.lock"
	fi
}
mkdir -p "$LAB_BUILD"
lab_build

# The interpreter, its standard library and the shared libraries it loads, read once before
# the recording: on a disk restored lazily (a VM's, from a snapshot) the first read of a block
# is remote, and the trainer's last reads (at exit, after its last GPU call) once took 1.43 s
# for 8 KiB, an I/O stall the healthy memory-pressure twin never had by design.
lab_warm() {
	local exe lib
	exe=$(readlink -f "$PY")
	lib=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["stdlib"])')
	{
		echo "$exe"
		ldd "$exe" | awk '$3 ~ /^\// {print $3}'
		find "$lib" \( -name test -o -name tests -o -name idlelib -o -name site-packages -o -name dist-packages \) -prune \
			-o -type f \( -name '*.py' -o -name '*.pyc' -o -name '*.so' \) -print
	} | xargs -r -d '\n' -P 32 -n 16 cat >/dev/null 2>&1 || true
}
lab_warm

mkdir -p "$OUT"
rm -rf "$OUT/trace.duckdb" "$OUT/trace.duckdb.wal" "$OUT/trace.duckdb.tmp"
# This case's devices: processes of one case share a device by using the same name; cases
# running side by side never do.
export LAB_MACHINE="$CASE-$VARIANT-$$"
export LD_LIBRARY_PATH="$LAB_BUILD/driver${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PYTHONDONTWRITEBYTECODE=1

# Cleanup steps (run in reverse order at exit).
LAB_CLEANUP=()
lab_on_exit() { LAB_CLEANUP=("$1" "${LAB_CLEANUP[@]}"); }
lab_cleanup() {
	local c
	for c in "${LAB_CLEANUP[@]}"; do eval "$c" || true; done
	rm -f /dev/shm/lab-"$LAB_MACHINE"-gpu* 2>/dev/null || true
}
trap lab_cleanup EXIT

# lab_read_all DIR: reads every file under DIR, 32 at a time: a block the VM never read comes
# from a remote store, a request at a time when read one file after another: on a fresh
# machine slow-storage's run spent 148 s before its recording began, most of it reading its
# 1,024 files (a case's run had 150 s).
lab_read_all() { find "$1" -type f -print0 | xargs -0 -r -P 32 -n 16 cat >/dev/null; }

# lab_dataset NAME FILES SAMPLE_KIB [LEVEL]: the directory of a dataset written by the lab
# (once per build directory and shape; cases reading the same one share it), read once so that
# it is in the page cache: a disk restored lazily (a VM's, from a snapshot) read 17 MB/s on
# first touch here and 1 GB/s after, which made input-starvation's healthy twin starve on one
# 1.3-s read. Cases that want it on the disk evict it (lab_data.py evict).
lab_dataset() {
	local dir=$LAB_BUILD/data/$1-$2x$3k-z${4:-1}
	if [[ ! -e $dir/READY ]]; then
		(
			flock 9
			[[ -e $dir/READY ]] || "$PY" "$W/lab_data.py" make "$dir" --files "$2" --sample-bytes $(($3 * 1024)) \
				--level "${4:-1}"
		) 9>"$LAB_BUILD/data-$1.lock"
	fi
	lab_read_all "$dir"
	echo "$dir"
}

# lab_io_limit rbps|wbps BYTES_PER_S DIR: puts in LAB_IO_CGROUP a new cgroup (cgroup v2 io.max,
# or v1 blkio throttling) whose processes read (rbps) or write (wbps) the disk holding DIR at
# most BYTES_PER_S (for launch.py --cgroup), removed at exit. Not in $(...): the cleanup is this
# shell's.
lab_io_limit() {
	local kind=$1 rate=$2 src parent disk dev cg
	src=$(findmnt -no SOURCE --target "$3")
	disk=$src
	parent=$(lsblk -no PKNAME "$src" 2>/dev/null | head -1 | tr -d ' ')
	[[ -n $parent ]] && disk=/dev/$parent
	dev=$(lsblk -dno MAJ:MIN "$disk" 2>/dev/null | tr -d ' ')
	if [[ -z $dev ]]; then
		echo "$CASE: no block device under $3 ($src)" >&2
		return 1
	fi
	if grep -qw io /sys/fs/cgroup/cgroup.controllers 2>/dev/null; then
		grep -qw io /sys/fs/cgroup/cgroup.subtree_control ||
			echo +io >/sys/fs/cgroup/cgroup.subtree_control
		cg=/sys/fs/cgroup/lab-io-$$
		mkdir "$cg"
		lab_on_exit "rmdir '$cg'"
		echo "$dev $kind=$rate" >"$cg/io.max"
	elif [[ -d /sys/fs/cgroup/blkio ]]; then
		cg=/sys/fs/cgroup/blkio/lab-io-$$
		mkdir "$cg"
		lab_on_exit "rmdir '$cg'"
		local f=read
		[[ $kind == wbps ]] && f=write
		echo "$dev $rate" >"$cg/blkio.throttle.${f}_bps_device"
	else
		echo "$CASE: no block I/O cgroup controller (neither cgroup v2 io nor v1 blkio)" >&2
		return 1
	fi
	LAB_IO_CGROUP=$cg
}

# lab_volume DIR: mounts on DIR a new ext4 file system on a loop device (direct I/O) over a
# sparse file beside DIR, unmounted and removed at exit. Its requests are the writer's own
# (issued from the thread that calls fsync, as on a real disk), while the loop device's writes
# to the disk below are charged to that thread's cgroup: a write limit there (lab_io_limit on
# the disk holding DIR) makes a slow volume whose slowness the recording sees as the volume's.
lab_volume() {
	local dir=$1 img=$1.img dev
	mkdir -p "$dir"
	truncate -s 3G "$img"
	lab_on_exit "rm -f '$img'"
	if ! dev=$(losetup --direct-io=on -f --show "$img"); then
		echo "$CASE: no loop device for $img (losetup failed)" >&2
		return 1
	fi
	lab_on_exit "losetup -d '$dev'"
	mkfs.ext4 -q -E lazy_itable_init=1,lazy_journal_init=1 "$dev"
	mount "$dev" "$dir"
	lab_on_exit "umount '$dir'"
}

# A free TCP port on the loopback interface.
lab_free_port() { "$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# The training loops' step marker (one cudaMemsetAsync a step, torchlike.Model) keeps its probe
# in full mode whatever the overhead budget does to the other calls: the ground-truth checks
# count steps and measure the loop's window with it. Everything else is recorded as by default.
STEP_MARKER=(--probe-mode cudaMemsetAsync=full)

# lab_trace [TRACE OPTIONS] -- COMMAND...: records COMMAND with causeway. LAB_TRACE_OPTS adds
# options (measurements only: scripts/sampled-accuracy.sh).
lab_trace() {
	local rc=0 extra=()
	read -r -a extra <<<"${LAB_TRACE_OPTS:-}"
	"$CAUSEWAY" trace --db "$OUT/trace.duckdb" "${extra[@]}" "$@" >"$OUT/trace.json" 2>"$OUT/trace.log" || rc=$?
	if ((rc != 0)); then
		echo "$CASE/$VARIANT: causeway trace exited with $rc; the last lines of $OUT/trace.log:" >&2
		tail -20 "$OUT/trace.log" >&2
		return "$rc"
	fi
}
