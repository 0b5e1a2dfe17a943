//! One way every error of causeway says what the user can do about it: the [`Hint`] trait, the
//! [`Hinted`] error that carries its hint as data, and [`of`], which finds the hint of an error
//! chain for the one `hint:` line `main` prints.
//!
//! An error type implements [`Hint`] and registers itself with [`register!`] beside the impl;
//! [`of`] then finds it anywhere in an `anyhow` chain without a list of types to keep by hand
//! (Rust cannot downcast to a trait object, so each registered type brings its own downcast).
//! The registry is `inventory`'s: entries submitted where the types are defined, collected at
//! start-up.

use std::error::Error;

pub use inventory;

/// What to do about an error, in one line, or `None` where there is nothing to suggest.
pub trait Hint {
    fn hint(&self) -> Option<String>;
}

/// An error built where it happens, with what to do about it: the hint travels as data (the
/// CLI prints it on its own `hint:` line, tools return it in their `hint` field). As an
/// `anyhow` context it overrides the hint of the error it wraps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hinted {
    /// What failed.
    pub message: String,
    /// What to do about it.
    pub hint: String,
}

impl Hinted {
    /// An error with this message and hint.
    pub fn new(message: impl Into<String>, hint: impl Into<String>) -> Hinted {
        Hinted {
            message: message.into(),
            hint: hint.into(),
        }
    }
}

impl std::fmt::Display for Hinted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl Error for Hinted {}

impl Hint for Hinted {
    fn hint(&self) -> Option<String> {
        Some(self.hint.clone())
    }
}

register!(Hinted);

/// One registered error type's downcasts: from an error in a chain, and from the outermost
/// `anyhow` error (which alone reaches a context's own type).
#[derive(Debug)]
pub struct Downcast {
    pub error: fn(&(dyn Error + 'static)) -> Option<String>,
    pub anyhow: fn(&anyhow::Error) -> Option<String>,
}

inventory::collect!(Downcast);

/// Registers an error type that implements [`Hint`], so that [`of`] finds its hint.
#[macro_export]
macro_rules! register {
    ($t:ty) => {
        $crate::inventory::submit! {
            $crate::Downcast {
                error: |e| e.downcast_ref::<$t>().and_then($crate::Hint::hint),
                anyhow: |e| e.downcast_ref::<$t>().and_then($crate::Hint::hint),
            }
        }
    };
}

/// The hint of `e`: a [`Hinted`] context's first (it was added to say more than the error
/// under it), then the first error of the chain, outermost first, whose type gives one.
pub fn of(e: &anyhow::Error) -> Option<String> {
    if let Some(h) = e.downcast_ref::<Hinted>() {
        return Some(h.hint.clone());
    }
    e.chain()
        .find_map(|c| {
            inventory::iter::<Downcast>
                .into_iter()
                .find_map(|d| (d.error)(c))
        })
        .or_else(|| {
            inventory::iter::<Downcast>
                .into_iter()
                .find_map(|d| (d.anyhow)(e))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Disk;
    impl std::fmt::Display for Disk {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("the disk is full")
        }
    }
    impl Error for Disk {}
    impl Hint for Disk {
        fn hint(&self) -> Option<String> {
            Some("free some space".into())
        }
    }
    register!(Disk);

    #[derive(Debug)]
    struct Quiet;
    impl std::fmt::Display for Quiet {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("nothing to say")
        }
    }
    impl Error for Quiet {}

    #[test]
    fn a_registered_error_is_found_anywhere_in_the_chain() {
        let e = anyhow::Error::new(Disk);
        assert_eq!(of(&e).as_deref(), Some("free some space"));
        let e = anyhow::Error::new(Disk).context("writing the trace");
        assert_eq!(of(&e).as_deref(), Some("free some space"));
        let e = anyhow::Error::new(Disk)
            .context("writing the trace")
            .context("recording");
        assert_eq!(of(&e).as_deref(), Some("free some space"));
    }

    #[test]
    fn a_hinted_context_says_more_than_the_error_under_it() {
        let e =
            anyhow::Error::new(Disk).context(Hinted::new("cannot record", "use --db elsewhere"));
        assert_eq!(of(&e).as_deref(), Some("use --db elsewhere"));
        let e = anyhow::anyhow!(Hinted::new("bad window", "try --since 5m"));
        assert_eq!(of(&e).as_deref(), Some("try --since 5m"));
    }

    #[test]
    fn an_error_without_a_hint_has_none() {
        assert_eq!(of(&anyhow::Error::new(Quiet)), None);
        assert_eq!(of(&anyhow::anyhow!("plain")), None);
    }
}
