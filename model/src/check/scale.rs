//! What a model may offer the checker to search larger bounds, declared per model through
//! [`super::ModelSpec::scale`] (nothing by default) and switched per run by [`super::CheckOptions`]:
//! - a state codec, so the frontier is held as compact bytes and spills to disk past its
//!   memory budget ([`super::frontier`]);
//! - a symmetry: the representative of a state's orbit under the permutations of
//!   interchangeable actors; the search then keeps one state per orbit;
//! - an independence declaration for the partial-order reduction: which actor an action
//!   belongs to and when it is safe to take it alone ([`Independence`]).
//!
//! Invariants: every hook is optional and none changes a verdict (each is argued sound in the
//! model's spec and tested reduced against unreduced); traces are always the model's own
//! actions from a real initial state, so an exported trace never depends on a reduction.

use super::frontier::StateCodec;
use stateright::Model;

/// A symmetry's canonical form: the representative of a state's orbit, `None` when the state is
/// its own representative (most are: nothing is cloned for them).
pub type Representative<M> = fn(&M, &<M as Model>::State) -> Option<<M as Model>::State>;

/// Actors a symmetry permutes whose fairness families it renames, at most this many per model.
pub const ACTOR_SLOTS_MAX: usize = 16;

/// How a symmetry moves the actors it permutes: `renaming[a]` is the slot that the actor in
/// slot `a` of a state plays in the state's representative (slots at or past the model's actor
/// count map to themselves).
pub type Renaming = [u8; ACTOR_SLOTS_MAX];

/// The identity renaming.
pub const fn identity_renaming() -> Renaming {
    let mut renaming = [0u8; ACTOR_SLOTS_MAX];
    let mut slot = 0;
    while slot < ACTOR_SLOTS_MAX {
        renaming[slot] = slot as u8;
        slot += 1;
    }
    renaming
}

/// A symmetry that permutes actors which are fairness families of their own (each writer, each
/// puller): the liveness search then runs on the quotient with every edge annotated by how it
/// moves the actors, and judges a component fair over the permutations its cycles generate
/// (check/liveness.rs, "Per-actor families on the quotient").
pub struct ActorFamilies<M: Model> {
    /// The fairness family of each actor slot the symmetry permutes, in slot order; a family
    /// not listed must be invariant under the symmetry.
    pub families: fn(&M) -> Vec<&'static str>,
    /// The representative exactly as [`Scale::symmetry`] gives it (`None` when the state is its
    /// own), and the renaming that takes the state's actors to their slots in it.
    pub representative: RenamedRepresentative<M>,
}

/// A representative with the renaming of the state's actors that reaches it.
pub type RenamedRepresentative<M> =
    fn(&M, &<M as Model>::State) -> (Option<<M as Model>::State>, Renaming);

impl<M: Model> Clone for ActorFamilies<M> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<M: Model> Copy for ActorFamilies<M> {}

/// A model's independence declaration for the partial-order reduction (`--partial-order`).
/// `actor` names the actor an action belongs to (a writer, a puller, a client, the clock).
/// `safe(state, action)` may be true only when the action, enabled at `state`, (1) commutes with
/// every action of every other actor, at `state` and at every state other actors' steps reach
/// from it; (2) is neither enabled nor disabled by another actor's step; and (3) changes no
/// property's condition, at any of those states (the model's spec argues each). The checker
/// then expands, at a state where some actor's enabled actions are all safe, only that actor's
/// actions (an ample set), subject to the cycle proviso (check/search.rs `ample_set`).
pub struct Independence<M: Model> {
    pub actor: fn(&M, &M::Action) -> u32,
    pub safe: fn(&M, &M::State, &M::Action) -> bool,
}

/// The hooks a model declares; see the module documentation.
pub struct Scale<M: Model> {
    pub codec: Option<StateCodec<M::State>>,
    /// The representative of a state's orbit: equal for two states exactly when a permutation
    /// of interchangeable actors maps one onto the other. Sound only when every action, every
    /// property and the initial states are invariant under those permutations (the model's
    /// spec argues it).
    pub symmetry: Option<Representative<M>>,
    /// The liveness search may use the symmetry too: every fairness family is named per role,
    /// never per actor the symmetry permutes, so each permutation maps every family onto itself
    /// and a fair cycle of the quotient lifts to a fair cycle of the model (check/liveness.rs).
    /// With families per actor (a writer's, a client's) the plain quotient could hide a fair
    /// cycle: such a model declares [`Scale::actor_families`] instead, or its liveness search
    /// runs unreduced.
    pub liveness_symmetry: bool,
    /// The liveness search may use the symmetry although it permutes actors that are fairness
    /// families of their own: the renaming of each state's actors, for the annotated quotient.
    pub actor_families: Option<ActorFamilies<M>>,
    pub independence: Option<Independence<M>>,
}

impl<M: Model> Scale<M> {
    /// No hooks: the frontier holds full states and nothing is reduced.
    pub fn none() -> Scale<M> {
        Scale {
            codec: None,
            symmetry: None,
            liveness_symmetry: false,
            actor_families: None,
            independence: None,
        }
    }
}

impl<M: Model> Default for Scale<M> {
    fn default() -> Self {
        Scale::none()
    }
}
