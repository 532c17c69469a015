//! Chooses the primitives src/sync.rs exports. loom's replace std's only inside a loom run: the
//! `loom` feature makes loom available and compiles tests/loom.rs, and `ONCECHECK_SYNC=loom`
//! switches the primitives (cfg `oncecheck_loom`). So `cargo test --all-features` tests the store
//! on std's primitives, as tools expect (loom's panic outside a loom model), and a loom run
//! rebuilds only this crate: `--cfg loom` in RUSTFLAGS would rebuild every dependency and switch
//! on loom code inside some of them (event-listener) that does not build without their loom.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(oncecheck_loom)");
    println!("cargo::rerun-if-env-changed=ONCECHECK_SYNC");
    let loom = std::env::var_os("CARGO_FEATURE_LOOM").is_some();
    if loom && std::env::var("ONCECHECK_SYNC").is_ok_and(|sync| sync == "loom") {
        println!("cargo::rustc-cfg=oncecheck_loom");
    }
}
