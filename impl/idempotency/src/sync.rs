//! The sync primitives the layer and the in-memory store use, in one place so a shuttle run can
//! swap every one of them for shuttle's scheduler-controlled versions, and a loom run for loom's
//! (cfg `oncecheck_shuttle` / `oncecheck_loom`: the feature and `ONCECHECK_SYNC=shuttle|loom`,
//! see build.rs; `cargo test --all-features` alone keeps std's).
//!
//! Invariant: no other module of this crate names `std::sync`, `tokio::spawn` or `tokio::time`
//! directly; a primitive used behind the explorer's back would hide interleavings from it.
//! Neither explorer has a clock: under them a backoff only yields, a finalize attempt has no
//! time limit, and the heartbeat never beats (lease expiry is not what they explore).

#[cfg(not(any(oncecheck_shuttle, oncecheck_loom)))]
pub use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
#[cfg(not(any(oncecheck_shuttle, oncecheck_loom)))]
pub use std::sync::{Arc, Mutex, MutexGuard};

#[cfg(oncecheck_shuttle)]
pub use shuttle::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
#[cfg(oncecheck_shuttle)]
pub use shuttle::sync::{Arc, Mutex, MutexGuard};

#[cfg(oncecheck_loom)]
pub use loom::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
#[cfg(oncecheck_loom)]
pub use loom::sync::{Arc, Mutex, MutexGuard};

/// Runs a detached background task (the drop guard's finalize).
///
/// Returns false when there is no executor to run it on (a tokio-less caller); the caller
/// reports that as an event instead of panicking inside `Drop`.
pub fn spawn_detached<F>(future: F) -> bool
where
    F: std::future::Future<Output = ()> + Send + 'static,
{
    #[cfg(oncecheck_shuttle)]
    {
        shuttle::future::spawn(future);
        true
    }
    #[cfg(oncecheck_loom)]
    {
        // A stack the layer's futures fit in (loom's default is a few pages).
        let thread = loom::thread::Builder::new().stack_size(4 << 20);
        thread.spawn(move || loom::future::block_on(future)).is_ok()
    }
    #[cfg(not(any(oncecheck_shuttle, oncecheck_loom)))]
    {
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => {
                handle.spawn(future);
                true
            }
            Err(_) => false,
        }
    }
}

/// Waits `duration` (a finalize backoff). Under shuttle it yields instead, so a schedule still
/// interleaves other tasks at that point; under loom it returns at once.
pub async fn sleep(duration: std::time::Duration) {
    #[cfg(oncecheck_shuttle)]
    {
        let _ = duration;
        shuttle::future::yield_now().await;
    }
    #[cfg(oncecheck_loom)]
    let _ = duration;
    #[cfg(not(any(oncecheck_shuttle, oncecheck_loom)))]
    tokio::time::sleep(duration).await;
}

/// Waits one heartbeat period. Under shuttle and loom it never returns: without a clock a
/// heartbeat would renew in a busy loop.
pub async fn sleep_between_renewals(interval: std::time::Duration) {
    #[cfg(any(oncecheck_shuttle, oncecheck_loom))]
    {
        let _ = interval;
        std::future::pending::<()>().await;
    }
    #[cfg(not(any(oncecheck_shuttle, oncecheck_loom)))]
    tokio::time::sleep(interval).await;
}

/// A wake-up for whoever waits on a condition another task changes (the manual clock's moves).
/// Under shuttle and loom nothing waits on it: there the heartbeat never beats (see
/// [`sleep_between_renewals`]).
#[derive(Debug, Default)]
pub struct Signal {
    #[cfg(not(any(oncecheck_shuttle, oncecheck_loom)))]
    changed: tokio::sync::Notify,
}

impl Signal {
    /// Wakes every current waiter.
    pub fn notify(&self) {
        #[cfg(not(any(oncecheck_shuttle, oncecheck_loom)))]
        self.changed.notify_waiters();
    }

    /// Returns once `ready()` holds, checking it after every notification. Under shuttle and
    /// loom it never returns, like the heartbeat's sleep.
    pub async fn wait_until(&self, ready: impl Fn() -> bool) {
        #[cfg(any(oncecheck_shuttle, oncecheck_loom))]
        {
            let _ = ready;
            std::future::pending::<()>().await;
        }
        #[cfg(not(any(oncecheck_shuttle, oncecheck_loom)))]
        loop {
            let notified = self.changed.notified();
            let mut notified = std::pin::pin!(notified);
            // Registered before the check, so a move between the check and the wait wakes it.
            notified.as_mut().enable();
            if ready() {
                return;
            }
            notified.await;
        }
    }
}

/// Runs `future` for at most `limit`; `None` when the limit passed first (the future is
/// dropped). Under shuttle and loom the limit is not enforced.
pub async fn within<F: std::future::Future>(
    limit: std::time::Duration,
    future: F,
) -> Option<F::Output> {
    #[cfg(any(oncecheck_shuttle, oncecheck_loom))]
    {
        let _ = limit;
        Some(future.await)
    }
    #[cfg(not(any(oncecheck_shuttle, oncecheck_loom)))]
    tokio::time::timeout(limit, future).await.ok()
}

/// Whether the loom test run switched on the seeded bug `name` (ONCECHECK_LOOM_MUTATION). Only
/// the loom build has mutations; each loom test must fail with its mutation on
/// (scripts/red-runs asserts it).
#[cfg(oncecheck_loom)]
pub fn loom_mutation(name: &str) -> bool {
    std::env::var("ONCECHECK_LOOM_MUTATION").is_ok_and(|mutation| mutation == name)
}

/// Locks a mutex, treating poison as recoverable: the data guarded here (rows of the memory
/// store) stays consistent across a panic because every update is a single assignment.
pub fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    match mutex.lock() {
        Ok(guard) => guard,
        Err(poisoned) => poisoned.into_inner(),
    }
}
