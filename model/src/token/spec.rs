//! What `oncecheck` needs of the token model: the variants, the bound table, the bound set that
//! reaches T5's malformed-token half, every property with its requirement ID, and the expected
//! verdict per variant (derived from the bounds where a bound removes a case).
//!
//! Invariants: every bound has a default inside [min, max] and a help text; an expectation
//! changes only with the variant or a bound that removes its case.

use super::*;

/// The bound set `oncecheck check` runs beside `tokened`'s CI bounds: a client that may generate
/// an over-long token, so T5's malformed-token half is checked on reached states. Not a CI
/// bound: the reliable-write client refuses such a token before sending, so traces with it are
/// not replayable, and the CI bounds are the replayed ones.
pub const BOUND_SETS: &[crate::check::BoundSet] = &[crate::check::BoundSet {
    name: "reach",
    variant: "tokened",
    overrides: &[("long_tokens", 1)],
    reaches: &["T5"],
}];

impl ModelSpec for TokenModel {
    fn scale(&self) -> crate::check::Scale<Self> {
        scale::hooks(self)
    }

    const NAME: &'static str = "token";
    const BOUND_SETS: &'static [crate::check::BoundSet] = BOUND_SETS;
    const VARIANTS: &'static [&'static str] = &["tokened", "tokenless", "late-retry"];
    const BOUNDS: &'static [BoundSpec] = &[
        BoundSpec {
            key: "clients",
            default: 2,
            min: 1,
            max: 3,
            help: "clients, each making one logical write",
        },
        BoundSpec {
            key: "retries",
            default: 1,
            min: 0,
            max: 3,
            help: "retries per client after its first attempt",
        },
        BoundSpec {
            key: "window",
            default: 2,
            min: 1,
            max: 4,
            help: "ticks a completed token stays live (the 10-minute window)",
        },
        BoundSpec {
            key: "ticks",
            default: 2,
            min: 0,
            max: 6,
            help: "clock ticks in one run",
        },
        BoundSpec {
            key: "skew",
            default: 0,
            min: 0,
            max: 4,
            help: "ticks host H2's wall clock runs ahead of H1's (0: one host)",
        },
        BoundSpec {
            key: "shared_token",
            default: 0,
            min: 0,
            max: 1,
            help: "1: tokened clients (two intents) share one token",
        },
        BoundSpec {
            key: "long_tokens",
            default: 0,
            min: 0,
            max: 1,
            help: "1: a tokened client may generate a token over 36 characters",
        },
        BoundSpec {
            key: "damaged_records",
            default: 1,
            min: 0,
            max: 2,
            help: "completed token records whose timestamp the environment damages",
        },
    ];

    fn build(variant: &str, bounds: &Bounds) -> Result<Self, SpecError> {
        let variant = Self::resolve_variant(variant)?;
        let kind = match variant {
            "tokened" => Variant::Tokened,
            "tokenless" => Variant::Tokenless,
            _ => Variant::LateRetry,
        };
        // Re-resolve so that a caller's partial table gets every default and range check.
        let overrides: Vec<(String, u32)> = bounds
            .0
            .iter()
            .map(|(key, value)| (key.clone(), *value))
            .collect();
        let bounds = Bounds::resolve(Self::BOUNDS, &overrides)?;
        let limits = Limits {
            clients: bounds.get("clients") as u8,
            retries: bounds.get("retries") as u8,
            window: bounds.get("window") as u8,
            skew: bounds.get("skew") as u8,
            shared_token: bounds.get("shared_token") == 1,
            long_tokens: bounds.get("long_tokens") == 1,
            damaged_records: bounds.get("damaged_records") as u8,
            ticks: bounds.get("ticks") as u8,
        };
        Ok(TokenModel {
            variant,
            kind,
            bounds,
            limits,
            mutation: None,
        })
    }

    fn variant(&self) -> &'static str {
        self.variant
    }

    fn bounds(&self) -> &Bounds {
        &self.bounds
    }

    fn property_defs(&self) -> Vec<PropertyDef<Self>> {
        let def = |id, name, kind, condition| PropertyDef {
            id,
            name,
            kind,
            condition,
        };
        vec![
            def(
                "T1",
                T1_EXACTLY_ONCE,
                Kind::Always,
                t1_exactly_once as fn(&Self, &TokenState) -> bool,
            ),
            def(
                "T1",
                T1_RETRY_WITHIN_WINDOW,
                Kind::Sometimes,
                t1_retry_within_window,
            ),
            def("T2", T2_MISMATCH, Kind::Always, t2_mismatch),
            def(
                "T2",
                T2_MISMATCH_REJECTED,
                Kind::Sometimes,
                t2_mismatch_rejected,
            ),
            def("T3", T3_ATOMIC, Kind::Always, t3_atomic),
            def(
                "T3",
                T3_LOST_AFTER_COMMIT,
                Kind::Sometimes,
                t3_lost_after_commit,
            ),
            def(
                "T3",
                T3_READ_BACK_WHOLE,
                Kind::Sometimes,
                t3_read_back_whole,
            ),
            def("T4", T4_HONEST_RETRY, Kind::Always, t4_honest_retry),
            def(
                "T4",
                T4_ADD_DOUBLE_APPLIED,
                Kind::Sometimes,
                t4_add_double_applied,
            ),
            def(
                "T4",
                T4_FIXED_PUT_CONVERGES,
                Kind::Sometimes,
                t4_fixed_put_converges,
            ),
            def(
                "T4",
                T4_CREATE_CONDITION_FAILURE,
                Kind::Sometimes,
                t4_create_reports_condition_failure,
            ),
            def(
                "T4",
                T4_UNTOKENED_REEXECUTES,
                Kind::Sometimes,
                t4_untokened_transaction_reexecutes,
            ),
            def("T4", T4_TOKENED_REPLAY, Kind::Sometimes, t4_tokened_replay),
            def(
                "T4",
                T4_EXPIRED_REEXECUTES,
                Kind::Sometimes,
                t4_expired_token_reexecutes,
            ),
            def("T5", T5_BAD_TOKEN, Kind::Always, t5_bad_token),
            def(
                "T5",
                T5_LONG_TOKEN_REJECTED,
                Kind::Sometimes,
                t5_long_token_rejected,
            ),
            def(
                "T5",
                T5_DAMAGED_RECORD_REFUSED,
                Kind::Sometimes,
                t5_damaged_record_refused,
            ),
        ]
    }

    fn liveness_defs(&self) -> Vec<crate::check::LivenessDef<Self>> {
        liveness::definitions()
    }

    fn fairness(&self, action: &Action) -> Option<&'static str> {
        liveness::family_of(action)
    }

    fn families_cut(&self, state: &TokenState, cut: &mut Vec<&'static str>) {
        // `ticks` bounds the clock: once spent, a tick the protocol would take is withheld.
        if state.now >= self.limits.ticks && Self::clock_free(state) {
            cut.push("clock");
        }
    }

    /// Expectations of the honest model (the spec's verdict table), derived from the bounds where a
    /// bound removes a case: no retries, or a clock too short for a late retry. At the CI
    /// bounds this is the table of `specs/tokened-writes.md`.
    fn expected(&self, property: &PropertyDef<Self>) -> Verdict {
        let Limits {
            retries,
            window,
            ticks,
            skew,
            shared_token,
            long_tokens,
            damaged_records,
            ..
        } = self.limits;
        let retries_happen = retries >= 1;
        let late_retry_happens = retries_happen && ticks >= window;
        // With two retries a late client's second retry can land inside the window opened by
        // its first (late) retry.
        let late_second_retry_in_window = late_retry_happens && retries >= 2;
        // A host whose clock runs ahead expires a token the client still counts as live: at once
        // when the skew reaches the window, else on a retry a tick later.
        let skew_expires_live_token = retries_happen && skew > 0 && (ticks >= 1 || skew >= window);
        // A token completed on the host ahead stays live longer on the other: a late retry can
        // still meet it, and a rebuilt one is then a mismatch.
        let late_retry_meets_live_token = late_retry_happens && skew > 0;
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
        match (self.kind, property.name) {
            // Two intents under one token: the second is answered with the first's replay.
            (Variant::Tokened, T1_EXACTLY_ONCE) => {
                let shared_by_two_intents = shared_token && self.limits.clients >= 2;
                holds(!(skew_expires_live_token || shared_by_two_intents))
            }
            (Variant::Tokenless, T1_EXACTLY_ONCE) => holds(!retries_happen),
            (Variant::LateRetry, T1_EXACTLY_ONCE) => holds(!late_retry_happens),
            (Variant::LateRetry, T1_RETRY_WITHIN_WINDOW) => reached(late_second_retry_in_window),
            (_, T1_RETRY_WITHIN_WINDOW) => reached(retries_happen),
            (_, T2_MISMATCH) | (_, T3_ATOMIC) | (_, T4_HONEST_RETRY) => holds(true),
            (Variant::Tokened, T2_MISMATCH_REJECTED) => reached(retries_happen),
            (Variant::Tokenless, T2_MISMATCH_REJECTED) => reached(false),
            (Variant::LateRetry, T2_MISMATCH_REJECTED) => {
                reached(late_second_retry_in_window || late_retry_meets_live_token)
            }
            // A late-retry client with retries left waits for the window, so it only reconciles
            // once its retries are spent, which a clock shorter than the window never allows.
            (Variant::LateRetry, T3_READ_BACK_WHOLE) => {
                reached(!retries_happen || late_retry_happens)
            }
            (_, T3_LOST_AFTER_COMMIT) | (_, T3_READ_BACK_WHOLE) => reached(true),
            (_, T4_ADD_DOUBLE_APPLIED)
            | (_, T4_FIXED_PUT_CONVERGES)
            | (_, T4_CREATE_CONDITION_FAILURE) => reached(retries_happen),
            (Variant::Tokenless, T4_UNTOKENED_REEXECUTES) => reached(retries_happen),
            (_, T4_UNTOKENED_REEXECUTES) => reached(false),
            (Variant::Tokened, T4_TOKENED_REPLAY) => reached(retries_happen),
            (Variant::LateRetry, T4_TOKENED_REPLAY) => reached(late_second_retry_in_window),
            (_, T4_TOKENED_REPLAY) => reached(false),
            (Variant::LateRetry, T4_EXPIRED_REEXECUTES) => reached(late_retry_happens),
            (_, T4_EXPIRED_REEXECUTES) => reached(false),
            (_, T5_BAD_TOKEN) => holds(true),
            (Variant::Tokenless, T5_LONG_TOKEN_REJECTED | T5_DAMAGED_RECORD_REFUSED) => {
                reached(false)
            }
            (_, T5_LONG_TOKEN_REJECTED) => reached(long_tokens),
            // The damaged record is met by a retry; a late-retry client needs the clock for one.
            (Variant::LateRetry, T5_DAMAGED_RECORD_REFUSED) => {
                reached(damaged_records >= 1 && late_retry_happens)
            }
            (_, T5_DAMAGED_RECORD_REFUSED) => reached(damaged_records >= 1 && retries_happen),
            (_, liveness::T6_OUTCOME_KNOWN) => holds(true),
            (_, name) => panic!("no expectation for property {name}"),
        }
    }

    fn state_roles(&self, state: &TokenState) -> Vec<(String, String)> {
        words::roles(self, state)
    }

    fn step_words(&self, before: &TokenState, action: &Action, after: &TokenState) -> String {
        step_words::describe(self, before, action, after)
    }
}
