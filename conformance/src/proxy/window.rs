//! The visibility window: the items of committed transactions that DynamoDB has not applied yet,
//! and what reads show while they are pending.
//!
//! A committed transaction's written items are held *pending* until the trace applies them one
//! at a time; the server already holds their new images. Reads of the visible state show a
//! pending item's pre-image (or nothing, if it had none); a write touching a pending item is
//! cancelled with a conflict, as DynamoDB does.
//!
//! Invariants:
//! - **Reads never show a pending item's new image**: the rewrites here replace every pending
//!   key in a read's range by its pre-image; a read they cannot rewrite faithfully (projections,
//!   filters, indexes, Select) is refused with [`ProxyError::Unsupported`], never passed through.
//! - **All or nothing**: a set of items becomes pending together or not at all; a key is pending
//!   at most once.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use serde_json::{json, Value};

use super::key_condition::QueryView;
use super::wire::{Answer, Item, ItemKey, PreImage, ReasonCode};
use super::ProxyError;

/// Fields of a Query whose effect on a pending item's pre-image the proxy does not evaluate.
const QUERY_FIELDS_UNSUPPORTED: [&str; 7] = [
    "FilterExpression",
    "ProjectionExpression",
    "IndexName",
    "AttributesToGet",
    "QueryFilter",
    "KeyConditions",
    "ConditionalOperator",
];

/// Fields of a GetItem or of one table of a BatchGetItem that would cut a pre-image.
const READ_PROJECTIONS: [&str; 2] = ["ProjectionExpression", "AttributesToGet"];

/// A pending item: written upstream by a committed transaction, not yet visible.
#[derive(Debug)]
struct Pending {
    table: String,
    pre_image: Option<Item>,
}

/// The pending items, by key.
#[derive(Debug, Default)]
pub(super) struct Window {
    pending: Mutex<BTreeMap<ItemKey, Pending>>,
}

impl Window {
    fn lock(&self) -> MutexGuard<'_, BTreeMap<ItemKey, Pending>> {
        // Every update is a single map operation, so a poisoned lock is still consistent.
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Makes the images' keys pending. All or nothing: a key already pending, or twice in the
    /// set, refuses the whole set.
    pub(super) fn hold(&self, images: Vec<PreImage>) -> Result<(), ProxyError> {
        let mut window = self.lock();
        for (index, image) in images.iter().enumerate() {
            let twice = images[..index]
                .iter()
                .any(|earlier| earlier.key == image.key);
            if twice || window.contains_key(&image.key) {
                return Err(ProxyError::AlreadyPending(image.key.clone()));
            }
        }
        for image in images {
            window.insert(
                image.key,
                Pending {
                    table: image.table,
                    pre_image: image.item,
                },
            );
        }
        Ok(())
    }

    /// The pending item becomes visible.
    pub(super) fn apply(&self, key: &ItemKey) -> Result<(), ProxyError> {
        self.lock()
            .remove(key)
            .map(|_| ())
            .ok_or_else(|| ProxyError::NotPending(key.clone()))
    }

    /// The pending keys, in key order.
    pub(super) fn keys(&self) -> Vec<ItemKey> {
        self.lock().keys().cloned().collect()
    }

    /// For each (table, key): whether it is pending.
    pub(super) fn held_among(&self, touched: &[(String, ItemKey)]) -> Vec<bool> {
        let window = self.lock();
        touched
            .iter()
            .map(|(table, key)| {
                window
                    .get(key)
                    .is_some_and(|pending| pending.table == *table)
            })
            .collect()
    }

    /// The pending items of `table` whose key satisfies `covers`, with their pre-images.
    pub(super) fn pending_in(
        &self,
        table: &str,
        covers: impl Fn(&ItemKey) -> bool,
    ) -> BTreeMap<ItemKey, Option<Item>> {
        self.lock()
            .iter()
            .filter(|(key, pending)| pending.table == table && covers(key))
            .map(|(key, pending)| (key.clone(), pending.pre_image.clone()))
            .collect()
    }

    /// The answer DynamoDB gives a write that touches pending items, or `None` if it touches
    /// none: a transaction is cancelled with TransactionConflict on each such item (None on the
    /// others), a single-item write gets TransactionConflictException.
    pub(super) fn conflict_answer(
        &self,
        operation: &str,
        touched: &[(String, ItemKey)],
    ) -> Option<Answer> {
        let held = self.held_among(touched);
        if !held.contains(&true) {
            return None;
        }
        if operation == "TransactWriteItems" {
            let reasons: Vec<(ReasonCode, Option<Item>)> = held
                .iter()
                .map(|held| {
                    (
                        if *held {
                            ReasonCode::TransactionConflict
                        } else {
                            ReasonCode::None
                        },
                        None,
                    )
                })
                .collect();
            Some(Answer::cancelled(&reasons))
        } else {
            Some(Answer::conflict())
        }
    }
}

/// Refuses a Query the window cannot rewrite faithfully over pending items.
pub(super) fn check_query_rewritable(body: &Value) -> Result<(), ProxyError> {
    if let Some(field) = QUERY_FIELDS_UNSUPPORTED
        .iter()
        .find(|field| body.get(**field).is_some())
    {
        return Err(ProxyError::Unsupported(format!(
            "a Query with {field} over pending items"
        )));
    }
    if body
        .get("Select")
        .and_then(Value::as_str)
        .is_some_and(|select| select != "ALL_ATTRIBUTES")
    {
        return Err(ProxyError::Unsupported(
            "a Query with Select other than ALL_ATTRIBUTES over pending items".into(),
        ));
    }
    Ok(())
}

/// The visible page of a Query: `items` are every upstream item of its range (all pages, no
/// Limit), `hidden` the pending keys in that range. Pending items' new images are removed and
/// their pre-images put in; the Query's order and Limit are applied again, with
/// LastEvaluatedKey only when items were cut off.
pub(super) fn visible_query_answer(
    view: &QueryView,
    items: Vec<Item>,
    hidden: BTreeMap<ItemKey, Option<Item>>,
) -> Result<Answer, ProxyError> {
    let mut visible: Vec<(i64, Item)> = Vec::with_capacity(items.len());
    for item in items {
        let key = ItemKey::from_item(&item)?;
        if !hidden.contains_key(&key) {
            visible.push((key.seq, item));
        }
    }
    for (key, pre_image) in hidden {
        if let Some(item) = pre_image {
            visible.push((key.seq, item));
        }
    }
    visible.sort_by_key(|(seq, _)| *seq);
    if !view.forward {
        visible.reverse();
    }
    let mut last_evaluated = None;
    if let Some(limit) = view.limit {
        if visible.len() > limit {
            visible.truncate(limit);
            last_evaluated = visible
                .last()
                .map(|(seq, _)| ItemKey::new(view.stream.clone(), *seq).to_item());
        }
    }
    let count = visible.len();
    let mut reply = json!({
        "Items": visible.into_iter().map(|(_, item)| Value::Object(item)).collect::<Vec<_>>(),
        "Count": count,
        "ScannedCount": count,
    });
    if let Some(last) = last_evaluated {
        reply["LastEvaluatedKey"] = Value::Object(last);
    }
    Ok(Answer {
        status: 200,
        body: reply,
        headers: Vec::new(),
    })
}

/// A GetItem's answer over the visible state: the pending item's pre-image, or no Item.
pub(super) fn visible_get_answer(
    request_body: &Value,
    key: &ItemKey,
    mut answer: Answer,
    pre_image: Option<Item>,
) -> Result<Answer, ProxyError> {
    if !answer.is_success() {
        return Ok(answer);
    }
    if READ_PROJECTIONS
        .iter()
        .any(|field| request_body.get(*field).is_some())
    {
        return Err(ProxyError::Unsupported(format!(
            "a GetItem with a projection of pending item {key}"
        )));
    }
    let object = answer
        .body
        .as_object_mut()
        .ok_or_else(|| ProxyError::Upstream("a GetItem answer that is not an object".into()))?;
    match pre_image {
        Some(item) => object.insert("Item".into(), Value::Object(item)),
        None => object.remove("Item"),
    };
    Ok(answer)
}

/// A BatchGetItem's answer over the visible state: in each table's `Responses`, a pending item
/// shows its pre-image, or is absent if it had none. `hidden` holds, per table, the pending keys
/// the request asked for.
pub(super) fn visible_batch_get_answer(
    request_body: &Value,
    mut answer: Answer,
    hidden: BTreeMap<String, BTreeMap<ItemKey, Option<Item>>>,
) -> Result<Answer, ProxyError> {
    if !answer.is_success() || hidden.is_empty() {
        return Ok(answer);
    }
    for table in hidden.keys() {
        let asked = request_body.pointer(&format!(
            "/RequestItems/{}",
            table.replace('~', "~0").replace('/', "~1")
        ));
        if asked.is_some_and(|asked| {
            READ_PROJECTIONS
                .iter()
                .any(|field| asked.get(*field).is_some())
        }) {
            return Err(ProxyError::Unsupported(format!(
                "a BatchGetItem with a projection of pending items of {table}"
            )));
        }
    }
    let responses = answer
        .body
        .get_mut("Responses")
        .and_then(Value::as_object_mut)
        .ok_or_else(|| ProxyError::Upstream("a BatchGetItem answer without Responses".into()))?;
    for (table, pending) in hidden {
        let items = responses
            .entry(table.clone())
            .or_insert_with(|| Value::Array(Vec::new()));
        let items = items
            .as_array_mut()
            .ok_or_else(|| ProxyError::Upstream(format!("Responses of {table} is not a list")))?;
        let mut kept = Vec::with_capacity(items.len());
        for item in items.drain(..) {
            let key = item.as_object().map(ItemKey::from_item).transpose()?;
            if !key.is_some_and(|key| pending.contains_key(&key)) {
                kept.push(item);
            }
        }
        kept.extend(pending.into_values().flatten().map(Value::Object));
        *items = kept;
    }
    Ok(answer)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proxy::key_condition::SeqCondition;

    fn item(seq: i64, op: &str) -> Item {
        let mut item = ItemKey::new("s", seq).to_item();
        item.insert("op_id".into(), json!({ "S": op }));
        item
    }

    #[test]
    fn a_query_shows_pre_images_in_order_and_cuts_at_its_limit() {
        let view = QueryView {
            table: "t".into(),
            stream: "s".into(),
            seq: SeqCondition::Gt(0),
            limit: Some(2),
            forward: true,
            consistent: true,
            exclusive_start: None,
        };
        // Upstream holds 1, 2 (new image of a pending item that did not exist) and 3 (pending, pre-image "old").
        let hidden = BTreeMap::from([
            (ItemKey::new("s", 2), None),
            (ItemKey::new("s", 3), Some(item(3, "old"))),
        ]);
        let answer = visible_query_answer(
            &view,
            vec![item(1, "a"), item(2, "new"), item(3, "new")],
            hidden,
        )
        .unwrap();
        assert_eq!(answer.body["Items"], json!([item(1, "a"), item(3, "old")]));
        assert_eq!(answer.body.get("LastEvaluatedKey"), None);
    }

    #[test]
    fn a_batch_get_shows_pending_claims_as_their_pre_images() {
        let body = json!({"RequestItems": {"t": {"Keys": [ItemKey::new("s", -1).to_item(), ItemKey::new("s", -2).to_item()]}}});
        let upstream = Answer {
            status: 200,
            body: json!({"Responses": {"t": [item(-1, "x"), item(-2, "y")]}}),
            headers: Vec::new(),
        };
        let hidden = BTreeMap::from([(
            "t".to_string(),
            BTreeMap::from([(ItemKey::new("s", -2), None)]),
        )]);
        let answer = visible_batch_get_answer(&body, upstream, hidden).unwrap();
        assert_eq!(answer.body["Responses"]["t"], json!([item(-1, "x")]));
        let projected = json!({"RequestItems": {"t": {"Keys": [], "ProjectionExpression": "seq"}}});
        let upstream = Answer {
            status: 200,
            body: json!({"Responses": {"t": []}}),
            headers: Vec::new(),
        };
        let hidden = BTreeMap::from([(
            "t".to_string(),
            BTreeMap::from([(ItemKey::new("s", -2), None)]),
        )]);
        assert!(matches!(
            visible_batch_get_answer(&projected, upstream, hidden),
            Err(ProxyError::Unsupported(_))
        ));
    }

    #[test]
    fn holding_is_all_or_nothing() {
        let window = Window::default();
        let image = |seq| PreImage {
            table: "t".into(),
            key: ItemKey::new("s", seq),
            item: None,
        };
        window.hold(vec![image(1)]).unwrap();
        assert!(matches!(
            window.hold(vec![image(2), image(1)]),
            Err(ProxyError::AlreadyPending(_))
        ));
        assert_eq!(window.keys(), vec![ItemKey::new("s", 1)]);
        window.apply(&ItemKey::new("s", 1)).unwrap();
        assert!(matches!(
            window.apply(&ItemKey::new("s", 1)),
            Err(ProxyError::NotPending(_))
        ));
    }
}
