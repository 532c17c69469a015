//! The command line of `oncecheck`: its subcommands and options as clap declares them, their
//! help texts (completed from the model registry), and the parsers of the option values.
//!
//! Invariant: what a user can type is declared here and nowhere else; the subcommands' code
//! (`crate::cli`) receives it parsed.

use crate::check::models;
use clap::{CommandFactory, Parser, Subcommand};
use std::path::PathBuf;

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
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
pub enum Command {
    /// Exhaustive BFS of a model: every property's verdict against its expectation, and the
    /// shortest trace of every violation in protocol words.
    Check(CheckArgs),
    /// Join the reports of a check's shards (`check --shard K/N --json`) into the report of the
    /// whole run: verdicts, the shortest trace found, coverage, states; exit codes as `check`.
    #[command(after_help = MERGE_HELP)]
    Merge(MergeArgs),
    /// Write counterexamples, examples and seeded covering paths as ITF trace files.
    #[command(after_help = TRACES_HELP)]
    Traces(TracesArgs),
    /// Check the regression corpus against the model (the default), regenerate it, or write
    /// its covering walks for a replay.
    #[command(after_help = CORPUS_HELP)]
    Corpus(CorpusArgs),
    /// Replay trace files against the real implementation, step by step.
    #[command(after_help = REPLAY_HELP)]
    Replay(ReplayArgs),
    /// Check an endpoint's DynamoDB semantics with real requests on a fresh table (deleted after);
    /// exit 0 when it ran, 2 on a bad target or an unreachable endpoint.
    #[command(after_help = PROBE_HELP)]
    Probe(ProbeArgs),
    /// Print the implemented-variant table (which implementation, configured how, implements
    /// which model variant, replayed on which targets), or check replay summaries against it.
    Implemented(ImplementedArgs),
    /// Run the relay or the idempotency layer under load and faults (kills, stalls, database
    /// restarts), then check nothing was lost, duplicated or run twice; prints throughput and
    /// latency. Exit 0 ok, 1 a violation (each listed), 2 the run could not be set up.
    #[command(subcommand)]
    Soak(crate::soak::SoakCommand),
    /// Serve the stateright Explorer for one model variant on 127.0.0.1 (blocks until ctrl-c).
    #[command(after_help = EXPLORE_HELP)]
    Explore(ExploreArgs),
}

#[derive(clap::Args)]
pub struct CheckArgs {
    /// The model to check: relay, idempotency or token (every model when omitted).
    pub model: Option<String>,
    /// One variant of MODEL (every variant when omitted); the list is below.
    #[arg(long)]
    pub variant: Option<String>,
    /// Override a bound: KEY=N (repeatable); the keys, defaults and ranges are below.
    #[arg(long = "bound", value_name = "KEY=N", value_parser = parse_bound)]
    pub bounds: Vec<(String, u32)>,
    /// Checker threads, at least 1 (the verdicts and traces do not depend on it).
    #[arg(long, default_value_t = 1, value_parser = parse_positive)]
    pub threads: usize,
    /// One JSON document on stdout instead of the human report: `schema`, overall `ok`, one report per (model, variant) (docs/check-json.md).
    #[arg(long)]
    pub json: bool,
    /// Give up after this many seconds per variant (undecided verdicts are then `unknown`
    /// and the exit code 1).
    #[arg(long, value_name = "SECONDS")]
    pub timeout_secs: Option<u64>,
    /// Write every printed trace as an SVG sequence diagram into this directory.
    #[arg(long, value_name = "DIR")]
    pub diagrams: Option<PathBuf>,
    /// Write an HTML report into this directory: index.html and a page per (model,
    /// variant) with verdicts, counterexamples with the roles each step changed, their
    /// sequence diagrams and the coverage. Walks each state space once more for coverage.
    #[arg(long, value_name = "DIR")]
    pub html: Option<PathBuf>,
    // ---- limits and simulation (the checker's flags) ----
    /// Stop once this many unique states are known; what is undecided is then `unknown` (exit 1).
    #[arg(long)]
    pub states_max: Option<usize>,
    /// Stop once this process's resident memory reaches this many MiB; what is undecided is
    /// then `unknown` (exit 1).
    #[arg(long, default_value_t = models::MEMORY_MAX_MB_DEFAULT)]
    pub memory_max_mb: u64,
    /// Past a quarter of --memory-max-mb (or near the limit itself), the states waiting to be
    /// expanded and the liveness graph's edges are written to this directory in compact blocks
    /// and read back (a fresh subdirectory, removed after the run) [default: the system's temp
    /// directory].
    #[arg(long, value_name = "DIR")]
    pub spill_dir: Option<PathBuf>,
    /// Stop once the spilled states would take more than this many MiB of disk; what is
    /// undecided is then `unknown` (exit 1) [default: until the disk is full].
    #[arg(long, value_name = "MIB")]
    pub disk_max_mb: Option<u64>,
    /// Seeded random walks instead of the exhaustive search, for bounds too large to exhaust:
    /// finds violations and examples, never shows that a property holds (`unknown` instead).
    #[arg(long)]
    pub simulate: bool,
    /// Seed of --simulate, printed; the same seed gives the same report [default: the clock].
    #[arg(long, requires = "simulate")]
    pub seed: Option<u64>,
    /// Walks of --simulate per variant, at least 1 [default: 1000].
    #[arg(long, requires = "simulate", value_parser = parse_positive)]
    pub samples: Option<usize>,
    /// Longest walk of --simulate, in steps, at least 1 [default: 200].
    #[arg(long, requires = "simulate", value_parser = parse_positive)]
    pub depth: Option<usize>,
    /// Write a JUnit XML report into FILE: a test suite per (model, variant), a test case per
    /// property (failed when its verdict differs from its expectation), for CI systems.
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,
    /// Run shard K of N (0-based) of this check, for `oncecheck merge` to join: with
    /// --simulate, its share of the --samples walks; exhaustive, the states of its hash part
    /// of the first level large enough to split. Needs --json (the shard's report, with its
    /// traces as ITF); exits 0 when the shard ran without a limit (docs/scale-out.md).
    #[arg(long, value_name = "K/N", value_parser = crate::check::merge::parse_shard, requires = "json")]
    pub shard: Option<oncecheck_model::check::Shard>,
    /// Keep one state per orbit of the model's symmetry (interchangeable writers, pullers,
    /// clients), in the liveness search too: the same verdicts and shortest safety traces over
    /// fewer states (a liveness lasso is a run of the model, not always the unreduced one).
    #[arg(long)]
    pub symmetry: bool,
    /// Expand ample sets (the model's independence declaration, with the cycle proviso):
    /// the same verdicts over fewer states; traces are real paths but may be longer.
    #[arg(long)]
    pub partial_order: bool,
    /// Decide the safety properties only (`always`, `sometimes`): the liveness properties stay
    /// `unknown` and the run incomplete (exit 1). For bounds whose liveness graph does not fit
    /// the memory limit, where the safety search, which keeps fingerprints only, still can.
    #[arg(long)]
    pub safety_only: bool,
    /// Where stderr is no terminal (a CI log, a file), print the progress as a plain line
    /// every this many seconds (0: never); on a terminal a spinner shows it instead.
    #[arg(long, value_name = "SECONDS", default_value_t = 30)]
    pub progress_secs: u64,
}

#[derive(clap::Args)]
pub struct MergeArgs {
    /// Shard reports (each the --json document of one `check --shard K/N`).
    #[arg(required = true, value_name = "SHARD_JSON")]
    pub reports: Vec<PathBuf>,
    /// One JSON document on stdout (the `check --json` shape) instead of the human report.
    #[arg(long)]
    pub json: bool,
    /// Write the HTML report of the merged runs into this directory.
    #[arg(long, value_name = "DIR")]
    pub html: Option<PathBuf>,
}

#[derive(clap::Args)]
pub struct TracesArgs {
    /// The model: relay, idempotency or token (each replayed: `oncecheck replay --target ...`).
    pub model: String,
    /// One variant of MODEL (every variant when omitted); each model's are listed below.
    #[arg(long)]
    pub variant: Option<String>,
    /// Override a bound: KEY=N (repeatable); see `oncecheck check --help`.
    #[arg(long = "bound", value_name = "KEY=N", value_parser = parse_bound)]
    pub bounds: Vec<(String, u32)>,
    /// Directory the trace files are written into (created if missing).
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// Random covering paths per variant (distinct action sequences).
    #[arg(long, default_value_t = 240)]
    pub count: usize,
    /// Seed of the covering paths; the same seed writes the same files.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

#[derive(clap::Args)]
pub struct CorpusArgs {
    /// The corpus directory (counterexamples, examples, promoted traces, the walk manifest).
    #[arg(long, value_name = "DIR", default_value = crate::check::traces::CORPUS_DIR)]
    pub dir: PathBuf,
    /// Regenerate the kept traces and the manifest's digests from the model.
    #[arg(long, conflicts_with = "walks_out")]
    pub write: bool,
    /// Write the manifest's covering walks into this directory (checked against their digest).
    #[arg(long, value_name = "DIR")]
    pub walks_out: Option<PathBuf>,
}

#[derive(clap::Args)]
pub struct ReplayArgs {
    /// ITF trace files written by `oncecheck traces` (or kept in conformance/traces/).
    #[arg(required = true, value_name = "TRACE")]
    pub traces: Vec<PathBuf>,
    /// Where to replay: memory | sqlite | dynamodb (ONCECHECK_DDB_ENDPOINT) | dynamodb=URL
    /// (relay traces); tokened-dynamodb | tokened-dynamodb=URL (token traces, on the
    /// reliable-write client through the proxy's token table); middleware-sqlite |
    /// middleware-postgres (ONCECHECK_PG_URL) | middleware-postgres=URL (idempotency traces).
    #[arg(long, default_value = "dynamodb")]
    pub target: String,
    /// Run the writers as this store build instead of the trace's own variant
    /// (add-era | counter-only | fixed | mixed; middleware targets: the layer, pre-fix |
    /// fixed | fenced), to show where the two part.
    #[arg(long)]
    pub store_variant: Option<String>,
    /// Switch on a deliberate defect in the real store (repeatable):
    /// no-predecessor-check | unconditional-counter-set | read-counter-every-op; middleware
    /// targets: claim-over-live-lease | finalize-key-only | no-drop-guard | replay-unmarked.
    #[arg(long = "store-mutation", value_name = "MUTATION")]
    pub store_mutations: Vec<String>,
    /// Traces a logical target cannot show are listed as not applicable instead of failing
    /// the run (they are still counted and printed).
    #[arg(long)]
    pub only_replayable: bool,
    /// Replay this many traces at once (each on its own stream, table and proxy).
    #[arg(long, default_value_t = 1)]
    pub jobs: usize,
    /// Start no trace after the first divergence or environment failure (those running
    /// finish); the traces not started are counted as not run. Exit 1 as without it.
    #[arg(long)]
    pub fail_fast: bool,
    /// How the proxy loses a response the trace loses: close (the connection, no answer)
    /// or stall (no answer until the client times out). Default: close. dynamodb only.
    #[arg(long, value_name = "close|stall")]
    pub lose_by: Option<String>,
    /// Also write the run's summary as one JSON document to FILE: counts, and per (model,
    /// variant, bounds) the transitions the conforming traces drove of those reachable.
    #[arg(long, value_name = "FILE")]
    pub summary_json: Option<PathBuf>,
    /// Write a JUnit XML report into FILE: a test case per trace (failed on a divergence,
    /// skipped when not applicable with --only-replayable), for CI systems.
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,
}

#[derive(clap::Args)]
pub struct ProbeArgs {
    /// The endpoint: dynamodb=URL (any DynamoDB-compatible endpoint, moto included).
    pub target: String,
    /// Probe through the conformance proxy in front of the endpoint: its token table, and
    /// the hold that the in-progress and TransactionConflict rows need.
    #[arg(long)]
    pub proxy: bool,
    /// With --proxy: the proxy's token table on (DynamoDB's token rules) or off (the
    /// endpoint's own).
    #[arg(long, value_name = "on|off", default_value = "on", value_parser = ["on", "off"])]
    pub token_table: String,
}

#[derive(clap::Args)]
pub struct ImplementedArgs {
    /// `oncecheck replay --summary-json` files: exit 1 unless every row was replayed on every
    /// target at its CI bounds with no divergence and every reachable transition driven.
    #[arg(long, value_name = "SUMMARY", num_args = 1..)]
    pub verify: Vec<PathBuf>,
}

#[derive(clap::Args)]
pub struct ExploreArgs {
    /// The model: relay, idempotency or token.
    pub model: String,
    /// The variant to explore (listed below) [default: the model's design: relay fixed,
    /// idempotency renewed, token tokened].
    #[arg(long)]
    pub variant: Option<String>,
    /// Override a bound: KEY=N (repeatable); see `oncecheck check --help`.
    #[arg(long = "bound", value_name = "KEY=N", value_parser = parse_bound)]
    pub bounds: Vec<(String, u32)>,
    /// Loopback port of the Explorer (a busy port exits 2).
    #[arg(long, default_value_t = 3000)]
    pub port: u16,
}

pub fn parse_bound(text: &str) -> Result<(String, u32), String> {
    let (key, value) = text
        .split_once('=')
        .ok_or_else(|| format!("bound `{text}` is not KEY=N"))?;
    let value = value
        .parse::<u32>()
        .map_err(|_| format!("bound `{text}`: `{value}` is not a non-negative integer"))?;
    Ok((key.to_string(), value))
}

/// A count that must be at least 1 (`--threads`, `--samples`, `--depth`): 0 would check nothing.
pub fn parse_positive(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(0) => Err("must be at least 1".to_string()),
        Ok(value) => Ok(value),
        Err(_) => Err(format!("`{text}` is not a positive integer")),
    }
}

/// The command line, with the help of `check`, `traces` and `explore` completed from the model
/// registry.
pub fn command_line() -> clap::Command {
    let registry = models::registry_help();
    let variants = crate::check::model_facts::variants_help();
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
