//! `oncecheck`: check models exhaustively, explore them in a browser, export and replay traces.
//!
//! Exit codes: 0 every verdict matches its expectation; 1 a verdict differs (or a replay
//! diverges); 2 bad input (unknown model, variant or bound; malformed arguments).

use clap::{Parser, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use oncecheck_conformance::models::{self, Job};
use oncecheck_model::check::{CheckOptions, SpecError};
use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

#[derive(Parser)]
#[command(name = "oncecheck", version, about = "Model checks and conformance replays for three write paths that must never lose, reorder or duplicate work")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Exhaustive BFS of a model (all models and variants at the CI bounds by default).
    Check {
        /// relay, idempotency or token (all models when omitted)
        model: Option<String>,
        #[arg(long)]
        variant: Option<String>,
        /// Override a bound: --bound KEY=N (repeatable).
        #[arg(long = "bound", value_parser = parse_bound)]
        bounds: Vec<(String, u32)>,
        #[arg(long, default_value_t = 1)]
        threads: usize,
        /// One JSON object per (model, variant) on stdout.
        #[arg(long)]
        json: bool,
        /// Give up after this many seconds per variant (verdicts then `unknown`).
        #[arg(long)]
        timeout_secs: Option<u64>,
        /// Write every printed trace as an SVG sequence diagram into this directory.
        #[arg(long)]
        diagrams: Option<std::path::PathBuf>,
    },
    /// Write counterexamples, examples and covering paths as ITF trace files.
    Traces {
        /// relay (the model whose traces can be replayed)
        model: String,
        /// One variant (all variants when omitted).
        #[arg(long)]
        variant: Option<String>,
        #[arg(long = "bound", value_parser = parse_bound)]
        bounds: Vec<(String, u32)>,
        #[arg(long)]
        out: std::path::PathBuf,
        /// Random covering paths per variant (distinct action sequences).
        #[arg(long, default_value_t = 240)]
        count: usize,
        /// Seed of the covering paths; the same seed writes the same files.
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
    /// Replay trace files against the real implementation; exit 1 on a divergence.
    Replay {
        #[arg(required = true)]
        traces: Vec<std::path::PathBuf>,
        /// memory | sqlite | dynamodb | dynamodb=URL
        #[arg(long, default_value = "dynamodb")]
        target: String,
        /// Run the writers as this store build instead of the trace's own variant
        /// (add-era | counter-only | fixed | mixed), to show where the two part.
        #[arg(long)]
        store_variant: Option<String>,
        /// Switch on a deliberate defect in the real store (repeatable):
        /// no-predecessor-check | unconditional-counter-set | read-counter-every-op.
        #[arg(long = "store-mutation")]
        store_mutations: Vec<String>,
        /// Traces a logical target cannot show are listed as not applicable instead of failing
        /// the run (they are still counted and printed).
        #[arg(long)]
        only_replayable: bool,
    },
    /// Check an endpoint's DynamoDB semantics with real requests on a fresh table (deleted after);
    /// exit 0 when it ran, 2 on a bad target or an unreachable endpoint.
    Probe {
        /// dynamodb=URL
        target: String,
    },
    /// Serve the stateright Explorer for a model on 127.0.0.1.
    Explore {
        model: String,
        #[arg(long, default_value = "fixed")]
        variant: String,
        #[arg(long = "bound", value_parser = parse_bound)]
        bounds: Vec<(String, u32)>,
        #[arg(long, default_value_t = 3000)]
        port: u16,
    },
}

fn parse_bound(text: &str) -> Result<(String, u32), String> {
    let (key, value) = text.split_once('=').ok_or_else(|| format!("bound `{text}` is not KEY=N"))?;
    let value = value.parse::<u32>().map_err(|_| format!("bound `{text}`: `{value}` is not a non-negative integer"))?;
    Ok((key.to_string(), value))
}

fn bad_input(error: SpecError) -> ExitCode {
    eprintln!("oncecheck: {error}");
    ExitCode::from(2)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Check { model, variant, bounds, threads, json, timeout_secs, diagrams } => {
            let jobs = match models::resolve(model.as_deref(), variant.as_deref(), &bounds) {
                Ok(jobs) => jobs,
                Err(error) => return bad_input(error),
            };
            let options = CheckOptions { threads, timeout_secs_max: timeout_secs, ..CheckOptions::default() };
            check(&jobs, &options, json, diagrams.as_deref())
        }
        Command::Traces { model, variant, bounds, out, count, seed } => {
            let jobs = match models::resolve(Some(&model), variant.as_deref(), &bounds) {
                Ok(jobs) => jobs,
                Err(error) => return bad_input(error),
            };
            let options = oncecheck_conformance::traces::ExportOptions { paths_count: count, seed, ..Default::default() };
            let mut total = 0;
            for job in &jobs {
                match models::export_traces(job, &out, &options) {
                    Ok(Ok(files)) => {
                        eprintln!("{}/{}: {} traces", job.model, job.variant, files.len());
                        total += files.len();
                    }
                    Ok(Err(error)) => {
                        eprintln!("oncecheck: cannot write traces to {}: {error}", out.display());
                        return ExitCode::from(1);
                    }
                    Err(error) => return bad_input(error),
                }
            }
            println!("wrote {total} traces to {}", out.display());
            ExitCode::SUCCESS
        }
        Command::Replay { traces, target, store_variant, store_mutations, only_replayable } => {
            let target: oncecheck_conformance::replay::Target = match target.parse() {
                Ok(target) => target,
                Err(message) => {
                    eprintln!("oncecheck: {message}");
                    return ExitCode::from(2);
                }
            };
            let config = match oncecheck_conformance::replay_command::store_config(store_variant, &store_mutations) {
                Ok(config) => config,
                Err(message) => {
                    eprintln!("oncecheck: {message}");
                    return ExitCode::from(2);
                }
            };
            oncecheck_conformance::replay_command::run(&traces, &target, config, only_replayable)
        }
        Command::Probe { target } => oncecheck_conformance::probe::run_command(&target),
        Command::Explore { model, variant, bounds, port } => {
            let jobs = match models::resolve(Some(&model), Some(&variant), &bounds) {
                Ok(jobs) => jobs,
                Err(error) => return bad_input(error),
            };
            let address = format!("127.0.0.1:{port}");
            eprintln!("Explorer for {model}/{variant} on http://{address}/ (ctrl-c to stop)");
            match models::explore(&jobs[0], &address) {
                Ok(()) => ExitCode::SUCCESS,
                Err(error) => bad_input(error),
            }
        }
    }
}

fn check(jobs: &[Job], options: &CheckOptions, json: bool, diagrams: Option<&std::path::Path>) -> ExitCode {
    let mut all_match = true;
    let stdout = std::io::stdout();
    for job in jobs {
        let bar = ProgressBar::new_spinner();
        bar.set_style(ProgressStyle::with_template("{spinner} {msg}").expect("a valid template"));
        bar.enable_steady_tick(Duration::from_millis(120));
        let label = format!("{}/{}", job.model, job.variant);
        let mut last = (0usize, Duration::ZERO);
        let report = models::run_job(job, options, &mut |progress| {
            let rate = (progress.states - last.0) as f64 / (progress.elapsed - last.1).as_secs_f64().max(1e-3);
            last = (progress.states, progress.elapsed);
            bar.set_message(format!(
                "{label}: {} states, {} unique, {:.0} states/s, depth {}",
                progress.states, progress.unique_states, rate, progress.max_depth
            ));
        });
        bar.finish_and_clear();
        let report = match report {
            Ok(report) => report,
            Err(error) => return bad_input(error),
        };
        all_match &= report.matches_expectations();
        if let Some(directory) = diagrams {
            if let Err(error) = models::write_diagrams(&report, directory) {
                eprintln!("oncecheck: cannot write diagrams to {}: {error}", directory.display());
                return ExitCode::from(1);
            }
        }
        let mut out = stdout.lock();
        let written = if json {
            serde_json::to_writer(&mut out, &report).map_err(std::io::Error::from).and_then(|_| writeln!(out))
        } else {
            models::write_human(&report, &mut out)
        };
        if let Err(error) = written {
            eprintln!("oncecheck: cannot write the report: {error}");
            return ExitCode::from(1);
        }
    }
    if all_match {
        ExitCode::SUCCESS
    } else {
        eprintln!("oncecheck: a verdict differs from its expectation");
        ExitCode::from(1)
    }
}
