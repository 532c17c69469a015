//! oncecheck-idempotency: an `Idempotency-Key` tower layer with a database-backed response cache.
//!
//! The contract (specs/idempotency-middleware.md, requirements M1-M9): a covered request with a
//! key runs the handler at most once while its row lives; a success is cached with its complete
//! body or a too-large sentinel and is never poisoned; a key reused with another request gets
//! 422, a key in flight 409; the first client always receives exactly what the handler sent;
//! non-2xx responses pass through untouched; a stale finalizer never overwrites a newer claim;
//! while a handler runs, a heartbeat renews its claim's lease so a duplicate cannot take it over.
//!
//! Mount it with `route_layer` (after routing) and after authentication, as below: then an
//! unknown route is 404 rather than 400 `missing-key`, and the principal scopes the cache.
//!
//! ```no_run
//! # async fn demo(pool: sqlx::SqlitePool) {
//! use oncecheck_idempotency::{IdempotencyLayer, store::SqliteStore};
//! let store = SqliteStore::new(pool);
//! store.migrate().await.unwrap();
//! let app: axum::Router = axum::Router::new()
//!     .route("/transfers", axum::routing::post(|| async { "done" }))
//!     .route_layer(IdempotencyLayer::builder(store).body_bytes_max(1 << 20).build());
//! # }
//! ```

pub mod capture;
pub mod clock;
pub mod effect;
pub mod fingerprint;
pub mod key;
pub mod layer;
pub mod problem;
pub mod reconcile;
pub mod store;
pub mod sync;

pub use capture::{capture_up_to_cap, BoxBody, BoxError, Capture, LiveBody};
pub use clock::{Clock, ManualClock, SystemClock};
pub use effect::{EffectError, EffectScope, EffectTransaction};
#[cfg(feature = "test-seams")]
pub use layer::Mutation;
pub use layer::{
    Behaviour, Config, IdempotencyLayer, IdempotencyLayerBuilder, IdempotencyService, Principal,
    StatsSnapshot, BODY_BYTES_MAX_DEFAULT, REPLAYED_HEADER,
};
pub use reconcile::{ReconcileHook, ReconcileReport};
pub use store::{CacheKey, CacheStore, MemoryStore, PostgresStore, SqliteStore};
