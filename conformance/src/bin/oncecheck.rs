//! `oncecheck`: check models exhaustively, explore them in a browser, export and replay traces.
//!
//! Exit codes: 0 every verdict matches its expectation; 1 a verdict differs (or a replay
//! diverges); 2 bad input (unknown model, variant or bound; malformed arguments).

use clap::{Parser, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use oncecheck_conformance::models::{self, Job};
use oncecheck_model::check::{CheckOptions, SimulationOptions, SpecError};
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
        // ---- limits and simulation (the checker's flags) ----
        /// Stop once this many unique states are known; what is undecided is then `unknown` (exit 1).
        #[arg(long)]
        states_max: Option<usize>,
        /// Stop once this process's resident memory reaches this many MiB; what is undecided is
        /// then `unknown` (exit 1).
        #[arg(long, default_value_t = models::MEMORY_MAX_MB_DEFAULT)]
        memory_max_mb: u64,
        /// Seeded random walks instead of the exhaustive search, for bounds too large to exhaust:
        /// finds violations and examples, never shows that a property holds (`unknown` instead).
        #[arg(long)]
        simulate: bool,
        /// Seed of --simulate, printed; the same seed gives the same report [default: the clock].
        #[arg(long, requires = "simulate")]
        seed: Option<u64>,
        /// Walks of --simulate per variant.
        #[arg(long, default_value_t = 1000)]
        samples: usize,
        /// Longest walk of --simulate, in steps.
        #[arg(long, default_value_t = 200)]
        depth: usize,
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
        Command::Check {
            model,
            variant,
            bounds,
            threads,
            json,
            timeout_secs,
            diagrams,
            states_max,
            memory_max_mb,
            simulate,
            seed,
            samples,
            depth,
        } => {
            let jobs = match models::resolve(model.as_deref(), variant.as_deref(), &bounds) {
                Ok(jobs) => jobs,
                Err(error) => return bad_input(error),
            };
            let options = CheckOptions {
                threads,
                timeout_secs_max: timeout_secs,
                states_max,
                memory_bytes_max: Some(memory_max_mb.saturating_mul(1024 * 1024)),
                memory_probe: Some(models::resident_bytes),
                ..CheckOptions::default()
            };
            let simulation = simulate.then(|| {
                let seed = seed.unwrap_or_else(|| {
                    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
                    now.as_nanos() as u64
                });
                eprintln!("oncecheck: simulating with seed {seed}: {samples} walks of at most {depth} steps per variant (--seed {seed} repeats this run)");
                SimulationOptions { seed, samples, depth_max: depth }
            });
            check(&jobs, &options, simulation.as_ref(), json, diagrams.as_deref())
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

fn check(
    jobs: &[Job],
    options: &CheckOptions,
    simulation: Option<&SimulationOptions>,
    json: bool,
    diagrams: Option<&std::path::Path>,
) -> ExitCode {
    let mut all_match = true;
    // A run stopped by a limit has said so in its own line; this counts the other mismatches.
    let mut verdict_differs = false;
    let mut reports = Vec::new();
    let stdout = std::io::stdout();
    for job in jobs {
        let bar = ProgressBar::new_spinner();
        bar.set_style(ProgressStyle::with_template("{spinner} {msg}").expect("a valid template"));
        bar.enable_steady_tick(Duration::from_millis(120));
        let label = format!("{}/{}", job.model, job.variant);
        let mut last = (0usize, Duration::ZERO);
        let mut on_progress = |progress: oncecheck_model::check::Progress| {
            let rate = (progress.states - last.0) as f64 / (progress.elapsed - last.1).as_secs_f64().max(1e-3);
            last = (progress.states, progress.elapsed);
            bar.set_message(format!(
                "{label}: {} states, {} unique, {:.0} states/s, depth {}",
                progress.states, progress.unique_states, rate, progress.max_depth
            ));
        };
        let report = match simulation {
            Some(simulation) => models::simulate_job(job, options, simulation, &mut on_progress),
            None => models::run_job(job, options, &mut on_progress),
        };
        bar.finish_and_clear();
        let report = match report {
            Ok(report) => report,
            Err(error) => return bad_input(error),
        };
        all_match &= report.matches_expectations();
        match models::stop_line(&report) {
            Some(line) => eprintln!("oncecheck: {line}"),
            None => verdict_differs |= !report.matches_expectations(),
        }
        if let Some(directory) = diagrams {
            if let Err(error) = models::write_diagrams(&report, directory) {
                eprintln!("oncecheck: cannot write diagrams to {}: {error}", directory.display());
                return ExitCode::from(1);
            }
        }
        if !json {
            if let Err(error) = models::write_human(&report, &mut stdout.lock()) {
                eprintln!("oncecheck: cannot write the report: {error}");
                return ExitCode::from(1);
            }
        }
        reports.push(report);
    }
    if json {
        let mut out = stdout.lock();
        let written = serde_json::to_writer(&mut out, &models::json_document(&reports))
            .map_err(std::io::Error::from)
            .and_then(|_| writeln!(out));
        if let Err(error) = written {
            eprintln!("oncecheck: cannot write the report: {error}");
            return ExitCode::from(1);
        }
    }
    if verdict_differs {
        eprintln!("oncecheck: a verdict differs from its expectation");
    }
    if all_match {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
