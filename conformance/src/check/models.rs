//! The registry of models `oncecheck` knows, and the `check` / `explore` commands over them.
//!
//! Invariants: a model is named in exactly one place (the `for_each_model!` list); every command
//! resolves names through [`resolve`], so an unknown model, variant or bound gets one error
//! shape that lists the valid choices.

use oncecheck_model::check::{
    self, CheckOptions, CheckReport, Kind, ModelSpec, Progress, Search, SimulationOptions,
    SpecError,
};
use oncecheck_model::idempotency::IdempotencyModel;
use oncecheck_model::relay::RelayModel;
use oncecheck_model::token::TokenModel;
use std::io::Write;

/// Calls `$body` with `$model` bound to each model type's name. The one list of models.
macro_rules! with_model {
    ($name:expr, |$model:ident| $body:expr, $unknown:expr) => {
        match $name {
            "relay" => {
                type $model = oncecheck_model::relay::RelayModel;
                $body
            }
            "idempotency" => {
                type $model = oncecheck_model::idempotency::IdempotencyModel;
                $body
            }
            "token" => {
                type $model = oncecheck_model::token::TokenModel;
                $body
            }
            _ => $unknown,
        }
    };
}
pub(crate) use with_model;

pub const MODEL_NAMES: &[&str] = &["relay", "idempotency", "token"];

fn unknown_model(name: &str) -> SpecError {
    SpecError::UnknownModel {
        name: name.to_string(),
        valid: MODEL_NAMES.iter().map(|name| name.to_string()).collect(),
    }
}

/// One (model, variant, bounds) to check.
#[derive(Debug, Clone)]
pub struct Job {
    pub model: &'static str,
    pub variant: &'static str,
    pub overrides: Vec<(String, u32)>,
    /// The named bound set (`ModelSpec::BOUND_SETS`) these overrides are, if any.
    pub bound_set: Option<&'static str>,
}

/// Resolves what `check [MODEL] [--variant V] [--bound K=N]` names into jobs, validating every
/// name and bound before any checking starts.
pub fn resolve(
    model: Option<&str>,
    variant: Option<&str>,
    overrides: &[(String, u32)],
) -> Result<Vec<Job>, SpecError> {
    let models: Vec<&'static str> = match model {
        None => MODEL_NAMES.to_vec(),
        Some(name) => vec![*MODEL_NAMES
            .iter()
            .find(|known| **known == name)
            .ok_or_else(|| unknown_model(name))?],
    };
    if model.is_none() && variant.is_some() {
        // A variant only makes sense for one model: say which models have it.
        let name = variant.unwrap_or_default();
        return Err(SpecError::UnknownVariant {
            model: "(all)".to_string(),
            name: name.to_string(),
            valid: vec!["name a model to choose one of its variants".to_string()],
        });
    }
    let mut jobs = Vec::new();
    for model in models {
        let variants: Vec<&'static str> = with_model!(
            model,
            |M| {
                match variant {
                    Some(name) => vec![M::resolve_variant(name)?],
                    None => M::VARIANTS.to_vec(),
                }
            },
            return Err(unknown_model(model))
        );
        for variant in variants {
            // Resolve now so a bad bound is reported before hours of checking.
            with_model!(
                model,
                |M| {
                    M::resolve_bounds(variant, overrides)?;
                },
                return Err(unknown_model(model))
            );
            jobs.push(Job {
                model,
                variant,
                overrides: overrides.to_vec(),
                bound_set: None,
            });
        }
    }
    Ok(jobs)
}

/// `jobs` and, after each job at a variant's CI bounds (no overrides), one job per named bound
/// set of that variant (`ModelSpec::BOUND_SETS`): what `oncecheck check` runs, so a requirement
/// whose reach the CI bounds miss is checked where it is reached.
pub fn with_bound_sets(jobs: Vec<Job>) -> Vec<Job> {
    let mut all = Vec::with_capacity(jobs.len());
    for job in jobs {
        let sets: &'static [check::BoundSet] = if job.overrides.is_empty() {
            with_model!(job.model, |M| M::BOUND_SETS, &[])
        } else {
            &[]
        };
        let (model, variant) = (job.model, job.variant);
        all.push(job);
        for set in sets.iter().filter(|set| set.variant == variant) {
            all.push(Job {
                model,
                variant,
                overrides: set
                    .overrides
                    .iter()
                    .map(|(key, value)| (key.to_string(), *value))
                    .collect(),
                bound_set: Some(set.name),
            });
        }
    }
    all
}

/// The bound set a job runs, with what it is for.
pub fn bound_set_of(job: &Job) -> Option<check::BoundSet> {
    let name = job.bound_set?;
    with_model!(
        job.model,
        |M| M::BOUND_SETS
            .iter()
            .find(|set| set.name == name && set.variant == job.variant)
            .copied(),
        None
    )
}

/// The part of `oncecheck check --help` that comes from the registry: every model with its
/// variants and its bounds (CI default, valid range, per-variant defaults, meaning). Generated,
/// so the help cannot drift from the models.
pub fn registry_help() -> String {
    let mut text = String::from(
        "Models, variants and bounds (default = the CI bound; override with --bound KEY=N):\n",
    );
    for model in MODEL_NAMES {
        with_model!(
            *model,
            |M| {
                text.push_str(&format!(
                    "\n  {}  variants: {}\n",
                    M::NAME,
                    M::VARIANTS.join(", ")
                ));
                let width = M::BOUNDS
                    .iter()
                    .map(|spec| spec.key.len())
                    .max()
                    .unwrap_or(0);
                for spec in M::BOUNDS {
                    let per_variant: Vec<String> = M::VARIANT_DEFAULTS
                        .iter()
                        .filter(|(_, key, _)| *key == spec.key)
                        .map(|(variant, _, value)| format!("{variant}: {value}"))
                        .collect();
                    let per_variant = if per_variant.is_empty() {
                        String::new()
                    } else {
                        format!(" ({})", per_variant.join(", "))
                    };
                    text.push_str(&format!(
                        "    {:<width$}  default {}{per_variant}, range {}..={}: {}\n",
                        spec.key, spec.default, spec.min, spec.max, spec.help
                    ));
                }
            },
            unreachable!("MODEL_NAMES lists only registered models")
        );
    }
    text
}

/// Runs one job; `progress` is called while the checker runs.
pub fn run_job(
    job: &Job,
    options: &CheckOptions,
    progress: &mut dyn FnMut(Progress),
) -> Result<CheckReport, SpecError> {
    with_model!(
        job.model,
        |M| {
            let bounds = M::resolve_bounds(job.variant, &job.overrides)?;
            let model = M::build(job.variant, &bounds)?;
            Ok(check::run(model, options, progress))
        },
        Err(unknown_model(job.model))
    )
}

/// Serves the stateright Explorer for one model on `address` (blocks). `banner` receives what a
/// reviewer needs next to the Explorer: its address, the variant, the bounds and each property's
/// expectation (the Explorer itself lists properties without them).
///
/// A port that cannot be bound is an error value: the front (`explorer.rs`) binds it, and the
/// Explorer serves behind it on a loopback port of its own.
pub fn explore(job: &Job, address: &str, banner: &mut dyn FnMut(String)) -> Result<(), String> {
    with_model!(
        job.model,
        |M| {
            let bounds = M::resolve_bounds(job.variant, &job.overrides)
                .map_err(|error| error.to_string())?;
            let model = M::build(job.variant, &bounds).map_err(|error| error.to_string())?;
            // The status bar names the protocol, not the model's Rust type.
            let protocol = crate::check::variants::protocol(job.model).unwrap_or(job.model);
            let title = format!("{protocol} ({})", job.variant);
            let front = crate::check::explorer::Front::bind(address, title)?;
            let explorer = crate::check::explorer::loopback_address()?;
            banner(format!(
                "Explorer for {}/{} on http://{address}/ (ctrl-c to stop)",
                job.model, job.variant
            ));
            banner(format!("  bounds: {bounds}"));
            for def in model.property_defs() {
                banner(format!(
                    "  expected {:<9} {}",
                    model.expected(&def).to_string(),
                    def.name
                ));
            }
            std::thread::spawn(move || {
                use stateright::Model;
                // `serve` blocks until the web server stops.
                let _checker = model.checker().serve(explorer);
            });
            front.serve(explorer);
            Ok(())
        },
        Err(unknown_model(job.model).to_string())
    )
}

/// Makes sure `directory` exists and takes files, before any checking starts: an unwritable
/// output directory is bad input found in a second, not after the run.
pub fn prepare_directory(directory: &std::path::Path) -> std::io::Result<()> {
    std::fs::create_dir_all(directory)?;
    let probe = directory.join(format!(".oncecheck-probe-{}", std::process::id()));
    std::fs::write(&probe, b"probe")?;
    std::fs::remove_file(&probe)
}

/// What an HTML page needs beyond the report: every shown trace step by step with the roles
/// each step changed, and the coverage of the reachable state space.
pub fn page_detail(
    job: &Job,
    report: &CheckReport,
) -> Result<crate::report::html::PageDetail, SpecError> {
    with_model!(
        job.model,
        |M| {
            let bounds = M::resolve_bounds(job.variant, &job.overrides)?;
            let model = M::build(job.variant, &bounds)?;
            Ok(detail_of(&model, report))
        },
        Err(unknown_model(job.model))
    )
}

fn detail_of<M>(model: &M, report: &CheckReport) -> crate::report::html::PageDetail
where
    M: ModelSpec,
    M::State: Clone + std::fmt::Debug + std::hash::Hash + Eq + Send + Sync + 'static,
    M::Action: Clone + std::fmt::Debug + PartialEq + Send + Sync + 'static,
{
    let shown = |name: &str| {
        let property = report.property(name);
        property.trace.is_some()
            && crate::report::html::shows_trace(property.verdict, property.expected)
    };
    let definitions = model.property_defs();
    let wanted: Vec<crate::check::traces::Wanted<M>> = definitions
        .iter()
        .filter(|def| shown(def.name))
        .map(|def| (def.name, def.condition, def.kind == Kind::Sometimes))
        .collect();
    let mut paths: Vec<(&'static str, check::ModelPath<M>)> =
        check::shortest_paths(model, &wanted).into_iter().collect();
    // A liveness lasso is not a shortest path to a state: the liveness run finds it again.
    if model.liveness_defs().iter().any(|def| shown(def.name)) {
        for (name, (_, violation)) in check::liveness_paths(model, &CheckOptions::default()) {
            if let (true, Some((path, _))) = (shown(name), violation) {
                paths.push((name, path));
            }
        }
    }
    let mut traces = std::collections::BTreeMap::new();
    for (name, path) in paths {
        traces.insert(name.to_string(), step_views(model, &path));
    }
    crate::report::html::PageDetail {
        traces,
        coverage: Some(coverage(model)),
    }
}

/// A path as an HTML page shows it: per step its protocol words and the roles it changed.
pub fn step_views<M>(model: &M, path: &check::ModelPath<M>) -> Vec<crate::report::html::StepView>
where
    M: ModelSpec,
    M::State: Clone + std::fmt::Debug + std::hash::Hash + Eq + Send + Sync + 'static,
    M::Action: Clone + std::fmt::Debug + PartialEq + Send + Sync + 'static,
{
    use oncecheck_model::view::changes;
    let mut views = Vec::with_capacity(path.len());
    let mut previous: Vec<(String, String)> = Vec::new();
    for (index, (state, _)) in path.iter().enumerate() {
        let now = model.state_roles(state);
        let words = match index {
            0 => String::new(),
            _ => {
                let (before, action) = &path[index - 1];
                model.step_words(
                    before,
                    action
                        .as_ref()
                        .expect("every state of a path but the last has an action"),
                    state,
                )
            }
        };
        views.push(crate::report::html::StepView {
            step: index,
            words,
            changes: changes(&previous, &now),
        });
        previous = now;
    }
    views
}

/// The coverage of the reachable state space, by a breadth-first walk of its own: unique states
/// per depth, and the transitions explored per action (named by the action's variant).
pub fn coverage<M>(model: &M) -> crate::report::html::Coverage
where
    M: stateright::Model,
    M::State: std::hash::Hash,
    M::Action: std::fmt::Debug,
{
    use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
    let fingerprint =
        |state: &M::State| BuildHasherDefault::<DefaultHasher>::default().hash_one(state);
    let mut seen = std::collections::HashSet::new();
    let mut level: Vec<M::State> = model
        .init_states()
        .into_iter()
        .filter(|state| seen.insert(fingerprint(state)))
        .collect();
    let mut coverage = crate::report::html::Coverage::default();
    let mut actions = Vec::new();
    while !level.is_empty() {
        coverage.states_per_depth.push(level.len() as u64);
        let mut next_level = Vec::new();
        for state in &level {
            actions.clear();
            model.actions(state, &mut actions);
            for action in actions.drain(..) {
                let debug = format!("{action:?}");
                let name = debug
                    .split([' ', '{', '('])
                    .next()
                    .unwrap_or_default()
                    .to_string();
                let Some(next) = model.next_state(state, action) else {
                    continue;
                };
                if !model.within_boundary(&next) {
                    continue;
                }
                *coverage.action_counts.entry(name).or_insert(0) += 1;
                if seen.insert(fingerprint(&next)) {
                    next_level.push(next);
                }
            }
        }
        level = next_level;
    }
    coverage
}

/// The human report of one job: verdicts next to their expectations (worded by
/// [`crate::report::verdict_words`]: a stopped run and a run at changed bounds say so), the actions
/// that never fired, and the shortest trace of every violation.
pub fn write_human(report: &CheckReport, out: &mut dyn Write) -> std::io::Result<()> {
    let outcome = crate::check::model_facts::outcome_of(report);
    writeln!(
        out,
        "{}/{} [{}]  {}",
        report.model,
        report.variant,
        report.bounds,
        outcome.status()
    )?;
    writeln!(
        out,
        "  {} unique states ({} generated), depth {}, {:.2}s, {}",
        report.unique_states,
        report.states,
        report.max_depth,
        report.seconds,
        if report.complete {
            "complete"
        } else {
            "INCOMPLETE"
        }
    )?;
    if let Search::Simulation {
        seed,
        samples,
        depth_max,
    } = report.search
    {
        writeln!(
            out,
            "  simulation: seed {seed}, {samples} walks of at most {depth_max} steps; it finds violations and examples, never shows that a property holds"
        )?;
    }
    for property in &report.properties {
        let kind = crate::report::verdict_words::kind_word(property.kind);
        let cut = match property.bound_cut_states {
            Some(cut) if cut > 0 => {
                format!("; {cut} states cut by a bound count as reaching the goal")
            }
            _ => String::new(),
        };
        writeln!(
            out,
            "  {:<4} {:<10} {:<74} {:<9} ({}{cut})",
            outcome.mark(report, property),
            kind,
            property.name,
            property.verdict.to_string(),
            outcome.expectation(property)
        )?;
    }
    if let Some(explanation) = outcome.explanation() {
        writeln!(out, "  {explanation}")?;
    }
    if let Some(line) = never_fired_line(report) {
        writeln!(out, "  {line}")?;
    }
    for property in &report.properties {
        let show = crate::report::html::shows_trace(property.verdict, property.expected);
        let Some(trace) = property.trace.as_ref().filter(|_| show) else {
            continue;
        };
        write_trace(out, property, trace)?;
    }
    Ok(())
}

/// One shown trace. A liveness counterexample is a lasso — its prefix, a line `cycle:`, then the
/// steps that repeat forever (the last returns to the state after step `lasso_start`) — or a
/// run that stops where no fair step is enabled.
pub fn write_trace(
    out: &mut dyn Write,
    property: &oncecheck_model::check::PropertyReport,
    trace: &[oncecheck_model::check::TraceStep],
) -> std::io::Result<()> {
    if !property.kind.is_liveness() {
        writeln!(
            out,
            "  shortest trace for {} ({}):",
            property.name, property.verdict
        )?;
        for step in trace {
            writeln!(out, "    {:>3}. {}", step.step, step.words)?;
        }
        return Ok(());
    }
    match property.lasso_start {
        Some(start) => writeln!(
            out,
            "  shortest lasso for {} ({}): a run that never reaches the goal, {} steps then a cycle of {} repeated forever:",
            property.name,
            property.verdict,
            start,
            trace.len() - start
        )?,
        None => writeln!(
            out,
            "  shortest run for {} ({}) that stops short of the goal:",
            property.name, property.verdict
        )?,
    }
    for step in trace {
        if property.lasso_start == Some(step.step - 1) {
            let back_to = match step.step - 1 {
                0 => "the initial state".to_string(),
                after => format!("the state after step {after}"),
            };
            writeln!(out, "    cycle: (from {back_to}, repeated forever)")?;
        }
        writeln!(out, "    {:>3}. {}", step.step, step.words)?;
    }
    if property.lasso_start.is_none() {
        writeln!(
            out,
            "    the run stops here: no step of a family the property assumes fair is enabled"
        )?;
    }
    Ok(())
}

/// The actions an exhausted search never fired, if any: what a reviewer looks for first.
fn never_fired_line(report: &CheckReport) -> Option<String> {
    let never: Vec<String> =
        crate::check::action_names::with_zeros(report.model, &report.action_coverage)
            .into_iter()
            .filter(|(_, count)| *count == 0)
            .map(|(name, _)| name)
            .collect();
    (!never.is_empty() && crate::check::model_facts::exhausted(report))
        .then(|| format!("never fired: {}", never.join(", ")))
}

/// Writes the traces of one job (only models with a trace encoding can).
pub fn export_traces(
    job: &Job,
    out: &std::path::Path,
    options: &crate::check::traces::ExportOptions,
) -> Result<std::io::Result<Vec<std::path::PathBuf>>, SpecError> {
    match job.model {
        "relay" => {
            let bounds = RelayModel::resolve_bounds(job.variant, &job.overrides)?;
            let model = RelayModel::build(job.variant, &bounds)?;
            Ok(crate::check::traces::export(&model, out, options))
        }
        "idempotency" => {
            let bounds = IdempotencyModel::resolve_bounds(job.variant, &job.overrides)?;
            let model = IdempotencyModel::build(job.variant, &bounds)?;
            Ok(crate::check::traces::export(&model, out, options))
        }
        "token" => {
            let bounds = TokenModel::resolve_bounds(job.variant, &job.overrides)?;
            let model = TokenModel::build(job.variant, &bounds)?;
            Ok(crate::check::traces::export(&model, out, options))
        }
        other => Err(SpecError::UnknownModel {
            name: other.to_string(),
            valid: vec!["relay, idempotency, token (the models with a trace encoding)".to_string()],
        }),
    }
}

/// Writes the trace of every violated `always` (and of every mismatching property) as an SVG
/// sequence diagram: `<model>-<variant>-<property>.svg`.
pub fn write_diagrams(
    report: &CheckReport,
    directory: &std::path::Path,
) -> std::io::Result<Vec<std::path::PathBuf>> {
    std::fs::create_dir_all(directory)?;
    let mut written = Vec::new();
    for property in &report.properties {
        let show = crate::report::html::shows_trace(property.verdict, property.expected);
        let Some(trace) = property.trace.as_ref().filter(|_| show) else {
            continue;
        };
        let slug: String = property
            .name
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() {
                    c.to_ascii_lowercase()
                } else {
                    '-'
                }
            })
            .collect();
        let file = directory.join(format!(
            "{}-{}-{}.svg",
            report.model,
            report.variant,
            slug.trim_matches('-')
        ));
        let title = format!(
            "{}/{}: {} ({})",
            report.model, report.variant, property.name, property.verdict
        );
        let (breaking, lasso_start) = crate::report::html::breaking_of(property);
        std::fs::write(
            &file,
            crate::report::diagram::sequence_svg(&title, trace, breaking.as_deref(), lasso_start),
        )?;
        written.push(file);
    }
    Ok(written)
}

// ---- `oncecheck check`: limits, simulation and the JSON document (owner: the checker) ----

/// The version of the `oncecheck check --json` document (`docs/check-json.md`, its JSON Schema
/// `docs/check-json.schema.json`). Bumped on any change a reader could notice: a field removed,
/// renamed or given another meaning. 2: `trace[].action` in the Explorer's words (actors from 1)
/// instead of Rust's Debug text; `action_coverage` lists every action kind, 0 included.
pub const CHECK_JSON_SCHEMA: u32 = 2;

/// The default of `--memory-max-mb`: a third of the 24 GiB machine the checks were sized on,
/// so one run cannot starve the others sharing it.
pub const MEMORY_MAX_MB_DEFAULT: u64 = 8192;

/// Resident memory of this process, from the kernel (`VmRSS` of /proc/self/status; Linux
/// only, `None` elsewhere, where the memory limit is then not enforced).
pub fn resident_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|line| line.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Runs one job as seeded random walks instead of an exhaustive search.
pub fn simulate_job(
    job: &Job,
    options: &CheckOptions,
    simulation: &SimulationOptions,
    progress: &mut dyn FnMut(Progress),
) -> Result<CheckReport, SpecError> {
    with_model!(
        job.model,
        |M| {
            let bounds = M::resolve_bounds(job.variant, &job.overrides)?;
            let model = M::build(job.variant, &bounds)?;
            Ok(check::simulate(&model, options, simulation, progress).report)
        },
        Err(unknown_model(job.model))
    )
}

/// The one line that says which limit stopped a run, if one did.
pub fn stop_line(report: &CheckReport) -> Option<String> {
    report.stopped?;
    let explanation = crate::check::model_facts::outcome_of(report).explanation()?;
    Some(format!("{}/{} {explanation}", report.model, report.variant))
}

/// The `--json` document: the schema version, the overall verdict and one report per job, each
/// with its own `ok`. Bounds are an object of numbers (`{"new_writers": 2}`).
pub fn json_document(reports: &[CheckReport]) -> serde_json::Value {
    let reports: Vec<serde_json::Value> = reports
        .iter()
        .map(|report| {
            let mut value = serde_json::to_value(report).expect("a report serialises");
            value["ok"] = serde_json::Value::Bool(report.matches_expectations());
            // Every action kind of the model, 0 for those that never fired.
            value["action_coverage"] =
                crate::check::action_names::with_zeros(report.model, &report.action_coverage)
                    .into_iter()
                    .map(|(name, count)| (name, serde_json::Value::from(count)))
                    .collect::<serde_json::Map<_, _>>()
                    .into();
            value
        })
        .collect();
    serde_json::json!({
        "schema": CHECK_JSON_SCHEMA,
        "ok": reports.iter().all(|report| report["ok"] == true),
        "reports": reports,
    })
}
