//! Relay model tests: the verdict table at the CI bounds, pinned unique state counts, the exact
//! shortest counterexamples, and one seeded mutation per property showing it can fail.

use super::*;
use crate::check::{self, shortest_paths, steps_of, CheckOptions, CheckReport};

fn ci_model(variant: &str) -> RelayModel {
    let bounds = RelayModel::resolve_bounds(variant, &[]).unwrap();
    RelayModel::build(variant, &bounds).unwrap()
}

fn model_with(variant: &str, overrides: &[(&str, u32)]) -> RelayModel {
    let overrides: Vec<(String, u32)> = overrides.iter().map(|(key, value)| (key.to_string(), *value)).collect();
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

fn trace_words(report: &CheckReport, name: &str) -> Vec<String> {
    let trace = report.property(name).trace.as_ref().unwrap_or_else(|| panic!("{name} has no trace"));
    trace.iter().map(|step| step.words.clone()).collect()
}

/// The shortest path to a violation of one `always` property, searched without a full check.
fn shortest_violation(model: &RelayModel, name: &'static str) -> Option<Vec<String>> {
    let def = model.property_defs().into_iter().find(|def| def.name == name).expect("a known property");
    let found = shortest_paths(model, &[(def.name, def.condition, false)]);
    found.get(name).map(|pairs| steps_of(model, pairs).into_iter().map(|step| step.words).collect())
}

//= specs/relay-append.md#R1
//# A puller that stored cursor k has received every op that is or will ever be stored at a seq <= k.
#[test]
fn add_era_loses_an_op_exactly_as_the_seed_reproduced_it() {
    let report = check(ci_model("add-era"));
    assert_matches_expectations(&report);
    assert_eq!(report.unique_states, 2060);
    // A allocates, B allocates and commits, the puller gets [B's op] alone and stores B's seq,
    // then A's op lands below the cursor.
    assert_eq!(
        trace_words(&report, "R1 no-skip"),
        vec![
            "W1 (ADD-era) UpdateItem ADD next_seq 1 -> 1",
            "W2 (ADD-era) UpdateItem ADD next_seq 1 -> 2",
            "W2 (ADD-era) sends TransactWriteItems{claim c, put op 2 = c} -> committed",
            "P1 Query seq>0 limit 2 -> [2]; P1 stores cursor 2",
            "W1 (ADD-era) sends TransactWriteItems{claim a, put op 1 = a} -> committed",
        ]
    );
}

#[test]
fn counter_only_loses_an_op_through_the_visibility_window() {
    let report = check(ci_model("counter-only"));
    assert_matches_expectations(&report);
    assert_eq!(report.unique_states, 234_766);
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
    assert_eq!(report.property("R8 fold-safe").verdict, Verdict::Holds);
    assert!(report.complete);
}

#[test]
fn fixed_holds_every_requirement_and_reaches_every_interesting_state() {
    let model = ci_model("fixed");
    // The acceptance floor of the CI bounds: two writers, two ops each, a re-push, a puller
    // with three pulls, the legacy gap among the initial tables.
    assert!(model.writers.len() >= 2);
    assert!(model.writers.iter().all(|(_, push)| push.len() >= 2));
    assert!(model.bounds.second_writer_repush);
    assert!(model.bounds.pulls_per_puller >= 3);
    assert!(model.bounds.legacy.contains(&Legacy::Gap));
    let report = check(model);
    assert_matches_expectations(&report);
    for property in &report.properties {
        let expected = if property.kind == Kind::Always { Verdict::Holds } else { Verdict::Reached };
        assert_eq!(property.verdict, expected, "{}", property.name);
    }
    assert_eq!(report.unique_states, 505_296);
    assert!(report.unique_states >= 100_000);
}

#[test]
fn mixed_fleet_keeps_seqs_unique_and_the_counter_monotonic_but_not_the_order() {
    let report = check(ci_model("mixed"));
    assert_matches_expectations(&report);
    assert_eq!(report.unique_states, 224_756);
    assert_eq!(
        trace_words(&report, "R1 no-skip"),
        vec![
            "W1 Query seq=0 (consistent) -> next_seq 0",
            "W1 sends TransactWriteItems{counter 0->1, claim a, put op 1 = a} -> committed",
            "counter applied (next_seq 1)",
            "W2 (ADD-era) UpdateItem ADD next_seq 1 -> 2",
            "W2 (ADD-era) sends TransactWriteItems{claim c, put op 2 = c} -> committed",
            "op 2 applied (op_id c)",
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
    let trace = shortest_violation(&model, "R1 no-skip").expect("R1 must fail without the predecessor check");
    assert_eq!(trace.last().unwrap(), "P1 Query seq>0 limit 2 -> [2]; P1 stores cursor 2");
}

//= specs/relay-append.md#R4
//# The counter never moves backwards, also in a mixed fleet with ADD-era writers.
#[test]
fn an_unconditional_counter_set_moves_the_counter_back_in_a_mixed_fleet() {
    // The seed's second mutation check: two ADD-era allocations land between the new writer's
    // counter read and its round, as in the seed's rolling-upgrade test.
    let bounds = [("add_era_writers", 2), ("ops_per_writer", 1), ("pullers", 0)];
    let mutated = model_with("mixed", &bounds).with_mutation(Mutation::UnconditionalCounterSet);
    let trace = shortest_violation(&mutated, "R4 counter-monotonic").expect("R4 must fail with an unconditional SET");
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
    let trace = shortest_violation(&model, "R6 no-wedge").expect("R6 must fail without the flip");
    assert!(trace.iter().filter(|words| words.contains("check op 2 exists")).count() >= 2, "{trace:#?}");
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
    let model = model_with("fixed", &[("legacy", 0), ("new_writers", 1), ("second_writer_repush", 0)]);
    let mut state = model.init_states().remove(0);
    state.table.applied.insert(Key::Counter, Value::Counter { next_seq: SEQ_MAX });
    let state = model.next_state(&state, Action::WriterReadsCounter { writer: 0 }).unwrap();
    let state = model.next_state(&state, Action::WriterSendsRound { writer: 0 }).unwrap();
    assert_eq!(state.writers[0].phase, Phase::Failed(AppendError::SeqOverflow));
    assert!(state.table.pending.is_empty(), "nothing is written past the top");
}

#[test]
fn a_round_knows_its_four_items_in_request_order() {
    let model = model_with("fixed", &[("legacy", 0)]);
    let mut writer = Writer::new();
    writer.counter = Counter::Known(3);
    let (round, items) = model.new_build_round(&writer, 0).unwrap();
    assert_eq!(round.seq, 4);
    let keys: Vec<Key> = items.iter().map(|item| item.key).collect();
    assert_eq!(keys, vec![Key::Counter, Key::Claim(0), Key::Op(3), Key::Op(4)]);
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
    assert!(error.to_string().contains("valid bounds: new_writers"), "{error}");
    let error = RelayModel::resolve_bounds("fixd", &[]).unwrap_err();
    assert_eq!(error.to_string(), "unknown variant `fixd` of model `relay`; valid variants: add-era, counter-only, fixed, mixed");
    let error = RelayModel::resolve_bounds("fixed", &[("window".to_string(), 7)]).unwrap_err();
    assert_eq!(error.to_string(), "bound window=7 is out of range; valid range: 0..=1");
}
