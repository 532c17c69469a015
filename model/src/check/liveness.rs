//! Liveness under weak fairness: `eventually goal` and `trigger leads to goal`, decided over the
//! whole reachable graph ([`super::LivenessDef`]).
//!
//! A fair run is an infinite sequence of steps from an initial state in which every family the
//! property assumes fair that stays enabled from some point on is taken again and again; a run
//! may also stop (stutter forever) in a state where no such family is enabled — a deadlock is the
//! case where nothing at all is enabled. A property is violated when some fair run never reaches
//! the goal (`eventually`), or reaches a trigger state and never reaches the goal after it
//! (`leads-to`). The counterexample is a **lasso** — the shortest prefix from an initial state to
//! a state of a fair cycle, then the cycle — or, when the run stops, the shortest path to the
//! state where it stops.
//!
//! The algorithm, one exploration and then per property a few linear passes:
//! 1. One breadth-first exploration stores the reachable graph compactly: states as `u32`
//!    indices in discovery order (fingerprint -> index), edges in compressed rows (target index
//!    and the family of the step), per state the set of enabled families (from the unreduced
//!    actions when the model prunes interleavings, [`super::ModelSpec::unreduced_actions`]), the
//!    families a bound withholds there ([`super::ModelSpec::families_cut`], and any step leaving
//!    `within_boundary`), and two bits per property: trigger and goal. Threads expand parts of
//!    a chunk of a level: each looks its successors up in the index as it was before the chunk
//!    and encodes only those it did not find, so taking a part in (serial, in chunk order) is
//!    mostly appending indices.
//!    Given the safety properties' targets ([`check`]'s `targets`), the same exploration is the
//!    safety search ([`SafetyFound`]): states are examined in its order, so the first state
//!    matching a target is the one it finds, and the path through each state's first
//!    discoverer (one `u32` a state) is the one it rebuilds. `super::run_with_paths` uses it
//!    whenever the liveness graph is the safety search's graph, so the reachable graph is
//!    expanded once instead of twice.
//! 2. Per property, the states that avoid the goal (a state where a bound withholds one of the
//!    property's fair families counts as reaching the goal: the run is cut there) are split into
//!    strongly connected components by Pearce's iterative search (Tarjan's, with one number per
//!    state instead of three). A component is fair when it has a cycle (two states or a
//!    self-loop) and every fair family is disabled at one of its states or labels one of its
//!    inner edges; a goal-avoiding state where no fair family is enabled is a stop. The search
//!    completes components after everything they reach, so "reaches a fair component or a stop
//!    through goal-avoiding states" is known for each component as it is completed.
//! 3. The counterexample is found by a breadth-first search over (state, phase): phase 0 walks the
//!    whole graph until a trigger state from which a violation is reachable (for `eventually` the
//!    initial states are the triggers), phase 1 walks goal-avoiding states only until a fair
//!    component or a stop; the cycle then runs from the state entered through one witness per
//!    fair family (a state where it is disabled, or an edge it labels), each reached by the
//!    shortest path inside the component, and back. States are rebuilt by re-executing the steps
//!    from the initial state, each checked against its fingerprint and family.
//!
//! Under `--symmetry` the graph is a quotient: for a model whose families are roles
//! (`Scale::liveness_symmetry`) a quotient lasso is lifted to the model's states ([`lift`]); for
//! one whose families are per actor (`Scale::actor_families`) states and edges are recorded in
//! the representative's slots, each edge with its renaming, and components are judged and
//! cycles found as [`actors`] describes.
//!
//! Invariants: deterministic — threads only expand a chunk of a level, merged in chunk order, and
//! every later pass is sequential in index order, so verdicts, counts and lassos are the same
//! for any `--threads` and whether or not the edges spilled; a verdict needs the whole graph: a
//! run stopped by `states_max`, `memory_bytes_max`, the disk (`disk_bytes_max`, or spilled
//! edges that cannot be read back) or the time limit leaves every liveness property `unknown`.
//! The symmetry declarations a quotient rests on are checked at every expanded state in a build
//! with debug assertions (every test) and at one orbit in
//! [`DECLARATION_CHECK_ORBITS_PER_SAMPLE`] otherwise: the check expands the representative once
//! more.
//!
//! Cost and limits: about 20 bytes per state while exploring (the index's 4-byte slot in 256
//! shards, which points into the fingerprints, at most three quarters full: index.rs;
//! fingerprint 8, row start 4, the index of its label 2: the enabled and cut family sets and
//! property bits, interned, labels.rs; the first discoverer 4 more when it decides the safety
//! properties too, freed once their paths are rebuilt) plus 5 bytes per edge (target 4, family
//! 1; 2 more on a per-actor quotient, the index of its renaming), kept in blocks that go to the
//! run's spill store past the frontier's budget or when the memory limit nears, and are read
//! back by row (edges.rs). The analysis of one property adds about 5 bytes per state (the
//! search's one number, four flags in bits: bits.rs) and its stacks, 4 bytes per waiting state
//! and 12 per state on the search's path; the shortest counterexample's search, about 20 bytes per
//! state more, runs only when some state can reach a violation. States are held only for the
//! current and the next level, as encoded records in blocks when the model has a codec
//! (`Scale::codec`, check/frontier.rs), else whole; encoded blocks spill as the edges do.
//! At most [`FAMILIES_MAX`] families per model, [`PROPERTIES_MAX`] liveness properties per model
//! and `u32::MAX / 2` states (the component search numbers states and components in one `u32`).

use super::frontier::SpillFailure;
use super::frontier::{push_state_or_record, put_record, Frontier, Part, StateCodec};
use super::scale::{identity_renaming, ActorFamilies, Renaming, Representative, ACTOR_SLOTS_MAX};
use super::search::{disk_stop_at, fingerprint, key_of, limit_reached, spill_of, Coverage, Target};
use super::{CheckOptions, LivenessDef, ModelPath, ModelSpec, Progress, Stop};
use bits::Bits;
use edges::{Edge, Edges, EDGE_BLOCK_BYTES};
use index::StateIndex;
use labels::{Label, Labels};
use stateright::Model;
use std::collections::{BTreeMap, VecDeque};
use std::fmt::Debug;
use std::hash::Hash;
use std::time::{Duration, Instant};

/// Families one model may name (a family set is a `u32`).
pub const FAMILIES_MAX: usize = 32;
/// Liveness properties one model may declare (two bits each in a `u32`).
pub const PROPERTIES_MAX: usize = 16;
/// Safety targets one exploration may decide alongside the liveness properties (a state's
/// matches are a `u64`); a model with more runs the safety search of its own.
pub const SAFETY_TARGETS_MAX: usize = 64;

/// The family of a step no run is obliged to take.
const UNFAIR: u8 = u8::MAX;
/// States expanded per thread between two checks of the limits.
const CHUNK_STATES_PER_THREAD: usize = 2048;
/// Bytes a state costs in the graph's per-state vectors besides its label's index (fingerprint,
/// row start), counted before they grow (see the module doc).
const STATE_VECTOR_BYTES: usize = 12;
/// The block size of an encoded level.
const LEVEL_BLOCK_BYTES: usize = 4 << 20;

/// What one liveness property came to.
pub(crate) struct Decided<M: Model> {
    /// The counterexample: the path, and for a lasso the index of the state the last state
    /// returns to. `None` when the property holds.
    pub violation: Option<(ModelPath<M>, Option<usize>)>,
    /// Goal-avoiding states counted as reaching the goal because a bound cut a fair family.
    pub bound_cut_states: usize,
}

/// The outcome of a liveness run over every property of a model.
pub(crate) struct Checked<M: Model> {
    /// Per property, in the order given; `None` when the graph was not explored completely.
    pub properties: Vec<Option<Decided<M>>>,
    pub unique_states: usize,
    pub edges: usize,
    pub stopped: Option<Stop>,
    pub seconds: f64,
    /// What the same exploration found for the safety targets it was given (see [`check`]).
    pub safety: SafetyFound<M>,
}

/// The safety search's findings, made by the liveness exploration: it visits the states in the
/// safety search's order (level by level, each level in the order its states were first
/// generated, actions in the model's order), so the first state matching a target is the one the
/// safety search finds, and the path to it through first discoverers is the path that search
/// rebuilds. Counted as that search counts.
pub(crate) struct SafetyFound<M: Model> {
    /// Per target, the path to the first state that matches it.
    pub found: Vec<Option<ModelPath<M>>>,
    /// Initial states within the boundary plus every step taken, repeats included.
    pub generated: usize,
    /// Unique states first reached at each depth; index 0 holds the initial states.
    pub states_per_depth: Vec<usize>,
    pub coverage: BTreeMap<String, usize>,
}

/// The reachable graph, compactly (see the module doc).
struct Graph {
    fingerprints: Vec<u64>,
    /// Edges of state `s` are `row_start[s]..row_start[s + 1]`.
    row_start: Vec<u32>,
    /// Each edge's target, family and (on a per-actor quotient) renaming, spilled past the
    /// memory budget (edges.rs).
    edges: Edges,
    /// Per state: the families enabled and cut there, and the properties' trigger and goal bits.
    labels: Labels,
    /// The number of initial states (they are indices `0..initial`).
    initial: usize,
    family_names: Vec<&'static str>,
    /// On a per-actor quotient (`Scale::actor_families`): families `0..slots` are the permuted
    /// actors' own, in slot order; 0 otherwise.
    slots: usize,
    /// On a per-actor quotient, an edge's annotation is the index here of how the step moves
    /// the actors, from the source representative's slots to the target's.
    renamings: actors::Interned<Renaming>,
    /// Per state, when the exploration decides safety targets too: the state whose step first
    /// reached it ([`UNSET`] for an initial state); empty otherwise.
    parents: Vec<u32>,
}

impl Graph {
    fn edges(&self, state: u32) -> std::ops::Range<usize> {
        self.row_start[state as usize] as usize..self.row_start[state as usize + 1] as usize
    }

    /// The edges out of `state` into `row`.
    fn row(&self, state: u32, row: &mut Vec<Edge>) -> Result<(), SpillFailure> {
        self.edges.read(self.edges(state), row)
    }

    fn states(&self) -> usize {
        self.fingerprints.len()
    }

    fn enabled(&self, state: u32) -> u32 {
        self.labels.get(state as usize).enabled
    }

    fn cut(&self, state: u32) -> u32 {
        self.labels.get(state as usize).cut
    }

    /// Bit `2p`: property p's trigger holds at `state`; bit `2p + 1`: its goal holds.
    fn marks(&self, state: u32) -> u32 {
        self.labels.get(state as usize).marks
    }
}

/// The names a thread met, and the index each has in this thread.
#[derive(Default)]
struct LocalFamilies(Vec<&'static str>);

impl LocalFamilies {
    fn index(&mut self, name: &'static str) -> u8 {
        match self.0.iter().position(|known| *known == name) {
            Some(index) => index as u8,
            None => {
                assert!(
                    self.0.len() < FAMILIES_MAX,
                    "a model names more than {FAMILIES_MAX} fairness families"
                );
                self.0.push(name);
                (self.0.len() - 1) as u8
            }
        }
    }
}

/// What every thread reads while it expands a chunk: the liveness properties (trigger and goal),
/// the safety targets not yet matched (bit t of `open`: target t is), and the graph's index as
/// it was before the chunk.
struct Chunk<'a, M: Model> {
    definitions: &'a [LivenessDef<M>],
    targets: &'a [Target<M>],
    open: u64,
    index_of: &'a StateIndex,
    /// The graph's fingerprints, which the index's slots point into.
    fingerprints: &'a [u64],
}

/// One state as a thread expanded it; families are the thread's own indices.
struct Expanded {
    marks: u32,
    /// Bit t: the state matches safety target t (evaluated only for targets still open).
    matched: u64,
    enabled: u32,
    cut: u32,
    /// Its steps are the expansion's `steps` up to this one (from the previous state's end).
    steps_end: usize,
}

/// One step a thread took, in the model's action order.
struct Step {
    /// The successor's fingerprint (its representative's on a quotient).
    fingerprint: u64,
    /// The successor's index when the graph held it before the chunk; else [`UNSET`], and the
    /// successor waits in the expansion (its record ends at `record_end`, or it is the next of
    /// the expansion's states).
    known: u32,
    record_end: usize,
    family: u8,
    /// On a per-actor quotient how the step moves the actors (identity otherwise).
    moved: Renaming,
}

/// What one thread made of its part of a chunk. Its buffers are reused from chunk to chunk, and
/// each successor is encoded and dropped as soon as it is made, as the safety search does
/// (search.rs, `expand`): holding a chunk's states until it was absorbed made the allocator's
/// consolidation of its free lists a tenth of the run.
struct Expansion<M: Model> {
    part: Part<M::State>,
    codec: Option<StateCodec<M::State>>,
    out: Vec<Expanded>,
    steps: Vec<Step>,
    /// The records of the steps' new-looking successors, back to back (an encoded level).
    records: Vec<u8>,
    /// The new-looking successors in step order (a level of states).
    successor_states: Vec<M::State>,
    /// A state's encoding (a reused buffer).
    encoded: Vec<u8>,
    families: LocalFamilies,
    actions: Vec<M::Action>,
    unreduced: Vec<M::Action>,
    cut_names: Vec<&'static str>,
    /// The symmetry the graph is a quotient of, if any: states are known by their
    /// representative's fingerprint.
    representative: Option<Representative<M>>,
    /// The per-actor quotient's renamings (`Scale::actor_families`), if the graph is one.
    actors: Option<ActorFamilies<M>>,
    /// The permuted actors' families (indices `0..slots`) on a per-actor quotient, else 0.
    slots: usize,
    /// How often each kind of action took a step, over the whole run.
    coverage: Coverage<M::Action>,
}

impl<M: ModelSpec> Expansion<M>
where
    M::State: Clone + Debug + Hash + PartialEq + Send + Sync + 'static,
    M::Action: Clone + Debug + PartialEq + Send + Sync + 'static,
{
    fn new(
        representative: Option<Representative<M>>,
        actors: Option<ActorFamilies<M>>,
        slot_families: &[&'static str],
        codec: Option<StateCodec<M::State>>,
    ) -> Self {
        Expansion {
            part: Part::new(),
            codec,
            out: Vec::new(),
            steps: Vec::new(),
            records: Vec::new(),
            successor_states: Vec::new(),
            encoded: Vec::new(),
            // The permuted actors' families first, so a slot is its family's index everywhere.
            families: LocalFamilies(slot_families.to_vec()),
            actions: Vec::new(),
            unreduced: Vec::new(),
            cut_names: Vec::new(),
            representative,
            actors,
            slots: slot_families.len(),
            coverage: Coverage::new(),
        }
    }

    fn expand(&mut self, model: &M, chunk: &Chunk<M>) {
        self.out.clear();
        self.steps.clear();
        self.records.clear();
        self.successor_states.clear();
        let mut part = std::mem::replace(&mut self.part, Part::new());
        let codec = self.codec;
        part.drain(codec.as_ref(), |state, key| {
            self.expand_one(model, chunk, state, key)
        })
        .expect("a liveness level holds what the model's codec wrote");
        self.part = part;
    }

    fn expand_one(&mut self, model: &M, chunk: &Chunk<M>, state: M::State, key: u64) {
        let definitions = chunk.definitions;
        let slots = self.slots;
        // On a per-actor quotient everything is recorded in the representative's slots.
        let (own_representative, here) = match self.actors {
            Some(actors) => (actors.representative)(model, &state),
            None => (None, identity_renaming()),
        };
        let back = actors::inverse(&here);
        let mut marks = 0;
        for (index, def) in definitions.iter().enumerate() {
            let trigger = def.trigger.is_some_and(|trigger| trigger(model, &state));
            marks |= u32::from(trigger) << (2 * index);
            marks |= u32::from((def.goal)(model, &state)) << (2 * index + 1);
        }
        let mut matched = 0u64;
        for (index, target) in chunk.targets.iter().enumerate() {
            if chunk.open & 1 << index != 0 && (target.condition)(model, &state) == target.matching
            {
                matched |= 1 << index;
            }
        }
        let mut cut = 0u32;
        self.cut_names.clear();
        model.families_cut(&state, &mut self.cut_names);
        for name in &self.cut_names {
            cut |= 1 << self.families.index(name);
        }
        self.actions.clear();
        model.actions(&state, &mut self.actions);
        let mut enabled = 0u32;
        let steps_start = self.steps.len();
        for action in self.actions.drain(..) {
            let family = model
                .fairness(&action)
                .map_or(UNFAIR, |name| self.families.index(name));
            let slot = self.coverage.slot(&action);
            let Some(next) = model.next_state(&state, action) else {
                continue;
            };
            if family != UNFAIR {
                enabled |= 1 << family;
            }
            if !model.within_boundary(&next) {
                // The step exists but the boundary cuts it: the run is cut here.
                if family != UNFAIR {
                    cut |= 1 << family;
                }
                continue;
            }
            self.coverage.fired(slot);
            let (next_fingerprint, moved) = match self.actors {
                Some(actors) => {
                    let (next_representative, there) = (actors.representative)(model, &next);
                    let key = fingerprint(next_representative.as_ref().unwrap_or(&next));
                    (key, actors::compose(&there, &back))
                }
                None => (
                    key_of(self.representative, model, &next),
                    identity_renaming(),
                ),
            };
            let known = chunk
                .index_of
                .get(chunk.fingerprints, next_fingerprint)
                .unwrap_or(UNSET);
            if known == UNSET {
                match &self.codec {
                    Some(codec) => {
                        self.encoded.clear();
                        (codec.encode)(&next, &mut self.encoded).unwrap_or_else(|error| {
                            panic!("a state that does not encode: {error}")
                        });
                        put_record(&mut self.records, next_fingerprint, &self.encoded);
                    }
                    None => self.successor_states.push(next),
                }
            }
            self.steps.push(Step {
                fingerprint: next_fingerprint,
                known,
                record_end: self.records.len(),
                family,
                moved,
            });
        }
        self.unreduced.clear();
        if model.unreduced_actions(&state, &mut self.unreduced) {
            enabled = 0;
            for action in self.unreduced.drain(..) {
                if let Some(name) = model.fairness(&action) {
                    enabled |= 1 << self.families.index(name);
                }
            }
        }
        if self.actors.is_some() {
            enabled = actors::rename_set(enabled, &here, slots);
            cut = actors::rename_set(cut, &here, slots);
            for step in &mut self.steps[steps_start..] {
                if usize::from(step.family) < slots {
                    step.family = here[usize::from(step.family)];
                }
            }
            if let Some(other) = own_representative
                .as_ref()
                .filter(|_| declaration_checked(key))
            {
                assert_eq!(
                        enabled_families(&mut self.families, model, other),
                        enabled,
                        "the liveness search on a per-actor quotient: a state's enabled families, renamed, are not its representative's (Scale::actor_families is declared wrongly)"
                    );
            }
        } else if declaration_checked(key) {
            assert_fairness_symmetric(
                self.representative,
                &mut self.families,
                model,
                &state,
                enabled,
            );
        }
        self.out.push(Expanded {
            marks,
            matched,
            enabled,
            cut,
            steps_end: self.steps.len(),
        });
    }
}

/// One orbit in this many (by its fingerprint) has the symmetry declarations checked below in a
/// build without debug assertions; every orbit in one with them (every test). A check expands
/// the state's representative once more: on every state it cost a tenth of a 3-writer relay run.
const DECLARATION_CHECK_ORBITS_PER_SAMPLE: u64 = 8;

/// Whether the orbit known by `key` has its symmetry declarations checked (see above).
fn declaration_checked(key: u64) -> bool {
    cfg!(debug_assertions) || key.is_multiple_of(DECLARATION_CHECK_ORBITS_PER_SAMPLE)
}

/// The quotient is sound for liveness only when every permutation maps each fairness family
/// onto itself (`Scale::liveness_symmetry`): a state and its representative must then enable
/// the same families. A model that declares it wrongly fails here, at the first state that
/// shows it, instead of deciding a property on a graph that is not its own.
fn assert_fairness_symmetric<M>(
    representative: Option<Representative<M>>,
    families: &mut LocalFamilies,
    model: &M,
    state: &M::State,
    enabled: u32,
) where
    M: ModelSpec,
    M::State: Clone + Debug + Hash + PartialEq + Send + Sync + 'static,
    M::Action: Clone + Debug + PartialEq + Send + Sync + 'static,
{
    let Some(other) = representative.and_then(|representative| representative(model, state)) else {
        return;
    };
    let other_enabled = enabled_families(families, model, &other);
    assert_eq!(
            enabled, other_enabled,
            "the liveness search under symmetry: a state and its representative enable different fairness families, so the model's families are not invariant under its symmetry (Scale::liveness_symmetry is declared wrongly)"
        );
}

/// The families `state` enables, as `expand` counts them: from its unreduced actions when the
/// model prunes interleavings there, else from the actions that take a step.
fn enabled_families<M>(families: &mut LocalFamilies, model: &M, state: &M::State) -> u32
where
    M: ModelSpec,
    M::State: Clone + Debug + Hash + PartialEq + Send + Sync + 'static,
    M::Action: Clone + Debug + PartialEq + Send + Sync + 'static,
{
    let mut enabled = 0u32;
    let mut actions = Vec::new();
    if model.unreduced_actions(state, &mut actions) {
        for action in &actions {
            if let Some(name) = model.fairness(action) {
                enabled |= 1 << families.index(name);
            }
        }
        return enabled;
    }
    actions.clear();
    model.actions(state, &mut actions);
    for action in actions {
        let Some(name) = model.fairness(&action) else {
            continue;
        };
        let family = families.index(name);
        if model.next_state(state, action).is_some() {
            enabled |= 1 << family;
        }
    }
    enabled
}

/// Maps a thread's family set onto the global indices.
fn translate(set: u32, table: &[u8]) -> u32 {
    let mut global = 0;
    let mut rest = set;
    while rest != 0 {
        let local = rest.trailing_zeros() as usize;
        global |= 1 << table[local];
        rest &= rest - 1;
    }
    global
}

/// Expands every part, each on a thread of its own (the first on this one).
fn expand_parts<M>(model: &M, chunk: &Chunk<M>, expansions: &mut [Expansion<M>])
where
    M: ModelSpec,
    M::State: Clone + Debug + Hash + PartialEq + Send + Sync + 'static,
    M::Action: Clone + Debug + PartialEq + Send + Sync + 'static,
{
    let used = expansions.len();
    if used == 1 {
        expansions[0].expand(model, chunk);
    } else {
        std::thread::scope(|scope| {
            let (first, others) = expansions.split_first_mut().expect("one part");
            let handles: Vec<_> = others
                .iter_mut()
                .map(|expansion| scope.spawn(move || expansion.expand(model, chunk)))
                .collect();
            first.expand(model, chunk);
            for handle in handles {
                handle.join().expect("a liveness thread panicked");
            }
        });
    }
}

/// Adds the states one thread expanded to the graph: their marks, enabled and cut families
/// (translated to the global family indices) and edges; successors seen for the first time get
/// an index and join the next level. The parts are absorbed in order, so the state absorbed is
/// the one with the next row: the first match of a target is the state of the lowest index that
/// matches it, and a new successor's parent is the first state with a step to it.
fn absorb<M: Model>(
    graph: &mut Graph,
    index_of: &mut StateIndex,
    next_level: &mut Frontier<M::State>,
    expansion: &mut Expansion<M>,
    found: &mut [Option<u32>],
) {
    let table: Vec<u8> = expansion
        .families
        .0
        .iter()
        .map(
            |name| match graph.family_names.iter().position(|known| known == name) {
                Some(index) => index as u8,
                None => {
                    graph.family_names.push(name);
                    assert!(
                        graph.family_names.len() <= FAMILIES_MAX,
                        "a model names more than {FAMILIES_MAX} fairness families"
                    );
                    (graph.family_names.len() - 1) as u8
                }
            },
        )
        .collect();
    let per_actor = graph.slots > 0;
    let track_parents = !found.is_empty();
    let codec_used = expansion.codec.is_some();
    let Expansion {
        out,
        steps,
        records,
        successor_states,
        ..
    } = expansion;
    let mut states = successor_states.drain(..);
    let mut record_start = 0;
    let mut step_index = 0;
    // Steps in a row mostly move the actors alike: the last interned renaming is looked up first.
    let mut last_moved = (identity_renaming(), 0u16);
    let mut annotation = 0;
    for expanded in out.drain(..) {
        let current = graph.labels.len() as u32;
        let mut matched = expanded.matched;
        while matched != 0 {
            let target = matched.trailing_zeros() as usize;
            found[target].get_or_insert(current);
            matched &= matched - 1;
        }
        graph.labels.push(Label {
            enabled: translate(expanded.enabled, &table),
            cut: translate(expanded.cut, &table),
            marks: expanded.marks,
        });
        for step in &steps[step_index..expanded.steps_end] {
            if per_actor {
                if step.moved != last_moved.0 {
                    last_moved = (step.moved, graph.renamings.index(step.moved));
                }
                annotation = last_moved.1;
            }
            let target = if step.known != UNSET {
                step.known
            } else {
                let index = graph.fingerprints.len();
                assert!(
                    index < u32::MAX as usize,
                    "more than {} states: beyond the liveness graph's indices",
                    u32::MAX - 1
                );
                let (target, new) =
                    index_of.index_or_insert(&graph.fingerprints, step.fingerprint, index as u32);
                let state = if codec_used { None } else { states.next() };
                if new {
                    graph.fingerprints.push(step.fingerprint);
                    if track_parents {
                        graph.parents.push(current);
                    }
                    match state {
                        Some(state) => next_level.push_state(state, step.fingerprint),
                        None => next_level.push_record(&records[record_start..step.record_end]),
                    }
                }
                record_start = step.record_end;
                target
            };
            graph.edges.push(Edge {
                target,
                family: if step.family == UNFAIR {
                    UNFAIR
                } else {
                    table[step.family as usize]
                },
                annotation,
            });
        }
        step_index = expanded.steps_end;
        assert!(
            graph.edges.len() < u32::MAX as usize,
            "more than {} edges: beyond the liveness graph's indices",
            u32::MAX - 1
        );
        graph.row_start.push(graph.edges.len() as u32);
    }
}

/// An exploration: the graph (complete unless `stopped`), and what it found for the safety
/// targets (empty when it was given none).
struct Explored<A> {
    graph: Graph,
    stopped: Option<Stop>,
    /// Per target, the index of the first state that matches it.
    found: Vec<Option<u32>>,
    generated: usize,
    /// Bytes of edges in the spill store (for a disk stop while reading them back).
    spilled_bytes: u64,
    states_per_depth: Vec<usize>,
    coverage: Coverage<A>,
}

/// Explores the reachable graph (the quotient of the symmetry given, per actor when the actors'
/// renamings are given too), until a limit stops it.
fn explore<M>(
    model: &M,
    definitions: &[LivenessDef<M>],
    targets: &[Target<M>],
    (representative, actors): (Option<Representative<M>>, Option<ActorFamilies<M>>),
    options: &CheckOptions,
    started: Instant,
    progress: &mut dyn FnMut(Progress),
) -> Explored<M::Action>
where
    M: ModelSpec,
    M::State: Clone + Debug + Hash + PartialEq + Send + Sync + 'static,
    M::Action: Clone + Debug + PartialEq + Send + Sync + 'static,
{
    let threads = options.threads.max(1);
    let interval = Duration::from_millis(options.progress_interval_millis.max(10));
    let mut last_progress = Instant::now();
    let slot_families = actors.map_or_else(Vec::new, |actors| (actors.families)(model));
    assert!(
        slot_families.len() <= ACTOR_SLOTS_MAX,
        "a model permutes more than {ACTOR_SLOTS_MAX} actors with families of their own"
    );
    assert!(
        targets.len() <= SAFETY_TARGETS_MAX,
        "more than {SAFETY_TARGETS_MAX} safety targets for one exploration"
    );
    let codec = model.scale().codec;
    let mut spill = spill_of(options);
    // Small budgets (tests) spill small blocks; a run's blocks unmap when spilled.
    let edge_block_bytes = options
        .frontier_bytes_max
        .map_or(EDGE_BLOCK_BYTES, |budget| {
            EDGE_BLOCK_BYTES.min(usize::try_from(budget / 4).unwrap_or(usize::MAX))
        });
    let (mut graph, mut index_of, mut level, initial_generated) = initial_graph(
        model,
        representative,
        &slot_families,
        codec.as_ref(),
        edge_block_bytes,
    );
    if !targets.is_empty() {
        graph.parents = vec![UNSET; graph.states()];
    }
    let mut expansions: Vec<Expansion<M>> = (0..threads)
        .map(|_| Expansion::new(representative, actors, &slot_families, codec))
        .collect();
    let mut found: Vec<Option<u32>> = vec![None; targets.len()];
    let mut states_per_depth = vec![level.len()];
    let mut depth = 0;
    let mut stopped = None;
    let mut next_level: Frontier<M::State> = Frontier::new(codec.is_some(), LEVEL_BLOCK_BYTES);
    'levels: while !level.is_empty() {
        while !level.is_empty() {
            let take = level.len().min(CHUNK_STATES_PER_THREAD * threads);
            let used = if threads == 1 || take < 2 * threads {
                1
            } else {
                threads
            };
            let part_size = take.div_ceil(used);
            for expansion in &mut expansions[..used] {
                let part = part_size.min(level.len());
                if let Err(failure) = level.take(part, &mut expansion.part, spill.as_mut()) {
                    let spilled_bytes = spill.as_ref().map_or(0, |spill| spill.spilled_bytes);
                    stopped = Some(disk_stop_at(failure, options.disk_bytes_max, spilled_bytes));
                    break 'levels;
                }
            }
            let open = found
                .iter()
                .enumerate()
                .filter(|(_, first)| first.is_none())
                .fold(0u64, |open, (target, _)| open | 1 << target);
            let chunk = Chunk {
                definitions,
                targets,
                open,
                index_of: &index_of,
                fingerprints: &graph.fingerprints,
            };
            expand_parts(model, &chunk, &mut expansions[..used]);
            for expansion in &mut expansions[..used] {
                absorb(
                    &mut graph,
                    &mut index_of,
                    &mut next_level,
                    expansion,
                    &mut found,
                );
            }
            let now = Instant::now();
            if now.duration_since(last_progress) >= interval {
                last_progress = now;
                progress(Progress {
                    states: graph.edges.len(),
                    unique_states: graph.states(),
                    max_depth: depth + usize::from(!next_level.is_empty()),
                    elapsed: now.duration_since(started),
                    deciding: None,
                });
            }
            let growth_bytes = growth_bytes(&graph, &index_of, threads) as u64;
            let mut limit = limit_reached(options, graph.states(), growth_bytes, started);
            // Past their budget, or with the memory limit near, the full blocks of edges and the
            // levels' blocks go to the spill store; the limit is then measured again.
            if let Some(spill) = spill.as_mut() {
                let edge_bytes = graph.edges.spillable_bytes() as u64;
                let level_bytes = (level.memory_bytes() + next_level.memory_bytes()) as u64;
                let over = |bytes: u64| {
                    options
                        .frontier_bytes_max
                        .is_some_and(|budget| bytes > budget)
                };
                let memory_tight = matches!(limit, Some(Stop::Memory { .. }))
                    && (edge_bytes > 0 || level_bytes > 2 * LEVEL_BLOCK_BYTES as u64);
                let edges_go = memory_tight || over(edge_bytes);
                let levels_go = memory_tight || over(level_bytes);
                if edges_go || levels_go {
                    let mut spilled = Ok(());
                    if edges_go {
                        spilled = graph.edges.spill(spill);
                    }
                    if levels_go {
                        spilled = spilled
                            .and_then(|()| next_level.spill(spill))
                            .and_then(|_| level.spill(spill))
                            .map(drop);
                    }
                    if let Err(failure) = spilled {
                        stopped = Some(disk_stop_at(
                            failure,
                            spill.disk_bytes_max,
                            spill.spilled_bytes,
                        ));
                        break 'levels;
                    }
                    if memory_tight {
                        limit = limit_reached(options, graph.states(), growth_bytes, started);
                    }
                }
            }
            if let Some(stop) = limit {
                stopped = Some(stop);
                break 'levels;
            }
        }
        depth += 1;
        if !next_level.is_empty() {
            states_per_depth.push(next_level.len());
        }
        std::mem::swap(&mut level, &mut next_level);
    }
    if stopped.is_some() && !next_level.is_empty() {
        // The level being examined when the limit struck had already been counted.
        states_per_depth.push(next_level.len());
    }
    let mut coverage = Coverage::new();
    for expansion in expansions {
        coverage.merge(expansion.coverage);
    }
    Explored {
        generated: initial_generated + graph.edges.len(),
        spilled_bytes: spill.as_ref().map_or(0, |spill| spill.spilled_bytes),
        graph,
        stopped,
        found,
        states_per_depth,
        coverage,
    }
}

/// The graph holding the initial states within the boundary (each distinct one once, as
/// indices `0..initial`), the map from their fingerprints to indices, the first level, and how
/// many initial states are within the boundary (repeats included).
fn initial_graph<M>(
    model: &M,
    representative: Option<Representative<M>>,
    slot_families: &[&'static str],
    codec: Option<&StateCodec<M::State>>,
    edge_block_bytes: usize,
) -> (Graph, StateIndex, Frontier<M::State>, usize)
where
    M: ModelSpec,
    M::State: Clone + Debug + Hash + PartialEq + Send + Sync + 'static,
    M::Action: Clone + Debug + PartialEq + Send + Sync + 'static,
{
    let mut graph = Graph {
        fingerprints: Vec::new(),
        row_start: vec![0],
        edges: Edges::new(!slot_families.is_empty(), edge_block_bytes),
        labels: Labels::default(),
        initial: 0,
        family_names: slot_families.to_vec(),
        slots: slot_families.len(),
        renamings: actors::Interned::new(identity_renaming()),
        parents: Vec::new(),
    };
    let mut index_of = StateIndex::default();
    let mut within = 0;
    let mut level: Frontier<M::State> = Frontier::new(codec.is_some(), LEVEL_BLOCK_BYTES);
    let (mut encoded, mut record) = (Vec::new(), Vec::new());
    for state in model.init_states() {
        if !model.within_boundary(&state) {
            continue;
        }
        within += 1;
        let state_fingerprint = key_of(representative, model, &state);
        let next = graph.fingerprints.len() as u32;
        if index_of
            .index_or_insert(&graph.fingerprints, state_fingerprint, next)
            .1
        {
            graph.fingerprints.push(state_fingerprint);
            push_state_or_record(
                &mut level,
                codec,
                state,
                state_fingerprint,
                &mut encoded,
                &mut record,
            );
        }
    }
    graph.initial = graph.fingerprints.len();
    (graph, index_of, level, within)
}

/// What the next chunk may allocate at once: the doubling of the fingerprint map's shards, the
/// per-state vectors' room for the chunk's states, and the edges' next blocks, counted before it
/// happens, as the safety search counts its own.
fn growth_bytes(graph: &Graph, index_of: &StateIndex, threads: usize) -> usize {
    let headroom = CHUNK_STATES_PER_THREAD * threads * 16;
    let mut growth_bytes = index_of.growth_bytes(headroom);
    // The per-state vectors double by `realloc`, which moves a block this large by remapping
    // its pages (glibc's mremap): the new half costs memory only as the states are written,
    // so what the next chunk may add is its own states' bytes, not the doubled capacity (the
    // capacity counted, 1.2 GiB at 67 million states, stopped the lost-response bound's run).
    let parent_bytes = if graph.parents.is_empty() { 0 } else { 4 };
    let state_bytes = STATE_VECTOR_BYTES + graph.labels.bytes_per_state() + parent_bytes;
    growth_bytes += headroom * state_bytes;
    growth_bytes += graph.edges.growth_bytes(headroom * 8);
    growth_bytes
}

const UNSET: u32 = u32::MAX;

/// Per state of one property: whether it avoids the goal, can reach a violation through
/// goal-avoiding states (`bad`), is where a violation rests (`accept`: in a fair component, or a
/// stop), and its component.
struct Analysis {
    avoid: Bits,
    bad: Bits,
    accept: Bits,
    stop: Bits,
    /// Per goal-avoiding state, the id of its component (one id per component, counting down
    /// from [`FIRST_COMPONENT`]); 0 at the other states.
    component: Vec<u32>,
    bound_cut_states: usize,
}

/// The id of the first component the search completes. Ids count down from it and visit
/// numbers count up from 1, at most one per state, so with fewer than [`COMPONENT_STATES_MAX`]
/// states one array tells a state still searched (its visit number or low link) from a state
/// whose component is complete (its id).
const FIRST_COMPONENT: u32 = u32::MAX - 1;
/// States the component search handles (see [`FIRST_COMPONENT`]).
const COMPONENT_STATES_MAX: usize = (u32::MAX / 2) as usize;

/// Where component `id`'s flags sit in the per-component bit sets.
fn ordinal(id: u32) -> usize {
    (FIRST_COMPONENT - id) as usize
}

/// What judging a goal-avoiding component reads: the analysis so far.
struct Judged<'a> {
    avoid: &'a Bits,
    stop: &'a Bits,
    component: &'a [u32],
    component_bad: &'a Bits,
}

impl Judged<'_> {
    /// Whether the component `id` (its `members`) is fair (a cycle on which every family enabled
    /// everywhere is taken) and whether it is bad (fair, holding a stop, or reaching a bad
    /// component, all of which the search's order has judged already).
    fn judge(
        &self,
        graph: &Graph,
        members: &[u32],
        id: u32,
        fair: u32,
        row: &mut Vec<Edge>,
    ) -> Result<(bool, bool), SpillFailure> {
        let mut everywhere_enabled = fair;
        let mut taken = 0u32;
        let mut has_cycle = members.len() > 1;
        let mut reaches_bad = false;
        let mut any_stop = false;
        for &member in members {
            everywhere_enabled &= graph.enabled(member);
            any_stop |= self.stop.get(member as usize);
            graph.row(member, row)?;
            for &Edge { target, family, .. } in row.iter() {
                if !self.avoid.get(target as usize) {
                    continue;
                }
                if self.component[target as usize] == id {
                    has_cycle |= target == member;
                    if family != UNFAIR {
                        taken |= 1 << family;
                    }
                } else {
                    reaches_bad |= self
                        .component_bad
                        .get(ordinal(self.component[target as usize]));
                }
            }
        }
        let fair_component = if graph.slots == 0 {
            has_cycle && everywhere_enabled & !taken == 0
        } else {
            // The permuted actors' families are judged over the permutations the component's
            // cycles generate; the others as on the plain graph.
            let actor_families = (1u32 << graph.slots) - 1;
            has_cycle
                && everywhere_enabled & !taken & !actor_families == 0
                && actors::every_actor_served(
                    graph,
                    members,
                    |target| {
                        self.avoid.get(target as usize) && self.component[target as usize] == id
                    },
                    fair & actor_families,
                )?
        };
        Ok((fair_component, fair_component || any_stop || reaches_bad))
    }
}

/// A state the component search is inside: the next of its edges to follow, and whether no
/// edge from it or below it has yet reached a state visited before it (it roots a component).
struct Frame {
    state: u32,
    position: u32,
    root: bool,
}

fn analyse(graph: &Graph, property: usize, fair: u32) -> Result<Analysis, SpillFailure> {
    let states = graph.states();
    assert!(
        states < COMPONENT_STATES_MAX,
        "more than {COMPONENT_STATES_MAX} states: beyond the component search's numbering"
    );
    let goal_bit = 1 << (2 * property + 1);
    let mut bound_cut_states = 0;
    let avoid = Bits::from_fn(states, |state| {
        let goal = graph.marks(state as u32) & goal_bit != 0;
        let cut = graph.cut(state as u32) & fair != 0;
        if !goal && cut {
            bound_cut_states += 1;
        }
        !goal && !cut
    });
    let stop = Bits::from_fn(states, |state| {
        avoid.get(state) && graph.enabled(state as u32) & fair == 0
    });
    // Pearce's iterative search over the goal-avoiding subgraph ("A space-efficient algorithm
    // for finding strongly connected components", 2016): one number per state is its visit
    // number, then its low link, then its component's id; states whose component is open wait
    // on one stack, and a root's flag lives in its frame. Components complete after every
    // component they reach, as in Tarjan's.
    let mut rank = vec![0u32; states];
    let mut next_visit = 1u32;
    let mut next_component = FIRST_COMPONENT;
    let mut waiting: Vec<u32> = Vec::new();
    let mut calls: Vec<Frame> = Vec::new();
    let mut component_bad = Bits::unset(states);
    let mut component_fair = Bits::unset(states);
    let (mut row, mut judged_row) = (Vec::new(), Vec::new());
    let frame = |state: u32| Frame {
        state,
        position: graph.edges(state).start as u32,
        root: true,
    };
    for root in 0..states as u32 {
        if !avoid.get(root as usize) || rank[root as usize] != 0 {
            continue;
        }
        rank[root as usize] = next_visit;
        next_visit += 1;
        calls.push(frame(root));
        while let Some(top) = calls.last_mut() {
            let state = top.state;
            let end = graph.edges(state).end;
            graph.edges.read(top.position as usize..end, &mut row)?;
            let mut unvisited = None;
            for &Edge { target, .. } in &row {
                top.position += 1;
                if !avoid.get(target as usize) {
                    continue;
                }
                if rank[target as usize] == 0 {
                    unvisited = Some(target);
                    break;
                }
                // A complete component's id exceeds every number of a state still searched.
                if rank[target as usize] < rank[state as usize] {
                    rank[state as usize] = rank[target as usize];
                    top.root = false;
                }
            }
            if let Some(target) = unvisited {
                rank[target as usize] = next_visit;
                next_visit += 1;
                calls.push(frame(target));
                continue;
            }
            let done = calls.pop().expect("the search is inside a state");
            if done.root {
                // `state` roots a component: it and the waiting states numbered at or above it.
                let id = next_component;
                let mut first = waiting.len();
                while first > 0 && rank[state as usize] <= rank[waiting[first - 1] as usize] {
                    first -= 1;
                }
                waiting.push(state);
                for &member in &waiting[first..] {
                    rank[member as usize] = id;
                }
                next_visit -= (waiting.len() - first) as u32;
                let judged = Judged {
                    avoid: &avoid,
                    stop: &stop,
                    component: &rank,
                    component_bad: &component_bad,
                };
                let (fair_component, bad) =
                    judged.judge(graph, &waiting[first..], id, fair, &mut judged_row)?;
                if fair_component {
                    component_fair.set(ordinal(id));
                }
                if bad {
                    component_bad.set(ordinal(id));
                }
                waiting.truncate(first);
                next_component -= 1;
            } else {
                waiting.push(state);
            }
            if let Some(parent) = calls.last_mut() {
                if rank[state as usize] < rank[parent.state as usize] {
                    rank[parent.state as usize] = rank[state as usize];
                    parent.root = false;
                }
            }
        }
    }
    assert!(waiting.is_empty(), "every state searched is in a component");
    let accept = Bits::from_fn(states, |state| {
        avoid.get(state) && (stop.get(state) || component_fair.get(ordinal(rank[state])))
    });
    let bad = Bits::from_fn(states, |state| {
        avoid.get(state) && component_bad.get(ordinal(rank[state]))
    });
    Ok(Analysis {
        avoid,
        bad,
        accept,
        stop,
        component: rank,
        bound_cut_states,
    })
}

/// A path through the graph: state indices, and the family of the step from each to the next.
struct IndexPath {
    states: Vec<u32>,
    families: Vec<u8>,
}

/// The shortest path from an initial state, through a trigger, to an accepting state (see the
/// module doc, step 3); `None` when the property holds. A 0-1 breadth-first search over
/// (state, phase): a step costs 1, switching to phase 1 at a trigger costs nothing; ties are
/// broken by the order states and edges were discovered, so the path is deterministic.
fn shortest_violation(
    graph: &Graph,
    analysis: &Analysis,
    property: usize,
    eventually: bool,
) -> Result<Option<IndexPath>, SpillFailure> {
    // A violation ends in phase 1, which only bad states enter: with none, the search (20 bytes
    // a state) would walk the whole graph to find nothing.
    if !analysis.bad.any() {
        return Ok(None);
    }
    let states = graph.states();
    let trigger_bit = 1 << (2 * property);
    // Node = state * 2 + phase.
    let mut distance = vec![UNSET; 2 * states];
    let mut parent = vec![UNSET; 2 * states];
    let mut parent_family = vec![UNFAIR; 2 * states];
    let mut queue: VecDeque<u32> = VecDeque::new();
    let enters = |state: usize, phase: u32| -> bool {
        (phase == 1 && analysis.bad.get(state)) || (phase == 0 && !eventually)
    };
    let phase = u32::from(eventually);
    for state in 0..graph.initial {
        if enters(state, phase) {
            let node = (state * 2) as u32 + phase;
            distance[node as usize] = 0;
            queue.push_back(node);
        }
    }
    let mut found = None;
    let mut done = vec![false; 2 * states];
    let mut row = Vec::new();
    while let Some(node) = queue.pop_front() {
        if done[node as usize] {
            continue;
        }
        done[node as usize] = true;
        let state = (node / 2) as usize;
        let phase = node % 2;
        let here = distance[node as usize];
        if phase == 1 && analysis.accept.get(state) {
            found = Some(node);
            break;
        }
        if phase == 0 && graph.marks(state as u32) & trigger_bit != 0 && analysis.bad.get(state) {
            let switched = node + 1;
            if here < distance[switched as usize] {
                distance[switched as usize] = here;
                parent[switched as usize] = node;
                queue.push_front(switched);
            }
        }
        graph.row(state as u32, &mut row)?;
        for &Edge { target, family, .. } in &row {
            let target = target as usize;
            if !enters(target, phase) {
                continue;
            }
            let next = (target * 2) as u32 + phase;
            if here + 1 < distance[next as usize] {
                distance[next as usize] = here + 1;
                parent[next as usize] = node;
                parent_family[next as usize] = family;
                queue.push_back(next);
            }
        }
    }
    let Some(mut node) = found else {
        return Ok(None);
    };
    let mut states_back = Vec::new();
    let mut families_back = Vec::new();
    loop {
        let previous = parent[node as usize];
        if previous == UNSET {
            states_back.push(node / 2);
            break;
        }
        if previous / 2 == node / 2 && previous % 2 != node % 2 {
            // The phase switch: same state, no step.
            node = previous;
            continue;
        }
        states_back.push(node / 2);
        families_back.push(parent_family[node as usize]);
        node = previous;
    }
    states_back.reverse();
    families_back.reverse();
    Ok(Some(IndexPath {
        states: states_back,
        families: families_back,
    }))
}

/// The shortest path inside `component` from `from` to a state where `done` holds: the states
/// after `from` and the families of the steps. `None` when no such state is reachable in it.
/// With `at_least_one_step`, `from` itself does not count.
fn path_within(
    graph: &Graph,
    analysis: &Analysis,
    component: u32,
    from: u32,
    at_least_one_step: bool,
    done: &dyn Fn(u32) -> Result<bool, SpillFailure>,
) -> Result<Option<IndexPath>, SpillFailure> {
    if !at_least_one_step && done(from)? {
        return Ok(Some(IndexPath {
            states: Vec::new(),
            families: Vec::new(),
        }));
    }
    let mut parent: std::collections::HashMap<u32, (u32, u8)> = std::collections::HashMap::new();
    let mut queue = VecDeque::from([from]);
    let mut visited = std::collections::HashSet::from([from]);
    let mut row = Vec::new();
    while let Some(state) = queue.pop_front() {
        graph.row(state, &mut row)?;
        for &Edge { target, family, .. } in &row {
            if analysis.component[target as usize] != component
                || !analysis.avoid.get(target as usize)
            {
                continue;
            }
            if done(target)? && (target != from || at_least_one_step) {
                let mut states = vec![target];
                let mut families = vec![family];
                let mut cursor = state;
                while cursor != from {
                    let (previous, family) = parent[&cursor];
                    states.push(cursor);
                    families.push(family);
                    cursor = previous;
                }
                states.reverse();
                families.reverse();
                return Ok(Some(IndexPath { states, families }));
            }
            if visited.insert(target) {
                parent.insert(target, (state, family));
                queue.push_back(target);
            }
        }
    }
    Ok(None)
}

/// The cycle from `entry` back to `entry` inside its fair component, through one witness per
/// fair family that is enabled everywhere on the cycle so far.
fn fair_cycle(
    graph: &Graph,
    analysis: &Analysis,
    entry: u32,
    fair: u32,
) -> Result<IndexPath, SpillFailure> {
    let component = analysis.component[entry as usize];
    let mut states = vec![entry];
    let mut families: Vec<u8> = Vec::new();
    let mut families_left = fair;
    while families_left != 0 {
        let family = families_left.trailing_zeros() as u8;
        families_left &= families_left - 1;
        let bit = 1u32 << family;
        let satisfied = states.iter().any(|state| graph.enabled(*state) & bit == 0)
            || families.contains(&family);
        if satisfied {
            continue;
        }
        let current = *states.last().expect("a cycle has a state");
        // The nearest state where the family is disabled, else the nearest edge it labels.
        let disabled = |state: u32| Ok(graph.enabled(state) & bit == 0);
        if let Some(more) = path_within(graph, analysis, component, current, false, &disabled)? {
            states.extend(more.states);
            families.extend(more.families);
            continue;
        }
        // The target of the first edge out of `state` the family labels inside the component.
        let witness = |state: u32| -> Result<Option<u32>, SpillFailure> {
            let mut row = Vec::new();
            graph.row(state, &mut row)?;
            Ok(row
                .iter()
                .find(|edge| {
                    edge.family == family
                        && analysis.component[edge.target as usize] == component
                        && analysis.avoid.get(edge.target as usize)
                })
                .map(|edge| edge.target))
        };
        let labels = |state: u32| Ok(witness(state)?.is_some());
        let more = path_within(graph, analysis, component, current, false, &labels)?
            .expect("a fair component holds an edge of every family enabled throughout it");
        states.extend(more.states);
        families.extend(more.families);
        let source = *states.last().expect("a cycle has a state");
        states.push(witness(source)?.expect("the witness edge"));
        families.push(family);
    }
    let current = *states.last().expect("a cycle has a state");
    let at_least_one_step = families.is_empty();
    let back = path_within(
        graph,
        analysis,
        component,
        current,
        at_least_one_step,
        &|state| Ok(state == entry),
    )?
    .expect("a fair component is strongly connected");
    states.extend(back.states);
    families.extend(back.families);
    Ok(IndexPath { states, families })
}

/// Re-executes an index path from its initial state: at each step the first action of the
/// given family whose successor has the recorded fingerprint.
fn rebuild<M>(
    model: &M,
    graph: &Graph,
    representative: Option<Representative<M>>,
    path: &IndexPath,
) -> ModelPath<M>
where
    M: ModelSpec,
    M::State: Clone + Debug + Hash + PartialEq + Send + Sync + 'static,
    M::Action: Clone + Debug + PartialEq + Send + Sync + 'static,
{
    let first = graph.fingerprints[path.states[0] as usize];
    let state = model
        .init_states()
        .into_iter()
        .find(|state| key_of(representative, model, state) == first)
        .expect("a lasso starts at an initial state");
    let mut pairs = Vec::with_capacity(path.states.len());
    let end = replay_steps(
        model,
        graph,
        representative,
        state,
        &path.families,
        &path.states[1..],
        &mut pairs,
    );
    pairs.push((end, None));
    pairs
}

/// Re-executes the steps named by (family, target state) from `state`, appending each (state,
/// action) to `pairs`; answers the state reached. A step is the first enabled action of the
/// family whose successor is known by the target's fingerprint (under symmetry: whose
/// representative's is).
fn replay_steps<M>(
    model: &M,
    graph: &Graph,
    representative: Option<Representative<M>>,
    mut state: M::State,
    families: &[u8],
    targets: &[u32],
    pairs: &mut ModelPath<M>,
) -> M::State
where
    M: ModelSpec,
    M::State: Clone + Debug + Hash + PartialEq + Send + Sync + 'static,
    M::Action: Clone + Debug + PartialEq + Send + Sync + 'static,
{
    let mut actions = Vec::new();
    for (family, target) in families.iter().zip(targets) {
        let wanted = graph.fingerprints[*target as usize];
        if graph.slots > 0 {
            let representative = representative.expect("a per-actor quotient has a symmetry");
            let (action, next) =
                actors::step_towards(model, graph, representative, &state, *family, wanted)
                    .expect(
                        "re-executing a path on a per-actor quotient found no step into the recorded orbit: the model does not commute with its symmetry",
                    );
            pairs.push((state, Some(action)));
            state = next;
            continue;
        }
        actions.clear();
        model.actions(&state, &mut actions);
        let (action, next) = actions
            .drain(..)
            .filter(|action| {
                let named = model.fairness(action);
                match named {
                    None => *family == UNFAIR,
                    Some(name) => {
                        *family != UNFAIR && graph.family_names[*family as usize] == name
                    }
                }
            })
            .find_map(|action| {
                let next = model.next_state(&state, action.clone())?;
                (key_of(representative, model, &next) == wanted).then_some((action, next))
            })
            .expect(
                "re-executing a lasso reached another state: the model is nondeterministic or two states share a fingerprint",
            );
        pairs.push((state, Some(action)));
        state = next;
    }
    state
}

/// Rounds of a quotient cycle a lifted lasso may take before it returns to a state it left: the
/// order of a permutation of up to 8 interchangeable actors is at most 840, and a round lands on
/// another member of the same orbit each time, so a lasso that needs more is a bug.
const LIFT_ROUNDS_MAX: usize = 840;

/// Under symmetry the rebuilt cycle ends in the orbit of its first state, not always at that
/// state: it returned to a permutation g of it. Lifting repeats the cycle's steps from where it
/// ended until the concrete state is one a round already ended at; the lasso then loops from
/// that round. Each round takes the same families and passes the same enabled sets (the
/// families are invariant under the symmetry), so the lifted cycle is as fair as the quotient's.
/// Without symmetry the rebuilt path is already a lasso and comes back as it is.
fn lift<M>(
    model: &M,
    graph: &Graph,
    representative: Option<Representative<M>>,
    whole: &IndexPath,
    mut path: ModelPath<M>,
    lasso_start: usize,
) -> (ModelPath<M>, usize)
where
    M: ModelSpec,
    M::State: Clone + Debug + Hash + PartialEq + Send + Sync + 'static,
    M::Action: Clone + Debug + PartialEq + Send + Sync + 'static,
{
    let round_families = &whole.families[lasso_start..];
    let round_targets = &whole.states[lasso_start + 1..];
    // The fingerprints of the concrete states each round started at, by round.
    let mut round_starts = vec![fingerprint(&path[lasso_start].0)];
    for round in 1..=LIFT_ROUNDS_MAX {
        let (end, _) = path.pop().expect("a path has a last state");
        let end_fingerprint = fingerprint(&end);
        if let Some(earlier) = round_starts
            .iter()
            .position(|start| *start == end_fingerprint)
        {
            path.push((end, None));
            let start = lasso_start + earlier * round_families.len();
            assert!(
                representative.is_some() || round == 1,
                "an unreduced lasso ends where it started"
            );
            return (path, start);
        }
        round_starts.push(end_fingerprint);
        let next = replay_steps(
            model,
            graph,
            representative,
            end,
            round_families,
            round_targets,
            &mut path,
        );
        path.push((next, None));
    }
    panic!("a lifted lasso did not return to a state it left within {LIFT_ROUNDS_MAX} rounds");
}

/// The symmetry whose quotient the liveness graph is under `options`: the model's, where it
/// declares how liveness may use it (`Scale::liveness_symmetry`, `Scale::actor_families`).
pub(crate) fn quotient<M: ModelSpec>(model: &M, options: &CheckOptions) -> Option<Representative<M>>
where
    M::State: Clone + Debug + Hash + PartialEq + Send + Sync + 'static,
    M::Action: Clone + Debug + PartialEq + Send + Sync + 'static,
{
    let scale = model.scale();
    scale
        .symmetry
        .filter(|_| options.symmetry && (scale.liveness_symmetry || scale.actor_families.is_some()))
}

/// Decides every liveness property of `definitions` over one exploration of the graph, and finds
/// on the same exploration the first state matching each of `targets` with the path to it, as
/// the safety search would ([`SafetyFound`]; the caller gives targets only when the safety
/// search's quotient is this graph's, [`quotient`], and it prunes nothing more).
pub(crate) fn check<M>(
    model: &M,
    definitions: &[LivenessDef<M>],
    targets: &[Target<M>],
    options: &CheckOptions,
    started: Instant,
    progress: &mut dyn FnMut(Progress),
) -> Checked<M>
where
    M: ModelSpec,
    M::State: Clone + Debug + Hash + PartialEq + Send + Sync + 'static,
    M::Action: Clone + Debug + PartialEq + Send + Sync + 'static,
{
    assert!(
        definitions.len() <= PROPERTIES_MAX,
        "a model declares more than {PROPERTIES_MAX} liveness properties"
    );
    let own_start = Instant::now();
    let actors = model.scale().actor_families.filter(|_| options.symmetry);
    let representative = quotient(model, options);
    let Explored {
        mut graph,
        stopped,
        found,
        generated,
        spilled_bytes,
        states_per_depth,
        coverage,
    } = explore(
        model,
        definitions,
        targets,
        (representative, actors.filter(|_| representative.is_some())),
        options,
        started,
        progress,
    );
    // A stop leaves the discoveries made before it: shortest all the same.
    let safety = SafetyFound {
        found: found
            .iter()
            .map(|first| first.map(|last| first_path(model, &graph, representative, last)))
            .collect(),
        generated,
        states_per_depth,
        coverage: coverage.into_map(),
    };
    // The first discoverers served the safety paths; the analysis needs the room.
    graph.parents = Vec::new();
    let mut stopped = stopped;
    let mut properties: Vec<Option<Decided<M>>> = definitions.iter().map(|_| None).collect();
    if stopped.is_none() {
        for (index, def) in definitions.iter().enumerate() {
            progress(Progress {
                states: graph.edges.len(),
                unique_states: graph.states(),
                max_depth: safety.states_per_depth.len().saturating_sub(1),
                elapsed: started.elapsed(),
                deciding: Some(def.name),
            });
            match decide(model, &graph, representative, index, def) {
                Ok(decided) => properties[index] = Some(decided),
                Err(failure) => {
                    // Spilled edges that cannot be read back leave every verdict unknown.
                    properties.iter_mut().for_each(|decided| *decided = None);
                    stopped = Some(disk_stop_at(failure, options.disk_bytes_max, spilled_bytes));
                    break;
                }
            }
        }
    }
    Checked {
        properties,
        unique_states: graph.states(),
        edges: graph.edges.len(),
        stopped,
        seconds: own_start.elapsed().as_secs_f64(),
        safety,
    }
}

/// The path to state `last` through first discoverers, re-executed from its initial state: at
/// each step the first action, in the model's order, whose successor within the boundary is
/// known by the next state's fingerprint — the step the safety search records for it. Each step
/// is checked against its fingerprint, as the safety search checks its paths.
fn first_path<M>(
    model: &M,
    graph: &Graph,
    representative: Option<Representative<M>>,
    last: u32,
) -> ModelPath<M>
where
    M: ModelSpec,
    M::State: Clone + Debug + Hash + PartialEq + Send + Sync + 'static,
    M::Action: Clone + Debug + PartialEq + Send + Sync + 'static,
{
    let mut indices = vec![last];
    let mut cursor = last;
    while cursor as usize >= graph.initial {
        cursor = graph.parents[cursor as usize];
        assert_ne!(
            cursor, UNSET,
            "a state found by a step has the state that took it"
        );
        assert!(
            indices.len() < graph.states(),
            "the first discoverers of a state lead back to it: the parents are not a tree"
        );
        indices.push(cursor);
    }
    indices.reverse();
    let root = graph.fingerprints[indices[0] as usize];
    let mut state = model
        .init_states()
        .into_iter()
        .filter(|state| model.within_boundary(state))
        .find(|state| key_of(representative, model, state) == root)
        .expect("a path starts at an initial state");
    let mut path = Vec::with_capacity(indices.len());
    let mut actions = Vec::new();
    for next_index in &indices[1..] {
        let wanted = graph.fingerprints[*next_index as usize];
        actions.clear();
        model.actions(&state, &mut actions);
        let (action, next) = actions
            .drain(..)
            .find_map(|action| {
                let next = model.next_state(&state, action.clone())?;
                (model.within_boundary(&next) && key_of(representative, model, &next) == wanted)
                    .then_some((action, next))
            })
            .expect(
                "re-executing a path reached another state: the model is nondeterministic or two states share a fingerprint",
            );
        path.push((state, Some(action)));
        state = next;
    }
    path.push((state, None));
    path
}

/// Decides property `index` over the explored graph: its goal-avoiding components, then the
/// shortest counterexample — a run that stops, or a lasso (lifted to the model's own states when
/// the graph is a symmetry's quotient).
fn decide<M>(
    model: &M,
    graph: &Graph,
    representative: Option<Representative<M>>,
    index: usize,
    def: &LivenessDef<M>,
) -> Result<Decided<M>, SpillFailure>
where
    M: ModelSpec,
    M::State: Clone + Debug + Hash + PartialEq + Send + Sync + 'static,
    M::Action: Clone + Debug + PartialEq + Send + Sync + 'static,
{
    let fair = graph
        .family_names
        .iter()
        .enumerate()
        .filter(|(_, name)| def.assumes_fair(name))
        .fold(0u32, |set, (family, _)| set | 1 << family);
    let analysis = analyse(graph, index, fair)?;
    let violation = shortest_violation(graph, &analysis, index, def.trigger.is_none())?
        .map(|prefix| -> Result<_, SpillFailure> {
            let entry = *prefix.states.last().expect("a path has a state");
            if analysis.stop.get(entry as usize) {
                return Ok((rebuild(model, graph, representative, &prefix), None));
            }
            if graph.slots > 0 {
                // The quotient's cycle may not be one of the model's: the cycle is searched on
                // the model's own states over the entry's component (liveness/actors.rs).
                let mut path = rebuild(model, graph, representative, &prefix);
                let (entry_state, _) = path.pop().expect("a path has a last state");
                let lasso_start = path.len();
                let component = analysis.component[entry as usize];
                let members = (0..graph.states())
                    .filter(|state| {
                        analysis.avoid.get(*state) && analysis.component[*state] == component
                    })
                    .map(|state| graph.fingerprints[state])
                    .collect();
                path.extend(actors::concrete_fair_cycle(
                    model,
                    graph,
                    representative.expect("a per-actor quotient has a symmetry"),
                    &members,
                    entry_state,
                    fair,
                ));
                return Ok((path, Some(lasso_start)));
            }
            let cycle = fair_cycle(graph, &analysis, entry, fair)?;
            let lasso_start = prefix.families.len();
            let mut whole = prefix;
            whole.states.extend(&cycle.states[1..]);
            whole.families.extend(cycle.families);
            let path = rebuild(model, graph, representative, &whole);
            let (path, lasso_start) = lift(model, graph, representative, &whole, path, lasso_start);
            Ok((path, Some(lasso_start)))
        })
        .transpose()?;
    Ok(Decided {
        violation,
        bound_cut_states: analysis.bound_cut_states,
    })
}

mod actors;
mod bits;
mod edges;
mod index;
mod labels;
#[cfg(test)]
mod tests;
