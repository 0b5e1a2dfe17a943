#!/usr/bin/env bash
# The whole test suite, exactly what CI runs (.ci/run): installs what is missing, then
# formatting, lints, every crate's tests (including the eBPF tests, which need root and a
# kernel with BTF), and the MCP conformance checks with real clients.
set -euo pipefail
cd "$(dirname "$0")/.."
# The real traces the suite reads (never committed) sit beside the clone; without them dozens of
# tests fail after a long build, so say so first. CAUSEWAY_SHARED_DIR points elsewhere.
shared="${CAUSEWAY_SHARED_DIR:-$PWD/../shared/investigations}"
if [ ! -d "$shared" ]; then
  echo "causeway test: $shared is missing (the real traces the tests read; hint: clone beside shared/, or set CAUSEWAY_SHARED_DIR)" >&2
  exit 2
fi
bash scripts/deps.sh
export PATH="$HOME/.cargo/bin:$PATH"
# Builds are reused across runs from a cache outside the clone; a cold run also passes.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/causeway/target}"
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"
export CI="${CI:-true}"
# Test binaries also carry an rpath (build.rs); this covers any that do not.
export LD_LIBRARY_PATH="$PWD/.deps/duckdb${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"   # insta: never write snapshots during the suite

step() { printf '\n== %s\n' "$*" >&2; }

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy (all targets, warnings are errors)"
cargo clippy --workspace --all-targets --locked -- -D warnings

step "sqlguard fuzz target builds (run it with: cd crates/sqlguard/fuzz && cargo +nightly fuzz run guard)"
cargo check --manifest-path crates/sqlguard/fuzz/Cargo.toml

step "cargo test (workspace; the workload lab runs alone next)"
cargo test --workspace --locked --no-fail-fast -- --skip lab::

# The lab records real programs under real, injected contention: alone, so that other tests'
# load does not become part of its cases.
step "workload lab (investigations/lab, recorded with the real collector)"
cargo test -p causeway --test it --locked lab:: -- --nocapture

step "HTA side by side (Holistic Trace Analysis 0.5.0 in scripts/hta/.venv; docs/hta.md)"
bash scripts/hta/run.sh

if [ -x conformance/run.sh ]; then
  step "MCP conformance (official suite + Python SDK client)"
  bash conformance/run.sh
fi
