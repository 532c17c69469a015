//! `docs/check-json.schema.json` against real `oncecheck check --json` output: every model at
//! the CI bounds, a run stopped by a limit and a simulation validate with the reference
//! validator (Python's jsonschema, in the test run's `.venv`), and documents with a field
//! missing, renamed or of another type do not, so the schema is not vacuous. The document's
//! `schema` number equals the schema file's.

mod support {
    pub mod python;
}

use std::path::PathBuf;
use std::process::Command;

fn schema_file() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .join("docs/check-json.schema.json")
}

fn check_json(arguments: &[&str]) -> serde_json::Value {
    let output = Command::new(env!("CARGO_BIN_EXE_oncecheck"))
        .arg("check")
        .args(arguments)
        .arg("--json")
        .output()
        .expect("the oncecheck binary runs");
    serde_json::from_slice(&output.stdout).unwrap_or_else(|error| {
        panic!(
            "one JSON document ({error}): {}",
            String::from_utf8_lossy(&output.stderr)
        )
    })
}

/// Validates each document; answers, per document, the validator's first error or "valid".
fn validate(documents: &[serde_json::Value]) -> Vec<String> {
    let file = std::env::temp_dir().join(format!(
        "oncecheck-check-json-schema-{}.json",
        std::process::id()
    ));
    std::fs::write(&file, serde_json::to_string(documents).unwrap()).unwrap();
    let script = r#"
import json, sys
from jsonschema import Draft202012Validator
schema = json.load(open(sys.argv[1]))
Draft202012Validator.check_schema(schema)
validator = Draft202012Validator(schema)
for document in json.load(open(sys.argv[2])):
    errors = sorted(validator.iter_errors(document), key=lambda error: list(error.absolute_path))
    print("valid" if not errors else "/".join(map(str, errors[0].absolute_path)) + ": " + errors[0].message)
"#;
    let out = support::python::run(
        script,
        &[schema_file().to_str().unwrap(), file.to_str().unwrap()],
    );
    out.lines().map(str::to_string).collect()
}

#[test]
fn real_check_output_validates_against_the_schema_and_broken_documents_do_not() {
    let documents = vec![
        check_json(&["relay", "--variant", "add-era"]),
        check_json(&["idempotency", "--variant", "pre-fix"]),
        check_json(&["token"]),
        check_json(&["relay", "--variant", "fixed", "--states-max", "1000"]),
        check_json(&[
            "relay",
            "--variant",
            "counter-only",
            "--simulate",
            "--seed",
            "7",
            "--samples",
            "50",
            "--depth",
            "40",
        ]),
    ];
    assert_eq!(
        validate(&documents),
        vec!["valid"; documents.len()],
        "real output validates"
    );
    let schema: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(schema_file()).unwrap()).unwrap();
    assert_eq!(
        documents[0]["schema"],
        schema["properties"]["schema"]["const"]
    );
    // Every action kind is listed, 0 included (add-era never truncates).
    assert_eq!(
        documents[0]["reports"][0]["action_coverage"]["TruncatorDeletes"],
        0
    );

    let mut broken = Vec::new();
    let mut edit = |change: &dyn Fn(&mut serde_json::Value)| {
        let mut document = documents[0].clone();
        change(&mut document);
        broken.push(document);
    };
    edit(&|document| {
        document["reports"][0].as_object_mut().unwrap().remove("ok");
    });
    edit(&|document| {
        document["reports"][0]["properties"][0]["kind"] = "usually".into();
    });
    edit(&|document| {
        document["reports"][0]["bounds"] = "window=1".into();
    });
    edit(&|document| {
        document["reports"][0]["properties"][0]["trace"][0]["action"] =
            "WriterAddsToCounter { writer: 0 }".into();
    });
    edit(&|document| {
        document["reports"][0]["renamed_field"] = 1.into();
    });
    let verdicts = validate(&broken);
    assert_eq!(verdicts.len(), 5);
    for verdict in &verdicts {
        assert_ne!(
            verdict, "valid",
            "a broken document must not validate: {verdicts:?}"
        );
    }
}

#[test]
fn the_documented_example_is_what_check_prints_today() {
    let page = std::fs::read_to_string(schema_file().with_file_name("check-json.md")).unwrap();
    let start = page.find("```json\n").expect("an example") + "```json\n".len();
    let end = start + page[start..].find("```").unwrap();
    let example: serde_json::Value = serde_json::from_str(&page[start..end]).unwrap();
    let real = check_json(&["relay", "--variant", "add-era"]);
    assert_eq!(example["schema"], real["schema"]);
    let (example, real) = (&example["reports"][0], &real["reports"][0]);
    for field in [
        "model",
        "variant",
        "ok",
        "search",
        "states",
        "unique_states",
        "max_depth",
    ] {
        assert_eq!(example[field], real[field], "docs/check-json.md: `{field}`");
    }
    for (index, count) in example["states_per_depth"]
        .as_array()
        .unwrap()
        .iter()
        .enumerate()
        .filter(|(_, count)| count.is_u64())
    {
        assert_eq!(
            *count, real["states_per_depth"][index],
            "states_per_depth[{index}]"
        );
    }
    for map in ["bounds", "action_coverage"] {
        for (key, value) in example[map].as_object().unwrap() {
            if key != "..." {
                assert_eq!(*value, real[map][key], "docs/check-json.md: `{map}.{key}`");
            }
        }
    }
    let (example, real) = (&example["properties"][0], &real["properties"][0]);
    for field in ["id", "name", "kind", "expected", "verdict"] {
        assert_eq!(example[field], real[field], "properties[0].{field}");
    }
    assert_eq!(
        example["trace"][0], real["trace"][0],
        "the first trace step"
    );
}
