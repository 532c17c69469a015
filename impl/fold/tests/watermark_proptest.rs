//! The gap-aware watermark against every delivery order a per-item-ordered feed can produce:
//! a random permutation of the records, with redeliveries and burned seqs declared at random
//! points. Prints its seed; `FOLD_SEED=<seed>` reproduces a run.

use oncecheck_fold::{Advance, Watermark};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use std::collections::BTreeSet;

#[derive(Debug, Clone)]
struct Case {
    /// The seqs 1..=top, each either an op or a burned seq.
    top: i64,
    burned: BTreeSet<i64>,
    /// Deliveries in feed order: (seq, is a burned declaration).
    deliveries: Vec<i64>,
}

fn case() -> impl Strategy<Value = Case> {
    (1i64..40)
        .prop_flat_map(|top| {
            let burned = proptest::collection::btree_set(1..=top, 0..(top as usize / 4 + 1));
            let duplicates = proptest::collection::vec(1..=top, 0..5);
            (Just(top), burned, duplicates)
        })
        .prop_flat_map(|(top, burned, duplicates)| {
            let mut deliveries: Vec<i64> = (1..=top).collect();
            deliveries.extend(duplicates);
            (Just(top), Just(burned), Just(deliveries).prop_shuffle())
        })
        .prop_map(|(top, burned, deliveries)| Case {
            top,
            burned,
            deliveries,
        })
}

//= specs/relay-append.md#R8
//# The fold watermark never passes an op that was not folded.
fn check(case: Case) -> Result<(), TestCaseError> {
    let mut watermark = Watermark::new(0);
    let mut folded: BTreeSet<i64> = BTreeSet::new();
    let mut previous = 0;
    for seq in &case.deliveries {
        let burned = case.burned.contains(seq);
        let advance = if burned {
            watermark.mark_burned(*seq)
        } else {
            watermark.record(*seq)
        };
        let advance = advance.map_err(|error| TestCaseError::fail(error.to_string()))?;
        let first_time = folded.insert(*seq);
        prop_assert_eq!(
            advance == Advance::Duplicate,
            !first_time,
            "a redelivery is a duplicate, a first delivery is not"
        );
        let through = watermark.through();
        prop_assert!(through >= previous, "the watermark never moves back");
        for below in 1..=through {
            prop_assert!(
                folded.contains(&below),
                "the watermark {} passed seq {} before it was folded",
                through,
                below
            );
        }
        prop_assert!(
            !folded.contains(&(through + 1)) || through == case.top,
            "a folded seq next to the watermark is passed"
        );
        previous = through;
    }
    prop_assert_eq!(
        watermark.through(),
        case.top,
        "once every seq arrived the watermark reaches the top"
    );
    prop_assert_eq!(watermark.held(), 0);
    Ok(())
}

#[test]
fn the_watermark_passes_only_a_dense_prefix_in_any_delivery_order() {
    let seed: u64 = std::env::var("FOLD_SEED")
        .ok()
        .and_then(|text| text.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        });
    println!("fold watermark proptest seed: {seed} (rerun with FOLD_SEED={seed})");
    let mut seed_bytes = [0u8; 32];
    seed_bytes[..8].copy_from_slice(&seed.to_le_bytes());
    let rng = TestRng::from_seed(RngAlgorithm::ChaCha, &seed_bytes);
    let mut runner = TestRunner::new_with_rng(
        Config {
            cases: 1024,
            failure_persistence: None,
            ..Config::default()
        },
        rng,
    );
    if let Err(error) = runner.run(&case(), check) {
        panic!("the watermark broke R8 with FOLD_SEED={seed}: {error}");
    }
}

/// The same deliveries folded with a watermark that trusts order across items (the highest seq
/// folded): the property test's check must catch it, or it checks nothing.
#[test]
fn a_watermark_trusting_delivery_order_is_caught() {
    let deliveries = [2i64, 1];
    let mut folded = BTreeSet::new();
    let mut trusting = 0;
    let mut passed_unfolded = false;
    for seq in deliveries {
        folded.insert(seq);
        trusting = trusting.max(seq);
        passed_unfolded |= (1..=trusting).any(|below| !folded.contains(&below));
    }
    assert!(
        passed_unfolded,
        "the trusting watermark passes op 1 before it is folded"
    );
    let mut watermark = Watermark::new(0);
    assert_eq!(watermark.record(2), Ok(Advance::Held { waiting_for: 1 }));
    assert_eq!(watermark.through(), 0);
}
