//! Shards across machines: `oncecheck check --shard K/N --json` writes one shard's report with
//! the ITF trace behind every counterexample and example it found; `oncecheck merge FILE...`
//! joins the shards of each (model, variant, bounds) into the report of the whole run
//! (`oncecheck_model::check::merge`: verdicts, the shortest trace found, coverage, states) and
//! prints it like `check` does, as `--json`, or as the `--html` report.
//!
//! Invariants:
//! - A shard file is read back against the model it names: model, variant and property names
//!   resolve through the registry, and every trace the merge keeps is re-executed from its ITF
//!   (`trace::from_itf`) and must print as the shard printed it, so a merged counterexample is
//!   a real path of this build's model, never text copied from a file.
//! - Bad input (a file that is not a shard document, shards of different runs, a missing or
//!   repeated shard, a trace that does not re-execute) is an error value naming the file or the
//!   run, never a panic.

use crate::check::models::{self, Job, MODEL_NAMES};
use oncecheck_model::check::{
    self, Bounds, CheckOptions, CheckReport, Kind, ModelSpec, Progress, PropertyReport, Search,
    ShardReport, SimulationOptions, SpecError, Stop, TraceStep, Verdict,
};
use oncecheck_model::idempotency::IdempotencyModel;
use oncecheck_model::relay::RelayModel;
use oncecheck_model::token::TokenModel;
use oncecheck_model::trace::{from_itf, to_itf_lasso, TraceEncoding, TraceMeta};
use serde_json::Value as Json;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Calls `$body` with `$model` bound to the model type named `$name` (the models with a trace
/// encoding, which are all of them: the list is `models::MODEL_NAMES`).
macro_rules! with_traced_model {
    ($name:expr, |$model:ident| $body:expr, $unknown:expr) => {
        match $name {
            "relay" => {
                type $model = RelayModel;
                $body
            }
            "idempotency" => {
                type $model = IdempotencyModel;
                $body
            }
            "token" => {
                type $model = TokenModel;
                $body
            }
            _ => $unknown,
        }
    };
}

/// Per property name, the ITF trace behind the report's trace of it.
pub type Itfs = BTreeMap<String, Json>;

/// Parses `K/N` (0 <= K < N).
pub fn parse_shard(text: &str) -> Result<check::Shard, String> {
    let parsed = text.split_once('/').and_then(|(index, count)| {
        Some(check::Shard {
            index: index.trim().parse().ok()?,
            count: count.trim().parse().ok()?,
        })
    });
    match parsed {
        Some(shard) if shard.count > 0 && shard.index < shard.count => Ok(shard),
        _ => Err(format!(
            "shard `{text}` is not K/N with 0 <= K < N (shard 0/4 is the first of four)"
        )),
    }
}

/// Runs one job of a sharded `check` (exhaustive, or simulated when `simulation` is given):
/// its report and the ITF trace of every counterexample and example it found.
pub fn run_shard(
    job: &Job,
    options: &CheckOptions,
    simulation: Option<&SimulationOptions>,
    progress: &mut dyn FnMut(Progress),
) -> Result<(CheckReport, Itfs), SpecError> {
    with_traced_model!(
        job.model,
        |M| {
            let bounds = M::resolve_bounds(job.variant, &job.overrides)?;
            let model = M::build(job.variant, &bounds)?;
            let checked = match simulation {
                Some(simulation) => check::simulate(&model, options, simulation, progress),
                None => check::run_with_paths(&model, options, progress),
            };
            let itfs = itfs_of(&model, &checked);
            Ok((checked.report, itfs))
        },
        Err(SpecError::UnknownModel {
            name: job.model.to_string(),
            valid: MODEL_NAMES.iter().map(|name| name.to_string()).collect(),
        })
    )
}

fn itfs_of<M>(model: &M, checked: &check::Checked<M>) -> Itfs
where
    M: TraceEncoding,
    M::State: Clone + std::fmt::Debug + std::hash::Hash + Eq + Send + Sync + 'static,
    M::Action: Clone + std::fmt::Debug + PartialEq + Send + Sync + 'static,
{
    checked
        .report
        .properties
        .iter()
        .filter_map(|property| {
            let path = checked.paths.get(property.name)?;
            let kind = match property.kind {
                Kind::Sometimes => "example",
                Kind::Always | Kind::Eventually | Kind::LeadsTo => "counterexample",
            };
            let meta = TraceMeta {
                kind: kind.to_string(),
                property: Some(property.name.to_string()),
                description: format!("shard trace of {}", property.name),
            };
            Some((
                property.name.to_string(),
                to_itf_lasso(model, path, &meta, property.lasso_start),
            ))
        })
        .collect()
}

/// The `--json` document of a sharded run: `check`'s document with each report's traces as
/// ITF (`properties[].itf`), what `merge` re-executes.
pub fn shard_document(reports: &[(CheckReport, Itfs)]) -> Json {
    let plain: Vec<CheckReport> = reports.iter().map(|(report, _)| report.clone()).collect();
    let mut document = models::json_document(&plain);
    let Some(values) = document["reports"].as_array_mut() else {
        return document;
    };
    for (value, (_, itfs)) in values.iter_mut().zip(reports) {
        let Some(properties) = value["properties"].as_array_mut() else {
            continue;
        };
        for property in properties {
            let name = property["name"].as_str().unwrap_or_default().to_string();
            if let Some(itf) = itfs.get(&name) {
                property["itf"] = itf.clone();
            }
        }
    }
    document
}

/// One merged run: its report and, per shown trace, the path's steps for an HTML page.
pub struct Merged {
    pub report: CheckReport,
    pub detail: crate::report::html::PageDetail,
}

/// Reads shard documents and merges the shards of each run, in the order runs first appear.
pub fn merge_files(files: &[PathBuf]) -> Result<Vec<Merged>, String> {
    let mut runs: Vec<(String, Vec<(CheckReport, Itfs)>)> = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(file)
            .map_err(|error| format!("cannot read {}: {error}", file.display()))?;
        let document: Json = serde_json::from_str(&text)
            .map_err(|error| format!("{} is not JSON: {error}", file.display()))?;
        let reports = document["reports"].as_array().ok_or_else(|| {
            format!(
                "{} is not a `check --json` document (no `reports`)",
                file.display()
            )
        })?;
        for value in reports {
            let shard =
                read_report(value).map_err(|error| format!("{}: {error}", file.display()))?;
            let key = format!("{}/{} [{}]", shard.0.model, shard.0.variant, shard.0.bounds);
            match runs.iter_mut().find(|(known, _)| *known == key) {
                Some((_, shards)) => shards.push(shard),
                None => runs.push((key, vec![shard])),
            }
        }
    }
    if runs.is_empty() {
        return Err("no reports in the given files".to_string());
    }
    runs.into_iter()
        .map(|(_, shards)| merge_run(&shards))
        .collect()
}

fn merge_run(shards: &[(CheckReport, Itfs)]) -> Result<Merged, String> {
    let reports: Vec<CheckReport> = shards.iter().map(|(report, _)| report.clone()).collect();
    let report = check::merge(&reports).map_err(|error| error.to_string())?;
    let mut traces = BTreeMap::new();
    for property in &report.properties {
        let Some(trace) = &property.trace else {
            continue;
        };
        // The shard whose trace the merge kept: the ITF it wrote re-executes to that trace.
        let itf = shards
            .iter()
            .find_map(|(shard, itfs)| {
                let kept = shard.properties.iter().any(|candidate| {
                    candidate.name == property.name && candidate.trace.as_ref() == Some(trace)
                });
                kept.then(|| itfs.get(property.name)).flatten()
            })
            .ok_or_else(|| {
                format!(
                    "{}/{}: the trace of {} has no ITF in its shard file",
                    report.model, report.variant, property.name
                )
            })?;
        let views = with_traced_model!(
            report.model,
            |M| replayed_views::<M>(itf, property, trace),
            Err(format!("unknown model {}", report.model))
        )
        .map_err(|error| format!("{}/{}: {error}", report.model, report.variant))?;
        traces.insert(property.name.to_string(), views);
    }
    let coverage = crate::report::html::Coverage {
        states_per_depth: report
            .states_per_depth
            .iter()
            .map(|count| *count as u64)
            .collect(),
        action_counts: report
            .action_coverage
            .iter()
            .map(|(name, count)| (name.clone(), *count as u64))
            .collect(),
    };
    Ok(Merged {
        report,
        detail: crate::report::html::PageDetail {
            traces,
            coverage: Some(coverage),
        },
    })
}

/// Re-executes a shard's ITF trace; it must print as the shard's report printed it.
fn replayed_views<M>(
    itf: &Json,
    property: &PropertyReport,
    trace: &[TraceStep],
) -> Result<Vec<crate::report::html::StepView>, String>
where
    M: TraceEncoding,
    M::State: Clone + std::fmt::Debug + std::hash::Hash + Eq + Send + Sync + 'static,
    M::Action: Clone + std::fmt::Debug + PartialEq + Send + Sync + 'static,
{
    let loaded = from_itf::<M>(itf).map_err(|error| {
        format!(
            "the trace of {} does not re-execute: {error}",
            property.name
        )
    })?;
    if check::steps_of(&loaded.model, &loaded.path) != trace {
        return Err(format!(
            "the trace of {} re-executes to other steps than its report printed",
            property.name
        ));
    }
    Ok(models::step_views(&loaded.model, &loaded.path))
}

fn field<'a>(value: &'a Json, key: &str) -> Result<&'a Json, String> {
    value
        .get(key)
        .ok_or_else(|| format!("a report without `{key}`"))
}

fn natural(value: &Json, key: &str) -> Result<usize, String> {
    field(value, key)?
        .as_u64()
        .map(|number| number as usize)
        .ok_or_else(|| format!("`{key}` is not a non-negative integer"))
}

fn verdict(value: &Json) -> Result<Verdict, String> {
    Ok(match value.as_str() {
        Some("holds") => Verdict::Holds,
        Some("violated") => Verdict::Violated,
        Some("reached") => Verdict::Reached,
        Some("unreached") => Verdict::Unreached,
        Some("unknown") => Verdict::Unknown,
        _ => return Err(format!("{value} is not a verdict")),
    })
}

fn search(value: &Json) -> Result<Search, String> {
    match value["mode"].as_str() {
        Some("exhaustive") => Ok(Search::Exhaustive),
        Some("simulation") => Ok(Search::Simulation {
            seed: field(value, "seed")?
                .as_u64()
                .ok_or("`seed` is not a number")?,
            samples: natural(value, "samples")?,
            depth_max: natural(value, "depth_max")?,
        }),
        _ => Err(format!("{value} is not a search")),
    }
}

fn stop(value: &Json) -> Result<Option<Stop>, String> {
    if value.is_null() {
        return Ok(None);
    }
    let number = |key: &str| {
        field(value, key)?
            .as_u64()
            .ok_or_else(|| format!("`stopped.{key}` is not a number"))
    };
    Ok(Some(match value["limit"].as_str() {
        Some("timeout") => Stop::Timeout {
            timeout_secs_max: number("timeout_secs_max")?,
        },
        Some("states") => Stop::States {
            states_max: number("states_max")? as usize,
            unique_states: number("unique_states")? as usize,
        },
        Some("memory") => Stop::Memory {
            memory_bytes_max: number("memory_bytes_max")?,
            resident_bytes: number("resident_bytes")?,
            growth_bytes: number("growth_bytes")?,
        },
        Some("disk") => Stop::Disk {
            disk_bytes_max: value["disk_bytes_max"].as_u64(),
            spilled_bytes: number("spilled_bytes")?,
            os_error: value["os_error"].as_i64().map(|code| code as i32),
        },
        _ => return Err(format!("{value} is not a limit")),
    }))
}

/// One report of a shard document, resolved against the model it names.
fn read_report(value: &Json) -> Result<(CheckReport, Itfs), String> {
    let model = field(value, "model")?.as_str().unwrap_or_default();
    with_traced_model!(
        model,
        |M| read_report_of::<M>(value),
        Err(format!(
            "unknown model `{model}`; valid models: {}",
            MODEL_NAMES.join(", ")
        ))
    )
}

fn read_report_of<M>(value: &Json) -> Result<(CheckReport, Itfs), String>
where
    M: ModelSpec,
    M::State: Clone + std::fmt::Debug + std::hash::Hash + Eq + Send + Sync + 'static,
    M::Action: Clone + std::fmt::Debug + PartialEq + Send + Sync + 'static,
{
    let variant = M::resolve_variant(field(value, "variant")?.as_str().unwrap_or_default())
        .map_err(|error| error.to_string())?;
    let overrides = bound_overrides(field(value, "bounds")?)?;
    let bounds: Bounds =
        M::resolve_bounds(variant, &overrides).map_err(|error| error.to_string())?;
    let model = M::build(variant, &bounds).map_err(|error| error.to_string())?;
    let shard = field(value, "shard").map_err(|_| {
        format!(
            "{}/{variant}: a report that is not a shard (run check with --shard K/N)",
            M::NAME
        )
    })?;
    let shard = ShardReport {
        index: natural(shard, "index")?,
        count: natural(shard, "count")?,
        level: shard["level"].as_u64().map(|level| level as usize),
    };
    let (properties, itfs) = read_properties(&model, variant, field(value, "properties")?)?;
    let report = CheckReport {
        model: M::NAME,
        variant,
        bounds,
        search: search(field(value, "search")?)?,
        states: natural(value, "states")?,
        unique_states: natural(value, "unique_states")?,
        max_depth: natural(value, "max_depth")?,
        states_per_depth: states_per_depth(value)?,
        action_coverage: action_coverage(value)?,
        seconds: field(value, "seconds")?.as_f64().unwrap_or(0.0),
        complete: field(value, "complete")?.as_bool().unwrap_or(false),
        stopped: stop(field(value, "stopped")?)?,
        shard: Some(shard),
        liveness: liveness(value)?,
        properties,
    };
    Ok((report, itfs))
}

/// The shard's `bounds`, every one a number a bound can take (a `u32`).
fn bound_overrides(bounds: &Json) -> Result<Vec<(String, u32)>, String> {
    bounds
        .as_object()
        .ok_or("`bounds` is not an object")?
        .iter()
        .map(|(key, number)| {
            number
                .as_u64()
                .and_then(|number| u32::try_from(number).ok())
                .map(|number| (key.clone(), number))
                .ok_or_else(|| format!("bound {key} is not a number"))
        })
        .collect()
}

/// The reported properties, each resolved against this build's definitions (a name it does not
/// define is another build's shard), and the ITF trace behind each trace reported.
fn read_properties<M>(
    model: &M,
    variant: &str,
    properties: &Json,
) -> Result<(Vec<PropertyReport>, Itfs), String>
where
    M: ModelSpec,
    M::State: Clone + std::fmt::Debug + std::hash::Hash + Eq + Send + Sync + 'static,
    M::Action: Clone + std::fmt::Debug + PartialEq + Send + Sync + 'static,
{
    let definitions = check::definitions(model);
    let mut itfs = Itfs::new();
    let mut reports = Vec::new();
    for property in properties.as_array().ok_or("`properties` is not a list")? {
        let name = property["name"].as_str().unwrap_or_default();
        let def = definitions
            .iter()
            .find(|def| def.name == name)
            .ok_or_else(|| {
                format!(
                    "{}/{variant} has no property `{name}` (another build?)",
                    M::NAME
                )
            })?;
        let trace = trace_steps(&property["trace"])?;
        if let Some(itf) = property.get("itf") {
            itfs.insert(name.to_string(), itf.clone());
        }
        reports.push(PropertyReport {
            id: def.id,
            name: def.name,
            kind: def.kind,
            expected: model.expected(def),
            verdict: verdict(&property["verdict"])?,
            trace,
            lasso_start: property["lasso_start"].as_u64().map(|at| at as usize),
            bound_cut_states: property["bound_cut_states"]
                .as_u64()
                .map(|count| count as usize),
        });
    }
    Ok((reports, itfs))
}

/// A property's trace as the shard printed it (`null` when it has none); `merge_run` checks it
/// against the re-executed ITF.
fn trace_steps(trace: &Json) -> Result<Option<Vec<TraceStep>>, String> {
    if trace.is_null() {
        return Ok(None);
    }
    let steps = trace
        .as_array()
        .ok_or("a trace is not a list")?
        .iter()
        .map(|step| {
            Ok(TraceStep {
                step: natural(step, "step")?,
                action: step["action"].as_str().unwrap_or_default().to_string(),
                words: step["words"].as_str().unwrap_or_default().to_string(),
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    Ok(Some(steps))
}

fn states_per_depth(value: &Json) -> Result<Vec<usize>, String> {
    field(value, "states_per_depth")?
        .as_array()
        .ok_or("`states_per_depth` is not a list")?
        .iter()
        .map(|count| count.as_u64().map(|count| count as usize))
        .collect::<Option<_>>()
        .ok_or_else(|| "`states_per_depth` holds a non-number".to_string())
}

fn action_coverage(value: &Json) -> Result<BTreeMap<String, usize>, String> {
    field(value, "action_coverage")?
        .as_object()
        .ok_or("`action_coverage` is not an object")?
        .iter()
        .map(|(kind, count)| Some((kind.clone(), count.as_u64()? as usize)))
        .collect::<Option<_>>()
        .ok_or_else(|| "`action_coverage` holds a non-number".to_string())
}

/// The liveness pass of a run that had one (absent or `null` otherwise).
fn liveness(value: &Json) -> Result<Option<check::LivenessRun>, String> {
    match value.get("liveness") {
        Some(run) if !run.is_null() => Ok(Some(check::LivenessRun {
            unique_states: natural(run, "unique_states")?,
            edges: natural(run, "edges")?,
            seconds: field(run, "seconds")?.as_f64().unwrap_or(0.0),
        })),
        _ => Ok(None),
    }
}

/// The HTML report of merged runs: a page per run and the index, as `check --html` writes.
pub fn write_html(directory: &Path, merged: &[Merged]) -> std::io::Result<()> {
    for run in merged {
        crate::report::html::write_page(directory, &run.report, &run.detail)?;
    }
    let reports: Vec<&CheckReport> = merged.iter().map(|run| &run.report).collect();
    crate::report::html::write_index(
        directory,
        &reports,
        &crate::report::run_info::RunInfo::now(),
    )?;
    Ok(())
}
