//! `oncecheck soak`: the relay and the idempotency layer run as users run them, under load and
//! faults, then checked for what must never happen (issue 18.5):
//!
//! - `soak relay` — the `relay` binary (a process of its own, SIGKILLed and restarted) on SQLite
//!   or on DynamoDB (an emulator behind a serialising, stallable proxy; a fresh table every
//!   `--table-ops-max` ops), N pushers and pullers over HTTP; then 0 lost, 0 duplicated, 0 gaps
//!   (`relay.rs`).
//! - `soak layer` — the idempotency layer on a PostgreSQL server of the soak's own, which it
//!   restarts, N clients sending keys (some twice at once); then every key's effect ran exactly
//!   once (`layer.rs`; the handler behind the layer is pluggable, `layer::EffectHandler`).
//!
//! Both print throughput and p50/p99 latency. Invariants: every fault is bounded in count and
//! the run in time (`--seconds-max`); the seed is printed and reproduces the fault schedule (the
//! interleaving around it is the machine's); nothing a run started outlives it (processes are
//! killed on drop, tables deleted, the database stopped). Exit codes: 0 nothing that must never
//! happen happened; 1 something did (each listed); 2 the run could not be set up.
//!
//! A soak finds a bug only when the machine produces the interleaving: it is a measurement and
//! a smoke test, not a proof (the model checks and the replays are the proofs).

pub mod args;
#[cfg(feature = "replay")]
mod http;
#[cfg(feature = "replay")]
pub mod latency;
#[cfg(feature = "replay")]
pub mod layer;
#[cfg(feature = "replay")]
mod postgres;
#[cfg(feature = "replay")]
mod relay;
#[cfg(feature = "replay")]
mod relay_check;
#[cfg(feature = "replay")]
mod relay_process;
#[cfg(feature = "replay")]
pub mod schedule;
#[cfg(feature = "replay")]
mod stall_proxy;

pub use args::{LayerArgs, RelayArgs, SoakCommand};

/// Violations printed in full; the rest are counted.
const VIOLATIONS_PRINTED_MAX: usize = 30;

/// What a run found: its report lines, the counts checked, and every violation.
#[derive(Debug, Default)]
pub struct Outcome {
    pub title: String,
    pub lines: Vec<String>,
    pub counts: std::collections::BTreeMap<&'static str, u64>,
    pub violations: Vec<String>,
}

impl Outcome {
    pub fn count(&self, name: &str) -> u64 {
        self.counts.get(name).copied().unwrap_or(0)
    }

    /// A violation is both counted by kind (the report's summary line) and kept in words.
    pub fn report(&mut self, kind: &'static str, what: String) {
        *self.counts.entry(kind).or_default() += 1;
        self.violations.push(what);
    }

    pub fn merge_counts(&mut self, counts: &std::collections::BTreeMap<&'static str, u64>) {
        for (name, count) in counts {
            *self.counts.entry(name).or_default() += count;
        }
    }

    /// The report on stdout: title, lines, then `result: ok` or every violation.
    pub fn print(&self) {
        println!("{}", self.title);
        for line in &self.lines {
            println!("  {line}");
        }
        if self.violations.is_empty() {
            println!("  result: ok");
        } else {
            println!("  result: {} violations", self.violations.len());
            for violation in self.violations.iter().take(VIOLATIONS_PRINTED_MAX) {
                println!("  VIOLATION {violation}");
            }
            if self.violations.len() > VIOLATIONS_PRINTED_MAX {
                println!(
                    "  ... and {} more",
                    self.violations.len() - VIOLATIONS_PRINTED_MAX
                );
            }
        }
    }
}

/// One progress line: `what N of TOTAL (P%) after S s`.
#[cfg(feature = "replay")]
fn progress_line(what: &str, done: u64, total: u64, started: std::time::Instant) -> String {
    format!(
        "soak: {what} {done} of {total} ({}%) after {:.0} s",
        done * 100 / total.max(1),
        started.elapsed().as_secs_f64()
    )
}

/// A fresh directory for a run's files (database, log): `oncecheck-NAME-PID-CLOCK`, so runs at
/// once never share one.
#[cfg(feature = "replay")]
fn scratch_directory(name: &str) -> Result<std::path::PathBuf, String> {
    let path = std::env::temp_dir().join(format!(
        "oncecheck-{name}-{}-{}",
        std::process::id(),
        schedule::seed_or_clock(None)
    ));
    std::fs::create_dir_all(&path)
        .map_err(|error| format!("creating {}: {error}", path.display()))?;
    Ok(path)
}

/// Runs `oncecheck soak ...`: prints the report, answers the exit code (0 ok, 1 violations, 2 the
/// run could not be set up).
#[cfg(feature = "replay")]
pub fn command(soak: &SoakCommand) -> std::process::ExitCode {
    let outcome = crate::block_on(async {
        match soak {
            SoakCommand::Relay(args) => relay::run(args).await,
            SoakCommand::Layer(args) => layer::run(args).await,
        }
    });
    let outcome = match outcome {
        Ok(outcome) => outcome,
        Err(message) => {
            eprintln!("oncecheck: {message}");
            return std::process::ExitCode::from(2);
        }
    };
    match outcome {
        Ok(outcome) => {
            outcome.print();
            if outcome.violations.is_empty() {
                std::process::ExitCode::SUCCESS
            } else {
                std::process::ExitCode::from(1)
            }
        }
        Err(error) => {
            eprintln!("oncecheck: soak: {error}");
            std::process::ExitCode::from(2)
        }
    }
}
