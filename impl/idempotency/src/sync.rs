//! The sync primitives the layer and the in-memory store use, in one place so the `shuttle`
//! feature can swap every one of them for shuttle's scheduler-controlled versions.
//!
//! Invariant: no other module of this crate names `std::sync` or `tokio::spawn` directly; a
//! primitive used behind shuttle's back would hide interleavings from the schedule explorer.

#[cfg(not(feature = "shuttle"))]
pub use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
#[cfg(not(feature = "shuttle"))]
pub use std::sync::{Arc, Mutex, MutexGuard};

#[cfg(feature = "shuttle")]
pub use shuttle::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
#[cfg(feature = "shuttle")]
pub use shuttle::sync::{Arc, Mutex, MutexGuard};

/// Runs a detached background task (the drop guard's finalize).
///
/// Returns false when there is no executor to run it on (a tokio-less caller); the caller
/// reports that as an event instead of panicking inside `Drop`.
pub fn spawn_detached<F>(future: F) -> bool
where
    F: std::future::Future<Output = ()> + Send + 'static,
{
    #[cfg(feature = "shuttle")]
    {
        shuttle::future::spawn(future);
        true
    }
    #[cfg(not(feature = "shuttle"))]
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

/// Waits `duration` (a finalize backoff). Under shuttle, which has no clock, it yields instead,
/// so a schedule still interleaves other tasks at that point.
pub async fn sleep(duration: std::time::Duration) {
    #[cfg(feature = "shuttle")]
    {
        let _ = duration;
        shuttle::future::yield_now().await;
    }
    #[cfg(not(feature = "shuttle"))]
    tokio::time::sleep(duration).await;
}

/// Waits one heartbeat period. Under shuttle it never returns: without a clock a heartbeat
/// would renew in a busy loop, and lease expiry is not what the schedules explore.
pub async fn sleep_between_renewals(interval: std::time::Duration) {
    #[cfg(feature = "shuttle")]
    {
        let _ = interval;
        std::future::pending::<()>().await;
    }
    #[cfg(not(feature = "shuttle"))]
    tokio::time::sleep(interval).await;
}

/// Runs `future` for at most `limit`; `None` when the limit passed first (the future is
/// dropped). Under shuttle the limit is not enforced.
pub async fn within<F: std::future::Future>(
    limit: std::time::Duration,
    future: F,
) -> Option<F::Output> {
    #[cfg(feature = "shuttle")]
    {
        let _ = limit;
        Some(future.await)
    }
    #[cfg(not(feature = "shuttle"))]
    tokio::time::timeout(limit, future).await.ok()
}

/// Locks a mutex, treating poison as recoverable: the data guarded here (rows of the memory
/// store) stays consistent across a panic because every update is a single assignment.
pub fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    match mutex.lock() {
        Ok(guard) => guard,
        Err(poisoned) => poisoned.into_inner(),
    }
}
