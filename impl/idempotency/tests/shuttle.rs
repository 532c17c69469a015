//! Schedule exploration (shuttle) of the layer over the in-memory store: concurrent duplicates
//! and the drop guard racing a duplicate. Run with
//! `ONCECHECK_SYNC=shuttle cargo test -p oncecheck-idempotency --features shuttle --test shuttle`
//! (both swap the layer's sync primitives for shuttle's, see src/sync.rs and build.rs; without
//! `ONCECHECK_SYNC=shuttle` this file compiles to nothing). The seed is printed; rerun a failing
//! schedule with SHUTTLE_SEED=<seed>.
#![cfg(oncecheck_shuttle)]

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body::{Body, Frame};
use http_body_util::{BodyExt, Full};
use oncecheck_idempotency::store::{CacheKey, MemoryStore};
use oncecheck_idempotency::sync::{Arc, AtomicUsize, Ordering};
use oncecheck_idempotency::{IdempotencyLayer, ManualClock};
use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};
use tower::{Layer, ServiceExt};

const ITERATIONS: usize = 2000;

fn seed() -> u64 {
    let seed = std::env::var("SHUTTLE_SEED")
        .ok()
        .and_then(|text| text.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        });
    println!("shuttle seed: {seed} (rerun with SHUTTLE_SEED={seed})");
    seed
}

/// Runs `test` under ITERATIONS random schedules from the printed seed, on task stacks the
/// layer's futures fit in: with the heartbeat beside the handler and the finalize under its
/// time budget they outgrow shuttle's default stack in a debug build.
fn explore(test: impl Fn() + Send + Sync + 'static) {
    let mut config = shuttle::Config::new();
    config.stack_size = 1 << 20;
    let scheduler = shuttle::scheduler::RandomScheduler::new_from_seed(seed(), ITERATIONS);
    shuttle::Runner::new(scheduler, config).run(test);
}

/// The layer under test; IDEM_BEHAVIOUR=pre-fix|fixed (with --features test-seams) swaps in a
/// behaviour without a fix, to show these schedules catch its absence.
fn layer_for(store: MemoryStore) -> IdempotencyLayer<MemoryStore> {
    let builder = IdempotencyLayer::builder(store).clock(ManualClock::new(0));
    #[cfg(feature = "test-seams")]
    let builder = match std::env::var("IDEM_BEHAVIOUR").as_deref() {
        Ok("pre-fix") => builder.behaviour(oncecheck_idempotency::Behaviour::PreFix),
        Ok("fixed") => builder.behaviour(oncecheck_idempotency::Behaviour::Fixed),
        _ => builder,
    };
    builder.build()
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

/// A body that yields one frame, then never ends: the client is still reading when it goes away.
struct Stalled {
    sent: bool,
    produced: Arc<AtomicUsize>,
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
        self.produced.fetch_add(1, Ordering::SeqCst);
        Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(b"partial")))))
    }
}

#[test]
fn concurrent_duplicates_run_the_handler_once() {
    explore(|| {
        shuttle::future::block_on(async {
            let store = MemoryStore::new();
            let layer = layer_for(store.clone());
            let runs = Arc::new(AtomicUsize::new(0));
            let counter = runs.clone();
            let handler = tower::service_fn(move |_request: Request<Full<Bytes>>| {
                let counter = counter.clone();
                async move {
                    counter.fetch_add(1, Ordering::SeqCst);
                    shuttle::future::yield_now().await;
                    Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"moved"))))
                }
            });
            let service = layer.layer(handler);
            let calls: Vec<_> = (0..3)
                .map(|_| {
                    let service = service.clone();
                    shuttle::future::spawn(async move {
                        let response = service.oneshot(request()).await.unwrap();
                        let status = response.status();
                        let replayed = response.headers().get("idempotency-replayed").cloned();
                        let body = response.into_body().collect().await.unwrap().to_bytes();
                        (status, replayed, body)
                    })
                })
                .collect();
            let mut fresh = 0;
            for call in calls {
                let (status, replayed, body) = call.await.unwrap();
                match (
                    status,
                    replayed.as_ref().map(|value| value.to_str().unwrap()),
                ) {
                    (StatusCode::OK, Some("false")) => fresh += 1,
                    (StatusCode::OK, Some("true")) => {
                        assert_eq!(&body[..], b"moved", "a replay is the original body")
                    }
                    (StatusCode::CONFLICT, None) => {}
                    other => panic!("unexpected answer {other:?}"),
                }
            }
            assert_eq!(fresh, 1, "exactly one request ran fresh");
            assert_eq!(runs.load(Ordering::SeqCst), 1, "the handler ran once");
            assert_eq!(store.row(&key()).unwrap().status, "succeeded");
        })
    });
}

#[test]
fn drop_guard_finalizes_the_sentinel_while_a_duplicate_races_it() {
    explore(|| {
        shuttle::future::block_on(async {
            let store = MemoryStore::new();
            let layer = layer_for(store.clone());
            let runs = Arc::new(AtomicUsize::new(0));
            let produced = Arc::new(AtomicUsize::new(0));
            let (counter, frames) = (runs.clone(), produced.clone());
            let handler = tower::service_fn(move |_request: Request<Full<Bytes>>| {
                let (counter, frames) = (counter.clone(), frames.clone());
                async move {
                    counter.fetch_add(1, Ordering::SeqCst);
                    Ok::<_, Infallible>(Response::new(Stalled {
                        sent: false,
                        produced: frames,
                    }))
                }
            });
            let service = layer.layer(handler);
            // Drive the first request until the handler has sent a 2xx frame, then drop it:
            // the client went away while the layer was capturing.
            let mut first = Box::pin(service.clone().oneshot(request()));
            let waker = futures_util::task::noop_waker();
            let mut context = Context::from_waker(&waker);
            while produced.load(Ordering::SeqCst) == 0 {
                assert!(
                    first.as_mut().poll(&mut context).is_pending(),
                    "the stalled body never completes"
                );
                shuttle::future::yield_now().await;
            }
            drop(first);
            // A duplicate races the guard's background finalize.
            let duplicate = shuttle::future::spawn(service.clone().oneshot(request()));
            let answer = duplicate.await.unwrap().unwrap();
            match answer.status() {
                StatusCode::CONFLICT => {}
                StatusCode::OK => assert_eq!(answer.headers()["idempotency-replayed"], "true"),
                other => panic!("unexpected status {other}"),
            }
            for _ in 0..100 {
                if store.row(&key()).unwrap().status != "processing" {
                    break;
                }
                shuttle::future::yield_now().await;
            }
            let row = store.row(&key()).unwrap();
            assert_eq!(row.status, "succeeded", "the guard finalized the row");
            assert_eq!(
                runs.load(Ordering::SeqCst),
                1,
                "the handler never ran twice"
            );
            assert_eq!(layer.stats().guard_fired, 1);
        })
    });
}

use std::future::Future;
