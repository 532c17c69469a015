//! Random walks for bounds too large to exhaust (`oncecheck check --simulate`).
//!
//! Invariants:
//! - Reproducible: walk i draws from its own generator ([`crate::trace::SplitMix64`]) seeded
//!   from (seed, i), one thread, the model's action order; the same model, seed, samples and
//!   depth give the same report, and a walk is the same walk whichever process runs it.
//! - Shardable: shard K of N (`CheckOptions::shard`) runs the walks K·S/N .. (K+1)·S/N of the
//!   S samples, so N shards run exactly the walks of the unsharded run; a trace is replaced
//!   only by a strictly shorter one, so the shortest over the shards, earliest shard first, is
//!   the unsharded run's.
//! - A walk never holds a loop: when a step returns to a state already on the walk, the walk is
//!   cut back to that state, so every recorded path is loop-free and as short as the walk allows.
//! - A simulation can show a violation or an example, never their absence: its verdicts are
//!   `violated`, `reached` or `unknown`, never `holds` or `unreached`.

use super::search::{fingerprint, limit_reached, Coverage, FingerprintMap, Target};
use super::{CheckOptions, ModelPath, Progress, Stop};
use crate::trace::SplitMix64;
use stateright::Model;
use std::collections::BTreeMap;
use std::hash::Hash;
use std::time::{Duration, Instant};

/// What a simulation found: per target the shortest matching walk prefix, and its counts.
pub(crate) struct Simulated<M: Model> {
    pub found: Vec<Option<ModelPath<M>>>,
    /// Steps taken over all walks.
    pub steps: usize,
    /// Distinct states visited (by fingerprint).
    pub unique_states: usize,
    /// Longest loop-free walk, in steps.
    pub depth_max_reached: usize,
    pub coverage: BTreeMap<String, usize>,
    pub stopped: Option<Stop>,
}

/// A walk: (state, action taken from it, the state's fingerprint); the last has no action.
type Walk<M> = Vec<(<M as Model>::State, Option<<M as Model>::Action>, u64)>;

pub(crate) fn simulate<M>(
    model: &M,
    targets: &[Target<M>],
    options: &CheckOptions,
    seed: u64,
    samples: usize,
    depth_max: usize,
    progress: &mut dyn FnMut(Progress),
) -> Simulated<M>
where
    M: Model,
    M::State: Clone + Hash,
    M::Action: Clone + std::fmt::Debug,
{
    let started = Instant::now();
    let interval = Duration::from_millis(options.progress_interval_millis.max(10));
    let mut last_progress = started;
    let initial: Vec<M::State> = model
        .init_states()
        .into_iter()
        .filter(|state| model.within_boundary(state))
        .collect();
    let mut found: Vec<Option<ModelPath<M>>> = vec![None; targets.len()];
    let mut seen: FingerprintMap<()> = FingerprintMap::default();
    let mut coverage = Coverage::new();
    let mut steps = 0;
    let mut depth_max_reached = 0;
    let mut stopped = None;
    let mut actions = Vec::new();

    let walks = match options.shard {
        Some(shard) => shard.range(samples),
        None => 0..samples,
    };
    for (count, sample) in walks.enumerate() {
        if initial.is_empty() {
            break;
        }
        let mut generator = walk_generator(seed, sample);
        let start = initial[generator.below(initial.len())].clone();
        let start_fingerprint = fingerprint(&start);
        seen.insert(start_fingerprint, ());
        let mut walk: Walk<M> = vec![(start, None, start_fingerprint)];
        let mut positions: FingerprintMap<usize> = FingerprintMap::default();
        positions.insert(start_fingerprint, 0);
        record(model, targets, &walk, &mut found);
        for _ in 0..depth_max {
            let state = &walk.last().expect("a walk has a state").0;
            actions.clear();
            model.actions(state, &mut actions);
            let taken = random_step(model, state, &mut actions, &mut generator, &mut coverage);
            let Some((action, next)) = taken else { break };
            steps += 1;
            let next_fingerprint = fingerprint(&next);
            seen.insert(next_fingerprint, ());
            if let Some(&position) = positions.get(&next_fingerprint) {
                // Back on the walk: cut the loop instead of recording it.
                for (_, _, dropped) in walk.drain(position + 1..) {
                    positions.remove(&dropped);
                }
                walk[position].1 = None;
                continue;
            }
            walk.last_mut().expect("a walk has a state").1 = Some(action);
            walk.push((next, None, next_fingerprint));
            positions.insert(next_fingerprint, walk.len() - 1);
            depth_max_reached = depth_max_reached.max(walk.len() - 1);
            record(model, targets, &walk, &mut found);
        }
        let now = Instant::now();
        if now.duration_since(last_progress) >= interval {
            last_progress = now;
            progress(Progress {
                states: steps,
                unique_states: seen.len(),
                max_depth: depth_max_reached,
                elapsed: now.duration_since(started),
                deciding: None,
            });
        }
        if count % 16 == 15 {
            stopped = limit_reached(options, seen.len(), 0, started);
            if stopped.is_some() {
                break;
            }
        }
    }
    Simulated {
        found,
        steps,
        unique_states: seen.len(),
        depth_max_reached,
        coverage: coverage.into_map(),
        stopped,
    }
}

/// Records `walk` as the shortest match so far of every target its last state matches.
fn record<M>(model: &M, targets: &[Target<M>], walk: &Walk<M>, found: &mut [Option<ModelPath<M>>])
where
    M: Model,
    M::State: Clone,
    M::Action: Clone,
{
    let (state, _, _) = walk.last().expect("a walk has a state");
    for (index, target) in targets.iter().enumerate() {
        let shorter = found[index]
            .as_ref()
            .is_none_or(|best| best.len() > walk.len());
        if shorter && (target.condition)(model, state) == target.matching {
            found[index] = Some(
                walk.iter()
                    .map(|(state, action, _)| (state.clone(), action.clone()))
                    .collect(),
            );
        }
    }
}

/// One step drawn at random among `actions` (the actions of `state`, consumed): the first drawn
/// whose next state exists and is within the boundary; `None` when none is.
fn random_step<M>(
    model: &M,
    state: &M::State,
    actions: &mut Vec<M::Action>,
    generator: &mut SplitMix64,
    coverage: &mut Coverage<M::Action>,
) -> Option<(M::Action, M::State)>
where
    M: Model,
    M::Action: Clone + std::fmt::Debug,
{
    while !actions.is_empty() {
        let action = actions.swap_remove(generator.below(actions.len()));
        let slot = coverage.slot(&action);
        if let Some(next) = model.next_state(state, action.clone()) {
            if model.within_boundary(&next) {
                coverage.fired(slot);
                return Some((action, next));
            }
        }
    }
    None
}

/// The generator of walk `sample`: seeded from (seed, sample) through one SplitMix64 step, so
/// neighbouring walks do not draw overlapping streams.
fn walk_generator(seed: u64, sample: usize) -> SplitMix64 {
    let mut mixer = SplitMix64::new(seed ^ (sample as u64).wrapping_mul(0xA076_1D64_78BD_642F));
    SplitMix64::new(mixer.next_u64())
}
