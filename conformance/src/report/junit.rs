//! JUnit XML reports (`oncecheck check --junit FILE`, `oncecheck replay --junit FILE`): CI
//! systems show test reports, not text. `check` writes a test suite per (model, variant) and a
//! test case per property; `replay` one test suite per run and a test case per trace.
//!
//! The shape is the common denominator of the readers (Jenkins, GitLab, GitHub actions,
//! junitparser): `<testsuites>` of `<testsuite name tests failures errors skipped time>` of
//! `<testcase name classname time>`, each with at most one `<failure>`, `<error>` or `<skipped>`
//! and an optional `<system-out>`.
//!
//! Invariants: the document is well-formed XML whatever the text (escaped, characters XML 1.0
//! forbids dropped); a suite's counts equal its cases'; a verdict that equals its expectation is
//! a passed case, one that differs a failure, one a limit left undecided an error.

use oncecheck_model::check::{CheckReport, PropertyReport, Verdict};
use std::fmt::Write as _;
use std::path::Path;

/// How one test case ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CaseOutcome {
    Passed,
    /// What was checked did not hold: `message` in one line, `detail` the evidence.
    Failed {
        message: String,
        detail: String,
    },
    /// It could not be decided or run.
    Error {
        message: String,
        detail: String,
    },
    Skipped {
        message: String,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub struct TestCase {
    pub name: String,
    pub classname: String,
    pub seconds: f64,
    pub outcome: CaseOutcome,
    /// What a reader sees under the case (the verdict, a trace, an ok line).
    pub output: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct TestSuite {
    pub name: String,
    pub seconds: f64,
    /// Shown as the suite's `<properties>`: (name, value).
    pub properties: Vec<(String, String)>,
    pub cases: Vec<TestCase>,
}

/// Text as XML character data or an attribute value: escaped, and without the characters XML
/// 1.0 cannot carry (control characters other than tab, newline and carriage return).
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for character in text.chars() {
        match character {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\t' | '\n' | '\r' => out.push(character),
            control if (control as u32) < 0x20 => {}
            '\u{FFFE}' | '\u{FFFF}' => {}
            other => out.push(other),
        }
    }
    out
}

fn failed(outcome: &CaseOutcome) -> bool {
    matches!(outcome, CaseOutcome::Failed { .. })
}

fn errored(outcome: &CaseOutcome) -> bool {
    matches!(outcome, CaseOutcome::Error { .. })
}

fn skipped(outcome: &CaseOutcome) -> bool {
    matches!(outcome, CaseOutcome::Skipped { .. })
}

fn count(suite: &TestSuite, wanted: fn(&CaseOutcome) -> bool) -> usize {
    suite
        .cases
        .iter()
        .filter(|case| wanted(&case.outcome))
        .count()
}

/// The document of `suites`, named `name`.
pub fn document(name: &str, suites: &[TestSuite]) -> String {
    let total = |wanted: fn(&CaseOutcome) -> bool| -> usize {
        suites.iter().map(|suite| count(suite, wanted)).sum()
    };
    let mut xml = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let _ = writeln!(
        xml,
        "<testsuites name=\"{}\" tests=\"{}\" failures=\"{}\" errors=\"{}\" skipped=\"{}\" time=\"{:.3}\">",
        escape(name),
        suites.iter().map(|suite| suite.cases.len()).sum::<usize>(),
        total(failed),
        total(errored),
        total(skipped),
        suites.iter().map(|suite| suite.seconds).sum::<f64>()
    );
    for suite in suites {
        suite_xml(suite, &mut xml);
    }
    xml.push_str("</testsuites>\n");
    xml
}

fn suite_xml(suite: &TestSuite, xml: &mut String) {
    let _ = writeln!(
        xml,
        "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{}\" errors=\"{}\" skipped=\"{}\" time=\"{:.3}\">",
        escape(&suite.name),
        suite.cases.len(),
        count(suite, failed),
        count(suite, errored),
        count(suite, skipped),
        suite.seconds
    );
    if !suite.properties.is_empty() {
        xml.push_str("    <properties>\n");
        for (key, value) in &suite.properties {
            let _ = writeln!(
                xml,
                "      <property name=\"{}\" value=\"{}\"/>",
                escape(key),
                escape(value)
            );
        }
        xml.push_str("    </properties>\n");
    }
    for case in &suite.cases {
        case_xml(case, xml);
    }
    xml.push_str("  </testsuite>\n");
}

fn case_xml(case: &TestCase, xml: &mut String) {
    let _ = write!(
        xml,
        "    <testcase name=\"{}\" classname=\"{}\" time=\"{:.3}\">",
        escape(&case.name),
        escape(&case.classname),
        case.seconds
    );
    match &case.outcome {
        CaseOutcome::Passed => {}
        CaseOutcome::Failed { message, detail } => {
            let _ = write!(
                xml,
                "\n      <failure message=\"{}\" type=\"failure\">{}</failure>",
                escape(message),
                escape(detail)
            );
        }
        CaseOutcome::Error { message, detail } => {
            let _ = write!(
                xml,
                "\n      <error message=\"{}\" type=\"error\">{}</error>",
                escape(message),
                escape(detail)
            );
        }
        CaseOutcome::Skipped { message } => {
            let _ = write!(xml, "\n      <skipped message=\"{}\"/>", escape(message));
        }
    }
    if !case.output.is_empty() {
        let _ = write!(
            xml,
            "\n      <system-out>{}</system-out>",
            escape(&case.output)
        );
    }
    xml.push_str(
        if matches!(case.outcome, CaseOutcome::Passed) && case.output.is_empty() {
            "</testcase>\n"
        } else {
            "\n    </testcase>\n"
        },
    );
}

/// The trace of a property as text, one step a line.
fn trace_text(steps: &[oncecheck_model::check::TraceStep]) -> String {
    steps
        .iter()
        .map(|step| format!("{:>3}. {}", step.step, step.words))
        .collect::<Vec<_>>()
        .join("\n")
}

/// One property's test case: passed when its verdict is as expected, an error when a limit left
/// it undecided, failed otherwise; the verdict and its shortest trace as the evidence.
fn property_case(report: &CheckReport, property: &PropertyReport, classname: &str) -> TestCase {
    let trace = property
        .trace
        .as_deref()
        .map(trace_text)
        .unwrap_or_default();
    let verdict = format!(
        "{} {}: {} (expected {})",
        crate::report::verdict_words::kind_word(property.kind),
        property.name,
        property.verdict,
        property.expected
    );
    let evidence = if trace.is_empty() {
        verdict.clone()
    } else {
        format!("{verdict}\nshortest trace:\n{trace}")
    };
    let (outcome, output) = match report.stopped.as_ref() {
        _ if report.as_expected(property) => (CaseOutcome::Passed, evidence),
        Some(stop) if property.verdict == Verdict::Unknown => (
            CaseOutcome::Error {
                message: format!(
                    "undecided: the run stopped at {}",
                    crate::report::verdict_words::limit_words(stop)
                ),
                detail: verdict,
            },
            String::new(),
        ),
        _ => (
            CaseOutcome::Failed {
                message: format!(
                    "{} {}, expected {}",
                    property.name, property.verdict, property.expected
                ),
                detail: evidence,
            },
            String::new(),
        ),
    };
    TestCase {
        name: property.name.to_string(),
        classname: classname.to_string(),
        seconds: 0.0,
        outcome,
        output,
    }
}

/// `oncecheck check --junit`: a suite per report (named `model/variant`, its bounds as a
/// property), a case per property (named by the property, class `oncecheck.check.MODEL.VARIANT`).
pub fn check_document(reports: &[CheckReport]) -> String {
    let suites: Vec<TestSuite> = reports
        .iter()
        .map(|report| {
            let classname = format!("oncecheck.check.{}.{}", report.model, report.variant);
            TestSuite {
                name: format!("{}/{}", report.model, report.variant),
                seconds: report.seconds,
                properties: vec![
                    ("bounds".to_string(), report.bounds.to_string()),
                    (
                        "unique_states".to_string(),
                        report.unique_states.to_string(),
                    ),
                ],
                cases: report
                    .properties
                    .iter()
                    .map(|property| property_case(report, property, &classname))
                    .collect(),
            }
        })
        .collect();
    document("oncecheck check", &suites)
}

/// Makes sure `file` can be written before any work starts (bad input found in a second): its
/// directory exists and takes the file.
pub fn prepare_file(file: &Path) -> std::io::Result<()> {
    if let Some(parent) = file
        .parent()
        .filter(|parent| !parent.as_os_str().is_empty())
    {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(file, b"")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_follow_the_cases_and_text_is_escaped() {
        let case = |name: &str, outcome: CaseOutcome| TestCase {
            name: name.to_string(),
            classname: "c".to_string(),
            seconds: 0.5,
            outcome,
            output: String::new(),
        };
        let suite = TestSuite {
            name: "s<1>".to_string(),
            seconds: 1.0,
            properties: vec![],
            cases: vec![
                case("a", CaseOutcome::Passed),
                case(
                    "b \"&\"",
                    CaseOutcome::Failed {
                        message: "x < y".to_string(),
                        detail: "bell \u{7} gone".to_string(),
                    },
                ),
                case(
                    "c",
                    CaseOutcome::Skipped {
                        message: "n/a".to_string(),
                    },
                ),
            ],
        };
        let xml = document("run", &[suite]);
        assert!(xml.contains(
            "<testsuite name=\"s&lt;1&gt;\" tests=\"3\" failures=\"1\" errors=\"0\" skipped=\"1\""
        ));
        assert!(xml.contains("name=\"b &quot;&amp;&quot;\""));
        assert!(xml.contains("message=\"x &lt; y\" type=\"failure\">bell  gone</failure>"));
        assert!(!xml.contains('\u{7}'));
    }
}
