use super::*;
use crate::check::{run, CheckOptions, CheckReport};
use std::collections::{BTreeSet, VecDeque};

use Verdict::{Holds, Reached, Unreached, Violated};

fn model(variant: &str, overrides: &[(&str, u32)]) -> TokenModel {
    let overrides: Vec<(String, u32)> = overrides
        .iter()
        .map(|(key, value)| (key.to_string(), *value))
        .collect();
    TokenModel::build(
        variant,
        &Bounds::resolve(TokenModel::BOUNDS, &overrides).unwrap(),
    )
    .unwrap()
}

/// Single-threaded, so the run is deterministic and its state counts can be pinned; polled
/// often so that small runs do not wait out the default progress interval.
fn check(model: TokenModel) -> CheckReport {
    run(
        model,
        &CheckOptions {
            threads: 1,
            progress_interval_millis: 10,
            ..Default::default()
        },
        &mut |_| {},
    )
}

/// The verdict table of `specs/tokened-writes.md`, columns tokened, tokenless, late-retry.
const TABLE: &[(&str, [Verdict; 3])] = &[
    (T1_EXACTLY_ONCE, [Holds, Violated, Violated]),
    (T1_RETRY_WITHIN_WINDOW, [Reached, Reached, Unreached]),
    (T2_MISMATCH, [Holds, Holds, Holds]),
    (T2_MISMATCH_REJECTED, [Reached, Unreached, Unreached]),
    (T3_ATOMIC, [Holds, Holds, Holds]),
    (T3_LOST_AFTER_COMMIT, [Reached, Reached, Reached]),
    (T3_READ_BACK_WHOLE, [Reached, Reached, Reached]),
    (T4_HONEST_RETRY, [Holds, Holds, Holds]),
    (T4_ADD_DOUBLE_APPLIED, [Reached, Reached, Reached]),
    (T4_FIXED_PUT_CONVERGES, [Reached, Reached, Reached]),
    (T4_CREATE_CONDITION_FAILURE, [Reached, Reached, Reached]),
    (T4_UNTOKENED_REEXECUTES, [Unreached, Reached, Unreached]),
    (T4_TOKENED_REPLAY, [Reached, Unreached, Unreached]),
    (T4_EXPIRED_REEXECUTES, [Unreached, Unreached, Reached]),
    (T5_BAD_TOKEN, [Holds, Holds, Holds]),
    (T5_LONG_TOKEN_REJECTED, [Unreached, Unreached, Unreached]),
    (T5_DAMAGED_RECORD_REFUSED, [Reached, Unreached, Reached]),
    (liveness::T6_OUTCOME_KNOWN, [Holds, Holds, Holds]),
];

/// Checks one variant at the CI bounds against [`TABLE`] and its pinned unique state count.
fn assert_variant(variant: &str, unique_states: usize) -> CheckReport {
    let column = TokenModel::VARIANTS
        .iter()
        .position(|name| *name == variant)
        .unwrap();
    let report = check(model(variant, &[]));
    assert!(
        report.complete,
        "{variant}: the run must exhaust the state space"
    );
    let table: Vec<(&str, Verdict)> = TABLE
        .iter()
        .map(|(name, verdicts)| (*name, verdicts[column]))
        .collect();
    let verdicts: Vec<(&str, Verdict)> = report
        .properties
        .iter()
        .map(|p| (p.name, p.verdict))
        .collect();
    assert_eq!(
        verdicts, table,
        "{variant}: verdicts differ from the spec's table"
    );
    assert!(
        report.matches_expectations(),
        "{variant}: `expected` disagrees with the spec's table"
    );
    assert_eq!(
        report.unique_states, unique_states,
        "{variant}: unique state count changed"
    );
    report
}

/// Breadth-first search for the shortest path to a state where `goal` holds, in the model's
/// order of initial states and actions, so the answer is deterministic. Written here because
/// the stateright 0.31 BFS checker overwrites a property's discovery on every later matching
/// state, so the trace `check::run` reports is a counterexample but not the shortest one.
fn shortest_path(
    model: &TokenModel,
    goal: &dyn Fn(&TokenModel, &TokenState) -> bool,
) -> Option<Vec<String>> {
    let mut seen: BTreeSet<TokenState> = BTreeSet::new();
    let mut queue: VecDeque<(TokenState, Vec<String>)> = VecDeque::new();
    for init in model.init_states() {
        if seen.insert(init.clone()) {
            queue.push_back((init, Vec::new()));
        }
    }
    while let Some((state, path)) = queue.pop_front() {
        if goal(model, &state) {
            return Some(path);
        }
        let mut actions = Vec::new();
        model.actions(&state, &mut actions);
        for action in actions {
            let Some(next) = model.next_state(&state, action.clone()) else {
                continue;
            };
            if seen.insert(next.clone()) {
                let mut longer = path.clone();
                longer.push(model.step_words(&state, &action, &next));
                queue.push_back((next, longer));
            }
        }
    }
    None
}

/// The properties of a run whose verdict differs from the honest model's expectation.
fn deviations(report: &CheckReport) -> Vec<(&'static str, Verdict)> {
    report
        .properties
        .iter()
        .filter(|p| !p.matches())
        .map(|p| (p.name, p.verdict))
        .collect()
}

fn mutated(variant: &str, mutation: Mutation) -> CheckReport {
    mutated_at(variant, &[], mutation)
}

fn mutated_at(variant: &str, overrides: &[(&str, u32)], mutation: Mutation) -> CheckReport {
    let report = check(model(variant, overrides).with_mutation(Some(mutation)));
    assert!(
        report.complete,
        "{variant} with {mutation:?}: the run must exhaust the state space"
    );
    report
}

//= specs/tokened-writes.md#Verdicts
//# With the token and identical retries inside the window, T1, T2, T3 and T4 hold.
#[test]
fn tokened_verdicts_and_state_count() {
    assert_variant("tokened", 283_295);
}

//= specs/tokened-writes.md#Verdicts
//# Without a token, a retry after a lost commit executes the transaction again: T1 is violated.
#[test]
fn tokenless_verdicts_and_state_count() {
    assert_variant("tokenless", 59_193);
}

//= specs/tokened-writes.md#Verdicts
//# A retry after the window is a new request and executes again: T1 is violated.
#[test]
fn late_retry_verdicts_and_state_count() {
    assert_variant("late-retry", 55_999);
}

//= specs/tokened-writes.md#T1
//# A transaction intent is applied at most once, and a client told success finds it applied.
#[test]
fn tokenless_t1_shortest_counterexample() {
    let path = shortest_path(&model("tokenless", &[]), &|model, state| {
        !t1_exactly_once(model, state)
    });
    assert_eq!(
        path.unwrap(),
        [
            "C1 sends TransactWriteItems{ADD balance 5 on A, B} without token",
            "server starts C1's attempt 1: locks A, B",
            "server commits C1's attempt 1",
            "response to C1 lost (attempt 1)",
            "C1 retries without a token: TransactWriteItems{ADD balance 5 on A, B} without token",
            "server starts C1's attempt 2: locks A, B",
            "server commits C1's attempt 2",
        ]
    );
}

//= specs/tokened-writes.md#T1
//# A transaction intent is applied at most once, and a client told success finds it applied.
#[test]
fn late_retry_t1_shortest_counterexample() {
    let path = shortest_path(&model("late-retry", &[]), &|model, state| {
        !t1_exactly_once(model, state)
    });
    assert_eq!(
        path.unwrap(),
        [
            "C1 sends TransactWriteItems{ADD balance 5 on A, B} token t1",
            "server starts t1 (attempt 1 of C1): locks A, B, records t1 as running",
            "server commits t1 (attempt 1 of C1)",
            "response to C1 lost (attempt 1)",
            "clock ticks to 1",
            "clock passes the 10-minute window of t1 (now 2)",
            "C1 retries with token t1 (identical request)",
            "server starts t1 (attempt 2 of C1): locks A, B, records t1 as running",
            "server commits t1 (attempt 2 of C1)",
        ]
    );
}

//= specs/tokened-writes.md#T4
//# Some tokened retry inside the window is answered success without applying anything.
#[test]
fn tokened_replay_shortest_example() {
    let path = shortest_path(&model("tokened", &[]), &t4_tokened_replay);
    assert_eq!(
        path.unwrap(),
        [
            "C1 sends TransactWriteItems{ADD balance 5 on A, B} token t1",
            "server starts t1 (attempt 1 of C1): locks A, B, records t1 as running",
            "server commits t1 (attempt 1 of C1)",
            "response to C1 lost (attempt 1)",
            "C1 retries with token t1 (identical request)",
            "server finds t1 live: answers success for t1 (attempt 2 of C1), applies nothing",
        ]
    );
}

//= specs/tokened-writes.md#T2
//# A request that meets a live or running token of other parameters is answered IdempotentParameterMismatch and applies nothing.
#[test]
fn ignoring_the_fingerprint_breaks_t2() {
    let report = mutated("tokened", Mutation::IgnoreFingerprint);
    assert_eq!(
        deviations(&report),
        [(T2_MISMATCH, Violated), (T2_MISMATCH_REJECTED, Unreached)]
    );
}

//= specs/tokened-writes.md#T3
//# No state of the table, and no reconciliation read, shows some items of a transaction applied more often than others.
#[test]
fn committing_items_one_by_one_breaks_t3() {
    let report = mutated("tokened", Mutation::CommitItemsOneByOne);
    assert_eq!(deviations(&report), [(T3_ATOMIC, Violated)]);
}

//= specs/tokened-writes.md#T4
//# An identical retry of a write that committed but lost its response gets the answer and the effect the retry table gives for the client's pattern.
#[test]
fn receipts_spanning_requests_break_t4() {
    // A success that changed nothing without a live identical token: observed, whatever the
    // pattern (here ADD, fixed put and the tokenless transaction).
    for variant in ["tokenless", "tokened"] {
        let report = mutated(variant, Mutation::ReceiptsSpanRequests);
        assert_eq!(
            deviations(&report),
            [
                (T4_HONEST_RETRY, Violated),
                (T4_CREATE_CONDITION_FAILURE, Unreached)
            ],
            "{variant}"
        );
    }
}

//= specs/tokened-writes.md#T3
//# Some transaction commits and its response is lost: the outcome is unknown to the client.
#[test]
fn timeouts_that_cancel_requests_leave_no_unknown_outcome() {
    let report = mutated("tokened", Mutation::TimeoutsCancelRequests);
    assert_eq!(
        deviations(&report),
        [
            (T1_RETRY_WITHIN_WINDOW, Unreached),
            (T2_MISMATCH_REJECTED, Unreached),
            (T3_LOST_AFTER_COMMIT, Unreached),
            (T3_READ_BACK_WHOLE, Unreached),
            (T4_ADD_DOUBLE_APPLIED, Unreached),
            (T4_FIXED_PUT_CONVERGES, Unreached),
            (T4_CREATE_CONDITION_FAILURE, Unreached),
            (T4_TOKENED_REPLAY, Unreached),
            (T5_DAMAGED_RECORD_REFUSED, Unreached),
        ]
    );
    // The same false belief makes a late retry look safe: T1 would hold, so the late-retry
    // verdict depends on responses being lost after commit.
    let report = mutated("late-retry", Mutation::TimeoutsCancelRequests);
    assert!(deviations(&report).contains(&(T1_EXACTLY_ONCE, Holds)));
    assert!(deviations(&report).contains(&(T4_EXPIRED_REEXECUTES, Unreached)));
}

//= specs/tokened-writes.md#Verdicts
//# Where a bound removes a case, the expectation follows the bound.
#[test]
fn expectations_follow_bounds() {
    let cases: &[(&str, &[(&str, u32)])] = &[
        ("tokened", &[("retries", 0)]),
        ("tokenless", &[("retries", 0)]),
        ("late-retry", &[("retries", 0)]),
        ("late-retry", &[("ticks", 1)]),
        ("late-retry", &[("retries", 2), ("clients", 1)]),
        ("tokened", &[("retries", 2), ("clients", 1)]),
        ("tokened", &[("damaged_records", 0)]),
        ("late-retry", &[("skew", 1), ("clients", 1)]),
        ("tokened", &[("skew", 2), ("clients", 1)]),
    ];
    for (variant, overrides) in cases {
        let report = check(model(variant, overrides));
        assert!(
            report.complete && report.matches_expectations(),
            "{variant} {overrides:?}: {:?}",
            deviations(&report)
        );
    }
}

//= specs/tokened-writes.md#T1
//# A transaction intent is applied at most once, and a client told success finds it applied.
#[test]
fn a_host_clock_ahead_expires_a_live_token() {
    let bounds: &[(&str, u32)] = &[("clients", 1), ("skew", 1)];
    let report = check(model("tokened", bounds));
    assert!(
        report.complete && report.matches_expectations(),
        "{:?}",
        deviations(&report)
    );
    assert_eq!(report.unique_states, 3_450);
    let path = shortest_path(&model("tokened", bounds), &|model, state| {
        !t1_exactly_once(model, state)
    });
    assert_eq!(
        path.unwrap(),
        [
            "C1 sends TransactWriteItems{ADD balance 5 on A, B} token t1 via H1 (its clock reads 0)",
            "server starts t1 (attempt 1 of C1): locks A, B, records t1 as running",
            "server commits t1 (attempt 1 of C1)",
            "response to C1 lost (attempt 1)",
            "clock ticks to 1",
            "C1 retries with token t1 (identical request) via H2 (its clock reads 2)",
            "server starts t1 (attempt 2 of C1): locks A, B, records t1 as running",
            "server commits t1 (attempt 2 of C1)",
        ]
    );
}

//= specs/tokened-writes.md#T1
//# A transaction intent is applied at most once, and a client told success finds it applied.
#[test]
fn two_intents_sharing_a_token_lose_the_second() {
    let report = check(model("tokened", &[("shared_token", 1)]));
    assert!(
        report.complete && report.matches_expectations(),
        "{:?}",
        deviations(&report)
    );
    assert_eq!(report.unique_states, 270_964);
    let path = shortest_path(
        &model("tokened", &[("shared_token", 1)]),
        &|model, state| !t1_exactly_once(model, state),
    );
    assert_eq!(
        path.unwrap(),
        [
            "C1 sends TransactWriteItems{ADD balance 5 on A, B} token t1",
            "server starts t1 (attempt 1 of C1): locks A, B, records t1 as running",
            "server commits t1 (attempt 1 of C1)",
            "C2 sends TransactWriteItems{ADD balance 5 on A, B} token t1",
            "server finds t1 live: answers success for t1 (attempt 1 of C2), applies nothing",
            "C2 receives Success for attempt 1",
        ]
    );
}

//= specs/tokened-writes.md#T5
//# A request whose token is over 36 characters, or whose token record has no valid timestamp, is refused and applies nothing.
#[test]
fn bad_tokens_fail_closed() {
    let report = check(model("tokened", &[("long_tokens", 1)]));
    assert!(
        report.complete && report.matches_expectations(),
        "{:?}",
        deviations(&report)
    );
    assert_eq!(report.unique_states, 366_561);
    let refused = shortest_path(&model("tokened", &[]), &t5_damaged_record_refused);
    assert_eq!(
        refused.unwrap()[4..],
        [
            "C1 retries with token t1 (identical request)",
            "the record of token t1 loses its valid creation timestamp",
            "server rejects t1 (attempt 2 of C1): InternalServerError",
        ]
    );
    // The clock never deletes a damaged record: it is neither live nor expired.
    let honest = model("tokened", &[]);
    let mut state = honest.init_states().remove(0);
    state.tokens.insert(
        0,
        TokenRecord {
            rebuilt: false,
            phase: TokenPhase::InvalidTimestamp,
        },
    );
    for _ in 0..2 {
        state = honest.next_state(&state, Action::ClockTicks).unwrap();
    }
    assert_eq!(state.tokens[&0].phase, TokenPhase::InvalidTimestamp);
}

//= specs/tokened-writes.md#T5
//# A request whose token is over 36 characters, or whose token record has no valid timestamp, is refused and applies nothing.
#[test]
fn the_reach_bound_set_checks_the_malformed_token_half_of_t5() {
    let set = &BOUND_SETS[0];
    assert_eq!(
        (set.name, set.variant, set.reaches),
        ("reach", "tokened", &["T5"][..])
    );
    let ci = check(model("tokened", &[]));
    assert_eq!(ci.property(T5_LONG_TOKEN_REJECTED).verdict, Unreached);
    let reach = check(model(set.variant, set.overrides));
    assert!(reach.complete && reach.matches_expectations());
    for name in [T5_LONG_TOKEN_REJECTED, T5_DAMAGED_RECORD_REFUSED] {
        assert_eq!(reach.property(name).verdict, Reached, "{name}");
    }
}

//= specs/tokened-writes.md#T5
//# A request whose token is over 36 characters, or whose token record has no valid timestamp, is refused and applies nothing.
#[test]
fn bad_tokens_that_run_break_t5() {
    let report = mutated_at(
        "tokened",
        &[("long_tokens", 1)],
        Mutation::LongTokenTruncated,
    );
    assert_eq!(
        deviations(&report),
        [
            (T1_EXACTLY_ONCE, Violated),
            (T5_BAD_TOKEN, Violated),
            (T5_LONG_TOKEN_REJECTED, Unreached)
        ]
    );
    let report = mutated("tokened", Mutation::DamagedRecordReadAsExpired);
    assert_eq!(
        deviations(&report),
        [
            (T1_EXACTLY_ONCE, Violated),
            (T5_BAD_TOKEN, Violated),
            (T5_DAMAGED_RECORD_REFUSED, Unreached)
        ]
    );
    let path = shortest_path(
        &model("tokened", &[]).with_mutation(Some(Mutation::DamagedRecordReadAsExpired)),
        &|model, state| !t5_bad_token(model, state),
    );
    assert_eq!(
        path.unwrap().last().unwrap(),
        "server starts t1 (attempt 2 of C1): locks A, B, records t1 as running"
    );
}

//= specs/tokened-writes.md#Bounds
//# An unknown variant or an out-of-range bound is refused with the valid choices named.
#[test]
fn bad_input_names_the_valid_choices() {
    let bounds = Bounds::resolve(TokenModel::BOUNDS, &[]).unwrap();
    let error = TokenModel::build("tokenful", &bounds).err().unwrap();
    assert_eq!(
        error.to_string(),
        "unknown variant `tokenful` of model `token`; valid variants: tokened, tokenless, late-retry"
    );
    let error = Bounds::resolve(TokenModel::BOUNDS, &[("window".to_string(), 9)]).unwrap_err();
    assert_eq!(
        error.to_string(),
        "bound window=9 is out of range; valid range: 1..=4"
    );
}
