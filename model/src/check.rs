//! The model-independent part of `oncecheck check`: bounds, expected verdicts, and the
//! exhaustive BFS run that turns a stateright model into a [`CheckReport`].
//!
//! Invariants:
//! - A verdict is only `Holds` / `Unreached` when the run was complete (the state space was
//!   exhausted); an incomplete run reports `Unknown`, never a pass.
//! - Every property a model declares carries a requirement ID and an expectation per variant;
//!   a report compares the two and `CheckReport::matches_expectations` is the exit status.
//! - Nothing here does I/O: progress goes to a caller-supplied callback.

use serde::Serialize;
use stateright::{Checker, HasDiscoveries, Model, Property};
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
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
        let mut values: BTreeMap<String, u32> =
            specs.iter().map(|spec| (spec.key.to_string(), spec.default)).collect();
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
        *self.0.get(key).unwrap_or_else(|| panic!("bound {key} is not declared by this model"))
    }
}

impl std::fmt::Display for Bounds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let parts: Vec<String> = self.0.iter().map(|(key, value)| format!("{key}={value}")).collect();
        write!(f, "{}", parts.join(" "))
    }
}

/// Bad input to `check`/`explore`/`traces`: always names what would have been valid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SpecError {
    UnknownModel { name: String, valid: Vec<String> },
    UnknownVariant { model: String, name: String, valid: Vec<String> },
    UnknownBound { key: String, valid: Vec<String> },
    BoundOutOfRange { key: String, value: u32, min: u32, max: u32 },
}

impl std::fmt::Display for SpecError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SpecError::UnknownModel { name, valid } => {
                write!(f, "unknown model `{name}`; valid models: {}", valid.join(", "))
            }
            SpecError::UnknownVariant { model, name, valid } => write!(
                f,
                "unknown variant `{name}` of model `{model}`; valid variants: {}",
                valid.join(", ")
            ),
            SpecError::UnknownBound { key, valid } => {
                write!(f, "unknown bound `{key}`; valid bounds: {}", valid.join(", "))
            }
            SpecError::BoundOutOfRange { key, value, min, max } => {
                write!(f, "bound {key}={value} is out of range; valid range: {min}..={max}")
            }
        }
    }
}

impl std::error::Error for SpecError {}

/// What kind of stateright property a requirement is checked with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Always,
    Sometimes,
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
    pub fn to_stateright(&self) -> Property<M> {
        match self.kind {
            Kind::Always => Property::always(self.name, self.condition),
            Kind::Sometimes => Property::sometimes(self.name, self.condition),
        }
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

    /// Every property with its requirement ID; `Model::properties` is derived from this.
    fn property_defs(&self) -> Vec<PropertyDef<Self>>;

    /// The verdict this variant is expected to reach for a property.
    fn expected(&self, property: &PropertyDef<Self>) -> Verdict;

    /// One step of a trace in protocol words ("W1 sends TransactWriteItems{...}").
    fn step_words(&self, before: &Self::State, action: &Self::Action, after: &Self::State) -> String;

    /// Resolves a variant name, listing the valid ones on error.
    fn resolve_variant(name: &str) -> Result<&'static str, SpecError> {
        Self::VARIANTS.iter().copied().find(|variant| *variant == name).ok_or_else(|| {
            SpecError::UnknownVariant {
                model: Self::NAME.to_string(),
                name: name.to_string(),
                valid: Self::VARIANTS.iter().map(|v| v.to_string()).collect(),
            }
        })
    }
}

/// Options of one checker run.
#[derive(Debug, Clone)]
pub struct CheckOptions {
    pub threads: usize,
    /// How often the progress callback is called.
    pub progress_interval_millis: u64,
    /// Stop after this long; verdicts not yet decided are then `Unknown` and the run incomplete.
    pub timeout_secs_max: Option<u64>,
}

impl Default for CheckOptions {
    fn default() -> Self {
        CheckOptions { threads: 1, progress_interval_millis: 250, timeout_secs_max: None }
    }
}

/// A progress sample of a running check.
#[derive(Debug, Clone, Copy)]
pub struct Progress {
    pub states: usize,
    pub unique_states: usize,
    pub max_depth: usize,
    pub elapsed: Duration,
}

/// One step of a counterexample or example, as printed and exported.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TraceStep {
    /// 1-based step number; step 0 is the initial state.
    pub step: usize,
    /// The action, as the model's `Debug` prints it.
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
    /// The shortest path found: a counterexample (`always`) or an example (`sometimes`).
    pub trace: Option<Vec<TraceStep>>,
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
    pub states: usize,
    pub unique_states: usize,
    pub max_depth: usize,
    pub seconds: f64,
    pub complete: bool,
    pub properties: Vec<PropertyReport>,
}

impl CheckReport {
    pub fn matches_expectations(&self) -> bool {
        self.complete && self.properties.iter().all(PropertyReport::matches)
    }

    pub fn property(&self, name: &str) -> &PropertyReport {
        self.properties
            .iter()
            .find(|report| report.name == name)
            .unwrap_or_else(|| panic!("no property named {name}"))
    }
}

/// The shortest path (fewest actions) to a state satisfying each named condition, found by a
/// deterministic level-by-level BFS that stops once every name has a path.
///
/// Why not stateright's own discovery: its BFS re-evaluates properties after a discovery and
/// keeps the last match, so its path is a counterexample but not the shortest one. The verdict
/// pass stays stateright's; this pass only runs for properties that have a discovery, and only
/// as deep as the deepest shortest path.
///
/// `wanted` lists (name, condition, the condition's value that counts as a match).
pub fn shortest_paths<M>(model: &M, wanted: &[(&'static str, fn(&M, &M::State) -> bool, bool)]) -> HashMap<&'static str, Vec<(M::State, Option<M::Action>)>>
where
    M: Model,
    M::State: Clone + Hash + Eq,
    M::Action: Clone,
{
    let mut found: HashMap<&'static str, Vec<(M::State, Option<M::Action>)>> = HashMap::new();
    if wanted.is_empty() {
        return found;
    }
    // Parent links by state: enough to rebuild a path once a state matches.
    let mut parents: HashMap<M::State, Option<(M::State, M::Action)>> = HashMap::new();
    let mut frontier: VecDeque<M::State> = VecDeque::new();
    for state in model.init_states() {
        if !parents.contains_key(&state) {
            parents.insert(state.clone(), None);
            frontier.push_back(state);
        }
    }
    let rebuild = |parents: &HashMap<M::State, Option<(M::State, M::Action)>>, last: &M::State| {
        let mut path = vec![(last.clone(), None)];
        let mut cursor = last.clone();
        while let Some(Some((parent, action))) = parents.get(&cursor) {
            path.push((parent.clone(), Some(action.clone())));
            cursor = parent.clone();
        }
        path.reverse();
        path
    };
    let mut actions = Vec::new();
    let mut seen_names: HashSet<&'static str> = HashSet::new();
    while let Some(state) = frontier.pop_front() {
        for (name, condition, matching) in wanted {
            if !seen_names.contains(name) && condition(model, &state) == *matching {
                seen_names.insert(name);
                found.insert(name, rebuild(&parents, &state));
            }
        }
        if seen_names.len() == wanted.len() {
            break;
        }
        actions.clear();
        model.actions(&state, &mut actions);
        for action in actions.drain(..) {
            if let Some(next) = model.next_state(&state, action.clone()) {
                if !model.within_boundary(&next) || parents.contains_key(&next) {
                    continue;
                }
                parents.insert(next.clone(), Some((state.clone(), action)));
                frontier.push_back(next);
            }
        }
    }
    found
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
            let action = window[0].1.as_ref().expect("every state of a path but the last has an action");
            TraceStep {
                step: index + 1,
                action: format!("{action:?}"),
                words: model.step_words(&window[0].0, action, &window[1].0),
            }
        })
        .collect()
}

/// Runs an exhaustive BFS and compares every verdict with its expectation; every trace in the
/// report is a shortest one (see [`shortest_paths`]).
pub fn run<M>(model: M, options: &CheckOptions, progress: &mut dyn FnMut(Progress)) -> CheckReport
where
    M: ModelSpec,
    M::State: Clone + Debug + Hash + Eq + Send + Sync + 'static,
    M::Action: Clone + Debug + PartialEq + Send + Sync + 'static,
{
    let started = Instant::now();
    let definitions = model.property_defs();
    let expectations: Vec<Verdict> = definitions.iter().map(|def| model.expected(def)).collect();
    let mut builder = model.checker().threads(options.threads.max(1)).finish_when(HasDiscoveries::All);
    if let Some(seconds) = options.timeout_secs_max {
        builder = builder.timeout(Duration::from_secs(seconds));
    }
    let mut checker = builder.spawn_bfs();
    let interval = Duration::from_millis(options.progress_interval_millis.max(10));
    while !checker.is_done() {
        std::thread::sleep(interval);
        progress(Progress {
            states: checker.state_count(),
            unique_states: checker.unique_state_count(),
            max_depth: checker.max_depth(),
            elapsed: started.elapsed(),
        });
    }
    for handle in checker.handles() {
        handle.join().expect("a checker thread panicked");
    }
    let discoveries = checker.discoveries();
    let violated_or_reached: Vec<(&'static str, fn(&M, &M::State) -> bool, bool)> = definitions
        .iter()
        .filter(|def| discoveries.contains_key(def.name))
        .map(|def| (def.name, def.condition, def.kind == Kind::Sometimes))
        .collect();
    // Without a timeout the checker stops only when the reachable state space is exhausted or
    // every property has a discovery; either way every verdict is definite. A timeout that fired
    // before all properties were decided leaves the run incomplete.
    let all_decided = definitions.iter().all(|def| discoveries.contains_key(def.name));
    let timed_out = options
        .timeout_secs_max
        .is_some_and(|seconds| started.elapsed() >= Duration::from_secs(seconds));
    let complete = all_decided || !timed_out;
    let model = checker.model();
    let shortest = shortest_paths(model, &violated_or_reached);
    let properties = definitions
        .iter()
        .zip(expectations)
        .map(|(def, expected)| {
            let found = discoveries.get(def.name);
            let verdict = match (def.kind, found.is_some(), complete) {
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
                expected,
                verdict,
                trace: shortest.get(def.name).map(|pairs| steps_of(model, pairs)),
            }
        })
        .collect();
    CheckReport {
        model: M::NAME,
        variant: model.variant(),
        bounds: model.bounds().clone(),
        states: checker.state_count(),
        unique_states: checker.unique_state_count(),
        max_depth: checker.max_depth(),
        seconds: started.elapsed().as_secs_f64(),
        complete,
        properties,
    }
}
