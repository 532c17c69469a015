//! Verdicts, pinned state counts, exact shortest traces, and for every `always` property a
//! variant or a mutated protocol step that breaks it by what is observed.

use super::*;
use crate::check::{run, CheckOptions, CheckReport, Kind, ModelSpec, SpecError, Verdict};

fn model_at(
    variant: &str,
    overrides: &[(&str, u32)],
    mutation: Option<Mutation>,
) -> IdempotencyModel {
    let overrides: Vec<(String, u32)> = overrides
        .iter()
        .map(|(key, value)| (key.to_string(), *value))
        .collect();
    let bounds = IdempotencyModel::resolve_bounds(variant, &overrides).unwrap();
    let model = IdempotencyModel::build(variant, &bounds).unwrap();
    match mutation {
        Some(mutation) => model.with_mutation(mutation),
        None => model,
    }
}

/// Bounds at which every one of the layer's finalize attempts can fail.
const ALL_ATTEMPTS_FAIL: &[(&str, u32)] = &[("finalize_faults", FINALIZE_ATTEMPTS_MAX as u32)];

fn check_at(variant: &str, overrides: &[(&str, u32)], mutation: Option<Mutation>) -> CheckReport {
    let report = run(
        model_at(variant, overrides, mutation),
        &CheckOptions::default(),
        &mut |_| {},
    );
    assert!(
        report.complete,
        "{variant} {overrides:?} {mutation:?} did not complete"
    );
    report
}

/// The shortest trace of a property, in HTTP words.
fn shortest_words(
    variant: &str,
    overrides: &[(&str, u32)],
    mutation: Option<Mutation>,
    property: &str,
) -> Vec<String> {
    let model = model_at(variant, overrides, mutation);
    let definition = model
        .property_defs()
        .into_iter()
        .find(|def| def.name == property)
        .expect("a property");
    let trace = shortest_trace(&model, &definition).expect("a trace");
    trace.into_iter().map(|step| step.words).collect()
}

fn violated(report: &CheckReport) -> Vec<&'static str> {
    report
        .properties
        .iter()
        .filter(|property| property.kind == Kind::Always && property.verdict == Verdict::Violated)
        .map(|property| property.name)
        .collect()
}

fn assert_expected(report: &CheckReport) {
    for property in &report.properties {
        assert_eq!(
            property.verdict, property.expected,
            "{}/{}: {}",
            report.variant, report.bounds, property.name
        );
    }
}

//= specs/idempotency-middleware.md#Verdicts
//# At the CI bounds every variant meets the verdicts of this table.
#[test]
fn variants_meet_their_expected_verdicts_at_the_ci_bounds() {
    for (variant, unique_states, always_violated) in [
        (
            "pre-fix",
            35_727,
            &[
                M1_AT_MOST_ONCE,
                "M2 no-poison",
                M3_TERMINAL_RULE,
                "M4 replay-fidelity",
                "M7 live-body",
                "M8 fencing",
                "M9 non-2xx passthrough",
                M10_EXPIRED_FREE,
            ][..],
        ),
        ("fixed", 167_489, &[M1_AT_MOST_ONCE, "M8 fencing"][..]),
        ("fenced", 144_995, &[M1_AT_MOST_ONCE][..]),
        ("renewed", 113_641, &[][..]),
        ("atomic", 58_843, &[][..]),
        ("fail-closed", 118_961, &[][..]),
    ] {
        let report = check_at(variant, &[], None);
        println!(
            "{variant}: {} unique states, depth {}, {:.2}s",
            report.unique_states, report.max_depth, report.seconds
        );
        assert_expected(&report);
        assert_eq!(violated(&report), always_violated, "{variant}");
        assert_eq!(
            report.unique_states, unique_states,
            "{variant}: the state space changed"
        );
    }
}

//= specs/idempotency-middleware.md#Verdicts
//# Where a bound removes a case, the expectation follows the bound.
#[test]
fn expectations_follow_the_bounds() {
    for (variant, overrides, unique_states) in [
        ("fenced", &[("ticks", 0)][..], 9_197),
        ("fenced", &[("ticks", 0), ("finalize_faults", 0)][..], 1_577),
        ("renewed", &[("clients", 1)][..], 2_105),
        ("pre-fix", &[("ticks", 1)][..], 11_440),
        ("renewed", &[("sqlite", 1)][..], 124_113),
    ] {
        let report = check_at(variant, overrides, None);
        assert_expected(&report);
        assert_eq!(
            report.unique_states, unique_states,
            "{variant} {overrides:?}"
        );
    }
}

/// The four outcomes beyond the CI bound (exact cap, one byte over, an error after the cap, a
/// small non-2xx) add states but no verdict.
#[test]
fn all_nine_outcomes_give_the_same_verdicts() {
    for (variant, unique_states) in [("pre-fix", 97_101), ("renewed", 312_795)] {
        let all = check_at(variant, &[("outcomes", 9)], None);
        let ci = check_at(variant, &[], None);
        assert_expected(&all);
        let verdicts = |report: &CheckReport| {
            report
                .properties
                .iter()
                .map(|p| (p.name, p.verdict))
                .collect::<Vec<_>>()
        };
        assert_eq!(verdicts(&all), verdicts(&ci), "{variant}");
        assert_eq!(all.unique_states, unique_states, "{variant}");
    }
}

/// The lease crossing: a handler slower than its lease is run a second time by a duplicate
/// that takes the lapsed claim over, both commit their effects.
//= specs/idempotency-middleware.md#M1
//# The handler runs only for the request that won the atomic claim of its key.
#[test]
fn fenced_runs_a_slow_handler_twice_across_its_lease() {
    assert_eq!(
        shortest_words("fenced", &[], None, M1_AT_MOST_ONCE),
        [
            "C1 POST /transfers Idempotency-Key k fp A",
            "C1: claim k inserts a processing row, generation 1",
            "C1: handler returns 200, body under the cap",
            "C2 POST /transfers Idempotency-Key k fp A",
            "the clock ticks to 1",
            "C2: claim k takes over the row whose lease lapsed, generation 2",
            "C2: handler returns 200, body under the cap",
        ]
    );
}

/// The heartbeat keeps the claim while the handler runs past its first lease.
//= specs/idempotency-middleware.md#M6
//# A request whose key is held by a live claim gets 409 and never runs the handler.
#[test]
fn renewed_keeps_a_slow_handlers_claim() {
    assert_eq!(
        shortest_words("renewed", &[], None, M6_RENEWED),
        [
            "C1 POST /transfers Idempotency-Key k fp A",
            "C1: claim k inserts a processing row, generation 1",
            "the clock ticks to 1; the heartbeat renews generation 1's lease to 2",
        ]
    );
}

/// Why the heartbeat must outlive the handler: stopped at the 2xx, the claim lapses while the
/// body is still read and a duplicate runs the handler again.
//= specs/idempotency-middleware.md#M1
//# The handler runs only for the request that won the atomic claim of its key.
#[test]
fn a_heartbeat_that_stops_at_the_response_lets_the_capture_cross_the_lease() {
    assert_eq!(
        shortest_words(
            "renewed",
            &[],
            Some(Mutation::HeartbeatStopsAtResponse),
            M1_AT_MOST_ONCE
        ),
        [
            "C1 POST /transfers Idempotency-Key k fp A",
            "C1: claim k inserts a processing row, generation 1",
            "C1: handler returns 200, body under the cap",
            "C2 POST /transfers Idempotency-Key k fp A",
            "the clock ticks to 1",
            "C2: claim k takes over the row whose lease lapsed, generation 2",
            "C2: handler returns 200, body under the cap",
        ]
    );
}

/// The remaining limits of `renewed`: a process that dies after the 2xx, and a database that
/// answers every finalize attempt with an error.
//= specs/idempotency-middleware.md#M1
//# The handler runs only for the request that won the atomic claim of its key.
#[test]
fn renewed_runs_twice_only_when_the_process_dies_or_every_finalize_fails() {
    let report = check_at("renewed", &[("process_faults", 1)], None);
    assert_expected(&report);
    assert_eq!(violated(&report), [M1_AT_MOST_ONCE]);
    assert_eq!(report.unique_states, 495_381);
    assert_eq!(
        shortest_words("renewed", &[("process_faults", 1)], None, M1_AT_MOST_ONCE),
        [
            "C1 POST /transfers Idempotency-Key k fp A",
            "C1: claim k inserts a processing row, generation 1",
            "C1: handler returns 200, body under the cap",
            "C1's process dies",
            "C2 POST /transfers Idempotency-Key k fp A",
            "the clock ticks to 1",
            "C2: claim k takes over the row whose lease lapsed, generation 2",
            "C2: handler returns 200, body under the cap",
        ]
    );
    // The layer's five attempts, every one answered an error: M3's exception branch.
    let report = check_at("renewed", ALL_ATTEMPTS_FAIL, None);
    assert_expected(&report);
    assert_eq!(violated(&report), [M1_AT_MOST_ONCE]);
    assert_eq!(report.unique_states, 447_273);
    let failed_attempt = "C1: finalize succeeded(full) answered an error, outcome unknown (it did not commit) (finalizer generation 1, row generation 1)";
    let mut unknown = vec![
        "C1 POST /transfers Idempotency-Key k fp A",
        "C1: claim k inserts a processing row, generation 1",
        "C1: handler returns 200, body under the cap",
        "C1: middleware reads the body, will finalize succeeded(full) and send the handler's body",
    ];
    unknown.extend([failed_attempt; FINALIZE_ATTEMPTS_MAX as usize]);
    assert_eq!(
        shortest_words("renewed", ALL_ATTEMPTS_FAIL, None, M3_UNKNOWN_FINALIZE),
        unknown
    );
    let twice = shortest_words("renewed", ALL_ATTEMPTS_FAIL, None, M1_AT_MOST_ONCE);
    assert_eq!(twice[..unknown.len()], unknown);
    assert_eq!(
        twice[unknown.len()..],
        [
            "C2 POST /transfers Idempotency-Key k fp A",
            "the clock ticks to 1",
            "C2: claim k takes over the row whose lease lapsed, generation 2",
            "C2: handler returns 200, body under the cap",
        ]
    );
}

/// `atomic` and `fail-closed` keep M1 where `renewed` loses it: a process that dies or stalls,
/// and every finalize attempt failing. `atomic` commits the effects with the row (a run that did
/// not commit runs again, once); `fail-closed` holds the key until the reconciler resolves it.
/// Both at once for `fail-closed` (1 807 281 states, about a minute) is the documented run
/// `oncecheck check idempotency --variant fail-closed --bound process_faults=1 --bound finalize_faults=5`.
//= specs/idempotency-middleware.md#M1
//# The handler runs only for the request that won the atomic claim of its key.
#[test]
fn atomic_and_fail_closed_run_once_when_the_process_dies_or_every_finalize_fails() {
    for (variant, overrides, unique_states) in [
        (
            "atomic",
            &[("process_faults", 1), ("finalize_faults", 5)][..],
            516_439,
        ),
        ("fail-closed", &[("process_faults", 1)][..], 453_691),
        ("fail-closed", ALL_ATTEMPTS_FAIL, 462_791),
    ] {
        let report = check_at(variant, overrides, None);
        assert_expected(&report);
        assert_eq!(
            violated(&report),
            [] as [&str; 0],
            "{variant} {overrides:?}"
        );
        assert_eq!(
            report.unique_states, unique_states,
            "{variant} {overrides:?}"
        );
    }
    // The held key, then the reconciler: the dead process's effects happened, so the sentinel.
    let held = shortest_words("fail-closed", &[("process_faults", 1)], None, M1_RECONCILED);
    assert_eq!(
        held.last().unwrap(),
        "the reconciler finds generation 1's effects did not happen -> failed"
    );
}

//= specs/idempotency-middleware.md#M3
//# After a 2xx the row ends succeeded with the full body or the sentinel; never failed, never left processing.
#[test]
fn two_finalize_faults_never_leave_a_row_processing_after_five_attempts() {
    // The CI bounds reach two faults in one finalize, below the layer's five attempts: M3's
    // exception is reached in the run above (`finalize_faults=5`), not at the CI bounds.
    let model = model_at("fenced", &[("finalize_faults", 2)], None);
    assert_eq!(model.attempts(), 5);
    let report = check_at("fenced", &[("finalize_faults", 2)], None);
    assert!(report.matches_expectations());
    let property = report
        .properties
        .iter()
        .find(|property| property.name == M3_UNKNOWN_FINALIZE)
        .unwrap();
    assert_eq!(property.verdict, Verdict::Unreached);
}

//= specs/idempotency-middleware.md#M10
//# A key whose row has passed its expiry is free: no request is refused on an expired row.
#[test]
fn pre_fix_keeps_an_expired_key_dead_but_blocking() {
    assert_eq!(
        shortest_words("pre-fix", &[], None, M10_EXPIRED_FREE),
        [
            "C1 POST /transfers Idempotency-Key k fp A",
            "C1: claim k answers a database error -> 503 (the claim did commit: k is processing with no owner)",
            "C2 POST /transfers Idempotency-Key k fp A",
            "the clock ticks to 1",
            "the clock ticks to 2",
            "C2: claim k -> 409 in flight (the row had EXPIRED)",
        ]
    );
    // Without rows nobody owns (no claim fault, cancellation or finalize fault) and with one
    // fingerprint: the expired success is replayed instead of freed.
    const WITHOUT_OWNERLESS_ROWS: &[(&str, u32)] = &[
        ("claim_faults", 0),
        ("cancellations", 0),
        ("finalize_faults", 0),
        ("fingerprints", 1),
    ];
    assert_eq!(
        shortest_words("pre-fix", WITHOUT_OWNERLESS_ROWS, None, M10_EXPIRED_FREE)[3..],
        [
            "C1: middleware reads the body, will finalize succeeded(full) and send the handler's body",
            "C1: finalize succeeded(full) applied (finalizer generation 1, row generation 1)",
            "C2 POST /transfers Idempotency-Key k fp A",
            "the clock ticks to 1",
            "the clock ticks to 2",
            "C2: claim k -> replay of succeeded(full) -> 200, idempotency-replayed: true (the row had EXPIRED)",
        ]
    );
}

//= specs/idempotency-middleware.md#M2
//# A cached success holds the complete body, at most the cap, or the too-large sentinel.
#[test]
fn pre_fix_poisons_the_cache_with_an_empty_body() {
    assert_eq!(
        shortest_words("pre-fix", &[], None, "M2 no-poison"),
        [
            "C1 POST /transfers Idempotency-Key k fp A",
            "C1: claim k inserts a processing row, generation 1",
            "C1: handler returns 200, body fails before the cap",
            "C1: middleware reads the body, will finalize succeeded(full) with an EMPTY body and send an EMPTY body",
            "C1: finalize succeeded(full) with an EMPTY body applied (finalizer generation 1, row generation 1)",
        ]
    );
}

//= specs/idempotency-middleware.md#M3
//# After a 2xx the row ends succeeded with the full body or the sentinel; never failed, never left processing.
#[test]
fn pre_fix_leaves_a_row_processing_when_the_client_cancels_after_the_2xx() {
    assert_eq!(
        shortest_words("pre-fix", &[], None, M3_TERMINAL_RULE),
        [
            "C1 POST /transfers Idempotency-Key k fp A",
            "C1: claim k inserts a processing row, generation 1",
            "C1: handler returns 200, body under the cap",
            "C1 cancels (drops the response future) while the middleware reads the body",
        ]
    );
}

/// A finalize retried after an unknown outcome that did commit: meanwhile the failed row was
/// claimed again, and the unfenced retry overwrites the newer claim.
//= specs/idempotency-middleware.md#M8
//# Every finalize is conditional on its claim's generation and on the row still processing.
#[test]
fn fixed_lets_a_stale_finalizer_overwrite_the_newer_claim() {
    assert_eq!(
        shortest_words("fixed", &[], None, "M8 fencing"),
        [
            "C1 POST /transfers Idempotency-Key k fp A",
            "C1: claim k inserts a processing row, generation 1",
            "C1: handler returns an error instead of a response",
            "C1: finalize failed answered an error, outcome unknown (it did commit) (finalizer generation 1, row generation 1)",
            "C2 POST /transfers Idempotency-Key k fp A",
            "C2: claim k takes over the failed row, generation 2",
            "C1: finalize failed applied (finalizer generation 1, row generation 2)",
        ]
    );
}

#[test]
fn sqlite_reads_the_row_in_a_second_statement() {
    assert_eq!(
        shortest_words("fenced", &[("sqlite", 1)], None, "M6 a 409 is answered"),
        [
            "C1 POST /transfers Idempotency-Key k fp A",
            "C1: claim k inserts a processing row, generation 1",
            "C2 POST /transfers Idempotency-Key k fp A",
            "C2: claim k takes nothing (SQLite: the row is read next)",
            "C2: reads row k -> 409 in flight",
        ]
    );
}

/// (mutation, bounds, every violated `always`, the property it targets, its shortest trace's length).
type MutationCase = (
    Mutation,
    &'static [(&'static str, u32)],
    &'static [&'static str],
    &'static str,
    usize,
);

/// Every `always` property fails by observation under a mutated protocol step of `renewed`
/// (the variant where all hold): (mutation, bounds, every violated property, the property's
/// shortest counterexample length).
//= specs/idempotency-middleware.md#M1
//# The handler runs only for the request that won the atomic claim of its key.
//= specs/idempotency-middleware.md#M4
//# A replay returns the stored status and body, or the sentinel response, marked as a replay.
//= specs/idempotency-middleware.md#M7
//# The first client receives exactly the frames the handler produced, over-cap tail and trailers included.
#[test]
fn each_mutated_step_is_caught_by_observation() {
    use Mutation::*;
    let cases: &[MutationCase] = &[
        (
            HeartbeatStopsAtResponse,
            &[],
            &[M1_AT_MOST_ONCE],
            M1_AT_MOST_ONCE,
            7,
        ),
        (
            ClaimTakesSucceeded,
            &[],
            &[M1_AT_MOST_ONCE],
            M1_AT_MOST_ONCE,
            8,
        ),
        (CaptureTruncates, &[], &["M2 no-poison"], "M2 no-poison", 5),
        (
            BodyErrorFinalizesFailed,
            &[],
            &[M1_AT_MOST_ONCE, M3_TERMINAL_RULE],
            M3_TERMINAL_RULE,
            5,
        ),
        (
            NoDropGuard,
            &[],
            &[M1_AT_MOST_ONCE, M3_TERMINAL_RULE],
            M3_TERMINAL_RULE,
            4,
        ),
        (
            ReplayUnmarked,
            &[],
            &["M4 replay-fidelity"],
            "M4 replay-fidelity",
            7,
        ),
        (
            ClaimIgnoresFingerprint,
            &[],
            &[M1_AT_MOST_ONCE, "M5 fingerprint"],
            "M5 fingerprint",
            4,
        ),
        (
            ClaimIgnoresLease,
            &[],
            &[M1_AT_MOST_ONCE, "M6 in-flight"],
            "M6 in-flight",
            4,
        ),
        (
            UnknownFinalizeEmptiesBody,
            ALL_ATTEMPTS_FAIL,
            &[M1_AT_MOST_ONCE, "M4 replay-fidelity", "M7 live-body"],
            "M7 live-body",
            9,
        ),
        (FinalizeUnfenced, &[], &["M8 fencing"], "M8 fencing", 7),
        (
            CacheNonSuccess,
            &[],
            &["M2 no-poison", "M9 non-2xx passthrough"],
            "M9 non-2xx passthrough",
            5,
        ),
        (
            NonSuccessNotFinalized,
            &[],
            &["M9 non-2xx passthrough"],
            "M9 non-2xx passthrough",
            4,
        ),
        (
            ExpiryByCleanupOnly,
            &[],
            &[M10_EXPIRED_FREE],
            M10_EXPIRED_FREE,
            6,
        ),
        // The over-cap tail follows an empty head: what the client got is not the handler's.
        (
            OverCapLiveEmptied,
            &[],
            &["M7 live-body"],
            "M7 live-body",
            6,
        ),
        // The replay serves a body the table never held for its origin.
        (
            SentinelReplayedFull,
            &[],
            &["M4 replay-fidelity"],
            "M4 replay-fidelity",
            7,
        ),
        // An abandoned finalize is judged on its statements' errors, not on the layer's verdict.
        (
            FinalizeGivesUpEarly,
            &[],
            &[M1_AT_MOST_ONCE, M3_TERMINAL_RULE, "M9 non-2xx passthrough"],
            M3_TERMINAL_RULE,
            5,
        ),
    ];
    for (mutation, overrides, always_violated, property, steps) in cases {
        let report = check_at("renewed", overrides, Some(*mutation));
        assert_eq!(violated(&report), *always_violated, "{mutation:?}");
        assert_eq!(
            shortest_words("renewed", overrides, Some(*mutation), property).len(),
            *steps,
            "{mutation:?}"
        );
    }
    // M3's "never failed" half: a body error after a 2xx recorded failed.
    assert_eq!(
        shortest_words(
            "renewed",
            &[],
            Some(BodyErrorFinalizesFailed),
            M3_TERMINAL_RULE
        )
        .last()
        .unwrap(),
        "C1: finalize failed applied (finalizer generation 1, row generation 1)"
    );
    // M9's "recorded failed" half: a non-2xx passed through with its row left processing.
    assert_eq!(
        shortest_words(
            "renewed",
            &[],
            Some(NonSuccessNotFinalized),
            "M9 non-2xx passthrough"
        )
        .last()
        .unwrap(),
        "C1: middleware reads the body and returns it without finalizing"
    );
    // M5 and M6 are caught on the handler runs: the second claim ran over another fingerprint /
    // a live lease.
    assert_eq!(
        shortest_words("renewed", &[], Some(ClaimIgnoresLease), "M6 in-flight")
            .last()
            .unwrap(),
        "C2: claim k takes over a LIVE lease, generation 2"
    );
}

/// The steps that make `atomic` and `fail-closed` keep M1, each mutated: the effects committed
/// at the handler's answer instead of with the row, and a reconciler that resolves a claim whose
/// (stalled) process still works on it. Each is caught by M1 on what the table and the handler
/// runs show.
//= specs/idempotency-middleware.md#M1
//# The handler runs only for the request that won the atomic claim of its key.
#[test]
fn the_steps_that_keep_m1_in_atomic_and_fail_closed_are_caught_mutated() {
    use Mutation::*;
    for (variant, mutation, always_violated, steps) in [
        // Without the drop guard `atomic` leaves no sentinel either: M3 sees the committed
        // effects under a processing row.
        (
            "atomic",
            AtomicEffectsCommitAtResponse,
            &[M1_AT_MOST_ONCE, M3_TERMINAL_RULE][..],
            8,
        ),
        // The stalled run commits after the reconciler marked its row failed: M3 sees it too.
        (
            "fail-closed",
            ReconcilerDoesNotWait,
            &[M1_AT_MOST_ONCE, M3_TERMINAL_RULE][..],
            9,
        ),
    ] {
        let overrides = &[("process_faults", 1)];
        let report = check_at(variant, overrides, Some(mutation));
        assert_eq!(violated(&report), always_violated, "{mutation:?}");
        let words = shortest_words(variant, overrides, Some(mutation), M1_AT_MOST_ONCE);
        println!("{mutation:?}: {words:#?}");
        assert_eq!(words.len(), steps, "{mutation:?}");
    }
}

#[test]
fn bad_bounds_and_variants_name_the_valid_ones() {
    let error = IdempotencyModel::build(
        "nope",
        &IdempotencyModel::resolve_bounds("fenced", &[]).unwrap(),
    );
    assert!(matches!(error, Err(SpecError::UnknownVariant { .. })));
    let error = IdempotencyModel::resolve_bounds("fenced", &[("clients".into(), 9)]);
    assert!(matches!(error, Err(SpecError::BoundOutOfRange { .. })));
}
