//! The proxy's token table (src/proxy/tokens.rs) in front of moto, which has no token semantics
//! of its own: real aws-sdk-dynamodb requests through the proxy, the test driving each held
//! request as a replay does, the table's state read on moto directly.
//!
//! Needs ONCECHECK_DDB_ENDPOINT and fails (never skips) without it:
//! `bash -c 'source scripts/services.sh; start_moto; cargo test -p oncecheck-conformance --test proxy_tokens; services_down'`

use std::collections::HashMap;
use std::time::Duration;

use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{AttributeValue, ConditionCheck, TransactWriteItem, Update};
use aws_sdk_dynamodb::Client;
use oncecheck_conformance::proxy::{HeldRequest, Proxy, TOKEN_WINDOW_MILLIS};

mod support {
    pub mod moto;
}
use support::moto::{create_pk_table, unique, upstream, STEP_WAIT};

struct Setup {
    proxy: Proxy,
    /// Talks to the proxy's actor 0.
    client: Client,
    /// Talks to moto directly: the committed state.
    direct: Client,
    table: String,
}

async fn setup() -> Setup {
    let upstream = upstream();
    let direct = oncecheck_store::dynamodb::client_for(Some(&upstream)).await;
    let table = unique("tokens");
    create_pk_table(&direct, &table).await;
    let proxy = Proxy::start(&upstream, 1).await.expect("the proxy starts");
    let client = oncecheck_store::dynamodb::client_for(Some(&proxy.endpoint(0))).await;
    Setup {
        proxy,
        client,
        direct,
        table,
    }
}

fn key(partition: &str) -> HashMap<String, AttributeValue> {
    [("pk".to_owned(), AttributeValue::S(partition.to_owned()))].into()
}

fn add(table: &str, partition: &str, delta: i64) -> TransactWriteItem {
    let update = Update::builder()
        .table_name(table)
        .set_key(Some(key(partition)))
        .update_expression("ADD n :delta")
        .expression_attribute_values(":delta", AttributeValue::N(delta.to_string()))
        .build()
        .unwrap();
    TransactWriteItem::builder().update(update).build()
}

type Sent = Result<(), SdkError<TransactWriteItemsError>>;

async fn send(client: &Client, items: Vec<TransactWriteItem>, token: Option<&str>) -> Sent {
    client
        .transact_write_items()
        .set_transact_items(Some(items))
        .set_client_request_token(token.map(str::to_owned))
        .send()
        .await
        .map(|_| ())
}

fn code(sent: &Sent) -> Option<String> {
    match sent {
        Ok(()) => None,
        Err(error) => Some(
            error
                .code()
                .map(str::to_owned)
                .unwrap_or_else(|| format!("{error:?}")),
        ),
    }
}

/// The reason codes of a TransactionCanceledException, in request order.
fn cancellation_codes(sent: Sent) -> Vec<String> {
    match sent {
        Err(SdkError::ServiceError(service)) => match service.err() {
            TransactWriteItemsError::TransactionCanceledException(cancelled) => cancelled
                .cancellation_reasons()
                .iter()
                .map(|reason| reason.code().unwrap_or("(no code)").to_owned())
                .collect(),
            other => panic!("a cancellation, not {other:?}"),
        },
        other => panic!("a cancellation, not {other:?}"),
    }
}

async fn take(proxy: &Proxy) -> HeldRequest {
    proxy.next_request(0, STEP_WAIT).await.expect("a request")
}

/// The next held request forwarded (token rules applied) and its answer delivered.
async fn pass(proxy: &Proxy) {
    let request = take(proxy).await;
    let answer = proxy.forward(&request).await.expect("forwarded");
    proxy.deliver(request, answer).expect("delivered");
}

/// `items` sent through the proxy with `token`, the proxy passing it.
async fn through(setup: &Setup, items: Vec<TransactWriteItem>, token: Option<&str>) -> Sent {
    let (sent, ()) = tokio::join!(send(&setup.client, items, token), pass(&setup.proxy));
    sent
}

async fn counter(setup: &Setup, partition: &str) -> Option<i64> {
    let read = setup
        .direct
        .get_item()
        .table_name(&setup.table)
        .set_key(Some(key(partition)))
        .consistent_read(true)
        .send()
        .await
        .expect("read moto");
    match read.item()?.get("n")? {
        AttributeValue::N(number) => number.parse().ok(),
        _ => None,
    }
}

//= specs/tokened-writes.md#T1
//# The identical tokened request, retried within the window, applies its effects once.
#[tokio::test]
async fn an_identical_request_inside_the_window_is_answered_without_applying_and_after_it_runs_again(
) {
    let setup = setup().await;
    let items = || vec![add(&setup.table, "a", 5)];
    assert_eq!(
        code(&through(&setup, items(), Some("t-window")).await),
        None
    );
    assert_eq!(
        code(&through(&setup, items(), Some("t-window")).await),
        None
    );
    assert_eq!(
        counter(&setup, "a").await,
        Some(5),
        "the replay applied nothing"
    );
    // The window's last millisecond, on the proxy's token clock: still a replay.
    setup
        .proxy
        .set_token_clock(Duration::from_millis(TOKEN_WINDOW_MILLIS - 1));
    assert_eq!(
        code(&through(&setup, items(), Some("t-window")).await),
        None
    );
    assert_eq!(counter(&setup, "a").await, Some(5));
    // The window has passed: the token is new and the request executes again.
    setup
        .proxy
        .set_token_clock(Duration::from_millis(TOKEN_WINDOW_MILLIS));
    assert_eq!(
        code(&through(&setup, items(), Some("t-window")).await),
        None
    );
    assert_eq!(counter(&setup, "a").await, Some(10), "a new execution");
    // And that execution opened a new window.
    assert_eq!(
        code(&through(&setup, items(), Some("t-window")).await),
        None
    );
    assert_eq!(counter(&setup, "a").await, Some(10));
}

//= specs/tokened-writes.md#T2
//# A live token with other parameters is rejected and applies nothing.
#[tokio::test]
async fn other_parameters_under_a_live_token_are_a_mismatch_and_apply_nothing() {
    let setup = setup().await;
    assert_eq!(
        code(&through(&setup, vec![add(&setup.table, "m", 5)], Some("t-mismatch")).await),
        None
    );
    let rebuilt = through(&setup, vec![add(&setup.table, "m", 6)], Some("t-mismatch")).await;
    assert_eq!(
        code(&rebuilt).as_deref(),
        Some("IdempotentParameterMismatchException")
    );
    assert!(matches!(
        rebuilt,
        Err(SdkError::ServiceError(ref service))
            if matches!(service.err(), TransactWriteItemsError::IdempotentParameterMismatchException(_))
    ));
    assert_eq!(counter(&setup, "m").await, Some(5));
}

#[tokio::test]
async fn a_begun_transaction_makes_its_token_in_progress_and_its_items_conflict() {
    let setup = setup().await;
    let items = || vec![add(&setup.table, "h", 5)];
    let first = tokio::spawn({
        let client = setup.client.clone();
        let items = items();
        async move { send(&client, items, Some("t-held")).await }
    });
    let held = take(&setup.proxy).await;
    setup.proxy.begin(&held).await.expect("begun");
    assert_eq!(
        code(&through(&setup, items(), Some("t-held")).await).as_deref(),
        Some("TransactionInProgressException")
    );
    assert_eq!(
        code(&through(&setup, vec![add(&setup.table, "h", 6)], Some("t-held")).await).as_deref(),
        Some("IdempotentParameterMismatchException"),
        "other parameters under a running token"
    );
    let (put, ()) = tokio::join!(
        setup
            .client
            .put_item()
            .table_name(&setup.table)
            .set_item(Some(key("h")))
            .send(),
        pass(&setup.proxy)
    );
    assert_eq!(
        put.map(|_| ())
            .err()
            .and_then(|error| error.code().map(str::to_owned))
            .as_deref(),
        Some("TransactionConflictException")
    );
    let (tokenless, ()) = tokio::join!(
        send(
            &setup.client,
            vec![add(&setup.table, "other", 1), add(&setup.table, "h", 1)],
            None
        ),
        pass(&setup.proxy)
    );
    assert_eq!(
        cancellation_codes(tokenless),
        ["None", "TransactionConflict"]
    );
    assert_eq!(counter(&setup, "h").await, None, "nothing ran while held");
    let answer = setup.proxy.forward(&held).await.expect("forwarded");
    setup.proxy.deliver(held, answer).unwrap();
    assert_eq!(code(&first.await.unwrap()), None);
    assert_eq!(counter(&setup, "h").await, Some(5));
    // Committed, the token is live: the identical request is a replay, not in progress.
    assert_eq!(code(&through(&setup, items(), Some("t-held")).await), None);
    assert_eq!(counter(&setup, "h").await, Some(5));
}

//= specs/tokened-writes.md#T3
//# An unknown outcome is all or nothing.
#[tokio::test]
async fn a_lost_response_after_commit_then_the_identical_resend_applies_once() {
    let setup = setup().await;
    let items = || vec![add(&setup.table, "l1", 5), add(&setup.table, "l2", 5)];
    let lost = async {
        let request = take(&setup.proxy).await;
        let answer = setup.proxy.forward(&request).await.expect("committed");
        assert_eq!(answer.status, 200);
        setup.proxy.lose(request).unwrap();
    };
    let (sent, ()) = tokio::join!(send(&setup.client, items(), Some("t-lost")), lost);
    assert!(
        matches!(sent, Err(SdkError::DispatchFailure(_))),
        "the client saw an unknown outcome: {sent:?}"
    );
    assert_eq!(counter(&setup, "l1").await, Some(5));
    assert_eq!(code(&through(&setup, items(), Some("t-lost")).await), None);
    assert_eq!(counter(&setup, "l1").await, Some(5));
    assert_eq!(counter(&setup, "l2").await, Some(5));
}

/// The record commits with the effects or not at all: a cancelled transaction leaves no record,
/// so its identical resend is judged again (cancelled again), never answered success.
#[tokio::test]
async fn a_cancelled_transaction_leaves_no_token_record_and_its_reasons_stay_the_clients() {
    let setup = setup().await;
    let check = ConditionCheck::builder()
        .table_name(&setup.table)
        .set_key(Some(key("absent")))
        .condition_expression("attribute_exists(pk)")
        .build()
        .unwrap();
    let items = || {
        vec![
            TransactWriteItem::builder()
                .condition_check(check.clone())
                .build(),
            add(&setup.table, "c", 5),
        ]
    };
    for attempt in 0..2 {
        assert_eq!(
            cancellation_codes(through(&setup, items(), Some("t-cancel")).await),
            ["ConditionalCheckFailed", "None"],
            "attempt {attempt}"
        );
    }
    assert_eq!(counter(&setup, "c").await, None);
}

//= specs/tokened-writes.md#T5
//# A request whose token is over 36 characters, or whose token record has no valid timestamp, is refused and applies nothing.
#[tokio::test]
async fn an_over_long_or_empty_token_is_a_validation_error_and_applies_nothing() {
    let setup = setup().await;
    let long = "x".repeat(37);
    assert_eq!(
        code(&through(&setup, vec![add(&setup.table, "v", 5)], Some(&long)).await).as_deref(),
        Some("ValidationException")
    );
    assert_eq!(counter(&setup, "v").await, None);
    assert_eq!(
        code(&through(&setup, vec![add(&setup.table, "v", 5)], Some("")).await).as_deref(),
        Some("ValidationException"),
        "an empty token"
    );
    assert_eq!(counter(&setup, "v").await, None);
    let longest = "y".repeat(36);
    assert_eq!(
        code(&through(&setup, vec![add(&setup.table, "v", 5)], Some(&longest)).await),
        None
    );
    assert_eq!(counter(&setup, "v").await, Some(5));
}

/// The switch: with the token table off, moto's own behaviour shows through the proxy.
#[tokio::test]
async fn with_the_token_table_off_the_identical_request_executes_again() {
    let setup = setup().await;
    setup.proxy.set_token_table(false);
    let items = || vec![add(&setup.table, "off", 5)];
    assert_eq!(code(&through(&setup, items(), Some("t-off")).await), None);
    assert_eq!(code(&through(&setup, items(), Some("t-off")).await), None);
    assert_eq!(counter(&setup, "off").await, Some(10), "moto re-executed");
}

/// A record whose creation time is damaged fails closed: the identical request is refused with
/// InternalServerError and applies nothing, and the clock never expires the record.
//= specs/tokened-writes.md#T5
//# Bad input and damaged records fail closed.
#[tokio::test]
async fn a_damaged_token_record_fails_closed_and_never_expires() {
    let setup = setup().await;
    let items = || vec![add(&setup.table, "d", 5)];
    assert_eq!(
        code(&through(&setup, items(), Some("t-damaged")).await),
        None
    );
    setup
        .proxy
        .damage_token_record("t-damaged")
        .await
        .expect("damaged");
    assert_eq!(
        code(&through(&setup, items(), Some("t-damaged")).await).as_deref(),
        Some("InternalServerError")
    );
    setup
        .proxy
        .set_token_clock(Duration::from_millis(10 * TOKEN_WINDOW_MILLIS));
    assert_eq!(
        code(&through(&setup, items(), Some("t-damaged")).await).as_deref(),
        Some("InternalServerError"),
        "no expiry can be decided for it"
    );
    assert_eq!(counter(&setup, "d").await, Some(5));
    setup.proxy.delete_token_table().await.expect("deleted");
}

/// The token decides before the items' locks, as DynamoDB's transaction coordinator does: a
/// replay, a mismatch and a damaged record are answered from the token record while another
/// transaction holds the items; only a request that would execute meets the locks.
//= specs/tokened-writes.md#T5
//# Bad input and damaged records fail closed.
#[tokio::test]
async fn the_token_record_is_decided_before_the_locks_of_another_transaction() {
    let setup = setup().await;
    let items = || vec![add(&setup.table, "k", 5)];
    assert_eq!(code(&through(&setup, items(), Some("t-live")).await), None);
    assert_eq!(
        code(&through(&setup, items(), Some("t-damaged")).await),
        None
    );
    setup
        .proxy
        .damage_token_record("t-damaged")
        .await
        .expect("damaged");
    let holder = tokio::spawn({
        let client = setup.client.clone();
        let items = items();
        async move { send(&client, items, Some("t-holder")).await }
    });
    let held = take(&setup.proxy).await;
    setup.proxy.begin(&held).await.expect("begun");
    assert_eq!(
        code(&through(&setup, items(), Some("t-live")).await),
        None,
        "a replay executes nothing, so the held items do not refuse it"
    );
    assert_eq!(
        code(&through(&setup, vec![add(&setup.table, "k", 6)], Some("t-live")).await).as_deref(),
        Some("IdempotentParameterMismatchException")
    );
    assert_eq!(
        code(&through(&setup, items(), Some("t-damaged")).await).as_deref(),
        Some("InternalServerError"),
        "a damaged record fails closed whoever holds the items"
    );
    assert_eq!(
        cancellation_codes(through(&setup, items(), Some("t-new")).await),
        ["TransactionConflict"],
        "a new token executes, and meets the lock"
    );
    assert_eq!(
        counter(&setup, "k").await,
        Some(10),
        "nothing ran while held"
    );
    let answer = setup.proxy.forward(&held).await.expect("forwarded");
    setup.proxy.deliver(held, answer).unwrap();
    assert_eq!(code(&holder.await.unwrap()), None);
    assert_eq!(counter(&setup, "k").await, Some(15));
    setup.proxy.delete_token_table().await.expect("deleted");
}

/// Only a write transaction can be held begun; anything else is refused, nothing held.
#[tokio::test]
async fn only_a_transaction_can_be_begun() {
    let setup = setup().await;
    let (read, ()) = tokio::join!(
        setup
            .client
            .get_item()
            .table_name(&setup.table)
            .set_key(Some(key("x")))
            .send(),
        async {
            let request = take(&setup.proxy).await;
            assert!(matches!(
                setup.proxy.begin(&request).await,
                Err(oncecheck_conformance::proxy::ProxyError::Unsupported(_))
            ));
            let answer = setup.proxy.forward(&request).await.unwrap();
            setup.proxy.deliver(request, answer).unwrap();
        }
    );
    assert!(read.is_ok(), "{read:?}");
}
