//! `oncecheck check --html DIR`: a static HTML report a reviewer opens in a browser, one page
//! per (model, variant) and an `index.html` linking them.
//!
//! A page shows the verdict of every property against its expectation; for every violation
//! (and every verdict that differs from its expectation) the shortest trace as protocol words
//! with only the roles that changed at each step (as TLC's difftrace does), and its sequence
//! diagram with the breaking step marked — for a liveness lasso, its cycle (the rows that repeat
//! forever) instead; and the coverage: how often each action fired and
//! how many states each BFS depth holds, as pictures.
//!
//! Invariants: every page is self-contained (inline CSS and SVG, no script, no network); all
//! text is escaped; a page is written only from a finished `CheckReport`.

use super::escape;
use crate::report::diagram::{sequence_svg, text_width};
use oncecheck_model::check::{CheckReport, PropertyReport, Verdict};
use oncecheck_model::view::Change;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// One step of a shown trace: its protocol words and the roles it changed. Step 0 is the
/// initial state, whose "changes" are every role (from nothing).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepView {
    pub step: usize,
    pub words: String,
    pub changes: Vec<Change>,
}

/// How much of the model a check exercised.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Coverage {
    /// Unique states first reached at each BFS depth (index = depth).
    pub states_per_depth: Vec<u64>,
    /// Per action name: how many transitions of that action the search explored.
    pub action_counts: BTreeMap<String, u64>,
}

/// Everything one page needs beyond the `CheckReport`.
#[derive(Debug, Clone, Default)]
pub struct PageDetail {
    /// Per property name: its shortest trace, step by step (only for the traces the page shows).
    pub traces: BTreeMap<String, Vec<StepView>>,
    pub coverage: Option<Coverage>,
}

/// The file name of a (model, variant) page.
pub fn page_name(model: &str, variant: &str) -> String {
    format!("{model}-{variant}.html")
}

fn anchor(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect()
}

/// The traces a page (and `--diagrams`) shows: every violation, and every verdict that differs
/// from its expectation and has a trace.
pub fn shows_trace(verdict: Verdict, expected: Verdict) -> bool {
    verdict == Verdict::Violated || verdict != expected
}

/// How a trace's diagram marks where the property breaks: the last step of a safety
/// counterexample, the last step of a liveness run that stops there, or nothing but the cycle
/// of a lasso (what never ends is the cycle, not one step). Answers (breaking, lasso start).
pub fn breaking_of(property: &PropertyReport) -> (Option<String>, Option<usize>) {
    match (property.kind.is_liveness(), property.lasso_start) {
        (true, Some(start)) => (None, Some(start)),
        (true, None) => (
            Some(format!(
                "{} {}: the run stops",
                property.name, property.verdict
            )),
            None,
        ),
        (false, _) => (
            Some(format!("{} {}", property.name, property.verdict)),
            None,
        ),
    }
}

const STYLE: &str = "
body { font-family: system-ui, sans-serif; margin: 24px; color: #222; max-width: 1400px; }
h1 { font-size: 22px; } h2 { font-size: 18px; margin-top: 32px; } h3 { font-size: 15px; }
table { border-collapse: collapse; margin: 8px 0; }
td, th { border: 1px solid #ccd; padding: 3px 8px; text-align: left; vertical-align: top; font-size: 13px; }
th { background: #eef; }
.ok { color: #185; font-weight: bold; } .fail { color: #b00; font-weight: bold; }
.words, .change, code { font-family: 'DejaVu Sans Mono', monospace; font-size: 12px; }
.change { margin: 1px 0; } .before { color: #888; } .after { color: #124; }
tr.breaking td { background: #fde2e2; }
tr.cycle td { background: #e2ecfd; } tr.cycle-start td { background: #c8dafa; }
.diagram { overflow-x: auto; border: 1px solid #ccd; padding: 4px; margin: 8px 0; }
.summary { font-size: 14px; }
.charts { display: flex; flex-wrap: wrap; align-items: flex-start; gap: 24px; }
.charts svg { display: block; }
dl.run { display: grid; grid-template-columns: max-content auto; gap: 2px 12px; font-size: 13px; }
dl.run dt { font-weight: bold; } dl.run dd { margin: 0; }
.means { max-width: 520px; }
";

fn bar_chart(title: &str, bars: &[(String, u64)], class: &str) -> String {
    let label_px = bars
        .iter()
        .map(|(label, _)| text_width(label, 12.0))
        .fold(40.0, f64::max)
        + 12.0;
    let count_px = bars
        .iter()
        .map(|(_, count)| text_width(&count.to_string(), 12.0))
        .fold(0.0, f64::max)
        + 12.0;
    let bar_max_px = 360.0;
    let row_px = 18.0;
    let largest = bars
        .iter()
        .map(|(_, count)| *count)
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    let width = (label_px + bar_max_px + count_px + 8.0).ceil();
    let height = (bars.len() as f64 * row_px + 30.0).ceil();
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"{class}\" width=\"{width}\" height=\"{height}\" font-family=\"DejaVu Sans Mono, monospace\" font-size=\"12\">\n<text x=\"4\" y=\"14\" font-weight=\"bold\">{}</text>\n",
        escape(title)
    );
    for (index, (label, count)) in bars.iter().enumerate() {
        let y = 24.0 + index as f64 * row_px;
        // A count of 0 draws no bar and a red 0: what never happened is what a reviewer wants.
        let bar = match count {
            0 => 0.0,
            count => (*count as f64 / largest * bar_max_px).max(1.0),
        };
        let fill = if *count == 0 { " fill=\"#b00\"" } else { "" };
        let _ = writeln!(
            svg,
            "<text x=\"4\" y=\"{}\"{fill}>{}</text><rect x=\"{label_px}\" y=\"{}\" width=\"{bar:.1}\" height=\"{}\" fill=\"#68a\"/><text x=\"{:.1}\" y=\"{}\"{fill}>{count}</text>",
            y + 12.0,
            escape(label),
            y + 2.0,
            row_px - 4.0,
            label_px + bar + 6.0,
            y + 12.0
        );
    }
    svg.push_str("</svg>\n");
    svg
}

fn changes_html(changes: &[Change]) -> String {
    let mut html = String::new();
    for (role, before, after) in changes {
        let before = before
            .as_deref()
            .map(|text| format!("<span class=\"before\">{}</span> &rarr; ", escape(text)))
            .unwrap_or_default();
        let after = after
            .as_deref()
            .map(escape)
            .unwrap_or_else(|| "(gone)".to_string());
        let _ = write!(
            html,
            "<div class=\"change\"><b>{}</b>: {before}<span class=\"after\">{after}</span></div>",
            escape(role)
        );
    }
    html
}

/// The HTML page of one report.
pub fn page(report: &CheckReport, detail: &PageDetail) -> String {
    let title = format!("{}/{}", report.model, report.variant);
    let matches = report.matches_expectations();
    let outcome = crate::check::model_facts::outcome_of(report);
    let mut html = String::new();
    let _ = write!(
        html,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>oncecheck {}</title><style>{STYLE}</style></head><body>\n",
        escape(&title)
    );
    let _ = writeln!(
        html,
        "<p><a href=\"index.html\">all models</a></p><h1>{}</h1>",
        escape(&title)
    );
    let _ = writeln!(
        html,
        "<p class=\"summary\"><span class=\"{}\" id=\"verdict\">{}</span> &mdash; bounds <code>{}</code>; {} unique states ({} generated), depth {}, {:.2}s, {}</p>",
        if matches { "ok" } else { "fail" },
        escape(&outcome.explanation().map(|text| format!("{}: {text}", outcome.status())).unwrap_or_else(|| "every verdict equals its expectation".to_string())),
        escape(&report.bounds.to_string()),
        report.unique_states,
        report.states,
        report.max_depth,
        report.seconds,
        if report.complete { "complete" } else { "INCOMPLETE" }
    );
    html.push_str("<h2>Properties</h2>\n<table id=\"properties\"><tr><th>ID</th><th>kind</th><th>property</th><th>verdict</th><th>expected</th><th></th></tr>\n");
    for property in &report.properties {
        let kind = crate::report::verdict_words::kind_word(property.kind);
        let name = if detail.traces.contains_key(property.name) {
            format!(
                "<a href=\"#{}\">{}</a>",
                anchor(property.name),
                escape(property.name)
            )
        } else {
            escape(property.name)
        };
        let _ = writeln!(
            html,
            "<tr><td>{}</td><td>{kind}</td><td>{name}</td><td>{}</td><td>{}</td><td class=\"{}\">{}</td></tr>",
            property.id,
            property.verdict,
            property.expected,
            if report.as_expected(property) { "ok" } else { "fail" },
            match outcome.mark(report, property) {
                "ok" => "as expected",
                "?" => "undecided: the run stopped",
                "DIFF" => "differs at these bounds",
                _ => "MISMATCH",
            }
        );
    }
    html.push_str("</table>\n");
    for property in &report.properties {
        if let (Some(steps), Some(trace)) =
            (detail.traces.get(property.name), property.trace.as_ref())
        {
            push_counterexample(&mut html, report, property, steps, trace);
        }
    }
    push_coverage(&mut html, report, detail.coverage.as_ref());
    html.push_str("</body></html>\n");
    html
}

/// One shown trace's section: its shape in words, its steps with only the roles each changed,
/// and its sequence diagram, the breaking step or a lasso's cycle marked in both.
fn push_counterexample(
    html: &mut String,
    report: &CheckReport,
    property: &PropertyReport,
    steps: &[StepView],
    trace: &[oncecheck_model::check::TraceStep],
) {
    let (breaking, lasso_start) = breaking_of(property);
    let _ = write!(
        html,
        "<section class=\"counterexample\" id=\"{}\"><h2>{} &mdash; {} (expected {})</h2>\n<p>{}; each step shows only the roles it changed.</p>\n<table class=\"steps\"><tr><th>#</th><th>step</th><th>changed</th></tr>\n",
        anchor(property.name),
        escape(property.name),
        property.verdict,
        property.expected,
        trace_shape(property, trace.len(), lasso_start),
    );
    for view in steps {
        push_step_row(html, view, trace.len(), breaking.as_deref(), lasso_start);
    }
    html.push_str("</table>\n<h3>Sequence diagram</h3>\n<div class=\"diagram\">\n");
    let title = format!(
        "{}/{}: {} ({})",
        report.model, report.variant, property.name, property.verdict
    );
    html.push_str(&sequence_svg(
        &title,
        trace,
        breaking.as_deref(),
        lasso_start,
    ));
    html.push_str("</div></section>\n");
}

/// What kind of trace a section shows, in words: a lasso's cycle and a liveness run that stops
/// read differently from a safety counterexample.
fn trace_shape(property: &PropertyReport, steps: usize, lasso_start: Option<usize>) -> String {
    match lasso_start {
        Some(start) => format!(
            "The shortest lasso: {start} steps, then a cycle of {} steps repeated forever (marked), on which the goal never holds",
            steps - start
        ),
        None if property.kind.is_liveness() => format!(
            "The shortest run that stops short of the goal, {steps} steps: after it no step of a family the property assumes fair is enabled"
        ),
        None => format!("The shortest trace, {steps} steps"),
    }
}

/// One step's row of a trace table, preceded by the cycle's heading where a lasso's cycle
/// begins; the breaking step's row says what breaks there.
fn push_step_row(
    html: &mut String,
    view: &StepView,
    steps: usize,
    breaking: Option<&str>,
    lasso_start: Option<usize>,
) {
    let last = view.step == steps && view.step > 0 && breaking.is_some();
    let in_cycle = lasso_start.is_some_and(|start| view.step > start);
    if lasso_start.is_some_and(|start| view.step == start + 1) {
        let back_to = match view.step - 1 {
            0 => "the initial state".to_string(),
            after => format!("the state after step {after}"),
        };
        let _ = writeln!(
            html,
            "<tr class=\"cycle-start\"><td></td><td colspan=\"2\"><b>cycle:</b> the steps below repeat forever; the last returns to {back_to}</td></tr>"
        );
    }
    let words = if view.step == 0 {
        "initial state".to_string()
    } else {
        escape(&view.words)
    };
    let mark = match breaking {
        Some(breaking) if last => {
            format!("<div class=\"fail\">{} here</div>", escape(breaking))
        }
        _ => String::new(),
    };
    let class = if last {
        " class=\"breaking\""
    } else if in_cycle {
        " class=\"cycle\""
    } else {
        ""
    };
    let _ = writeln!(
        html,
        "<tr{class}><td>{}</td><td class=\"words\">{words}{mark}</td><td>{}</td></tr>",
        view.step,
        changes_html(&view.changes)
    );
}

/// The coverage section: what never fired named first (what a reviewer looks for), then the
/// transitions per action and the states per depth as bar charts.
fn push_coverage(html: &mut String, report: &CheckReport, coverage: Option<&Coverage>) {
    html.push_str("<h2 id=\"coverage\">Coverage</h2>\n");
    let Some(coverage) = coverage else {
        html.push_str("<p>No coverage recorded for this run.</p>\n");
        return;
    };
    // Every action kind of the model, 0 for those that never fired.
    let actions: Vec<(String, u64)> =
        crate::check::action_names::with_zeros(report.model, &coverage.action_counts);
    let depths: Vec<(String, u64)> = coverage
        .states_per_depth
        .iter()
        .enumerate()
        .map(|(depth, count)| (format!("depth {depth}"), *count))
        .collect();
    let never: Vec<&String> = actions
        .iter()
        .filter(|(_, count)| *count == 0)
        .map(|(name, _)| name)
        .collect();
    if !never.is_empty() {
        let names: Vec<String> = never.iter().map(|name| escape(name)).collect();
        let _ = writeln!(
            html,
            "<p class=\"fail\">never fired: {}</p>",
            names.join(", ")
        );
    }
    html.push_str("<div class=\"charts\">\n");
    html.push_str(&bar_chart(
        "transitions explored per action",
        &actions,
        "actions",
    ));
    html.push_str(&bar_chart(
        "unique states first reached per BFS depth",
        &depths,
        "depths",
    ));
    html.push_str("</div>\n");
}

/// What a variant must show to be green, from its expectations: the requirements a bug variant
/// must be seen violating, or that every `always` of a design holds.
fn must_show(report: &CheckReport) -> String {
    let mut violated: Vec<&str> = Vec::new();
    for property in &report.properties {
        if property.expected == Verdict::Violated && !violated.contains(&property.id) {
            violated.push(property.id);
        }
    }
    if violated.is_empty() {
        let mut ids: Vec<&str> = Vec::new();
        for property in &report.properties {
            if property.expected == Verdict::Holds && !ids.contains(&property.id) {
                ids.push(property.id);
            }
        }
        format!("holds: {}", ids.join(", "))
    } else {
        format!("violated: {}", violated.join(", "))
    }
}

/// The index page: what the run was (commit, date, command, time), what green means, and one
/// row per (model, variant): what the variant is (the design it must prove or the bug it must
/// reproduce), what it must show, its bounds, its result against expectations, states and time.
pub fn index(reports: &[&CheckReport], run: &crate::report::run_info::RunInfo) -> String {
    let all_match = reports.iter().all(|report| report.matches_expectations());
    let mut html = format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>oncecheck report</title><style>{STYLE}</style></head><body>\n<h1>oncecheck check</h1>\n"
    );
    let _ = writeln!(
        html,
        "<dl class=\"run\" id=\"run\"><dt>result</dt><dd class=\"{}\" id=\"result\">{}</dd><dt>commit</dt><dd><code id=\"commit\">{}</code></dd><dt>started</dt><dd id=\"started\">{}</dd><dt>command</dt><dd><code id=\"command\">{}</code></dd><dt>time</dt><dd id=\"time\">{:.1}s for {} variants</dd></dl>",
        if all_match { "ok" } else { "fail" },
        if all_match {
            "every verdict equals its expectation".to_string()
        } else {
            format!(
                "{} of {} variants do not meet their expectations",
                reports.iter().filter(|report| !report.matches_expectations()).count(),
                reports.len()
            )
        },
        escape(run.commit),
        escape(&run.started_utc),
        escape(&run.command),
        run.elapsed_secs(),
        reports.len()
    );
    html.push_str("<p class=\"summary\" id=\"green-means\">What green means: a <b>design</b> variant is green when every <code>always</code> holds over every reachable state at its bounds; a <b>bug</b> variant is green when the model still finds its bug: the requirements listed as violated must be violated (a buggy variant that passes is a failure: the model lost the power to find that bug). Every <code>sometimes</code> must be reached or not as its expectation says, so a property cannot hold by never being exercised.</p>\n");
    html.push_str("<table id=\"runs\"><tr><th>model/variant</th><th>role</th><th>what it is</th><th>must show</th><th>bounds</th><th>result</th><th>unique states</th><th>time</th></tr>\n");
    for report in reports {
        let matches = report.matches_expectations();
        let outcome = crate::check::model_facts::outcome_of(report);
        let note = crate::check::variants::note(report.model, report.variant);
        let _ = writeln!(
            html,
            "<tr><td><a href=\"{}\">{}/{}</a></td><td>{}</td><td class=\"means\">{}</td><td>{}</td><td><code>{}</code></td><td class=\"{}\">{}</td><td>{}</td><td>{:.2}s</td></tr>",
            page_name(report.model, report.variant),
            report.model,
            report.variant,
            note.map(|note| note.role.word()).unwrap_or("?"),
            escape(note.map(|note| note.means).unwrap_or("(no description registered)")),
            escape(&must_show(report)),
            escape(&report.bounds.to_string()),
            if matches { "ok" } else { "fail" },
            if matches { "as expected" } else { outcome.status() },
            report.unique_states,
            report.seconds
        );
    }
    html.push_str("</table></body></html>\n");
    html
}

/// Writes one page; answers its path.
pub fn write_page(
    directory: &Path,
    report: &CheckReport,
    detail: &PageDetail,
) -> std::io::Result<PathBuf> {
    let file = directory.join(page_name(report.model, report.variant));
    std::fs::write(&file, page(report, detail))?;
    Ok(file)
}

/// Writes `index.html` over every report written so far.
pub fn write_index(
    directory: &Path,
    reports: &[&CheckReport],
    run: &crate::report::run_info::RunInfo,
) -> std::io::Result<PathBuf> {
    let file = directory.join("index.html");
    std::fs::write(&file, index(reports, run))?;
    Ok(file)
}
