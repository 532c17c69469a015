//! The batched claim reads of a relay writer, replayed: the claim check a push of two ops or
//! more sends before its first write, and the re-push fast path's read of the remaining claims.
//! Both are one BatchGetItem (strongly consistent) of claim keys; both are compared twice: the
//! keys asked for against the ops the model reads, and the claims found against the claims the
//! model's read-committed table shows (the proxy answers a claim still in the visibility window
//! with its pre-image, absent, as the model's read does).
//!
//! The claim check sits inside the model's first `WriterReadsCounter` step of a push: the model
//! has one payload per op id, so the check never refuses there and its answer changes no model
//! state; where it sits relative to other actors' steps is therefore invisible to every
//! property, and the replay forwards it at that step, right before the counter read it precedes.
//! A writer's first claim check is answered with every key unprocessed as many times in a row as
//! the store may retry (`replay_claim_read`'s `unprocessed_in_a_row`) before it is served.

use super::words::{attribute_string, claim_names};
use super::{environment, take};
use crate::proxy::{Answer, HeldRequest, Proxy};
use crate::replay::driver::{real_op_id, Fault};
use oncecheck_model::ddb::{Key, OpId, Value};
use oncecheck_model::relay::RelayModel;
use oncecheck_model::relay::RelayState;
use serde_json::{json, Value as Json};

/// Takes `writer`'s next request, which must be a BatchGetItem of the claims of exactly
/// `expected`, forwards it, and checks the claims found against the model's table `before` the
/// step. First, `unprocessed_in_a_row` times, the read is answered with every key unprocessed
/// (as DynamoDB answers a batch it leaves for load), and the store must ask again for the same
/// keys: the model's read is one atomic step, which the store realises within that budget.
/// Answers the number of requests taken.
pub(super) async fn replay_claim_read(
    proxy: &Proxy,
    model: &RelayModel,
    before: &RelayState,
    writer: usize,
    expected: &[OpId],
    (stream, table): (&str, &str),
    unprocessed_in_a_row: usize,
) -> Result<usize, Fault> {
    for _ in 0..unprocessed_in_a_row {
        let request = take_claim_read(proxy, model, writer, expected, stream).await?;
        let unprocessed = request
            .body
            .get("RequestItems")
            .cloned()
            .unwrap_or_default();
        let answer = Answer {
            status: 200,
            body: json!({ "Responses": { table: [] }, "UnprocessedKeys": unprocessed }),
            headers: Vec::new(),
        };
        proxy.deliver(request, answer).map_err(environment)?;
    }
    let request = take_claim_read(proxy, model, writer, expected, stream).await?;
    let answer = proxy.forward(&request).await.map_err(environment)?;
    let mut found: Vec<String> = answer
        .body
        .pointer(&format!(
            "/Responses/{}",
            table.replace('~', "~0").replace('/', "~1")
        ))
        .and_then(Json::as_array)
        .into_iter()
        .flatten()
        .filter_map(|item| {
            item.as_object()
                .and_then(|item| attribute_string(item, "op_id"))
        })
        .collect();
    let mut found_by_model: Vec<String> = expected
        .iter()
        .copied()
        .filter(|op| {
            matches!(
                before.table.read(Key::Claim(*op)),
                Some(Value::Claim { .. })
            )
        })
        .map(real_op_id)
        .collect();
    found.sort();
    found_by_model.sort();
    if found != found_by_model {
        return Err(Fault::diverged(
            format!("claims found {found_by_model:?}"),
            format!("claims found {found:?}: {}", answer.body),
        ));
    }
    proxy.deliver(request, answer).map_err(environment)?;
    Ok(unprocessed_in_a_row + 1)
}

/// Takes `writer`'s next request and checks that it is a BatchGetItem of the claims of exactly
/// `expected`.
async fn take_claim_read(
    proxy: &Proxy,
    model: &RelayModel,
    writer: usize,
    expected: &[OpId],
    stream: &str,
) -> Result<HeldRequest, Fault> {
    let request = take(proxy, writer, "BatchGetItem").await?;
    let names = claim_names(model, stream);
    let mut expected_names: Vec<String> = expected.iter().copied().map(real_op_id).collect();
    let mut asked: Vec<String> = request
        .batch_get_keys()
        .map_err(|error| Fault::diverged("a BatchGetItem of claims", error.to_string()))?
        .into_iter()
        .map(|(_, key)| {
            names
                .get(&key.seq)
                .cloned()
                .unwrap_or_else(|| format!("seq {}", key.seq))
        })
        .collect();
    expected_names.sort();
    asked.sort();
    if asked != expected_names {
        return Err(Fault::diverged(
            format!("BatchGetItem of the claims of {expected_names:?}"),
            format!("BatchGetItem of the claims of {asked:?}"),
        ));
    }
    Ok(request)
}
