//! The `tokened-dynamodb[=URL]` target: token-model traces (`oncecheck traces token`) replayed
//! against the reliable-write client (`impl/tokened`) and plain SDK clients, through the
//! conformance proxy with its token table, on a real DynamoDB-compatible server.
//!
//! Every model client is one proxy actor. Which real client it is follows the model's pattern:
//!
//! - the tokened transaction of the `tokened` variant is the **reliable-write client**
//!   (`ReliableWriter::write`, a journal of its own, the writer's clock moved by the trace): its
//!   first submission is the model's ClientSends and each of its own identical resends a
//!   ClientRetries, so the retries the model shows are the ones the real client makes;
//! - every other pattern is a **plain SDK client** doing exactly what the model's client does
//!   (the rows of the retry table, and the mistakes of the `tokenless` and `late-retry`
//!   variants: a tokenless resend, a tokened resend after the window). Before each such retry
//!   the target asks the retry table (`oncecheck_tokened::retry_plan`): the patterns the model
//!   shows double-applying (ADD, the tokenless transaction) must be refused by it, the others
//!   allowed, or the replay diverges. The counterexamples of `tokenless` and `late-retry` then
//!   reproduce the double apply on the real table.
//!
//! The server's steps are the proxy's: ServerBegins is [`Proxy::begin`] (a transaction running,
//! its token in progress, its items locked), ServerCommits / ServerReplays / ServerRejects are
//! [`Proxy::forward`] with the answer checked against the model's, ResponseLost is
//! [`Proxy::lose`] (or [`Proxy::lose_early`] before the request was processed), ClockTicks moves
//! the proxy's token clock and the writers' clock by `10 minutes / window` and drops what the
//! model drops, RecordLosesTimestamp is [`Proxy::damage_token_record`].
//!
//! The view compared after every step: per client, how often its write was applied to each of
//! its items (a fixed put converges, so its count is not observable and is left out: the
//! profile's holder is compared instead), and who holds the profile and the order.
//!
//! The reliable-write client never rebuilds a request; the model's rebuilt retry of that client
//! (the mistake T2 guards against) is made by another process under the same token: a plain SDK
//! client on an actor of its own, so the writer's own resends never mix with it.
//!
//! Not applicable, with the reason: host clock skew, tokens shared by two intents, over-long
//! tokens.
//!
//! Invariants: a trace replays on a table, a proxy and journals of its own; every request the
//! target takes is answered, lost or dropped exactly as the model says; the target never passes
//! a server step whose real answer differs from the model's.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, KeySchemaElement, KeyType, Put,
    ScalarAttributeType, TransactWriteItem, Update,
};
use aws_sdk_dynamodb::Client;
use oncecheck_idempotency::ManualClock;
use oncecheck_model::check::ModelSpec;
use oncecheck_model::token::{
    Action, Answer as ModelAnswer, ClientId, Pattern, TokenModel, TokenState,
};
use oncecheck_model::trace::LoadedTrace;
use oncecheck_tokened::{
    classify_item, retry_plan, Intent, Journal, Limits, ReconcileCheck, ReliableWriter,
};
use tokio::task::JoinHandle;

use crate::proxy::{Answer, HeldRequest, Proxy, TOKEN_WINDOW_MILLIS};
use crate::replay::driver::{Fault, ReplayTarget, Step};

/// How long a step waits for a client's request to reach the proxy.
const REQUEST_WAIT_MILLIS_MAX: u64 = 4_000;
const KEY: &str = "pk";

/// What every trace of one `oncecheck replay --target tokened-dynamodb=URL` run shares.
pub struct TokenContext {
    pub upstream: String,
    /// The `--target` text, for the replay command of a divergence.
    pub target: String,
    /// The proxy's token table (on for every replay the command runs; off shows what the
    /// replay finds without DynamoDB's token rules).
    pub token_table: bool,
    /// The client every real client of a replay is derived from, each given a proxy listener's
    /// endpoint ([`client_at`]): one attempt per request, the store's timeouts.
    pub template: Client,
}

/// A client like `template`, talking to `endpoint` (a proxy listener). The one place a token
/// replay sets an endpoint.
fn client_at(template: &Client, endpoint: &str) -> Client {
    Client::from_conf(
        template
            .config()
            .to_builder()
            .endpoint_url(endpoint)
            .build(),
    )
}

/// The real state in the model's words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenView {
    /// Per client: applications per item of its write; `None` for a fixed put (it converges, so
    /// the count cannot be observed on the table).
    pub applications: Vec<Option<Vec<u8>>>,
    pub profile_holder: Option<ClientId>,
    pub order_owner: Option<ClientId>,
}

/// One attempt of a client as the target holds it.
struct Slot {
    /// The request as sent, kept after it is answered (a resend is compared with it).
    body: serde_json::Value,
    /// The request, until answered, lost or dropped.
    held: Option<HeldRequest>,
    /// The client was cut off before its request was processed (`Proxy::lose_early`).
    detached: bool,
    /// The proxy's answer once the server step ran.
    answer: Option<Answer>,
}

enum Real {
    /// The reliable-write client, writing its one intent in this task.
    Writer {
        writer: Arc<ReliableWriter>,
        write: Option<
            JoinHandle<Result<oncecheck_tokened::WriteReport, oncecheck_tokened::WriteError>>,
        >,
        /// The rebuilding process's sends.
        rebuilds: Vec<JoinHandle<()>>,
    },
    /// A plain SDK client: one task per attempt.
    Bare {
        client: Client,
        sends: Vec<JoinHandle<()>>,
    },
}

struct RealClient {
    pattern: Pattern,
    real: Real,
    /// For the reliable-write client: the process that makes the model's mistake of a rebuilt
    /// retry under the same token (a plain SDK client on an actor of its own, so the writer's own
    /// resends never mix with it).
    rebuilder: Option<(usize, Client)>,
    slots: Vec<Slot>,
}

pub struct TokenTarget {
    context: Arc<TokenContext>,
    proxy: Option<Arc<Proxy>>,
    direct: Option<Client>,
    table: String,
    run: String,
    clients: Vec<RealClient>,
    clock: ManualClock,
    tick: Duration,
    journals: Vec<PathBuf>,
    requests: usize,
    lost: usize,
}

fn unique(prefix: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|elapsed| elapsed.subsec_nanos())
        .unwrap_or(0);
    format!(
        "{prefix}-{}-{}-{nanos}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

fn environment(what: &str, error: impl std::fmt::Display) -> Fault {
    Fault::Environment(format!("{what}: {error}"))
}

fn key(name: &str) -> HashMap<String, AttributeValue> {
    [(KEY.to_owned(), AttributeValue::S(name.to_owned()))].into()
}

fn one() -> AttributeValue {
    AttributeValue::N("1".into())
}

/// A check that is never consulted inside the window; past it, it reads nothing and fails (the
/// trace's own ClientReads is the reconciliation the model shows).
struct NoCheck;

impl ReconcileCheck for NoCheck {
    fn applied<'a>(
        &'a self,
        _client: &'a Client,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<bool, String>> + Send + 'a>>
    {
        Box::pin(async { Err("the trace reconciles by its own read".to_owned()) })
    }
}

/// The answer the model's server gives, as the proxy's error type must show it.
fn answer_matches(expected: ModelAnswer, pattern: Pattern, real: &Answer) -> bool {
    let kind = real.error_type();
    match expected {
        ModelAnswer::Success => real.is_success(),
        ModelAnswer::ConditionalCheckFailed => {
            kind.as_deref() == Some("ConditionalCheckFailedException")
        }
        ModelAnswer::IdempotentParameterMismatch => {
            kind.as_deref() == Some("IdempotentParameterMismatchException")
        }
        ModelAnswer::TransactionInProgress => {
            kind.as_deref() == Some("TransactionInProgressException")
        }
        ModelAnswer::TransactionConflict if pattern.is_transaction() => {
            kind.as_deref() == Some("TransactionCanceledException")
                && real
                    .cancellation_codes()
                    .is_some_and(|codes| codes.iter().any(|code| code == "TransactionConflict"))
        }
        ModelAnswer::TransactionConflict => kind.as_deref() == Some("TransactionConflictException"),
        ModelAnswer::ValidationError => kind.as_deref() == Some("ValidationException"),
        ModelAnswer::InternalServerError => kind.as_deref() == Some("InternalServerError"),
    }
}

fn describe(answer: &Answer) -> String {
    match answer.error_type() {
        None if answer.is_success() => format!("HTTP {} success", answer.status),
        None => format!("HTTP {} {}", answer.status, answer.body),
        Some(kind) => match answer.cancellation_codes() {
            Some(codes) => format!("{kind} {codes:?}"),
            None => kind,
        },
    }
}

impl TokenTarget {
    pub fn new(context: Arc<TokenContext>) -> TokenTarget {
        TokenTarget {
            context,
            proxy: None,
            direct: None,
            table: unique("token-replay"),
            run: unique("r"),
            clients: Vec::new(),
            clock: ManualClock::new(1_000_000),
            tick: Duration::from_millis(TOKEN_WINDOW_MILLIS),
            journals: Vec::new(),
            requests: 0,
            lost: 0,
        }
    }

    fn proxy(&self) -> Result<&Arc<Proxy>, Fault> {
        self.proxy
            .as_ref()
            .ok_or_else(|| Fault::Environment("the proxy is not started".into()))
    }

    fn direct(&self) -> Result<&Client, Fault> {
        self.direct
            .as_ref()
            .ok_or_else(|| Fault::Environment("the set-up client is not built".into()))
    }

    /// The token of client `client`'s tokened transaction (at most 36 characters).
    fn token(&self, client: usize) -> String {
        format!("t{client}-{}", self.run).chars().take(36).collect()
    }

    fn transaction(&self, client: usize, rebuilt: bool) -> Vec<TransactWriteItem> {
        ["A", "B"]
            .into_iter()
            .map(|account| {
                // A rebuilt request changes the parameters (another attribute), not the count.
                let expression = if rebuilt {
                    format!("ADD c{client} :one, r{client} :one")
                } else {
                    format!("ADD c{client} :one")
                };
                let update = Update::builder()
                    .table_name(&self.table)
                    .set_key(Some(key(account)))
                    .update_expression(expression)
                    .expression_attribute_values(":one", one())
                    .build()
                    .expect("table, key and expression are set");
                TransactWriteItem::builder().update(update).build()
            })
            .collect()
    }

    /// The single-item request of a pattern, as a transaction item (the retry table's input).
    fn single(&self, client: usize, pattern: Pattern) -> TransactWriteItem {
        match pattern {
            Pattern::AddCounter => TransactWriteItem::builder()
                .update(
                    Update::builder()
                        .table_name(&self.table)
                        .set_key(Some(key(&format!("counter{client}"))))
                        .update_expression("ADD n :one")
                        .expression_attribute_values(":one", one())
                        .build()
                        .expect("table, key and expression are set"),
                )
                .build(),
            Pattern::PutFixedProfile | Pattern::CreateOrderIfAbsent => {
                let (name, attribute) = if pattern == Pattern::PutFixedProfile {
                    ("profile", "holder")
                } else {
                    ("order", "owner")
                };
                let mut item = key(name);
                item.insert(attribute.into(), AttributeValue::N(client.to_string()));
                let put = Put::builder().table_name(&self.table).set_item(Some(item));
                let put = if pattern == Pattern::CreateOrderIfAbsent {
                    put.condition_expression("attribute_not_exists(pk)")
                } else {
                    put
                };
                TransactWriteItem::builder()
                    .put(put.build().expect("table and item are set"))
                    .build()
            }
            Pattern::TransactWithToken | Pattern::TransactWithoutToken => {
                unreachable!("transactions are not single items")
            }
        }
    }

    /// Starts client `client`'s next attempt with a plain SDK client: its own, or for the
    /// reliable-write client the rebuilding process's.
    fn send_bare(&mut self, client: usize, rebuilt: bool) {
        let pattern = self.clients[client].pattern;
        let items = if pattern.is_transaction() {
            Some(self.transaction(client, rebuilt))
        } else {
            None
        };
        let single = (!pattern.is_transaction()).then(|| self.single(client, pattern));
        let token = pattern.has_token().then(|| self.token(client));
        let real = &mut self.clients[client];
        let (sdk, sends) = match (&mut real.real, &real.rebuilder) {
            (Real::Bare { client: sdk, sends }, _) => (sdk.clone(), sends),
            (Real::Writer { rebuilds, .. }, Some((_, sdk))) => (sdk.clone(), rebuilds),
            (Real::Writer { .. }, None) => unreachable!("a writer without its rebuilding process"),
        };
        sends.push(tokio::spawn(async move {
            // The answer is the target's to give; what the client makes of it is not compared.
            if let Some(items) = items {
                let _ = sdk
                    .transact_write_items()
                    .set_transact_items(Some(items))
                    .set_client_request_token(token)
                    .send()
                    .await;
            } else if let Some(update) = single.as_ref().and_then(|item| item.update.clone()) {
                let _ = sdk
                    .update_item()
                    .table_name(update.table_name)
                    .set_key(Some(update.key))
                    .update_expression(update.update_expression)
                    .set_expression_attribute_values(update.expression_attribute_values)
                    .send()
                    .await;
            } else if let Some(put) = single.and_then(|item| item.put) {
                let _ = sdk
                    .put_item()
                    .table_name(put.table_name)
                    .set_item(Some(put.item))
                    .set_condition_expression(put.condition_expression)
                    .send()
                    .await;
            }
        }));
    }

    /// The retry table must refuse what the model shows double-applying, and allow the rest.
    fn check_retry_table(&self, client: usize) -> Result<(), Fault> {
        let pattern = self.clients[client].pattern;
        let item = match pattern {
            Pattern::TransactWithToken => return Ok(()),
            Pattern::TransactWithoutToken => None,
            single => Some(self.single(client, single)),
        };
        let plan = match item {
            Some(item) => {
                let shape = classify_item(&item)
                    .map_err(|error| environment("classifying the request", error))?;
                retry_plan(shape)
            }
            None => retry_plan(oncecheck_tokened::Pattern::TransactWithoutToken),
        };
        let must_refuse = matches!(pattern, Pattern::AddCounter | Pattern::TransactWithoutToken);
        match (must_refuse, plan) {
            (true, Err(_)) | (false, Ok(_)) => Ok(()),
            (true, Ok(plan)) => Err(Fault::diverged(
                format!("the retry table refuses a retry of {pattern:?}"),
                format!("it allows {plan:?}"),
            )),
            (false, Err(refused)) => Err(Fault::diverged(
                format!("the retry table allows a retry of {pattern:?}"),
                format!("it refuses: {refused}"),
            )),
        }
    }

    async fn take(&mut self, actor: usize) -> Result<HeldRequest, Fault> {
        let proxy = self.proxy()?.clone();
        let client = actor % self.clients.len().max(1);
        let request = proxy
            .next_request(actor, Duration::from_millis(REQUEST_WAIT_MILLIS_MAX))
            .await
            .map_err(|error| {
                Fault::diverged(
                    format!("C{} sends a request", client + 1),
                    format!("none reached the proxy: {error}"),
                )
            })?;
        self.requests += 1;
        Ok(request)
    }

    fn slot(&mut self, client: u8, attempt: u8) -> Result<&mut Slot, Fault> {
        self.clients
            .get_mut(usize::from(client))
            .and_then(|real| real.slots.get_mut(usize::from(attempt)))
            .ok_or_else(|| {
                Fault::Environment(format!(
                    "C{} has no attempt {} in the real replay",
                    client + 1,
                    attempt + 1
                ))
            })
    }

    async fn server_step(
        &mut self,
        client: u8,
        attempt: u8,
        expected: ModelAnswer,
    ) -> Result<(), Fault> {
        let proxy = self.proxy()?.clone();
        let pattern = self.clients[usize::from(client)].pattern;
        let slot = self.slot(client, attempt)?;
        let held = slot
            .held
            .as_ref()
            .ok_or_else(|| Fault::Environment("the request is gone".into()))?;
        let answer = proxy
            .forward(held)
            .await
            .map_err(|error| environment("forwarding", error))?;
        let matches = answer_matches(expected, pattern, &answer);
        let described = describe(&answer);
        slot.answer = Some(answer);
        if matches {
            Ok(())
        } else {
            Err(Fault::diverged(format!("{expected:?}"), described))
        }
    }

    /// The response of an attempt is lost: after processing, the connection closes without an
    /// answer; before it, the client is cut off and the request kept.
    fn lose(&mut self, client: u8, attempt: u8) -> Result<(), Fault> {
        let proxy = self.proxy()?.clone();
        let slot = self.slot(client, attempt)?;
        let held = slot
            .held
            .take()
            .ok_or_else(|| Fault::Environment("the request is gone".into()))?;
        if slot.answer.is_some() {
            if !slot.detached {
                proxy
                    .lose(held)
                    .map_err(|error| environment("losing", error))?;
            }
        } else if slot.detached {
            slot.held = Some(held);
        } else {
            slot.held = Some(
                proxy
                    .lose_early(held)
                    .map_err(|error| environment("losing", error))?,
            );
            slot.detached = true;
        }
        self.lost += 1;
        Ok(())
    }

    /// A client's send (`retry` is `None`) or retry (`Some(rebuilt)`): the real client makes
    /// its request, which the step takes from the client's actor (a rebuilt retry's from the
    /// other process's).
    async fn client_sends(&mut self, index: usize, retry: Option<bool>) -> Result<(), Fault> {
        let rebuilt = retry == Some(true);
        self.start_request(index, retry)?;
        let actor = match &self.clients[index].rebuilder {
            Some((actor, _)) if rebuilt => *actor,
            _ => index,
        };
        let request = self.take(actor).await?;
        if retry == Some(false) {
            self.check_identical_resend(index, &request)?;
        }
        self.clients[index].slots.push(Slot {
            body: request.body.clone(),
            held: Some(request),
            detached: false,
            answer: None,
        });
        Ok(())
    }

    /// Makes the real client send: the writer's first write, or a bare request; the writer's
    /// own resends need nothing (the model's retry is the one the writer makes).
    fn start_request(&mut self, index: usize, retry: Option<bool>) -> Result<(), Fault> {
        let rebuilt = retry == Some(true);
        let first = matches!(self.clients[index].real, Real::Writer { write: None, .. });
        match &self.clients[index].real {
            Real::Writer { writer, .. } if first => {
                let writer = writer.clone();
                let intent = Intent::with_check(self.transaction(index, false), Arc::new(NoCheck))
                    .token(self.token(index));
                let task = tokio::spawn(async move { writer.write(intent).await });
                if let Real::Writer { write, .. } = &mut self.clients[index].real {
                    *write = Some(task);
                }
            }
            // The model's mistake, which the writer never makes: another process.
            Real::Writer { .. } if rebuilt => self.send_bare(index, true),
            // The writer's own resend: the model's retry is the one the client makes.
            Real::Writer { .. } => {}
            Real::Bare { .. } => {
                if retry.is_some() {
                    self.check_retry_table(index)?;
                }
                self.send_bare(index, rebuilt);
            }
        }
        Ok(())
    }

    /// The writer resends its first request unchanged, token included.
    fn check_identical_resend(&self, index: usize, request: &HeldRequest) -> Result<(), Fault> {
        let first_body = self.clients[index]
            .slots
            .first()
            .map(|slot| slot.body.clone());
        let is_writer = matches!(self.clients[index].real, Real::Writer { .. });
        if let (true, Some(first_body)) = (is_writer, first_body) {
            if first_body != request.body {
                return Err(Fault::diverged(
                    "the identical request resent with the same token",
                    format!("{}", request.body),
                ));
            }
        }
        Ok(())
    }

    /// The held transaction begins in the proxy: observable as in progress until it commits.
    async fn server_begins(&mut self, client: u8, attempt: u8) -> Result<(), Fault> {
        let proxy = self.proxy()?.clone();
        let slot = self.slot(client, attempt)?;
        let held = slot
            .held
            .as_ref()
            .ok_or_else(|| Fault::Environment("the request is gone".into()))?;
        proxy
            .begin(held)
            .await
            .map_err(|error| Fault::diverged("the transaction begins", error.to_string()))
    }

    fn response_delivered(&mut self, client: u8, attempt: u8) -> Result<(), Fault> {
        let proxy = self.proxy()?.clone();
        let slot = self.slot(client, attempt)?;
        let (Some(held), Some(answer)) = (slot.held.take(), slot.answer.clone()) else {
            return Err(Fault::Environment("nothing to deliver".into()));
        };
        proxy
            .deliver(held, answer)
            .map_err(|error| environment("delivering", error))
    }

    /// Unprocessed requests are dropped and waiting clients give up; the token clock and the
    /// writers' clock move one tick.
    fn clock_ticks(&mut self) -> Result<(), Fault> {
        let proxy = self.proxy()?.clone();
        for real in &mut self.clients {
            for slot in &mut real.slots {
                let Some(held) = slot.held.take() else {
                    continue;
                };
                if !slot.detached {
                    proxy
                        .lose(held)
                        .map_err(|error| environment("losing", error))?;
                    self.lost += 1;
                }
            }
        }
        let now = proxy.token_clock() + self.tick;
        proxy.set_token_clock(now);
        self.clock.advance_secs(self.tick.as_secs() as i64);
        Ok(())
    }

    /// The client reads the table back: what it sees against what the model's client learns.
    async fn client_reads(
        &mut self,
        index: usize,
        expected: &Option<Vec<u8>>,
    ) -> Result<(), Fault> {
        let seen = self.applications(index).await?;
        match (seen, expected) {
            (Some(seen), Some(expected)) if seen != *expected => Err(Fault::diverged(
                format!("C{} reads {expected:?}", index + 1),
                format!("{seen:?}"),
            )),
            _ => Ok(()),
        }
    }

    async fn record_loses_timestamp(&mut self, token: usize) -> Result<(), Fault> {
        let token = self.token(token);
        self.proxy()?
            .damage_token_record(&token)
            .await
            .map_err(|error| environment("damaging the record", error))
    }

    async fn read_number(&self, item: &str, attribute: &str) -> Result<Option<u8>, Fault> {
        let read = self
            .direct()?
            .get_item()
            .table_name(&self.table)
            .set_key(Some(key(item)))
            .consistent_read(true)
            .send()
            .await
            .map_err(|error| environment("reading the table", format!("{error:?}")))?;
        Ok(match read.item().and_then(|found| found.get(attribute)) {
            Some(AttributeValue::N(number)) => number.parse().ok(),
            _ => None,
        })
    }

    /// What client `client`'s write shows on the table, per item (`None` for a fixed put).
    async fn applications(&self, client: usize) -> Result<Option<Vec<u8>>, Fault> {
        Ok(match self.clients[client].pattern {
            Pattern::TransactWithToken | Pattern::TransactWithoutToken => {
                let attribute = format!("c{client}");
                let mut counts = Vec::with_capacity(2);
                for account in ["A", "B"] {
                    counts.push(self.read_number(account, &attribute).await?.unwrap_or(0));
                }
                Some(counts)
            }
            Pattern::AddCounter => Some(vec![self
                .read_number(&format!("counter{client}"), "n")
                .await?
                .unwrap_or(0)]),
            Pattern::PutFixedProfile => None,
            Pattern::CreateOrderIfAbsent => {
                let owner = self.read_number("order", "owner").await?;
                Some(vec![u8::from(owner == Some(client as u8))])
            }
        })
    }
}

fn expected_applications(state: &TokenState, client: usize) -> Option<Vec<u8>> {
    match state.clients[client].pattern {
        Pattern::PutFixedProfile => None,
        _ => Some(state.table.applications[client].clone()),
    }
}

impl ReplayTarget for TokenTarget {
    type Model = TokenModel;
    type View = TokenView;

    fn applicable(&self, trace: &LoadedTrace<TokenModel>) -> Result<(), String> {
        let limits = trace.model.limits();
        if limits.skew > 0 {
            return Err("host clock skew (skew > 0): the proxy has one token clock".into());
        }
        if limits.shared_token {
            return Err("two intents sharing a token (shared_token=1)".into());
        }
        if limits.long_tokens {
            return Err(
                "over-long tokens (long_tokens=1): the reliable-write client refuses them before sending"
                    .into(),
            );
        }
        Ok(())
    }

    fn expected_view(&self, _trace: &LoadedTrace<TokenModel>, state: &TokenState) -> TokenView {
        TokenView {
            applications: (0..state.clients.len())
                .map(|client| expected_applications(state, client))
                .collect(),
            profile_holder: state.table.profile_holder,
            order_owner: state.table.order_owner,
        }
    }

    async fn set_up(&mut self, trace: &LoadedTrace<TokenModel>) -> Result<(), Fault> {
        let initial = &trace.path[0].0;
        let actors = initial.clients.len();
        // One actor per client, and one more per client for the rebuilding process.
        let proxy = Proxy::start(&self.context.upstream, 2 * actors)
            .await
            .map_err(|error| environment("starting the proxy", error))?;
        proxy.set_token_table(self.context.token_table);
        let direct = client_at(&self.context.template, &proxy.set_up_endpoint());
        let attribute = AttributeDefinition::builder()
            .attribute_name(KEY)
            .attribute_type(ScalarAttributeType::S)
            .build()
            .map_err(|error| environment("the table's key", error))?;
        let schema = KeySchemaElement::builder()
            .attribute_name(KEY)
            .key_type(KeyType::Hash)
            .build()
            .map_err(|error| environment("the table's key", error))?;
        direct
            .create_table()
            .table_name(&self.table)
            .billing_mode(BillingMode::PayPerRequest)
            .attribute_definitions(attribute)
            .key_schema(schema)
            .send()
            .await
            .map_err(|error| environment("creating the table", format!("{error:?}")))?;
        self.tick =
            Duration::from_millis(TOKEN_WINDOW_MILLIS / u64::from(trace.model.limits().window));
        let tokened_writer = trace.model.variant() == "tokened";
        for (index, client) in initial.clients.iter().enumerate() {
            let endpoint = proxy.endpoint(index);
            let real = if tokened_writer && client.pattern == Pattern::TransactWithToken {
                let path = std::env::temp_dir().join(format!("{}.sqlite", unique("token-journal")));
                let journal = Journal::open(&path)
                    .await
                    .map_err(|error| environment("opening the journal", error))?;
                self.journals.push(path);
                let limits = Limits {
                    backoff_base_millis: 1,
                    backoff_max_millis: 5,
                    ..Limits::default()
                };
                let writer = ReliableWriter::from_client(
                    client_at(&self.context.template, &endpoint),
                    journal,
                    limits,
                )
                .with_clock(Arc::new(self.clock.clone()));
                Real::Writer {
                    writer: Arc::new(writer),
                    write: None,
                    rebuilds: Vec::new(),
                }
            } else {
                Real::Bare {
                    client: client_at(&self.context.template, &endpoint),
                    sends: Vec::new(),
                }
            };
            let rebuilder = match real {
                Real::Writer { .. } => {
                    let actor = actors + index;
                    let endpoint = proxy.endpoint(actor);
                    Some((actor, client_at(&self.context.template, &endpoint)))
                }
                Real::Bare { .. } => None,
            };
            self.clients.push(RealClient {
                pattern: client.pattern,
                real,
                rebuilder,
                slots: Vec::new(),
            });
        }
        self.proxy = Some(Arc::new(proxy));
        self.direct = Some(direct);
        Ok(())
    }

    /// One method per model action (below, in `impl TokenTarget`).
    async fn perform(
        &mut self,
        _trace: &LoadedTrace<TokenModel>,
        step: Step<'_, TokenModel>,
    ) -> Result<(), Fault> {
        match step.action.clone() {
            Action::ClientSends { client, .. } => {
                self.client_sends(usize::from(client), None).await
            }
            Action::ClientRetries {
                client, rebuilt, ..
            } => self.client_sends(usize::from(client), Some(rebuilt)).await,
            Action::ServerBegins { client, attempt } => self.server_begins(client, attempt).await,
            Action::ServerCommits { client, attempt }
            | Action::ServerReplays { client, attempt } => {
                self.server_step(client, attempt, ModelAnswer::Success)
                    .await
            }
            Action::ServerRejects {
                client,
                attempt,
                answer,
            } => self.server_step(client, attempt, answer).await,
            Action::ResponseDelivered { client, attempt } => {
                self.response_delivered(client, attempt)
            }
            Action::ResponseLost { client, attempt } => self.lose(client, attempt),
            Action::ClockTicks => self.clock_ticks(),
            Action::ClientReads { client } => {
                self.client_reads(
                    usize::from(client),
                    &step.after.clients[usize::from(client)].reconciled,
                )
                .await
            }
            Action::RecordLosesTimestamp { token } => {
                self.record_loses_timestamp(usize::from(token)).await
            }
        }
    }

    async fn observe(&mut self) -> Result<TokenView, Fault> {
        let mut applications = Vec::with_capacity(self.clients.len());
        for client in 0..self.clients.len() {
            applications.push(self.applications(client).await?);
        }
        Ok(TokenView {
            applications,
            profile_holder: self.read_number("profile", "holder").await?,
            order_owner: self.read_number("order", "owner").await?,
        })
    }

    async fn finish(&mut self, trace: &LoadedTrace<TokenModel>) -> Result<(), Fault> {
        // A writer told success by the trace must report its write applied.
        let last = &trace.path[trace.path.len() - 1].0;
        for (index, real) in self.clients.iter_mut().enumerate() {
            let Real::Writer { write, .. } = &mut real.real else {
                continue;
            };
            // Only the writer's own attempts: a rebuilt one is another process's answer.
            let told_success = last.clients[index].attempts.last().is_some_and(|attempt| {
                !attempt.rebuilt
                    && attempt.client == oncecheck_model::token::ClientSide::Delivered
                    && matches!(
                        attempt.server,
                        oncecheck_model::token::ServerSide::Done {
                            answer: ModelAnswer::Success,
                            ..
                        }
                    )
            });
            if !told_success {
                continue;
            }
            let Some(task) = write.take() else { continue };
            let report = tokio::time::timeout(Duration::from_millis(REQUEST_WAIT_MILLIS_MAX), task)
                .await
                .map_err(|_| {
                    Fault::diverged(
                        "the reliable-write client ends its write",
                        "it is still writing",
                    )
                })?
                .map_err(|error| environment("the writer's task", error))?;
            match report {
                Ok(report) if report.outcome == oncecheck_tokened::Outcome::Applied => {}
                other => {
                    return Err(Fault::Diverged {
                        action: Some(format!("C{} finishes its write", index + 1)),
                        expected: "Applied".into(),
                        actual: format!("{other:?}"),
                    })
                }
            }
        }
        Ok(())
    }

    async fn tear_down(self) {
        for real in self.clients {
            match real.real {
                Real::Writer {
                    write, rebuilds, ..
                } => {
                    if let Some(task) = write {
                        task.abort();
                    }
                    for send in rebuilds {
                        send.abort();
                    }
                }
                Real::Bare { sends, .. } => {
                    for send in sends {
                        send.abort();
                    }
                }
            }
        }
        if let Some(direct) = &self.direct {
            let _ = direct.delete_table().table_name(&self.table).send().await;
        }
        if let Some(proxy) = &self.proxy {
            // Tear-down reports nothing: a table left behind is the emulator's to lose.
            let _ = proxy.delete_token_table().await;
        }
        drop(self.proxy);
        for path in &self.journals {
            for suffix in ["", "-wal", "-shm"] {
                let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
            }
        }
    }

    fn command_flags(&self) -> String {
        self.context.target.clone()
    }

    fn counts(&self) -> (usize, usize) {
        (self.requests, self.lost)
    }
}

/// Whether a trace file's replay is the reproduction of a counterexample (its `always` property
/// violated on the real system as in the model), for the replay's report.
pub fn reproduces(trace: &LoadedTrace<TokenModel>) -> Option<String> {
    (trace.meta.kind == "counterexample").then(|| {
        format!(
            "reproduces the {} counterexample {}",
            trace.model.variant(),
            trace.meta.property.clone().unwrap_or_default()
        )
    })
}
