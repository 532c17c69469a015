//! What a model may offer the checker to search larger bounds, declared per model through
//! [`super::ModelSpec::scale`] (nothing by default) and switched per run by [`super::CheckOptions`]:
//! - a state codec, so the frontier is held as compact bytes and spills to disk past its
//!   memory budget ([`super::frontier`]);
//! - a symmetry: the representative of a state's orbit under the permutations of
//!   interchangeable actors; the search then keeps one state per orbit.
//!
//! Invariants: every hook is optional and none changes a verdict (each is argued sound in the
//! model's spec and tested reduced against unreduced); traces are always the model's own
//! actions from a real initial state, so an exported trace never depends on a reduction.

use super::frontier::StateCodec;
use stateright::Model;

/// A symmetry's canonical form: the representative of a state's orbit, `None` when the state is
/// its own representative (most are: nothing is cloned for them).
pub type Representative<M> = fn(&M, &<M as Model>::State) -> Option<<M as Model>::State>;

/// The hooks a model declares; see the module documentation.
pub struct Scale<M: Model> {
    pub codec: Option<StateCodec<M::State>>,
    /// The representative of a state's orbit: equal for two states exactly when a permutation
    /// of interchangeable actors maps one onto the other. Sound only when every action, every
    /// property and the initial states are invariant under those permutations (the model's
    /// spec argues it).
    pub symmetry: Option<Representative<M>>,
}

impl<M: Model> Scale<M> {
    /// No hooks: the frontier holds full states and nothing is reduced.
    pub fn none() -> Scale<M> {
        Scale {
            codec: None,
            symmetry: None,
        }
    }
}

impl<M: Model> Default for Scale<M> {
    fn default() -> Self {
        Scale::none()
    }
}
