//! The reliable-write client: tokened TransactWriteItems journaled before the first submission,
//! resent identically under an unknown outcome while the window is open, reconciled after it.
//!
//! Invariants:
//! - One token per intent, checked (1 to [`TOKEN_CHARS_MAX`] characters) before anything is
//!   journaled or sent; every submission of an intent carries that token and the journaled bytes.
//! - Nothing is sent before the journal holds the intent; a journal write that fails stops the
//!   write with [`WriteError::Journal`] and `sent: false`.
//! - A resend happens only while the window, measured from the journaled first-submission time
//!   on the injected clock, still covers the whole attempt (`elapsed + attempt_timeout <
//!   window`); past it the client never resends, it reconciles.
//! - Every intent ends in one recorded final outcome, or stays open (resumable with
//!   [`ReliableWriter::resume`]) when the outcome is still unknown inside the window.
//! - Single-item and batch writes never retry a pattern the retry table calls not idempotent.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodb::config::http::HttpResponse;
use aws_sdk_dynamodb::config::retry::RetryConfig;
use aws_sdk_dynamodb::config::timeout::TimeoutConfig;
use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::types::{
    AttributeValue, Delete, Put, ReturnValuesOnConditionCheckFailure, TransactWriteItem, Update,
    WriteRequest,
};
use aws_sdk_dynamodb::Client;
use oncecheck_idempotency::{Clock, SystemClock};
use rand::Rng;
use serde_json::json;

use crate::classify::{self, Pattern, RetryPlan, RetryRefused, ShapeError};
use crate::journal::{Journal, JournalError};
use crate::wire;

/// DynamoDB accepts a ClientRequestToken of 1 to 36 characters.
pub const TOKEN_CHARS_MAX: usize = 36;
/// DynamoDB's limit on the items of one TransactWriteItems.
pub const TRANSACT_ITEMS_MAX: usize = 100;
/// DynamoDB's limit on the requests of one BatchWriteItem.
pub const BATCH_REQUESTS_MAX: usize = 25;
/// The receipt item's attribute holding the token of the intent that wrote it.
pub const RECEIPT_TOKEN_ATTRIBUTE: &str = "receipt_token";

/// Named limits of the client.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Submissions of one intent (or one single-item write) at most, the first included.
    pub attempts_max: u32,
    /// The service's token window: an identical tokened request inside it is answered without
    /// being applied again. DynamoDB's is 10 minutes.
    pub window_secs: u64,
    /// The SDK's limit on one attempt; a resend must fit in the window with this much to spare.
    pub attempt_timeout_secs: u64,
    pub connect_timeout_secs: u64,
    /// Backoff before a resend: full jitter in [0, min(max, base * 2^(resend - 1))].
    pub backoff_base_millis: u64,
    pub backoff_max_millis: u64,
    /// BatchWriteItem: resends of `UnprocessedItems` at most.
    pub unprocessed_rounds_max: u32,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            attempts_max: 5,
            window_secs: 600,
            attempt_timeout_secs: 5,
            connect_timeout_secs: 2,
            backoff_base_millis: 50,
            backoff_max_millis: 2_000,
            unprocessed_rounds_max: 8,
        }
    }
}

/// Why a token is refused before anything is journaled or sent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    #[error("the token is empty (DynamoDB accepts 1 to {TOKEN_CHARS_MAX} characters)")]
    Empty,
    #[error("the token has {chars} characters (DynamoDB accepts at most {TOKEN_CHARS_MAX})")]
    TooLong { chars: usize },
}

/// Checks a caller-supplied token.
//= specs/tokened-writes.md#T5
//# Bad input and damaged records fail closed.
pub fn check_token(token: &str) -> Result<(), TokenError> {
    let chars = token.chars().count();
    if chars == 0 {
        return Err(TokenError::Empty);
    }
    if chars > TOKEN_CHARS_MAX {
        return Err(TokenError::TooLong { chars });
    }
    Ok(())
}

/// A fresh token: 32 lowercase hex characters (128 random bits).
pub fn new_token() -> String {
    let bits: u128 = rand::rng().random();
    format!("{bits:032x}")
}

/// A caller-supplied reconciliation: did the intent's effects happen?
pub trait ReconcileCheck: Send + Sync {
    fn applied<'a>(
        &'a self,
        client: &'a Client,
    ) -> Pin<Box<dyn Future<Output = Result<bool, String>> + Send + 'a>>;
}

/// The receipt item written in the same transaction as the effects: its presence with the
/// intent's token proves the effects committed. The key must be unique to the intent (the
/// application's idempotency key).
#[derive(Debug, Clone, PartialEq)]
pub struct Receipt {
    pub table: String,
    pub key: HashMap<String, AttributeValue>,
}

/// How an intent is reconciled once the window has passed.
#[derive(Clone)]
pub enum Reconcile {
    /// The default: a receipt item in the transaction (put if absent, carrying the token).
    Receipt(Receipt),
    /// A caller-supplied check.
    Check(Arc<dyn ReconcileCheck>),
}

/// One logical write: a TransactWriteItems request and its token.
#[derive(Clone)]
pub struct Intent {
    items: Vec<TransactWriteItem>,
    token: String,
    reconcile: Reconcile,
}

impl Intent {
    /// An intent with a receipt item and a fresh token.
    pub fn with_receipt(items: Vec<TransactWriteItem>, receipt: Receipt) -> Intent {
        Intent {
            items,
            token: new_token(),
            reconcile: Reconcile::Receipt(receipt),
        }
    }

    /// An intent reconciled by a caller-supplied check, with a fresh token.
    pub fn with_check(items: Vec<TransactWriteItem>, check: Arc<dyn ReconcileCheck>) -> Intent {
        Intent {
            items,
            token: new_token(),
            reconcile: Reconcile::Check(check),
        }
    }

    /// Uses the caller's token instead of a fresh one (checked by [`ReliableWriter::write`]).
    pub fn token(mut self, token: impl Into<String>) -> Intent {
        self.token = token.into();
        self
    }

    pub fn token_str(&self) -> &str {
        &self.token
    }
}

/// What one submission's answer was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    Success,
    /// The response was lost or late, or the service reported an unknown outcome (5xx, throttle).
    Unknown(String),
    /// The request could not be sent (connection refused): this attempt did nothing.
    NotSent(String),
    /// The receipt exists with this intent's token: an earlier attempt committed.
    ReceiptFound,
    /// Cancelled for a conflict with another transaction or for throttling, and for nothing of
    /// its own: nothing applied, resendable.
    Conflict,
    InProgress,
    Mismatch,
    Cancelled(Vec<String>),
    Rejected(String),
}

/// The outcome of [`ReliableWriter::write`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Answered success: applied once (by this submission or, replayed under the token, by an
    /// earlier one).
    Applied,
    /// A resend found the receipt written by an earlier submission of this intent: applied once.
    AppliedEarlier,
    /// Cancelled by a condition: nothing applied. Reasons in request order.
    Cancelled { reasons: Vec<String> },
    /// The service holds the token for other parameters: this request applied nothing.
    ParameterMismatch { message: String },
    /// A submission with this token is still running; the intent stays open (resume it).
    InProgress,
    /// The attempts ran out inside the window with the outcome unknown; the intent stays open.
    Unresolved,
    /// Past the window, reconciliation decided.
    Reconciled { applied: bool },
}

impl Outcome {
    /// The journal's word for a final outcome; `None` for the two open ones.
    fn journal_word(&self) -> Option<&'static str> {
        Some(match self {
            Outcome::Applied => "applied",
            Outcome::AppliedEarlier => "applied-earlier",
            Outcome::Cancelled { .. } => "cancelled",
            Outcome::ParameterMismatch { .. } => "parameter-mismatch",
            Outcome::Reconciled { applied: true } => "reconciled-applied",
            Outcome::Reconciled { applied: false } => "reconciled-not-applied",
            Outcome::InProgress | Outcome::Unresolved => return None,
        })
    }
}

/// What [`ReliableWriter::write`] reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteReport {
    pub token: String,
    pub outcome: Outcome,
    /// Every submission's answer, in order (their count is the requests this write cost, not
    /// counting a reconciliation read).
    pub answers: Vec<Answer>,
}

/// Errors the caller can handle; each says whether anything was sent.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error("bad token: {0}")]
    Token(#[from] TokenError),
    #[error("not a write transaction: {0}")]
    NotAWrite(String),
    #[error("the request cannot be journaled faithfully: {0}")]
    Unjournalable(String),
    #[error("{source} (request sent: {sent})")]
    Journal { source: JournalError, sent: bool },
    #[error(transparent)]
    RetryRefused(#[from] RetryRefused),
    #[error("endpoint unreachable, nothing sent: {0}")]
    Unreachable(String),
    #[error("refused by the service, nothing applied: {code}: {message}")]
    Rejected { code: String, message: String },
    #[error("the receipt is held by another intent (token {found}); nothing applied by this one")]
    ReceiptTaken { found: String },
    #[error("reconciliation failed, the intent stays open: {0}")]
    ReconcileFailed(String),
}

fn journal_before_send(source: JournalError) -> WriteError {
    WriteError::Journal {
        source,
        sent: false,
    }
}

fn journal_after_send(source: JournalError) -> WriteError {
    WriteError::Journal { source, sent: true }
}

/// Builds a client for `endpoint_url` (None: the SDK's default resolution) that makes one attempt
/// per request: this client owns retries, so every submission is one request.
pub async fn client_for(endpoint_url: Option<&str>, limits: &Limits) -> Client {
    let region = aws_config::meta::region::RegionProviderChain::default_provider()
        .or_else(aws_sdk_dynamodb::config::Region::new("us-east-1"));
    let shared = aws_config::defaults(aws_config::BehaviorVersion::latest())
        .region(region)
        .retry_config(RetryConfig::standard().with_max_attempts(1))
        .timeout_config(
            TimeoutConfig::builder()
                .connect_timeout(Duration::from_secs(limits.connect_timeout_secs))
                .operation_attempt_timeout(Duration::from_secs(limits.attempt_timeout_secs))
                .build(),
        )
        .load()
        .await;
    let mut builder = aws_sdk_dynamodb::config::Builder::from(&shared);
    if let Some(url) = endpoint_url {
        builder = builder.endpoint_url(url);
    }
    Client::from_conf(builder.build())
}

/// How a failed request ended, whatever the operation.
enum Failure {
    NotSent(String),
    Unknown(String),
    Service { code: String, message: String },
}

fn connection_refused(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(current) = source {
        if let Some(io) = current.downcast_ref::<std::io::Error>() {
            if io.kind() == std::io::ErrorKind::ConnectionRefused {
                return true;
            }
        }
        source = current.source();
    }
    false
}

const UNKNOWN_OUTCOME_CODES: [&str; 5] = [
    "ThrottlingException",
    "ProvisionedThroughputExceededException",
    "RequestLimitExceeded",
    "InternalServerError",
    "ServiceUnavailable",
];

/// A single-item write's answer: done, its condition failed (`condition_failed` reads the
/// operation's own error type), or another failure.
fn single_outcome<O, E>(
    sent: Result<O, SdkError<E, HttpResponse>>,
    condition_failed: impl Fn(&E) -> bool,
) -> Result<(), SingleFailure>
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
{
    match sent {
        Ok(_) => Ok(()),
        Err(SdkError::ServiceError(service)) if condition_failed(service.err()) => {
            Err(SingleFailure::ConditionFailed)
        }
        Err(error) => Err(SingleFailure::Other(failure_of(&error))),
    }
}

fn failure_of<E>(error: &SdkError<E, HttpResponse>) -> Failure
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
{
    match error {
        SdkError::ServiceError(service) => {
            let code = service.err().code().unwrap_or("unknown").to_owned();
            let message = service.err().message().unwrap_or("").to_owned();
            if service.raw().status().is_server_error()
                || UNKNOWN_OUTCOME_CODES.contains(&code.as_str())
            {
                Failure::Unknown(format!("{code}: {message}"))
            } else {
                Failure::Service { code, message }
            }
        }
        SdkError::DispatchFailure(failure) => match failure.as_connector_error() {
            Some(connector) if connection_refused(connector) => {
                Failure::NotSent(format!("connection refused: {connector}"))
            }
            // A connection that closed or reset after the request was written: unknown.
            connector => Failure::Unknown(format!("connection lost: {connector:?}")),
        },
        SdkError::ConstructionFailure(_) => Failure::Service {
            code: "ConstructionFailure".into(),
            message: format!("{error:?}"),
        },
        // Timeouts and unreadable responses: the request may have been processed.
        other => Failure::Unknown(format!("{other}")),
    }
}

/// Cancellation reasons that blame a passing state of the service, not the request: another
/// transaction on one of its items, or throttling. A cancelled transaction applied nothing.
const TRANSIENT_CANCELLATION_REASONS: [&str; 3] = [
    "TransactionConflict",
    "ThrottlingError",
    "ProvisionedThroughputExceeded",
];

/// Whether a cancellation is resent: some item met a transient reason and none a reason of its
/// own (a failed condition, a validation error, a collection over its size, or a code this client
/// does not know), which the identical request would meet again.
fn resendable_cancellation(codes: &[String]) -> bool {
    let transient = |code: &String| TRANSIENT_CANCELLATION_REASONS.contains(&code.as_str());
    codes.iter().any(transient) && codes.iter().all(|code| code == "None" || transient(code))
}

/// The `tracing` target of the event every wait before a resend emits.
pub const BACKOFF_TARGET: &str = "oncecheck_tokened::backoff";

/// The wait before resend number `resend` (1 for the first): full jitter below a ceiling that
/// doubles from `backoff_base_millis` with every resend, up to `backoff_max_millis`. Each wait is
/// a `debug` event at [`BACKOFF_TARGET`] naming the resend, its ceiling and the draw, so that an
/// operator can see why a write took long, and a test can read the schedule without timing it.
fn backoff(limits: &Limits, resend: u32) -> Duration {
    assert!(
        resend >= 1,
        "a wait comes before a resend, never before the first send"
    );
    let doublings = resend.saturating_sub(1).min(20);
    let ceiling_millis = limits
        .backoff_base_millis
        .saturating_mul(1u64 << doublings)
        .min(limits.backoff_max_millis);
    let wait_millis = rand::rng().random_range(0..=ceiling_millis);
    tracing::debug!(
        target: BACKOFF_TARGET,
        resend,
        ceiling_millis,
        wait_millis,
        "waiting before a resend"
    );
    Duration::from_millis(wait_millis)
}

/// The reliable-write client.
#[derive(Clone)]
pub struct ReliableWriter {
    client: Client,
    journal: Journal,
    limits: Limits,
    clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for ReliableWriter {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("ReliableWriter")
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

/// What the attempt loop knows about an open intent.
struct Open {
    token: String,
    items: Vec<TransactWriteItem>,
    receipt: Option<Receipt>,
    check: Option<Arc<dyn ReconcileCheck>>,
    first_sent_at_millis: i64,
    attempts: u32,
    /// Whether any earlier submission may have reached the service.
    maybe_sent: bool,
}

impl ReliableWriter {
    /// A writer on its own client for `endpoint_url`.
    pub async fn connect(
        endpoint_url: Option<&str>,
        journal: Journal,
        limits: Limits,
    ) -> ReliableWriter {
        let client = client_for(endpoint_url, &limits).await;
        ReliableWriter::from_client(client, journal, limits)
    }

    /// A writer on the caller's client; it must make one attempt per request (no SDK retries).
    pub fn from_client(client: Client, journal: Journal, limits: Limits) -> ReliableWriter {
        assert!(
            limits.attempts_max >= 1,
            "attempts_max counts the first submission"
        );
        assert!(
            limits.attempt_timeout_secs < limits.window_secs,
            "an attempt must fit in the window"
        );
        ReliableWriter {
            client,
            journal,
            limits,
            clock: Arc::new(SystemClock),
        }
    }

    /// Judges the window on `clock` instead of the wall clock (tests).
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> ReliableWriter {
        self.clock = clock;
        self
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    pub fn journal(&self) -> &Journal {
        &self.journal
    }

    /// Writes one intent: checks it, journals it, submits it, and resends or reconciles until
    /// its outcome is known or the attempts run out.
    //= specs/tokened-writes.md#T1
    //# The identical tokened request, retried within the window, applies its effects once.
    pub async fn write(&self, intent: Intent) -> Result<WriteReport, WriteError> {
        check_token(&intent.token)?;
        check_transaction(&intent.items)?;
        let (receipt, check) = match intent.reconcile {
            Reconcile::Receipt(receipt) => (Some(receipt), None),
            Reconcile::Check(check) => (None, Some(check)),
        };
        let mut items = intent.items;
        if let Some(receipt) = &receipt {
            items.push(receipt_put(receipt, &intent.token)?);
        }
        if items.len() > TRANSACT_ITEMS_MAX {
            return Err(WriteError::NotAWrite(format!(
                "{} items (with the receipt); TransactWriteItems takes at most {TRANSACT_ITEMS_MAX}",
                items.len()
            )));
        }
        let request = wire::encode_request(&items, &intent.token);
        let faithful = wire::decode_request(&request).is_ok_and(|(decoded, _)| decoded == items);
        if !faithful {
            return Err(WriteError::Unjournalable(
                "the request does not survive its own encoding".into(),
            ));
        }
        let receipt_text = receipt.as_ref().map(receipt_json);
        let first_sent_at_millis = self.clock.now_millis();
        self.journal
            .record_intent(
                &intent.token,
                &request,
                receipt_text.as_deref(),
                first_sent_at_millis,
            )
            .await
            .map_err(journal_before_send)?;
        let open = Open {
            token: intent.token,
            items,
            receipt,
            check,
            first_sent_at_millis,
            attempts: 0,
            maybe_sent: false,
        };
        self.drive(open).await
    }

    /// Continues an open intent from its journal row (after a restart, or after `InProgress` /
    /// `Unresolved`). `check` is needed when the intent has no receipt.
    pub async fn resume(
        &self,
        token: &str,
        check: Option<Arc<dyn ReconcileCheck>>,
    ) -> Result<WriteReport, WriteError> {
        let entry = self
            .journal
            .entry(token)
            .await
            .map_err(journal_before_send)?
            .ok_or_else(|| {
                journal_before_send(JournalError::Unknown {
                    token: token.to_owned(),
                })
            })?;
        if let Some(outcome) = entry.outcome {
            return Err(journal_before_send(JournalError::AlreadyFinished {
                token: token.to_owned(),
                outcome,
            }));
        }
        let (items, journaled_token) = wire::decode_request(&entry.request)
            .map_err(|error| WriteError::Unjournalable(error.to_string()))?;
        // The row comes from disk: a request journaled under another token is damaged data the
        // caller can be told about, not a bug of this process.
        if journaled_token != entry.token {
            return Err(journal_before_send(JournalError::Inconsistent {
                token: entry.token,
                detail: format!("its request carries the token {journaled_token}"),
            }));
        }
        let receipt = entry.receipt.as_deref().map(receipt_of_json).transpose()?;
        if receipt.is_none() && check.is_none() {
            return Err(WriteError::ReconcileFailed(format!(
                "intent {token} has no receipt: resume needs a check"
            )));
        }
        let open = Open {
            token: entry.token,
            items,
            receipt,
            check,
            first_sent_at_millis: entry.first_sent_at_millis,
            attempts: entry.attempts,
            // The journal cannot say whether the journaled submission left the process.
            maybe_sent: true,
        };
        self.drive(open).await
    }

    fn window_open(&self, open: &Open) -> bool {
        let elapsed_millis = self
            .clock
            .now_millis()
            .saturating_sub(open.first_sent_at_millis);
        let needed_millis =
            i64::try_from(self.limits.attempt_timeout_secs * 1000).unwrap_or(i64::MAX);
        let window_millis = i64::try_from(self.limits.window_secs * 1000).unwrap_or(i64::MAX);
        elapsed_millis.saturating_add(needed_millis) < window_millis
    }

    async fn drive(&self, mut open: Open) -> Result<WriteReport, WriteError> {
        let mut answers = Vec::new();
        // `attempts_max` bounds the submissions of one call, by the range itself;
        // `open.attempts` counts them all.
        for submitted_before in 0..self.limits.attempts_max {
            if open.attempts == 0 {
                // The journal row records this first submission.
                open.attempts = 1;
            } else {
                if !answers.is_empty() {
                    tokio::time::sleep(backoff(&self.limits, submitted_before)).await;
                }
                //= specs/tokened-writes.md#T1
                //# The identical tokened request, retried within the window, applies its effects once.
                if !self.window_open(&open) {
                    // Past the window an identical request would execute as a new one.
                    return self.reconcile(open, answers).await;
                }
                self.record_resend(&mut open).await?;
            }
            let answer = self.submit(&open).await;
            answers.push(answer.clone());
            match answer {
                Answer::Success => return self.end(open, Outcome::Applied, answers).await,
                Answer::ReceiptFound => {
                    return self.end(open, Outcome::AppliedEarlier, answers).await
                }
                Answer::Cancelled(reasons) => {
                    return self
                        .end(open, Outcome::Cancelled { reasons }, answers)
                        .await
                }
                //= specs/tokened-writes.md#T2
                //# A live token with other parameters is rejected and applies nothing.
                Answer::Mismatch => {
                    let message = "the token is live with other parameters".to_owned();
                    return self
                        .end(open, Outcome::ParameterMismatch { message }, answers)
                        .await;
                }
                Answer::Rejected(detail) => {
                    if open.maybe_sent {
                        // An earlier submission may have committed: this refusal does not end
                        // the intent.
                        continue;
                    }
                    return Err(self.end_rejected(&open.token, &detail).await);
                }
                Answer::Unknown(_) | Answer::InProgress => open.maybe_sent = true,
                Answer::NotSent(_) | Answer::Conflict => {}
            }
        }
        //= specs/tokened-writes.md#T6
        //# Every client eventually learns its write's outcome within its retries, or gives up and reports what it knows: the outcome it reads back, or that the outcome is unknown.
        self.out_of_attempts(open, answers).await
    }

    /// Journals the resend about to be made (the journal counts every submission of the intent).
    async fn record_resend(&self, open: &mut Open) -> Result<(), WriteError> {
        open.attempts += 1;
        self.journal
            .record_attempt(&open.token, open.attempts)
            .await
            .map_err(|source| WriteError::Journal {
                source,
                sent: open.maybe_sent,
            })
    }

    /// Ends an intent none of whose submissions can have reached the service with the refusal
    /// `detail` (`code: message`), as the error the caller gets.
    async fn end_rejected(&self, token: &str, detail: &str) -> WriteError {
        if let Err(error) = self.finish(token, "rejected", detail).await {
            return error;
        }
        let (code, message) = detail.split_once(": ").unwrap_or((detail, ""));
        WriteError::Rejected {
            code: code.to_owned(),
            message: message.to_owned(),
        }
    }

    /// The attempts of this call are spent: the intent stays open (`InProgress`, `Unresolved`)
    /// when a submission may have reached the service, or ends `not-sent` when none did.
    async fn out_of_attempts(
        &self,
        open: Open,
        answers: Vec<Answer>,
    ) -> Result<WriteReport, WriteError> {
        let outcome = match answers.last() {
            Some(Answer::InProgress) => Outcome::InProgress,
            _ if !open.maybe_sent => {
                let detail = match answers.last() {
                    Some(Answer::NotSent(detail)) => detail.clone(),
                    _ => "nothing sent".to_owned(),
                };
                self.finish(&open.token, "not-sent", &detail).await?;
                return Err(WriteError::Unreachable(detail));
            }
            _ => Outcome::Unresolved,
        };
        Ok(WriteReport {
            token: open.token,
            outcome,
            answers,
        })
    }

    async fn submit(&self, open: &Open) -> Answer {
        let sent = self
            .client
            .transact_write_items()
            .set_transact_items(Some(open.items.clone()))
            .client_request_token(&open.token)
            .send()
            .await;
        let error = match sent {
            Ok(_) => return Answer::Success,
            Err(error) => error,
        };
        use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
        if let SdkError::ServiceError(service) = &error {
            match service.err() {
                TransactWriteItemsError::TransactionCanceledException(cancelled) => {
                    let reasons: Vec<(String, Option<HashMap<String, AttributeValue>>)> = cancelled
                        .cancellation_reasons()
                        .iter()
                        .map(|reason| {
                            (
                                reason.code().unwrap_or("None").to_owned(),
                                reason.item().cloned(),
                            )
                        })
                        .collect();
                    return self.settle_cancellation(open, reasons).await;
                }
                TransactWriteItemsError::IdempotentParameterMismatchException(_) => {
                    return Answer::Mismatch
                }
                TransactWriteItemsError::TransactionInProgressException(_) => {
                    return Answer::InProgress
                }
                _ => {}
            }
        }
        match failure_of(&error) {
            Failure::NotSent(detail) => Answer::NotSent(detail),
            Failure::Unknown(detail) => Answer::Unknown(detail),
            Failure::Service { code, message } => Answer::Rejected(format!("{code}: {message}")),
        }
    }

    /// Reads a cancellation: the receipt's condition failing on this intent's own receipt means an
    /// earlier submission committed (a service without token semantics re-executes the request,
    /// and the receipt makes that re-execution fail instead of applying twice).
    async fn settle_cancellation(
        &self,
        open: &Open,
        reasons: Vec<(String, Option<HashMap<String, AttributeValue>>)>,
    ) -> Answer {
        let codes: Vec<String> = reasons.iter().map(|(code, _)| code.clone()).collect();
        if let Some(receipt) = &open.receipt {
            let receipt_index = open.items.len() - 1;
            if let Some((code, image)) = reasons.get(receipt_index) {
                if code == "ConditionalCheckFailed" {
                    let holder = match image {
                        Some(image) => Ok(receipt_token(image)),
                        None => self
                            .read_receipt(receipt)
                            .await
                            .map(|found| found.flatten()),
                    };
                    match holder {
                        Ok(Some(found)) if found == open.token => return Answer::ReceiptFound,
                        Ok(Some(found)) => {
                            return Answer::Cancelled(vec![format!("receipt held by {found}")])
                        }
                        Ok(None) => {}
                        Err(detail) => return Answer::Unknown(detail),
                    }
                }
            }
        }
        if resendable_cancellation(&codes) {
            return Answer::Conflict;
        }
        Answer::Cancelled(codes)
    }

    /// The receipt's token: `Ok(None)` the receipt is absent; `Ok(Some(None))` present without one.
    async fn read_receipt(&self, receipt: &Receipt) -> Result<Option<Option<String>>, String> {
        let read = self
            .client
            .get_item()
            .table_name(&receipt.table)
            .set_key(Some(receipt.key.clone()))
            .consistent_read(true)
            .send()
            .await
            .map_err(|error| format!("reading the receipt: {error}"))?;
        Ok(read.item().map(receipt_token))
    }

    /// Past the window: decide from the receipt or the caller's check, never by resending.
    //= specs/tokened-writes.md#T3
    //# An unknown outcome is all or nothing.
    async fn reconcile(&self, open: Open, answers: Vec<Answer>) -> Result<WriteReport, WriteError> {
        let applied = if let Some(receipt) = &open.receipt {
            // The receipt commits with the effects or not at all, so its presence is theirs.
            match self
                .read_receipt(receipt)
                .await
                .map_err(WriteError::ReconcileFailed)?
            {
                None => false,
                Some(Some(found)) if found == open.token => true,
                Some(found) => {
                    let found = found.unwrap_or_default();
                    self.finish(&open.token, "receipt-taken", &found).await?;
                    return Err(WriteError::ReceiptTaken { found });
                }
            }
        } else if let Some(check) = &open.check {
            check
                .applied(&self.client)
                .await
                .map_err(WriteError::ReconcileFailed)?
        } else {
            return Err(WriteError::ReconcileFailed(
                "no receipt and no check".into(),
            ));
        };
        self.end(open, Outcome::Reconciled { applied }, answers)
            .await
    }

    async fn end(
        &self,
        open: Open,
        outcome: Outcome,
        answers: Vec<Answer>,
    ) -> Result<WriteReport, WriteError> {
        if let Some(word) = outcome.journal_word() {
            let detail = format!(
                "{} submissions; last answer {:?}",
                open.attempts,
                answers.last()
            );
            self.finish(&open.token, word, &detail).await?;
        }
        Ok(WriteReport {
            token: open.token,
            outcome,
            answers,
        })
    }

    async fn finish(&self, token: &str, word: &str, detail: &str) -> Result<(), WriteError> {
        self.journal
            .finish(token, word, detail, self.clock.now_millis())
            .await
            .map_err(journal_after_send)
    }

    /// Sends one single-item write (a Put, Update or Delete item, sent as PutItem, UpdateItem or
    /// DeleteItem). With `RetryAsk::OnUnknownOutcome` the retry table is consulted first: a
    /// pattern that is not idempotent is refused before anything is sent.
    pub async fn send_single(
        &self,
        item: TransactWriteItem,
        ask: RetryAsk,
    ) -> Result<SingleOutcome, WriteError> {
        let pattern = classify::classify_item(&item)
            .map_err(|error| WriteError::NotAWrite(error.to_string()))?;
        let plan = match ask {
            RetryAsk::Never => None,
            RetryAsk::OnUnknownOutcome => Some(classify::retry_plan(pattern)?),
        };
        let attempts_max = if plan.is_some() {
            self.limits.attempts_max
        } else {
            1
        };
        let mut maybe_sent = false;
        let mut last = String::new();
        for attempt in 1..=attempts_max {
            if attempt > 1 {
                tokio::time::sleep(backoff(&self.limits, attempt - 1)).await;
            }
            match self.send_single_once(&item).await {
                Ok(()) => return Ok(SingleOutcome::Applied { attempts: attempt }),
                Err(SingleFailure::ConditionFailed) => {
                    return Ok(SingleOutcome::ConditionFailed {
                        attempts: attempt,
                        after_unknown_outcome: maybe_sent,
                        read_back_needed: maybe_sent && plan == Some(RetryPlan::ResendThenReadBack),
                    })
                }
                Err(SingleFailure::Other(Failure::Service { code, message })) => {
                    return Err(WriteError::Rejected { code, message })
                }
                Err(SingleFailure::Other(Failure::NotSent(detail))) => last = detail,
                Err(SingleFailure::Other(Failure::Unknown(detail))) => {
                    maybe_sent = true;
                    last = detail;
                }
            }
        }
        if maybe_sent {
            Ok(SingleOutcome::Unknown {
                attempts: attempts_max,
                pattern,
                last,
            })
        } else {
            Err(WriteError::Unreachable(last))
        }
    }

    async fn send_single_once(&self, item: &TransactWriteItem) -> Result<(), SingleFailure> {
        if let Some(put) = item.put() {
            return self.send_put(put).await;
        }
        if let Some(update) = item.update() {
            return self.send_update(update).await;
        }
        let delete = item
            .delete()
            .expect("classify_item admits Put, Update and Delete only");
        self.send_delete(delete).await
    }

    /// A transaction's Put item sent alone, as PutItem.
    async fn send_put(&self, put: &Put) -> Result<(), SingleFailure> {
        use aws_sdk_dynamodb::operation::put_item::PutItemError;
        let sent = self
            .client
            .put_item()
            .table_name(put.table_name())
            .set_item(Some(put.item().clone()))
            .set_condition_expression(put.condition_expression().map(str::to_owned))
            .set_expression_attribute_names(put.expression_attribute_names().cloned())
            .set_expression_attribute_values(put.expression_attribute_values().cloned())
            .send()
            .await;
        single_outcome(sent, |error| {
            matches!(error, PutItemError::ConditionalCheckFailedException(_))
        })
    }

    /// A transaction's Update item sent alone, as UpdateItem.
    async fn send_update(&self, update: &Update) -> Result<(), SingleFailure> {
        use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
        let sent = self
            .client
            .update_item()
            .table_name(update.table_name())
            .set_key(Some(update.key().clone()))
            .update_expression(update.update_expression())
            .set_condition_expression(update.condition_expression().map(str::to_owned))
            .set_expression_attribute_names(update.expression_attribute_names().cloned())
            .set_expression_attribute_values(update.expression_attribute_values().cloned())
            .send()
            .await;
        single_outcome(sent, |error| {
            matches!(error, UpdateItemError::ConditionalCheckFailedException(_))
        })
    }

    /// A transaction's Delete item sent alone, as DeleteItem.
    async fn send_delete(&self, delete: &Delete) -> Result<(), SingleFailure> {
        use aws_sdk_dynamodb::operation::delete_item::DeleteItemError;
        let sent = self
            .client
            .delete_item()
            .table_name(delete.table_name())
            .set_key(Some(delete.key().clone()))
            .set_condition_expression(delete.condition_expression().map(str::to_owned))
            .set_expression_attribute_names(delete.expression_attribute_names().cloned())
            .set_expression_attribute_values(delete.expression_attribute_values().cloned())
            .send()
            .await;
        single_outcome(sent, |error| {
            matches!(error, DeleteItemError::ConditionalCheckFailedException(_))
        })
    }

    /// Sends a BatchWriteItem and resends only the `UnprocessedItems` the service returns, at most
    /// `unprocessed_rounds_max` times. A lost whole response is never resent: the requests of
    /// that round come back for reconciliation.
    pub async fn send_batch(
        &self,
        requests: HashMap<String, Vec<WriteRequest>>,
    ) -> Result<BatchOutcome, WriteError> {
        let count: usize = requests.values().map(Vec::len).sum();
        if count == 0 {
            return Err(WriteError::NotAWrite(
                "a BatchWriteItem with no requests".into(),
            ));
        }
        if count > BATCH_REQUESTS_MAX {
            return Err(WriteError::NotAWrite(format!(
                "{count} requests; BatchWriteItem takes at most {BATCH_REQUESTS_MAX}"
            )));
        }
        let mut pending = requests;
        // The first send and `unprocessed_rounds_max` resends: bounded by the range itself.
        let rounds_max = self.limits.unprocessed_rounds_max.saturating_add(1);
        for rounds in 1..=rounds_max {
            let sent = self
                .client
                .batch_write_item()
                .set_request_items(Some(pending.clone()))
                .send()
                .await;
            match sent {
                Ok(answer) => {
                    let unprocessed: HashMap<String, Vec<WriteRequest>> = answer
                        .unprocessed_items()
                        .cloned()
                        .unwrap_or_default()
                        .into_iter()
                        .filter(|(_, requests)| !requests.is_empty())
                        .collect();
                    if unprocessed.is_empty() {
                        return Ok(BatchOutcome::Done { rounds });
                    }
                    pending = unprocessed;
                    if rounds == rounds_max {
                        break;
                    }
                    tokio::time::sleep(backoff(&self.limits, rounds)).await;
                }
                Err(error) => {
                    return match failure_of(&error) {
                        Failure::Service { code, message } if rounds == 1 => {
                            Err(WriteError::Rejected { code, message })
                        }
                        Failure::NotSent(detail) if rounds == 1 => {
                            Err(WriteError::Unreachable(detail))
                        }
                        Failure::Unknown(_) | Failure::Service { .. } | Failure::NotSent(_) => {
                            Ok(BatchOutcome::Unknown { rounds, pending })
                        }
                    }
                }
            }
        }
        Ok(BatchOutcome::Unprocessed {
            rounds: rounds_max,
            items: pending,
        })
    }
}

enum SingleFailure {
    ConditionFailed,
    Other(Failure),
}

/// Whether a single-item write may be resent after an unknown outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryAsk {
    Never,
    OnUnknownOutcome,
}

/// The outcome of [`ReliableWriter::send_single`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SingleOutcome {
    Applied {
        attempts: u32,
    },
    /// The condition failed. After an unknown outcome this is not proof of either outcome: for a
    /// conditional create the caller must read the item back (`read_back_needed`).
    ConditionFailed {
        attempts: u32,
        after_unknown_outcome: bool,
        read_back_needed: bool,
    },
    /// The attempts ran out with the outcome unknown.
    Unknown {
        attempts: u32,
        pattern: Pattern,
        last: String,
    },
}

/// The outcome of [`ReliableWriter::send_batch`].
#[derive(Debug, Clone, PartialEq)]
pub enum BatchOutcome {
    Done {
        rounds: u32,
    },
    /// The service kept returning these after `unprocessed_rounds_max` resends.
    Unprocessed {
        rounds: u32,
        items: HashMap<String, Vec<WriteRequest>>,
    },
    /// A round's whole response was lost: these requests may or may not have been applied.
    Unknown {
        rounds: u32,
        pending: HashMap<String, Vec<WriteRequest>>,
    },
}

/// A transaction must write: at least one Put, Update or Delete, every item well formed.
fn check_transaction(items: &[TransactWriteItem]) -> Result<(), WriteError> {
    if items.is_empty() {
        return Err(WriteError::NotAWrite(
            "a TransactWriteItems with no items".into(),
        ));
    }
    let mut writes = 0;
    for (index, item) in items.iter().enumerate() {
        match classify::classify_item(item) {
            Ok(_) => writes += 1,
            Err(ShapeError::ConditionCheckOnly) => {}
            Err(error) => return Err(WriteError::NotAWrite(format!("item {index}: {error}"))),
        }
    }
    if writes == 0 {
        return Err(WriteError::NotAWrite(
            "only ConditionChecks: the transaction writes nothing".into(),
        ));
    }
    Ok(())
}

fn receipt_put(receipt: &Receipt, token: &str) -> Result<TransactWriteItem, WriteError> {
    let Some(first_key) = receipt.key.keys().min() else {
        return Err(WriteError::NotAWrite("a receipt with an empty key".into()));
    };
    let mut item = receipt.key.clone();
    item.insert(
        RECEIPT_TOKEN_ATTRIBUTE.to_owned(),
        AttributeValue::S(token.to_owned()),
    );
    let put = Put::builder()
        .table_name(&receipt.table)
        .set_item(Some(item))
        .condition_expression("attribute_not_exists(#receipt_key)")
        .expression_attribute_names("#receipt_key", first_key)
        .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
        .build()
        .map_err(|error| WriteError::NotAWrite(format!("receipt: {error}")))?;
    Ok(TransactWriteItem::builder().put(put).build())
}

fn receipt_token(image: &HashMap<String, AttributeValue>) -> Option<String> {
    match image.get(RECEIPT_TOKEN_ATTRIBUTE) {
        Some(AttributeValue::S(token)) => Some(token.clone()),
        _ => None,
    }
}

fn receipt_json(receipt: &Receipt) -> String {
    json!({ "TableName": receipt.table, "Key": wire::encode_map(&receipt.key) }).to_string()
}

fn receipt_of_json(text: &str) -> Result<Receipt, WriteError> {
    let value: serde_json::Value =
        serde_json::from_str(text).map_err(|error| WriteError::Unjournalable(error.to_string()))?;
    let table = value["TableName"]
        .as_str()
        .ok_or_else(|| WriteError::Unjournalable("receipt table".into()))?;
    let key = wire::decode_map(&value["Key"])
        .map_err(|error| WriteError::Unjournalable(error.to_string()))?;
    Ok(Receipt {
        table: table.to_owned(),
        key,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_checked_by_length_in_characters() {
        assert_eq!(check_token(""), Err(TokenError::Empty));
        assert_eq!(
            check_token(&"a".repeat(37)),
            Err(TokenError::TooLong { chars: 37 })
        );
        assert_eq!(check_token(&"a".repeat(36)), Ok(()));
        assert_eq!(
            check_token(&"é".repeat(36)),
            Ok(()),
            "characters, not bytes"
        );
        let token = new_token();
        assert_eq!(token.len(), 32);
        assert_eq!(check_token(&token), Ok(()));
        assert_ne!(new_token(), token);
    }

    #[test]
    fn backoff_stays_under_its_ceiling() {
        let limits = Limits::default();
        for resend in 1..40 {
            assert!(backoff(&limits, resend) <= Duration::from_millis(limits.backoff_max_millis));
        }
        assert!(backoff(&limits, 1) <= Duration::from_millis(limits.backoff_base_millis));
    }
}
