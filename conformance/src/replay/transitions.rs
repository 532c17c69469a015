//! Transition coverage of a replay: which model transitions the replayed traces drove through
//! the real code, against every transition reachable in the model at the traces' bounds.
//!
//! A transition is a step's coverage label: the action's name, its parameters that are not an
//! actor's index, and the model's coverage context (`crate::check::traces::coverage_label`,
//! `TraceEncoding::coverage_context`) — the covering set's key, so the covering set of a variant
//! drives every one of them. Traces are grouped by (model, variant, bounds): a figure is only
//! ever "n of the transitions of this model at these bounds".
//!
//! Invariants: only a trace that replayed without divergence counts as driving its
//! transitions; the reachable set comes from a breadth-first search of the whole state space at
//! the group's bounds (`TraceEncoding::covering_steps`), never from the traces themselves.

use oncecheck_model::check::Bounds;
use oncecheck_model::trace::{LoadedTrace, TraceEncoding};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Debug;
use std::hash::Hash;

/// The version of `oncecheck replay --summary-json`'s document (`docs/traces.md`), bumped on any
/// change a reader could notice.
pub const SUMMARY_JSON_SCHEMA: u32 = 1;

/// The model, variant and bounds a trace belongs to.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Group {
    pub model: String,
    pub variant: String,
    pub bounds: BTreeMap<String, u32>,
}

impl Group {
    pub fn new(model: &str, variant: &str, bounds: &Bounds) -> Group {
        Group {
            model: model.to_string(),
            variant: variant.to_string(),
            bounds: bounds.0.clone(),
        }
    }
}

impl std::fmt::Display for Group {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let bounds: Vec<String> = self
            .bounds
            .iter()
            .map(|(key, value)| format!("{key}={value}"))
            .collect();
        write!(f, "{}/{} [{}]", self.model, self.variant, bounds.join(" "))
    }
}

/// The coverage label of a step: [`crate::check::traces::coverage_label`] and the context.
fn label_of<M>(model: &M, before: &M::State, action: &M::Action) -> String
where
    M: TraceEncoding,
    M::State: Clone + Debug + Hash + Eq + Send + Sync + 'static,
    M::Action: Clone + Debug + PartialEq + Send + Sync + 'static,
{
    let mut label = crate::check::traces::coverage_label(model, action);
    if let Some(context) = model.coverage_context(before, action) {
        label.push_str(&format!(" ({context})"));
    }
    label
}

/// Every transition reachable in `model` at its bounds.
pub fn reachable<M>(model: &M) -> BTreeSet<String>
where
    M: TraceEncoding,
    M::State: Clone + Debug + Hash + Eq + Send + Sync + 'static,
    M::Action: Clone + Debug + PartialEq + Eq + Hash + Send + Sync + 'static,
{
    model
        .covering_steps()
        .into_iter()
        .map(|((action, context), _)| {
            let mut label = crate::check::traces::coverage_label(model, &action);
            if let Some(context) = context {
                label.push_str(&format!(" ({context})"));
            }
            label
        })
        .collect()
}

/// A trace whose transitions the replay summary counts.
pub trait Covered {
    /// The model, variant and bounds of the trace.
    fn group(&self) -> Group;
    /// The transitions the trace's steps take.
    fn transitions(&self) -> BTreeSet<String>;
    /// Every transition reachable in the trace's model (a search of the whole state space).
    fn reachable(&self) -> BTreeSet<String>;
}

impl<M> Covered for LoadedTrace<M>
where
    M: TraceEncoding,
    M::State: Clone + Debug + Hash + Eq + Send + Sync + 'static,
    M::Action: Clone + Debug + PartialEq + Eq + Hash + Send + Sync + 'static,
{
    fn group(&self) -> Group {
        Group::new(M::NAME, self.model.variant(), self.model.bounds())
    }

    fn transitions(&self) -> BTreeSet<String> {
        self.path
            .iter()
            .filter_map(|(state, action)| Some(label_of(&self.model, state, action.as_ref()?)))
            .collect()
    }

    fn reachable(&self) -> BTreeSet<String> {
        reachable(&self.model)
    }
}

/// One group's figure: the transitions the conforming traces drove, of those reachable.
#[derive(Debug, Clone, Serialize)]
pub struct GroupCoverage {
    #[serde(flatten)]
    pub group: Group,
    /// Conforming traces of the group.
    pub traces: usize,
    pub covered: usize,
    pub reachable: usize,
    /// Reachable transitions no conforming trace drove.
    pub missing: Vec<String>,
    /// Transitions driven that the search does not reach: none unless the model and a trace's
    /// bounds disagree (a trace loads only if every step re-executes, so never in practice).
    pub unexpected: Vec<String>,
}

impl GroupCoverage {
    pub fn complete(&self) -> bool {
        self.missing.is_empty() && self.unexpected.is_empty()
    }
}

/// What one trace drives: its group and its transitions, taken before it is replayed.
#[derive(Debug, Clone)]
pub struct Driven {
    pub group: Group,
    pub transitions: BTreeSet<String>,
}

/// The transitions a set of traces can drive, and every group's reachable transitions (one
/// search of the state space per group), before anything is replayed.
pub struct Plan {
    pub driven: Vec<Driven>,
    pub reachable: BTreeMap<Group, BTreeSet<String>>,
}

impl Plan {
    pub fn of<'a, T: Covered + 'a>(traces: impl IntoIterator<Item = &'a T>) -> Plan {
        let mut driven = Vec::new();
        let mut reachable = BTreeMap::new();
        for trace in traces {
            let group = trace.group();
            if !reachable.contains_key(&group) {
                reachable.insert(group.clone(), trace.reachable());
            }
            driven.push(Driven {
                group,
                transitions: trace.transitions(),
            });
        }
        Plan { driven, reachable }
    }

    /// Per group, the union of the transitions of the traces `conforming` says conformed (by
    /// index into `driven`), against the reachable ones. Every group of the plan is reported,
    /// a group with no conforming trace at 0.
    pub fn measure(&self, conforming: impl Fn(usize) -> bool) -> Vec<GroupCoverage> {
        let mut union: BTreeMap<&Group, (usize, BTreeSet<&String>)> = self
            .reachable
            .keys()
            .map(|group| (group, (0, BTreeSet::new())))
            .collect();
        for (index, trace) in self.driven.iter().enumerate() {
            if !conforming(index) {
                continue;
            }
            let entry = union.entry(&trace.group).or_default();
            entry.0 += 1;
            entry.1.extend(trace.transitions.iter());
        }
        union
            .into_iter()
            .map(|(group, (traces, driven))| {
                let reachable = &self.reachable[group];
                GroupCoverage {
                    group: group.clone(),
                    traces,
                    covered: driven
                        .iter()
                        .filter(|label| reachable.contains(**label))
                        .count(),
                    reachable: reachable.len(),
                    missing: reachable
                        .iter()
                        .filter(|label| !driven.contains(label))
                        .cloned()
                        .collect(),
                    unexpected: driven
                        .iter()
                        .filter(|label| !reachable.contains(**label))
                        .map(|label| label.to_string())
                        .collect(),
                }
            })
            .collect()
    }
}

/// The summary line of one group, as `oncecheck replay` prints it.
pub fn line(coverage: &GroupCoverage, target: &str) -> String {
    format!(
        "coverage {} on {target}: {} of {} transitions (action x coverage context) driven through the real code by {} conforming traces",
        coverage.group, coverage.covered, coverage.reachable, coverage.traces
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use oncecheck_model::check::ModelSpec;
    use oncecheck_model::token::TokenModel;

    fn token(variant: &str) -> TokenModel {
        let bounds = TokenModel::resolve_bounds(variant, &[]).unwrap();
        TokenModel::build(variant, &bounds).unwrap()
    }

    #[test]
    fn the_covering_set_drives_every_reachable_transition_and_one_path_does_not() {
        let model = token("tokenless");
        let reachable = reachable(&model);
        let traces: Vec<LoadedTrace<TokenModel>> =
            crate::check::traces::covering_paths(&model, 1, 200)
                .into_iter()
                .map(|(_, path)| LoadedTrace {
                    model: model.clone(),
                    meta: oncecheck_model::trace::TraceMeta {
                        kind: "path".into(),
                        property: None,
                        description: String::new(),
                    },
                    path,
                    lasso_start: None,
                })
                .collect();
        assert_eq!(reachable.len(), 10, "{reachable:#?}");
        let plan = Plan::of(&traces);
        let all = plan.measure(|_| true);
        assert_eq!(all.len(), 1);
        assert_eq!((all[0].covered, all[0].reachable), (10, 10));
        assert!(all[0].complete());
        let one = plan.measure(|index| index == 0);
        assert_eq!((one[0].covered, one[0].reachable), (3, 10));
        assert_eq!(one[0].missing.len(), 7);
        assert!(!one[0].complete());
    }
}
