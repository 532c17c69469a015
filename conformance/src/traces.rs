//! Trace files: export model paths as ITF (`oncecheck traces`) and load them back strictly.
//!
//! Invariants: every file written here loads back through [`load`] (the export tests it); a
//! load error names the file, the step and the field; nothing a loaded trace says is trusted
//! without re-executing it against the model (see `oncecheck_model::trace::from_itf`).

use oncecheck_model::check::{shortest_paths, Kind};
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

/// Writes the counterexample of every violated `always`, an example of every reached
/// `sometimes`, and `paths_count` random covering paths. Answers the files written.
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
}

impl Loaded {
    pub fn steps(&self) -> usize {
        match self {
            Loaded::Relay(trace) => trace.path.len().saturating_sub(1),
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
        other => Err(failure(format!(
            "field `#meta.model`: traces of model `{other}` cannot be replayed; replayable models: relay"
        ))),
    }
}
