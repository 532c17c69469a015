//! `oncecheck soak relay`: the relay binary under concurrent pushers and pullers while the
//! schedule kills it (SIGKILL, then a restart) and stalls its backend; then every stream is
//! read whole and checked against what the pushers were answered.
//!
//! What is checked (each a count that must be 0):
//! - **lost**: an op a push answered (2xx) that the stream does not hold;
//! - **duplicated**: an op_id the stream holds twice;
//! - **gaps**: a stream's seqs are not exactly 1..n, or a puller following it was handed a seq
//!   other than its cursor + 1 (R1, R5);
//! - **answers differ**: an op answered two seqs, or a seq the stream does not hold it at (R3),
//!   or its payload changed;
//! - **views differ**: a puller that followed a stream while it grew saw other ops than the
//!   final read;
//! - **refused**: a push answered with a status a client cannot retry (4xx, 500).
//!
//! Pushers behave as the relay's documented client does: every status but 409, 413, 415 and 422
//! (and every lost connection) re-pushes the same batch, whose claims answer what was stored.
//! A batch is given up only when the run's time is up: the time limit is a failure of its own,
//! and what it cut is reported as what it is, not as a loss: the ops given up unanswered (some
//! of them stored: the relay kept them, no re-push learnt their seq), the ops never pushed, the
//! faults whose point the run never reached. A puller stopped by the time saw a prefix of the
//! final read. The comparison itself is `relay_check.rs`.
//!
//! On DynamoDB the run is cut into tables of `--table-ops-max` ops: each table is checked and
//! deleted before the next, so an emulator that keeps every version of a table stays bounded.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Method, StatusCode};
use oncecheck_model::trace::SplitMix64;
use serde_json::{json, Value};
use tokio::task::JoinHandle;

use super::args::RelayArgs;
use super::http::HttpClient;
use super::latency::{per_second, Latencies};
use super::relay_check::{self, payload_of, Answers, PullerView, StoredStreams, TableRun};
use super::relay_process::{default_binary, log_tail, RelayProcess};
use super::schedule::{self, Fault};
use super::stall_proxy::StallProxy;
use super::{progress_line, scratch_directory, Outcome};

/// Ops per pull page (the relay's largest).
const PULL_LIMIT: usize = 1000;
/// Pause before re-pushing after a 503 or a lost connection.
const RETRY_PAUSE_MILLIS: u64 = 50;
/// Pause of a puller that found nothing new.
const IDLE_PULL_MILLIS: u64 = 20;

/// The backend and what its faults need.
enum Backend {
    Sqlite {
        path: PathBuf,
    },
    DynamoDb {
        /// In front of the emulator: serialising, stallable. Everything the soak sends it goes
        /// through here, the table deletions included: a request beside another can corrupt
        /// moto's tables.
        proxy: StallProxy,
    },
}

/// What the pushers and pullers of one table share.
struct Shared {
    client: HttpClient,
    base_url: String,
    streams: Vec<String>,
    /// Ops answered so far in the whole run: the clock of the fault schedule and the progress.
    answered_total: AtomicU64,
    /// Set when every pusher of the current table has finished.
    pushers_done: AtomicBool,
    /// Set when the run's time is up: everything stops where it is.
    out_of_time: AtomicBool,
    counters: Counters,
}

#[derive(Default)]
struct Counters {
    push_requests: AtomicU64,
    unavailable: AtomicU64,
    connection_errors: AtomicU64,
    existing_answers: AtomicU64,
}

/// What one pusher was answered.
#[derive(Default)]
struct PusherResult {
    answered: Answers,
    request_latencies: Latencies,
    batch_latencies: Latencies,
    violations: Vec<String>,
    /// op_ids of the batch pushed and never answered when the time was up.
    given_up: BTreeSet<String>,
    /// Ops of the quota never pushed when the time was up.
    not_pushed_ops: u64,
}

/// What one puller saw, per stream: (seq, op_id) in the order handed out.
#[derive(Default)]
struct PullerResult {
    seen: PullerView,
    violations: Vec<String>,
}

/// Runs the soak; `Err` is an environment failure (exit 2), violations are in the outcome.
pub async fn run(args: &RelayArgs) -> Result<Outcome, String> {
    if args.pushers == 0 || args.streams == 0 || args.batch_ops_max == 0 || args.ops == 0 {
        return Err("--ops, --pushers, --streams and --batch-ops-max must be at least 1".into());
    }
    let mut soak = Soak::set_up(args).await?;
    for table in 0..soak.tables.len() {
        if soak.run_table(table).await? {
            // The tables after this one were never started: their ops were never pushed either.
            soak.totals.not_pushed_ops += soak.tables[table + 1..].iter().sum::<u64>();
            break;
        }
    }
    soak.relay.kill().await;
    Ok(soak.into_outcome())
}

/// The run as set up, and what its tables add up to: the state the schedule loop, the checks
/// and the report share.
struct Soak<'a> {
    args: &'a RelayArgs,
    seed: u64,
    log: PathBuf,
    backend: Backend,
    relay: RelayProcess,
    base_url: String,
    streams: Vec<String>,
    /// Ops of each table, in the order the tables run.
    tables: Vec<u64>,
    started: Instant,
    deadline: Instant,
    /// The faults not struck yet, each at the count of ops answered where it strikes.
    faults_left: VecDeque<(u64, Fault)>,
    totals: Totals,
}

/// What the tables add up to.
#[derive(Default)]
struct Totals {
    outcome: Outcome,
    request_latencies: Latencies,
    batch_latencies: Latencies,
    /// Ops answered in the tables run so far.
    answered: u64,
    kills_done: u32,
    stalls_done: u32,
    /// The tables' [`Counters`], summed: push requests, 503s, lost connections, existing answers.
    counters: [u64; 4],
    cut_by_time: bool,
    /// Ops answered when the time was up (the pushes then in flight may add some).
    answered_at_time_up: u64,
    not_pushed_ops: u64,
}

impl<'a> Soak<'a> {
    /// Everything before the first push, in the order a failure should be met: the relay
    /// binary, the backend, the fault schedule (announced before the relay starts), the relay.
    async fn set_up(args: &'a RelayArgs) -> Result<Soak<'a>, String> {
        let seed = schedule::seed_or_clock(args.seed);
        let binary = match &args.relay_bin {
            Some(path) => path.clone(),
            None => default_binary()?,
        };
        let scratch = scratch_directory("soak")?;
        let log = scratch.join("relay.log");
        let backend = Backend::start(args, &scratch).await?;
        let table_ops = match backend {
            Backend::Sqlite { .. } => args.ops,
            Backend::DynamoDb { .. } => args.table_ops_max.max(1),
        };
        let tables = table_sizes(args.ops, table_ops);
        let faults = schedule::draw(
            seed,
            args.ops,
            &[(Fault::Kill, args.kills), (Fault::Stall, args.stalls)],
        );
        announce(args, seed, table_ops, tables.len());
        let relay = RelayProcess::start(
            &binary,
            backend.store_arguments(seed, 0),
            relay_environment(args, &backend),
            log.clone(),
        )
        .await?;
        let base_url = relay.base_url();
        let started = Instant::now();
        Ok(Soak {
            args,
            seed,
            log,
            backend,
            relay,
            base_url,
            streams: (0..args.streams).map(|index| format!("s{index}")).collect(),
            tables,
            started,
            deadline: started + Duration::from_secs(args.seconds_max),
            faults_left: faults.into(),
            totals: Totals::default(),
        })
    }

    /// One table: its pushers and pullers against the relay while the schedule strikes, then
    /// the final read checked and the table deleted. Answers whether the time ran out in it.
    async fn run_table(&mut self, table: usize) -> Result<bool, String> {
        if table > 0 {
            let arguments = self.backend.store_arguments(self.seed, table);
            self.relay.restart_with(arguments).await?;
        }
        let ops = self.tables[table];
        let shared = Arc::new(Shared {
            client: HttpClient::default(),
            base_url: self.base_url.clone(),
            streams: self.streams.clone(),
            answered_total: AtomicU64::new(self.totals.answered),
            pushers_done: AtomicBool::new(false),
            out_of_time: AtomicBool::new(false),
            counters: Counters::default(),
        });
        let pushers = self.spawn_pushers(&shared, table, ops);
        let pullers: Vec<_> = (0..self.args.pullers)
            .map(|_| {
                let shared = shared.clone();
                tokio::spawn(async move { puller(&shared).await })
            })
            .collect();
        self.follow_schedule(&shared, &pushers, ops).await?;
        let (answered, given_up) = self.gather_pushers(pushers).await?;
        shared.pushers_done.store(true, Ordering::SeqCst);
        let views = self.gather_pullers(pullers).await?;
        let mut stored = StoredStreams::new();
        for stream in &shared.streams {
            stored.insert(stream.clone(), read_stream(&shared, stream).await?);
        }
        let out_of_time = shared.out_of_time.load(Ordering::SeqCst);
        let checked = relay_check::check(&TableRun {
            answered: &answered,
            given_up: &given_up,
            stored: &stored,
            views: &views,
            cut_by_time: out_of_time,
        });
        self.totals.outcome.violations.extend(checked.violations);
        self.totals.outcome.merge_counts(&checked.counts);
        self.totals.answered = shared.answered_total.load(Ordering::SeqCst);
        self.totals.add_counters(&shared.counters);
        if let Backend::DynamoDb { proxy } = &self.backend {
            delete_table(&proxy.url(), &table_name(self.seed, table)).await;
        }
        Ok(out_of_time)
    }

    /// The table's ops shared among the pushers as evenly as they divide; each pusher's seed
    /// differs by table and index, so every pusher draws batches of its own yet the run's seed
    /// reproduces them all.
    fn spawn_pushers(
        &self,
        shared: &Arc<Shared>,
        table: usize,
        ops: u64,
    ) -> Vec<JoinHandle<PusherResult>> {
        let pushers = self.args.pushers;
        (0..pushers)
            .map(|index| {
                let plan = PusherPlan {
                    table,
                    index,
                    quota: ops / pushers as u64 + u64::from((index as u64) < ops % pushers as u64),
                    batch_ops_max: self.args.batch_ops_max,
                    seed: self.seed ^ ((table as u64) << 32) ^ index as u64,
                };
                let shared = shared.clone();
                tokio::spawn(async move { pusher(&shared, plan).await })
            })
            .collect()
    }

    /// The fault schedule and the progress, until the pushers are done or the time is up.
    async fn follow_schedule(
        &mut self,
        shared: &Shared,
        pushers: &[JoinHandle<PusherResult>],
        ops: u64,
    ) -> Result<(), String> {
        let table_end = self.totals.answered + ops;
        let mut next_progress = 0u64;
        loop {
            let answered = shared.answered_total.load(Ordering::SeqCst);
            if answered * 10 >= next_progress * self.args.ops {
                eprintln!(
                    "{}",
                    progress_line("ops answered", answered, self.args.ops, self.started)
                );
                next_progress = answered * 10 / self.args.ops + 1;
            }
            if pushers.iter().all(|pusher| pusher.is_finished()) {
                return Ok(());
            }
            if Instant::now() >= self.deadline {
                shared.out_of_time.store(true, Ordering::SeqCst);
                self.totals.cut_by_time = true;
                self.totals.answered_at_time_up = answered;
                self.totals.outcome.violations.push(format!(
                    "the run did not finish within {} s",
                    self.args.seconds_max
                ));
                return Ok(());
            }
            if !self.strike_due_faults(answered, table_end).await? {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }

    /// Every fault due by now strikes before the next look at the time: two points a few ops
    /// apart both strike, whenever the time runs out after them. A point past this table's
    /// ops waits for the table that reaches it. Answers whether any struck.
    async fn strike_due_faults(&mut self, answered: u64, table_end: u64) -> Result<bool, String> {
        let mut struck = false;
        while let Some(&(point, fault)) = self.faults_left.front() {
            if answered < point || point >= table_end {
                break;
            }
            self.faults_left.pop_front();
            struck = true;
            match fault {
                Fault::Kill => {
                    self.relay.kill_and_restart().await?;
                    self.totals.kills_done += 1;
                }
                Fault::Stall => {
                    stall(&self.backend, Duration::from_millis(self.args.stall_millis)).await?;
                    self.totals.stalls_done += 1;
                }
                Fault::Restart => unreachable!("the relay schedule has no restarts"),
            }
        }
        Ok(struck)
    }

    /// Waits for every pusher: what they were answered and gave up is the table's check's
    /// input; their violations, latencies and unpushed ops are the run's.
    async fn gather_pushers(
        &mut self,
        pushers: Vec<JoinHandle<PusherResult>>,
    ) -> Result<(Answers, BTreeSet<String>), String> {
        let mut answered = Answers::new();
        let mut given_up = BTreeSet::new();
        for handle in pushers {
            let result = handle
                .await
                .map_err(|error| format!("a pusher panicked: {error}"))?;
            self.totals.outcome.violations.extend(result.violations);
            self.totals
                .request_latencies
                .extend(result.request_latencies);
            self.totals.batch_latencies.extend(result.batch_latencies);
            answered.extend(result.answered);
            given_up.extend(result.given_up);
            self.totals.not_pushed_ops += result.not_pushed_ops;
        }
        Ok((answered, given_up))
    }

    /// Waits for every puller (they stop once the pushers are done and a pass finds nothing
    /// new): their views, for the table's check.
    async fn gather_pullers(
        &mut self,
        pullers: Vec<JoinHandle<PullerResult>>,
    ) -> Result<Vec<PullerView>, String> {
        let mut views = Vec::new();
        for handle in pullers {
            let result = handle
                .await
                .map_err(|error| format!("a puller panicked: {error}"))?;
            self.totals.outcome.violations.extend(result.violations);
            views.push(result.seen);
        }
        Ok(views)
    }

    /// The report: the schedule's own failure first, then what the run did, found and measured,
    /// and the relay's log when something failed.
    fn into_outcome(mut self) -> Outcome {
        let took = self.started.elapsed();
        // A fault strikes once the run has answered its point's ops. In a run that ended on its
        // own every point was reached, so a fault left is the schedule's failure; in a run the
        // time limit cut (a failure of its own) the faults left are the ones past where it stopped.
        if !self.faults_left.is_empty() && !self.totals.cut_by_time {
            let violation = format!(
                "the schedule's faults did not all strike: {} of {} kills, {} of {} stalls; left: \
                 {:?}",
                self.totals.kills_done,
                self.args.kills,
                self.totals.stalls_done,
                self.args.stalls,
                self.faults_left
            );
            self.totals.outcome.violations.push(violation);
        }
        let mut lines = self.summary_lines(took);
        if self.totals.cut_by_time {
            lines.push(self.time_up_line());
        }
        if !self.totals.outcome.violations.is_empty() {
            lines.push(format!(
                "relay log ({}): {}",
                self.log.display(),
                log_tail(&self.log)
            ));
        }
        let mut outcome = self.totals.outcome;
        outcome.lines = lines;
        outcome.title = format!("soak relay on {} (seed {})", self.args.store, self.seed);
        outcome
    }

    /// The faults struck, the pushes' retries, the counts checked, throughput and latencies.
    fn summary_lines(&self, took: Duration) -> Vec<String> {
        let totals = &self.totals;
        let outcome = &totals.outcome;
        let [push_requests, unavailable, connection_errors, existing] = totals.counters;
        vec![
            format!(
                "faults: {} SIGKILLs and restarts of the relay, {} backend stalls of {} ms",
                totals.kills_done, totals.stalls_done, self.args.stall_millis
            ),
            format!(
                "pushes: {push_requests} requests, {unavailable} answered 503, {connection_errors} \
                 without an answer (the relay killed or stalled), {existing} ops answered existing by \
                 a re-push"
            ),
            format!(
                "checked: {} ops answered, {} stored; lost {}, duplicated {}, gaps {}, answers \
                 differ {}, views differ {}",
                outcome.count("answered"),
                outcome.count("stored"),
                outcome.count("lost"),
                outcome.count("duplicated"),
                outcome.count("gaps"),
                outcome.count("answers differ"),
                outcome.count("views differ"),
            ),
            format!(
                "throughput: {:.0} ops/s ({} ops answered in {:.1} s, faults included)",
                per_second(outcome.count("answered"), took),
                outcome.count("answered"),
                took.as_secs_f64()
            ),
            format!("push request latency: {}", totals.request_latencies.summary()),
            format!(
                "batch latency (first push to answered, re-pushes included): {}",
                totals.batch_latencies.summary()
            ),
        ]
    }

    /// What the time limit cut, as what it is rather than as losses: ops given up unanswered,
    /// ops never pushed, faults never struck.
    fn time_up_line(&self) -> String {
        let totals = &self.totals;
        format!(
            "time up at {} of {} ops answered ({} once the pushes in flight ended): {} ops given \
             up unanswered ({} of them stored, their seq never answered), {} never pushed, {} \
             faults not struck (their points, ops answered: {:?})",
            totals.answered_at_time_up,
            self.args.ops,
            totals.answered,
            totals.outcome.count("given up"),
            totals.outcome.count("given up but stored"),
            totals.not_pushed_ops,
            self.faults_left.len(),
            self.faults_left
                .iter()
                .map(|(point, fault)| format!("{point} {fault:?}"))
                .collect::<Vec<_>>(),
        )
    }
}

impl Totals {
    fn add_counters(&mut self, counters: &Counters) {
        for (total, counter) in self.counters.iter_mut().zip([
            &counters.push_requests,
            &counters.unavailable,
            &counters.connection_errors,
            &counters.existing_answers,
        ]) {
            *total += counter.load(Ordering::SeqCst);
        }
    }
}

impl Backend {
    /// SQLite in the run's scratch directory, or the emulator `ONCECHECK_DDB_ENDPOINT` names
    /// behind a stall proxy of the soak's own.
    async fn start(args: &RelayArgs, scratch: &Path) -> Result<Backend, String> {
        match args.store.as_str() {
            "sqlite" => Ok(Backend::Sqlite {
                path: scratch.join("relay.sqlite"),
            }),
            _ => {
                let endpoint = std::env::var("ONCECHECK_DDB_ENDPOINT")
                    .ok()
                    .filter(|url| url.starts_with("http://"))
                    .ok_or("--store dynamodb needs ONCECHECK_DDB_ENDPOINT=http://HOST:PORT (an emulator such as moto)")?;
                let proxy = StallProxy::start(&endpoint).await?;
                Ok(Backend::DynamoDb { proxy })
            }
        }
    }

    /// The relay's `--store` arguments for `table`: on DynamoDB every table is a fresh one
    /// the relay creates.
    fn store_arguments(&self, seed: u64, table: usize) -> Vec<String> {
        match self {
            Backend::Sqlite { path } => {
                vec!["--store".into(), format!("sqlite:{}", path.display())]
            }
            Backend::DynamoDb { .. } => vec![
                "--store".into(),
                format!("dynamodb:{}", table_name(seed, table)),
                "--create-table".into(),
            ],
        }
    }
}

/// The DynamoDB table of one table's run: the seed in its name keeps runs at once apart.
fn table_name(seed: u64, table: usize) -> String {
    format!("oncecheck-soak-{seed:x}-{table}")
}

/// `ops` cut into tables of at most `table_ops` ops.
fn table_sizes(ops: u64, table_ops: u64) -> Vec<u64> {
    let mut left = ops;
    let mut sizes = Vec::new();
    while left > 0 {
        let size = left.min(table_ops);
        sizes.push(size);
        left -= size;
    }
    sizes
}

/// The run's parameters on stderr before it starts, the seed first: what reproduces it.
fn announce(args: &RelayArgs, seed: u64, table_ops: u64, tables: usize) {
    eprintln!(
        "soak relay on {} (seed {seed}): {} ops by {} pushers over {} streams, {} pullers, \
         {} kills, {} stalls of {} ms, push deadline {} s{}",
        args.store,
        args.ops,
        args.pushers,
        args.streams,
        args.pullers,
        args.kills,
        args.stalls,
        args.stall_millis,
        args.push_deadline_secs,
        if tables > 1 {
            format!(", a fresh table every {table_ops} ops ({tables} tables)")
        } else {
            String::new()
        }
    );
}

/// The relay's environment: the soak's push deadline, quiet logs, and on DynamoDB the stall
/// proxy in place of the emulator.
fn relay_environment(args: &RelayArgs, backend: &Backend) -> Vec<(String, String)> {
    let mut environment = vec![
        (
            "ONCECHECK_RELAY_PUSH_DEADLINE_SECS".to_string(),
            args.push_deadline_secs.to_string(),
        ),
        ("RUST_LOG".to_string(), "warn".to_string()),
    ];
    if let Backend::DynamoDb { proxy, .. } = backend {
        environment.push(("ONCECHECK_DDB_ENDPOINT".to_string(), proxy.url()));
    }
    environment
}

async fn stall(backend: &Backend, length: Duration) -> Result<(), String> {
    match backend {
        Backend::DynamoDb { proxy, .. } => {
            proxy.stall(length).await;
            Ok(())
        }
        Backend::Sqlite { path } => {
            // Another writer holds SQLite's write lock: the relay's appends wait (up to its busy
            // timeout) until the push deadline answers 503; its pulls read on (WAL).
            use sqlx::Connection;
            let url = format!("sqlite://{}", path.display());
            let mut connection = sqlx::SqliteConnection::connect(&url)
                .await
                .map_err(|error| format!("opening {url} to stall it: {error}"))?;
            sqlx::query("BEGIN IMMEDIATE")
                .execute(&mut connection)
                .await
                .map_err(|error| format!("taking {url}'s write lock: {error}"))?;
            tokio::time::sleep(length).await;
            sqlx::query("ROLLBACK")
                .execute(&mut connection)
                .await
                .map_err(|error| format!("releasing {url}'s write lock: {error}"))?;
            Ok(())
        }
    }
}

async fn delete_table(endpoint: &str, table: &str) {
    let client = oncecheck_store::dynamodb::client_for(Some(endpoint)).await;
    if let Err(error) = client.delete_table().table_name(table).send().await {
        eprintln!("soak: could not delete table {table}: {error}");
    }
}

/// What one pusher pushes: its share of a table's ops, in batches drawn from its own seed.
#[derive(Clone, Copy)]
struct PusherPlan {
    table: usize,
    index: usize,
    quota: u64,
    batch_ops_max: usize,
    seed: u64,
}

/// Pushes the plan's quota in batches of 1..=batch_ops_max to random streams, each batch
/// re-pushed until it is answered 2xx.
async fn pusher(shared: &Shared, plan: PusherPlan) -> PusherResult {
    let mut random = SplitMix64::new(plan.seed);
    let mut result = PusherResult::default();
    let mut next = 0u64;
    while next < plan.quota {
        let size = (1 + random.below(plan.batch_ops_max)) as u64;
        let size = size.min(plan.quota - next);
        let stream = &shared.streams[random.below(shared.streams.len())];
        let ops: Vec<(String, String)> = (next..next + size)
            .map(|number| {
                let op_id = format!("t{}-p{}-{number}", plan.table, plan.index);
                let payload = payload_of(&op_id);
                (op_id, payload)
            })
            .collect();
        next += size;
        if let Pushed::OutOfTime { pushed } = push_batch(shared, stream, &ops, &mut result).await {
            if pushed {
                result
                    .given_up
                    .extend(ops.iter().map(|(op_id, _)| op_id.clone()));
            } else {
                result.not_pushed_ops += size;
            }
            result.not_pushed_ops += plan.quota - next;
            return result;
        }
    }
    result
}

/// How pushing one batch ended.
enum Pushed {
    /// Answered 2xx, or answered what no re-push changes (a violation, recorded).
    Settled,
    /// The time was up first; `pushed` when the batch went out at least once, so the relay
    /// may hold it without the run knowing its seq.
    OutOfTime { pushed: bool },
}

/// Pushes one batch until an answer settles it: a 503 or a lost connection is re-pushed, as
/// the relay's documented client does, and its claims then answer what was stored.
async fn push_batch(
    shared: &Shared,
    stream: &str,
    ops: &[(String, String)],
    result: &mut PusherResult,
) -> Pushed {
    let body = json!({
        "ops": ops.iter().map(|(op_id, payload)| json!({"op_id": op_id, "payload": payload})).collect::<Vec<_>>()
    })
    .to_string();
    let url = format!("{}/v1/streams/{stream}/ops", shared.base_url);
    let first_push = Instant::now();
    let mut pushed = false;
    loop {
        if shared.out_of_time.load(Ordering::SeqCst) {
            return Pushed::OutOfTime { pushed };
        }
        pushed = true;
        shared
            .counters
            .push_requests
            .fetch_add(1, Ordering::Relaxed);
        let sent = Instant::now();
        let answer = shared
            .client
            .send(
                Method::POST,
                &url,
                &[("content-type", "application/json")],
                Bytes::from(body.clone()),
            )
            .await;
        let answer = match answer {
            Ok(answer) => answer,
            Err(_lost) => {
                shared
                    .counters
                    .connection_errors
                    .fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(RETRY_PAUSE_MILLIS)).await;
                continue;
            }
        };
        if answer.status == StatusCode::SERVICE_UNAVAILABLE {
            shared.counters.unavailable.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(Duration::from_millis(RETRY_PAUSE_MILLIS)).await;
            continue;
        }
        if answer.status != StatusCode::OK {
            result.violations.push(format!(
                "a push to {stream} was answered {}: {}",
                answer.status,
                String::from_utf8_lossy(&answer.body)
            ));
            return Pushed::Settled;
        }
        result.request_latencies.record(sent.elapsed());
        if record_answers(shared, stream, ops, &answer.body, result) {
            result.batch_latencies.record(first_push.elapsed());
        }
        return Pushed::Settled;
    }
}

/// Records a 2xx push answer's seqs; answers false (a violation) when it names other ops than
/// the batch sent, in another order or number.
fn record_answers(
    shared: &Shared,
    stream: &str,
    ops: &[(String, String)],
    body: &[u8],
    result: &mut PusherResult,
) -> bool {
    let results: Vec<(String, i64, bool)> = serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|document| document.get("results").cloned())
        .and_then(|results| serde_json::from_value::<Vec<Value>>(results).ok())
        .unwrap_or_default()
        .iter()
        .filter_map(|one| {
            Some((
                one.get("op_id")?.as_str()?.to_string(),
                one.get("seq")?.as_i64()?,
                one.get("existing")?.as_bool()?,
            ))
        })
        .collect();
    if results.len() != ops.len() || results.iter().zip(ops).any(|(got, sent)| got.0 != sent.0) {
        result.violations.push(format!(
            "a push to {stream} answered other ops than it sent: {}",
            String::from_utf8_lossy(body)
        ));
        return false;
    }
    for ((op_id, seq, existing), (_, payload)) in results.into_iter().zip(ops) {
        if existing {
            shared
                .counters
                .existing_answers
                .fetch_add(1, Ordering::Relaxed);
        }
        result
            .answered
            .insert(op_id, (stream.to_string(), seq, payload.clone()));
    }
    shared
        .answered_total
        .fetch_add(ops.len() as u64, Ordering::SeqCst);
    true
}

/// What a puller has followed so far.
struct Puller {
    result: PullerResult,
    /// stream -> the last seq handed out.
    cursors: BTreeMap<String, i64>,
    /// stream -> every op_id handed out, to catch one handed out twice.
    seen_ids: BTreeMap<String, BTreeSet<String>>,
}

/// Follows every stream from seq 0, checking each page starts at its cursor + 1 and hands out
/// dense seqs, until the pushers are done and a last pass finds nothing new.
async fn puller(shared: &Shared) -> PullerResult {
    let mut puller = Puller {
        result: PullerResult::default(),
        cursors: shared
            .streams
            .iter()
            .map(|stream| (stream.clone(), 0))
            .collect(),
        seen_ids: BTreeMap::new(),
    };
    loop {
        let done_before_pass = shared.pushers_done.load(Ordering::SeqCst);
        let mut new_ops = false;
        for stream in &shared.streams {
            if shared.out_of_time.load(Ordering::SeqCst) {
                return puller.result;
            }
            new_ops |= puller.pull_page(shared, stream).await;
        }
        if done_before_pass && !new_ops {
            return puller.result;
        }
        if !new_ops {
            tokio::time::sleep(Duration::from_millis(IDLE_PULL_MILLIS)).await;
        }
    }
}

impl Puller {
    /// Pulls and checks the page of `stream` after its cursor. Answers whether the pass must
    /// look again: ops were handed out, or the pull failed (the relay killed or stalled).
    async fn pull_page(&mut self, shared: &Shared, stream: &str) -> bool {
        let cursor = self.cursors[stream];
        let url = format!(
            "{}/v1/streams/{stream}/ops?after={cursor}&limit={PULL_LIMIT}",
            shared.base_url
        );
        let answer = match shared
            .client
            .send(Method::GET, &url, &[], Bytes::new())
            .await
        {
            Ok(answer) if answer.status.is_success() => answer,
            _ => {
                tokio::time::sleep(Duration::from_millis(RETRY_PAUSE_MILLIS)).await;
                return true;
            }
        };
        let mut new_ops = false;
        let mut expected = cursor + 1;
        for (seq, op_id, payload) in pulled_ops(&answer.body) {
            new_ops = true;
            if seq != expected {
                self.result.violations.push(format!(
                    "a puller of {stream} at cursor {} was handed seq {seq} (a gap)",
                    expected - 1
                ));
            }
            if !self
                .seen_ids
                .entry(stream.to_string())
                .or_default()
                .insert(op_id.clone())
            {
                self.result
                    .violations
                    .push(format!("a puller of {stream} was handed {op_id} twice"));
            }
            if payload != payload_of(&op_id) {
                self.result
                    .violations
                    .push(format!("{op_id} was pulled with another payload"));
            }
            self.result
                .seen
                .entry(stream.to_string())
                .or_default()
                .push((seq, op_id));
            expected = seq + 1;
        }
        self.cursors.insert(stream.to_string(), expected - 1);
        new_ops
    }
}

/// (seq, op_id, payload) of a pull answer.
fn pulled_ops(body: &[u8]) -> Vec<(i64, String, String)> {
    serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|document| document.get("ops").cloned())
        .and_then(|ops| serde_json::from_value::<Vec<Value>>(ops).ok())
        .unwrap_or_default()
        .iter()
        .filter_map(|op| {
            Some((
                op.get("seq")?.as_i64()?,
                op.get("op_id")?.as_str()?.to_string(),
                op.get("payload")?.as_str()?.to_string(),
            ))
        })
        .collect()
}

/// The whole stream, page by page, retried through restarts and stalls.
async fn read_stream(shared: &Shared, stream: &str) -> Result<Vec<(i64, String, String)>, String> {
    let mut ops = Vec::new();
    let mut failures = 0u32;
    loop {
        let cursor = ops.last().map_or(0, |(seq, _, _)| *seq);
        let url = format!(
            "{}/v1/streams/{stream}/ops?after={cursor}&limit={PULL_LIMIT}",
            shared.base_url
        );
        match shared
            .client
            .send(Method::GET, &url, &[], Bytes::new())
            .await
        {
            Ok(answer) if answer.status.is_success() => {
                let page = pulled_ops(&answer.body);
                if page.is_empty() {
                    return Ok(ops);
                }
                ops.extend(page);
            }
            other => {
                failures += 1;
                if failures > 100 {
                    return Err(format!(
                        "reading {stream} back failed 100 times, the last: {}",
                        match other {
                            Ok(answer) => answer.status.to_string(),
                            Err(error) => error,
                        }
                    ));
                }
                tokio::time::sleep(Duration::from_millis(RETRY_PAUSE_MILLIS)).await;
            }
        }
    }
}
