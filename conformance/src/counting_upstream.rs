//! A test upstream for the proxies that must serialise their exchanges with a server that does
//! not isolate concurrent requests (moto): it counts the exchanges in flight at once, and holds
//! its first one until a second request arrives or `FIRST_HELD_MILLIS_MAX` passes, so a proxy
//! that lets a second request through while the first is in its exchange is caught.
//!
//! Invariant: answers every request 200 `{}`; never holds more than the first.

use bytes::Bytes;
use http::Response;
use http_body_util::Full;
use hyper_util::rt::TokioIo;
use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, Notify};

/// An upstream that counts the exchanges in flight at once. It holds its first exchange until
/// a second request arrives or `FIRST_HELD_MILLIS_MAX` passes (a bound, not a measurement:
/// with a sound proxy no second request can arrive while the first is held).
pub(crate) struct CountingUpstream {
    pub(crate) url: String,
    /// The most exchanges in flight at once so far.
    pub(crate) in_flight_max: Arc<AtomicUsize>,
    /// One message per request that arrived.
    pub(crate) arrivals: mpsc::UnboundedReceiver<()>,
}

const FIRST_HELD_MILLIS_MAX: u64 = 1_000;

impl CountingUpstream {
    pub(crate) async fn start() -> CountingUpstream {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let in_flight = Arc::new(AtomicUsize::new(0));
        let in_flight_max = Arc::new(AtomicUsize::new(0));
        let second_arrived = Arc::new(Notify::new());
        let (arrived, arrivals) = mpsc::unbounded_channel();
        let counters = (in_flight.clone(), in_flight_max.clone());
        tokio::spawn(async move {
            let requests = Arc::new(AtomicUsize::new(0));
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let (in_flight, in_flight_max) = counters.clone();
                let (requests, second_arrived, arrived) =
                    (requests.clone(), second_arrived.clone(), arrived.clone());
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |_request| {
                        let (in_flight, in_flight_max) = (in_flight.clone(), in_flight_max.clone());
                        let (requests, second_arrived, arrived) =
                            (requests.clone(), second_arrived.clone(), arrived.clone());
                        async move {
                            let now = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                            in_flight_max.fetch_max(now, Ordering::SeqCst);
                            let number = requests.fetch_add(1, Ordering::SeqCst);
                            let _ = arrived.send(());
                            if number == 0 {
                                let _ = tokio::time::timeout(
                                    Duration::from_millis(FIRST_HELD_MILLIS_MAX),
                                    second_arrived.notified(),
                                )
                                .await;
                            } else {
                                second_arrived.notify_one();
                            }
                            in_flight.fetch_sub(1, Ordering::SeqCst);
                            Ok::<_, Infallible>(Response::new(Full::new(Bytes::from("{}"))))
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        CountingUpstream {
            url,
            in_flight_max,
            arrivals,
        }
    }
}
