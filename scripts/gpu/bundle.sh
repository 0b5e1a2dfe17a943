#!/usr/bin/env bash
#! Packs a release causeway, libduckdb.so and libelf into DIR (default .gpu, git-ignored),
#! gzipped, for scripts/gpu/overhead.sh on a GPU machine that has no Rust toolchain.
#
#   bash scripts/gpu/bundle.sh [DIR]
set -euo pipefail
cd "$(dirname "$0")/../.."
dir=${1:-.gpu}
target=${CARGO_TARGET_DIR:-target}
export LD_LIBRARY_PATH=$PWD/.deps/duckdb${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
cargo build --release --locked -p causeway
rm -rf "$dir" && mkdir -p "$dir/lib"
strip -o "$dir/causeway" "$target/release/causeway"
gzip -9 "$dir/causeway"
for lib in libduckdb.so libelf.so.1; do
    path=$(ldd "$target/release/causeway" | awk -v l="$lib" '$1 == l { print $3 }')
    [ -n "$path" ] || { echo "causeway does not link $lib" >&2; exit 1; }
    gzip -9c "$path" >"$dir/lib/$lib.gz"
done
du -sh "$dir"
