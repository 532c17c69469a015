//! What a run writes for people and tools: the words of a verdict and a run's outcome
//! (`verdict_words`), the HTML report (`html`), counterexamples as SVG sequence diagrams
//! (`diagram`), JUnit XML for checks (`junit`) and replays (`replay_junit`), what a run was
//! (`run_info`), and how a report command meets its terminal (`terminal`). The text report and
//! the `--json` document are the model registry's (`crate::check::models`).
//!
//! Invariant: a report states what a run found and never decides a verdict itself.

pub mod diagram;
pub mod html;
pub mod junit;
#[cfg(feature = "replay")]
pub mod replay_junit;
pub mod run_info;
pub mod terminal;
pub mod verdict_words;
