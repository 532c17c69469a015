//! ARCHITECTURE.md's invariants, checked on the source tree and the dependency graph so that a
//! change that breaks one fails a test instead of making the page untrue:
//! - the main job compiles no implementation: `oncecheck-conformance` without `replay` depends
//!   on no `impl/*` crate, no AWS SDK, no sqlx, no aws-lc;
//! - only `conformance` depends on both the model and an implementation crate: every `impl/*`
//!   crate (listed from the directory, so a new one is covered) is free of the model;
//! - no model iterates a HashMap: the models' files name neither `HashMap` nor `HashSet`;
//! - the proxy is the only way replays reach DynamoDB: every store a replay builds points at a
//!   proxy listener, and no replay file builds an SDK client of its own;
//! - coverage's list of every model's action kinds (`action_names.rs`) is exactly the variants
//!   of the model's `Action` enum;
//! - the proxy's files import each other downward only (no cycle), and no module of the crate
//!   imports the command line (`cli/`).

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace root")
        .to_path_buf()
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|error| panic!("{}: {error}", path.display()))
}

/// The dependency names of a manifest's `[dependencies]`-like tables (any table whose name ends
/// in `dependencies`), one per line as `name` before `=` or `.workspace`.
fn dependencies(manifest: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut in_dependencies = false;
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            in_dependencies = line.trim_matches(['[', ']']).ends_with("dependencies");
            continue;
        }
        if in_dependencies && !line.starts_with('#') {
            if let Some(name) = line
                .split(['=', '.'])
                .next()
                .map(str::trim)
                .filter(|name| !name.is_empty())
            {
                names.push(name.to_string());
            }
        }
    }
    names
}

/// Every `impl/*` crate: (directory, package name), from the directory listing.
fn implementation_crates() -> Vec<(PathBuf, String)> {
    let mut crates: Vec<(PathBuf, String)> = std::fs::read_dir(root().join("impl"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.join("Cargo.toml").exists())
        .map(|path| {
            let manifest = read(&path.join("Cargo.toml"));
            let name = manifest
                .lines()
                .find_map(|line| line.trim().strip_prefix("name = \""))
                .and_then(|rest| rest.split('"').next())
                .expect("a package name")
                .to_string();
            (path, name)
        })
        .collect();
    crates.sort();
    crates
}

/// The packages `cargo tree` lists for oncecheck-conformance's normal dependencies.
fn conformance_dependencies(features: &[&str]) -> Vec<String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let output = std::process::Command::new(cargo)
        .current_dir(root())
        .args([
            "tree",
            "--offline",
            "-p",
            "oncecheck-conformance",
            "-e",
            "normal",
            "--prefix",
            "none",
            "--format",
            "{p}",
        ])
        .args(features)
        .output()
        .expect("cargo tree runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

#[test]
fn the_main_job_compiles_no_implementation() {
    let implementations: Vec<String> = implementation_crates()
        .into_iter()
        .map(|(_, name)| name)
        .collect();
    let forbidden: Vec<&str> = implementations
        .iter()
        .map(String::as_str)
        .chain([
            "aws-sdk-dynamodb",
            "sqlx",
            "aws-lc-sys",
            "aws-lc-rs",
            "tokio",
        ])
        .collect();
    let main_job = conformance_dependencies(&[]);
    assert!(
        main_job.iter().any(|name| name == "oncecheck-model")
            && main_job.iter().any(|name| name == "stateright"),
        "cargo tree was read: {main_job:?}"
    );
    for name in &forbidden {
        assert!(
            !main_job.iter().any(|package| package == name),
            "the main job (oncecheck-conformance without replay) builds {name}"
        );
    }
    // The same question asked of the replay build finds them, so the check can fail.
    let replay = conformance_dependencies(&["--features", "replay"]);
    for name in ["oncecheck-store", "aws-sdk-dynamodb", "sqlx"] {
        assert!(replay.iter().any(|package| package == name), "{name}");
    }
}

#[test]
fn no_model_iterates_a_hash_map() {
    // The models' files: everything under model/src but the checker, the trace format and the
    // view, which never hold model state (test modules excepted: they may count states).
    let tooling = ["check.rs", "check", "trace.rs", "view.rs", "lib.rs"];
    let mut files = Vec::new();
    let mut pending = vec![root().join("model/src")];
    while let Some(directory) = pending.pop() {
        for entry in std::fs::read_dir(&directory).unwrap() {
            let path = entry.unwrap().path();
            let relative = path.strip_prefix(root().join("model/src")).unwrap();
            if tooling.contains(&relative.to_str().unwrap()) {
                continue;
            }
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|extension| extension == "rs")
                && path.file_name().is_some_and(|name| name != "tests.rs")
            {
                files.push(path);
            }
        }
    }
    files.sort();
    for model in ["relay", "idempotency", "token", "ddb"] {
        assert!(
            files
                .iter()
                .any(|file| file.to_string_lossy().contains(model)),
            "{model}'s files are checked: {files:?}"
        );
    }
    for file in &files {
        let text = read(file);
        let production = text.split("#[cfg(test)]").next().unwrap_or_default();
        for hashed in ["HashMap", "HashSet"] {
            assert!(
                !production.contains(hashed),
                "{} names {hashed}: model state and actions use BTreeMap/BTreeSet only",
                file.display()
            );
        }
    }
}

/// The variants of `pub enum Action` in the model's files (`model/src/<model>.rs` or under
/// `model/src/<model>/`), in declaration order.
fn declared_actions(model: &str) -> Vec<String> {
    let mut files = vec![root().join(format!("model/src/{model}.rs"))];
    let directory = root().join(format!("model/src/{model}"));
    if directory.is_dir() {
        files.extend(
            std::fs::read_dir(&directory)
                .unwrap()
                .map(|entry| entry.unwrap().path()),
        );
    }
    for file in files.iter().filter(|file| file.is_file()) {
        let text = read(file);
        let Some(start) = text.find("pub enum Action {") else {
            continue;
        };
        let body = &text[start..];
        let body = &body[..body.find("\n}").expect("the enum ends")];
        return body
            .lines()
            .skip(1)
            .filter(|line| line.starts_with("    ") && !line.starts_with("     "))
            .map(str::trim)
            .filter(|line| line.chars().next().is_some_and(char::is_uppercase))
            .map(|line| line.split([' ', ',', '{', '(']).next().unwrap().to_string())
            .collect();
    }
    panic!("no `pub enum Action` in {files:?}");
}

#[test]
fn coverage_lists_exactly_each_models_declared_actions() {
    for model in ["relay", "idempotency", "token"] {
        let declared = declared_actions(model);
        assert!(declared.len() >= 8, "{model}: {declared:?}");
        assert_eq!(
            oncecheck_conformance::check::action_names::of(model),
            declared,
            "conformance/src/check/action_names.rs lists {model}'s actions as model/src declares them"
        );
    }
}

#[test]
fn only_conformance_depends_on_the_model_and_an_implementation() {
    let crates = implementation_crates();
    assert!(
        crates.len() >= 5,
        "store, relay, idempotency, tokened and fold at least: {crates:?}"
    );
    let implementations: Vec<&str> = crates.iter().map(|(_, name)| name.as_str()).collect();
    for (crate_dir, _) in &crates {
        let names = dependencies(&read(&crate_dir.join("Cargo.toml")));
        for upward in ["oncecheck-model", "oncecheck-conformance"] {
            assert!(
                !names.iter().any(|name| name == upward),
                "{} depends on {upward}: {names:?}",
                crate_dir.display()
            );
        }
    }
    let names = dependencies(&read(&root().join("model/Cargo.toml")));
    assert!(
        !names
            .iter()
            .any(|name| implementations.contains(&name.as_str())),
        "the model depends on an implementation: {names:?}"
    );
    let names = dependencies(&read(&root().join("conformance/Cargo.toml")));
    assert!(
        names.iter().any(|name| name == "oncecheck-model"),
        "{names:?}"
    );
    assert!(
        names
            .iter()
            .any(|name| implementations.contains(&name.as_str())),
        "{names:?}"
    );
}

/// Every `.rs` file under `directory`, recursively, sorted.
fn rust_files(directory: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(directory).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(rust_files(&path));
        } else if path.extension().is_some_and(|extension| extension == "rs") {
            files.push(path);
        }
    }
    files.sort();
    files
}

#[test]
fn replays_reach_dynamodb_only_through_the_proxy() {
    let source = root().join("conformance/src");
    // The replay room and the replay command; the middleware targets (replay/middleware/) reach
    // no DynamoDB.
    let mut replay_files: Vec<PathBuf> = rust_files(&source.join("replay"))
        .into_iter()
        .filter(|path| !path.starts_with(source.join("replay/middleware")))
        .collect();
    replay_files.push(source.join("cli/replay.rs"));
    assert!(replay_files.len() >= 8, "{replay_files:?}");
    let mut stores = 0;
    for file in &replay_files {
        let text = read(file);
        for forbidden in ["client_for(", "aws_config::", "reqwest::"] {
            assert!(
                !text.contains(forbidden),
                "{} builds a client of its own ({forbidden})",
                file.display()
            );
        }
        // Every client a replay builds: `store_behind(template, endpoint, ..)` and the template
        // itself, each given a proxy listener's endpoint.
        assert!(
            text.matches(".endpoint_url(").count() <= 1,
            "{}: one place sets endpoints",
            file.display()
        );
        let calls = text
            .match_indices("DynamoDbStore::connect(")
            .chain(text.match_indices("store_behind("))
            .filter(|(index, _)| !text[..*index].ends_with("fn "));
        for (index, _) in calls {
            stores += 1;
            let call: String = text[index..].chars().take(200).collect();
            assert!(
                call.contains("proxy.endpoint(") || call.contains("proxy.set_up_endpoint()"),
                "{}: a store that is not behind the proxy: {call}",
                file.display()
            );
        }
    }
    assert!(
        stores >= 3,
        "writers, pullers and the set-up store are all built here: {stores}"
    );
}

/// The sibling modules a file of `proxy/` imports (`super::NAME` in code, doc lines skipped).
fn proxy_imports(file: &Path, siblings: &[String]) -> Vec<String> {
    let text = read(file);
    let mut names: Vec<String> = siblings
        .iter()
        .filter(|name| {
            text.lines()
                .map(str::trim_start)
                .filter(|line| !line.starts_with("//"))
                .any(|line| line.contains(&format!("super::{name}::")))
        })
        .cloned()
        .collect();
    names.sort();
    names
}

#[test]
fn the_proxy_files_import_each_other_without_a_cycle() {
    let directory = root().join("conformance/src/proxy");
    let siblings: Vec<String> = rust_files(&directory)
        .iter()
        .filter_map(|path| path.file_stem()?.to_str().map(str::to_string))
        .filter(|name| name != "mod")
        .collect();
    assert!(siblings.len() >= 8, "{siblings:?}");
    let imports: Vec<(String, Vec<String>)> = siblings
        .iter()
        .map(|name| {
            let file = directory.join(format!("{name}.rs"));
            (name.clone(), proxy_imports(&file, &siblings))
        })
        .collect();
    // Kahn's order: a file whose imports are all placed is placed next; what is left is a cycle.
    let mut placed: Vec<String> = Vec::new();
    while placed.len() < imports.len() {
        let next = imports.iter().find(|(name, uses)| {
            !placed.contains(name) && uses.iter().all(|used| placed.contains(used))
        });
        match next {
            Some((name, _)) => placed.push(name.clone()),
            None => {
                let left: Vec<_> = imports
                    .iter()
                    .filter(|(name, _)| !placed.contains(name))
                    .collect();
                panic!("the proxy's files import each other in a cycle: {left:?}");
            }
        }
    }
}

#[test]
fn nothing_imports_the_command_line() {
    let source = root().join("conformance/src");
    for file in rust_files(&source) {
        if file.starts_with(source.join("cli")) || file.starts_with(source.join("bin")) {
            continue;
        }
        let text = read(&file);
        assert!(
            !text.contains("crate::cli"),
            "{} imports the command line (crate::cli): the replays, checks and reports know none",
            file.display()
        );
    }
}
