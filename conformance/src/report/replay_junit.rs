//! `oncecheck replay --junit FILE`: one test suite per run (named by the target), one test case
//! per trace in the order given: a conforming replay passes (its ok line as output), a
//! divergence fails with the divergence report, a trace listed not applicable under
//! `--only-replayable` is skipped with its reason, anything else (an unusable file, a target the
//! trace does not fit, an environment failure) is an error.

use crate::replay::driver::{ReplayError, ReplayStats};
use crate::report::junit::{document, CaseOutcome, TestCase, TestSuite};
use std::path::PathBuf;

/// The JUnit document of a replay run.
pub fn replay_document(
    target: &str,
    only_replayable: bool,
    outcomes: &[(PathBuf, Result<ReplayStats, ReplayError>)],
    seconds: f64,
) -> String {
    let classname = format!("oncecheck.replay.{target}");
    let cases = outcomes
        .iter()
        .map(|(file, result)| {
            let (outcome, output) = match result {
                Ok(stats) => (
                    CaseOutcome::Passed,
                    format!(
                        "conforms: {} steps, {} requests, {} lost responses",
                        stats.steps, stats.requests, stats.lost_responses
                    ),
                ),
                Err(ReplayError::NotApplicable { reason, .. }) if only_replayable => (
                    CaseOutcome::Skipped {
                        message: format!("not applicable to {target}: {reason}"),
                    },
                    String::new(),
                ),
                Err(error @ ReplayError::Diverged(_)) => {
                    let detail = error.to_string();
                    (
                        CaseOutcome::Failed {
                            message: detail.lines().next().unwrap_or_default().to_string(),
                            detail,
                        },
                        String::new(),
                    )
                }
                Err(error) => {
                    let detail = error.to_string();
                    (
                        CaseOutcome::Error {
                            message: detail.lines().next().unwrap_or_default().to_string(),
                            detail,
                        },
                        String::new(),
                    )
                }
            };
            TestCase {
                name: file
                    .file_name()
                    .map(|name| name.to_string_lossy().to_string())
                    .unwrap_or_else(|| file.display().to_string()),
                classname: classname.clone(),
                seconds: 0.0,
                outcome,
                output,
            }
        })
        .collect();
    let suite = TestSuite {
        name: format!("replay against {target}"),
        seconds,
        properties: vec![("target".to_string(), target.to_string())],
        cases,
    };
    document("oncecheck replay", &[suite])
}
