//! What the token model offers the checker to search larger bounds (check/scale.rs): its
//! symmetry (specs/tokened-writes.md, "Symmetry"). Clients of the same write pattern are
//! interchangeable: a client's id appears only as its index (clients, the table's
//! applications) and as a key or a holder (token records, the profile's holder, the order's
//! owner). A state's representative orders the clients by everything that belongs to them;
//! two clients equal in all of it can be swapped without changing the state. With
//! `shared_token` the shared token belongs to the first tokened client by index, which a
//! permutation does not keep: there the model declares no symmetry.

use super::{ClientId, TokenModel, TokenState};
use crate::check::{identity_renaming, ActorFamilies, Renaming, Scale};

pub(super) fn hooks(model: &TokenModel) -> Scale<TokenModel> {
    let symmetric = !model.limits.shared_token;
    Scale {
        symmetry: symmetric.then_some(representative as _),
        // Each client is a fairness family of its own (C1, C2: token/liveness.rs): a permutation
        // maps one client's family onto another's, so the liveness search needs the renaming of
        // every state's clients (the per-actor quotient).
        actor_families: symmetric.then_some(ActorFamilies {
            families: super::liveness::client_families,
            representative: representative_with_renaming,
        }),
        ..Scale::none()
    }
}

fn representative(model: &TokenModel, state: &TokenState) -> Option<TokenState> {
    representative_with_renaming(model, state).0
}

/// The representative (`None` when the state is its own) and where each client goes in it.
fn representative_with_renaming(
    _model: &TokenModel,
    state: &TokenState,
) -> (Option<TokenState>, Renaming) {
    let mut renaming = identity_renaming();
    let view = |client: usize| {
        let id = client as ClientId;
        (
            &state.clients[client],
            &state.table.applications[client],
            state.tokens.get(&id),
            state.table.profile_holder == Some(id),
            state.table.order_owner == Some(id),
        )
    };
    let mut order: Vec<usize> = (0..state.clients.len()).collect();
    order.sort_by(|a, b| view(*a).cmp(&view(*b)));
    if order.iter().enumerate().all(|(at, client)| at == *client) {
        return (None, renaming);
    }
    // `order[at]`: the client that moves to `at`.
    let mut to = vec![0 as ClientId; order.len()];
    for (at, client) in order.iter().enumerate() {
        to[*client] = at as ClientId;
        renaming[*client] = at as u8;
    }
    let rename = |id: ClientId| to[id as usize];
    let image = TokenState {
        clients: order
            .iter()
            .map(|client| state.clients[*client].clone())
            .collect(),
        table: super::Table {
            applications: order
                .iter()
                .map(|client| state.table.applications[*client].clone())
                .collect(),
            profile_holder: state.table.profile_holder.map(rename),
            order_owner: state.table.order_owner.map(rename),
        },
        tokens: state
            .tokens
            .iter()
            .map(|(id, record)| (rename(*id), *record))
            .collect(),
        now: state.now,
        damages_left: state.damages_left,
    };
    (Some(image), renaming)
}
