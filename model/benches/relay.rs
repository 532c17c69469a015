//! Model-checking cost of the relay model: unique states, states per second, peak memory and
//! the state-space growth per depth. A benchmark, not a test: it asserts nothing about time.
//!
//! Run one configuration per process (peak memory is per process):
//! - `cargo bench -p oncecheck-model --bench relay` — every variant at its CI bounds through
//!   `check::run` (what `oncecheck check relay` runs), then unique states per depth per variant;
//! - `ONCECHECK_BENCH=fixed-3 cargo bench ...` — `fixed` with 3 new-build writers x 2 ops, one
//!   re-push, one puller x 3 pulls, window on, no lost responses, no deadline, the legacy-gap
//!   table: one exhaustive BFS (`fixed-3-all-tables`: every initial table);
//! - `ONCECHECK_BENCH=counter-only-3 cargo bench ...` — `counter-only` with 3 writers until R1
//!   is found;
//! - `ONCECHECK_BENCH=fixed-ci cargo bench ...` — `fixed` at its CI bounds (one lost response),
//!   the verdict BFS only;
//! - `ONCECHECK_BENCH=fixed-no-loss cargo bench ...` — the same with `lost_responses_max=0`;
//! - `ONCECHECK_BENCH=unreduced cargo bench ...` — `fixed-no-loss` without reductions.

use oncecheck_model::check::{self, CheckOptions, ModelSpec};
use oncecheck_model::relay::RelayModel;
use stateright::{Checker, HasDiscoveries, Model};
use std::collections::{HashSet, VecDeque};
use std::hash::{BuildHasher, RandomState};
use std::time::Instant;

/// Peak resident memory of this process so far, from the kernel (Linux only).
fn peak_memory_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|line| line.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

fn model(variant: &str, overrides: &[(&str, u32)]) -> RelayModel {
    let overrides: Vec<(String, u32)> = overrides
        .iter()
        .map(|(key, value)| (key.to_string(), *value))
        .collect();
    let bounds = RelayModel::resolve_bounds(variant, &overrides).expect("valid bounds");
    RelayModel::build(variant, &bounds).expect("a model")
}

/// `check::run`: the verdict pass and the shortest traces, as `oncecheck check` runs them.
fn run_check(variant: &str, overrides: &[(&str, u32)]) {
    let model = model(variant, overrides);
    let bounds = model.bounds().to_string();
    let report = check::run(
        model,
        &CheckOptions {
            threads: 1,
            ..CheckOptions::default()
        },
        &mut |_| {},
    );
    println!(
        "relay/{variant:<13} CI bounds: {:>9} unique states, depth {:>3}, {:>6.2}s, {:>9.0} states/s, peak memory {:>7.1} MiB, verdicts {}",
        report.unique_states,
        report.max_depth,
        report.seconds,
        report.states as f64 / report.seconds.max(1e-9),
        peak_memory_mib().unwrap_or(f64::NAN),
        if report.matches_expectations() { "as expected" } else { "MISMATCH" },
    );
    println!("  bounds: {bounds}");
}

/// One exhaustive BFS (stateright, 2 threads), no shortest-trace pass: the verdicts' cost.
fn run_bfs(label: &str, model: RelayModel, stop_at_first_violation: bool) {
    let started = Instant::now();
    let bounds = model.bounds().to_string();
    let builder = model.checker().threads(2);
    let builder = if stop_at_first_violation {
        builder.finish_when(HasDiscoveries::AnyFailures)
    } else {
        builder
    };
    let checker = builder.spawn_bfs().join();
    let seconds = started.elapsed().as_secs_f64();
    let mut found: Vec<&str> = checker.discoveries().into_keys().collect();
    found.sort();
    let violated: Vec<&str> = found
        .iter()
        .copied()
        .filter(|name| !name.contains("reach:"))
        .collect();
    println!(
        "relay/{label}: {} unique states, depth {}, {seconds:.1}s, {:.0} states/s, peak memory {:.1} MiB, violated {violated:?}, {} reach properties reached",
        checker.unique_state_count(),
        checker.max_depth(),
        checker.state_count() as f64 / seconds.max(1e-9),
        peak_memory_mib().unwrap_or(f64::NAN),
        found.len() - violated.len(),
    );
    println!("  bounds: {bounds}");
}

/// Unique states first reached at each depth: the state-space growth picture. A breadth-first
/// search of its own keeping 64-bit state hashes only.
fn growth(variant: &str) {
    let model = model(variant, &[]);
    let hasher = RandomState::new();
    let mut seen: HashSet<u64> = HashSet::new();
    let mut frontier: VecDeque<_> = model
        .init_states()
        .into_iter()
        .filter(|state| seen.insert(hasher.hash_one(state)))
        .collect();
    let mut per_depth = Vec::new();
    let mut actions = Vec::new();
    while !frontier.is_empty() {
        per_depth.push(frontier.len());
        let mut next = VecDeque::new();
        for state in frontier {
            actions.clear();
            model.actions(&state, &mut actions);
            for action in actions.drain(..) {
                if let Some(successor) = model.next_state(&state, action) {
                    if seen.insert(hasher.hash_one(&successor)) {
                        next.push_back(successor);
                    }
                }
            }
        }
        frontier = next;
    }
    let picture: Vec<String> = per_depth
        .iter()
        .enumerate()
        .map(|(depth, count)| format!("{depth}:{count}"))
        .collect();
    println!(
        "relay/{variant:<13} unique states per depth: {}",
        picture.join(" ")
    );
}

fn main() {
    match std::env::var("ONCECHECK_BENCH").as_deref().unwrap_or("ci") {
        // The legacy-gap table (the bound table's default); `fixed-3-all-tables` adds the empty
        // table and the run above the counter, as fixed's CI bounds do.
        // The legacy-gap table (the bound table's default); `fixed-3-all-tables` adds the empty
        // table and the run above the counter, as fixed's CI bounds do. No lost response and no
        // deadline: the configuration the 3-writer target names.
        "fixed-3" => run_bfs(
            "fixed 3 writers",
            model(
                "fixed",
                &[
                    ("new_writers", 3),
                    ("push_rounds_max", 0),
                    ("lost_responses_max", 0),
                    ("legacy", 1),
                ],
            ),
            false,
        ),
        "fixed-3-all-tables" => run_bfs(
            "fixed 3 writers, every table",
            model(
                "fixed",
                &[
                    ("new_writers", 3),
                    ("push_rounds_max", 0),
                    ("lost_responses_max", 0),
                ],
            ),
            false,
        ),
        "counter-only-3" => run_bfs(
            "counter-only 3 writers",
            model("counter-only", &[("new_writers", 3)]),
            true,
        ),
        "fixed-ci" => run_bfs("fixed CI bounds", model("fixed", &[]), false),
        "fixed-no-loss" => run_bfs(
            "fixed CI bounds, lost_responses_max=0",
            model("fixed", &[("lost_responses_max", 0)]),
            false,
        ),
        "unreduced" => run_bfs(
            "fixed unreduced, lost_responses_max=0",
            model("fixed", &[("lost_responses_max", 0)]).without_reductions(),
            false,
        ),
        _ => {
            let started = Instant::now();
            for variant in RelayModel::VARIANTS {
                run_check(variant, &[]);
            }
            println!(
                "every relay variant at its CI bounds: {:.2}s",
                started.elapsed().as_secs_f64()
            );
            for variant in RelayModel::VARIANTS {
                growth(variant);
            }
        }
    }
}
