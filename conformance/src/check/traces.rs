//! Trace files: export model paths as ITF (`oncecheck traces`) and load them back strictly.
//!
//! Invariants: every file written here loads back through [`load`] (the export tests it); a
//! load error names the file, the step and the field; nothing a loaded trace says is trusted
//! without re-executing it against the model (see `oncecheck_model::trace::from_itf`).

use oncecheck_model::check::{shortest_paths, Kind};
use oncecheck_model::idempotency::IdempotencyModel;
use oncecheck_model::relay::RelayModel;
use oncecheck_model::trace::{
    from_itf, random_paths, read_header, to_itf, to_itf_lasso, Header, LoadedTrace, TraceEncoding,
    TraceError, TraceMeta,
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

/// What `check::shortest_paths` looks for: a property's name, its condition, and the
/// condition's value that counts as found.
pub type Wanted<M> = (
    &'static str,
    fn(&M, &<M as stateright::Model>::State) -> bool,
    bool,
);

/// The trace text as files hold it: canonical and small — the header, then one state per line
/// (compact JSON), so a diff of two traces is a diff of states.
pub fn canonical_text(document: &serde_json::Value) -> String {
    let compact =
        |value: &serde_json::Value| serde_json::to_string(value).expect("JSON values serialize");
    let states: Vec<String> = document["states"]
        .as_array()
        .map(|states| states.iter().map(compact).collect())
        .unwrap_or_default();
    // A lasso's `loop` (ADR-015's top-level field) follows the states.
    let lasso = match document.get("loop") {
        Some(value) => format!(",\n\"loop\": {}", compact(value)),
        None => String::new(),
    };
    format!(
        "{{\"#meta\": {},\n\"vars\": {},\n\"states\": [\n{}\n]{lasso}}}\n",
        compact(&document["#meta"]),
        compact(&document["vars"]),
        states.join(",\n")
    )
}

/// (file name, document) of the shortest trace of every property of the given kinds that the
/// model can show: a counterexample of a violated `always`, an example of a reached `sometimes`.
pub fn property_documents<M>(model: &M, kinds: &[Kind]) -> Vec<(String, serde_json::Value)>
where
    M: TraceEncoding,
    M::State: Clone + std::fmt::Debug + std::hash::Hash + Eq + Send + Sync + 'static,
    M::Action: Clone + std::fmt::Debug + PartialEq + Send + Sync + 'static,
{
    let variant = model.variant();
    let definitions: Vec<_> = model
        .property_defs()
        .into_iter()
        .filter(|def| kinds.contains(&def.kind))
        .collect();
    let wanted: Vec<Wanted<M>> = definitions
        .iter()
        .map(|def| (def.name, def.condition, def.kind == Kind::Sometimes))
        .collect();
    let found = shortest_paths(model, &wanted);
    let mut documents = Vec::new();
    for def in &definitions {
        let Some(path) = found.get(def.name) else {
            continue;
        };
        let kind = match def.kind {
            Kind::Sometimes => "example",
            Kind::Always | Kind::Eventually | Kind::LeadsTo => "counterexample",
        };
        let meta = TraceMeta {
            kind: kind.to_string(),
            property: Some(def.name.to_string()),
            description: format!("{} of `{}` in {}/{}", kind, def.name, M::NAME, variant),
        };
        documents.push((
            format!("{}-{variant}-{kind}-{}.itf.json", M::NAME, slug(def.name)),
            to_itf(model, path, &meta),
        ));
    }
    documents
}

/// (file name, document) of the counterexample of every violated liveness property: a lasso
/// with its `loop`, or a run that stops short of the goal. One liveness run of the model.
pub fn liveness_documents<M>(model: &M) -> Vec<(String, serde_json::Value)>
where
    M: TraceEncoding,
    M::State: Clone + std::fmt::Debug + std::hash::Hash + Eq + Send + Sync + 'static,
    M::Action: Clone + std::fmt::Debug + PartialEq + Send + Sync + 'static,
{
    let variant = model.variant();
    let options = oncecheck_model::check::CheckOptions::default();
    let mut documents = Vec::new();
    for (name, (_, violation)) in oncecheck_model::check::liveness_paths(model, &options) {
        let Some((path, lasso_start)) = violation else {
            continue;
        };
        let shape = match lasso_start {
            Some(start) => format!("a lasso: the steps after state {start} repeat forever"),
            None => "a run that stops short of the goal".to_string(),
        };
        let meta = TraceMeta {
            kind: "counterexample".to_string(),
            property: Some(name.to_string()),
            description: format!(
                "counterexample of `{name}` in {}/{variant}, {shape}",
                M::NAME
            ),
        };
        documents.push((
            format!(
                "{}-{variant}-counterexample-{}.itf.json",
                M::NAME,
                slug(name)
            ),
            to_itf_lasso(model, &path, &meta, lasso_start),
        ));
    }
    documents
}

/// (file name, document) of `count` distinct random covering paths, reproducible from `seed`.
pub fn path_documents<M>(
    model: &M,
    count: usize,
    seed: u64,
    steps_max: usize,
) -> Vec<(String, serde_json::Value)>
where
    M: TraceEncoding,
    M::State: Clone + std::fmt::Debug + std::hash::Hash + Eq + Send + Sync + 'static,
    M::Action: Clone + std::fmt::Debug + PartialEq + Send + Sync + 'static,
{
    let paths = random_paths(model, count, seed, steps_max);
    paths
        .iter()
        .enumerate()
        .map(|(index, path)| {
            let meta = TraceMeta {
                kind: "path".to_string(),
                property: None,
                description: format!("covering path {index} of {} (seed {seed})", paths.len()),
            };
            (
                format!("{}-{}-path-{index:04}.itf.json", M::NAME, model.variant()),
                to_itf(model, path, &meta),
            )
        })
        .collect()
}

fn write_documents(
    out: &Path,
    documents: &[(String, serde_json::Value)],
) -> std::io::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(out)?;
    let mut written = Vec::new();
    for (name, document) in documents {
        let file = out.join(name);
        std::fs::write(&file, canonical_text(document))?;
        written.push(file);
    }
    Ok(written)
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

/// One path per coverage label ([`coverage_label`], with the model's coverage context): the
/// shortest path whose last step has that label, found breadth-first over the whole reachable
/// state space by the checker's fingerprint search, then continued by a seeded walk until
/// nothing but a self-loop is enabled, so every client in it finishes. Ordered by label.
pub fn covering_paths<M>(
    model: &M,
    seed: u64,
    path_steps_max: usize,
) -> Vec<(String, oncecheck_model::check::ModelPath<M>)>
where
    M: TraceEncoding,
    M::State: Clone + std::fmt::Debug + std::hash::Hash + Eq + Send + Sync + 'static,
    M::Action: Clone + std::fmt::Debug + PartialEq + Eq + std::hash::Hash + Send + Sync + 'static,
{
    use std::collections::BTreeMap;
    // Keyed by the action itself (cheap to compare) and its context; labels, which drop the
    // actor, are made once per key. Keys come in the order the breadth-first search met them,
    // so the first path per label is the shortest.
    let mut found: BTreeMap<String, oncecheck_model::check::ModelPath<M>> = BTreeMap::new();
    for ((action, context), path) in model.covering_steps() {
        let mut label = coverage_label(model, &action);
        if let Some(context) = context {
            label.push_str(&format!(" ({context})"));
        }
        found.entry(label).or_insert(path);
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
                oncecheck_model::trace::drop_self_loops(model, &state, &mut enabled);
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

/// Writes the counterexample of every violated `always` and liveness property, an example of
/// every reached `sometimes`, one path per coverage label ([`covering_paths`]) and `paths_count` random
/// paths. Answers the files written.
pub fn export<M>(model: &M, out: &Path, options: &ExportOptions) -> std::io::Result<Vec<PathBuf>>
where
    M: TraceEncoding,
    M::State: Clone + std::fmt::Debug + std::hash::Hash + Eq + Send + Sync + 'static,
    M::Action: Clone + std::fmt::Debug + PartialEq + Eq + std::hash::Hash + Send + Sync + 'static,
{
    let mut documents = property_documents(model, &[Kind::Always, Kind::Sometimes]);
    documents.extend(liveness_documents(model));
    documents.extend(covering_documents(
        model,
        options.seed,
        options.path_steps_max,
    ));
    documents.extend(path_documents(
        model,
        options.paths_count,
        options.seed,
        options.path_steps_max,
    ));
    write_documents(out, &documents)
}

/// (file name, document) of one path per coverage label ([`covering_paths`]).
pub fn covering_documents<M>(
    model: &M,
    seed: u64,
    path_steps_max: usize,
) -> Vec<(String, serde_json::Value)>
where
    M: TraceEncoding,
    M::State: Clone + std::fmt::Debug + std::hash::Hash + Eq + Send + Sync + 'static,
    M::Action: Clone + std::fmt::Debug + PartialEq + Eq + std::hash::Hash + Send + Sync + 'static,
{
    let variant = model.variant();
    covering_paths(model, seed, path_steps_max)
        .iter()
        .enumerate()
        .map(|(index, (label, path))| {
            let meta = TraceMeta {
                kind: "path".to_string(),
                property: None,
                description: format!(
                    "covers `{label}` (shortest path to it, then a walk to the end, seed {seed})"
                ),
            };
            (
                format!(
                    "{}-{variant}-cover-{index:03}-{}.itf.json",
                    M::NAME,
                    slug(label)
                ),
                to_itf(model, path, &meta),
            )
        })
        .collect()
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

/// A trace file's JSON and its `#meta` header, the one reading every loader starts from: a file
/// that cannot be read, is not JSON or has no header is a `LoadError` naming it and why.
pub fn read_document(file: &Path) -> Result<(serde_json::Value, Header), LoadError> {
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
    Ok((document, header))
}

/// Reads a trace file, picks its model from `#meta`, and re-executes it.
pub fn load(file: &Path) -> Result<Loaded, LoadError> {
    let failure = |detail: String| LoadError {
        file: file.to_path_buf(),
        detail,
    };
    let (document, header) = read_document(file)?;
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

// ---------------------------------------------------------------------------------------------
// The regression corpora (conformance/traces/relay/, conformance/traces/middleware/):
// counterexamples, examples and covering paths kept as files, covering walks kept as a manifest
// (model, variant, bounds, seed, count, a digest of their actions) and regenerated on demand, and
// promoted traces (any other file name) kept forever as they are. The manifest's `model` says
// which model the directory holds.

/// Where the corpus lives, relative to the repository root.
pub const CORPUS_DIR: &str = "conformance/traces/relay";
/// The token corpus: every variant's counterexamples, examples and covering set.
pub const TOKEN_CORPUS_DIR: &str = "conformance/traces/token";
/// The middleware corpus: idempotency traces of the `fenced` and `fixed` layers on both
/// databases, and the pre-fix counterexamples the layer's fixes are replayed against.
pub const MIDDLEWARE_CORPUS_DIR: &str = "conformance/traces/middleware";
/// The manifest of the covering walks, inside the corpus directory.
pub const MANIFEST_FILE: &str = "walks.manifest.json";

/// One set of covering walks: regenerated from (variant, seed, count, steps_max) at the
/// variant's CI bounds; `digest` pins their actions.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct WalkSet {
    pub variant: String,
    /// Bounds other than the variant's CI bounds (the middleware corpus: `sqlite`).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub bounds: std::collections::BTreeMap<String, u32>,
    pub seed: u64,
    pub count: usize,
    pub steps_max: usize,
    /// FNV-1a 64 over every walk's actions and picks, in order (see [`walks_digest`]).
    pub digest: String,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Manifest {
    pub model: String,
    pub walks: Vec<WalkSet>,
}

impl Default for Manifest {
    fn default() -> Self {
        let walks = vec![WalkSet {
            variant: "fixed".to_string(),
            bounds: Default::default(),
            seed: 1,
            count: 200,
            steps_max: 200,
            digest: String::new(),
        }];
        Manifest {
            model: "relay".to_string(),
            walks,
        }
    }
}

fn relay_model(variant: &str) -> Result<RelayModel, String> {
    use oncecheck_model::check::ModelSpec;
    let bounds = RelayModel::resolve_bounds(variant, &[]).map_err(|error| error.to_string())?;
    RelayModel::build(variant, &bounds).map_err(|error| error.to_string())
}

/// The seed of the walks that finish the corpus's covering paths.
const CORPUS_COVER_SEED: u64 = 1;

/// The files the corpus keeps, as the model writes them today: the counterexample of every
/// violated `always` of every relay variant, and for `fixed` (the design, replayed against the
/// real store) the example of every reached `sometimes` and the covering set: one path per
/// action kind and per (lost-response position x next outcome) pair its CI bounds reach.
pub fn corpus_documents() -> Result<Vec<(String, serde_json::Value)>, String> {
    use oncecheck_model::check::ModelSpec;
    let mut documents = Vec::new();
    for variant in RelayModel::VARIANTS {
        let model = relay_model(variant)?;
        documents.extend(property_documents(&model, &[Kind::Always]));
        if *variant == "fixed" {
            documents.extend(property_documents(&model, &[Kind::Sometimes]));
            documents.extend(covering_documents(
                &model,
                CORPUS_COVER_SEED,
                ExportOptions::default().path_steps_max,
            ));
        }
    }
    Ok(documents)
}

/// The idempotency model of `variant` with `bounds` over its CI bounds.
fn idempotency_model(
    variant: &str,
    bounds: &std::collections::BTreeMap<String, u32>,
) -> Result<IdempotencyModel, String> {
    use oncecheck_model::check::ModelSpec;
    let overrides: Vec<(String, u32)> = bounds
        .iter()
        .map(|(key, value)| (key.clone(), *value))
        .collect();
    let bounds =
        IdempotencyModel::resolve_bounds(variant, &overrides).map_err(|error| error.to_string())?;
    IdempotencyModel::build(variant, &bounds).map_err(|error| error.to_string())
}

/// The file name of an idempotency document on SQLite's claim (bound `sqlite=1`): the variant
/// is followed by `-sqlite`, so both databases' traces live side by side.
fn on_sqlite(name: &str, variant: &str) -> String {
    marked(name, variant, "sqlite")
}

/// What a walk's file name says of the bounds its set was written at, the inverse of
/// [`walk_documents`]' naming: `None` for a file that is no walk of `variant`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WalkMarks {
    /// Written at `sqlite=1` (`idempotency-V-sqlite-...`).
    pub sqlite: bool,
    /// Written with a process fault (`...-process-faults-path-N`).
    pub process_faults: bool,
}

pub fn walk_marks(name: &str, variant: &str) -> Option<WalkMarks> {
    let rest = name.strip_prefix(&format!("idempotency-{variant}-"))?;
    let (sqlite, rest) = match rest.strip_prefix("sqlite-") {
        Some(rest) => (true, rest),
        None => (false, rest),
    };
    let (process_faults, rest) = match rest.strip_prefix("process-faults-") {
        Some(rest) => (true, rest),
        None => (false, rest),
    };
    rest.starts_with("path-").then_some(WalkMarks {
        sqlite,
        process_faults,
    })
}

/// `name` with `marker` after the variant: `idempotency-fenced-path-0001` marked
/// `process-faults` is `idempotency-fenced-process-faults-path-0001`.
fn marked(name: &str, variant: &str, marker: &str) -> String {
    let prefix = format!("idempotency-{variant}-");
    match name.strip_prefix(&prefix) {
        Some(rest) => format!("{prefix}{marker}-{rest}"),
        None => name.to_string(),
    }
}

/// The middleware corpus's kept files: on each database's claim, the counterexamples of
/// `fenced` and `fixed` and the examples of `fenced`, `renewed` (the layer as shipped),
/// `atomic` and `fail-closed`; on PostgreSQL's, the pre-fix counterexamples of M2 and M3, which
/// the layer's fixes are replayed against.
pub fn middleware_corpus_documents() -> Result<Vec<(String, serde_json::Value)>, String> {
    let mut documents = Vec::new();
    for sqlite in [0, 1] {
        let bounds: std::collections::BTreeMap<String, u32> =
            [("sqlite".to_string(), sqlite)].into_iter().collect();
        for (variant, kinds) in [
            ("fenced", &[Kind::Always, Kind::Sometimes][..]),
            ("fixed", &[Kind::Always][..]),
            ("renewed", &[Kind::Sometimes][..]),
            ("atomic", &[Kind::Sometimes][..]),
            ("fail-closed", &[Kind::Sometimes][..]),
        ] {
            let model = idempotency_model(variant, &bounds)?;
            documents.extend(property_documents(&model, kinds).into_iter().map(
                |(name, document)| match sqlite {
                    1 => (on_sqlite(&name, variant), document),
                    _ => (name, document),
                },
            ));
        }
    }
    let pre_fix = idempotency_model("pre-fix", &Default::default())?;
    documents.extend(
        property_documents(&pre_fix, &[Kind::Always])
            .into_iter()
            .filter(|(name, _)| name.contains("-m2-") || name.contains("-m3-")),
    );
    Ok(documents)
}

/// The token corpus's kept files: what `oncecheck traces token --count 0` writes for every
/// variant (counterexamples, examples and the covering set), replayed at `tokened-dynamodb`.
pub fn token_corpus_documents() -> Result<Vec<(String, serde_json::Value)>, String> {
    use oncecheck_model::check::ModelSpec;
    use oncecheck_model::token::TokenModel;
    let mut documents = Vec::new();
    for variant in TokenModel::VARIANTS {
        let bounds = TokenModel::resolve_bounds(variant, &[]).map_err(|error| error.to_string())?;
        let model = TokenModel::build(variant, &bounds).map_err(|error| error.to_string())?;
        documents.extend(property_documents(&model, &[Kind::Always, Kind::Sometimes]));
        documents.extend(covering_documents(
            &model,
            CORPUS_COVER_SEED,
            ExportOptions::default().path_steps_max,
        ));
    }
    Ok(documents)
}

/// The kept files of the corpus of `model`.
fn kept_documents(model: &str) -> Result<Vec<(String, serde_json::Value)>, String> {
    match model {
        "relay" => corpus_documents(),
        "idempotency" => middleware_corpus_documents(),
        "token" => token_corpus_documents(),
        other => Err(format!(
            "no corpus of model `{other}`; corpora: relay, idempotency, token"
        )),
    }
}

/// The walks of one manifest entry of a corpus of `model`.
pub fn walk_documents(
    model: &str,
    set: &WalkSet,
) -> Result<Vec<(String, serde_json::Value)>, String> {
    match model {
        "idempotency" => {
            let documents = path_documents(
                &idempotency_model(&set.variant, &set.bounds)?,
                set.count,
                set.seed,
                set.steps_max,
            );
            // Walks of one variant at other bounds live side by side: the process-fault walks
            // beside those without (the memory store replays only the latter), each database's
            // beside the other's.
            let faults = set
                .bounds
                .get("process_faults")
                .is_some_and(|&faults| faults > 0);
            let sqlite = set.bounds.get("sqlite") == Some(&1);
            Ok(documents
                .into_iter()
                .map(|(name, document)| {
                    let name = if faults {
                        marked(&name, &set.variant, "process-faults")
                    } else {
                        name
                    };
                    let name = if sqlite {
                        on_sqlite(&name, &set.variant)
                    } else {
                        name
                    };
                    (name, document)
                })
                .collect())
        }
        _ => {
            let model = relay_model(&set.variant)?;
            Ok(path_documents(&model, set.count, set.seed, set.steps_max))
        }
    }
}

/// FNV-1a 64 over the actions (`mbt::actionTaken`, `mbt::nondetPicks`) of every document, in
/// order: it changes exactly when a walk would replay differently.
pub fn walks_digest(documents: &[(String, serde_json::Value)]) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let mut feed = |bytes: &[u8]| {
        for byte in bytes {
            hash ^= u64::from(*byte);
            hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        }
    };
    for (_, document) in documents {
        for state in document["states"].as_array().into_iter().flatten() {
            feed(state["mbt::actionTaken"].to_string().as_bytes());
            feed(state["mbt::nondetPicks"].to_string().as_bytes());
            feed(b"\n");
        }
        feed(b"\n");
    }
    format!("fnv1a64:{hash:016x}")
}

/// Whether a file name is one the corpus generates (the rest are promoted traces, kept as is).
fn generated_name(name: &str) -> bool {
    (name.starts_with("relay-") || name.starts_with("idempotency-") || name.starts_with("token-"))
        && (name.contains("-counterexample-")
            || name.contains("-example-")
            || name.contains("-cover-")
            || name.contains("-path-"))
}

pub fn read_manifest(directory: &Path) -> Result<Manifest, String> {
    let file = directory.join(MANIFEST_FILE);
    let text = std::fs::read_to_string(&file)
        .map_err(|error| format!("{}: cannot read: {error}", file.display()))?;
    serde_json::from_str(&text)
        .map_err(|error| format!("{}: not a walk manifest: {error}", file.display()))
}

/// Regenerates the corpus in `directory`: the kept counterexamples, examples and covering
/// paths, and the manifest's digests (seeds and counts from the manifest there, or the
/// defaults). Stale
/// generated files are removed; promoted traces are left alone. Answers what it wrote.
pub fn write_corpus(directory: &Path) -> Result<Vec<String>, String> {
    // Only a directory that is a corpus already (its manifest names the model) is written: a
    // default would write wherever the command happened to run.
    let mut manifest = read_manifest(directory)?;
    let documents = kept_documents(&manifest.model)?;
    let failure = |error: std::io::Error| {
        format!(
            "cannot write the corpus to {}: {error}",
            directory.display()
        )
    };
    std::fs::create_dir_all(directory).map_err(failure)?;
    for entry in std::fs::read_dir(directory).map_err(failure)? {
        let name = entry
            .map_err(failure)?
            .file_name()
            .to_string_lossy()
            .to_string();
        if generated_name(&name) && !documents.iter().any(|(kept, _)| *kept == name) {
            std::fs::remove_file(directory.join(&name)).map_err(failure)?;
        }
    }
    write_documents(directory, &documents).map_err(failure)?;
    let mut summary = vec![format!(
        "{} counterexamples, examples and covering paths",
        documents.len()
    )];
    for set in &mut manifest.walks {
        let walks = walk_documents(&manifest.model, set)?;
        set.digest = walks_digest(&walks);
        summary.push(format!(
            "{} walks of {} (seed {}): {}",
            walks.len(),
            set.variant,
            set.seed,
            set.digest
        ));
    }
    let text = serde_json::to_string_pretty(&manifest).expect("the manifest serializes") + "\n";
    std::fs::write(directory.join(MANIFEST_FILE), text).map_err(failure)?;
    Ok(summary)
}

/// Compares the corpus in `directory` with what the model generates today: every kept file
/// byte for byte, none missing or stale, every walk digest, and every promoted trace loads
/// strictly. Answers a summary, or every disagreement.
pub fn check_corpus(directory: &Path) -> Result<String, Vec<String>> {
    let mut problems = Vec::new();
    let manifest = read_manifest(directory).map_err(|error| vec![error])?;
    let documents = kept_documents(&manifest.model).map_err(|error| vec![error])?;
    for (name, document) in &documents {
        match std::fs::read_to_string(directory.join(name)) {
            Ok(text) if text == canonical_text(document) => {}
            Ok(_) => problems.push(format!("{name}: differs from what the model generates")),
            Err(_) => problems.push(format!("{name}: missing")),
        }
    }
    let mut promoted = 0;
    let entries = std::fs::read_dir(directory)
        .map_err(|error| vec![format!("{}: {error}", directory.display())])?;
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().to_string();
        if !name.ends_with(".itf.json") {
            continue;
        }
        if generated_name(&name) {
            if !documents.iter().any(|(kept, _)| *kept == name) {
                problems.push(format!("{name}: stale (the model no longer generates it)"));
            }
        } else {
            promoted += 1;
            if let Err(error) = load(&entry.path()) {
                problems.push(format!("promoted trace {error}"));
            }
        }
    }
    for set in &manifest.walks {
        match walk_documents(&manifest.model, set) {
            Ok(walks) if walks_digest(&walks) == set.digest => {}
            Ok(walks) => problems.push(format!(
                "{MANIFEST_FILE}: the {} walks of {} (seed {}) now digest to {}, the manifest says {}",
                walks.len(),
                set.variant,
                set.seed,
                walks_digest(&walks),
                set.digest
            )),
            Err(error) => problems.push(format!("{MANIFEST_FILE}: {error}")),
        }
    }
    if problems.is_empty() {
        let walks: usize = manifest.walks.iter().map(|set| set.count).sum();
        Ok(format!("corpus agrees with the model: {} kept traces, {promoted} promoted, {walks} walks in the manifest", documents.len()))
    } else {
        Err(problems)
    }
}

/// Writes the manifest's walks into `out` (after checking their digests), for a replay.
pub fn write_walks(directory: &Path, out: &Path) -> Result<Vec<PathBuf>, String> {
    let manifest = read_manifest(directory)?;
    let mut written = Vec::new();
    for set in &manifest.walks {
        let walks = walk_documents(&manifest.model, set)?;
        if walks_digest(&walks) != set.digest {
            return Err(format!("{MANIFEST_FILE}: the walks of {} no longer match their digest; run `oncecheck corpus --write`", set.variant));
        }
        // A walk written over another entry's would silently drop that entry's walks.
        if let Some((name, _)) = walks
            .iter()
            .find(|(name, _)| written.iter().any(|path: &PathBuf| path.ends_with(name)))
        {
            return Err(format!("{MANIFEST_FILE}: two entries write the walk {name}; the walks of {} at {:?} need a name of their own", set.variant, set.bounds));
        }
        written.extend(
            write_documents(out, &walks)
                .map_err(|error| format!("cannot write walks to {}: {error}", out.display()))?,
        );
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    // The naming and its inverse agree for every combination of the marks, and a kept trace
    // of the variant is no walk.
    #[test]
    fn a_walk_name_tells_the_bounds_it_was_written_at() {
        let walk = "idempotency-fenced-path-0007.itf.json";
        for sqlite in [false, true] {
            for process_faults in [false, true] {
                let name = if process_faults {
                    marked(walk, "fenced", "process-faults")
                } else {
                    walk.to_string()
                };
                let name = if sqlite {
                    on_sqlite(&name, "fenced")
                } else {
                    name
                };
                assert_eq!(
                    walk_marks(&name, "fenced"),
                    Some(WalkMarks {
                        sqlite,
                        process_faults
                    }),
                    "{name}"
                );
                assert_eq!(walk_marks(&name, "fail-closed"), None, "{name}");
            }
        }
        let kept = "idempotency-fenced-sqlite-example-m1-a-replay-is-served.itf.json";
        assert_eq!(walk_marks(kept, "fenced"), None);
    }
}
