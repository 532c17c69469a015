//! Answers an emulator does not give, from a loopback endpoint speaking DynamoDB's JSON wire
//! shape to the real SDK: a parameter mismatch, a token in progress, UnprocessedItems; and a
//! journal that cannot be written, and an endpoint that is not there.

mod support;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use aws_sdk_dynamodb::types::{AttributeValue, PutRequest, WriteRequest};
use oncecheck_tokened::{
    Answer, BatchOutcome, Intent, Journal, JournalError, Outcome, ReconcileCheck, ReliableWriter,
    RetryAsk, SingleOutcome, WriteError,
};
use serde_json::json;
use support::fake_endpoint::{FakeEndpoint, Scripted};
use support::*;

const TABLE: &str = "accounts";

/// A caller's check that counts its calls and answers `applied`.
struct Counted {
    calls: AtomicU32,
    applied: bool,
}

impl ReconcileCheck for Counted {
    fn applied<'a>(
        &'a self,
        _client: &'a aws_sdk_dynamodb::Client,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<bool, String>> + Send + 'a>>
    {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let applied = self.applied;
        Box::pin(async move { Ok(applied) })
    }
}

fn transfer() -> Vec<aws_sdk_dynamodb::types::TransactWriteItem> {
    vec![add_balance(TABLE, "A", 5), add_balance(TABLE, "B", 5)]
}

//= specs/tokened-writes.md#T2
//# A live token with other parameters is rejected and applies nothing.
#[tokio::test]
async fn a_parameter_mismatch_is_a_typed_final_outcome() {
    let fake = FakeEndpoint::start(vec![Scripted::error(
        400,
        "IdempotentParameterMismatchException",
        "token reused",
    )])
    .await;
    let (writer, _clock, _directory) = writer(&fake.url).await;
    let intent = Intent::with_receipt(transfer(), receipt(TABLE, "m"));
    let token = intent.token_str().to_owned();
    let report = writer.write(intent).await.unwrap();
    assert!(
        matches!(report.outcome, Outcome::ParameterMismatch { .. }),
        "{report:?}"
    );
    assert_eq!(report.answers, vec![Answer::Mismatch]);
    assert_eq!(fake.requests().len(), 1, "a mismatch is not resent");
    let (operation, body) = &fake.requests()[0];
    assert_eq!(operation, "TransactWriteItems");
    assert_eq!(body["ClientRequestToken"], json!(token));
    let entry = writer.journal().entry(&token).await.unwrap().unwrap();
    assert_eq!(entry.outcome.as_deref(), Some("parameter-mismatch"));
}

/// TransactionInProgress is resent (identically, same token) until the attempts run out; the
/// intent then stays open with the typed outcome, and past the window it is reconciled by the
/// caller's check without another request.
#[tokio::test]
async fn a_token_in_progress_is_a_typed_outcome_then_reconciled_past_the_window() {
    let fake = FakeEndpoint::start(vec![Scripted::error(
        400,
        "TransactionInProgressException",
        "still running",
    )])
    .await;
    let (writer, clock, _directory) = writer(&fake.url).await;
    let check = Arc::new(Counted {
        calls: AtomicU32::new(0),
        applied: true,
    });
    let intent = Intent::with_check(transfer(), check.clone());
    let token = intent.token_str().to_owned();
    let report = writer.write(intent).await.unwrap();
    assert_eq!(report.outcome, Outcome::InProgress);
    let attempts_max = test_limits().attempts_max as usize;
    assert_eq!(report.answers, vec![Answer::InProgress; attempts_max]);
    let requests = fake.requests();
    assert_eq!(requests.len(), attempts_max);
    assert!(
        requests.iter().all(|(_, body)| body == &requests[0].1),
        "every resend is the identical request"
    );
    assert_eq!(requests[0].1["ClientRequestToken"], json!(token));
    assert_eq!(
        writer.journal().open_entries().await.unwrap().len(),
        1,
        "open, not ended"
    );

    clock.advance_secs(10 * 60);
    let resumed = writer.resume(&token, Some(check.clone())).await.unwrap();
    assert_eq!(resumed.outcome, Outcome::Reconciled { applied: true });
    assert_eq!(
        fake.requests().len(),
        attempts_max,
        "past the window nothing is resent"
    );
    assert_eq!(check.calls.load(Ordering::SeqCst), 1);
    let entry = writer.journal().entry(&token).await.unwrap().unwrap();
    assert_eq!(entry.outcome.as_deref(), Some("reconciled-applied"));
}

/// Past the window a receipt holding another intent's token is not this intent's commit: the
/// write ends `receipt-taken` with the token found, and nothing is resent.
//= specs/tokened-writes.md#T3
//# An unknown outcome is all or nothing.
#[tokio::test]
async fn a_receipt_holding_another_token_is_reported_taken_not_applied() {
    let attempts_max = test_limits().attempts_max as usize;
    let mut script =
        vec![Scripted::error(400, "TransactionInProgressException", "still running"); attempts_max];
    script.push(Scripted::ok(json!({
        "Item": {
            "pk": { "S": "receipt#m" },
            "receipt_token": { "S": "another-intents-token" },
        }
    })));
    let fake = FakeEndpoint::start(script).await;
    let (writer, clock, _directory) = writer(&fake.url).await;
    let intent = Intent::with_receipt(transfer(), receipt(TABLE, "m"));
    let token = intent.token_str().to_owned();
    let report = writer.write(intent).await.unwrap();
    assert_eq!(report.outcome, Outcome::InProgress);

    clock.advance_secs(10 * 60);
    let resumed = writer.resume(&token, None).await;
    match resumed {
        Err(WriteError::ReceiptTaken { found }) => assert_eq!(found, "another-intents-token"),
        other => panic!("expected the receipt taken, got {other:?}"),
    }
    let requests = fake.requests();
    assert_eq!(requests.len(), attempts_max + 1, "one read, no resend");
    assert_eq!(requests[attempts_max].0, "GetItem");
    let entry = writer.journal().entry(&token).await.unwrap().unwrap();
    assert_eq!(entry.outcome.as_deref(), Some("receipt-taken"));
}

/// A server error, a throttled request (a 400 whose code says the service may not have run it)
/// and a server fault whose code the client does not know (any 5xx) are unknown outcomes:
/// resent with the same token, then applied. None is a rejection.
//= specs/tokened-writes.md#T1
//# The identical tokened request, retried within the window, applies its effects once.
#[tokio::test]
async fn a_server_error_a_throttled_request_and_an_unfamiliar_server_fault_are_resent() {
    for first_answer in [
        Scripted::error(500, "InternalServerError", "outcome unknown"),
        Scripted::error(400, "ThrottlingException", "slow down"),
        Scripted::error(502, "SomeGatewayFault", "bad gateway"),
    ] {
        let fake = FakeEndpoint::start(vec![first_answer, Scripted::ok(json!({}))]).await;
        let (writer, _clock, _directory) = writer(&fake.url).await;
        let report = writer
            .write(Intent::with_receipt(transfer(), receipt(TABLE, "t")))
            .await
            .unwrap();
        assert_eq!(report.outcome, Outcome::Applied);
        let requests = fake.requests();
        assert_eq!(requests.len(), 2, "resent once");
        assert_eq!(requests[0].1, requests[1].1, "the identical request");
    }
}

/// A resend must finish inside the window: with no more than one attempt's timeout left (the
/// test limits' 3 s of a 600 s window) the writer reconciles instead, reading the receipt; with
/// a little more it resends.
//= specs/tokened-writes.md#T1
//# The identical tokened request, retried within the window, applies its effects once.
#[tokio::test]
async fn a_resend_that_could_outlast_the_window_is_not_made() {
    let attempts_max = test_limits().attempts_max as usize;
    let window_secs = test_limits().window_secs;
    for (elapsed_secs, resends) in [
        (window_secs - 2, false),
        (window_secs - 3, false),
        (window_secs - 4, true),
    ] {
        let mut script =
            vec![
                Scripted::error(400, "TransactionInProgressException", "still running");
                attempts_max
            ];
        script.push(Scripted::ok(json!({})));
        let fake = FakeEndpoint::start(script).await;
        let (writer, clock, _directory) = writer(&fake.url).await;
        let intent = Intent::with_receipt(transfer(), receipt(TABLE, "w"));
        let token = intent.token_str().to_owned();
        assert_eq!(
            writer.write(intent).await.unwrap().outcome,
            Outcome::InProgress
        );
        clock.advance_secs(i64::try_from(elapsed_secs).unwrap());
        let resumed = writer.resume(&token, None).await.unwrap();
        let next = &fake.requests()[attempts_max].0;
        if resends {
            assert_eq!(next, "TransactWriteItems", "{elapsed_secs} s in");
            assert_eq!(resumed.outcome, Outcome::Applied);
        } else {
            assert_eq!(next, "GetItem", "{elapsed_secs} s in: the receipt is read");
            assert_eq!(resumed.outcome, Outcome::Reconciled { applied: false });
        }
    }
}

/// A cancellation for a conflict with another transaction, or for throttling, applied nothing:
/// the identical request is resent and applies. A cancellation that names a reason of the
/// request's own (a failed condition, a validation error) is final, whatever else it names, and
/// so is one that names no transient reason.
#[tokio::test]
async fn a_conflict_or_a_throttle_is_resent_and_a_cancellation_naming_the_request_is_final() {
    let fake = FakeEndpoint::start(vec![
        Scripted::cancelled(&["TransactionConflict", "None", "None"]),
        Scripted::ok(json!({})),
    ])
    .await;
    let (resending_writer, _clock, _directory) = writer(&fake.url).await;
    let report = resending_writer
        .write(Intent::with_receipt(transfer(), receipt(TABLE, "c")))
        .await
        .unwrap();
    assert_eq!(report.outcome, Outcome::Applied, "{report:?}");
    assert_eq!(report.answers, vec![Answer::Conflict, Answer::Success]);
    let requests = fake.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(
        requests[0].1, requests[1].1,
        "the resend is the identical request"
    );

    let (report, requests) = cancelled_once(
        &["ConditionalCheckFailed", "TransactionConflict", "None"],
        "f",
    )
    .await;
    assert_eq!(
        report.outcome,
        Outcome::Cancelled {
            reasons: vec![
                "ConditionalCheckFailed".to_owned(),
                "TransactionConflict".to_owned(),
                "None".to_owned(),
            ]
        },
        "{report:?}"
    );
    assert_eq!(requests, 1, "a failed condition is not resent");

    for codes in [
        ["None", "ValidationError", "None"],
        ["TransactionConflict", "ValidationError", "None"],
        ["ThrottlingError", "None", "ItemCollectionSizeLimitExceeded"],
        ["None", "None", "None"],
    ] {
        let (report, requests) = cancelled_once(&codes, "v").await;
        assert!(
            matches!(report.outcome, Outcome::Cancelled { .. }),
            "{codes:?}: {report:?}"
        );
        assert_eq!(
            requests, 1,
            "{codes:?}: the request's own reason, no resend"
        );
    }

    for codes in [
        ["None", "ThrottlingError", "None"],
        [
            "ProvisionedThroughputExceeded",
            "None",
            "TransactionConflict",
        ],
    ] {
        let (report, requests) = cancelled_once(&codes, "t").await;
        assert_eq!(report.outcome, Outcome::Applied, "{codes:?}: {report:?}");
        assert_eq!(report.answers, vec![Answer::Conflict, Answer::Success]);
        assert_eq!(requests, 2, "{codes:?}: resent once");
    }
}

/// A transfer with receipt `name` written once through a fresh writer to an endpoint that
/// cancels it with `codes` and then answers success: the report, and how many requests came.
async fn cancelled_once(codes: &[&str], name: &str) -> (oncecheck_tokened::WriteReport, usize) {
    let fake = FakeEndpoint::start(vec![Scripted::cancelled(codes), Scripted::ok(json!({}))]).await;
    let (writer, _clock, _directory) = writer(&fake.url).await;
    let report = writer
        .write(Intent::with_receipt(transfer(), receipt(TABLE, name)))
        .await
        .unwrap();
    (report, fake.requests().len())
}

/// A cancellation whose failed condition is the receipt's: the receipt is read (no image came
/// back). Holding this intent's token, an earlier send applied the intent; holding another
/// intent's, the write is final and applied nothing of this one.
//= specs/tokened-writes.md#T3
//# An unknown outcome is all or nothing.
#[tokio::test]
async fn a_cancelled_receipt_holding_this_token_was_applied_earlier_and_another_is_final() {
    for (holder, mine) in [(None, true), (Some("another-intents-token"), false)] {
        let intent = Intent::with_receipt(transfer(), receipt(TABLE, "r"));
        let token = intent.token_str().to_owned();
        let found = holder.map_or(token.clone(), str::to_owned);
        let fake = FakeEndpoint::start(vec![
            Scripted::cancelled(&["None", "None", "ConditionalCheckFailed"]),
            Scripted::ok(json!({
                "Item": {
                    "pk": { "S": "receipt#r" },
                    "receipt_token": { "S": found },
                }
            })),
        ])
        .await;
        let (writer, _clock, _directory) = writer(&fake.url).await;
        let report = writer.write(intent).await.unwrap();
        let expected = if mine {
            Outcome::AppliedEarlier
        } else {
            Outcome::Cancelled {
                reasons: vec![format!("receipt held by {found}")],
            }
        };
        assert_eq!(report.outcome, expected, "{report:?}");
        let requests = fake.requests();
        assert_eq!(
            requests.len(),
            2,
            "the write, the receipt's read, no resend"
        );
        assert_eq!(requests[1].0, "GetItem");
    }
}

/// A fixed PutItem: its retry converges, so an unknown outcome is resent.
fn fixed_put(name: &str) -> aws_sdk_dynamodb::types::TransactWriteItem {
    let put = aws_sdk_dynamodb::types::Put::builder()
        .table_name(TABLE)
        .set_item(Some(key(name)))
        .item("balance", AttributeValue::N("7".into()))
        .build()
        .unwrap();
    aws_sdk_dynamodb::types::TransactWriteItem::builder()
        .put(put)
        .build()
}

/// A fixed PutItem named `name` sent once through a fresh writer against `script`, resent on
/// an unknown outcome: what it answered, and how many requests reached the endpoint.
async fn single_write(
    script: Vec<Scripted>,
    name: &str,
) -> (Result<SingleOutcome, WriteError>, usize) {
    let fake = FakeEndpoint::start(script).await;
    let (writer, _clock, _directory) = writer(&fake.url).await;
    let outcome = writer
        .send_single(fixed_put(name), RetryAsk::OnUnknownOutcome)
        .await;
    (outcome, fake.requests().len())
}

/// A PutItem named `name` that creates the item only if it is absent.
fn conditional_create(name: &str) -> aws_sdk_dynamodb::types::TransactWriteItem {
    let put = aws_sdk_dynamodb::types::Put::builder()
        .table_name(TABLE)
        .set_item(Some(key(name)))
        .condition_expression("attribute_not_exists(pk)")
        .build()
        .unwrap();
    aws_sdk_dynamodb::types::TransactWriteItem::builder()
        .put(put)
        .build()
}

/// A conditional create whose condition fails needs a read-back only after an unknown outcome:
/// then the item it found may be its own earlier attempt's; on a first attempt it was there
/// before.
#[tokio::test]
async fn a_failed_create_is_read_back_only_after_an_unknown_outcome() {
    let unknown = || Scripted::error(500, "InternalServerError", "outcome unknown");
    let condition_failed =
        || Scripted::error(400, "ConditionalCheckFailedException", "the item exists");
    for (script, attempts, after_unknown_outcome) in [
        (vec![condition_failed()], 1, false),
        (vec![unknown(), condition_failed()], 2, true),
    ] {
        let fake = FakeEndpoint::start(script).await;
        let (writer, _clock, _directory) = writer(&fake.url).await;
        let outcome = writer
            .send_single(conditional_create("n"), RetryAsk::OnUnknownOutcome)
            .await;
        assert_eq!(
            outcome.unwrap(),
            SingleOutcome::ConditionFailed {
                attempts,
                after_unknown_outcome,
                read_back_needed: after_unknown_outcome,
            }
        );
    }
}

/// A single-item write tells its service errors apart: a server error is an unknown outcome
/// (resent, then applied), a validation error is the caller's (rejected, not resent), and only
/// the operation's ConditionalCheckFailed is a failed condition.
#[tokio::test]
async fn a_single_write_tells_a_server_error_and_a_rejection_from_a_failed_condition() {
    let (outcome, requests) = single_write(
        vec![
            Scripted::error(500, "InternalServerError", "outcome unknown"),
            Scripted::ok(json!({})),
        ],
        "p",
    )
    .await;
    assert_eq!(outcome.unwrap(), SingleOutcome::Applied { attempts: 2 });
    assert_eq!(requests, 2);

    let (outcome, requests) = single_write(
        vec![Scripted::error(400, "ValidationException", "bad item")],
        "q",
    )
    .await;
    let error = outcome.unwrap_err();
    assert!(
        matches!(&error, WriteError::Rejected { code, .. } if code == "ValidationException"),
        "{error:?}"
    );
    assert_eq!(requests, 1, "a rejection is not resent");

    let (outcome, requests) = single_write(
        vec![Scripted::error(
            400,
            "ConditionalCheckFailedException",
            "the item exists",
        )],
        "r",
    )
    .await;
    assert_eq!(
        outcome.unwrap(),
        SingleOutcome::ConditionFailed {
            attempts: 1,
            after_unknown_outcome: false,
            read_back_needed: false,
        }
    );
    assert_eq!(requests, 1);
}

fn put_request(name: &str) -> WriteRequest {
    let item: HashMap<String, AttributeValue> = key(name);
    WriteRequest::builder()
        .put_request(PutRequest::builder().set_item(Some(item)).build().unwrap())
        .build()
}

/// BatchWriteItem resends only the UnprocessedItems the service returned.
#[tokio::test]
async fn a_batch_resends_only_its_unprocessed_items() {
    let fake = FakeEndpoint::start(vec![
        Scripted::ok(json!({ "UnprocessedItems": { TABLE: [ { "PutRequest": { "Item": { "pk": { "S": "b" } } } } ] } })),
        Scripted::ok(json!({ "UnprocessedItems": {} })),
    ])
    .await;
    let (writer, _clock, _directory) = writer(&fake.url).await;
    let batch: HashMap<String, Vec<WriteRequest>> =
        [(TABLE.to_owned(), vec![put_request("a"), put_request("b")])].into();
    assert_eq!(
        writer.send_batch(batch).await.unwrap(),
        BatchOutcome::Done { rounds: 2 }
    );
    let requests = fake.requests();
    assert_eq!(
        requests[0].1["RequestItems"][TABLE]
            .as_array()
            .unwrap()
            .len(),
        2
    );
    assert_eq!(
        requests[1].1["RequestItems"][TABLE],
        json!([ { "PutRequest": { "Item": { "pk": { "S": "b" } } } } ]),
        "only the unprocessed put"
    );
}

/// A service error after a round that applied some items is an unknown outcome with the items
/// still pending, never a rejection: only the first request's refusal says nothing was written.
#[tokio::test]
async fn a_batch_refused_after_a_round_applied_items_is_unknown_not_rejected() {
    let fake = FakeEndpoint::start(vec![
        Scripted::ok(json!({ "UnprocessedItems": { TABLE: [ { "PutRequest": { "Item": { "pk": { "S": "b" } } } } ] } })),
        Scripted::error(400, "ValidationException", "refused on the resend"),
    ])
    .await;
    let (batch_writer, _clock, _directory) = writer(&fake.url).await;
    let batch: HashMap<String, Vec<WriteRequest>> =
        [(TABLE.to_owned(), vec![put_request("a"), put_request("b")])].into();
    match batch_writer.send_batch(batch).await {
        Ok(BatchOutcome::Unknown { rounds, pending }) => {
            assert_eq!(rounds, 2);
            assert_eq!(pending[TABLE].len(), 1, "{pending:?}");
        }
        other => panic!("expected an unknown outcome, got {other:?}"),
    }

    // The same refusal to the first request: nothing was written, the caller's error.
    let fake =
        FakeEndpoint::start(vec![Scripted::error(400, "ValidationException", "refused")]).await;
    let (refused_writer, _clock, _directory) = writer(&fake.url).await;
    let batch: HashMap<String, Vec<WriteRequest>> =
        [(TABLE.to_owned(), vec![put_request("a")])].into();
    let outcome = refused_writer.send_batch(batch).await;
    assert!(
        matches!(outcome, Err(WriteError::Rejected { .. })),
        "{outcome:?}"
    );
}

/// A batch whose items stay unprocessed stops after `unprocessed_rounds_max` resends.
#[tokio::test]
async fn a_batch_gives_up_after_its_bound() {
    let fake = FakeEndpoint::start(vec![Scripted::ok(
        json!({ "UnprocessedItems": { TABLE: [ { "PutRequest": { "Item": { "pk": { "S": "b" } } } } ] } }),
    )])
    .await;
    let (writer, _clock, _directory) = writer(&fake.url).await;
    let batch: HashMap<String, Vec<WriteRequest>> =
        [(TABLE.to_owned(), vec![put_request("b")])].into();
    let rounds_max = test_limits().unprocessed_rounds_max + 1;
    assert!(
        matches!(writer.send_batch(batch).await.unwrap(), BatchOutcome::Unprocessed { rounds, .. } if rounds == rounds_max)
    );
    assert_eq!(fake.requests().len(), rounds_max as usize);
}

/// The resends' ceilings and draws, checked against the schedule `Limits` states.
fn assert_schedule(waits: &[Wait], ceilings_millis: &[u64], what: &str) {
    let resends: Vec<u64> = waits.iter().map(|wait| wait.resend).collect();
    let expected: Vec<u64> = (1..=ceilings_millis.len() as u64).collect();
    assert_eq!(
        resends, expected,
        "{what}: one wait before each resend, counted from 1"
    );
    let ceilings: Vec<u64> = waits.iter().map(|wait| wait.ceiling_millis).collect();
    assert_eq!(ceilings, ceilings_millis, "{what}: the ceilings");
    for wait in waits {
        assert!(wait.wait_millis <= wait.ceiling_millis, "{what}: {wait:?}");
    }
}

/// Every way of resending waits first, on the schedule `Limits` states: full jitter below a
/// ceiling of `backoff_base_millis` before the first resend, doubled before each next one, never
/// above `backoff_max_millis` (the test limits: 1 ms doubling to at most 5 ms). The waits are
/// read from the writer's backoff events, not timed.
#[tokio::test]
async fn every_resend_waits_below_a_ceiling_doubling_from_the_base_to_the_max() {
    let unknown = || Scripted::error(500, "InternalServerError", "outcome unknown");

    let fake = FakeEndpoint::start(vec![
        unknown(),
        unknown(),
        unknown(),
        unknown(),
        Scripted::ok(json!({})),
    ])
    .await;
    let (single, _clock, _directory) = writer(&fake.url).await;
    let (outcome, waits) =
        recording_waits(single.send_single(fixed_put("s"), RetryAsk::OnUnknownOutcome)).await;
    assert_eq!(outcome.unwrap(), SingleOutcome::Applied { attempts: 5 });
    assert_schedule(&waits, &[1, 2, 4, 5], "a single write");

    let fake = FakeEndpoint::start(vec![unknown(), unknown(), Scripted::ok(json!({}))]).await;
    let (transaction, _clock, _directory) = writer(&fake.url).await;
    let (report, waits) =
        recording_waits(transaction.write(Intent::with_receipt(transfer(), receipt(TABLE, "w"))))
            .await;
    assert_eq!(report.unwrap().outcome, Outcome::Applied);
    assert_schedule(&waits, &[1, 2], "a transaction");

    let unprocessed = || {
        Scripted::ok(
            json!({ "UnprocessedItems": { TABLE: [ { "PutRequest": { "Item": { "pk": { "S": "b" } } } } ] } }),
        )
    };
    let fake = FakeEndpoint::start(vec![
        unprocessed(),
        unprocessed(),
        Scripted::ok(json!({ "UnprocessedItems": {} })),
    ])
    .await;
    let (batcher, _clock, _directory) = writer(&fake.url).await;
    let batch: HashMap<String, Vec<WriteRequest>> =
        [(TABLE.to_owned(), vec![put_request("a"), put_request("b")])].into();
    let (outcome, waits) = recording_waits(batcher.send_batch(batch)).await;
    assert_eq!(outcome.unwrap(), BatchOutcome::Done { rounds: 3 });
    assert_schedule(&waits, &[1, 2], "a batch's unprocessed items");
}

/// The address of a port nothing listens on: it was bound, read and let go.
async fn closed_endpoint() -> String {
    let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    url
}

/// A batch whose first request cannot reach the endpoint is the typed unreachable error, as a
/// single write's is: nothing was sent, so nothing is left to reconcile.
#[tokio::test]
async fn a_batch_to_an_unreachable_endpoint_is_a_typed_error() {
    let (writer, _clock, _directory) = writer(&closed_endpoint().await).await;
    let batch: HashMap<String, Vec<WriteRequest>> =
        [(TABLE.to_owned(), vec![put_request("u")])].into();
    let outcome = writer.send_batch(batch).await;
    assert!(
        matches!(outcome, Err(WriteError::Unreachable(_))),
        "{outcome:?}"
    );
}

/// A journal that cannot be written: the write is not sent.
#[tokio::test]
async fn an_unwritable_journal_means_the_write_is_not_sent() {
    let fake = FakeEndpoint::start(vec![Scripted::ok(json!({}))]).await;
    let directory = tempfile::tempdir().unwrap();
    let path = directory.path().join("journal.sqlite");
    let journal = Journal::open(&path).await.unwrap();
    // Another process breaks the journal under the writer.
    let vandal = sqlx::SqlitePool::connect(&format!("sqlite://{}", path.display()))
        .await
        .unwrap();
    sqlx::query("DROP TABLE intents")
        .execute(&vandal)
        .await
        .unwrap();
    let writer = ReliableWriter::connect(Some(&fake.url), journal, test_limits()).await;
    let error = writer
        .write(Intent::with_receipt(transfer(), receipt(TABLE, "j")))
        .await;
    assert!(
        matches!(error, Err(WriteError::Journal { sent: false, .. })),
        "{error:?}"
    );
    assert!(fake.requests().is_empty(), "nothing sent");
}

/// An endpoint that refuses connections: a typed error, the intent ended as not sent.
#[tokio::test]
async fn an_unreachable_endpoint_is_a_typed_error_and_the_intent_ends_not_sent() {
    let (writer, _clock, _directory) = writer(&closed_endpoint().await).await;
    let intent = Intent::with_receipt(transfer(), receipt(TABLE, "u"));
    let token = intent.token_str().to_owned();
    let error = writer.write(intent).await;
    match &error {
        // The caller is told why: the connection's own failure, not a placeholder.
        Err(WriteError::Unreachable(detail)) => {
            assert!(!detail.is_empty());
            assert_ne!(detail, "nothing sent");
        }
        other => panic!("expected the endpoint unreachable, got {other:?}"),
    }
    let entry = writer.journal().entry(&token).await.unwrap().unwrap();
    assert_eq!(entry.outcome.as_deref(), Some("not-sent"));
}

/// A journal row whose request carries another token (edited or damaged on disk) is refused with
/// an error naming both tokens, before anything is sent: resending it would apply the write
/// under a token it was never journaled with.
#[tokio::test]
async fn a_journal_row_whose_request_names_another_token_is_refused_before_sending() {
    let attempts_max = test_limits().attempts_max as usize;
    let script = vec![Scripted::error(500, "InternalServerError", "outcome unknown"); attempts_max];
    let fake = FakeEndpoint::start(script).await;
    let directory = tempfile::tempdir().unwrap();
    let journal = Journal::open(&directory.path().join("journal.sqlite"))
        .await
        .unwrap();
    let writer = ReliableWriter::connect(Some(&fake.url), journal, test_limits()).await;
    let report = writer
        .write(Intent::with_receipt(transfer(), receipt(TABLE, "r")))
        .await
        .unwrap();
    assert_eq!(report.outcome, Outcome::Unresolved);
    let written = writer.journal().open_entries().await.unwrap().remove(0);
    let other = "b".repeat(32);
    writer
        .journal()
        .record_intent(&other, &written.request, written.receipt.as_deref(), 0)
        .await
        .unwrap();
    let sent_before = fake.requests().len();

    let refused = writer.resume(&other, None).await.unwrap_err();

    match &refused {
        WriteError::Journal {
            source: JournalError::Inconsistent { token, detail },
            sent: false,
        } => {
            assert_eq!(token, &other);
            assert!(detail.contains(&written.token), "{detail}");
        }
        other => panic!("expected the journal's inconsistency, got {other:?}"),
    }
    assert_eq!(fake.requests().len(), sent_before, "nothing was sent");
}

/// A process that restarts finds its open intent in the journal and resends the journaled bytes:
/// the same token and the identical request, not a rebuilt one.
#[tokio::test]
async fn a_restarted_writer_resumes_an_open_intent_with_the_journaled_request() {
    let attempts_max = test_limits().attempts_max as usize;
    let mut script =
        vec![Scripted::error(500, "InternalServerError", "outcome unknown"); attempts_max];
    script.push(Scripted::ok(json!({})));
    let fake = FakeEndpoint::start(script).await;
    let directory = tempfile::tempdir().unwrap();
    let path = directory.path().join("journal.sqlite");
    let first = ReliableWriter::connect(
        Some(&fake.url),
        Journal::open(&path).await.unwrap(),
        test_limits(),
    )
    .await;
    let report = first
        .write(Intent::with_receipt(transfer(), receipt(TABLE, "r")))
        .await
        .unwrap();
    assert_eq!(report.outcome, Outcome::Unresolved);
    drop(first);

    let restarted = ReliableWriter::connect(
        Some(&fake.url),
        Journal::open(&path).await.unwrap(),
        test_limits(),
    )
    .await;
    let open = restarted.journal().open_entries().await.unwrap();
    assert_eq!(open.len(), 1);
    let resumed = restarted.resume(&open[0].token, None).await.unwrap();
    assert_eq!(resumed.outcome, Outcome::Applied);
    let requests = fake.requests();
    assert_eq!(requests.len(), attempts_max + 1);
    assert_eq!(
        requests[attempts_max].1, requests[0].1,
        "the resumed request is the first one, byte for byte"
    );
    let entry = restarted
        .journal()
        .entry(&open[0].token)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(entry.attempts as usize, attempts_max + 1);
    assert_eq!(entry.outcome.as_deref(), Some("applied"));
}
