//! The one place the store takes its synchronisation primitives from, so a loom or shuttle build
//! can swap them without touching the backends. Invariant: no backend names `std::sync` directly.

pub use std::sync::{Arc, Mutex, MutexGuard};

/// Locks `mutex`, treating poisoning as a bug: a panic while holding a store lock means a
/// half-applied append, and carrying on would hide it.
pub fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .expect("a store lock was poisoned: a panic interrupted an append")
}
