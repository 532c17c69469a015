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
//! - `ONCECHECK_BENCH=unreduced cargo bench ...` — `fixed-no-loss` without reductions;
//! - `ONCECHECK_BENCH=growth-table cargo bench ...` — the growth table of docs/scale-out.md:
//!   `fixed` with 2, 3 and 4 new-build writers x 2 ops (one re-push, one puller x 3 pulls,
//!   the legacy-gap table, no lost response, no deadline), with and without each reduction —
//!   the relay's own (a)+(b), the symmetry, and the generic partial-order reduction in place of
//!   (a)+(b) — 2 threads, the frontier spilling past 1 GiB: each row in a
//!   process of its own (peak memory is per process), exhaustive up to
//!   `ONCECHECK_ROW_SECS` seconds (default 600) and 8 GiB, then a seeded simulation of the
//!   same bounds where the exhaustive run did not finish.

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

/// Resident memory of this process (the checker's memory probe).
fn resident_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|line| line.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// One row of the growth table, in this process: `writers,reductions,symmetry,partial_order,mode`.
fn growth_row(row: &str) {
    let fields: Vec<&str> = row.split(',').collect();
    let writers: u32 = fields[0].parse().expect("writers");
    let (reductions, symmetry, partial_order, simulate) = (
        fields[1] == "1",
        fields[2] == "1",
        fields[3] == "1",
        fields[4] == "sim",
    );
    let seconds_max: u64 = std::env::var("ONCECHECK_ROW_SECS")
        .ok()
        .and_then(|text| text.parse().ok())
        .unwrap_or(600);
    let mut relay = model(
        "fixed",
        &[
            ("new_writers", writers),
            ("push_rounds_max", 0),
            ("lost_responses_max", 0),
            ("legacy", 1),
        ],
    );
    if !reductions {
        relay = relay.without_reductions();
    }
    let spill = std::env::temp_dir().join(format!("growth-spill-{}", std::process::id()));
    let options = CheckOptions {
        threads: 2,
        timeout_secs_max: Some(seconds_max),
        memory_bytes_max: Some(8 << 30),
        memory_probe: Some(resident_bytes),
        frontier_bytes_max: Some(1 << 30),
        spill: Some(std::sync::Arc::new(DirectorySpill(spill.clone()))),
        symmetry,
        partial_order,
        ..CheckOptions::default()
    };
    let report = if simulate {
        let simulation = check::SimulationOptions {
            seed: 7,
            samples: 20_000,
            depth_max: 120,
        };
        check::simulate(&relay, &options, &simulation, &mut |_| {}).report
    } else {
        check::run(relay, &options, &mut |_| {})
    };
    let _ = std::fs::remove_dir_all(&spill);
    let outcome = match (&report.stopped, simulate) {
        (Some(stop), _) => format!("stopped at {stop}"),
        (None, true) => "simulated: 20,000 walks (seed 7, depth 120)".to_string(),
        (None, false) => "exhaustive, complete".to_string(),
    };
    let verdicts = if report.matches_expectations() {
        "as expected"
    } else {
        "not as expected"
    };
    println!(
        "| {writers} | {} | {} | {} | {} | {:.1} s | {:.0} MiB | {outcome}, {verdicts} |",
        if reductions { "on" } else { "off" },
        if symmetry { "on" } else { "off" },
        if partial_order { "on" } else { "off" },
        report.unique_states,
        report.seconds,
        peak_memory_mib().unwrap_or(f64::NAN),
    );
}

/// The spill store of the bench (the binary's is conformance's `DirectorySpill`).
struct DirectorySpill(std::path::PathBuf);

impl check::SpillStore for DirectorySpill {
    fn put(&self, bytes: &[u8]) -> std::io::Result<u64> {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let id = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        std::fs::create_dir_all(&self.0)?;
        std::fs::write(self.0.join(id.to_string()), bytes)?;
        Ok(id)
    }

    fn read(&self, id: u64) -> std::io::Result<Vec<u8>> {
        std::fs::read(self.0.join(id.to_string()))
    }

    fn remove(&self, id: u64) -> std::io::Result<()> {
        std::fs::remove_file(self.0.join(id.to_string()))
    }
}

/// Every row of the growth table, each in a child process; a row whose exhaustive run did not
/// finish is followed by the simulated row of the same configuration.
fn growth_table() {
    let writers: Vec<u32> = std::env::var("ONCECHECK_WRITERS")
        .unwrap_or_else(|_| "2,3,4".to_string())
        .split(',')
        .filter_map(|text| text.parse().ok())
        .collect();
    println!(
        "| writers | reductions (a)+(b) | symmetry | partial order | unique states | time | peak memory | run |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- | --- |");
    let executable = std::env::current_exe().expect("the bench knows its executable");
    for count in writers {
        // Each reduction on and off: the relay's own, the symmetry on top of it, none, the
        // symmetry alone, and the generic partial-order reduction in place of the relay's own
        // (with and without the symmetry).
        let rows = [
            (1, 0, 0),
            (1, 1, 0),
            (0, 0, 0),
            (0, 1, 0),
            (0, 0, 1),
            (0, 1, 1),
        ];
        for (reductions, symmetry, partial_order) in rows {
            let row = |mode: &str| {
                let output = std::process::Command::new(&executable)
                    .env("ONCECHECK_BENCH", "growth-row")
                    .env(
                        "ONCECHECK_ROW",
                        format!("{count},{reductions},{symmetry},{partial_order},{mode}"),
                    )
                    .output()
                    .expect("a row runs");
                let line = String::from_utf8_lossy(&output.stdout).trim().to_string();
                println!("{line}");
                line
            };
            if row("bfs").contains("stopped at") {
                row("sim");
            }
        }
    }
}

fn main() {
    match std::env::var("ONCECHECK_BENCH").as_deref().unwrap_or("ci") {
        "growth-table" => growth_table(),
        "growth-row" => growth_row(&std::env::var("ONCECHECK_ROW").expect("ONCECHECK_ROW")),
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
