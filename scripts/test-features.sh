# The feature set of every test build of the workspace (sourced by scripts/test and
# scripts/red-runs). One set for the build, the lints' inputs, the workspace tests and the red
# runs, each of them resolved for the whole workspace, so that cargo compiles every dependency
# once: a `-p PACKAGE` or another feature list resolves dependencies' features anew and
# recompiles them (minutes each on two cores). `replay`: the conformance proxy and replays;
# `demo`: the idempotency demo binary, which its test starts.
# The explorations add their one feature on top (shuttle, loom): they recompile only the crates
# whose sync primitives they swap.
TEST_FEATURES=oncecheck-conformance/replay,oncecheck-idempotency/demo
