//! The model side of `oncecheck`: the model registry (`models`, the one list of models) and what
//! is derived from it (`model_facts`, `variants`, `action_names`), the Explorer's front that
//! names the protocol (`explorer`), the checks with their limits
//! (`spill`) and reaches (`reach`), the shards of a check and their merge (`merge`), and the
//! models' paths as trace files with the regression corpus (`traces`).
//!
//! Invariant: nothing here talks to a real store; the main job (`oncecheck check` without
//! `replay`) builds all of it.

pub mod action_names;
pub mod explorer;
pub mod merge;
pub mod model_facts;
pub mod models;
pub mod reach;
pub mod spill;
pub mod traces;
pub mod variants;
