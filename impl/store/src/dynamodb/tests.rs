//! Unit tests of the round logic (no endpoint): layout, settling cancellation reasons, the
//! ALL_OLD hint, claim settling, the flip, the in-a-row budget, jitter, claim keys.

use super::*;

fn reason(code: &str) -> ItemReason {
    ItemReason {
        code: code.to_owned(),
        item: None,
    }
}

fn with_item(code: &str, attributes: &[(&str, AttributeValue)]) -> ItemReason {
    ItemReason {
        code: code.to_owned(),
        item: Some(
            attributes
                .iter()
                .map(|(name, value)| ((*name).to_owned(), value.clone()))
                .collect(),
        ),
    }
}

fn n(value: i64) -> AttributeValue {
    AttributeValue::N(value.to_string())
}

fn s(value: &str) -> AttributeValue {
    AttributeValue::S(value.to_owned())
}

const WITH_CHECK: Option<PredecessorCheck> = Some(PredecessorCheck::Exists);

/// A claimant whose payload is empty (the claims in these tests carry no digest unless a test
/// adds one).
fn claimant(op_id: &'static str) -> Claimant<'static> {
    Claimant {
        op_id,
        digest: payload_digest(b""),
    }
}

#[test]
fn the_layout_maps_reasons_to_items_with_and_without_the_predecessor_check() {
    assert_eq!(
        TransactionLayout::new(true),
        TransactionLayout {
            counter: 0,
            claim: 1,
            predecessor: Some(2),
            op: 3
        }
    );
    assert_eq!(TransactionLayout::new(true).len(), 4);
    assert_eq!(
        TransactionLayout::new(false),
        TransactionLayout {
            counter: 0,
            claim: 1,
            predecessor: None,
            op: 2
        }
    );
    assert_eq!(TransactionLayout::new(false).len(), 3);
}

//= specs/relay-append.md#R3
//# An op_id is stored at most once; every append of it, re-pushes included, answers the same seq.
#[test]
fn a_claim_outranks_a_failed_counter_and_answers_its_seq_with_the_hint() {
    let reasons = [
        with_item(CODE_CONDITION_FAILED, &[(ATTRIBUTE_NEXT_SEQ, n(7))]),
        with_item(
            CODE_CONDITION_FAILED,
            &[(ATTRIBUTE_OP_ID, s("o1")), (ATTRIBUTE_CLAIMED_SEQ, n(1))],
        ),
        reason(CODE_NONE),
        reason(CODE_NONE),
    ];
    let outcome = settle_cancellation(
        TransactionLayout::new(true),
        WITH_CHECK,
        4,
        &claimant("o1"),
        &reasons,
    )
    .unwrap();
    assert_eq!(
        outcome,
        RoundOutcome::Existing {
            seq: 1,
            counter_after: Some(7)
        }
    );
}

#[test]
fn a_claim_without_an_image_is_read_back_and_a_foreign_claim_is_refused() {
    let reasons = [
        reason(CODE_NONE),
        reason(CODE_CONDITION_FAILED),
        reason(CODE_NONE),
    ];
    let outcome = settle_cancellation(
        TransactionLayout::new(false),
        None,
        0,
        &claimant("o1"),
        &reasons,
    )
    .unwrap();
    assert_eq!(
        outcome,
        RoundOutcome::ClaimPresent {
            counter_after: Some(0)
        }
    );
    let foreign = HashMap::from([
        (ATTRIBUTE_OP_ID.to_owned(), s("other")),
        (ATTRIBUTE_CLAIMED_SEQ.to_owned(), n(3)),
    ]);
    assert_eq!(
        settle_claim(&foreign, &claimant("o1"), None).unwrap(),
        RoundOutcome::ClaimForeign {
            holder: "other".into()
        }
    );
    let ours = HashMap::from([
        (ATTRIBUTE_OP_ID.to_owned(), s("o1")),
        (ATTRIBUTE_CLAIMED_SEQ.to_owned(), n(3)),
    ]);
    assert_eq!(
        settle_claim(&ours, &claimant("o1"), None).unwrap(),
        RoundOutcome::Existing {
            seq: 3,
            counter_after: None
        }
    );
    let broken = HashMap::from([(ATTRIBUTE_OP_ID.to_owned(), s("o1"))]);
    assert!(settle_claim(&broken, &claimant("o1"), None).is_err());
}

#[test]
fn a_failed_counter_is_a_lost_round_carrying_the_all_old_hint() {
    let reasons = [
        with_item(CODE_CONDITION_FAILED, &[(ATTRIBUTE_NEXT_SEQ, n(9))]),
        reason(CODE_NONE),
        reason(CODE_CONDITION_FAILED),
        reason(CODE_NONE),
    ];
    let outcome = settle_cancellation(
        TransactionLayout::new(true),
        WITH_CHECK,
        4,
        &claimant("o"),
        &reasons,
    )
    .unwrap();
    assert_eq!(outcome, RoundOutcome::Lost { hint: Some(9) });
}

#[test]
fn the_hint_parser_handles_present_missing_and_malformed_images() {
    let present = HashMap::from([(ATTRIBUTE_NEXT_SEQ.to_owned(), n(12))]);
    assert_eq!(counter_hint(Some(&present)), Some(12));
    assert_eq!(
        counter_hint(None),
        Some(0),
        "no image: the counter item does not exist"
    );
    let without = HashMap::from([(ATTRIBUTE_OP_ID.to_owned(), s("x"))]);
    assert_eq!(counter_hint(Some(&without)), None);
    let malformed = HashMap::from([(ATTRIBUTE_NEXT_SEQ.to_owned(), s("12"))]);
    assert_eq!(counter_hint(Some(&malformed)), None);
    let garbage = HashMap::from([(
        ATTRIBUTE_NEXT_SEQ.to_owned(),
        AttributeValue::N("1.5".into()),
    )]);
    assert_eq!(counter_hint(Some(&garbage)), None);
}

#[test]
fn a_conflict_is_a_lost_round_without_a_hint() {
    let reasons = [
        reason(CODE_NONE),
        reason(CODE_NONE),
        reason(CODE_CONFLICT),
        reason(CODE_NONE),
    ];
    let outcome = settle_cancellation(
        TransactionLayout::new(true),
        WITH_CHECK,
        4,
        &claimant("o"),
        &reasons,
    )
    .unwrap();
    assert_eq!(outcome, RoundOutcome::Lost { hint: None });
}

#[test]
fn an_occupied_seq_outranks_a_missing_predecessor() {
    let reasons = [
        reason(CODE_NONE),
        reason(CODE_NONE),
        reason(CODE_CONDITION_FAILED),
        reason(CODE_CONDITION_FAILED),
    ];
    let outcome = settle_cancellation(
        TransactionLayout::new(true),
        WITH_CHECK,
        4,
        &claimant("o"),
        &reasons,
    )
    .unwrap();
    assert_eq!(outcome, RoundOutcome::SeqTaken);
}

#[test]
fn a_failed_predecessor_check_settles_by_its_direction() {
    let reasons = [
        reason(CODE_NONE),
        reason(CODE_NONE),
        reason(CODE_CONDITION_FAILED),
        reason(CODE_NONE),
    ];
    let layout = TransactionLayout::new(true);
    assert_eq!(
        settle_cancellation(
            layout,
            Some(PredecessorCheck::Exists),
            4,
            &claimant("o"),
            &reasons
        )
        .unwrap(),
        RoundOutcome::PredecessorMissing
    );
    assert_eq!(
        settle_cancellation(
            layout,
            Some(PredecessorCheck::NotExists),
            4,
            &claimant("o"),
            &reasons
        )
        .unwrap(),
        RoundOutcome::PredecessorAppeared
    );
}

#[test]
fn unexpected_reasons_are_errors_not_guesses() {
    let too_few = [reason(CODE_NONE)];
    assert!(settle_cancellation(
        TransactionLayout::new(true),
        WITH_CHECK,
        4,
        &claimant("o"),
        &too_few
    )
    .is_err());
    let validation = [
        reason("ValidationError"),
        reason(CODE_NONE),
        reason(CODE_NONE),
    ];
    assert!(settle_cancellation(
        TransactionLayout::new(false),
        None,
        0,
        &claimant("o"),
        &validation
    )
    .is_err());
    let nothing = [reason(CODE_NONE), reason(CODE_NONE), reason(CODE_NONE)];
    assert!(settle_cancellation(
        TransactionLayout::new(false),
        None,
        0,
        &claimant("o"),
        &nothing
    )
    .is_err());
}

//= specs/relay-append.md#R6
//# A failed attribute_exists while the counter held proves a legacy gap: the next round, for that
//# seq only, checks attribute_not_exists instead.
#[test]
fn the_flip_applies_only_to_its_seq_and_any_other_outcome_clears_it() {
    let mut state = LoopState {
        counter: Some((4, CounterSource::Read)),
        ..LoopState::default()
    };
    assert_eq!(state.predecessor_for(1), None);
    assert_eq!(state.predecessor_for(5), Some(PredecessorCheck::Exists));
    assert_eq!(
        state.after(RoundOutcome::PredecessorMissing, 4, 5, 3),
        Next::Again { backoff: false }
    );
    assert_eq!(state.counter, Some((4, CounterSource::Known)));
    assert_eq!(state.predecessor_for(5), Some(PredecessorCheck::NotExists));
    assert_eq!(state.predecessor_for(6), Some(PredecessorCheck::Exists));
    assert_eq!(
        state.after(RoundOutcome::PredecessorAppeared, 4, 5, 3),
        Next::Again { backoff: false }
    );
    assert_eq!(state.predecessor_for(5), Some(PredecessorCheck::Exists));
    state.after(RoundOutcome::PredecessorMissing, 4, 5, 3);
    state.after(RoundOutcome::Lost { hint: Some(7) }, 4, 5, 3);
    assert_eq!(state.flipped_at, None);
    assert_eq!(state.counter, Some((7, CounterSource::Hint)));
}

//= specs/relay-append.md#R6
//# The contention budget counts lost rounds in a row; over it the append ends with a typed error.
#[test]
fn the_contention_budget_counts_lost_rounds_in_a_row() {
    let mut state = LoopState::default();
    for round in 1..=3 {
        assert_eq!(
            state.after(RoundOutcome::Lost { hint: None }, 0, 1, 3),
            Next::Again { backoff: round > 1 }
        );
    }
    assert_eq!(
        state.after(RoundOutcome::PredecessorMissing, 4, 5, 3),
        Next::Again { backoff: false }
    );
    assert_eq!(state.lost_in_a_row, 0);
    for round in 1..=3 {
        assert_eq!(
            state.after(RoundOutcome::Lost { hint: None }, 0, 1, 3),
            Next::Again { backoff: round > 1 }
        );
    }
    assert_eq!(
        state.after(RoundOutcome::Lost { hint: None }, 0, 1, 3),
        Next::Fail(StoreError::ContentionBudgetExhausted { lost_rounds: 4 })
    );
}

//= specs/relay-append.md#R7
//# A lost round hands back the real counter through the ALL_OLD image: no re-read.
#[test]
fn the_first_lost_round_uses_its_hint_at_once_and_later_ones_back_off_and_re_read() {
    let mut state = LoopState::default();
    assert_eq!(
        state.after(RoundOutcome::Lost { hint: Some(7) }, 4, 5, 3),
        Next::Again { backoff: false }
    );
    assert_eq!(state.counter, Some((7, CounterSource::Hint)));
    assert_eq!(
        state.after(RoundOutcome::Lost { hint: Some(9) }, 7, 8, 3),
        Next::Again { backoff: true }
    );
    assert_eq!(state.counter, None, "a hint goes stale during the pause");
}

#[test]
fn a_stored_round_carries_its_seq_forward_and_an_occupied_seq_asks_for_the_floor() {
    let mut state = LoopState::default();
    assert_eq!(
        state.after(RoundOutcome::Stored, 4, 5, 3),
        Next::Done(Appended {
            seq: 5,
            existing: false
        })
    );
    assert_eq!(state.counter, Some((5, CounterSource::Carried)));
    assert_eq!(
        state.after(RoundOutcome::SeqTaken, 5, 6, 3),
        Next::FloorStep
    );
    assert_eq!(
        state.counter,
        Some((5, CounterSource::Floor)),
        "the counter stays known"
    );
    state.floor = Some(40);
    assert_eq!(state.seq_for(5), Ok(41));
    assert_eq!(state.seq_for(50), Ok(51));
}

#[test]
fn the_jitter_actually_spreads_its_draws() {
    let tuning = AppendTuning {
        lost_rounds_max: 3,
        backoff_base: Duration::from_millis(8),
        backoff_max: Duration::from_millis(100),
    };
    // Randomized: the seed is printed so a failure can be replayed.
    use rand::SeedableRng;
    let seed: u64 = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970")
        .as_nanos() as u64;
    println!("jitter seed: {seed}");
    let mut random = rand::rngs::StdRng::seed_from_u64(seed);
    let draws: Vec<Duration> = (0..64)
        .map(|_| jittered_backoff(&tuning, 3, &mut random))
        .collect();
    assert!(draws.iter().all(|draw| *draw <= Duration::from_millis(32)));
    let distinct: std::collections::BTreeSet<Duration> = draws.iter().copied().collect();
    assert!(
        distinct.len() > 8,
        "64 draws gave only {} distinct pauses",
        distinct.len()
    );
    assert!(draws.iter().any(|draw| *draw > Duration::from_millis(4)));
    let capped: Vec<Duration> = (0..64)
        .map(|_| jittered_backoff(&tuning, 30, &mut random))
        .collect();
    assert!(capped
        .iter()
        .all(|draw| *draw <= Duration::from_millis(100)));
}

#[test]
fn claim_keys_are_stable_negative_and_distinct() {
    assert!(claim_key("o1") < 0);
    assert!(claim_key("") < 0);
    assert_ne!(claim_key("o1"), claim_key("o2"));
    // Pinned: a change of the hash would orphan every stored claim.
    assert_eq!(claim_key("o1"), claim_key("o1"));
    assert_eq!(
        claim_key("a"),
        -1 - ((0xaf63_dc4c_8601_ec8c_u64 >> 2) as i64)
    );
}

#[test]
fn the_next_seq_at_i64_max_is_a_loud_error() {
    assert_eq!(
        next_seq(i64::MAX),
        Err(StoreError::SeqOverflow { counter: i64::MAX })
    );
    assert_eq!(next_seq(i64::MAX - 1), Ok(i64::MAX));
}

//= specs/relay-append.md#R6
//# The contention budget counts lost rounds in a row; over it the append ends with a typed
//# error.
#[test]
fn unknown_outcomes_are_lost_rounds_and_a_budget_spent_on_them_alone_is_unavailability() {
    let mut state = LoopState {
        counter: Some((4, CounterSource::Carried)),
        ..LoopState::default()
    };
    // An unknown outcome forgets the counter (no hint) and retries at once the first time.
    assert_eq!(
        state.after(RoundOutcome::Unknown, 4, 5, 2),
        Next::Again { backoff: false }
    );
    assert_eq!(state.counter, None);
    assert_eq!(
        state.after(RoundOutcome::Unknown, 4, 5, 2),
        Next::Again { backoff: true }
    );
    assert_eq!(
        state.after(RoundOutcome::Unknown, 4, 5, 2),
        Next::Fail(StoreError::Unavailable { attempts: 3 })
    );
    // A conflict among them makes it contention.
    let mut mixed = LoopState::default();
    mixed.after(RoundOutcome::Unknown, 0, 1, 2);
    mixed.after(RoundOutcome::Lost { hint: None }, 0, 1, 2);
    assert_eq!(
        mixed.after(RoundOutcome::Unknown, 0, 1, 2),
        Next::Fail(StoreError::ContentionBudgetExhausted { lost_rounds: 3 })
    );
}

//= specs/relay-append.md#R3
//# An op_id is stored at most once; every append of it, re-pushes included, answers the same seq.
#[test]
fn a_claim_with_another_payloads_digest_is_a_conflict_and_one_without_a_digest_is_ours() {
    let ours = Claimant {
        op_id: "o1",
        digest: payload_digest(b"first"),
    };
    let claim = |digest: Option<[u8; 32]>| {
        let mut item: HashMap<String, AttributeValue> = [
            (ATTRIBUTE_OP_ID.to_owned(), s("o1")),
            (ATTRIBUTE_CLAIMED_SEQ.to_owned(), n(3)),
        ]
        .into_iter()
        .collect();
        if let Some(digest) = digest {
            item.insert(
                ATTRIBUTE_PAYLOAD_SHA256.to_owned(),
                AttributeValue::B(Blob::new(digest.to_vec())),
            );
        }
        item
    };
    assert_eq!(
        settle_claim(&claim(Some(payload_digest(b"first"))), &ours, None).unwrap(),
        RoundOutcome::Existing {
            seq: 3,
            counter_after: None
        }
    );
    assert_eq!(
        settle_claim(&claim(Some(payload_digest(b"second"))), &ours, None).unwrap(),
        RoundOutcome::PayloadConflict { seq: 3 }
    );
    assert_eq!(
        settle_claim(&claim(None), &ours, None).unwrap(),
        RoundOutcome::Existing {
            seq: 3,
            counter_after: None
        }
    );
}

/// A failed request built by hand: a service error with `code` and `status`.
fn service_failure(
    code: &str,
    status: u16,
) -> SdkError<aws_sdk_dynamodb::operation::get_item::GetItemError, HttpResponse> {
    let metadata = aws_sdk_dynamodb::error::ErrorMetadata::builder()
        .code(code)
        .message("from the test")
        .build();
    SdkError::service_error(
        aws_sdk_dynamodb::operation::get_item::GetItemError::generic(metadata),
        HttpResponse::new(
            status.try_into().expect("a status code"),
            aws_smithy_types::body::SdkBody::empty(),
        ),
    )
}

// Either a retryable code or a server status alone makes the outcome unknown (a 500 with an
// unknown code may have committed); a client error with another code is refused for good.
#[test]
fn a_failed_request_is_unknown_on_a_retryable_code_or_a_server_status_and_refused_otherwise() {
    assert!(matches!(
        classify("GetItem", service_failure("InternalFailure", 500)),
        Failure::Unknown
    ));
    assert!(matches!(
        classify("GetItem", service_failure("ThrottlingException", 400)),
        Failure::Unknown
    ));
    assert!(matches!(
        classify("GetItem", service_failure("ValidationException", 400)),
        Failure::Refused(StoreError::Backend { .. })
    ));
}

/// A refused request's message names what failed in stable words, per kind of failure; the raw
/// error (SDK internals) goes to the log only.
#[test]
fn a_refused_request_names_its_kind_of_failure_in_stable_words() {
    let message = |error| match sdk_error("GetItem", error) {
        StoreError::Backend { message } => message,
        other => panic!("not a backend error: {other:?}"),
    };
    let unreadable: SdkError<aws_sdk_dynamodb::operation::get_item::GetItemError, HttpResponse> =
        SdkError::response_error(
            "a body cut short",
            HttpResponse::new(
                200u16.try_into().expect("a status code"),
                aws_smithy_types::body::SdkBody::empty(),
            ),
        );
    assert_eq!(
        message(unreadable),
        "DynamoDB GetItem failed with an unreadable response"
    );
    assert_eq!(
        message(service_failure("ValidationException", 400)),
        "DynamoDB GetItem failed with ValidationException: from the test"
    );
}
