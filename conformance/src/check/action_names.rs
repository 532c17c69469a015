//! Every action kind of every model, by name, so coverage lists the actions that never fired
//! with a count of 0 — what a reviewer looks for first (TLC prints zero-coverage actions too).
//! A search counts only what fired; this list is what could have.
//!
//! Invariant: each list is exactly the variants of the model's `Action` enum, in declaration
//! order (`conformance/tests/architecture.rs` reads the enums from the model's source and
//! compares).

/// The action kinds of `model` in the order the model declares them; empty for an unknown model.
pub fn of(model: &str) -> &'static [&'static str] {
    match model {
        "relay" => &[
            "WriterReadsCounter",
            "WriterAddsToCounter",
            "WriterSendsRound",
            "WriterReceivesResponse",
            "ResponseLost",
            "WriterReadsClaim",
            "WriterReadsClaims",
            "WriterQueriesTop",
            "PushDeadlinePasses",
            "ItemApplied",
            "PullerQueries",
            "FolderReceivesRecord",
            "TruncatorDeletes",
        ],
        "idempotency" => &[
            "ClientSends",
            "MiddlewareClaims",
            "MiddlewareClaimFails",
            "MiddlewareReadsRow",
            "HandlerResponds",
            "MiddlewareCaptures",
            "MiddlewareFinalizes",
            "TailStreams",
            "ClientCancels",
            "DropGuardFinalizes",
            "ClockTicks",
            "CleanupPurges",
            "ProcessStalls",
            "ProcessDies",
            "ReconcilerResolves",
        ],
        "token" => &[
            "ClientSends",
            "ClientRetries",
            "ServerBegins",
            "ServerCommits",
            "ServerReplays",
            "ServerRejects",
            "ResponseDelivered",
            "ResponseLost",
            "ClockTicks",
            "ClientReads",
            "RecordLosesTimestamp",
        ],
        _ => &[],
    }
}

/// `counts` with every action kind of `model` present, 0 for those that never fired, in the
/// model's declaration order; a name the list does not know (a model changed without this list)
/// is kept, after the known ones.
pub fn with_zeros<N: Copy + Default>(
    model: &str,
    counts: &std::collections::BTreeMap<String, N>,
) -> Vec<(String, N)> {
    let known = of(model);
    let mut all: Vec<(String, N)> = known
        .iter()
        .map(|name| {
            (
                name.to_string(),
                counts.get(*name).copied().unwrap_or_default(),
            )
        })
        .collect();
    all.extend(
        counts
            .iter()
            .filter(|(name, _)| !known.contains(&name.as_str()))
            .map(|(name, count)| (name.clone(), *count)),
    );
    all
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_actions_count_zero_and_unknown_ones_are_kept() {
        let counts: std::collections::BTreeMap<String, usize> =
            [("ClockTicks".to_string(), 3), ("Surprise".to_string(), 1)]
                .into_iter()
                .collect();
        let all = with_zeros("token", &counts);
        assert_eq!(all.len(), of("token").len() + 1);
        assert_eq!(all[0], ("ClientSends".to_string(), 0));
        assert!(all.contains(&("ClockTicks".to_string(), 3)));
        assert_eq!(all.last(), Some(&("Surprise".to_string(), 1)));
    }
}
