//! The conformance proxy: a trace-directed DynamoDB endpoint between the real store's
//! aws-sdk-dynamodb clients and a real DynamoDB-compatible server (moto in CI). It is the only
//! way replays reach DynamoDB: the actors' requests, the set-up of a trace's table and the reads
//! of its committed state all pass here.
//!
//! Every actor (one writer or reader of a replay) gets its own loopback listener, so a request is
//! attributed to its actor by the port it arrived on. A request is **held**: its client stays
//! blocked until the replayer, stepping through a trace, takes it ([`Proxy::next_request`]),
//! decides what the model does with it and answers it. The proxy then makes the server behave as
//! AWS documents but emulators do not:
//!
//! - **the visibility window** (`window`): a committed transaction's written items are held
//!   *pending* until the trace applies them one at a time ([`Proxy::apply`]); Query, GetItem and
//!   BatchGetItem answer the visible state, where a pending item shows its pre-image (or is
//!   absent if it had none);
//! - **conflicts**: [`Proxy::conflict_answer`], [`Answer::cancelled`] and [`Answer::conflict`]
//!   synthesise the TransactionCanceledException / TransactionConflictException DynamoDB answers
//!   a write touching a pending item with;
//! - **lost responses**: [`Proxy::lose`] closes the client's connection after the commit, without
//!   an HTTP response, so the SDK sees an I/O (dispatch) error: an unknown outcome;
//!   [`Proxy::stall`] answers nothing until the client's own timeout gives up (a timeout error);
//! - **client request tokens** (`tokens`): DynamoDB's ClientRequestToken rules for
//!   TransactWriteItems, with the token record committed in the same transaction as the effects,
//!   a token clock only the trace moves ([`Proxy::set_token_clock`]), a switch
//!   ([`Proxy::set_token_table`]), and [`Proxy::begin`], the hold that makes a running
//!   transaction observable (TransactionInProgress, TransactionConflict).
//!
//! One file per job: `wire` (DynamoDB JSON views and answer shapes), `key_condition` (the Query
//! key-condition parser), `window` (the pending items and the rewrites of reads over them),
//! `upstream` (forwarding, one exchange at a time), `server` (the listeners and held requests),
//! `tokens` (the token table and the locks of begun transactions), `signing` (SigV4 for the
//! upstream), `error_chain` (an error and its causes on one line). This file joins them.
//!
//! The files import each other downward only (`tests/architecture.rs` checks it): `wire` imports
//! none of them; `key_condition` imports `wire`; `window` imports both; `error_chain` imports
//! none, `signing` imports it, `upstream` imports both and `wire`; `server` (the held request and
//! its views) imports `wire`, `key_condition` and `upstream`; `tokens` imports `server`,
//! `upstream` and `wire`. Every file uses this file's `ProxyError` and `ProxyLimits`.
//!
//! # Invariants
//!
//! - **Serialised upstream** (`upstream`): at most one request is in flight to the server, also
//!   when a client goes away mid-exchange (the exchange runs to its end holding the turn).
//! - **Answered exactly once** (`server`): every held request gets exactly one answer.
//! - **Reads never show a pending item's new image** (`window`): a read the proxy cannot rewrite
//!   faithfully (Scan, TransactGetItems, projections, filters, indexes) is refused with
//!   [`ProxyError::Unsupported`] while anything it covers is pending, never passed through.
//! - **Writes never reach past the window**: [`Proxy::forward`] refuses a write that touches a
//!   pending item ([`ProxyError::WritesPending`]); the model answers it with a conflict, which
//!   the replayer synthesises.
//! - **Signed for the upstream when signing is on** (`signing`, used by `upstream`): every
//!   forwarded request is SigV4-signed afresh for the upstream's host (AWS itself; see
//!   docs/aws.md), since the client's own signature fits neither the host nor a rewritten body.
//!
//! # Limits
//!
//! Every queue and wait is bounded ([`ProxyLimits`]): `held_requests_max` requests queued per
//! actor, `request_wait_millis_max` for a held client, `body_bytes_max` per request or response
//! body, `upstream_wait_millis_max` per upstream exchange (and for the turn), `upstream_pages_max`
//! pages per multi-page read. Note that the store's SDK client gives up on a request after its own
//! attempt timeout (5 s): a replay step must answer a held request within that.

mod error_chain;
mod key_condition;
mod server;
mod tokens;
mod upstream;
mod window;
mod wire;

pub mod signing;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

pub use key_condition::{QueryView, SeqCondition};
pub use server::HeldRequest;
pub use tokens::{fingerprint, TOKEN_CHARS_MAX, TOKEN_TABLE_PREFIX, TOKEN_WINDOW_MILLIS};
pub use wire::{Answer, Item, ItemKey, PreImage, ReasonCode, TransactItemView, TransactKind};

use server::{accept_loop, Intake, Reply, Route};
use tokens::{Screen, Tokens};
use upstream::{Turn, Upstream};
use window::Window;

/// Requests queued per actor before the proxy refuses more (a replay holds one or two).
pub const HELD_REQUESTS_MAX_DEFAULT: usize = 64;
/// How long a client is held before the proxy gives up on the replayer and closes its connection.
pub const REQUEST_WAIT_MILLIS_MAX_DEFAULT: u64 = 60_000;
/// Largest request or response body: DynamoDB's own request limit is 16 MB.
pub const BODY_BYTES_MAX_DEFAULT: usize = 16 * 1024 * 1024;
/// One upstream exchange, and the wait for the upstream turn.
pub const UPSTREAM_WAIT_MILLIS_MAX_DEFAULT: u64 = 10_000;
/// Pages of one multi-page upstream read (Query without its Limit, Scan).
pub const UPSTREAM_PAGES_MAX_DEFAULT: usize = 1_000;
/// Listeners one proxy opens at most.
pub const ACTORS_MAX: usize = 64;

/// The bounds of one proxy.
#[derive(Debug, Clone)]
pub struct ProxyLimits {
    pub held_requests_max: usize,
    pub request_wait_millis_max: u64,
    pub body_bytes_max: usize,
    pub upstream_wait_millis_max: u64,
    pub upstream_pages_max: usize,
}

impl Default for ProxyLimits {
    fn default() -> ProxyLimits {
        ProxyLimits {
            held_requests_max: HELD_REQUESTS_MAX_DEFAULT,
            request_wait_millis_max: REQUEST_WAIT_MILLIS_MAX_DEFAULT,
            body_bytes_max: BODY_BYTES_MAX_DEFAULT,
            upstream_wait_millis_max: UPSTREAM_WAIT_MILLIS_MAX_DEFAULT,
            upstream_pages_max: UPSTREAM_PAGES_MAX_DEFAULT,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    #[error("actor {actor} sent no request within {waited:?}")]
    Timeout { actor: usize, waited: Duration },
    #[error("there is no actor {actor}: the proxy listens for actors 0..{actors}")]
    UnknownActor { actor: usize, actors: usize },
    #[error("the proxy serves 1..={ACTORS_MAX} actors, not {0}")]
    ActorCount(usize),
    #[error("malformed request: {0}")]
    Malformed(String),
    #[error("the proxy cannot do this faithfully: {0}")]
    Unsupported(String),
    #[error("upstream: {0}")]
    Upstream(String),
    #[error("item {0} is not pending")]
    NotPending(ItemKey),
    #[error("item {0} is already pending (a committed transaction holds it until applied)")]
    AlreadyPending(ItemKey),
    #[error("{operation} touches pending item {key}: DynamoDB cancels it with a conflict (see Proxy::conflict_answer); it is not forwarded")]
    WritesPending { operation: String, key: ItemKey },
    #[error("the {operation} of actor {actor} was not delivered: its client is gone (timed out or disconnected)")]
    ClientGone { actor: usize, operation: String },
    #[error("listening on loopback: {0}")]
    Listen(String),
}

struct Port {
    address: SocketAddr,
    /// Kept to read the queue's length: capacity used = requests waiting.
    sender: mpsc::Sender<HeldRequest>,
    receiver: tokio::sync::Mutex<mpsc::Receiver<HeldRequest>>,
}

/// The proxy. Dropping it stops every listener and closes every connection.
pub struct Proxy {
    upstream: Arc<Upstream>,
    window: Window,
    tokens: Tokens,
    ports: Vec<Port>,
    set_up_address: SocketAddr,
    servers: Vec<JoinHandle<()>>,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        // Aborting an accept loop drops its JoinSet, which aborts its connections.
        for server in &self.servers {
            server.abort();
        }
    }
}

async fn listen() -> Result<(tokio::net::TcpListener, SocketAddr), ProxyError> {
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
        .await
        .map_err(|error| ProxyError::Listen(error.to_string()))?;
    let address = listener
        .local_addr()
        .map_err(|error| ProxyError::Listen(error.to_string()))?;
    Ok((listener, address))
}

impl Proxy {
    /// Starts one loopback listener per actor, and the set-up listener, in front of `upstream`
    /// (the server's URL).
    pub async fn start(upstream: &str, actors: usize) -> Result<Proxy, ProxyError> {
        Proxy::start_with(upstream, actors, ProxyLimits::default()).await
    }

    pub async fn start_with(
        upstream: &str,
        actors: usize,
        limits: ProxyLimits,
    ) -> Result<Proxy, ProxyError> {
        if actors == 0 || actors > ACTORS_MAX {
            return Err(ProxyError::ActorCount(actors));
        }
        let upstream = Arc::new(Upstream::new(upstream, &limits)?);
        let queue_max = limits.held_requests_max.max(1);
        let intake = Arc::new(Intake::new(limits, upstream.clone()));
        let mut ports = Vec::with_capacity(actors);
        let mut servers = Vec::with_capacity(actors + 1);
        for actor in 0..actors {
            let (listener, address) = listen().await?;
            let (sender, receiver) = mpsc::channel(queue_max);
            servers.push(tokio::spawn(accept_loop(
                listener,
                Route::Held {
                    actor,
                    sender: sender.clone(),
                },
                intake.clone(),
            )));
            ports.push(Port {
                address,
                sender,
                receiver: tokio::sync::Mutex::new(receiver),
            });
        }
        let (listener, set_up_address) = listen().await?;
        servers.push(tokio::spawn(accept_loop(listener, Route::Direct, intake)));
        Ok(Proxy {
            upstream,
            window: Window::default(),
            tokens: Tokens::new(),
            ports,
            set_up_address,
            servers,
        })
    }

    pub fn actors(&self) -> usize {
        self.ports.len()
    }

    /// The URL `actor`'s client talks to: `http://127.0.0.1:PORT`.
    ///
    /// Panics if `actor` is out of range (a bug in the caller: the actor count is its own choice).
    pub fn endpoint(&self, actor: usize) -> String {
        assert!(
            actor < self.ports.len(),
            "actor {actor} of {}",
            self.ports.len()
        );
        format!("http://{}", self.ports[actor].address)
    }

    /// The URL of the set-up listener: requests there go upstream at once, as sent, past the
    /// window (the committed state). For the replayer's own set-up and observation, never for an
    /// actor.
    pub fn set_up_endpoint(&self) -> String {
        format!("http://{}", self.set_up_address)
    }

    /// Checks that the upstream answers (a ListTables of one table).
    pub async fn check_upstream(&self) -> Result<(), ProxyError> {
        let turn = self.upstream.turn().await?;
        let answer = self
            .upstream
            .own_request(&turn, "ListTables", &json!({ "Limit": 1 }))
            .await?;
        if answer.is_success() {
            Ok(())
        } else {
            Err(ProxyError::Upstream(format!(
                "ListTables answered HTTP {}: {}",
                answer.status, answer.body
            )))
        }
    }

    fn port(&self, actor: usize) -> Result<&Port, ProxyError> {
        self.ports.get(actor).ok_or(ProxyError::UnknownActor {
            actor,
            actors: self.ports.len(),
        })
    }

    /// The next request `actor` sent that has not been taken, waiting up to `timeout`.
    pub async fn next_request(
        &self,
        actor: usize,
        timeout: Duration,
    ) -> Result<HeldRequest, ProxyError> {
        let port = self.port(actor)?;
        let waited = async {
            let mut receiver = port.receiver.lock().await;
            receiver.recv().await
        };
        match tokio::time::timeout(timeout, waited).await {
            Ok(Some(request)) => Ok(request),
            // The accept loop holds a sender for as long as the proxy lives.
            Ok(None) => Err(ProxyError::Listen(format!(
                "actor {actor}'s listener has stopped"
            ))),
            Err(_elapsed) => Err(ProxyError::Timeout {
                actor,
                waited: timeout,
            }),
        }
    }

    /// Upstream exchanges so far whose operation may write (every operation but GetItem,
    /// BatchGetItem, Query, Scan, TransactGetItems, DescribeTable, ListTables), whoever sent
    /// them: an actor's forwarded request, the set-up listener's, the proxy's own. Two equal
    /// counts bracket a stretch in which nothing was written through this proxy.
    pub fn writes_sent(&self) -> u64 {
        self.upstream.writes_sent()
    }

    /// Whether `actor` has a request waiting to be taken, now.
    pub fn has_request(&self, actor: usize) -> bool {
        self.port(actor)
            .map(|port| port.sender.capacity() < port.sender.max_capacity())
            .unwrap_or(false)
    }

    /// Sends the request upstream and answers the upstream answer without delivering it.
    ///
    /// Reads answer the visible state (see the module doc); a write touching a pending item is
    /// refused with [`ProxyError::WritesPending`].
    pub async fn forward(&self, request: &HeldRequest) -> Result<Answer, ProxyError> {
        let turn = self.upstream.turn().await?;
        self.forward_in_turn(&turn, request).await
    }

    /// For a TransactWriteItems that the trace commits: reads the pre-images of the items it
    /// writes, forwards it, and on success holds those items pending, all in one upstream turn
    /// (so nothing can slip between the image read and the commit). Answers the upstream answer
    /// and the keys now pending (none if it did not commit).
    pub async fn forward_holding(
        &self,
        request: &HeldRequest,
    ) -> Result<(Answer, Vec<ItemKey>), ProxyError> {
        let written: Vec<TransactItemView> = request
            .transact_items()?
            .into_iter()
            .filter(|item| item.kind.writes())
            .collect();
        let turn = self.upstream.turn().await?;
        let keys: Vec<(String, ItemKey)> = written
            .iter()
            .map(|item| (item.table.clone(), item.key.clone()))
            .collect();
        let images = self.upstream.read_images(&turn, &keys).await?;
        let answer = self.forward_in_turn(&turn, request).await?;
        if !answer.is_success() {
            return Ok((answer, Vec::new()));
        }
        let keys = images.iter().map(|image| image.key.clone()).collect();
        self.window.hold(images)?;
        Ok((answer, keys))
    }

    /// Reads (one consistent BatchGetItem, upstream) the current image of every key, in one turn.
    pub async fn read_images(
        &self,
        table: &str,
        keys: &[ItemKey],
    ) -> Result<Vec<PreImage>, ProxyError> {
        let turn = self.upstream.turn().await?;
        let keys: Vec<(String, ItemKey)> = keys
            .iter()
            .map(|key| (table.to_owned(), key.clone()))
            .collect();
        self.upstream.read_images(&turn, &keys).await
    }

    /// Makes the images' keys pending: reads show the pre-images until [`Proxy::apply`].
    /// All or nothing: a key already pending refuses the whole set.
    pub fn hold_pending(&self, images: Vec<PreImage>) -> Result<(), ProxyError> {
        self.window.hold(images)
    }

    /// The pending item becomes visible (the trace's ItemApplied step). The server already holds
    /// its new image, so nothing goes upstream.
    pub fn apply(&self, key: &ItemKey) -> Result<(), ProxyError> {
        self.window.apply(key)
    }

    /// The pending keys, in key order.
    pub fn pending(&self) -> Vec<ItemKey> {
        self.window.keys()
    }

    /// The answer DynamoDB gives a write that touches pending items, or `None` if it touches none.
    pub fn conflict_answer(&self, request: &HeldRequest) -> Result<Option<Answer>, ProxyError> {
        Ok(self
            .window
            .conflict_answer(&request.operation, &request.touched_keys()?))
    }

    /// Turns DynamoDB's token rules on (the default) or off: off, a tokened TransactWriteItems
    /// passes through as sent, and the endpoint's own token handling shows (see `tokens`).
    pub fn set_token_table(&self, on: bool) {
        self.tokens.set_enabled(on);
    }

    /// The token clock: the time every token's window is decided on. It starts at 0 and moves
    /// only here, so a trace's "the window passes" is one call.
    pub fn set_token_clock(&self, now: Duration) {
        self.tokens.set_clock(now);
    }

    pub fn token_clock(&self) -> Duration {
        self.tokens.clock()
    }

    /// The trace's "server starts" step for a held TransactWriteItems: its token is running and
    /// the items it touches are locked until it is forwarded or answered. Meanwhile the same
    /// token is answered TransactionInProgress (or IdempotentParameterMismatch with other
    /// parameters), and a write touching its items TransactionConflict.
    pub async fn begin(&self, request: &HeldRequest) -> Result<(), ProxyError> {
        let turn = self.upstream.turn().await?;
        self.tokens.begin(&self.upstream, &turn, request).await
    }

    fn reply(&self, request: HeldRequest, reply: Reply) -> Result<(), ProxyError> {
        self.tokens.finish(request.id);
        request
            .reply
            .send(reply)
            .map_err(|_| ProxyError::ClientGone {
                actor: request.actor,
                operation: request.operation,
            })
    }

    /// Delivers `answer` to the request's client.
    pub fn deliver(&self, request: HeldRequest, answer: Answer) -> Result<(), ProxyError> {
        self.reply(request, Reply::Deliver(answer))
    }

    /// Loses the response: closes the client's connection without an HTTP response, so its SDK
    /// sees an I/O error (an unknown outcome).
    pub fn lose(&self, request: HeldRequest) -> Result<(), ProxyError> {
        self.reply(request, Reply::Lose)
    }

    /// Loses the response before the request is processed (the trace's client gives up on a
    /// request still pending or running): the client sees its connection closed now, and the
    /// request stays with the replayer, to be processed later or dropped; its answer then goes
    /// nowhere (a later `deliver` or `lose` reports [`ProxyError::ClientGone`]). A begun
    /// transaction stays running.
    pub fn lose_early(&self, request: HeldRequest) -> Result<HeldRequest, ProxyError> {
        let HeldRequest {
            id,
            actor,
            operation,
            body,
            path,
            headers,
            raw,
            reply,
        } = request;
        reply
            .send(Reply::Lose)
            .map_err(|_| ProxyError::ClientGone {
                actor,
                operation: operation.clone(),
            })?;
        let (reply, _nobody) = tokio::sync::oneshot::channel();
        Ok(HeldRequest {
            id,
            actor,
            operation,
            body,
            path,
            headers,
            raw,
            reply,
        })
    }

    /// Deletes the token table's side table on the upstream, if this proxy created one (the
    /// proxy cannot on drop: that needs a request). Call it when done with the proxy.
    pub async fn delete_token_table(&self) -> Result<(), ProxyError> {
        let turn = self.upstream.turn().await?;
        self.tokens.delete_table(&self.upstream, &turn).await
    }

    /// The environment damages the creation time of `token`'s record (the token model's
    /// RecordLosesTimestamp): the record stays, and every later request meeting it fails closed.
    pub async fn damage_token_record(&self, token: &str) -> Result<(), ProxyError> {
        let turn = self.upstream.turn().await?;
        self.tokens.damage(&self.upstream, &turn, token).await
    }

    /// Loses the response by silence: the connection stays open without an answer until the
    /// client's own attempt timeout gives up on it (the proxy closes it after
    /// `request_wait_millis_max` at the latest), so the SDK sees a timeout: an unknown outcome
    /// that takes the client's timeout path rather than its I/O-error path.
    pub fn stall(&self, request: HeldRequest) -> Result<(), ProxyError> {
        self.reply(request, Reply::Stall)
    }

    /// See [`Answer::cancelled`].
    pub fn cancelled(reasons: &[(ReasonCode, Option<Item>)]) -> Answer {
        Answer::cancelled(reasons)
    }

    /// See [`Answer::conflict`].
    pub fn conflict() -> Answer {
        Answer::conflict()
    }

    /// The answer for a request the proxy could not serve (a [`ProxyError`] met while forwarding
    /// it): a 400 of the proxy's own type, which no client retries.
    pub fn fault(message: &str) -> Answer {
        Answer::error(
            400,
            "oncecheck.proxy#ProxyFault",
            &format!("oncecheck proxy: {message}"),
        )
    }

    /// See [`Answer::throttled`].
    pub fn throttled() -> Answer {
        Answer::throttled()
    }

    /// Every item of `table` as the server holds it (consistent Scan, all pages, sorted by key),
    /// bypassing the window: the committed state.
    pub async fn scan_upstream(&self, table: &str) -> Result<Vec<Item>, ProxyError> {
        let turn = self.upstream.turn().await?;
        self.upstream.scan(&turn, table).await
    }

    /// The token table's rules first (`tokens`), then the request as the window shows it.
    async fn forward_in_turn(
        &self,
        turn: &Turn<'_>,
        request: &HeldRequest,
    ) -> Result<Answer, ProxyError> {
        let screened = self.tokens.screen(&self.upstream, turn, request).await;
        let answer = match screened {
            Ok(Screen::Answer(answer)) => Ok(answer),
            Ok(Screen::Forward) => self.forward_visible(turn, request).await,
            Ok(Screen::Record { body, client_items }) => {
                match self.refuse_pending_writes(request) {
                    Ok(()) => self
                        .upstream
                        .exchange(
                            turn,
                            &request.path,
                            &request.headers,
                            &request.operation,
                            &body,
                        )
                        .await
                        .map(|answer| self.tokens.settle(answer, client_items)),
                    Err(error) => Err(error),
                }
            }
            Err(error) => Err(error),
        };
        // A begun request has run once it went upstream or was answered here.
        self.tokens.finish(request.id);
        answer
    }

    /// A write touching a pending item is refused: the model answers it with a conflict.
    fn refuse_pending_writes(&self, request: &HeldRequest) -> Result<(), ProxyError> {
        // Nothing pending, nothing to refuse: and the keys of tables outside the relay's
        // schema (the token traces', the probe's) are never parsed.
        if self.window.keys().is_empty() {
            return Ok(());
        }
        let touched = request.touched_keys()?;
        let held = self.window.held_among(&touched);
        if let Some((_, key)) = touched
            .into_iter()
            .zip(held)
            .find_map(|(touched, held)| held.then_some(touched))
        {
            return Err(ProxyError::WritesPending {
                operation: request.operation.clone(),
                key,
            });
        }
        Ok(())
    }

    async fn forward_visible(
        &self,
        turn: &Turn<'_>,
        request: &HeldRequest,
    ) -> Result<Answer, ProxyError> {
        // Nothing pending: every read already shows the visible state, so it goes as sent, and
        // tables outside the relay's key schema (the probe's, the token traces') work too.
        if self.window.keys().is_empty() {
            return self.pass_through(turn, request).await;
        }
        match request.operation.as_str() {
            "Query" => self.forward_query(turn, request).await,
            "GetItem" => self.forward_get(turn, request).await,
            "BatchGetItem" => self.forward_batch_get(turn, request).await,
            "Scan" | "TransactGetItems" => {
                if let Some(key) = self.window.keys().into_iter().next() {
                    return Err(ProxyError::Unsupported(format!(
                        "{} while {key} is pending: the proxy shows the window to Query, GetItem and BatchGetItem only",
                        request.operation
                    )));
                }
                self.pass_through(turn, request).await
            }
            _ => {
                self.refuse_pending_writes(request)?;
                self.pass_through(turn, request).await
            }
        }
    }

    /// A Query over the visible state. Without a pending item in its range it goes upstream as
    /// sent. Otherwise it goes without its Limit (all pages from the client's start key) and the
    /// window rewrites the answer.
    async fn forward_query(
        &self,
        turn: &Turn<'_>,
        request: &HeldRequest,
    ) -> Result<Answer, ProxyError> {
        let view = request.query()?;
        let hidden = self.window.pending_in(&view.table, |key| {
            key.stream == view.stream && view.covers(key.seq)
        });
        if hidden.is_empty() {
            return self.pass_through(turn, request).await;
        }
        window::check_query_rewritable(&request.body)?;
        let mut body = request.body.clone();
        body.as_object_mut()
            .ok_or_else(|| ProxyError::Malformed("a Query body that is not an object".into()))?
            .remove("Limit");
        let mut items: Vec<Item> = Vec::new();
        let mut pages = 0;
        loop {
            pages += 1;
            if pages > self.upstream.pages_max() {
                return Err(ProxyError::Upstream(format!(
                    "the Query took more than upstream_pages_max = {} pages",
                    self.upstream.pages_max()
                )));
            }
            let answer = self
                .upstream
                .exchange(turn, &request.path, &request.headers, "Query", &body)
                .await?;
            if !answer.is_success() {
                // The server refused the Query itself: that is the client's answer.
                return Ok(answer);
            }
            items.extend(wire::page_items(&answer)?);
            match answer.body.get("LastEvaluatedKey") {
                Some(last) if last.as_object().is_some_and(|last| !last.is_empty()) => {
                    body["ExclusiveStartKey"] = last.clone()
                }
                _ => break,
            }
        }
        window::visible_query_answer(&view, items, hidden)
    }

    /// A GetItem over the visible state: a pending item answers its pre-image (or no Item).
    async fn forward_get(
        &self,
        turn: &Turn<'_>,
        request: &HeldRequest,
    ) -> Result<Answer, ProxyError> {
        let key = request.key()?;
        let table = request
            .table()
            .ok_or_else(|| ProxyError::Malformed("GetItem without TableName".into()))?;
        let hidden = self.window.pending_in(&table, |pending| *pending == key);
        // Forwarded even when pending, so the server still judges the request (a missing table).
        let answer = self.pass_through(turn, request).await?;
        match hidden.into_values().next() {
            None => Ok(answer),
            Some(pre_image) => window::visible_get_answer(&request.body, &key, answer, pre_image),
        }
    }

    /// A BatchGetItem over the visible state: pending items answer their pre-images.
    async fn forward_batch_get(
        &self,
        turn: &Turn<'_>,
        request: &HeldRequest,
    ) -> Result<Answer, ProxyError> {
        let mut hidden: BTreeMap<String, BTreeMap<ItemKey, Option<Item>>> = BTreeMap::new();
        for (table, key) in request.batch_get_keys()? {
            let pending = self.window.pending_in(&table, |pending| *pending == key);
            if !pending.is_empty() {
                hidden.entry(table).or_default().extend(pending);
            }
        }
        let answer = self.pass_through(turn, request).await?;
        window::visible_batch_get_answer(&request.body, answer, hidden)
    }

    /// The request as the client sent it, body bytes untouched.
    async fn pass_through(
        &self,
        turn: &Turn<'_>,
        request: &HeldRequest,
    ) -> Result<Answer, ProxyError> {
        self.upstream
            .send(turn, &request.path, &request.headers, request.raw.clone())
            .await
    }
}
