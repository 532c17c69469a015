//! What `oncecheck` needs of the idempotency model: variants, bounds, properties with their
//! requirement IDs, the expected verdicts (the table of specs/idempotency-middleware.md,
//! derived from the bounds where a bound removes a case) and the steps in HTTP words.

use super::*;
use crate::check::{BoundSpec, Kind, ModelSpec, PropertyDef, SpecError, Verdict};

const BOUNDS: &[BoundSpec] = &[
    BoundSpec {
        key: "clients",
        default: 2,
        min: 1,
        max: 3,
        help: "clients sending one request each with key k",
    },
    BoundSpec {
        key: "fingerprints",
        default: 2,
        min: 1,
        max: 2,
        help: "distinct request fingerprints (A, B)",
    },
    BoundSpec {
        key: "outcomes",
        default: 5,
        min: 1,
        max: 9,
        help: "handler outcomes explored, in Outcome::ALL order",
    },
    BoundSpec {
        key: "ticks",
        default: 2,
        min: 0,
        max: 4,
        help: "clock ticks (lease 1 tick, row expiry 2 ticks)",
    },
    BoundSpec {
        key: "finalize_faults",
        default: 2,
        min: 0,
        max: 5,
        help: "finalize statements answered with an error (unknown outcome)",
    },
    BoundSpec {
        key: "claim_faults",
        default: 1,
        min: 0,
        max: 2,
        help: "claim statements answered with an error (503)",
    },
    BoundSpec {
        key: "cancellations",
        default: 1,
        min: 0,
        max: 3,
        help: "client cancellations (at any await point)",
    },
    BoundSpec {
        key: "process_faults",
        default: 0,
        min: 0,
        max: 1,
        help: "process stalls (past the lease) or deaths",
    },
    BoundSpec {
        key: "sqlite",
        default: 0,
        min: 0,
        max: 1,
        help: "1: SQLite's two-statement claim (claim, then read)",
    },
];

/// The properties as declared, in the order `check` reports them: requirement ID, name, kind
/// and condition. Each `always` is followed by its `sometimes` partners.
type Declared = (
    &'static str,
    &'static str,
    Kind,
    fn(&IdempotencyModel, &IdempotencyState) -> bool,
);

const PROPERTIES: &[Declared] = {
    use Kind::{Always, Sometimes};
    &[
        ("M1", M1_AT_MOST_ONCE, Always, m1_holds),
        ("M1", "M1 a replay is served", Sometimes, m1_example),
        (
            "M1",
            M1_ROLLED_BACK_RUNS_AGAIN,
            Sometimes,
            m1_rolled_back_example,
        ),
        ("M1", M1_HELD_UNKNOWN, Sometimes, m1_held_example),
        ("M1", M1_RECONCILED, Sometimes, m1_reconciled_example),
        ("M2", "M2 no-poison", Always, m2_holds),
        ("M2", "M2 a sentinel is stored", Sometimes, m2_example),
        ("M3", M3_TERMINAL_RULE, Always, m3_holds),
        (
            "M3",
            "M3 the drop guard stores the sentinel",
            Sometimes,
            m3_example,
        ),
        ("M3", M3_UNKNOWN_FINALIZE, Sometimes, m3_unknown_example),
        ("M4", "M4 replay-fidelity", Always, m4_holds),
        (
            "M4",
            "M4 a sentinel replay is served",
            Sometimes,
            m4_example,
        ),
        ("M5", "M5 fingerprint", Always, m5_holds),
        ("M5", "M5 a 422 is answered", Sometimes, m5_example),
        ("M6", "M6 in-flight", Always, m6_holds),
        ("M6", "M6 a 409 is answered", Sometimes, m6_example),
        ("M6", M6_RENEWED, Sometimes, m6_renewed_example),
        ("M7", "M7 live-body", Always, m7_holds),
        (
            "M7",
            "M7 an over-cap tail streams after the finalize",
            Sometimes,
            m7_example,
        ),
        ("M8", "M8 fencing", Always, m8_holds),
        ("M8", M8_STALE_LOST, Sometimes, m8_example),
        ("M9", "M9 non-2xx passthrough", Always, m9_holds),
        ("M9", "M9 a failed key runs again", Sometimes, m9_example),
        ("M10", M10_EXPIRED_FREE, Always, m10_holds),
        (
            "M10",
            "M10 an expired key is claimed",
            Sometimes,
            m10_example,
        ),
    ]
};

impl ModelSpec for IdempotencyModel {
    fn scale(&self) -> crate::check::Scale<Self> {
        super::scale::hooks(self)
    }

    const NAME: &'static str = "idempotency";
    const VARIANTS: &'static [&'static str] = &[
        "pre-fix",
        "fixed",
        "fenced",
        "renewed",
        "atomic",
        "fail-closed",
    ];
    const BOUNDS: &'static [BoundSpec] = BOUNDS;

    fn build(variant: &str, bounds: &Bounds) -> Result<Self, SpecError> {
        let variant_name = Self::resolve_variant(variant)?;
        let variant = match variant_name {
            "pre-fix" => Variant::PreFix,
            "fixed" => Variant::Fixed,
            "fenced" => Variant::Fenced,
            "atomic" => Variant::Atomic,
            "fail-closed" => Variant::FailClosed,
            _ => Variant::Renewed,
        };
        let fingerprints =
            [Fingerprint::A, Fingerprint::B][..bounds.get("fingerprints") as usize].to_vec();
        Ok(IdempotencyModel {
            variant,
            variant_name,
            bounds: bounds.clone(),
            clients: bounds.get("clients") as usize,
            fingerprints,
            outcomes: Outcome::ALL[..bounds.get("outcomes") as usize].to_vec(),
            sqlite: bounds.get("sqlite") == 1,
            mutation: None,
        })
    }

    fn variant(&self) -> &'static str {
        self.variant_name
    }

    fn bounds(&self) -> &Bounds {
        &self.bounds
    }

    fn property_defs(&self) -> Vec<PropertyDef<Self>> {
        PROPERTIES
            .iter()
            .map(|(id, name, kind, condition)| PropertyDef {
                id,
                name,
                kind: *kind,
                condition: *condition,
            })
            .collect()
    }

    fn liveness_defs(&self) -> Vec<crate::check::LivenessDef<Self>> {
        liveness::definitions()
    }

    fn fairness(&self, action: &Action) -> Option<&'static str> {
        liveness::family_of(action)
    }

    fn families_cut(&self, state: &IdempotencyState, cut: &mut Vec<&'static str>) {
        liveness::families_cut(self, state, cut);
    }

    /// The table of specs/idempotency-middleware.md section 5 at the CI bounds; where a bound
    /// removes a case (no clock, one client, no process fault) the expectation follows it.
    fn expected(&self, property: &PropertyDef<Self>) -> Verdict {
        let ticks = self.bounds.get("ticks");
        let duplicates = self.clients >= 2;
        let lease_can_lapse = duplicates && ticks >= u32::from(LEASE_TICKS);
        let row_can_expire = duplicates && ticks >= u32::from(ROW_TTL_TICKS);
        let finalize_can_end_unknown =
            self.bounds.get("finalize_faults") >= u32::from(self.attempts());
        let process_faults = self.bounds.get("process_faults") >= 1;
        let reached = |yes: bool| {
            if yes {
                Verdict::Reached
            } else {
                Verdict::Unreached
            }
        };
        let holds = |yes: bool| {
            if yes {
                Verdict::Holds
            } else {
                Verdict::Violated
            }
        };
        let pre_fix = self.variant == Variant::PreFix;
        match property.name {
            // The lease crossing: without the heartbeat a slow handler's claim is taken over.
            M1_AT_MOST_ONCE => match self.variant {
                Variant::Renewed => {
                    holds(!(lease_can_lapse && (process_faults || finalize_can_end_unknown)))
                }
                // The effects commit with the row, or the key is held until reconciled.
                Variant::Atomic | Variant::FailClosed => holds(true),
                _ => holds(!lease_can_lapse),
            },
            // A run whose effects rolled back (a failed or lost commit, a client gone, a dead
            // process) leaves its claim to lapse and a duplicate to run, once.
            M1_ROLLED_BACK_RUNS_AGAIN => reached(
                self.atomic()
                    && lease_can_lapse
                    && (self.bounds.get("finalize_faults") >= 1
                        || self.bounds.get("cancellations") >= 1
                        || process_faults),
            ),
            // A claim left processing (its claim committed unheard, its client gone before the
            // 2xx, its finalize unknown, its process dead) lapses and is held, then resolved.
            M1_HELD_UNKNOWN | M1_RECONCILED => reached(
                self.fail_closed()
                    && lease_can_lapse
                    && (self.bounds.get("claim_faults") >= 1
                        || self.bounds.get("cancellations") >= 1
                        || finalize_can_end_unknown
                        || process_faults),
            ),
            "M2 no-poison" | "M4 replay-fidelity" | "M7 live-body" | "M9 non-2xx passthrough" => {
                holds(!pre_fix)
            }
            M3_TERMINAL_RULE => holds(!pre_fix),
            "M8 fencing" => holds(
                !(lease_can_lapse && matches!(self.variant, Variant::PreFix | Variant::Fixed)),
            ),
            M10_EXPIRED_FREE => holds(!(pre_fix && row_can_expire)),
            "M5 fingerprint" | "M6 in-flight" => holds(true),
            // Pre-fix never streams a tail and has no drop guard.
            "M3 the drop guard stores the sentinel" => reached(!pre_fix && !self.atomic()),
            "M7 an over-cap tail streams after the finalize" => reached(!pre_fix),
            // `atomic` commits the effects with the row: no processing row has committed effects.
            M3_UNKNOWN_FINALIZE => reached(finalize_can_end_unknown && !self.atomic()),
            M6_RENEWED => reached(self.heartbeat() && ticks >= u32::from(LEASE_TICKS)),
            // Unfenced finalizers are never lost: they overwrite (M8 violated).
            // A finalize is also lost after its own earlier attempt committed and the failed row was
            // claimed again, so no clock is needed when finalizes can fail.
            M8_STALE_LOST => reached(
                !matches!(self.variant, Variant::PreFix | Variant::Fixed)
                    && (lease_can_lapse || (duplicates && self.bounds.get("finalize_faults") >= 1)),
            ),
            "M10 an expired key is claimed" => reached(row_can_expire),
            "M4 a sentinel replay is served"
            | "M1 a replay is served"
            | "M2 a sentinel is stored" => {
                reached(duplicates || property.name == "M2 a sentinel is stored")
            }
            "M5 a 422 is answered" => reached(duplicates && self.fingerprints.len() == 2),
            "M6 a 409 is answered" | "M9 a failed key runs again" => reached(duplicates),
            M11_ANSWERED => holds(true),
            name => panic!("no expectation for property {name}"),
        }
    }

    fn state_roles(&self, state: &IdempotencyState) -> Vec<(String, String)> {
        super::words::roles(state)
    }

    fn step_words(
        &self,
        before: &IdempotencyState,
        action: &Action,
        after: &IdempotencyState,
    ) -> String {
        let name = |client: &usize| format!("C{}", client + 1);
        let generation_of = |client: usize| before.clients[client].stage.working_on().unwrap_or(0);
        let row_generation = before.row.map_or(0, |row| row.generation);
        match action {
            Action::ClientSends { client, fingerprint } => {
                format!("{} POST /transfers Idempotency-Key k fp {fingerprint:?}", name(client))
            }
            Action::MiddlewareClaims { client } => match after.clients[*client].stage {
                Stage::Running { generation } => {
                    let seen = after.history.claimed_over.get(&generation).copied().unwrap_or(Seen::Absent);
                    format!("{}: claim k {}, generation {generation}", name(client), takeover_words(seen))
                }
                Stage::Reading { .. } => format!("{}: claim k takes nothing (SQLite: the row is read next)", name(client)),
                Stage::Done(answer) => format!("{}: claim k -> {}", name(client), refusal_words(answer)),
                _ => format!("{}: claim", name(client)),
            },
            Action::MiddlewareClaimFails { client, committed } => format!(
                "{}: claim k answers a database error -> 503 (the claim {})",
                name(client),
                if after.generations != before.generations { "did commit: k is processing with no owner" } else if *committed { "did commit but took nothing" } else { "did not commit" }
            ),
            Action::MiddlewareReadsRow { client } => match after.clients[*client].stage {
                Stage::Done(answer) => format!("{}: reads row k -> {}", name(client), refusal_words(answer)),
                _ => format!("{}: reads row k: claimable now, claims again", name(client)),
            },
            Action::HandlerResponds { client, outcome } => {
                format!("{}: handler returns {}", name(client), outcome.words())
            }
            Action::MiddlewareCaptures { client } => match after.clients[*client].stage {
                Stage::Finalizing { write, received, outcome, .. } => format!(
                    "{}: middleware reads the body, will finalize {} and send {}",
                    name(client),
                    write.words(),
                    received_words(received, outcome)
                ),
                _ => format!("{}: middleware reads the body and returns it without finalizing", name(client)),
            },
            Action::MiddlewareFinalizes { client, result } => {
                let (write, atomic) = match before.clients[*client].stage {
                    Stage::Finalizing { write, outcome, .. } => {
                        (write.words(), self.atomic() && outcome.is_success())
                    }
                    _ => ("?", false),
                };
                let what = if atomic { "commit the handler's effects with" } else { "finalize" };
                format!(
                    "{}: {what} {write} {} (finalizer generation {}, row generation {row_generation})",
                    name(client),
                    result_words(*result),
                    generation_of(*client)
                )
            }
            Action::DropGuardFinalizes { client, result } => format!(
                "{}: drop guard finalizes succeeded(too_large) {} (generation {}, row generation {row_generation})",
                name(client),
                result_words(*result),
                generation_of(*client)
            ),
            Action::TailStreams { client } => format!("{}: the over-cap tail streams; the client has every byte", name(client)),
            Action::ClientCancels { client, in_flight_commits, .. } => {
                let during = cancel_point_words(before.clients[*client].stage, *in_flight_commits);
                let guard = if matches!(after.clients[*client].stage, Stage::Guarding { .. }) {
                    "; the drop guard takes over"
                } else {
                    ""
                };
                format!("{} cancels (drops the response future) {during}{guard}", name(client))
            }
            Action::ClockTicks => {
                let renewed = match (before.row, after.row) {
                    (Some(old), Some(new)) if new.lease_expires_at != old.lease_expires_at => {
                        format!("; the heartbeat renews generation {}'s lease to {}", new.generation, new.lease_expires_at)
                    }
                    _ => String::new(),
                };
                format!("the clock ticks to {}{renewed}", after.now)
            }
            Action::CleanupPurges => "the cleanup job deletes the expired row k".to_string(),
            Action::ProcessStalls { client } => {
                format!("{}'s process stalls past the lease (its heartbeat misses the renewal)", name(client))
            }
            Action::ProcessDies { client } => format!("{}'s process dies", name(client)),
            Action::ReconcilerResolves { applied } => format!(
                "the reconciler finds generation {row_generation}'s effects {} -> {}",
                if *applied { "happened" } else { "did not happen" },
                if *applied { "succeeded(too_large)" } else { "failed" }
            ),
        }
    }
}

/// A refusal or replay the middleware answers from the row, in words.
fn refusal_words(answer: Answer) -> String {
    match answer {
        Answer::Conflict { row_expired } => {
            format!("409 in flight{}", expired_note(row_expired))
        }
        Answer::Mismatch { row_expired } => {
            format!("422 fingerprint mismatch{}", expired_note(row_expired))
        }
        Answer::Replay {
            stored,
            marked,
            row_expired,
            ..
        } => format!(
            "replay of {} -> 200, idempotency-replayed: {marked}{}",
            Write::Succeeded(stored).words(),
            expired_note(row_expired)
        ),
        Answer::Unavailable => "503 cache unavailable".to_string(),
        Answer::OutcomeUnknown { row_expired } => {
            format!(
                "409 outcome unknown (held until reconciled){}",
                expired_note(row_expired)
            )
        }
        Answer::Fresh { .. } => "a fresh answer".to_string(),
    }
}

/// Where a client's cancellation drops the response future, in words.
fn cancel_point_words(stage: Stage, in_flight_commits: bool) -> &'static str {
    match stage {
        Stage::Claiming { .. } => "while the key is claimed",
        Stage::Reading { .. } => "while the row is read for a replay",
        Stage::Running { .. } => "while the handler runs",
        Stage::Capturing { .. } => "while the middleware reads the body",
        Stage::Finalizing { .. } if in_flight_commits => {
            "while the finalize is in flight (it still commits)"
        }
        Stage::Finalizing { .. } => "while the finalize is in flight",
        Stage::Streaming { .. } => "while the tail streams",
        _ => "",
    }
}

/// What goes out with the response head, in words.
fn received_words(received: Received, outcome: Outcome) -> &'static str {
    if received == Received::exactly(outcome) {
        "the handler's body"
    } else if received == Received::HEAD {
        "the handler's body up to the cap (the tail streams after the finalize)"
    } else if received == Received::NOTHING {
        "an EMPTY body"
    } else {
        "PART of the handler's body"
    }
}

fn expired_note(row_expired: bool) -> &'static str {
    if row_expired {
        " (the row had EXPIRED)"
    } else {
        ""
    }
}

fn takeover_words(seen: Seen) -> &'static str {
    match seen {
        Seen::Absent => "inserts a processing row",
        Seen::Expired => "takes over the expired row",
        Seen::LeaseLapsed => "takes over the row whose lease lapsed",
        Seen::Failed => "takes over the failed row",
        Seen::LiveLease => "takes over a LIVE lease",
        Seen::Succeeded => "takes over a SUCCEEDED row",
        Seen::OtherFingerprint => "takes over a row of ANOTHER fingerprint",
    }
}

fn result_words(result: DbResult) -> &'static str {
    match result {
        DbResult::Matched => "applied",
        DbResult::NoRowMatched => "lost",
        DbResult::Error { committed: true } => "answered an error, outcome unknown (it did commit)",
        DbResult::Error { committed: false } => {
            "answered an error, outcome unknown (it did not commit)"
        }
    }
}

// Property names shared by `property_defs`, `expected` and the tests.
pub const M1_AT_MOST_ONCE: &str = "M1 at-most-once";
pub const M1_ROLLED_BACK_RUNS_AGAIN: &str = "M1 a run whose effects rolled back runs again, once";
pub const M1_HELD_UNKNOWN: &str = "M1 a key is held outcome-unknown";
pub const M1_RECONCILED: &str = "M1 the reconciler resolves an unknown outcome";
pub const M3_TERMINAL_RULE: &str = "M3 terminal-rule";
pub const M3_UNKNOWN_FINALIZE: &str = "M3 an unknown finalize leaves the row processing";
pub const M6_RENEWED: &str = "M6 a heartbeat keeps a slow handler's claim";
pub const M8_STALE_LOST: &str = "M8 a stale finalizer is lost";
pub const M10_EXPIRED_FREE: &str = "M10 expired-key-free";

/// The shortest path (fewest actions) from an initial state to a state where `property`'s
/// discovery condition holds: a violating state for `always`, an example for `sometimes`.
pub fn shortest_trace<M>(
    model: &M,
    property: &PropertyDef<M>,
) -> Option<Vec<crate::check::TraceStep>>
where
    M: ModelSpec,
    M::State: Clone + std::fmt::Debug + std::hash::Hash + Eq + Send + Sync + 'static,
    M::Action: Clone + std::fmt::Debug + PartialEq + Send + Sync + 'static,
{
    // One shortest-path search for every model: `check::shortest_paths`.
    let matching = property.kind == Kind::Sometimes;
    let mut found =
        crate::check::shortest_paths(model, &[(property.name, property.condition, matching)]);
    found
        .remove(property.name)
        .map(|path| crate::check::steps_of(model, &path))
}
