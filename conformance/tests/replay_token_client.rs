//! The reliable-write client (`impl/tokened`) on moto through the conformance proxy's token table
//! (src/proxy/tokens.rs): moto alone re-executes an identical tokened transaction, so the
//! client's reliance on DynamoDB's token rules is checked here, with the proxy giving moto those
//! rules and the test taking every request the client sends. No receipt is used: the token alone
//! must make a resend safe.
//!
//! Needs ONCECHECK_DDB_ENDPOINT and fails (never skips) without it.

use std::collections::HashMap;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodb::types::{AttributeValue, TransactWriteItem, Update};
use aws_sdk_dynamodb::Client;
use oncecheck_conformance::proxy::{HeldRequest, Proxy, TOKEN_WINDOW_MILLIS};
use oncecheck_idempotency::ManualClock;
use oncecheck_tokened::{Answer, Intent, Journal, Limits, Outcome, ReconcileCheck, ReliableWriter};

mod support {
    pub mod moto;
}
use support::moto::{create_pk_table, unique, upstream, STEP_WAIT};

/// Removes the journal files when the test ends.
struct JournalFile(PathBuf);

impl Drop for JournalFile {
    fn drop(&mut self) {
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", self.0.display()));
        }
    }
}

struct Setup {
    proxy: Proxy,
    direct: Client,
    table: String,
    _journals: Vec<JournalFile>,
}

/// Fast backoff, few attempts: every attempt is a request the test must take.
fn limits() -> Limits {
    Limits {
        attempts_max: 2,
        backoff_base_millis: 1,
        backoff_max_millis: 5,
        attempt_timeout_secs: 3,
        ..Limits::default()
    }
}

async fn setup(actors: usize) -> Setup {
    let upstream = upstream();
    let direct = oncecheck_store::dynamodb::client_for(Some(&upstream)).await;
    let table = unique("tokened-proxy");
    create_pk_table(&direct, &table).await;
    let proxy = Proxy::start(&upstream, actors)
        .await
        .expect("the proxy starts");
    Setup {
        proxy,
        direct,
        table,
        _journals: Vec::new(),
    }
}

impl Setup {
    /// A writer talking to `actor`'s listener, with its own journal and a manual clock.
    async fn writer(&mut self, actor: usize) -> (Arc<ReliableWriter>, ManualClock) {
        let path = std::env::temp_dir().join(format!("{}.sqlite", unique("journal")));
        let journal = Journal::open(&path).await.expect("open the journal");
        self._journals.push(JournalFile(path));
        let clock = ManualClock::new(1_000_000);
        let writer = ReliableWriter::connect(Some(&self.proxy.endpoint(actor)), journal, limits())
            .await
            .with_clock(Arc::new(clock.clone()));
        (Arc::new(writer), clock)
    }

    fn transfer(&self, delta: i64) -> Vec<TransactWriteItem> {
        vec![self.add("A", delta), self.add("B", delta)]
    }

    fn add(&self, account: &str, delta: i64) -> TransactWriteItem {
        let update = Update::builder()
            .table_name(&self.table)
            .set_key(Some(key(account)))
            .update_expression("ADD balance :delta")
            .expression_attribute_values(":delta", AttributeValue::N(delta.to_string()))
            .build()
            .unwrap();
        TransactWriteItem::builder().update(update).build()
    }

    async fn balance(&self, account: &str) -> i64 {
        let read = self
            .direct
            .get_item()
            .table_name(&self.table)
            .set_key(Some(key(account)))
            .consistent_read(true)
            .send()
            .await
            .expect("read moto");
        match read.item().and_then(|item| item.get("balance")) {
            Some(AttributeValue::N(number)) => number.parse().unwrap(),
            _ => 0,
        }
    }

    async fn take(&self, actor: usize) -> HeldRequest {
        self.proxy
            .next_request(actor, STEP_WAIT)
            .await
            .expect("the client sent a request")
    }

    /// The next request of `actor` forwarded (token rules applied) and its answer delivered.
    async fn pass(&self, actor: usize) {
        let request = self.take(actor).await;
        let answer = self.proxy.forward(&request).await.expect("forwarded");
        self.proxy.deliver(request, answer).expect("delivered");
    }
}

fn key(name: &str) -> HashMap<String, AttributeValue> {
    [("pk".to_owned(), AttributeValue::S(name.to_owned()))].into()
}

/// Reconciliation by reading the balance: applied when account A holds `expected`.
struct BalanceIs {
    table: String,
    expected: i64,
}

impl ReconcileCheck for BalanceIs {
    fn applied<'a>(
        &'a self,
        client: &'a Client,
    ) -> Pin<Box<dyn std::future::Future<Output = Result<bool, String>> + Send + 'a>> {
        Box::pin(async move {
            let read = client
                .get_item()
                .table_name(&self.table)
                .set_key(Some(key("A")))
                .consistent_read(true)
                .send()
                .await
                .map_err(|error| format!("{error:?}"))?;
            Ok(matches!(
                read.item().and_then(|item| item.get("balance")),
                Some(AttributeValue::N(number)) if number.parse::<i64>() == Ok(self.expected)
            ))
        })
    }
}

fn check(setup: &Setup, expected: i64) -> Arc<dyn ReconcileCheck> {
    Arc::new(BalanceIs {
        table: setup.table.clone(),
        expected,
    })
}

//= specs/tokened-writes.md#T1
//# The identical tokened request, retried within the window, applies its effects once.
#[tokio::test]
async fn a_lost_response_after_commit_is_resent_with_the_token_and_the_token_table_applies_it_once()
{
    let mut setup = setup(1).await;
    let (writer, _clock) = setup.writer(0).await;
    let intent = Intent::with_check(setup.transfer(5), check(&setup, 5));
    let write = tokio::spawn({
        let writer = writer.clone();
        async move { writer.write(intent).await }
    });
    let first = setup.take(0).await;
    let first_body = first.body.clone();
    let committed = setup.proxy.forward(&first).await.unwrap();
    assert_eq!(committed.status, 200, "{committed:?}");
    setup.proxy.lose(first).unwrap();
    let resend = setup.take(0).await;
    assert_eq!(
        resend.body, first_body,
        "the identical request, the same token"
    );
    let answer = setup.proxy.forward(&resend).await.unwrap();
    assert_eq!(answer.status, 200, "a replay: {answer:?}");
    setup.proxy.deliver(resend, answer).unwrap();
    let report = write.await.unwrap().expect("the write ends");
    assert_eq!(report.outcome, Outcome::Applied);
    assert!(
        matches!(
            report.answers.as_slice(),
            [Answer::Unknown(_), Answer::Success]
        ),
        "{:?}",
        report.answers
    );
    assert_eq!(setup.balance("A").await, 5, "applied once");
    assert_eq!(setup.balance("B").await, 5);
    assert!(!setup.proxy.has_request(0), "two requests, no more");
}

//= specs/tokened-writes.md#T2
//# A live token with other parameters is rejected and applies nothing.
#[tokio::test]
async fn a_token_reused_with_other_parameters_is_a_typed_mismatch_and_applies_nothing() {
    let mut setup = setup(1).await;
    let (writer, _clock) = setup.writer(0).await;
    let token = unique("tok-m").chars().take(36).collect::<String>();
    let first = Intent::with_check(setup.transfer(5), check(&setup, 5)).token(token.clone());
    let (report, ()) = tokio::join!(writer.write(first), setup.pass(0));
    assert_eq!(report.unwrap().outcome, Outcome::Applied);
    // Another intent under the same token, from another process (its own journal): the mistake
    // T2 guards against.
    let (other_writer, _clock) = setup.writer(0).await;
    let second = Intent::with_check(setup.transfer(6), check(&setup, 11)).token(token);
    let (report, ()) = tokio::join!(other_writer.write(second), setup.pass(0));
    let report = report.unwrap();
    assert!(
        matches!(report.outcome, Outcome::ParameterMismatch { .. }),
        "{report:?}"
    );
    assert_eq!(report.answers, [Answer::Mismatch], "final: not resent");
    assert_eq!(setup.balance("A").await, 5);
    assert!(!setup.proxy.has_request(0));
}

/// A token whose first submission is still running (held begun in the proxy): every attempt of
/// the same request is answered TransactionInProgress and the intent stays open as `InProgress`.
#[tokio::test]
async fn a_token_still_running_is_a_typed_in_progress_outcome() {
    let mut setup = setup(2).await;
    let (first_writer, _clock) = setup.writer(0).await;
    let (second_writer, _clock) = setup.writer(1).await;
    let token = unique("tok-p").chars().take(36).collect::<String>();
    let first = tokio::spawn({
        let intent = Intent::with_check(setup.transfer(5), check(&setup, 5)).token(token.clone());
        async move { first_writer.write(intent).await }
    });
    let held = setup.take(0).await;
    setup.proxy.begin(&held).await.expect("begun");
    let intent = Intent::with_check(setup.transfer(5), check(&setup, 5)).token(token);
    let attempts_max = limits().attempts_max as usize;
    let (report, ()) = tokio::join!(second_writer.write(intent), async {
        for _ in 0..attempts_max {
            setup.pass(1).await;
        }
    });
    let report = report.unwrap();
    assert_eq!(report.outcome, Outcome::InProgress);
    assert_eq!(report.answers, vec![Answer::InProgress; attempts_max]);
    assert_eq!(setup.balance("A").await, 0, "nothing ran while held");
    let answer = setup.proxy.forward(&held).await.unwrap();
    setup.proxy.deliver(held, answer).unwrap();
    assert_eq!(first.await.unwrap().unwrap().outcome, Outcome::Applied);
    assert_eq!(setup.balance("A").await, 5);
}

/// The window on the clocks the test controls: once the writer's clock has passed the window it
/// never resends (an identical resend would now execute again, as the proxy shows on its own
/// clock) and reconciliation decides.
//= specs/tokened-writes.md#T3
//# An unknown outcome is all or nothing.
#[tokio::test]
async fn past_the_window_the_client_reconciles_instead_of_resending() {
    let mut setup = setup(2).await;
    let (writer, clock) = setup.writer(0).await;
    let intent = Intent::with_check(setup.transfer(5), check(&setup, 5));
    let token = intent.token_str().to_owned();
    let write = tokio::spawn({
        let writer = writer.clone();
        async move { writer.write(intent).await }
    });
    let first = setup.take(0).await;
    let first_body = first.body.clone();
    assert_eq!(setup.proxy.forward(&first).await.unwrap().status, 200);
    // Ten minutes pass, on both clocks, before the response is lost.
    let window = Duration::from_millis(TOKEN_WINDOW_MILLIS);
    clock.advance_secs(window.as_secs() as i64);
    setup.proxy.set_token_clock(window);
    setup.proxy.lose(first).unwrap();
    // The reconciliation's read, and nothing else.
    let read = setup.take(0).await;
    assert_eq!(read.operation, "GetItem");
    let answer = setup.proxy.forward(&read).await.unwrap();
    setup.proxy.deliver(read, answer).unwrap();
    let report = write.await.unwrap().expect("the write ends");
    assert_eq!(report.outcome, Outcome::Reconciled { applied: true });
    assert_eq!(report.answers.len(), 1, "no resend: {:?}", report.answers);
    assert!(!setup.proxy.has_request(0));
    // What a blind resend would have done: the token is new again after the window.
    let bare = oncecheck_store::dynamodb::client_for(Some(&setup.proxy.endpoint(1))).await;
    let items: Vec<TransactWriteItem> = setup.transfer(5);
    let (resent, ()) = tokio::join!(
        bare.transact_write_items()
            .set_transact_items(Some(items))
            .client_request_token(&token)
            .send(),
        async {
            let request = setup.take(1).await;
            assert_eq!(request.body, first_body, "the same request");
            let answer = setup.proxy.forward(&request).await.unwrap();
            setup.proxy.deliver(request, answer).unwrap();
        }
    );
    resent.expect("executed as new");
    assert_eq!(
        setup.balance("A").await,
        10,
        "the late resend applied twice"
    );
}
