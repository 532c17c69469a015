//! What `oncecheck` needs of the relay model: the variants, the bound table with its per-variant
//! defaults and named bound sets, the expected verdict of every property per variant (derived
//! from the bounds where a bound removes a case), and the hooks into liveness, scale and words.
//!
//! Invariants: every bound has a unit-named key, a default inside [min, max] and a help text;
//! an expectation changes only with the variant or a bound that removes its case.

use super::*;

/// The initial table: empty, or legacy data an ADD-era relay left behind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Legacy {
    Empty,
    /// Counter at 2, op 1 present, op 2 absent: seq 2 was burned by an ADD-era relay.
    Gap,
    /// Counter at 1 with ops 1, 2 and 3 present: a run of occupied seqs above the counter.
    RunAboveCounter,
}

/// The model's bounds, resolved from the `oncecheck` bound table.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct RelayBounds {
    pub new_writers: u8,
    pub add_era_writers: u8,
    pub ops_per_writer: u8,
    /// The last writer's push starts with this many of the first writer's ops (a client
    /// re-push of ops another relay stored).
    pub repush_ops: u8,
    /// Responses that may be lost after commit in one run; each is a lost round of its writer.
    pub lost_responses_max: u8,
    pub pullers: u8,
    pub pulls_per_puller: u8,
    pub page_limit: u8,
    pub legacy: Vec<Legacy>,
    /// The contention budget: lost rounds in a row before an append gives up.
    pub lost_rounds_max: u8,
    /// false: a committed transaction becomes visible at once (no visibility window).
    pub window: bool,
    /// The push deadline, abstractly: the rounds (transactions) a push may send; 0: none.
    pub push_rounds_max: u8,
    /// Fold consumers reading the stream feed (0 or 1).
    pub stream_folders: u8,
    /// Old ops the truncator may delete in one run.
    pub truncations_max: u8,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Variant {
    AddEra,
    CounterOnly,
    Fixed,
    Mixed,
}

impl Variant {
    pub fn name(self) -> &'static str {
        match self {
            Variant::AddEra => "add-era",
            Variant::CounterOnly => "counter-only",
            Variant::Fixed => "fixed",
            Variant::Mixed => "mixed",
        }
    }
}

pub const BOUNDS: &[BoundSpec] = &[
    BoundSpec {
        key: "new_writers",
        default: 2,
        min: 0,
        max: 4,
        help: "new-build writers",
    },
    BoundSpec {
        key: "add_era_writers",
        default: 1,
        min: 0,
        max: 3,
        help: "ADD-era writers (add-era: all writers; mixed: beside the new ones)",
    },
    BoundSpec {
        key: "ops_per_writer",
        default: 2,
        min: 1,
        max: 4,
        help: "ops in each writer's push",
    },
    BoundSpec {
        key: "repush_ops",
        default: 1,
        min: 0,
        max: 4,
        help: "the last writer's push starts with this many of the first writer's ops (a re-push)",
    },
    BoundSpec {
        key: "lost_responses_max",
        default: 0,
        min: 0,
        max: 3,
        help: "responses lost after commit in one run (each is a lost round, retried in place)",
    },
    BoundSpec {
        key: "pullers",
        default: 1,
        min: 0,
        max: 3,
        help: "pullers",
    },
    BoundSpec {
        key: "pulls_per_puller",
        default: 3,
        min: 0,
        max: 6,
        help: "Query pages per puller",
    },
    BoundSpec {
        key: "page_limit",
        default: 2,
        min: 1,
        max: 8,
        help: "Limit of a puller's Query",
    },
    BoundSpec {
        key: "legacy",
        default: 1,
        min: 0,
        max: 3,
        help: "initial table: 0 empty, 1 legacy gap, 2 run above the counter, 3 all three",
    },
    BoundSpec {
        key: "lost_rounds_max",
        default: 2,
        min: 1,
        max: 6,
        help: "contention budget: lost rounds in a row",
    },
    BoundSpec {
        key: "window",
        default: 1,
        min: 0,
        max: 1,
        help: "1: committed items become visible one at a time (the visibility window)",
    },
    BoundSpec {
        key: "push_rounds_max",
        default: 0,
        min: 0,
        max: 12,
        help: "the push deadline as rounds a push may send (0: no deadline)",
    },
    BoundSpec {
        key: "stream_folders",
        default: 0,
        min: 0,
        max: 1,
        help: "fold consumers of the stream feed (order per item only)",
    },
    BoundSpec {
        key: "truncations_max",
        default: 0,
        min: 0,
        max: 3,
        help: "old ops the truncator may delete",
    },
];

/// CI bounds that differ per variant: the buggy variants need fewer actors to show their bug.
pub const VARIANT_DEFAULTS: &[(&str, &str, u32)] = &[
    // The seed's reproduction needs no visibility window: ADD hands out seqs before the writes.
    ("add-era", "new_writers", 0),
    ("add-era", "add_era_writers", 2),
    ("add-era", "legacy", 0),
    ("add-era", "window", 0),
    ("add-era", "stream_folders", 1),
    // The stream fold where visibility is out of order: the gap-aware watermark holds R8 where
    // the pullers' cursors lose R1.
    ("counter-only", "add_era_writers", 0),
    ("counter-only", "legacy", 0),
    ("counter-only", "stream_folders", 1),
    // The whole design from every initial table: empty, legacy gap, run above the counter, with
    // the push deadline and one lost response (the unknown outcome every write path must
    // survive). The lost response multiplies the state space by 8.9 (59,658 -> 532,650
    // states); the stream fold would multiply it by 2.6 more and runs in its own tests.
    ("fixed", "add_era_writers", 0),
    ("fixed", "legacy", 3),
    ("fixed", "push_rounds_max", 4),
    ("fixed", "lost_responses_max", 1),
    ("mixed", "new_writers", 1),
    ("mixed", "pulls_per_puller", 1),
    ("mixed", "legacy", 0),
    ("mixed", "lost_responses_max", 1),
];

/// The bound set `oncecheck check` runs beside `fixed`'s CI bounds: the stream fold and the
/// truncator, which the CI bounds leave out for time (the fold alone multiplies the state space
/// by 2.6), so that R8 and R9 are checked on reached states. One puller page, no push deadline
/// and no lost response keep it to 98,111 states; every initial table stays.
pub const BOUND_SETS: &[crate::check::BoundSet] = &[crate::check::BoundSet {
    name: "reach",
    variant: "fixed",
    overrides: &[
        ("stream_folders", 1),
        ("truncations_max", 1),
        ("pulls_per_puller", 1),
        ("push_rounds_max", 0),
        ("lost_responses_max", 0),
    ],
    reaches: &["R8", "R9"],
}];

impl ModelSpec for RelayModel {
    const NAME: &'static str = "relay";
    const VARIANTS: &'static [&'static str] = &["add-era", "counter-only", "fixed", "mixed"];
    const BOUNDS: &'static [BoundSpec] = BOUNDS;
    const VARIANT_DEFAULTS: &'static [(&'static str, &'static str, u32)] = VARIANT_DEFAULTS;
    const BOUND_SETS: &'static [crate::check::BoundSet] = BOUND_SETS;

    fn scale(&self) -> crate::check::Scale<Self> {
        scale::hooks(self)
    }

    fn build(variant: &str, bounds: &Bounds) -> Result<Self, SpecError> {
        let variant = match Self::resolve_variant(variant)? {
            "add-era" => Variant::AddEra,
            "counter-only" => Variant::CounterOnly,
            "fixed" => Variant::Fixed,
            _ => Variant::Mixed,
        };
        let legacy = match bounds.get("legacy") {
            0 => vec![Legacy::Empty],
            1 => vec![Legacy::Gap],
            2 => vec![Legacy::RunAboveCounter],
            _ => vec![Legacy::Empty, Legacy::Gap, Legacy::RunAboveCounter],
        };
        let narrow = |key: &str| bounds.get(key) as u8;
        Ok(RelayModel::new(
            variant,
            RelayBounds {
                new_writers: narrow("new_writers"),
                add_era_writers: narrow("add_era_writers"),
                ops_per_writer: narrow("ops_per_writer"),
                repush_ops: narrow("repush_ops"),
                lost_responses_max: narrow("lost_responses_max"),
                pullers: narrow("pullers"),
                pulls_per_puller: narrow("pulls_per_puller"),
                page_limit: narrow("page_limit"),
                legacy,
                lost_rounds_max: narrow("lost_rounds_max"),
                window: bounds.get("window") == 1,
                push_rounds_max: narrow("push_rounds_max"),
                stream_folders: narrow("stream_folders"),
                truncations_max: narrow("truncations_max"),
            },
        ))
    }

    fn variant(&self) -> &'static str {
        self.variant.name()
    }

    fn bounds(&self) -> &Bounds {
        &self.resolved
    }

    fn property_defs(&self) -> Vec<PropertyDef<Self>> {
        let always = ALWAYS.iter().map(|(id, name, condition)| PropertyDef {
            id,
            name,
            kind: Kind::Always,
            condition: *condition,
        });
        let sometimes = SOMETIMES.iter().map(|(id, name, condition)| PropertyDef {
            id,
            name,
            kind: Kind::Sometimes,
            condition: *condition,
        });
        always.chain(sometimes).collect()
    }

    fn liveness_defs(&self) -> Vec<crate::check::LivenessDef<Self>> {
        liveness::definitions()
    }

    fn fairness(&self, action: &Action) -> Option<&'static str> {
        liveness::family_of(action)
    }

    fn unreduced_actions(&self, state: &RelayState, actions: &mut Vec<Action>) -> bool {
        if !self.reductions {
            return false;
        }
        self.actions_of(state, actions, false);
        true
    }

    fn families_cut(&self, state: &RelayState, cut: &mut Vec<&'static str>) {
        liveness::families_cut(self, state, cut);
    }

    fn expected(&self, property: &PropertyDef<Self>) -> Verdict {
        if property.kind == Kind::Sometimes {
            return self.expected_reach(property.name);
        }
        let violated: &[&str] = match self.variant {
            // The seed's reproduction; R5 falls with it (a refused write burns its ADD seq), and
            // R10 (a puller past a skipped op never receives it).
            Variant::AddEra => &["R1", "R5", "R10"],
            Variant::CounterOnly => &["R1", "R10"],
            Variant::Fixed => &[],
            // The ordering guarantee holds only once every writer runs the new build.
            Variant::Mixed => &["R1", "R5", "R10"],
        };
        if violated.contains(&property.id) {
            Verdict::Violated
        } else {
            Verdict::Holds
        }
    }

    fn step_words(&self, before: &RelayState, action: &Action, after: &RelayState) -> String {
        describe(self, before, action, after)
    }

    fn state_roles(&self, state: &RelayState) -> Vec<(String, String)> {
        words::roles(self, state)
    }
}

impl RelayModel {
    /// Which reachability properties the bounds can reach: a partner whose actor or event is
    /// bounded away is unreached, and the rest are pinned per variant as they are at the CI
    /// bounds, so a change in reach is noticed.
    fn expected_reach(&self, name: &str) -> Verdict {
        let bounds = &self.bounds;
        let repush = bounds.repush_ops > 0 && self.writers.len() >= 2;
        let off: &[(bool, &str)] = &[
            (
                bounds.stream_folders == 0,
                "R8 reach: the fold watermark passes two new ops",
            ),
            (
                bounds.stream_folders == 0,
                "R8 reach: a stream record arrives before a lower one",
            ),
            (
                bounds.truncations_max == 0,
                "R9 reach: truncation deletes an op",
            ),
            (
                bounds.push_rounds_max == 0,
                "R6 reach: a push ends at its deadline",
            ),
            (
                bounds.lost_responses_max == 0,
                "R3 reach: a response is lost after commit",
            ),
            (!repush, "R3 reach: a re-push finds its own claim"),
            (
                !repush || self.variant == Variant::AddEra,
                "R3 reach: the re-push fast path reads the remaining claims",
            ),
        ];
        if off.iter().any(|(is_off, reach)| *is_off && *reach == name) {
            return Verdict::Unreached;
        }
        let unreached: &[&str] = match self.variant {
            Variant::Fixed => &[],
            // No window, no counter condition, no legacy data, no new-build writer.
            Variant::AddEra => &[
                "R1 reach: an op becomes visible after a later op's transaction was sent",
                "R2 reach: a round is lost to a stale counter",
                "R6 reach: a round is lost to a conflict",
                "R4 reach: a floor step over occupied seqs commits",
                "R5 reach: a legacy gap is crossed by a flip",
                "R7 reach: a push completes uncontended",
                "R7 reach: an uncontended push pays one extra round",
            ],
            Variant::CounterOnly => &[
                "R4 reach: a floor step over occupied seqs commits",
                "R5 reach: a legacy gap is crossed by a flip",
            ],
            // An ADD-era writer's burned seq is a legacy gap to the new writer: it is crossed.
            Variant::Mixed => &["R4 reach: a floor step over occupied seqs commits"],
        };
        if unreached.contains(&name) {
            Verdict::Unreached
        } else {
            Verdict::Reached
        }
    }
}
