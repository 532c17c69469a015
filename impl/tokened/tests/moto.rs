//! The reliable-write client against moto, with a loopback fault proxy losing responses.
//!
//! moto does not honour ClientRequestToken: it executes an identical tokened transaction again.
//! So on moto the token alone cannot make a resend apply once; these tests make the effect's
//! idempotence observable through the intent's receipt item (put if absent, in the same
//! transaction), and one test shows moto's re-execution without it. DynamoDB's own token
//! semantics in front of moto are the conformance proxy's job, not these tests'.

mod support;

use std::sync::Arc;

use aws_sdk_dynamodb::types::{ConditionCheck, TransactWriteItem};
use oncecheck_tokened::{
    client_for, Answer, Intent, Outcome, Pattern, ReconcileCheck, RetryAsk, RetryRefused,
    SingleOutcome, WriteError,
};
use support::fault_proxy::{FaultProxy, Lose};
use support::*;

const TRANSACT: &str = "TransactWriteItems";

/// A moto table, a fault proxy in front of moto, a writer through the proxy, and a direct client.
async fn setup() -> (
    String,
    FaultProxy,
    oncecheck_tokened::ReliableWriter,
    oncecheck_idempotency::ManualClock,
    aws_sdk_dynamodb::Client,
    tempfile::TempDir,
) {
    let endpoint = ddb_endpoint();
    let direct = client_for(Some(&endpoint), &test_limits()).await;
    let table = unique("tokened");
    create_table(&direct, &table).await;
    let proxy = FaultProxy::start(endpoint).await;
    let (writer, clock, directory) = writer(&proxy.url).await;
    (table, proxy, writer, clock, direct, directory)
}

fn transfer(table: &str) -> Vec<TransactWriteItem> {
    vec![add_balance(table, "A", 5), add_balance(table, "B", 5)]
}

/// A lost response after commit, resent with the same token, applies once. On moto the resend is
/// executed again; the receipt's condition cancels it, and the client reads that as "applied
/// earlier" only because the receipt carries this intent's token.
//= specs/tokened-writes.md#T1
//# The identical tokened request, retried within the window, applies its effects once.
#[tokio::test]
async fn a_lost_response_after_commit_is_resent_with_the_token_and_applies_once() {
    let (table, proxy, writer, _clock, direct, _directory) = setup().await;
    proxy.lose_next(TRANSACT, Lose::Response);
    let intent = Intent::with_receipt(transfer(&table), receipt(&table, "transfer-1"));
    let token = intent.token_str().to_owned();
    let report = writer.write(intent).await.expect("the write ends");
    assert_eq!(report.outcome, Outcome::AppliedEarlier);
    assert!(
        matches!(
            report.answers.as_slice(),
            [Answer::Unknown(_), Answer::ReceiptFound]
        ),
        "{:?}",
        report.answers
    );
    assert_eq!(
        proxy.forwarded(TRANSACT),
        2,
        "the first submission and one identical resend"
    );
    assert_eq!(balance(&direct, &table, "A").await, 5);
    assert_eq!(balance(&direct, &table, "B").await, 5);
    let entry = writer
        .journal()
        .entry(&token)
        .await
        .unwrap()
        .expect("journaled");
    assert_eq!(entry.outcome.as_deref(), Some("applied-earlier"));
    assert_eq!(entry.attempts, 2);
}

/// The same lost response without a receipt: moto executes the identical tokened resend again
/// and the ADD lands twice. This is moto's missing token semantics, shown, not hidden; DynamoDB
/// answers the resend from its token record instead.
#[tokio::test]
async fn without_a_receipt_moto_re_executes_the_tokened_resend() {
    let (table, proxy, writer, _clock, direct, _directory) = setup().await;
    proxy.lose_next(TRANSACT, Lose::Response);
    let report = writer
        .write(Intent::with_check(transfer(&table), Arc::new(Never)))
        .await
        .unwrap();
    assert_eq!(report.outcome, Outcome::Applied);
    assert_eq!(
        balance(&direct, &table, "A").await,
        10,
        "moto re-executed the identical tokened request"
    );
}

/// A check that is never consulted inside the window.
struct Never;

impl ReconcileCheck for Never {
    fn applied<'a>(
        &'a self,
        _client: &'a aws_sdk_dynamodb::Client,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<bool, String>> + Send + 'a>>
    {
        Box::pin(async { Err("consulted".to_owned()) })
    }
}

/// An ADD without a token may not be retried: the retry table refuses before anything is sent;
/// sent without retries, a lost response stays unknown and the ADD is applied once, not twice.
#[tokio::test]
async fn an_add_without_a_token_is_refused_a_retry_by_the_retry_table() {
    let (table, proxy, writer, _clock, direct, _directory) = setup().await;
    let add = add_balance(&table, "A", 5);
    let refused = writer
        .send_single(add.clone(), RetryAsk::OnUnknownOutcome)
        .await;
    assert!(
        matches!(
            refused,
            Err(WriteError::RetryRefused(RetryRefused {
                pattern: Pattern::NumericAdd
            }))
        ),
        "{refused:?}"
    );
    assert_eq!(proxy.received_total(), 0, "a refused retry sends nothing");
    proxy.lose_next("UpdateItem", Lose::Response);
    let once = writer.send_single(add, RetryAsk::Never).await.unwrap();
    assert!(
        matches!(
            once,
            SingleOutcome::Unknown {
                attempts: 1,
                pattern: Pattern::NumericAdd,
                ..
            }
        ),
        "{once:?}"
    );
    assert_eq!(proxy.forwarded("UpdateItem"), 1);
    assert_eq!(balance(&direct, &table, "A").await, 5);
}

/// A state-idempotent write is retried after a lost response and converges.
#[tokio::test]
async fn a_fixed_put_is_retried_after_a_lost_response() {
    let (table, proxy, writer, _clock, direct, _directory) = setup().await;
    proxy.lose_next("PutItem", Lose::Response);
    let put = aws_sdk_dynamodb::types::Put::builder()
        .table_name(&table)
        .set_item(Some(key("profile")))
        .item(
            "balance",
            aws_sdk_dynamodb::types::AttributeValue::N("7".into()),
        )
        .build()
        .unwrap();
    let outcome = writer
        .send_single(
            TransactWriteItem::builder().put(put).build(),
            RetryAsk::OnUnknownOutcome,
        )
        .await
        .unwrap();
    assert_eq!(outcome, SingleOutcome::Applied { attempts: 2 });
    assert_eq!(balance(&direct, &table, "profile").await, 7);
}

/// Past the window there is no resend: the receipt decides. The response is lost and eleven
/// minutes pass (the proxy advances the manual clock when it loses the answer).
//= specs/tokened-writes.md#T3
//# An unknown outcome is all or nothing.
#[tokio::test]
async fn past_the_window_the_receipt_decides_and_nothing_is_resent() {
    let (table, proxy, writer, clock, direct, _directory) = setup().await;
    let ticking = clock.clone();
    proxy.on_lose(move || ticking.advance_secs(11 * 60));
    proxy.lose_next(TRANSACT, Lose::Response);
    let report = writer
        .write(Intent::with_receipt(
            transfer(&table),
            receipt(&table, "late-1"),
        ))
        .await
        .unwrap();
    assert_eq!(report.outcome, Outcome::Reconciled { applied: true });
    assert_eq!(proxy.forwarded(TRANSACT), 1, "never resent past the window");
    assert_eq!(balance(&direct, &table, "A").await, 5);

    // Lost before it reached moto: the receipt is absent, so nothing was applied.
    proxy.lose_next(TRANSACT, Lose::Request);
    let intent = Intent::with_receipt(transfer(&table), receipt(&table, "late-2"));
    let token = intent.token_str().to_owned();
    let report = writer.write(intent).await.unwrap();
    assert_eq!(report.outcome, Outcome::Reconciled { applied: false });
    assert_eq!(
        proxy.received(TRANSACT),
        2,
        "one submission each, no resend"
    );
    assert_eq!(balance(&direct, &table, "A").await, 5);
    assert!(!exists(&direct, &table, key("receipt#late-2")).await);
    let entry = writer.journal().entry(&token).await.unwrap().unwrap();
    assert_eq!(entry.outcome.as_deref(), Some("reconciled-not-applied"));
}

/// Inside the window the same loss is resent (the control for the test above).
#[tokio::test]
async fn inside_the_window_a_lost_request_is_resent() {
    let (table, proxy, writer, clock, direct, _directory) = setup().await;
    let ticking = clock.clone();
    proxy.on_lose(move || ticking.advance_secs(9 * 60));
    proxy.lose_next(TRANSACT, Lose::Request);
    let report = writer
        .write(Intent::with_receipt(
            transfer(&table),
            receipt(&table, "early"),
        ))
        .await
        .unwrap();
    assert_eq!(report.outcome, Outcome::Applied);
    assert_eq!(proxy.received(TRANSACT), 2);
    assert_eq!(balance(&direct, &table, "B").await, 5);
}

/// Bad input is refused before anything is journaled or sent.
//= specs/tokened-writes.md#T5
//# Bad input and damaged records fail closed.
#[tokio::test]
async fn bad_input_is_refused_before_anything_is_journaled_or_sent() {
    let (table, proxy, writer, _clock, _direct, _directory) = setup().await;
    let items = transfer(&table);
    for token in ["".to_owned(), "x".repeat(37)] {
        let error = writer
            .write(Intent::with_receipt(items.clone(), receipt(&table, "bad")).token(token.clone()))
            .await;
        assert!(matches!(error, Err(WriteError::Token(_))), "{error:?}");
    }
    let check_only = TransactWriteItem::builder()
        .condition_check(
            ConditionCheck::builder()
                .table_name(&table)
                .set_key(Some(key("A")))
                .condition_expression("attribute_exists(pk)")
                .build()
                .unwrap(),
        )
        .build();
    let error = writer
        .write(Intent::with_check(vec![check_only], Arc::new(Never)))
        .await;
    assert!(matches!(error, Err(WriteError::NotAWrite(_))), "{error:?}");
    let error = writer
        .write(Intent::with_check(Vec::new(), Arc::new(Never)))
        .await;
    assert!(matches!(error, Err(WriteError::NotAWrite(_))), "{error:?}");
    let error = writer
        .write(Intent::with_check(
            vec![add_balance(&table, "A", 1); 101],
            Arc::new(Never),
        ))
        .await;
    assert!(matches!(error, Err(WriteError::NotAWrite(_))), "{error:?}");
    assert_eq!(proxy.received_total(), 0);
    assert!(writer.journal().open_entries().await.unwrap().is_empty());
}
