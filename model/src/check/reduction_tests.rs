//! Every model and variant checked reduced and unreduced at small bounds: the reductions of
//! check/scale.rs (symmetry) must leave the violated and reached sets, and the length of every
//! shortest trace, as they are (specs: "Symmetry" in each model's spec).

use super::*;
use crate::idempotency::{IdempotencyModel, Mutation as IdempotencyMutation};
use crate::relay::{Mutation, RelayModel};
use crate::token::TokenModel;

/// (name, verdict, trace length) per property. A liveness counterexample found on a symmetry's
/// quotient is lifted (its cycle repeated until the concrete state recurs), so its length is not
/// the unreduced search's: only its verdict is compared, and the lasso is checked on its own
/// (`assert_lassos_are_real`).
fn findings(report: &CheckReport) -> Vec<(&'static str, Verdict, Option<usize>)> {
    report
        .properties
        .iter()
        .map(|property| {
            let length = property.trace.as_ref().map(Vec::len);
            (
                property.name,
                property.verdict,
                length.filter(|_| !property.kind.is_liveness()),
            )
        })
        .collect()
}

/// Every liveness counterexample is a run of the model: a lasso's last state is the state it
/// returns to; a stop's last state enables no step its property assumes fair (the search's
/// own rebuild checks every step against the model).
fn assert_lassos_are_real<M: ModelSpec>(label: &str, checked: &Checked<M>)
where
    M::State: Clone + Debug + Hash + Eq + Send + Sync + 'static,
    M::Action: Clone + Debug + PartialEq + Send + Sync + 'static,
{
    for property in &checked.report.properties {
        let (Some(start), Some(path)) = (property.lasso_start, checked.paths.get(property.name))
        else {
            continue;
        };
        let last = &path.last().expect("a path has a state").0;
        assert_eq!(&path[start].0, last, "{label}: {}", property.name);
    }
}

/// The model of `variant` at its embedded bounds with `overrides`.
pub(super) fn model<M: ModelSpec>(variant: &str, overrides: &[(&str, u32)]) -> M
where
    M::State: Clone + Debug + Hash + Eq + Send + Sync + 'static,
    M::Action: Clone + Debug + PartialEq + Send + Sync + 'static,
{
    let overrides: Vec<(String, u32)> = overrides
        .iter()
        .map(|(key, value)| (key.to_string(), *value))
        .collect();
    M::build(variant, &M::resolve_bounds(variant, &overrides).unwrap()).unwrap()
}

/// Checks `model` with and without its symmetry; answers (unreduced, reduced) unique states.
fn compare<M: ModelSpec>(label: &str, build: impl Fn() -> M) -> (usize, usize)
where
    M::State: Clone + Debug + Hash + Eq + Send + Sync + 'static,
    M::Action: Clone + Debug + PartialEq + Send + Sync + 'static,
{
    let plain = run(build(), &CheckOptions::default(), &mut |_| {});
    let reduced_model = build();
    let reduced_checked = run_with_paths(
        &reduced_model,
        &CheckOptions {
            symmetry: true,
            ..CheckOptions::default()
        },
        &mut |_| {},
    );
    assert_lassos_are_real(label, &reduced_checked);
    let reduced = reduced_checked.report;
    assert!(plain.complete && reduced.complete, "{label}");
    // The liveness graph is a quotient exactly when the model declares its fairness families
    // invariant under the symmetry (`Scale::liveness_symmetry`) or gives the renaming of its
    // actors' own families (`Scale::actor_families`); else it is the whole graph.
    if let (Some(plain_graph), Some(reduced_graph)) = (&plain.liveness, &reduced.liveness) {
        let scale = reduced_model.scale();
        if scale.symmetry.is_some() && (scale.liveness_symmetry || scale.actor_families.is_some()) {
            assert!(
                reduced_graph.unique_states <= plain_graph.unique_states,
                "{label}"
            );
        } else {
            assert_eq!(
                reduced_graph.unique_states, plain_graph.unique_states,
                "{label}"
            );
        }
    }
    assert_eq!(findings(&plain), findings(&reduced), "{label}");
    assert!(reduced.unique_states <= plain.unique_states, "{label}");
    eprintln!(
        "{label}: {} -> {} unique states ({:.1}s -> {:.1}s)",
        plain.unique_states, reduced.unique_states, plain.seconds, reduced.seconds
    );
    (plain.unique_states, reduced.unique_states)
}

#[test]
fn symmetry_keeps_every_verdict_and_trace_length_of_every_relay_variant() {
    for variant in RelayModel::VARIANTS {
        // fixed's CI bounds lose a response (903,106 states): here without, and with one loss
        // from the empty table.
        let lost: &[(&str, u32)] = match *variant {
            "fixed" => &[("lost_responses_max", 0)],
            _ => &[],
        };
        let counts = compare(variant, || model::<RelayModel>(variant, lost));
        if *variant == "fixed" {
            assert_eq!(counts, (59_658, 29_924));
        }
        compare(variant, || {
            let pullers = [("pullers", 2), ("pulls_per_puller", 2)];
            model::<RelayModel>(variant, &[lost, &pullers[..]].concat())
        });
    }
    compare("fixed, one lost response", || {
        model::<RelayModel>("fixed", &[("legacy", 0), ("lost_responses_max", 1)])
    });
    for mutation in [
        Mutation::NoPredecessorCheck,
        Mutation::NoFlip,
        Mutation::IgnoreHint,
        Mutation::RepushAfterLostResponse,
    ] {
        compare(&format!("{mutation:?}"), || {
            model::<RelayModel>("fixed", &[("lost_responses_max", 0)]).with_mutation(mutation)
        });
    }
    // Three writers with no re-push: all three interchangeable.
    let (plain, reduced) = compare("three writers", || {
        model::<RelayModel>(
            "fixed",
            &[
                ("new_writers", 3),
                ("repush_ops", 0),
                ("ops_per_writer", 1),
                ("pullers", 0),
                ("legacy", 0),
                ("lost_responses_max", 0),
                ("push_rounds_max", 0),
            ],
        )
    });
    assert!(reduced * 4 < plain, "{plain} -> {reduced}");
}

/// The relay names a fairness family per writer and per puller, so its liveness search runs on
/// the per-actor quotient (`Scale::actor_families`, check/liveness/actors.rs): fewer states, and
/// the same R6 and R10 verdicts as the whole graph for the liveness mutations that violate R6,
/// for three interchangeable writers, and for two pullers (`compare` checks the verdicts and
/// that every lasso is one of the model's; the cycle search checks it fair).
#[test]
fn the_relay_liveness_graph_is_the_per_actor_quotient_under_symmetry() {
    let liveness_states = |build: &dyn Fn() -> RelayModel| {
        let graph = |options: &CheckOptions| {
            run(build(), options, &mut |_| {})
                .liveness
                .expect("R6 and R10 were checked")
                .unique_states
        };
        let symmetric = CheckOptions {
            symmetry: true,
            ..CheckOptions::default()
        };
        (graph(&CheckOptions::default()), graph(&symmetric))
    };
    let fixed = || model::<RelayModel>("fixed", &[("lost_responses_max", 0)]);
    assert_eq!(liveness_states(&fixed), (59_658, 29_924));
    for (mutation, overrides) in crate::relay::R6_VIOLATING_MUTATIONS {
        compare(&format!("{mutation:?}, liveness"), || {
            model::<RelayModel>("fixed", overrides).with_mutation(mutation)
        });
    }
    let three_writers_two_pullers = || {
        model::<RelayModel>(
            "fixed",
            &[
                ("new_writers", 3),
                ("repush_ops", 0),
                ("ops_per_writer", 1),
                ("pullers", 2),
                ("pulls_per_puller", 1),
                ("legacy", 1),
                ("lost_responses_max", 0),
                ("push_rounds_max", 2),
            ],
        )
    };
    compare("three writers, two pullers", three_writers_two_pullers);
    let (plain, reduced) = liveness_states(&three_writers_two_pullers);
    eprintln!("three writers, two pullers, liveness graph: {plain} -> {reduced} states");
    assert!(reduced * 6 < plain, "{plain} -> {reduced}");
    compare("counter-only, two pullers", || {
        model::<RelayModel>("counter-only", &[("pullers", 2), ("pulls_per_puller", 2)])
    });
}

#[test]
fn symmetry_keeps_every_verdict_and_trace_length_of_every_idempotency_variant() {
    for variant in IdempotencyModel::VARIANTS {
        compare(variant, || model::<IdempotencyModel>(variant, &[]));
    }
    // M11 violated (a stop with the key held): the quotient finds it too.
    compare("renewed, heartbeat detached", || {
        model::<IdempotencyModel>("renewed", &[])
            .with_mutation(IdempotencyMutation::HeartbeatDetached)
    });
}

/// The idempotency model's fairness families are roles, so its liveness search runs on the
/// quotient: fewer states, the same M11 verdict (`compare` checks the verdicts and the lassos).
#[test]
fn the_idempotency_liveness_graph_is_the_quotient_under_symmetry() {
    let build = || model::<IdempotencyModel>("fenced", &[]);
    let graph = |options: &CheckOptions| {
        run(build(), options, &mut |_| {})
            .liveness
            .expect("M11 was checked")
            .unique_states
    };
    let plain = graph(&CheckOptions::default());
    let reduced = graph(&CheckOptions {
        symmetry: true,
        ..CheckOptions::default()
    });
    eprintln!("fenced, liveness graph: {plain} -> {reduced} states");
    assert!(reduced < plain, "{plain} -> {reduced}");
}

#[test]
fn symmetry_keeps_every_verdict_and_trace_length_of_every_token_variant() {
    for variant in TokenModel::VARIANTS {
        compare(variant, || model::<TokenModel>(variant, &[]));
    }
    // T6 violated by a client that retries forever: the per-actor quotient (a family per
    // client) finds it too, and its cycle is one of the model's.
    compare("tokened, retries forever on in-progress", || {
        model::<TokenModel>("tokened", &[])
            .with_mutation(Some(crate::token::Mutation::RetriesForeverOnInProgress))
    });
    // A shared token names its owner by index: no symmetry is declared, nothing is reduced.
    let (plain, reduced) = compare("tokened, shared token", || {
        model::<TokenModel>("tokened", &[("shared_token", 1)])
    });
    assert_eq!(plain, reduced);
}

/// (name, verdict) per property: a partial-order reduction keeps verdicts, not trace lengths.
fn verdicts(report: &CheckReport) -> Vec<(&'static str, Verdict)> {
    report
        .properties
        .iter()
        .map(|property| (property.name, property.verdict))
        .collect()
}

#[test]
fn the_partial_order_reduction_keeps_every_verdict_of_every_relay_variant() {
    // Without the relay's own reductions, so that the generic one does the work of (a).
    // (counter-only, 669,020 -> 426,066 states, adds half a minute and nothing new.)
    for (variant, overrides) in [
        ("add-era", &[][..]),
        ("fixed", &[("lost_responses_max", 0)][..]),
        ("mixed", &[][..]),
    ] {
        let build = || model::<RelayModel>(variant, overrides).without_reductions();
        let plain = run(build(), &CheckOptions::default(), &mut |_| {});
        let options = CheckOptions {
            partial_order: true,
            ..CheckOptions::default()
        };
        let reduced = run(build(), &options, &mut |_| {});
        let label = format!("{variant} {overrides:?}");
        assert!(plain.complete && reduced.complete, "{label}");
        assert_eq!(verdicts(&plain), verdicts(&reduced), "{label}");
        assert!(reduced.unique_states < plain.unique_states, "{label}");
        // Deterministic for any thread count, as the full search is.
        let two = run(
            build(),
            &CheckOptions {
                threads: 2,
                ..options.clone()
            },
            &mut |_| {},
        );
        assert_eq!(two.unique_states, reduced.unique_states, "{label}");
        assert_eq!(findings(&two), findings(&reduced), "{label}");
        eprintln!(
            "{label}: {} -> {} unique states with the partial-order reduction",
            plain.unique_states, reduced.unique_states
        );
    }
}
