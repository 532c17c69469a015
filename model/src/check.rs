//! The model-independent part of `oncecheck check`: bounds, expected verdicts, and the runs
//! that turn a stateright model into a [`CheckReport`] — an exhaustive breadth-first search
//! ([`run`], [`run_with_paths`]) or seeded random walks ([`simulate`]).
//!
//! Invariants:
//! - A verdict is only `Holds` / `Unreached` when the state space was exhausted; a run stopped
//!   by a limit (time, unique states, memory) reports `Unknown` for what it had not decided, and
//!   a simulation never reports `Holds` / `Unreached` at all.
//! - Every trace is a shortest one: the search is level by level in the model's action order
//!   and keeps, per visited state, its first parent's fingerprint ([`search`]); a trace is
//!   rebuilt from those links, never searched for a second time.
//! - Every property a model declares carries a requirement ID and an expectation per variant;
//!   a report compares the two and `CheckReport::matches_expectations` is the exit status.
//! - Nothing here does I/O: progress goes to a caller-supplied callback, and memory is measured
//!   by a caller-supplied probe ([`CheckOptions::memory_probe`]).
//! - Liveness (`eventually`, `leads-to`) is decided over the whole reachable graph under weak
//!   fairness of the families each property names ([`liveness`]); its violation is a lasso or a
//!   run that stops where no fair step is enabled, and it is `unknown` whenever the graph was not
//!   explored completely.

pub(crate) mod codec;
mod frontier;
mod liveness;
mod merge;
mod parents;
mod scale;
mod search;
mod simulation;
mod visited;

pub use codec::CodecError;
pub use frontier::{MemorySpill, SpillStore, StateCodec};
pub use merge::{merge, MergeError};
pub use scale::{identity_renaming, ActorFamilies, Independence, Renaming, Scale, ACTOR_SLOTS_MAX};
use search::{Hooks, Limits, Target};
use serde::Serialize;
use stateright::{Model, Property};
use std::collections::{BTreeMap, HashMap};
use std::fmt::Debug;
use std::hash::Hash;
use std::time::{Duration, Instant};

/// One named, bounded parameter of a model (`writers`, `pulls`, ...).
#[derive(Debug, Clone, Copy)]
pub struct BoundSpec {
    pub key: &'static str,
    /// The CI bound: what `oncecheck check` uses when the key is not given.
    pub default: u32,
    pub min: u32,
    pub max: u32,
    pub help: &'static str,
}

/// Resolved bounds: every key of the model's [`BoundSpec`] table, defaults filled in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Bounds(pub BTreeMap<String, u32>);

impl Bounds {
    /// Fills in defaults and rejects unknown keys or out-of-range values, naming the valid ones.
    pub fn resolve(specs: &[BoundSpec], overrides: &[(String, u32)]) -> Result<Bounds, SpecError> {
        let mut values: BTreeMap<String, u32> = specs
            .iter()
            .map(|spec| (spec.key.to_string(), spec.default))
            .collect();
        for (key, value) in overrides {
            let Some(spec) = specs.iter().find(|spec| spec.key == key) else {
                return Err(SpecError::UnknownBound {
                    key: key.clone(),
                    valid: specs.iter().map(|spec| spec.key.to_string()).collect(),
                });
            };
            if *value < spec.min || *value > spec.max {
                return Err(SpecError::BoundOutOfRange {
                    key: key.clone(),
                    value: *value,
                    min: spec.min,
                    max: spec.max,
                });
            }
            values.insert(key.clone(), *value);
        }
        Ok(Bounds(values))
    }

    /// The value of a bound the model declared; a missing key is a bug in the model.
    pub fn get(&self, key: &str) -> u32 {
        *self
            .0
            .get(key)
            .unwrap_or_else(|| panic!("bound {key} is not declared by this model"))
    }
}

impl std::fmt::Display for Bounds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let parts: Vec<String> = self
            .0
            .iter()
            .map(|(key, value)| format!("{key}={value}"))
            .collect();
        write!(f, "{}", parts.join(" "))
    }
}

/// Bad input to `check`/`explore`/`traces`: always names what would have been valid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SpecError {
    UnknownModel {
        name: String,
        valid: Vec<String>,
    },
    UnknownVariant {
        model: String,
        name: String,
        valid: Vec<String>,
    },
    UnknownBound {
        key: String,
        valid: Vec<String>,
    },
    BoundOutOfRange {
        key: String,
        value: u32,
        min: u32,
        max: u32,
    },
}

impl std::fmt::Display for SpecError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SpecError::UnknownModel { name, valid } => {
                write!(
                    f,
                    "unknown model `{name}`; valid models: {}",
                    valid.join(", ")
                )
            }
            SpecError::UnknownVariant { model, name, valid } => write!(
                f,
                "unknown variant `{name}` of model `{model}`; valid variants: {}",
                valid.join(", ")
            ),
            SpecError::UnknownBound { key, valid } => {
                write!(
                    f,
                    "unknown bound `{key}`; valid bounds: {}",
                    valid.join(", ")
                )
            }
            SpecError::BoundOutOfRange {
                key,
                value,
                min,
                max,
            } => {
                write!(
                    f,
                    "bound {key}={value} is out of range; valid range: {min}..={max}"
                )
            }
        }
    }
}

impl std::error::Error for SpecError {}

/// What kind of property a requirement is checked with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    /// Safety: no reachable state violates the condition.
    Always,
    /// Reachability: some reachable state satisfies the condition (the partner of an `always`).
    Sometimes,
    /// Liveness: every fair run from an initial state reaches a goal state ([`LivenessDef`]).
    Eventually,
    /// Liveness: from every reachable trigger state every fair run reaches a goal state.
    LeadsTo,
}

impl Kind {
    pub fn is_liveness(self) -> bool {
        matches!(self, Kind::Eventually | Kind::LeadsTo)
    }
}

/// A verdict as reported, and as expected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// `always`: no reachable state violates it (complete run only).
    Holds,
    /// `always`: a counterexample exists.
    Violated,
    /// `sometimes`: an example state is reachable.
    Reached,
    /// `sometimes`: no reachable state satisfies it (complete run only).
    Unreached,
    /// The run stopped before the state space was exhausted.
    Unknown,
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let word = match self {
            Verdict::Holds => "holds",
            Verdict::Violated => "violated",
            Verdict::Reached => "reached",
            Verdict::Unreached => "unreached",
            Verdict::Unknown => "unknown",
        };
        f.write_str(word)
    }
}

/// A property as a model declares it: requirement ID, words, kind and condition.
pub struct PropertyDef<M: Model> {
    /// The requirement ID of the model's spec in specs/ (`R1`, `M8`, `T1`).
    pub id: &'static str,
    /// The stateright property name; unique within the model. By convention it starts with the ID.
    pub name: &'static str,
    pub kind: Kind,
    pub condition: fn(&M, &M::State) -> bool,
}

impl<M: Model> PropertyDef<M> {
    /// The property as stateright states it. A liveness kind becomes stateright's `eventually`,
    /// which looks at terminal paths only: the checker decides liveness itself ([`liveness`]);
    /// this is only what the Explorer shows.
    pub fn to_stateright(&self) -> Property<M> {
        match self.kind {
            Kind::Always => Property::always(self.name, self.condition),
            Kind::Sometimes => Property::sometimes(self.name, self.condition),
            Kind::Eventually | Kind::LeadsTo => Property::eventually(self.name, self.condition),
        }
    }
}

/// A named set of bounds that `oncecheck check` runs beside a variant's CI bounds. The CI bounds
/// are sized for time; a requirement whose `sometimes` partners they leave unreached (so its
/// `always` holds vacuously there) is checked again here, at bounds that reach them.
#[derive(Debug, Clone, Copy)]
pub struct BoundSet {
    pub name: &'static str,
    pub variant: &'static str,
    /// Overrides over the variant's CI bounds.
    pub overrides: &'static [(&'static str, u32)],
    /// The requirement IDs whose reach the CI bounds miss and this set reaches.
    pub reaches: &'static [&'static str],
}

/// A liveness property as a model declares it: `eventually goal` (no trigger: every fair run
/// from an initial state reaches a goal state) or `trigger leads to goal` (from every reachable
/// trigger state, every fair run reaches a goal state), under weak fairness of the action
/// families named in `fair`.
///
/// A family name in `fair` is either exact (`server`) or a role prefix ending in `*` (`W*`: every
/// writer's family). A family is what [`ModelSpec::fairness`] answers for an action; weak fairness
/// of a family means a family that stays enabled is eventually taken. The spec of the model states
/// the same families next to the requirement.
pub struct LivenessDef<M: Model> {
    /// The requirement ID of the model's spec (`R6`, `M11`, `T6`).
    pub id: &'static str,
    /// Unique within the model; by convention it starts with the ID.
    pub name: &'static str,
    /// `None`: `eventually goal` from the initial states; `Some(p)`: `p leads to goal`.
    pub trigger: Option<fn(&M, &M::State) -> bool>,
    pub goal: fn(&M, &M::State) -> bool,
    /// The families this property assumes weakly fair.
    pub fair: &'static [&'static str],
}

impl<M: Model> LivenessDef<M> {
    pub fn kind(&self) -> Kind {
        match self.trigger {
            None => Kind::Eventually,
            Some(_) => Kind::LeadsTo,
        }
    }

    /// The property as the report and the expectation table see it: its goal is its condition.
    pub fn as_property(&self) -> PropertyDef<M> {
        PropertyDef {
            id: self.id,
            name: self.name,
            kind: self.kind(),
            condition: self.goal,
        }
    }

    /// Whether the family named `family` is one this property assumes weakly fair.
    pub fn assumes_fair(&self, family: &str) -> bool {
        self.fair
            .iter()
            .any(|pattern| match pattern.strip_suffix('*') {
                Some(prefix) => family.starts_with(prefix),
                None => *pattern == family,
            })
    }
}

/// A model `oncecheck` knows how to build, check, explore and export.
pub trait ModelSpec: Model + Sized + Send + Sync + 'static
where
    Self::State: Clone + Debug + Hash + PartialEq + Send + Sync + 'static,
    Self::Action: Clone + Debug + PartialEq + Send + Sync + 'static,
{
    const NAME: &'static str;
    const VARIANTS: &'static [&'static str];
    const BOUNDS: &'static [BoundSpec];
    /// CI bounds that differ per variant: (variant, key, value). Overrides still win.
    const VARIANT_DEFAULTS: &'static [(&'static str, &'static str, u32)] = &[];
    /// Named bound sets `oncecheck check` also runs ([`BoundSet`]).
    const BOUND_SETS: &'static [BoundSet] = &[];

    /// Resolves a variant's bounds: the table's defaults, the variant's own, then `overrides`.
    fn resolve_bounds(variant: &str, overrides: &[(String, u32)]) -> Result<Bounds, SpecError> {
        let variant = Self::resolve_variant(variant)?;
        let mut merged: Vec<(String, u32)> = Self::VARIANT_DEFAULTS
            .iter()
            .filter(|(name, _, _)| *name == variant)
            .map(|(_, key, value)| (key.to_string(), *value))
            .collect();
        merged.extend(overrides.iter().cloned());
        Bounds::resolve(Self::BOUNDS, &merged)
    }

    /// Builds the model for a variant at the given bounds.
    fn build(variant: &str, bounds: &Bounds) -> Result<Self, SpecError>;

    fn variant(&self) -> &'static str;
    fn bounds(&self) -> &Bounds;

    /// Every safety and reachability property with its requirement ID; `Model::properties` is
    /// derived from this.
    fn property_defs(&self) -> Vec<PropertyDef<Self>>;

    /// Every liveness property with its requirement ID and the fairness it assumes; reported
    /// after the [`ModelSpec::property_defs`] (see [`definitions`]).
    fn liveness_defs(&self) -> Vec<LivenessDef<Self>> {
        Vec::new()
    }

    /// The weak-fairness family of an action (`W1`, `server`, `clock`), or `None` for a step no
    /// run is obliged to take (a fault: a lost response, a cancellation, a crash).
    fn fairness(&self, _action: &Self::Action) -> Option<&'static str> {
        None
    }

    /// A model whose `actions` prunes interleavings (a partial-order reduction) lists here every
    /// action the unreduced model enables at `state` and answers true; weak fairness then reads
    /// which families are enabled from these, so a pruned interleaving never makes a starved
    /// actor look disabled. The default answers false: `actions` is the whole truth.
    fn unreduced_actions(&self, _state: &Self::State, _actions: &mut Vec<Self::Action>) -> bool {
        false
    }

    /// The families a bound withholds at `state`: steps the protocol would take here that a
    /// bound of the model (a budget of pulls, of clock ticks) does not allow. A run reaching
    /// such a state is cut by the bound: a liveness property assuming one of these families
    /// fair counts the state as reaching its goal, and the report says how many states it
    /// counted so (`bound_cut_states`), so a bound never silently decides a verdict.
    fn families_cut(&self, _state: &Self::State, _cut: &mut Vec<&'static str>) {}

    /// The verdict this variant is expected to reach for a property.
    fn expected(&self, property: &PropertyDef<Self>) -> Verdict;

    /// One step of a trace in protocol words ("W1 sends TransactWriteItems{...}").
    fn step_words(
        &self,
        before: &Self::State,
        action: &Self::Action,
        after: &Self::State,
    ) -> String;

    /// What the checker may use to search larger bounds (frontier codec, symmetry): none by
    /// default (check/scale.rs).
    fn scale(&self) -> Scale<Self> {
        Scale::none()
    }

    /// The state role by role in the step text's words (`W1.phase`, `table: claim a`): what
    /// the HTML report's changes and the Explorer's picture show. By default the state's Debug
    /// form split by role ([`crate::view::roles`]); a model overrides it with its own words.
    fn state_roles(&self, state: &Self::State) -> Vec<(String, String)> {
        crate::view::roles(state)
    }

    /// Resolves a variant name, listing the valid ones on error.
    fn resolve_variant(name: &str) -> Result<&'static str, SpecError> {
        Self::VARIANTS
            .iter()
            .copied()
            .find(|variant| *variant == name)
            .ok_or_else(|| SpecError::UnknownVariant {
                model: Self::NAME.to_string(),
                name: name.to_string(),
                valid: Self::VARIANTS.iter().map(|v| v.to_string()).collect(),
            })
    }
}

/// Options of one checker run.
#[derive(Clone)]
pub struct CheckOptions {
    /// Threads examining each level of the search. The result (verdicts, counts, traces) is the
    /// same for any number; only the time changes. Simulation uses one thread.
    pub threads: usize,
    /// How often the progress callback is called.
    pub progress_interval_millis: u64,
    /// Stop after this long; verdicts not yet decided are then `Unknown` and the run incomplete.
    pub timeout_secs_max: Option<u64>,
    /// Stop once this many unique states are known (checked between chunks of a level).
    pub states_max: Option<usize>,
    /// Stop once the process's memory, as `memory_probe` measures it, reaches this many bytes.
    pub memory_bytes_max: Option<u64>,
    /// Measures the process's memory in bytes (the caller's: this crate does no I/O). Without
    /// a probe `memory_bytes_max` is not enforced.
    pub memory_probe: Option<fn() -> Option<u64>>,
    /// Bytes of encoded frontier states, of the parent log (how each visited state was first
    /// reached) and of the liveness graph's edges, each, kept in memory before blocks of them go
    /// to `spill` (also spilled, whatever this says, when the memory limit is near). None: no
    /// budget of its own.
    pub frontier_bytes_max: Option<u64>,
    /// Where the frontier, the parent log and the liveness graph's edges spill (the caller's:
    /// this crate does no I/O).
    /// None: they never do, and the memory limit stops the run.
    pub spill: Option<std::sync::Arc<dyn SpillStore>>,
    /// Stop once the spilled frontier and parent log would take more than this many bytes.
    pub disk_bytes_max: Option<u64>,
    /// Run one shard of the search (`oncecheck check --shard K/N`; `oncecheck merge` joins the
    /// shards' reports): a simulation runs its share of the walks; an exhaustive search keeps,
    /// from the first level of at least [`SHARD_LEVEL_STATES_MIN`] states per shard on, only
    /// the states whose fingerprint falls in its part.
    pub shard: Option<Shard>,
    /// Keep one state per orbit of the model's symmetry (`ModelSpec::scale`), if it declares
    /// one: the same verdicts and shortest safety traces over fewer states, in the liveness
    /// search too where the model declares how (`Scale::liveness_symmetry`,
    /// `Scale::actor_families`); each model's spec argues it, a test compares every variant
    /// reduced and unreduced.
    pub symmetry: bool,
    /// Expand ample sets instead of every enabled action where the model's independence
    /// declaration allows it (`ModelSpec::scale`), with the cycle proviso: the same verdicts;
    /// traces are real paths, but may be longer than the shortest.
    pub partial_order: bool,
    /// Decide the liveness properties (on the safety search's exploration where the two walk
    /// the same graph, else on their own after it). False leaves them `unknown` and the run
    /// incomplete: what a benchmark compares against.
    pub liveness: bool,
}

/// A level must hold this many states per shard before an exhaustive search splits it: below,
/// every shard explores the whole level (and the merge counts it once).
pub const SHARD_LEVEL_STATES_MIN: usize = 64;

/// Shard `index` of `count` (0-based).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Shard {
    pub index: usize,
    pub count: usize,
}

impl Shard {
    /// This shard's share of `samples` walks: contiguous, in walk order.
    pub fn range(&self, samples: usize) -> std::ops::Range<usize> {
        let share = |index: usize| (samples as u128 * index as u128 / self.count as u128) as usize;
        share(self.index)..share(self.index + 1)
    }

    /// Whether a state with this fingerprint is this shard's to expand.
    pub fn owns(&self, fingerprint: u64) -> bool {
        fingerprint % self.count as u64 == self.index as u64
    }
}

/// Which shard a report is, and (exhaustive) the depth whose level the shards split.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ShardReport {
    pub index: usize,
    pub count: usize,
    /// Exhaustive: the depth whose level was split (every shard explored the levels above it
    /// whole); `None` when no level was large enough, so every shard explored everything.
    pub level: Option<usize>,
}

impl std::fmt::Debug for CheckOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CheckOptions")
            .field("threads", &self.threads)
            .field("timeout_secs_max", &self.timeout_secs_max)
            .field("states_max", &self.states_max)
            .field("memory_bytes_max", &self.memory_bytes_max)
            .field("frontier_bytes_max", &self.frontier_bytes_max)
            .field("spill", &self.spill.is_some())
            .field("disk_bytes_max", &self.disk_bytes_max)
            .field("shard", &self.shard)
            .field("symmetry", &self.symmetry)
            .field("partial_order", &self.partial_order)
            .field("liveness", &self.liveness)
            .finish_non_exhaustive()
    }
}

impl Default for CheckOptions {
    fn default() -> Self {
        CheckOptions {
            threads: 1,
            progress_interval_millis: 250,
            timeout_secs_max: None,
            states_max: None,
            memory_bytes_max: None,
            memory_probe: None,
            frontier_bytes_max: None,
            spill: None,
            disk_bytes_max: None,
            shard: None,
            symmetry: false,
            partial_order: false,
            liveness: true,
        }
    }
}

/// The limit that stopped a run before it could decide every property.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "limit", rename_all = "lowercase")]
pub enum Stop {
    Timeout {
        timeout_secs_max: u64,
    },
    States {
        states_max: usize,
        unique_states: usize,
    },
    /// `growth_bytes`: an allocation the run was about to make (a doubling of its visited map
    /// or of the next level), counted against the limit before it happens.
    Memory {
        memory_bytes_max: u64,
        resident_bytes: u64,
        growth_bytes: u64,
    },
    /// The spilled frontier and parent log reached `disk_bytes_max`, or their store failed (`os_error`: the
    /// system's error number, 28 for a full device; -1 for a store's own failure).
    Disk {
        disk_bytes_max: Option<u64>,
        spilled_bytes: u64,
        os_error: Option<i32>,
    },
}

impl std::fmt::Display for Stop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        const MIB: u64 = 1024 * 1024;
        match self {
            Stop::Timeout { timeout_secs_max } => {
                write!(f, "the time limit of {timeout_secs_max} s")
            }
            Stop::States {
                states_max,
                unique_states,
            } => {
                write!(
                    f,
                    "the state limit of {states_max} unique states ({unique_states} known)"
                )
            }
            Stop::Memory {
                memory_bytes_max,
                resident_bytes,
                growth_bytes: 0,
            } => write!(
                f,
                "the memory limit of {} MiB ({} MiB resident)",
                memory_bytes_max / MIB,
                resident_bytes / MIB
            ),
            Stop::Memory {
                memory_bytes_max,
                resident_bytes,
                growth_bytes,
            } => write!(
                f,
                "the memory limit of {} MiB ({} MiB resident, {} MiB about to be allocated)",
                memory_bytes_max / MIB,
                resident_bytes / MIB,
                growth_bytes.div_ceil(MIB)
            ),
            Stop::Disk {
                disk_bytes_max: Some(disk_bytes_max),
                spilled_bytes,
                os_error: None,
            } => write!(
                f,
                "the disk limit of {} MiB ({} MiB of the frontier and parent log spilled)",
                disk_bytes_max / MIB,
                spilled_bytes.div_ceil(MIB)
            ),
            Stop::Disk {
                spilled_bytes,
                os_error,
                ..
            } => {
                let cause = match os_error {
                    Some(28) => "no space left on the device".to_string(),
                    Some(-1) | None => "the spill store failed".to_string(),
                    Some(code) => std::io::Error::from_raw_os_error(*code).to_string(),
                };
                write!(
                    f,
                    "the disk: {cause} ({} MiB of the frontier and parent log spilled)",
                    spilled_bytes.div_ceil(MIB)
                )
            }
        }
    }
}

/// How a report was produced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "mode", rename_all = "lowercase")]
pub enum Search {
    /// Breadth-first search of every reachable state (up to a limit).
    Exhaustive,
    /// Seeded random walks: `samples` walks of at most `depth_max` steps each.
    Simulation {
        seed: u64,
        samples: usize,
        depth_max: usize,
    },
}

/// What `oncecheck check --simulate` walks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SimulationOptions {
    pub seed: u64,
    pub samples: usize,
    pub depth_max: usize,
}

/// A progress sample of a running check.
#[derive(Debug, Clone, Copy)]
pub struct Progress {
    pub states: usize,
    pub unique_states: usize,
    pub max_depth: usize,
    pub elapsed: Duration,
    /// Once the liveness graph is explored: the property whose analysis starts (one sample
    /// each, minutes apart at a hundred million states); `None` while states are explored.
    pub deciding: Option<&'static str>,
}

/// One step of a counterexample or example, as printed and exported.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TraceStep {
    /// 1-based step number; step 0 is the initial state.
    pub step: usize,
    /// The action as the Explorer lists it: its kind and parameters, actors numbered from 1
    /// (`WriterSendsRound W1`), the model's `format_action`.
    pub action: String,
    /// The action in protocol words.
    pub words: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct PropertyReport {
    pub id: &'static str,
    pub name: &'static str,
    pub kind: Kind,
    pub expected: Verdict,
    pub verdict: Verdict,
    /// The shortest path found: a counterexample (`always`), an example (`sometimes`), or a
    /// liveness counterexample (a lasso, or a run that stops where no fair step is enabled).
    pub trace: Option<Vec<TraceStep>>,
    /// Liveness lasso: the state index (0 = initial) the cycle returns to; the trace's last
    /// state is that state again, and the steps after it repeat forever. `None` for a run that
    /// stops (no fair step enabled at its last state) and for every other kind.
    pub lasso_start: Option<usize>,
    /// Liveness: reachable states short of the goal where a bound withheld a family the
    /// property assumes fair ([`ModelSpec::families_cut`]), counted as reaching the goal. `None`
    /// for other kinds and undecided properties.
    pub bound_cut_states: Option<usize>,
}

impl PropertyReport {
    pub fn matches(&self) -> bool {
        self.expected == self.verdict
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct CheckReport {
    pub model: &'static str,
    pub variant: &'static str,
    pub bounds: Bounds,
    pub search: Search,
    /// States generated, repeats included (a simulation: steps taken).
    pub states: usize,
    pub unique_states: usize,
    /// Exhaustive: the depth (steps from an initial state) of the deepest unique state found.
    /// Simulation: the longest loop-free walk.
    pub max_depth: usize,
    /// Exhaustive: unique states first reached at each depth (index 0: the initial states), the
    /// growth of the state space. Empty for a simulation.
    pub states_per_depth: Vec<usize>,
    /// How often each kind of action fired (produced a state), repeats included, by the name of
    /// the action's kind.
    pub action_coverage: BTreeMap<String, usize>,
    pub seconds: f64,
    /// Every verdict is definite: the state space was exhausted or every property was decided.
    /// Never true for a simulation.
    pub complete: bool,
    /// The limit that stopped the run, if one did.
    pub stopped: Option<Stop>,
    /// A shard of a larger run (its verdicts are of its part: `oncecheck merge` joins them).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shard: Option<ShardReport>,
    /// The liveness run, when the model declares liveness properties and the search was
    /// exhaustive: the exploration that stored the reachable graph (also the safety search's,
    /// when one exploration decided both).
    pub liveness: Option<LivenessRun>,
    pub properties: Vec<PropertyReport>,
}

/// What the liveness exploration measured ([`liveness`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct LivenessRun {
    /// States of the stored graph (the model's own actions: no reduction of the checker's).
    pub unique_states: usize,
    /// Edges of the stored graph, self-loops included.
    pub edges: usize,
    pub seconds: f64,
}

impl CheckReport {
    /// The run's verdicts are what the variant expects. A run stopped by a limit never matches.
    /// A simulation matches when everything it found is expected and every expected violation
    /// or example was found; it cannot show `holds` or `unreached`, so `unknown` stands for them.
    pub fn matches_expectations(&self) -> bool {
        let all_as_expected = self
            .properties
            .iter()
            .all(|property| self.as_expected(property));
        self.stopped.is_none() && all_as_expected && (self.complete || self.is_simulation())
    }

    /// One property's verdict is what this run can show of its expectation: equal to it, or,
    /// for a simulation, `unknown` where `holds` / `unreached` is expected, and for every
    /// liveness property (a walk cannot decide one either way).
    pub fn as_expected(&self, property: &PropertyReport) -> bool {
        property.matches()
            || (self.is_simulation()
                && property.verdict == Verdict::Unknown
                && (matches!(property.expected, Verdict::Holds | Verdict::Unreached)
                    || property.kind.is_liveness()))
    }

    pub fn is_simulation(&self) -> bool {
        matches!(self.search, Search::Simulation { .. })
    }

    pub fn property(&self, name: &str) -> &PropertyReport {
        self.properties
            .iter()
            .find(|report| report.name == name)
            .unwrap_or_else(|| panic!("no property named {name}"))
    }
}

/// The checker's 64-bit fingerprint of a value (fixed seeds: the same in every run of a build).
pub fn fingerprint_of<T: std::hash::Hash + ?Sized>(value: &T) -> u64 {
    search::fingerprint(value)
}

/// What [`shortest_paths`] looks for: (name, condition, the condition's value that counts as
/// a match).
pub type Wanted<M> = (&'static str, fn(&M, &<M as Model>::State) -> bool, bool);

/// A path of (state, action taken from it) pairs; the last state has no action.
pub type ModelPath<M> = Vec<(<M as Model>::State, Option<<M as Model>::Action>)>;

/// A report with the path behind each of its traces, for export (`trace::to_itf`).
pub struct Checked<M: Model> {
    pub report: CheckReport,
    /// By property name: the counterexample or example the report's trace prints.
    pub paths: BTreeMap<&'static str, ModelPath<M>>,
}

/// The shortest path (fewest actions) to a state satisfying each named condition, found by the
/// checker's own deterministic level-by-level search, which stops once every name has a path.
///
/// `wanted` lists (name, condition, the condition's value that counts as a match).
pub fn shortest_paths<M>(model: &M, wanted: &[Wanted<M>]) -> HashMap<&'static str, ModelPath<M>>
where
    M: Model + Sync,
    M::State: Clone + Hash + Send + Sync,
    M::Action: Clone + Debug + Send,
{
    let targets: Vec<Target<M>> = wanted
        .iter()
        .map(|(_, condition, matching)| Target {
            condition: *condition,
            matching: *matching,
        })
        .collect();
    let options = CheckOptions::default();
    let searched = search::search(
        model,
        &targets,
        &Limits {
            options: &options,
            stop_when_all_found: true,
        },
        &Hooks::none(),
        &mut |_| {},
    );
    let (names, lasts): (Vec<&'static str>, Vec<u64>) = wanted
        .iter()
        .zip(&searched.found)
        .filter_map(|((name, _, _), found)| found.map(|last| (*name, last)))
        .unzip();
    let paths = searched
        .paths_to(model, &lasts)
        .unwrap_or_else(|_| unreachable!("a search without a spill store keeps its log in memory"));
    names.into_iter().zip(paths).collect()
}

/// For every distinct key of a step (`key(state before, action)`), the shortest path ending
/// with a step of that key, in the order the keys were first met: the covering set's search
/// (`oncecheck traces`), one breadth-first pass over the whole reachable state space that keeps
/// fingerprints only, as the checker's search does.
pub fn first_steps_by_key<M, K>(
    model: &M,
    key: impl FnMut(&M::State, &M::Action) -> K,
) -> Vec<(K, ModelPath<M>)>
where
    M: Model,
    M::State: Clone + Hash,
    M::Action: Clone,
    K: Hash + Eq + Clone,
{
    search::first_steps_by_key(model, key)
}

/// Turns a path of (state, action taken from it) pairs into printable steps.
pub fn steps_of<M>(model: &M, pairs: &[(M::State, Option<M::Action>)]) -> Vec<TraceStep>
where
    M: ModelSpec,
    M::State: Clone + Debug + Hash + PartialEq + Send + Sync + 'static,
    M::Action: Clone + Debug + PartialEq + Send + Sync + 'static,
{
    pairs
        .windows(2)
        .enumerate()
        .map(|(index, window)| {
            let action = window[0]
                .1
                .as_ref()
                .expect("every state of a path but the last has an action");
            TraceStep {
                step: index + 1,
                action: model.format_action(action),
                words: model.step_words(&window[0].0, action, &window[1].0),
            }
        })
        .collect()
}

fn targets_of<M: ModelSpec>(definitions: &[PropertyDef<M>]) -> Vec<Target<M>>
where
    M::State: Clone + Debug + Hash + PartialEq + Send + Sync + 'static,
    M::Action: Clone + Debug + PartialEq + Send + Sync + 'static,
{
    // An `always` is decided by a state where it is false, a `sometimes` by one where it is true.
    definitions
        .iter()
        .map(|def| Target {
            condition: def.condition,
            matching: def.kind == Kind::Sometimes,
        })
        .collect()
}

fn property_reports<M: ModelSpec>(
    model: &M,
    definitions: &[PropertyDef<M>],
    paths: &BTreeMap<&'static str, ModelPath<M>>,
    decided_by_absence: bool,
    liveness: &BTreeMap<&'static str, LivenessVerdict>,
) -> Vec<PropertyReport>
where
    M::State: Clone + Debug + Hash + PartialEq + Send + Sync + 'static,
    M::Action: Clone + Debug + PartialEq + Send + Sync + 'static,
{
    definitions
        .iter()
        .map(|def| {
            let path = paths.get(def.name);
            let decided = liveness.get(def.name);
            let verdict = match (def.kind, path.is_some(), decided_by_absence) {
                (Kind::Eventually | Kind::LeadsTo, true, _) => Verdict::Violated,
                (Kind::Eventually | Kind::LeadsTo, false, _) if decided.is_some() => Verdict::Holds,
                (Kind::Eventually | Kind::LeadsTo, false, _) => Verdict::Unknown,
                (Kind::Always, true, _) => Verdict::Violated,
                (Kind::Sometimes, true, _) => Verdict::Reached,
                (_, false, false) => Verdict::Unknown,
                (Kind::Always, false, true) => Verdict::Holds,
                (Kind::Sometimes, false, true) => Verdict::Unreached,
            };
            PropertyReport {
                id: def.id,
                name: def.name,
                kind: def.kind,
                expected: model.expected(def),
                verdict,
                trace: path.map(|pairs| steps_of(model, pairs)),
                lasso_start: decided.and_then(|decided| decided.lasso_start),
                bound_cut_states: decided.map(|decided| decided.bound_cut_states),
            }
        })
        .collect()
}

/// A liveness counterexample: the path, and for a lasso the index of the state its last state
/// returns to (`None`: the run stops at its last state, where no fair step is enabled).
pub type Lasso<M> = (ModelPath<M>, Option<usize>);

/// A decided liveness property, as the report needs it (its path is among the run's paths).
#[derive(Debug, Clone, Copy)]
struct LivenessVerdict {
    lasso_start: Option<usize>,
    bound_cut_states: usize,
}

/// Every property of a model in report order: its safety and reachability properties, then its
/// liveness properties (as [`LivenessDef::as_property`] shows them).
pub fn definitions<M: ModelSpec>(model: &M) -> Vec<PropertyDef<M>>
where
    M::State: Clone + Debug + Hash + PartialEq + Send + Sync + 'static,
    M::Action: Clone + Debug + PartialEq + Send + Sync + 'static,
{
    let mut all = model.property_defs();
    all.extend(model.liveness_defs().iter().map(LivenessDef::as_property));
    all
}

/// Decides the model's liveness properties alone (their own exploration, [`liveness`]): per
/// property name its verdict, and the path of each violation with the index its lasso returns
/// to. What `oncecheck check --html` re-runs to show a lasso step by step.
pub fn liveness_paths<M>(
    model: &M,
    options: &CheckOptions,
) -> BTreeMap<&'static str, (Verdict, Option<Lasso<M>>)>
where
    M: ModelSpec,
    M::State: Clone + Debug + Hash + Eq + Send + Sync + 'static,
    M::Action: Clone + Debug + PartialEq + Send + Sync + 'static,
{
    let definitions = model.liveness_defs();
    let checked = liveness::check(
        model,
        &definitions,
        &[],
        options,
        Instant::now(),
        &mut |_| {},
    );
    definitions
        .iter()
        .zip(checked.properties)
        .map(|(def, decided)| {
            let entry = match decided {
                None => (Verdict::Unknown, None),
                Some(decided) => match decided.violation {
                    Some(violation) => (Verdict::Violated, Some(violation)),
                    None => (Verdict::Holds, None),
                },
            };
            (def.name, entry)
        })
        .collect()
}

/// What a run measured, whatever its search; see the fields of [`CheckReport`].
struct Measured {
    search: Search,
    states: usize,
    unique_states: usize,
    max_depth: usize,
    states_per_depth: Vec<usize>,
    action_coverage: BTreeMap<String, usize>,
    started: Instant,
    complete: bool,
    stopped: Option<Stop>,
    shard: Option<ShardReport>,
    liveness: Option<LivenessRun>,
}

/// The report of a run: every property's verdict from the paths found (and, when
/// `decided_by_absence`, from the paths not found), next to its expectation.
fn checked<M: ModelSpec>(
    model: &M,
    definitions: &[PropertyDef<M>],
    paths: BTreeMap<&'static str, ModelPath<M>>,
    decided_by_absence: bool,
    liveness: &BTreeMap<&'static str, LivenessVerdict>,
    measured: Measured,
) -> Checked<M>
where
    M::State: Clone + Debug + Hash + PartialEq + Send + Sync + 'static,
    M::Action: Clone + Debug + PartialEq + Send + Sync + 'static,
{
    let properties = property_reports(model, definitions, &paths, decided_by_absence, liveness);
    let report = CheckReport {
        model: M::NAME,
        variant: model.variant(),
        bounds: model.bounds().clone(),
        search: measured.search,
        states: measured.states,
        unique_states: measured.unique_states,
        max_depth: measured.max_depth,
        states_per_depth: measured.states_per_depth,
        action_coverage: measured.action_coverage,
        seconds: measured.started.elapsed().as_secs_f64(),
        complete: measured.complete,
        stopped: measured.stopped,
        shard: measured.shard,
        liveness: measured.liveness,
        properties,
    };
    Checked { report, paths }
}

/// Runs an exhaustive BFS and compares every verdict with its expectation; every trace in the
/// report is a shortest one.
pub fn run<M>(model: M, options: &CheckOptions, progress: &mut dyn FnMut(Progress)) -> CheckReport
where
    M: ModelSpec,
    M::State: Clone + Debug + Hash + Eq + Send + Sync + 'static,
    M::Action: Clone + Debug + PartialEq + Send + Sync + 'static,
{
    run_with_paths(&model, options, progress).report
}

/// [`run`], also answering the path behind every trace.
pub fn run_with_paths<M>(
    model: &M,
    options: &CheckOptions,
    progress: &mut dyn FnMut(Progress),
) -> Checked<M>
where
    M: ModelSpec,
    M::State: Clone + Debug + Hash + Eq + Send + Sync + 'static,
    M::Action: Clone + Debug + PartialEq + Send + Sync + 'static,
{
    let started = Instant::now();
    let mut definitions = model.property_defs();
    let targets = targets_of(&definitions);
    let scale = model.scale();
    let hooks = Hooks {
        codec: scale.codec,
        representative: scale.symmetry.filter(|_| options.symmetry),
        independence: scale.independence.filter(|_| options.partial_order),
    };
    let liveness_defs = model.liveness_defs();
    let liveness_on = !liveness_defs.is_empty() && options.liveness;
    // One exploration decides both kinds of property when the liveness graph is the graph the
    // safety search walks: the same quotient, no ample sets, no shard (liveness::SafetyFound).
    let one_exploration = liveness_on
        && hooks.independence.is_none()
        && options.shard.is_none()
        && targets.len() <= liveness::SAFETY_TARGETS_MAX
        && liveness::quotient(model, options).is_some() == hooks.representative.is_some();
    let mut decided = BTreeMap::new();
    let mut exploration_stopped = None;
    if one_exploration {
        let explored = liveness::check(model, &liveness_defs, &targets, options, started, progress);
        // A limit other than time could have let the safety search, which spills its frontier,
        // go further alone: it runs as before, and the liveness properties stay unknown,
        // stopped where the one exploration stopped.
        let fall_back = matches!(
            explored.stopped,
            Some(Stop::Memory { .. } | Stop::States { .. } | Stop::Disk { .. })
        );
        if !fall_back {
            let (paths, exhausted, measured) = one_exploration_outcome(
                &definitions,
                &liveness_defs,
                explored,
                started,
                &mut decided,
            );
            definitions.extend(liveness_defs.iter().map(LivenessDef::as_property));
            return checked(model, &definitions, paths, exhausted, &decided, measured);
        }
        exploration_stopped = explored.stopped;
    }
    let (mut paths, exhausted, mut measured) = safety_search(
        model,
        &definitions,
        &targets,
        options,
        &hooks,
        started,
        progress,
    );
    if exploration_stopped.is_some() {
        measured.complete = false;
        measured.stopped = measured.stopped.or(exploration_stopped);
    } else if liveness_on && measured.stopped.is_none() {
        let checked = liveness::check(model, &liveness_defs, &[], options, started, progress);
        measured.liveness = Some(LivenessRun {
            unique_states: checked.unique_states,
            edges: checked.edges,
            seconds: checked.seconds,
        });
        measured.stopped = checked.stopped;
        measured.complete &= checked.stopped.is_none();
        decide_liveness(&liveness_defs, checked.properties, &mut paths, &mut decided);
    } else if !liveness_defs.is_empty() {
        measured.complete = false;
    }
    definitions.extend(liveness_defs.iter().map(LivenessDef::as_property));
    checked(model, &definitions, paths, exhausted, &decided, measured)
}

/// The safety search alone: the paths it found (by property name), whether it exhausted the
/// space, and its figures. Once every property is decided nothing is left to learn: it stops,
/// as stateright's `HasDiscoveries::All` did.
fn safety_search<M>(
    model: &M,
    definitions: &[PropertyDef<M>],
    targets: &[search::Target<M>],
    options: &CheckOptions,
    hooks: &Hooks<M>,
    started: Instant,
    progress: &mut dyn FnMut(Progress),
) -> (BTreeMap<&'static str, ModelPath<M>>, bool, Measured)
where
    M: ModelSpec,
    M::State: Clone + Debug + Hash + Eq + Send + Sync + 'static,
    M::Action: Clone + Debug + PartialEq + Send + Sync + 'static,
{
    let searched = search::search(
        model,
        targets,
        &Limits {
            options,
            stop_when_all_found: true,
        },
        hooks,
        progress,
    );
    let (names, lasts): (Vec<&'static str>, Vec<u64>) = definitions
        .iter()
        .zip(&searched.found)
        .filter_map(|(def, found)| found.map(|last| (def.name, last)))
        .unzip();
    // A parent log that cannot be read back leaves what it found undecided: the disk stop.
    let (paths, rebuild_stopped): (BTreeMap<&'static str, ModelPath<M>>, _) =
        match searched.paths_to(model, &lasts) {
            Ok(paths) => (names.into_iter().zip(paths).collect(), None),
            Err(stop) => (BTreeMap::new(), Some(stop)),
        };
    // Without its paths, nothing found can be reported, and no absence proven either.
    let exhausted = searched.exhausted && rebuild_stopped.is_none();
    let all_decided = rebuild_stopped.is_none() && searched.found.iter().all(Option::is_some);
    let measured = Measured {
        search: Search::Exhaustive,
        states: searched.generated,
        unique_states: searched.unique_states(),
        max_depth: searched.states_per_depth.len().saturating_sub(1),
        states_per_depth: searched.states_per_depth.clone(),
        action_coverage: searched.coverage.clone(),
        started,
        complete: exhausted || all_decided,
        stopped: searched.stopped.or(rebuild_stopped),
        shard: options.shard.map(|shard| ShardReport {
            index: shard.index,
            count: shard.count,
            level: searched.shard_level,
        }),
        liveness: None,
    };
    // The visited map goes with `searched`, before any liveness exploration builds its graph,
    // so the two never share the peak.
    (paths, exhausted, measured)
}

/// The report's parts from one exploration that decided both kinds of property.
fn one_exploration_outcome<M>(
    definitions: &[PropertyDef<M>],
    liveness_defs: &[LivenessDef<M>],
    checked: liveness::Checked<M>,
    started: Instant,
    decided: &mut BTreeMap<&'static str, LivenessVerdict>,
) -> (BTreeMap<&'static str, ModelPath<M>>, bool, Measured)
where
    M: ModelSpec,
    M::State: Clone + Debug + Hash + Eq + Send + Sync + 'static,
    M::Action: Clone + Debug + PartialEq + Send + Sync + 'static,
{
    let safety = checked.safety;
    let mut paths: BTreeMap<&'static str, ModelPath<M>> = definitions
        .iter()
        .zip(safety.found)
        .filter_map(|(def, found)| found.map(|path| (def.name, path)))
        .collect();
    let exhausted = checked.stopped.is_none();
    let measured = Measured {
        search: Search::Exhaustive,
        states: safety.generated,
        unique_states: checked.unique_states,
        max_depth: safety.states_per_depth.len().saturating_sub(1),
        states_per_depth: safety.states_per_depth,
        action_coverage: safety.coverage,
        started,
        complete: exhausted,
        stopped: checked.stopped,
        shard: None,
        liveness: Some(LivenessRun {
            unique_states: checked.unique_states,
            edges: checked.edges,
            seconds: checked.seconds,
        }),
    };
    decide_liveness(liveness_defs, checked.properties, &mut paths, decided);
    (paths, exhausted, measured)
}

/// Records each decided liveness property's verdict, and its counterexample among the paths.
fn decide_liveness<M: ModelSpec>(
    liveness_defs: &[LivenessDef<M>],
    properties: Vec<Option<liveness::Decided<M>>>,
    paths: &mut BTreeMap<&'static str, ModelPath<M>>,
    decided: &mut BTreeMap<&'static str, LivenessVerdict>,
) where
    M::State: Clone + Debug + Hash + PartialEq + Send + Sync + 'static,
    M::Action: Clone + Debug + PartialEq + Send + Sync + 'static,
{
    for (def, outcome) in liveness_defs.iter().zip(properties) {
        let Some(outcome) = outcome else { continue };
        let lasso_start = outcome.violation.as_ref().and_then(|(_, start)| *start);
        if let Some((path, _)) = outcome.violation {
            paths.insert(def.name, path);
        }
        decided.insert(
            def.name,
            LivenessVerdict {
                lasso_start,
                bound_cut_states: outcome.bound_cut_states,
            },
        );
    }
}

/// Seeded random walks instead of an exhaustive search, for bounds too large to exhaust. The
/// same model, options and seed give the same report. Verdicts are `violated`, `reached` or
/// `unknown` — a simulation never shows that a property holds — and each trace is the shortest
/// loop-free walk prefix found, not necessarily the shortest that exists.
pub fn simulate<M>(
    model: &M,
    options: &CheckOptions,
    simulation: &SimulationOptions,
    progress: &mut dyn FnMut(Progress),
) -> Checked<M>
where
    M: ModelSpec,
    M::State: Clone + Debug + Hash + Eq + Send + Sync + 'static,
    M::Action: Clone + Debug + PartialEq + Send + Sync + 'static,
{
    let started = Instant::now();
    let mut definitions = model.property_defs();
    let targets = targets_of(&definitions);
    let simulated = simulation::simulate(
        model,
        &targets,
        options,
        simulation.seed,
        simulation.samples,
        simulation.depth_max,
        progress,
    );
    let paths: BTreeMap<&'static str, ModelPath<M>> = definitions
        .iter()
        .zip(simulated.found)
        .filter_map(|(def, found)| found.map(|path| (def.name, path)))
        .collect();
    let measured = Measured {
        search: Search::Simulation {
            seed: simulation.seed,
            samples: simulation.samples,
            depth_max: simulation.depth_max,
        },
        states: simulated.steps,
        unique_states: simulated.unique_states,
        max_depth: simulated.depth_max_reached,
        states_per_depth: Vec::new(),
        action_coverage: simulated.coverage,
        started,
        complete: false,
        stopped: simulated.stopped,
        shard: options.shard.map(|shard| ShardReport {
            index: shard.index,
            count: shard.count,
            level: None,
        }),
        liveness: None,
    };
    // A walk cannot show that no fair run avoids a goal: liveness stays `unknown`.
    definitions.extend(model.liveness_defs().iter().map(LivenessDef::as_property));
    checked(
        model,
        &definitions,
        paths,
        false,
        &BTreeMap::new(),
        measured,
    )
}

#[cfg(test)]
mod liveness_symmetry_tests;
#[cfg(test)]
mod one_exploration_tests;
#[cfg(test)]
mod reduction_tests;
#[cfg(test)]
mod tests;
