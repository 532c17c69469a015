//! The `dynamodb[=URL]` target: a relay trace replayed against the real DynamoDB store,
//! request by request, through the conformance proxy.
//!
//! Every writer of the trace runs the real store (unchanged code, the real aws-sdk-dynamodb
//! client) in its own task, pointed at its own proxy port; every puller pulls through its own
//! port. At each step the target takes the request the step names from that actor, checks it
//! against the request the model sends (a request the model would not send is a divergence),
//! and answers it as the model's DynamoDB would: forwarded to the real server when the server
//! can decide it, synthesised (TransactionConflict) when only the visibility window explains it.
//! A committed transaction's items stay pending in the proxy until the trace applies each one.
//! The driver compares the committed items of the real table with the model's after every step.
//!
//! Invariants: a request is answered only at the step the trace names; nothing is forwarded
//! that the model did not send; every request to DynamoDB — the actors', the table's set-up and
//! the reads of its committed state — passes through the proxy (the set-up ones through its
//! set-up port); each trace has a table of its own, created at set-up and deleted at tear-down,
//! so a replay's cost does not grow with the traces before it (emulators copy whole tables per
//! transaction).

use crate::proxy::{Answer, HeldRequest, ItemKey, Proxy, ReasonCode};
use crate::replay::driver::{fresh_stream, payload_of, real_op_id, Fault, ReplayTarget, Step};
use oncecheck_model::ddb::{Condition, Key, OpId, Reason, TransactOutcome, Value};
use oncecheck_model::relay::{Action, Build, Counter, Phase, RelayModel, RelayState, Round};
use oncecheck_model::trace::LoadedTrace;
use oncecheck_store::dynamodb::{claim_key, AppendTuning, Mutation};
use oncecheck_store::{BatchOutcome, DynamoDbStore, NewOp, OpStore, StoredOp};
use serde_json::Value as Json;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinHandle;

mod claim_reads;
use claim_reads::replay_claim_read;

/// How long the replayer waits for an actor's next request before calling it a divergence.
const REQUEST_WAIT_MILLIS_MAX: u64 = 10_000;
/// How long a finished push may take to return its answers after its last response.
const PUSH_RETURN_WAIT_MILLIS_MAX: u64 = 10_000;
/// The SDK attempt timeout of a writer whose response the trace loses by a stall: the stall
/// lasts this long, and the writer's other requests are never held longer.
const STALLED_ATTEMPT_MILLIS: u64 = 5_000;
/// The SDK attempt timeout of every other actor: longer than any stall plus the steps around
/// it, so that a request held while another writer stalls is still answered.
const HELD_ATTEMPT_MILLIS: u64 = 30_000;
/// The connect timeout of every actor (loopback).
const CONNECT_MILLIS_MAX: u64 = 2_000;

/// A store of `table` behind `endpoint` (a proxy listener), its client derived from the run's
/// template with `attempt` as the SDK's attempt timeout.
fn store_behind(
    template: &aws_sdk_dynamodb::Client,
    endpoint: &str,
    table: &str,
    attempt: Duration,
) -> DynamoDbStore {
    use aws_sdk_dynamodb::config::timeout::TimeoutConfig;
    let timeouts = TimeoutConfig::builder()
        .connect_timeout(Duration::from_millis(CONNECT_MILLIS_MAX))
        .operation_attempt_timeout(attempt)
        .build();
    let config = template
        .config()
        .to_builder()
        .endpoint_url(endpoint)
        .timeout_config(timeouts)
        .build();
    DynamoDbStore::from_client(aws_sdk_dynamodb::Client::from_conf(config), table)
}

/// The writers' push deadline: far beyond any replay, so only the trace decides outcomes.
const PUSH_DEADLINE_SECS: u64 = 120;

/// How the proxy loses a response the trace loses: both are an unknown outcome to the store,
/// and both must take the same store path.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum LoseBy {
    /// The connection is closed without a response: the SDK sees an I/O (dispatch) error.
    #[default]
    Close,
    /// No answer until the client's attempt timeout gives up: the SDK sees a timeout.
    Stall,
}

impl std::str::FromStr for LoseBy {
    type Err = String;

    fn from_str(text: &str) -> Result<LoseBy, String> {
        match text {
            "close" => Ok(LoseBy::Close),
            "stall" => Ok(LoseBy::Stall),
            other => Err(format!(
                "unknown way to lose a response `{other}`; valid: close, stall"
            )),
        }
    }
}

/// Which store build the writers run: normally the trace's own variant; `--store-variant`
/// replays a trace against another build to show where they part. `lose_by` says how the proxy
/// loses the responses the trace loses.
#[derive(Debug, Clone, Default)]
pub struct StoreConfig {
    pub store_variant: Option<String>,
    pub mutations: Vec<Mutation>,
    pub lose_by: LoseBy,
}

impl StoreConfig {
    /// The command-line flags that select this configuration, for the replay command a
    /// divergence report prints.
    pub fn flags(&self) -> String {
        let mut flags = String::new();
        if let Some(variant) = &self.store_variant {
            flags.push_str(&format!(" --store-variant {variant}"));
        }
        for mutation in &self.mutations {
            let name = match mutation {
                Mutation::NoPredecessorCheck => "no-predecessor-check",
                Mutation::UnconditionalCounterSet => "unconditional-counter-set",
                Mutation::ReadCounterEveryOp => "read-counter-every-op",
            };
            flags.push_str(&format!(" --store-mutation {name}"));
        }
        if self.lose_by == LoseBy::Stall {
            flags.push_str(" --lose-by stall");
        }
        flags
    }
}

/// What every DynamoDB replay of one run shares: the server and the store configuration.
#[derive(Debug, Clone)]
pub struct DynamoContext {
    pub upstream: String,
    /// The SDK client every actor's client is derived from (one configuration load per run).
    pub template: aws_sdk_dynamodb::Client,
    /// The `--target` value as given, for the replay command of a report.
    pub target: String,
    pub config: StoreConfig,
}

fn key_of(stream: &str, key: Key) -> ItemKey {
    let seq = match key {
        Key::Counter => 0,
        Key::Claim(op) => claim_key(&real_op_id(op)),
        Key::Op(seq) => i64::from(seq),
    };
    ItemKey {
        stream: stream.to_string(),
        seq,
    }
}

fn attribute_number(item: &serde_json::Map<String, Json>, name: &str) -> Option<i64> {
    item.get(name)?.get("N")?.as_str()?.parse().ok()
}

fn attribute_string(item: &serde_json::Map<String, Json>, name: &str) -> Option<String> {
    item.get(name)?.get("S")?.as_str().map(str::to_string)
}

/// The committed items of one stream in the model's words: counter, claims, ops.
fn model_view(state: &RelayState) -> BTreeMap<String, String> {
    let mut view = BTreeMap::new();
    for (key, value) in state.table.applied.iter().chain(state.table.pending.iter()) {
        let (name, text) = match (key, value) {
            (Key::Counter, Value::Counter { next_seq }) => {
                ("counter".to_string(), format!("next_seq {next_seq}"))
            }
            (Key::Claim(op), Value::Claim { seq }) => {
                (format!("claim {}", real_op_id(*op)), format!("seq {seq}"))
            }
            (Key::Op(seq), Value::Op { op_id }) => (format!("op {seq}"), real_op_id(*op_id)),
            _ => continue,
        };
        view.insert(name, text);
    }
    view
}

/// The committed items of one stream, read through the proxy's set-up port (past its window)
/// with a consistent Query of the stream's partition, in the model's words.
async fn real_view(
    store: &DynamoDbStore,
    stream: &str,
) -> Result<BTreeMap<String, String>, String> {
    use aws_sdk_dynamodb::types::AttributeValue;
    let number = |item: &std::collections::HashMap<String, AttributeValue>, name: &str| -> i64 {
        item.get(name)
            .and_then(|value| value.as_n().ok())
            .and_then(|text| text.parse().ok())
            .unwrap_or(-1)
    };
    let mut view = BTreeMap::new();
    let mut start = None;
    for _page in 0..QUERY_PAGES_MAX {
        let answer = store
            .client()
            .query()
            .table_name(store.table())
            .key_condition_expression("stream_id = :stream")
            .expression_attribute_values(":stream", AttributeValue::S(stream.to_string()))
            .consistent_read(true)
            .set_exclusive_start_key(start.take())
            .send()
            .await
            .map_err(|error| {
                format!(
                    "reading stream {stream}: {}",
                    aws_sdk_dynamodb::error::DisplayErrorContext(&error)
                )
            })?;
        for item in answer.items() {
            let seq = number(item, "seq");
            let op_id = item
                .get("op_id")
                .and_then(|value| value.as_s().ok())
                .cloned()
                .unwrap_or_default();
            if seq == 0 {
                view.insert(
                    "counter".to_string(),
                    format!("next_seq {}", number(item, "next_seq")),
                );
            } else if seq < 0 {
                view.insert(
                    format!("claim {op_id}"),
                    format!("seq {}", number(item, "claimed_seq")),
                );
            } else {
                view.insert(format!("op {seq}"), op_id);
            }
        }
        match answer.last_evaluated_key() {
            Some(last) if !last.is_empty() => start = Some(last.clone()),
            _ => return Ok(view),
        }
    }
    Err(format!(
        "stream {stream} has more than {QUERY_PAGES_MAX} pages"
    ))
}

/// A stream of a trace holds a few dozen items: one page. The bound only stops a runaway.
const QUERY_PAGES_MAX: usize = 100;
/// The items of a TransactWriteItems in the model's words, from the request body.
fn real_round_items(body: &Json, stream: &str) -> Vec<String> {
    let Some(items) = body.get("TransactItems").and_then(Json::as_array) else {
        return vec!["(no TransactItems)".to_string()];
    };
    items
        .iter()
        .map(|item| {
            let Some((kind, inner)) = item.as_object().and_then(|object| object.iter().next())
            else {
                return "(empty item)".to_string();
            };
            let names = inner
                .get("ExpressionAttributeNames")
                .and_then(Json::as_object);
            let values = inner
                .get("ExpressionAttributeValues")
                .and_then(Json::as_object);
            let substitute = |text: &str| {
                let mut text = text.to_string();
                if let Some(names) = names {
                    for (placeholder, name) in names {
                        text =
                            text.replace(placeholder.as_str(), name.as_str().unwrap_or_default());
                    }
                }
                if let Some(values) = values {
                    let mut placeholders: Vec<(&String, &Json)> = values.iter().collect();
                    placeholders
                        .sort_by_key(|(placeholder, _)| std::cmp::Reverse(placeholder.len()));
                    for (placeholder, value) in placeholders {
                        let literal = value
                            .get("N")
                            .or_else(|| value.get("S"))
                            .and_then(Json::as_str)
                            .unwrap_or("?");
                        text = text.replace(placeholder.as_str(), literal);
                    }
                }
                text
            };
            let key_object = inner
                .get("Key")
                .or_else(|| inner.get("Item"))
                .and_then(Json::as_object);
            let seq = key_object.and_then(|key| attribute_number(key, "seq"));
            let item_stream = key_object
                .and_then(|key| attribute_string(key, "stream_id"))
                .unwrap_or_default();
            let condition = inner
                .get("ConditionExpression")
                .and_then(Json::as_str)
                .map(substitute)
                .unwrap_or_else(|| "-".to_string());
            let update = inner
                .get("UpdateExpression")
                .and_then(Json::as_str)
                .map(substitute);
            let stream_note = if item_stream == stream {
                String::new()
            } else {
                format!(" (stream {item_stream})")
            };
            let target = match seq {
                Some(0) => "counter".to_string(),
                Some(seq) if seq < 0 => {
                    let op = inner
                        .get("Item")
                        .and_then(Json::as_object)
                        .and_then(|item| attribute_string(item, "op_id"))
                        .unwrap_or_else(|| "?".to_string());
                    format!("claim {op}")
                }
                Some(seq) => {
                    let op = inner
                        .get("Item")
                        .and_then(Json::as_object)
                        .and_then(|item| attribute_string(item, "op_id"));
                    match op {
                        Some(op) => format!("op {seq} = {op}"),
                        None => format!("op {seq}"),
                    }
                }
                None => "(no key)".to_string(),
            };
            match update {
                Some(update) => format!("{kind} {target}{stream_note} [{update}] if {condition}"),
                None => format!("{kind} {target}{stream_note} if {condition}"),
            }
        })
        .collect()
}

/// The same words for the round the model sends.
fn model_round_items(round: &Round, build: Build) -> Vec<String> {
    let op = real_op_id(round.op);
    let mut items = Vec::new();
    if build == Build::New {
        let condition = if round.expected == 0 {
            "attribute_not_exists(next_seq) OR next_seq = 0".to_string()
        } else {
            format!("next_seq = {}", round.expected)
        };
        items.push(format!(
            "Update counter [SET next_seq = {}] if {condition}",
            round.seq
        ));
    }
    items.push(format!("Put claim {op} if attribute_not_exists(stream_id)"));
    match round.predecessor {
        Some(Condition::AttributeExists) => items.push(format!(
            "ConditionCheck op {} if attribute_exists(stream_id)",
            round.seq - 1
        )),
        Some(Condition::AttributeNotExists) => items.push(format!(
            "ConditionCheck op {} if attribute_not_exists(stream_id)",
            round.seq - 1
        )),
        _ => {}
    }
    items.push(format!(
        "Put op {} = {op} if attribute_not_exists(stream_id)",
        round.seq
    ));
    items
}

/// A round whose answer is decided but not yet delivered (the model's response in flight).
struct InFlight {
    request: HeldRequest,
    answer: Answer,
}

enum Actor {
    Writer(JoinHandle<BatchOutcome>),
    Finished(BatchOutcome),
    /// The trace passed the push's deadline; the task was ended at that step.
    EndedByDeadline,
}

fn writer_ops(model: &RelayModel, writer: usize) -> Vec<NewOp> {
    model.writers[writer]
        .1
        .iter()
        .map(|op| NewOp::new(real_op_id(*op), payload_of(*op)))
        .collect()
}

/// What exists once the trace is set up.
struct Running {
    proxy: Proxy,
    /// The store on the proxy's set-up port: table creation, seeding, the committed state.
    set_up: DynamoDbStore,
    actors: Vec<Actor>,
    pullers: Vec<Arc<DynamoDbStore>>,
    in_flight: BTreeMap<usize, InFlight>,
}

/// One relay trace on DynamoDB, on a table of its own behind a proxy of its own.
pub struct DynamoTarget {
    context: Arc<DynamoContext>,
    /// The committed items as last read; dropped whenever a write goes upstream. Nothing else
    /// writes the trace's table (it is the trace's own, and every request passes this target's
    /// proxy), so between two writes the last read is the real state: a read per write, not per
    /// step, with every step still compared.
    committed: Option<BTreeMap<String, String>>,
    stream: String,
    table: String,
    running: Option<Running>,
    requests: usize,
    lost_responses: usize,
}

impl DynamoTarget {
    pub fn new(context: Arc<DynamoContext>, file: &Path) -> DynamoTarget {
        let stream = fresh_stream(file);
        let table = format!("oncecheck-replay-{stream}")
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || *c == '-')
            .take(255)
            .collect::<String>();
        DynamoTarget {
            context,
            stream,
            table,
            running: None,
            requests: 0,
            lost_responses: 0,
            committed: None,
        }
    }

    fn running(&mut self) -> Result<&mut Running, Fault> {
        self.running
            .as_mut()
            .ok_or_else(|| Fault::Environment("the trace was not set up".to_string()))
    }
}

fn environment(error: impl std::fmt::Display) -> Fault {
    Fault::Environment(error.to_string())
}

/// Takes `actor`'s next request, which must be a `what`.
async fn take(proxy: &Proxy, actor: usize, what: &str) -> Result<HeldRequest, Fault> {
    let wait = Duration::from_millis(REQUEST_WAIT_MILLIS_MAX);
    match proxy.next_request(actor, wait).await {
        Ok(request) if request.operation == what => Ok(request),
        Ok(request) => Err(Fault::diverged(
            what.to_string(),
            format!("{} {}", request.operation, request.body),
        )),
        Err(error) => Err(Fault::diverged(
            format!("a {what} request"),
            format!("{error}"),
        )),
    }
}

fn first_item_number(answer: &Answer, name: &str) -> Option<i64> {
    answer
        .body
        .get("Items")
        .and_then(Json::as_array)
        .and_then(|items| items.first())
        .and_then(Json::as_object)
        .and_then(|item| attribute_number(item, name))
}

impl ReplayTarget for DynamoTarget {
    type Model = RelayModel;
    type View = BTreeMap<String, String>;

    fn applicable(&self, trace: &LoadedTrace<RelayModel>) -> Result<(), String> {
        let unmapped =
            trace
                .path
                .iter()
                .enumerate()
                .find_map(|(index, (_, action))| match action {
                    Some(Action::FolderReceivesRecord { .. }) => {
                        Some((index, "a stream record folded"))
                    }
                    Some(Action::TruncatorDeletes { .. }) => Some((index, "a truncation")),
                    _ => None,
                });
        match unmapped {
            Some((index, what)) => Err(format!(
                "step {} is {what}, which this target does not drive in the real store yet",
                index + 1
            )),
            None => Ok(()),
        }
    }

    fn expected_view(
        &self,
        _trace: &LoadedTrace<RelayModel>,
        state: &RelayState,
    ) -> BTreeMap<String, String> {
        model_view(state)
    }

    async fn set_up(&mut self, trace: &LoadedTrace<RelayModel>) -> Result<(), Fault> {
        let model = &trace.model;
        let writers = model.writers.len();
        let pullers = model.bounds.pullers as usize;
        let proxy = Proxy::start(&self.context.upstream, (writers + pullers).max(1))
            .await
            .map_err(|error| environment(format!("proxy: {error}")))?;
        let set_up = store_behind(
            &self.context.template,
            &proxy.set_up_endpoint(),
            &self.table,
            Duration::from_millis(HELD_ATTEMPT_MILLIS),
        );
        set_up
            .create_table()
            .await
            .map_err(|error| environment(format!("creating table {}: {error}", self.table)))?;
        // The initial table.
        let initial = &trace.path[0].0;
        let counter = initial.table.counter();
        if counter > 0 {
            set_up
                .set_counter(&self.stream, i64::from(counter))
                .await
                .map_err(|error| environment(format!("seeding the counter: {error}")))?;
        }
        for (seq, op) in initial.table.committed_ops() {
            let new_op = NewOp::new(real_op_id(op), payload_of(op));
            set_up
                .put_legacy_op(&self.stream, i64::from(seq), &new_op)
                .await
                .map_err(|error| environment(format!("seeding op {seq}: {error}")))?;
        }
        // The writers: the real store, one per actor, each with its own proxy port.
        let config = &self.context.config;
        let store_variant = config
            .store_variant
            .clone()
            .unwrap_or_else(|| model.variant.name().to_string());
        let tuning = AppendTuning {
            lost_rounds_max: u32::from(model.bounds.lost_rounds_max),
            backoff_base: Duration::ZERO,
            backoff_max: Duration::ZERO,
        };
        let deadline = tokio::time::Instant::now() + Duration::from_secs(PUSH_DEADLINE_SECS);
        let mut actors = Vec::with_capacity(writers);
        for writer in 0..writers {
            let mut store = store_behind(
                &self.context.template,
                &proxy.endpoint(writer),
                &self.table,
                attempt_of(trace, writer, config.lose_by),
            )
            .with_tuning(tuning.clone());
            if store_variant == "counter-only" {
                store = store.with_mutation(Mutation::NoPredecessorCheck);
            }
            for mutation in &config.mutations {
                store = store.with_mutation(*mutation);
            }
            let ops = writer_ops(model, writer);
            let stream = self.stream.clone();
            let handle = match model.build_of(writer) {
                Build::New => {
                    tokio::spawn(async move { store.append_batch(&stream, &ops, deadline).await })
                }
                Build::AddEra => {
                    let legacy = store.add_era_writer();
                    tokio::spawn(async move { legacy.append_batch(&stream, &ops, deadline).await })
                }
            };
            actors.push(Actor::Writer(handle));
        }
        let mut puller_stores = Vec::with_capacity(pullers);
        for puller in 0..pullers {
            puller_stores.push(Arc::new(store_behind(
                &self.context.template,
                &proxy.endpoint(writers + puller),
                &self.table,
                Duration::from_millis(HELD_ATTEMPT_MILLIS),
            )));
        }
        self.running = Some(Running {
            proxy,
            set_up,
            actors,
            pullers: puller_stores,
            in_flight: BTreeMap::new(),
        });
        Ok(())
    }

    async fn perform(
        &mut self,
        trace: &LoadedTrace<RelayModel>,
        step: Step<'_, RelayModel>,
    ) -> Result<(), Fault> {
        let model = &trace.model;
        let (before, after) = (step.before, step.after);
        let stream = self.stream.clone();
        let table = self.table.clone();
        let writers = model.writers.len();
        let mut requests = 0;
        let mut lost_responses = 0;
        let lose_by = self.context.config.lose_by;
        // Every step that may send a write upstream invalidates the last read of the table.
        if matches!(
            *step.action,
            Action::WriterSendsRound { .. } | Action::WriterAddsToCounter { .. }
        ) {
            self.committed = None;
        }
        let running = self.running()?;
        let proxy = &running.proxy;
        match *step.action {
            Action::WriterReadsCounter { writer } => {
                // A push of two ops or more checks its claims before its first counter read.
                if model.checks_claims_first(before, writer as usize) {
                    let push = &model.writers[writer as usize].1;
                    requests += replay_claim_read(
                        proxy,
                        model,
                        before,
                        writer as usize,
                        push,
                        &stream,
                        &table,
                    )
                    .await?;
                }
                let request = take(proxy, writer as usize, "Query").await?;
                requests += 1;
                let answer = proxy.forward(&request).await.map_err(environment)?;
                let Counter::Known(expected) = after.writers[writer as usize].counter else {
                    unreachable!("a counter read makes it known")
                };
                let seen = first_item_number(&answer, "next_seq").unwrap_or(0);
                if seen != i64::from(expected) {
                    return Err(Fault::diverged(
                        format!("counter reads {expected}"),
                        format!("counter reads {seen}: {}", answer.body),
                    ));
                }
                proxy.deliver(request, answer).map_err(environment)?;
            }
            Action::WriterSendsRound { writer } => {
                let w = writer as usize;
                let request = take(proxy, w, "TransactWriteItems").await?;
                requests += 1;
                let Phase::Sent { round, outcome } = &after.writers[w].phase else {
                    unreachable!("a round is sent")
                };
                let expected_items = model_round_items(round, model.build_of(w));
                let actual_items = real_round_items(&request.body, &stream);
                if expected_items != actual_items {
                    return Err(Fault::diverged(
                        expected_items.join("; "),
                        actual_items.join("; "),
                    ));
                }
                let answer = match outcome {
                    TransactOutcome::Committed => {
                        let answer =
                            if model.bounds.window {
                                let (answer, held) =
                                    proxy.forward_holding(&request).await.map_err(environment)?;
                                let mut expected: Vec<ItemKey> = after
                                    .table
                                    .pending
                                    .keys()
                                    .filter(|key| !before.table.pending.contains_key(key))
                                    .map(|key| key_of(&stream, *key))
                                    .collect();
                                expected.sort();
                                // The model applies at commit an item no other step can observe
                                // pending (a claim no writer can touch): so does the proxy.
                                let mut held: Vec<ItemKey> =
                                    held.into_iter()
                                        .filter(|key| {
                                            expected.contains(key)
                                                || !after.table.applied.keys().any(|applied| {
                                                    key_of(&stream, *applied) == *key
                                                })
                                                || proxy.apply(key).is_err()
                                        })
                                        .collect();
                                held.sort();
                                if answer.is_success() && held != expected {
                                    return Err(Fault::diverged(
                                        format!("pending {expected:?}"),
                                        format!("pending {held:?}"),
                                    ));
                                }
                                answer
                            } else {
                                proxy.forward(&request).await.map_err(environment)?
                            };
                        if !answer.is_success() {
                            return Err(Fault::diverged(
                                "committed",
                                format!(
                                    "cancelled {:?} {}",
                                    answer.cancellation_codes(),
                                    answer.body
                                ),
                            ));
                        }
                        answer
                    }
                    TransactOutcome::Cancelled(reasons)
                        if reasons.contains(&Reason::TransactionConflict) =>
                    {
                        // Only the visibility window explains this cancellation: synthesise it,
                        // with the old images the server holds for the failed conditions.
                        let keys = model_keys_of_round(round, model.build_of(w), &stream);
                        let images = proxy
                            .read_images(&table, &keys)
                            .await
                            .map_err(environment)?;
                        let shaped: Vec<(ReasonCode, Option<crate::proxy::Item>)> = reasons
                            .iter()
                            .zip(images)
                            .map(|(reason, image)| match reason {
                                Reason::None => (ReasonCode::None, None),
                                Reason::TransactionConflict => {
                                    (ReasonCode::TransactionConflict, None)
                                }
                                Reason::ConditionalCheckFailed { old } => {
                                    (ReasonCode::ConditionalCheckFailed, old.and(image.item))
                                }
                            })
                            .collect();
                        Answer::cancelled(&shaped)
                    }
                    TransactOutcome::Cancelled(reasons) => {
                        let answer = proxy.forward(&request).await.map_err(environment)?;
                        let expected: Vec<String> = reasons.iter().map(reason_code).collect();
                        if answer.cancellation_codes().as_ref() != Some(&expected) {
                            return Err(Fault::diverged(
                                format!("cancelled {expected:?}"),
                                format!("{:?} {}", answer.cancellation_codes(), answer.body),
                            ));
                        }
                        answer
                    }
                };
                running.in_flight.insert(w, InFlight { request, answer });
            }
            Action::WriterReceivesResponse { writer } => {
                let flight = running
                    .in_flight
                    .remove(&(writer as usize))
                    .expect("a response follows its round");
                proxy
                    .deliver(flight.request, flight.answer)
                    .map_err(environment)?;
            }
            Action::ResponseLost { writer } => {
                // The round committed upstream; its client never learns it.
                let flight = running
                    .in_flight
                    .remove(&(writer as usize))
                    .expect("a lost response follows its round");
                match lose_by {
                    LoseBy::Close => proxy.lose(flight.request),
                    LoseBy::Stall => proxy.stall(flight.request),
                }
                .map_err(environment)?;
                lost_responses += 1;
            }
            Action::WriterReadsClaim { writer } => {
                let request = take(proxy, writer as usize, "Query").await?;
                requests += 1;
                let answer = proxy.forward(&request).await.map_err(environment)?;
                proxy.deliver(request, answer).map_err(environment)?;
            }
            Action::WriterReadsClaims { writer } => {
                let w = writer as usize;
                let remaining: Vec<OpId> = remaining_ops(model, before, w).collect();
                requests +=
                    replay_claim_read(proxy, model, before, w, &remaining, &stream, &table).await?;
            }
            Action::PushDeadlinePasses { writer } => {
                // The real deadline is wall time, which a replay cannot place at a step without
                // racing the machine's load: the push is ended here instead. Its next request
                // waits untaken in the proxy, so nothing reaches the table, as in the model; the
                // table is still compared after every step, but the push's own answers are
                // not (the store's deadline has its own tests in the store).
                if let Actor::Writer(handle) = &running.actors[writer as usize] {
                    handle.abort();
                }
                running.actors[writer as usize] = Actor::EndedByDeadline;
            }
            Action::FolderReceivesRecord { .. } | Action::TruncatorDeletes { .. } => {
                unreachable!("refused as not applicable before the replay")
            }
            Action::WriterQueriesTop { writer } => {
                let request = take(proxy, writer as usize, "Query").await?;
                requests += 1;
                let answer = proxy.forward(&request).await.map_err(environment)?;
                let expected = after.writers[writer as usize]
                    .floor
                    .map(i64::from)
                    .unwrap_or(0);
                let seen = first_item_number(&answer, "seq").unwrap_or(0);
                if seen != expected {
                    return Err(Fault::diverged(
                        format!("top occupied seq {expected}"),
                        format!("{seen}"),
                    ));
                }
                proxy.deliver(request, answer).map_err(environment)?;
            }
            Action::WriterAddsToCounter { writer } => {
                let request = take(proxy, writer as usize, "UpdateItem").await?;
                requests += 1;
                match &after.writers[writer as usize].phase {
                    Phase::Allocated { seq } => {
                        let answer = proxy.forward(&request).await.map_err(environment)?;
                        let seen = answer
                            .body
                            .get("Attributes")
                            .and_then(Json::as_object)
                            .and_then(|item| attribute_number(item, "next_seq"));
                        if seen != Some(i64::from(*seq)) {
                            return Err(Fault::diverged(
                                format!("ADD answers {seq}"),
                                format!("{}", answer.body),
                            ));
                        }
                        proxy.deliver(request, answer).map_err(environment)?;
                    }
                    _ => proxy
                        .deliver(request, Answer::conflict())
                        .map_err(environment)?,
                }
            }
            Action::ItemApplied { key } => {
                if model.bounds.window {
                    proxy.apply(&key_of(&stream, key)).map_err(|error| {
                        Fault::diverged(format!("{key:?} pending"), error.to_string())
                    })?;
                }
            }
            Action::PullerQueries { puller } => {
                let p = puller as usize;
                let cursor = before.pullers[p].cursor;
                let limit = model.bounds.page_limit as usize;
                let store = Arc::clone(&running.pullers[p]);
                let pull_stream = stream.clone();
                let pull = tokio::spawn(async move {
                    store.pull(&pull_stream, i64::from(cursor), limit).await
                });
                let request = take(proxy, writers + p, "Query").await?;
                requests += 1;
                let answer = proxy.forward(&request).await.map_err(environment)?;
                proxy.deliver(request, answer).map_err(environment)?;
                let page: Vec<StoredOp> = match tokio::time::timeout(
                    Duration::from_millis(REQUEST_WAIT_MILLIS_MAX),
                    pull,
                )
                .await
                {
                    Ok(Ok(Ok(page))) => page,
                    other => return Err(Fault::diverged("a page", format!("{other:?}"))),
                };
                let expected: Vec<(i64, String)> = before
                    .table
                    .query_after(cursor, limit)
                    .iter()
                    .map(|(seq, op)| (i64::from(*seq), real_op_id(*op)))
                    .collect();
                let actual: Vec<(i64, String)> =
                    page.iter().map(|op| (op.seq, op.op_id.clone())).collect();
                if actual != expected {
                    return Err(Fault::diverged(
                        format!("P{} page {expected:?}", p + 1),
                        format!("{actual:?}"),
                    ));
                }
            }
        }
        self.requests += requests;
        self.lost_responses += lost_responses;
        Ok(())
    }

    async fn observe(&mut self) -> Result<BTreeMap<String, String>, Fault> {
        if let Some(committed) = &self.committed {
            return Ok(committed.clone());
        }
        let stream = self.stream.clone();
        let running = self.running()?;
        let committed = real_view(&running.set_up, &stream)
            .await
            .map_err(Fault::Environment)?;
        self.committed = Some(committed.clone());
        Ok(committed)
    }

    async fn finish(&mut self, trace: &LoadedTrace<RelayModel>) -> Result<(), Fault> {
        let model = &trace.model;
        let last = &trace.path[trace.path.len() - 1].0;
        let running = self.running()?;
        for (writer, actor) in running.actors.iter_mut().enumerate() {
            if !matches!(last.writers[writer].phase, Phase::Done | Phase::Failed(_)) {
                continue;
            }
            let action = Some(format!("W{} finishes its push", writer + 1));
            if let Actor::Writer(handle) = actor {
                let outcome = match tokio::time::timeout(
                    Duration::from_millis(PUSH_RETURN_WAIT_MILLIS_MAX),
                    handle,
                )
                .await
                {
                    Ok(Ok(outcome)) => outcome,
                    other => {
                        let extra = if running.proxy.has_request(writer) {
                            " (it sent a request the model does not send)"
                        } else {
                            ""
                        };
                        return Err(Fault::Diverged {
                            action,
                            expected: "the push returns".to_string(),
                            actual: format!("{other:?}{extra}"),
                        });
                    }
                };
                *actor = Actor::Finished(outcome);
            }
            let Actor::Finished(outcome) = actor else {
                // Ended at the trace's deadline step: no answers to compare.
                continue;
            };
            let expected = expected_answers(model, last, writer);
            let actual: Vec<i64> = outcome
                .appended
                .iter()
                .map(|appended| appended.seq)
                .collect();
            let failed = matches!(last.writers[writer].phase, Phase::Failed(_));
            if actual != expected || failed != outcome.error.is_some() {
                return Err(Fault::Diverged {
                    action,
                    expected: format!(
                        "seqs {expected:?}{}",
                        if failed { " then an error" } else { "" }
                    ),
                    actual: format!("seqs {actual:?}, error {:?}", outcome.error),
                });
            }
        }
        Ok(())
    }

    async fn tear_down(self) {
        let Some(running) = self.running else { return };
        for actor in running.actors {
            if let Actor::Writer(handle) = actor {
                handle.abort();
            }
        }
        // Best effort: a table left behind costs nothing but space in the emulator.
        let _ = running
            .set_up
            .client()
            .delete_table()
            .table_name(&self.table)
            .send()
            .await;
        drop(running.proxy);
    }

    fn command_flags(&self) -> String {
        format!("{}{}", self.context.target, self.context.config.flags())
    }

    fn counts(&self) -> (usize, usize) {
        (self.requests, self.lost_responses)
    }
}

/// The ops of `writer`'s push whose claims a batched claim read asks for: from the op due
/// next, every op not already answered ahead.
fn remaining_ops<'a>(
    model: &'a RelayModel,
    state: &'a RelayState,
    writer: usize,
) -> impl Iterator<Item = OpId> + 'a {
    let push = &model.writers[writer].1;
    let start = state.writers[writer].next_op as usize;
    (start..push.len())
        .filter(move |position| state.writers[writer].answered_ahead & (1 << position) == 0)
        .map(move |position| push[position])
}

/// Every op id of the trace by its claim's sort key, to name the claims a request asks for.
fn claim_names(model: &RelayModel, stream: &str) -> BTreeMap<i64, String> {
    model
        .writers
        .iter()
        .flat_map(|(_, push)| push.iter())
        .map(|op| (key_of(stream, Key::Claim(*op)).seq, real_op_id(*op)))
        .collect()
}

/// The attempt timeout of `writer`'s client: short when the trace stalls one of its responses.
fn attempt_of(trace: &LoadedTrace<RelayModel>, writer: usize, lose_by: LoseBy) -> Duration {
    let stalled = lose_by == LoseBy::Stall
        && trace.path.iter().any(|(_, action)| matches!(action, Some(Action::ResponseLost { writer: lost }) if *lost as usize == writer));
    Duration::from_millis(if stalled {
        STALLED_ATTEMPT_MILLIS
    } else {
        HELD_ATTEMPT_MILLIS
    })
}

fn reason_code(reason: &Reason) -> String {
    match reason {
        Reason::None => "None".to_string(),
        Reason::ConditionalCheckFailed { .. } => "ConditionalCheckFailed".to_string(),
        Reason::TransactionConflict => "TransactionConflict".to_string(),
    }
}

fn model_keys_of_round(round: &Round, build: Build, stream: &str) -> Vec<ItemKey> {
    let mut keys = Vec::new();
    if build == Build::New {
        keys.push(key_of(stream, Key::Counter));
    }
    keys.push(key_of(stream, Key::Claim(round.op)));
    if round.predecessor.is_some() {
        keys.push(key_of(stream, Key::Op(round.seq - 1)));
    }
    keys.push(key_of(stream, Key::Op(round.seq)));
    keys
}

/// The seqs a finished writer's push answered, in push order, per the model.
fn expected_answers(model: &RelayModel, state: &RelayState, writer: usize) -> Vec<i64> {
    let answered = state.writers[writer].next_op as usize;
    model.writers[writer].1[..answered]
        .iter()
        .map(|op: &OpId| {
            state
                .answers
                .get(op)
                .and_then(|seqs| seqs.iter().next())
                .map(|seq| i64::from(*seq))
                .unwrap_or(-1)
        })
        .collect()
}
