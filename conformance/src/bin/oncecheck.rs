//! `oncecheck`: check models exhaustively, explore them in a browser, export and replay traces.
//! This file only parses the command line and hands it to `oncecheck_conformance::cli`, where
//! the subcommands live (exit codes there).

use clap::FromArgMatches;
use oncecheck_conformance::cli::{self, args::Cli};
use std::process::ExitCode;

fn main() -> ExitCode {
    let matches = cli::args::command_line().get_matches();
    let parsed = Cli::from_arg_matches(&matches).unwrap_or_else(|error| error.exit());
    cli::run(parsed.command)
}
