//! The gap-aware watermark against every delivery order a per-item-ordered feed can produce:
//! a random permutation of the records, with redeliveries and burned seqs declared at random
//! points, checked on the gap-aware watermark and, to show the check can fail, on one that trusts
//! order across items. Prints its seed; `FOLD_SEED=<seed>` reproduces a run.

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

/// A watermark under test: folds one delivery and answers the seq it is through.
trait Fold {
    fn deliver(&mut self, seq: i64, burned: bool) -> Result<i64, String>;
}

impl Fold for Watermark {
    fn deliver(&mut self, seq: i64, burned: bool) -> Result<i64, String> {
        let advance = if burned {
            self.mark_burned(seq)
        } else {
            self.record(seq)
        };
        advance.map_err(|error| error.to_string())?;
        Ok(self.through())
    }
}

/// The watermark R8 rules out: it trusts delivery order across items (highest seq folded).
struct Trusting(i64);

impl Fold for Trusting {
    fn deliver(&mut self, seq: i64, _burned: bool) -> Result<i64, String> {
        self.0 = self.0.max(seq);
        Ok(self.0)
    }
}

//= specs/relay-append.md#R8
//# The fold watermark never passes an op that was not folded.
fn check(case: &Case, fold: &mut dyn Fold) -> Result<(), TestCaseError> {
    let mut folded: BTreeSet<i64> = BTreeSet::new();
    let mut previous = 0;
    for seq in &case.deliveries {
        let through = fold
            .deliver(*seq, case.burned.contains(seq))
            .map_err(TestCaseError::fail)?;
        folded.insert(*seq);
        prop_assert!(through >= previous, "the watermark never moves back");
        for below in 1..=through {
            prop_assert!(
                folded.contains(&below),
                "the watermark {} passed seq {} before it was folded",
                through,
                below
            );
        }
        previous = through;
    }
    prop_assert_eq!(
        previous,
        case.top,
        "once every seq arrived the watermark reaches the top"
    );
    Ok(())
}

fn check_gap_aware(case: Case) -> Result<(), TestCaseError> {
    let mut watermark = Watermark::new(0);
    let mut seen = BTreeSet::new();
    for seq in &case.deliveries {
        // A redelivery is reported as one, a first delivery never is.
        let mut probe = watermark.clone();
        let advance = if case.burned.contains(seq) {
            probe.mark_burned(*seq)
        } else {
            probe.record(*seq)
        };
        prop_assert_eq!(advance == Ok(Advance::Duplicate), !seen.insert(*seq));
        watermark = probe;
    }
    prop_assert_eq!(watermark.held(), 0);
    check(&case, &mut Watermark::new(0))
}

fn seeded_runner(seed: u64, shrink: bool) -> TestRunner {
    let mut seed_bytes = [0u8; 32];
    seed_bytes[..8].copy_from_slice(&seed.to_le_bytes());
    let rng = TestRng::from_seed(RngAlgorithm::ChaCha, &seed_bytes);
    let max_shrink_iters = if shrink {
        Config::default().max_shrink_iters
    } else {
        0
    };
    TestRunner::new_with_rng(
        Config {
            cases: 1024,
            failure_persistence: None,
            max_shrink_iters,
            ..Config::default()
        },
        rng,
    )
}

fn seed() -> u64 {
    let seed = std::env::var("FOLD_SEED")
        .ok()
        .and_then(|text| text.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        });
    println!("fold watermark proptest seed: {seed} (rerun with FOLD_SEED={seed})");
    seed
}

#[test]
fn the_watermark_passes_only_a_dense_prefix_in_any_delivery_order() {
    let seed = seed();
    if let Err(error) = seeded_runner(seed, true).run(&case(), check_gap_aware) {
        panic!("the watermark broke R8 with FOLD_SEED={seed}: {error}");
    }
}

/// The same check on a watermark that trusts order across items must fail, or it checks nothing.
#[test]
fn the_same_check_catches_a_watermark_trusting_delivery_order() {
    let seed = seed();
    let result = seeded_runner(seed, false).run(&case(), |case| check(&case, &mut Trusting(0)));
    assert!(
        result.is_err(),
        "the check passed a trusting watermark (FOLD_SEED={seed})"
    );
}
