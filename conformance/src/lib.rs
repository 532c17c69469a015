//! oncecheck-conformance: the `oncecheck` command — model checks, the Explorer, diagrams, HTML
//! reports and trace files — and, behind the `replay` feature, the DynamoDB proxy and trace
//! replay against the real implementations.
//!
//! Rooms by job: `check/` the model side (the model registry, checks, shards, trace files and
//! the corpus), `report/` everything a run writes for people and tools (text words, HTML, SVG,
//! JUnit, the terminal), `replay/` the replay driver, its targets and its sessions, `proxy/` the
//! DynamoDB proxy the replays talk through, `soak/` the soaks, `cli/` the subcommands
//! (`bin/oncecheck.rs` only parses and dispatches), `probe.rs` DynamoDB semantics probed.
//!
//! Invariants: this is the only crate that depends on both the model and the implementations;
//! without `replay` it depends on no implementation (no AWS SDK, no sqlx, no aws-lc), so the
//! main job builds the model checker only. Dependencies point down the rooms: `cli` uses the
//! others, `replay` uses `proxy`, `check` and `report`, `report` and `check` use each other's
//! words only; nothing imports `cli`.

pub mod check;
pub mod cli;
#[cfg(all(test, feature = "replay"))]
mod counting_upstream;
#[cfg(feature = "replay")]
pub mod probe;
#[cfg(feature = "replay")]
pub mod proxy;
pub mod replay;
pub mod report;
pub mod soak;

/// Runs `future` to its end on a fresh multi-threaded runtime: the one way the synchronous
/// command entry points (replay, probe, soak) start async work. `Err` says why no runtime
/// could start; each command maps it to its own exit code.
#[cfg(feature = "replay")]
pub fn block_on<F: std::future::Future>(future: F) -> Result<F::Output, String> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|error| format!("cannot start the async runtime: {error}"))?;
    Ok(runtime.block_on(future))
}
