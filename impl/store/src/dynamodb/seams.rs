//! Test seams of the DynamoDB store, compiled only with the `test-seams` feature (the relay
//! binary never enables it).
//!
//! - [`DynamoDbStore::with_before_write`]: an async hook called after a round has chosen its seq
//!   and before it sends, so a test can hold a writer at that point (on a channel or barrier).
//! - [`AddEraWriter`]: the legacy allocation (UpdateItem ADD, then a transaction of claim put and
//!   op put), to run beside writers of this build as a mixed fleet.
//! - [`Mutation`]s: deliberate defects, switched on per store, for mutation checks and replays.
//! - [`RequestCounter`]: an SDK interceptor counting requests per DynamoDB operation, as sent.
//!
//! Invariant: nothing here changes the behaviour of a store whose hook is unset and whose
//! mutation set is empty.

use std::collections::{BTreeMap, HashMap};

use aws_sdk_dynamodb::config::interceptors::BeforeTransmitInterceptorContextRef;
use aws_sdk_dynamodb::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_sdk_dynamodb::error::{BoxError, SdkError};
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue, TransactWriteItem};
use tokio::time::Instant;

use super::{
    key, number, sdk_error, Claimant, CounterSource, DynamoDbStore, Mutation, PredecessorCheck,
    ATTRIBUTE_NEXT_SEQ, COUNTER_SEQ,
};
use crate::sync::{lock, Arc, Mutex};
use crate::{
    validate_append, validate_pull, Appended, NewOp, OpStore, PushContext, Seq, StoreError,
    StoreFuture, StoredOp,
};

/// What a round is about to send, as the hook sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteAttempt {
    pub op_id: String,
    /// 1 for the op's first round, counting every round of this op.
    pub round: u32,
    /// The seq the round will try.
    pub seq: Seq,
    /// The counter value the round's condition expects (seq - 1, or lower after a floor step).
    pub expected: Seq,
    /// The predecessor condition on op seq - 1, if the round carries one.
    pub predecessor: Option<PredecessorCheck>,
    /// Where `expected` came from.
    pub counter_from: CounterSource,
}

/// The before-write hook: awaited by the round before it sends.
pub type BeforeWriteHook = Arc<dyn Fn(WriteAttempt) -> StoreFuture<'static, ()> + Send + Sync>;

#[derive(Clone, Default)]
pub(super) struct Seams {
    pub(super) hook: Option<BeforeWriteHook>,
    pub(super) mutations: Vec<Mutation>,
    pub(super) requests: RequestCounter,
}

impl Seams {
    pub(super) async fn before_write(&self, attempt: WriteAttempt) {
        if let Some(hook) = &self.hook {
            hook(attempt).await;
        }
    }
}

/// Counts the requests a client sends, per DynamoDB operation (the `X-Amz-Target` suffix:
/// `Query`, `TransactWriteItems`, ...). Counted before transmission, so a request the network
/// loses is still counted. Clones share the counts.
#[derive(Debug, Clone, Default)]
pub struct RequestCounter {
    counts: Arc<Mutex<BTreeMap<String, u64>>>,
}

impl RequestCounter {
    /// The counts so far, per operation.
    pub fn snapshot(&self) -> BTreeMap<String, u64> {
        lock(&self.counts).clone()
    }

    /// The count of one operation so far.
    pub fn count(&self, operation: &str) -> u64 {
        lock(&self.counts).get(operation).copied().unwrap_or(0)
    }

    /// All requests so far.
    pub fn total(&self) -> u64 {
        lock(&self.counts).values().sum()
    }

    pub fn reset(&self) {
        lock(&self.counts).clear();
    }
}

impl Intercept for RequestCounter {
    fn name(&self) -> &'static str {
        "oncecheck-request-counter"
    }

    fn read_before_transmit(
        &self,
        context: &BeforeTransmitInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let target = context
            .request()
            .headers()
            .get("x-amz-target")
            .unwrap_or("unknown");
        let operation = target.rsplit('.').next().unwrap_or(target).to_owned();
        *lock(&self.counts).entry(operation).or_insert(0) += 1;
        Ok(())
    }
}

impl DynamoDbStore {
    /// Installs the before-write hook (replacing any earlier one). Clones made afterwards share it.
    pub fn with_before_write<F>(mut self, hook: F) -> DynamoDbStore
    where
        F: Fn(WriteAttempt) -> StoreFuture<'static, ()> + Send + Sync + 'static,
    {
        self.seams.hook = Some(Arc::new(hook));
        self
    }

    /// Switches a deliberate defect on.
    pub fn with_mutation(mut self, mutation: Mutation) -> DynamoDbStore {
        if !self.seams.mutations.contains(&mutation) {
            self.seams.mutations.push(mutation);
        }
        self
    }

    /// The request counter of this store's client (shared by its clones; empty for a client
    /// passed to [`DynamoDbStore::from_client`]).
    pub fn requests(&self) -> RequestCounter {
        self.seams.requests.clone()
    }

    /// Sets the stream's counter unconditionally (test set-up: a counter left by older writers).
    pub async fn set_counter(&self, stream: &str, value: Seq) -> Result<(), StoreError> {
        self.client
            .update_item()
            .table_name(&*self.table)
            .set_key(Some(key(stream, COUNTER_SEQ)))
            .update_expression("SET #next = :value")
            .expression_attribute_names("#next", ATTRIBUTE_NEXT_SEQ)
            .expression_attribute_values(":value", AttributeValue::N(value.to_string()))
            .send()
            .await
            .map_err(|error| sdk_error("UpdateItem (set counter)", error))?;
        Ok(())
    }

    /// An ADD-era writer on the same client and table (no hook, no mutations of its own).
    pub fn add_era_writer(&self) -> AddEraWriter {
        AddEraWriter {
            store: DynamoDbStore {
                seams: Seams {
                    hook: None,
                    mutations: Vec::new(),
                    requests: self.seams.requests.clone(),
                },
                ..self.clone()
            },
        }
    }
}

/// How an ADD-era write of one op at an allocated seq ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddEraWrite {
    Stored,
    /// The op_id's claim exists: nothing written (the allocated seq is burned).
    ClaimExists,
    /// The seq is occupied: nothing written (the old build failed the push here).
    SeqTaken,
    /// Another transaction held an item.
    Conflict,
}

/// The writer of the build before this design: allocate with UpdateItem ADD, then write claim
/// and op in one transaction, both conditional on absence. It never checks a predecessor, so a
/// reader can be handed a seq above an op it still writes (the bug this design fixes).
#[derive(Clone, Debug)]
pub struct AddEraWriter {
    store: DynamoDbStore,
}

impl AddEraWriter {
    /// Installs a hook called after the ADD allocated a seq and before the write is sent.
    pub fn with_before_write<F>(mut self, hook: F) -> AddEraWriter
    where
        F: Fn(WriteAttempt) -> StoreFuture<'static, ()> + Send + Sync + 'static,
    {
        self.store.seams.hook = Some(Arc::new(hook));
        self
    }

    /// UpdateItem ADD next_seq 1: a single-item write answering the new counter value.
    pub async fn allocate(&self, stream: &str) -> Result<Seq, StoreError> {
        let answer = self
            .store
            .client
            .update_item()
            .table_name(&*self.store.table)
            .set_key(Some(key(stream, COUNTER_SEQ)))
            .update_expression("ADD #next :one")
            .expression_attribute_names("#next", ATTRIBUTE_NEXT_SEQ)
            .expression_attribute_values(":one", AttributeValue::N("1".to_owned()))
            .return_values(ReturnValue::UpdatedNew)
            .send()
            .await
            .map_err(|error| sdk_error("UpdateItem ADD", error))?;
        answer
            .attributes()
            .and_then(|attributes| number(attributes, ATTRIBUTE_NEXT_SEQ))
            .ok_or_else(|| StoreError::backend("ADD answered no next_seq"))
    }

    /// Writes claim and op at `seq` in one transaction, both conditional on absence.
    pub async fn write(
        &self,
        stream: &str,
        seq: Seq,
        op: &NewOp,
    ) -> Result<AddEraWrite, StoreError> {
        let items: Vec<TransactWriteItem> = vec![
            self.store.claim_put(stream, &Claimant::of(op), seq)?,
            self.store.op_put(stream, op, seq)?,
        ];
        let answer = self
            .store
            .client
            .transact_write_items()
            .set_transact_items(Some(items))
            .send()
            .await;
        match answer {
            Ok(_) => Ok(AddEraWrite::Stored),
            Err(SdkError::ServiceError(service)) => {
                use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
                if let TransactWriteItemsError::TransactionCanceledException(cancelled) =
                    service.err()
                {
                    let codes: Vec<&str> = cancelled
                        .cancellation_reasons()
                        .iter()
                        .map(|reason| reason.code().unwrap_or("None"))
                        .collect();
                    if codes.first() == Some(&"ConditionalCheckFailed") {
                        return Ok(AddEraWrite::ClaimExists);
                    }
                    if codes.get(1) == Some(&"ConditionalCheckFailed") {
                        return Ok(AddEraWrite::SeqTaken);
                    }
                    if codes.contains(&"TransactionConflict") {
                        return Ok(AddEraWrite::Conflict);
                    }
                }
                Err(sdk_error(
                    "TransactWriteItems (ADD era)",
                    SdkError::ServiceError(service),
                ))
            }
            Err(other) => Err(sdk_error("TransactWriteItems (ADD era)", other)),
        }
    }

    /// Allocates with ADD, calls the hook, writes. Answers the seq the op was written at.
    pub async fn append(&self, stream: &str, op: &NewOp) -> Result<(Seq, AddEraWrite), StoreError> {
        validate_append(stream, op)?;
        let seq = self.allocate(stream).await?;
        self.store
            .seams
            .before_write(WriteAttempt {
                op_id: op.op_id.clone(),
                round: 1,
                seq,
                expected: seq - 1,
                predecessor: None,
                counter_from: CounterSource::Add,
            })
            .await;
        let written = self.write(stream, seq, op).await?;
        Ok((seq, written))
    }
}

impl OpStore for AddEraWriter {
    fn append_op<'a>(
        &'a self,
        stream: &'a str,
        op: &'a NewOp,
        deadline: Instant,
        _push: &'a mut PushContext,
    ) -> StoreFuture<'a, Result<Appended, StoreError>> {
        Box::pin(async move {
            let appended = super::within(deadline, self.append(stream, op)).await?;
            match appended {
                (seq, AddEraWrite::Stored) => Ok(Appended {
                    seq,
                    existing: false,
                }),
                (_, AddEraWrite::ClaimExists) => {
                    let claim: Option<HashMap<String, AttributeValue>> =
                        self.store.read_claim(stream, &op.op_id, deadline).await?;
                    let item = claim.ok_or_else(|| StoreError::ClaimVanished {
                        op_id: op.op_id.clone(),
                    })?;
                    super::claim_answer(&item, &Claimant::of(op))
                }
                (seq, other) => Err(StoreError::backend(format!(
                    "the ADD-era write at {seq} ended {other:?}"
                ))),
            }
        })
    }

    /// The legacy build read no claims before its writes.
    fn check_claims<'a>(
        &'a self,
        _stream: &'a str,
        _ops: &'a [NewOp],
        _deadline: Instant,
    ) -> StoreFuture<'a, Result<(), StoreError>> {
        Box::pin(async { Ok(()) })
    }

    fn pull_within<'a>(
        &'a self,
        stream: &'a str,
        after: Seq,
        limit: usize,
        deadline: Instant,
    ) -> StoreFuture<'a, Result<Vec<StoredOp>, StoreError>> {
        Box::pin(async move {
            validate_pull(stream, after)?;
            self.store.pull_pages(stream, after, limit, deadline).await
        })
    }

    fn put_legacy_op<'a>(
        &'a self,
        stream: &'a str,
        seq: Seq,
        op: &'a NewOp,
    ) -> StoreFuture<'a, Result<(), StoreError>> {
        self.store.put_legacy_op(stream, seq, op)
    }
}
