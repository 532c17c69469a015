-- One row per (scope, method, path, key). Timestamps are milliseconds since the Unix epoch,
-- compared with the layer's clock at read time; a row past expires_at is treated as absent.
CREATE TABLE IF NOT EXISTS idempotency_keys (
    scope            TEXT     NOT NULL,
    method           TEXT     NOT NULL,
    path             TEXT     NOT NULL,
    idempotency_key  TEXT     NOT NULL,
    fingerprint      BYTEA    NOT NULL,
    status           TEXT     NOT NULL CHECK (status IN ('processing', 'succeeded', 'failed')),
    generation       BIGINT   NOT NULL,
    lease_expires_at BIGINT   NOT NULL,
    expires_at       BIGINT   NOT NULL,
    response_status  INTEGER,
    response_headers TEXT,
    response_body    BYTEA,
    body_too_large   BOOLEAN  NOT NULL DEFAULT FALSE,
    created_at       BIGINT   NOT NULL,
    updated_at       BIGINT   NOT NULL,
    PRIMARY KEY (scope, method, path, idempotency_key)
);
CREATE INDEX IF NOT EXISTS idempotency_keys_expires_at ON idempotency_keys (expires_at);
