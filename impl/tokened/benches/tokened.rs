//! `cargo bench -p oncecheck-tokened --bench tokened`: requests per tokened write (the goal is 1
//! plus the resends a lost response actually needs) and the journal's overhead per write.
//!
//! The writes go to ONCECHECK_DDB_ENDPOINT (moto in CI; the bench fails without it) through the
//! loopback fault proxy of the tests, which counts every TransactWriteItems it forwards and loses
//! the first response of every `LOSS_EVERY`-th write in the lossy run. Figures against moto
//! measure this code plus moto's Python: read requests per write as exact and latencies as
//! relative. The journal figure is SQLite alone (WAL, synchronous=FULL) on the local disk.

#[path = "../tests/support/mod.rs"]
mod support;

use std::time::Instant;

use oncecheck_tokened::{client_for, Intent, Journal, Limits, Outcome, ReliableWriter};
use support::fault_proxy::{FaultProxy, Lose};
use support::{add_balance, create_table, ddb_endpoint, receipt, test_limits};

const WRITES: usize = 200;
const LOSS_EVERY: usize = 10;
const JOURNAL_WRITES: usize = 1_000;
const TRANSACT: &str = "TransactWriteItems";

/// Runs `WRITES` transfers through a fresh proxy; answers (requests per write, resends needed,
/// mean µs per write).
async fn run(endpoint: &str, table: &str, lossy: bool, journal: Journal) -> (f64, usize, f64) {
    let proxy = FaultProxy::start(endpoint.to_owned()).await;
    let writer = ReliableWriter::connect(Some(&proxy.url), journal, test_limits()).await;
    let mut losses = 0;
    let started = Instant::now();
    for index in 0..WRITES {
        if lossy && index % LOSS_EVERY == 0 {
            proxy.lose_next(TRANSACT, Lose::Response);
            losses += 1;
        }
        let items = vec![add_balance(table, "A", 1), add_balance(table, "B", 1)];
        let report = writer
            .write(Intent::with_receipt(
                items,
                receipt(table, &format!("{lossy}-{index}")),
            ))
            .await
            .expect("a write ends");
        assert!(
            matches!(report.outcome, Outcome::Applied | Outcome::AppliedEarlier),
            "{report:?}"
        );
    }
    let micros = started.elapsed().as_secs_f64() * 1e6 / WRITES as f64;
    (
        f64::from(proxy.forwarded(TRANSACT)) / WRITES as f64,
        losses,
        micros,
    )
}

async fn journal_micros_per_write(journal: &Journal) -> f64 {
    let request = r#"{"ClientRequestToken":"t","TransactItems":[]}"#;
    let started = Instant::now();
    for index in 0..JOURNAL_WRITES {
        let token = format!("bench-{index}");
        journal
            .record_intent(&token, request, None, 0)
            .await
            .expect("journal write");
        journal
            .finish(&token, "applied", "", 1)
            .await
            .expect("journal finish");
    }
    started.elapsed().as_secs_f64() * 1e6 / JOURNAL_WRITES as f64
}

#[tokio::main]
async fn main() {
    let endpoint = ddb_endpoint();
    let client = client_for(Some(&endpoint), &Limits::default()).await;
    let table = format!("tokened-bench-{}", std::process::id());
    create_table(&client, &table).await;
    let directory = tempfile::tempdir().expect("a temporary directory");
    let journal = Journal::open(&directory.path().join("journal.sqlite"))
        .await
        .expect("open the journal");

    let (requests, _, micros) = run(&endpoint, &table, false, journal.clone()).await;
    println!("tokened writes, no loss:      {requests:.3} TransactWriteItems per write (goal 1.000), {micros:.0} µs per write");
    let (requests, losses, micros) = run(&endpoint, &table, true, journal.clone()).await;
    let goal = 1.0 + losses as f64 / WRITES as f64;
    println!(
        "tokened writes, 1 in {LOSS_EVERY} lost: {requests:.3} TransactWriteItems per write (goal {goal:.3}: {losses} resends needed), {micros:.0} µs per write"
    );
    let journal_micros = journal_micros_per_write(&journal).await;
    println!("journal (SQLite, WAL, synchronous=FULL): {journal_micros:.0} µs per write (record the intent + record its outcome)");
    let _ = client.delete_table().table_name(&table).send().await;
}
