//! The `memory` and `sqlite` targets: relay traces replayed at the logical level a locked log
//! can show.
//!
//! Every op the model stores is appended at the step the model commits it and must get the
//! model's seq; every re-push answered from a claim must answer the model's seq; every pull must
//! return the page the model's puller received; after every step the whole log must hold exactly
//! the ops the model has committed, at their seqs.
//!
//! Invariant: a trace is replayed here only if a locked log can reproduce everything its actors
//! observed. A locked log has no visibility window, no ADD-era writer, no burned seq and no
//! contention, so a trace that needs one of those — above all a trace whose pullers saw the
//! window (a page without an op the transaction already committed) — is not applicable, with
//! the reason; it is never reported as conforming.

use crate::replay::driver::{
    compare, new_op, real_op_id, stored_ops_in_words, Fault, OpSizes, ReplayTarget, Step,
};
use crate::replay::refused_input::push_refused_input;
use oncecheck_model::ddb::{Key, OpId, Seq, TransactOutcome, Value};
use oncecheck_model::relay::{Action, Build, Phase, RelayModel, RelayState};
use oncecheck_model::trace::LoadedTrace;
use oncecheck_store::{OpStore, PushContext};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// More ops than any trace's stream holds: the final read of the whole log takes one page.
const LOG_OPS_MAX: usize = 10_000;
/// How memory and SQLite realise ops: the first writer's first op at DynamoDB's item limit.
const OP_SIZES: OpSizes = OpSizes::LargestFirstOp;
/// The push deadline of a replayed append; a locked log never waits, so it is never reached.
const PUSH_DEADLINE_SECS: u64 = 60;

/// One trace on a memory or SQLite store, on a stream of its own.
pub struct LogTarget {
    store: Arc<dyn OpStore>,
    /// `memory` or `sqlite`.
    name: String,
    stream: String,
    pushes: BTreeMap<u8, PushContext>,
    requests: usize,
}

impl LogTarget {
    pub fn new(store: Arc<dyn OpStore>, name: &str, stream: String) -> LogTarget {
        LogTarget {
            store,
            name: name.to_string(),
            stream,
            pushes: BTreeMap::new(),
            requests: 0,
        }
    }

    async fn append(
        &mut self,
        writer: u8,
        op: OpId,
        seq: i64,
        existing: bool,
    ) -> Result<(), Fault> {
        let new_op = new_op(&self.stream, op, OP_SIZES);
        let context = self.pushes.entry(writer).or_default();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(PUSH_DEADLINE_SECS);
        self.requests += 1;
        let marker = |existing: bool| if existing { " (existing)" } else { "" };
        match self
            .store
            .append_op(&self.stream, &new_op, deadline, context)
            .await
        {
            Ok(real) if real.seq == seq && real.existing == existing => Ok(()),
            Ok(real) => Err(Fault::diverged(
                format!("{} answered seq {seq}{}", real_op_id(op), marker(existing)),
                format!(
                    "{} answered seq {}{}",
                    real_op_id(op),
                    real.seq,
                    marker(real.existing)
                ),
            )),
            Err(error) => Err(Fault::diverged(
                format!("{} answered seq {seq}", real_op_id(op)),
                format!("error: {error}"),
            )),
        }
    }
}

/// The page a locked log answers a puller: every committed op above the cursor, window or not.
fn log_page(state: &RelayState, cursor: Seq, limit: usize) -> Vec<(Seq, OpId)> {
    state
        .table
        .committed_ops()
        .range(cursor.saturating_add(1)..)
        .take(limit)
        .map(|(seq, op)| (*seq, *op))
        .collect()
}

/// The ops a writer's step stores or answers from a claim, with the model's seq and whether
/// the answer is `existing`, in the order the store answers them.
fn appended_at(
    model: &RelayModel,
    before: &RelayState,
    action: Action,
    after: &RelayState,
) -> Vec<(u8, OpId, i64, bool)> {
    match action {
        Action::WriterSendsRound { writer } => match &after.writers[writer as usize].phase {
            Phase::Sent {
                round,
                outcome: TransactOutcome::Committed,
            } => vec![(writer, round.op, i64::from(round.seq), false)],
            _ => Vec::new(),
        },
        // The batched claim read answers every remaining op whose claim is visible.
        Action::WriterReadsClaims { writer } => {
            let w = writer as usize;
            let push = &model.writers[w].1;
            let was = &before.writers[w];
            (was.next_op as usize..push.len())
                .filter(|position| was.answered_ahead & (1 << position) == 0)
                .filter_map(
                    |position| match before.table.read(Key::Claim(push[position])) {
                        Some(Value::Claim { seq }) => {
                            Some((writer, push[position], i64::from(seq), true))
                        }
                        _ => None,
                    },
                )
                .collect()
        }
        Action::WriterReceivesResponse { writer } | Action::WriterReadsClaim { writer } => {
            let (was, now) = (
                &before.writers[writer as usize],
                &after.writers[writer as usize],
            );
            let moved = now.next_op != was.next_op
                || (now.phase == Phase::Done && was.phase != Phase::Done);
            let from_claim = !matches!(
                &was.phase,
                Phase::Sent {
                    outcome: TransactOutcome::Committed,
                    ..
                }
            );
            if moved && from_claim {
                let op = model.writers[writer as usize].1[was.next_op as usize];
                let seq = after
                    .answers
                    .get(&op)
                    .and_then(|seqs| seqs.iter().next())
                    .unwrap_or(0);
                vec![(writer, op, i64::from(seq), true)]
            } else {
                Vec::new()
            }
        }
        _ => Vec::new(),
    }
}

impl ReplayTarget for LogTarget {
    type Model = RelayModel;
    type View = Vec<(i64, String)>;

    fn applicable(&self, trace: &LoadedTrace<RelayModel>) -> Result<(), String> {
        let model = &trace.model;
        let path = &trace.path;
        let suffix = "; replay it with --target dynamodb";
        if (0..model.writers.len()).any(|writer| model.build_of(writer) == Build::AddEra) {
            return Err(format!(
                "the trace has ADD-era writers, which only the DynamoDB store has{suffix}"
            ));
        }
        if !path[0].0.legacy_burned.is_empty() {
            return Err(format!("the trace starts with a burned seq (a legacy gap), which a locked log cannot hold{suffix}"));
        }
        if path.iter().any(|(state, _)| {
            state
                .writers
                .iter()
                .any(|writer| matches!(writer.phase, Phase::Failed(_)))
        }) {
            return Err(format!("an append in the trace fails (contention or its deadline), which a locked log never shows{suffix}"));
        }
        if let Some(index) = path.iter().position(|(_, action)| {
            matches!(
                action,
                Some(Action::FolderReceivesRecord { .. } | Action::TruncatorDeletes { .. })
            )
        }) {
            return Err(format!(
                "step {} folds or truncates the stream, which a locked log does not have{suffix}",
                index + 1
            ));
        }
        for (index, (state, action)) in path.iter().enumerate() {
            if let Some(Action::PullerQueries { puller }) = action {
                let cursor = state.pullers[*puller as usize].cursor;
                let limit = model.bounds.page_limit as usize;
                let observed = state.table.query_after(cursor, limit);
                let locked = log_page(state, cursor, limit);
                if observed != locked {
                    return Err(format!(
                        "at step {} P{} received seqs {:?} through the visibility window, where a locked log answers {:?}{suffix}",
                        index + 1,
                        puller + 1,
                        observed.iter().map(|(seq, _)| *seq).collect::<Vec<_>>(),
                        locked.iter().map(|(seq, _)| *seq).collect::<Vec<_>>(),
                    ));
                }
            }
        }
        Ok(())
    }

    fn expected_view(
        &self,
        _trace: &LoadedTrace<RelayModel>,
        state: &RelayState,
    ) -> Vec<(i64, String)> {
        state
            .table
            .committed_ops()
            .iter()
            .map(|(seq, op)| (i64::from(*seq), real_op_id(*op)))
            .collect()
    }

    async fn set_up(&mut self, trace: &LoadedTrace<RelayModel>) -> Result<(), Fault> {
        for (seq, op) in trace.path[0].0.table.committed_ops() {
            let new_op = new_op(&self.stream, op, OP_SIZES);
            self.requests += 1;
            self.store
                .put_legacy_op(&self.stream, i64::from(seq), &new_op)
                .await
                .map_err(|error| Fault::Environment(format!("seeding legacy op {seq}: {error}")))?;
        }
        Ok(())
    }

    async fn perform(
        &mut self,
        trace: &LoadedTrace<RelayModel>,
        step: Step<'_, RelayModel>,
    ) -> Result<(), Fault> {
        let model = &trace.model;
        let action = *step.action;
        for (writer, op, seq, existing) in appended_at(model, step.before, action, step.after) {
            self.append(writer, op, seq, existing).await?;
        }
        if let Action::PullerQueries { puller } = action {
            let cursor = step.before.pullers[puller as usize].cursor;
            let limit = model.bounds.page_limit as usize;
            let expected: Vec<(i64, String)> = step
                .before
                .table
                .query_after(cursor, limit)
                .iter()
                .map(|(seq, op)| (i64::from(*seq), real_op_id(*op)))
                .collect();
            self.requests += 1;
            let page = self
                .store
                .pull(&self.stream, i64::from(cursor), limit)
                .await
                .map_err(|error| {
                    Fault::diverged(
                        format!("P{} page {expected:?}", puller + 1),
                        format!("error: {error}"),
                    )
                })?;
            let actual = stored_ops_in_words(&self.stream, &page, OP_SIZES);
            if actual != expected {
                return Err(Fault::diverged(
                    format!("P{} page after {cursor}: {expected:?}", puller + 1),
                    format!("{actual:?}"),
                ));
            }
        }
        Ok(())
    }

    async fn observe(&mut self) -> Result<Vec<(i64, String)>, Fault> {
        self.requests += 1;
        let log = self
            .store
            .pull(&self.stream, 0, LOG_OPS_MAX)
            .await
            .map_err(|error| Fault::Environment(format!("reading the log: {error}")))?;
        Ok(stored_ops_in_words(&self.stream, &log, OP_SIZES))
    }

    /// Every answer was compared at the step that gave it; what is left is the input the store
    /// must refuse, which must leave the log as the trace's last step left it.
    async fn finish(&mut self, trace: &LoadedTrace<RelayModel>) -> Result<(), Fault> {
        let last = &trace.path[trace.path.len() - 1].0;
        // Through the shared handle, as the relay holds its store.
        push_refused_input(&self.store, &self.stream, last).await?;
        compare(self, trace, last).await.map(|_| ())
    }

    async fn tear_down(self) {}

    fn command_flags(&self) -> String {
        self.name.clone()
    }

    fn counts(&self) -> (usize, usize) {
        (self.requests, 0)
    }
}
