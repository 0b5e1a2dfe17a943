//! The engine's one way of turning a DuckDB error into the store's error: it names the file and
//! what was being read, so a failed analysis says where it failed.

use causeway_store::duckdb;
use causeway_store::{Reader, StoreError};

/// Maps a DuckDB error met while doing `action` on `r`'s file.
pub(crate) fn duck<'r>(
    r: &'r Reader,
    action: &'static str,
) -> impl Fn(duckdb::Error) -> StoreError + 'r {
    move |source| StoreError::Duck {
        path: r.path().to_path_buf(),
        action,
        source,
    }
}
