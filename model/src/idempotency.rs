//! The Idempotency-Key middleware model (issue 5). Being written.
