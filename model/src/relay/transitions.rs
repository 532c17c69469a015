//! One step function per action: what each request, item visibility, stream record, pull and
//! deletion does to the state. [`RelayModel::step`] dispatches; the request's transaction is
//! built in [`super::transaction`] and its response read in [`super::response`].
//!
//! Invariants: a step changes only its actor's role, the table and the record of what happened;
//! a finished writer keeps only how it finished ([`RelayModel::forget_finished_history`]), so
//! finished pushes that differ only in their history share a state.

use super::*;

impl RelayModel {
    /// Applies `action` to `state` (a copy of the state it is enabled at).
    pub(super) fn step(&self, state: &mut RelayState, action: Action) {
        match action {
            Action::WriterReadsCounter { writer } => Self::writer_reads_counter(state, writer),
            Action::WriterAddsToCounter { writer } => Self::writer_adds_to_counter(state, writer),
            Action::WriterSendsRound { writer } => self.writer_sends_round(state, writer),
            Action::WriterReceivesResponse { writer } => {
                self.writer_receives_response(state, writer)
            }
            Action::ResponseLost { writer } => {
                //= specs/relay-append.md#R3
                //# A lost response is a lost round without a hint: the writer retries the same op in place, and a retry of a committed round answers the seq the op was stored at.
                state.lost_responses_left -= 1;
                self.lose_round(&mut state.writers[writer as usize], None);
                state.writers[writer as usize].retrying_lost_response = true;
            }
            Action::WriterReadsClaim { writer } => self.writer_reads_claim(state, writer),
            Action::WriterReadsClaims { writer } => self.writer_reads_claims(state, writer),
            Action::WriterQueriesTop { writer } => {
                let top = state.table.query_top();
                let writer = &mut state.writers[writer as usize];
                writer.floor = if self.has(Mutation::TopQueryForgetsFloor) {
                    None
                } else {
                    top
                };
                writer.phase = Phase::Ready;
            }
            Action::PushDeadlinePasses { writer } => {
                state.writers[writer as usize].phase = Phase::Failed(AppendError::DeadlineExceeded);
            }
            Action::ItemApplied { key } => state.table.apply(key),
            Action::PullerQueries { puller } => self.puller_queries(state, puller),
            Action::FolderReceivesRecord { seq } => {
                let mut folder = state.folders[0].clone();
                folder.folded.insert(seq);
                self.advance_watermark(&mut folder, &state.legacy_burned);
                state.folders[0] = folder;
            }
            Action::TruncatorDeletes { seq } => Self::truncator_deletes(state, seq),
        }
    }

    fn writer_reads_counter(state: &mut RelayState, writer: u8) {
        let index = writer as usize;
        let counter = state.table.counter();
        let writer = &mut state.writers[index];
        //= specs/relay-append.md#R7
        //# A wrong counter guess costs exactly one lost round: the next round uses the counter image, no re-read.
        //= specs/relay-append.md#R7
        //# An uncontended n-op push costs n transactions and one counter read.
        // Uncontended, every round but a wrong guess or a gap commits and every extra round
        // is counted where it happens, so the cost bound reduces to: the only counter read
        // of an uncontended push is the first, before any round.
        if !writer.push_contended && (writer.next_op > 0 || writer.push_paid_extra) {
            state.anomalies.carry_forward_broken = true;
        }
        writer.counter = Counter::Known(counter);
    }

    fn writer_adds_to_counter(state: &mut RelayState, writer: u8) {
        let index = writer as usize;
        let outcome = state.table.add_to_counter();
        let writer = &mut state.writers[index];
        match outcome {
            Ok(seq) => writer.phase = Phase::Allocated { seq },
            Err(Reason::TransactionConflict) => {
                writer.mark_contended();
                writer.phase = Phase::Failed(AppendError::AddEraWriteRefused);
            }
            Err(_) => writer.phase = Phase::Failed(AppendError::SeqOverflow),
        }
    }

    fn writer_sends_round(&self, state: &mut RelayState, writer: u8) {
        let index = writer as usize;
        let op = self.push_of(index)[state.writers[index].next_op as usize];
        let built = match &state.writers[index].phase {
            Phase::Allocated { seq } => Ok(Self::add_era_round(op, *seq)),
            _ => self.new_build_round(&state.writers[index], op),
        };
        let (round, items) = match built {
            Ok(built) => built,
            Err(error) => {
                state.writers[index].phase = Phase::Failed(error);
                return;
            }
        };
        // Reduction (b): a claim no writer can touch again is applied at commit.
        let response_losable = state.lost_responses_left > 0 && self.build_of(index) == Build::New;
        let lone_claim = |key: Key| match key {
            Key::Claim(claimed) => {
                self.reductions
                    && !response_losable
                    && !self.claim_touchable_by_others(state, index, claimed)
            }
            _ => false,
        };
        let apply_now: BTreeSet<Key> = items
            .iter()
            .map(|item| item.key)
            .filter(|key| lone_claim(*key))
            .collect();
        let outcome = state
            .table
            .transact_applying(&items, self.bounds.window, &apply_now);
        let rounds_max = self.bounds.push_rounds_max;
        let writer = &mut state.writers[index];
        if rounds_max > 0 {
            //= specs/relay-append.md#R6
            //# A push sends no round past its deadline; past it the push ends with the typed deadline error.
            if writer.push_rounds >= rounds_max {
                state.anomalies.deadline_overrun = true;
            }
            // Saturated: a push past its deadline is past it, however far.
            writer.push_rounds = (writer.push_rounds + 1).min(rounds_max + 1);
        }
        writer.phase = Phase::Sent { round, outcome };
    }

    fn writer_receives_response(&self, state: &mut RelayState, writer: u8) {
        let index = writer as usize;
        let Phase::Sent { round, outcome } = state.writers[index].phase.clone() else {
            unreachable!("a response arrives only for a sent round");
        };
        match outcome {
            TransactOutcome::Committed => {
                //= specs/relay-append.md#R3
                //# Every append of an op id answers the seq it is stored at.
                Self::answer(state, round.op, round.seq);
                let writer = &mut state.writers[index];
                //= specs/relay-append.md#R7
                //# Within a push the seq an op was written at is the next op's expected counter.
                writer.counter = if self.has(Mutation::ReadCounterEveryOp) {
                    Counter::Unknown
                } else {
                    Counter::Known(round.seq)
                };
                self.op_done(index, writer, &mut state.anomalies, false);
            }
            TransactOutcome::Cancelled(reasons) => match self.build_of(index) {
                Build::New => self.new_build_cancelled(state, index, round, &reasons),
                Build::AddEra => self.settle_add_era(&mut state.writers[index], round, &reasons),
            },
        }
    }

    /// A new-build round was cancelled: settle it, and answer the op when its claim named a seq.
    fn new_build_cancelled(
        &self,
        state: &mut RelayState,
        index: usize,
        round: Round,
        reasons: &[Reason],
    ) {
        let predecessor_was_stored = state.truncated.contains_key(&(round.seq - 1));
        let writer = &mut state.writers[index];
        let settled = self.settle_new_build(
            writer,
            round,
            reasons,
            predecessor_was_stored,
            &mut state.anomalies,
        );
        if let Some(seq) = settled {
            Self::answer(state, round.op, seq);
            if self.has(Mutation::ClaimAnswerSentAgain) {
                let writer = &mut state.writers[index];
                writer.lost_in_a_row = 0;
                writer.phase = Phase::Ready;
            } else {
                self.op_done(index, &mut state.writers[index], &mut state.anomalies, true);
            }
        }
    }

    fn writer_reads_claim(&self, state: &mut RelayState, writer: u8) {
        let index = writer as usize;
        let Phase::ReadingClaim { op } = state.writers[index].phase else {
            unreachable!("a claim is read back only after its condition failed");
        };
        match state.table.read(Key::Claim(op)) {
            Some(Value::Claim { seq }) => {
                Self::answer(state, op, seq);
                self.op_done(index, &mut state.writers[index], &mut state.anomalies, true);
            }
            _ => state.writers[index].phase = Phase::Failed(AppendError::ClaimUnreadable),
        }
    }

    /// The re-push fast path: one batched read answers every remaining op already stored.
    fn writer_reads_claims(&self, state: &mut RelayState, writer: u8) {
        let index = writer as usize;
        let start = state.writers[index].next_op as usize;
        for position in start..self.push_of(index).len() {
            if state.writers[index].answered_ahead & (1 << position) != 0 {
                continue;
            }
            let op = self.push_of(index)[position];
            // Read-committed: a claim still pending reads as absent.
            if let Some(Value::Claim { seq }) = state.table.read(Key::Claim(op)) {
                Self::answer(state, op, seq);
                state.writers[index].answered_ahead |= 1 << position;
            }
        }
        let writer = &mut state.writers[index];
        writer.phase = Phase::Ready;
        if writer.answered_ahead & (1 << start) != 0 {
            // The op due next is answered: step past it and every op answered ahead.
            if self.advance(index, writer) {
                self.push_done(index, writer, &mut state.anomalies);
            }
        }
    }

    fn puller_queries(&self, state: &mut RelayState, puller: u8) {
        let puller = &mut state.pullers[puller as usize];
        let page = state
            .table
            .query_after(puller.cursor, self.bounds.page_limit as usize);
        if !page.is_empty() {
            puller.pulls_left -= 1;
        }
        for (seq, _) in &page {
            puller.received.insert(*seq);
        }
        if let Some((last, _)) = page.last() {
            puller.cursor = *last;
        }
    }

    fn truncator_deletes(state: &mut RelayState, seq: Seq) {
        let Some(Value::Op { op_id }) = state.table.applied.remove(&Key::Op(seq)) else {
            unreachable!("truncation deletes a visible op");
        };
        if seq == state.table.counter() {
            state.anomalies.counter_op_truncated = true;
        }
        state.truncated.insert(seq, op_id);
        state.truncations_left -= 1;
    }

    /// History that stopped mattering is cleared, so equal futures share a state.
    pub(super) fn forget_finished_history(last: &RelayState, state: &mut RelayState) {
        for (writer, was) in state.writers.iter_mut().zip(&last.writers) {
            if writer.next_op != was.next_op {
                writer.retrying_lost_response = false;
            }
        }
        // A finished writer keeps only how it finished: what it knew on the way there no longer
        // matters, so finished pushes that differ only in their history share a state.
        for writer in &mut state.writers {
            if writer.is_finished() {
                *writer = Writer {
                    phase: writer.phase.clone(),
                    next_op: writer.next_op,
                    ..Writer::new()
                };
            }
        }
    }

    /// Whether some writer other than `except` may still send a request touching `op`'s claim:
    /// the op is in the unanswered rest of its push.
    pub(super) fn claim_touchable_by_others(
        &self,
        state: &RelayState,
        except: usize,
        op: OpId,
    ) -> bool {
        state.writers.iter().enumerate().any(|(index, writer)| {
            index != except
                && !writer.is_finished()
                && self
                    .push_of(index)
                    .iter()
                    .enumerate()
                    .any(|(position, candidate)| {
                        *candidate == op
                            && position >= writer.next_op as usize
                            && writer.answered_ahead & (1 << position) == 0
                    })
        })
    }

    /// The gap-aware fold watermark: it advances only over a dense prefix of folded (or
    /// known-burned) seqs. The `TrustingWatermark` mutation moves it to the highest seq folded.
    pub(super) fn advance_watermark(&self, folder: &mut Folder, burned: &SeqSet) {
        if self.has(Mutation::TrustingWatermark) {
            folder.watermark = folder.folded.last().unwrap_or(0).max(folder.watermark);
            return;
        }
        //= specs/relay-append.md#R8
        //# The fold watermark never passes an op that was not folded.
        while let Some(next) = folder.watermark.checked_add(1) {
            if folder.folded.contains(&next) || burned.contains(&next) {
                folder.watermark = next;
            } else {
                break;
            }
        }
    }
}
