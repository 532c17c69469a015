//! The request fingerprint: what makes two requests with one key "the same request".
//!
//! It is SHA-256 over, in order and length-prefixed so no two inputs collide by concatenation:
//! the method, the path with its query string, and the request body bytes. Headers are not in
//! it (clients legitimately vary `Date`, tracing headers, auth token refreshes); the principal
//! is not in it because it is already part of the cache key.

use sha2::{Digest, Sha256};

/// A 32-byte SHA-256 request fingerprint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Fingerprint(pub [u8; 32]);

impl Fingerprint {
    pub fn of(method: &http::Method, path_and_query: &str, body: &[u8]) -> Fingerprint {
        let mut hasher = Sha256::new();
        for part in [method.as_str().as_bytes(), path_and_query.as_bytes(), body] {
            hasher.update((part.len() as u64).to_be_bytes());
            hasher.update(part);
        }
        Fingerprint(hasher.finalize().into())
    }
}
