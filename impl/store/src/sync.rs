//! The one place the store takes its synchronisation primitives from, so a loom or shuttle build
//! can swap them without touching the backends. Invariant: no backend names `std::sync` directly.
//!
//! In a loom run (cfg `oncecheck_loom`: the `loom` feature and `ONCECHECK_SYNC=loom`, see
//! build.rs; tests/loom.rs) `Mutex` is loom's lock around a loom cell, so loom sees every access
//! to the guarded data: a lock skipped or split shows up as a data race.

pub use std::sync::Arc;
#[cfg(not(oncecheck_loom))]
pub use std::sync::{Mutex, MutexGuard};

/// Locks `mutex`, treating poisoning as a bug: a panic while holding a store lock means a
/// half-applied append, and carrying on would hide it.
#[cfg(not(oncecheck_loom))]
pub fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .expect("a store lock was poisoned: a panic interrupted an append")
}

#[cfg(oncecheck_loom)]
pub use checked::{lock, Mutex, MutexGuard};

#[cfg(oncecheck_loom)]
mod checked {
    use std::ops::{Deref, DerefMut};

    /// loom's mutex, with the data in a loom cell whose every access loom checks.
    pub struct Mutex<T> {
        lock: loom::sync::Mutex<()>,
        data: loom::cell::UnsafeCell<T>,
    }

    // SAFETY: the data is reached only through a guard, which holds `lock` (except under the
    // seeded bug, whose racing accesses loom then reports).
    unsafe impl<T: Send> Sync for Mutex<T> {}

    impl<T> Mutex<T> {
        pub fn new(value: T) -> Self {
            Mutex {
                lock: loom::sync::Mutex::new(()),
                data: loom::cell::UnsafeCell::new(value),
            }
        }
    }

    impl<T: Default> Default for Mutex<T> {
        fn default() -> Self {
            Mutex::new(T::default())
        }
    }

    impl<T> std::fmt::Debug for Mutex<T> {
        fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            formatter.write_str("Mutex { .. }")
        }
    }

    pub struct MutexGuard<'a, T> {
        _held: Option<loom::sync::MutexGuard<'a, ()>>,
        data: loom::cell::MutPtr<T>,
    }

    impl<T> Deref for MutexGuard<'_, T> {
        type Target = T;
        fn deref(&self) -> &T {
            // SAFETY: the guard is the only live access to the data (loom checks it).
            unsafe { self.data.deref() }
        }
    }

    impl<T> DerefMut for MutexGuard<'_, T> {
        fn deref_mut(&mut self) -> &mut T {
            // SAFETY: as in `deref`.
            unsafe { self.data.deref() }
        }
    }

    /// Locks `mutex`. The seeded bug `unlocked-store` (ONCECHECK_LOOM_MUTATION) skips the
    /// lock: tests/loom.rs must then fail.
    pub fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
        let skip =
            std::env::var("ONCECHECK_LOOM_MUTATION").is_ok_and(|name| name == "unlocked-store");
        let held = (!skip).then(|| {
            mutex
                .lock
                .lock()
                .expect("a store lock was poisoned: a panic interrupted an append")
        });
        MutexGuard {
            _held: held,
            data: mutex.data.get_mut(),
        }
    }
}
