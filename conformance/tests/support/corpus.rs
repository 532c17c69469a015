// Each test binary includes this module and uses a part of it.
#![allow(dead_code)]

//! The regression corpus as the conformance tests see it: the kept traces under
//! `conformance/traces/relay/`, and the covering walks its manifest describes, written once per
//! test binary (the corpus keeps the manifest, not the walk files).

use std::path::PathBuf;
use std::process::Command;

/// The kept traces' directory.
pub fn kept_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("traces/relay")
}

/// The directory of the covering walks, written by `oncecheck corpus --walks-out` on first use.
pub fn walks_dir() -> &'static PathBuf {
    static WALKS: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    WALKS.get_or_init(|| {
        let out = std::env::temp_dir().join(format!(
            "oncecheck-{}-walks-{}",
            module_path!().replace("::", "-"),
            std::process::id()
        ));
        let output = Command::new(env!("CARGO_BIN_EXE_oncecheck"))
            .args(["corpus", "--dir"])
            .arg(kept_dir())
            .arg("--walks-out")
            .arg(&out)
            .output()
            .expect("the oncecheck binary runs");
        assert_eq!(
            output.status.code(),
            Some(0),
            "the walks are written: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        out
    })
}

/// The walk files, sorted.
pub fn walks() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(walks_dir())
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .collect();
    files.sort();
    files
}

/// A kept corpus trace, or a covering walk written from the manifest.
pub fn corpus_path(name: &str) -> PathBuf {
    let kept = kept_dir().join(name);
    if kept.exists() {
        kept
    } else {
        walks_dir().join(name)
    }
}
