//! The deterministic breadth-first search behind [`super::run`] and [`super::shortest_paths`].
//!
//! Invariants:
//! - Level by level: every state at depth d is examined before any state at depth d + 1, in the
//!   order the states were first generated, actions in the model's order. The first state found
//!   matching a target is therefore at the smallest depth, and the path rebuilt to it is the one
//!   a single-threaded FIFO search finds, whatever the number of threads (threads split a chunk
//!   of one level; their results are merged in chunk order).
//! - Visited states are kept as fingerprints only (with their depth under the partial-order
//!   reduction), and (parent fingerprint, index of the action taken) in the append-only parent log
//!   ([`super::parents`], which spills with the frontier). States live only in the part of the
//!   level not yet examined and in the next level, as compact bytes when the model has a codec
//!   ([`super::frontier`]: spilled to disk past a budget, read back in order, so nothing else
//!   changes). A path is rebuilt by re-executing the action indices from its initial state;
//!   every step is checked against its recorded fingerprint, so a nondeterministic model or a
//!   fingerprint collision on the path panics instead of printing a wrong trace.
//! - The search stops only between chunks, and a stop never invalidates a discovery: what was
//!   found before it is a real, shortest path.

use super::codec::CodecError;
use super::frontier::{
    push_state_or_record, put_record, Frontier, Part, Spill, SpillFailure, StateCodec,
};
use super::parents::{Parent, ParentLog};
use super::scale::{Independence, Representative};
use super::visited::Visited;
use super::{CheckOptions, Progress, Shard, Stop, SHARD_LEVEL_STATES_MIN};
use stateright::Model;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hash, Hasher};
use std::mem::Discriminant;
use std::time::{Duration, Instant};

/// States examined per thread between two checks of the limits and two progress samples.
const CHUNK_STATES_PER_THREAD: usize = 2048;

/// The frontier's block size without a memory budget, and the bounds of a budget's eighth:
/// blocks of at least 33 MiB sit above glibc's largest mmap threshold, so each is mapped on its
/// own and handed back to the system when freed.
const FRONTIER_BLOCK_BYTES_MAX: usize = 33 << 20;
const FRONTIER_BLOCK_BYTES_MIN: usize = 4 << 10;

/// The parent log's blocks in [`first_steps_by_key`], which keeps it in memory.
const FIRST_STEPS_LOG_BLOCK_BYTES: usize = 1 << 20;

/// What the search uses of a model beyond `Model`: each part optional (see [`super::Scale`]).
pub(crate) struct Hooks<M: Model> {
    /// The frontier is kept encoded (and may spill) when the model has a codec.
    pub codec: Option<StateCodec<M::State>>,
    /// Symmetry: a state is known by its orbit representative's fingerprint.
    pub representative: Option<Representative<M>>,
    /// Partial-order reduction: the model's independence declaration.
    pub independence: Option<Independence<M>>,
}

impl<M: Model> Hooks<M> {
    pub fn none() -> Hooks<M> {
        Hooks {
            codec: None,
            representative: None,
            independence: None,
        }
    }
}

impl<M: Model> Hooks<M>
where
    M::State: Hash,
{
    /// The fingerprint a state is known by: its own, or its orbit representative's.
    fn key(&self, model: &M, state: &M::State) -> u64 {
        key_of(self.representative, model, state)
    }
}

pub(crate) fn key_of<M: Model>(
    representative: Option<Representative<M>>,
    model: &M,
    state: &M::State,
) -> u64
where
    M::State: Hash,
{
    match representative {
        Some(representative) => match representative(model, state) {
            Some(other) => fingerprint(&other),
            None => fingerprint(state),
        },
        None => fingerprint(state),
    }
}

/// A 64-bit fingerprint of a state. A collision would make two states one (as in stateright);
/// for n states its probability is about n² / 2^65 (under 10^-5 at 20 million states). Fixed
/// seeds: the same state has the same fingerprint in every run of a build.
pub(crate) fn fingerprint<T: Hash + ?Sized>(value: &T) -> u64 {
    const SEEDS: [u64; 4] = [
        0x243F_6A88_85A3_08D3,
        0x1319_8A2E_0370_7344,
        0xA409_3822_299F_31D0,
        0x082E_FA98_EC4E_6C89,
    ];
    ahash::RandomState::with_seeds(SEEDS[0], SEEDS[1], SEEDS[2], SEEDS[3]).hash_one(value)
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

    pub(crate) fn merge(&mut self, other: Coverage<A>) {
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
    /// True when the reachable state space (of this shard's part) was examined completely.
    pub exhausted: bool,
    /// A shard's search: the depth whose level it split, if one was large enough.
    pub shard_level: Option<usize>,
    pub stopped: Option<Stop>,
    initial: Vec<M::State>,
    visited: Visited,
    parents: ParentLog,
    /// The disk limit and what was spilled when the search ended (for a stop while rebuilding).
    disk_bytes_max: Option<u64>,
    spilled_bytes: u64,
    /// The symmetry the search ran with: a path is checked against representatives' fingerprints.
    representative: Option<Representative<M>>,
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

    /// The paths from an initial state to the states with these fingerprints, rebuilt by
    /// re-executing the recorded action indices (one backward pass over the parent log finds
    /// all of them). `Err`, the disk stop, when the log's spilled blocks cannot be read back.
    #[allow(clippy::type_complexity)]
    pub fn paths_to(
        &self,
        model: &M,
        lasts: &[u64],
    ) -> Result<Vec<Vec<(M::State, Option<M::Action>)>>, Stop> {
        let links = self
            .parents
            .links(lasts)
            .map_err(|failure| disk_stop_at(failure, self.disk_bytes_max, self.spilled_bytes))?;
        Ok(lasts
            .iter()
            .map(|last| rebuild_path(model, &self.initial, &links, self.representative, *last))
            .collect())
    }
}

/// The path from an initial state to the visited state with fingerprint `last`, rebuilt by
/// re-executing the recorded action indices; every step is checked against its fingerprint
/// (under symmetry: its representative's). The path is made of the model's own actions from a
/// real initial state, whatever the reduction: a state of it may be another member of the orbit
/// the search recorded, never a representative the model cannot reach.
fn rebuild_path<M>(
    model: &M,
    initial: &[M::State],
    links: &HashMap<u64, Parent>,
    representative: Option<Representative<M>>,
    last: u64,
) -> Vec<(M::State, Option<M::Action>)>
where
    M: Model,
    M::State: Clone + Hash,
    M::Action: Clone,
{
    let mut steps = Vec::new();
    let mut cursor = last;
    let root = loop {
        let parent = *links
            .get(&cursor)
            .expect("every state on a recorded path has its link");
        let Some((from, action_index)) = parent.step_from() else {
            break parent.root_index();
        };
        steps.push((action_index, cursor));
        cursor = from;
    };
    steps.reverse();
    let mut state = initial[root].clone();
    let mut path = Vec::with_capacity(steps.len() + 1);
    let mut actions = Vec::new();
    for (index, expected) in steps {
        actions.clear();
        model.actions(&state, &mut actions);
        assert!(
            index < actions.len(),
            "re-executing a path: action {index} is no longer enabled (a nondeterministic model)"
        );
        let action = actions.swap_remove(index);
        let next = model
            .next_state(&state, action.clone())
            .expect("re-executing a path: an action that produced a state now produces none");
        assert_eq!(
            key_of(representative, model, &next),
            expected,
            "re-executing a path reached another state: the model is nondeterministic or two states share a fingerprint"
        );
        path.push((state, Some(action)));
        state = next;
    }
    path.push((state, None));
    path
}

/// The search's start: the initial states within the boundary, the visited map and parent log
/// holding them as roots, and the first level (each distinct initial state once, in the model's
/// order).
type FirstLevel<M> = (
    Vec<<M as Model>::State>,
    Visited,
    ParentLog,
    VecDeque<(<M as Model>::State, u64)>,
);

fn first_level<M>(model: &M, hooks: &Hooks<M>, log_block_bytes: usize) -> FirstLevel<M>
where
    M: Model,
    M::State: Clone + Hash,
{
    let initial: Vec<M::State> = model
        .init_states()
        .into_iter()
        .filter(|state| model.within_boundary(state))
        .collect();
    // Depths only for the cycle proviso of the partial-order reduction: 9 bytes a slot, not 11.
    let mut visited = Visited::new(hooks.independence.is_some());
    let mut parents = ParentLog::new(log_block_bytes);
    let mut level: VecDeque<(M::State, u64)> = VecDeque::new();
    for (index, state) in initial.iter().enumerate() {
        let state_fingerprint = hooks.key(model, state);
        if visited.insert_if_absent(state_fingerprint, 0) {
            parents.append(state_fingerprint, Parent::root(index));
            level.push_back((state.clone(), state_fingerprint));
        }
    }
    (initial, visited, parents, level)
}

/// For every distinct key of a step (`key(before, action)`), the shortest path whose last step
/// has that key, in the order the keys were first met. One single-threaded breadth-first pass
/// over the whole reachable state space, keeping fingerprints only (the visited map and path
/// rebuilding of [`search`]), so its memory is that of a verdict run, not of full states.
/// The first step met with a key is at the smallest depth; among those, the first a FIFO search
/// generates.
pub(crate) fn first_steps_by_key<M, K>(
    model: &M,
    mut key: impl FnMut(&M::State, &M::Action) -> K,
) -> Vec<(K, super::ModelPath<M>)>
where
    M: Model,
    M::State: Clone + Hash,
    M::Action: Clone,
    K: Hash + Eq + Clone,
{
    let (initial, mut visited, mut parents, mut level) =
        first_level(model, &Hooks::none(), FIRST_STEPS_LOG_BLOCK_BYTES);
    // Per key in the order met: the fingerprint of the step's state and the action's index.
    let mut met: HashMap<K, usize> = HashMap::new();
    let mut firsts: Vec<(K, u64, usize)> = Vec::new();
    let mut actions = Vec::new();
    while let Some((state, state_fingerprint)) = level.pop_front() {
        actions.clear();
        model.actions(&state, &mut actions);
        for (action_index, action) in actions.drain(..).enumerate() {
            let step_key = key(&state, &action);
            let Some(next) = model.next_state(&state, action) else {
                continue;
            };
            if !model.within_boundary(&next) {
                continue;
            }
            if !met.contains_key(&step_key) {
                met.insert(step_key.clone(), firsts.len());
                firsts.push((step_key, state_fingerprint, action_index));
            }
            let next_fingerprint = fingerprint(&next);
            // Depth 0: these paths are only rebuilt, never read by a cycle proviso.
            if visited.insert_if_absent(next_fingerprint, 0) {
                parents.append(
                    next_fingerprint,
                    Parent::step(state_fingerprint, action_index),
                );
                level.push_back((next, next_fingerprint));
            }
        }
    }
    let froms: Vec<u64> = firsts.iter().map(|(_, from, _)| *from).collect();
    let links = parents
        .links(&froms)
        .unwrap_or_else(|_| unreachable!("a log without a store never spilled"));
    firsts
        .into_iter()
        .map(|(step_key, from, action_index)| {
            let mut path = rebuild_path(model, &initial, &links, None, from);
            let before = path.last().expect("a path has a state").0.clone();
            actions.clear();
            model.actions(&before, &mut actions);
            let action = actions.swap_remove(action_index);
            let next = model
                .next_state(&before, action.clone())
                .expect("re-executing a step: an action that produced a state now produces none");
            path.last_mut().expect("a path has a state").1 = Some(action);
            path.push((next, None));
            (step_key, path)
        })
        .collect()
}

/// What one thread made of its slice of a chunk.
struct Expansion<M: Model> {
    /// This thread's part of the chunk, consumed (each state dropped once examined).
    part: Part<M::State>,
    /// Per target, the fingerprint of the part's first matching state.
    first_match: Vec<Option<u64>>,
    /// New-looking successors in generation order: fingerprint, parent, action index, and the
    /// end of the successor's record in `records` (an encoded frontier) .
    successors: Vec<(u64, u64, u32, usize)>,
    /// The successors' states, in the order of `successors` (a frontier of states).
    successor_states: Vec<M::State>,
    /// The successors' frontier records, back to back (an encoded frontier).
    records: Vec<u8>,
    generated: usize,
    coverage: Coverage<M::Action>,
    /// The enabled actions of the state being examined (a reused buffer).
    actions: Vec<M::Action>,
    /// A state's encoding (a reused buffer).
    encoded: Vec<u8>,
    /// A part that did not decode: the store gave back damaged bytes.
    damaged: Option<CodecError>,
}

impl<M: Model> Expansion<M>
where
    M::Action: std::fmt::Debug,
{
    fn new() -> Expansion<M> {
        Expansion {
            part: Part::new(),
            first_match: Vec::new(),
            successors: Vec::new(),
            successor_states: Vec::new(),
            records: Vec::new(),
            generated: 0,
            coverage: Coverage::new(),
            actions: Vec::new(),
            encoded: Vec::new(),
            damaged: None,
        }
    }
}

/// Examines the part of `expansion`, whose buffers are reused from chunk to chunk: allocating
/// them afresh made glibc's allocator consolidate its free lists on every chunk, which cost as
/// much as the search itself. Its coverage counts accumulate over the whole run.
fn expand<M>(
    model: &M,
    targets: &[Target<M>],
    open: &[bool],
    visited: &Visited,
    hooks: &Hooks<M>,
    depth: u32,
    expansion: &mut Expansion<M>,
) where
    M: Model,
    M::State: Hash,
    M::Action: Clone + std::fmt::Debug,
{
    expansion.first_match.clear();
    expansion.first_match.resize(targets.len(), None);
    expansion.successors.clear();
    expansion.successor_states.clear();
    expansion.records.clear();
    expansion.generated = 0;
    let Expansion {
        part,
        first_match,
        successors,
        successor_states,
        records,
        generated,
        coverage,
        actions,
        encoded,
        damaged,
    } = expansion;
    // Each state is dropped right after it is examined, so the allocator hands its memory
    // straight to the next states (dropping a whole chunk at once made allocation the
    // dominant cost).
    let drained = part.drain(hooks.codec.as_ref(), |state, state_fingerprint| {
        for (index, target) in targets.iter().enumerate() {
            if open[index]
                && first_match[index].is_none()
                && (target.condition)(model, &state) == target.matching
            {
                first_match[index] = Some(state_fingerprint);
            }
        }
        actions.clear();
        model.actions(&state, actions);
        let ample = hooks.independence.as_ref().and_then(|independence| {
            ample_set(model, &state, actions, independence, visited, depth, hooks)
        });
        for (action_index, action) in actions.drain(..).enumerate() {
            if ample
                .as_ref()
                .is_some_and(|ample| !ample.contains(&action_index))
            {
                continue;
            }
            let slot = coverage.slot(&action);
            let Some(next) = model.next_state(&state, action) else {
                continue;
            };
            if !model.within_boundary(&next) {
                continue;
            }
            coverage.fired(slot);
            *generated += 1;
            let next_fingerprint = hooks.key(model, &next);
            if visited.contains(next_fingerprint) {
                continue;
            }
            match &hooks.codec {
                Some(codec) => {
                    encoded.clear();
                    (codec.encode)(&next, encoded)
                        .unwrap_or_else(|error| panic!("a state that does not encode: {error}"));
                    put_record(records, next_fingerprint, encoded);
                }
                None => successor_states.push(next),
            }
            successors.push((
                next_fingerprint,
                state_fingerprint,
                action_index as u32,
                records.len(),
            ));
        }
    });
    if let Err(error) = drained {
        *damaged = Some(error);
    }
}

/// The ample set of a state (partial-order reduction): the indices of the enabled actions of
/// the first actor all of whose enabled actions the model declares safe (`Independence`), when
/// that is not every enabled action; `None` to expand the state fully. The cycle proviso: a
/// state is expanded fully when a step of its ample set leads to a state already visited at
/// this depth or above (a breadth-first search closes every cycle of the reduced graph with
/// such a step, so every cycle holds a fully expanded state). Visited depths are those of the
/// levels before this one, never of states found in the same level, so the choice does not
/// depend on chunks or threads.
fn ample_set<M>(
    model: &M,
    state: &M::State,
    actions: &[M::Action],
    independence: &Independence<M>,
    visited: &Visited,
    depth: u32,
    hooks: &Hooks<M>,
) -> Option<Vec<usize>>
where
    M: Model,
    M::State: Hash,
    M::Action: Clone,
{
    let actors: Vec<(u32, bool)> = actions
        .iter()
        .map(|action| {
            (
                (independence.actor)(model, action),
                (independence.safe)(model, state, action),
            )
        })
        .collect();
    let mut candidates: Vec<u32> = actors.iter().map(|(actor, _)| *actor).collect();
    candidates.dedup();
    for actor in candidates {
        let mine: Vec<usize> = (0..actions.len())
            .filter(|index| actors[*index].0 == actor)
            .collect();
        if mine.len() == actions.len() {
            return None;
        }
        if !mine.iter().all(|index| actors[*index].1) {
            continue;
        }
        let closes_a_cycle = mine.iter().any(|index| {
            model
                .next_state(state, actions[*index].clone())
                .filter(|next| model.within_boundary(next))
                .is_some_and(|next| {
                    visited
                        .depth(hooks.key(model, &next))
                        .is_some_and(|visited_depth| visited_depth <= depth as usize)
                })
        });
        return (!closes_a_cycle).then_some(mine);
    }
    None
}

/// Breadth-first search for the first state matching each target.
pub(crate) fn search<M>(
    model: &M,
    targets: &[Target<M>],
    limits: &Limits,
    hooks: &Hooks<M>,
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
    let encoded = hooks.codec.is_some();
    let block_bytes = frontier_block_bytes(options);
    let (initial, visited, parents, first) = first_level(model, hooks, block_bytes);
    let level = first_frontier(hooks, first, block_bytes);
    let mut levels = Levels {
        options,
        threads,
        interval: Duration::from_millis(options.progress_interval_millis.max(10)),
        started,
        last_progress: started,
        encoded,
        block_bytes,
        spill: spill_of(options),
        states_per_depth: vec![level.len()],
        level,
        next_level: Frontier::new(encoded, block_bytes),
        found: vec![None; targets.len()],
        visited,
        parents,
        generated: initial.len(),
        stopped: None,
        all_found: targets.is_empty() && limits.stop_when_all_found,
        cut_short: false,
        expansions: (0..threads).map(|_| Expansion::new()).collect(),
        shard_level: None,
    };
    levels.run(model, targets, limits, hooks, progress);
    assert_eq!(
        levels.parents.len(),
        levels.visited.len(),
        "every visited state has exactly one record in the parent log"
    );
    let exhausted = !levels.cut_short && levels.level.is_empty();
    Searched {
        found: levels.found,
        generated: levels.generated,
        states_per_depth: levels.states_per_depth,
        coverage: merged_coverage(levels.expansions),
        exhausted,
        shard_level: levels.shard_level,
        stopped: levels.stopped,
        initial,
        visited: levels.visited,
        parents: levels.parents,
        disk_bytes_max: options.disk_bytes_max,
        spilled_bytes: levels.spill.as_ref().map_or(0, |spill| spill.spilled_bytes),
        representative: hooks.representative,
    }
}

/// The search's state from level to level: the level being examined and the next one, what is
/// visited and found, and why the search stopped.
struct Levels<'a, M: Model> {
    options: &'a CheckOptions,
    threads: usize,
    interval: Duration,
    started: Instant,
    last_progress: Instant,
    encoded: bool,
    block_bytes: usize,
    spill: Option<Spill>,
    level: Frontier<M::State>,
    next_level: Frontier<M::State>,
    states_per_depth: Vec<usize>,
    found: Vec<Option<u64>>,
    visited: Visited,
    parents: ParentLog,
    generated: usize,
    stopped: Option<Stop>,
    all_found: bool,
    /// Set when the search ends with states left to examine (all found, or a limit).
    cut_short: bool,
    /// Reused from chunk to chunk and level to level (see `expand` for why).
    expansions: Vec<Expansion<M>>,
    shard_level: Option<usize>,
}

impl<M> Levels<'_, M>
where
    M: Model + Sync,
    M::State: Clone + Hash + Send + Sync,
    M::Action: Clone + std::fmt::Debug + Send,
{
    /// Examines level after level, chunk by chunk, until the space is exhausted, every target
    /// is found, or a limit stops the search.
    fn run(
        &mut self,
        model: &M,
        targets: &[Target<M>],
        limits: &Limits,
        hooks: &Hooks<M>,
        progress: &mut dyn FnMut(Progress),
    ) {
        'levels: while !self.level.is_empty() && !self.all_found {
            if let Some(shard) = self.options.shard.filter(|shard| {
                self.shard_level.is_none()
                    && self.level.len() >= SHARD_LEVEL_STATES_MIN * shard.count
            }) {
                match keep_shard(
                    &mut self.level,
                    shard,
                    self.encoded,
                    self.block_bytes,
                    self.options,
                    &mut self.spill,
                ) {
                    Ok(kept) => self.level = kept,
                    Err(stop) => {
                        self.stopped = Some(stop);
                        self.cut_short = true;
                        break 'levels;
                    }
                }
                self.shard_level = Some(self.states_per_depth.len() - 1);
            }
            while !self.level.is_empty() {
                if let Err(stop) = self.expand_chunk(model, targets, hooks) {
                    self.stopped = Some(stop);
                    self.cut_short = true;
                    break 'levels;
                }
                self.all_found =
                    limits.stop_when_all_found && self.found.iter().all(Option::is_some);
                self.report_progress(progress);
                if self.all_found {
                    break;
                }
                self.stopped = self.limit_or_spill();
                if self.stopped.is_some() {
                    break;
                }
            }
            if !self.next_level.is_empty() {
                self.states_per_depth.push(self.next_level.len());
            }
            if self.all_found || self.stopped.is_some() {
                self.cut_short = true;
                break;
            }
            std::mem::swap(&mut self.level, &mut self.next_level);
        }
    }

    /// Takes the next chunk off the level, expands it on the threads and takes the successors
    /// in; `Err` when the frontier's disk failed.
    fn expand_chunk(
        &mut self,
        model: &M,
        targets: &[Target<M>],
        hooks: &Hooks<M>,
    ) -> Result<(), Stop> {
        let (used, part_size) = chunk_parts(self.level.len(), self.threads);
        take_parts(
            &mut self.level,
            &mut self.expansions[..used],
            part_size,
            &mut self.spill,
        )
        .map_err(|failure| disk_stop(failure, self.options, self.spill.as_ref()))?;
        let open: Vec<bool> = self.found.iter().map(Option::is_none).collect();
        let depth = (self.states_per_depth.len() - 1) as u32;
        expand_parts(
            model,
            targets,
            &open,
            &self.visited,
            hooks,
            depth,
            &mut self.expansions[..used],
        );
        let next_depth = self.states_per_depth.len() as u32;
        for expansion in &mut self.expansions[..used] {
            let absorbed = absorb(
                expansion,
                &mut self.found,
                &mut self.visited,
                &mut self.parents,
                &mut self.next_level,
                next_depth,
                self.encoded,
            );
            if let Err(failure) = absorbed {
                return Err(disk_stop(failure, self.options, self.spill.as_ref()));
            }
            self.generated += expansion.generated;
        }
        Ok(())
    }

    fn report_progress(&mut self, progress: &mut dyn FnMut(Progress)) {
        let now = Instant::now();
        if now.duration_since(self.last_progress) >= self.interval {
            self.last_progress = now;
            progress(Progress {
                states: self.generated,
                unique_states: self.visited.len(),
                max_depth: self.states_per_depth.len() - 1
                    + usize::from(!self.next_level.is_empty()),
                elapsed: now.duration_since(self.started),
                deciding: None,
            });
        }
    }

    /// The stop a limit calls for before the next chunk, once the frontier has spilled what it
    /// could.
    fn limit_or_spill(&mut self) -> Option<Stop> {
        let growth_bytes = growth_bytes(
            &self.visited,
            &self.parents,
            self.threads,
            self.encoded,
            self.block_bytes,
            &self.next_level,
        );
        let stopped = limit_reached(
            self.options,
            self.visited.len(),
            growth_bytes as u64,
            self.started,
        );
        spill_if_tight(
            self.options,
            stopped,
            self.block_bytes,
            &mut self.level,
            &mut self.next_level,
            &mut self.parents,
            &mut self.spill,
        )
    }
}

/// The first level as a frontier: the initial states, encoded when the model has a codec.
fn first_frontier<M: Model>(
    hooks: &Hooks<M>,
    first: impl IntoIterator<Item = (M::State, u64)>,
    block_bytes: usize,
) -> Frontier<M::State> {
    let mut level: Frontier<M::State> = Frontier::new(hooks.codec.is_some(), block_bytes);
    let mut encoded_state = Vec::new();
    let mut record = Vec::new();
    for (state, state_fingerprint) in first {
        push_state_or_record(
            &mut level,
            hooks.codec.as_ref(),
            state,
            state_fingerprint,
            &mut encoded_state,
            &mut record,
        );
    }
    level
}

/// Splits `level`: the states shard `shard` owns. The states of other shards stay visited, so
/// no path through them is explored here; every state below the level is reached through some
/// state of it, and so by some shard.
fn keep_shard<S>(
    level: &mut Frontier<S>,
    shard: Shard,
    encoded: bool,
    block_bytes: usize,
    options: &CheckOptions,
    spill: &mut Option<Spill>,
) -> Result<Frontier<S>, Stop> {
    let mut kept: Frontier<S> = Frontier::new(encoded, block_bytes);
    let mut part = Part::new();
    while !level.is_empty() {
        let taken = level
            .take(CHUNK_STATES_PER_THREAD, &mut part, spill.as_mut())
            .map_err(|failure| disk_stop(failure, options, spill.as_ref()))
            .and_then(|_| {
                part.retain_into(&mut kept, |fingerprint| shard.owns(fingerprint))
                    .map_err(|_| disk_stop(SpillFailure::Damaged, options, spill.as_ref()))
            });
        taken?;
    }
    Ok(kept)
}

/// Expands every part, each on a thread of its own (the first on this one).
fn expand_parts<M>(
    model: &M,
    targets: &[Target<M>],
    open: &[bool],
    visited: &Visited,
    hooks: &Hooks<M>,
    depth: u32,
    expansions: &mut [Expansion<M>],
) where
    M: Model + Sync,
    M::State: Clone + Hash + Send + Sync,
    M::Action: Clone + std::fmt::Debug + Send,
{
    let used = expansions.len();
    if used == 1 {
        expand(
            model,
            targets,
            open,
            visited,
            hooks,
            depth,
            &mut expansions[0],
        );
    } else {
        std::thread::scope(|scope| {
            let (first, others) = expansions.split_first_mut().expect("one part");
            let handles: Vec<_> = others
                .iter_mut()
                .map(|expansion| {
                    scope.spawn(move || {
                        expand(model, targets, open, visited, hooks, depth, expansion)
                    })
                })
                .collect();
            expand(model, targets, open, visited, hooks, depth, first);
            for handle in handles {
                handle.join().expect("a checker thread panicked");
            }
        });
    }
}

/// Takes one thread's expansion in: its first matches, and its successors not visited yet,
/// which join the next level at `next_depth`. `Err` when the part it read back was damaged.
fn absorb<M: Model>(
    expansion: &mut Expansion<M>,
    found: &mut [Option<u64>],
    visited: &mut Visited,
    parents: &mut ParentLog,
    next_level: &mut Frontier<M::State>,
    next_depth: u32,
    encoded: bool,
) -> Result<(), SpillFailure> {
    if expansion.damaged.take().is_some() {
        return Err(SpillFailure::Damaged);
    }
    for (index, first) in expansion.first_match.iter().enumerate() {
        if found[index].is_none() {
            found[index] = *first;
        }
    }
    let mut states = expansion.successor_states.drain(..);
    let mut start = 0;
    for &(state_fingerprint, parent, action, end) in &expansion.successors {
        let state = if encoded { None } else { states.next() };
        if visited.insert_if_absent(state_fingerprint, next_depth as usize) {
            parents.append(state_fingerprint, Parent::step(parent, action as usize));
            match state {
                Some(state) => next_level.push_state(state, state_fingerprint),
                None => next_level.push_record(&expansion.records[start..end]),
            }
        }
        start = end;
    }
    Ok(())
}

/// The frontier's block size: blocks small enough that a budget holds several, large enough
/// that glibc maps each on its own (above its largest mmap threshold) and gives it back to the
/// system when freed.
fn frontier_block_bytes(options: &CheckOptions) -> usize {
    options
        .frontier_bytes_max
        .map_or(FRONTIER_BLOCK_BYTES_MAX, |max| {
            (max / 8).clamp(
                FRONTIER_BLOCK_BYTES_MIN as u64,
                FRONTIER_BLOCK_BYTES_MAX as u64,
            ) as usize
        })
}

/// Where the frontier and the parent log spill, when a store is configured (a frontier of
/// plain states never spills: it has no bytes to write).
pub(crate) fn spill_of(options: &CheckOptions) -> Option<Spill> {
    options.spill.as_ref().map(|store| Spill {
        store: store.clone(),
        disk_bytes_max: options.disk_bytes_max,
        spilled_bytes: 0,
    })
}

/// Takes a part of `part_size` states (fewer at the level's end) off the level for each
/// expansion.
fn take_parts<M: Model>(
    level: &mut Frontier<M::State>,
    expansions: &mut [Expansion<M>],
    part_size: usize,
    spill: &mut Option<Spill>,
) -> Result<(), SpillFailure> {
    for expansion in expansions {
        level.take(
            part_size.min(level.len()),
            &mut expansion.part,
            spill.as_mut(),
        )?;
    }
    Ok(())
}

/// What the next chunk may allocate at once: it may double the visited map or the next level's
/// vector, and start a block of the parent log; that allocation is counted before it happens,
/// so the limit is not overshot by a doubling.
fn growth_bytes<S>(
    visited: &Visited,
    parents: &ParentLog,
    threads: usize,
    encoded: bool,
    block_bytes: usize,
    next_level: &Frontier<S>,
) -> usize {
    // The states a chunk may add, as the search has always counted them: 8 new successors per
    // expanded state (more than the models enable on average).
    let new_states_max = CHUNK_STATES_PER_THREAD * threads * 8;
    let mut growth_bytes = visited.growth_bytes(new_states_max) + parents.growth_bytes();
    growth_bytes += if encoded {
        block_bytes
    } else {
        next_level.len() * std::mem::size_of::<(S, u64)>()
    };
    growth_bytes
}

/// Near the memory limit (`stopped` says so), or past the frontier's own budget, the parent
/// log's full blocks and the frontier go to disk (the log first: the search never reads it;
/// then the newest states: they are read last); only what cannot be spilled (the visited
/// fingerprints, the blocks being read and written) stops the run. Answers the stop that stands
/// after spilling.
fn spill_if_tight<S>(
    options: &CheckOptions,
    mut stopped: Option<Stop>,
    block_bytes: usize,
    level: &mut Frontier<S>,
    next_level: &mut Frontier<S>,
    parents: &mut ParentLog,
    spill: &mut Option<Spill>,
) -> Option<Stop> {
    let in_memory = level.memory_bytes() + next_level.memory_bytes() + parents.spillable_bytes();
    let over_budget = options
        .frontier_bytes_max
        .is_some_and(|max| in_memory as u64 > max);
    let spillable = in_memory > 2 * block_bytes;
    let memory_tight = matches!(stopped, Some(Stop::Memory { .. })) && spillable;
    if let Some(spill) = spill.as_mut().filter(|_| over_budget || memory_tight) {
        let spilled = parents
            .spill(spill)
            .and_then(|_| next_level.spill(spill))
            .and_then(|_| level.spill(spill));
        match spilled {
            Ok(_) if memory_tight => stopped = None,
            Ok(_) => {}
            Err(failure) => stopped = Some(disk_stop(failure, options, Some(spill))),
        }
    }
    stopped
}

/// How the next chunk is cut: the threads used and the states each takes. Chunks are taken off
/// the level, so each examined state's memory is freed before the next chunk: a level and the
/// next one are never both whole in memory.
fn chunk_parts(level_len: usize, threads: usize) -> (usize, usize) {
    let take = level_len.min(CHUNK_STATES_PER_THREAD * threads);
    let used = if threads == 1 || take < 2 * threads {
        1
    } else {
        threads
    };
    (used, take.div_ceil(used))
}

/// The action coverage of all threads together.
fn merged_coverage<M: Model>(expansions: Vec<Expansion<M>>) -> BTreeMap<String, usize>
where
    M::Action: std::fmt::Debug,
{
    let mut coverage = Coverage::new();
    for expansion in expansions {
        coverage.merge(expansion.coverage);
    }
    coverage.into_map()
}

/// The stop a failed spill or read-back means: the disk limit, or the store's error.
fn disk_stop(failure: SpillFailure, options: &CheckOptions, spill: Option<&Spill>) -> Stop {
    let spilled_bytes = spill.map_or(0, |spill| spill.spilled_bytes);
    disk_stop_at(failure, options.disk_bytes_max, spilled_bytes)
}

pub(crate) fn disk_stop_at(
    failure: SpillFailure,
    disk_bytes_max: Option<u64>,
    spilled_bytes: u64,
) -> Stop {
    match failure {
        SpillFailure::Limit => Stop::Disk {
            disk_bytes_max,
            spilled_bytes,
            os_error: None,
        },
        SpillFailure::Io(error) => Stop::Disk {
            disk_bytes_max,
            spilled_bytes,
            // Every I/O error is one a caller can act on: an OS error's number names it (28:
            // no space left on the device); another (a store's own) is reported as -1.
            os_error: Some(error.raw_os_error().unwrap_or(-1)),
        },
        // Bytes this process wrote came back otherwise: the store's own failure.
        SpillFailure::Damaged => Stop::Disk {
            disk_bytes_max,
            spilled_bytes,
            os_error: Some(-1),
        },
    }
}

/// The first limit of `options` the run has reached, if any: memory (what the probe measures
/// plus `growth_bytes`, an allocation the run is about to make), then states, then time.
pub(crate) fn limit_reached(
    options: &CheckOptions,
    unique_states: usize,
    growth_bytes: u64,
    started: Instant,
) -> Option<Stop> {
    if let (Some(memory_bytes_max), Some(probe)) = (options.memory_bytes_max, options.memory_probe)
    {
        if let Some(resident_bytes) = probe() {
            if resident_bytes.saturating_add(growth_bytes) >= memory_bytes_max {
                return Some(Stop::Memory {
                    memory_bytes_max,
                    resident_bytes,
                    growth_bytes,
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
