//! R6 no-wedge and R10 pull-progress, the relay's liveness properties: each caught by a mutated
//! protocol step with its lasso pinned, the verdicts the same with and without the reductions.

use crate::check::{self, CheckOptions, CheckReport, Kind, ModelSpec, Verdict};
use crate::relay::{Mutation, RelayModel};

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

/// The lasso of a violated liveness property: the prefix's words, then the cycle's.
fn lasso(report: &CheckReport, name: &str) -> (Vec<String>, Vec<String>) {
    let property = report.property(name);
    assert_eq!(property.verdict, Verdict::Violated, "{name}");
    let start = property.lasso_start.expect("a lasso, not a stop");
    let words: Vec<String> = property
        .trace
        .as_ref()
        .expect("a violation has a trace")
        .iter()
        .map(|step| step.words.clone())
        .collect();
    (words[..start].to_vec(), words[start..].to_vec())
}

fn safety_holds(report: &CheckReport) {
    for property in &report.properties {
        if property.kind == Kind::Always {
            assert_eq!(property.verdict, Verdict::Holds, "{}", property.name);
        }
    }
}

//= specs/relay-append.md#R6
//# Every push eventually ends: all its ops answered, or the deadline's typed error.
#[test]
fn a_top_query_that_forgets_the_floor_re_queries_forever() {
    // The re-query livelock: over a run of occupied seqs the writer asks for the top,
    // forgets it, and sends its round to the same occupied seq again. Every `always` holds.
    let bounds = [
        ("push_rounds_max", 0),
        ("lost_responses_max", 0),
        ("legacy", 2),
    ];
    let report = check(model_with("fixed", &bounds).with_mutation(Mutation::TopQueryForgetsFloor));
    safety_holds(&report);
    // 128 states when the issue measured it; 96 since a pull that returns nothing is a
    // self-loop instead of spending one of `pulls_per_puller`.
    assert_eq!(report.unique_states, 96);
    let (prefix, cycle) = lasso(&report, "R6 no-wedge");
    // Both writers find seq 2 taken over the legacy run 1..3, ask for the top (3), forget it,
    // and send seq 2 again; the cycle takes both, as weak fairness of each writer demands.
    let seq_2_again = "sends TransactWriteItems{counter 1->2, claim a, check op 1 exists, put op 2 = a} -> cancelled [None, None, None, ConditionalCheckFailed]";
    let find_top =
        "receives cancelled [None, None, None, ConditionalCheckFailed]: seq taken: find the top";
    assert_eq!(
        prefix,
        [
            "W1 BatchGetItem claims [a, b] -> no conflict; Query seq=0 (consistent) -> next_seq 1"
                .to_string(),
            format!("W1 {seq_2_again}"),
            format!("W1 {find_top}"),
            "W2 BatchGetItem claims [a, d] -> no conflict; Query seq=0 (consistent) -> next_seq 1"
                .to_string(),
            format!("W2 {seq_2_again}"),
            format!("W2 {find_top}"),
        ]
    );
    assert_eq!(
        cycle,
        [
            "W1 Query seq>0 reverse limit 1 -> [3]".to_string(),
            "W2 Query seq>0 reverse limit 1 -> [3]".to_string(),
            format!("W1 {seq_2_again}"),
            format!("W1 {find_top}"),
            format!("W2 {seq_2_again}"),
            format!("W2 {find_top}"),
        ]
    );
    let honest = check(model_with("fixed", &bounds));
    assert_eq!(honest.property("R6 no-wedge").verdict, Verdict::Holds);
}

//= specs/relay-append.md#R6
//# Every push eventually ends: all its ops answered, or the deadline's typed error.
#[test]
fn a_push_that_re_sends_answered_ops_ends_only_at_its_deadline() {
    let bounds = [("lost_responses_max", 0), ("legacy", 0)];
    // With the deadline the push ends with its typed error: R6 holds.
    let deadline =
        check(model_with("fixed", &bounds).with_mutation(Mutation::ClaimAnswerSentAgain));
    assert_eq!(deadline.property("R6 no-wedge").verdict, Verdict::Holds);
    assert_eq!(
        deadline
            .property("R6 reach: a push ends at its deadline")
            .verdict,
        Verdict::Reached
    );
    // Without it the re-push answers the stored op from its claim again and again.
    let mut no_deadline = bounds.to_vec();
    no_deadline.push(("push_rounds_max", 0));
    let report =
        check(model_with("fixed", &no_deadline).with_mutation(Mutation::ClaimAnswerSentAgain));
    safety_holds(&report);
    let (prefix, cycle) = lasso(&report, "R6 no-wedge");
    // W2's re-push of a finds a's claim, is answered seq 1, and sends a again, forever.
    assert_eq!(prefix.len(), 13);
    assert_eq!(
        prefix[10],
        "W2 sends TransactWriteItems{counter 0->1, claim a, put op 1 = a} -> cancelled [ConditionalCheckFailed(old next_seq 2), ConditionalCheckFailed(old claimed seq 1), ConditionalCheckFailed]"
    );
    assert_eq!(
        cycle,
        [
            "W2 sends TransactWriteItems{counter 2->3, claim a, check op 2 exists, put op 3 = a} -> cancelled [None, ConditionalCheckFailed(old claimed seq 1), None, None]",
            "W2 receives cancelled [None, ConditionalCheckFailed(old claimed seq 1), None, None]: lost round (counter 2)",
        ]
    );
}

//= specs/relay-append.md#R10
//# Every stored op is eventually received by every puller that keeps pulling.
#[test]
fn a_puller_past_a_skipped_op_pulls_nothing_forever() {
    let report = check(model_with("counter-only", &[]));
    let (prefix, cycle) = lasso(&report, "R10 pull-progress");
    // Op 2 becomes visible before op 1; the puller stores cursor 2 and then pulls after it
    // forever, never receiving op 1.
    assert_eq!(
        prefix,
        [
            "W1 BatchGetItem claims [a, b] -> no conflict; Query seq=0 (consistent) -> next_seq 0",
            "W1 sends TransactWriteItems{counter 0->1, claim a, put op 1 = a} -> committed",
            "W1 receives committed: a stored at 1",
            "counter applied (next_seq 1)",
            "W1 sends TransactWriteItems{counter 1->2, claim b, put op 2 = b} -> committed",
            "W1 receives committed: b stored at 2",
            "counter applied (next_seq 2)",
            "claim a applied (claimed seq 1)",
            "op 2 applied (op_id b)",
            "P1 Query seq>0 limit 2 -> [2]; P1 stores cursor 2",
            "op 1 applied (op_id a)",
        ]
    );
    assert_eq!(cycle, ["P1 Query seq>2 limit 2 -> []; P1 stores cursor 2"]);
    let fixed = check(model_with("fixed", &[("lost_responses_max", 0)]));
    assert_eq!(fixed.property("R10 pull-progress").verdict, Verdict::Holds);
    // States where P1 has taken its three pages with ops and more ops wait: the bound cuts the
    // run there, and the report says so.
    assert_eq!(
        fixed.property("R10 pull-progress").bound_cut_states,
        Some(720)
    );
}

#[test]
fn reductions_keep_every_liveness_verdict() {
    let configurations: &[&[(&str, u32)]] = &[
        &[("ops_per_writer", 1), ("pulls_per_puller", 2)],
        &[
            ("ops_per_writer", 2),
            ("pulls_per_puller", 1),
            ("legacy", 1),
            ("push_rounds_max", 3),
        ],
    ];
    let verdicts = |report: &CheckReport| -> Vec<(&'static str, Verdict)> {
        report
            .properties
            .iter()
            .filter(|property| property.kind.is_liveness())
            .map(|property| (property.name, property.verdict))
            .collect()
    };
    let mut compared = 0;
    for variant in RelayModel::VARIANTS {
        for overrides in configurations {
            let reduced = check(model_with(variant, overrides));
            let unreduced = check(model_with(variant, overrides).without_reductions());
            assert_eq!(
                verdicts(&reduced),
                verdicts(&unreduced),
                "{variant} {overrides:?}"
            );
            compared += 1;
        }
    }
    for (mutation, overrides) in super::R6_VIOLATING_MUTATIONS {
        let reduced = check(model_with("fixed", overrides).with_mutation(mutation));
        let unreduced = check(
            model_with("fixed", overrides)
                .with_mutation(mutation)
                .without_reductions(),
        );
        assert_eq!(verdicts(&reduced), verdicts(&unreduced), "{mutation:?}");
        assert_eq!(
            reduced.property("R6 no-wedge").verdict,
            Verdict::Violated,
            "{mutation:?}"
        );
        compared += 1;
    }
    assert_eq!(compared, 11);
}
