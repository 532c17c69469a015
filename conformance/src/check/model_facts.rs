//! Facts about the registered models that the CLI's help, its option checks and the reports
//! need besides a run: each variant's CI bounds and expected verdicts, which models declare a
//! bound, and the help text listing models and variants.
//!
//! Invariant: everything here is derived from the model registry (`models::with_model!`), so it
//! cannot drift from the models.

use crate::check::models::{with_model, MODEL_NAMES};
use crate::report::verdict_words::{self, RunOutcome};
use oncecheck_model::check::{Bounds, CheckReport, Kind, ModelSpec, Verdict};

/// The CI bounds of a variant (its defaults, the variant's own overrides applied); `None` for a
/// model or variant the registry does not know.
pub fn ci_bounds(model: &str, variant: &str) -> Option<Bounds> {
    with_model!(model, |M| M::resolve_bounds(variant, &[]).ok(), None)
}

/// The outcome of a report, judged against its variant's CI bounds.
pub fn outcome_of(report: &CheckReport) -> RunOutcome {
    let ci = ci_bounds(report.model, report.variant).unwrap_or_else(|| report.bounds.clone());
    verdict_words::outcome(report, &ci)
}

/// Whether the search behind a report visited every reachable state: only an exhausted search
/// decides `holds` or `unreached`, so a complete run with one of them exhausted its space (a
/// run whose every property was violated or reached may have stopped early, once all were).
pub fn exhausted(report: &CheckReport) -> bool {
    report.complete
        && !report.is_simulation()
        && report
            .properties
            .iter()
            .any(|property| matches!(property.verdict, Verdict::Holds | Verdict::Unreached))
}

/// One expected verdict of a variant at its CI bounds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expectation {
    pub id: &'static str,
    pub name: &'static str,
    pub kind: Kind,
    pub expected: Verdict,
}

/// Every property of a variant with its expected verdict at the CI bounds.
pub fn expectations(model: &str, variant: &str) -> Option<Vec<Expectation>> {
    with_model!(
        model,
        |M| {
            let bounds = M::resolve_bounds(variant, &[]).ok()?;
            let built = M::build(variant, &bounds).ok()?;
            Some(
                built
                    .property_defs()
                    .iter()
                    .map(|def| Expectation {
                        id: def.id,
                        name: def.name,
                        kind: def.kind,
                        expected: built.expected(def),
                    })
                    .collect(),
            )
        },
        None
    )
}

/// The variants of a model, in the registry's order.
pub fn variants(model: &str) -> &'static [&'static str] {
    with_model!(model, |M| M::VARIANTS, &[])
}

/// The models that declare a bound `key`.
pub fn models_with_bound(key: &str) -> Vec<&'static str> {
    MODEL_NAMES
        .iter()
        .copied()
        .filter(|model| {
            with_model!(
                *model,
                |M| M::BOUNDS.iter().any(|spec| spec.key == key),
                false
            )
        })
        .collect()
}

/// Why `--bound` needs a model: bounds are a model's own (the same key can mean different things
/// in two models), so one is resolved against its model only.
pub fn bound_without_a_model(overrides: &[(String, u32)]) -> String {
    let (key, value) = &overrides[0];
    let owners = models_with_bound(key);
    match owners.as_slice() {
        [] => format!(
            "--bound {key}={value}: no model declares a bound `{key}`; name a model (`oncecheck check MODEL --bound ...`) and see `oncecheck check --help` for its bounds"
        ),
        owners => format!(
            "--bound {key}={value} needs a model: a bound belongs to one model (`{key}` is a bound of {}); e.g. oncecheck check {} --bound {key}={value}",
            owners.join(" and "),
            owners[0]
        ),
    }
}

/// The help text listing every model with its variants, each variant's role and the design a
/// model opens at (`oncecheck traces --help`, `oncecheck explore --help`).
pub fn variants_help() -> String {
    let mut text =
        String::from("Models and variants (`oncecheck check --help` lists their bounds):\n");
    for model in MODEL_NAMES {
        let design = crate::check::variants::design_variant(model).unwrap_or("?");
        text.push_str(&format!(
            "  {model}  variants: {} (design: {design})\n",
            variants(model).join(", ")
        ));
    }
    text
}
