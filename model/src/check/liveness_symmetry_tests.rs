//! The liveness search on a symmetry's quotient (check/liveness.rs, `Scale::liveness_symmetry`),
//! on a model small enough to know every run: two interchangeable agents pass one token back and
//! forth forever. Its one orbit of states is a single quotient state with a self-loop, so the
//! quotient's lasso returns to the swapped state, not to its start: only lifting (repeating the
//! round until the concrete state recurs) makes it a lasso of the model.

use super::*;
use stateright::Model;

/// Two agents; `holds[i]`: agent i holds the token.
#[derive(Clone)]
struct PassTheToken {
    bounds: Bounds,
    /// Fairness families per agent (`A1`, `A2`) instead of one role (`agent`): not invariant
    /// under swapping the agents, so declaring the symmetry for liveness is wrong.
    families_per_agent: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Pass(usize);

impl Model for PassTheToken {
    type State = [bool; 2];
    type Action = Pass;

    fn init_states(&self) -> Vec<[bool; 2]> {
        vec![[true, false]]
    }

    fn actions(&self, state: &[bool; 2], actions: &mut Vec<Pass>) {
        actions.extend((0..2).filter(|agent| state[*agent]).map(Pass));
    }

    fn next_state(&self, state: &[bool; 2], Pass(agent): Pass) -> Option<[bool; 2]> {
        let mut next = *state;
        next[agent] = false;
        next[1 - agent] = true;
        Some(next)
    }
}

fn nobody_holds_it(_model: &PassTheToken, state: &[bool; 2]) -> bool {
    !state[0] && !state[1]
}

fn sorted(_model: &PassTheToken, state: &[bool; 2]) -> Option<[bool; 2]> {
    // Sorted: the agent holding the token last.
    (state[0] && !state[1]).then_some([state[1], state[0]])
}

impl ModelSpec for PassTheToken {
    const NAME: &'static str = "pass-the-token";
    const VARIANTS: &'static [&'static str] = &["toy"];
    const BOUNDS: &'static [BoundSpec] = &[];

    fn build(_variant: &str, bounds: &Bounds) -> Result<Self, SpecError> {
        Ok(PassTheToken {
            bounds: bounds.clone(),
            families_per_agent: false,
        })
    }

    fn variant(&self) -> &'static str {
        "toy"
    }

    fn bounds(&self) -> &Bounds {
        &self.bounds
    }

    fn property_defs(&self) -> Vec<PropertyDef<Self>> {
        Vec::new()
    }

    fn liveness_defs(&self) -> Vec<LivenessDef<Self>> {
        vec![LivenessDef {
            id: "X1",
            name: "X1 the token is dropped",
            trigger: None,
            goal: nobody_holds_it,
            fair: &["agent", "A*"],
        }]
    }

    fn fairness(&self, Pass(agent): &Pass) -> Option<&'static str> {
        Some(match (self.families_per_agent, agent) {
            (false, _) => "agent",
            (true, 0) => "A1",
            (true, _) => "A2",
        })
    }

    fn expected(&self, _property: &PropertyDef<Self>) -> Verdict {
        Verdict::Violated
    }

    fn step_words(&self, _before: &[bool; 2], Pass(agent): &Pass, _after: &[bool; 2]) -> String {
        format!("A{} passes the token", agent + 1)
    }

    fn scale(&self) -> Scale<Self> {
        Scale {
            symmetry: Some(sorted),
            liveness_symmetry: true,
            ..Scale::none()
        }
    }
}

fn toy(families_per_agent: bool) -> PassTheToken {
    PassTheToken {
        families_per_agent,
        ..PassTheToken::build("toy", &Bounds::resolve(&[], &[]).unwrap()).unwrap()
    }
}

fn symmetric() -> CheckOptions {
    CheckOptions {
        symmetry: true,
        ..CheckOptions::default()
    }
}

#[test]
fn a_quotient_lasso_that_returns_to_the_swapped_state_is_lifted_to_a_lasso_of_the_model() {
    let model = toy(false);
    let plain = run_with_paths(&model, &CheckOptions::default(), &mut |_| {});
    let reduced = run_with_paths(&model, &symmetric(), &mut |_| {});
    assert_eq!(plain.report.liveness.as_ref().unwrap().unique_states, 2);
    assert_eq!(reduced.report.liveness.as_ref().unwrap().unique_states, 1);
    for checked in [&plain, &reduced] {
        let property = &checked.report.properties[0];
        assert_eq!(property.verdict, Verdict::Violated);
        let path = &checked.paths["X1 the token is dropped"];
        let start = property.lasso_start.expect("a lasso, not a stop");
        // The lasso of the model: A1 passes, A2 passes, back at the start. The quotient's own
        // cycle is one step long and ends at [false, true].
        let states: Vec<[bool; 2]> = path.iter().map(|(state, _)| *state).collect();
        assert_eq!(states, vec![[true, false], [false, true], [true, false]]);
        assert_eq!(start, 0);
        assert_eq!(path[start].0, path.last().unwrap().0);
    }
}

#[test]
#[should_panic(expected = "Scale::liveness_symmetry is declared wrongly")]
fn families_named_per_agent_under_a_declared_liveness_symmetry_are_refused() {
    // A1's family and A2's are swapped by the symmetry: [true, false] enables A1 only, its
    // representative [false, true] A2 only. The quotient would judge fairness on labels that
    // are not the model's; the search refuses at the first state that shows it.
    run(toy(true), &symmetric(), &mut |_| {});
}

/// Per-actor families on the quotient (`Scale::actor_families`): two agents pass a token, and
/// the one without it may grab it for good (the goal). Passing forever is fair — each agent is
/// always enabled and each passes again and again — so "eventually grabbed" is violated. The
/// quotient has one state before the grab, whose only cycle is A2's pass moving A2 into A1's
/// slot: A1 serves itself there only through that renaming, which the closure over the
/// permutations the cycle generates must see.
#[derive(Clone)]
struct GrabTheToken {
    bounds: Bounds,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Hand {
    Pass(usize),
    Grab(usize),
}

/// (holder, grabbed).
type Table = (usize, bool);

impl Model for GrabTheToken {
    type State = Table;
    type Action = Hand;

    fn init_states(&self) -> Vec<Table> {
        vec![(0, false)]
    }

    fn actions(&self, (holder, grabbed): &Table, actions: &mut Vec<Hand>) {
        if !grabbed {
            actions.push(Hand::Pass(*holder));
            actions.push(Hand::Grab(1 - holder));
        }
    }

    fn next_state(&self, (holder, _): &Table, action: Hand) -> Option<Table> {
        Some(match action {
            Hand::Pass(agent) => (1 - agent, false),
            Hand::Grab(_) => (*holder, true),
        })
    }
}

fn grabbed(_model: &GrabTheToken, state: &Table) -> bool {
    state.1
}

/// The representative: A2 holds the token; renaming swaps the agents when A1 holds it.
fn held_by_the_second(_model: &GrabTheToken, state: &Table) -> (Option<Table>, Renaming) {
    let mut renaming = identity_renaming();
    if state.0 == 0 {
        renaming.swap(0, 1);
        return (Some((1, state.1)), renaming);
    }
    (None, renaming)
}

fn held_by_the_second_only(model: &GrabTheToken, state: &Table) -> Option<Table> {
    held_by_the_second(model, state).0
}

impl ModelSpec for GrabTheToken {
    const NAME: &'static str = "grab-the-token";
    const VARIANTS: &'static [&'static str] = &["toy"];
    const BOUNDS: &'static [BoundSpec] = &[];

    fn build(_variant: &str, bounds: &Bounds) -> Result<Self, SpecError> {
        Ok(GrabTheToken {
            bounds: bounds.clone(),
        })
    }

    fn variant(&self) -> &'static str {
        "toy"
    }

    fn bounds(&self) -> &Bounds {
        &self.bounds
    }

    fn property_defs(&self) -> Vec<PropertyDef<Self>> {
        Vec::new()
    }

    fn liveness_defs(&self) -> Vec<LivenessDef<Self>> {
        vec![LivenessDef {
            id: "X2",
            name: "X2 the token is grabbed",
            trigger: None,
            goal: grabbed,
            fair: &["A*"],
        }]
    }

    fn fairness(&self, action: &Hand) -> Option<&'static str> {
        let (Hand::Pass(agent) | Hand::Grab(agent)) = *action;
        Some(["A1", "A2"][agent])
    }

    fn expected(&self, _property: &PropertyDef<Self>) -> Verdict {
        Verdict::Violated
    }

    fn step_words(&self, _before: &Table, action: &Hand, _after: &Table) -> String {
        format!("{action:?}")
    }

    fn scale(&self) -> Scale<Self> {
        Scale {
            symmetry: Some(held_by_the_second_only),
            actor_families: Some(ActorFamilies {
                families: |_| vec!["A1", "A2"],
                representative: held_by_the_second,
            }),
            ..Scale::none()
        }
    }
}

#[test]
fn a_fair_cycle_that_serves_an_actor_only_through_a_renaming_is_found_on_the_per_actor_quotient() {
    let model = GrabTheToken::build("toy", &Bounds::resolve(&[], &[]).unwrap()).unwrap();
    let plain = run_with_paths(&model, &CheckOptions::default(), &mut |_| {});
    let reduced = run_with_paths(&model, &symmetric(), &mut |_| {});
    assert_eq!(plain.report.liveness.as_ref().unwrap().unique_states, 4);
    assert_eq!(reduced.report.liveness.as_ref().unwrap().unique_states, 2);
    for checked in [&plain, &reduced] {
        let property = &checked.report.properties[0];
        assert_eq!(property.verdict, Verdict::Violated);
        let path = &checked.paths["X2 the token is grabbed"];
        let start = property.lasso_start.expect("a lasso, not a stop");
        // A1 passes, A2 passes, back at the start: both agents pass on the model's own cycle.
        let steps: Vec<(Table, Option<Hand>)> = path.clone();
        assert_eq!(
            steps,
            vec![
                ((0, false), Some(Hand::Pass(0))),
                ((1, false), Some(Hand::Pass(1))),
                ((0, false), None),
            ]
        );
        assert_eq!(start, 0);
    }
}
