//! What a check's outcome is called wherever a person reads it (the text report, the HTML pages,
//! JUnit): one wording for a run that met its expectations, a verdict that differs, a verdict
//! that differs because the bounds were changed from the CI bounds the expectations are stated
//! for, and a run a limit stopped before it decided everything.
//!
//! Invariants: a run stopped by a limit is called stopped, never a mismatch, and its undecided
//! verdicts are called undecided, never failures; a verdict that differs at changed bounds says
//! which bounds changed.

use oncecheck_model::check::{Bounds, CheckReport, Kind, PropertyReport, Stop, Verdict};

/// A property kind as the reports and `--json` spell it (`always`, `sometimes`, and any kind a
/// model adds), from its serialised name so a new kind needs no change here.
pub fn kind_word(kind: Kind) -> String {
    serde_json::to_value(kind)
        .ok()
        .and_then(|value| value.as_str().map(str::to_string))
        .unwrap_or_else(|| format!("{kind:?}").to_lowercase())
}

/// The outcome of one (model, variant) run, for its header line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunOutcome {
    /// Every verdict equals its expectation.
    AsExpected,
    /// A limit stopped the run; what it had not decided is `unknown`.
    Stopped(Stop),
    /// The liveness properties were not checked (`--safety-only`) and stay `unknown`; every
    /// other verdict equals its expectation.
    SafetyOnly { undecided: usize },
    /// Verdicts differ, and the bounds differ from the CI bounds the expectations are stated for.
    DiffersAtChangedBounds { differing: usize, changes: String },
    /// Verdicts differ at the CI bounds: a regression (or a buggy variant that stopped failing).
    Mismatch { differing: usize },
}

/// The bounds that differ from the variant's CI bounds, as `key=N (CI: M)`, joined; empty when
/// the run used the CI bounds.
pub fn changed_bounds(bounds: &Bounds, ci_bounds: &Bounds) -> String {
    bounds
        .0
        .iter()
        .filter_map(|(key, value)| {
            let ci = ci_bounds.0.get(key)?;
            (ci != value).then(|| format!("{key}={value} (CI: {ci})"))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The outcome of a run, given the CI bounds of its variant.
pub fn outcome(report: &CheckReport, ci_bounds: &Bounds) -> RunOutcome {
    if let Some(stop) = report.stopped {
        return RunOutcome::Stopped(stop);
    }
    if report.matches_expectations() {
        return RunOutcome::AsExpected;
    }
    let differing = report
        .properties
        .iter()
        .filter(|property| !report.as_expected(property))
        .count();
    // Only a run without its liveness exploration leaves a liveness verdict `unknown` unstopped.
    let liveness_unchecked = report.liveness.is_none()
        && report
            .properties
            .iter()
            .filter(|property| !report.as_expected(property))
            .all(|property| property.kind.is_liveness() && property.verdict == Verdict::Unknown);
    if liveness_unchecked {
        return RunOutcome::SafetyOnly {
            undecided: differing,
        };
    }
    let changes = changed_bounds(&report.bounds, ci_bounds);
    if changes.is_empty() {
        RunOutcome::Mismatch { differing }
    } else {
        RunOutcome::DiffersAtChangedBounds { differing, changes }
    }
}

impl RunOutcome {
    /// The header's status word.
    pub fn status(&self) -> &'static str {
        match self {
            RunOutcome::AsExpected => "ok",
            RunOutcome::Stopped(_) => "STOPPED",
            RunOutcome::SafetyOnly { .. } => "SAFETY ONLY",
            RunOutcome::DiffersAtChangedBounds { .. } => "DIFFERS AT THESE BOUNDS",
            RunOutcome::Mismatch { .. } => "MISMATCH",
        }
    }

    /// One sentence for a run that is not as expected: what happened and what to do.
    pub fn explanation(&self) -> Option<String> {
        match self {
            RunOutcome::AsExpected => None,
            RunOutcome::Stopped(stop) => Some(format!(
                "stopped at {} before the state space was exhausted: what it had not decided is unknown ({})",
                limit_words(stop),
                limit_advice(stop)
            )),
            RunOutcome::SafetyOnly { undecided } => Some(format!(
                "the liveness properties were not checked (--safety-only): {undecided} undecided, every other verdict as expected"
            )),
            RunOutcome::DiffersAtChangedBounds { differing, changes } => Some(format!(
                "{differing} {} from the expectations, which are stated for the CI bounds; these bounds differ: {changes}. A changed bound adds or removes cases, so this is what the change does, not a regression",
                if *differing == 1 { "verdict differs" } else { "verdicts differ" },
            )),
            RunOutcome::Mismatch { differing } => Some(format!(
                "{differing} {} from the expectation at the CI bounds: a regression, or a buggy variant that no longer shows its bug",
                if *differing == 1 { "verdict differs" } else { "verdicts differ" },
            )),
        }
    }

    /// The mark of one property's row: `ok`, `?` (undecided by a stopped run), `DIFF` (differs
    /// at changed bounds) or `FAIL`.
    pub fn mark(&self, report: &CheckReport, property: &PropertyReport) -> &'static str {
        if report.as_expected(property) {
            "ok"
        } else if property.verdict == Verdict::Unknown
            && (report.stopped.is_some() || matches!(self, RunOutcome::SafetyOnly { .. }))
        {
            "?"
        } else if matches!(self, RunOutcome::DiffersAtChangedBounds { .. }) {
            "DIFF"
        } else {
            "FAIL"
        }
    }

    /// What the row's expectation is: `expected holds`, or `expected holds at the CI bounds`
    /// where the bounds changed.
    pub fn expectation(&self, property: &PropertyReport) -> String {
        match self {
            RunOutcome::DiffersAtChangedBounds { .. } => {
                format!("expected {} at the CI bounds", property.expected)
            }
            _ => format!("expected {}", property.expected),
        }
    }
}

/// The limit that stopped a run, in words: "the state limit (--states-max 1000)".
pub fn limit_words(stop: &Stop) -> String {
    const MIB: u64 = 1024 * 1024;
    match stop {
        Stop::Timeout { timeout_secs_max } => {
            format!("the time limit (--timeout-secs {timeout_secs_max})")
        }
        Stop::States {
            states_max,
            unique_states,
        } => format!(
            "the state limit (--states-max {states_max}) with {unique_states} unique states known"
        ),
        Stop::Memory {
            memory_bytes_max,
            resident_bytes,
            growth_bytes,
        } => {
            let growth = match growth_bytes {
                0 => String::new(),
                bytes => format!(", {} MiB about to be allocated", bytes.div_ceil(MIB)),
            };
            format!(
                "the memory limit (--memory-max-mb {}) with {} MiB resident{growth}",
                memory_bytes_max / MIB,
                resident_bytes / MIB
            )
        }
        Stop::Disk {
            disk_bytes_max: Some(disk_bytes_max),
            spilled_bytes,
            os_error: None,
        } => format!(
            "the disk limit (--disk-max-mb {}) with {} MiB of the frontier and parent log spilled",
            disk_bytes_max / MIB,
            spilled_bytes.div_ceil(MIB)
        ),
        Stop::Disk { .. } => format!("{stop}"),
    }
}

/// What to do about a limit.
fn limit_advice(stop: &Stop) -> &'static str {
    match stop {
        Stop::Timeout { .. } => "raise --timeout-secs, or use --simulate for bounds this large",
        Stop::States { .. } => "raise --states-max, or use --simulate for bounds this large",
        Stop::Memory { .. } => "raise --memory-max-mb if the machine has it, or use --simulate",
        Stop::Disk {
            disk_bytes_max: Some(_),
            ..
        } => "raise --disk-max-mb, or use --simulate",
        Stop::Disk { .. } => "give --spill-dir a disk with room, or use --simulate",
    }
}

/// The last line of a check: how many variants ran and how each came out, with the total of
/// unique states and seconds.
pub fn summary(outcomes: &[(&CheckReport, RunOutcome)]) -> String {
    let count = |wanted: fn(&RunOutcome) -> bool| {
        outcomes
            .iter()
            .filter(|(_, outcome)| wanted(outcome))
            .count()
    };
    let as_expected = count(|outcome| matches!(outcome, RunOutcome::AsExpected));
    let stopped = count(|outcome| matches!(outcome, RunOutcome::Stopped(_)));
    let safety_only = count(|outcome| matches!(outcome, RunOutcome::SafetyOnly { .. }));
    let changed = count(|outcome| matches!(outcome, RunOutcome::DiffersAtChangedBounds { .. }));
    let mismatched = count(|outcome| matches!(outcome, RunOutcome::Mismatch { .. }));
    let states: usize = outcomes
        .iter()
        .map(|(report, _)| report.unique_states)
        .sum();
    let seconds: f64 = outcomes.iter().map(|(report, _)| report.seconds).sum();
    let verdict = if as_expected == outcomes.len() {
        "every verdict equals its expectation"
    } else {
        "NOT every verdict equals its expectation"
    };
    format!(
        "summary: {} checked: {as_expected} as expected, {mismatched} mismatched, {changed} differing at changed bounds, {stopped} stopped by a limit{}; {states} unique states in {seconds:.2}s; {verdict}",
        match outcomes.len() {
            1 => "1 variant".to_string(),
            count => format!("{count} variants"),
        },
        if safety_only > 0 {
            format!(", {safety_only} checked for safety only")
        } else {
            String::new()
        }
    )
}
