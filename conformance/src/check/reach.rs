//! Which requirements' reaches a `check` run left unreached: an `always` that holds while its
//! `sometimes` partners (the properties with its requirement ID) are unreached was checked on states that
//! never show what it guards, so its `holds` says little there. `oncecheck check` prints them per
//! run, and over all its runs of a variant (the CI bounds and the named bound sets,
//! `ModelSpec::BOUND_SETS`) which partners no run reached; a requirement none of whose partners
//! any run reached is marked vacuous.
//!
//! Invariant: only an exhaustive run's `unreached` counts (a stopped run or a simulation says
//! `unknown`, which is neither).

use crate::check::models::Job;
use oncecheck_model::check::{CheckReport, Kind, Verdict};
use std::collections::{BTreeMap, BTreeSet};

/// Per requirement with an `always` that holds in the report: its `sometimes` partners, and
/// those unreached. (A violated `always` is not vacuous: its counterexample is the reach.)
fn partners(
    report: &CheckReport,
) -> BTreeMap<&'static str, (Vec<&'static str>, Vec<&'static str>)> {
    let guarded: BTreeSet<&'static str> = report
        .properties
        .iter()
        .filter(|property| property.kind == Kind::Always && property.verdict == Verdict::Holds)
        .map(|property| property.id)
        .collect();
    let mut partners: BTreeMap<&'static str, (Vec<&'static str>, Vec<&'static str>)> =
        BTreeMap::new();
    for property in &report.properties {
        if property.kind != Kind::Sometimes || !guarded.contains(property.id) {
            continue;
        }
        let entry = partners.entry(property.id).or_default();
        entry.0.push(property.name);
        if property.verdict == Verdict::Unreached {
            entry.1.push(property.name);
        }
    }
    partners
}

/// The lines `check` prints under one run: each requirement with unreached partners at these
/// bounds.
pub fn run_lines(report: &CheckReport) -> Vec<String> {
    partners(report)
        .into_iter()
        .filter(|(_, (_, unreached))| !unreached.is_empty())
        .map(|(id, (all, unreached))| {
            let vacuous = if unreached.len() == all.len() {
                "; its `always` holds vacuously at these bounds"
            } else {
                ""
            };
            format!(
                "  reach unreached at these bounds: {id}, {} of {} sometimes: {}{vacuous}",
                unreached.len(),
                all.len(),
                unreached.join("; ")
            )
        })
        .collect()
}

/// Over every run of each (model, variant): the partners no run reached, and the requirements
/// none of whose partners any run reached (vacuous). One line per variant.
pub fn summary_lines(runs: &[(&Job, &CheckReport)]) -> Vec<String> {
    // (model, variant) -> requirement -> (partners, reached in some run), and the runs' names.
    type Reaches = BTreeMap<&'static str, (BTreeSet<&'static str>, BTreeSet<&'static str>)>;
    let mut variants: BTreeMap<(&str, &str), (Reaches, Vec<String>)> = BTreeMap::new();
    for (job, report) in runs {
        let entry = variants.entry((report.model, report.variant)).or_default();
        entry.1.push(match job.bound_set {
            Some(set) => format!("bound set `{set}`"),
            None if job.overrides.is_empty() => "CI bounds".to_string(),
            None => "the bounds given".to_string(),
        });
        for (id, (all, _)) in partners(report) {
            let requirement = entry.0.entry(id).or_default();
            for name in all {
                requirement.0.insert(name);
                // Only a reach shown counts: a stopped run's `unknown` is no evidence.
                let reached = report
                    .properties
                    .iter()
                    .any(|property| property.name == name && property.verdict == Verdict::Reached);
                if reached {
                    requirement.1.insert(name);
                }
            }
        }
    }
    variants
        .into_iter()
        .map(|((model, variant), (reaches, runs))| {
            let mut missed = Vec::new();
            let mut vacuous = Vec::new();
            for (id, (all, reached)) in &reaches {
                if reached.is_empty() {
                    vacuous.push(*id);
                }
                missed.extend(all.difference(reached).map(|name| format!("`{name}`")));
            }
            let runs = runs.join(", ");
            if reaches.is_empty() {
                // No `always` held in any run (each stopped, or each violated): there is no
                // pass whose reach could be vacuous, and no claim that every reach was shown.
                return format!("{model}/{variant} ({runs}): no always holds in these runs");
            }
            match (missed.is_empty(), vacuous.is_empty()) {
                (true, _) => format!(
                    "{model}/{variant} ({runs}): every sometimes partner of every always reached"
                ),
                (false, true) => format!(
                    "{model}/{variant} ({runs}): unreached in every run: {}",
                    missed.join(", ")
                ),
                (false, false) => format!(
                    "{model}/{variant} ({runs}): VACUOUS {} (no partner reached); unreached in every run: {}",
                    vacuous.join(", "),
                    missed.join(", ")
                ),
            }
        })
        .collect()
}

/// Adds to every report of a `check --json` document its `bound_set` (a name or null) and its
/// `unreached_reaches` (per requirement with unreached partners: `id`, `partners`, `unreached`).
pub fn annotate(document: &mut serde_json::Value, runs: &[(&Job, &CheckReport)]) {
    let Some(reports) = document["reports"].as_array_mut() else {
        return;
    };
    for (value, (job, report)) in reports.iter_mut().zip(runs) {
        value["bound_set"] = serde_json::json!(job.bound_set);
        value["unreached_reaches"] = partners(report)
            .into_iter()
            .filter(|(_, (_, unreached))| !unreached.is_empty())
            .map(|(id, (all, unreached))| {
                serde_json::json!({ "id": id, "partners": all.len(), "unreached": unreached })
            })
            .collect();
    }
}
