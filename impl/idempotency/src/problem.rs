//! `application/problem+json` (RFC 9457) responses for every status the layer itself answers.

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode};

pub const PROBLEM_TYPE_BASE: &str = "https://oncecheck.dev/problems/idempotency";
/// The `Retry-After` of a 503 when the layer's configuration does not say otherwise.
pub const RETRY_AFTER_SECS_DEFAULT: u64 = 1;

/// A problem the layer answers instead of running the handler.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub status: StatusCode,
    /// The fragment of the problem type URI (`missing-key`, `fingerprint-mismatch`, ...).
    pub kind: &'static str,
    pub title: &'static str,
    pub detail: String,
}

impl Problem {
    pub fn to_response(&self) -> Response<Bytes> {
        let document = serde_json::json!({
            "type": format!("{PROBLEM_TYPE_BASE}#{}", self.kind),
            "title": self.title,
            "status": self.status.as_u16(),
            "detail": self.detail,
        });
        let mut response = Response::new(Bytes::from(document.to_string()));
        *response.status_mut() = self.status;
        response.headers_mut().insert(
            http::header::CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        // Every 503 says when to come back: a client that retries at once only adds load.
        if self.status == StatusCode::SERVICE_UNAVAILABLE {
            response.headers_mut().insert(
                http::header::RETRY_AFTER,
                HeaderValue::from(RETRY_AFTER_SECS_DEFAULT),
            );
        }
        response
    }

    /// The response with `Retry-After: seconds` (for the statuses that carry one: 503, 409).
    pub fn to_response_retry_after(&self, seconds: u64) -> Response<Bytes> {
        let mut response = self.to_response();
        response
            .headers_mut()
            .insert(http::header::RETRY_AFTER, HeaderValue::from(seconds));
        response
    }
}
