//! Relay model tests: the verdict table at the CI bounds, pinned unique state counts, the exact
//! shortest counterexamples, and one seeded mutation per property showing it can fail.

use super::*;
use crate::check::{self, shortest_paths, steps_of, CheckOptions, CheckReport};
use std::collections::BTreeSet;

fn ci_model(variant: &str) -> RelayModel {
    let bounds = RelayModel::resolve_bounds(variant, &[]).unwrap();
    RelayModel::build(variant, &bounds).unwrap()
}

fn model_with(variant: &str, overrides: &[(&str, u32)]) -> RelayModel {
    let overrides: Vec<(String, u32)> = overrides
        .iter()
        .map(|(key, value)| (key.to_string(), *value))
        .collect();
    let bounds = RelayModel::resolve_bounds(variant, &overrides).unwrap();
    RelayModel::build(variant, &bounds).unwrap()
}

fn check(model: RelayModel) -> CheckReport {
    check::run(model, &CheckOptions::default(), &mut |_| {})
}

fn assert_matches_expectations(report: &CheckReport) {
    for property in &report.properties {
        assert_eq!(
            property.verdict, property.expected,
            "{}/{}: {} is {} but expected {}",
            report.model, report.variant, property.name, property.verdict, property.expected
        );
    }
    assert!(report.complete);
}

/// The properties a complete run violates or reaches, without shortest traces: what the
/// reduced and unreduced models must agree on.
fn discoveries(model: RelayModel) -> BTreeSet<&'static str> {
    use stateright::Checker;
    let names: Vec<&'static str> = model.property_defs().iter().map(|def| def.name).collect();
    let checker = model.checker().spawn_bfs().join();
    let found = checker.discoveries();
    names
        .into_iter()
        .filter(|name| found.contains_key(name))
        .collect()
}

/// Unique states of a complete run, without shortest traces.
fn unique_states(model: RelayModel) -> usize {
    use stateright::Checker;
    model.checker().spawn_bfs().join().unique_state_count()
}

/// The shortest path to a state satisfying `condition`, in protocol words.
fn shortest_to(
    model: &RelayModel,
    condition: fn(&RelayModel, &RelayState) -> bool,
) -> Option<Vec<String>> {
    let found = shortest_paths(model, &[("wanted", condition, true)]);
    found.get("wanted").map(|pairs| {
        steps_of(model, pairs)
            .into_iter()
            .map(|step| step.words)
            .collect()
    })
}

fn trace_words(report: &CheckReport, name: &str) -> Vec<String> {
    let trace = report
        .property(name)
        .trace
        .as_ref()
        .unwrap_or_else(|| panic!("{name} has no trace"));
    trace.iter().map(|step| step.words.clone()).collect()
}

/// The shortest path to a violation of one `always` property, searched without a full check.
fn shortest_violation(model: &RelayModel, name: &'static str) -> Option<Vec<String>> {
    let def = model
        .property_defs()
        .into_iter()
        .find(|def| def.name == name)
        .expect("a known property");
    let found = shortest_paths(model, &[(def.name, def.condition, false)]);
    found.get(name).map(|pairs| {
        steps_of(model, pairs)
            .into_iter()
            .map(|step| step.words)
            .collect()
    })
}

//= specs/relay-append.md#R1
//# A puller that stored cursor k has received every op that is or will ever be stored at a seq <= k.
#[test]
fn add_era_loses_an_op_at_the_ci_bounds_where_a_re_push_is_present() {
    let report = check(ci_model("add-era"));
    assert_matches_expectations(&report);
    assert_eq!(report.unique_states, 1923);
    // A (W1's b) allocates 2, B allocates above it (W2's re-push of a burns 3, d gets 4) and
    // commits, the puller gets [1, 4] and stores 4, then A's op lands at 2, below the cursor.
    assert_eq!(
        trace_words(&report, "R1 no-skip"),
        vec![
            "W1 (ADD-era) UpdateItem ADD next_seq 1 -> 1",
            "W1 (ADD-era) sends TransactWriteItems{claim a, put op 1 = a} -> committed",
            "W1 (ADD-era) receives committed: a stored at 1",
            "W1 (ADD-era) UpdateItem ADD next_seq 1 -> 2",
            "W2 (ADD-era) UpdateItem ADD next_seq 1 -> 3",
            "W2 (ADD-era) sends TransactWriteItems{claim a, put op 3 = a} -> cancelled [ConditionalCheckFailed(old claimed seq 1), None]",
            "W2 (ADD-era) receives cancelled [ConditionalCheckFailed(old claimed seq 1), None]: claim exists: read it back",
            "W2 (ADD-era) Query claim a -> claimed seq 1",
            "W2 (ADD-era) UpdateItem ADD next_seq 1 -> 4",
            "W2 (ADD-era) sends TransactWriteItems{claim d, put op 4 = d} -> committed",
            "W2 (ADD-era) receives committed: d stored at 4",
            "P1 Query seq>0 limit 2 -> [1, 4]; P1 stores cursor 4",
            "W1 (ADD-era) sends TransactWriteItems{claim b, put op 2 = b} -> committed",
        ]
    );
}

//= specs/relay-append.md#R1
//# A puller that stored cursor k has received every op that is or will ever be stored at a seq <= k.
#[test]
fn add_era_loses_an_op_exactly_as_the_original_bug_report_reproduced_it() {
    // Without the re-push the shortest violation is the reported shape: A allocates 1, B
    // allocates 2 and commits, the puller gets [2] and stores cursor 2, A's op lands at 1.
    let report = check(model_with("add-era", &[("repush_ops", 0)]));
    assert_matches_expectations(&report);
    assert_eq!(
        trace_words(&report, "R1 no-skip"),
        vec![
            "W1 (ADD-era) UpdateItem ADD next_seq 1 -> 1",
            "W2 (ADD-era) UpdateItem ADD next_seq 1 -> 2",
            "W2 (ADD-era) sends TransactWriteItems{claim c, put op 2 = c} -> committed",
            "W2 (ADD-era) receives committed: c stored at 2",
            "P1 Query seq>0 limit 2 -> [2]; P1 stores cursor 2",
            "W1 (ADD-era) sends TransactWriteItems{claim a, put op 1 = a} -> committed",
        ]
    );
}

#[test]
fn counter_only_loses_an_op_through_the_visibility_window() {
    let report = check(ci_model("counter-only"));
    assert_matches_expectations(&report);
    assert_eq!(report.unique_states, 21_404);
    // The counter item of T1 becomes visible before its op; T2 conditions on it and commits;
    // the puller sees op 2 alone while op 1 is still pending.
    assert_eq!(
        trace_words(&report, "R1 no-skip"),
        vec![
            "W1 Query seq=0 (consistent) -> next_seq 0",
            "W1 sends TransactWriteItems{counter 0->1, claim a, put op 1 = a} -> committed",
            "W1 receives committed: a stored at 1",
            "counter applied (next_seq 1)",
            "W1 sends TransactWriteItems{counter 1->2, claim b, put op 2 = b} -> committed",
            "W1 receives committed: b stored at 2",
            "op 2 applied (op_id b)",
            "P1 Query seq>0 limit 2 -> [2]; P1 stores cursor 2",
        ]
    );
}

//= specs/relay-append.md#R1
//# A puller that stored cursor k has received every op that is or will ever be stored at a seq <= k.
#[test]
fn counter_only_holds_no_skip_when_the_window_is_closed() {
    // The same variant and bounds with every committed transaction visible at once: the
    // counter condition alone then orders what pullers see. The window is what breaks it.
    let report = check(model_with("counter-only", &[("window", 0)]));
    assert_eq!(report.property("R1 no-skip").verdict, Verdict::Holds);
    assert!(report.complete);
}

#[test]
fn fixed_holds_every_requirement_and_reaches_every_interesting_state() {
    let model = ci_model("fixed");
    // The acceptance floor of the CI bounds: two writers, two ops each, a re-push, a puller
    // with three pulls, the legacy gap among the initial tables.
    assert!(model.writers.len() >= 2);
    assert!(model.writers.iter().all(|(_, push)| push.len() >= 2));
    assert!(model.bounds.repush_ops >= 1);
    assert!(model.bounds.push_rounds_max > 0, "the push deadline is on");
    assert!(model.bounds.pulls_per_puller >= 3);
    assert!(model.bounds.legacy.contains(&Legacy::Gap));
    let report = check(model);
    assert_matches_expectations(&report);
    // The stream fold and truncation are bounded away at these bounds (their own tests run
    // them); everything else, the lost response included, is reached.
    let bounded_away = [
        "R8 reach: the fold watermark passes two new ops",
        "R8 reach: a stream record arrives before a lower one",
        "R9 reach: truncation deletes an op",
    ];
    for property in &report.properties {
        let expected = match property.kind {
            Kind::Always | Kind::Eventually | Kind::LeadsTo => Verdict::Holds,
            Kind::Sometimes if bounded_away.contains(&property.name) => Verdict::Unreached,
            Kind::Sometimes => Verdict::Reached,
        };
        assert_eq!(property.verdict, expected, "{}", property.name);
    }
    assert_eq!(report.unique_states, 532_650);
}

#[test]
fn mixed_fleet_keeps_seqs_unique_and_the_counter_monotonic_but_not_the_order() {
    let report = check(ci_model("mixed"));
    assert_matches_expectations(&report);
    assert_eq!(report.unique_states, 26_398);
    assert_eq!(
        trace_words(&report, "R1 no-skip"),
        vec![
            "W2 (ADD-era) UpdateItem ADD next_seq 1 -> 1",
            "W2 (ADD-era) sends TransactWriteItems{claim a, put op 1 = a} -> committed",
            "W2 (ADD-era) receives committed: a stored at 1",
            "W2 (ADD-era) UpdateItem ADD next_seq 1 -> 2",
            "W2 (ADD-era) sends TransactWriteItems{claim d, put op 2 = d} -> committed",
            "W2 (ADD-era) receives committed: d stored at 2",
            "op 2 applied (op_id d)",
            "P1 Query seq>0 limit 2 -> [2]; P1 stores cursor 2",
        ]
    );
    // R5: the new writer crosses the seq the ADD-era writer holds as if it were a legacy gap.
    assert_eq!(
        trace_words(&report, "R5 dense"),
        vec![
            "W2 (ADD-era) UpdateItem ADD next_seq 1 -> 1",
            "W1 Query seq=0 (consistent) -> next_seq 1",
            "W1 sends TransactWriteItems{counter 1->2, claim a, check op 1 exists, put op 2 = a} -> cancelled [None, None, ConditionalCheckFailed, None]",
            "W1 receives cancelled [None, None, ConditionalCheckFailed, None]: legacy gap below 2: flip the check",
            "W1 sends TransactWriteItems{counter 1->2, claim a, check op 1 absent, put op 2 = a} -> committed",
        ]
    );
}

// --- Seeded mutations: each property fails when the part of the design behind it is removed.

//= specs/relay-append.md#R1
//# A puller that stored cursor k has received every op that is or will ever be stored at a seq <= k.
#[test]
fn dropping_the_predecessor_check_breaks_no_skip() {
    // The seed's first mutation check.
    let model = ci_model("fixed").with_mutation(Mutation::NoPredecessorCheck);
    let trace = shortest_violation(&model, "R1 no-skip")
        .expect("R1 must fail without the predecessor check");
    assert_eq!(
        trace.last().unwrap(),
        "P1 Query seq>0 limit 2 -> [2]; P1 stores cursor 2"
    );
}

//= specs/relay-append.md#R4
//# The counter never moves backwards, also in a mixed fleet with ADD-era writers.
#[test]
fn an_unconditional_counter_set_moves_the_counter_back_in_a_mixed_fleet() {
    // The seed's second mutation check: two ADD-era allocations land between the new writer's
    // counter read and its round, as in the seed's rolling-upgrade test.
    let bounds = [
        ("add_era_writers", 2),
        ("ops_per_writer", 1),
        ("pullers", 0),
    ];
    let mutated = model_with("mixed", &bounds).with_mutation(Mutation::UnconditionalCounterSet);
    let trace = shortest_violation(&mutated, "R4 counter-monotonic")
        .expect("R4 must fail with an unconditional SET");
    assert_eq!(
        trace,
        vec![
            "W1 Query seq=0 (consistent) -> next_seq 0",
            "W2 (ADD-era) UpdateItem ADD next_seq 1 -> 1",
            "W3 (ADD-era) UpdateItem ADD next_seq 1 -> 2",
            "W1 sends TransactWriteItems{counter 0->1, claim a, put op 1 = a} -> committed",
            "counter applied (next_seq 1)",
        ]
    );
    assert!(shortest_violation(&model_with("mixed", &bounds), "R4 counter-monotonic").is_none());
}

//= specs/relay-append.md#R2
//# At most one op per seq; no op is overwritten.
#[test]
fn an_unconditional_op_put_overwrites_an_op() {
    let model = ci_model("fixed").with_mutation(Mutation::UnconditionalOpPut);
    assert!(shortest_violation(&model, "R2 unique-seq").is_some());
}

//= specs/relay-append.md#R3
//# An op_id is stored at most once; every append of it, re-pushes included, answers the same seq.
#[test]
fn without_the_claim_a_re_push_stores_the_op_twice() {
    let model = ci_model("fixed").with_mutation(Mutation::NoClaim);
    assert!(shortest_violation(&model, "R3 once-per-op-id").is_some());
}

//= specs/relay-append.md#R6
//# Every append ends stored or with a typed error; a legacy gap costs one extra round, once.
#[test]
fn without_the_flip_a_legacy_gap_is_paid_again_and_again() {
    let model = model_with("fixed", &[("legacy", 1)]).with_mutation(Mutation::NoFlip);
    let trace =
        shortest_violation(&model, "R6 gap-paid-once").expect("R6 must fail without the flip");
    assert!(
        trace
            .iter()
            .filter(|words| words.contains("check op 2 exists"))
            .count()
            >= 2,
        "{trace:#?}"
    );
}

//= specs/relay-append.md#R7
//# An uncontended n-op push costs n transactions and one counter read.
#[test]
fn reading_the_counter_before_every_op_breaks_carry_forward() {
    let model = ci_model("fixed").with_mutation(Mutation::ReadCounterEveryOp);
    assert!(shortest_violation(&model, "R7 carry-forward").is_some());
}

//= specs/relay-append.md#R4
//# Checked arithmetic: a counter at the top of the seq range is a loud error, never a wrap.
#[test]
fn a_counter_at_the_top_of_the_range_is_a_loud_error() {
    let model = model_with(
        "fixed",
        &[("legacy", 0), ("new_writers", 1), ("repush_ops", 0)],
    );
    let mut state = model.init_states().remove(0);
    state
        .table
        .applied
        .insert(Key::Counter, Value::Counter { next_seq: SEQ_MAX });
    let state = model
        .next_state(&state, Action::WriterReadsCounter { writer: 0 })
        .unwrap();
    let state = model
        .next_state(&state, Action::WriterSendsRound { writer: 0 })
        .unwrap();
    assert_eq!(
        state.writers[0].phase,
        Phase::Failed(AppendError::SeqOverflow)
    );
    assert!(
        state.table.pending.is_empty(),
        "nothing is written past the top"
    );
}

#[test]
fn a_round_knows_its_four_items_in_request_order() {
    let model = model_with("fixed", &[("legacy", 0)]);
    let mut writer = Writer::new();
    writer.counter = Counter::Known(3);
    let (round, items) = model.new_build_round(&writer, 0).unwrap();
    assert_eq!(round.seq, 4);
    let keys: Vec<Key> = items.iter().map(|item| item.key).collect();
    assert_eq!(
        keys,
        vec![Key::Counter, Key::Claim(0), Key::Op(3), Key::Op(4)]
    );
    assert_eq!(items[0].condition, Condition::NextSeqEquals(3));
    assert!(items[0].return_old_on_failure);
    assert_eq!(items[2].condition, Condition::AttributeExists);
    writer.flip = Some(4);
    let (_, flipped) = model.new_build_round(&writer, 0).unwrap();
    assert_eq!(flipped[2].condition, Condition::AttributeNotExists);
    writer.counter = Counter::Known(0);
    writer.flip = None;
    let (_, first) = model.new_build_round(&writer, 0).unwrap();
    assert_eq!(first.len(), 3, "seq 1 has no predecessor check");
}

#[test]
fn bad_bounds_and_variants_name_the_valid_ones() {
    let error = RelayModel::resolve_bounds("fixed", &[("writers".to_string(), 2)]).unwrap_err();
    assert!(
        error.to_string().contains("valid bounds: new_writers"),
        "{error}"
    );
    let error = RelayModel::resolve_bounds("fixd", &[]).unwrap_err();
    assert_eq!(error.to_string(), "unknown variant `fixd` of model `relay`; valid variants: add-era, counter-only, fixed, mixed");
    let error = RelayModel::resolve_bounds("fixed", &[("window".to_string(), 7)]).unwrap_err();
    assert_eq!(
        error.to_string(),
        "bound window=7 is out of range; valid range: 0..=1"
    );
}

// --- Lost responses (specs/relay-append.md, "Lost responses").

//= specs/relay-append.md#R3
//# A lost response is a lost round without a hint: the writer retries the same op in place, and a retry of a committed round answers the seq the op was stored at.
#[test]
fn a_lost_response_is_retried_in_place_and_answered_from_the_claim() {
    let model = model_with(
        "fixed",
        &[
            ("new_writers", 1),
            ("legacy", 0),
            ("pullers", 0),
            ("lost_responses_max", 1),
            ("push_rounds_max", 0),
        ],
    );
    // The response of a's round is lost; the retry re-reads the counter, conflicts while the
    // committed round's items are still pending, and is then answered from the claim.
    let trace = shortest_to(&model, |_, state| {
        state.lost_responses_left == 0
            && state.writers[0].next_op >= 1
            && state.answers.contains_key(&0)
            && state.table.committed_ops().len() == 1
    })
    .expect("the retry answers");
    assert_eq!(trace, vec![
            "W1 Query seq=0 (consistent) -> next_seq 0",
            "W1 sends TransactWriteItems{counter 0->1, claim a, put op 1 = a} -> committed",
            "response to W1 lost after commit: a lost round without a hint, the same op is retried",
            "W1 Query seq=0 (consistent) -> next_seq 0",
            "claim a applied (claimed seq 1)",
            "W1 sends TransactWriteItems{counter 0->1, claim a, put op 1 = a} -> cancelled [TransactionConflict, ConditionalCheckFailed(old claimed seq 1), TransactionConflict]",
            "W1 receives cancelled [TransactionConflict, ConditionalCheckFailed(old claimed seq 1), TransactionConflict]: claim exists: a answered with its seq 1; read the claims of the rest of the push",
        ]);
}

//= specs/relay-append.md#R3
//# An op_id is stored at most once; every append of it, re-pushes included, answers the same seq.
#[test]
fn without_the_claim_a_retried_lost_response_stores_the_op_twice() {
    let bounds = [
        ("new_writers", 1),
        ("legacy", 0),
        ("pullers", 0),
        ("lost_responses_max", 1),
        ("push_rounds_max", 0),
    ];
    let mutated = model_with("fixed", &bounds).with_mutation(Mutation::NoClaim);
    let trace =
        shortest_violation(&mutated, "R3 once-per-op-id").expect("R3 must fail without the claim");
    assert_eq!(trace, vec![
            "W1 Query seq=0 (consistent) -> next_seq 0",
            "W1 sends TransactWriteItems{counter 0->1, claim a, put op 1 = a} -> committed",
            "response to W1 lost after commit: a lost round without a hint, the same op is retried",
            "counter applied (next_seq 1)",
            "W1 Query seq=0 (consistent) -> next_seq 1",
            "op 1 applied (op_id a)",
            "W1 sends TransactWriteItems{counter 1->2, claim a, check op 1 exists, put op 2 = a} -> committed",
        ]);
    assert!(shortest_violation(&model_with("fixed", &bounds), "R3 once-per-op-id").is_none());
}

//= specs/relay-append.md#R3
//# An op_id is stored at most once; every append of it, re-pushes included, answers the same seq.
#[test]
fn every_variant_re_pushes_at_its_ci_bounds() {
    for variant in RelayModel::VARIANTS {
        let model = ci_model(variant);
        let first = model.writers[0].1[0];
        let last = &model.writers[model.writers.len() - 1].1;
        assert_eq!(
            last[0], first,
            "{variant}: the last writer re-pushes the first writer's first op"
        );
        let report = check(model);
        assert_eq!(
            report
                .property("R3 reach: a re-push finds its own claim")
                .verdict,
            Verdict::Reached,
            "{variant}"
        );
    }
}

// --- Reductions (specs/relay-append.md, "Reductions").

#[test]
fn reductions_keep_every_verdict_of_every_variant() {
    let configurations: &[&[(&str, u32)]] = &[
        &[("ops_per_writer", 1), ("pulls_per_puller", 2)],
        &[
            ("ops_per_writer", 1),
            ("pulls_per_puller", 1),
            ("lost_responses_max", 1),
        ],
        &[
            ("ops_per_writer", 2),
            ("pulls_per_puller", 1),
            ("legacy", 1),
            ("push_rounds_max", 3),
            ("stream_folders", 1),
        ],
        &[
            ("ops_per_writer", 1),
            ("repush_ops", 1),
            ("legacy", 2),
            ("truncations_max", 1),
            ("lost_responses_max", 1),
        ],
    ];
    let mut compared = 0;
    for variant in RelayModel::VARIANTS {
        for overrides in configurations {
            let reduced = model_with(variant, overrides);
            let unreduced = model_with(variant, overrides).without_reductions();
            let (smaller, larger) = (
                unique_states(reduced.clone()),
                unique_states(unreduced.clone()),
            );
            assert!(
                smaller <= larger,
                "{variant} {overrides:?}: the reduced model has more states"
            );
            assert_eq!(
                discoveries(reduced),
                discoveries(unreduced),
                "{variant} {overrides:?}"
            );
            compared += 1;
        }
    }
    // A mutation per reduction-sensitive property, so the comparison also covers violations.
    for (mutation, overrides) in [
        (
            Mutation::NoClaim,
            &[("ops_per_writer", 1), ("lost_responses_max", 1)][..],
        ),
        (
            Mutation::TrustingWatermark,
            &[
                ("ops_per_writer", 2),
                ("pulls_per_puller", 1),
                ("stream_folders", 1),
                ("legacy", 0),
            ][..],
        ),
        (
            Mutation::NoPushDeadline,
            &[
                ("ops_per_writer", 2),
                ("pulls_per_puller", 1),
                ("push_rounds_max", 2),
                ("legacy", 1),
            ][..],
        ),
        (
            Mutation::IgnoreHint,
            &[
                ("ops_per_writer", 2),
                ("pulls_per_puller", 1),
                ("legacy", 0),
            ][..],
        ),
    ] {
        let reduced = model_with("fixed", overrides).with_mutation(mutation);
        let unreduced = model_with("fixed", overrides)
            .with_mutation(mutation)
            .without_reductions();
        assert_eq!(
            discoveries(reduced),
            discoveries(unreduced),
            "{mutation:?} {overrides:?}"
        );
        compared += 1;
    }
    assert_eq!(compared, 20);
}

#[test]
fn the_reductions_shrink_the_ci_state_space_of_fixed() {
    // With no response to lose: the first reduction merges a round's send and response only
    // once no loss is left to spend, so this is where both reductions act from the start.
    let no_loss = [("lost_responses_max", 0)];
    let reduced = unique_states(model_with("fixed", &no_loss));
    let unreduced = unique_states(model_with("fixed", &no_loss).without_reductions());
    assert_eq!((reduced, unreduced), (59_658, 374_603));
}

// --- The push deadline (R6), the wrong guess (R7).

//= specs/relay-append.md#R6
//# A push sends no round past its deadline; past it the push ends with the typed deadline error.
#[test]
fn without_the_deadline_check_a_push_sends_rounds_past_it() {
    let bounds = [("push_rounds_max", 2), ("legacy", 1), ("pullers", 0)];
    let mutated = model_with("fixed", &bounds).with_mutation(Mutation::NoPushDeadline);
    let trace = shortest_violation(&mutated, "R6 deadline")
        .expect("R6 must fail without the deadline check");
    assert_eq!(trace, vec![
            "W1 Query seq=0 (consistent) -> next_seq 2",
            "W1 sends TransactWriteItems{counter 2->3, claim a, check op 2 exists, put op 3 = a} -> cancelled [None, None, ConditionalCheckFailed, None]",
            "W1 receives cancelled [None, None, ConditionalCheckFailed, None]: legacy gap below 3: flip the check",
            "W1 sends TransactWriteItems{counter 2->3, claim a, check op 2 absent, put op 3 = a} -> committed",
            "W1 receives committed: a stored at 3",
            "W1 sends TransactWriteItems{counter 3->4, claim b, check op 3 exists, put op 4 = b} -> cancelled [TransactionConflict, None, TransactionConflict, None]",
        ]);
    let report = check(model_with("fixed", &bounds));
    assert_eq!(report.property("R6 deadline").verdict, Verdict::Holds);
    assert_eq!(
        report
            .property("R6 reach: a push ends at its deadline")
            .verdict,
        Verdict::Reached
    );
}

//= specs/relay-append.md#R7
//# A wrong counter guess costs exactly one lost round: the next round uses the counter image, no re-read.
#[test]
fn ignoring_the_counter_image_costs_a_re_read() {
    let bounds = [
        ("legacy", 0),
        ("pullers", 0),
        ("push_rounds_max", 0),
        ("lost_responses_max", 0),
    ];
    let mutated = model_with("fixed", &bounds).with_mutation(Mutation::IgnoreHint);
    let trace = shortest_violation(&mutated, "R7 carry-forward")
        .expect("R7 must fail when the hint is ignored");
    assert_eq!(trace, vec![
            "W1 Query seq=0 (consistent) -> next_seq 0",
            "W1 sends TransactWriteItems{counter 0->1, claim a, put op 1 = a} -> committed",
            "W1 receives committed: a stored at 1",
            "W2 Query seq=0 (consistent) -> next_seq 0",
            "counter applied (next_seq 1)",
            "W2 sends TransactWriteItems{counter 0->1, claim a, put op 1 = a} -> cancelled [ConditionalCheckFailed(old next_seq 1), TransactionConflict, TransactionConflict]",
            "W2 receives cancelled [ConditionalCheckFailed(old next_seq 1), TransactionConflict, TransactionConflict]: lost round (no hint)",
            "W2 Query seq=0 (consistent) -> next_seq 1",
        ]);
}

// --- The stream fold (R8).

//= specs/relay-append.md#R8
//# The fold watermark never passes an op that was not folded.
#[test]
fn a_watermark_trusting_stream_order_passes_an_unfolded_op() {
    let bounds = [
        ("legacy", 0),
        ("pullers", 0),
        ("stream_folders", 1),
        ("push_rounds_max", 0),
        ("lost_responses_max", 0),
    ];
    let mutated = model_with("fixed", &bounds).with_mutation(Mutation::TrustingWatermark);
    let trace = shortest_violation(&mutated, "R8 fold-safe")
        .expect("R8 must fail with a trusting watermark");
    assert_eq!(trace, vec![
            "W1 Query seq=0 (consistent) -> next_seq 0",
            "W1 sends TransactWriteItems{counter 0->1, claim a, put op 1 = a} -> committed",
            "W1 receives committed: a stored at 1",
            "counter applied (next_seq 1)",
            "op 1 applied (op_id a)",
            "W1 sends TransactWriteItems{counter 1->2, claim b, check op 1 exists, put op 2 = b} -> committed",
            "W1 receives committed: b stored at 2",
            "F1 stream record op 2 (b); F1 watermark 2",
        ]);
    let report = check(model_with("fixed", &bounds));
    assert_eq!(report.property("R8 fold-safe").verdict, Verdict::Holds);
    assert_eq!(
        report
            .property("R8 reach: a stream record arrives before a lower one")
            .verdict,
        Verdict::Reached
    );
    assert_eq!(
        report
            .property("R8 reach: the fold watermark passes two new ops")
            .verdict,
        Verdict::Reached
    );
}

// --- Truncation (R9).

//= specs/relay-append.md#R9
//# Truncation deletes only ops below the op the counter points at: the op at the counter's seq is kept.
#[test]
fn truncation_below_the_counter_op_keeps_every_requirement() {
    // Every initial table, so the floor step (run above the counter) and the flip (legacy gap)
    // run with truncation on.
    let report = check(model_with(
        "fixed",
        &[
            ("truncations_max", 2),
            ("ops_per_writer", 1),
            ("push_rounds_max", 0),
        ],
    ));
    for property in &report.properties {
        if property.kind == Kind::Always {
            assert_eq!(property.verdict, Verdict::Holds, "{}", property.name);
        }
    }
    assert_eq!(
        report
            .property("R9 reach: truncation deletes an op")
            .verdict,
        Verdict::Reached
    );
    assert_eq!(
        report
            .property("R4 reach: a floor step over occupied seqs commits")
            .verdict,
        Verdict::Reached
    );
    assert_eq!(
        report
            .property("R5 reach: a legacy gap is crossed by a flip")
            .verdict,
        Verdict::Reached
    );
}

//= specs/relay-append.md#R9
//# A predecessor check never fails over a seq that held an op: truncation is never taken for a legacy gap.
#[test]
fn truncating_the_counter_op_makes_a_writer_take_it_for_a_legacy_gap() {
    let bounds = [
        ("legacy", 0),
        ("truncations_max", 1),
        ("push_rounds_max", 0),
    ];
    let mutated = model_with("fixed", &bounds).with_mutation(Mutation::TruncateCounterOp);
    assert!(shortest_violation(&mutated, "R9 counter-op-kept").is_some());
    let trace = shortest_violation(&mutated, "R9 no-false-gap")
        .expect("the next append must pay a false gap round");
    assert_eq!(trace, vec![
            "W1 Query seq=0 (consistent) -> next_seq 0",
            "W1 sends TransactWriteItems{counter 0->1, claim a, put op 1 = a} -> committed",
            "W1 receives committed: a stored at 1",
            "counter applied (next_seq 1)",
            "op 1 applied (op_id a)",
            "P1 Query seq>0 limit 2 -> [1]; P1 stores cursor 1",
            "truncator DeleteItem op 1",
            "W1 sends TransactWriteItems{counter 1->2, claim b, check op 1 exists, put op 2 = b} -> cancelled [None, None, ConditionalCheckFailed, None]",
            "W1 receives cancelled [None, None, ConditionalCheckFailed, None]: legacy gap below 2: flip the check",
        ]);
}

// --- The re-push fast path.

//= specs/relay-append.md#R7
//# A round that finds the op's own claim reads the claims of the push's remaining ops in one batched strongly consistent read.
#[test]
fn the_re_push_fast_path_answers_stored_ops_from_one_batched_read() {
    let model = model_with(
        "fixed",
        &[
            ("repush_ops", 2),
            ("legacy", 0),
            ("pullers", 0),
            ("push_rounds_max", 0),
            ("lost_responses_max", 0),
        ],
    );
    // W2 re-pushes W1's whole push: once its first op finds its claim, the second is answered
    // from the batched read, without a round.
    let fast_path_finds_all = |model: &RelayModel, state: &RelayState| {
        let last = state.writers.len() - 1;
        state.writers[last].phase == Phase::ReadingClaims
            && model.writers[last].1[1..]
                .iter()
                .all(|op| state.table.applied.contains_key(&Key::Claim(*op)))
    };
    let mut trace =
        shortest_to(&model, fast_path_finds_all).expect("the fast path finds every claim");
    let pairs = shortest_paths(&model, &[("wanted", fast_path_finds_all, true)])
        .remove("wanted")
        .unwrap();
    let before = &pairs.last().unwrap().0;
    let action = Action::WriterReadsClaims { writer: 1 };
    let after = model.next_state(before, action).unwrap();
    trace.push(model.step_words(before, &action, &after));
    assert_eq!(
        after.writers[1].phase,
        Phase::Done,
        "the batched read answers the rest of the push"
    );
    assert_eq!(trace, vec![
            "W1 Query seq=0 (consistent) -> next_seq 0",
            "W1 sends TransactWriteItems{counter 0->1, claim a, put op 1 = a} -> committed",
            "W1 receives committed: a stored at 1",
            "W2 Query seq=0 (consistent) -> next_seq 0",
            "counter applied (next_seq 1)",
            "claim a applied (claimed seq 1)",
            "W2 sends TransactWriteItems{counter 0->1, claim a, put op 1 = a} -> cancelled [ConditionalCheckFailed(old next_seq 1), ConditionalCheckFailed(old claimed seq 1), TransactionConflict]",
            "W2 receives cancelled [ConditionalCheckFailed(old next_seq 1), ConditionalCheckFailed(old claimed seq 1), TransactionConflict]: claim exists: a answered with its seq 1; read the claims of the rest of the push",
            "op 1 applied (op_id a)",
            "W1 sends TransactWriteItems{counter 1->2, claim b, check op 1 exists, put op 2 = b} -> committed",
            "W1 receives committed: b stored at 2",
            "claim b applied (claimed seq 2)",
            "W2 BatchGetItem claims -> [b at 2]",
        ]);
    let report = check(model);
    assert_eq!(report.property("R3 once-per-op-id").verdict, Verdict::Holds);
    assert_eq!(
        report
            .property("R3 reach: the re-push fast path reads the remaining claims")
            .verdict,
        Verdict::Reached
    );
}
