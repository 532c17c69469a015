//! ARCHITECTURE.md's conformance invariants, checked on the source tree so that a change that
//! breaks one fails a test instead of making the page untrue:
//! - only `conformance` depends on both the model and an implementation crate;
//! - the proxy is the only way replays reach DynamoDB: every store a replay builds points at a
//!   proxy listener, and no replay file builds an SDK client of its own.

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

#[test]
fn only_conformance_depends_on_the_model_and_an_implementation() {
    let implementations = [
        "oncecheck-store",
        "oncecheck-relay",
        "oncecheck-idempotency",
    ];
    for crate_dir in ["impl/store", "impl/relay", "impl/idempotency"] {
        let names = dependencies(&read(&root().join(crate_dir).join("Cargo.toml")));
        for upward in ["oncecheck-model", "oncecheck-conformance"] {
            assert!(
                !names.iter().any(|name| name == upward),
                "{crate_dir} depends on {upward}: {names:?}"
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

#[test]
fn replays_reach_dynamodb_only_through_the_proxy() {
    let source = root().join("conformance/src");
    let mut replay_files: Vec<PathBuf> = std::fs::read_dir(&source)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        // Files only: the middleware target's directory (replay_middleware/) reaches no DynamoDB.
        .filter(|path| path.is_file())
        .filter(|path| {
            path.file_name()
                .and_then(|name| name.to_str())
                .is_some_and(|name| name.starts_with("replay"))
        })
        .collect();
    replay_files.sort();
    assert!(replay_files.len() >= 4, "{replay_files:?}");
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
