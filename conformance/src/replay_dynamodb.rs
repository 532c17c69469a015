//! Replaying a relay trace against the real DynamoDB store, request by request, through the
//! conformance proxy.
//!
//! Every writer of the trace runs the real store (unchanged code, the real aws-sdk-dynamodb
//! client) in its own task, pointed at its own proxy port; every puller pulls through its own
//! port. The replayer walks the model path and, at each step, takes the request the step names
//! from that actor, checks it against the request the model sends (a request the model would not
//! send is a divergence), and answers it as the model's DynamoDB would: forwarded to the real
//! server when the server can decide it, synthesised (TransactionConflict) when only the
//! visibility window explains it. A committed transaction's items stay pending in the proxy until
//! the trace applies each one. After every step the committed items in the real table are
//! compared with the model's.
//!
//! Invariants: a request is answered only at the step the trace names; every step is compared;
//! nothing is forwarded that the model did not send.

use crate::proxy::{Answer, HeldRequest, ItemKey, Proxy, ReasonCode};
use crate::replay::{describe_step, fresh_stream, payload_of, real_op_id, Divergence, ReplayError, ReplayStats, Target};
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

/// How long the replayer waits for an actor's next request before calling it a divergence.
const REQUEST_WAIT_MILLIS_MAX: u64 = 10_000;
/// How long a finished push may take to return its answers after its last response.
const PUSH_RETURN_WAIT_MILLIS_MAX: u64 = 10_000;

/// Which store build the writers run: normally the trace's own variant; `--store-variant`
/// replays a trace against another build to show where they part.
#[derive(Debug, Clone, Default)]
pub struct StoreConfig {
    pub store_variant: Option<String>,
    pub mutations: Vec<Mutation>,
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
        flags
    }
}

pub struct DynamoContext {
    pub upstream: String,
    pub config: StoreConfig,
}

/// One trace's table and a store pointed straight at the server (no proxy), for set-up and for
/// reading the committed state. A table per trace keeps every replay's cost independent of how
/// many ran before it (emulators copy whole tables per transaction).
struct TraceTable {
    table: String,
    direct: DynamoDbStore,
}

fn key_of(stream: &str, key: Key) -> ItemKey {
    let seq = match key {
        Key::Counter => 0,
        Key::Claim(op) => claim_key(&real_op_id(op)),
        Key::Op(seq) => i64::from(seq),
    };
    ItemKey { stream: stream.to_string(), seq }
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
            (Key::Counter, Value::Counter { next_seq }) => ("counter".to_string(), format!("next_seq {next_seq}")),
            (Key::Claim(op), Value::Claim { seq }) => (format!("claim {}", real_op_id(*op)), format!("seq {seq}")),
            (Key::Op(seq), Value::Op { op_id }) => (format!("op {seq}"), real_op_id(*op_id)),
            _ => continue,
        };
        view.insert(name, text);
    }
    view
}

/// The committed items of one stream, read straight from the server (bypassing the proxy and
/// its window) with a consistent Query of the stream's partition, in the model's words.
async fn real_view(context: &TraceTable, stream: &str) -> Result<BTreeMap<String, String>, String> {
    use aws_sdk_dynamodb::types::AttributeValue;
    let number = |item: &std::collections::HashMap<String, AttributeValue>, name: &str| -> i64 {
        item.get(name).and_then(|value| value.as_n().ok()).and_then(|text| text.parse().ok()).unwrap_or(-1)
    };
    let mut view = BTreeMap::new();
    let mut start = None;
    for _page in 0..QUERY_PAGES_MAX {
        let answer = context
            .direct
            .client()
            .query()
            .table_name(&context.table)
            .key_condition_expression("stream_id = :stream")
            .expression_attribute_values(":stream", AttributeValue::S(stream.to_string()))
            .consistent_read(true)
            .set_exclusive_start_key(start.take())
            .send()
            .await
            .map_err(|error| format!("reading stream {stream}: {error:?}"))?;
        for item in answer.items() {
            let seq = number(item, "seq");
            let op_id = item.get("op_id").and_then(|value| value.as_s().ok()).cloned().unwrap_or_default();
            if seq == 0 {
                view.insert("counter".to_string(), format!("next_seq {}", number(item, "next_seq")));
            } else if seq < 0 {
                view.insert(format!("claim {op_id}"), format!("seq {}", number(item, "claimed_seq")));
            } else {
                view.insert(format!("op {seq}"), op_id);
            }
        }
        match answer.last_evaluated_key() {
            Some(last) if !last.is_empty() => start = Some(last.clone()),
            _ => return Ok(view),
        }
    }
    Err(format!("stream {stream} has more than {QUERY_PAGES_MAX} pages"))
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
            let Some((kind, inner)) = item.as_object().and_then(|object| object.iter().next()) else {
                return "(empty item)".to_string();
            };
            let names = inner.get("ExpressionAttributeNames").and_then(Json::as_object);
            let values = inner.get("ExpressionAttributeValues").and_then(Json::as_object);
            let substitute = |text: &str| {
                let mut text = text.to_string();
                if let Some(names) = names {
                    for (placeholder, name) in names {
                        text = text.replace(placeholder.as_str(), name.as_str().unwrap_or_default());
                    }
                }
                if let Some(values) = values {
                    let mut placeholders: Vec<(&String, &Json)> = values.iter().collect();
                    placeholders.sort_by_key(|(placeholder, _)| std::cmp::Reverse(placeholder.len()));
                    for (placeholder, value) in placeholders {
                        let literal = value.get("N").or_else(|| value.get("S")).and_then(Json::as_str).unwrap_or("?");
                        text = text.replace(placeholder.as_str(), literal);
                    }
                }
                text
            };
            let key_object = inner.get("Key").or_else(|| inner.get("Item")).and_then(Json::as_object);
            let seq = key_object.and_then(|key| attribute_number(key, "seq"));
            let item_stream = key_object.and_then(|key| attribute_string(key, "stream_id")).unwrap_or_default();
            let condition = inner.get("ConditionExpression").and_then(Json::as_str).map(substitute).unwrap_or_else(|| "-".to_string());
            let update = inner.get("UpdateExpression").and_then(Json::as_str).map(substitute);
            let stream_note = if item_stream == stream { String::new() } else { format!(" (stream {item_stream})") };
            let target = match seq {
                Some(0) => "counter".to_string(),
                Some(seq) if seq < 0 => {
                    let op = inner.get("Item").and_then(Json::as_object).and_then(|item| attribute_string(item, "op_id")).unwrap_or_else(|| "?".to_string());
                    format!("claim {op}")
                }
                Some(seq) => {
                    let op = inner.get("Item").and_then(Json::as_object).and_then(|item| attribute_string(item, "op_id"));
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
        items.push(format!("Update counter [SET next_seq = {}] if {condition}", round.seq));
    }
    items.push(format!("Put claim {op} if attribute_not_exists(stream_id)"));
    match round.predecessor {
        Some(Condition::AttributeExists) => items.push(format!("ConditionCheck op {} if attribute_exists(stream_id)", round.seq - 1)),
        Some(Condition::AttributeNotExists) => items.push(format!("ConditionCheck op {} if attribute_not_exists(stream_id)", round.seq - 1)),
        _ => {}
    }
    items.push(format!("Put op {} = {op} if attribute_not_exists(stream_id)", round.seq));
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
}

fn writer_ops(model: &RelayModel, writer: usize) -> Vec<NewOp> {
    model.writers[writer].1.iter().map(|op| NewOp::new(real_op_id(*op), payload_of(*op))).collect()
}

/// Replays one relay trace against DynamoDB through a fresh proxy.
pub async fn replay(
    file: &Path,
    trace: &LoadedTrace<RelayModel>,
    context: &DynamoContext,
    target: &Target,
) -> Result<ReplayStats, ReplayError> {
    let path = &trace.path;
    let environment = |detail: String| ReplayError::Environment { file: file.to_path_buf(), detail };
    if path.iter().any(|(_, action)| matches!(action, Some(Action::ResponseLost { .. }))) {
        return Err(ReplayError::TargetMismatch {
            file: file.to_path_buf(),
            reason: "the trace loses a response; the store retries such a round in place while the model re-pushes, so lost responses are not replayed yet".to_string(),
        });
    }
    // Steps the relay model gained with the re-push fast path, the deadline, the stream fold
    // and truncation have no request mapping here yet.
    if path.iter().any(|(_, action)| {
        matches!(
            action,
            Some(Action::WriterReadsClaims { .. } | Action::PushDeadlinePasses { .. } | Action::FolderReceivesRecord { .. } | Action::TruncatorDeletes { .. })
        )
    }) {
        return Err(ReplayError::TargetMismatch {
            file: file.to_path_buf(),
            reason: "the trace takes a step (batched claim read, push deadline, stream fold or truncation) this replay does not map to requests yet".to_string(),
        });
    }
    let stream = fresh_stream(file);
    let table = format!("oncecheck-replay-{stream}").chars().filter(|c| c.is_ascii_alphanumeric() || *c == '-').take(255).collect::<String>();
    let direct = DynamoDbStore::connect(table.clone(), Some(&context.upstream)).await;
    direct.create_table().await.map_err(|error| environment(format!("creating table {table}: {error}")))?;
    let trace_table = TraceTable { table, direct };
    let result = replay_in_table(file, trace, context, &trace_table, &stream, target).await;
    // Best effort: a table left behind costs nothing but space in the emulator.
    let _ = trace_table.direct.client().delete_table().table_name(&trace_table.table).send().await;
    result
}

async fn replay_in_table(
    file: &Path,
    trace: &LoadedTrace<RelayModel>,
    context: &DynamoContext,
    table: &TraceTable,
    stream: &str,
    target: &Target,
) -> Result<ReplayStats, ReplayError> {
    let model = &trace.model;
    let path = &trace.path;
    let environment = |detail: String| ReplayError::Environment { file: file.to_path_buf(), detail };
    let stream = stream.to_string();
    let writers = model.writers.len();
    let pullers = model.bounds.pullers as usize;
    let proxy = Proxy::start(&context.upstream, writers + pullers).await.map_err(|error| environment(format!("proxy: {error}")))?;

    // The initial table, written straight to the server.
    let initial = &path[0].0;
    let counter = initial.table.counter();
    if counter > 0 {
        table.direct.set_counter(&stream, i64::from(counter)).await.map_err(|error| environment(format!("seeding the counter: {error}")))?;
    }
    for (seq, op) in initial.table.committed_ops() {
        let new_op = NewOp::new(real_op_id(op), payload_of(op));
        table.direct.put_legacy_op(&stream, i64::from(seq), &new_op).await.map_err(|error| environment(format!("seeding op {seq}: {error}")))?;
    }

    // The writers: the real store, one per actor, each with its own proxy port.
    let store_variant = context.config.store_variant.clone().unwrap_or_else(|| model.variant.name().to_string());
    let tuning = AppendTuning {
        lost_rounds_max: u32::from(model.bounds.lost_rounds_max),
        backoff_base: Duration::ZERO,
        backoff_max: Duration::ZERO,
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    let mut actors: Vec<Actor> = Vec::with_capacity(writers);
    for writer in 0..writers {
        let mut store = DynamoDbStore::connect(table.table.clone(), Some(&proxy.endpoint(writer))).await.with_tuning(tuning.clone());
        if store_variant == "counter-only" {
            store = store.with_mutation(Mutation::NoPredecessorCheck);
        }
        for mutation in &context.config.mutations {
            store = store.with_mutation(*mutation);
        }
        let ops = writer_ops(model, writer);
        let stream = stream.clone();
        let handle = match model.build_of(writer) {
            Build::New => tokio::spawn(async move { store.append_batch(&stream, &ops, deadline).await }),
            Build::AddEra => {
                let legacy = store.add_era_writer();
                tokio::spawn(async move { legacy.append_batch(&stream, &ops, deadline).await })
            }
        };
        actors.push(Actor::Writer(handle));
    }
    let puller_stores: Vec<Arc<DynamoDbStore>> = {
        let mut stores = Vec::new();
        for puller in 0..pullers {
            stores.push(Arc::new(DynamoDbStore::connect(table.table.clone(), Some(&proxy.endpoint(writers + puller))).await));
        }
        stores
    };

    let mut stats = ReplayStats::default();
    let mut in_flight: BTreeMap<usize, InFlight> = BTreeMap::new();
    let wait = Duration::from_millis(REQUEST_WAIT_MILLIS_MAX);
    let outcome = async {
        for index in 0..path.len() - 1 {
            let (before, action) = (&path[index].0, path[index].1.expect("an action from every state but the last"));
            let after = &path[index + 1].0;
            let diverged = |expected: String, actual: String| {
                ReplayError::Diverged(Box::new(Divergence {
                    file: file.to_path_buf(),
                    step: index + 1,
                    action: describe_step(model, path, index),
                    expected,
                    actual,
                    target: format!("{target}{}", context.config.flags()),
                }))
            };
            let take = |actor: usize, what: &'static str| {
                let proxy = &proxy;
                let diverged = &diverged;
                async move {
                    match proxy.next_request(actor, wait).await {
                        Ok(request) if request.operation == what => Ok(request),
                        Ok(request) => Err(diverged(format!("{what}"), format!("{} {}", request.operation, request.body))),
                        Err(error) => Err(diverged(format!("a {what} request"), format!("{error}"))),
                    }
                }
            };
            match action {
                Action::WriterReadsCounter { writer } => {
                    let request = take(writer as usize, "Query").await?;
                    stats.requests += 1;
                    let answer = proxy.forward(&request).await.map_err(|error| environment(error.to_string()))?;
                    let Counter::Known(expected) = after.writers[writer as usize].counter else { unreachable!("a counter read makes it known") };
                    let seen = answer.body.get("Items").and_then(Json::as_array).and_then(|items| items.first()).and_then(Json::as_object).and_then(|item| attribute_number(item, "next_seq")).unwrap_or(0);
                    if seen != i64::from(expected) {
                        return Err(diverged(format!("counter reads {expected}"), format!("counter reads {seen}: {}", answer.body)));
                    }
                    proxy.deliver(request, answer).map_err(|error| environment(error.to_string()))?;
                }
                Action::WriterSendsRound { writer } => {
                    let w = writer as usize;
                    let request = take(w, "TransactWriteItems").await?;
                    stats.requests += 1;
                    let Phase::Sent { round, outcome } = &after.writers[w].phase else { unreachable!("a round is sent") };
                    let expected_items = model_round_items(round, model.build_of(w));
                    let actual_items = real_round_items(&request.body, &stream);
                    if expected_items != actual_items {
                        return Err(diverged(expected_items.join("; "), actual_items.join("; ")));
                    }
                    let answer = match outcome {
                        TransactOutcome::Committed => {
                            let answer = if model.bounds.window {
                                let (answer, held) = proxy.forward_holding(&request).await.map_err(|error| environment(error.to_string()))?;
                                let mut expected: Vec<ItemKey> = after.table.pending.keys().filter(|key| !before.table.pending.contains_key(key)).map(|key| key_of(&stream, *key)).collect();
                                let mut held = held;
                                expected.sort();
                                held.sort();
                                if answer.is_success() && held != expected {
                                    return Err(diverged(format!("pending {expected:?}"), format!("pending {held:?}")));
                                }
                                answer
                            } else {
                                proxy.forward(&request).await.map_err(|error| environment(error.to_string()))?
                            };
                            if !answer.is_success() {
                                return Err(diverged("committed".to_string(), format!("cancelled {:?} {}", answer.cancellation_codes(), answer.body)));
                            }
                            answer
                        }
                        TransactOutcome::Cancelled(reasons) if reasons.contains(&Reason::TransactionConflict) => {
                            // Only the visibility window explains this cancellation: synthesise it,
                            // with the old images the server holds for the failed conditions.
                            let keys = model_keys_of_round(round, model.build_of(w), &stream);
                            let images = proxy.read_images(&table.table, &keys).await.map_err(|error| environment(error.to_string()))?;
                            let shaped: Vec<(ReasonCode, Option<crate::proxy::Item>)> = reasons
                                .iter()
                                .zip(images)
                                .map(|(reason, image)| match reason {
                                    Reason::None => (ReasonCode::None, None),
                                    Reason::TransactionConflict => (ReasonCode::TransactionConflict, None),
                                    Reason::ConditionalCheckFailed { old } => (ReasonCode::ConditionalCheckFailed, old.and(image.item)),
                                })
                                .collect();
                            Proxy::cancelled(&shaped)
                        }
                        TransactOutcome::Cancelled(reasons) => {
                            let answer = proxy.forward(&request).await.map_err(|error| environment(error.to_string()))?;
                            let expected: Vec<String> = reasons.iter().map(reason_code).collect();
                            if answer.cancellation_codes().as_ref() != Some(&expected) {
                                return Err(diverged(format!("cancelled {expected:?}"), format!("{:?} {}", answer.cancellation_codes(), answer.body)));
                            }
                            answer
                        }
                    };
                    in_flight.insert(w, InFlight { request, answer });
                }
                Action::WriterReceivesResponse { writer } => {
                    let flight = in_flight.remove(&(writer as usize)).expect("a response follows its round");
                    proxy.deliver(flight.request, flight.answer).map_err(|error| environment(error.to_string()))?;
                }
                Action::ResponseLost { .. }
                | Action::WriterReadsClaims { .. }
                | Action::PushDeadlinePasses { .. }
                | Action::FolderReceivesRecord { .. }
                | Action::TruncatorDeletes { .. } => unreachable!("refused before the replay"),
                Action::WriterReadsClaim { writer } => {
                    let request = take(writer as usize, "Query").await?;
                    stats.requests += 1;
                    let answer = proxy.forward(&request).await.map_err(|error| environment(error.to_string()))?;
                    proxy.deliver(request, answer).map_err(|error| environment(error.to_string()))?;
                }
                Action::WriterQueriesTop { writer } => {
                    let request = take(writer as usize, "Query").await?;
                    stats.requests += 1;
                    let answer = proxy.forward(&request).await.map_err(|error| environment(error.to_string()))?;
                    let expected = after.writers[writer as usize].floor.map(i64::from).unwrap_or(0);
                    let seen = answer.body.get("Items").and_then(Json::as_array).and_then(|items| items.first()).and_then(Json::as_object).and_then(|item| attribute_number(item, "seq")).unwrap_or(0);
                    if seen != expected {
                        return Err(diverged(format!("top occupied seq {expected}"), format!("{seen}")));
                    }
                    proxy.deliver(request, answer).map_err(|error| environment(error.to_string()))?;
                }
                Action::WriterAddsToCounter { writer } => {
                    let request = take(writer as usize, "UpdateItem").await?;
                    stats.requests += 1;
                    match &after.writers[writer as usize].phase {
                        Phase::Allocated { seq } => {
                            let answer = proxy.forward(&request).await.map_err(|error| environment(error.to_string()))?;
                            let seen = answer.body.get("Attributes").and_then(Json::as_object).and_then(|item| attribute_number(item, "next_seq"));
                            if seen != Some(i64::from(*seq)) {
                                return Err(diverged(format!("ADD answers {seq}"), format!("{}", answer.body)));
                            }
                            proxy.deliver(request, answer).map_err(|error| environment(error.to_string()))?;
                        }
                        _ => proxy.deliver(request, Proxy::conflict()).map_err(|error| environment(error.to_string()))?,
                    }
                }
                Action::ItemApplied { key } => {
                    if model.bounds.window {
                        proxy.apply(&key_of(&stream, key)).map_err(|error| diverged(format!("{key:?} pending"), error.to_string()))?;
                    }
                }
                Action::PullerQueries { puller } => {
                    let p = puller as usize;
                    let cursor = before.pullers[p].cursor;
                    let limit = model.bounds.page_limit as usize;
                    let store = Arc::clone(&puller_stores[p]);
                    let pull_stream = stream.clone();
                    let pull = tokio::spawn(async move { store.pull(&pull_stream, i64::from(cursor), limit).await });
                    let request = take(writers + p, "Query").await?;
                    stats.requests += 1;
                    let answer = proxy.forward(&request).await.map_err(|error| environment(error.to_string()))?;
                    proxy.deliver(request, answer).map_err(|error| environment(error.to_string()))?;
                    let page: Vec<StoredOp> = match tokio::time::timeout(wait, pull).await {
                        Ok(Ok(Ok(page))) => page,
                        other => return Err(diverged("a page".to_string(), format!("{other:?}"))),
                    };
                    let expected: Vec<(i64, String)> = before.table.query_after(cursor, limit).iter().map(|(seq, op)| (i64::from(*seq), real_op_id(*op))).collect();
                    let actual: Vec<(i64, String)> = page.iter().map(|op| (op.seq, op.op_id.clone())).collect();
                    if actual != expected {
                        return Err(diverged(format!("P{} page {expected:?}", p + 1), format!("{actual:?}")));
                    }
                }
            }
            // After every step: the committed items of the real table against the model's.
            let actual = real_view(table, &stream).await.map_err(environment)?;
            let expected = model_view(after);
            if expected != actual {
                return Err(diverged(format!("table {expected:?}"), format!("table {actual:?}")));
            }
            stats.steps += 1;
        }
        // At the end: every finished push answered what the model answered.
        let last = &path[path.len() - 1].0;
        for (writer, actor) in actors.iter_mut().enumerate() {
            let finished = matches!(last.writers[writer].phase, Phase::Done | Phase::Failed(_));
            if !finished {
                continue;
            }
            if let Actor::Writer(handle) = actor {
                let outcome = match tokio::time::timeout(Duration::from_millis(PUSH_RETURN_WAIT_MILLIS_MAX), handle).await {
                    Ok(Ok(outcome)) => outcome,
                    other => {
                        let extra = if proxy.has_request(writer) { " (it sent a request the model does not send)" } else { "" };
                        return Err(ReplayError::Diverged(Box::new(Divergence {
                            file: file.to_path_buf(),
                            step: path.len() - 1,
                            action: format!("W{} finishes its push", writer + 1),
                            expected: "the push returns".to_string(),
                            actual: format!("{other:?}{extra}"),
                            target: format!("{target}{}", context.config.flags()),
                        })));
                    }
                };
                *actor = Actor::Finished(outcome);
            }
            let Actor::Finished(outcome) = actor else { unreachable!() };
            let expected = expected_answers(model, last, writer);
            let actual: Vec<i64> = outcome.appended.iter().map(|appended| appended.seq).collect();
            let failed = matches!(last.writers[writer].phase, Phase::Failed(_));
            if actual != expected || failed != outcome.error.is_some() {
                return Err(ReplayError::Diverged(Box::new(Divergence {
                    file: file.to_path_buf(),
                    step: path.len() - 1,
                    action: format!("W{} finishes its push", writer + 1),
                    expected: format!("seqs {expected:?}{}", if failed { " then an error" } else { "" }),
                    actual: format!("seqs {actual:?}, error {:?}", outcome.error),
                    target: format!("{target}{}", context.config.flags()),
                })));
            }
        }
        Ok(stats)
    }
    .await;
    for actor in actors {
        if let Actor::Writer(handle) = actor {
            handle.abort();
        }
    }
    drop(proxy);
    outcome
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
        .map(|op: &OpId| state.answers.get(op).and_then(|seqs| seqs.iter().next()).map(|seq| i64::from(*seq)).unwrap_or(-1))
        .collect()
}
