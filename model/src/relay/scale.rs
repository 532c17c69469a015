//! What the relay model offers the checker to search larger bounds (check/scale.rs): its states
//! encode for the frontier (the serde derive of [`RelayState`]), and its symmetry
//! (specs/relay-append.md, "Symmetry"): writers of the same build whose pushes map onto each
//! other under a renaming of op ids are interchangeable, and so are pullers.
//!
//! Invariants: a permutation is kept only when it maps every writer's push onto its image's
//! push position by position and fixes the legacy ops, so the model's steps commute with it;
//! the representative is the orbit's least state by (the writers' views in order, then the
//! fingerprint), a function of the orbit alone.

use super::{Action, OpId, Phase, Puller, RelayModel, RelayState, Writer};
use crate::check::{identity_renaming, ActorFamilies, Independence, Renaming, Scale, StateCodec};
use crate::ddb::{Key, Reason, TransactOutcome, Value};
use std::hash::{Hash, Hasher};

pub(super) fn hooks(_model: &RelayModel) -> Scale<RelayModel> {
    Scale {
        codec: Some(StateCodec::<RelayState>::serde()),
        symmetry: Some(representative),
        // Each writer and each puller is a fairness family of its own (relay/liveness.rs): a
        // permutation of writers maps W1's family onto W2's, so the liveness search needs the
        // renaming of every state's actors (the annotated quotient).
        liveness_symmetry: false,
        actor_families: Some(ActorFamilies {
            families: actor_families,
            representative: representative_with_renaming,
        }),
        independence: Some(Independence {
            actor,
            safe: response_cannot_be_lost,
        }),
    }
}

/// The actor of a step: each writer, each puller, the table's items becoming visible, the fold
/// consumer, the truncator.
fn actor(_model: &RelayModel, action: &Action) -> u32 {
    match *action {
        Action::WriterReadsCounter { writer }
        | Action::WriterAddsToCounter { writer }
        | Action::WriterSendsRound { writer }
        | Action::WriterReceivesResponse { writer }
        | Action::ResponseLost { writer }
        | Action::WriterReadsClaim { writer }
        | Action::WriterReadsClaims { writer }
        | Action::WriterQueriesTop { writer }
        | Action::PushDeadlinePasses { writer } => u32::from(writer),
        Action::PullerQueries { puller } => 0x100 + u32::from(puller),
        Action::ItemApplied { .. } => 0x200,
        Action::FolderReceivesRecord { .. } => 0x300,
        Action::TruncatorDeletes { .. } => 0x400,
    }
}

/// The partial-order reduction's safe step: reduction (a)'s response that cannot be lost
/// (specs/relay-append.md, "Partial-order reduction"), the writer's only enabled step then.
fn response_cannot_be_lost(model: &RelayModel, state: &RelayState, action: &Action) -> bool {
    let Action::WriterReceivesResponse { writer } = *action else {
        return false;
    };
    match &state.writers[writer as usize].phase {
        Phase::Sent { outcome, .. } => {
            *outcome != TransactOutcome::Committed
                || state.lost_responses_left == 0
                || model.build_of(writer as usize) == super::Build::AddEra
        }
        _ => false,
    }
}

/// A permutation of the writers with the renaming of op ids it implies.
#[derive(Clone, Debug)]
pub struct WriterPermutation {
    /// `to[w]`: where writer w goes.
    to: Vec<usize>,
    /// `from[i]`: the writer that lands at i.
    from: Vec<usize>,
    /// The renaming of op ids (legacy ops and ops no writer pushes map to themselves).
    ops: Vec<OpId>,
}

impl WriterPermutation {
    fn op(&self, op: OpId) -> OpId {
        self.ops[op as usize]
    }
}

/// Every permutation but the identity that maps the writers' (build, push) onto each other.
pub(super) fn writer_symmetries(writers: &[(super::Build, Vec<OpId>)]) -> Vec<WriterPermutation> {
    let count = writers.len();
    let mut found = Vec::new();
    let mut order: Vec<usize> = (0..count).collect();
    permutations(&mut order, 0, &mut |to| {
        if to.iter().enumerate().all(|(w, target)| w == *target) {
            return;
        }
        let mut ops: Vec<Option<OpId>> = vec![None; 256];
        let mut taken = [false; 256];
        for (w, (build, push)) in writers.iter().enumerate() {
            let (image_build, image_push) = &writers[to[w]];
            if build != image_build || push.len() != image_push.len() {
                return;
            }
            for (op, image) in push.iter().zip(image_push) {
                match ops[*op as usize] {
                    Some(known) if known != *image => return,
                    Some(_) => {}
                    None if taken[*image as usize] => return,
                    None => {
                        ops[*op as usize] = Some(*image);
                        taken[*image as usize] = true;
                    }
                }
            }
        }
        let mut from = vec![0; count];
        for (w, target) in to.iter().enumerate() {
            from[*target] = w;
        }
        found.push(WriterPermutation {
            to: to.to_vec(),
            from,
            ops: (0..=255u8)
                .map(|op| ops[op as usize].unwrap_or(op))
                .collect(),
        });
    });
    found
}

fn permutations(order: &mut Vec<usize>, start: usize, visit: &mut dyn FnMut(&[usize])) {
    if start == order.len() {
        visit(order);
        return;
    }
    for index in start..order.len() {
        order.swap(start, index);
        permutations(order, start + 1, visit);
        order.swap(start, index);
    }
}

/// The representative of a state's orbit; `None` when the state is its own.
fn representative(model: &RelayModel, state: &RelayState) -> Option<RelayState> {
    representative_with_renaming(model, state).0
}

/// The fairness family of each actor the symmetry permutes, in slot order: the writers, then
/// the pullers (relay/liveness.rs names them).
fn actor_families(model: &RelayModel) -> Vec<&'static str> {
    super::liveness::permuted_families(model)
}

/// The representative of a state's orbit (`None` when the state is its own) and where each
/// actor goes in it: writer w to slot `to[w]`, puller p to the writers' count plus its place
/// among the sorted pullers.
fn representative_with_renaming(
    model: &RelayModel,
    state: &RelayState,
) -> (Option<RelayState>, Renaming) {
    let mut renaming = identity_renaming();
    let writer_count = state.writers.len();
    let pullers_sorted = state
        .pullers
        .windows(2)
        .all(|pair| puller_key(&pair[0]) <= puller_key(&pair[1]));
    let sorted;
    let state_ref = if pullers_sorted {
        state
    } else {
        // Stable, so pullers with equal keys (equal pullers) keep their order.
        let mut order: Vec<usize> = (0..state.pullers.len()).collect();
        order.sort_by(|a, b| puller_key(&state.pullers[*a]).cmp(&puller_key(&state.pullers[*b])));
        let mut owned = state.clone();
        for (place, puller) in order.iter().enumerate() {
            owned.pullers[place] = state.pullers[*puller].clone();
            renaming[writer_count + puller] = (writer_count + place) as u8;
        }
        sorted = owned;
        &sorted
    };
    let changed = !pullers_sorted;
    if model.symmetry.is_empty() {
        return (changed.then(|| state_ref.clone()), renaming);
    }
    let views: Vec<u64> = state_ref.writers.iter().map(writer_view).collect();
    // The least sequence of views over the group (identity included), and who reaches it.
    let sequence = |from: &[usize]| from.iter().map(|w| views[*w]).collect::<Vec<u64>>();
    let identity: Vec<usize> = (0..views.len()).collect();
    let mut best = sequence(&identity);
    let mut winners: Vec<Option<&WriterPermutation>> = vec![None];
    for permutation in &model.symmetry {
        let candidate = sequence(&permutation.from);
        match candidate.cmp(&best) {
            std::cmp::Ordering::Less => {
                best = candidate;
                winners = vec![Some(permutation)];
            }
            std::cmp::Ordering::Equal => winners.push(Some(permutation)),
            std::cmp::Ordering::Greater => {}
        }
    }
    // Among equal views, the least fingerprint of the permuted state.
    let mut chosen: Option<(u64, Option<&WriterPermutation>, Option<RelayState>)> = None;
    for winner in winners {
        let image = winner.map(|permutation| apply(permutation, state_ref));
        let key = crate::check::fingerprint_of(image.as_ref().unwrap_or(state_ref));
        if chosen.as_ref().is_none_or(|(least, _, _)| key < *least) {
            chosen = Some((key, winner, image));
        }
    }
    match chosen {
        Some((_, Some(permutation), Some(image))) => {
            for (writer, target) in permutation.to.iter().enumerate() {
                renaming[writer] = *target as u8;
            }
            (Some(image), renaming)
        }
        _ => (changed.then(|| state_ref.clone()), renaming),
    }
}

fn puller_key(puller: &Puller) -> (u8, &crate::ddb::SeqSet, u8) {
    (puller.cursor, &puller.received, puller.pulls_left)
}

/// What a writer is, without the op ids it names: its phase's op is the op at `next_op` of its
/// push, so the view loses nothing a permutation keeps.
fn writer_view(writer: &Writer) -> u64 {
    struct View<'a>(&'a Writer);
    impl Hash for View<'_> {
        fn hash<H: Hasher>(&self, hasher: &mut H) {
            let writer = self.0;
            (
                writer.next_op,
                writer.counter,
                writer.floor,
                writer.flip,
                writer.lost_in_a_row,
                writer.answered_ahead,
                writer.push_rounds,
                writer.push_paid_extra,
                writer.push_contended,
                writer.retrying_lost_response,
            )
                .hash(hasher);
            std::mem::discriminant(&writer.phase).hash(hasher);
            match &writer.phase {
                Phase::Allocated { seq } => seq.hash(hasher),
                Phase::Sent { round, outcome } => {
                    (
                        round.expected,
                        round.seq,
                        round.predecessor,
                        round.floor_step,
                    )
                        .hash(hasher);
                    outcome.hash(hasher);
                }
                Phase::Failed(error) => error.hash(hasher),
                Phase::Ready
                | Phase::ReadingClaim { .. }
                | Phase::ReadingClaims
                | Phase::QueryingTop
                | Phase::Done => {}
            }
        }
    }
    crate::check::fingerprint_of(&View(writer))
}

fn rename_value(permutation: &WriterPermutation, value: Value) -> Value {
    match value {
        Value::Op { op_id } => Value::Op {
            op_id: permutation.op(op_id),
        },
        other => other,
    }
}

fn rename_key(permutation: &WriterPermutation, key: Key) -> Key {
    match key {
        Key::Claim(op) => Key::Claim(permutation.op(op)),
        other => other,
    }
}

/// The state with writer w's role played by writer `to[w]`, every op id renamed.
fn apply(permutation: &WriterPermutation, state: &RelayState) -> RelayState {
    let mut image = state.clone();
    for (w, writer) in state.writers.iter().enumerate() {
        let mut moved = writer.clone();
        match &mut moved.phase {
            Phase::Sent { round, outcome } => {
                round.op = permutation.op(round.op);
                if let TransactOutcome::Cancelled(reasons) = outcome {
                    for reason in reasons {
                        if let Reason::ConditionalCheckFailed { old: Some(old) } = reason {
                            *old = rename_value(permutation, *old);
                        }
                    }
                }
            }
            Phase::ReadingClaim { op } => *op = permutation.op(*op),
            _ => {}
        }
        image.writers[permutation.to[w]] = moved;
    }
    image.table.applied = state
        .table
        .applied
        .iter()
        .map(|(key, value)| {
            (
                rename_key(permutation, *key),
                rename_value(permutation, *value),
            )
        })
        .collect();
    image.table.pending = state
        .table
        .pending
        .iter()
        .map(|(key, value)| {
            (
                rename_key(permutation, *key),
                rename_value(permutation, *value),
            )
        })
        .collect();
    image.answers = state
        .answers
        .iter()
        .map(|(op, seqs)| (permutation.op(*op), *seqs))
        .collect();
    image.truncated = state
        .truncated
        .iter()
        .map(|(seq, op)| (*seq, permutation.op(*op)))
        .collect();
    image
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::relay::Build;

    #[test]
    fn writers_with_mapped_pushes_are_interchangeable_and_no_others() {
        // Three writers, the last re-pushing the first's first op: only W1 and W3 swap.
        let writers = vec![
            (Build::New, vec![0, 1]),
            (Build::New, vec![2, 3]),
            (Build::New, vec![0, 5]),
        ];
        let group = writer_symmetries(&writers);
        assert_eq!(group.len(), 1);
        assert_eq!(group[0].to, [2, 1, 0]);
        assert_eq!((group[0].op(1), group[0].op(5), group[0].op(0)), (5, 1, 0));
        assert_eq!(group[0].op(201), 201);
        // Four writers: W1 with W4, W2 with W3, both at once.
        let writers = vec![
            (Build::New, vec![0, 1]),
            (Build::New, vec![2, 3]),
            (Build::New, vec![4, 5]),
            (Build::New, vec![0, 7]),
        ];
        assert_eq!(writer_symmetries(&writers).len(), 3);
        // Another build is never interchangeable.
        let writers = vec![(Build::New, vec![0, 1]), (Build::AddEra, vec![2, 3])];
        assert!(writer_symmetries(&writers).is_empty());
    }
}
