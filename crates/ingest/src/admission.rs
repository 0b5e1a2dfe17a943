//! Admission control for received requests: every request reserves the memory its decoding
//! will take (a multiple of its body) from one budget shared by all connections, before it is
//! read; a request that does not fit now is refused as retryable (the sender comes back), so
//! concurrent requests cannot together pass the memory limit the operator set.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Bytes of memory one byte of a request body takes at most while it is decoded: the body,
/// the inflated body, the decoded protobuf message and the store rows made from it. Four
/// concurrent 48 MiB requests took 3.1 GB (about 16 per byte) before admission control.
pub const DECODE_FACTOR: u64 = 16;

/// A memory budget shared by every request in flight.
#[derive(Debug)]
pub struct MemoryBudget {
    limit: u64,
    used: AtomicU64,
}

/// Memory reserved by one request, given back when dropped.
#[derive(Debug)]
pub struct Reservation {
    budget: Arc<MemoryBudget>,
    bytes: u64,
}

impl MemoryBudget {
    /// A budget of `limit` bytes.
    pub fn new(limit: u64) -> Arc<MemoryBudget> {
        Arc::new(MemoryBudget {
            limit,
            used: AtomicU64::new(0),
        })
    }

    /// The budget in bytes.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// Bytes reserved now.
    pub fn used(&self) -> u64 {
        self.used.load(Ordering::Acquire)
    }

    /// The largest body one request may have so that it fits the budget alone.
    pub fn largest_body(&self) -> u64 {
        self.limit / DECODE_FACTOR
    }

    fn take(&self, bytes: u64) -> bool {
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(bytes).filter(|&n| n <= self.limit)
            })
            .is_ok()
    }

    /// Reserves `bytes` if they fit now.
    pub fn try_reserve(self: &Arc<Self>, bytes: u64) -> Option<Reservation> {
        self.take(bytes).then(|| Reservation {
            budget: self.clone(),
            bytes,
        })
    }
}

impl Reservation {
    /// Reserves `more` bytes in addition, if they fit now.
    pub fn grow(&mut self, more: u64) -> bool {
        let ok = self.budget.take(more);
        if ok {
            self.bytes += more;
        }
        ok
    }

    /// Bytes this reservation holds.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.budget.used.fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservations_share_one_budget() {
        let b = MemoryBudget::new(100);
        let mut a = b.try_reserve(60).unwrap();
        assert!(b.try_reserve(50).is_none());
        let c = b.try_reserve(40).unwrap();
        assert!(!a.grow(1));
        drop(c);
        assert!(a.grow(30));
        assert_eq!((a.bytes(), b.used()), (90, 90));
        drop(a);
        assert_eq!(b.used(), 0);
        assert!(b.try_reserve(101).is_none());
    }
}
