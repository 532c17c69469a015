//! Tokened DynamoDB transactions under unknown outcomes. Being written.
