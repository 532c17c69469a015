//! Chooses the primitives src/sync.rs exports: std's, or an explorer's inside an explorer run.
//! The `loom` and `shuttle` features make the explorer available and compile its test
//! (tests/loom.rs, tests/shuttle.rs); `ONCECHECK_SYNC=loom` or `ONCECHECK_SYNC=shuttle` switches
//! the primitives (cfg `oncecheck_loom`, `oncecheck_shuttle`; one at a time by construction). So
//! `cargo test --all-features` tests the layer on std's primitives, as tools expect (an
//! explorer's primitives fail outside its model), and an explorer run rebuilds only this crate:
//! `--cfg loom` in RUSTFLAGS would rebuild every dependency and switch on loom code inside some
//! of them (event-listener) that does not build without their loom.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(oncecheck_loom)");
    println!("cargo::rustc-check-cfg=cfg(oncecheck_shuttle)");
    println!("cargo::rerun-if-env-changed=ONCECHECK_SYNC");
    let sync = std::env::var("ONCECHECK_SYNC").unwrap_or_default();
    for (explorer, feature) in [
        ("loom", "CARGO_FEATURE_LOOM"),
        ("shuttle", "CARGO_FEATURE_SHUTTLE"),
    ] {
        if sync == explorer && std::env::var_os(feature).is_some() {
            println!("cargo::rustc-cfg=oncecheck_{explorer}");
        }
    }
}
