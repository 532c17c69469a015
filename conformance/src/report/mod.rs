//! What a run writes for people and tools: the words of a verdict and a run's outcome
//! (`verdict_words`), the HTML report (`html`), counterexamples as SVG sequence diagrams
//! (`diagram`), JUnit XML for checks (`junit`) and replays (`replay_junit`), what a run was
//! (`run_info`), and how a report command meets its terminal (`terminal`). The text report and
//! the `--json` document are the model registry's (`crate::check::models`).
//!
//! Invariant: a report states what a run found and never decides a verdict itself.

/// Text as HTML or SVG character data or a quoted attribute value. (JUnit's XML has its own,
/// stricter escape in `junit`: XML 1.0 cannot carry most control characters at all.)
fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

pub mod diagram;
pub mod html;
pub mod junit;
#[cfg(feature = "replay")]
pub mod replay_junit;
pub mod run_info;
pub mod terminal;
pub mod verdict_words;
