//! Atomic effects: the handler's effects and the cached response committed in one transaction of
//! the cache's database (specs/idempotency-middleware.md, "Atomic effects").
//!
//! The layer puts an [`EffectScope`] into every claimed request's extensions. A handler whose
//! effects live in the cache's database asks it for the transaction ([`EffectScope::transaction`],
//! begun on first use), runs its statements in it and does not commit: the layer writes the
//! success row in the same transaction and commits both, or rolls both back.
//!
//! Invariants: the transaction is lent to the handler, never shared (one [`EffectTransaction`] at
//! a time); once the handler's response is back the layer takes it ([`EffectScope::take`]) and
//! no later call of the handler can reach it; a transaction nobody commits is rolled back (its
//! drop does it, so a cancelled request or a dead process commits nothing).

use crate::store::StoreError;
use crate::sync::{self, Arc, Mutex};
use std::future::Future;
use std::ops::{Deref, DerefMut};
use std::pin::Pin;

type Begin<E> =
    Box<dyn Fn() -> Pin<Box<dyn Future<Output = Result<E, StoreError>> + Send>> + Send + Sync>;

enum Slot<E> {
    /// The handler has not asked for the transaction.
    Unused,
    /// Begun and back in the scope.
    Idle(E),
    /// Lent to the handler.
    Lent,
    /// Taken by the layer (or its begin failed): the handler can no longer have it.
    Closed,
}

struct Shared<E> {
    slot: Mutex<Slot<E>>,
    begin: Begin<E>,
}

/// The request's transaction for effects, as a request extension (`Extension<EffectScope<E>>`
/// in axum, `E` the store's [`crate::CacheStore::Effect`]: [`crate::store::PostgresEffect`] or
/// [`crate::store::SqliteEffect`]).
pub struct EffectScope<E> {
    shared: Arc<Shared<E>>,
}

impl<E> Clone for EffectScope<E> {
    fn clone(&self) -> Self {
        EffectScope {
            shared: self.shared.clone(),
        }
    }
}

/// Why the handler cannot have the transaction.
#[derive(Debug, thiserror::Error)]
pub enum EffectError {
    #[error("the effect transaction is already lent out")]
    InUse,
    #[error("the request's effects are closed: its response was already handed to the layer")]
    Closed,
    #[error("the effect transaction could not begin: {0}")]
    Begin(#[from] StoreError),
}

/// What the layer found after the handler answered.
pub enum Taken<E> {
    /// The handler never asked: finalize on its own.
    Unused,
    /// The handler's transaction: finalize in it.
    Transaction(E),
    /// The handler still holds it (it kept the [`EffectTransaction`] past its response).
    StillLent,
}

impl<E: Send + 'static> EffectScope<E> {
    pub(crate) fn new(begin: Begin<E>) -> Self {
        EffectScope {
            shared: Arc::new(Shared {
                slot: Mutex::new(Slot::Unused),
                begin,
            }),
        }
    }

    /// The request's transaction, begun on first use. Run the effects in it and do not commit:
    /// the layer commits them with the cached response once the handler's 2xx is captured, and
    /// rolls them back for a non-2xx, an error, or a claim that was taken over.
    pub async fn transaction(&self) -> Result<EffectTransaction<E>, EffectError> {
        let idle = {
            let mut slot = sync::lock(&self.shared.slot);
            match std::mem::replace(&mut *slot, Slot::Lent) {
                Slot::Idle(transaction) => Some(transaction),
                Slot::Unused => None,
                Slot::Lent => return Err(EffectError::InUse),
                Slot::Closed => {
                    *slot = Slot::Closed;
                    return Err(EffectError::Closed);
                }
            }
        };
        let transaction = match idle {
            Some(transaction) => transaction,
            None => match (self.shared.begin)().await {
                Ok(transaction) => transaction,
                Err(error) => {
                    *sync::lock(&self.shared.slot) = Slot::Unused;
                    return Err(EffectError::Begin(error));
                }
            },
        };
        Ok(EffectTransaction {
            transaction: Some(transaction),
            shared: self.shared.clone(),
        })
    }

    /// The layer's side: closes the scope and takes what the handler left in it.
    pub(crate) fn take(&self) -> Taken<E> {
        let mut slot = sync::lock(&self.shared.slot);
        match std::mem::replace(&mut *slot, Slot::Closed) {
            Slot::Unused | Slot::Closed => Taken::Unused,
            Slot::Idle(transaction) => Taken::Transaction(transaction),
            Slot::Lent => Taken::StillLent,
        }
    }
}

/// The transaction, lent to the handler until this is dropped. Derefs to the store's
/// transaction (`&mut **transaction` is the connection to run statements on).
pub struct EffectTransaction<E> {
    transaction: Option<E>,
    shared: Arc<Shared<E>>,
}

impl<E> Deref for EffectTransaction<E> {
    type Target = E;

    fn deref(&self) -> &E {
        self.transaction
            .as_ref()
            .expect("present until the guard drops")
    }
}

impl<E> DerefMut for EffectTransaction<E> {
    fn deref_mut(&mut self) -> &mut E {
        self.transaction
            .as_mut()
            .expect("present until the guard drops")
    }
}

impl<E> Drop for EffectTransaction<E> {
    fn drop(&mut self) {
        let Some(transaction) = self.transaction.take() else {
            return;
        };
        let mut slot = sync::lock(&self.shared.slot);
        // Returned to the scope, unless the layer closed it meanwhile: then it drops here,
        // uncommitted, and rolls back.
        if matches!(*slot, Slot::Lent) {
            *slot = Slot::Idle(transaction);
        }
    }
}
