//! The implemented-variant table: which implementation, in which configuration, implements which
//! model variant, and on which replay targets CI replays it. The one source of that claim:
//! ARCHITECTURE.md carries the same table (`markdown_table`, compared by
//! `conformance/tests/implemented.rs`), `oncecheck implemented` prints it, and
//! `oncecheck implemented --verify SUMMARY...` (the last step of `scripts/replay-corpus`) fails
//! unless every row was replayed on every one of its targets, at its CI export bounds, with no
//! divergence and every reachable transition driven through the real code.
//!
//! Invariants: a row names a variant the model has and bounds the model accepts (tested); a row
//! is verified only by a replay summary of its own target, model, variant and bounds — never by
//! another row's.

use crate::check::models::MODEL_NAMES;
use oncecheck_model::check::{Bounds, ModelSpec, SpecError};
use oncecheck_model::idempotency::IdempotencyModel;
use oncecheck_model::relay::RelayModel;
use oncecheck_model::token::TokenModel;
use std::collections::BTreeMap;

/// One replay target of a row: `oncecheck replay --target NAME`, and the bounds over the
/// variant's CI bounds that the row's traces are written at there.
#[derive(Debug, Clone, Copy)]
pub struct RowTarget {
    pub name: &'static str,
    pub bounds: &'static [(&'static str, u32)],
}

/// One implemented variant.
#[derive(Debug, Clone, Copy)]
pub struct Row {
    /// The implementation: crate directory and the type a user builds.
    pub implementation: &'static str,
    /// What selects this configuration of it (the constructor or builder call, "as shipped").
    pub configuration: &'static str,
    pub model: &'static str,
    pub variant: &'static str,
    pub targets: &'static [RowTarget],
}

const fn target(name: &'static str) -> RowTarget {
    RowTarget { name, bounds: &[] }
}

/// The layer's targets: each database with the traces of its own claim (SQLite claims in two
/// statements, `sqlite=1`; PostgreSQL in one, `sqlite=0`), at all nine handler outcomes. The
/// CI bound explores five: the other four (a body exactly at the cap, far over it, an error
/// after it, a small failure) give the model no new verdict, but they are the edges of the
/// layer's cap arithmetic, which the model abstracts; a replay at five never put a body of
/// exactly the cap through the layer (seen as surviving `>`/`>=` mutants, docs/mutants.md).
const SQLITE: RowTarget = RowTarget {
    name: "middleware-sqlite",
    bounds: &[("sqlite", 1), ("outcomes", OUTCOMES_ALL)],
};
const POSTGRES: RowTarget = RowTarget {
    name: "middleware-postgres",
    bounds: &[("sqlite", 0), ("outcomes", OUTCOMES_ALL)],
};
/// The layer's in-memory store beside the databases: the store of its loom and shuttle tests,
/// which stand for the SQL stores only if it keeps their rules. It claims in one call
/// (`sqlite=0`) and has no effect transaction, so `atomic` has no row on it; it lives in the
/// layer's process and dies with it, so its traces have no process fault.
const MEMORY: RowTarget = RowTarget {
    name: "middleware-memory",
    bounds: &[("sqlite", 0), ("outcomes", OUTCOMES_ALL)],
};

/// The databases with a process fault (`process_faults=1`, which the CI bound leaves at 0): a
/// database outlives the process that dies or stalls, and what the layer leaves in it then (a
/// claim held, a lease no longer renewed, an effect whose outcome the reconciler must find) is
/// what a user's crash leaves. Only where the corpus's walks drive every transition at that
/// bound: with a fault beside it, the cancel during an over-cap tail is rare (seed 1 first
/// reaches it at walk 398 of `renewed` on SQLite's claim, 401 of `atomic`, and not in 700 of
/// `fenced` on PostgreSQL's), and walks in those numbers cost CI more than they show.
const SQLITE_WITH_PROCESS_FAULTS: RowTarget = RowTarget {
    name: "middleware-sqlite",
    bounds: &[
        ("sqlite", 1),
        ("outcomes", OUTCOMES_ALL),
        ("process_faults", 1),
    ],
};
const POSTGRES_WITH_PROCESS_FAULTS: RowTarget = RowTarget {
    name: "middleware-postgres",
    bounds: &[
        ("sqlite", 0),
        ("outcomes", OUTCOMES_ALL),
        ("process_faults", 1),
    ],
};

/// Every handler outcome of the idempotency model (`Outcome::ALL`).
const OUTCOMES_ALL: u32 = oncecheck_model::idempotency::Outcome::ALL.len() as u32;

/// The table. Every row is replayed in CI (`scripts/replay-corpus`), on every target, with every
/// transition of the variant at the row's bounds driven.
pub const ROWS: &[Row] = &[
    Row {
        implementation: "impl/store `DynamoDbStore`",
        configuration: "as shipped: `DynamoDbStore::connect` (predecessor check on)",
        model: "relay",
        variant: "fixed",
        targets: &[target("dynamodb")],
    },
    Row {
        implementation: "impl/idempotency `IdempotencyLayer`",
        configuration: "as shipped: the lease heartbeat on (`Renewal::ThirdOfLease`)",
        model: "idempotency",
        variant: "renewed",
        targets: &[SQLITE, POSTGRES_WITH_PROCESS_FAULTS, MEMORY],
    },
    Row {
        implementation: "impl/idempotency `IdempotencyLayer`",
        configuration: "`without_lease_renewal()`",
        model: "idempotency",
        variant: "fenced",
        targets: &[SQLITE, POSTGRES, MEMORY],
    },
    Row {
        implementation: "impl/idempotency `IdempotencyLayer`",
        configuration: "as shipped, a handler committing its effect in the request's `EffectScope` transaction",
        model: "idempotency",
        variant: "atomic",
        targets: &[SQLITE, POSTGRES_WITH_PROCESS_FAULTS],
    },
    Row {
        implementation: "impl/idempotency `IdempotencyLayer`",
        configuration: "`fail_closed()`: unknown outcomes held until a `ReconcileHook` resolves them",
        model: "idempotency",
        variant: "fail-closed",
        targets: &[
            SQLITE_WITH_PROCESS_FAULTS,
            POSTGRES_WITH_PROCESS_FAULTS,
            MEMORY,
        ],
    },
    Row {
        implementation: "impl/tokened `ReliableWriter`",
        configuration: "as shipped: `ReliableWriter::write`, through a DynamoDB with token rules (the proxy's token table on moto)",
        model: "token",
        variant: "tokened",
        targets: &[target("tokened-dynamodb")],
    },
];

/// Implementations with no row, and why: they are tested, but no model variant's traces drive
/// them, or they cannot show every transition of one.
pub const NOT_ROWS: &[(&str, &str)] = &[
    (
        "impl/store `MemoryStore`, `SqliteStore`",
        "replayed at the logical level (`--target memory`, `sqlite`): a locked log has no visibility window, contention or burned seq, so it shows only the traces without them (59 of the 282 of the full `fixed` export) and cannot drive every transition of `fixed`",
    ),
    (
        "impl/relay (the HTTP server)",
        "serves any `OpStore`; its own tests cover the wire; the store under it is the `DynamoDbStore` row",
    ),
    (
        "impl/fold `Watermark`",
        "the gap-aware fold of R8; checked by its own tests and by the model's stream folders (`stream_folders`), not replayed",
    ),
];

/// The resolved bounds of a row on one of its targets: the variant's CI bounds and the target's.
pub fn row_bounds(row: &Row, target: &RowTarget) -> Result<Bounds, SpecError> {
    let overrides: Vec<(String, u32)> = target
        .bounds
        .iter()
        .map(|(key, value)| (key.to_string(), *value))
        .collect();
    match row.model {
        "relay" => RelayModel::resolve_bounds(row.variant, &overrides),
        "idempotency" => IdempotencyModel::resolve_bounds(row.variant, &overrides),
        "token" => TokenModel::resolve_bounds(row.variant, &overrides),
        other => Err(SpecError::UnknownModel {
            name: other.to_string(),
            valid: MODEL_NAMES.iter().map(|name| name.to_string()).collect(),
        }),
    }
}

/// The table as ARCHITECTURE.md carries it.
pub fn markdown_table() -> String {
    let mut text = String::from(
        "| implementation | configuration | model variant | replay targets (bounds over the CI bounds) |\n| --- | --- | --- | --- |\n",
    );
    for row in ROWS {
        let targets: Vec<String> = row
            .targets
            .iter()
            .map(|target| {
                let bounds: Vec<String> = target
                    .bounds
                    .iter()
                    .map(|(key, value)| format!("{key}={value}"))
                    .collect();
                if bounds.is_empty() {
                    format!("`{}`", target.name)
                } else {
                    format!("`{}` ({})", target.name, bounds.join(" "))
                }
            })
            .collect();
        text.push_str(&format!(
            "| {} | {} | {} `{}` | {} |\n",
            row.implementation,
            row.configuration,
            row.model,
            row.variant,
            targets.join(", ")
        ));
    }
    text
}

/// What one `oncecheck replay --summary-json` file says about one (model, variant, bounds).
#[derive(Debug, Clone)]
struct Replayed {
    file: String,
    target: String,
    ok: bool,
    covered: u64,
    reachable: u64,
    traces: u64,
}

fn read_summaries(files: &[std::path::PathBuf]) -> Result<Vec<(Replayed, String)>, String> {
    let mut replayed = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(file)
            .map_err(|error| format!("{}: cannot read: {error}", file.display()))?;
        let document: serde_json::Value = serde_json::from_str(&text)
            .map_err(|error| format!("{}: not a replay summary: {error}", file.display()))?;
        if document["schema"] != crate::replay::transitions::SUMMARY_JSON_SCHEMA {
            return Err(format!(
                "{}: summary schema {} (this oncecheck reads {})",
                file.display(),
                document["schema"],
                crate::replay::transitions::SUMMARY_JSON_SCHEMA
            ));
        }
        let target = document["target_kind"].as_str().unwrap_or_default();
        for group in document["coverage"].as_array().into_iter().flatten() {
            let bounds: BTreeMap<String, u64> = group["bounds"]
                .as_object()
                .into_iter()
                .flatten()
                .filter_map(|(key, value)| Some((key.clone(), value.as_u64()?)))
                .collect();
            let key = group_key(
                group["model"].as_str().unwrap_or_default(),
                group["variant"].as_str().unwrap_or_default(),
                &bounds,
            );
            replayed.push((
                Replayed {
                    file: file.display().to_string(),
                    target: target.to_string(),
                    ok: document["ok"] == true,
                    covered: group["covered"].as_u64().unwrap_or(0),
                    reachable: group["reachable"].as_u64().unwrap_or(u64::MAX),
                    traces: group["traces"].as_u64().unwrap_or(0),
                },
                key,
            ));
        }
    }
    Ok(replayed)
}

fn group_key(model: &str, variant: &str, bounds: &BTreeMap<String, u64>) -> String {
    let bounds: Vec<String> = bounds
        .iter()
        .map(|(key, value)| format!("{key}={value}"))
        .collect();
    format!("{model}/{variant} [{}]", bounds.join(" "))
}

/// One (row, target) checked against the summaries: whether it passed, and the line saying so.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    pub ok: bool,
    pub line: String,
}

/// Checks replay summaries against the table: every row on every target replayed, no divergence,
/// every reachable transition driven. Answers one line per (row, target); an unreadable summary
/// is an error.
pub fn verify(files: &[std::path::PathBuf]) -> Result<Vec<Verified>, String> {
    let replayed = read_summaries(files)?;
    let mut lines = Vec::new();
    let mut failures = Vec::new();
    for row in ROWS {
        for target in row.targets {
            let bounds = match row_bounds(row, target) {
                Ok(bounds) => bounds,
                Err(error) => {
                    failures.push(format!("{} on {}: {error}", row.variant, target.name));
                    continue;
                }
            };
            let bounds: BTreeMap<String, u64> = bounds
                .0
                .iter()
                .map(|(key, value)| (key.clone(), u64::from(*value)))
                .collect();
            let key = group_key(row.model, row.variant, &bounds);
            let name = format!(
                "{}/{} on {} ({}, {}; {key})",
                row.model, row.variant, target.name, row.implementation, row.configuration
            );
            let runs: Vec<&Replayed> = replayed
                .iter()
                .filter(|(run, run_key)| run.target == target.name && *run_key == key)
                .map(|(run, _)| run)
                .collect();
            let Some(best) = runs.iter().max_by_key(|run| run.covered) else {
                failures.push(format!("{name}: no replay in these summaries"));
                continue;
            };
            if let Some(failed) = runs.iter().find(|run| !run.ok) {
                failures.push(format!(
                    "{name}: the replay of {} diverged or failed",
                    failed.file
                ));
            } else if best.covered < best.reachable {
                failures.push(format!(
                    "{name}: {} of {} transitions driven ({}); every reachable one must be",
                    best.covered, best.reachable, best.file
                ));
            } else {
                lines.push(format!(
                    "{name}: {} of {} transitions, {} traces, no divergence",
                    best.covered, best.reachable, best.traces
                ));
            }
        }
    }
    let verified = lines
        .into_iter()
        .map(|line| Verified { ok: true, line })
        .chain(
            failures
                .into_iter()
                .map(|line| Verified { ok: false, line }),
        )
        .collect();
    Ok(verified)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A summary of one replay run of the token row at `covered` of 16 transitions.
    fn token_summary(name: &str, ok: bool, covered: u64) -> std::path::PathBuf {
        let row = ROWS.iter().find(|row| row.model == "token").unwrap();
        let bounds = row_bounds(row, &row.targets[0]).unwrap();
        let document = serde_json::json!({
            "schema": crate::replay::transitions::SUMMARY_JSON_SCHEMA,
            "target": "tokened-dynamodb=http://127.0.0.1:1",
            "target_kind": "tokened-dynamodb",
            "ok": ok,
            "coverage": [{"model": "token", "variant": "tokened", "bounds": bounds.0,
                          "traces": 25, "covered": covered, "reachable": 16,
                          "missing": [], "unexpected": []}],
        });
        let file = std::env::temp_dir().join(format!(
            "oncecheck-implemented-{}-{name}.json",
            std::process::id()
        ));
        std::fs::write(&file, document.to_string()).unwrap();
        file
    }

    fn token_row(verified: &[Verified]) -> &Verified {
        verified
            .iter()
            .find(|row| row.line.starts_with("token/tokened on tokened-dynamodb"))
            .unwrap()
    }

    #[test]
    fn a_row_passes_only_replayed_in_full_without_divergence() {
        let full = verify(&[token_summary("full", true, 16)]).unwrap();
        assert!(token_row(&full).ok, "{full:?}");
        assert!(full
            .iter()
            .filter(|row| !row.ok)
            .all(|row| row.line.contains("no replay")));
        let partial = verify(&[token_summary("partial", true, 15)]).unwrap();
        assert!(!token_row(&partial).ok);
        assert!(token_row(&partial)
            .line
            .contains("15 of 16 transitions driven"));
        let diverged = verify(&[token_summary("diverged", false, 16)]).unwrap();
        assert!(!token_row(&diverged).ok);
        assert!(token_row(&diverged).line.contains("diverged"));
    }

    #[test]
    fn every_row_names_a_variant_and_bounds_its_model_has() {
        for row in ROWS {
            assert!(!row.targets.is_empty(), "{row:?}: no target");
            for target in row.targets {
                row_bounds(row, target).unwrap_or_else(|error| panic!("{row:?}: {error}"));
            }
        }
    }
}
