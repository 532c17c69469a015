//! `oncecheck replay`'s options about the real side — `--store-variant`, `--store-mutation`,
//! `--lose-by` — parsed once into the configuration of the target's family. An option a target
//! would silently ignore is refused instead (exit 2), so a run never looks as if it tested a
//! store build, a mutation or a way of losing responses that it did not.
//!
//! Invariants: every (target, option) pair is decided here, and each refusal names the targets
//! that take the option; the family of a target (relay, token, middleware) is decided here and
//! nowhere else ([`TargetConfig`]); a configuration is only made from flags the target can use
//! ([`UsableFlags`]).

use crate::replay::driver::Target;
use crate::replay::dynamodb::StoreConfig;
use crate::replay::middleware::target::LayerConfig;
use oncecheck_store::dynamodb::Mutation;

/// `oncecheck replay`'s options about the real side, as typed.
#[derive(Debug, Clone, Default)]
pub struct ReplayFlags {
    pub store_variant: Option<String>,
    pub store_mutations: Vec<String>,
    pub lose_by: Option<String>,
}

/// How the real side of a target is configured, one variant per target family: the relay
/// store's build, nothing (the token target), or the idempotency layer's behaviour and
/// mutations.
#[derive(Debug, Clone)]
pub enum TargetConfig {
    Relay(StoreConfig),
    Token,
    Middleware(LayerConfig),
}

/// Flags `target` can use, checked before anything else of the run (a file is written or a
/// server contacted); the only way to a [`TargetConfig`].
pub struct UsableFlags<'a> {
    flags: ReplayFlags,
    target: &'a Target,
}

impl ReplayFlags {
    /// Refuses a flag `target` cannot use, naming the targets that take it.
    pub fn usable_on(self, target: &Target) -> Result<UsableFlags<'_>, String> {
        usable_on(
            target,
            self.store_variant.is_some(),
            !self.store_mutations.is_empty(),
            self.lose_by.is_some(),
        )?;
        Ok(UsableFlags {
            flags: self,
            target,
        })
    }
}

impl UsableFlags<'_> {
    /// Parses the flags' values into the configuration of the target's family, naming the valid
    /// choices on error.
    pub fn configure(self) -> Result<TargetConfig, String> {
        let ReplayFlags {
            store_variant,
            store_mutations,
            lose_by,
        } = self.flags;
        match self.target {
            Target::Memory | Target::Sqlite | Target::Dynamodb(_) => {
                store_config(store_variant, &store_mutations, lose_by.as_deref())
                    .map(TargetConfig::Relay)
            }
            Target::TokenedDynamodb(_) => Ok(TargetConfig::Token),
            Target::MiddlewareSqlite | Target::MiddlewarePostgres(_) | Target::MiddlewareMemory => {
                LayerConfig::parse(store_variant.as_deref(), &store_mutations)
                    .map(TargetConfig::Middleware)
            }
        }
    }
}

/// Checks `--store-variant`, `--store-mutation` and `--lose-by` (given or not) against `target`.
fn usable_on(
    target: &Target,
    store_variant: bool,
    store_mutations: bool,
    lose_by: bool,
) -> Result<(), String> {
    let (takes_variant_and_mutations, takes_lose_by) = match target {
        Target::Dynamodb(_) => (true, true),
        Target::MiddlewareSqlite | Target::MiddlewarePostgres(_) | Target::MiddlewareMemory => {
            (true, false)
        }
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
            "dynamodb, middleware-sqlite, middleware-postgres and middleware-memory",
        );
    }
    if store_mutations && !takes_variant_and_mutations {
        return refuse(
            "--store-mutation",
            "dynamodb, middleware-sqlite, middleware-postgres and middleware-memory",
        );
    }
    if lose_by && !takes_lose_by {
        return refuse("--lose-by", "dynamodb, whose proxy loses the responses");
    }
    Ok(())
}

/// Parses `--store-variant`, `--store-mutation` and `--lose-by`, naming the valid choices on
/// error.
fn store_config(
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

    #[test]
    fn the_flags_decide_the_family_of_the_target() {
        let configure = |target: &Target| {
            ReplayFlags::default()
                .usable_on(target)
                .and_then(|usable| usable.configure())
        };
        for target in [Target::Memory, Target::Sqlite, Target::Dynamodb(None)] {
            assert!(matches!(configure(&target), Ok(TargetConfig::Relay(_))));
        }
        assert!(matches!(
            configure(&Target::TokenedDynamodb(None)),
            Ok(TargetConfig::Token)
        ));
        for target in [Target::MiddlewareSqlite, Target::MiddlewarePostgres(None)] {
            assert!(matches!(
                configure(&target),
                Ok(TargetConfig::Middleware(_))
            ));
        }
    }
}
