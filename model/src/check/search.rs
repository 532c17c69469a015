//! The deterministic breadth-first search behind [`super::run`] and [`super::shortest_paths`].
//!
//! Invariants:
//! - Level by level: every state at depth d is examined before any state at depth d + 1, in the
//!   order the states were first generated, actions in the model's order. The first state found
//!   matching a target is therefore at the smallest depth, and the path rebuilt to it is the one
//!   a single-threaded FIFO search finds, whatever the number of threads (threads split a chunk
//!   of one level; their results are merged in chunk order).
//! - Visited states are kept as fingerprints only: fingerprint -> (parent fingerprint, index of
//!   the action taken). Full states live only in the level being examined and the next one. A
//!   path is rebuilt by re-executing the action indices from its initial state; every step is
//!   checked against its recorded fingerprint, so a nondeterministic model or a fingerprint
//!   collision on the path panics instead of printing a wrong trace.
//! - The search stops only between chunks, and a stop never invalidates a discovery: what was
//!   found before it is a real, shortest path.

use super::{CheckOptions, Progress, Stop};
use stateright::Model;
use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasherDefault, Hash, Hasher};
use std::mem::Discriminant;
use std::time::{Duration, Instant};

/// States examined per thread between two checks of the limits and two progress samples.
const CHUNK_STATES_PER_THREAD: usize = 2048;

/// A 64-bit fingerprint of a state. A collision would make two states one (as in stateright);
/// for n states its probability is about n² / 2^65 (under 10^-5 at 20 million states).
pub(crate) fn fingerprint<T: Hash>(value: &T) -> u64 {
    let mut hasher = std::hash::DefaultHasher::new();
    value.hash(&mut hasher);
    hasher.finish()
}

/// Fingerprints are already well-mixed hashes: the visited map uses them as they are.
#[derive(Default)]
pub(crate) struct FingerprintHasher(u64);

impl Hasher for FingerprintHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for byte in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(*byte);
        }
    }

    fn write_u64(&mut self, value: u64) {
        self.0 = value;
    }
}

pub(crate) type FingerprintMap<V> = HashMap<u64, V, BuildHasherDefault<FingerprintHasher>>;

/// How a visited state was first reached. `action == ROOT` marks an initial state; `from` is
/// then its index among the initial states.
#[derive(Debug, Clone, Copy)]
struct Parent {
    from: u64,
    action: u32,
}

const ROOT: u32 = u32::MAX;

/// What the search looks for: the first state where `condition` evaluates to `matching`.
pub(crate) struct Target<M: Model> {
    pub condition: fn(&M, &M::State) -> bool,
    pub matching: bool,
}

/// When the search may stop before the state space is exhausted.
pub(crate) struct Limits<'a> {
    pub options: &'a CheckOptions,
    /// Stop as soon as every target has a match (nothing is left to decide).
    pub stop_when_all_found: bool,
}

/// Counts of how often each action kind fired, kept per thread and merged.
pub(crate) struct Coverage<A> {
    kinds: Vec<(Discriminant<A>, String, usize)>,
}

impl<A: std::fmt::Debug> Coverage<A> {
    pub(crate) fn new() -> Coverage<A> {
        Coverage { kinds: Vec::new() }
    }

    /// The slot of an action's kind, named on first sight. Counted only once the action
    /// produced a state (see [`Coverage::fired`]).
    pub(crate) fn slot(&mut self, action: &A) -> usize {
        let kind = std::mem::discriminant(action);
        match self.kinds.iter().position(|(known, _, _)| *known == kind) {
            Some(slot) => slot,
            None => {
                self.kinds.push((kind, action_kind(action), 0));
                self.kinds.len() - 1
            }
        }
    }

    pub(crate) fn fired(&mut self, slot: usize) {
        self.kinds[slot].2 += 1;
    }

    fn merge(&mut self, other: Coverage<A>) {
        for (kind, name, count) in other.kinds {
            match self.kinds.iter_mut().find(|(known, _, _)| *known == kind) {
                Some((_, _, total)) => *total += count,
                None => self.kinds.push((kind, name, count)),
            }
        }
    }

    pub(crate) fn into_map(self) -> BTreeMap<String, usize> {
        let mut map = BTreeMap::new();
        for (_, name, count) in self.kinds.into_iter().filter(|(_, _, count)| *count > 0) {
            *map.entry(name).or_insert(0) += count;
        }
        map
    }
}

/// The name of an action's kind: its `Debug` text up to the first character that cannot be
/// part of a Rust identifier (`WriterSendsRound { writer: 1 }` -> `WriterSendsRound`).
fn action_kind<A: std::fmt::Debug>(action: &A) -> String {
    format!("{action:?}")
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect()
}

/// What a search found and how far it got.
pub(crate) struct Searched<M: Model> {
    /// Per target, the fingerprint of the first matching state.
    pub found: Vec<Option<u64>>,
    /// Successor states generated within the boundary, repeats included (stateright's count).
    pub generated: usize,
    /// Unique states first reached at each depth; index 0 holds the initial states.
    pub states_per_depth: Vec<usize>,
    pub coverage: BTreeMap<String, usize>,
    /// True when the reachable state space was examined completely.
    pub exhausted: bool,
    pub stopped: Option<Stop>,
    initial: Vec<M::State>,
    visited: FingerprintMap<Parent>,
}

impl<M> Searched<M>
where
    M: Model,
    M::State: Clone + Hash,
    M::Action: Clone,
{
    pub fn unique_states(&self) -> usize {
        self.visited.len()
    }

    /// The path from an initial state to the state with this fingerprint, rebuilt by
    /// re-executing the recorded action indices.
    pub fn path_to(&self, model: &M, last: u64) -> Vec<(M::State, Option<M::Action>)> {
        let mut steps = Vec::new();
        let mut cursor = last;
        let root = loop {
            let parent = self.visited[&cursor];
            if parent.action == ROOT {
                break parent.from as usize;
            }
            steps.push((parent.action as usize, cursor));
            cursor = parent.from;
        };
        steps.reverse();
        let mut state = self.initial[root].clone();
        let mut path = Vec::with_capacity(steps.len() + 1);
        let mut actions = Vec::new();
        for (index, expected) in steps {
            actions.clear();
            model.actions(&state, &mut actions);
            assert!(index < actions.len(), "re-executing a path: action {index} is no longer enabled (a nondeterministic model)");
            let action = actions.swap_remove(index);
            let next = model
                .next_state(&state, action.clone())
                .expect("re-executing a path: an action that produced a state now produces none");
            assert_eq!(
                fingerprint(&next),
                expected,
                "re-executing a path reached another state: the model is nondeterministic or two states share a fingerprint"
            );
            path.push((state, Some(action)));
            state = next;
        }
        path.push((state, None));
        path
    }
}

/// What one thread made of its slice of a chunk.
struct Expansion<M: Model> {
    /// How many states of the chunk this slice held.
    examined: usize,
    /// Per target, the offset within the slice of the first matching state.
    first_match: Vec<Option<usize>>,
    /// New-looking successors in generation order: state, fingerprint, parent, action index.
    successors: Vec<(M::State, u64, u64, u32)>,
    generated: usize,
    coverage: Coverage<M::Action>,
}

fn expand<M>(
    model: &M,
    slice: &[(M::State, u64)],
    targets: &[Target<M>],
    open: &[bool],
    visited: &FingerprintMap<Parent>,
) -> Expansion<M>
where
    M: Model,
    M::State: Hash,
    M::Action: std::fmt::Debug,
{
    let mut expansion = Expansion {
        examined: slice.len(),
        first_match: vec![None; targets.len()],
        successors: Vec::new(),
        generated: 0,
        coverage: Coverage::new(),
    };
    let mut actions = Vec::new();
    for (offset, (state, state_fingerprint)) in slice.iter().enumerate() {
        for (index, target) in targets.iter().enumerate() {
            if open[index]
                && expansion.first_match[index].is_none()
                && (target.condition)(model, state) == target.matching
            {
                expansion.first_match[index] = Some(offset);
            }
        }
        actions.clear();
        model.actions(state, &mut actions);
        for (action_index, action) in actions.drain(..).enumerate() {
            let slot = expansion.coverage.slot(&action);
            let Some(next) = model.next_state(state, action) else {
                continue;
            };
            if !model.within_boundary(&next) {
                continue;
            }
            expansion.coverage.fired(slot);
            expansion.generated += 1;
            let next_fingerprint = fingerprint(&next);
            if visited.contains_key(&next_fingerprint) {
                continue;
            }
            expansion.successors.push((
                next,
                next_fingerprint,
                *state_fingerprint,
                action_index as u32,
            ));
        }
    }
    expansion
}

/// Breadth-first search for the first state matching each target.
pub(crate) fn search<M>(
    model: &M,
    targets: &[Target<M>],
    limits: &Limits,
    progress: &mut dyn FnMut(Progress),
) -> Searched<M>
where
    M: Model + Sync,
    M::State: Clone + Hash + Send + Sync,
    M::Action: Clone + std::fmt::Debug + Send,
{
    let started = Instant::now();
    let options = limits.options;
    let threads = options.threads.max(1);
    let interval = Duration::from_millis(options.progress_interval_millis.max(10));
    let mut last_progress = started;

    let initial: Vec<M::State> = model
        .init_states()
        .into_iter()
        .filter(|state| model.within_boundary(state))
        .collect();
    let mut visited: FingerprintMap<Parent> = FingerprintMap::default();
    let mut level: Vec<(M::State, u64)> = Vec::new();
    for (index, state) in initial.iter().enumerate() {
        let state_fingerprint = fingerprint(state);
        if let std::collections::hash_map::Entry::Vacant(entry) = visited.entry(state_fingerprint) {
            entry.insert(Parent {
                from: index as u64,
                action: ROOT,
            });
            level.push((state.clone(), state_fingerprint));
        }
    }
    let mut states_per_depth = vec![level.len()];
    let mut found: Vec<Option<u64>> = vec![None; targets.len()];
    let mut generated = initial.len();
    let mut coverage = Coverage::new();
    let mut stopped = None;
    let mut all_found = targets.is_empty() && limits.stop_when_all_found;

    'levels: while !level.is_empty() && !all_found {
        let mut next_level: Vec<(M::State, u64)> = Vec::new();
        let mut next_count = 0;
        for chunk in level.chunks(CHUNK_STATES_PER_THREAD * threads) {
            let open: Vec<bool> = found.iter().map(Option::is_none).collect();
            let expansions: Vec<Expansion<M>> = if threads == 1 || chunk.len() < 2 * threads {
                vec![expand(model, chunk, targets, &open, &visited)]
            } else {
                let part = chunk.len().div_ceil(threads);
                let visited = &visited;
                let open = &open;
                std::thread::scope(|scope| {
                    let mut parts = chunk.chunks(part);
                    let first = parts.next().expect("a non-empty chunk");
                    let handles: Vec<_> = parts
                        .map(|slice| {
                            scope.spawn(move || expand(model, slice, targets, open, visited))
                        })
                        .collect();
                    let mut expansions = vec![expand(model, first, targets, open, visited)];
                    expansions.extend(
                        handles
                            .into_iter()
                            .map(|handle| handle.join().expect("a checker thread panicked")),
                    );
                    expansions
                })
            };
            let mut offset = 0;
            for expansion in expansions {
                for (index, first) in expansion.first_match.iter().enumerate() {
                    if let (None, Some(at)) = (found[index], first) {
                        found[index] = Some(chunk[offset + at].1);
                    }
                }
                offset += expansion.examined;
                generated += expansion.generated;
                coverage.merge(expansion.coverage);
                for (state, state_fingerprint, parent, action) in expansion.successors {
                    if let std::collections::hash_map::Entry::Vacant(entry) =
                        visited.entry(state_fingerprint)
                    {
                        entry.insert(Parent {
                            from: parent,
                            action,
                        });
                        next_level.push((state, state_fingerprint));
                        next_count += 1;
                    }
                }
            }
            all_found = limits.stop_when_all_found && found.iter().all(Option::is_some);
            let now = Instant::now();
            if now.duration_since(last_progress) >= interval {
                last_progress = now;
                progress(Progress {
                    states: generated,
                    unique_states: visited.len(),
                    max_depth: states_per_depth.len() - 1 + usize::from(next_count > 0),
                    elapsed: now.duration_since(started),
                });
            }
            if all_found {
                break;
            }
            stopped = limit_reached(options, visited.len(), started);
            if stopped.is_some() {
                if next_count > 0 {
                    states_per_depth.push(next_count);
                }
                break 'levels;
            }
        }
        if next_count > 0 {
            states_per_depth.push(next_count);
        }
        level = next_level;
    }
    let exhausted = stopped.is_none() && level.is_empty();
    Searched {
        found,
        generated,
        states_per_depth,
        coverage: coverage.into_map(),
        exhausted,
        stopped,
        initial,
        visited,
    }
}

/// The first limit of `options` the run has reached, if any: memory, then states, then time.
pub(crate) fn limit_reached(
    options: &CheckOptions,
    unique_states: usize,
    started: Instant,
) -> Option<Stop> {
    if let (Some(memory_bytes_max), Some(probe)) = (options.memory_bytes_max, options.memory_probe)
    {
        if let Some(resident_bytes) = probe() {
            if resident_bytes >= memory_bytes_max {
                return Some(Stop::Memory {
                    memory_bytes_max,
                    resident_bytes,
                });
            }
        }
    }
    if let Some(states_max) = options.states_max {
        if unique_states >= states_max {
            return Some(Stop::States {
                states_max,
                unique_states,
            });
        }
    }
    if let Some(timeout_secs_max) = options.timeout_secs_max {
        if started.elapsed() >= Duration::from_secs(timeout_secs_max) {
            return Some(Stop::Timeout { timeout_secs_max });
        }
    }
    None
}
