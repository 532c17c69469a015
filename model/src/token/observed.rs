//! What a request met, as the properties see it: the token record the server read when it took
//! the request up (`met`, stored beside the answer) and the request itself, classified here.
//!
//! This is an oracle, deliberately a second reading of the spec's server rules beside the
//! server's own classifier (`TokenModel::token_seen`): the server decides with its classifier,
//! the properties judge the answer with this one, so a classifier that reads a record wrongly
//! (ignores the fingerprint, or the window) gives an answer the properties see is wrong. It
//! reads only the raw record, the request's parameters, host and send time, and the bounds.
//!
//! Invariant: nothing here calls the model's decision code (`decide`, `token_seen`, `is_live`,
//! `host_clock`).

use super::{Attempt, Client, ServerSide, TokenModel, TokenPhase, TokenRecord};

/// The request's token and its record, in the spec's words.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Met {
    /// The request carries no token, or was never taken up.
    NoToken,
    /// The token is over the length limit: refused before any record is read.
    Malformed,
    /// No record, or one past its window on the serving host's clock: the token is new.
    New,
    RunningSame,
    RunningOther,
    LiveSame,
    LiveOther,
    /// A record without a valid creation time.
    Damaged,
}

impl Met {
    pub(super) fn is_other_parameters(self) -> bool {
        matches!(self, Met::RunningOther | Met::LiveOther)
    }
}

/// The record the server read for `attempt`, if it took the attempt up.
fn record(attempt: &Attempt) -> Option<Option<TokenRecord>> {
    match attempt.server {
        ServerSide::Running { met, .. } | ServerSide::Done { met, .. } => Some(met),
        ServerSide::Pending | ServerSide::Dropped => None,
    }
}

/// What `attempt` of `client` met. A request is processed in the tick it was sent, so the
/// serving host's clock read `sent_at`, plus the skew on the host ahead.
pub(super) fn met(model: &TokenModel, client: &Client, attempt: &Attempt) -> Met {
    let Some(record) = record(attempt) else {
        return Met::NoToken;
    };
    if !client.pattern.has_token() {
        return Met::NoToken;
    }
    if client.token_too_long {
        return Met::Malformed;
    }
    let Some(record) = record else {
        return Met::New;
    };
    let limits = model.limits();
    let same = record.rebuilt == attempt.rebuilt;
    match record.phase {
        TokenPhase::Running if same => Met::RunningSame,
        TokenPhase::Running => Met::RunningOther,
        TokenPhase::InvalidTimestamp => Met::Damaged,
        TokenPhase::Completed { at } => {
            let host_clock = attempt.sent_at + if attempt.host == 0 { 0 } else { limits.skew };
            match (host_clock < at + limits.window, same) {
                (false, _) => Met::New,
                (true, true) => Met::LiveSame,
                (true, false) => Met::LiveOther,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::*;
    use crate::check::{run, CheckOptions, CheckReport, Verdict};

    fn mutated(variant: &str, overrides: &[(&str, u32)], mutation: Mutation) -> CheckReport {
        let overrides: Vec<(String, u32)> = overrides
            .iter()
            .map(|(key, value)| (key.to_string(), *value))
            .collect();
        let bounds = Bounds::resolve(TokenModel::BOUNDS, &overrides).unwrap();
        let model = TokenModel::build(variant, &bounds)
            .unwrap()
            .with_mutation(Some(mutation));
        let report = run(
            model,
            &CheckOptions {
                threads: 1,
                progress_interval_millis: 10,
                ..Default::default()
            },
            &mut |_| {},
        );
        assert!(report.complete, "{variant} {mutation:?}: exhausted");
        report
    }

    fn deviations(report: &CheckReport) -> Vec<(&'static str, Verdict)> {
        report
            .properties
            .iter()
            .filter(|p| !p.matches())
            .map(|p| (p.name, p.verdict))
            .collect()
    }

    //= specs/tokened-writes.md#T2
    //# A request that meets a live or running token of other parameters is answered IdempotentParameterMismatch and applies nothing.
    #[test]
    fn a_classifier_ignoring_the_fingerprint_breaks_t2() {
        let report = mutated("tokened", &[], Mutation::ClassifierIgnoresFingerprint);
        assert_eq!(
            deviations(&report),
            [
                (T2_MISMATCH, Verdict::Violated),
                (T2_MISMATCH_REJECTED, Verdict::Unreached)
            ]
        );
    }

    //= specs/tokened-writes.md#T4
    //# An identical retry of a write that committed but lost its response gets the answer and the effect the retry table gives for the client's pattern.
    #[test]
    fn a_classifier_ignoring_the_window_breaks_t4() {
        // Expired records are deleted as the clock passes them, so the classifier meets one
        // only on the host whose clock runs ahead.
        let bounds = [("clients", 1), ("skew", 1)];
        let report = mutated("tokened", &bounds, Mutation::ClassifierIgnoresWindow);
        assert_eq!(
            deviations(&report),
            [
                (T1_EXACTLY_ONCE, Verdict::Holds),
                (T4_HONEST_RETRY, Verdict::Violated)
            ]
        );
    }
}
