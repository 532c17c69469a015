//! Model-checking cost of the relay design: unique states, states per second and peak memory
//! for `fixed` at the CI bounds and at one larger bound. A benchmark, not a test: it asserts
//! nothing about time. Run: `cargo bench -p oncecheck-model --bench relay`
//! (`ONCECHECK_BENCH_LARGE=0` skips the larger bound, which takes minutes).

use oncecheck_model::check::{self, CheckOptions, ModelSpec};
use oncecheck_model::relay::RelayModel;

/// Peak resident memory of this process so far, from the kernel (Linux only).
fn peak_memory_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|line| line.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

fn run(label: &str, overrides: &[(&str, u32)], threads: usize) {
    let overrides: Vec<(String, u32)> = overrides.iter().map(|(key, value)| (key.to_string(), *value)).collect();
    let bounds = RelayModel::resolve_bounds("fixed", &overrides).expect("valid bounds");
    let model = RelayModel::build("fixed", &bounds).expect("a model");
    let options = CheckOptions { threads, ..CheckOptions::default() };
    let report = check::run(model, &options, &mut |_| {});
    println!(
        "relay/fixed {label:<28} threads {threads}: {:>10} unique states, {:>10} states, depth {:>3}, {:>7.2}s, {:>9.0} states/s, peak memory {:>7.1} MiB, verdicts {}",
        report.unique_states,
        report.states,
        report.max_depth,
        report.seconds,
        report.states as f64 / report.seconds.max(1e-9),
        peak_memory_mib().unwrap_or(f64::NAN),
        if report.matches_expectations() { "as expected" } else { "MISMATCH" },
    );
}

fn main() {
    println!("bounds: {}", RelayModel::resolve_bounds("fixed", &[]).unwrap());
    run("CI bounds", &[], 1);
    run("CI bounds", &[], 2);
    if std::env::var("ONCECHECK_BENCH_LARGE").as_deref() != Ok("0") {
        run("lost_responses_max=1", &[("lost_responses_max", 1)], 2);
    }
}
