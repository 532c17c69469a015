//! Refused input at the end of every relay replay: pushes the store must refuse whole, each a
//! stuttering step of the model.
//!
//! The model's writers push only ops the store accepts (well-formed, within the limits, each
//! op id once per push, one payload per op id); the model has no step for any other push,
//! because the spec gives it none: input the store refuses changes nothing
//! (`specs/relay-append.md`, "Checked before the first write"). A refusal is therefore the
//! model's stutter, and a replay may take one wherever it likes without leaving the model's
//! path. Each relay target takes these at the end of the trace, when the trace has stored what
//! it stores, and the state after them must still be the trace's last: a store that accepts
//! more than it should (an op one byte over the item limit, a stream id one byte too long, an
//! op id twice in a push, an op id stored with another payload) parts from the model there.
//!
//! Invariants: every push here is refused before its first write, so it sends no round and
//! meets no counter (it cannot race the trace's own writers, held or done); the limits are
//! counted by the replays' own figures ([`crate::replay::driver`]), never the store's; the
//! refused ops' labels are none of the model's, so a refused op stored shows in the view.

use crate::replay::driver::{
    largest_payload_bytes, payload_of, real_op_id, Fault, OpSizes, DYNAMODB_PARTITION_KEY_BYTES_MAX,
};
use oncecheck_model::ddb::{Key, Value};
use oncecheck_model::relay::RelayState;
use oncecheck_store::{NewOp, OpStore, StoreError};
use std::time::Duration;

/// The deadline of one refused push: refused before its first write, it never waits for one.
const REFUSED_PUSH_DEADLINE_SECS: u64 = 30;

/// A push the store must refuse whole, and the refusal it must give.
struct RefusedPush {
    /// What the push is, in the words a divergence prints.
    what: String,
    stream: String,
    ops: Vec<NewOp>,
    refusal: Refusal,
}

/// The typed error that refuses a push, the op's place in it included.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Refusal {
    TooLarge { index: usize },
    InvalidStream,
    DuplicateOpId { first: usize, second: usize },
    PayloadConflict { op_id: String, seq: i64 },
}

impl Refusal {
    fn is_reported_by(&self, error: &StoreError) -> bool {
        match (self, error) {
            (Refusal::TooLarge { index }, StoreError::TooLarge { index: actual, .. }) => {
                index == actual
            }
            (Refusal::InvalidStream, StoreError::InvalidInput { reason }) => {
                reason.contains("stream id")
            }
            (
                Refusal::DuplicateOpId { first, second },
                StoreError::DuplicateOpId {
                    first: actual_first,
                    second: actual_second,
                    ..
                },
            ) => first == actual_first && second == actual_second,
            (
                Refusal::PayloadConflict { op_id, seq },
                StoreError::PayloadConflict {
                    op_id: actual_op_id,
                    seq: actual_seq,
                },
            ) => op_id == actual_op_id && seq == actual_seq,
            _ => false,
        }
    }
}

/// A fresh op: a label no model op has, a payload well within the limits.
fn fresh_op(label: &str) -> NewOp {
    NewOp::new(label, format!("payload of {label}").into_bytes())
}

/// `stream` padded to one byte more than DynamoDB's partition key takes (a replay's own streams
/// are at the limit already, a test's may be shorter).
fn one_byte_too_long(stream: &str) -> String {
    let mut long = stream.to_string();
    let padding = (DYNAMODB_PARTITION_KEY_BYTES_MAX + 1).saturating_sub(long.len());
    long.extend(std::iter::repeat_n('.', padding));
    long
}

/// The op a trace's last state has claimed with the smallest op id, and the seq its claim
/// holds: the op a conflicting payload is pushed for. `None` when the trace stored nothing.
fn claimed_op(last: &RelayState) -> Option<(String, i64)> {
    last.table
        .applied
        .iter()
        .chain(last.table.pending.iter())
        .filter_map(|(key, value)| match (key, value) {
            (Key::Claim(op), Value::Claim { seq }) => Some((*op, i64::from(*seq))),
            _ => None,
        })
        .min()
        .map(|(op, seq)| (real_op_id(op), seq))
}

/// The pushes a store must refuse on `stream` once a trace ended in `last`.
fn refused_pushes(stream: &str, last: &RelayState) -> Vec<RefusedPush> {
    let over_label = "refused-over-limit";
    let mut over_payload = payload_of(stream, over_label, OpSizes::Small);
    over_payload.resize(largest_payload_bytes(stream, over_label) + 1, b'.');
    let mut pushes = vec![
        RefusedPush {
            what: "a fresh op, then an op one byte over DynamoDB's item size limit".to_string(),
            stream: stream.to_string(),
            ops: vec![
                fresh_op("refused-before-over-limit"),
                NewOp::new(over_label, over_payload),
            ],
            refusal: Refusal::TooLarge { index: 1 },
        },
        RefusedPush {
            what: "a fresh op on a stream id one byte longer than DynamoDB's partition key"
                .to_string(),
            stream: one_byte_too_long(stream),
            ops: vec![fresh_op("refused-on-a-long-stream")],
            refusal: Refusal::InvalidStream,
        },
        RefusedPush {
            what: "one fresh op id twice".to_string(),
            stream: stream.to_string(),
            ops: vec![fresh_op("refused-twice"), fresh_op("refused-twice")],
            refusal: Refusal::DuplicateOpId {
                first: 0,
                second: 1,
            },
        },
    ];
    //= specs/relay-append.md#R3
    //# A push of two ops or more reads the claims of all its ops before its first write; an op_id
    //# stored with another payload refuses the whole push, and nothing is written.
    if let Some((op_id, seq)) = claimed_op(last) {
        pushes.push(RefusedPush {
            what: format!("a fresh op, then {op_id} with another payload than it is stored with"),
            stream: stream.to_string(),
            ops: vec![
                fresh_op("refused-before-conflict"),
                NewOp::new(
                    op_id.clone(),
                    format!("another payload of {op_id}").into_bytes(),
                ),
            ],
            refusal: Refusal::PayloadConflict { op_id, seq },
        });
    }
    pushes
}

/// Pushes every refused push of a trace that ended in `last` to `store` on `stream`, and asks
/// the store's own check (`check_op`) about each op refused for its size: each must be refused
/// with its typed error, and nothing answered. The caller then compares its view with the
/// trace's last state, which a refused push must leave as it was.
pub async fn push_refused_input<S: OpStore + ?Sized>(
    store: &S,
    stream: &str,
    last: &RelayState,
) -> Result<(), Fault> {
    for push in refused_pushes(stream, last) {
        let action = Some(format!("the store refuses {}", push.what));
        if let Refusal::TooLarge { index } = push.refusal {
            let checked = store.check_op(&push.stream, &push.ops[index]);
            if !matches!(checked, Err(StoreError::TooLarge { .. })) {
                return Err(Fault::Diverged {
                    action,
                    expected: "check_op refuses the op as too large".to_string(),
                    actual: format!("check_op answered {checked:?}"),
                });
            }
        }
        let deadline =
            tokio::time::Instant::now() + Duration::from_secs(REFUSED_PUSH_DEADLINE_SECS);
        let outcome = store.append_batch(&push.stream, &push.ops, deadline).await;
        let refused = outcome.appended.is_empty()
            && outcome
                .error
                .as_ref()
                .is_some_and(|error| push.refusal.is_reported_by(error));
        if !refused {
            let answered: Vec<i64> = outcome.appended.iter().map(|one| one.seq).collect();
            return Err(Fault::Diverged {
                action,
                expected: format!("nothing answered, then {:?}", push.refusal),
                actual: format!("seqs {answered:?}, error {:?}", outcome.error),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replay::driver::fresh_stream;
    use oncecheck_store::memory::MemoryStore;
    use oncecheck_store::{Appended, PushContext, Seq, StoreFuture, StoredOp};
    use std::path::Path;
    use tokio::time::Instant;

    /// A trace's last state with op 0 claimed at seq 1 (the relay model's initial state with
    /// the claim added, as a committed round leaves it).
    fn last_with_one_claim() -> RelayState {
        use oncecheck_model::check::ModelSpec;
        use oncecheck_model::relay::RelayModel;
        let bounds = RelayModel::resolve_bounds("fixed", &[]).unwrap();
        let model = RelayModel::build("fixed", &bounds).unwrap();
        let mut state = stateright::Model::init_states(&model).remove(0);
        state
            .table
            .applied
            .insert(Key::Claim(0), Value::Claim { seq: 1 });
        state
            .table
            .applied
            .insert(Key::Op(1), Value::Op { op_id: 0 });
        state
    }

    async fn store_with_op_0(stream: &str) -> MemoryStore {
        let store = MemoryStore::new();
        let op = crate::replay::driver::new_op(stream, 0, OpSizes::Small);
        let outcome = store
            .append_batch(stream, &[op], Instant::now() + Duration::from_secs(5))
            .await;
        assert_eq!(outcome.appended.len(), 1, "{outcome:?}");
        assert_eq!(outcome.appended[0].seq, 1);
        store
    }

    #[tokio::test]
    async fn the_store_refuses_every_refused_push_and_stores_nothing() {
        let stream = fresh_stream(Path::new("refused.itf.json"));
        let store = store_with_op_0(&stream).await;
        let last = last_with_one_claim();
        assert_eq!(refused_pushes(&stream, &last).len(), 4);
        push_refused_input(&store, &stream, &last).await.unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        let log = store.pull_within(&stream, 0, 100, deadline).await.unwrap();
        assert_eq!(log.len(), 1, "{log:?}");
    }

    /// A store that answers every op as its own check accepted it (the store's check skipped):
    /// the refused pushes part from the model at the first, the op over the limit.
    struct UncheckedStore(MemoryStore);

    impl OpStore for UncheckedStore {
        fn append_op<'a>(
            &'a self,
            stream: &'a str,
            op: &'a NewOp,
            deadline: Instant,
            push: &'a mut PushContext,
        ) -> StoreFuture<'a, Result<Appended, StoreError>> {
            self.0.append_op(stream, op, deadline, push)
        }

        fn pull_within<'a>(
            &'a self,
            stream: &'a str,
            after: Seq,
            limit: usize,
            deadline: Instant,
        ) -> StoreFuture<'a, Result<Vec<StoredOp>, StoreError>> {
            self.0.pull_within(stream, after, limit, deadline)
        }

        fn check_op(&self, _stream: &str, _op: &NewOp) -> Result<(), StoreError> {
            Ok(())
        }

        fn check_claims<'a>(
            &'a self,
            stream: &'a str,
            ops: &'a [NewOp],
            deadline: Instant,
        ) -> StoreFuture<'a, Result<(), StoreError>> {
            self.0.check_claims(stream, ops, deadline)
        }

        fn put_legacy_op<'a>(
            &'a self,
            stream: &'a str,
            seq: Seq,
            op: &'a NewOp,
        ) -> StoreFuture<'a, Result<(), StoreError>> {
            self.0.put_legacy_op(stream, seq, op)
        }
    }

    /// A stream shorter than the longest (a test's own) is refused one byte past the limit too,
    /// not one byte past itself.
    #[tokio::test]
    async fn a_short_stream_is_refused_only_past_the_partition_key_limit() {
        let stream = "short";
        assert_eq!(
            one_byte_too_long(stream).len(),
            DYNAMODB_PARTITION_KEY_BYTES_MAX + 1
        );
        let store = store_with_op_0(stream).await;
        push_refused_input(&store, stream, &last_with_one_claim())
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn a_store_that_skips_its_check_parts_at_the_op_over_the_limit() {
        let stream = fresh_stream(Path::new("refused.itf.json"));
        let store = UncheckedStore(store_with_op_0(&stream).await);
        let fault = push_refused_input(&store, &stream, &last_with_one_claim())
            .await
            .unwrap_err();
        let Fault::Diverged { action, actual, .. } = fault else {
            panic!("{fault:?}")
        };
        assert_eq!(
            action.as_deref(),
            Some(
                "the store refuses a fresh op, then an op one byte over DynamoDB's item size limit"
            )
        );
        assert_eq!(actual, "check_op answered Ok(())");
    }
}
