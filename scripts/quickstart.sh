#!/usr/bin/env bash
# Sets everything up on a fresh Debian/Ubuntu machine (system packages, Rust, the prebuilt
# DuckDB library), builds causeway in release mode, installs it into ~/.local/bin, and runs the
# main job: an investigation of a bundled trace, printed to the terminal.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
export PATH="$HOME/.cargo/bin:$PATH"
cargo build --release --locked -p causeway >&2
target="${CARGO_TARGET_DIR:-target}"
bin="$HOME/.local/bin"
lib="$HOME/.local/lib/causeway"
mkdir -p "$bin" "$lib"
cp .deps/duckdb/libduckdb.so "$lib/libduckdb.so.tmp" && mv "$lib/libduckdb.so.tmp" "$lib/libduckdb.so"
cp "$target/release/causeway" "$bin/causeway.tmp" && mv "$bin/causeway.tmp" "$bin/causeway"
echo "causeway installed: $bin/causeway (DuckDB library in $lib)" >&2
if "$bin/causeway" demo --help >/dev/null 2>&1; then
  exec "$bin/causeway" demo incident
fi
trace="../shared/investigations/vllm-37343-logprobs-amplification.db"
out="${TMPDIR:-/tmp}/causeway-quickstart.duckdb"
"$bin/causeway" import "$trace" -o "$out" --force >&2
exec "$bin/causeway" stats --db "$out"
