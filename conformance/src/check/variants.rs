//! What each model variant is for, in a reviewer's words: the design it must prove, or the bug it
//! must reproduce. The HTML report's index says it next to every verdict so a reviewer can tell
//! from the front page what green means, and `oncecheck explore` opens a model at its design.
//!
//! Invariants: every variant of every registered model has exactly one entry (a test checks it
//! against the registry), and an entry's role agrees with the model's own expectations at the CI
//! bounds: a design expects no `always` violated, a bug expects at least one (also tested).

/// What a variant is checked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The design: every `always` must hold. One per model: `explore MODEL` opens it.
    Design,
    /// A mode the shipped design offers beside its default (the layer's atomic effects, its
    /// fail-closed policy): every `always` must hold too.
    Mode,
    /// A known bug or a design without a part: its violations must be reproduced.
    Bug,
}

impl Role {
    pub fn word(self) -> &'static str {
        match self {
            Role::Design => "design",
            Role::Mode => "mode",
            Role::Bug => "bug",
        }
    }
}

/// One variant's entry: what it models and what its check must show.
#[derive(Debug, Clone, Copy)]
pub struct VariantNote {
    pub model: &'static str,
    pub variant: &'static str,
    pub role: Role,
    /// One sentence: what the variant models and what green means for it.
    pub means: &'static str,
}

/// Every variant of every model. The design variants come first per model: they are what
/// `oncecheck explore MODEL` opens.
pub const NOTES: &[VariantNote] = &[
    VariantNote {
        model: "relay",
        variant: "fixed",
        role: Role::Design,
        means: "the whole design (seq taken inside the write transaction: counter condition, op_id claim, predecessor check) under the visibility window, lost responses and the push deadline; green = R1-R10 hold from every initial table",
    },
    VariantNote {
        model: "relay",
        variant: "add-era",
        role: Role::Bug,
        means: "the seed's bug: writers take the seq with UpdateItem ADD outside the write transaction; green = the lost op (R1 no-skip) and the burned seq (R5 dense) are reproduced",
    },
    VariantNote {
        model: "relay",
        variant: "counter-only",
        role: Role::Bug,
        means: "the new build without the predecessor check; green = the loss through the visibility window (R1 no-skip) is reproduced, the bug the predecessor check closes",
    },
    VariantNote {
        model: "relay",
        variant: "mixed",
        role: Role::Bug,
        means: "a new-build writer beside an ADD-era one during a rollout; green = R1 and R5 still fall, so the guarantee needs every writer on the new build",
    },
    VariantNote {
        model: "idempotency",
        variant: "renewed",
        role: Role::Design,
        means: "the layer as shipped: atomic claim, fenced finalize, drop guard, live-body capture and the lease heartbeat; green = M1-M11 hold",
    },
    VariantNote {
        model: "idempotency",
        variant: "atomic",
        role: Role::Mode,
        means: "the shipped layer with a handler whose effects are statements on the cache's own database, committed in one transaction with the success row; green = M1-M11 hold, M1 even where a finalize's outcome stays unknown",
    },
    VariantNote {
        model: "idempotency",
        variant: "fail-closed",
        role: Role::Mode,
        means: "the shipped layer with the fail-closed policy for external effects: a key whose finalize outcome stays unknown is held outcome-unknown (409) until reconciled, never re-run; green = M1-M11 hold",
    },
    VariantNote {
        model: "idempotency",
        variant: "pre-fix",
        role: Role::Bug,
        means: "the layer before its fixes (capped capture, empty body on error, rebuilt responses, no drop guard, unfenced, one finalize attempt); green = each of those bugs is reproduced",
    },
    VariantNote {
        model: "idempotency",
        variant: "fixed",
        role: Role::Bug,
        means: "the fixes without fencing or the heartbeat; green = a slow handler's lease lapses and a stale finalizer overwrites the row (M1, M8)",
    },
    VariantNote {
        model: "idempotency",
        variant: "fenced",
        role: Role::Bug,
        means: "fenced finalizes without the heartbeat; green = the lease crossing still runs the handler twice (M1), the reason for the heartbeat",
    },
    VariantNote {
        model: "token",
        variant: "tokened",
        role: Role::Design,
        means: "the reliable-write client's pattern: a ClientRequestToken and identical retries inside the token window; green = T1-T6 hold",
    },
    VariantNote {
        model: "token",
        variant: "tokenless",
        role: Role::Bug,
        means: "retries without a token; green = a retry after a lost commit applies the transaction twice (T1 exactly-once)",
    },
    VariantNote {
        model: "token",
        variant: "late-retry",
        role: Role::Bug,
        means: "a tokened retry after the token window; green = it executes again as a new request (T1 exactly-once)",
    },
];

/// The entry of one variant, if it has one.
pub fn note(model: &str, variant: &str) -> Option<&'static VariantNote> {
    NOTES
        .iter()
        .find(|note| note.model == model && note.variant == variant)
}

/// The variant a model opens at when none is named: its design.
pub fn design_variant(model: &str) -> Option<&'static str> {
    NOTES
        .iter()
        .find(|note| note.model == model && note.role == Role::Design)
        .map(|note| note.variant)
}

/// Every model's protocol, as its spec names it: what the Explorer's status bar says in place of
/// the model's Rust type.
const PROTOCOLS: &[(&str, &str)] = &[
    ("relay", "relay append"),
    ("idempotency", "Idempotency-Key middleware"),
    ("token", "tokened writes"),
];

/// The protocol `model` checks, as its spec names it.
pub fn protocol(model: &str) -> Option<&'static str> {
    PROTOCOLS
        .iter()
        .find(|(name, _)| *name == model)
        .map(|(_, protocol)| *protocol)
}

#[cfg(test)]
mod tests {
    use super::*;
    use oncecheck_model::check::{Kind, Verdict};

    #[test]
    fn every_variant_has_one_note_whose_role_agrees_with_its_expectations() {
        let mut registered = 0;
        for model in crate::check::models::MODEL_NAMES {
            let designs = NOTES
                .iter()
                .filter(|note| note.model == *model && note.role == Role::Design)
                .count();
            assert_eq!(designs, 1, "{model} has one design variant");
            for variant in crate::check::model_facts::variants(model) {
                registered += 1;
                let notes = NOTES
                    .iter()
                    .filter(|note| note.model == *model && note.variant == *variant)
                    .count();
                assert_eq!(notes, 1, "{model}/{variant} has exactly one note");
                let note = note(model, variant).unwrap();
                assert!(note.means.len() > 40, "{model}/{variant} says what it is");
                let violated = crate::check::model_facts::expectations(model, variant)
                    .unwrap()
                    .iter()
                    .filter(|expectation| {
                        expectation.kind == Kind::Always
                            && expectation.expected == Verdict::Violated
                    })
                    .count();
                match note.role {
                    Role::Design | Role::Mode => {
                        assert_eq!(violated, 0, "{model}/{variant} is a design or its mode")
                    }
                    Role::Bug => assert!(violated > 0, "{model}/{variant} is a bug"),
                }
            }
        }
        assert_eq!(
            registered,
            NOTES.len(),
            "no note for a variant that does not exist"
        );
    }

    #[test]
    fn every_model_names_its_protocol() {
        for model in crate::check::models::MODEL_NAMES {
            assert!(protocol(model).is_some(), "{model} names its protocol");
        }
        assert_eq!(PROTOCOLS.len(), crate::check::models::MODEL_NAMES.len());
    }
}
