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
//!
//! One file per job: `actions.rs` one method per model action (what the real side does at that
//! step), `words.rs` the table and the requests in the model's words, `claim_reads.rs` the
//! batched claim reads; here the set-up, the observation (the last read kept while the proxy
//! has sent no write) and the pushes' answers at the end.

use crate::proxy::{Answer, HeldRequest, Proxy};
use crate::replay::driver::{compare, fresh_stream, new_op, Fault, OpSizes, ReplayTarget, Step};
use crate::replay::refused_input::push_refused_input;
use oncecheck_model::ddb::OpId;
use oncecheck_model::relay::{Action, Build, Phase, RelayModel, RelayState};
use oncecheck_model::trace::LoadedTrace;
use oncecheck_store::dynamodb::{AppendTuning, Mutation};
use oncecheck_store::{BatchOutcome, DynamoDbStore, NewOp, OpStore};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinHandle;

mod actions;
mod claim_reads;
mod errors;
mod words;

use words::{model_view, real_view};

/// One step of a relay trace.
type RelayStep<'a> = Step<'a, RelayModel>;

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

/// How the DynamoDB target realises ops: small, since moto cannot hold an op at DynamoDB's
/// item limit ([`OpSizes::Small`]); its stream ids are still the longest DynamoDB takes.
pub(super) const OP_SIZES: OpSizes = OpSizes::Small;

fn writer_ops(model: &RelayModel, stream: &str, writer: usize) -> Vec<NewOp> {
    model.writers[writer]
        .1
        .iter()
        .map(|op| new_op(stream, *op, OP_SIZES))
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
    /// The committed items as last read, with the proxy's count of writes sent upstream when
    /// they were read. Nothing else writes the trace's table (it is the trace's own, and every
    /// request passes this target's proxy), so while that count is unchanged the last read is
    /// the real state: a read per write, not per step, with every step still compared, and no
    /// list of writing actions to keep in step with the model.
    committed: Option<(u64, BTreeMap<String, String>)>,
    stream: String,
    table: String,
    running: Option<Running>,
    requests: usize,
    lost_responses: usize,
    /// The writers whose first counter read has met its read faults ([`READ_FAULTS`]).
    read_faults_met: std::collections::BTreeSet<usize>,
}

/// How a writer's first counter read fails before it is answered: the model's read is one
/// atomic step, which the store realises by retrying an unknown outcome within its budget
/// (`lost_rounds_max` failures in a row). A replay takes that assumption to its edge: the read
/// fails exactly `lost_rounds_max` times, alternating a closed connection and a throttle (the
/// SDK's I/O error and a retryable service error), and the store must still answer it; one
/// failure fewer allowed, or a failure taken as final, parts from the model.
const READ_FAULTS: [ReadFault; 2] = [ReadFault::Closed, ReadFault::Throttled];

#[derive(Debug, Clone, Copy)]
enum ReadFault {
    Closed,
    Throttled,
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
            read_faults_met: std::collections::BTreeSet::new(),
            committed: None,
        }
    }
}

/// What exists once the trace is set up; a field borrow, so that a step can count its requests
/// in the target while it holds the running proxy.
fn set_up_of(running: &mut Option<Running>) -> Result<&mut Running, Fault> {
    running
        .as_mut()
        .ok_or_else(|| Fault::Environment("the trace was not set up".to_string()))
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
        // A relay started with `--create-table` creates its table at every start, so a second
        // start meets it: the model's initial table is there either way.
        set_up
            .create_table()
            .await
            .map_err(|error| Fault::Diverged {
                action: Some(format!(
                    "a second relay start creates table {}, which exists",
                    self.table
                )),
                expected: "the table is there and the start goes on".to_string(),
                actual: format!("{error}"),
            })?;
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
            let new_op = new_op(&self.stream, op, OP_SIZES);
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
            let ops = writer_ops(model, &self.stream, writer);
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

    /// One method per model action (`actions.rs`).
    async fn perform(
        &mut self,
        trace: &LoadedTrace<RelayModel>,
        step: RelayStep<'_>,
    ) -> Result<(), Fault> {
        let result = self.dispatch(trace, &step).await;
        match (result, acting_writer(step.action)) {
            (Err(fault @ Fault::Diverged { .. }), Some(writer)) => {
                Err(self.with_ended_push(fault, usize::from(writer)).await)
            }
            (result, _) => result,
        }
    }

    async fn observe(&mut self) -> Result<BTreeMap<String, String>, Fault> {
        let running = set_up_of(&mut self.running)?;
        let writes = running.proxy.writes_sent();
        if let Some((read_at, committed)) = &self.committed {
            if *read_at == writes {
                return Ok(committed.clone());
            }
        }
        let committed = real_view(&running.set_up, &self.stream)
            .await
            .map_err(Fault::Environment)?;
        self.committed = Some((writes, committed.clone()));
        Ok(committed)
    }

    async fn finish(&mut self, trace: &LoadedTrace<RelayModel>) -> Result<(), Fault> {
        let model = &trace.model;
        let last = &trace.path[trace.path.len() - 1].0;
        let running = set_up_of(&mut self.running)?;
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
            // Which error, too: the relay answers each kind differently.
            if let (Some(expected_error), Some(error)) = (
                errors::ExpectedError::of(model, &trace.path, writer),
                &outcome.error,
            ) {
                if !expected_error.is_reported_by(error) {
                    return Err(Fault::Diverged {
                        action,
                        expected: format!("seqs {expected:?} then {expected_error:?}"),
                        actual: format!("seqs {actual:?}, error {error:?}"),
                    });
                }
            }
        }
        // The input the store must refuse, through the set-up port (a refused push sends no
        // round, so no actor's request is ever among its requests); the table must stay as the
        // trace's last step left it, read anew whatever the proxy counted.
        push_refused_input(&running.set_up, &self.stream, last).await?;
        self.committed = None;
        compare(self, trace, last).await.map(|_| ())
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
                .map(i64::from)
                .unwrap_or(-1)
        })
        .collect()
}

impl DynamoTarget {
    /// The step's action, by the method that replays it.
    async fn dispatch(
        &mut self,
        trace: &LoadedTrace<RelayModel>,
        step: &RelayStep<'_>,
    ) -> Result<(), Fault> {
        let model = &trace.model;
        match *step.action {
            Action::WriterReadsCounter { writer } => {
                self.writer_reads_counter(model, step, usize::from(writer))
                    .await
            }
            Action::WriterSendsRound { writer } => {
                self.writer_sends_round(model, step, usize::from(writer))
                    .await
            }
            Action::WriterReceivesResponse { writer } => {
                self.writer_receives_response(usize::from(writer))
            }
            Action::ResponseLost { writer } => self.response_lost(usize::from(writer)),
            Action::WriterReadsClaim { writer } => {
                self.writer_reads_claim(usize::from(writer)).await
            }
            Action::WriterReadsClaims { writer } => {
                self.writer_reads_claims(model, step, usize::from(writer))
                    .await
            }
            Action::PushDeadlinePasses { writer } => self.push_deadline_passes(usize::from(writer)),
            Action::WriterQueriesTop { writer } => {
                self.writer_queries_top(step, usize::from(writer)).await
            }
            Action::WriterAddsToCounter { writer } => {
                self.writer_adds_to_counter(step, usize::from(writer)).await
            }
            Action::ItemApplied { key } => self.item_applied(model, key),
            Action::PullerQueries { puller } => {
                self.puller_queries(model, step, usize::from(puller)).await
            }
            Action::FolderReceivesRecord { .. } | Action::TruncatorDeletes { .. } => {
                unreachable!("refused as not applicable before the replay")
            }
        }
    }

    /// A divergence at a writer's step, with what its push did if it ended instead of making
    /// the request the step waited for: a panic (an assertion in the store) is named with its
    /// message, not left as a request that never came.
    async fn with_ended_push(&mut self, fault: Fault, writer: usize) -> Fault {
        let Some(running) = self.running.as_mut() else {
            return fault;
        };
        let ended = matches!(running.actors.get(writer), Some(Actor::Writer(handle)) if handle.is_finished());
        let Fault::Diverged {
            action,
            expected,
            actual,
        } = fault
        else {
            return fault;
        };
        if !ended {
            return Fault::Diverged {
                action,
                expected,
                actual,
            };
        }
        let Actor::Writer(handle) =
            std::mem::replace(&mut running.actors[writer], Actor::EndedByDeadline)
        else {
            unreachable!("matched a finished writer above")
        };
        let how = match handle.await {
            Ok(outcome) => format!("its push had already answered {outcome:?}"),
            Err(error) => format!(
                "its push had ended: {}",
                crate::replay::runner::panic_message(error)
            ),
        };
        Fault::Diverged {
            action,
            expected,
            actual: format!("{actual} ({how})"),
        }
    }
}

/// The writer whose step an action is, if a writer's.
fn acting_writer(action: &Action) -> Option<u8> {
    match *action {
        Action::WriterReadsCounter { writer }
        | Action::WriterSendsRound { writer }
        | Action::WriterReceivesResponse { writer }
        | Action::ResponseLost { writer }
        | Action::WriterReadsClaim { writer }
        | Action::WriterReadsClaims { writer }
        | Action::PushDeadlinePasses { writer }
        | Action::WriterQueriesTop { writer }
        | Action::WriterAddsToCounter { writer } => Some(writer),
        Action::ItemApplied { .. }
        | Action::PullerQueries { .. }
        | Action::FolderReceivesRecord { .. }
        | Action::TruncatorDeletes { .. } => None,
    }
}
