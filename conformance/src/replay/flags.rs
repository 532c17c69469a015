//! Which of `oncecheck replay`'s options about the real side a target can use. An option a
//! target would silently ignore is refused instead (exit 2), so a run never looks as if it
//! tested a store build, a mutation or a way of losing responses that it did not.
//!
//! Invariant: every (target, option) pair is decided here, and each refusal names the targets
//! that take the option.

use crate::replay::driver::Target;
use crate::replay::dynamodb::StoreConfig;
use crate::replay::middleware::target::LayerConfig;
use oncecheck_store::dynamodb::Mutation;
use std::path::PathBuf;

/// `oncecheck replay`'s options about the real side and the outputs, checked against the
/// target before anything runs.
pub struct ReplayFlags {
    pub store_variant: Option<String>,
    pub store_mutations: Vec<String>,
    pub lose_by: Option<String>,
    pub junit: Option<PathBuf>,
    pub summary_json: Option<PathBuf>,
}

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

/// Parses `--store-variant`, `--store-mutation` and `--lose-by`, naming the valid choices on
/// error.
pub fn store_config(
    store_variant: Option<String>,
    mutations: &[String],
    lose_by: Option<&str>,
) -> Result<StoreConfig, String> {
    let lose_by = lose_by.map(str::parse).transpose()?.unwrap_or_default();
    if let Some(variant) = &store_variant {
        if !["add-era", "counter-only", "fixed", "mixed"].contains(&variant.as_str()) {
            return Err(format!(
                "unknown store variant `{variant}`; valid: add-era, counter-only, fixed, mixed"
            ));
        }
    }
    let mutations = mutations
        .iter()
        .map(|name| match name.as_str() {
            "no-predecessor-check" => Ok(Mutation::NoPredecessorCheck),
            "unconditional-counter-set" => Ok(Mutation::UnconditionalCounterSet),
            "read-counter-every-op" => Ok(Mutation::ReadCounterEveryOp),
            other => Err(format!(
                "unknown store mutation `{other}`; valid: no-predecessor-check, unconditional-counter-set, read-counter-every-op"
            )),
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(StoreConfig {
        store_variant,
        mutations,
        lose_by,
    })
}

/// How the real side of a target is configured: the relay store's build, or the idempotency
/// layer's behaviour and mutations.
#[derive(Debug, Clone)]
pub enum TargetConfig {
    Store(StoreConfig),
    Layer(LayerConfig),
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
