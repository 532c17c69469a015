//! Shared test support: the moto endpoint, tables, writers with a journal in a temporary
//! directory and a manual clock, and the accounts a transaction writes.
//!
//! DynamoDB tests read ONCECHECK_DDB_ENDPOINT and fail (never skip) when it is unset.
#![allow(dead_code)]

pub mod fake_endpoint;
pub mod fault_proxy;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, KeySchemaElement, KeyType,
    ScalarAttributeType, TransactWriteItem, Update,
};
use aws_sdk_dynamodb::Client;
use oncecheck_idempotency::ManualClock;
use oncecheck_tokened::{Journal, Limits, Receipt, ReliableWriter};

pub const ENDPOINT_ENV: &str = "ONCECHECK_DDB_ENDPOINT";
pub const KEY: &str = "pk";

/// The moto (or DynamoDB) endpoint; panics with the way to get one when it is unset.
pub fn ddb_endpoint() -> String {
    match std::env::var(ENDPOINT_ENV) {
        Ok(url) if !url.is_empty() => url,
        _ => panic!(
            "{ENDPOINT_ENV} is unset: the DynamoDB tests need a DynamoDB-compatible endpoint and never \
             skip. Start moto with `source scripts/services.sh; start_moto` (it exports \
             {ENDPOINT_ENV}), then rerun."
        ),
    }
}

/// A name unique to this process and call: tests share one moto server and run in parallel.
pub fn unique(prefix: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970")
        .as_nanos();
    format!(
        "{prefix}-{}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed),
        nanos % 1_000_000_000
    )
}

/// Fast retries for tests; the window and attempt limits are DynamoDB's defaults.
pub fn test_limits() -> Limits {
    Limits {
        backoff_base_millis: 1,
        backoff_max_millis: 5,
        attempt_timeout_secs: 3,
        ..Limits::default()
    }
}

/// A writer on `endpoint` with a fresh journal (kept alive by the returned directory) and a
/// manual clock starting at 1,000,000 ms.
pub async fn writer(endpoint: &str) -> (ReliableWriter, ManualClock, tempfile::TempDir) {
    let directory = tempfile::tempdir().expect("a temporary directory");
    let journal = Journal::open(&directory.path().join("journal.sqlite"))
        .await
        .expect("open the journal");
    let clock = ManualClock::new(1_000_000);
    let writer = ReliableWriter::connect(Some(endpoint), journal, test_limits())
        .await
        .with_clock(Arc::new(clock.clone()));
    (writer, clock, directory)
}

/// Creates a table with partition key `pk` (S).
pub async fn create_table(client: &Client, table: &str) {
    client
        .create_table()
        .table_name(table)
        .billing_mode(BillingMode::PayPerRequest)
        .attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name(KEY)
                .attribute_type(ScalarAttributeType::S)
                .build()
                .unwrap(),
        )
        .key_schema(
            KeySchemaElement::builder()
                .attribute_name(KEY)
                .key_type(KeyType::Hash)
                .build()
                .unwrap(),
        )
        .send()
        .await
        .expect("create the table");
}

pub fn key(name: &str) -> HashMap<String, AttributeValue> {
    [(KEY.to_owned(), AttributeValue::S(name.to_owned()))].into()
}

/// `ADD balance :delta` on an account: the non-idempotent effect of the tests.
pub fn add_balance(table: &str, account: &str, delta: i64) -> TransactWriteItem {
    let update = Update::builder()
        .table_name(table)
        .set_key(Some(key(account)))
        .update_expression("ADD balance :delta")
        .expression_attribute_values(":delta", AttributeValue::N(delta.to_string()))
        .build()
        .unwrap();
    TransactWriteItem::builder().update(update).build()
}

pub fn receipt(table: &str, intent: &str) -> Receipt {
    Receipt {
        table: table.to_owned(),
        key: key(&format!("receipt#{intent}")),
    }
}

/// An account's balance (strongly consistent); 0 when the item or attribute is absent.
pub async fn balance(client: &Client, table: &str, account: &str) -> i64 {
    let read = client
        .get_item()
        .table_name(table)
        .set_key(Some(key(account)))
        .consistent_read(true)
        .send()
        .await
        .unwrap();
    match read.item().and_then(|item| item.get("balance")) {
        Some(AttributeValue::N(number)) => number.parse().unwrap(),
        _ => 0,
    }
}

pub async fn exists(
    client: &Client,
    table: &str,
    item_key: HashMap<String, AttributeValue>,
) -> bool {
    client
        .get_item()
        .table_name(table)
        .set_key(Some(item_key))
        .consistent_read(true)
        .send()
        .await
        .unwrap()
        .item()
        .is_some()
}

/// One wait before a resend, as the writer's backoff event reported it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Wait {
    pub resend: u64,
    pub ceiling_millis: u64,
    pub wait_millis: u64,
}

/// Records the backoff events (`oncecheck_tokened::client::BACKOFF_TARGET`) in order.
#[derive(Clone, Default)]
struct WaitRecorder(Arc<std::sync::Mutex<Vec<Wait>>>);

impl tracing::field::Visit for Wait {
    fn record_u64(&mut self, field: &tracing::field::Field, value: u64) {
        match field.name() {
            "resend" => self.resend = value,
            "ceiling_millis" => self.ceiling_millis = value,
            "wait_millis" => self.wait_millis = value,
            _ => {}
        }
    }

    fn record_debug(&mut self, _: &tracing::field::Field, _: &dyn std::fmt::Debug) {}
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for WaitRecorder {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        if event.metadata().target() == oncecheck_tokened::client::BACKOFF_TARGET {
            let mut wait = Wait::default();
            event.record(&mut wait);
            self.0.lock().expect("the recorder's lock").push(wait);
        }
    }
}

/// Runs `future` with a subscriber recording the writer's waits before resends: its output and
/// the waits in the order they were drawn.
pub async fn recording_waits<F: std::future::Future>(future: F) -> (F::Output, Vec<Wait>) {
    use tracing::instrument::WithSubscriber;
    use tracing_subscriber::layer::SubscriberExt;
    let recorder = WaitRecorder::default();
    let subscriber = tracing_subscriber::registry().with(recorder.clone());
    let output = future.with_subscriber(subscriber).await;
    let waits = recorder.0.lock().expect("the recorder's lock").clone();
    (output, waits)
}
