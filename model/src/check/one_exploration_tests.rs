//! One exploration decides the safety and the liveness properties together
//! ([`liveness::SafetyFound`]): for every model and variant, with and without symmetry, its
//! report must be the one the safety search and the liveness search give apart — the same
//! verdicts, the same shortest traces step for step, the same counts per depth and per action,
//! the same lassos — and the same for any number of threads.

use super::reduction_tests::model;
use super::*;
use crate::idempotency::IdempotencyModel;
use crate::relay::RelayModel;
use crate::token::TokenModel;

/// Checks `model` in one exploration and in two, with and without its symmetry; answers how
/// many of its safety properties had a trace (so a caller can require that some did).
fn compare<M: ModelSpec>(label: &str, model: &M) -> usize
where
    M::State: Clone + Debug + Hash + Eq + Send + Sync + 'static,
    M::Action: Clone + Debug + PartialEq + Send + Sync + 'static,
{
    let mut traced = 0;
    for symmetry in [false, true] {
        let label = format!("{label}, symmetry {symmetry}");
        let options = CheckOptions {
            symmetry,
            ..CheckOptions::default()
        };
        let one = run_with_paths(model, &options, &mut |_| {});
        let safety_alone = run_with_paths(
            model,
            &CheckOptions {
                liveness: false,
                ..options.clone()
            },
            &mut |_| {},
        );
        let liveness_alone = liveness_paths(model, &options);
        assert!(one.report.complete, "{label}");
        assert!(
            one.report.liveness.is_some(),
            "{label}: the model has liveness properties to decide"
        );
        // The safety search stops once every safety property is decided; it counts the whole
        // space only when some property needs all of it.
        let safety_exhausted = safety_alone
            .report
            .properties
            .iter()
            .any(|property| matches!(property.verdict, Verdict::Holds | Verdict::Unreached));
        if safety_exhausted {
            assert_eq!(
                one.report.unique_states, safety_alone.report.unique_states,
                "{label}"
            );
            assert_eq!(one.report.states, safety_alone.report.states, "{label}");
            assert_eq!(
                one.report.states_per_depth, safety_alone.report.states_per_depth,
                "{label}"
            );
            assert_eq!(
                one.report.action_coverage, safety_alone.report.action_coverage,
                "{label}"
            );
        }
        for property in &one.report.properties {
            let name = property.name;
            if property.kind.is_liveness() {
                let (verdict, lasso) = &liveness_alone[name];
                assert_eq!(property.verdict, *verdict, "{label}: {name}");
                assert_eq!(
                    one.paths.get(name),
                    lasso.as_ref().map(|(path, _)| path),
                    "{label}: {name}'s lasso"
                );
                assert_eq!(
                    property.lasso_start,
                    lasso.as_ref().and_then(|(_, start)| *start),
                    "{label}: {name}'s lasso start"
                );
                continue;
            }
            let alone = safety_alone.report.property(name);
            assert_eq!(property.verdict, alone.verdict, "{label}: {name}");
            assert_eq!(
                one.paths.get(name),
                safety_alone.paths.get(name),
                "{label}: {name}'s trace"
            );
            traced += usize::from(one.paths.contains_key(name));
        }
        let two_threads = run_with_paths(
            model,
            &CheckOptions {
                threads: 2,
                ..options.clone()
            },
            &mut |_| {},
        );
        assert_eq!(
            two_threads.report.unique_states, one.report.unique_states,
            "{label}: two threads"
        );
        assert_eq!(two_threads.paths, one.paths, "{label}: two threads");
    }
    traced
}

#[test]
fn one_exploration_reports_what_the_two_searches_report_for_every_relay_variant() {
    for variant in RelayModel::VARIANTS {
        let lost: &[(&str, u32)] = match *variant {
            "fixed" => &[("lost_responses_max", 0)],
            _ => &[],
        };
        let traced = compare(variant, &model::<RelayModel>(variant, lost));
        assert!(traced > 0, "{variant}: no safety trace was compared");
    }
    for (mutation, overrides) in crate::relay::R6_VIOLATING_MUTATIONS {
        compare(
            &format!("{mutation:?}"),
            &model::<RelayModel>("fixed", overrides).with_mutation(mutation),
        );
    }
}

#[test]
fn one_exploration_reports_what_the_two_searches_report_for_every_idempotency_variant() {
    for variant in IdempotencyModel::VARIANTS {
        let traced = compare(variant, &model::<IdempotencyModel>(variant, &[]));
        assert!(traced > 0, "{variant}: no safety trace was compared");
    }
}

#[test]
fn one_exploration_reports_what_the_two_searches_report_for_every_token_variant() {
    for variant in TokenModel::VARIANTS {
        let traced = compare(variant, &model::<TokenModel>(variant, &[]));
        assert!(traced > 0, "{variant}: no safety trace was compared");
    }
    compare(
        "tokened, retries forever on in-progress",
        &model::<TokenModel>("tokened", &[])
            .with_mutation(Some(crate::token::Mutation::RetriesForeverOnInProgress)),
    );
}

/// A limit other than time stops the one exploration; the safety search, which spills its
/// frontier where the exploration cannot, then runs alone, and the report is the one it gives:
/// the same stop, counts and traces, the liveness properties unknown and no liveness figures.
#[test]
fn a_states_limit_hands_the_run_to_the_safety_search_alone() {
    let model = model::<RelayModel>("fixed", &[("lost_responses_max", 0)]);
    let limited = CheckOptions {
        states_max: Some(5_000),
        ..CheckOptions::default()
    };
    let checked = run_with_paths(&model, &limited, &mut |_| {});
    let alone = run_with_paths(
        &model,
        &CheckOptions {
            liveness: false,
            ..limited.clone()
        },
        &mut |_| {},
    );
    let (report, alone_report) = (&checked.report, &alone.report);
    assert!(matches!(report.stopped, Some(Stop::States { .. })));
    assert_eq!(report.stopped, alone_report.stopped);
    assert!(!report.complete);
    assert!(report.liveness.is_none());
    assert_eq!(report.unique_states, alone_report.unique_states);
    assert_eq!(report.states_per_depth, alone_report.states_per_depth);
    assert_eq!(checked.paths, alone.paths);
    for property in &report.properties {
        if property.kind.is_liveness() {
            assert_eq!(property.verdict, Verdict::Unknown, "{}", property.name);
        } else {
            assert_eq!(
                property.verdict,
                alone_report.property(property.name).verdict,
                "{}",
                property.name
            );
        }
    }
    assert!(
        !checked.paths.is_empty(),
        "some property was decided before the limit"
    );
}
