//! The body-integrity scenario matrix, fencing, the heartbeat and tenant scoping, against real SQLite and PostgreSQL.
//!
//! Every scenario is one generic function run on both stores. Each test that pins a fix says
//! which behaviour (IDEM_BEHAVIOUR=pre-fix or fixed, with --features test-seams) makes it fail.

mod common;

use common::*;
use http::StatusCode;
use oncecheck_idempotency::store::FinalizeOutcome;
use oncecheck_idempotency::{ManualClock, Principal};
use std::time::Duration;

fn clock() -> ManualClock {
    ManualClock::new(START_MILLIS)
}

/// A 2xx streamed in frames far over the cap: the client gets every byte, the row the sentinel.
//= specs/idempotency-middleware.md#M2
//# A cached success holds the complete body, at most the cap, or the too-large sentinel.
//= specs/idempotency-middleware.md#M7
//# The first client receives exactly the frames the handler produced, over-cap tail and trailers included.
async fn oversized_streamed<St: TestStore>(store: St) {
    let handler = Handler::new(vec![Script::ok(vec![
        Step::Data(CAP),
        Step::Data(CAP),
        Step::Data(CAP),
    ])]);
    let app = app(
        layer_builder(store.clone(), &clock()).build(),
        handler.clone(),
    );
    let first = send(&app, post(Some("k1"), "{\"amount\":5}")).await;
    assert_eq!(first.status, StatusCode::OK);
    assert_eq!(
        first.data,
        pattern(0, 3 * CAP),
        "the live body is the handler's, complete"
    );
    assert_eq!(first.replayed(), Some("false"));
    let row = store.sole_row().await.expect("a row");
    assert_eq!(row.status, "succeeded");
    assert!(row.body_too_large, "an over-cap body stores the sentinel");
    let replay = send(&app, post(Some("k1"), "{\"amount\":5}")).await;
    assert_eq!(replay.status, StatusCode::OK);
    assert_eq!(replay.replayed(), Some("true"));
    assert_eq!(replay.headers["content-type"], "application/problem+json");
    assert_eq!(handler.runs(), 1, "the replay did not run the handler");
}

/// A body of exactly the cap is cached whole and replayed byte for byte.
//= specs/idempotency-middleware.md#M4
//# A replay returns the stored status and body, or the sentinel response, marked as a replay.
async fn exact_cap<St: TestStore>(store: St) {
    let handler = Handler::new(vec![Script::ok(vec![
        Step::Data(CAP / 2),
        Step::Data(CAP / 2),
    ])]);
    let app = app(
        layer_builder(store.clone(), &clock()).build(),
        handler.clone(),
    );
    let first = send(&app, post(Some("k1"), "x")).await;
    assert_eq!(first.data, pattern(0, CAP));
    let row = store.sole_row().await.expect("a row");
    assert_eq!(row.status, "succeeded");
    assert!(!row.body_too_large);
    assert_eq!(row.body.as_deref(), Some(&pattern(0, CAP)[..]));
    let replay = send(&app, post(Some("k1"), "x")).await;
    assert_eq!(replay.data, pattern(0, CAP));
    assert_eq!(replay.replayed(), Some("true"));
    assert_eq!(
        replay.headers["x-handler"], "scripted",
        "stored headers are replayed"
    );
    assert_eq!(handler.runs(), 1);
}

/// One byte over the cap: the sentinel, and the client still gets cap + 1 bytes.
async fn one_byte_over<St: TestStore>(store: St) {
    let handler = Handler::new(vec![Script::ok(vec![Step::Data(CAP), Step::Data(1)])]);
    let app = app(
        layer_builder(store.clone(), &clock()).build(),
        handler.clone(),
    );
    let first = send(&app, post(Some("k1"), "x")).await;
    assert_eq!(first.data, pattern(0, CAP + 1));
    let row = store.sole_row().await.expect("a row");
    assert!(row.body_too_large);
    assert_eq!(row.body, None);
}

/// One frame ten times the cap: split at the cap, its tail streamed.
async fn giant_single_frame<St: TestStore>(store: St) {
    let handler = Handler::new(vec![Script::ok(vec![Step::Data(10 * CAP)])]);
    let app = app(
        layer_builder(store.clone(), &clock()).build(),
        handler.clone(),
    );
    let first = send(&app, post(Some("k1"), "x")).await;
    assert_eq!(first.data.len(), 10 * CAP);
    assert_eq!(first.data, pattern(0, 10 * CAP));
    let row = store.sole_row().await.expect("a row");
    assert_eq!(row.status, "succeeded");
    assert!(row.body_too_large);
}

/// The database refuses the finalize: the client still gets the handler's complete body.
async fn finalize_failure<St: TestStore>(store: St) {
    store.break_success_finalize().await;
    let handler = Handler::new(vec![Script::ok(vec![Step::Data(100)])]);
    let layer = layer_builder(store.clone(), &clock()).build();
    let app = app(layer.clone(), handler.clone());
    let first = send(&app, post(Some("k1"), "x")).await;
    assert_eq!(first.status, StatusCode::OK);
    assert_eq!(
        first.data,
        pattern(0, 100),
        "a finalize error never empties the live body"
    );
    assert_eq!(
        layer.stats().finalize_unknown,
        1,
        "the outcome is reported unknown"
    );
    let row = store.sole_row().await.expect("a row");
    assert_eq!(
        row.status, "processing",
        "the database refused every attempt"
    );
}

/// A short database hiccup: the first two finalize attempts fail, the third (after jittered
/// backoffs) applies, so the success is recorded and replayed and the handler never becomes
/// re-runnable. The pre-fix layer made one attempt and left the row to its lease.
async fn finalize_hiccup<St: TestStore>(store: St) {
    store.fail_next_success_finalizes(2).await;
    let handler = Handler::new(vec![Script::ok(vec![Step::Data(100)])]);
    let layer = layer_builder(store.clone(), &clock()).build();
    let app = app(layer.clone(), handler.clone());
    let first = send(&app, post(Some("k1"), "x")).await;
    assert_eq!(first.data, pattern(0, 100));
    let stats = layer.stats();
    assert_eq!(
        (
            stats.finalize_retries,
            stats.finalize_applied,
            stats.finalize_unknown
        ),
        (2, 1, 0),
        "{stats:?}"
    );
    let row = store.sole_row().await.expect("a row");
    assert_eq!(row.status, "succeeded");
    let replay = send(&app, post(Some("k1"), "x")).await;
    assert_eq!(replay.replayed(), Some("true"));
    assert_eq!(replay.data, pattern(0, 100));
    assert_eq!(handler.runs(), 1);
}

/// The database refuses the sentinel finalize of an over-cap body: the body is still complete.
async fn finalize_failure_on_overflow<St: TestStore>(store: St) {
    store.break_success_finalize().await;
    let handler = Handler::new(vec![Script::ok(vec![Step::Data(2 * CAP), Step::Data(CAP)])]);
    let app = app(
        layer_builder(store.clone(), &clock()).build(),
        handler.clone(),
    );
    let first = send(&app, post(Some("k1"), "x")).await;
    assert_eq!(first.data, pattern(0, 3 * CAP));
}

/// A non-2xx over the cap passes through untouched and is recorded failed.
//= specs/idempotency-middleware.md#M9
//# A non-2xx response passes through untouched and its row is recorded failed.
async fn oversized_non_2xx<St: TestStore>(store: St) {
    let mut script = Script::ok(vec![Step::Data(2 * CAP), Step::Data(CAP)]);
    script.status = StatusCode::BAD_GATEWAY;
    let handler = Handler::new(vec![script, Script::ok(vec![Step::Data(10)])]);
    let app = app(
        layer_builder(store.clone(), &clock()).build(),
        handler.clone(),
    );
    let first = send(&app, post(Some("k1"), "x")).await;
    assert_eq!(first.status, StatusCode::BAD_GATEWAY);
    assert_eq!(first.data, pattern(0, 3 * CAP));
    assert_eq!(first.replayed(), None, "a non-2xx is not marked");
    let row = store.sole_row().await.expect("a row");
    assert_eq!(row.status, "failed");
    let retry = send(&app, post(Some("k1"), "x")).await;
    assert_eq!(retry.status, StatusCode::OK, "a failed key may be retried");
    assert_eq!(handler.runs(), 2);
}

/// A 2xx whose body fails before the cap: the client sees the prefix and the error; the row is
/// the sentinel (terminal), so a retry does not run the handler again.
//= specs/idempotency-middleware.md#M3
//# After a 2xx the row ends succeeded with the full body or the sentinel; never failed, never left processing.
async fn body_error_before_cap<St: TestStore>(store: St) {
    let handler = Handler::new(vec![Script::ok(vec![Step::Data(CAP / 2), Step::Error])]);
    let app = app(
        layer_builder(store.clone(), &clock()).build(),
        handler.clone(),
    );
    let first = send(&app, post(Some("k1"), "x")).await;
    assert_eq!(first.data, pattern(0, CAP / 2));
    assert!(
        first.body_error,
        "the client sees the body fail, not a clean short body"
    );
    let row = store.sole_row().await.expect("a row");
    assert_eq!(row.status, "succeeded");
    assert!(row.body_too_large, "never a truncated or empty cached body");
    let retry = send(&app, post(Some("k1"), "x")).await;
    assert_eq!(retry.replayed(), Some("true"));
    assert_eq!(handler.runs(), 1);
}

/// A 2xx whose body fails after the cap: everything before the error is delivered.
async fn body_error_after_cap<St: TestStore>(store: St) {
    let handler = Handler::new(vec![Script::ok(vec![Step::Data(2 * CAP), Step::Error])]);
    let app = app(
        layer_builder(store.clone(), &clock()).build(),
        handler.clone(),
    );
    let first = send(&app, post(Some("k1"), "x")).await;
    assert_eq!(first.data, pattern(0, 2 * CAP));
    assert!(first.body_error);
    let row = store.sole_row().await.expect("a row");
    assert_eq!(row.status, "succeeded");
    assert!(row.body_too_large);
}

/// The key reused with another body: 422 problem, the handler does not run.
//= specs/idempotency-middleware.md#M5
//# A key reused with another fingerprint gets 422 and never runs the handler.
async fn different_fingerprint<St: TestStore>(store: St) {
    let handler = Handler::new(vec![Script::ok(vec![Step::Data(10)])]);
    let app = app(
        layer_builder(store.clone(), &clock()).build(),
        handler.clone(),
    );
    send(&app, post(Some("k1"), "{\"amount\":5}")).await;
    let reuse = send(&app, post(Some("k1"), "{\"amount\":6}")).await;
    assert_eq!(reuse.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(reuse.headers["content-type"], "application/problem+json");
    let problem: serde_json::Value = serde_json::from_slice(&reuse.data).unwrap();
    assert_eq!(problem["status"], 422);
    assert_eq!(handler.runs(), 1);
}

/// While the winner is still streaming an over-cap tail, a duplicate gets the sentinel replay
/// (the sentinel was finalized before the winner's response was returned), not a second run.
async fn loser_replays_while_winner_streams<St: TestStore>(store: St) {
    let handler = Handler::new(vec![Script::ok(vec![
        Step::Data(2 * CAP),
        Step::Gate(0),
        Step::Data(CAP),
    ])]);
    let app = app(
        layer_builder(store.clone(), &clock()).build(),
        handler.clone(),
    );
    let response = tower::ServiceExt::oneshot(app.clone(), post(Some("k1"), "x"))
        .await
        .unwrap();
    let loser = send(&app, post(Some("k1"), "x")).await;
    assert_eq!(loser.replayed(), Some("true"));
    assert_eq!(handler.runs(), 1);
    handler.release(0);
    let winner = receive(response).await;
    assert_eq!(winner.data, pattern(0, 3 * CAP));
}

/// The client goes away after the 2xx while the layer is still capturing: the drop guard
/// finalizes the sentinel, so a retry replays instead of running the handler again.
//= specs/idempotency-middleware.md#M1
//# The handler runs only for the request that won the atomic claim of its key.
async fn cancellation<St: TestStore>(store: St) {
    let handler = Handler::new(vec![Script::ok(vec![
        Step::Data(10),
        Step::Gate(0),
        Step::Data(10),
    ])]);
    let layer = layer_builder(store.clone(), &clock()).build();
    let app = app(layer.clone(), handler.clone());
    let call = tokio::spawn(tower::ServiceExt::oneshot(
        app.clone(),
        post(Some("k1"), "x"),
    ));
    while handler
        .frames_sent
        .load(std::sync::atomic::Ordering::SeqCst)
        == 0
    {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    call.abort();
    let _ = call.await;
    let row = wait_terminal(&store).await.expect("a row");
    assert_eq!(
        row.status, "succeeded",
        "the guard finalized after the client went away"
    );
    assert!(row.body_too_large);
    let retry = send(&app, post(Some("k1"), "x")).await;
    assert_eq!(retry.replayed(), Some("true"));
    assert_eq!(handler.runs(), 1, "the handler did not run a second time");
}

/// The handler's version, extensions and headers (repeated ones included) survive; the marker
/// it set is replaced by the layer's.
async fn marker_extensions_version<St: TestStore>(store: St) {
    let mut script = Script::ok(vec![Step::Data(10)]);
    script.decorate = true;
    let handler = Handler::new(vec![script]);
    let app = app(
        layer_builder(store.clone(), &clock()).build(),
        handler.clone(),
    );
    let first = send(&app, post(Some("k1"), "x")).await;
    assert_eq!(first.version, http::Version::HTTP_10);
    assert_eq!(first.extension, Some(7));
    assert_eq!(first.replayed(), Some("false"));
    assert_eq!(first.headers.get_all("set-cookie").iter().count(), 2);
    let replay = send(&app, post(Some("k1"), "x")).await;
    assert_eq!(replay.replayed(), Some("true"));
    assert_eq!(
        replay.headers.get_all("set-cookie").iter().count(),
        2,
        "repeated headers are replayed"
    );
}

/// Trailers reach the live client and are not cached.
async fn trailers_live_only<St: TestStore>(store: St) {
    let handler = Handler::new(vec![Script::ok(vec![Step::Data(10), Step::Trailers])]);
    let app = app(
        layer_builder(store.clone(), &clock()).build(),
        handler.clone(),
    );
    let first = send(&app, post(Some("k1"), "x")).await;
    assert_eq!(first.data, pattern(0, 10));
    assert_eq!(
        first
            .trailers
            .as_ref()
            .map(|trailers| trailers["x-checksum"].clone()),
        Some("abc".parse().unwrap())
    );
    let row = store.sole_row().await.expect("a row");
    assert_eq!(
        row.body.as_deref(),
        Some(&pattern(0, 10)[..]),
        "the cache holds data bytes only"
    );
    let replay = send(&app, post(Some("k1"), "x")).await;
    assert!(replay.trailers.is_none());
}

/// With one pooled connection the layer never waits on itself: claim, finalize, a loser's
/// replay and the winner's tail all get the connection in turn.
async fn one_connection_pool<St: TestStore>(store: St) {
    let gated = Script::ok(vec![Step::Data(2 * CAP), Step::Gate(0), Step::Data(CAP)]);
    let handler = Handler::new(vec![gated, Script::ok(vec![Step::Data(10)])]);
    let app = app(
        layer_builder(store.clone(), &clock()).build(),
        handler.clone(),
    );
    let response = tower::ServiceExt::oneshot(app.clone(), post(Some("k1"), "x"))
        .await
        .unwrap();
    let loser = send(&app, post(Some("k1"), "x")).await;
    assert_eq!(loser.replayed(), Some("true"));
    let other = send(&app, post(Some("k2"), "x")).await;
    assert_eq!(other.status, StatusCode::OK);
    handler.release(0);
    let winner = receive(response).await;
    assert_eq!(winner.data.len(), 3 * CAP);
}

/// The lease crossing: the first claim outlives its lease, a duplicate takes the key over
/// (generation 2) and finishes; then the stale first finalizer runs. Fenced, it is Lost and
/// the newer row stands (M8); unfenced (IDEM_BEHAVIOUR=fixed) it overwrites it.
//= specs/idempotency-middleware.md#M8
//# Every finalize is conditional on its claim's generation and on the row still processing.
async fn lease_crossing<St: TestStore>(store: St) {
    let clock = clock();
    let handler = slow_then_fast();
    // Without the heartbeat, which would keep the slow claim's lease as the clock moves.
    let layer = layer_builder(store.clone(), &clock)
        .without_lease_renewal()
        .build();
    let app = app(layer.clone(), handler.clone());
    let stale = start_first(&app, &handler).await;
    let in_flight = send(&app, post(Some("k1"), "x")).await;
    assert_eq!(
        in_flight.status,
        StatusCode::CONFLICT,
        "a live lease answers 409"
    );
    clock.advance_secs(31);
    let newer = send(&app, post(Some("k1"), "x")).await;
    assert_eq!(newer.data, pattern(0, 7));
    assert_eq!(
        handler.runs(),
        2,
        "the lease crossing ran the handler twice (the documented cost)"
    );
    handler.release(0);
    let stale = stale.await.unwrap();
    assert_eq!(
        stale.data,
        pattern(0, 3),
        "the stale client still gets its own response"
    );
    let row = store.sole_row().await.expect("a row");
    assert_eq!(row.generation, 2);
    assert_eq!(
        row.body.as_deref(),
        Some(&pattern(0, 7)[..]),
        "the stale finalizer did not overwrite"
    );
    assert_eq!(layer.stats().finalize_lost, 1);
}

/// Waits until the layer's statistics satisfy `done` (at most 5 s), naming `what` otherwise.
async fn wait_for_stats<St>(
    layer: &oncecheck_idempotency::IdempotencyLayer<St>,
    what: &str,
    done: impl Fn(&oncecheck_idempotency::StatsSnapshot) -> bool,
) where
    St: oncecheck_idempotency::store::CacheStore,
{
    for _ in 0..1000 {
        if done(&layer.stats()) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("{what} within 5 s (stats {:?})", layer.stats());
}

/// Waits until the layer has renewed leases `count` more times than `before`.
async fn wait_for_renewals<St>(
    layer: &oncecheck_idempotency::IdempotencyLayer<St>,
    before: u64,
    count: u64,
) where
    St: oncecheck_idempotency::store::CacheStore,
{
    wait_for_stats(layer, "the heartbeat did not renew the lease", |stats| {
        stats.lease_renewed >= before + count
    })
    .await;
}

/// The heartbeat scenarios' set-up: a 10 s heartbeat, and the handler whose first run holds
/// its response until released.
fn with_a_10_s_heartbeat<St: TestStore>(
    store: &St,
) -> (
    ManualClock,
    std::sync::Arc<Handler>,
    oncecheck_idempotency::IdempotencyLayer<St>,
    axum::Router,
) {
    let clock = clock();
    let handler = slow_then_fast();
    let layer = layer_builder(store.clone(), &clock)
        .lease_renew_interval(Duration::from_secs(10))
        .build();
    let app = app(layer.clone(), handler.clone());
    (clock, handler, layer, app)
}

/// The lease answer (the heartbeat): a handler that runs 45 s of the layer's clock under a
/// 30 s lease keeps its claim, because the layer renews the lease while it runs. A duplicate
/// that arrives after the original lease would have run out gets 409, then the replay; the
/// handler runs once. Fails without the heartbeat (IDEM_BEHAVIOUR=pre-fix has none). The
/// heartbeat waits on the layer's clock: each move past its period makes it beat once.
//= specs/idempotency-middleware.md#M1
//# The handler runs only for the request that won the atomic claim of its key.
async fn heartbeat_outlives_the_lease<St: TestStore>(store: St) {
    let (clock, handler, layer, app) = with_a_10_s_heartbeat(&store);
    let first = start_first(&app, &handler).await;
    // 15 s steps, each past the 10 s period: one renewal each, read at the clock's new "now",
    // so the lease always ends 30 s after it.
    for _ in 0..3 {
        let before = layer.stats().lease_renewed;
        clock.advance_secs(15);
        wait_for_renewals(&layer, before, 1).await;
    }
    let duplicate = send(&app, post(Some("k1"), "x")).await;
    assert_eq!(
        duplicate.status,
        StatusCode::CONFLICT,
        "45 s into a 30 s lease the renewed claim still holds the key"
    );
    handler.release(0);
    let first = first.await.unwrap();
    assert_eq!(first.data, pattern(0, 3));
    let replay = send(&app, post(Some("k1"), "x")).await;
    assert_eq!(replay.replayed(), Some("true"));
    assert_eq!(
        replay.data,
        pattern(0, 3),
        "the replay is the long handler's response"
    );
    assert_eq!(handler.runs(), 1, "one execution");
    let row = store.sole_row().await.expect("a row");
    assert_eq!((row.status.as_str(), row.generation), ("succeeded", 1));
    assert_eq!(layer.stats().lease_lost, 0);
}

/// The heartbeat lives in the request's future: it stops when the handler has answered and
/// when the request is dropped mid-handler (its claim then runs out with its lease).
async fn heartbeat_stops_with_its_request<St: TestStore>(store: St) {
    let (clock, handler, layer, app) = with_a_10_s_heartbeat(&store);
    let settled = |layer: &oncecheck_idempotency::IdempotencyLayer<St>, clock: &ManualClock| {
        let (layer, clock) = (layer.clone(), clock.clone());
        async move {
            // Two periods pass on the layer's clock and no heartbeat of this layer beats (a
            // beating one renews within milliseconds of the move, the wait is 200 ms).
            let before = layer.stats().lease_renewed;
            clock.advance_secs(11);
            tokio::time::sleep(Duration::from_millis(100)).await;
            clock.advance_secs(11);
            tokio::time::sleep(Duration::from_millis(100)).await;
            layer.stats().lease_renewed == before
        }
    };
    let dropped = start_first(&app, &handler).await;
    clock.advance_secs(11);
    wait_for_renewals(&layer, 0, 1).await;
    dropped.abort();
    let _ = dropped.await;
    assert!(
        settled(&layer, &clock).await,
        "the dropped request's heartbeat stopped"
    );
    assert_eq!(
        store.sole_row().await.expect("a row").status,
        "processing",
        "left to its lease"
    );
    clock.advance_secs(31);
    let second = tokio::spawn(send_owned(app.clone(), "k1"));
    let answered = second.await.unwrap();
    assert_eq!(
        answered.data,
        pattern(0, 7),
        "after the lease a retry took the key over"
    );
    assert!(
        settled(&layer, &clock).await,
        "the heartbeat stopped when the handler answered"
    );
    assert_eq!(layer.stats().lease_lost, 0);
}

/// A heartbeat whose renewal matches no row (here the row outlived its TTL while the handler
/// ran) counts the lease lost for operators and stops beating; the handler's client still gets
/// its response.
async fn heartbeat_that_finds_its_claim_gone_counts_it_and_stops<St: TestStore>(store: St) {
    let (clock, handler, layer, app) = with_a_10_s_heartbeat(&store);
    let first = start_first(&app, &handler).await;
    clock.advance_secs(3601);
    wait_for_stats(
        &layer,
        "the renewal past the row's TTL did not count the lease lost",
        |stats| stats.lease_lost > 0,
    )
    .await;
    assert_eq!(layer.stats().lease_lost, 1);
    clock.advance_secs(11);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(layer.stats().lease_lost, 1, "the heartbeat stopped");
    assert_eq!(layer.stats().lease_renewed, 0);
    handler.release(0);
    assert_eq!(first.await.unwrap().data, pattern(0, 3));
}

/// The same long handler with the heartbeat switched off: the duplicate takes the key over
/// once the lease has run out and runs the handler a second time (the lease crossing the
/// model's `fenced` variant shows, M1 violated); fencing keeps the stale finalize off the row.
async fn without_heartbeat_the_lease_crossing_runs_twice<St: TestStore>(store: St) {
    let clock = clock();
    let handler = slow_then_fast();
    let layer = layer_builder(store.clone(), &clock)
        .without_lease_renewal()
        .build();
    let app = app(layer.clone(), handler.clone());
    let first = start_first(&app, &handler).await;
    clock.advance_secs(45);
    let duplicate = send(&app, post(Some("k1"), "x")).await;
    assert_eq!(
        duplicate.replayed(),
        Some("false"),
        "the duplicate ran fresh"
    );
    assert_eq!(handler.runs(), 2, "two executions: the lease crossing");
    handler.release(0);
    assert_eq!(first.await.unwrap().data, pattern(0, 3));
    let row = store.sole_row().await.expect("a row");
    assert_eq!(row.generation, 2);
    assert_eq!(layer.stats().lease_renewed, 0);
}

/// The reconcile hook of the fail-closed test: the effect of key k1 happened.
struct EffectHappened;

impl oncecheck_idempotency::ReconcileHook for EffectHappened {
    async fn effect_happened(&self, key: &oncecheck_idempotency::CacheKey) -> Option<bool> {
        Some(key.key == "k1")
    }
}

/// Fail closed: a request dropped mid-handler leaves its row processing; once its lease lapsed
/// the key is held (409 `outcome-unknown`), not re-run, until the reconcile hook says the effect
/// happened: then the sentinel is replayed. The handler ran once. With the default policy the
/// same retry runs the handler again (`heartbeat_stops_with_its_request`).
//= specs/idempotency-middleware.md#M1
//# The handler runs only for the request that won the atomic claim of its key.
async fn fail_closed_holds_a_lapsed_key_until_reconciled<St: TestStore>(store: St) {
    let clock = clock();
    let handler = slow_then_fast();
    let layer = layer_builder(store.clone(), &clock).fail_closed().build();
    let app = app(layer.clone(), handler.clone());
    let dropped = start_first(&app, &handler).await;
    dropped.abort();
    let _ = dropped.await;
    clock.advance_secs(31);
    let held = send(&app, post(Some("k1"), "x")).await;
    assert_eq!(held.status, StatusCode::CONFLICT);
    assert_eq!(held.problem_kind().as_deref(), Some("outcome-unknown"));
    assert_eq!(handler.runs(), 1, "the held key was not run again");
    assert_eq!(layer.unknown_outcomes().await.unwrap().len(), 1);
    let report = layer.reconcile_unknown(&EffectHappened).await.unwrap();
    assert_eq!((report.applied, report.still_held), (1, 0));
    let replay = send(&app, post(Some("k1"), "x")).await;
    assert_eq!(replay.replayed(), Some("true"));
    assert_eq!(replay.headers["content-type"], "application/problem+json");
    assert_eq!(handler.runs(), 1);
    assert!(layer.unknown_outcomes().await.unwrap().is_empty());
}

/// An operator's resolution (`resolve_unknown`) settles the held key it names and no other; a
/// key no longer held answers `Lost` and changes nothing.
async fn an_operator_resolves_the_held_key_it_names<St: TestStore>(store: St) {
    let clock = clock();
    let mut held_response = Script::ok(vec![Step::Data(3)]);
    held_response.gate_before_response = Some(0);
    let handler = Handler::new(vec![held_response.clone(), held_response]);
    let layer = layer_builder(store.clone(), &clock).fail_closed().build();
    let app = app(layer.clone(), handler.clone());
    for (key, runs) in [("k1", 1), ("k2", 2)] {
        let dropped = tokio::spawn(send_owned(app.clone(), key));
        while handler.runs() < runs {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        dropped.abort();
        let _ = dropped.await;
    }
    clock.advance_secs(31);
    let held_keys = |held: Vec<oncecheck_idempotency::store::UnknownOutcome>| {
        let mut keys: Vec<String> = held.into_iter().map(|held| held.key.key).collect();
        keys.sort();
        keys
    };
    let held = layer.unknown_outcomes().await.unwrap();
    let k2 = held
        .iter()
        .find(|held| held.key.key == "k2")
        .expect("k2 is held")
        .key
        .clone();
    assert_eq!(held_keys(held), ["k1", "k2"]);
    assert_eq!(
        layer.resolve_unknown(&k2, true).await.unwrap(),
        FinalizeOutcome::Applied
    );
    assert_eq!(
        held_keys(layer.unknown_outcomes().await.unwrap()),
        ["k1"],
        "k1 is still held"
    );
    assert_eq!(
        layer.resolve_unknown(&k2, true).await.unwrap(),
        FinalizeOutcome::Lost,
        "k2 is no longer held"
    );
    assert_eq!(held_keys(layer.unknown_outcomes().await.unwrap()), ["k1"]);
    assert_eq!(handler.runs(), 2);
}

/// A handler whose first run holds its response (3 bytes) until gate 0 is released; later
/// runs answer 7 bytes at once.
fn slow_then_fast() -> std::sync::Arc<Handler> {
    let mut slow = Script::ok(vec![Step::Data(3)]);
    slow.gate_before_response = Some(0);
    Handler::new(vec![slow, Script::ok(vec![Step::Data(7)])])
}

/// Sends the first request for key k1 in the background; returns once its handler runs.
async fn start_first(app: &axum::Router, handler: &Handler) -> tokio::task::JoinHandle<Received> {
    let first = tokio::spawn(send_owned(app.clone(), "k1"));
    while handler.runs() == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    first
}

async fn send_owned(app: axum::Router, key: &'static str) -> Received {
    send(&app, post(Some(key), "x")).await
}

/// Two tenants using the same key never share a row or a replay.
async fn tenant_scoping<St: TestStore>(store: St) {
    let handler = Handler::new(vec![Script::ok(vec![Step::Data(5)])]);
    let app = app(
        layer_builder(store.clone(), &clock()).build(),
        handler.clone(),
    );
    for tenant in ["alice", "bob"] {
        let mut request = post(Some("shared-key"), "x");
        request
            .extensions_mut()
            .insert(Principal(tenant.to_string()));
        let received = send(&app, request).await;
        assert_eq!(
            received.replayed(),
            Some("false"),
            "{tenant} runs its own request"
        );
    }
    assert_eq!(handler.runs(), 2);
    assert_eq!(store.row_count().await, 2);
    let mut again = post(Some("shared-key"), "x");
    again.extensions_mut().insert(Principal("bob".into()));
    assert_eq!(send(&app, again).await.replayed(), Some("true"));
}

/// Keys: missing, empty, too long, non-visible → 400 problem; quoted and bare are one key.
async fn key_validation<St: TestStore>(store: St) {
    let handler = Handler::new(vec![Script::ok(vec![Step::Data(5)])]);
    let app = app(
        layer_builder(store.clone(), &clock()).build(),
        handler.clone(),
    );
    let long = "k".repeat(256);
    for key in [
        None,
        Some(""),
        Some(long.as_str()),
        Some("a b"),
        Some("\"unterminated"),
    ] {
        let received = send(&app, post(key, "x")).await;
        assert_eq!(received.status, StatusCode::BAD_REQUEST, "key {key:?}");
        assert_eq!(received.headers["content-type"], "application/problem+json");
    }
    assert_eq!(handler.runs(), 0);
    send(&app, post(Some("\"k-1\""), "x")).await;
    let bare = send(&app, post(Some("k-1"), "x")).await;
    assert_eq!(
        bare.replayed(),
        Some("true"),
        "the quoted and the bare form name one key"
    );
}

/// The request body is read whole for the fingerprint, up to its own limit: a body of exactly
/// `request_body_bytes_max` is served, one byte more is 413 `request-too-large`, and a body
/// that fails while read is 400 `request-body-unreadable`; neither claims the key or runs the
/// handler, so the client may send the request again.
async fn request_body_limit<St: TestStore>(store: St) {
    let handler = Handler::new(vec![Script::ok(vec![Step::Data(5)])]);
    let app = app(
        layer_builder(store.clone(), &clock())
            .request_body_bytes_max(4)
            .build(),
        handler.clone(),
    );
    let at_limit = send(&app, post(Some("k-at"), "abcd")).await;
    assert_eq!(
        at_limit.status,
        StatusCode::OK,
        "a body of exactly the limit"
    );
    assert_eq!(at_limit.replayed(), Some("false"));
    let over = send(&app, post(Some("k-over"), "abcde")).await;
    assert_eq!(over.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(over.problem_kind().as_deref(), Some("request-too-large"));
    let failing = futures_util::stream::iter([
        Ok(bytes::Bytes::from_static(b"ab")),
        Err(std::io::Error::other("the client went away")),
    ]);
    let unreadable = http::Request::post("/transfers")
        .header("idempotency-key", "k-unreadable")
        .body(axum::body::Body::from_stream(failing))
        .unwrap();
    let unreadable = send(&app, unreadable).await;
    assert_eq!(unreadable.status, StatusCode::BAD_REQUEST);
    assert_eq!(
        unreadable.problem_kind().as_deref(),
        Some("request-body-unreadable")
    );
    assert_eq!(handler.runs(), 1, "only the body within the limit ran");
    assert_eq!(
        store.row_count().await,
        1,
        "only the body within the limit claimed"
    );
}

/// Routing runs before the layer (`route_layer`): an unknown route is 404 and a wrong method
/// 405, never 400 missing-key; an empty principal is 401, never the anonymous caller's scope.
async fn routing_and_principals<St: TestStore>(store: St) {
    let handler = Handler::new(vec![Script::ok(vec![Step::Data(5)])]);
    let app = app(
        layer_builder(store.clone(), &clock()).build(),
        handler.clone(),
    );
    let unknown = http::Request::post("/unknown")
        .body(axum::body::Body::from("x"))
        .unwrap();
    assert_eq!(send(&app, unknown).await.status, StatusCode::NOT_FOUND);
    let wrong_method = http::Request::delete("/transfers")
        .body(axum::body::Body::empty())
        .unwrap();
    assert_eq!(
        send(&app, wrong_method).await.status,
        StatusCode::METHOD_NOT_ALLOWED
    );
    let mut empty = post(Some("k1"), "x");
    empty.extensions_mut().insert(Principal(String::new()));
    let refused = send(&app, empty).await;
    assert_eq!(refused.status, StatusCode::UNAUTHORIZED);
    assert_eq!(refused.headers["content-type"], "application/problem+json");
    assert_eq!(handler.runs(), 0);
    assert_eq!(store.row_count().await, 0, "nothing was claimed");
}

/// An expired row never blocks: after the TTL the key is new, even with another fingerprint.
async fn row_expiry<St: TestStore>(store: St) {
    let clock = clock();
    let handler = Handler::new(vec![Script::ok(vec![Step::Data(5)])]);
    let app = app(
        layer_builder(store.clone(), &clock).build(),
        handler.clone(),
    );
    send(&app, post(Some("k1"), "a")).await;
    assert_eq!(
        send(&app, post(Some("k1"), "b")).await.status,
        StatusCode::UNPROCESSABLE_ENTITY
    );
    clock.advance_secs(3601);
    let after = send(&app, post(Some("k1"), "b")).await;
    assert_eq!(after.replayed(), Some("false"));
    assert_eq!(handler.runs(), 2);
    assert_eq!(store.sole_row().await.expect("a row").generation, 2);
}

/// Concurrent duplicates: exactly one runs the handler; the others get 409 or the replay.
//= specs/idempotency-middleware.md#M6
//# A request whose key is held by a live claim gets 409 and never runs the handler.
async fn concurrent_duplicates<St: TestStore>(store: St) {
    let handler = Handler::new(vec![Script::ok(vec![Step::Data(5)])]);
    let app = app(
        layer_builder(store.clone(), &clock()).build(),
        handler.clone(),
    );
    let calls: Vec<_> = (0..8)
        .map(|_| tokio::spawn(send_owned(app.clone(), "k1")))
        .collect();
    let mut fresh = 0;
    for call in calls {
        let received = call.await.unwrap();
        match (received.status, received.replayed()) {
            (StatusCode::OK, Some("false")) => fresh += 1,
            (StatusCode::OK, Some("true")) | (StatusCode::CONFLICT, None) => {}
            other => panic!("unexpected answer {other:?}"),
        }
    }
    assert_eq!(fresh, 1);
    assert_eq!(handler.runs(), 1);
}

macro_rules! on_both_stores {
    ($($name:ident: $connections:expr),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let store = super::sqlite_store($connections).await;
                    super::$name(store.clone()).await;
                    super::TestStore::teardown(store).await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let store = super::postgres_store($connections).await;
                    super::$name(store.clone()).await;
                    super::TestStore::teardown(store).await;
                }
            )*
        }
    };
}

on_both_stores! {
    oversized_streamed: 4,
    exact_cap: 4,
    one_byte_over: 4,
    giant_single_frame: 4,
    finalize_failure: 4,
    finalize_failure_on_overflow: 4,
    finalize_hiccup: 4,
    oversized_non_2xx: 4,
    body_error_before_cap: 4,
    body_error_after_cap: 4,
    different_fingerprint: 4,
    loser_replays_while_winner_streams: 4,
    cancellation: 4,
    marker_extensions_version: 4,
    trailers_live_only: 4,
    one_connection_pool: 1,
    lease_crossing: 4,
    heartbeat_outlives_the_lease: 4,
    heartbeat_stops_with_its_request: 4,
    heartbeat_that_finds_its_claim_gone_counts_it_and_stops: 4,
    without_heartbeat_the_lease_crossing_runs_twice: 4,
    fail_closed_holds_a_lapsed_key_until_reconciled: 4,
    an_operator_resolves_the_held_key_it_names: 4,
    tenant_scoping: 4,
    key_validation: 4,
    request_body_limit: 4,
    routing_and_principals: 4,
    row_expiry: 4,
    concurrent_duplicates: 4,
}

/// Database round trips: a first request claims and finalizes (2 statements); a replay is one
/// statement on PostgreSQL (the claim reads the row it found) and two on SQLite.
async fn round_trips<St: TestStore>(store: St, replay_trips: u64) {
    let handler = Handler::new(vec![Script::ok(vec![Step::Data(5)])]);
    let app = app(
        layer_builder(store.clone(), &clock()).build(),
        handler.clone(),
    );
    let before = store.round_trips();
    send(&app, post(Some("k1"), "x")).await;
    assert_eq!(store.round_trips() - before, 2, "claim + finalize");
    let before = store.round_trips();
    assert_eq!(
        send(&app, post(Some("k1"), "x")).await.replayed(),
        Some("true")
    );
    assert_eq!(store.round_trips() - before, replay_trips);
}

#[tokio::test]
async fn sqlite_round_trips() {
    let store = sqlite_store(4).await;
    round_trips(store.clone(), 2).await;
    store.teardown().await;
}

#[tokio::test]
async fn postgres_round_trips() {
    let store = postgres_store(4).await;
    round_trips(store.clone(), 1).await;
    store.teardown().await;
}
