//! Parsing and validation of the `Idempotency-Key` request header.
//!
//! The IETF draft defines the header as a Structured Field string (`"abc"`); many clients send
//! the bare value (`abc`). Both are accepted. A key must be 1..=255 characters of visible ASCII
//! (0x21..=0x7E) after unquoting; anything else is a client error (400), never a silent
//! pass-through, so a client that thinks it is protected is told it is not.

use http::HeaderMap;

pub const HEADER_NAME: &str = "idempotency-key";
/// Longest key accepted, in characters.
pub const KEY_CHARS_MAX: usize = 255;

/// Why a key was rejected; each maps to a 400 problem with its own detail.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error("the Idempotency-Key header is required for this request")]
    Missing,
    #[error("the Idempotency-Key header appears more than once")]
    Repeated,
    #[error("the Idempotency-Key is empty")]
    Empty,
    #[error("the Idempotency-Key is longer than {KEY_CHARS_MAX} characters")]
    TooLong,
    #[error("the Idempotency-Key contains a character that is not visible ASCII")]
    NotVisibleAscii,
    #[error("the Idempotency-Key is a malformed structured-field string")]
    MalformedString,
}

/// Reads the key from the headers: `Ok(None)` when absent (the caller decides if required).
pub fn parse_key(headers: &HeaderMap) -> Result<Option<String>, KeyError> {
    let mut values = headers.get_all(HEADER_NAME).iter();
    let Some(first) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(KeyError::Repeated);
    }
    parse_value(first.as_bytes()).map(Some)
}

/// Parses one header value: a structured-field string or a bare key.
pub fn parse_value(raw: &[u8]) -> Result<String, KeyError> {
    // Optional surrounding whitespace is allowed by HTTP field syntax; it is never part of a key.
    let trimmed = trim_spaces(raw);
    let key = if trimmed.first() == Some(&b'"') {
        unquote(trimmed)?
    } else {
        trimmed.to_vec()
    };
    validate(&key)?;
    // Validation guarantees ASCII, so this conversion cannot fail.
    String::from_utf8(key).map_err(|_| KeyError::NotVisibleAscii)
}

fn trim_spaces(raw: &[u8]) -> &[u8] {
    let start = raw
        .iter()
        .position(|byte| *byte != b' ' && *byte != b'\t')
        .unwrap_or(raw.len());
    let end = raw
        .iter()
        .rposition(|byte| *byte != b' ' && *byte != b'\t')
        .map_or(start, |i| i + 1);
    &raw[start..end]
}

/// RFC 8941 sf-string: DQUOTE *( unescaped / "\" ( DQUOTE / "\" ) ) DQUOTE.
fn unquote(quoted: &[u8]) -> Result<Vec<u8>, KeyError> {
    if quoted.len() < 2 || quoted[quoted.len() - 1] != b'"' {
        return Err(KeyError::MalformedString);
    }
    let inner = &quoted[1..quoted.len() - 1];
    let mut key = Vec::with_capacity(inner.len());
    let mut bytes = inner.iter();
    while let Some(&byte) = bytes.next() {
        match byte {
            b'\\' => match bytes.next() {
                Some(&escaped @ (b'"' | b'\\')) => key.push(escaped),
                _ => return Err(KeyError::MalformedString),
            },
            b'"' => return Err(KeyError::MalformedString),
            other => key.push(other),
        }
    }
    Ok(key)
}

fn validate(key: &[u8]) -> Result<(), KeyError> {
    if key.is_empty() {
        return Err(KeyError::Empty);
    }
    if !key.iter().all(|byte| (0x21..=0x7e).contains(byte)) {
        return Err(KeyError::NotVisibleAscii);
    }
    if key.len() > KEY_CHARS_MAX {
        return Err(KeyError::TooLong);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bare_and_quoted_keys_are_the_same_key() {
        assert_eq!(parse_value(b"abc-123").unwrap(), "abc-123");
        assert_eq!(parse_value(b"\"abc-123\"").unwrap(), "abc-123");
        assert_eq!(parse_value(b" \"a\\\"b\" ").unwrap(), "a\"b");
    }

    #[test]
    fn bad_keys_are_rejected_with_their_reason() {
        assert_eq!(parse_value(b""), Err(KeyError::Empty));
        assert_eq!(parse_value(b"\"\""), Err(KeyError::Empty));
        assert_eq!(parse_value(&[b'k'; 256]), Err(KeyError::TooLong));
        assert!(parse_value(&[b'k'; 255]).is_ok());
        assert_eq!(parse_value(b"a b"), Err(KeyError::NotVisibleAscii));
        assert_eq!(parse_value("é".as_bytes()), Err(KeyError::NotVisibleAscii));
        assert_eq!(parse_value(b"\"abc"), Err(KeyError::MalformedString));
        assert_eq!(parse_value(b"\"a\\nb\""), Err(KeyError::MalformedString));
    }
}
