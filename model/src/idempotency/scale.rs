//! What the idempotency model offers the checker to search larger bounds (check/scale.rs): its
//! symmetry (specs/idempotency-middleware.md, "Symmetry"). Every client sends one request with
//! the same key from the same initial stage, and nothing in the state names a client (the row
//! and the history are keyed by generation), so clients are interchangeable: a state's
//! representative has its clients in order.

use super::{IdempotencyModel, IdempotencyState};
use crate::check::Scale;

pub(super) fn hooks(_model: &IdempotencyModel) -> Scale<IdempotencyModel> {
    Scale {
        symmetry: Some(representative),
        // The fairness families are roles (client, store, handler, clock: idempotency/liveness.rs),
        // never a client's own, so every permutation of clients maps each onto itself.
        liveness_symmetry: true,
        ..Scale::none()
    }
}

fn representative(_model: &IdempotencyModel, state: &IdempotencyState) -> Option<IdempotencyState> {
    if state.clients.is_sorted() {
        return None;
    }
    let mut sorted = state.clone();
    sorted.clients.sort();
    Some(sorted)
}
