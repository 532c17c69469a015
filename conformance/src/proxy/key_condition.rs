//! The key-condition parser: a Query's `KeyConditionExpression` with its placeholders, read into
//! the partition it names and the sort-key range it covers.
//!
//! Invariant: only what the op table's key schema allows parses (`stream_id = :s` and one
//! comparison of the number `seq`); anything else is [`ProxyError::Malformed`] naming the
//! expression, so the window is never computed over a range the proxy misread.

use std::fmt;

use oncecheck_store::dynamodb::{ATTRIBUTE_SEQ, ATTRIBUTE_STREAM_ID};
use serde_json::{Map, Value};

use super::wire::{placeholder_end, ItemKey};
use super::ProxyError;

/// The sort-key part of a Query's key condition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SeqCondition {
    /// No sort-key condition: the whole partition.
    Any,
    Eq(i64),
    Lt(i64),
    Le(i64),
    Gt(i64),
    Ge(i64),
    Between(i64, i64),
}

impl SeqCondition {
    pub fn matches(self, seq: i64) -> bool {
        match self {
            SeqCondition::Any => true,
            SeqCondition::Eq(value) => seq == value,
            SeqCondition::Lt(value) => seq < value,
            SeqCondition::Le(value) => seq <= value,
            SeqCondition::Gt(value) => seq > value,
            SeqCondition::Ge(value) => seq >= value,
            SeqCondition::Between(low, high) => low <= seq && seq <= high,
        }
    }
}

impl fmt::Display for SeqCondition {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SeqCondition::Any => write!(formatter, "any seq"),
            SeqCondition::Eq(value) => write!(formatter, "seq = {value}"),
            SeqCondition::Lt(value) => write!(formatter, "seq < {value}"),
            SeqCondition::Le(value) => write!(formatter, "seq <= {value}"),
            SeqCondition::Gt(value) => write!(formatter, "seq > {value}"),
            SeqCondition::Ge(value) => write!(formatter, "seq >= {value}"),
            SeqCondition::Between(low, high) => write!(formatter, "seq BETWEEN {low} AND {high}"),
        }
    }
}

/// A Query, parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueryView {
    pub table: String,
    pub stream: String,
    pub seq: SeqCondition,
    pub limit: Option<usize>,
    /// ScanIndexForward (true when absent): ascending seq.
    pub forward: bool,
    pub consistent: bool,
    pub exclusive_start: Option<ItemKey>,
}

impl QueryView {
    /// Whether an item at `seq` is inside this Query's range: its condition and past its start key.
    pub fn covers(&self, seq: i64) -> bool {
        let past_start = match &self.exclusive_start {
            None => true,
            Some(start) if self.forward => seq > start.seq,
            Some(start) => seq < start.seq,
        };
        self.seq.matches(seq) && past_start
    }
}
/// One token of a key condition, placeholders resolved.
#[derive(Clone, Debug, PartialEq)]
enum Token {
    Name(String),
    Value(Value),
    Compare(&'static str),
    Open,
    Close,
    Comma,
    And,
    Between,
    BeginsWith,
}

fn key_condition_tokens(
    expression: &str,
    names: Option<&Map<String, Value>>,
    values: Option<&Map<String, Value>>,
) -> Result<Vec<Token>, ProxyError> {
    let malformed = |what: String| {
        ProxyError::Malformed(format!("KeyConditionExpression {expression:?}: {what}"))
    };
    let chars: Vec<char> = expression.chars().collect();
    let mut tokens = Vec::new();
    let mut index = 0;
    while index < chars.len() {
        let here = chars[index];
        match here {
            ' ' | '\t' | '\n' | '\r' => index += 1,
            '(' => {
                tokens.push(Token::Open);
                index += 1;
            }
            ')' => {
                tokens.push(Token::Close);
                index += 1;
            }
            ',' => {
                tokens.push(Token::Comma);
                index += 1;
            }
            '=' => {
                tokens.push(Token::Compare("="));
                index += 1;
            }
            '<' | '>' => {
                let with_equal = chars.get(index + 1) == Some(&'=');
                tokens.push(Token::Compare(match (here, with_equal) {
                    ('<', true) => "<=",
                    ('<', false) => "<",
                    ('>', true) => ">=",
                    _ => ">",
                }));
                index += if with_equal { 2 } else { 1 };
            }
            '#' | ':' => {
                let end = placeholder_end(&chars, index + 1);
                let placeholder: String = chars[index..end].iter().collect();
                if here == '#' {
                    let name = names
                        .and_then(|names| names.get(&placeholder))
                        .and_then(Value::as_str)
                        .ok_or_else(|| malformed(format!("{placeholder} is not defined")))?;
                    tokens.push(Token::Name(name.to_owned()));
                } else {
                    let value = values
                        .and_then(|values| values.get(&placeholder))
                        .ok_or_else(|| malformed(format!("{placeholder} is not defined")))?;
                    tokens.push(Token::Value(value.clone()));
                }
                index = end;
            }
            other if other.is_ascii_alphabetic() || other == '_' => {
                let end = placeholder_end(&chars, index);
                let word: String = chars[index..end].iter().collect();
                tokens.push(match word.to_ascii_lowercase().as_str() {
                    "and" => Token::And,
                    "between" => Token::Between,
                    "begins_with" => Token::BeginsWith,
                    _ => Token::Name(word),
                });
                index = end;
            }
            other => return Err(malformed(format!("unexpected {other:?}"))),
        }
    }
    Ok(tokens)
}

/// One comparison of a key condition: attribute, operator, operands.
#[derive(Debug)]
struct KeyComparison {
    name: String,
    operator: &'static str,
    operands: Vec<Value>,
}

fn parse_key_condition(
    tokens: &[Token],
    expression: &str,
) -> Result<Vec<KeyComparison>, ProxyError> {
    let malformed = |what: &str| {
        ProxyError::Malformed(format!("KeyConditionExpression {expression:?}: {what}"))
    };
    let mut comparisons = Vec::new();
    let mut rest = tokens;
    loop {
        let mut parenthesised = false;
        if rest.first() == Some(&Token::Open) {
            parenthesised = true;
            rest = &rest[1..];
        }
        let comparison = match rest {
            [Token::BeginsWith, Token::Open, Token::Name(name), Token::Comma, Token::Value(value), Token::Close, tail @ ..] =>
            {
                rest = tail;
                KeyComparison {
                    name: name.clone(),
                    operator: "begins_with",
                    operands: vec![value.clone()],
                }
            }
            [Token::Name(name), Token::Between, Token::Value(low), Token::And, Token::Value(high), tail @ ..] =>
            {
                rest = tail;
                KeyComparison {
                    name: name.clone(),
                    operator: "BETWEEN",
                    operands: vec![low.clone(), high.clone()],
                }
            }
            [Token::Name(name), Token::Compare(operator), Token::Value(value), tail @ ..] => {
                rest = tail;
                KeyComparison {
                    name: name.clone(),
                    operator,
                    operands: vec![value.clone()],
                }
            }
            _ => {
                return Err(malformed(
                    "expected `name op :value`, `name BETWEEN :a AND :b` or begins_with",
                ))
            }
        };
        if parenthesised {
            match rest.first() {
                Some(Token::Close) => rest = &rest[1..],
                _ => return Err(malformed("unbalanced parenthesis")),
            }
        }
        comparisons.push(comparison);
        match rest.first() {
            None => return Ok(comparisons),
            Some(Token::And) => rest = &rest[1..],
            Some(_) => return Err(malformed("expected AND between the key comparisons")),
        }
    }
}

fn number_operand(value: &Value, expression: &str) -> Result<i64, ProxyError> {
    value
        .get("N")
        .and_then(Value::as_str)
        .and_then(|text| text.parse().ok())
        .ok_or_else(|| {
            ProxyError::Malformed(format!("{expression:?}: {value} is not an integer N value"))
        })
}

/// Fields of a Query whose effect on a pending item's pre-image the proxy does not evaluate.
pub(super) fn query_view(body: &Value) -> Result<QueryView, ProxyError> {
    let table = body
        .get("TableName")
        .and_then(Value::as_str)
        .ok_or_else(|| ProxyError::Malformed("Query without TableName".into()))?
        .to_owned();
    let expression = body
        .get("KeyConditionExpression")
        .and_then(Value::as_str)
        .ok_or_else(|| ProxyError::Malformed("Query without KeyConditionExpression".into()))?;
    let names = body
        .get("ExpressionAttributeNames")
        .and_then(Value::as_object);
    let values = body
        .get("ExpressionAttributeValues")
        .and_then(Value::as_object);
    let tokens = key_condition_tokens(expression, names, values)?;
    let mut stream = None;
    let mut seq = SeqCondition::Any;
    for comparison in parse_key_condition(&tokens, expression)? {
        if comparison.name == ATTRIBUTE_STREAM_ID {
            let value = comparison.operands[0].get("S").and_then(Value::as_str);
            match (comparison.operator, value) {
                ("=", Some(value)) => stream = Some(value.to_owned()),
                _ => {
                    return Err(ProxyError::Malformed(format!(
                        "{expression:?}: the partition key needs `= :string`"
                    )))
                }
            }
        } else if comparison.name == ATTRIBUTE_SEQ {
            let first = number_operand(&comparison.operands[0], expression)?;
            seq = match comparison.operator {
                "=" => SeqCondition::Eq(first),
                "<" => SeqCondition::Lt(first),
                "<=" => SeqCondition::Le(first),
                ">" => SeqCondition::Gt(first),
                ">=" => SeqCondition::Ge(first),
                "BETWEEN" => SeqCondition::Between(
                    first,
                    number_operand(&comparison.operands[1], expression)?,
                ),
                other => {
                    return Err(ProxyError::Malformed(format!(
                        "{expression:?}: {other} does not apply to the number sort key"
                    )))
                }
            };
        } else {
            return Err(ProxyError::Malformed(format!(
                "{expression:?}: {} is not a key attribute of the op table",
                comparison.name
            )));
        }
    }
    let stream = stream.ok_or_else(|| {
        ProxyError::Malformed(format!("{expression:?}: no partition key condition"))
    })?;
    let limit = match body.get("Limit") {
        None => None,
        Some(limit) => Some(
            limit
                .as_u64()
                .and_then(|limit| usize::try_from(limit).ok())
                .filter(|limit| *limit > 0)
                .ok_or_else(|| {
                    ProxyError::Malformed(format!("Limit {limit} is not a positive integer"))
                })?,
        ),
    };
    let exclusive_start = body
        .get("ExclusiveStartKey")
        .and_then(Value::as_object)
        .map(ItemKey::from_item)
        .transpose()?;
    Ok(QueryView {
        table,
        stream,
        seq,
        limit,
        forward: body
            .get("ScanIndexForward")
            .and_then(Value::as_bool)
            .unwrap_or(true),
        consistent: body
            .get("ConsistentRead")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        exclusive_start,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn names() -> Map<String, Value> {
        [
            ("#stream", "stream_id"),
            ("#seq", "seq"),
            ("#next", "next_seq"),
        ]
        .iter()
        .map(|(name, value)| ((*name).to_owned(), json!(value)))
        .collect()
    }

    #[test]
    fn parses_the_store_key_conditions() {
        let cases = [
            (
                "#stream = :stream AND #seq > :after",
                json!({"N": "4"}),
                SeqCondition::Gt(4),
            ),
            (
                "#stream = :stream AND #seq = :after",
                json!({"N": "0"}),
                SeqCondition::Eq(0),
            ),
            (
                "#seq <= :after AND #stream = :stream",
                json!({"N": "-9"}),
                SeqCondition::Le(-9),
            ),
            (
                "(#stream = :stream) AND (#seq >= :after)",
                json!({"N": "2"}),
                SeqCondition::Ge(2),
            ),
        ];
        for (expression, after, expected) in cases {
            let body = json!({
                "TableName": "t",
                "KeyConditionExpression": expression,
                "ExpressionAttributeNames": names(),
                "ExpressionAttributeValues": {":stream": {"S": "s"}, ":after": after},
                "Limit": 2,
                "ScanIndexForward": false,
            });
            let view = query_view(&body).unwrap();
            assert_eq!(
                (view.stream.as_str(), view.seq, view.limit, view.forward),
                ("s", expected, Some(2), false),
                "{expression}"
            );
        }
        let between = json!({
            "TableName": "t",
            "KeyConditionExpression": "stream_id = :s AND seq BETWEEN :a AND :b",
            "ExpressionAttributeValues": {":s": {"S": "s"}, ":a": {"N": "1"}, ":b": {"N": "5"}},
        });
        let view = query_view(&between).unwrap();
        assert_eq!(
            (view.seq, view.forward, view.limit),
            (SeqCondition::Between(1, 5), true, None)
        );
        let no_stream = json!({
            "TableName": "t",
            "KeyConditionExpression": "seq > :a",
            "ExpressionAttributeValues": {":a": {"N": "1"}},
        });
        assert!(matches!(
            query_view(&no_stream),
            Err(ProxyError::Malformed(_))
        ));
    }

    #[test]
    fn covers_respects_the_start_key_in_either_order() {
        let mut view = QueryView {
            table: "t".into(),
            stream: "s".into(),
            seq: SeqCondition::Gt(0),
            limit: None,
            forward: true,
            consistent: true,
            exclusive_start: Some(ItemKey::new("s", 3)),
        };
        assert!(!view.covers(3) && view.covers(4) && !view.covers(0));
        view.forward = false;
        assert!(view.covers(2) && !view.covers(4) && !view.covers(0));
    }
}
