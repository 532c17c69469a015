//! `oncecheck replay`: model traces replayed against the real implementations. The driver
//! (`driver`: the `ReplayTarget` trait and the step loop every target shares), the run's options
//! about the real side (`flags`), the sessions that keep what a run shares across its traces and
//! open its target (`session`), the job runner (`runner`), the targets — `log` (memory, SQLite),
//! `dynamodb/` (the relay store through the proxy), `token` (the reliable-write client through
//! the proxy's token table), `middleware/` (the idempotency layer on SQLite and PostgreSQL) —,
//! the transition coverage of a run (`transitions`) and the implemented-variant table the
//! replays are checked against (`implemented`).
//!
//! Invariants: a replay never passes a step it did not compare (the driver's); every replay of
//! DynamoDB goes through the proxy; nothing here imports the command line (`cli/`).
//! Without `replay` only the model halves build: the middleware's expected views, the
//! transitions and the implemented-variant table.

#[cfg(feature = "replay")]
pub mod driver;
#[cfg(feature = "replay")]
pub mod dynamodb;
#[cfg(feature = "replay")]
pub mod flags;
pub mod implemented;
#[cfg(feature = "replay")]
pub mod log;
pub mod middleware;
#[cfg(feature = "replay")]
pub mod refused_input;
#[cfg(feature = "replay")]
pub mod runner;
#[cfg(feature = "replay")]
pub mod session;
#[cfg(feature = "replay")]
pub mod token;
pub mod transitions;
