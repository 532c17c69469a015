//! State-space growth of the relay model: unique states first reached at each depth, one line
//! per variant, at the CI bounds and with one lost response for every variant
//! (`lost_responses_max=1`, which `fixed`'s CI bounds already have). Prints the numbers and
//! writes one SVG picture per bound to `bench-out/` (gitignored). A benchmark, not a test: it
//! asserts nothing about time or size.
//!
//! Run: `cargo bench -p oncecheck-model --bench growth` (`ONCECHECK_BENCH_LARGE=0` skips the
//! larger bound, which takes minutes).

use oncecheck_model::check::{self, CheckOptions, ModelSpec};
use oncecheck_model::relay::RelayModel;
use std::fmt::Write as _;
use std::path::PathBuf;

const COLOURS: &[&str] = &["#1b6ac9", "#d1495b", "#2e8540", "#8f5bb5", "#e08a1e"];

/// Unique states per depth of each variant at the given bound overrides.
fn growth(overrides: &[(&str, u32)]) -> Vec<(&'static str, Vec<usize>)> {
    let overrides: Vec<(String, u32)> = overrides
        .iter()
        .map(|(key, value)| (key.to_string(), *value))
        .collect();
    let mut lines = Vec::new();
    for variant in RelayModel::VARIANTS {
        let bounds = RelayModel::resolve_bounds(variant, &overrides).expect("valid bounds");
        let model = RelayModel::build(variant, &bounds).expect("a model");
        let options = CheckOptions {
            threads: 2,
            ..CheckOptions::default()
        };
        let report = check::run(model, &options, &mut |_| {});
        println!(
            "relay/{variant:<13} [{}] {} unique states, depth {}, {:.2}s{}",
            report.bounds,
            report.unique_states,
            report.max_depth,
            report.seconds,
            if report.matches_expectations() {
                ""
            } else {
                ", verdicts MISMATCH"
            },
        );
        println!("  states per depth: {:?}", report.states_per_depth);
        lines.push((*variant, report.states_per_depth));
    }
    lines
}

/// A line chart: depth on x, unique states on a log10 y axis (the variants differ by orders of
/// magnitude), one polyline and legend entry per variant.
fn svg(title: &str, lines: &[(&str, Vec<usize>)]) -> String {
    let (width, height, left, right, top, bottom) = (760.0, 440.0, 70.0, 170.0, 40.0, 50.0);
    let depth_max = lines
        .iter()
        .map(|(_, counts)| counts.len())
        .max()
        .unwrap_or(1)
        .saturating_sub(1)
        .max(1) as f64;
    let count_max = lines
        .iter()
        .flat_map(|(_, counts)| counts.iter())
        .copied()
        .max()
        .unwrap_or(1)
        .max(10) as f64;
    let decades = count_max.log10().ceil().max(1.0);
    let plot_width = width - left - right;
    let plot_height = height - top - bottom;
    let x = |depth: f64| left + depth / depth_max * plot_width;
    let y = |count: f64| top + plot_height - count.max(1.0).log10() / decades * plot_height;
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(out, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        out,
        r#"<text x="{left}" y="22" font-size="14" font-weight="bold">{title}</text>"#
    );
    for decade in 0..=decades as u32 {
        let at = y(10f64.powi(decade as i32));
        let _ = writeln!(
            out,
            r##"<line x1="{left}" y1="{at:.1}" x2="{:.1}" y2="{at:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" text-anchor="end">1e{decade}</text>"##,
            left + plot_width,
            left - 6.0,
            at + 4.0
        );
    }
    let ticks = 10.0_f64.min(depth_max);
    for tick in 0..=ticks as u32 {
        let depth = (f64::from(tick) * depth_max / ticks).round();
        let _ = writeln!(
            out,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{depth}</text>"#,
            x(depth),
            top + plot_height + 18.0
        );
    }
    let _ = writeln!(
        out,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">depth (steps from an initial state)</text>"#,
        left + plot_width / 2.0,
        height - 10.0
    );
    let _ = writeln!(
        out,
        r#"<text transform="translate(16 {:.1}) rotate(-90)" text-anchor="middle">unique states first reached</text>"#,
        top + plot_height / 2.0
    );
    for (index, (variant, counts)) in lines.iter().enumerate() {
        let colour = COLOURS[index % COLOURS.len()];
        let points: Vec<String> = counts
            .iter()
            .enumerate()
            .map(|(depth, count)| format!("{:.1},{:.1}", x(depth as f64), y(*count as f64)))
            .collect();
        let _ = writeln!(
            out,
            r#"<polyline fill="none" stroke="{colour}" stroke-width="2" points="{}"/>"#,
            points.join(" ")
        );
        let legend_y = top + 20.0 * index as f64;
        let total: usize = counts.iter().sum();
        let _ = writeln!(
            out,
            r#"<line x1="{:.1}" y1="{legend_y:.1}" x2="{:.1}" y2="{legend_y:.1}" stroke="{colour}" stroke-width="3"/><text x="{:.1}" y="{:.1}">{variant} ({total})</text>"#,
            width - right + 12.0,
            width - right + 32.0,
            width - right + 38.0,
            legend_y + 4.0
        );
    }
    out.push_str("</svg>\n");
    out
}

fn write(name: &str, title: &str, lines: &[(&str, Vec<usize>)]) {
    let directory = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../bench-out");
    std::fs::create_dir_all(&directory).expect("bench-out/ can be created");
    let file = directory.join(name);
    std::fs::write(&file, svg(title, lines)).expect("the picture can be written");
    println!("wrote {}", file.display());
}

fn main() {
    let ci = growth(&[]);
    write(
        "relay-growth-ci.svg",
        "relay: unique states per depth, CI bounds",
        &ci,
    );
    if std::env::var("ONCECHECK_BENCH_LARGE").as_deref() != Ok("0") {
        let larger = growth(&[("lost_responses_max", 1)]);
        write(
            "relay-growth-lost-responses-1.svg",
            "relay: unique states per depth, lost_responses_max=1",
            &larger,
        );
    }
}
