//! The citation check: every requirement of `specs/` is cited where it is met, in the spec's own
//! words, and nothing in the repository points at a document the repository does not hold.
//!
//! A citation is a line `//= specs/<file>.md#<ID>` followed by one or more `//# <text>` lines
//! (duvet style). The check walks the tracked files (`git ls-files`) and reports a gap when
//! - a quote is not, whitespace-normalised, verbatim text of its requirement's section;
//! - a citation names a spec file or a requirement ID that does not exist, or has no `//#` line;
//! - a requirement ID (a `## ID` / `### ID` heading such as R1, M1, T1) lacks a model citation
//!   (a non-test file under `model/`), an implementation citation (a non-test file under
//!   `impl/`) or a test citation (a file in a `tests` directory, a `tests.rs`, or below a
//!   `#[cfg(test)]` line);
//! - a tracked file names a design document or source seed that is not in the repository.
//!
//! Gaps that belong to work in progress elsewhere are listed, one per line, in
//! `conformance/tests/citations-known-gaps.txt`. The test fails on any gap not in that list and
//! on any listed gap that no longer occurs, so the list can only shrink; empty, the check is
//! strict. Gap lines carry no line numbers (they would churn); the failure output adds them.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The requirement IDs that must be headings of the specs, read from the specs and the models
/// rather than kept by hand (a new requirement is picked up as soon as a spec or a property names
/// it), from two sources independent of the heading parser, so a parser that found no headings
/// fails instead of passing vacuously:
/// - every ID a spec's text mentions anywhere (its verdict tables, its prose) with the letter
///   of that spec's requirements (`R` in relay-append.md: `W1` and `P1` are actors, not IDs);
/// - every ID a model's property carries, in any variant.
fn required_ids(specs: &BTreeMap<String, String>) -> BTreeSet<String> {
    let mut required = BTreeSet::new();
    for text in specs.values() {
        let letters: BTreeSet<char> = requirement_sections(text)
            .keys()
            .filter_map(|id| id.chars().next())
            .collect();
        let words = text.split(|character: char| !character.is_ascii_alphanumeric());
        for word in words {
            let mut characters = word.chars();
            let Some(letter) = characters.next() else {
                continue;
            };
            let digits: String = characters.collect();
            if letters.contains(&letter)
                && !digits.is_empty()
                && digits.chars().all(|character| character.is_ascii_digit())
                && !digits.starts_with('0')
            {
                required.insert(word.to_string());
            }
        }
    }
    for model in oncecheck_conformance::check::models::MODEL_NAMES {
        for variant in oncecheck_conformance::check::model_facts::variants(model) {
            for expectation in
                oncecheck_conformance::check::model_facts::expectations(model, variant)
                    .expect("a registered variant builds at its CI bounds")
            {
                required.insert(expectation.id.to_string());
            }
        }
    }
    required
}

/// Names of documents that live outside the repository. Built from pieces so that this file
/// does not match itself.
fn foreign_documents() -> Vec<String> {
    vec![
        ["DESIGN", ".md"].concat(),
        ["../", "shared"].concat(),
        ["shared/", "seeds"].concat(),
        ["seeds/", "0"].concat(),
        ["seed ", "0"].concat(),
        ["seed-", "0"].concat(),
        ["Seed ", "0"].concat(),
    ]
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("conformance/ has a parent")
        .to_path_buf()
}

fn tracked_files(root: &Path) -> Vec<String> {
    let output = Command::new("git")
        .arg("-C")
        .arg(root)
        .args(["ls-files", "-z"])
        .output()
        .expect("git runs (the citation check reads the tracked files)");
    assert!(
        output.status.success(),
        "git ls-files failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let files: Vec<String> = output
        .stdout
        .split(|byte| *byte == 0)
        .filter(|name| !name.is_empty())
        .map(|name| String::from_utf8_lossy(name).into_owned())
        .collect();
    assert!(
        files.len() > 20,
        "git ls-files listed only {} files",
        files.len()
    );
    files
}

fn normalise(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Sections of one spec: title -> the section's text (heading to the next heading of the same
/// or a higher level), whitespace-normalised. Only requirement IDs (`R1`, `M9`), unless
/// `with_anchors`: then every heading, as a citation may quote a table under `## Verdicts`.
fn sections_of(spec: &str, with_anchors: bool) -> BTreeMap<String, String> {
    let lines: Vec<&str> = spec.lines().collect();
    let heading = |line: &str| -> Option<(usize, String)> {
        let level = line
            .chars()
            .take_while(|character| *character == '#')
            .count();
        if level == 0 || !line[level..].starts_with(' ') {
            return None;
        }
        Some((level, line[level..].trim().to_string()))
    };
    let is_id = |title: &str| {
        let mut characters = title.chars();
        characters
            .next()
            .is_some_and(|first| first.is_ascii_uppercase())
            && !title[1..].is_empty()
            && title[1..]
                .chars()
                .all(|character| character.is_ascii_digit())
    };
    let mut sections = BTreeMap::new();
    for (index, line) in lines.iter().enumerate() {
        let Some((level, title)) = heading(line) else {
            continue;
        };
        if !is_id(&title) && !with_anchors {
            continue;
        }
        let end = lines[index + 1..]
            .iter()
            .position(|next| heading(next).is_some_and(|(next_level, _)| next_level <= level))
            .map_or(lines.len(), |offset| index + 1 + offset);
        sections.insert(title, normalise(&lines[index + 1..end].join("\n")));
    }
    sections
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Model,
    Implementation,
    Test,
}

#[derive(Debug)]
struct Citation {
    file: String,
    line: usize,
    spec: String,
    id: String,
    quote: String,
    kind: Option<Kind>,
}

fn is_test_path(path: &str) -> bool {
    path.split('/')
        .any(|part| part == "tests" || part == "benches")
        || path.ends_with("/tests.rs")
}

/// Citations of one file, each classified by where it stands.
fn requirement_sections(spec: &str) -> BTreeMap<String, String> {
    sections_of(spec, false)
}

fn citations_in(path: &str, text: &str) -> Vec<Citation> {
    let lines: Vec<&str> = text.lines().collect();
    let mut citations = Vec::new();
    let mut in_test_module = false;
    let mut index = 0;
    while index < lines.len() {
        let line = lines[index].trim_start();
        if line.starts_with("#[cfg(test)]") || line.starts_with("#[cfg(all(test") {
            in_test_module = true;
        }
        let Some(target) = line.strip_prefix("//= ") else {
            index += 1;
            continue;
        };
        let (spec, id) = target.trim().split_once('#').unwrap_or((target.trim(), ""));
        let mut quote = Vec::new();
        let mut next = index + 1;
        while let Some(text) = lines
            .get(next)
            .and_then(|line| line.trim_start().strip_prefix("//#"))
        {
            quote.push(text.trim());
            next += 1;
        }
        let kind = if is_test_path(path) || in_test_module {
            Some(Kind::Test)
        } else if path.starts_with("model/") {
            Some(Kind::Model)
        } else if path.starts_with("impl/") {
            Some(Kind::Implementation)
        } else {
            None
        };
        citations.push(Citation {
            file: path.to_string(),
            line: index + 1,
            spec: spec.to_string(),
            id: id.to_string(),
            quote: normalise(&quote.join(" ")),
            kind,
        });
        index = next;
    }
    citations
}

/// A gap: the stable text (matched against the known-gaps list) and where it was found.
#[derive(Debug, Default)]
struct Gaps {
    found: BTreeMap<String, BTreeSet<String>>,
}

impl Gaps {
    fn add(&mut self, gap: String, location: String) {
        self.found.entry(gap).or_default().insert(location);
    }
}

fn check(root: &Path) -> (Gaps, usize) {
    let files = tracked_files(root);
    let mut specs: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    let mut spec_texts: BTreeMap<String, String> = BTreeMap::new();
    let mut all_ids = BTreeSet::new();
    for file in files
        .iter()
        .filter(|file| file.starts_with("specs/") && file.ends_with(".md"))
    {
        let text = std::fs::read_to_string(root.join(file)).unwrap();
        all_ids.extend(requirement_sections(&text).into_keys());
        specs.insert(file.clone(), sections_of(&text, true));
        spec_texts.insert(file.clone(), text);
    }
    let mut gaps = Gaps::default();
    let required = required_ids(&spec_texts);
    for id in &required {
        if !all_ids.contains(id) {
            gaps.add(
                format!("requirement {id} is not a heading of any spec"),
                "specs/".into(),
            );
        }
    }
    let this_file = "conformance/tests/citations.rs";
    let mut citations = Vec::new();
    for file in &files {
        let skipped = [
            this_file,
            "conformance/tests/citations-known-gaps.txt",
            "Cargo.lock",
        ];
        if skipped.contains(&file.as_str()) || file.ends_with(".itf.json") {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(root.join(file)) else {
            continue;
        };
        for document in foreign_documents() {
            for (number, line) in text.lines().enumerate() {
                if line.contains(&document) {
                    gaps.add(
                        format!(
                            "{file} mentions {:?}, a document that is not in the repository",
                            document.trim()
                        ),
                        format!("{file}:{}", number + 1),
                    );
                }
            }
        }
        citations.extend(citations_in(file, &text));
    }
    let mut covered: BTreeMap<(String, Kind), usize> = BTreeMap::new();
    for citation in &citations {
        let location = format!("{}:{}", citation.file, citation.line);
        let Some(sections) = specs.get(&citation.spec) else {
            gaps.add(
                format!(
                    "{} cites {}, which is not a spec file",
                    citation.file, citation.spec
                ),
                location,
            );
            continue;
        };
        let Some(section) = sections.get(&citation.id) else {
            gaps.add(
                format!(
                    "{} cites {}#{}, which is not a section of it",
                    citation.file, citation.spec, citation.id
                ),
                location,
            );
            continue;
        };
        if citation.quote.is_empty() {
            gaps.add(
                format!(
                    "{} cites {}#{} without a //# quote",
                    citation.file, citation.spec, citation.id
                ),
                location,
            );
            continue;
        }
        if !section.contains(&citation.quote) {
            gaps.add(
                format!(
                    "{} quotes {}#{} with text not in the spec: {:?}",
                    citation.file, citation.spec, citation.id, citation.quote
                ),
                location,
            );
            continue;
        }
        if let Some(kind) = citation.kind {
            *covered.entry((citation.id.clone(), kind)).or_default() += 1;
        }
    }
    for id in &all_ids {
        for (kind, place) in [
            (Kind::Model, "model property (a non-test file under model/)"),
            (
                Kind::Implementation,
                "implementation (a non-test file under impl/)",
            ),
            (Kind::Test, "test"),
        ] {
            if !covered.contains_key(&(id.clone(), kind)) {
                gaps.add(format!("{id} has no {place} citation"), "-".into());
            }
        }
    }
    (gaps, citations.len())
}

fn known_gaps(root: &Path) -> BTreeSet<String> {
    let path = root.join("conformance/tests/citations-known-gaps.txt");
    std::fs::read_to_string(&path)
        .unwrap_or_default()
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .map(str::to_string)
        .collect()
}

#[test]
fn every_requirement_is_cited_verbatim_at_model_implementation_and_test() {
    let root = repo_root();
    let (gaps, citation_count) = check(&root);
    assert!(
        citation_count >= 50,
        "only {citation_count} citations found: the parser is not reading the tree"
    );
    let known = known_gaps(&root);
    let new: Vec<_> = gaps
        .found
        .iter()
        .filter(|(gap, _)| !known.contains(*gap))
        .collect();
    let stale: Vec<_> = known
        .iter()
        .filter(|gap| !gaps.found.contains_key(*gap))
        .collect();
    let mut report = String::new();
    for (gap, locations) in &new {
        report.push_str(&format!(
            "  GAP {gap}\n      at {}\n",
            locations.iter().cloned().collect::<Vec<_>>().join(", ")
        ));
    }
    for gap in &stale {
        report.push_str(&format!(
            "  FIXED (remove from citations-known-gaps.txt) {gap}\n"
        ));
    }
    println!(
        "{citation_count} citations; {} gaps, {} of them known (conformance/tests/citations-known-gaps.txt)",
        gaps.found.len(),
        gaps.found.len() - new.len()
    );
    assert!(
        new.is_empty() && stale.is_empty(),
        "citation check failed:\n{report}"
    );
}

#[test]
fn the_required_ids_come_from_every_spec_and_every_model() {
    let root = repo_root();
    let texts: BTreeMap<String, String> = tracked_files(&root)
        .into_iter()
        .filter(|file| file.starts_with("specs/") && file.ends_with(".md"))
        .map(|file| {
            let text = std::fs::read_to_string(root.join(&file)).unwrap();
            (file, text)
        })
        .collect();
    assert!(texts.len() >= 3, "{:?}", texts.keys());
    let required = required_ids(&texts);
    // What the specs held when the list was kept by hand, and more: it only grows.
    for id in [
        "R1", "R2", "R3", "R4", "R5", "R6", "R7", "R8", "R9", "M1", "M2", "M3", "M4", "M5", "M6",
        "M7", "M8", "M9", "M10", "T1", "T2", "T3", "T4", "T5",
    ] {
        assert!(required.contains(id), "{id} in {required:?}");
    }
    for actor in ["W1", "P1", "C1", "H1", "F1"] {
        assert!(
            !required.contains(actor),
            "{actor} is an actor, not a requirement"
        );
    }
    // Specs whose headings no parser can read (none left): the models still require their IDs,
    // so the check fails for want of the headings instead of passing with nothing to check.
    let broken: BTreeMap<String, String> = texts
        .iter()
        .map(|(file, text)| (file.clone(), text.replace('#', "")))
        .collect();
    let still = required_ids(&broken);
    for id in ["R1", "M1", "T1"] {
        assert!(still.contains(id), "{id} in {still:?}");
    }
}

#[test]
fn the_parser_reads_sections_quotes_and_where_a_citation_stands() {
    let spec = "# S\n\n### A1\n\nFirst sentence of A1.\nIts second\nsentence.\n\n### A2\n\nOther text.\n## After\n";
    let sections = requirement_sections(spec);
    assert_eq!(sections.keys().collect::<Vec<_>>(), ["A1", "A2"]);
    assert!(
        sections["A1"].contains("Its second sentence."),
        "whitespace is normalised: {:?}",
        sections["A1"]
    );
    assert!(
        !sections["A2"].contains("After"),
        "a section ends at the next heading"
    );
    let source = "fn x() {}\n//= specs/s.md#A1\n//# Its second\n//# sentence.\nfn y() {}\n#[cfg(test)]\n//= specs/s.md#A2\n//# Wrong.\n";
    let citations = citations_in("impl/x/src/lib.rs", source);
    assert_eq!(citations.len(), 2);
    assert_eq!(
        (citations[0].quote.as_str(), citations[0].kind),
        ("Its second sentence.", Some(Kind::Implementation))
    );
    assert_eq!(
        citations[1].kind,
        Some(Kind::Test),
        "below #[cfg(test)] is a test citation"
    );
    assert!(!sections["A2"].contains(&citations[1].quote));
    assert_eq!(
        citations_in("model/src/m.rs", source)[0].kind,
        Some(Kind::Model)
    );
    assert_eq!(
        citations_in("impl/x/tests/t.rs", source)[0].kind,
        Some(Kind::Test)
    );
}
