//! DynamoDB's ClientRequestToken semantics for TransactWriteItems, in front of any endpoint
//! (moto executes an identical tokened transaction again and ignores a token reused with other
//! parameters).
//!
//! The rules are DynamoDB's documented ones (specs/tokened-writes.md, "Server rules"): a token is
//! 1 to 36 characters; the first request with a token records it with a **fingerprint** (SHA-256
//! of the request's canonical JSON without `ClientRequestToken`: keys sorted, as `serde_json`
//! writes a map) and its **creation time**; within the 10-minute window an identical request is
//! answered success and applies nothing, a request with other parameters is answered
//! IdempotentParameterMismatchException; while the first attempt is still running (held in the
//! proxy between [`super::Proxy::begin`] and its forward) the same request is answered
//! TransactionInProgressException; after the window the token is new again. Time is the proxy's
//! own token clock, which only the trace (or test) moves ([`super::Proxy::set_token_clock`]), so
//! "ten minutes later" is a step, not a wait.
//!
//! **Where the record lives, and why.** The token record is an item of a side table of the
//! proxy's own ([`TOKEN_TABLE_PREFIX`], one per proxy: emulators copy a whole table per
//! transaction, and moto's copy races a concurrent writer of the same table) committed by the upstream in the SAME TransactWriteItems as the effects: the
//! proxy appends a conditional Put of the record to the transaction it forwards, conditional on
//! the record being as the proxy read it (absent, or the expired record it replaces). The
//! alternatives each reopen the hazard this table exists to close: a record kept in the proxy's
//! memory or written after the answer is missing when the upstream committed but its answer was
//! lost (the resend then executes again), and a record written before the forward exists for a
//! transaction that was cancelled (the resend is then answered success for nothing). Committed
//! together, the upstream's own atomicity gives "effects if and only if record", whatever happens
//! to the answer; the condition turns the record write into a compare-and-set, so two executions
//! of one token can never both commit. The extra item's cancellation reason is removed from a
//! TransactionCanceledException before the client sees it, so the client's reasons stay in its
//! own request order.
//!
//! Invariants:
//! - **Effects iff record**: a tokened transaction is forwarded only with its record's
//!   conditional Put appended; a replay or a refusal forwards nothing.
//! - **Fail closed**: a record without a valid creation time answers InternalServerError and
//!   applies nothing; it never expires.
//! - **One clock**: the window is decided on the token clock alone, never the wall clock.
//! - **Scoped records**: a record's key carries this proxy's instance name, so proxies (and runs)
//!   sharing one upstream never see each other's tokens or clocks.
//! - **Locks of running transactions**: a write touching an item of a begun (held) transaction is
//!   refused with TransactionConflict(Exception) and never forwarded.
//! - **The token decides first**: a tokened transaction's record is decided before the locks
//!   are looked at, so a replay, a mismatch or a damaged record is answered whoever holds the
//!   items; only a request that executes meets the locks. DynamoDB documents the token as a
//!   property of the request (identical calls have "no side effects", a retry of a running token
//!   is TransactionInProgress and drives that transaction to completion), and conflicts as
//!   those of a transaction that executes; the model's server (`decide` in
//!   `model/src/token.rs`) has the same order.
//!
//! The switch ([`super::Proxy::set_token_table`]) turns the token rules off: tokened requests then
//! pass through as sent, which is what the probe's red row shows. Locks stay on: they are the hold.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

use super::server::HeldRequest;
use super::upstream::{Turn, Upstream};
use super::wire::Answer;
use super::ProxyError;

/// The side table holding one proxy's token records is named this, then the proxy's instance
/// (created on the upstream when first needed, deleted by [`super::Proxy::delete_token_table`]).
pub const TOKEN_TABLE_PREFIX: &str = "oncecheck-proxy-tokens-";
/// DynamoDB's idempotency window.
pub const TOKEN_WINDOW_MILLIS: u64 = 10 * 60 * 1000;
/// DynamoDB's longest ClientRequestToken.
pub const TOKEN_CHARS_MAX: usize = 36;
/// DynamoDB's largest transaction: the record's Put must fit beside the client's items.
pub const TRANSACT_ITEMS_MAX: usize = 100;
/// Describe polls while the side table becomes active.
const TABLE_ACTIVE_POLLS_MAX: usize = 120;

const ATTRIBUTE_KEY: &str = "token_key";
const ATTRIBUTE_FINGERPRINT: &str = "fingerprint";
const ATTRIBUTE_CREATED: &str = "created_millis";
const ERROR_NAMESPACE: &str = "com.amazonaws.dynamodb.v20120810#";

/// A transaction begun and not yet forwarded or answered.
struct Running {
    token: Option<String>,
    fingerprint: String,
    keys: BTreeSet<LockKey>,
}

/// An item as (table, its key attributes as canonical JSON): schema-free, so any table works.
type LockKey = (String, String);

/// What the token rules make of a request before it goes upstream.
pub(super) enum Screen {
    /// Answered here: nothing goes upstream.
    Answer(Answer),
    /// Not the token table's business: forward as sent.
    Forward,
    /// A new execution: forward `body` (the client's request plus the record's Put).
    Record { body: Value, client_items: usize },
}

pub(super) struct Tokens {
    enabled: AtomicBool,
    now_millis: AtomicU64,
    instance: String,
    table: String,
    table_ready: tokio::sync::Mutex<bool>,
    running: Mutex<BTreeMap<u64, Running>>,
    /// Key attribute names per table (DescribeTable), for the locks of a Put.
    key_names: Mutex<BTreeMap<String, Vec<String>>>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every update under these locks is one insert or remove: a poisoned lock is consistent.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

fn error(status: u16, kind: &str, message: &str) -> Answer {
    Answer::error(status, &format!("{ERROR_NAMESPACE}{kind}"), message)
}

/// The request's parameters without its token, canonical, hashed.
pub fn fingerprint(body: &Value) -> String {
    let mut parameters = body.clone();
    if let Some(object) = parameters.as_object_mut() {
        object.remove("ClientRequestToken");
    }
    // serde_json's Map is ordered by key (no preserve_order in this build), so the text is
    // canonical: two requests with the same parameters in another key order hash alike.
    let text = parameters.to_string();
    Sha256::digest(text.as_bytes())
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

fn token_of(request: &HeldRequest) -> Option<&str> {
    request
        .body
        .get("ClientRequestToken")
        .and_then(Value::as_str)
}

impl Tokens {
    pub(super) fn new() -> Tokens {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos();
        // Proxies of one process (parallel tests) are told apart by the counter.
        static STARTED: AtomicU64 = AtomicU64::new(0);
        let started = STARTED.fetch_add(1, Ordering::Relaxed);
        let instance = format!("{}-{nanos:x}-{started}", std::process::id());
        Tokens {
            enabled: AtomicBool::new(true),
            now_millis: AtomicU64::new(0),
            table: format!("{TOKEN_TABLE_PREFIX}{instance}"),
            instance,
            table_ready: tokio::sync::Mutex::new(false),
            running: Mutex::new(BTreeMap::new()),
            key_names: Mutex::new(BTreeMap::new()),
        }
    }

    pub(super) fn set_enabled(&self, enabled: bool) {
        self.enabled.store(enabled, Ordering::SeqCst);
    }

    pub(super) fn enabled(&self) -> bool {
        self.enabled.load(Ordering::SeqCst)
    }

    pub(super) fn set_clock(&self, now: Duration) {
        self.now_millis
            .store(now.as_millis() as u64, Ordering::SeqCst);
    }

    pub(super) fn clock(&self) -> Duration {
        Duration::from_millis(self.now_millis.load(Ordering::SeqCst))
    }

    /// Records `request` as running: its token (if any) and the items it touches are taken until
    /// it is forwarded or answered.
    pub(super) async fn begin(
        &self,
        upstream: &Upstream,
        turn: &Turn<'_>,
        request: &HeldRequest,
    ) -> Result<(), ProxyError> {
        if request.operation != "TransactWriteItems" {
            return Err(ProxyError::Unsupported(format!(
                "only a TransactWriteItems can be begun and held, not a {}",
                request.operation
            )));
        }
        let keys = self.touched(upstream, turn, request).await?;
        let token = token_of(request).map(str::to_owned);
        let mut running = lock(&self.running);
        if let Some(token) = &token {
            if running
                .values()
                .any(|other| other.token.as_ref() == Some(token))
            {
                return Err(ProxyError::Unsupported(format!(
                    "token {token} is already running: forward this request to get its answer"
                )));
            }
        }
        running.insert(
            request.id,
            Running {
                token,
                fingerprint: fingerprint(&request.body),
                keys,
            },
        );
        Ok(())
    }

    /// The request is forwarded or answered: whatever it held is released.
    pub(super) fn finish(&self, request_id: u64) {
        lock(&self.running).remove(&request_id);
    }

    /// The token rules and the locks, applied to a request about to be forwarded.
    pub(super) async fn screen(
        &self,
        upstream: &Upstream,
        turn: &Turn<'_>,
        request: &HeldRequest,
    ) -> Result<Screen, ProxyError> {
        let transaction = request.operation == "TransactWriteItems";
        let token = token_of(request).filter(|_| transaction && self.enabled());
        if let Some(token) = token {
            if token.is_empty() || token.chars().count() > TOKEN_CHARS_MAX {
                return Ok(Screen::Answer(error(
                    400,
                    "ValidationException",
                    &format!(
                        "1 validation error detected: Value at 'clientRequestToken' failed to satisfy constraint: Member must have length between 1 and {TOKEN_CHARS_MAX}"
                    ),
                )));
            }
            let print = fingerprint(&request.body);
            let running_same = lock(&self.running)
                .iter()
                .filter(|(id, _)| **id != request.id)
                .find(|(_, running)| running.token.as_deref() == Some(token))
                .map(|(_, running)| running.fingerprint == print);
            match running_same {
                Some(true) => return Ok(Screen::Answer(in_progress())),
                Some(false) => return Ok(Screen::Answer(mismatch())),
                None => {}
            }
        }
        // The token decides before the items' locks: a replay, a mismatch or a damaged record is
        // answered from the token record without executing anything, so another transaction
        // holding the items is no concern of it; only a request that executes meets the locks.
        let screened = match token {
            None => Screen::Forward,
            Some(token) => self.decide(upstream, turn, request, token).await?,
        };
        if let Screen::Answer(_) = screened {
            return Ok(screened);
        }
        if let Some(answer) = self.conflict(upstream, turn, request).await? {
            return Ok(Screen::Answer(answer));
        }
        Ok(screened)
    }

    /// TransactionConflict for a write touching an item of another running transaction.
    async fn conflict(
        &self,
        upstream: &Upstream,
        turn: &Turn<'_>,
        request: &HeldRequest,
    ) -> Result<Option<Answer>, ProxyError> {
        let locked: BTreeSet<LockKey> = lock(&self.running)
            .iter()
            .filter(|(id, _)| **id != request.id)
            .flat_map(|(_, running)| running.keys.iter().cloned())
            .collect();
        if locked.is_empty() {
            return Ok(None);
        }
        match request.operation.as_str() {
            "TransactWriteItems" => {
                let items = transact_keys(request)?;
                let mut reasons = Vec::with_capacity(items.len());
                let mut any = false;
                for (table, key) in items {
                    let key = match key {
                        Some(key) => key,
                        None => {
                            self.put_key(upstream, turn, &table, request, reasons.len())
                                .await?
                        }
                    };
                    let held = locked.contains(&(table, key));
                    any |= held;
                    reasons.push(if held {
                        json!({ "Code": "TransactionConflict", "Message": "Transaction is ongoing for the item" })
                    } else {
                        json!({ "Code": "None" })
                    });
                }
                Ok(any.then(|| Answer {
                    status: 400,
                    body: json!({
                        "__type": format!("{ERROR_NAMESPACE}TransactionCanceledException"),
                        "message": "Transaction cancelled, please refer cancellation reasons for specific reasons",
                        "CancellationReasons": reasons,
                    }),
                    headers: Vec::new(),
                }))
            }
            "PutItem" | "UpdateItem" | "DeleteItem" => {
                let keys = self.touched(upstream, turn, request).await?;
                Ok(keys
                    .iter()
                    .any(|key| locked.contains(key))
                    .then(Answer::conflict))
            }
            _ => Ok(None),
        }
    }

    /// The token record decides: replay, mismatch, fail closed, or a new execution.
    async fn decide(
        &self,
        upstream: &Upstream,
        turn: &Turn<'_>,
        request: &HeldRequest,
        token: &str,
    ) -> Result<Screen, ProxyError> {
        self.ensure_table(upstream, turn).await?;
        let record_key = format!("{}#{token}", self.instance);
        let read = upstream
            .own_request(
                turn,
                "GetItem",
                &json!({
                    "TableName": self.table,
                    "Key": { ATTRIBUTE_KEY: { "S": record_key } },
                    "ConsistentRead": true,
                }),
            )
            .await?;
        if !read.is_success() {
            return Err(ProxyError::Upstream(format!(
                "reading token record {token}: HTTP {} {}",
                read.status, read.body
            )));
        }
        let print = fingerprint(&request.body);
        let now = self.now_millis.load(Ordering::SeqCst);
        let condition = match read.body.get("Item") {
            None => json!({ "ConditionExpression": "attribute_not_exists(#k)",
                            "ExpressionAttributeNames": { "#k": ATTRIBUTE_KEY } }),
            Some(record) => {
                let created = record
                    .get(ATTRIBUTE_CREATED)
                    .and_then(|value| value.get("N"))
                    .and_then(Value::as_str)
                    .and_then(|text| text.parse::<u64>().ok());
                let Some(created) = created else {
                    //= specs/tokened-writes.md#T5
                    //# A request whose token is over 36 characters, or whose token record has no valid timestamp, is refused and applies nothing.
                    return Ok(Screen::Answer(error(
                        500,
                        "InternalServerError",
                        &format!("the record of token {token} has no valid creation time"),
                    )));
                };
                let stored = record
                    .get(ATTRIBUTE_FINGERPRINT)
                    .and_then(|value| value.get("S"))
                    .and_then(Value::as_str);
                if now < created.saturating_add(TOKEN_WINDOW_MILLIS) {
                    //= specs/tokened-writes.md#T2
                    //# A live token with other parameters is rejected and applies nothing.
                    if stored != Some(print.as_str()) {
                        return Ok(Screen::Answer(mismatch()));
                    }
                    //= specs/tokened-writes.md#T1
                    //# The identical tokened request, retried within the window, applies its effects once.
                    return Ok(Screen::Answer(Answer {
                        status: 200,
                        body: json!({}),
                        headers: Vec::new(),
                    }));
                }
                // Expired: the token is new; the record is replaced only if still the one read.
                json!({ "ConditionExpression": "#c = :c",
                        "ExpressionAttributeNames": { "#c": ATTRIBUTE_CREATED },
                        "ExpressionAttributeValues": { ":c": { "N": created.to_string() } } })
            }
        };
        let mut body = request.body.clone();
        let items = body
            .get_mut("TransactItems")
            .and_then(Value::as_array_mut)
            .ok_or_else(|| {
                ProxyError::Malformed("TransactWriteItems without TransactItems".into())
            })?;
        let client_items = items.len();
        if client_items >= TRANSACT_ITEMS_MAX {
            return Err(ProxyError::Unsupported(format!(
                "a tokened transaction of {client_items} items leaves no room for the token record (at most {TRANSACT_ITEMS_MAX} items)"
            )));
        }
        let mut put = Map::new();
        put.insert("TableName".into(), json!(self.table));
        put.insert(
            "Item".into(),
            json!({
                ATTRIBUTE_KEY: { "S": record_key },
                ATTRIBUTE_FINGERPRINT: { "S": print },
                ATTRIBUTE_CREATED: { "N": now.to_string() },
            }),
        );
        if let Value::Object(condition) = condition {
            put.extend(condition);
        }
        items.push(json!({ "Put": put }));
        Ok(Screen::Record { body, client_items })
    }

    /// Replaces the creation time of `token`'s record by a value that is no time.
    pub(super) async fn damage(
        &self,
        upstream: &Upstream,
        turn: &Turn<'_>,
        token: &str,
    ) -> Result<(), ProxyError> {
        self.ensure_table(upstream, turn).await?;
        let answer = upstream
            .own_request(
                turn,
                "UpdateItem",
                &json!({
                    "TableName": self.table,
                    "Key": { ATTRIBUTE_KEY: { "S": format!("{}#{token}", self.instance) } },
                    "UpdateExpression": "SET #c = :damaged",
                    "ConditionExpression": "attribute_exists(#c)",
                    "ExpressionAttributeNames": { "#c": ATTRIBUTE_CREATED },
                    "ExpressionAttributeValues": { ":damaged": { "S": "damaged" } },
                }),
            )
            .await?;
        if answer.is_success() {
            Ok(())
        } else {
            Err(ProxyError::Upstream(format!(
                "damaging the record of token {token}: HTTP {} {}",
                answer.status, answer.body
            )))
        }
    }

    /// The upstream's answer to a forwarded [`Screen::Record`], as the client must see it.
    pub(super) fn settle(&self, mut answer: Answer, client_items: usize) -> Answer {
        let Some(reasons) = answer
            .body
            .get_mut("CancellationReasons")
            .and_then(Value::as_array_mut)
        else {
            return answer;
        };
        let record_failed = reasons
            .get(client_items)
            .and_then(|reason| reason.get("Code"))
            .and_then(Value::as_str)
            .is_some_and(|code| code != "None");
        reasons.truncate(client_items);
        if record_failed {
            // Only another writer of this proxy's own records could have changed the record
            // between the read and the commit, inside one upstream turn: nothing was applied,
            // and the client cannot tell why, so it is an unknown-outcome answer it may resend.
            return error(
                500,
                "InternalServerError",
                "the token record changed while the transaction was decided",
            );
        }
        answer
    }

    /// Creates the side table once (on the upstream), and waits until it is active.
    async fn ensure_table(&self, upstream: &Upstream, turn: &Turn<'_>) -> Result<(), ProxyError> {
        let mut ready = self.table_ready.lock().await;
        if *ready {
            return Ok(());
        }
        let describe = json!({ "TableName": self.table });
        let described = upstream
            .own_request(turn, "DescribeTable", &describe)
            .await?;
        if !described.is_success() {
            let created = upstream
                .own_request(
                    turn,
                    "CreateTable",
                    &json!({
                        "TableName": self.table,
                        "BillingMode": "PAY_PER_REQUEST",
                        "AttributeDefinitions": [{ "AttributeName": ATTRIBUTE_KEY, "AttributeType": "S" }],
                        "KeySchema": [{ "AttributeName": ATTRIBUTE_KEY, "KeyType": "HASH" }],
                    }),
                )
                .await?;
            // Another proxy on the same upstream may have created it first.
            if !created.is_success()
                && created.error_type().as_deref() != Some("ResourceInUseException")
            {
                return Err(ProxyError::Upstream(format!(
                    "creating {}: HTTP {} {}",
                    self.table, created.status, created.body
                )));
            }
        }
        for _poll in 0..TABLE_ACTIVE_POLLS_MAX {
            let described = upstream
                .own_request(turn, "DescribeTable", &describe)
                .await?;
            let status = described
                .body
                .pointer("/Table/TableStatus")
                .and_then(Value::as_str);
            if status == Some("ACTIVE") {
                *ready = true;
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        Err(ProxyError::Upstream(format!(
            "{} did not become active",
            self.table
        )))
    }

    /// Deletes the side table if this proxy created it.
    pub(super) async fn delete_table(
        &self,
        upstream: &Upstream,
        turn: &Turn<'_>,
    ) -> Result<(), ProxyError> {
        let mut ready = self.table_ready.lock().await;
        if !*ready {
            return Ok(());
        }
        let answer = upstream
            .own_request(turn, "DeleteTable", &json!({ "TableName": self.table }))
            .await?;
        *ready = false;
        if answer.is_success() {
            Ok(())
        } else {
            Err(ProxyError::Upstream(format!(
                "deleting {}: HTTP {} {}",
                self.table, answer.status, answer.body
            )))
        }
    }

    /// The items a write touches, schema-free.
    async fn touched(
        &self,
        upstream: &Upstream,
        turn: &Turn<'_>,
        request: &HeldRequest,
    ) -> Result<BTreeSet<LockKey>, ProxyError> {
        let mut keys = BTreeSet::new();
        match request.operation.as_str() {
            "TransactWriteItems" => {
                for (index, (table, key)) in transact_keys(request)?.into_iter().enumerate() {
                    let key = match key {
                        Some(key) => key,
                        None => self.put_key(upstream, turn, &table, request, index).await?,
                    };
                    keys.insert((table, key));
                }
            }
            "UpdateItem" | "DeleteItem" | "PutItem" => {
                let table = request
                    .body
                    .get("TableName")
                    .and_then(Value::as_str)
                    .ok_or_else(|| {
                        ProxyError::Malformed(format!("{} without TableName", request.operation))
                    })?
                    .to_owned();
                let key = match request.body.get("Key") {
                    Some(key) => key.to_string(),
                    None => {
                        let item = request
                            .body
                            .get("Item")
                            .ok_or_else(|| ProxyError::Malformed("PutItem without Item".into()))?;
                        self.key_of(upstream, turn, &table, item).await?
                    }
                };
                keys.insert((table, key));
            }
            _ => {}
        }
        Ok(keys)
    }

    /// The key of TransactItems[index]'s Put (its item's key attributes).
    async fn put_key(
        &self,
        upstream: &Upstream,
        turn: &Turn<'_>,
        table: &str,
        request: &HeldRequest,
        index: usize,
    ) -> Result<String, ProxyError> {
        let item = request
            .body
            .pointer(&format!("/TransactItems/{index}/Put/Item"))
            .ok_or_else(|| {
                ProxyError::Malformed(format!("TransactItems[{index}]: a Put without its Item"))
            })?;
        self.key_of(upstream, turn, table, item).await
    }

    /// An item's key attributes as canonical JSON, from the table's key schema.
    async fn key_of(
        &self,
        upstream: &Upstream,
        turn: &Turn<'_>,
        table: &str,
        item: &Value,
    ) -> Result<String, ProxyError> {
        let known = lock(&self.key_names).get(table).cloned();
        let names = match known {
            Some(names) => names,
            None => {
                let described = upstream
                    .own_request(turn, "DescribeTable", &json!({ "TableName": table }))
                    .await?;
                let names: Vec<String> = described
                    .body
                    .pointer("/Table/KeySchema")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(|element| element.get("AttributeName")?.as_str())
                    .map(str::to_owned)
                    .collect();
                if names.is_empty() {
                    return Err(ProxyError::Upstream(format!(
                        "DescribeTable {table}: no key schema (HTTP {})",
                        described.status
                    )));
                }
                lock(&self.key_names).insert(table.to_owned(), names.clone());
                names
            }
        };
        let mut key = Map::new();
        for name in names {
            let value = item.get(&name).ok_or_else(|| {
                ProxyError::Malformed(format!("an item of {table} without {name}"))
            })?;
            key.insert(name, value.clone());
        }
        Ok(Value::Object(key).to_string())
    }
}

/// Every TransactItem's table and key (canonical JSON), `None` for a Put (its key needs the
/// schema).
fn transact_keys(request: &HeldRequest) -> Result<Vec<(String, Option<String>)>, ProxyError> {
    let items = request
        .body
        .get("TransactItems")
        .and_then(Value::as_array)
        .ok_or_else(|| ProxyError::Malformed("TransactWriteItems without TransactItems".into()))?;
    items
        .iter()
        .enumerate()
        .map(|(index, item)| {
            let malformed =
                |what: &str| ProxyError::Malformed(format!("TransactItems[{index}]: {what}"));
            let (kind, inner) = item
                .as_object()
                .and_then(|object| object.iter().next())
                .ok_or_else(|| malformed("empty"))?;
            let table = inner
                .get("TableName")
                .and_then(Value::as_str)
                .ok_or_else(|| malformed("no TableName"))?
                .to_owned();
            let key = match kind.as_str() {
                "Put" => None,
                _ => Some(
                    inner
                        .get("Key")
                        .ok_or_else(|| malformed("no Key"))?
                        .to_string(),
                ),
            };
            Ok((table, key))
        })
        .collect()
}

fn in_progress() -> Answer {
    error(
        400,
        "TransactionInProgressException",
        "The transaction with the given request token is already in progress.",
    )
}

fn mismatch() -> Answer {
    error(
        400,
        "IdempotentParameterMismatchException",
        "The request uses the same client token as a previous, but non-identical request.",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fingerprint_ignores_the_token_and_key_order_but_not_parameters() {
        let first = json!({ "ClientRequestToken": "a", "TransactItems": [{ "Update": { "TableName": "t", "Key": { "k": { "S": "x" } } } }] });
        let reordered = serde_json::from_str::<Value>(
            r#"{ "TransactItems": [{ "Update": { "Key": { "k": { "S": "x" } }, "TableName": "t" } }], "ClientRequestToken": "b" }"#,
        )
        .unwrap();
        let other = json!({ "ClientRequestToken": "a", "TransactItems": [{ "Update": { "TableName": "t", "Key": { "k": { "S": "y" } } } }] });
        assert_eq!(fingerprint(&first), fingerprint(&reordered));
        assert_ne!(fingerprint(&first), fingerprint(&other));
        assert_eq!(fingerprint(&first).len(), 64);
    }

    #[test]
    fn a_failed_record_put_is_not_shown_as_the_clients_reason() {
        let tokens = Tokens::new();
        let cancelled = Answer {
            status: 400,
            body: json!({ "__type": "x#TransactionCanceledException",
                          "CancellationReasons": [{ "Code": "ConditionalCheckFailed" }, { "Code": "None" }] }),
            headers: Vec::new(),
        };
        let settled = tokens.settle(cancelled, 1);
        assert_eq!(
            settled.cancellation_codes().unwrap(),
            vec!["ConditionalCheckFailed".to_owned()]
        );
        let record_lost = Answer {
            status: 400,
            body: json!({ "__type": "x#TransactionCanceledException",
                          "CancellationReasons": [{ "Code": "None" }, { "Code": "ConditionalCheckFailed" }] }),
            headers: Vec::new(),
        };
        assert_eq!(
            tokens.settle(record_lost, 1).error_type().as_deref(),
            Some("InternalServerError")
        );
    }
}
