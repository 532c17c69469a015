//! The sync primitives the layer and the in-memory store use, in one place so the `shuttle`
//! feature can swap every one of them for shuttle's scheduler-controlled versions.
//!
//! Invariant: no other module of this crate names `std::sync` or `tokio::spawn` directly; a
//! primitive used behind shuttle's back would hide interleavings from the schedule explorer.

#[cfg(not(feature = "shuttle"))]
pub use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};
#[cfg(not(feature = "shuttle"))]
pub use std::sync::{Arc, Mutex, MutexGuard};

#[cfg(feature = "shuttle")]
pub use shuttle::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};
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

/// Locks a mutex, treating poison as recoverable: the data guarded here (rows of the memory
/// store) stays consistent across a panic because every update is a single assignment.
pub fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    match mutex.lock() {
        Ok(guard) => guard,
        Err(poisoned) => poisoned.into_inner(),
    }
}
