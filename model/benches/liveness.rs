//! What liveness costs: per model and variant at the CI bounds, the time and peak memory of
//! `check::run` deciding every property (safety search, then the liveness exploration) against
//! the safety search alone (`CheckOptions::liveness = false`). A benchmark, not a test: it
//! asserts nothing about time. Target: within 2x.
//!
//! Peak memory is per process, so each (model, variant, mode) runs in a child process of this
//! benchmark (`ONCECHECK_BENCH=model/variant/mode`, mode `safety` or `liveness`); without it the
//! benchmark runs every child in turn and prints the table:
//! `cargo bench -p oncecheck-model --bench liveness` (one thread, as `oncecheck check` runs by
//! default). `ONCECHECK_BENCH_THREADS=2` runs the checks on two threads.

use oncecheck_model::check::{self, CheckOptions, CheckReport, ModelSpec};
use oncecheck_model::idempotency::IdempotencyModel;
use oncecheck_model::relay::RelayModel;
use oncecheck_model::token::TokenModel;
use std::process::Command;

/// Peak resident memory of this process so far, from the kernel (Linux only).
fn peak_memory_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find(|line| line.starts_with("VmHWM:"))
        .and_then(|line| line.split_whitespace().nth(1)?.parse::<f64>().ok())
        .map_or(f64::NAN, |kib| kib / 1024.0)
}

fn run<M>(variant: &str, liveness: bool) -> CheckReport
where
    M: ModelSpec,
    M::State: Clone + std::fmt::Debug + std::hash::Hash + Eq + Send + Sync + 'static,
    M::Action: Clone + std::fmt::Debug + PartialEq + Send + Sync + 'static,
{
    let bounds = M::resolve_bounds(variant, &[]).expect("CI bounds");
    let model = M::build(variant, &bounds).expect("a model");
    let threads = std::env::var("ONCECHECK_BENCH_THREADS")
        .ok()
        .and_then(|threads| threads.parse().ok())
        .unwrap_or(1);
    check::run(
        model,
        &CheckOptions {
            threads,
            liveness,
            ..CheckOptions::default()
        },
        &mut |_| {},
    )
}

/// One child: prints `seconds liveness_seconds peak_mib unique_states liveness_edges ok`.
fn child(spec: &str) {
    let mut parts = spec.split('/');
    let (model, variant, mode) = (
        parts.next().expect("model"),
        parts.next().expect("variant"),
        parts.next().expect("mode"),
    );
    let liveness = mode == "liveness";
    let report = match model {
        "relay" => run::<RelayModel>(variant, liveness),
        "idempotency" => run::<IdempotencyModel>(variant, liveness),
        _ => run::<TokenModel>(variant, liveness),
    };
    let live = report.liveness;
    println!(
        "{} {} {} {} {} {}",
        report.seconds,
        live.map_or(0.0, |run| run.seconds),
        peak_memory_mib(),
        report.unique_states,
        live.map_or(0, |run| run.edges),
        report.matches_expectations() || !liveness,
    );
}

fn measure(spec: &str) -> Vec<String> {
    let output = Command::new(std::env::current_exe().expect("this benchmark"))
        .env("ONCECHECK_BENCH", spec)
        .output()
        .expect("the child runs");
    assert!(output.status.success(), "{spec}: {output:?}");
    String::from_utf8_lossy(&output.stdout)
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

fn main() {
    if let Ok(spec) = std::env::var("ONCECHECK_BENCH") {
        child(&spec);
        return;
    }
    let jobs: Vec<(&str, &[&str])> = vec![
        ("relay", RelayModel::VARIANTS),
        ("idempotency", IdempotencyModel::VARIANTS),
        ("token", TokenModel::VARIANTS),
    ];
    println!(
        "{:<26} {:>9} {:>9} | {:>9} {:>9} {:>6} | {:>8} {:>8} {:>6} | {:>10} verdicts",
        "model/variant (CI bounds)",
        "states",
        "edges",
        "safety s",
        "all s",
        "time x",
        "safe MiB",
        "all MiB",
        "mem x",
        "live s"
    );
    for (model, variants) in jobs {
        for variant in variants {
            let safety = measure(&format!("{model}/{variant}/safety"));
            let all = measure(&format!("{model}/{variant}/liveness"));
            let number = |fields: &[String], index: usize| -> f64 {
                fields[index].parse().unwrap_or(f64::NAN)
            };
            let (safety_seconds, all_seconds) = (number(&safety, 0), number(&all, 0));
            let (safety_mib, all_mib) = (number(&safety, 2), number(&all, 2));
            println!(
                "{:<26} {:>9} {:>9} | {:>9.2} {:>9.2} {:>6.2} | {:>8.1} {:>8.1} {:>6.2} | {:>10.2} {}",
                format!("{model}/{variant}"),
                all[3],
                all[4],
                safety_seconds,
                all_seconds,
                all_seconds / safety_seconds.max(1e-9),
                safety_mib,
                all_mib,
                all_mib / safety_mib.max(1e-9),
                number(&all, 1),
                if all[5] == "true" { "as expected" } else { "MISMATCH" },
            );
        }
    }
}
