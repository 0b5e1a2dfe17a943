//! Fuzz target for `causeway_sqlguard::guard`: it never panics, and whatever it accepts passes
//! the independent re-check (one read-only query over allowed relations, no blocked function,
//! table function, URL, recursion or nested statement) and re-guards to the same value.

#![no_main]

use causeway_sqlguard::guard;
use libfuzzer_sys::fuzz_target;

#[path = "../../tests/guard/support.rs"]
#[allow(dead_code)]
mod support;

fuzz_target!(|data: &[u8]| {
    let Ok(sql) = std::str::from_utf8(data) else {
        return;
    };
    let policy = support::store_policy();
    let Ok(guarded) = guard(sql, &policy, None) else {
        return;
    };
    if let Err(problem) = support::check_safe(guarded.as_str(), &policy) {
        panic!("accepted unsafe SQL: {problem}\ninput: {sql:?}\noutput: {guarded}");
    }
    let again = guard(guarded.as_str(), &policy, Some(guarded.row_limit()));
    assert_eq!(again.as_ref(), Ok(&guarded), "not idempotent for {sql:?}");
});
