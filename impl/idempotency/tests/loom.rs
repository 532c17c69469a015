//! loom: every interleaving of the layer's sync building blocks that carry an invariant, over
//! the in-memory store and its one mutex. The first two tests are exhaustive; the third, whose
//! background guard thread triples the schedules, is exhaustive up to 3 preemptions (unbounded,
//! `LOOM_MAX_PREEMPTIONS=100`, it also passes, in about a minute).
//!
//! - `duplicates_run_the_handler_once`: two requests with one key through the whole layer; the
//!   claim is atomic, so the handler runs once (M1, M6). Seeded bug `split-claim`.
//! - `inline_and_guard_finalize_apply_once`: the inline finalize and the drop guard's finalize
//!   of one claim race; exactly one applies and the row is never overwritten (M3, M8). Seeded
//!   bug `split-finalize`.
//! - `the_drop_guard_finalizes_while_a_duplicate_races_it`: a client gone after the 2xx hands
//!   the finalize to the guard's background thread while a duplicate arrives; the handler runs
//!   once and the row ends the sentinel (M1, M3). Seeded bug `guard-disarmed-early`.
//!
//! Run: `ONCECHECK_SYNC=loom cargo test -p oncecheck-idempotency --features loom --test loom`
//! (without `ONCECHECK_SYNC=loom` the layer keeps std's primitives and this file compiles to
//! nothing); with `ONCECHECK_LOOM_MUTATION=<bug>` each test whose bug it is must fail
//! (scripts/red-runs asserts that).
#![cfg(oncecheck_loom)]

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body::{Body, Frame};
use http_body_util::Full;
use oncecheck_idempotency::fingerprint::Fingerprint;
use oncecheck_idempotency::store::{
    CacheKey, CacheStore, CachedBody, ClaimOutcome, ClaimRequest, Fencing, FinalizeOutcome,
    MemoryStore, StoredBody, SuccessRecord,
};
use oncecheck_idempotency::sync::{Arc, AtomicUsize, Ordering};
use oncecheck_idempotency::{IdempotencyLayer, ManualClock};
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use tower::{Layer, ServiceExt};

/// loom's coroutines get a small stack; the layer's futures are deep in a debug build.
const STACK_BYTES: usize = 4 << 20;

/// Runs `test` under loom: every interleaving (up to `preemptions_max` preemptions, unless
/// LOOM_MAX_PREEMPTIONS says otherwise), on a thread with a stack large enough for the layer
/// (the model's own first thread cannot be given one).
fn model(preemptions_max: Option<usize>, test: impl Fn() + Sync + Send + 'static) {
    let test = std::sync::Arc::new(test);
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = builder.preemption_bound.or(preemptions_max);
    builder.check(move || {
        let test = test.clone();
        spawn(move || test()).join().unwrap();
    });
}

fn spawn<T: Send + 'static>(
    body: impl FnOnce() -> T + Send + 'static,
) -> loom::thread::JoinHandle<T> {
    loom::thread::Builder::new()
        .stack_size(STACK_BYTES)
        .spawn(body)
        .unwrap()
}

fn request() -> Request<Full<Bytes>> {
    Request::post("/transfers")
        .header("idempotency-key", "k")
        .body(Full::new(Bytes::from_static(b"{}")))
        .unwrap()
}

fn key() -> CacheKey {
    CacheKey {
        scope: String::new(),
        method: "POST".into(),
        path: "/transfers".into(),
        key: "k".into(),
    }
}

fn layer_for(store: MemoryStore) -> IdempotencyLayer<MemoryStore> {
    IdempotencyLayer::builder(store)
        .clock(ManualClock::new(0))
        .build()
}

/// (status, replayed marker) of an answer.
fn answer<B>(response: &Response<B>) -> (StatusCode, Option<String>) {
    let replayed = response
        .headers()
        .get("idempotency-replayed")
        .map(|value| value.to_str().unwrap().to_string());
    (response.status(), replayed)
}

//= specs/idempotency-middleware.md#M6
//# A request whose key is held by a live claim gets 409 and never runs the handler.
#[test]
fn duplicates_run_the_handler_once() {
    model(None, || {
        let store = MemoryStore::new();
        let runs = Arc::new(AtomicUsize::new(0));
        let counter = runs.clone();
        let handler = tower::service_fn(move |_request: Request<Full<Bytes>>| {
            counter.fetch_add(1, Ordering::SeqCst);
            async { Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"moved")))) }
        });
        let service = layer_for(store.clone()).layer(handler);
        let other = service.clone();
        let duplicate = spawn(move || {
            let response = loom::future::block_on(other.oneshot(request())).unwrap();
            answer(&response)
        });
        let first = answer(&loom::future::block_on(service.oneshot(request())).unwrap());
        let second = duplicate.join().unwrap();
        assert_eq!(
            runs.load(Ordering::SeqCst),
            1,
            "the handler ran once (answers {first:?}, {second:?})"
        );
        let fresh = [&first, &second]
            .iter()
            .filter(|answer| answer.1.as_deref() == Some("false"))
            .count();
        assert_eq!(
            fresh, 1,
            "one fresh answer, the other 409 or the replay: {first:?}, {second:?}"
        );
    });
}

fn claim(store: &MemoryStore) -> i64 {
    let request = ClaimRequest {
        key: &key(),
        fingerprint: &Fingerprint([7; 32]),
        now_millis: 0,
        lease_millis: 1000,
        row_ttl_millis: 10_000,
        take_over_lapsed: true,
    };
    match loom::future::block_on(store.claim(request)).unwrap() {
        ClaimOutcome::Claimed { generation } => generation,
        other => panic!("a fresh key is claimed, got {other:?}"),
    }
}

//= specs/idempotency-middleware.md#M8
//# Every finalize is conditional on its claim's generation and on the row still processing.
#[test]
fn inline_and_guard_finalize_apply_once() {
    model(None, || {
        let store = MemoryStore::new();
        let generation = claim(&store);
        let guard_store = store.clone();
        // The drop guard's sentinel, racing an inline finalize whose client went away after the
        // statement was sent (a cancelled finalize that commits anyway).
        let guard = spawn(move || {
            let record = SuccessRecord {
                status: 200,
                headers: &[],
                body: CachedBody::TooLarge,
            };
            loom::future::block_on(guard_store.finalize_succeeded(
                &key(),
                generation,
                Fencing::Generation,
                record,
                0,
            ))
            .unwrap()
        });
        let record = SuccessRecord {
            status: 200,
            headers: &[],
            body: CachedBody::Full(b"moved"),
        };
        let inline = loom::future::block_on(store.finalize_succeeded(
            &key(),
            generation,
            Fencing::Generation,
            record,
            0,
        ))
        .unwrap();
        let guard = guard.join().unwrap();
        let applied = [inline, guard]
            .iter()
            .filter(|outcome| **outcome == FinalizeOutcome::Applied)
            .count();
        assert_eq!(
            applied, 1,
            "exactly one finalize applies (inline {inline:?}, guard {guard:?})"
        );
        let body = store.row(&key()).unwrap().response.unwrap().body;
        let expected = if inline == FinalizeOutcome::Applied {
            StoredBody::Full(Bytes::from_static(b"moved"))
        } else {
            StoredBody::TooLarge
        };
        assert_eq!(
            body, expected,
            "the row holds the finalize that applied, never overwritten"
        );
    });
}

/// A body that yields one frame, then never ends: the client is still reading when it goes away.
struct Stalled {
    sent: bool,
}

impl Body for Stalled {
    type Data = Bytes;
    type Error = Infallible;
    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if self.sent {
            return Poll::Pending;
        }
        self.sent = true;
        Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(b"partial")))))
    }
}

//= specs/idempotency-middleware.md#M3
//# After a 2xx the row ends succeeded with the full body or the sentinel; never failed, never left processing.
#[test]
fn the_drop_guard_finalizes_while_a_duplicate_races_it() {
    model(Some(3), || {
        let store = MemoryStore::new();
        let runs = Arc::new(AtomicUsize::new(0));
        let counter = runs.clone();
        let handler = tower::service_fn(move |_request: Request<Full<Bytes>>| {
            counter.fetch_add(1, Ordering::SeqCst);
            async { Ok::<_, Infallible>(Response::new(Stalled { sent: false })) }
        });
        let layer = layer_for(store.clone());
        let service = layer.layer(handler);
        // Drive the first request until it is capturing the stalled 2xx body, then drop it: the
        // client went away; the guard spawns its finalize on another thread.
        let mut first = Box::pin(service.clone().oneshot(request()));
        let waker = futures_util::task::noop_waker();
        assert!(
            first
                .as_mut()
                .poll(&mut Context::from_waker(&waker))
                .is_pending(),
            "the stalled body never completes"
        );
        assert_eq!(runs.load(Ordering::SeqCst), 1);
        drop(first);
        let duplicate = answer(&loom::future::block_on(service.oneshot(request())).unwrap());
        match duplicate {
            (StatusCode::CONFLICT, None) | (StatusCode::OK, Some(_)) => {}
            other => panic!("the duplicate got {other:?}"),
        }
        assert_eq!(
            runs.load(Ordering::SeqCst),
            1,
            "the handler never ran twice"
        );
        // The guard's thread may still run: wait for the row to become terminal.
        let mut row = store.row(&key()).unwrap();
        for _ in 0..3 {
            if row.status != "processing" {
                break;
            }
            loom::thread::yield_now();
            row = store.row(&key()).unwrap();
        }
        assert_eq!(row.status, "succeeded", "the guard finalized the row");
        assert_eq!(row.response.unwrap().body, StoredBody::TooLarge);
        assert_eq!(layer.stats().guard_fired, 1);
    });
}
