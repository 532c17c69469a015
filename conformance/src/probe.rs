//! `oncecheck probe dynamodb=URL`: which DynamoDB semantics an endpoint really has, checked with
//! real requests on a fresh table.
//!
//! Each row sends what DynamoDB documents a behaviour for and compares the answer: `supported`
//! (the answer DynamoDB gives), `not supported` (the endpoint ignores the feature: a token
//! re-executed, no reasons, no image), `differs` (another answer), or `not testable without a
//! hold` (the behaviour needs a transaction held open between its start and its commit, which a
//! client alone cannot arrange; the probe races concurrent requests and says so when the race
//! never shows it). Every row carries its evidence: what was sent and what came back,
//! abbreviated.
//!
//! Through the conformance proxy (`--proxy`, [`probe_through_proxy`]) the probe has the hold a
//! client alone lacks: the proxy parks a transaction begun and running ([`Proxy::begin`]) while
//! the row sends its second request, so the in-progress and TransactionConflict rows become real
//! requests with real answers there. The proxy also carries DynamoDB's token table in front of
//! the endpoint; `--token-table off` shows the endpoint's own token handling through the same
//! proxy (the token rows turn red again: the probe can fail).
//!
//! Invariants: the probe only touches the table it created (a fresh name per run) and deletes it
//! afterwards, whatever the rows found; a row's request failing is that row's evidence, never
//! the end of the run; only a target that cannot be reached or set up ends the run. Any endpoint
//! speaking DynamoDB's API works. A held transaction is always released (forwarded) before its
//! row ends, and a hold that never catches its transaction is disarmed.

use std::collections::HashMap;
use std::io::Write;
use std::process::ExitCode;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use aws_sdk_dynamodb::config::http::HttpResponse;
use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, ConditionCheck, KeySchemaElement, KeyType,
    Put, ReturnValue, ReturnValuesOnConditionCheckFailure, ScalarAttributeType, TransactWriteItem,
    Update,
};
use aws_sdk_dynamodb::Client;
use tokio::sync::oneshot;

use crate::proxy::{HeldRequest, Proxy};

const PARTITION: &str = "pk";
const SORT: &str = "sk";
/// Concurrent pairs raced to provoke TransactionInProgress / TransactionConflict without a hold.
pub const RACE_ROUNDS_MAX: usize = 8;
/// How long a row waits for its transaction to reach the proxy's hold (the SDK's own attempt
/// timeout, 5 s, bounds the held client anyway).
pub const HOLD_WAIT_MILLIS_MAX: u64 = 3_000;
/// How long the proxy's driver waits for the probe's next request before it stops.
const DRIVER_IDLE_SECS_MAX: u64 = 600;
/// Evidence text is cut to this many characters.
const EVIDENCE_CHARS_MAX: usize = 90;

/// What the probe found for one semantic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Supported,
    NotSupported,
    Differs,
    NotTestableWithoutHold,
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(match self {
            Verdict::Supported => "supported",
            Verdict::NotSupported => "not supported",
            Verdict::Differs => "differs",
            Verdict::NotTestableWithoutHold => "not testable without a hold",
        })
    }
}

/// One row of the table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Row {
    pub semantic: &'static str,
    pub verdict: Verdict,
    pub sent: String,
    pub got: String,
}

/// The probe's table for one endpoint.
#[derive(Clone, Debug)]
pub struct ProbeReport {
    pub endpoint: String,
    pub table: String,
    pub rows: Vec<Row>,
    /// Whether the probe's table was deleted afterwards.
    pub table_deleted: bool,
}

impl ProbeReport {
    pub fn row(&self, semantic: &str) -> Option<&Row> {
        self.rows.iter().find(|row| row.semantic == semantic)
    }
}

/// Why the probe could not run.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error("bad target `{0}`: expected dynamodb=URL (http:// or https://)")]
    BadTarget(String),
    #[error("endpoint {endpoint} unreachable: {detail}")]
    Unreachable { endpoint: String, detail: String },
    #[error("cannot set up the probe table on {endpoint}: {detail}")]
    Setup { endpoint: String, detail: String },
}

pub const TOKEN_REPLAY: &str = "token replay within the window";
pub const PARAMETER_MISMATCH: &str = "same token, other parameters: IdempotentParameterMismatch";
pub const TOKEN_IN_PROGRESS: &str = "same token while running: TransactionInProgress";
pub const CANCELLATION_REASONS: &str = "per-item cancellation reasons in request order";
pub const ALL_OLD_IMAGE: &str = "ALL_OLD image on a failed condition";
pub const TRANSACTION_CONFLICT: &str = "held transaction vs single write: TransactionConflict";
pub const QUERY_REVERSE_LIMIT: &str = "Query ScanIndexForward=false Limit 1";
pub const ADD_MISSING: &str = "ADD on a missing attribute";

/// Parses `dynamodb=URL`.
pub fn parse_target(text: &str) -> Result<String, ProbeError> {
    match text.split_once('=') {
        Some(("dynamodb", url)) if url.starts_with("http://") || url.starts_with("https://") => {
            Ok(url.to_owned())
        }
        _ => Err(ProbeError::BadTarget(text.to_owned())),
    }
}

fn abbreviate(text: impl Into<String>) -> String {
    let text: String = text.into();
    if text.chars().count() <= EVIDENCE_CHARS_MAX {
        return text;
    }
    let cut: String = text.chars().take(EVIDENCE_CHARS_MAX - 1).collect();
    format!("{cut}…")
}

fn row(
    semantic: &'static str,
    verdict: Verdict,
    sent: impl Into<String>,
    got: impl Into<String>,
) -> Row {
    Row {
        semantic,
        verdict,
        sent: abbreviate(sent),
        got: abbreviate(got),
    }
}

fn error_text<E: ProvideErrorMetadata + std::fmt::Debug>(
    error: &SdkError<E, HttpResponse>,
) -> String {
    match error {
        SdkError::ServiceError(service) => match service.err().code() {
            Some(code) => format!("{code}: {}", service.err().message().unwrap_or("")),
            // No error code: an emulator's own failure; the status is the evidence.
            None => format!(
                "HTTP {} without an error code",
                service.raw().status().as_u16()
            ),
        },
        other => format!("{other}"),
    }
}

fn code_of<E: ProvideErrorMetadata, R>(error: &SdkError<E, R>) -> Option<String> {
    match error {
        SdkError::ServiceError(service) => service.err().code().map(str::to_owned),
        _ => None,
    }
}

fn key(partition: &str, sort: i64) -> HashMap<String, AttributeValue> {
    [
        (
            PARTITION.to_owned(),
            AttributeValue::S(partition.to_owned()),
        ),
        (SORT.to_owned(), AttributeValue::N(sort.to_string())),
    ]
    .into()
}

/// Runs every row against `endpoint` on a fresh table, and deletes the table.
pub async fn probe(endpoint: &str) -> Result<ProbeReport, ProbeError> {
    probe_with(endpoint, endpoint, None).await
}

/// The proxy's hold, shared by the probe's rows and the proxy's driver: armed, the driver begins
/// the next TransactWriteItems and parks it here instead of forwarding it.
struct Hold {
    proxy: Arc<Proxy>,
    slot: Arc<Mutex<Option<oneshot::Sender<HeldRequest>>>>,
}

impl Hold {
    fn arm(&self) -> oneshot::Receiver<HeldRequest> {
        let (sender, receiver) = oneshot::channel();
        *self.slot.lock().unwrap_or_else(PoisonError::into_inner) = Some(sender);
        receiver
    }

    fn disarm(&self) {
        self.slot
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
    }

    /// Waits for the armed hold to catch its transaction.
    async fn caught(&self, parked: oneshot::Receiver<HeldRequest>) -> Option<HeldRequest> {
        let caught =
            tokio::time::timeout(Duration::from_millis(HOLD_WAIT_MILLIS_MAX), parked).await;
        self.disarm();
        caught.ok().and_then(Result::ok)
    }

    /// The parked transaction commits: forwarded and answered as any other request.
    async fn release(&self, request: HeldRequest) {
        let answer = self
            .proxy
            .forward(&request)
            .await
            .unwrap_or_else(|error| Proxy::fault(&error.to_string()));
        // A client gone is its own evidence (the row reads its error).
        let _ = self.proxy.deliver(request, answer);
    }
}

/// Serves the probe's client through the proxy: every request forwarded and answered, except a
/// TransactWriteItems the armed hold asks for, which is begun and parked.
async fn drive_proxy(proxy: Arc<Proxy>, slot: Arc<Mutex<Option<oneshot::Sender<HeldRequest>>>>) {
    let idle = Duration::from_secs(DRIVER_IDLE_SECS_MAX);
    while let Ok(request) = proxy.next_request(0, idle).await {
        if request.operation == "TransactWriteItems" {
            let armed = slot.lock().unwrap_or_else(PoisonError::into_inner).take();
            if let Some(parked) = armed {
                match proxy.begin(&request).await {
                    Ok(()) => {
                        if let Err(unclaimed) = parked.send(request) {
                            // The row stopped waiting: commit it so its client is answered.
                            let answer = proxy
                                .forward(&unclaimed)
                                .await
                                .unwrap_or_else(|error| Proxy::fault(&error.to_string()));
                            let _ = proxy.deliver(unclaimed, answer);
                        }
                        continue;
                    }
                    Err(error) => {
                        let _ = proxy.deliver(request, Proxy::fault(&error.to_string()));
                        continue;
                    }
                }
            }
        }
        let answer = proxy
            .forward(&request)
            .await
            .unwrap_or_else(|error| Proxy::fault(&error.to_string()));
        let _ = proxy.deliver(request, answer);
    }
}

/// Runs every row against `upstream` through a conformance proxy (with its token table on or
/// off), with the proxy's hold for the rows that need a running transaction.
pub async fn probe_through_proxy(
    upstream: &str,
    token_table: bool,
) -> Result<ProbeReport, ProbeError> {
    let unreachable = |detail: String| ProbeError::Unreachable {
        endpoint: upstream.to_owned(),
        detail,
    };
    let proxy = Arc::new(
        Proxy::start(upstream, 1)
            .await
            .map_err(|error| unreachable(error.to_string()))?,
    );
    proxy
        .check_upstream()
        .await
        .map_err(|error| unreachable(error.to_string()))?;
    proxy.set_token_table(token_table);
    let slot = Arc::new(Mutex::new(None));
    let driver = tokio::spawn(drive_proxy(proxy.clone(), slot.clone()));
    let hold = Hold {
        proxy: proxy.clone(),
        slot,
    };
    let label = format!(
        "{upstream} through the conformance proxy (token table {})",
        if token_table { "on" } else { "off" }
    );
    let report = probe_with(&proxy.endpoint(0), &label, Some(&hold)).await;
    driver.abort();
    let _ = proxy.delete_token_table().await;
    report
}

async fn probe_with(
    endpoint: &str,
    label: &str,
    hold: Option<&Hold>,
) -> Result<ProbeReport, ProbeError> {
    let client = oncecheck_store::dynamodb::client_for(Some(endpoint)).await;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    let table = format!(
        "oncecheck-probe-{}-{}",
        std::process::id(),
        nanos % 1_000_000_000
    );
    create_table(&client, endpoint, &table).await?;
    let probe = Probe {
        client: &client,
        table: &table,
        run: format!("{nanos:x}"),
    };
    let (replay, mismatch) = probe.token_replay_and_mismatch().await;
    let (in_progress, conflict) = match hold {
        Some(hold) => (
            probe.token_in_progress_held(hold).await,
            probe.transaction_conflict_held(hold).await,
        ),
        None => (
            probe.token_in_progress().await,
            probe.transaction_conflict().await,
        ),
    };
    let rows = vec![
        replay,
        mismatch,
        in_progress,
        probe.cancellation_reasons().await,
        probe.all_old_image().await,
        conflict,
        probe.query_reverse_limit().await,
        probe.add_missing().await,
    ];
    let table_deleted = client
        .delete_table()
        .table_name(&table)
        .send()
        .await
        .is_ok();
    Ok(ProbeReport {
        endpoint: label.to_owned(),
        table,
        rows,
        table_deleted,
    })
}

async fn create_table(client: &Client, endpoint: &str, table: &str) -> Result<(), ProbeError> {
    let attribute = |name: &str, kind| {
        AttributeDefinition::builder()
            .attribute_name(name)
            .attribute_type(kind)
            .build()
    };
    let schema = |name: &str, kind| {
        KeySchemaElement::builder()
            .attribute_name(name)
            .key_type(kind)
            .build()
    };
    let setup = |detail: String| ProbeError::Setup {
        endpoint: endpoint.to_owned(),
        detail,
    };
    let created = client
        .create_table()
        .table_name(table)
        .billing_mode(BillingMode::PayPerRequest)
        .attribute_definitions(
            attribute(PARTITION, ScalarAttributeType::S)
                .map_err(|error| setup(error.to_string()))?,
        )
        .attribute_definitions(
            attribute(SORT, ScalarAttributeType::N).map_err(|error| setup(error.to_string()))?,
        )
        .key_schema(schema(PARTITION, KeyType::Hash).map_err(|error| setup(error.to_string()))?)
        .key_schema(schema(SORT, KeyType::Range).map_err(|error| setup(error.to_string()))?)
        .send()
        .await;
    match created {
        Ok(_) => {}
        Err(SdkError::ServiceError(service)) => {
            return Err(setup(format!(
                "{}: {}",
                service.err().code().unwrap_or("?"),
                service.err().message().unwrap_or("")
            )))
        }
        Err(other) => {
            return Err(ProbeError::Unreachable {
                endpoint: endpoint.to_owned(),
                detail: format!("{other}"),
            })
        }
    }
    // A real table takes a while to become active; an emulator's is active at once.
    for _attempt in 0..120 {
        let described = client
            .describe_table()
            .table_name(table)
            .send()
            .await
            .map_err(|error| setup(error_text(&error)))?;
        let active = described
            .table()
            .and_then(|description| description.table_status())
            .is_some_and(|status| *status == aws_sdk_dynamodb::types::TableStatus::Active);
        if active {
            return Ok(());
        }
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
    Err(setup("the table did not become active".into()))
}

struct Probe<'a> {
    client: &'a Client,
    table: &'a str,
    /// Distinguishes this run's tokens from any earlier run's.
    run: String,
}

impl Probe<'_> {
    fn add(&self, partition: &str, delta: i64) -> TransactWriteItem {
        let update = Update::builder()
            .table_name(self.table)
            .set_key(Some(key(partition, 0)))
            .update_expression("ADD n :delta")
            .expression_attribute_values(":delta", AttributeValue::N(delta.to_string()))
            .build()
            .expect("key, table and expression are set");
        TransactWriteItem::builder().update(update).build()
    }

    fn token(&self, name: &str) -> String {
        let token = format!("{name}-{}", self.run);
        token.chars().take(36).collect()
    }

    async fn counter(&self, partition: &str) -> Result<Option<i64>, String> {
        let read = self
            .client
            .get_item()
            .table_name(self.table)
            .set_key(Some(key(partition, 0)))
            .consistent_read(true)
            .send()
            .await
            .map_err(|error| error_text(&error))?;
        Ok(match read.item().and_then(|item| item.get("n")) {
            Some(AttributeValue::N(number)) => number.parse().ok(),
            _ => None,
        })
    }

    async fn send_tokened(
        &self,
        partition: &str,
        delta: i64,
        token: &str,
    ) -> Result<(), (Option<String>, String)> {
        self.client
            .transact_write_items()
            .transact_items(self.add(partition, delta))
            .client_request_token(token)
            .send()
            .await
            .map(|_| ())
            .map_err(|error| (code_of(&error), error_text(&error)))
    }

    /// The same tokened ADD twice, then the token with another delta.
    async fn token_replay_and_mismatch(&self) -> (Row, Row) {
        let token = self.token("replay");
        let sent = format!("TransactWriteItems{{ADD n 1}} token {token} twice");
        let replay = match (
            self.send_tokened("replay", 1, &token).await,
            self.send_tokened("replay", 1, &token).await,
        ) {
            (Ok(()), Ok(())) => match self.counter("replay").await {
                Ok(Some(1)) => row(
                    TOKEN_REPLAY,
                    Verdict::Supported,
                    sent,
                    "both succeeded; n = 1",
                ),
                Ok(Some(2)) => row(
                    TOKEN_REPLAY,
                    Verdict::NotSupported,
                    sent,
                    "both succeeded; n = 2: re-executed",
                ),
                Ok(other) => row(
                    TOKEN_REPLAY,
                    Verdict::Differs,
                    sent,
                    format!("both succeeded; n = {other:?}"),
                ),
                Err(error) => row(
                    TOKEN_REPLAY,
                    Verdict::Differs,
                    sent,
                    format!("read back: {error}"),
                ),
            },
            (first, second) => row(
                TOKEN_REPLAY,
                Verdict::Differs,
                sent,
                format!("answers {first:?}, {second:?}"),
            ),
        };
        let sent = format!("TransactWriteItems{{ADD n 2}} token {token} (was ADD n 1)");
        let before = self.counter("replay").await.ok().flatten();
        let mismatch = match self.send_tokened("replay", 2, &token).await {
            Err((Some(code), _)) if code == "IdempotentParameterMismatchException" => {
                row(PARAMETER_MISMATCH, Verdict::Supported, sent, code)
            }
            Err((_, text)) => row(PARAMETER_MISMATCH, Verdict::Differs, sent, text),
            Ok(()) => {
                let after = self.counter("replay").await.ok().flatten();
                row(
                    PARAMETER_MISMATCH,
                    Verdict::NotSupported,
                    sent,
                    format!("succeeded; n {before:?} -> {after:?}"),
                )
            }
        };
        (replay, mismatch)
    }

    /// Identical tokened requests sent concurrently: the second meets the first running only if
    /// the race lands inside its execution.
    async fn token_in_progress(&self) -> Row {
        let sent = format!(
            "{RACE_ROUNDS_MAX} pairs of identical tokened TransactWriteItems, concurrently"
        );
        let mut answers: HashMap<String, usize> = HashMap::new();
        for round in 0..RACE_ROUNDS_MAX {
            let token = self.token(&format!("race{round}"));
            let partition = format!("race{round}");
            let (first, second) = tokio::join!(
                self.send_tokened(&partition, 1, &token),
                self.send_tokened(&partition, 1, &token)
            );
            for answer in [first, second] {
                let word = match answer {
                    Ok(()) => "success".to_owned(),
                    Err((code, text)) => code.unwrap_or(text),
                };
                if word == "TransactionInProgressException" {
                    return row(
                        TOKEN_IN_PROGRESS,
                        Verdict::Supported,
                        sent,
                        format!("round {round}: {word}"),
                    );
                }
                *answers.entry(word).or_default() += 1;
            }
        }
        let mut seen: Vec<String> = answers
            .iter()
            .map(|(word, count)| format!("{word} x{count}"))
            .collect();
        seen.sort();
        row(
            TOKEN_IN_PROGRESS,
            Verdict::NotTestableWithoutHold,
            sent,
            format!("never in progress: {}", seen.join(", ")),
        )
    }

    /// A tokened transaction held running in the proxy, and the identical request sent meanwhile.
    async fn token_in_progress_held(&self, hold: &Hold) -> Row {
        let token = self.token("held");
        let sent = format!(
            "TransactWriteItems{{ADD n 1}} token {token} held running; the same request meanwhile"
        );
        let parked = hold.arm();
        let (first, meanwhile) = tokio::join!(self.send_tokened("held", 1, &token), async {
            let request = hold.caught(parked).await?;
            let second = self.send_tokened("held", 1, &token).await;
            hold.release(request).await;
            Some(second)
        });
        let Some(second) = meanwhile else {
            return row(
                TOKEN_IN_PROGRESS,
                Verdict::Differs,
                sent,
                format!("the transaction never reached the hold; it answered {first:?}"),
            );
        };
        let after = self.counter("held").await.ok().flatten();
        match second {
            Err((Some(code), _)) if code == "TransactionInProgressException" => row(
                TOKEN_IN_PROGRESS,
                Verdict::Supported,
                sent,
                format!(
                    "{code}; the first then {}; n = {after:?}",
                    answer_word(&first)
                ),
            ),
            Ok(()) => row(
                TOKEN_IN_PROGRESS,
                Verdict::NotSupported,
                sent,
                format!("the second succeeded while the first ran; n = {after:?}"),
            ),
            Err((_, text)) => row(TOKEN_IN_PROGRESS, Verdict::Differs, sent, text),
        }
    }

    /// A transaction held running in the proxy, and a PutItem of one of its items meanwhile.
    async fn transaction_conflict_held(&self, hold: &Hold) -> Row {
        let sent = "TransactWriteItems{ADD n 1} held running; PutItem of its item meanwhile";
        let parked = hold.arm();
        let transaction = self
            .client
            .transact_write_items()
            .transact_items(self.add("heldconflict", 1))
            .send();
        let (first, meanwhile) = tokio::join!(transaction, async {
            let request = hold.caught(parked).await?;
            let put = self.put_plain("heldconflict", 0, "single").await;
            hold.release(request).await;
            Some(put)
        });
        let Some(put) = meanwhile else {
            return row(
                TRANSACTION_CONFLICT,
                Verdict::Differs,
                sent,
                format!(
                    "the transaction never reached the hold; it answered {}",
                    first.map_or_else(|error| error_text(&error), |_| "success".into())
                ),
            );
        };
        match put {
            Err(text) if text.contains("TransactionConflict") => {
                row(TRANSACTION_CONFLICT, Verdict::Supported, sent, text)
            }
            Ok(()) => row(
                TRANSACTION_CONFLICT,
                Verdict::NotSupported,
                sent,
                "the PutItem succeeded while the transaction ran",
            ),
            Err(text) => row(TRANSACTION_CONFLICT, Verdict::Differs, sent, text),
        }
    }

    async fn put_plain(&self, partition: &str, sort: i64, marker: &str) -> Result<(), String> {
        let mut item = key(partition, sort);
        item.insert("marker".to_owned(), AttributeValue::S(marker.to_owned()));
        self.client
            .put_item()
            .table_name(self.table)
            .set_item(Some(item))
            .send()
            .await
            .map(|_| ())
            .map_err(|error| error_text(&error))
    }

    fn check(&self, partition: &str, condition: &str) -> TransactWriteItem {
        let check = ConditionCheck::builder()
            .table_name(self.table)
            .set_key(Some(key(partition, 0)))
            .condition_expression(condition)
            .build()
            .expect("key, table and condition are set");
        TransactWriteItem::builder().condition_check(check).build()
    }

    /// Sends a transaction that must be cancelled; answers its reasons (code, image).
    async fn cancelled(
        &self,
        items: Vec<TransactWriteItem>,
    ) -> Result<Vec<(String, Option<HashMap<String, AttributeValue>>)>, String> {
        use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
        match self
            .client
            .transact_write_items()
            .set_transact_items(Some(items))
            .send()
            .await
        {
            Ok(_) => Err("committed".into()),
            Err(SdkError::ServiceError(service)) => match service.err() {
                TransactWriteItemsError::TransactionCanceledException(cancelled) => Ok(cancelled
                    .cancellation_reasons()
                    .iter()
                    .map(|reason| {
                        (
                            reason.code().unwrap_or("(no code)").to_owned(),
                            reason.item().cloned(),
                        )
                    })
                    .collect()),
                other => Err(format!(
                    "{}: {}",
                    other.code().unwrap_or("?"),
                    other.message().unwrap_or("")
                )),
            },
            Err(other) => Err(format!("{other}")),
        }
    }

    async fn cancellation_reasons(&self) -> Row {
        let sent = "[check absent exists, put, check present not_exists]";
        if let Err(error) = self.put_plain("present", 0, "old").await {
            return row(
                CANCELLATION_REASONS,
                Verdict::Differs,
                sent,
                format!("setup put: {error}"),
            );
        }
        let put = Put::builder()
            .table_name(self.table)
            .set_item(Some(key("bystander", 0)))
            .build()
            .expect("item and table are set");
        let items = vec![
            self.check("absent", "attribute_exists(pk)"),
            TransactWriteItem::builder().put(put).build(),
            self.check("present", "attribute_not_exists(pk)"),
        ];
        match self.cancelled(items).await {
            Ok(reasons) => {
                let codes: Vec<&str> = reasons.iter().map(|(code, _)| code.as_str()).collect();
                let got = format!("{codes:?}");
                let verdict =
                    if codes == ["ConditionalCheckFailed", "None", "ConditionalCheckFailed"] {
                        Verdict::Supported
                    } else if codes.is_empty() {
                        Verdict::NotSupported
                    } else {
                        Verdict::Differs
                    };
                row(CANCELLATION_REASONS, verdict, sent, got)
            }
            Err(error) => row(CANCELLATION_REASONS, Verdict::Differs, sent, error),
        }
    }

    async fn all_old_image(&self) -> Row {
        let sent = "TransactWriteItems{put present if not_exists, ALL_OLD}";
        if let Err(error) = self.put_plain("imaged", 0, "old").await {
            return row(
                ALL_OLD_IMAGE,
                Verdict::Differs,
                sent,
                format!("setup put: {error}"),
            );
        }
        let mut item = key("imaged", 0);
        item.insert("marker".to_owned(), AttributeValue::S("new".to_owned()));
        let put = Put::builder()
            .table_name(self.table)
            .set_item(Some(item))
            .condition_expression("attribute_not_exists(pk)")
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .build()
            .expect("item and table are set");
        match self
            .cancelled(vec![TransactWriteItem::builder().put(put).build()])
            .await
        {
            Ok(reasons) => match reasons.first() {
                Some((_, Some(image)))
                    if image.get("marker") == Some(&AttributeValue::S("old".into())) =>
                {
                    row(
                        ALL_OLD_IMAGE,
                        Verdict::Supported,
                        sent,
                        "old image {marker: old}",
                    )
                }
                Some((code, Some(image))) => row(
                    ALL_OLD_IMAGE,
                    Verdict::Differs,
                    sent,
                    format!("{code}, image {image:?}"),
                ),
                Some((code, None)) => row(
                    ALL_OLD_IMAGE,
                    Verdict::NotSupported,
                    sent,
                    format!("{code}, no image"),
                ),
                None => row(
                    ALL_OLD_IMAGE,
                    Verdict::NotSupported,
                    sent,
                    "no cancellation reasons",
                ),
            },
            Err(error) => row(ALL_OLD_IMAGE, Verdict::Differs, sent, error),
        }
    }

    /// A transaction and a PutItem on the same item, raced: DynamoDB refuses the put with
    /// TransactionConflict while the transaction holds the item.
    async fn transaction_conflict(&self) -> Row {
        let sent =
            format!("{RACE_ROUNDS_MAX} races: TransactWriteItems{{ADD n 1}} vs PutItem, same item");
        let mut answers: HashMap<String, usize> = HashMap::new();
        for round in 0..RACE_ROUNDS_MAX {
            let partition = format!("conflict{round}");
            let transaction = self
                .client
                .transact_write_items()
                .transact_items(self.add(&partition, 1))
                .send();
            let put = self.put_plain(&partition, 0, "single");
            let (transaction, put) = tokio::join!(transaction, put);
            let words = [
                transaction
                    .map(|_| "success".to_owned())
                    .unwrap_or_else(|error| code_of(&error).unwrap_or_else(|| error_text(&error))),
                put.map(|()| "success".to_owned())
                    .unwrap_or_else(|error| error),
            ];
            for word in words {
                if word.contains("TransactionConflict") {
                    return row(
                        TRANSACTION_CONFLICT,
                        Verdict::Supported,
                        sent,
                        format!("round {round}: {word}"),
                    );
                }
                *answers.entry(word).or_default() += 1;
            }
        }
        let mut seen: Vec<String> = answers
            .iter()
            .map(|(word, count)| format!("{word} x{count}"))
            .collect();
        seen.sort();
        row(
            TRANSACTION_CONFLICT,
            Verdict::NotTestableWithoutHold,
            sent,
            format!("never conflicted: {}", seen.join(", ")),
        )
    }

    async fn query_reverse_limit(&self) -> Row {
        let sent = "items sk 1,2,3; Query pk=q ScanIndexForward=false Limit 1";
        for sort in 1..=3 {
            if let Err(error) = self.put_plain("q", sort, "q").await {
                return row(
                    QUERY_REVERSE_LIMIT,
                    Verdict::Differs,
                    sent,
                    format!("setup put: {error}"),
                );
            }
        }
        let queried = self
            .client
            .query()
            .table_name(self.table)
            .key_condition_expression("pk = :pk")
            .expression_attribute_values(":pk", AttributeValue::S("q".into()))
            .scan_index_forward(false)
            .limit(1)
            .consistent_read(true)
            .send()
            .await;
        match queried {
            Ok(answer) => {
                let sorts: Vec<String> = answer
                    .items()
                    .iter()
                    .map(|item| match item.get(SORT) {
                        Some(AttributeValue::N(number)) => number.clone(),
                        other => format!("{other:?}"),
                    })
                    .collect();
                let more = answer.last_evaluated_key().is_some();
                let got = format!(
                    "sk {sorts:?}, LastEvaluatedKey {}",
                    if more { "set" } else { "absent" }
                );
                let verdict = match (sorts.as_slice(), more) {
                    ([top], true) if top == "3" => Verdict::Supported,
                    ([bottom], _) if bottom == "1" => Verdict::NotSupported,
                    _ => Verdict::Differs,
                };
                row(QUERY_REVERSE_LIMIT, verdict, sent, got)
            }
            Err(error) => row(
                QUERY_REVERSE_LIMIT,
                Verdict::Differs,
                sent,
                error_text(&error),
            ),
        }
    }

    async fn add_missing(&self) -> Row {
        let sent = "UpdateItem ADD n 5 on a missing item, UPDATED_NEW";
        let updated = self
            .client
            .update_item()
            .table_name(self.table)
            .set_key(Some(key("fresh", 0)))
            .update_expression("ADD n :delta")
            .expression_attribute_values(":delta", AttributeValue::N("5".into()))
            .return_values(ReturnValue::UpdatedNew)
            .send()
            .await;
        match updated {
            Ok(answer) => {
                let returned = answer
                    .attributes()
                    .and_then(|attributes| attributes.get("n"))
                    .cloned();
                let stored = self.counter("fresh").await;
                let got = format!("returned {returned:?}, stored {stored:?}");
                let verdict =
                    if returned == Some(AttributeValue::N("5".into())) && stored == Ok(Some(5)) {
                        Verdict::Supported
                    } else {
                        Verdict::Differs
                    };
                row(ADD_MISSING, verdict, sent, got)
            }
            Err(error) => row(ADD_MISSING, Verdict::NotSupported, sent, error_text(&error)),
        }
    }
}

fn answer_word(answer: &Result<(), (Option<String>, String)>) -> String {
    match answer {
        Ok(()) => "succeeded".to_owned(),
        Err((Some(code), _)) => code.clone(),
        Err((None, text)) => text.clone(),
    }
}

/// Writes the table as Markdown.
pub fn write_table(report: &ProbeReport, out: &mut impl Write) -> std::io::Result<()> {
    writeln!(
        out,
        "DynamoDB semantics of {} (table {}, deleted: {})",
        report.endpoint, report.table, report.table_deleted
    )?;
    writeln!(out)?;
    writeln!(out, "| semantic | verdict | sent | got |")?;
    writeln!(out, "|---|---|---|---|")?;
    for row in &report.rows {
        let cell = |text: &str| text.replace('|', "\\|");
        writeln!(
            out,
            "| {} | {} | {} | {} |",
            row.semantic,
            row.verdict,
            cell(&row.sent),
            cell(&row.got)
        )?;
    }
    Ok(())
}

/// `oncecheck probe TARGET`: exit 0 when the probe ran (whatever it found), 2 on a bad target or
/// an endpoint that cannot be reached or set up.
pub fn run_command(target: &str, through_proxy: bool, token_table: bool) -> ExitCode {
    let endpoint = match parse_target(target) {
        Ok(endpoint) => endpoint,
        Err(error) => {
            eprintln!("oncecheck: {error}");
            return ExitCode::from(2);
        }
    };
    let probed = crate::block_on(async {
        if through_proxy {
            probe_through_proxy(&endpoint, token_table).await
        } else {
            probe(&endpoint).await
        }
    });
    let probed = match probed {
        Ok(probed) => probed,
        Err(message) => {
            eprintln!("oncecheck: {message}");
            return ExitCode::from(1);
        }
    };
    match probed {
        Ok(report) => match write_table(&report, &mut std::io::stdout().lock()) {
            Ok(()) => ExitCode::SUCCESS,
            Err(error) => {
                eprintln!("oncecheck: cannot write the table: {error}");
                ExitCode::from(1)
            }
        },
        Err(error) => {
            eprintln!("oncecheck: {error}");
            ExitCode::from(2)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_are_dynamodb_urls() {
        assert_eq!(
            parse_target("dynamodb=http://127.0.0.1:5000").unwrap(),
            "http://127.0.0.1:5000"
        );
        for bad in [
            "dynamodb",
            "memory",
            "dynamodb=",
            "dynamodb=127.0.0.1:5000",
            "sqlite=http://x",
        ] {
            assert!(
                matches!(parse_target(bad), Err(ProbeError::BadTarget(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn evidence_is_abbreviated() {
        let long = "x".repeat(500);
        assert_eq!(abbreviate(long).chars().count(), EVIDENCE_CHARS_MAX);
        assert_eq!(abbreviate("short"), "short");
    }
}
