//! One method per relay model action: what the real side does at that step. Each takes the
//! request the step names from its actor (a request the model would not send is a divergence),
//! checks what that step alone shows, and answers it as the model's DynamoDB would.
//!
//! Invariants: a request is answered only at the step that names it; a step forwards upstream
//! only what the model sends; the stream's table is compared by the driver after every step,
//! never here.

use super::claim_reads::replay_claim_read;
use super::words::{
    attribute_number, first_item_number, key_of, model_keys_of_round, model_round_items,
    real_round_items, reason_code,
};
use super::{environment, set_up_of, take, Actor, DynamoTarget, InFlight, LoseBy, Running};
use super::{ReadFault, READ_FAULTS};
use super::{RelayStep, OP_SIZES, REQUEST_WAIT_MILLIS_MAX};
use crate::proxy::{Answer, HeldRequest, Item, ItemKey, Proxy, ReasonCode};
use crate::replay::driver::{real_op_id, stored_ops_in_words, Fault};
use oncecheck_model::ddb::{Key, OpId, Reason, TransactOutcome};
use oncecheck_model::relay::{Counter, Phase, RelayModel, RelayState};
use oncecheck_store::{OpStore, StoredOp};
use serde_json::Value as Json;
use std::sync::Arc;
use std::time::Duration;

impl DynamoTarget {
    pub(super) async fn writer_reads_counter(
        &mut self,
        model: &RelayModel,
        step: &RelayStep<'_>,
        writer: usize,
    ) -> Result<(), Fault> {
        let running = set_up_of(&mut self.running)?;
        let proxy = &running.proxy;
        // The writer's first reads meet their faults (`READ_FAULTS`): as many in a row as the
        // store may retry.
        let faults_in_a_row = if self.read_faults_met.insert(writer) {
            usize::from(model.bounds.lost_rounds_max)
        } else {
            0
        };
        // A push of two ops or more checks its claims before its first counter read.
        if model.checks_claims_first(step.before, writer) {
            let push = &model.writers[writer].1;
            self.requests += replay_claim_read(
                proxy,
                model,
                step.before,
                writer,
                push,
                (&self.stream, &self.table),
                faults_in_a_row,
            )
            .await?;
        }
        for fault in READ_FAULTS.iter().cycle().take(faults_in_a_row) {
            let request = take(proxy, writer, "Query").await?;
            self.requests += 1;
            match fault {
                ReadFault::Closed => proxy.lose(request),
                ReadFault::Throttled => proxy.deliver(request, Proxy::throttled()),
            }
            .map_err(environment)?;
        }
        let request = take(proxy, writer, "Query").await?;
        self.requests += 1;
        let answer = proxy.forward(&request).await.map_err(environment)?;
        let Counter::Known(expected) = step.after.writers[writer].counter else {
            unreachable!("a counter read makes it known")
        };
        let seen = first_item_number(&answer, "next_seq").unwrap_or(0);
        if seen != i64::from(expected) {
            return Err(Fault::diverged(
                format!("counter reads {expected}"),
                format!("counter reads {seen}: {}", answer.body),
            ));
        }
        proxy.deliver(request, answer).map_err(environment)
    }

    /// The round's request compared item by item with the model's, then answered as the model's
    /// outcome says; the answer waits in flight for the step that delivers or loses it.
    pub(super) async fn writer_sends_round(
        &mut self,
        model: &RelayModel,
        step: &RelayStep<'_>,
        writer: usize,
    ) -> Result<(), Fault> {
        let running = set_up_of(&mut self.running)?;
        let request = take(&running.proxy, writer, "TransactWriteItems").await?;
        self.requests += 1;
        let Phase::Sent { round, outcome } = &step.after.writers[writer].phase else {
            unreachable!("a round is sent")
        };
        let expected_items = model_round_items(round, model.build_of(writer));
        let actual_items = real_round_items(&request.body, &self.stream);
        if expected_items != actual_items {
            return Err(Fault::diverged(
                expected_items.join("; "),
                actual_items.join("; "),
            ));
        }
        let answer = match outcome {
            TransactOutcome::Committed => {
                committed_answer(running, model, step, &request, &self.stream).await?
            }
            TransactOutcome::Cancelled(reasons)
                if reasons.contains(&Reason::TransactionConflict) =>
            {
                let keys = model_keys_of_round(round, model.build_of(writer), &self.stream);
                conflict_answer(running, reasons, &keys, &self.table).await?
            }
            TransactOutcome::Cancelled(reasons) => {
                let answer = running.proxy.forward(&request).await.map_err(environment)?;
                let expected: Vec<String> = reasons.iter().map(reason_code).collect();
                if answer.cancellation_codes().as_ref() != Some(&expected) {
                    return Err(Fault::diverged(
                        format!("cancelled {expected:?}"),
                        format!("{:?} {}", answer.cancellation_codes(), answer.body),
                    ));
                }
                answer
            }
        };
        running
            .in_flight
            .insert(writer, InFlight { request, answer });
        Ok(())
    }

    pub(super) fn writer_receives_response(&mut self, writer: usize) -> Result<(), Fault> {
        let running = set_up_of(&mut self.running)?;
        let flight = running
            .in_flight
            .remove(&writer)
            .expect("a response follows its round");
        running
            .proxy
            .deliver(flight.request, flight.answer)
            .map_err(environment)
    }

    /// The round committed upstream; its client never learns it.
    pub(super) fn response_lost(&mut self, writer: usize) -> Result<(), Fault> {
        let lose_by = self.context.config.lose_by;
        let running = set_up_of(&mut self.running)?;
        let flight = running
            .in_flight
            .remove(&writer)
            .expect("a lost response follows its round");
        match lose_by {
            LoseBy::Close => running.proxy.lose(flight.request),
            LoseBy::Stall => running.proxy.stall(flight.request),
        }
        .map_err(environment)?;
        self.lost_responses += 1;
        Ok(())
    }

    pub(super) async fn writer_reads_claim(&mut self, writer: usize) -> Result<(), Fault> {
        let running = set_up_of(&mut self.running)?;
        let proxy = &running.proxy;
        let request = take(proxy, writer, "Query").await?;
        self.requests += 1;
        let answer = proxy.forward(&request).await.map_err(environment)?;
        proxy.deliver(request, answer).map_err(environment)
    }

    pub(super) async fn writer_reads_claims(
        &mut self,
        model: &RelayModel,
        step: &RelayStep<'_>,
        writer: usize,
    ) -> Result<(), Fault> {
        let running = set_up_of(&mut self.running)?;
        let remaining: Vec<OpId> = remaining_ops(model, step.before, writer).collect();
        self.requests += replay_claim_read(
            &running.proxy,
            model,
            step.before,
            writer,
            &remaining,
            (&self.stream, &self.table),
            0,
        )
        .await?;
        Ok(())
    }

    /// The real deadline is wall time, which a replay cannot place at a step without racing
    /// the machine's load: the push is ended here instead. Its next request waits untaken in
    /// the proxy, so nothing reaches the table, as in the model; the table is still compared
    /// after every step, but the push's own answers are not (the store's deadline has its own
    /// tests in the store).
    pub(super) fn push_deadline_passes(&mut self, writer: usize) -> Result<(), Fault> {
        let running = set_up_of(&mut self.running)?;
        if let Actor::Writer(handle) = &running.actors[writer] {
            handle.abort();
        }
        running.actors[writer] = Actor::EndedByDeadline;
        Ok(())
    }

    pub(super) async fn writer_queries_top(
        &mut self,
        step: &RelayStep<'_>,
        writer: usize,
    ) -> Result<(), Fault> {
        let running = set_up_of(&mut self.running)?;
        let proxy = &running.proxy;
        let request = take(proxy, writer, "Query").await?;
        self.requests += 1;
        let answer = proxy.forward(&request).await.map_err(environment)?;
        let expected = step.after.writers[writer].floor.map(i64::from).unwrap_or(0);
        let seen = first_item_number(&answer, "seq").unwrap_or(0);
        if seen != expected {
            return Err(Fault::diverged(
                format!("top occupied seq {expected}"),
                format!("{seen}"),
            ));
        }
        proxy.deliver(request, answer).map_err(environment)
    }

    pub(super) async fn writer_adds_to_counter(
        &mut self,
        step: &RelayStep<'_>,
        writer: usize,
    ) -> Result<(), Fault> {
        let running = set_up_of(&mut self.running)?;
        let proxy = &running.proxy;
        let request = take(proxy, writer, "UpdateItem").await?;
        self.requests += 1;
        let Phase::Allocated { seq } = &step.after.writers[writer].phase else {
            return proxy
                .deliver(request, Answer::conflict())
                .map_err(environment);
        };
        let answer = proxy.forward(&request).await.map_err(environment)?;
        let seen = answer
            .body
            .get("Attributes")
            .and_then(Json::as_object)
            .and_then(|item| attribute_number(item, "next_seq"));
        if seen != Some(i64::from(*seq)) {
            return Err(Fault::diverged(
                format!("ADD answers {seq}"),
                format!("{}", answer.body),
            ));
        }
        proxy.deliver(request, answer).map_err(environment)
    }

    pub(super) fn item_applied(&mut self, model: &RelayModel, key: Key) -> Result<(), Fault> {
        if !model.bounds.window {
            return Ok(());
        }
        let running = set_up_of(&mut self.running)?;
        running
            .proxy
            .apply(&key_of(&self.stream, key))
            .map_err(|error| Fault::diverged(format!("{key:?} pending"), error.to_string()))
    }

    /// The puller's page, pulled by the real store through its own listener, against the
    /// model's read-committed query of the table before the step.
    pub(super) async fn puller_queries(
        &mut self,
        model: &RelayModel,
        step: &RelayStep<'_>,
        puller: usize,
    ) -> Result<(), Fault> {
        let running = set_up_of(&mut self.running)?;
        let proxy = &running.proxy;
        let cursor = step.before.pullers[puller].cursor;
        let limit = model.bounds.page_limit as usize;
        let store = Arc::clone(&running.pullers[puller]);
        let pull_stream = self.stream.clone();
        let pull =
            tokio::spawn(async move { store.pull(&pull_stream, i64::from(cursor), limit).await });
        let request = take(proxy, model.writers.len() + puller, "Query").await?;
        self.requests += 1;
        let answer = proxy.forward(&request).await.map_err(environment)?;
        proxy.deliver(request, answer).map_err(environment)?;
        let page: Vec<StoredOp> = match tokio::time::timeout(
            Duration::from_millis(REQUEST_WAIT_MILLIS_MAX),
            pull,
        )
        .await
        {
            Ok(Ok(Ok(page))) => page,
            other => return Err(Fault::diverged("a page", format!("{other:?}"))),
        };
        let expected: Vec<(i64, String)> = step
            .before
            .table
            .query_after(cursor, limit)
            .iter()
            .map(|(seq, op)| (i64::from(*seq), real_op_id(*op)))
            .collect();
        let actual = stored_ops_in_words(&self.stream, &page, OP_SIZES);
        if actual != expected {
            return Err(Fault::diverged(
                format!("P{} page {expected:?}", puller + 1),
                format!("{actual:?}"),
            ));
        }
        Ok(())
    }
}

/// A committed round's answer: forwarded; with the visibility window, its written items held
/// pending in the proxy, which must be exactly the items the model holds pending after it.
async fn committed_answer(
    running: &Running,
    model: &RelayModel,
    step: &RelayStep<'_>,
    request: &HeldRequest,
    stream: &str,
) -> Result<Answer, Fault> {
    let proxy = &running.proxy;
    let (before, after) = (step.before, step.after);
    let answer = if model.bounds.window {
        let (answer, held) = proxy.forward_holding(request).await.map_err(environment)?;
        let mut expected: Vec<ItemKey> = after
            .table
            .pending
            .keys()
            .filter(|key| !before.table.pending.contains_key(key))
            .map(|key| key_of(stream, *key))
            .collect();
        expected.sort();
        // The model applies at commit an item no other step can observe pending (a claim no
        // writer can touch): so does the proxy.
        let mut held: Vec<ItemKey> = held
            .into_iter()
            .filter(|key| {
                expected.contains(key)
                    || !after
                        .table
                        .applied
                        .keys()
                        .any(|applied| key_of(stream, *applied) == *key)
                    || proxy.apply(key).is_err()
            })
            .collect();
        held.sort();
        if answer.is_success() && held != expected {
            return Err(Fault::diverged(
                format!("pending {expected:?}"),
                format!("pending {held:?}"),
            ));
        }
        answer
    } else {
        proxy.forward(request).await.map_err(environment)?
    };
    if !answer.is_success() {
        return Err(Fault::diverged(
            "committed",
            format!(
                "cancelled {:?} {}",
                answer.cancellation_codes(),
                answer.body
            ),
        ));
    }
    Ok(answer)
}

/// Only the visibility window explains this cancellation: it is synthesised, with the old
/// images the server holds for the failed conditions; nothing is forwarded.
async fn conflict_answer(
    running: &Running,
    reasons: &[Reason],
    keys: &[ItemKey],
    table: &str,
) -> Result<Answer, Fault> {
    let images = running
        .proxy
        .read_images(table, keys)
        .await
        .map_err(environment)?;
    let shaped: Vec<(ReasonCode, Option<Item>)> = reasons
        .iter()
        .zip(images)
        .map(|(reason, image)| match reason {
            Reason::None => (ReasonCode::None, None),
            Reason::TransactionConflict => (ReasonCode::TransactionConflict, None),
            Reason::ConditionalCheckFailed { old } => {
                (ReasonCode::ConditionalCheckFailed, old.and(image.item))
            }
        })
        .collect();
    Ok(Answer::cancelled(&shaped))
}

/// The ops of `writer`'s push whose claims a batched claim read asks for: from the op due
/// next, every op not already answered ahead.
fn remaining_ops<'a>(
    model: &'a RelayModel,
    state: &'a RelayState,
    writer: usize,
) -> impl Iterator<Item = OpId> + 'a {
    let push = &model.writers[writer].1;
    let start = state.writers[writer].next_op as usize;
    (start..push.len())
        .filter(move |position| state.writers[writer].answered_ahead & (1 << position) == 0)
        .map(move |position| push[position])
}
