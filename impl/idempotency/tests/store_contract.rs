//! The cache-store trait's contract, run on every store the layer ships with: the in-memory
//! store, SQLite and PostgreSQL. The layer's scenarios (tests/middleware.rs) reach these
//! answers only through HTTP and a single request's timing; here each conditional statement is
//! driven at the exact times and generations that decide it, so a store whose condition is off
//! by one clause (a stale generation resolved, a live lease taken for a lapsed one) fails by
//! name.
//!
//! Every scenario is one generic function; `on_every_store!` runs it on the three stores.

mod common;

use common::{postgres_store, sqlite_store, TestStore, START_MILLIS};
use oncecheck_idempotency::fingerprint::Fingerprint;
use oncecheck_idempotency::store::{
    CacheKey, CacheStore, CachedBody, ClaimOutcome, ClaimRequest, Fencing, FinalizeOutcome,
    RenewOutcome, StoredBody, StoredResponse, SuccessRecord, UnknownOutcome,
};

const LEASE_MILLIS: i64 = 30_000;
const ROW_TTL_MILLIS: i64 = 3_600_000;
const T0: i64 = START_MILLIS;
/// After the lease of a claim taken at `T0`, before its row's expiry.
const LAPSED: i64 = T0 + LEASE_MILLIS + 1;
/// The sentinel status a resolution records (the layer's own is 500).
const RESOLVED_STATUS: u16 = 500;

fn key(name: &str) -> CacheKey {
    CacheKey {
        scope: String::new(),
        method: "POST".into(),
        path: "/transfers".into(),
        key: name.into(),
    }
}

fn fingerprint(body: &str) -> Fingerprint {
    Fingerprint::of(&http::Method::POST, "/transfers", body.as_bytes())
}

async fn claim<St: CacheStore>(
    store: &St,
    key: &CacheKey,
    body: &str,
    now_millis: i64,
    take_over_lapsed: bool,
) -> ClaimOutcome {
    store
        .claim(ClaimRequest {
            key,
            fingerprint: &fingerprint(body),
            now_millis,
            lease_millis: LEASE_MILLIS,
            row_ttl_millis: ROW_TTL_MILLIS,
            take_over_lapsed,
        })
        .await
        .unwrap()
}

async fn succeed<St: CacheStore>(
    store: &St,
    key: &CacheKey,
    generation: i64,
    now_millis: i64,
) -> FinalizeOutcome {
    let headers = [("x-handler".to_string(), "contract".to_string())];
    store
        .finalize_succeeded(
            key,
            generation,
            Fencing::Generation,
            SuccessRecord {
                status: 201,
                headers: &headers,
                body: CachedBody::Full(b"done"),
            },
            now_millis,
        )
        .await
        .unwrap()
}

/// A claim is answered by the row it finds: none (claimed), a live lease (in flight), another
/// fingerprint (mismatch), a lapsed lease (taken over, or held under fail-closed), a success
/// (its response), a failure (claimed again), an expired row (free). A claim that finds a row
/// costs the store's fixed statements for it, never a retry.
//= specs/idempotency-middleware.md#M6
//# In flight. A request whose key is held by a live claim gets 409 and never runs the handler.
//= specs/idempotency-middleware.md#M10
//# Expired keys are free. A key whose row has passed its expiry is free: no request is refused on an expired row.
async fn claims_are_answered_by_the_row_they_find<St: CacheStore>(
    store: St,
    statements_when_a_row_exists: u64,
) {
    let k1 = key("k1");
    assert_eq!(
        claim(&store, &k1, "x", T0, true).await,
        ClaimOutcome::Claimed { generation: 1 }
    );
    let before = store.round_trips();
    assert_eq!(
        claim(&store, &k1, "x", T0 + LEASE_MILLIS - 1, true).await,
        ClaimOutcome::InFlight,
        "a live lease"
    );
    assert_eq!(
        store.round_trips() - before,
        statements_when_a_row_exists,
        "a claim on a live row is answered without a retry"
    );
    assert_eq!(
        claim(&store, &k1, "other body", T0 + 1, true).await,
        ClaimOutcome::FingerprintMismatch
    );
    assert_eq!(
        claim(&store, &k1, "x", LAPSED, false).await,
        ClaimOutcome::OutcomeUnknown,
        "fail-closed holds a lapsed lease"
    );
    assert_eq!(
        claim(&store, &k1, "other body", LAPSED, true).await,
        ClaimOutcome::FingerprintMismatch,
        "a lapsed lease is taken over by the same request only"
    );
    assert_eq!(
        claim(&store, &k1, "x", LAPSED, true).await,
        ClaimOutcome::Claimed { generation: 2 },
        "the default policy takes a lapsed lease over"
    );
    assert_eq!(
        succeed(&store, &k1, 2, LAPSED + 1).await,
        FinalizeOutcome::Applied
    );
    assert_eq!(
        claim(&store, &k1, "x", LAPSED + 2 * LEASE_MILLIS, true).await,
        ClaimOutcome::Replay(StoredResponse {
            status: 201,
            headers: vec![("x-handler".into(), "contract".into())],
            body: StoredBody::Full(bytes::Bytes::from_static(b"done")),
        })
    );

    let k2 = key("k2");
    assert_eq!(
        claim(&store, &k2, "x", T0, true).await,
        ClaimOutcome::Claimed { generation: 1 }
    );
    let failed = store
        .finalize_failed(&k2, 1, Fencing::Generation, 503, T0 + 1)
        .await
        .unwrap();
    assert_eq!(failed, FinalizeOutcome::Applied);
    assert_eq!(
        claim(&store, &k2, "x", T0 + 2, true).await,
        ClaimOutcome::Claimed { generation: 2 },
        "a failed request may be sent again"
    );
    assert_eq!(
        claim(&store, &k2, "other body", T0 + 2 + ROW_TTL_MILLIS, true).await,
        ClaimOutcome::Claimed { generation: 3 },
        "an expired row is free, whatever the fingerprint"
    );
}

/// A resolution is conditional on the row still being the held claim's, processing, its lease
/// lapsed: a stale generation, a live lease, a finalized row each answer `Lost` and change
/// nothing. Effects that happened record the sentinel; effects that did not, a failure the
/// client may retry.
async fn a_resolution_applies_only_to_the_held_claim<St: CacheStore>(store: St) {
    let (k1, k2) = (key("k1"), key("k2"));
    for key in [&k1, &k2] {
        assert_eq!(
            claim(&store, key, "x", T0, true).await,
            ClaimOutcome::Claimed { generation: 1 }
        );
    }
    assert_eq!(
        store
            .unknown_outcomes(T0 + LEASE_MILLIS - 1, 10)
            .await
            .unwrap(),
        [],
        "no lease has lapsed yet"
    );
    let mut held = store.unknown_outcomes(LAPSED, 10).await.unwrap();
    held.sort_by(|a, b| a.key.cmp(&b.key));
    let generation_one = |key: &CacheKey| UnknownOutcome {
        key: key.clone(),
        generation: 1,
    };
    assert_eq!(held, [generation_one(&k1), generation_one(&k2)]);
    assert_eq!(store.unknown_outcomes(LAPSED, 1).await.unwrap().len(), 1);

    let stale = UnknownOutcome {
        key: k1.clone(),
        generation: 2,
    };
    let resolve = |held: UnknownOutcome, now_millis: i64| {
        let store = store.clone();
        async move {
            store
                .resolve_unknown(&held, true, RESOLVED_STATUS, now_millis)
                .await
                .unwrap()
        }
    };
    assert_eq!(
        resolve(stale, LAPSED).await,
        FinalizeOutcome::Lost,
        "another claim's generation"
    );
    assert_eq!(
        resolve(generation_one(&k1), T0 + LEASE_MILLIS - 1).await,
        FinalizeOutcome::Lost,
        "a lease that has not lapsed"
    );
    assert_eq!(
        claim(&store, &k1, "x", LAPSED, false).await,
        ClaimOutcome::OutcomeUnknown,
        "still held"
    );
    assert_eq!(
        resolve(generation_one(&k1), LAPSED).await,
        FinalizeOutcome::Applied
    );
    assert_eq!(
        resolve(generation_one(&k1), LAPSED).await,
        FinalizeOutcome::Lost,
        "a row already resolved"
    );
    assert_eq!(
        claim(&store, &k1, "x", LAPSED + 1, false).await,
        ClaimOutcome::Replay(StoredResponse {
            status: RESOLVED_STATUS,
            headers: Vec::new(),
            body: StoredBody::TooLarge,
        }),
        "effects that happened: the sentinel, never a second run"
    );

    let not_applied = store
        .resolve_unknown(&generation_one(&k2), false, RESOLVED_STATUS, LAPSED)
        .await
        .unwrap();
    assert_eq!(not_applied, FinalizeOutcome::Applied);
    assert_eq!(
        claim(&store, &k2, "x", LAPSED + 1, false).await,
        ClaimOutcome::Claimed { generation: 2 },
        "effects that did not happen: the request may run again"
    );
    assert_eq!(store.unknown_outcomes(LAPSED + 1, 10).await.unwrap(), []);
}

/// A renewal moves the lease of its own claim only: the claim's generation, still processing,
/// the row not expired.
async fn a_renewal_moves_only_its_own_live_claim<St: CacheStore>(store: St) {
    let k1 = key("k1");
    assert_eq!(
        claim(&store, &k1, "x", T0, true).await,
        ClaimOutcome::Claimed { generation: 1 }
    );
    let renew = |generation: i64, lease_expires_at: i64, now_millis: i64| {
        let (store, k1) = (store.clone(), k1.clone());
        async move {
            store
                .renew_lease(&k1, generation, lease_expires_at, now_millis)
                .await
                .unwrap()
        }
    };
    assert_eq!(
        renew(2, T0 + 3 * LEASE_MILLIS, T0 + 1).await,
        RenewOutcome::Lost
    );
    assert_eq!(
        claim(&store, &k1, "x", LAPSED, false).await,
        ClaimOutcome::OutcomeUnknown,
        "another generation's renewal moved nothing"
    );
    assert_eq!(
        renew(1, T0 + 3 * LEASE_MILLIS, T0 + 1).await,
        RenewOutcome::Renewed
    );
    assert_eq!(
        claim(&store, &k1, "x", LAPSED, false).await,
        ClaimOutcome::InFlight,
        "the renewed lease is live past the first one"
    );
    assert_eq!(
        renew(1, T0 + ROW_TTL_MILLIS + LEASE_MILLIS, T0 + ROW_TTL_MILLIS).await,
        RenewOutcome::Lost,
        "an expired row"
    );
    assert_eq!(
        succeed(&store, &k1, 1, T0 + 2).await,
        FinalizeOutcome::Applied
    );
    assert_eq!(
        renew(1, T0 + 4 * LEASE_MILLIS, T0 + 3).await,
        RenewOutcome::Lost,
        "a finalized row"
    );
}

/// A finalize is fenced by its claim's generation: once a newer claim took the key over, the
/// older claim's success or failure is `Lost` and the newer one's stands.
//= specs/idempotency-middleware.md#M8
//# Every finalize is conditional on its claim's generation and on the row still processing.
async fn a_finalize_of_an_older_claim_is_lost<St: CacheStore>(store: St) {
    let k1 = key("k1");
    claim(&store, &k1, "x", T0, true).await;
    assert_eq!(
        claim(&store, &k1, "x", LAPSED, true).await,
        ClaimOutcome::Claimed { generation: 2 }
    );
    assert_eq!(
        succeed(&store, &k1, 1, LAPSED + 1).await,
        FinalizeOutcome::Lost
    );
    let failed = store
        .finalize_failed(&k1, 1, Fencing::Generation, 503, LAPSED + 1)
        .await
        .unwrap();
    assert_eq!(failed, FinalizeOutcome::Lost);
    assert_eq!(
        claim(&store, &k1, "x", LAPSED + 2, true).await,
        ClaimOutcome::InFlight,
        "the newer claim still holds the key"
    );
    assert_eq!(
        succeed(&store, &k1, 2, LAPSED + 3).await,
        FinalizeOutcome::Applied
    );
    assert_eq!(
        succeed(&store, &k1, 2, LAPSED + 4).await,
        FinalizeOutcome::Lost,
        "a row no longer processing"
    );
}

macro_rules! on_every_store {
    ($($name:ident $(, $statements:expr)?);* $(;)?) => {
        mod memory {
            $(
                #[tokio::test]
                async fn $name() {
                    super::$name(oncecheck_idempotency::store::MemoryStore::new() $(, $statements.0)?).await;
                }
            )*
        }
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let store = super::sqlite_store(4).await;
                    super::$name(store.clone() $(, $statements.1)?).await;
                    super::TestStore::teardown(store).await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let store = super::postgres_store(4).await;
                    super::$name(store.clone() $(, $statements.2)?).await;
                    super::TestStore::teardown(store).await;
                }
            )*
        }
    };
}

// A claim that finds a row: one statement in memory and on PostgreSQL (its claim reads the row
// it found), two on SQLite (the claim, then the read).
on_every_store! {
    claims_are_answered_by_the_row_they_find, (1, 2, 1);
    a_resolution_applies_only_to_the_held_claim;
    a_renewal_moves_only_its_own_live_claim;
    a_finalize_of_an_older_claim_is_lost;
}
