//! Time as the layer sees it: milliseconds since the Unix epoch, from a clock the application
//! (or a test) supplies. Leases and row expiry are decided by comparing stored timestamps with
//! this clock at read time, so an expired row never blocks a new request even before cleanup.
//! The heartbeat waits on the same clock ([`Clock::sleep_until`]), so a lease and its renewal
//! are measured in one time: a test or a replay that moves a [`ManualClock`] moves both.

use crate::sync::{self, Arc, AtomicI64, Ordering};
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

/// A source of "now" in milliseconds since the Unix epoch.
pub trait Clock: Send + Sync + 'static {
    fn now_millis(&self) -> i64;

    /// Waits until this clock reads at least `deadline_millis` (the heartbeat's timer). The
    /// default sleeps the difference in wall time, which is right for a clock that follows it.
    fn sleep_until(&self, deadline_millis: i64) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        let wait = u64::try_from(deadline_millis.saturating_sub(self.now_millis())).unwrap_or(0);
        Box::pin(sync::sleep_between_renewals(Duration::from_millis(wait)))
    }
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
/// without sleeping, and a heartbeat waiting on it beats exactly when it is moved past its
/// deadline.
#[derive(Debug, Clone)]
pub struct ManualClock {
    now: Arc<AtomicI64>,
    moved: Arc<sync::Signal>,
}

impl ManualClock {
    pub fn new(start_millis: i64) -> Self {
        ManualClock {
            now: Arc::new(AtomicI64::new(start_millis)),
            moved: Arc::new(sync::Signal::default()),
        }
    }

    pub fn advance_secs(&self, seconds: i64) {
        self.now.fetch_add(seconds * 1000, Ordering::SeqCst);
        self.moved.notify();
    }
}

impl Clock for ManualClock {
    fn now_millis(&self) -> i64 {
        self.now.load(Ordering::SeqCst)
    }

    fn sleep_until(&self, deadline_millis: i64) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        Box::pin(
            self.moved
                .wait_until(move || self.now_millis() >= deadline_millis),
        )
    }
}

#[cfg(all(test, not(oncecheck_shuttle), not(oncecheck_loom)))]
mod tests {
    use super::*;

    // Rows outlive the process: a clock that read anything but the epoch time would stamp rows
    // that a restarted process reading the true time finds long expired (or never expiring).
    #[test]
    fn the_system_clock_reads_milliseconds_since_the_unix_epoch() {
        let epoch_millis = |time: std::time::SystemTime| {
            let since = time.duration_since(std::time::UNIX_EPOCH).unwrap();
            i64::try_from(since.as_millis()).unwrap()
        };
        let before = epoch_millis(std::time::SystemTime::now());
        let read = SystemClock.now_millis();
        let after = epoch_millis(std::time::SystemTime::now());
        assert!(before <= read, "{before} > {read}");
        assert!(read <= after, "{read} > {after}");
    }

    // A heartbeat waiting on a manual clock beats when the clock is moved past its deadline,
    // not before: the replays' ticks rely on it.
    #[tokio::test]
    async fn a_manual_clock_wakes_a_sleeper_only_past_its_deadline() {
        let clock = ManualClock::new(1_000);
        let sleeper = {
            let clock = clock.clone();
            tokio::spawn(async move { clock.sleep_until(3_000).await })
        };
        clock.advance_secs(1);
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(
            !sleeper.is_finished(),
            "woke at 2000, before its deadline 3000"
        );
        clock.advance_secs(1);
        tokio::time::timeout(Duration::from_secs(5), sleeper)
            .await
            .expect("a sleeper past its deadline wakes")
            .unwrap();
    }
}
