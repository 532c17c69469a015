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
