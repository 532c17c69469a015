//! `oncecheck`: check models exhaustively, explore them in a browser, export and replay traces.
//!
//! Exit codes: 0 every verdict matches its expectation (replay: every trace conforms); 1 a
//! verdict differs (replay: a divergence); 2 bad input (unknown model, variant or bound;
//! malformed arguments; an unusable file, directory, port or replay target). Every failure is
//! one line on stderr, never a panic or a backtrace.

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use oncecheck_conformance::models::{self, Job};
use oncecheck_model::check::{CheckOptions, SimulationOptions};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use oncecheck_conformance::terminal::note;

const CHECK_EXAMPLES: &str = "\
Exit codes:
  0  every verdict equals its expectation (a buggy variant must still fail where expected)
  1  a verdict differs from its expectation (at changed bounds the report says which bound
     changed it), or a limit stopped the run before it decided everything
  2  bad input: unknown model, variant or bound; an option out of range; an unusable
     --diagrams, --html or --junit path
  A reader that leaves early (`| head`) ends the run as SIGPIPE ends any tool (status 141).

Examples:
  oncecheck check                                     every model and variant at the CI bounds
  oncecheck check relay --variant add-era             the seed's bug: R1 violated, shortest trace printed
  oncecheck check relay --variant counter-only --bound window=0
  oncecheck check relay --variant fixed --bound lost_responses_max=2 --threads 2
  oncecheck check idempotency --html /tmp/report      an HTML report per (model, variant)
  oncecheck check token --diagrams /tmp/diagrams      every counterexample as an SVG sequence diagram
  oncecheck check --junit /tmp/check.xml              a JUnit test case per property, for CI";

const TRACES_HELP: &str = "\
Exit codes:
  0  the traces were written
  2  bad input: unknown model, variant or bound; an unwritable --out directory

Examples:
  oncecheck traces relay --variant fixed --out /tmp/traces
  oncecheck traces token --variant tokened --out /tmp/token --count 0
  oncecheck traces idempotency --variant fenced --bound sqlite=1 --out /tmp/mw-sqlite";

const EXPLORE_HELP: &str = "\
Exit codes:
  0  the Explorer stopped (ctrl-c)
  2  bad input: unknown model, variant or bound; a port that cannot be served

Examples:
  oncecheck explore relay --variant counter-only --port 3000
  oncecheck explore token                          the design variant, tokened";

const PROBE_HELP: &str = "\
Exit codes:
  0  the probe ran (each semantic's verdict is in its row, a difference included)
  2  bad input: a malformed target, or an endpoint that cannot be reached

Examples:
  oncecheck probe dynamodb=http://127.0.0.1:5000
  oncecheck probe dynamodb=http://127.0.0.1:5000 --proxy --token-table off";

const REPLAY_HELP: &str = "\
Exit codes:
  0  every trace replayed and conformed (traces listed n/a with --only-replayable included)
  1  a trace diverged: the implementation did something the model did not
  2  bad input: a file that is not a loadable trace, an unknown target, store variant or
     mutation, an option the target cannot use, a trace the target cannot show, an unwritable
     --junit file, or a target that cannot be reached

Examples:
  oncecheck replay conformance/traces/relay/*.itf.json --target dynamodb=http://127.0.0.1:5000
  oncecheck replay conformance/traces/relay/*.itf.json --target memory --only-replayable
  oncecheck replay conformance/traces/relay/relay-counter-only-counterexample-r1-no-skip.itf.json \\
      --target dynamodb --store-variant fixed     diverges at the predecessor check
  oncecheck replay /tmp/walks/*.itf.json --target middleware-sqlite --only-replayable --jobs 4
  oncecheck replay conformance/traces/middleware/idempotency-pre-fix-counterexample-m2-no-poison.itf.json \\
      --target middleware-postgres --store-variant fenced   diverges at the finalize (step 5)";

const CORPUS_HELP: &str = "\
Exit codes:
  0  the corpus agrees with the model (or was written)
  1  files and model disagree: every disagreement is listed; `oncecheck corpus --write` regenerates
  2  bad input: an unreadable manifest or an unwritable directory

Examples:
  oncecheck corpus                         check (CI runs this in scripts/replay-corpus)
  oncecheck corpus --write                 regenerate after a model change, then commit the diff
  oncecheck corpus --walks-out /tmp/walks  the covering walks as files, for oncecheck replay";

const MERGE_HELP: &str = "\
Exit codes:
  0  every merged verdict equals its expectation
  1  a merged verdict differs, or a shard was stopped by a limit
  2  bad input: a file that is not a shard report, shards of different runs, a shard missing
     or given twice, a trace that does not re-execute on this build's model

Examples:
  for k in 0 1 2 3; do oncecheck check relay --variant fixed --bound new_writers=4 \\
      --simulate --seed 7 --samples 4000 --shard $k/4 --json > shard-$k.json & done; wait
  oncecheck merge shard-*.json --html /tmp/report";

#[derive(Parser)]
#[command(
    name = "oncecheck",
    version,
    about = "Model checks and conformance replays for three write paths that must never lose, reorder or duplicate work"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Exhaustive BFS of a model: every property's verdict against its expectation, and the
    /// shortest trace of every violation in protocol words.
    Check {
        /// The model to check: relay, idempotency or token (every model when omitted).
        model: Option<String>,
        /// One variant of MODEL (every variant when omitted); the list is below.
        #[arg(long)]
        variant: Option<String>,
        /// Override a bound: KEY=N (repeatable); the keys, defaults and ranges are below.
        #[arg(long = "bound", value_name = "KEY=N", value_parser = parse_bound)]
        bounds: Vec<(String, u32)>,
        /// Checker threads, at least 1 (the verdicts and traces do not depend on it).
        #[arg(long, default_value_t = 1, value_parser = parse_positive)]
        threads: usize,
        /// One JSON document on stdout instead of the human report: `schema`, overall `ok`, one report per (model, variant) (docs/check-json.md).
        #[arg(long)]
        json: bool,
        /// Give up after this many seconds per variant (undecided verdicts are then `unknown`
        /// and the exit code 1).
        #[arg(long, value_name = "SECONDS")]
        timeout_secs: Option<u64>,
        /// Write every printed trace as an SVG sequence diagram into this directory.
        #[arg(long, value_name = "DIR")]
        diagrams: Option<PathBuf>,
        /// Write an HTML report into this directory: index.html and a page per (model,
        /// variant) with verdicts, counterexamples with the roles each step changed, their
        /// sequence diagrams and the coverage. Walks each state space once more for coverage.
        #[arg(long, value_name = "DIR")]
        html: Option<PathBuf>,
        // ---- limits and simulation (the checker's flags) ----
        /// Stop once this many unique states are known; what is undecided is then `unknown` (exit 1).
        #[arg(long)]
        states_max: Option<usize>,
        /// Stop once this process's resident memory reaches this many MiB; what is undecided is
        /// then `unknown` (exit 1).
        #[arg(long, default_value_t = models::MEMORY_MAX_MB_DEFAULT)]
        memory_max_mb: u64,
        /// Past a quarter of --memory-max-mb (or near the limit itself), the states waiting to be
        /// expanded are written to this directory in compact blocks and read back in order
        /// (a fresh subdirectory, removed after the run) [default: the system's temp directory].
        #[arg(long, value_name = "DIR")]
        spill_dir: Option<PathBuf>,
        /// Stop once the spilled states would take more than this many MiB of disk; what is
        /// undecided is then `unknown` (exit 1) [default: until the disk is full].
        #[arg(long, value_name = "MIB")]
        disk_max_mb: Option<u64>,
        /// Seeded random walks instead of the exhaustive search, for bounds too large to exhaust:
        /// finds violations and examples, never shows that a property holds (`unknown` instead).
        #[arg(long)]
        simulate: bool,
        /// Seed of --simulate, printed; the same seed gives the same report [default: the clock].
        #[arg(long, requires = "simulate")]
        seed: Option<u64>,
        /// Walks of --simulate per variant, at least 1 [default: 1000].
        #[arg(long, requires = "simulate", value_parser = parse_positive)]
        samples: Option<usize>,
        /// Longest walk of --simulate, in steps, at least 1 [default: 200].
        #[arg(long, requires = "simulate", value_parser = parse_positive)]
        depth: Option<usize>,
        /// Write a JUnit XML report into FILE: a test suite per (model, variant), a test case per
        /// property (failed when its verdict differs from its expectation), for CI systems.
        #[arg(long, value_name = "FILE")]
        junit: Option<PathBuf>,
        /// Run shard K of N (0-based) of this check, for `oncecheck merge` to join: with
        /// --simulate, its share of the --samples walks; exhaustive, the states of its hash part
        /// of the first level large enough to split. Needs --json (the shard's report, with its
        /// traces as ITF); exits 0 when the shard ran without a limit (docs/scale-out.md).
        #[arg(long, value_name = "K/N", value_parser = oncecheck_conformance::merge::parse_shard, requires = "json")]
        shard: Option<oncecheck_model::check::Shard>,
        /// Keep one state per orbit of the model's symmetry (interchangeable writers, pullers,
        /// clients): the same verdicts and shortest trace lengths over fewer states.
        #[arg(long)]
        symmetry: bool,
        /// Expand ample sets (the model's independence declaration, with the cycle proviso):
        /// the same verdicts over fewer states; traces are real paths but may be longer.
        #[arg(long)]
        partial_order: bool,
    },
    /// Join the reports of a check's shards (`check --shard K/N --json`) into the report of the
    /// whole run: verdicts, the shortest trace found, coverage, states; exit codes as `check`.
    #[command(after_help = MERGE_HELP)]
    Merge {
        /// Shard reports (each the --json document of one `check --shard K/N`).
        #[arg(required = true, value_name = "SHARD_JSON")]
        reports: Vec<PathBuf>,
        /// One JSON document on stdout (the `check --json` shape) instead of the human report.
        #[arg(long)]
        json: bool,
        /// Write the HTML report of the merged runs into this directory.
        #[arg(long, value_name = "DIR")]
        html: Option<PathBuf>,
    },
    /// Write counterexamples, examples and seeded covering paths as ITF trace files.
    #[command(after_help = TRACES_HELP)]
    Traces {
        /// The model: relay, idempotency or token (each replayed: `oncecheck replay --target ...`).
        model: String,
        /// One variant of MODEL (every variant when omitted); each model's are listed below.
        #[arg(long)]
        variant: Option<String>,
        /// Override a bound: KEY=N (repeatable); see `oncecheck check --help`.
        #[arg(long = "bound", value_name = "KEY=N", value_parser = parse_bound)]
        bounds: Vec<(String, u32)>,
        /// Directory the trace files are written into (created if missing).
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
        /// Random covering paths per variant (distinct action sequences).
        #[arg(long, default_value_t = 240)]
        count: usize,
        /// Seed of the covering paths; the same seed writes the same files.
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
    /// Check the regression corpus against the model (the default), regenerate it, or write
    /// its covering walks for a replay.
    #[command(after_help = CORPUS_HELP)]
    Corpus {
        /// The corpus directory (counterexamples, examples, promoted traces, the walk manifest).
        #[arg(long, value_name = "DIR", default_value = oncecheck_conformance::traces::CORPUS_DIR)]
        dir: PathBuf,
        /// Regenerate the kept traces and the manifest's digests from the model.
        #[arg(long, conflicts_with = "walks_out")]
        write: bool,
        /// Write the manifest's covering walks into this directory (checked against their digest).
        #[arg(long, value_name = "DIR")]
        walks_out: Option<PathBuf>,
    },
    /// Replay trace files against the real implementation, step by step.
    #[command(after_help = REPLAY_HELP)]
    Replay {
        /// ITF trace files written by `oncecheck traces` (or kept in conformance/traces/).
        #[arg(required = true, value_name = "TRACE")]
        traces: Vec<PathBuf>,
        /// Where to replay: memory | sqlite | dynamodb (ONCECHECK_DDB_ENDPOINT) | dynamodb=URL
        /// (relay traces); tokened-dynamodb | tokened-dynamodb=URL (token traces, on the
        /// reliable-write client through the proxy's token table); middleware-sqlite |
        /// middleware-postgres (ONCECHECK_PG_URL) | middleware-postgres=URL (idempotency traces).
        #[arg(long, default_value = "dynamodb")]
        target: String,
        /// Run the writers as this store build instead of the trace's own variant
        /// (add-era | counter-only | fixed | mixed; middleware targets: the layer, pre-fix |
        /// fixed | fenced), to show where the two part.
        #[arg(long)]
        store_variant: Option<String>,
        /// Switch on a deliberate defect in the real store (repeatable):
        /// no-predecessor-check | unconditional-counter-set | read-counter-every-op; middleware
        /// targets: claim-over-live-lease | finalize-key-only | no-drop-guard | replay-unmarked.
        #[arg(long = "store-mutation", value_name = "MUTATION")]
        store_mutations: Vec<String>,
        /// Traces a logical target cannot show are listed as not applicable instead of failing
        /// the run (they are still counted and printed).
        #[arg(long)]
        only_replayable: bool,
        /// Replay this many traces at once (each on its own stream, table and proxy).
        #[arg(long, default_value_t = 1)]
        jobs: usize,
        /// How the proxy loses a response the trace loses: close (the connection, no answer)
        /// or stall (no answer until the client times out). Default: close. dynamodb only.
        #[arg(long, value_name = "close|stall")]
        lose_by: Option<String>,
        /// Also write the run's summary as one JSON document to FILE: counts, and per (model,
        /// variant, bounds) the transitions the conforming traces drove of those reachable.
        #[arg(long, value_name = "FILE")]
        summary_json: Option<PathBuf>,
        /// Write a JUnit XML report into FILE: a test case per trace (failed on a divergence,
        /// skipped when not applicable with --only-replayable), for CI systems.
        #[arg(long, value_name = "FILE")]
        junit: Option<PathBuf>,
    },
    /// Check an endpoint's DynamoDB semantics with real requests on a fresh table (deleted after);
    /// exit 0 when it ran, 2 on a bad target or an unreachable endpoint.
    #[command(after_help = PROBE_HELP)]
    Probe {
        /// The endpoint: dynamodb=URL (any DynamoDB-compatible endpoint, moto included).
        target: String,
        /// Probe through the conformance proxy in front of the endpoint: its token table, and
        /// the hold that the in-progress and TransactionConflict rows need.
        #[arg(long)]
        proxy: bool,
        /// With --proxy: the proxy's token table on (DynamoDB's token rules) or off (the
        /// endpoint's own).
        #[arg(long, value_name = "on|off", default_value = "on", value_parser = ["on", "off"])]
        token_table: String,
    },
    /// Print the implemented-variant table (which implementation, configured how, implements
    /// which model variant, replayed on which targets), or check replay summaries against it.
    Implemented {
        /// `oncecheck replay --summary-json` files: exit 1 unless every row was replayed on every
        /// target at its CI bounds with no divergence and every reachable transition driven.
        #[arg(long, value_name = "SUMMARY", num_args = 1..)]
        verify: Vec<PathBuf>,
    },
    /// Run the relay or the idempotency layer under load and faults (kills, stalls, database
    /// restarts), then check nothing was lost, duplicated or run twice; prints throughput and
    /// latency. Exit 0 ok, 1 a violation (each listed), 2 the run could not be set up.
    #[command(subcommand)]
    Soak(oncecheck_conformance::soak::SoakCommand),
    /// Serve the stateright Explorer for one model variant on 127.0.0.1 (blocks until ctrl-c).
    #[command(after_help = EXPLORE_HELP)]
    Explore {
        /// The model: relay, idempotency or token.
        model: String,
        /// The variant to explore (listed below) [default: the model's design: relay fixed,
        /// idempotency renewed, token tokened].
        #[arg(long)]
        variant: Option<String>,
        /// Override a bound: KEY=N (repeatable); see `oncecheck check --help`.
        #[arg(long = "bound", value_name = "KEY=N", value_parser = parse_bound)]
        bounds: Vec<(String, u32)>,
        /// Loopback port of the Explorer (a busy port exits 2).
        #[arg(long, default_value_t = 3000)]
        port: u16,
    },
}

fn parse_bound(text: &str) -> Result<(String, u32), String> {
    let (key, value) = text
        .split_once('=')
        .ok_or_else(|| format!("bound `{text}` is not KEY=N"))?;
    let value = value
        .parse::<u32>()
        .map_err(|_| format!("bound `{text}`: `{value}` is not a non-negative integer"))?;
    Ok((key.to_string(), value))
}

/// A count that must be at least 1 (`--threads`, `--samples`, `--depth`): 0 would check nothing.
fn parse_positive(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(0) => Err("must be at least 1".to_string()),
        Ok(value) => Ok(value),
        Err(_) => Err(format!("`{text}` is not a positive integer")),
    }
}

/// One line on stderr and exit 2: what was wrong and, where there is one, what would be valid.
fn bad_input(message: impl std::fmt::Display) -> ExitCode {
    note(message);
    ExitCode::from(2)
}

/// The command line, with the help of `check`, `traces` and `explore` completed from the model
/// registry.
fn command_line() -> clap::Command {
    let registry = models::registry_help();
    let variants = oncecheck_conformance::model_facts::variants_help();
    Cli::command()
        .mut_subcommand("check", |check| {
            check.after_help(format!("{registry}\n{CHECK_EXAMPLES}"))
        })
        .mut_subcommand("traces", |traces| {
            traces.after_help(format!("{variants}\n{TRACES_HELP}"))
        })
        .mut_subcommand("explore", |explore| {
            explore.after_help(format!("{variants}\n{EXPLORE_HELP}"))
        })
}

fn main() -> ExitCode {
    let matches = command_line().get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|error| error.exit());
    // The Explorer is a server: it keeps serving when its stderr goes away. Every other command
    // ends quietly, as `cat` does, when the reader of its output leaves.
    if !matches!(cli.command, Command::Explore { .. }) {
        oncecheck_conformance::terminal::end_when_the_reader_leaves();
    }
    match cli.command {
        Command::Check {
            model,
            variant,
            bounds,
            threads,
            json,
            timeout_secs,
            diagrams,
            html,
            states_max,
            memory_max_mb,
            spill_dir,
            disk_max_mb,
            simulate,
            seed,
            samples,
            depth,
            shard,
            symmetry,
            partial_order,
            junit,
        } => {
            if model.is_none() && !bounds.is_empty() {
                return bad_input(oncecheck_conformance::model_facts::bound_without_a_model(
                    &bounds,
                ));
            }
            let (samples, depth) = (samples.unwrap_or(1000), depth.unwrap_or(200));
            let jobs = match models::resolve(model.as_deref(), variant.as_deref(), &bounds) {
                Ok(jobs) => jobs,
                Err(error) => return bad_input(error),
            };
            if let Err(message) =
                prepare_outputs(diagrams.as_deref(), html.as_deref(), junit.as_deref())
            {
                return bad_input(message);
            }
            let spill_parent = spill_dir.unwrap_or_else(std::env::temp_dir);
            let spill = match oncecheck_conformance::spill::DirectorySpill::create(&spill_parent) {
                Ok(spill) => spill,
                Err(error) => {
                    return bad_input(format!(
                        "cannot spill the search frontier into {}: {error}",
                        spill_parent.display()
                    ))
                }
            };
            let memory_bytes_max = memory_max_mb.saturating_mul(1024 * 1024);
            let options = CheckOptions {
                threads,
                timeout_secs_max: timeout_secs,
                states_max,
                memory_bytes_max: Some(memory_bytes_max),
                memory_probe: Some(models::resident_bytes),
                frontier_bytes_max: Some(memory_bytes_max / 4),
                spill: Some(std::sync::Arc::new(spill)),
                disk_bytes_max: disk_max_mb.map(|mib| mib.saturating_mul(1024 * 1024)),
                shard,
                symmetry,
                partial_order,
                ..CheckOptions::default()
            };
            let simulation = simulate.then(|| {
                let seed = seed.unwrap_or_else(|| {
                    let now = std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .unwrap_or_default();
                    now.as_nanos() as u64
                });
                note(format!("simulating with seed {seed}: {samples} walks of at most {depth} steps per variant (--seed {seed} repeats this run)"));
                SimulationOptions {
                    seed,
                    samples,
                    depth_max: depth,
                }
            });
            let outputs = Outputs {
                json,
                diagrams: diagrams.as_deref(),
                html: html.as_deref(),
                junit: junit.as_deref(),
            };
            // At the CI bounds, each variant's named bound sets run too (S6: the reaches the CI
            // bounds miss); a simulation reaches nothing it could call unreached.
            let jobs = if simulation.is_none() {
                models::with_bound_sets(jobs)
            } else {
                jobs
            };
            check(&jobs, &options, simulation.as_ref(), &outputs)
        }
        Command::Traces {
            model,
            variant,
            bounds,
            out,
            count,
            seed,
        } => {
            let jobs = match models::resolve(Some(&model), variant.as_deref(), &bounds) {
                Ok(jobs) => jobs,
                Err(error) => return bad_input(error),
            };
            if let Err(error) = models::prepare_directory(&out) {
                return bad_input(format!("cannot write traces to {}: {error}", out.display()));
            }
            let options = oncecheck_conformance::traces::ExportOptions {
                paths_count: count,
                seed,
                ..Default::default()
            };
            let mut total = 0;
            for job in &jobs {
                match models::export_traces(job, &out, &options) {
                    Ok(Ok(files)) => {
                        oncecheck_conformance::terminal::note_raw(format!(
                            "{}/{}: {} traces",
                            job.model,
                            job.variant,
                            files.len()
                        ));
                        total += files.len();
                    }
                    Ok(Err(error)) => {
                        return bad_input(format!(
                            "cannot write traces to {}: {error}",
                            out.display()
                        ))
                    }
                    Err(error) => return bad_input(error),
                }
            }
            println!("wrote {total} traces to {}", out.display());
            ExitCode::SUCCESS
        }
        Command::Corpus {
            dir,
            write,
            walks_out,
        } => corpus(&dir, write, walks_out.as_deref()),
        Command::Merge {
            reports,
            json,
            html,
        } => merge(&reports, json, html.as_deref()),
        Command::Replay {
            traces,
            target,
            store_variant,
            store_mutations,
            only_replayable,
            jobs,
            lose_by,
            summary_json,
            junit,
        } => replay(
            &traces,
            &target,
            ReplayFlags {
                store_variant,
                store_mutations,
                lose_by,
                junit,
                summary_json,
            },
            only_replayable,
            jobs,
        ),
        Command::Probe {
            target,
            proxy,
            token_table,
        } => probe(&target, proxy, token_table == "on"),
        Command::Implemented { verify } => implemented(&verify),
        Command::Soak(soak_command) => soak(&soak_command),
        Command::Explore {
            model,
            variant,
            bounds,
            port,
        } => {
            let variant = variant.or_else(|| {
                oncecheck_conformance::variants::design_variant(&model).map(str::to_string)
            });
            let jobs = match models::resolve(Some(&model), variant.as_deref(), &bounds) {
                Ok(jobs) => jobs,
                Err(error) => return bad_input(error),
            };
            let address = format!("127.0.0.1:{port}");
            let mut banner = |line: String| oncecheck_conformance::terminal::note_raw(line);
            match models::explore(&jobs[0], &address, &mut banner) {
                Ok(()) => ExitCode::SUCCESS,
                Err(error) => bad_input(error),
            }
        }
    }
}

fn implemented(summaries: &[PathBuf]) -> ExitCode {
    use oncecheck_conformance::implemented;
    if summaries.is_empty() {
        print!("{}", implemented::markdown_table());
        return ExitCode::SUCCESS;
    }
    match implemented::verify(summaries) {
        Ok(verified) => {
            for row in &verified {
                println!("{} {}", if row.ok { "ok  " } else { "FAIL" }, row.line);
            }
            let failed = verified.iter().filter(|row| !row.ok).count();
            if failed == 0 {
                ExitCode::SUCCESS
            } else {
                eprintln!("oncecheck: {failed} implemented-variant rows not replayed in full");
                ExitCode::from(1)
            }
        }
        Err(error) => bad_input(error),
    }
}

fn corpus(
    directory: &std::path::Path,
    write: bool,
    walks_out: Option<&std::path::Path>,
) -> ExitCode {
    use oncecheck_conformance::traces;
    // A corpus is a directory with its manifest: without one there is nothing to check against
    // and nowhere it is safe to write (a relative --dir run from elsewhere names a stranger's
    // directory).
    if !directory.is_dir() {
        let here = std::env::current_dir()
            .map(|path| path.display().to_string())
            .unwrap_or_else(|_| "the working directory".to_string());
        return bad_input(format!(
            "no corpus directory {} (from {here}): run from the repository root or pass --dir",
            directory.display()
        ));
    }
    if let Err(error) = traces::read_manifest(directory) {
        return bad_input(format!(
            "{error}; every corpus directory holds one (`{{\"model\": MODEL, \"walks\": []}}` at least)"
        ));
    }
    if write {
        return match traces::write_corpus(directory) {
            Ok(summary) => {
                println!(
                    "wrote the corpus in {}: {}",
                    directory.display(),
                    summary.join("; ")
                );
                ExitCode::SUCCESS
            }
            Err(error) => bad_input(error),
        };
    }
    if let Some(out) = walks_out {
        return match traces::write_walks(directory, out) {
            Ok(files) => {
                println!("wrote {} walks to {}", files.len(), out.display());
                ExitCode::SUCCESS
            }
            Err(error) => bad_input(error),
        };
    }
    match traces::check_corpus(directory) {
        Ok(summary) => {
            println!("{summary}");
            ExitCode::SUCCESS
        }
        Err(problems) => {
            for problem in &problems {
                println!("FAIL {problem}");
            }
            note(format!("{} disagreements between the corpus in {} and the model; `oncecheck corpus --dir {} --write` regenerates it", problems.len(), directory.display(), directory.display()));
            ExitCode::from(1)
        }
    }
}

/// `oncecheck replay`'s options about the real side and the outputs, checked against the
/// target before anything runs. (A build without `replay` only refuses the command.)
#[cfg_attr(not(feature = "replay"), allow(dead_code))]
struct ReplayFlags {
    store_variant: Option<String>,
    store_mutations: Vec<String>,
    lose_by: Option<String>,
    junit: Option<PathBuf>,
    summary_json: Option<PathBuf>,
}

#[cfg(feature = "replay")]
#[allow(clippy::too_many_arguments)]
fn replay(
    traces: &[PathBuf],
    target: &str,
    flags: ReplayFlags,
    only_replayable: bool,
    jobs: usize,
) -> ExitCode {
    let target: oncecheck_conformance::replay::Target = match target.parse() {
        Ok(target) => target,
        Err(message) => return bad_input(message),
    };
    use oncecheck_conformance::replay::Target;
    use oncecheck_conformance::replay_command::TargetConfig;
    if let Err(message) = oncecheck_conformance::replay_flags::usable_on(
        &target,
        flags.store_variant.is_some(),
        !flags.store_mutations.is_empty(),
        flags.lose_by.is_some(),
    ) {
        return bad_input(message);
    }
    if let Some(file) = &flags.junit {
        if let Err(error) = oncecheck_conformance::junit::prepare_file(file) {
            return bad_input(format!(
                "cannot write the JUnit report to {}: {error}",
                file.display()
            ));
        }
    }
    let config = match target {
        Target::MiddlewareSqlite | Target::MiddlewarePostgres(_) => {
            oncecheck_conformance::replay_middleware::target::LayerConfig::parse(
                flags.store_variant.as_deref(),
                &flags.store_mutations,
            )
            .map(TargetConfig::Layer)
        }
        _ => oncecheck_conformance::replay_command::store_config(
            flags.store_variant,
            &flags.store_mutations,
            flags.lose_by.as_deref(),
        )
        .map(TargetConfig::Store),
    };
    let config = match config {
        Ok(config) => config,
        Err(message) => return bad_input(message),
    };
    let outputs = oncecheck_conformance::replay_command::Outputs {
        summary_json: flags.summary_json,
        junit: flags.junit,
    };
    oncecheck_conformance::replay_command::run(
        traces,
        &target,
        config,
        only_replayable,
        jobs,
        &outputs,
    )
}

/// Without the `replay` feature the binary carries no store, SDK or database driver: say how to
/// get one that does, in one line.
#[cfg(not(feature = "replay"))]
fn replay(_: &[PathBuf], _: &str, _: ReplayFlags, _: bool, _: usize) -> ExitCode {
    bad_input(
        "this oncecheck was built without replay; build one with it: \
         cargo run --release -p oncecheck-conformance --features replay --bin oncecheck -- replay ...",
    )
}

#[cfg(feature = "replay")]
fn probe(target: &str, through_proxy: bool, token_table: bool) -> ExitCode {
    oncecheck_conformance::probe::run_command(target, through_proxy, token_table)
}

/// The probe talks to DynamoDB through the SDK, which only the `replay` build carries.
#[cfg(not(feature = "replay"))]
fn probe(_: &str, _: bool, _: bool) -> ExitCode {
    bad_input(
        "this oncecheck was built without replay (the probe needs the AWS SDK); build one with it: \
         cargo run --release -p oncecheck-conformance --features replay --bin oncecheck -- probe ...",
    )
}

#[cfg(feature = "replay")]
fn soak(soak_command: &oncecheck_conformance::soak::SoakCommand) -> ExitCode {
    oncecheck_conformance::soak::command(soak_command)
}

/// The soak runs the relay and the layer on real stores, which only the `replay` build carries.
#[cfg(not(feature = "replay"))]
fn soak(_: &oncecheck_conformance::soak::SoakCommand) -> ExitCode {
    bad_input(
        "this oncecheck was built without replay (the soak needs the stores); build one with it: \
         cargo build --release -p oncecheck-conformance --features replay --bin oncecheck",
    )
}

/// Makes sure every output of `check` can be written before any checking starts: an unusable
/// path is bad input found in a second, not after the run.
fn prepare_outputs(
    diagrams: Option<&std::path::Path>,
    html: Option<&std::path::Path>,
    junit: Option<&std::path::Path>,
) -> Result<(), String> {
    if let Some(directory) = diagrams {
        models::prepare_directory(directory).map_err(|error| {
            format!("cannot write diagrams to {}: {error}", directory.display())
        })?;
    }
    if let Some(directory) = html {
        models::prepare_directory(directory).map_err(|error| {
            format!(
                "cannot write the HTML report to {}: {error}",
                directory.display()
            )
        })?;
    }
    if let Some(file) = junit {
        oncecheck_conformance::junit::prepare_file(file).map_err(|error| {
            format!(
                "cannot write the JUnit report to {}: {error}",
                file.display()
            )
        })?;
    }
    Ok(())
}

/// Writes the JUnit report, then says in one line each what --junit, --diagrams and --html wrote.
fn finish_outputs(
    reports: &[oncecheck_model::check::CheckReport],
    outputs: &Outputs,
    diagrams_written: usize,
    pages_written: usize,
) -> Result<(), String> {
    if let Some(file) = outputs.junit {
        let document = oncecheck_conformance::junit::check_document(reports);
        std::fs::write(file, document).map_err(|error| {
            format!(
                "cannot write the JUnit report to {}: {error}",
                file.display()
            )
        })?;
        let cases: usize = reports.iter().map(|report| report.properties.len()).sum();
        note(format!(
            "wrote the JUnit report to {} ({} test suites, {cases} test cases)",
            file.display(),
            reports.len()
        ));
    }
    if let Some(directory) = outputs.diagrams {
        note(format!(
            "wrote {diagrams_written} sequence diagrams to {}",
            directory.display()
        ));
    }
    if let Some(directory) = outputs.html {
        note(format!(
            "wrote the HTML report to {} ({pages_written} pages)",
            directory.join("index.html").display()
        ));
    }
    Ok(())
}

/// Where `check` writes besides the human report.
struct Outputs<'a> {
    /// One JSON document on stdout instead of the human report.
    json: bool,
    diagrams: Option<&'a std::path::Path>,
    html: Option<&'a std::path::Path>,
    junit: Option<&'a std::path::Path>,
}

fn check(
    jobs: &[Job],
    options: &CheckOptions,
    simulation: Option<&SimulationOptions>,
    outputs: &Outputs,
) -> ExitCode {
    let (json, diagrams, html) = (outputs.json, outputs.diagrams, outputs.html);
    let run = oncecheck_conformance::run_info::RunInfo::now();
    let mut all_match = true;
    let mut reports = Vec::new();
    let mut shard_itfs = Vec::new();
    let mut html_reports = Vec::new();
    let mut diagrams_written = 0usize;
    let stdout = std::io::stdout();
    for job in jobs {
        let bar = ProgressBar::new_spinner();
        bar.set_style(ProgressStyle::with_template("{spinner} {msg}").expect("a valid template"));
        bar.enable_steady_tick(Duration::from_millis(120));
        let label = match job.bound_set {
            Some(set) => format!("{}/{} (bound set `{set}`)", job.model, job.variant),
            None => format!("{}/{}", job.model, job.variant),
        };
        let mut last = (0usize, Duration::ZERO);
        let mut on_progress = |progress: oncecheck_model::check::Progress| {
            // The liveness exploration, which follows the safety search, counts from zero again.
            let rate = progress.states.saturating_sub(last.0) as f64
                / progress
                    .elapsed
                    .saturating_sub(last.1)
                    .as_secs_f64()
                    .max(1e-3);
            last = (progress.states, progress.elapsed);
            bar.set_message(format!(
                "{label}: {} states, {} unique, {:.0} states/s, depth {}",
                progress.states, progress.unique_states, rate, progress.max_depth
            ));
        };
        let report = match (simulation, options.shard) {
            (_, Some(_)) => {
                oncecheck_conformance::merge::run_shard(job, options, simulation, &mut on_progress)
                    .map(|(report, itfs)| {
                        shard_itfs.push(itfs);
                        report
                    })
            }
            (Some(simulation), None) => {
                models::simulate_job(job, options, simulation, &mut on_progress)
            }
            (None, None) => models::run_job(job, options, &mut on_progress),
        };
        bar.finish_and_clear();
        let report = match report {
            Ok(report) => report,
            Err(error) => return bad_input(error),
        };
        // A shard's verdicts are of its part: `merge` decides; the shard only says it ran.
        all_match &= options.shard.is_some() || report.matches_expectations();
        all_match &= report.stopped.is_none();
        if let Some(line) = models::stop_line(&report) {
            note(line);
        }
        // Pages and diagrams are one per (model, variant): the CI bounds' run.
        let diagrams = diagrams.filter(|_| job.bound_set.is_none());
        let html = html.filter(|_| job.bound_set.is_none());
        if let Some(directory) = diagrams {
            match models::write_diagrams(&report, directory) {
                Ok(files) => diagrams_written += files.len(),
                Err(error) => {
                    return bad_input(format!(
                        "cannot write diagrams to {}: {error}",
                        directory.display()
                    ))
                }
            }
        }
        if let Some(directory) = html {
            let written = models::page_detail(job, &report).map(|detail| {
                html_reports.push(report.clone());
                oncecheck_conformance::report::write_page(directory, &report, &detail).and_then(
                    |_| {
                        oncecheck_conformance::report::write_index(
                            directory,
                            &html_reports.iter().collect::<Vec<_>>(),
                            &run,
                        )
                    },
                )
            });
            match written {
                Ok(Ok(_)) => {}
                Ok(Err(error)) => {
                    return bad_input(format!(
                        "cannot write the HTML report to {}: {error}",
                        directory.display()
                    ))
                }
                Err(error) => return bad_input(error),
            }
        }
        if !json {
            let mut out = stdout.lock();
            let written = match models::bound_set_of(job) {
                Some(set) => writeln!(
                    out,
                    "bound set `{}` of {}/{} (for the reach of {}):",
                    set.name,
                    job.model,
                    job.variant,
                    set.reaches.join(", ")
                ),
                None => Ok(()),
            }
            .and_then(|_| models::write_human(&report, &mut out))
            .and_then(|_| {
                oncecheck_conformance::reach::run_lines(&report)
                    .iter()
                    .try_for_each(|line| writeln!(out, "{line}"))
            });
            if let Err(error) = written {
                return bad_input(format!("cannot write the report: {error}"));
            }
        }
        reports.push(report);
    }
    let runs: Vec<_> = jobs.iter().zip(&reports).collect();
    if !json && simulation.is_none() {
        let mut out = stdout.lock();
        let written = writeln!(
            out,
            "\nreach over every run (CI bounds and bound sets): the sometimes partners of each always"
        )
        .and_then(|_| {
            oncecheck_conformance::reach::summary_lines(&runs)
                .iter()
                .try_for_each(|line| writeln!(out, "  {line}"))
        });
        if let Err(error) = written {
            return bad_input(format!("cannot write the report: {error}"));
        }
    }
    if let Err(message) = finish_outputs(&reports, outputs, diagrams_written, html_reports.len()) {
        return bad_input(message);
    }
    if json {
        let mut out = stdout.lock();
        let mut document = if options.shard.is_some() {
            let pairs: Vec<_> = reports.iter().cloned().zip(shard_itfs).collect();
            oncecheck_conformance::merge::shard_document(&pairs)
        } else {
            models::json_document(&reports)
        };
        oncecheck_conformance::reach::annotate(&mut document, &runs);
        let written = serde_json::to_writer(&mut out, &document)
            .map_err(std::io::Error::from)
            .and_then(|_| writeln!(out));
        if let Err(error) = written {
            return bad_input(format!("cannot write the report: {error}"));
        }
    } else {
        let outcomes: Vec<_> = reports
            .iter()
            .map(|report| {
                (
                    report,
                    oncecheck_conformance::model_facts::outcome_of(report),
                )
            })
            .collect();
        let summary = oncecheck_conformance::verdict_words::summary(&outcomes);
        if let Err(error) = writeln!(stdout.lock(), "{summary}") {
            return bad_input(format!("cannot write the report: {error}"));
        }
    }
    if all_match {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// `oncecheck merge`: the shards of each run joined, printed as `check` prints a run.
fn merge(files: &[PathBuf], json: bool, html: Option<&std::path::Path>) -> ExitCode {
    if let Some(directory) = html {
        if let Err(error) = models::prepare_directory(directory) {
            return bad_input(format!(
                "cannot write the HTML report to {}: {error}",
                directory.display()
            ));
        }
    }
    let merged = match oncecheck_conformance::merge::merge_files(files) {
        Ok(merged) => merged,
        Err(error) => return bad_input(error),
    };
    if let Some(directory) = html {
        if let Err(error) = oncecheck_conformance::merge::write_html(directory, &merged) {
            return bad_input(format!(
                "cannot write the HTML report to {}: {error}",
                directory.display()
            ));
        }
    }
    let reports: Vec<_> = merged.into_iter().map(|run| run.report).collect();
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    for report in &reports {
        if let Some(line) = models::stop_line(report) {
            note(line);
        }
        if !json {
            if let Err(error) = models::write_human(report, &mut out) {
                return bad_input(format!("cannot write the report: {error}"));
            }
        }
    }
    if json {
        let written = serde_json::to_writer(&mut out, &models::json_document(&reports))
            .map_err(std::io::Error::from)
            .and_then(|_| writeln!(out));
        if let Err(error) = written {
            return bad_input(format!("cannot write the report: {error}"));
        }
    }
    if reports.iter().all(|report| report.matches_expectations()) {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
