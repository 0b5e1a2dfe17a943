//! Gives the causeway binary an rpath to the prebuilt DuckDB library it links (see
//! scripts/deps.sh): next to the binary, ../lib beside it (installed layout), and the
//! build-time location, so `target/release/causeway` runs without LD_LIBRARY_PATH.

fn main() {
    println!("cargo:rerun-if-env-changed=DUCKDB_LIB_DIR");
    println!("cargo:rustc-link-arg-bins=-Wl,-rpath,$ORIGIN:$ORIGIN/../lib/causeway");
    if let Ok(dir) = std::env::var("DUCKDB_LIB_DIR")
        && let Ok(abs) = std::fs::canonicalize(&dir)
    {
        println!("cargo:rustc-link-arg-bins=-Wl,-rpath,{}", abs.display());
        println!("cargo:rustc-link-arg-tests=-Wl,-rpath,{}", abs.display());
    }
}
