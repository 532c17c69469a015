//! Which of `oncecheck replay`'s options about the real side a target can use. An option a
//! target would silently ignore is refused instead (exit 2), so a run never looks as if it
//! tested a store build, a mutation or a way of losing responses that it did not.
//!
//! Invariant: every (target, option) pair is decided here, and each refusal names the targets
//! that take the option.

use crate::replay::Target;

/// Checks `--store-variant`, `--store-mutation` and `--lose-by` (given or not) against `target`.
pub fn usable_on(
    target: &Target,
    store_variant: bool,
    store_mutations: bool,
    lose_by: bool,
) -> Result<(), String> {
    let (takes_variant_and_mutations, takes_lose_by) = match target {
        Target::Dynamodb(_) => (true, true),
        Target::MiddlewareSqlite | Target::MiddlewarePostgres(_) => (true, false),
        Target::Memory | Target::Sqlite | Target::TokenedDynamodb(_) => (false, false),
    };
    let refuse = |option: &str, targets: &str| {
        Err(format!(
            "{option} does not apply to the {target} target (it is used by {targets}); drop it or choose one of those targets"
        ))
    };
    if store_variant && !takes_variant_and_mutations {
        return refuse(
            "--store-variant",
            "dynamodb, middleware-sqlite and middleware-postgres",
        );
    }
    if store_mutations && !takes_variant_and_mutations {
        return refuse(
            "--store-mutation",
            "dynamodb, middleware-sqlite and middleware-postgres",
        );
    }
    if lose_by && !takes_lose_by {
        return refuse("--lose-by", "dynamodb, whose proxy loses the responses");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_target_takes_only_the_options_it_uses() {
        let dynamodb = Target::Dynamodb(None);
        assert!(usable_on(&dynamodb, true, true, true).is_ok());
        let middleware = Target::MiddlewareSqlite;
        assert!(usable_on(&middleware, true, true, false).is_ok());
        assert!(usable_on(&middleware, false, false, true)
            .unwrap_err()
            .contains("--lose-by does not apply to the middleware-sqlite target"));
        for target in [
            Target::Memory,
            Target::Sqlite,
            Target::TokenedDynamodb(None),
        ] {
            assert!(usable_on(&target, true, false, false).is_err());
            assert!(usable_on(&target, false, true, false).is_err());
            assert!(usable_on(&target, false, false, true).is_err());
            assert!(usable_on(&target, false, false, false).is_ok());
        }
    }
}
