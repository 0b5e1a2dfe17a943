//! Gives this crate's test and bench binaries an rpath to the prebuilt DuckDB library
//! (scripts/deps.sh), so `cargo test` and `cargo bench` run without LD_LIBRARY_PATH.

fn main() {
    println!("cargo:rerun-if-env-changed=DUCKDB_LIB_DIR");
    if let Ok(dir) = std::env::var("DUCKDB_LIB_DIR")
        && let Ok(abs) = std::fs::canonicalize(&dir)
    {
        println!("cargo:rustc-link-arg-tests=-Wl,-rpath,{}", abs.display());
        println!("cargo:rustc-link-arg-benches=-Wl,-rpath,{}", abs.display());
    }
}
