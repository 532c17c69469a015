//! Joining the reports of a run's shards (`oncecheck check --shard K/N`, then `oncecheck
//! merge`) into the report of the whole run.
//!
//! Invariants:
//! - Only the shards of one run merge: same model, variant, bounds and search, shard count N,
//!   and every index 0..N-1 exactly once; anything else is an error value naming the problem.
//! - A property is violated (reached) when some shard found it, with the shortest trace any
//!   shard found (the earliest shard among equals: for a simulation the earliest walk, as the
//!   unsharded run keeps); it holds (is unreached) only when every shard says so, i.e. each
//!   exhausted its part; otherwise it is unknown.
//! - Counts add up shard by shard: `states`, `action_coverage` and, above an exhaustive run's
//!   split level, `states_per_depth` and `unique_states` are sums. A state reached from the
//!   parts of two shards (or by the walks of two shards) is counted by each, so the merged
//!   `unique_states` is an upper bound of the run's; the levels down to the split are every
//!   shard's and are counted once. `seconds` is the slowest shard's (the shards run at once).

use super::{CheckReport, Kind, PropertyReport, Search, ShardReport, Verdict};

/// Why shard reports do not merge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MergeError(pub String);

impl std::fmt::Display for MergeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for MergeError {}

/// The report of the whole run from the reports of its shards (in any order).
pub fn merge(shards: &[CheckReport]) -> Result<CheckReport, MergeError> {
    let first = shards
        .first()
        .ok_or_else(|| MergeError("no shard reports to merge".into()))?;
    let label = format!("{}/{} [{}]", first.model, first.variant, first.bounds);
    let Some(ShardReport { count, .. }) = first.shard else {
        return Err(MergeError(format!("{label}: a report that is not a shard")));
    };
    let ordered = in_shard_order(shards, first, &label, count)?;
    let split = ordered.iter().find_map(|report| report.shard?.level);
    if ordered
        .iter()
        .any(|report| report.shard.and_then(|shard| shard.level) != split)
        && matches!(first.search, Search::Exhaustive)
    {
        return Err(MergeError(format!(
            "{label}: the shards split different levels (a different build?)"
        )));
    }

    let mut merged = first.clone();
    merged.shard = None;
    merged.states = ordered.iter().map(|report| report.states).sum();
    merged.max_depth = ordered
        .iter()
        .map(|report| report.max_depth)
        .max()
        .unwrap_or(0);
    merged.seconds = ordered
        .iter()
        .map(|report| report.seconds)
        .fold(0.0, f64::max);
    merged.stopped = ordered.iter().find_map(|report| report.stopped);
    merged.action_coverage.clear();
    for report in &ordered {
        for (kind, count) in &report.action_coverage {
            *merged.action_coverage.entry(kind.clone()).or_insert(0) += count;
        }
    }
    merged.states_per_depth = match (first.search, split) {
        (Search::Exhaustive, Some(level)) => {
            let depth = ordered
                .iter()
                .map(|report| report.states_per_depth.len())
                .max()
                .unwrap_or(0);
            (0..depth)
                .map(|at| {
                    if at <= level {
                        first.states_per_depth.get(at).copied().unwrap_or(0)
                    } else {
                        ordered
                            .iter()
                            .filter_map(|report| report.states_per_depth.get(at))
                            .sum()
                    }
                })
                .collect()
        }
        // Nothing was split: every shard explored the whole space (the first one stands for all).
        (Search::Exhaustive, None) => first.states_per_depth.clone(),
        (Search::Simulation { .. }, _) => Vec::new(),
    };
    merged.unique_states = match (first.search, split) {
        (Search::Exhaustive, _) => merged.states_per_depth.iter().sum(),
        (Search::Simulation { .. }, _) => ordered.iter().map(|report| report.unique_states).sum(),
    };
    if matches!(first.search, Search::Exhaustive) && split.is_none() {
        merged.states = first.states;
        merged.action_coverage = first.action_coverage.clone();
    }
    merged.properties = first
        .properties
        .iter()
        .enumerate()
        .map(|(index, property)| {
            let candidates: Vec<&PropertyReport> = ordered
                .iter()
                .map(|report| &report.properties[index])
                .collect();
            merge_property(property, &candidates)
        })
        .collect::<Result<_, _>>()?;
    merged.complete = !first.is_simulation()
        && merged.stopped.is_none()
        && ordered.iter().all(|report| report.complete);
    Ok(merged)
}

/// The shards of one run in shard order: refused when a report belongs to another run or
/// another shard count, or a shard is given twice or missing.
fn in_shard_order<'a>(
    shards: &'a [CheckReport],
    first: &CheckReport,
    label: &str,
    count: usize,
) -> Result<Vec<&'a CheckReport>, MergeError> {
    let mut ordered: Vec<Option<&CheckReport>> = vec![None; count];
    for report in shards {
        let same_run = report.model == first.model
            && report.variant == first.variant
            && report.bounds == first.bounds
            && report.search == first.search
            && report.properties.len() == first.properties.len();
        if !same_run {
            return Err(MergeError(format!(
                "{label}: a shard of another run ({}/{} [{}], {:?})",
                report.model, report.variant, report.bounds, report.search
            )));
        }
        let Some(shard) = report.shard.filter(|shard| shard.count == count) else {
            return Err(MergeError(format!(
                "{label}: shards of {count} mixed with {:?}",
                report.shard
            )));
        };
        let slot = ordered.get_mut(shard.index).ok_or_else(|| {
            MergeError(format!("{label}: shard index {} of {count}", shard.index))
        })?;
        if slot.replace(report).is_some() {
            return Err(MergeError(format!(
                "{label}: shard {}/{count} given twice",
                shard.index
            )));
        }
    }
    let missing: Vec<String> = (0..count)
        .filter(|index| ordered[*index].is_none())
        .map(|index| format!("{index}/{count}"))
        .collect();
    if !missing.is_empty() {
        return Err(MergeError(format!(
            "{label}: shard {} missing",
            missing.join(", ")
        )));
    }
    Ok(ordered.into_iter().flatten().collect())
}

fn merge_property(
    first: &PropertyReport,
    shards: &[&PropertyReport],
) -> Result<PropertyReport, MergeError> {
    if shards.iter().any(|property| property.name != first.name) {
        return Err(MergeError(format!(
            "the shards list their properties differently (at {})",
            first.name
        )));
    }
    let (found_verdict, absent_verdict) = match first.kind {
        // A liveness property is decided by each shard's own exploration of the whole graph
        // (it is not split), so its shards agree; it merges as an `always` does.
        Kind::Always | Kind::Eventually | Kind::LeadsTo => (Verdict::Violated, Verdict::Holds),
        Kind::Sometimes => (Verdict::Reached, Verdict::Unreached),
    };
    let found = shards
        .iter()
        .filter(|property| property.verdict == found_verdict)
        // The earliest shard among the shortest: `min_by_key` keeps the first minimum.
        .min_by_key(|property| property.trace.as_ref().map_or(usize::MAX, Vec::len));
    let mut merged = first.clone();
    match found {
        Some(property) => merged = (*property).clone(),
        None => {
            merged.trace = None;
            merged.lasso_start = None;
            merged.verdict = if shards
                .iter()
                .all(|property| property.verdict == absent_verdict)
            {
                absent_verdict
            } else {
                Verdict::Unknown
            };
        }
    }
    Ok(merged)
}
