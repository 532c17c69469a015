//! What the tests that talk to a DynamoDB-compatible server (moto in CI) share: the endpoint,
//! names no other run uses, the step wait, and the single-key table the token tests write.
//! Each test crate uses a part of it.
#![allow(dead_code)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType,
};

pub const ENDPOINT_ENV: &str = "ONCECHECK_DDB_ENDPOINT";

/// Well inside the SDK's 5 s attempt timeout of the store's clients.
pub const STEP_WAIT: Duration = Duration::from_secs(4);

/// The server's endpoint. These tests never skip: without a server they fail, saying how to
/// start one.
pub fn upstream() -> String {
    match std::env::var(ENDPOINT_ENV) {
        Ok(url) if !url.is_empty() => url,
        _ => panic!(
            "{ENDPOINT_ENV} is unset: this test needs a DynamoDB-compatible server and never \
             skips. Run it as `bash -c 'source scripts/services.sh; start_moto; cargo test -p \
             oncecheck-conformance --test NAME; services_down'`, or run scripts/test."
        ),
    }
}

/// `prefix` made unique across processes and within this one (table names, streams).
pub fn unique(prefix: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970")
        .subsec_nanos();
    format!(
        "{prefix}-{}-{}-{nanos}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// Creates `table` with one string hash key, `pk` (on demand).
pub async fn create_pk_table(direct: &aws_sdk_dynamodb::Client, table: &str) {
    direct
        .create_table()
        .table_name(table)
        .billing_mode(BillingMode::PayPerRequest)
        .attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name("pk")
                .attribute_type(ScalarAttributeType::S)
                .build()
                .unwrap(),
        )
        .key_schema(
            KeySchemaElement::builder()
                .attribute_name("pk")
                .key_type(KeyType::Hash)
                .build()
                .unwrap(),
        )
        .send()
        .await
        .expect("create the table on moto");
}
