//! The conformance proxy against a real DynamoDB-compatible server (moto in CI), driven the way a
//! replay drives it: the real store's aws-sdk-dynamodb clients talk to the proxy, the test takes
//! each held request, forwards or answers it, and checks what the clients and the server saw.
//!
//! Needs ONCECHECK_DDB_ENDPOINT and fails (never skips) without it:
//! `bash -c 'source scripts/services.sh; start_moto; cargo test -p oncecheck-conformance --test proxy; services_down'`

use std::time::Duration;

use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{AttributeValue, ConditionCheck, Put, TransactWriteItem};
use oncecheck_conformance::proxy::{
    Answer, HeldRequest, Item, ItemKey, PreImage, Proxy, ProxyError, ReasonCode, SeqCondition,
    TransactKind,
};
use oncecheck_store::dynamodb::claim_key;
use oncecheck_store::{Appended, DynamoDbStore, NewOp, OpStore};
use serde_json::json;
use tokio::task::JoinHandle;
use tokio::time::Instant;

mod support {
    pub mod moto;
}
use support::moto::{unique, upstream, STEP_WAIT};

/// A fresh table, and a store talking to the server directly (set-up, bypassing the proxy).
async fn fresh_table(prefix: &str) -> (String, DynamoDbStore) {
    let table = unique(prefix);
    let direct = DynamoDbStore::connect(table.clone(), Some(&upstream())).await;
    direct
        .create_table()
        .await
        .expect("create the table on the server");
    (table, direct)
}

fn deadline() -> Instant {
    Instant::now() + Duration::from_secs(20)
}

async fn append_directly(store: &DynamoDbStore, stream: &str, op_ids: &[&str]) {
    let ops: Vec<NewOp> = op_ids
        .iter()
        .map(|id| NewOp::new(*id, id.as_bytes()))
        .collect();
    let outcome = store.append_batch(stream, &ops, deadline()).await;
    assert_eq!(outcome.error, None, "set-up appends");
}

fn spawn_append(
    store: &DynamoDbStore,
    stream: &str,
    op_id: &str,
) -> JoinHandle<Result<Appended, oncecheck_store::StoreError>> {
    let (store, stream, op) = (
        store.clone(),
        stream.to_owned(),
        NewOp::new(op_id, op_id.as_bytes()),
    );
    tokio::spawn(async move {
        let mut push = oncecheck_store::PushContext::default();
        store.append_op(&stream, &op, deadline(), &mut push).await
    })
}

async fn take(proxy: &Proxy, actor: usize, operation: &str) -> HeldRequest {
    let request = proxy
        .next_request(actor, STEP_WAIT)
        .await
        .unwrap_or_else(|error| panic!("waiting for actor {actor}'s {operation}: {error}"));
    assert_eq!(
        request.operation, operation,
        "actor {actor} sent {request:?}"
    );
    request
}

/// Takes the actor's next request, forwards it and delivers the answer; returns the answer.
async fn pass(proxy: &Proxy, actor: usize, operation: &str) -> Answer {
    let request = take(proxy, actor, operation).await;
    let answer = proxy.forward(&request).await.expect("forward");
    proxy.deliver(request, answer.clone()).expect("deliver");
    answer
}

async fn finish<T>(task: JoinHandle<T>) -> T {
    tokio::time::timeout(STEP_WAIT, task)
        .await
        .expect("the client finished")
        .expect("the client task")
}

fn seqs(answer: &Answer) -> Vec<i64> {
    answer.body["Items"]
        .as_array()
        .expect("Items")
        .iter()
        .map(|item| {
            item["seq"]["N"]
                .as_str()
                .expect("seq")
                .parse()
                .expect("an i64 seq")
        })
        .collect()
}

fn key_item(stream: &str, seq: i64) -> std::collections::HashMap<String, AttributeValue> {
    std::collections::HashMap::from([
        ("stream_id".to_owned(), AttributeValue::S(stream.to_owned())),
        ("seq".to_owned(), AttributeValue::N(seq.to_string())),
    ])
}

/// A raw Query of one stream's seqs, as a test sends it through the SDK.
struct RawQuery<'a> {
    table: &'a str,
    stream: &'a str,
    /// (comparison, seq): `seq > 0` is `(">", 0)`.
    condition: (&'a str, i64),
    limit: Option<i32>,
    forward: bool,
    start: Option<i64>,
}

impl<'a> RawQuery<'a> {
    fn new(table: &'a str, condition: (&'a str, i64)) -> RawQuery<'a> {
        RawQuery {
            table,
            stream: "s",
            condition,
            limit: None,
            forward: true,
            start: None,
        }
    }

    fn limit(mut self, limit: i32) -> Self {
        self.limit = Some(limit);
        self
    }

    fn reverse(mut self) -> Self {
        self.forward = false;
        self
    }

    fn start(mut self, seq: i64) -> Self {
        self.start = Some(seq);
        self
    }

    /// Sends it through `client` while the test answers it by forwarding.
    async fn run(
        self,
        proxy: &Proxy,
        actor: usize,
        client: &aws_sdk_dynamodb::Client,
    ) -> (Answer, aws_sdk_dynamodb::operation::query::QueryOutput) {
        let query = client
            .query()
            .table_name(self.table)
            .key_condition_expression(format!(
                "#stream = :stream AND #seq {} :value",
                self.condition.0
            ))
            .expression_attribute_names("#stream", "stream_id")
            .expression_attribute_names("#seq", "seq")
            .expression_attribute_values(":stream", AttributeValue::S(self.stream.to_owned()))
            .expression_attribute_values(":value", AttributeValue::N(self.condition.1.to_string()))
            .consistent_read(true)
            .scan_index_forward(self.forward)
            .set_limit(self.limit)
            .set_exclusive_start_key(self.start.map(|seq| key_item(self.stream, seq)));
        let sent = tokio::spawn(query.send());
        let answer = pass(proxy, actor, "Query").await;
        let output = finish(sent)
            .await
            .expect("the Query succeeded through the proxy");
        (answer, output)
    }
}

/// Appends `op_id` through `actor`, holding the committed transaction pending. Returns the keys
/// now pending and the seq the store answered.
async fn append_held(
    proxy: &Proxy,
    store: &DynamoDbStore,
    actor: usize,
    stream: &str,
    op_id: &str,
) -> (Vec<ItemKey>, i64) {
    let task = spawn_append(store, stream, op_id);
    pass(proxy, actor, "Query").await;
    let transaction = take(proxy, actor, "TransactWriteItems").await;
    let (answer, held) = proxy
        .forward_holding(&transaction)
        .await
        .expect("commit upstream");
    assert!(answer.is_success(), "the transaction committed: {answer:?}");
    proxy.deliver(transaction, answer).expect("deliver");
    let appended = finish(task).await.expect("the append succeeded");
    (held, appended.seq)
}

async fn wait_until(what: &str, condition: impl Fn() -> bool) {
    let give_up = Instant::now() + STEP_WAIT;
    while !condition() {
        assert!(
            Instant::now() < give_up,
            "{what} did not happen within {STEP_WAIT:?}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test]
async fn a_held_transaction_is_invisible_to_reads_until_applied_but_committed_upstream() {
    let (table, direct) = fresh_table("proxy-window").await;
    append_directly(&direct, "s", &["a"]).await;
    let proxy = Proxy::start(&upstream(), 2).await.expect("proxy");
    let writer = DynamoDbStore::connect(table.clone(), Some(&proxy.endpoint(0))).await;
    let reader = DynamoDbStore::connect(table.clone(), Some(&proxy.endpoint(1))).await;

    // The writer's round, as the proxy parses it.
    let task = spawn_append(&writer, "s", "b");
    let counter_read = take(&proxy, 0, "Query").await;
    let view = counter_read.query().expect("a Query");
    assert_eq!(
        (view.stream.as_str(), view.seq, view.consistent),
        ("s", SeqCondition::Eq(0), true)
    );
    let answer = proxy.forward(&counter_read).await.expect("forward");
    proxy.deliver(counter_read, answer).expect("deliver");
    let transaction = take(&proxy, 0, "TransactWriteItems").await;
    assert_eq!(transaction.table(), Some(table.clone()));
    let items = transaction.transact_items().expect("parsed");
    let kinds: Vec<TransactKind> = items.iter().map(|item| item.kind).collect();
    assert_eq!(
        kinds,
        [
            TransactKind::Update,
            TransactKind::Put,
            TransactKind::ConditionCheck,
            TransactKind::Put
        ]
    );
    assert_eq!(items[0].key, ItemKey::new("s", 0));
    assert_eq!(items[0].condition.as_deref(), Some("next_seq = 1"));
    assert_eq!(items[0].update.as_deref(), Some("SET next_seq = 2"));
    assert!(
        items[0].all_old_on_failure && items[1].all_old_on_failure && !items[3].all_old_on_failure
    );
    assert_eq!(items[1].key, ItemKey::new("s", claim_key("b")));
    assert_eq!(
        items[1].condition.as_deref(),
        Some("attribute_not_exists(stream_id)")
    );
    assert_eq!(
        (items[2].key.seq, items[2].condition.as_deref()),
        (1, Some("attribute_exists(stream_id)"))
    );
    assert_eq!(items[3].key, ItemKey::new("s", 2));
    assert_eq!(
        items[3].put_item.as_ref().map(|item| item["op_id"].clone()),
        Some(json!({"S": "b"}))
    );
    let (answer, held) = proxy.forward_holding(&transaction).await.expect("commit");
    assert!(answer.is_success(), "{answer:?}");
    proxy.deliver(transaction, answer).expect("deliver");
    assert_eq!(
        finish(task).await.expect("append"),
        Appended {
            seq: 2,
            existing: false
        }
    );
    let mut expected_pending = vec![
        ItemKey::new("s", 0),
        ItemKey::new("s", claim_key("b")),
        ItemKey::new("s", 2),
    ];
    expected_pending.sort();
    assert_eq!(
        held.iter()
            .cloned()
            .collect::<std::collections::BTreeSet<_>>()
            .len(),
        3
    );
    assert_eq!(proxy.pending(), expected_pending);

    // Through the proxy: the counter shows its old next_seq, op 2 is absent (Query and GetItem).
    let counter = tokio::spawn({
        let reader = reader.clone();
        async move { reader.read_counter("s").await }
    });
    pass(&proxy, 1, "Query").await;
    assert_eq!(
        finish(counter).await.expect("counter read"),
        1,
        "the counter's pre-image"
    );
    let pull = tokio::spawn({
        let reader = reader.clone();
        async move { reader.pull("s", 0, 100).await }
    });
    pass(&proxy, 1, "Query").await;
    let pulled: Vec<i64> = finish(pull)
        .await
        .expect("pull")
        .iter()
        .map(|op| op.seq)
        .collect();
    assert_eq!(pulled, [1], "the pending op 2 is not visible to a pull");
    let client = reader.client().clone();
    let get = tokio::spawn({
        let (client, table) = (client.clone(), table.clone());
        async move {
            client
                .get_item()
                .table_name(table)
                .set_key(Some(key_item("s", 2)))
                .consistent_read(true)
                .send()
                .await
        }
    });
    let request = take(&proxy, 1, "GetItem").await;
    assert_eq!(request.key().expect("key"), ItemKey::new("s", 2));
    let answer = proxy.forward(&request).await.expect("forward");
    proxy.deliver(request, answer).expect("deliver");
    assert_eq!(
        finish(get).await.expect("GetItem").item(),
        None,
        "GetItem of the pending op 2"
    );
    let get = tokio::spawn({
        let (client, table) = (client.clone(), table.clone());
        async move {
            client
                .get_item()
                .table_name(table)
                .set_key(Some(key_item("s", 0)))
                .consistent_read(true)
                .send()
                .await
        }
    });
    pass(&proxy, 1, "GetItem").await;
    let counter_item = finish(get)
        .await
        .expect("GetItem")
        .item()
        .cloned()
        .expect("the counter exists");
    assert_eq!(
        counter_item.get("next_seq"),
        Some(&AttributeValue::N("1".into()))
    );

    // The server holds the commit.
    let committed = proxy.scan_upstream(&table).await.expect("scan");
    let keys: Vec<ItemKey> = committed
        .iter()
        .map(|item| ItemKey::from_item(item).expect("key"))
        .collect();
    assert!(
        keys.contains(&ItemKey::new("s", 2)),
        "op 2 is committed upstream: {keys:?}"
    );
    let counter_upstream = committed
        .iter()
        .find(|item| item["seq"] == json!({"N": "0"}))
        .expect("counter");
    assert_eq!(counter_upstream["next_seq"], json!({"N": "2"}));

    // A write to a pending item: not forwarded, answered with the conflict DynamoDB gives.
    let add = tokio::spawn({
        let (client, table) = (client.clone(), table.clone());
        async move {
            client
                .update_item()
                .table_name(table)
                .set_key(Some(key_item("s", 0)))
                .update_expression("ADD next_seq :one")
                .expression_attribute_values(":one", AttributeValue::N("1".into()))
                .send()
                .await
        }
    });
    let request = take(&proxy, 1, "UpdateItem").await;
    let refused = proxy.forward(&request).await;
    assert!(
        matches!(&refused, Err(ProxyError::WritesPending { key, .. }) if *key == ItemKey::new("s", 0)),
        "{refused:?}"
    );
    let conflict = proxy
        .conflict_answer(&request)
        .expect("judged")
        .expect("a conflict");
    assert_eq!(
        conflict.error_type().as_deref(),
        Some("TransactionConflictException")
    );
    proxy.deliver(request, conflict).expect("deliver");
    let error = finish(add).await.expect_err("the ADD is refused");
    match &error {
        SdkError::ServiceError(service) => {
            use aws_sdk_dynamodb::error::ProvideErrorMetadata;
            assert_eq!(service.err().code(), Some("TransactionConflictException"));
        }
        other => panic!("expected a service error, got {other:?}"),
    }

    // Applied one at a time: visible exactly when applied.
    proxy.apply(&ItemKey::new("s", 2)).expect("apply op 2");
    let pull = tokio::spawn({
        let reader = reader.clone();
        async move { reader.pull("s", 0, 100).await }
    });
    pass(&proxy, 1, "Query").await;
    let pulled: Vec<i64> = finish(pull)
        .await
        .expect("pull")
        .iter()
        .map(|op| op.seq)
        .collect();
    assert_eq!(pulled, [1, 2]);
    let counter = tokio::spawn({
        let reader = reader.clone();
        async move { reader.read_counter("s").await }
    });
    pass(&proxy, 1, "Query").await;
    assert_eq!(
        finish(counter).await.expect("counter"),
        1,
        "the counter is still pending"
    );
    for key in proxy.pending() {
        proxy.apply(&key).expect("apply");
    }
    assert!(proxy.pending().is_empty());
    assert!(matches!(
        proxy.apply(&ItemKey::new("s", 2)),
        Err(ProxyError::NotPending(_))
    ));
    let counter = tokio::spawn({
        let reader = reader.clone();
        async move { reader.read_counter("s").await }
    });
    pass(&proxy, 1, "Query").await;
    assert_eq!(
        finish(counter).await.expect("counter"),
        2,
        "the counter's new image once applied"
    );
}

#[tokio::test]
async fn query_limit_and_order_are_honoured_with_pending_items_filtered_out() {
    let (table, direct) = fresh_table("proxy-query").await;
    append_directly(&direct, "s", &["a", "b", "c"]).await;
    let proxy = Proxy::start(&upstream(), 2).await.expect("proxy");
    let writer = DynamoDbStore::connect(table.clone(), Some(&proxy.endpoint(0))).await;
    let (held, seq) = append_held(&proxy, &writer, 0, "s", "d").await;
    assert_eq!(seq, 4);
    assert!(held.contains(&ItemKey::new("s", 4)));
    let reader = DynamoDbStore::connect(table.clone(), Some(&proxy.endpoint(1))).await;
    let client = reader.client();

    // The store's top query: seq > 0, reverse, Limit 1 skips the pending top op 4.
    let (answer, output) = RawQuery::new(&table, (">", 0))
        .limit(1)
        .reverse()
        .run(&proxy, 1, client)
        .await;
    assert_eq!(seqs(&answer), [3]);
    assert_eq!(output.count(), 1);
    assert_eq!(
        output.last_evaluated_key(),
        Some(&key_item("s", 3)),
        "ops 2 and 1 were cut off"
    );
    // Forward with a Limit, then from the start key to the end.
    let (answer, output) = RawQuery::new(&table, (">", 0))
        .limit(2)
        .run(&proxy, 1, client)
        .await;
    assert_eq!(seqs(&answer), [1, 2]);
    assert_eq!(output.last_evaluated_key(), Some(&key_item("s", 2)));
    let (answer, output) = RawQuery::new(&table, (">", 0))
        .limit(2)
        .start(2)
        .run(&proxy, 1, client)
        .await;
    assert_eq!(seqs(&answer), [3], "op 4 is pending");
    assert_eq!(output.last_evaluated_key(), None, "nothing was cut off");
    // Reverse from a start key, no Limit; the whole range in reverse.
    let (answer, _) = RawQuery::new(&table, (">", 0))
        .reverse()
        .start(3)
        .run(&proxy, 1, client)
        .await;
    assert_eq!(seqs(&answer), [2, 1]);
    let (answer, output) = RawQuery::new(&table, (">=", 0))
        .reverse()
        .run(&proxy, 1, client)
        .await;
    assert_eq!(
        seqs(&answer),
        [3, 2, 1, 0],
        "the counter's pre-image is in range"
    );
    assert_eq!(answer.body["Items"][3]["next_seq"], json!({"N": "3"}));
    assert_eq!(output.count(), 4);
    // The claim read of the pending op: absent; of an applied op: present.
    let (answer, _) = RawQuery::new(&table, ("=", claim_key("d")))
        .run(&proxy, 1, client)
        .await;
    assert_eq!(seqs(&answer), Vec::<i64>::new());
    let (answer, _) = RawQuery::new(&table, ("=", claim_key("b")))
        .run(&proxy, 1, client)
        .await;
    assert_eq!(answer.body["Items"][0]["claimed_seq"], json!({"N": "2"}));

    // Applied: the top query finds op 4.
    for key in held {
        proxy.apply(&key).expect("apply");
    }
    let (answer, _) = RawQuery::new(&table, (">", 0))
        .limit(1)
        .reverse()
        .run(&proxy, 1, client)
        .await;
    assert_eq!(seqs(&answer), [4]);

    // The lower-level pair: read the current images, hold them pending with the images a
    // transaction would have found (op 4 absent), and reads go back behind the window.
    let op4 = ItemKey::new("s", 4);
    let images = proxy
        .read_images(&table, std::slice::from_ref(&op4))
        .await
        .expect("read");
    assert_eq!(images.len(), 1);
    assert_eq!(
        images[0].item.as_ref().map(|item| item["op_id"].clone()),
        Some(json!({"S": "d"}))
    );
    let before = PreImage {
        item: None,
        ..images[0].clone()
    };
    proxy.hold_pending(vec![before.clone()]).expect("hold");
    assert!(
        matches!(proxy.hold_pending(vec![before]), Err(ProxyError::AlreadyPending(key)) if key == op4)
    );
    let (answer, _) = RawQuery::new(&table, (">", 0))
        .limit(1)
        .reverse()
        .run(&proxy, 1, client)
        .await;
    assert_eq!(seqs(&answer), [3], "op 4 is pending again");
}

#[tokio::test]
async fn a_synthesised_cancellation_is_parsed_by_the_real_sdk_and_store() {
    let (table, direct) = fresh_table("proxy-cancel").await;
    append_directly(&direct, "s", &["a"]).await;
    let proxy = Proxy::start(&upstream(), 2).await.expect("proxy");
    let writer = DynamoDbStore::connect(table.clone(), Some(&proxy.endpoint(0))).await;

    // The store: [None, None, TransactionConflict, None] is a lost round without a hint, so the
    // next round reads the counter again and then commits.
    let task = spawn_append(&writer, "s", "b");
    pass(&proxy, 0, "Query").await;
    let round = take(&proxy, 0, "TransactWriteItems").await;
    assert_eq!(round.transact_items().expect("parsed").len(), 4);
    let reasons = [
        ReasonCode::None,
        ReasonCode::None,
        ReasonCode::TransactionConflict,
        ReasonCode::None,
    ];
    let cancelled = Proxy::cancelled(&reasons.map(|code| (code, None)));
    proxy.deliver(round, cancelled).expect("deliver");
    let reread = take(&proxy, 0, "Query").await;
    assert_eq!(
        reread.query().expect("query").seq,
        SeqCondition::Eq(0),
        "a lost round re-reads the counter"
    );
    let answer = proxy.forward(&reread).await.expect("forward");
    proxy.deliver(reread, answer).expect("deliver");
    pass(&proxy, 0, "TransactWriteItems").await;
    assert_eq!(
        finish(task).await.expect("append"),
        Appended {
            seq: 2,
            existing: false
        }
    );

    // The raw SDK: TransactionCanceledException with the codes, and the old item of ALL_OLD.
    let client = DynamoDbStore::connect(table.clone(), Some(&proxy.endpoint(1)))
        .await
        .client()
        .clone();
    let mut old: Item = Item::new();
    old.insert("stream_id".into(), json!({"S": "s"}));
    old.insert("seq".into(), json!({"N": "0"}));
    old.insert("next_seq".into(), json!({"N": "7"}));
    let sent = tokio::spawn({
        let table = table.clone();
        async move {
            let put = Put::builder()
                .table_name(&table)
                .set_item(Some(key_item("s", 9)))
                .build()
                .expect("put");
            let check = ConditionCheck::builder()
                .table_name(&table)
                .set_key(Some(key_item("s", 0)))
                .condition_expression("attribute_not_exists(stream_id)")
                .build()
                .expect("check");
            client
                .transact_write_items()
                .transact_items(TransactWriteItem::builder().condition_check(check).build())
                .transact_items(TransactWriteItem::builder().put(put).build())
                .send()
                .await
        }
    });
    let request = take(&proxy, 1, "TransactWriteItems").await;
    let answer = Proxy::cancelled(&[
        (ReasonCode::ConditionalCheckFailed, Some(old)),
        (ReasonCode::TransactionConflict, None),
    ]);
    proxy.deliver(request, answer).expect("deliver");
    match finish(sent).await {
        Err(SdkError::ServiceError(service)) => match service.err() {
            TransactWriteItemsError::TransactionCanceledException(cancelled) => {
                let codes: Vec<&str> = cancelled
                    .cancellation_reasons()
                    .iter()
                    .map(|reason| reason.code().unwrap_or(""))
                    .collect();
                assert_eq!(codes, ["ConditionalCheckFailed", "TransactionConflict"]);
                let item = cancelled.cancellation_reasons()[0]
                    .item()
                    .expect("the ALL_OLD image");
                assert_eq!(item.get("next_seq"), Some(&AttributeValue::N("7".into())));
            }
            other => panic!("expected TransactionCanceledException, got {other:?}"),
        },
        other => panic!("expected a service error, got {other:?}"),
    }
    let keys: Vec<ItemKey> = proxy
        .scan_upstream(&table)
        .await
        .expect("scan")
        .iter()
        .map(|item| ItemKey::from_item(item).expect("key"))
        .collect();
    assert!(
        !keys.contains(&ItemKey::new("s", 9)),
        "a synthesised answer never went upstream"
    );
}

#[tokio::test]
async fn a_lost_response_is_an_unknown_outcome_for_the_sdk_but_committed_upstream() {
    let (table, _direct) = fresh_table("proxy-lose").await;
    let proxy = Proxy::start(&upstream(), 1).await.expect("proxy");
    let client = DynamoDbStore::connect(table.clone(), Some(&proxy.endpoint(0)))
        .await
        .client()
        .clone();
    let sent = tokio::spawn({
        let (client, table) = (client.clone(), table.clone());
        async move {
            let mut item = key_item("lost", 5);
            item.insert("op_id".into(), AttributeValue::S("x".into()));
            client
                .put_item()
                .table_name(table)
                .set_item(Some(item))
                .send()
                .await
        }
    });
    let request = take(&proxy, 0, "PutItem").await;
    assert_eq!(request.key().expect("key"), ItemKey::new("lost", 5));
    let answer = proxy.forward(&request).await.expect("forward");
    assert!(answer.is_success(), "{answer:?}");
    proxy.lose(request).expect("lose");
    match finish(sent).await {
        Ok(output) => panic!("the SDK got an answer: {output:?}"),
        Err(SdkError::ServiceError(service)) => {
            panic!("a service error is a known outcome: {service:?}")
        }
        Err(
            SdkError::DispatchFailure(_) | SdkError::ResponseError(_) | SdkError::TimeoutError(_),
        ) => {}
        Err(other) => panic!("unexpected error kind {other:?}"),
    }
    let committed = proxy.scan_upstream(&table).await.expect("scan");
    assert_eq!(committed.len(), 1, "the put committed: {committed:?}");

    // The client's next request arrives on a new connection and is served normally.
    let get = tokio::spawn({
        let (client, table) = (client.clone(), table.clone());
        async move {
            client
                .get_item()
                .table_name(table)
                .set_key(Some(key_item("lost", 5)))
                .send()
                .await
        }
    });
    pass(&proxy, 0, "GetItem").await;
    assert!(finish(get).await.expect("GetItem").item().is_some());
}

#[tokio::test]
async fn requests_are_attributed_to_the_actor_whose_port_they_arrived_on() {
    let (table, _direct) = fresh_table("proxy-actors").await;
    let proxy = Proxy::start(&upstream(), 2).await.expect("proxy");
    let zero = DynamoDbStore::connect(table.clone(), Some(&proxy.endpoint(0))).await;
    let one = DynamoDbStore::connect(table.clone(), Some(&proxy.endpoint(1))).await;
    assert!(!proxy.has_request(0) && !proxy.has_request(1));
    let waited = proxy.next_request(0, Duration::from_millis(50)).await;
    assert!(
        matches!(waited, Err(ProxyError::Timeout { actor: 0, .. })),
        "{waited:?}"
    );
    assert!(matches!(
        proxy.next_request(2, STEP_WAIT).await,
        Err(ProxyError::UnknownActor {
            actor: 2,
            actors: 2
        })
    ));

    let read_one = tokio::spawn(async move { one.read_counter("stream-of-one").await });
    wait_until("actor 1's request", || proxy.has_request(1)).await;
    assert!(!proxy.has_request(0), "actor 0 sent nothing yet");
    let read_zero = tokio::spawn(async move { zero.read_counter("stream-of-zero").await });
    wait_until("actor 0's request", || proxy.has_request(0)).await;

    let from_zero = take(&proxy, 0, "Query").await;
    let from_one = take(&proxy, 1, "Query").await;
    assert_eq!(
        (
            from_zero.actor,
            from_zero.query().expect("q").stream.as_str()
        ),
        (0, "stream-of-zero")
    );
    assert_eq!(
        (from_one.actor, from_one.query().expect("q").stream.as_str()),
        (1, "stream-of-one")
    );
    assert!(from_one.id < from_zero.id, "ids count arrivals");
    assert!(
        !proxy.has_request(0) && !proxy.has_request(1),
        "taken requests are no longer waiting"
    );
    // Answered in the opposite order of arrival: each client gets its own answer.
    let answer = proxy.forward(&from_zero).await.expect("forward");
    proxy.deliver(from_zero, answer).expect("deliver");
    assert_eq!(finish(read_zero).await.expect("read"), 0);
    assert!(!read_one.is_finished(), "actor 1 is still held");
    let answer = proxy.forward(&from_one).await.expect("forward");
    proxy.deliver(from_one, answer).expect("deliver");
    assert_eq!(finish(read_one).await.expect("read"), 0);
}

#[tokio::test]
async fn a_request_dropped_unanswered_gets_a_proxy_fault_naming_the_cause() {
    let (table, _direct) = fresh_table("proxy-dropped").await;
    let proxy = Proxy::start(&upstream(), 1).await.expect("proxy");
    let store = DynamoDbStore::connect(table.clone(), Some(&proxy.endpoint(0))).await;
    let read = tokio::spawn(async move { store.read_counter("s").await });
    drop(take(&proxy, 0, "Query").await);
    let error = finish(read).await.expect_err("no answer was given");
    let message = error.to_string();
    // The store names the error type; the proxy's message is in the store's log.
    assert!(message.contains("ProxyFault"), "{message}");
}

#[tokio::test]
async fn a_stalled_response_is_a_client_timeout() {
    let (table, _direct) = fresh_table("proxy-stall").await;
    let proxy = Proxy::start(&upstream(), 1).await.expect("proxy");
    let client = DynamoDbStore::connect(table.clone(), Some(&proxy.endpoint(0)))
        .await
        .client()
        .clone();
    let sent = tokio::spawn({
        let table = table.clone();
        async move {
            let mut item = key_item("stalled", 1);
            item.insert("op_id".into(), AttributeValue::S("x".into()));
            // A short attempt timeout keeps the test quick; the store's own is 5 s.
            let quick = aws_sdk_dynamodb::config::Builder::default().timeout_config(
                aws_sdk_dynamodb::config::timeout::TimeoutConfig::builder()
                    .operation_attempt_timeout(Duration::from_millis(300))
                    .build(),
            );
            client
                .put_item()
                .table_name(table)
                .set_item(Some(item))
                .customize()
                .config_override(quick)
                .send()
                .await
        }
    });
    let request = take(&proxy, 0, "PutItem").await;
    let answer = proxy.forward(&request).await.expect("forward");
    assert!(answer.is_success(), "{answer:?}");
    proxy.stall(request).expect("stall");
    match finish(sent).await {
        Err(SdkError::TimeoutError(_)) => {}
        other => panic!("expected the client's timeout, got {other:?}"),
    }
    assert_eq!(
        proxy.scan_upstream(&table).await.expect("scan").len(),
        1,
        "the put committed"
    );
}
