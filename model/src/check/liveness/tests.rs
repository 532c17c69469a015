//! The liveness checker on small hand-built graphs whose answers are known: lassos, deadlocks,
//! fair and unfair cycles, each half of weak fairness shown to matter, bound cuts, limits and
//! thread counts.

use super::super::{
    run_with_paths, Bounds, CheckOptions, Kind, LivenessDef, ModelSpec, PropertyDef, SpecError,
    Stop, Verdict,
};
use stateright::Model;
use std::collections::BTreeMap;

/// A graph as a model: states are numbers, an action is the index of an edge (from, family, to);
/// the family `""` is a step no run must take.
struct Graph {
    edges: Vec<(u8, &'static str, u8)>,
    goal: Vec<u8>,
    trigger: Vec<u8>,
    cut: Vec<(u8, &'static str)>,
    fair: &'static [&'static str],
    leads_to: bool,
    bounds: Bounds,
}

fn graph(edges: &[(u8, &'static str, u8)], goal: &[u8], fair: &'static [&'static str]) -> Graph {
    Graph {
        edges: edges.to_vec(),
        goal: goal.to_vec(),
        trigger: Vec::new(),
        cut: Vec::new(),
        fair,
        leads_to: false,
        bounds: Bounds(BTreeMap::new()),
    }
}

impl Model for Graph {
    type State = u8;
    type Action = u8;

    fn init_states(&self) -> Vec<u8> {
        vec![0]
    }

    fn actions(&self, state: &u8, actions: &mut Vec<u8>) {
        for (index, (from, _, _)) in self.edges.iter().enumerate() {
            if from == state {
                actions.push(index as u8);
            }
        }
    }

    fn next_state(&self, _: &u8, action: u8) -> Option<u8> {
        Some(self.edges[action as usize].2)
    }
}

fn reaches_goal(model: &Graph, state: &u8) -> bool {
    model.goal.contains(state)
}

fn triggered(model: &Graph, state: &u8) -> bool {
    model.trigger.contains(state)
}

impl ModelSpec for Graph {
    const NAME: &'static str = "graph";
    const VARIANTS: &'static [&'static str] = &["graph"];
    const BOUNDS: &'static [super::super::BoundSpec] = &[];

    fn build(_: &str, _: &Bounds) -> Result<Self, SpecError> {
        unreachable!("built by the tests")
    }

    fn variant(&self) -> &'static str {
        "graph"
    }

    fn bounds(&self) -> &Bounds {
        &self.bounds
    }

    fn property_defs(&self) -> Vec<PropertyDef<Self>> {
        Vec::new()
    }

    fn liveness_defs(&self) -> Vec<LivenessDef<Self>> {
        vec![LivenessDef {
            id: "L1",
            name: "L1 goal",
            trigger: self
                .leads_to
                .then_some(triggered as fn(&Graph, &u8) -> bool),
            goal: reaches_goal,
            fair: self.fair,
        }]
    }

    fn fairness(&self, action: &u8) -> Option<&'static str> {
        let family = self.edges[*action as usize].1;
        (!family.is_empty()).then_some(family)
    }

    fn families_cut(&self, state: &u8, cut: &mut Vec<&'static str>) {
        for (at, family) in &self.cut {
            if at == state {
                cut.push(family);
            }
        }
    }

    fn expected(&self, _: &PropertyDef<Self>) -> Verdict {
        Verdict::Holds
    }

    fn step_words(&self, before: &u8, action: &u8, after: &u8) -> String {
        let family = self.edges[*action as usize].1;
        format!("{before} -{family}-> {after}")
    }
}

/// The verdict, the states of the counterexample and where its lasso starts.
fn decide(model: &Graph, threads: usize) -> (Verdict, Vec<u8>, Option<usize>, Option<usize>) {
    let options = CheckOptions {
        threads,
        ..CheckOptions::default()
    };
    let checked = run_with_paths(model, &options, &mut |_| {});
    let report = checked.report.property("L1 goal");
    assert!(matches!(report.kind, Kind::Eventually | Kind::LeadsTo));
    let states = checked
        .paths
        .get("L1 goal")
        .map(|path| path.iter().map(|(state, _)| *state).collect())
        .unwrap_or_default();
    (
        report.verdict,
        states,
        report.lasso_start,
        report.bound_cut_states,
    )
}

#[test]
fn a_cycle_that_never_reaches_the_goal_is_a_lasso_with_the_shortest_prefix() {
    // 0 -> 1 -> 2 -> 1 forever; the goal 3 is only reachable from 0 by a longer way round.
    let model = graph(
        &[
            (0, "A", 1),
            (1, "A", 2),
            (2, "A", 1),
            (0, "", 4),
            (4, "A", 3),
        ],
        &[3],
        &["A"],
    );
    let (verdict, states, lasso_start, cut) = decide(&model, 1);
    assert_eq!(verdict, Verdict::Violated);
    assert_eq!(states, vec![0, 1, 2, 1]);
    assert_eq!(lasso_start, Some(1));
    assert_eq!(cut, Some(0));
}

#[test]
fn a_state_without_successors_is_a_deadlock_not_a_lasso() {
    let model = graph(&[(0, "A", 1), (0, "A", 2), (2, "A", 3)], &[3], &["A"]);
    let (verdict, states, lasso_start, _) = decide(&model, 1);
    assert_eq!(verdict, Verdict::Violated);
    assert_eq!(states, vec![0, 1]);
    assert_eq!(lasso_start, None);
}

#[test]
fn a_run_may_stop_where_only_unfair_steps_are_enabled() {
    // A fault (family "") could lead to the goal, but no run is obliged to take it.
    let model = graph(&[(0, "", 1)], &[1], &["A"]);
    let (verdict, states, lasso_start, _) = decide(&model, 1);
    assert_eq!(verdict, Verdict::Violated);
    assert_eq!(states, vec![0]);
    assert_eq!(lasso_start, None);
}

#[test]
fn weak_fairness_of_a_family_enabled_throughout_the_cycle_matters() {
    // 0 loops on A; B, enabled at 0 all along, leads to the goal.
    let edges = [(0, "A", 0), (0, "B", 1)];
    let fair_b = graph(&edges, &[1], &["A", "B"]);
    assert_eq!(decide(&fair_b, 1).0, Verdict::Holds);
    let unfair_b = graph(&edges, &[1], &["A"]);
    let (verdict, states, lasso_start, _) = decide(&unfair_b, 1);
    assert_eq!(verdict, Verdict::Violated);
    assert_eq!(states, vec![0, 0]);
    assert_eq!(lasso_start, Some(0));
}

#[test]
fn a_family_disabled_somewhere_on_the_cycle_need_not_be_taken() {
    // Weak, not strong, fairness: B is enabled at 1 only, the cycle 0 <-> 1 leaves it
    // disabled at 0, so the cycle is fair although B is enabled again and again.
    let model = graph(&[(0, "A", 1), (1, "A", 0), (1, "B", 2)], &[2], &["A", "B"]);
    let (verdict, states, lasso_start, _) = decide(&model, 1);
    assert_eq!(verdict, Verdict::Violated);
    assert_eq!(states, vec![0, 1, 0]);
    assert_eq!(lasso_start, Some(0));
    // With B enabled at 0 too, the same cycle is unfair: B is continuously enabled.
    let enabled_everywhere = graph(
        &[(0, "A", 1), (1, "A", 0), (1, "B", 2), (0, "B", 2)],
        &[2],
        &["A", "B"],
    );
    assert_eq!(decide(&enabled_everywhere, 1).0, Verdict::Holds);
}

#[test]
fn the_cycle_takes_a_witness_of_every_family_enabled_throughout_it() {
    // The shortest cycle 0 -> 1 -> 0 leaves C (enabled at 0, 1 and 2) untaken; the fair cycle
    // runs through the C step 1 -> 2 inside the component. C's step from 0 leaves it (goal 3).
    let model = graph(
        &[
            (0, "A", 1),
            (1, "A", 0),
            (1, "C", 2),
            (2, "A", 0),
            (2, "C", 1),
            (0, "C", 3),
        ],
        &[3],
        &["A", "C"],
    );
    let (verdict, states, lasso_start, _) = decide(&model, 1);
    assert_eq!(verdict, Verdict::Violated);
    assert_eq!(states, vec![0, 1, 2, 0]);
    assert_eq!(lasso_start, Some(0));
}

#[test]
fn leads_to_starts_counting_at_the_trigger() {
    // 0 -> 1 -> 2 (goal) -> 3 (trigger) -> 3 forever: `eventually goal` holds, but the trigger
    // after the goal is never followed by it.
    let edges = [(0, "A", 1), (1, "A", 2), (2, "A", 3), (3, "A", 3)];
    let eventually = graph(&edges, &[2], &["A"]);
    assert_eq!(decide(&eventually, 1).0, Verdict::Holds);
    let mut leads_to = graph(&edges, &[2], &["A"]);
    leads_to.leads_to = true;
    leads_to.trigger = vec![1, 3];
    let (verdict, states, lasso_start, _) = decide(&leads_to, 1);
    assert_eq!(verdict, Verdict::Violated);
    assert_eq!(states, vec![0, 1, 2, 3, 3]);
    assert_eq!(lasso_start, Some(3));
    // Triggered only at 1, the goal follows: it holds.
    leads_to.trigger = vec![1];
    assert_eq!(decide(&leads_to, 1).0, Verdict::Holds);
}

#[test]
fn a_state_cut_by_a_bound_counts_as_reaching_the_goal_and_is_counted() {
    // 0 -> 1 -> 1 forever; at 1 a bound withholds A's further steps.
    let edges = [(0, "A", 1), (1, "A", 1)];
    let mut cut = graph(&edges, &[], &["A"]);
    cut.cut = vec![(1, "A")];
    let (verdict, states, _, bound_cut_states) = decide(&cut, 1);
    assert_eq!(verdict, Verdict::Holds);
    assert!(states.is_empty());
    assert_eq!(bound_cut_states, Some(1));
    // A bound on a family the property does not assume fair cuts nothing.
    cut.cut = vec![(1, "B")];
    let (verdict, states, lasso_start, bound_cut_states) = decide(&cut, 1);
    assert_eq!(verdict, Verdict::Violated);
    assert_eq!(states, vec![0, 1, 1]);
    assert_eq!(lasso_start, Some(1));
    assert_eq!(bound_cut_states, Some(0));
}

#[test]
fn role_patterns_name_every_family_of_the_role() {
    // W1 and W2 alternate forever; the goal needs W3, enabled throughout.
    let edges = [(0, "W1", 1), (1, "W2", 0), (0, "W3", 2), (1, "W3", 2)];
    assert_eq!(decide(&graph(&edges, &[2], &["W*"]), 1).0, Verdict::Holds);
    assert_eq!(
        decide(&graph(&edges, &[2], &["W1", "W2"]), 1).0,
        Verdict::Violated
    );
}

/// A ring of `size` states with a chord every third state; the goal is absent.
fn ring(size: u8) -> Graph {
    let mut edges = Vec::new();
    for state in 0..size {
        edges.push((state, "A", (state + 1) % size));
        if state % 3 == 0 {
            edges.push((state, "B", (state + 7) % size));
        }
    }
    graph(&edges, &[size], &["A", "B"])
}

#[test]
fn threads_change_nothing_but_the_time() {
    let one = decide(&ring(200), 1);
    let two = decide(&ring(200), 2);
    assert_eq!(one, two);
    assert_eq!(one.0, Verdict::Violated);
}

#[test]
fn a_state_limit_leaves_liveness_unknown() {
    let options = CheckOptions {
        states_max: Some(10),
        ..CheckOptions::default()
    };
    let checked = run_with_paths(&ring(200), &options, &mut |_| {});
    let report = checked.report.property("L1 goal");
    assert_eq!(report.verdict, Verdict::Unknown);
    assert_eq!(report.trace, None);
    assert!(matches!(
        checked.report.stopped,
        Some(Stop::States { states_max: 10, .. })
    ));
    assert!(!checked.report.complete);
    assert!(!checked.report.matches_expectations());
}

#[test]
fn a_memory_limit_leaves_liveness_unknown() {
    fn always_full() -> Option<u64> {
        Some(u64::MAX)
    }
    let options = CheckOptions {
        memory_bytes_max: Some(1 << 20),
        memory_probe: Some(always_full),
        ..CheckOptions::default()
    };
    let checked = run_with_paths(&ring(200), &options, &mut |_| {});
    assert_eq!(checked.report.property("L1 goal").verdict, Verdict::Unknown);
    assert!(matches!(
        checked.report.stopped,
        Some(Stop::Memory {
            memory_bytes_max: 1048576,
            ..
        })
    ));
    assert!(!checked.report.matches_expectations());
}
