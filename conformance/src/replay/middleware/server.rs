//! The real side of a middleware replay: the layer from impl/idempotency mounted with
//! `route_service` on an axum server over loopback TCP, a scripted handler behind it, and one
//! HTTP/1.1 client connection per model client.
//!
//! The scripted handler answers what the trace says and nothing else: it waits (registered in
//! the [`Hub`]) until the trace names its outcome; a 2xx answers at once with a body whose
//! frames the trace releases (the capture, then the over-cap tail); a non-2xx hands its
//! response to the layer at the trace's capture step; a handler error is the service's `Err`.
//!
//! Invariants: the bodies are fixed per outcome relative to the cap (`BODY_BYTES_MAX`): under,
//! at, one over, far over, failing before and after it; the handler names its outcome in a
//! header (`HANDLER_HEADER`), so a replayed response shows whether its headers were stored; the
//! clients write the one key differently (`KEY_ENCODINGS`), so the row shows the layer's parse;
//! a client is cancelled by aborting its task, which closes its TCP connection — the server
//! sees exactly one closed connection.

use super::hub::{Hub, Received};
use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body::{Body, Frame};
use oncecheck_idempotency::REPLAYED_HEADER;
use oncecheck_model::idempotency::{Fingerprint, Outcome};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::sync::mpsc;

/// The cache cap of every replayed layer, in bytes: small, so every outcome's body is a few
/// frames.
pub const BODY_BYTES_MAX: usize = 8;
/// The route the layer covers.
pub const ROUTE: &str = "/op";
/// The request header naming the model client (its 0-based index), so the scripted handler
/// knows whose outcome to wait for. Not part of the fingerprint (method, path and body).
pub const CLIENT_HEADER: &str = "x-replay-client";
/// The request header the replay's authentication stand-in reads: the principal it names is put
/// where the layer reads it ([`authenticate`]).
pub const PRINCIPAL_HEADER: &str = "x-replay-principal";
/// The principal of every model client: the model's clients share one key, so one scope.
pub const PRINCIPAL: &str = "replay-clients";
/// The visible characters after the key's first three: 252, so that the key is exactly as long
/// as a key may be (`KEY_CHARS_MAX_SPEC`).
macro_rules! key_tail {
    () => {
        concat!(
            "abcdefghijklmnopqrstuvwxyz0123456789",
            "abcdefghijklmnopqrstuvwxyz0123456789",
            "abcdefghijklmnopqrstuvwxyz0123456789",
            "abcdefghijklmnopqrstuvwxyz0123456789",
            "abcdefghijklmnopqrstuvwxyz0123456789",
            "abcdefghijklmnopqrstuvwxyz0123456789",
            "abcdefghijklmnopqrstuvwxyz0123456789",
        )
    };
}
/// The longest key the spec allows (specs/idempotency-middleware.md, D2: more than 255
/// characters is 400 `invalid-key`): the replays' own figure, never the layer's.
pub const KEY_CHARS_MAX_SPEC: usize = 255;
/// The model's one idempotency key, as the layer must store it: it holds both characters a
/// structured-field string escapes, so a key parsed wrongly lands on another row (or none),
/// and it is exactly as long as a key may be, so a layer whose limit drifts refuses it.
pub const KEY: &str = concat!("k\"\\", key_tail!());
/// The key of the model's one row as the layer builds it from a model client's request: the
/// client's principal, the method and the route it posts to, and [`KEY`].
pub fn cache_key() -> oncecheck_idempotency::CacheKey {
    oncecheck_idempotency::CacheKey {
        scope: PRINCIPAL.into(),
        method: "POST".into(),
        path: ROUTE.into(),
        key: KEY.into(),
    }
}
/// How each client writes [`KEY`] on the wire, by client index modulo the count: the draft's
/// structured-field string (quotes and escapes, padded with a tab) and the bare value many
/// clients send (padded with spaces). Both are the same key, so the model's clients share a row.
pub const KEY_ENCODINGS: [&str; 2] = [
    concat!("\t\"k\\\"\\\\", key_tail!(), "\" "),
    concat!("  k\"\\", key_tail!(), " "),
];
/// The request body limit of every replayed layer, in bytes; every request body is exactly
/// this long ([`request_body`]), so a layer that refuses a body at its limit parts from the
/// model.
pub const REQUEST_BODY_BYTES_MAX: usize = 16;
/// The response header the scripted handler sets: its outcome's name, so a replay of a stored
/// response shows whether the layer stored the handler's headers.
pub const HANDLER_HEADER: &str = "x-replay-outcome";
/// The status of a non-2xx outcome and of a handler error (the error mapper's).
pub const FAILURE_STATUS: u16 = 502;
pub const HANDLER_ERROR_STATUS: u16 = 500;
pub const HANDLER_ERROR_BODY: &[u8] = b"handler error";

/// One frame of a scripted body: data, or the body's error.
pub type Item = Result<&'static [u8], ()>;

/// The frames of an outcome's body: those the capture reads (up to and including the frame
/// that crosses the cap, or to the end within it) and the over-cap tail after it.
pub fn body_of(outcome: Outcome) -> (Vec<Item>, Vec<Item>) {
    match outcome {
        Outcome::OkUnder => (vec![Ok(b"abc")], vec![]),
        Outcome::OkAtCap => (vec![Ok(b"abcd"), Ok(b"efgh")], vec![]),
        Outcome::OkOneOver => (vec![Ok(b"abcdefgh"), Ok(b"i")], vec![]),
        // Its first frame alone crosses the cap: the capture splits a frame it has read
        // nothing before (the other over-cap bodies cross at a frame boundary or after one).
        Outcome::OkFarOver => (
            vec![Ok(b"abcdefghijkl")],
            vec![Ok(b"mnopqrst"), Ok(b"uvwxyz01")],
        ),
        Outcome::OkErrorBeforeCap => (vec![Ok(b"abc"), Err(())], vec![]),
        Outcome::OkErrorAfterCap => (vec![Ok(b"abcdefgh"), Ok(b"ij")], vec![Err(())]),
        Outcome::FailUnder => (vec![Ok(b"bad gateway")], vec![]),
        Outcome::FailFarOver => (
            vec![Ok(b"abcdefgh"), Ok(b"ijklmnop"), Ok(b"qrstuvwx")],
            vec![],
        ),
        Outcome::HandlerError => (vec![], vec![]),
    }
}

/// The data bytes of an outcome's whole body, and whether it fails.
pub fn full_body(outcome: Outcome) -> (Vec<u8>, bool) {
    let (capture, tail) = body_of(outcome);
    let mut data = Vec::new();
    let mut failed = false;
    for item in capture.into_iter().chain(tail) {
        match item {
            Ok(bytes) => data.extend_from_slice(bytes),
            Err(()) => failed = true,
        }
    }
    if outcome == Outcome::HandlerError {
        data.extend_from_slice(HANDLER_ERROR_BODY);
    }
    (data, failed)
}

/// The bytes a client received of an outcome's body, by the parts the model says reached it:
/// the frames up to the cap (the capture's, which end the body for one within the cap) and the
/// tail. Exactly the whole body when it received every part the body has.
pub fn received_body(
    outcome: Outcome,
    received: oncecheck_model::idempotency::Received,
) -> (Vec<u8>, bool) {
    if received == oncecheck_model::idempotency::Received::exactly(outcome) {
        return full_body(outcome);
    }
    let (capture, tail) = body_of(outcome);
    let parts = [(received.head, capture), (received.tail, tail)];
    let mut data = Vec::new();
    let mut failed = false;
    for item in parts
        .into_iter()
        .filter(|(sent, _)| *sent)
        .flat_map(|(_, items)| items)
    {
        match item {
            Ok(bytes) => data.extend_from_slice(bytes),
            Err(()) => failed = true,
        }
    }
    (data, failed)
}

/// The value of [`HANDLER_HEADER`] on `outcome`'s response.
pub fn outcome_name(outcome: Outcome) -> String {
    format!("{outcome:?}")
}

/// The request body of a fingerprint: the fingerprint is method, path and body.
/// Each exactly [`REQUEST_BODY_BYTES_MAX`] bytes.
pub fn request_body(fingerprint: Fingerprint) -> &'static [u8] {
    match fingerprint {
        Fingerprint::A => b"A...............",
        Fingerprint::B => b"B...............",
    }
}

#[derive(Debug)]
pub struct ScriptedError;

impl std::fmt::Display for ScriptedError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the scripted handler's body failed, as the trace says")
    }
}

impl std::error::Error for ScriptedError {}

/// A scripted response body: frames as the trace releases them into its channel. A body that
/// ends without an error knows its length, as most handlers' bodies do (a buffer, a file): it
/// hints the bytes it has left exactly, so the layer in front of it must keep that framing.
pub struct ScriptedBody {
    frames: mpsc::UnboundedReceiver<Item>,
    hub: Arc<Hub>,
    client: usize,
    polled: bool,
    /// The data bytes not yet yielded, for a body that ends without an error; `None` for one
    /// that fails (it cannot promise a length it will not deliver).
    remaining_bytes: Option<u64>,
}

impl Body for ScriptedBody {
    type Data = Bytes;
    type Error = ScriptedError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        context: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, ScriptedError>>> {
        if !self.polled {
            self.polled = true;
            let client = self.client;
            self.hub
                .handler(client, |handler| handler.body_polled = true);
        }
        match self.frames.poll_recv(context) {
            Poll::Ready(Some(Ok(data))) => {
                if let Some(remaining) = self.remaining_bytes.as_mut() {
                    let length = data.len() as u64;
                    assert!(
                        length <= *remaining,
                        "a body yields no more than its length"
                    );
                    *remaining -= length;
                }
                Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(data)))))
            }
            Poll::Ready(Some(Err(()))) => Poll::Ready(Some(Err(ScriptedError))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }

    fn size_hint(&self) -> http_body::SizeHint {
        match self.remaining_bytes {
            Some(remaining) => http_body::SizeHint::with_exact(remaining),
            None => http_body::SizeHint::new(),
        }
    }
}

impl Drop for ScriptedBody {
    fn drop(&mut self) {
        let client = self.client;
        self.hub
            .handler(client, |handler| handler.body_dropped = true);
    }
}

/// Records a handler future dropped before it returned.
struct HandlerGuard {
    hub: Arc<Hub>,
    client: usize,
    returned: bool,
}

impl Drop for HandlerGuard {
    fn drop(&mut self) {
        let returned = self.returned;
        self.hub.handler(self.client, |handler| {
            if returned {
                handler.returned = true;
            } else {
                handler.dropped = true;
            }
        });
    }
}

/// The body senders of the 2xx responses, per client, for the trace's capture and tail steps.
pub type BodySenders =
    Arc<std::sync::Mutex<std::collections::BTreeMap<usize, mpsc::UnboundedSender<Item>>>>;

/// `atomic`: how the scripted handler writes its one effect (a row of the effect table naming its
/// client) in the request's effect transaction, uncommitted.
pub type EffectWriter<E> = Arc<
    dyn for<'a> Fn(
            &'a mut E,
            usize,
        )
            -> Pin<Box<dyn std::future::Future<Output = Result<(), String>> + Send + 'a>>
        + Send
        + Sync,
>;

/// The scripted handler.
async fn scripted<E: Send + 'static>(
    hub: Arc<Hub>,
    senders: BodySenders,
    effect: Option<EffectWriter<E>>,
    request: Request<axum::body::Body>,
) -> Result<Response<ScriptedBody>, ScriptedError> {
    let client: usize = request
        .headers()
        .get(CLIENT_HEADER)
        .and_then(|value| value.to_str().ok()?.parse().ok())
        .unwrap_or(usize::MAX);
    let directive = hub.handler_entered(client);
    let mut guard = HandlerGuard {
        hub: hub.clone(),
        client,
        returned: false,
    };
    let Ok(outcome) = directive.await else {
        return Err(ScriptedError);
    };
    if outcome == Outcome::HandlerError {
        guard.returned = true;
        return Err(ScriptedError);
    }
    // `atomic`: a 2xx's effect goes into the request's transaction (committed by the layer with
    // the row); a failure to write it is a 500, the effect not written.
    if let (Some(write), true) = (&effect, outcome.is_success()) {
        let scope = request
            .extensions()
            .get::<oncecheck_idempotency::EffectScope<E>>()
            .cloned()
            .ok_or(ScriptedError)?;
        let mut transaction = scope.transaction().await.map_err(|_| ScriptedError)?;
        write(&mut transaction, client)
            .await
            .map_err(|_| ScriptedError)?;
    }
    let (sender, frames) = mpsc::unbounded_channel();
    let status = if outcome.is_success() {
        senders
            .lock()
            .expect("the senders lock is never poisoned")
            .insert(client, sender);
        StatusCode::OK
    } else {
        // The layer hands a non-2xx through without reading it: its response is handed over at
        // the trace's capture step, whole.
        let gate = hub.capture_gate(client);
        if gate.await.is_err() {
            return Err(ScriptedError);
        }
        let (capture, tail) = body_of(outcome);
        for item in capture.into_iter().chain(tail) {
            let _ = sender.send(item);
        }
        StatusCode::from_u16(FAILURE_STATUS).expect("a valid status")
    };
    guard.returned = true;
    let (data, fails) = full_body(outcome);
    let mut response = Response::new(ScriptedBody {
        frames,
        hub: hub.clone(),
        client,
        polled: false,
        remaining_bytes: (!fails).then_some(data.len() as u64),
    });
    *response.status_mut() = status;
    response.headers_mut().insert(
        HANDLER_HEADER,
        http::HeaderValue::from_str(&outcome_name(outcome))
            .expect("an outcome name is a header value"),
    );
    Ok(response)
}

/// The replay's stand-in for the application's authentication layer, in front of the
/// idempotency layer as one would be: the principal [`PRINCIPAL_HEADER`] names, empty included,
/// becomes the request's `Principal`; a request without the header stays anonymous.
fn authenticate<B>(mut request: Request<B>) -> Request<B> {
    let named = request
        .headers()
        .get(PRINCIPAL_HEADER)
        .and_then(|value| value.to_str().ok())
        .map(str::to_string);
    if let Some(name) = named {
        request
            .extensions_mut()
            .insert(oncecheck_idempotency::Principal(name));
    }
    request
}

/// A running server: the layer over `store` on a loopback port.
pub struct Server {
    pub address: SocketAddr,
    pub senders: BodySenders,
    task: tokio::task::JoinHandle<()>,
}

impl Server {
    pub async fn start<St: oncecheck_idempotency::CacheStore>(
        layer: oncecheck_idempotency::IdempotencyLayer<St>,
        hub: Arc<Hub>,
        effect: Option<EffectWriter<St::Effect>>,
    ) -> std::io::Result<Server> {
        use tower::Layer;
        let senders: BodySenders = Arc::default();
        let handler = {
            let (hub, senders) = (hub.clone(), senders.clone());
            tower::service_fn(move |request| {
                scripted(hub.clone(), senders.clone(), effect.clone(), request)
            })
        };
        // The handler's error becomes the application's 500, as axum's error handling does it.
        let service =
            axum::error_handling::HandleError::new(layer.layer(handler), |ScriptedError| async {
                (
                    StatusCode::from_u16(HANDLER_ERROR_STATUS).expect("a valid status"),
                    HANDLER_ERROR_BODY,
                )
            });
        let service = tower::ServiceBuilder::new()
            .map_request(authenticate)
            .service(service);
        let router = axum::Router::new().route_service(ROUTE, service);
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
        let address = listener.local_addr()?;
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, router).await;
        });
        Ok(Server {
            address,
            senders,
            task,
        })
    }

    /// Releases frames of `client`'s body; `close` ends it after them.
    pub fn send_frames(&self, client: usize, items: Vec<Item>, close: bool) -> bool {
        let mut senders = self
            .senders
            .lock()
            .expect("the senders lock is never poisoned");
        let Some(sender) = senders.get(&client) else {
            return false;
        };
        for item in items {
            let _ = sender.send(item);
        }
        if close {
            senders.remove(&client);
        }
        true
    }

    pub fn stop(self) {
        self.task.abort();
    }
}

/// One model client's request over its own TCP connection; what it receives is recorded in the
/// hub. Aborting the returned task closes the connection.
pub fn send(
    address: SocketAddr,
    hub: Arc<Hub>,
    client: usize,
    fingerprint: Fingerprint,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let finished = exchange(address, &hub, client, fingerprint).await;
        hub.client(client, |progress| progress.finished = Some(finished));
    })
}

/// The sending half and the connection of one HTTP/1.1 client connection.
type ClientConnection = (
    hyper::client::conn::http1::SendRequest<http_body_util::Full<Bytes>>,
    hyper::client::conn::http1::Connection<
        hyper_util::rt::TokioIo<tokio::net::TcpStream>,
        http_body_util::Full<Bytes>,
    >,
);

/// Opens one client connection to the server; its connection future must run while a request
/// is on it (joined, or spawned).
async fn connect(address: SocketAddr) -> Result<ClientConnection, String> {
    let stream = tokio::net::TcpStream::connect(address)
        .await
        .map_err(|error| format!("connect: {error}"))?;
    hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
        .await
        .map_err(|error| format!("handshake: {error}"))
}

/// The request a client sends: the route, `key` as its idempotency key, `principal`'s
/// credentials, the fingerprint's body, and the model client it is, if any (a request of no
/// client has no [`CLIENT_HEADER`]).
fn post(
    address: SocketAddr,
    key: http::HeaderValue,
    principal: &str,
    client: Option<usize>,
    fingerprint: Fingerprint,
) -> Request<http_body_util::Full<Bytes>> {
    let mut request = Request::post(ROUTE)
        .header("host", address.to_string())
        .header("idempotency-key", key)
        .header(PRINCIPAL_HEADER, principal);
    if let Some(client) = client {
        request = request.header(CLIENT_HEADER, client.to_string());
    }
    request
        .body(http_body_util::Full::new(Bytes::from_static(request_body(
            fingerprint,
        ))))
        .expect("a valid request")
}

async fn exchange(
    address: SocketAddr,
    hub: &Hub,
    client: usize,
    fingerprint: Fingerprint,
) -> Result<Received, String> {
    use http_body_util::BodyExt;
    let (mut sender, connection) = connect(address).await?;
    let key = http::HeaderValue::from_static(KEY_ENCODINGS[client % KEY_ENCODINGS.len()]);
    let request = post(address, key, PRINCIPAL, Some(client), fingerprint);
    let exchange = async move {
        let response = sender
            .send_request(request)
            .await
            .map_err(|error| format!("no response: {error}"))?;
        let status = response.status().as_u16();
        let marker = response
            .headers()
            .get(REPLAYED_HEADER)
            .map(|value| String::from_utf8_lossy(value.as_bytes()).into_owned());
        let handler_header = response
            .headers()
            .get(HANDLER_HEADER)
            .map(|value| String::from_utf8_lossy(value.as_bytes()).into_owned());
        let content_length = response
            .headers()
            .get(http::header::CONTENT_LENGTH)
            .map(|value| String::from_utf8_lossy(value.as_bytes()).into_owned());
        hub.client(client, |progress| {
            progress.head = Some((status, marker.clone()))
        });
        let mut body = response.into_body();
        let mut data = Vec::new();
        let mut body_failed = false;
        while let Some(frame) = body.frame().await {
            match frame {
                Ok(frame) => {
                    if let Ok(bytes) = frame.into_data() {
                        data.extend_from_slice(&bytes);
                    }
                }
                Err(_) => {
                    body_failed = true;
                    break;
                }
            }
        }
        Ok(Received {
            status,
            marker,
            handler_header,
            content_length,
            body: data,
            body_failed,
        })
    };
    let (_, received) = tokio::join!(connection, exchange);
    received
}

/// A request the layer must refuse before it claims anything, and how.
pub struct RefusedRequest {
    /// What is wrong with it, as a divergence names it.
    pub what: &'static str,
    pub key: http::HeaderValue,
    pub principal: &'static str,
    pub status: u16,
    /// The problem type's last path segment (`#invalid-key`).
    pub problem: &'static str,
}

/// The requests the layer must refuse (specs/idempotency-middleware.md, the HTTP contract), each
/// at the edge of the domain the model's one key and one principal stand in for: a key one
/// character longer than the longest, a key character that is not visible ASCII, nothing
/// between the quotes (400 `invalid-key`); credentials that name no one (401
/// `empty-principal`: an empty principal would share the anonymous caller's rows).
pub fn refused_requests() -> [RefusedRequest; 4] {
    let too_long = format!("{KEY}x");
    assert_eq!(too_long.len(), KEY_CHARS_MAX_SPEC + 1);
    let invalid_key = |what, key| RefusedRequest {
        what,
        key,
        principal: PRINCIPAL,
        status: 400,
        problem: "invalid-key",
    };
    [
        invalid_key(
            "a key one character longer than the longest",
            http::HeaderValue::from_str(&too_long).expect("visible ASCII"),
        ),
        invalid_key(
            "a key with a byte that is not visible ASCII",
            http::HeaderValue::from_bytes(b"k\xe9y").expect("obs-text is a header value"),
        ),
        invalid_key("an empty key", http::HeaderValue::from_static("\"\"")),
        RefusedRequest {
            what: "credentials with an empty principal",
            key: http::HeaderValue::from_static(KEY_ENCODINGS[0]),
            principal: "",
            status: 401,
            problem: "empty-principal",
        },
    ]
}

/// How long a refused key's request may take: the layer refuses it before anything else.
const REFUSED_KEY_WAIT_MILLIS_MAX: u64 = 5_000;

/// Sends one refused request (a request of no model client), answering its status and body, or
/// why there is none.
pub async fn send_refused(
    address: SocketAddr,
    refused: &RefusedRequest,
    fingerprint: Fingerprint,
) -> Result<(u16, String), String> {
    use http_body_util::BodyExt;
    let request = post(
        address,
        refused.key.clone(),
        refused.principal,
        None,
        fingerprint,
    );
    let exchange = async move {
        let (mut sender, connection) = connect(address).await?;
        tokio::spawn(connection);
        let response = sender
            .send_request(request)
            .await
            .map_err(|error| format!("no response: {error}"))?;
        let status = response.status().as_u16();
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(|error| format!("the body failed: {error}"))?
            .to_bytes();
        Ok((status, String::from_utf8_lossy(&body).into_owned()))
    };
    let wait = std::time::Duration::from_millis(REFUSED_KEY_WAIT_MILLIS_MAX);
    match tokio::time::timeout(wait, exchange).await {
        Ok(answered) => answered,
        Err(_) => Err(format!("no answer within {REFUSED_KEY_WAIT_MILLIS_MAX} ms")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The encodings differ on the wire and agree as a key: each has a character the other
    // writes differently, so a replay compares the layer's parse, not one spelling of it.
    #[test]
    fn every_client_key_encoding_is_the_one_key() {
        for encoding in KEY_ENCODINGS {
            assert_eq!(
                oncecheck_idempotency::key::parse_value(encoding.as_bytes()),
                Ok(KEY.to_string()),
                "{encoding:?}"
            );
        }
        assert_ne!(KEY_ENCODINGS[0].trim(), KEY_ENCODINGS[1].trim());
        assert!(KEY.contains('"'));
        assert!(KEY.contains('\\'));
    }

    // The replays' key and request bodies sit exactly at the spec's limits, and one character
    // or byte more is refused by the layer: the edge a replay stands on is the real one.
    #[test]
    fn the_key_and_the_request_bodies_sit_exactly_at_their_limits() {
        assert_eq!(KEY.len(), KEY_CHARS_MAX_SPEC);
        let longer = format!("{KEY}x");
        assert_eq!(
            oncecheck_idempotency::key::parse_value(longer.as_bytes()),
            Err(oncecheck_idempotency::key::KeyError::TooLong)
        );
        for fingerprint in [Fingerprint::A, Fingerprint::B] {
            assert_eq!(request_body(fingerprint).len(), REQUEST_BODY_BYTES_MAX);
        }
        assert_ne!(request_body(Fingerprint::A), request_body(Fingerprint::B));
    }
}
