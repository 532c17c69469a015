//! The subcommands of `oncecheck`, one file per family: `check` (check and merge), `traces`
//! (trace files and the corpus), `replay`; the small ones (implemented, probe, soak, explore)
//! here. `args` declares the command line; `bin/oncecheck.rs` parses it and calls [`run`].
//!
//! Exit codes: 0 every verdict matches its expectation (replay: every trace conforms); 1 a
//! verdict differs (replay: a divergence); 2 bad input (unknown model, variant or bound;
//! malformed arguments; an unusable file, directory, port or replay target).
//!
//! Invariants: every failure is one line on stderr, never a panic or a backtrace; nothing
//! outside this module imports it (the replays, checks and reports know no command line).

pub mod args;
pub mod check;
#[cfg(feature = "replay")]
pub mod replay;
pub mod traces;

use crate::check::models;
use crate::report::terminal::note;
use args::{Command, ExploreArgs, ImplementedArgs, ProbeArgs};
use std::process::ExitCode;

/// Runs one parsed command line.
pub fn run(command: Command) -> ExitCode {
    // The Explorer is a server: it keeps serving when its stderr goes away. Every other command
    // ends quietly, as `cat` does, when the reader of its output leaves.
    if !matches!(command, Command::Explore(_)) {
        crate::report::terminal::end_when_the_reader_leaves();
    }
    match command {
        Command::Check(args) => check::check(args),
        Command::Traces(args) => traces::traces(args),
        Command::Corpus(args) => traces::corpus(&args.dir, args.write, args.walks_out.as_deref()),
        Command::Merge(args) => check::merge(&args.reports, args.json, args.html.as_deref()),
        Command::Replay(args) => replay_traces(args),
        Command::Probe(args) => probe(args),
        Command::Implemented(args) => implemented(args),
        Command::Soak(soak_command) => soak(&soak_command),
        Command::Explore(args) => explore(args),
    }
}

/// One line on stderr and exit 2: what was wrong and, where there is one, what would be valid.
pub fn bad_input(message: impl std::fmt::Display) -> ExitCode {
    note(message);
    ExitCode::from(2)
}

fn explore(args: ExploreArgs) -> ExitCode {
    let ExploreArgs {
        model,
        variant,
        bounds,
        port,
    } = args;
    let variant =
        variant.or_else(|| crate::check::variants::design_variant(&model).map(str::to_string));
    let jobs = match models::resolve(Some(&model), variant.as_deref(), &bounds) {
        Ok(jobs) => jobs,
        Err(error) => return bad_input(error),
    };
    let address = format!("127.0.0.1:{port}");
    let mut banner = |line: String| crate::report::terminal::note_raw(line);
    match models::explore(&jobs[0], &address, &mut banner) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => bad_input(error),
    }
}

fn implemented(args: ImplementedArgs) -> ExitCode {
    use crate::replay::implemented;
    let summaries = &args.verify;
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

#[cfg(feature = "replay")]
fn replay_traces(args: args::ReplayArgs) -> ExitCode {
    replay::replay(args)
}

/// Without the `replay` feature the binary carries no store, SDK or database driver: say how to
/// get one that does, in one line.
#[cfg(not(feature = "replay"))]
fn replay_traces(_: args::ReplayArgs) -> ExitCode {
    bad_input(
        "this oncecheck was built without replay; build one with it: \
         cargo run --release -p oncecheck-conformance --features replay --bin oncecheck -- replay ...",
    )
}

#[cfg(feature = "replay")]
fn probe(args: ProbeArgs) -> ExitCode {
    crate::probe::run_command(&args.target, args.proxy, args.token_table == "on")
}

/// The probe talks to DynamoDB through the SDK, which only the `replay` build carries.
#[cfg(not(feature = "replay"))]
fn probe(_: ProbeArgs) -> ExitCode {
    bad_input(
        "this oncecheck was built without replay (the probe needs the AWS SDK); build one with it: \
         cargo run --release -p oncecheck-conformance --features replay --bin oncecheck -- probe ...",
    )
}

#[cfg(feature = "replay")]
fn soak(soak_command: &crate::soak::SoakCommand) -> ExitCode {
    crate::soak::command(soak_command)
}

/// The soak runs the relay and the layer on real stores, which only the `replay` build carries.
#[cfg(not(feature = "replay"))]
fn soak(_: &crate::soak::SoakCommand) -> ExitCode {
    bad_input(
        "this oncecheck was built without replay (the soak needs the stores); build one with it: \
         cargo build --release -p oncecheck-conformance --features replay --bin oncecheck",
    )
}
