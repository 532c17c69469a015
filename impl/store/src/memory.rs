//! The in-memory backend: one mutex over every stream.
//!
//! Invariants: an append runs entirely under the lock, so a pull sees an op either not at all or
//! complete (R1), the claim map stores an op_id once (R3), and a seq is taken as counter + 1, or,
//! when legacy ops occupy that seq, as the top occupied seq + 1 (R2, R5). A re-push with another
//! payload is refused against the stored op's payload, for a whole push before its first op
//! ([`OpStore::check_claims`]: the claims read under the lock, which is released before the
//! appends, so a writer may claim in between, as on the other backends). Nothing here waits, so
//! the push deadline is only the per-op check of [`OpStore::append_batch`].

use std::collections::{BTreeMap, HashMap};

use tokio::time::Instant;

use crate::sync::{lock, Arc, Mutex};
use crate::{
    next_seq, validate_append, validate_pull, Appended, NewOp, OpStore, PushContext, Seq,
    StoreError, StoreFuture, StoredOp,
};

#[derive(Debug, Default)]
struct StreamLog {
    /// The last seq this build allocated; legacy ops may sit above it.
    counter: Seq,
    ops: BTreeMap<Seq, StoredOp>,
    claims: HashMap<String, Seq>,
}

impl StreamLog {
    /// The answer of an op whose op_id is stored: its seq, or the conflict when the stored
    /// payload is another. None when the op_id is not stored.
    fn stored_answer(&self, op: &NewOp) -> Option<Result<Appended, StoreError>> {
        let &seq = self.claims.get(&op.op_id)?;
        let stored = self.ops.get(&seq).expect("R3: a claim names a stored op");
        assert_eq!(
            stored.op_id, op.op_id,
            "R3: the claim of op_id {:?} names seq {seq}, which holds another op_id",
            op.op_id
        );
        if stored.payload != op.payload {
            return Some(Err(StoreError::PayloadConflict {
                op_id: op.op_id.clone(),
                seq,
            }));
        }
        Some(Ok(Appended {
            seq,
            existing: true,
        }))
    }
}

/// The in-memory store. Cloning shares the same streams.
#[derive(Debug, Clone, Default)]
pub struct MemoryStore {
    streams: Arc<Mutex<HashMap<String, StreamLog>>>,
}

impl MemoryStore {
    pub fn new() -> MemoryStore {
        MemoryStore::default()
    }

    //= specs/relay-append.md#R1
    //# A puller that stored cursor k has received every op that is or will ever be stored at a seq
    //# <= k.
    //= specs/relay-append.md#R2
    //# At most one op per seq; no op is overwritten.
    //= specs/relay-append.md#R3
    //# An op_id is stored at most once; every append of it, re-pushes included, answers the same
    //# seq.
    //= specs/relay-append.md#R5
    //# With new-build writers only, the stored seqs are exactly 1..n.
    fn append_locked(&self, stream: &str, op: &NewOp) -> Result<Appended, StoreError> {
        validate_append(stream, op)?;
        let mut streams = lock(&self.streams);
        let log = streams.entry(stream.to_owned()).or_default();
        if let Some(answer) = log.stored_answer(op) {
            return answer;
        }
        let mut seq = next_seq(log.counter)?;
        if log.ops.contains_key(&seq) {
            // Floor step: legacy ops occupy the seq above the counter; land above the top one.
            let top = *log.ops.keys().next_back().expect("the map holds seq");
            seq = next_seq(top)?;
        }
        assert!(!log.ops.contains_key(&seq), "R2: seq {seq} is occupied");
        //= specs/relay-append.md#R4
        //# The counter never moves backwards, also in a mixed fleet with ADD-era writers.
        assert!(
            seq > log.counter,
            "R4: seq {seq} would move the counter back from {}",
            log.counter
        );
        log.ops.insert(
            seq,
            StoredOp {
                seq,
                op_id: op.op_id.clone(),
                payload: op.payload.clone(),
            },
        );
        let earlier = log.claims.insert(op.op_id.clone(), seq);
        assert!(
            earlier.is_none(),
            "R3: op_id {:?} was claimed at seq {earlier:?} and again at seq {seq}",
            op.op_id
        );
        log.counter = seq;
        Ok(Appended {
            seq,
            existing: false,
        })
    }
}

impl OpStore for MemoryStore {
    fn append_op<'a>(
        &'a self,
        stream: &'a str,
        op: &'a NewOp,
        _deadline: Instant,
        _push: &'a mut PushContext,
    ) -> StoreFuture<'a, Result<Appended, StoreError>> {
        Box::pin(async move { self.append_locked(stream, op) })
    }

    fn check_claims<'a>(
        &'a self,
        stream: &'a str,
        ops: &'a [NewOp],
        _deadline: Instant,
    ) -> StoreFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let streams = lock(&self.streams);
            let Some(log) = streams.get(stream) else {
                return Ok(());
            };
            for op in ops {
                if let Some(Err(conflict)) = log.stored_answer(op) {
                    return Err(conflict);
                }
            }
            Ok(())
        })
    }

    fn pull_within<'a>(
        &'a self,
        stream: &'a str,
        after: Seq,
        limit: usize,
        _deadline: Instant,
    ) -> StoreFuture<'a, Result<Vec<StoredOp>, StoreError>> {
        Box::pin(async move {
            validate_pull(stream, after)?;
            let streams = lock(&self.streams);
            let Some(log) = streams.get(stream) else {
                return Ok(Vec::new());
            };
            let start = after.saturating_add(1);
            Ok(log
                .ops
                .range(start..)
                .take(limit)
                .map(|(_, op)| op.clone())
                .collect())
        })
    }

    #[cfg(feature = "test-seams")]
    fn put_legacy_op<'a>(
        &'a self,
        stream: &'a str,
        seq: Seq,
        op: &'a NewOp,
    ) -> StoreFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            validate_append(stream, op)?;
            let mut streams = lock(&self.streams);
            let log = streams.entry(stream.to_owned()).or_default();
            if log.ops.contains_key(&seq) || log.claims.contains_key(&op.op_id) {
                return Err(StoreError::InvalidInput {
                    reason: format!("legacy op at {seq} collides with a stored op or claim"),
                });
            }
            log.ops.insert(
                seq,
                StoredOp {
                    seq,
                    op_id: op.op_id.clone(),
                    payload: op.payload.clone(),
                },
            );
            log.claims.insert(op.op_id.clone(), seq);
            Ok(())
        })
    }
}
