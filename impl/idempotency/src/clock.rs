//! Time as the layer sees it: milliseconds since the Unix epoch, from a clock the application
//! (or a test) supplies. Leases and row expiry are decided by comparing stored timestamps with
//! this clock at read time, so an expired row never blocks a new request even before cleanup.

use crate::sync::{Arc, AtomicI64, Ordering};

/// A source of "now" in milliseconds since the Unix epoch.
pub trait Clock: Send + Sync + 'static {
    fn now_millis(&self) -> i64;
}

/// The wall clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_millis(&self) -> i64 {
        let since = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        i64::try_from(since.as_millis()).unwrap_or(i64::MAX)
    }
}

/// A clock that moves only when told to: tests use it to cross a lease or a row's expiry
/// without sleeping.
#[derive(Debug, Clone)]
pub struct ManualClock {
    now: Arc<AtomicI64>,
}

impl ManualClock {
    pub fn new(start_millis: i64) -> Self {
        ManualClock {
            now: Arc::new(AtomicI64::new(start_millis)),
        }
    }

    pub fn advance_secs(&self, seconds: i64) {
        self.now.fetch_add(seconds * 1000, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_millis(&self) -> i64 {
        self.now.load(Ordering::SeqCst)
    }
}
