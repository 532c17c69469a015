// Each test binary includes this module and uses a part of it.
#![allow(dead_code)]

//! The Python the tests read oncecheck's outputs with, as a CI system would: the test run's
//! `.venv` at the repository root, where `scripts/services.sh` (`services_up`, or
//! `install_python_tools` alone) installs junitparser and jsonschema on a fresh machine.

use std::path::PathBuf;
use std::process::{Command, Output};

/// The `.venv`'s python; a missing one fails the test naming the command that installs it.
pub fn python() -> PathBuf {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace root")
        .to_path_buf();
    let python = root.join(".venv/bin/python");
    assert!(
        python.exists(),
        "{} is missing: run `source scripts/services.sh; install_python_tools` (scripts/test does)",
        python.display()
    );
    python
}

/// Runs `script` (Python source) with `arguments`; asserts it succeeded and answers its stdout.
pub fn run(script: &str, arguments: &[&str]) -> String {
    let output: Output = Command::new(python())
        .arg("-c")
        .arg(script)
        .args(arguments)
        .output()
        .expect("python runs");
    assert!(
        output.status.success(),
        "the Python check failed:\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).to_string()
}
