//! Records the commit the `oncecheck` binary is built from, so the HTML report's index can say
//! what was checked: `git describe --always --dirty` (`-dirty` when the tree differed from the
//! commit at build time), or `ONCECHECK_COMMIT` when set (a build outside a checkout), else
//! `unknown`. The script reruns when HEAD, the branch it names or the index moves.

use std::process::Command;

fn git(arguments: &[&str]) -> Option<String> {
    let output = Command::new("git").args(arguments).output().ok()?;
    output
        .status
        .success()
        .then(|| String::from_utf8_lossy(&output.stdout).trim().to_string())
        .filter(|text| !text.is_empty())
}

fn main() {
    println!("cargo:rerun-if-env-changed=ONCECHECK_COMMIT");
    let commit = std::env::var("ONCECHECK_COMMIT")
        .ok()
        .filter(|commit| !commit.is_empty())
        .or_else(|| git(&["describe", "--always", "--dirty", "--abbrev=12"]))
        .unwrap_or_else(|| "unknown".to_string());
    println!("cargo:rustc-env=ONCECHECK_COMMIT={commit}");
    let mut watched = vec![
        "HEAD".to_string(),
        "index".to_string(),
        "packed-refs".to_string(),
    ];
    watched.extend(git(&["symbolic-ref", "-q", "HEAD"]));
    for name in watched {
        if let Some(path) = git(&["rev-parse", "--git-path", &name]) {
            println!("cargo:rerun-if-changed={path}");
        }
    }
}
