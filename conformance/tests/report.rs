//! What a reviewer sees: every counterexample of every model as a sequence diagram whose every
//! text fits its box and the canvas, and the HTML report opened in a real headless browser
//! (Debian's chromium; the test command installs it) with its counterexample and diagram in the
//! page. One `oncecheck check --diagrams --html` run over every model feeds both tests.

use oncecheck_conformance::report::diagram::text_width;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// Where the test command's own check step wrote `oncecheck check --diagrams DIR/diagrams --html
/// DIR/html` (scripts/test, exit 0 checked there): read instead of running the whole check again.
const CHECK_OUTPUTS_ENV: &str = "ONCECHECK_CHECK_OUTPUTS";

/// Runs `oncecheck check --diagrams D --html H` over every model once; answers (D, H). With
/// ONCECHECK_CHECK_OUTPUTS set, the outputs of that run of the same command.
fn outputs() -> &'static (PathBuf, PathBuf) {
    static OUTPUTS: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    OUTPUTS.get_or_init(|| {
        if let Some(root) = std::env::var_os(CHECK_OUTPUTS_ENV) {
            let root = PathBuf::from(root);
            let (diagrams, html) = (root.join("diagrams"), root.join("html"));
            assert!(
                html.join("index.html").is_file(),
                "{CHECK_OUTPUTS_ENV}={} holds no HTML report",
                root.display()
            );
            return (diagrams, html);
        }
        let root = std::env::temp_dir().join(format!("oncecheck-report-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let (diagrams, html) = (root.join("diagrams"), root.join("html"));
        let output = Command::new(env!("CARGO_BIN_EXE_oncecheck"))
            .args([
                "check",
                "--diagrams",
                diagrams.to_str().unwrap(),
                "--html",
                html.to_str().unwrap(),
            ])
            .output()
            .expect("oncecheck runs");
        assert_eq!(
            output.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        (diagrams, html)
    })
}

fn unescape(text: &str) -> String {
    text.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&amp;", "&")
}

fn attribute(tag: &str, name: &str) -> Option<f64> {
    let start = tag.find(&format!(" {name}=\""))? + name.len() + 3;
    let end = start + tag[start..].find('"')?;
    tag[start..end].parse().ok()
}

/// A `<text>`: x, y, font size, text.
type Text = (f64, f64, f64, String);
/// A `<rect>`: x, y, width, height.
type Rect = (f64, f64, f64, f64);

/// Every `<text>` and `<rect>` of an SVG document.
fn texts_and_rects(svg: &str) -> (Vec<Text>, Vec<Rect>) {
    let mut texts = Vec::new();
    for piece in svg.split("<text").skip(1) {
        let tag_end = piece.find('>').unwrap();
        let tag = &piece[..tag_end];
        let content = &piece[tag_end + 1..piece.find("</text>").unwrap()];
        let font = attribute(tag, "font-size").unwrap_or(12.0);
        texts.push((
            attribute(tag, "x").unwrap(),
            attribute(tag, "y").unwrap(),
            font,
            unescape(content),
        ));
    }
    let mut rects = Vec::new();
    for piece in svg.split("<rect").skip(1) {
        let tag = &piece[..piece.find('>').unwrap()];
        let x = attribute(tag, "x").unwrap_or(0.0);
        let y = attribute(tag, "y").unwrap_or(0.0);
        rects.push((
            x,
            y,
            attribute(tag, "width").unwrap(),
            attribute(tag, "height").unwrap(),
        ));
    }
    (texts, rects)
}

fn svg_size(svg: &str) -> (f64, f64) {
    let tag = &svg[..svg.find('>').unwrap()];
    (
        attribute(tag, "width").unwrap(),
        attribute(tag, "height").unwrap(),
    )
}

#[test]
fn every_counterexample_diagram_keeps_every_text_inside_its_box_and_the_canvas() {
    let (diagrams, _) = outputs();
    let mut files: Vec<PathBuf> = std::fs::read_dir(diagrams)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .collect();
    files.sort();
    // Every violated `always` of every model at the CI bounds: relay 3+2+3, idempotency and token
    // the rest. A model that stops finding a bug changes this count.
    assert!(files.len() >= 17, "{} diagrams: {files:?}", files.len());
    for file in &files {
        let svg = std::fs::read_to_string(file).unwrap();
        let (width, height) = svg_size(&svg);
        let (texts, rects) = texts_and_rects(&svg);
        assert!(texts.len() >= 4, "{}", file.display());
        for (x, y, font, text) in &texts {
            let right = x + text_width(text, *font);
            assert!(
                *x >= 0.0 && right <= width,
                "{}: `{text}` runs from {x} to {right}, the canvas is {width} wide",
                file.display()
            );
            assert!(
                *y > 0.0 && *y <= height,
                "{}: `{text}` at y {y} is outside the canvas (height {height})",
                file.display()
            );
            // A text that sits in a lane header box fits inside it.
            if let Some((box_x, _, box_width, _)) =
                rects.iter().find(|(box_x, box_y, box_width, box_height)| {
                    *x >= *box_x
                        && *x <= box_x + box_width
                        && *y >= *box_y
                        && *y <= box_y + box_height
                        && *box_height < 30.0
                })
            {
                assert!(
                    right <= box_x + box_width,
                    "{}: `{text}` overflows its header box",
                    file.display()
                );
            }
        }
        // A safety counterexample marks its breaking step; a liveness lasso its cycle instead.
        let lasso = svg.contains("class=\"cycle\"");
        assert!(
            lasso || (svg.contains("class=\"breaking\"") && svg.contains(" here</text>")),
            "{}: the breaking step is marked",
            file.display()
        );
        if lasso {
            assert!(svg.contains("^ cycle: step"), "{}", file.display());
            assert!(!svg.contains("class=\"breaking\""), "{}", file.display());
        }
    }
    // The relay's R10 lassos (add-era, counter-only, mixed) are among the diagrams.
    assert_eq!(
        files
            .iter()
            .filter(|file| file.to_string_lossy().contains("r10-pull-progress"))
            .count(),
        3
    );
    // Client steps sit on the client's lifeline: no idempotency step starting with `C1:` is a
    // server dot (a dot on the last lane) — checked in the layout test; here the lane exists.
    let idempotency = files
        .iter()
        .find(|file| file.to_string_lossy().contains("idempotency-pre-fix"))
        .expect("an idempotency diagram");
    assert!(std::fs::read_to_string(idempotency)
        .unwrap()
        .contains(">C1</text>"));
}

fn chromium(arguments: &[&str], profile: &Path) -> std::process::Output {
    Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            &format!("--user-data-dir={}", profile.display()),
        ])
        .args(arguments)
        .output()
        .expect("chromium runs: the test command installs Debian's chromium (apt-get install -y chromium)")
}

#[test]
fn the_html_report_opens_in_headless_chromium_with_its_counterexample_and_diagram() {
    let (_, html) = outputs();
    let page = html.join("relay-add-era.html");
    assert!(html.join("index.html").exists());
    let url = format!("file://{}", page.display());
    let profile = html.join("chromium-profile");
    let screenshot = html.join("relay-add-era.png");
    let output = chromium(
        &[
            &format!("--screenshot={}", screenshot.display()),
            "--window-size=1400,2000",
            &url,
        ],
        &profile,
    );
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let png = std::fs::read(&screenshot).expect("the screenshot is written");
    assert!(
        png.starts_with(b"\x89PNG") && png.len() > 20_000,
        "a real screenshot, {} bytes",
        png.len()
    );
    println!("screenshot: {}", screenshot.display());

    let output = chromium(&["--dump-dom", &url], &profile);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let dom = String::from_utf8(output.stdout).unwrap();
    // The verdict against its expectation, the seed's shortest counterexample in protocol words
    // with its changed roles, the breaking step marked, its diagram, and the coverage pictures.
    assert!(
        dom.contains("every verdict equals its expectation"),
        "verdict"
    );
    assert!(
        dom.contains("<section class=\"counterexample\" id=\"r1-no-skip\">"),
        "the R1 counterexample"
    );
    assert!(
        dom.contains(
            "W1 (ADD-era) sends TransactWriteItems{claim a, put op 1 = a} -&gt; committed"
        ),
        "its breaking step in words"
    );
    assert!(
        dom.contains("<tr class=\"breaking\">") && dom.contains("R1 no-skip violated here"),
        "the breaking step marked"
    );
    assert!(
        dom.contains("<b>P1.cursor</b>"),
        "only changed roles are listed, by role"
    );
    assert!(
        dom.contains("<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"sequence\""),
        "the sequence diagram"
    );
    assert!(
        dom.contains("class=\"actions\"") && dom.contains("class=\"depths\""),
        "the coverage pictures"
    );
    assert!(
        dom.contains(">WriterAddsToCounter</text>"),
        "action counts by action"
    );
    // Every action kind, 0 included (add-era never truncates), and the two charts side by side
    // in a flex box, not baseline-aligned inline pictures.
    assert!(
        dom.contains(">TruncatorDeletes</text>") && dom.contains("never fired: "),
        "zero-coverage actions listed"
    );
    assert!(dom.contains("<div class=\"charts\">"), "the charts' box");
    // The changed roles speak the step text's words: claim letters, ops by seq, F1, phases.
    for words in [
        "<b>table: claim a</b>",
        "claimed seq 1",
        "<b>W1.phase</b>",
        "holds seq 1 from UpdateItem ADD",
        "<b>F1.watermark</b>",
    ] {
        assert!(dom.contains(words), "`{words}` in the changes");
    }
    for leak in [
        "Claim(0)",
        "Claim { seq",
        "folders[0]",
        "Allocated {",
        "Sent { round",
    ] {
        assert!(!dom.contains(leak), "`{leak}` is Rust Debug text");
    }
}

#[test]
fn the_html_index_says_what_was_checked_and_what_green_means_for_each_variant() {
    let (_, html) = outputs();
    let url = format!("file://{}", html.join("index.html").display());
    let output = chromium(&["--dump-dom", &url], &html.join("chromium-profile-index"));
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let dom = String::from_utf8(output.stdout).unwrap();
    let field = |id: &str| -> String {
        let start = dom
            .find(&format!("id=\"{id}\">"))
            .unwrap_or_else(|| panic!("#{id} in the index"))
            + id.len()
            + 6;
        let end = start + dom[start..].find('<').unwrap();
        dom[start..end].to_string()
    };
    assert_eq!(field("result"), "every verdict equals its expectation");
    let commit = field("commit");
    assert!(
        commit.len() >= 12 && commit != "unknown",
        "the commit the binary was built from: {commit}"
    );
    let started = field("started");
    assert!(
        started.len() == "2025-01-01 00:00:00 UTC".len() && started.ends_with(" UTC"),
        "{started}"
    );
    assert!(field("command").starts_with("oncecheck check --diagrams "));
    assert!(
        field("time").ends_with("s for 13 variants"),
        "{}",
        field("time")
    );
    assert!(dom.contains("What green means"), "the legend");
    // Every variant says what it is and what it must show.
    for (variant, role, must_show) in [
        ("relay/add-era", "bug", "violated: R1, R5"),
        (
            "relay/fixed",
            "design",
            "holds: R1, R2, R3, R4, R5, R6, R7, R8, R9",
        ),
        ("idempotency/renewed", "design", "holds: M1"),
        ("idempotency/atomic", "mode", "holds: M1"),
        ("token/tokenless", "bug", "violated: T1"),
    ] {
        let row_start = dom
            .find(&format!(">{variant}</a>"))
            .unwrap_or_else(|| panic!("{variant} row"));
        let row = &dom[row_start..row_start + dom[row_start..].find("</tr>").unwrap()];
        assert!(
            row.contains(&format!("<td>{role}</td>")),
            "{variant}: {row}"
        );
        assert!(row.contains(must_show), "{variant}: {row}");
        assert!(row.contains("class=\"means\""), "{variant}: {row}");
    }
}
