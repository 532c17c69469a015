//! T6 outcome-known, the token model's liveness (specs/tokened-writes.md#T6), and the
//! weak-fairness family of every step.
//!
//! Families: one per client (`C1`, ...: its sends, retries and reads, and the network's steps
//! for its attempts — an answer delivered, or the client's own timeout), the server as one
//! process (`server`: it begins, commits, replays and rejects; it may answer one request while
//! another's transaction waits, as a server serving a retrying client may), and the clock
//! (`clock`). A damaged record is a fault, in no family.

use super::{Action, Answer, Client, ClientSide, TokenModel, TokenState};
use crate::check::LivenessDef;

const CLIENT_FAMILIES: [&str; 4] = ["C1", "C2", "C3", "C4"];

pub const T6_OUTCOME_KNOWN: &str = "T6 outcome-known";

pub(super) fn definitions() -> Vec<LivenessDef<TokenModel>> {
    vec![LivenessDef {
        id: "T6",
        name: T6_OUTCOME_KNOWN,
        trigger: Some(some_outcome_unknown),
        goal: every_outcome_known,
        fair: &["C*", "server", "clock"],
    }]
}

/// The clients' families, in client order: the actors the symmetry permutes (token/scale.rs).
pub(super) fn client_families(model: &TokenModel) -> Vec<&'static str> {
    CLIENT_FAMILIES[..usize::from(model.limits().clients)].to_vec()
}

pub(super) fn family_of(action: &Action) -> Option<&'static str> {
    match *action {
        Action::ClientSends { client, .. }
        | Action::ClientRetries { client, .. }
        | Action::ClientReads { client }
        | Action::ResponseDelivered { client, .. }
        | Action::ResponseLost { client, .. } => Some(CLIENT_FAMILIES[client as usize]),
        Action::ServerBegins { .. }
        | Action::ServerCommits { .. }
        | Action::ServerReplays { .. }
        | Action::ServerRejects { .. } => Some("server"),
        Action::ClockTicks => Some("clock"),
        Action::RecordLosesTimestamp { .. } => None,
    }
}

/// The client sent its write and knows how it ended: it was told success, or it read back what
/// its write left on the table (the unknown outcome it reports after its retries).
fn knows_its_outcome(client: &Client) -> bool {
    let told_success = client.attempts.last().is_some_and(|last| {
        last.client == ClientSide::Delivered && last.answer() == Some(Answer::Success)
    });
    client.attempts.is_empty() || told_success || client.reconciled.is_some()
}

fn some_outcome_unknown(model: &TokenModel, state: &TokenState) -> bool {
    !every_outcome_known(model, state)
}

//= specs/tokened-writes.md#T6
//# Every client eventually learns its write's outcome within its retries, or gives up and reports what it knows: the outcome it reads back, or that the outcome is unknown.
fn every_outcome_known(_: &TokenModel, state: &TokenState) -> bool {
    state.clients.iter().all(knows_its_outcome)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::{run, CheckOptions, Kind, ModelSpec, Verdict};
    use crate::token::Mutation;

    fn model(variant: &str) -> TokenModel {
        let bounds = TokenModel::resolve_bounds(variant, &[]).unwrap();
        TokenModel::build(variant, &bounds).unwrap()
    }

    //= specs/tokened-writes.md#T6
    //# Every client eventually learns its write's outcome within its retries, or gives up and reports what it knows: the outcome it reads back, or that the outcome is unknown.
    #[test]
    fn a_client_retrying_forever_on_in_progress_never_learns_its_outcome() {
        let report = run(
            model("tokened").with_mutation(Some(Mutation::RetriesForeverOnInProgress)),
            &CheckOptions::default(),
            &mut |_| {},
        );
        for property in &report.properties {
            if property.kind == Kind::Always {
                assert_eq!(property.verdict, Verdict::Holds, "{}", property.name);
            }
        }
        let t6 = report.property(T6_OUTCOME_KNOWN);
        assert_eq!(t6.verdict, Verdict::Violated);
        let words: Vec<&str> = t6
            .trace
            .as_ref()
            .unwrap()
            .iter()
            .map(|step| step.words.as_str())
            .collect();
        let start = t6.lasso_start.expect("a lasso");
        // C1's transaction runs; C1 times out, retries, is told TransactionInProgress, and
        // resends without counting, forever: the server answers every resend (it is fair) but
        // never has to commit the running transaction first.
        assert_eq!(
            words[..start],
            [
                "C1 sends TransactWriteItems{ADD balance 5 on A, B} token t1",
                "server starts t1 (attempt 1 of C1): locks A, B, records t1 as running",
                "response to C1 lost (attempt 1)",
                "C1 retries with token t1 (identical request)",
                "C2 sends UpdateItem{ADD counter 5}",
                "server commits C2's attempt 1",
                "C2 receives Success for attempt 1",
            ]
        );
        assert_eq!(
            words[start..],
            [
                "server rejects t1 (attempt 2 of C1): TransactionInProgress",
                "C1 receives TransactionInProgress for attempt 2",
                "C1 retries with token t1 (identical request)",
            ]
        );
        let honest = run(model("tokened"), &CheckOptions::default(), &mut |_| {});
        assert_eq!(honest.property(T6_OUTCOME_KNOWN).verdict, Verdict::Holds);
    }
}
