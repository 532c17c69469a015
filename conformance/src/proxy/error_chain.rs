//! An error and its causes on one line, for the proxy's messages: the shared piece of
//! `upstream` (forwarding) and `signing` (credentials), kept below both so neither imports the
//! other for it.
//!
//! Invariant: no cause is dropped; the text is the error's own, then each source's.

/// An error and its causes on one line (`connection refused` is two levels down in the client).
pub(super) fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
