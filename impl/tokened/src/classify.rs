//! The retry table as an API: what repeating a write does, and whether a caller may retry it
//! after an unknown outcome.
//!
//! Invariants: every write pattern has exactly one row ([`Pattern::row`]); a pattern is derived
//! from the request itself ([`classify_item`], [`classify_update_expression`]), never taken on
//! the caller's word; and [`retry_plan`] refuses, as a typed value, every retry that could apply a
//! non-idempotent effect twice. The least idempotent clause of an update decides its pattern.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::{AttributeValue, TransactWriteItem};

/// A row of the retry table: the shape of a write, as far as repeating it is concerned.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Pattern {
    /// PutItem of a complete item.
    PutItem,
    /// DeleteItem of a key.
    DeleteItem,
    /// UpdateItem that only sets paths to fixed values (`SET a = :v`, `if_not_exists`) or removes
    /// paths (`REMOVE a`).
    SetFixedOrRemove,
    /// UpdateItem adding or deleting fixed members of a set (`ADD s :members` with a set value,
    /// `DELETE s :members`).
    SetMembers,
    /// A PutItem (or Put in a transaction) conditional on `attribute_not_exists`.
    ConditionalCreate,
    /// UpdateItem `ADD n :delta` with a number, or `SET n = n + :delta`.
    NumericAdd,
    /// UpdateItem deriving the new value from the old one: `list_append`.
    ListAppend,
    /// BatchWriteItem: puts and deletes, not atomic, no token.
    BatchWriteItem,
    /// TransactWriteItems without a ClientRequestToken.
    TransactWithoutToken,
    /// TransactWriteItems with a ClientRequestToken.
    TransactWithToken,
}

/// What a retry after an unknown outcome does, and what the caller may do about it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RetryClass {
    /// Repeating converges to the same state (it may overwrite a concurrent writer).
    StateIdempotent,
    /// Happens at most once, but the retry of a committed first attempt reports a condition
    /// failure rather than the original success: the caller must read the item back.
    IdempotentWithCaveat,
    /// Repeating applies the effect again.
    NotIdempotent,
    /// Retry only the `UnprocessedItems` the service returned; a lost whole response needs
    /// reconciliation of the keys, not a resend.
    RetryUnprocessedItemsOnly,
    /// Resend the identical request with the same token while the 10-minute window is open.
    RetryIdenticalWithTokenWithinWindow,
}

/// One row: the pattern, its class, and the table's two sentences.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Row {
    pub pattern: Pattern,
    pub class: RetryClass,
    /// What repeating the request does to the state.
    pub repeated_effect: &'static str,
    /// What a caller should do when the outcome is unknown.
    pub guidance: &'static str,
}

impl Pattern {
    pub const ALL: [Pattern; 10] = [
        Pattern::PutItem,
        Pattern::DeleteItem,
        Pattern::SetFixedOrRemove,
        Pattern::SetMembers,
        Pattern::ConditionalCreate,
        Pattern::NumericAdd,
        Pattern::ListAppend,
        Pattern::BatchWriteItem,
        Pattern::TransactWithoutToken,
        Pattern::TransactWithToken,
    ];

    /// The pattern's row of the retry table.
    //= specs/tokened-writes.md#T4
    //# For each pattern, what the retry table says is what the model shows.
    pub fn row(self) -> Row {
        use Pattern::*;
        use RetryClass::*;
        let (class, repeated_effect, guidance) = match self {
            PutItem => (
                StateIdempotent,
                "writes the same complete item again: converges",
                "retry if overwriting a newer concurrent value is acceptable; otherwise condition on a version",
            ),
            DeleteItem => (
                StateIdempotent,
                "the second delete finds no item",
                "retry unless a concurrent writer may have recreated the item",
            ),
            SetFixedOrRemove => (
                StateIdempotent,
                "the fields converge to the same values",
                "retry if concurrent updates of those fields cannot be overwritten",
            ),
            SetMembers => (
                StateIdempotent,
                "the union or removal of the same members converges",
                "retry; concurrent writes to the same set still interleave",
            ),
            ConditionalCreate => (
                IdempotentWithCaveat,
                "creates at most once; the retry of a committed create fails its condition",
                "retry, then read the item back: a condition failure is not proof of the first attempt's success",
            ),
            NumericAdd => (
                NotIdempotent,
                "applies the delta again",
                "do not retry blindly: use a tokened transaction or a receipt item",
            ),
            ListAppend => (
                NotIdempotent,
                "derives another value from the already changed item",
                "do not retry blindly: use a tokened transaction or a receipt item",
            ),
            BatchWriteItem => (
                RetryUnprocessedItemsOnly,
                "may commit in chunks; there is no token for the whole batch",
                "retry only UnprocessedItems; after a lost whole response reconcile the keys",
            ),
            TransactWithoutToken => (
                NotIdempotent,
                "the whole transaction can execute again",
                "add a token before retrying non-idempotent effects",
            ),
            TransactWithToken => (
                RetryIdenticalWithTokenWithinWindow,
                "the token and the effects commit atomically; an identical retry is answered without applying again",
                "resend the identical request with the same token within the 10-minute window, then reconcile",
            ),
        };
        Row {
            pattern: self,
            class,
            repeated_effect,
            guidance,
        }
    }
}

/// Why a write is not what the caller said it was.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShapeError {
    #[error("a transaction item with no Put, Update, Delete or ConditionCheck")]
    EmptyItem,
    #[error("a ConditionCheck alone writes nothing")]
    ConditionCheckOnly,
    #[error("update expression `{expression}` has no SET, REMOVE, ADD or DELETE clause")]
    UnreadableUpdate { expression: String },
    #[error("update expression `{expression}`: ADD of `{value}`, which is not in ExpressionAttributeValues")]
    UnknownValue { expression: String, value: String },
}

/// The pattern of one single-item write (a Put, Update or Delete, as a transaction item or as
/// the equivalent PutItem / UpdateItem / DeleteItem).
pub fn classify_item(item: &TransactWriteItem) -> Result<Pattern, ShapeError> {
    if let Some(put) = item.put() {
        let creates = put
            .condition_expression()
            .is_some_and(|condition| condition.contains("attribute_not_exists"));
        return Ok(if creates {
            Pattern::ConditionalCreate
        } else {
            Pattern::PutItem
        });
    }
    if item.delete().is_some() {
        return Ok(Pattern::DeleteItem);
    }
    if let Some(update) = item.update() {
        return classify_update_expression(
            update.update_expression(),
            update
                .expression_attribute_values()
                .unwrap_or(&HashMap::new()),
        );
    }
    if item.condition_check().is_some() {
        return Err(ShapeError::ConditionCheckOnly);
    }
    Err(ShapeError::EmptyItem)
}

/// The pattern of an update expression: each clause is classified and the least idempotent one
/// decides (a fixed SET next to an ADD of a number is an ADD).
pub fn classify_update_expression(
    expression: &str,
    values: &HashMap<String, AttributeValue>,
) -> Result<Pattern, ShapeError> {
    let clauses = split_clauses(expression);
    if clauses.is_empty() {
        return Err(ShapeError::UnreadableUpdate {
            expression: expression.to_owned(),
        });
    }
    let mut worst = Pattern::SetFixedOrRemove;
    for (keyword, body) in clauses {
        let pattern = match keyword.as_str() {
            "SET" => classify_set_clause(body),
            "REMOVE" => Pattern::SetFixedOrRemove,
            "DELETE" => Pattern::SetMembers,
            "ADD" => classify_add_clause(expression, body, values)?,
            _ => unreachable!("split_clauses yields the four keywords only"),
        };
        worst = worst.max(pattern);
    }
    Ok(worst)
}

/// Splits an update expression at its clause keywords (case-insensitive, whole words).
fn split_clauses(expression: &str) -> Vec<(String, &str)> {
    const KEYWORDS: [&str; 4] = ["SET", "REMOVE", "ADD", "DELETE"];
    let mut starts: Vec<(usize, usize, String)> = Vec::new();
    let bytes = expression.as_bytes();
    let is_word =
        |byte: u8| byte.is_ascii_alphanumeric() || byte == b'_' || byte == b'#' || byte == b':';
    // One pass over the bytes and a separator past the end, so every word ends inside the loop
    // and the loop is bounded by the expression's length.
    let mut word_start: Option<usize> = None;
    let separated = bytes.iter().copied().chain(std::iter::once(b' '));
    for (index, byte) in separated.enumerate() {
        match (word_start, is_word(byte)) {
            (None, true) => word_start = Some(index),
            (Some(start), false) => {
                word_start = None;
                let word = expression[start..index].to_ascii_uppercase();
                if KEYWORDS.contains(&word.as_str()) {
                    starts.push((start, index, word));
                }
            }
            (None, false) | (Some(_), true) => {}
        }
    }
    starts
        .iter()
        .enumerate()
        .map(|(position, (_, body_start, keyword))| {
            let body_end = starts
                .get(position + 1)
                .map_or(expression.len(), |next| next.0);
            (keyword.clone(), &expression[*body_start..body_end])
        })
        .collect()
}

fn classify_set_clause(body: &str) -> Pattern {
    let mut worst = Pattern::SetFixedOrRemove;
    for assignment in split_top_level(body) {
        let Some((_, value)) = assignment.split_once('=') else {
            continue;
        };
        let pattern = if value.contains("list_append") {
            Pattern::ListAppend
        } else if value.contains('+') || value.contains('-') {
            // `SET n = n + :d` (or `-`): derived from the old value.
            Pattern::NumericAdd
        } else {
            // A fixed value or `if_not_exists(path, :v)`: converges.
            Pattern::SetFixedOrRemove
        };
        worst = worst.max(pattern);
    }
    worst
}

fn classify_add_clause(
    expression: &str,
    body: &str,
    values: &HashMap<String, AttributeValue>,
) -> Result<Pattern, ShapeError> {
    let mut worst = Pattern::SetMembers;
    for action in split_top_level(body) {
        let Some(value_name) = action.split_whitespace().last() else {
            continue;
        };
        let pattern = match values.get(value_name) {
            Some(AttributeValue::N(_)) => Pattern::NumericAdd,
            Some(AttributeValue::Ss(_) | AttributeValue::Ns(_) | AttributeValue::Bs(_)) => {
                Pattern::SetMembers
            }
            // The service refuses ADD of anything else; classify it as the unsafe case.
            Some(_) => Pattern::NumericAdd,
            None => {
                return Err(ShapeError::UnknownValue {
                    expression: expression.to_owned(),
                    value: value_name.to_owned(),
                })
            }
        };
        worst = worst.max(pattern);
    }
    Ok(worst)
}

/// Splits at commas outside parentheses (`SET a = list_append(a, :x), b = :y`).
fn split_top_level(body: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0i32, 0);
    for (index, character) in body.char_indices() {
        match character {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(body[start..index].trim());
                start = index + 1;
            }
            _ => {}
        }
    }
    parts.push(body[start..].trim());
    parts.into_iter().filter(|part| !part.is_empty()).collect()
}

/// What a caller may do after an unknown outcome, when it asked to retry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RetryPlan {
    /// Resend the same request; its repetition converges.
    Resend,
    /// Resend, and read the item back if the retry reports a condition failure.
    ResendThenReadBack,
    /// Resend only the items the service returned as unprocessed.
    ResendUnprocessedItems,
    /// Resend the identical request with its token while the window is open.
    ResendIdenticalWithToken,
}

/// A retry that could apply an effect twice, refused before anything is sent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("retry refused: {pattern:?} is not idempotent ({}); {}", pattern.row().repeated_effect, pattern.row().guidance)]
pub struct RetryRefused {
    pub pattern: Pattern,
}

/// The retry a caller may make of a write of `pattern` whose outcome is unknown, or a typed
/// refusal when a retry could apply the effect twice.
pub fn retry_plan(pattern: Pattern) -> Result<RetryPlan, RetryRefused> {
    match pattern.row().class {
        RetryClass::StateIdempotent => Ok(RetryPlan::Resend),
        RetryClass::IdempotentWithCaveat => Ok(RetryPlan::ResendThenReadBack),
        RetryClass::RetryUnprocessedItemsOnly => Ok(RetryPlan::ResendUnprocessedItems),
        RetryClass::RetryIdenticalWithTokenWithinWindow => Ok(RetryPlan::ResendIdenticalWithToken),
        RetryClass::NotIdempotent => Err(RetryRefused { pattern }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_dynamodb::types::{Delete, Put, Update};

    fn values(pairs: &[(&str, AttributeValue)]) -> HashMap<String, AttributeValue> {
        pairs
            .iter()
            .map(|(name, value)| (name.to_string(), value.clone()))
            .collect()
    }

    fn number(text: &str) -> AttributeValue {
        AttributeValue::N(text.to_owned())
    }

    /// The clauses' parts are split at top-level commas only, and each part is its own text:
    /// no comma, no padding, none empty.
    #[test]
    fn a_clause_splits_at_its_top_level_commas_only() {
        assert_eq!(
            split_top_level(" a = :x, b = list_append(b, :y) ,c = if_not_exists(c, :z)"),
            vec![
                "a = :x",
                "b = list_append(b, :y)",
                "c = if_not_exists(c, :z)"
            ]
        );
        assert_eq!(split_top_level("s :a,n :b"), vec!["s :a", "n :b"]);
        assert_eq!(split_top_level("n :d,"), vec!["n :d"]);
        assert_eq!(split_top_level(""), Vec::<&str>::new());
    }

    //= specs/tokened-writes.md#T4
    //# For each pattern, what the retry table says is what the model shows.
    #[test]
    fn every_row_of_the_table_has_its_class() {
        use Pattern::*;
        use RetryClass::*;
        let expected = [
            (PutItem, StateIdempotent),
            (DeleteItem, StateIdempotent),
            (SetFixedOrRemove, StateIdempotent),
            (SetMembers, StateIdempotent),
            (ConditionalCreate, IdempotentWithCaveat),
            (NumericAdd, NotIdempotent),
            (ListAppend, NotIdempotent),
            (BatchWriteItem, RetryUnprocessedItemsOnly),
            (TransactWithoutToken, NotIdempotent),
            (TransactWithToken, RetryIdenticalWithTokenWithinWindow),
        ];
        assert_eq!(expected.len(), Pattern::ALL.len());
        for (pattern, class) in expected {
            assert_eq!(pattern.row().class, class, "{pattern:?}");
            assert_eq!(pattern.row().pattern, pattern);
        }
    }

    #[test]
    fn update_expressions_are_classified_by_their_least_idempotent_clause() {
        let none = HashMap::new();
        let cases: Vec<(&str, HashMap<String, AttributeValue>, Pattern)> = vec![
            ("SET a = :v", none.clone(), Pattern::SetFixedOrRemove),
            (
                "set a = :v REMOVE b",
                none.clone(),
                Pattern::SetFixedOrRemove,
            ),
            (
                "SET a = if_not_exists(a, :v)",
                none.clone(),
                Pattern::SetFixedOrRemove,
            ),
            ("SET n = n + :d", none.clone(), Pattern::NumericAdd),
            ("SET a = :v, n = n - :d", none.clone(), Pattern::NumericAdd),
            (
                "ADD n :d",
                values(&[(":d", number("5"))]),
                Pattern::NumericAdd,
            ),
            (
                "ADD tags :t",
                values(&[(":t", AttributeValue::Ss(vec!["x".into()]))]),
                Pattern::SetMembers,
            ),
            ("DELETE tags :t", none.clone(), Pattern::SetMembers),
            (
                "SET l = list_append(l, :x), b = :y",
                none.clone(),
                Pattern::ListAppend,
            ),
            (
                "SET a = :v ADD n :d",
                values(&[(":d", number("1"))]),
                Pattern::NumericAdd,
            ),
            // Words containing a keyword are not clauses.
            ("SET #address = :v", none.clone(), Pattern::SetFixedOrRemove),
        ];
        for (expression, values, expected) in cases {
            assert_eq!(
                classify_update_expression(expression, &values),
                Ok(expected),
                "{expression}"
            );
        }
        assert!(matches!(
            classify_update_expression("n = 1", &none),
            Err(ShapeError::UnreadableUpdate { .. })
        ));
        assert!(matches!(
            classify_update_expression("ADD n :missing", &none),
            Err(ShapeError::UnknownValue { .. })
        ));
    }

    #[test]
    fn items_are_classified_from_the_request() {
        let put_builder = Put::builder()
            .table_name("t")
            .item("pk", AttributeValue::S("a".into()));
        let put = put_builder.clone().build().unwrap();
        let create = put_builder
            .condition_expression("attribute_not_exists(pk)")
            .build()
            .unwrap();
        let delete = Delete::builder()
            .table_name("t")
            .key("pk", AttributeValue::S("a".into()))
            .build()
            .unwrap();
        let add = Update::builder()
            .table_name("t")
            .key("pk", AttributeValue::S("a".into()))
            .update_expression("ADD n :d")
            .expression_attribute_values(":d", number("5"))
            .build()
            .unwrap();
        let item =
            |builder: aws_sdk_dynamodb::types::builders::TransactWriteItemBuilder| builder.build();
        assert_eq!(
            classify_item(&item(TransactWriteItem::builder().put(put))),
            Ok(Pattern::PutItem)
        );
        assert_eq!(
            classify_item(&item(TransactWriteItem::builder().put(create))),
            Ok(Pattern::ConditionalCreate)
        );
        assert_eq!(
            classify_item(&item(TransactWriteItem::builder().delete(delete))),
            Ok(Pattern::DeleteItem)
        );
        assert_eq!(
            classify_item(&item(TransactWriteItem::builder().update(add))),
            Ok(Pattern::NumericAdd)
        );
        assert_eq!(
            classify_item(&TransactWriteItem::builder().build()),
            Err(ShapeError::EmptyItem)
        );
    }

    #[test]
    fn retrying_a_non_idempotent_tokenless_write_is_refused() {
        for pattern in [
            Pattern::NumericAdd,
            Pattern::ListAppend,
            Pattern::TransactWithoutToken,
        ] {
            assert_eq!(retry_plan(pattern), Err(RetryRefused { pattern }));
        }
        assert_eq!(retry_plan(Pattern::PutItem), Ok(RetryPlan::Resend));
        assert_eq!(
            retry_plan(Pattern::ConditionalCreate),
            Ok(RetryPlan::ResendThenReadBack)
        );
        assert_eq!(
            retry_plan(Pattern::BatchWriteItem),
            Ok(RetryPlan::ResendUnprocessedItems)
        );
        assert_eq!(
            retry_plan(Pattern::TransactWithToken),
            Ok(RetryPlan::ResendIdenticalWithToken)
        );
    }
}
