//! Token-model traces replayed on the reliable-write client through the proxy's token table on
//! moto (`--target tokened-dynamodb=URL`, src/replay_token.rs): the committed token corpus
//! (conformance/traces/token/) replays with no divergence, the `tokenless` and `late-retry`
//! counterexamples reproduce the double apply on the real table, and with the token table off
//! the tokened replay diverges (the replay can fail).
//!
//! Needs ONCECHECK_DDB_ENDPOINT and fails (never skips) without it.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use oncecheck_conformance::replay::driver::{drive, load_for, ReplayError, Target};
use oncecheck_conformance::replay::runner::{replay_all, StopAt};
use oncecheck_conformance::replay::session::{ReplaySession, TokenSession};
use oncecheck_conformance::replay::token::{TokenContext, TokenTarget};
use oncecheck_model::token::TokenModel;

mod support {
    pub mod moto;
}
use support::moto::upstream;

const CORPUS: &str = "traces/token";

/// The client the target derives its clients from (each gets a proxy listener's endpoint).
async fn template() -> aws_sdk_dynamodb::Client {
    oncecheck_store::dynamodb::client_for(Some(&upstream())).await
}

fn corpus() -> Vec<PathBuf> {
    let directory = Path::new(env!("CARGO_MANIFEST_DIR")).join(CORPUS);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&directory)
        .expect("the token corpus")
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.to_string_lossy().ends_with(".itf.json"))
        .collect();
    files.sort();
    files
}

fn corpus_file(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(CORPUS)
        .join(name)
}

//= specs/tokened-writes.md#T1
//# The identical tokened request, retried within the window, applies its effects once.
// On the CLI's runtime (multi-threaded): on one thread, eight traces at once under the CI
// run's load starved a client past its attempt timeout (the proxy reported it gone).
#[tokio::test(flavor = "multi_thread")]
async fn the_token_corpus_replays_on_the_reliable_write_client_with_no_divergence() {
    let target = Target::TokenedDynamodb(Some(upstream()));
    let session = Arc::new(TokenSession::open(&target).await.expect("moto answers"));
    let files = corpus();
    assert!(files.len() >= 60, "{} traces", files.len());
    let traces: Vec<_> = files
        .iter()
        .map(|file| (file.clone(), session.load(file).expect("a token trace")))
        .collect();
    let mut reproduced: Vec<String> = traces
        .iter()
        .filter_map(|(_, trace)| session.reproduction(trace))
        .collect();
    // Four at a time, each on its own table and proxy, as `oncecheck replay --jobs 4` does:
    // one at a time, the corpus took 92 s, mostly waiting on lost responses.
    let outcomes = replay_all(session, traces, 4, StopAt::Never, |_, _| {}).await;
    assert_eq!(outcomes.len(), files.len(), "every trace replayed");
    let mut lost = 0;
    for (file, outcome) in outcomes {
        match outcome {
            Ok(stats) => lost += stats.lost_responses,
            Err(error) => panic!("{}: {error}", file.display()),
        }
    }
    assert!(lost >= 60, "the corpus loses responses: {lost}");
    reproduced.sort();
    assert_eq!(
        reproduced,
        [
            "reproduces the late-retry counterexample T1 exactly-once",
            "reproduces the tokenless counterexample T1 exactly-once",
        ]
    );
}

/// The counterexamples end with C1's transaction applied twice in the model; the replay compares
/// the real table with that after every step, so passing means the real table shows it too.
#[tokio::test]
async fn the_tokenless_and_late_retry_counterexamples_double_apply_on_the_real_table() {
    for name in [
        "token-tokenless-counterexample-t1-exactly-once.itf.json",
        "token-late-retry-counterexample-t1-exactly-once.itf.json",
    ] {
        let file = corpus_file(name);
        let trace = load_for::<TokenModel>(&file, "tokened-dynamodb").unwrap();
        let last = &trace.path.last().unwrap().0;
        assert_eq!(
            last.table.applications[0],
            vec![2, 2],
            "{name}: the model's double apply"
        );
        let context = Arc::new(TokenContext {
            upstream: upstream(),
            target: "tokened-dynamodb".into(),
            token_table: true,
            template: template().await,
        });
        let stats = drive(&file, &trace, TokenTarget::new(context))
            .await
            .unwrap_or_else(|error| panic!("{error}"));
        assert_eq!(stats.lost_responses, 1, "{name}");
        assert_eq!(
            stats.requests, 2,
            "{name}: the first attempt and its resend"
        );
    }
}

/// The red run: the tokened replay of a replayed retry diverges when the proxy's token table is
/// off, because moto executes the identical resend again.
#[tokio::test]
async fn without_the_token_table_the_tokened_replay_diverges_at_the_double_apply() {
    let file =
        corpus_file("token-tokened-example-t4-tokened-retry-replayed-without-applying.itf.json");
    let trace = load_for::<TokenModel>(&file, "tokened-dynamodb").unwrap();
    for (token_table, diverges) in [(true, false), (false, true)] {
        let context = Arc::new(TokenContext {
            upstream: upstream(),
            target: "tokened-dynamodb".into(),
            token_table,
            template: template().await,
        });
        let result = drive(&file, &trace, TokenTarget::new(context)).await;
        match (diverges, result) {
            (false, Ok(_)) => {}
            (true, Err(ReplayError::Diverged(divergence))) => {
                assert!(
                    divergence.actual.contains("[2, 2]"),
                    "the real table applied the resend: {divergence}"
                );
            }
            (_, other) => panic!("token table {token_table}: {other:?}"),
        }
    }
}

#[tokio::test]
async fn a_relay_trace_is_bad_input_for_the_token_target() {
    let target = Target::TokenedDynamodb(Some(upstream()));
    let session = TokenSession::open(&target).await.expect("moto answers");
    let relay = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("traces/relay/relay-add-era-counterexample-r1-no-skip.itf.json");
    match session.load(&relay) {
        Err(ReplayError::Load(error)) => assert!(error.detail.contains("`relay`"), "{error}"),
        Err(other) => panic!("{other}"),
        Ok(_) => panic!("loaded"),
    }
}
