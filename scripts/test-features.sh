# The feature set of every test build of the workspace (sourced by scripts/test and
# scripts/red-runs). One set for the build, the lints, the workspace tests and the red runs,
# each resolved for the whole workspace, so that cargo compiles every dependency once: a
# `-p PACKAGE` or another feature list resolves dependencies' features anew and recompiles them
# (minutes each on two cores). `demo`: the idempotency demo binary, which its test starts.
# Conformance's `replay` needs no entry: every command here builds test targets, whose
# dev-dependencies switch it on (conformance's self dev-dependency; a `--workspace` build does
# not apply `oncecheck-conformance/replay` to the member itself).
# The explorations add their one feature on top (shuttle, loom): they recompile only the crates
# whose sync primitives they swap.
TEST_FEATURES=oncecheck-idempotency/demo
