//! Trace files: export model paths as ITF (`oncecheck traces`) and load them back strictly.
//!
//! Invariants: every file written here loads back through [`load`] (the export tests it); a
//! load error names the file, the step and the field; nothing a loaded trace says is trusted
//! without re-executing it against the model (see `oncecheck_model::trace::from_itf`).

use oncecheck_model::check::{shortest_paths, Kind};
use oncecheck_model::idempotency::IdempotencyModel;
use oncecheck_model::relay::RelayModel;
use oncecheck_model::trace::{
    from_itf, random_paths, read_header, to_itf, LoadedTrace, TraceEncoding, TraceError, TraceMeta,
};
use std::path::{Path, PathBuf};

/// Why a trace file could not be used. Always names the file.
#[derive(Debug)]
pub struct LoadError {
    pub file: PathBuf,
    pub detail: String,
}

impl std::fmt::Display for LoadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.file.display(), self.detail)
    }
}

impl std::error::Error for LoadError {}

/// Options of `oncecheck traces`.
#[derive(Debug, Clone)]
pub struct ExportOptions {
    /// How many random covering paths per variant (distinct action sequences).
    pub paths_count: usize,
    pub seed: u64,
    /// Longest covering path, in steps.
    pub path_steps_max: usize,
}

impl Default for ExportOptions {
    fn default() -> Self {
        ExportOptions {
            paths_count: 240,
            seed: 1,
            path_steps_max: 200,
        }
    }
}

fn slug(name: &str) -> String {
    let mut out = String::new();
    for character in name.chars() {
        if character.is_ascii_alphanumeric() {
            out.push(character.to_ascii_lowercase());
        } else if !out.ends_with('-') {
            out.push('-');
        }
    }
    out.trim_matches('-').chars().take(60).collect()
}

/// The coverage label of an action: its name and every parameter that is not an actor's index
/// (`HandlerResponds outcome="OkUnder"`, `ClientCancels at="Handler" in_flight_commits=false`,
/// `MiddlewareFinalizes result="ErrorCommitted"`). Which actor takes a step is not a kind of step.
pub fn coverage_label<M: TraceEncoding>(model: &M, action: &M::Action) -> String
where
    M::State: Clone + std::fmt::Debug + std::hash::Hash + Eq + Send + Sync + 'static,
    M::Action: Clone + std::fmt::Debug + PartialEq + Send + Sync + 'static,
{
    let (name, picks) = model.encode_action(action);
    let mut label = name;
    for (key, value) in &picks {
        if oncecheck_model::trace::read_int(value).is_none() {
            label.push_str(&format!(" {key}={value}"));
        }
    }
    label
}

/// One path per coverage label ([`coverage_label`]): the shortest path whose last step has that
/// label, found breadth-first over the whole reachable state space, then continued by a seeded
/// walk until nothing is enabled, so every client in it finishes. Ordered by label.
pub fn covering_paths<M>(
    model: &M,
    seed: u64,
    path_steps_max: usize,
) -> Vec<(String, Vec<(M::State, Option<M::Action>)>)>
where
    M: TraceEncoding,
    M::State: Clone + std::fmt::Debug + std::hash::Hash + Eq + Send + Sync + 'static,
    M::Action: Clone + std::fmt::Debug + PartialEq + Send + Sync + 'static,
{
    use std::collections::{BTreeMap, HashMap, VecDeque};
    type Parents<S, A> = HashMap<S, Option<(S, A)>>;
    let mut parents: Parents<M::State, M::Action> = HashMap::new();
    let mut frontier = VecDeque::new();
    for state in model.init_states() {
        if !parents.contains_key(&state) {
            parents.insert(state.clone(), None);
            frontier.push_back(state);
        }
    }
    let rebuild = |parents: &Parents<M::State, M::Action>, last: &M::State| {
        let mut path = vec![(last.clone(), None)];
        let mut cursor = last.clone();
        while let Some(Some((parent, action))) = parents.get(&cursor) {
            path.push((parent.clone(), Some(action.clone())));
            cursor = parent.clone();
        }
        path.reverse();
        path
    };
    let mut found: BTreeMap<String, Vec<(M::State, Option<M::Action>)>> = BTreeMap::new();
    let mut actions = Vec::new();
    while let Some(state) = frontier.pop_front() {
        actions.clear();
        model.actions(&state, &mut actions);
        for action in actions.drain(..) {
            let Some(next) = model.next_state(&state, action.clone()) else {
                continue;
            };
            let label = coverage_label(model, &action);
            if let std::collections::btree_map::Entry::Vacant(entry) = found.entry(label) {
                let mut path = rebuild(&parents, &state);
                path.last_mut().expect("a path has a state").1 = Some(action.clone());
                path.push((next.clone(), None));
                entry.insert(path);
            }
            if !parents.contains_key(&next) {
                parents.insert(next.clone(), Some((state.clone(), action)));
                frontier.push_back(next);
            }
        }
    }
    let mut generator = oncecheck_model::trace::SplitMix64::new(seed);
    found
        .into_iter()
        .map(|(label, mut path)| {
            let mut enabled = Vec::new();
            while path.len() <= path_steps_max {
                let state = path.last().expect("a path has a state").0.clone();
                enabled.clear();
                model.actions(&state, &mut enabled);
                if enabled.is_empty() {
                    break;
                }
                let action = enabled.swap_remove(generator.below(enabled.len()));
                let Some(next) = model.next_state(&state, action.clone()) else {
                    break;
                };
                path.last_mut().expect("a path has a state").1 = Some(action);
                path.push((next, None));
            }
            (label, path)
        })
        .collect()
}

/// Writes the counterexample of every violated `always`, an example of every reached
/// `sometimes`, one path per coverage label ([`covering_paths`]) and `paths_count` random
/// paths. Answers the files written.
pub fn export<M>(model: &M, out: &Path, options: &ExportOptions) -> std::io::Result<Vec<PathBuf>>
where
    M: TraceEncoding,
    M::State: Clone + std::fmt::Debug + std::hash::Hash + Eq + Send + Sync + 'static,
    M::Action: Clone + std::fmt::Debug + PartialEq + Send + Sync + 'static,
{
    std::fs::create_dir_all(out)?;
    let variant = model.variant();
    let definitions = model.property_defs();
    let wanted: Vec<(&'static str, fn(&M, &M::State) -> bool, bool)> = definitions
        .iter()
        .map(|def| (def.name, def.condition, def.kind == Kind::Sometimes))
        .collect();
    let found = shortest_paths(model, &wanted);
    let mut written = Vec::new();
    let mut write = |name: String, document: serde_json::Value| -> std::io::Result<()> {
        let file = out.join(name);
        let text = serde_json::to_string_pretty(&document).map_err(std::io::Error::other)?;
        std::fs::write(&file, text + "\n")?;
        written.push(file);
        Ok(())
    };
    for def in &definitions {
        let Some(path) = found.get(def.name) else {
            continue;
        };
        let (kind, prefix) = match def.kind {
            Kind::Always => ("counterexample", "counterexample"),
            Kind::Sometimes => ("example", "example"),
        };
        let meta = TraceMeta {
            kind: kind.to_string(),
            property: Some(def.name.to_string()),
            description: format!("{} of `{}` in {}/{}", kind, def.name, M::NAME, variant),
        };
        write(
            format!("{}-{variant}-{prefix}-{}.itf.json", M::NAME, slug(def.name)),
            to_itf(model, path, &meta),
        )?;
    }
    let covering = covering_paths(model, options.seed, options.path_steps_max);
    for (index, (label, path)) in covering.iter().enumerate() {
        let meta = TraceMeta {
            kind: "path".to_string(),
            property: None,
            description: format!(
                "covers `{label}` (shortest path to it, then a walk to the end, seed {})",
                options.seed
            ),
        };
        write(
            format!(
                "{}-{variant}-cover-{index:03}-{}.itf.json",
                M::NAME,
                slug(label)
            ),
            to_itf(model, path, &meta),
        )?;
    }
    let paths = random_paths(
        model,
        options.paths_count,
        options.seed,
        options.path_steps_max,
    );
    for (index, path) in paths.iter().enumerate() {
        let meta = TraceMeta {
            kind: "path".to_string(),
            property: None,
            description: format!(
                "covering path {index} of {} (seed {})",
                paths.len(),
                options.seed
            ),
        };
        write(
            format!("{}-{variant}-path-{index:04}.itf.json", M::NAME),
            to_itf(model, path, &meta),
        )?;
    }
    Ok(written)
}

/// A loaded trace of a model the replayer knows.
pub enum Loaded {
    Relay(LoadedTrace<RelayModel>),
    Idempotency(LoadedTrace<IdempotencyModel>),
}

impl Loaded {
    pub fn steps(&self) -> usize {
        match self {
            Loaded::Relay(trace) => trace.path.len().saturating_sub(1),
            Loaded::Idempotency(trace) => trace.path.len().saturating_sub(1),
        }
    }
}

fn load_as<M>(file: &Path, document: &serde_json::Value) -> Result<LoadedTrace<M>, LoadError>
where
    M: TraceEncoding,
    M::State: Clone + std::fmt::Debug + std::hash::Hash + Eq + Send + Sync + 'static,
    M::Action: Clone + std::fmt::Debug + PartialEq + Send + Sync + 'static,
{
    from_itf::<M>(document).map_err(|error: TraceError| LoadError {
        file: file.to_path_buf(),
        detail: error.to_string(),
    })
}

/// Reads a trace file, picks its model from `#meta`, and re-executes it.
pub fn load(file: &Path) -> Result<Loaded, LoadError> {
    let failure = |detail: String| LoadError {
        file: file.to_path_buf(),
        detail,
    };
    let text =
        std::fs::read_to_string(file).map_err(|error| failure(format!("cannot read: {error}")))?;
    let document: serde_json::Value = serde_json::from_str(&text).map_err(|error| {
        failure(format!(
            "not JSON (line {}, column {}): {error}",
            error.line(),
            error.column()
        ))
    })?;
    let header = read_header(&document).map_err(|error| failure(error.to_string()))?;
    match header.model.as_str() {
        "relay" => Ok(Loaded::Relay(load_as::<RelayModel>(file, &document)?)),
        "idempotency" => Ok(Loaded::Idempotency(load_as::<IdempotencyModel>(
            file, &document,
        )?)),
        other => Err(failure(format!(
            "field `#meta.model`: traces of model `{other}` cannot be loaded; models with traces: relay, idempotency"
        ))),
    }
}
