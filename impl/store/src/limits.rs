//! One set of limits on every backend: an op must fit DynamoDB's item, whichever backend stores
//! it, so a client tested on the embedded default (SQLite) or in memory meets the same 413 it
//! would meet in production on DynamoDB.
//!
//! Invariant: [`check_op_limits`] is the only size check of an op; every backend runs it (through
//! `validate_append`) before its first write of a push, and it counts an op the way DynamoDB
//! counts the larger of the op's two items (the op item and its claim): each attribute's name
//! plus its value, numbers at their largest. The payload's own limit is therefore DynamoDB's
//! 400 KB minus the item's other attributes (names, stream id, seq, op_id).

use crate::dynamodb::{
    ATTRIBUTE_CLAIMED_SEQ, ATTRIBUTE_OP_ID, ATTRIBUTE_PAYLOAD, ATTRIBUTE_PAYLOAD_SHA256,
    ATTRIBUTE_SEQ, ATTRIBUTE_STREAM_ID,
};
use crate::{NewOp, StoreError};

/// DynamoDB's item size limit (400 KB), counted over attribute names and values.
pub const ITEM_BYTES_MAX: usize = 400 * 1024;
/// DynamoDB's partition key length limit: the stream id.
pub const PARTITION_KEY_BYTES_MAX: usize = 2048;
/// The most bytes DynamoDB counts for a number attribute (38 significant digits).
pub(crate) const NUMBER_BYTES_MAX: usize = 21;
/// The size of the payload digest a claim item keeps.
pub(crate) const SHA256_BYTES: usize = 32;

/// The size DynamoDB counts for an item: each attribute's name plus its value.
fn item_bytes(attributes: &[(&str, usize)]) -> usize {
    attributes
        .iter()
        .map(|(name, value_bytes)| name.len() + value_bytes)
        .sum()
}

/// The sizes of an op's two items: the op item and its claim.
fn op_and_claim_bytes(stream: &str, op: &NewOp) -> (usize, usize) {
    let key = [
        (ATTRIBUTE_STREAM_ID, stream.len()),
        (ATTRIBUTE_SEQ, NUMBER_BYTES_MAX),
        (ATTRIBUTE_OP_ID, op.op_id.len()),
    ];
    let op_item = item_bytes(&key) + item_bytes(&[(ATTRIBUTE_PAYLOAD, op.payload.len())]);
    let claim_item = item_bytes(&key)
        + item_bytes(&[
            (ATTRIBUTE_CLAIMED_SEQ, NUMBER_BYTES_MAX),
            (ATTRIBUTE_PAYLOAD_SHA256, SHA256_BYTES),
        ]);
    (op_item, claim_item)
}

/// The limits of one op on every backend: the stream id within DynamoDB's partition key, each of
/// the op's items within DynamoDB's item size. Checked before anything is written.
pub fn check_op_limits(stream: &str, op: &NewOp) -> Result<(), StoreError> {
    if stream.len() > PARTITION_KEY_BYTES_MAX {
        return Err(StoreError::InvalidInput {
            reason: format!(
                "the stream id has {} bytes; a stream id has at most {PARTITION_KEY_BYTES_MAX} \
                 (DynamoDB's partition key, the limit on every backend)",
                stream.len()
            ),
        });
    }
    let (op_item, claim_item) = op_and_claim_bytes(stream, op);
    let largest = op_item.max(claim_item);
    if largest > ITEM_BYTES_MAX {
        return Err(StoreError::TooLarge {
            index: 0,
            reason: format!(
                "its item would have {largest} bytes; an op's item has at most {ITEM_BYTES_MAX} \
                 bytes, attribute names included (DynamoDB's item size, the limit on every \
                 backend)"
            ),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_item_size_check_counts_names_and_values_to_the_byte() {
        let overhead = ATTRIBUTE_STREAM_ID.len()
            + 1
            + ATTRIBUTE_SEQ.len()
            + NUMBER_BYTES_MAX
            + ATTRIBUTE_OP_ID.len()
            + 2
            + ATTRIBUTE_PAYLOAD.len();
        let fits = NewOp::new("o1", vec![0u8; ITEM_BYTES_MAX - overhead]);
        assert_eq!(check_op_limits("s", &fits), Ok(()));
        let over = NewOp::new("o1", vec![0u8; ITEM_BYTES_MAX - overhead + 1]);
        assert!(matches!(
            check_op_limits("s", &over),
            Err(StoreError::TooLarge { .. })
        ));
        assert!(matches!(
            check_op_limits(
                &"s".repeat(PARTITION_KEY_BYTES_MAX + 1),
                &NewOp::new("o", "x")
            ),
            Err(StoreError::InvalidInput { .. })
        ));
        assert_eq!(
            check_op_limits(&"s".repeat(PARTITION_KEY_BYTES_MAX), &NewOp::new("o", "x")),
            Ok(())
        );
    }
}
