//! The `middleware-sqlite`, `middleware-postgres` and `middleware-memory` targets: idempotency
//! traces replayed against the layer from impl/idempotency, unchanged, on the driver of
//! `crate::replay::driver`.
//!
//! Each trace gets its own database (SQLite: an in-memory database; PostgreSQL: a schema of its
//! own, dropped at the end; memory: a fresh `MemoryStore`), its own axum server on a loopback
//! port, and one TCP connection per model client. The replay controls exactly what the model
//! treats as nondeterministic: the handler's outcome and the release of its body (the scripted
//! handler of `server`), every store call and its faults (`held_store`), time (the layer's
//! `ManualClock`: one model tick is one lease), and cancellation (a client's connection closed
//! at the await point the step names).
//! After every step the driver compares the row read from the database, the handler runs and
//! the held store calls with the model's, and the layer's lost-lease count with the renewals the
//! store refused; a step that ends a client compares what it received.
//!
//! Invariants: a step is performed only once the real system is where the model's previous
//! state says (each step waits for the evidence of its own effect, bounded by
//! `hub::WAIT_MILLIS_MAX`, and no longer once it cannot come: the client waits on the trace, or
//! a cancelled request's drop guard did not fire); a step that cannot be taken (nothing waits
//! for it) is a divergence at that step, never skipped; the lease heartbeat runs for `renewed` (as shipped, a third of the
//! lease on the layer's clock, so a tick makes it beat) and is off for the variants before it.

use super::held_store::HeldStore;
use super::hub::{CallKind, Hub, HubState, Received, Release};
use super::running_layer::{self, RunningLayer};
use super::server::{self, Server};
use super::{
    applicable, expected_view, generation_offsets, BodyKind, Database, LayerBehaviour,
    MiddlewareView, RowView,
};
use crate::replay::driver::{
    compare, drive, load_for, Fault, ReplayError, ReplayStats, ReplayTarget, Step, Target,
};
use crate::replay::session::ReplaySession;
use oncecheck_idempotency::fingerprint::Fingerprint as RealFingerprint;
use oncecheck_idempotency::store::{MemoryStore, PostgresStore, SqliteStore};
use oncecheck_idempotency::{
    Behaviour, CacheStore, IdempotencyLayer, ManualClock, ReconcileReport,
};
use oncecheck_model::idempotency::{
    Action, Answer, AwaitPoint, DbResult, Fingerprint, IdempotencyModel, IdempotencyState, Outcome,
    Stage, Stored,
};
use oncecheck_model::trace::LoadedTrace;
use std::collections::BTreeMap;
use std::sync::Arc;

/// One model tick: the lease. Long enough that the finalize budget (wall time) never runs out
/// while the trace holds a finalize.
pub const LEASE_SECS: u64 = 3_600;
/// The row lives two ticks (`ROW_TTL_TICKS`).
pub const ROW_TTL_SECS: u64 = 2 * LEASE_SECS;
/// Wall time a finalize's attempts may take: far above any replay, below the lease.
const FINALIZE_BUDGET_MS: u64 = 600_000;
/// The first backoff between finalize attempts: short, a replay waits for every retry.
const FINALIZE_BACKOFF_MS: u64 = 1;
/// Where the layer's clock starts (milliseconds since the epoch; any value works).
const CLOCK_START_MILLIS: i64 = 1_000_000;
/// How long a cancelled client's layer may take to reach the store with a call the model does
/// not make (a spawned drop-guard finalize): loopback and a spawned task, far under this.
const GONE_GRACE_MILLIS: u64 = 250;
/// How long after the drop of a request's future the layer may take to count its drop guard
/// as fired (the rest of that synchronous drop), and after a renewal's answer to count a lost
/// lease: far under this.
const GUARD_FIRED_GRACE_MILLIS: u64 = 1_000;

/// Whether the layer's shipped finalize attempts are the model's: the replay builds the layer
/// with its default, so a change to either must change the other.
pub fn finalize_attempts_agree() -> bool {
    oncecheck_idempotency::Config::default().finalize_attempts_max
        == u32::from(oncecheck_model::idempotency::FINALIZE_ATTEMPTS_MAX)
}

/// The layer as `--store-variant` and `--store-mutation` configure it for a middleware target.
#[derive(Debug, Clone, Default)]
pub struct LayerConfig {
    /// Replay against this behaviour instead of the trace's variant's (`pre-fix`, `fixed`,
    /// `fenced`), to show where the two part.
    pub behaviour: Option<LayerBehaviour>,
    /// Deliberate defects switched on in the real layer and store (test seams).
    pub mutations: Vec<LayerMutation>,
}

/// A deliberate defect of the real layer or its store, as `--store-mutation` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LayerMutation {
    /// The claim takes a processing row over while its lease is live (the store's claim).
    ClaimOverLiveLease,
    /// The finalize is conditional on the key only.
    FinalizeKeyOnly,
    /// No drop guard.
    NoDropGuard,
    /// A replay without the replay marker.
    ReplayUnmarked,
}

impl LayerMutation {
    pub const ALL: [LayerMutation; 4] = [
        LayerMutation::ClaimOverLiveLease,
        LayerMutation::FinalizeKeyOnly,
        LayerMutation::NoDropGuard,
        LayerMutation::ReplayUnmarked,
    ];

    pub fn name(self) -> &'static str {
        match self {
            LayerMutation::ClaimOverLiveLease => "claim-over-live-lease",
            LayerMutation::FinalizeKeyOnly => "finalize-key-only",
            LayerMutation::NoDropGuard => "no-drop-guard",
            LayerMutation::ReplayUnmarked => "replay-unmarked",
        }
    }

    /// The layer's own test seam, for the mutations that live in the layer.
    fn layer_seam(self) -> Option<oncecheck_idempotency::Mutation> {
        use oncecheck_idempotency::Mutation;
        match self {
            LayerMutation::ClaimOverLiveLease => None,
            LayerMutation::FinalizeKeyOnly => Some(Mutation::FinalizeKeyOnly),
            LayerMutation::NoDropGuard => Some(Mutation::NoDropGuard),
            LayerMutation::ReplayUnmarked => Some(Mutation::ReplayUnmarked),
        }
    }
}

impl LayerConfig {
    /// Parses the flags, naming the valid choices on error.
    pub fn parse(variant: Option<&str>, mutations: &[String]) -> Result<LayerConfig, String> {
        let behaviour = match variant {
            None => None,
            Some(name) => Some(
                LayerBehaviour::ALL
                    .into_iter()
                    .find(|behaviour| behaviour.name() == name)
                    .ok_or_else(|| {
                        let valid: Vec<&str> =
                            LayerBehaviour::ALL.iter().map(|b| b.name()).collect();
                        format!(
                            "unknown layer variant `{name}`; valid: {}",
                            valid.join(", ")
                        )
                    })?,
            ),
        };
        let mutations = mutations
            .iter()
            .map(|name| {
                LayerMutation::ALL
                    .into_iter()
                    .find(|mutation| mutation.name() == name)
                    .ok_or_else(|| {
                        let valid: Vec<&str> = LayerMutation::ALL
                            .iter()
                            .map(|mutation| mutation.name())
                            .collect();
                        format!(
                            "unknown layer mutation `{name}`; valid: {}",
                            valid.join(", ")
                        )
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(LayerConfig {
            behaviour,
            mutations,
        })
    }

    /// The flags that select this configuration.
    pub fn flags(&self) -> String {
        let mut flags = match self.behaviour {
            None => String::new(),
            Some(behaviour) => format!(" --store-variant {}", behaviour.name()),
        };
        for mutation in &self.mutations {
            flags.push_str(&format!(" --store-mutation {}", mutation.name()));
        }
        flags
    }
}

/// The session of a middleware run: the context every trace shares.
pub struct MiddlewareSession(pub Arc<MiddlewareContext>);

impl MiddlewareSession {
    pub async fn open(target: &Target, config: LayerConfig) -> Result<MiddlewareSession, String> {
        let (database, url) = match target {
            Target::MiddlewareSqlite => (Database::Sqlite, None),
            Target::MiddlewarePostgres(url) => (Database::Postgres, url.clone()),
            Target::MiddlewareMemory => (Database::Memory, None),
            other => return Err(format!("target `{other}` replays relay traces")),
        };
        let context = MiddlewareContext::open(database, url, config, target.to_string()).await?;
        Ok(MiddlewareSession(Arc::new(context)))
    }
}

impl ReplaySession for MiddlewareSession {
    type Trace = LoadedTrace<IdempotencyModel>;

    fn load(&self, file: &std::path::Path) -> Result<Self::Trace, ReplayError> {
        load_for::<IdempotencyModel>(file, &self.0.target)
    }

    async fn replay(
        &self,
        file: &std::path::Path,
        trace: &Self::Trace,
    ) -> Result<ReplayStats, ReplayError> {
        drive(file, trace, MiddlewareTarget::new(self.0.clone())).await
    }

    async fn close(self) {
        if let Ok(context) = Arc::try_unwrap(self.0) {
            context.close().await;
        }
    }
}

/// What every trace of one `oncecheck replay` run shares.
pub struct MiddlewareContext {
    pub database: Database,
    /// PostgreSQL: the URL and a pool that creates and drops each trace's schema.
    pub postgres: Option<(String, sqlx::PgPool)>,
    /// The layer behaviour to replay against instead of the trace's variant's, and defects.
    pub config: LayerConfig,
    /// The `--target` value, as given.
    pub target: String,
}

impl MiddlewareContext {
    /// Opens the target; an error is one line naming what is unreachable.
    pub async fn open(
        database: Database,
        url: Option<String>,
        config: LayerConfig,
        target: String,
    ) -> Result<MiddlewareContext, String> {
        let postgres = match database {
            Database::Sqlite | Database::Memory => None,
            Database::Postgres => {
                let url = match url {
                    Some(url) => url,
                    None => std::env::var("ONCECHECK_PG_URL").map_err(|_| {
                        "no database: pass --target middleware-postgres=URL or set ONCECHECK_PG_URL"
                            .to_string()
                    })?,
                };
                let pool = sqlx::postgres::PgPoolOptions::new()
                    .max_connections(4)
                    .acquire_timeout(std::time::Duration::from_secs(5))
                    .connect(&url)
                    .await
                    .map_err(|error| format!("PostgreSQL at {url} does not answer: {error}"))?;
                Some((url, pool))
            }
        };
        Ok(MiddlewareContext {
            database,
            postgres,
            config,
            target,
        })
    }

    pub async fn close(self) {
        if let Some((_, pool)) = self.postgres {
            pool.close().await;
        }
    }
}

/// The database of one trace, with the store the layer runs on.
enum TraceDatabase {
    Sqlite(SqliteStore),
    Postgres {
        store: PostgresStore,
        schema: String,
    },
    Memory(MemoryStore),
}

/// One trace on its own database and server.
pub struct MiddlewareTarget {
    context: Arc<MiddlewareContext>,
    hub: Arc<Hub>,
    clock: ManualClock,
    database: Option<TraceDatabase>,
    server: Option<Server>,
    connections: BTreeMap<usize, tokio::task::JoinHandle<()>>,
    /// Per state of the trace, what the database's generations lag the model's
    /// (`generation_offsets`): the one part of a view the state alone does not say.
    generation_offsets: Vec<i64>,
    /// The variant commits its effects with the row (`atomic`): the view counts them.
    effects: bool,
    /// The state the driver compares next (0: the initial state).
    index: usize,
    behaviour: LayerBehaviour,
    clients: usize,
    /// The outcome each client's handler answered.
    outcomes: BTreeMap<usize, Outcome>,
    requests: usize,
    lost_responses: usize,
    /// `atomic` on SQLite: the database file, removed at the end.
    sqlite_file: Option<std::path::PathBuf>,
    /// The running layer, for what a replay asks it besides HTTP: its count of drop guards
    /// fired, a reconcile pass, the resolutions asked at the end.
    layer: Option<Arc<dyn RunningLayer>>,
    /// That count when the last client was cancelled.
    guards_before_cancel: u64,
}

impl MiddlewareTarget {
    pub fn new(context: Arc<MiddlewareContext>) -> MiddlewareTarget {
        MiddlewareTarget {
            context,
            hub: Arc::new(Hub::default()),
            clock: ManualClock::new(CLOCK_START_MILLIS),
            database: None,
            server: None,
            connections: BTreeMap::new(),
            generation_offsets: Vec::new(),
            effects: false,
            index: 0,
            behaviour: LayerBehaviour::Fenced,
            clients: 0,
            outcomes: BTreeMap::new(),
            requests: 0,
            lost_responses: 0,
            sqlite_file: None,
            layer: None,
            guards_before_cancel: 0,
        }
    }

    fn layer<St: CacheStore>(&self, store: St) -> IdempotencyLayer<HeldStore<St>> {
        let behaviour = match self.behaviour {
            LayerBehaviour::PreFix => Behaviour::PreFix,
            LayerBehaviour::Fixed => Behaviour::Fixed,
            LayerBehaviour::Fenced
            | LayerBehaviour::Renewed
            | LayerBehaviour::Atomic
            | LayerBehaviour::FailClosed => Behaviour::Fenced,
        };
        let mut builder =
            IdempotencyLayer::builder(HeldStore::new(store, self.hub.clone(), self.clock.clone()));
        for seam in self
            .context
            .config
            .mutations
            .iter()
            .filter_map(|mutation| mutation.layer_seam())
        {
            builder = builder.mutation(seam);
        }
        // The shipped heartbeat (a third of the lease, on the layer's clock) for `renewed`; none
        // for the variants before it.
        if !self.behaviour.heartbeat() {
            builder = builder.without_lease_renewal();
        }
        if self.behaviour == LayerBehaviour::FailClosed {
            builder = builder.fail_closed();
        }
        builder
            .body_bytes_max(server::BODY_BYTES_MAX)
            .request_body_bytes_max(server::REQUEST_BODY_BYTES_MAX)
            .lease_secs(LEASE_SECS)
            .row_ttl_secs(ROW_TTL_SECS)
            .finalize_budget_ms(FINALIZE_BUDGET_MS)
            .finalize_backoff_ms(FINALIZE_BACKOFF_MS)
            .clock(self.clock.clone())
            .behaviour(behaviour)
            .build()
    }

    /// The model's `state` as the database shows it, at the step the driver compares next.
    fn view_of(&self, state: &IdempotencyState) -> MiddlewareView {
        expected_view(state, self.generation_offsets[self.index], self.effects)
    }

    fn atomic(&self) -> bool {
        self.behaviour == LayerBehaviour::Atomic
    }

    /// The effects committed so far (`atomic`).
    async fn effects(&self) -> Result<Option<usize>, Fault> {
        if !self.atomic() {
            return Ok(None);
        }
        let counted: Result<i64, sqlx::Error> = match &self.database {
            Some(TraceDatabase::Sqlite(store)) => {
                sqlx::query_scalar(EFFECTS_SQL)
                    .fetch_one(store.pool())
                    .await
            }
            Some(TraceDatabase::Postgres { store, .. }) => {
                sqlx::query_scalar(EFFECTS_SQL)
                    .fetch_one(store.pool())
                    .await
            }
            // `applicable` refuses `atomic` on the memory store, which holds no effects.
            Some(TraceDatabase::Memory(_)) => unreachable!("an atomic trace on the memory store"),
            None => return Err(Fault::Environment("no database".into())),
        };
        let counted =
            counted.map_err(|error| Fault::Environment(format!("counting effects: {error}")))?;
        Ok(Some(usize::try_from(counted).unwrap_or(usize::MAX)))
    }

    /// Keeps the running layer for what a replay asks it besides HTTP.
    fn keep_handles<St: CacheStore + 'static>(&mut self, layer: &IdempotencyLayer<St>) {
        self.layer = Some(Arc::new(layer.clone()));
    }

    /// The layer's count of drop guards fired so far (0 before it runs).
    fn guards_fired(&self) -> u64 {
        self.layer
            .as_ref()
            .map_or(0, |layer| layer.stats().guard_fired)
    }

    /// The reconciler's step: one pass of the layer's `reconcile_unknown`, its hook answering
    /// as the trace says; the pass must resolve exactly the trace's one held key.
    async fn reconcile(&self, applied: bool) -> Result<(), Fault> {
        let Some(layer) = &self.layer else {
            return Err(Fault::Environment("no layer".into()));
        };
        let report = layer
            .reconcile(applied)
            .await
            .map_err(|error| Fault::Environment(format!("reconciling: {error}")))?;
        let expected = ReconcileReport {
            applied: usize::from(applied),
            not_applied: usize::from(!applied),
            still_held: 0,
        };
        if report == expected {
            return Ok(());
        }
        Err(Fault::diverged(
            format!("the held key resolved: {expected:?}"),
            format!("{report:?}"),
        ))
    }

    fn claims_over_live_leases(&self) -> bool {
        self.context
            .config
            .mutations
            .contains(&LayerMutation::ClaimOverLiveLease)
    }

    async fn open_database(&mut self) -> Result<(), String> {
        if self.context.database == Database::Memory {
            if self.claims_over_live_leases() {
                return Err("--store-mutation claim-over-live-lease is a seam of the SQL stores; the memory store has none".into());
            }
            self.database = Some(TraceDatabase::Memory(MemoryStore::new()));
            return Ok(());
        }
        match &self.context.postgres {
            None if self.atomic() => {
                // An open effect transaction holds a connection while the row is read and other
                // requests claim: a file in WAL mode, readers beside the one writer.
                let path = std::env::temp_dir().join(format!("{}.db", fresh_schema()));
                let options = sqlx::sqlite::SqliteConnectOptions::new()
                    .filename(&path)
                    .create_if_missing(true)
                    .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal);
                let pool = sqlx::sqlite::SqlitePoolOptions::new()
                    .max_connections(4)
                    .connect_with(options)
                    .await
                    .map_err(|error| {
                        format!("cannot open SQLite at {}: {error}", path.display())
                    })?;
                self.sqlite_file = Some(path);
                let store = SqliteStore::new(pool);
                store.migrate().await.map_err(|error| error.to_string())?;
                sqlx::raw_sql(EFFECTS_TABLE_SQL)
                    .execute(store.pool())
                    .await
                    .map_err(|error| error.to_string())?;
                self.database = Some(TraceDatabase::Sqlite(store));
            }
            None => {
                // One connection: an in-memory SQLite database lives as long as its connection.
                let pool = sqlx::sqlite::SqlitePoolOptions::new()
                    .max_connections(1)
                    .idle_timeout(None)
                    .max_lifetime(None)
                    .connect("sqlite::memory:")
                    .await
                    .map_err(|error| {
                        format!("cannot open an in-memory SQLite database: {error}")
                    })?;
                let mut store = SqliteStore::new(pool);
                if self.claims_over_live_leases() {
                    store = store.claiming_over_live_leases();
                }
                store.migrate().await.map_err(|error| error.to_string())?;
                self.database = Some(TraceDatabase::Sqlite(store));
            }
            Some((url, admin)) => {
                let schema = fresh_schema();
                sqlx::query(&format!("CREATE SCHEMA {schema}"))
                    .execute(admin)
                    .await
                    .map_err(|error| format!("cannot create schema {schema}: {error}"))?;
                let search_path = format!("SET search_path TO {schema}");
                // One connection: the trace releases one store call at a time and reads the row
                // between steps, so 64 concurrent traces stay within PostgreSQL's default 100.
                // `atomic` holds one per open effect transaction: four.
                let pool = sqlx::postgres::PgPoolOptions::new()
                    .max_connections(if self.atomic() { 4 } else { 1 })
                    .after_connect(move |connection, _| {
                        let search_path = search_path.clone();
                        Box::pin(async move {
                            use sqlx::Executor;
                            connection.execute(search_path.as_str()).await.map(|_| ())
                        })
                    })
                    .connect(url)
                    .await
                    .map_err(|error| format!("PostgreSQL at {url}: {error}"))?;
                let mut store = PostgresStore::new(pool);
                if self.claims_over_live_leases() {
                    store = store.claiming_over_live_leases();
                }
                // Recorded before the migration so a failed one is dropped too.
                self.database = Some(TraceDatabase::Postgres {
                    store: store.clone(),
                    schema,
                });
                store.migrate().await.map_err(|error| error.to_string())?;
                if self.atomic() {
                    sqlx::raw_sql(EFFECTS_TABLE_SQL)
                        .execute(store.pool())
                        .await
                        .map_err(|error| error.to_string())?;
                }
            }
        }
        Ok(())
    }

    /// The row of the trace's key as the database holds it.
    async fn read_row(&self) -> Result<Option<RowView>, Fault> {
        const READ: &str = "SELECT idempotency_key, status, generation, fingerprint, response_body, body_too_large, lease_expires_at, expires_at FROM idempotency_keys";
        let rows: Vec<RowColumns> = match &self.database {
            Some(TraceDatabase::Sqlite(store)) => {
                sqlx::query_as(READ).fetch_all(store.pool()).await
            }
            Some(TraceDatabase::Postgres { store, .. }) => {
                sqlx::query_as(READ).fetch_all(store.pool()).await
            }
            Some(TraceDatabase::Memory(store)) => {
                Ok(store.rows().into_iter().map(memory_columns).collect())
            }
            None => return Err(Fault::Environment("no database".into())),
        }
        .map_err(|error| Fault::Environment(format!("reading the row: {error}")))?;
        view_of_rows(rows)
    }

    /// Waits until the real side of `client` is where the model's `stage` says.
    async fn settle(
        &mut self,
        client: usize,
        stage: Stage,
        after: &oncecheck_model::idempotency::IdempotencyState,
    ) -> Result<(), Fault> {
        let reached = match stage {
            Stage::Ready => Ok(()),
            // The model's client is gone and leaves nothing behind. The real layer may leave a
            // store call behind (a drop guard's finalize, spawned when the layer's future is
            // dropped, so it reaches the store a moment after the cancel): give it a bounded
            // grace to show up, so the comparison sees it instead of racing it.
            Stage::Gone => {
                let _nothing_left_behind = self
                    .hub
                    .wait_for_within(GONE_GRACE_MILLIS, |state| state.held_of(client).map(|_| ()))
                    .await;
                Ok(())
            }
            Stage::Claiming { .. } | Stage::Reading { .. } => {
                self.hub
                    .wait_for_client(client, |state| {
                        matches!(state.held_of(client), Some((_, CallKind::Claim))).then_some(())
                    })
                    .await
            }
            Stage::Running { .. } => {
                self.hub
                    .wait_for_client(client, |state| state.awaits_outcome(client).then_some(()))
                    .await
            }
            Stage::Capturing { outcome, .. } => {
                self.hub
                    .wait_for_client(client, |state| {
                        let handler = state.handlers.get(&client)?;
                        (if outcome.is_success() {
                            handler.body_polled
                        } else {
                            state.awaits_capture(client)
                        })
                        .then_some(())
                    })
                    .await
            }
            Stage::Finalizing { .. } => {
                self.hub
                    .wait_for_client(client, |state| {
                        matches!(state.held_of(client), Some((_, CallKind::Finalize))).then_some(())
                    })
                    .await
            }
            Stage::Guarding { .. } => self.guard_finalizes(client).await,
            Stage::Streaming { .. } => {
                self.hub
                    .wait_for_client(client, |state| {
                        state.clients.get(&client)?.head.as_ref().map(|_| ())
                    })
                    .await
            }
            Stage::Done(answer) => {
                let finished = self
                    .hub
                    .wait_for_client(client, |state| state.clients.get(&client)?.finished.clone())
                    .await;
                return match finished {
                    Ok(received) => self.compare_answer(client, answer, received, after),
                    Err(()) => Err(Fault::diverged(
                        format!("client {} received {answer:?}", client + 1),
                        self.hub.read(|state| state.describe(client)),
                    )),
                };
            }
        };
        reached.map_err(|()| {
            Fault::diverged(
                format!("client {} at {stage:?}", client + 1),
                self.hub.read(|state| state.describe(client)),
            )
        })
    }

    /// Waits for the drop guard's finalize of `client`, gone after a 2xx. The guard fires when
    /// the layer's request future is dropped (the cancel step waited for that drop) and the
    /// layer counts it before it spawns the finalize; a guard not counted within
    /// `GUARD_FIRED_GRACE_MILLIS` of the drop never fires, so the replay does not wait out
    /// `WAIT_MILLIS_MAX` for its finalize. A guard of another client counted meanwhile only
    /// makes it wait the whole time, as before.
    async fn guard_finalizes(&self, client: usize) -> Result<(), ()> {
        let finalize_held =
            |state: &HubState| matches!(state.held_of(client), Some((_, CallKind::Finalize)));
        let fired = || self.guards_fired() > self.guards_before_cancel;
        self.hub
            .wait_for_within(GUARD_FIRED_GRACE_MILLIS, |state| {
                (finalize_held(state) || fired()).then_some(())
            })
            .await?;
        self.hub
            .wait_for_client(client, |state| finalize_held(state).then_some(()))
            .await
    }

    fn compare_answer(
        &self,
        client: usize,
        answer: Answer,
        received: Result<Received, String>,
        after: &oncecheck_model::idempotency::IdempotencyState,
    ) -> Result<(), Fault> {
        let expected = |status: u16, marker: Option<&str>, body: Option<(Vec<u8>, bool)>| {
            (status, marker.map(str::to_string), body)
        };
        let outcome = self.outcomes.get(&client).copied();
        // The scripted handler's header: its own outcome's on a fresh answer it wrote, the
        // stored origin's on a replay of a stored body, none on the layer's own answers; `None`
        // where the model says nothing of headers (the sentinel's problem, an emptied body).
        let handler_header: Option<Option<String>>;
        // The problem the layer answers with, by its type's fragment: both 409s must say which
        // (a request in flight, or an outcome held unknown), as a client decides by it.
        let problem = match answer {
            Answer::Conflict { .. } => Some("in-flight"),
            Answer::OutcomeUnknown { .. } => Some("outcome-unknown"),
            Answer::Mismatch { .. } => Some("fingerprint-mismatch"),
            _ => None,
        };
        let want = match answer {
            Answer::Fresh { success, received } => {
                let outcome = outcome.unwrap_or(Outcome::OkUnder);
                let status = if success {
                    200
                } else if outcome == Outcome::HandlerError {
                    server::HANDLER_ERROR_STATUS
                } else {
                    server::FAILURE_STATUS
                };
                handler_header =
                    Some((outcome != Outcome::HandlerError).then(|| server::outcome_name(outcome)));
                let body = server::received_body(outcome, received);
                expected(status, success.then_some("false"), Some(body))
            }
            Answer::Replay {
                stored,
                marked,
                origin,
                ..
            } => {
                let origin_outcome = after.history.handler.get(&origin).copied();
                let body = match stored {
                    Stored::Full => {
                        let outcome = origin_outcome.unwrap_or(Outcome::OkUnder);
                        handler_header = Some(Some(server::outcome_name(outcome)));
                        Some(server::full_body(outcome))
                    }
                    // The sentinel's problem body is checked by its kind below.
                    Stored::Sentinel => {
                        handler_header = None;
                        None
                    }
                    Stored::Empty => {
                        handler_header = None;
                        Some((Vec::new(), false))
                    }
                };
                expected(200, marked.then_some("true"), body)
            }
            Answer::Conflict { .. } | Answer::OutcomeUnknown { .. } => {
                handler_header = Some(None);
                expected(409, None, None)
            }
            Answer::Mismatch { .. } => {
                handler_header = Some(None);
                expected(422, None, None)
            }
            Answer::Unavailable => {
                handler_header = Some(None);
                expected(503, None, None)
            }
        };
        let words = format!("client {} received {answer:?}", client + 1);
        // Over HTTP/1.1 a body that fails before hyper flushed the response head reaches the
        // client as a connection closed without a response: all the wire can carry of it.
        let fails_before_flush = matches!(&want.2, Some((_, true)));
        let received = match received {
            Err(error) if fails_before_flush && error.starts_with("no response") => return Ok(()),
            received => received.map_err(|error| Fault::diverged(&words, error))?,
        };
        let (status, marker, body) = want;
        let sentinel = matches!(
            answer,
            Answer::Replay {
                stored: Stored::Sentinel,
                ..
            }
        );
        let body_matches = match &body {
            Some((data, failed)) => received.body == *data && received.body_failed == *failed,
            None if sentinel => {
                String::from_utf8_lossy(&received.body).contains("response-not-stored")
            }
            None => {
                !received.body_failed
                    && problem.is_none_or(|kind| {
                        String::from_utf8_lossy(&received.body).contains(&format!("#{kind}\""))
                    })
            }
        };
        let header_matches = handler_header
            .as_ref()
            .is_none_or(|header| received.handler_header == *header);
        // Every body the replays send knows its length (the scripted handler's that end, the
        // layer's own, a stored one), so a body received whole arrives framed by it: a layer
        // that loses the length a response had, live or replayed, parts here.
        let framing_matches = received.body_failed
            || received.content_length.as_deref() == Some(&received.body.len().to_string());
        if received.status == status
            && received.marker == marker
            && body_matches
            && header_matches
            && framing_matches
        {
            return Ok(());
        }
        let shown = |data: &[u8], failed: bool| {
            format!(
                "{:?}{}",
                String::from_utf8_lossy(data),
                if failed { " then a body error" } else { "" }
            )
        };
        Err(Fault::diverged(
            format!(
                "{words}: status {status}, marker {marker:?}, {} {}, body {}",
                server::HANDLER_HEADER,
                handler_header.map_or_else(|| "any".to_string(), |header| format!("{header:?}")),
                body.map_or_else(
                    || if sentinel {
                        "the sentinel problem".to_string()
                    } else if let Some(kind) = problem {
                        format!("the `{kind}` problem")
                    } else {
                        "any".to_string()
                    },
                    |(data, failed)| shown(&data, failed)
                )
            ),
            format!(
                "status {}, marker {:?}, {} {:?}, body {}{}",
                received.status,
                received.marker,
                server::HANDLER_HEADER,
                received.handler_header,
                shown(&received.body, received.body_failed),
                if framing_matches {
                    String::new()
                } else {
                    format!(
                        ", framed by content-length {:?} where the body has {} bytes",
                        received.content_length,
                        received.body.len()
                    )
                }
            ),
        ))
    }

    /// Releases the call `client` has held, of `kind`.
    fn release(&mut self, client: usize, kind: CallKind, release: Release) -> Result<u64, Fault> {
        let held = self.hub.read(|state| state.held_of(client));
        match held {
            Some((id, held_kind)) if held_kind == kind => {
                self.requests += 1;
                if release != Release::Run {
                    self.lost_responses += 1;
                }
                self.hub.release(id, release);
                Ok(id)
            }
            _ => Err(Fault::diverged(
                format!("client {} has a {} call waiting", client + 1, kind.word()),
                self.hub.read(|state| state.describe(client)),
            )),
        }
    }

    /// Waits for the held call `id` to answer; checks a finalize's answer against the model's.
    async fn answered(&self, client: usize, id: u64, expected: Option<&str>) -> Result<(), Fault> {
        let answer = self
            .hub
            .wait_for(|state| state.returned.get(&id).cloned())
            .await
            .map_err(|()| {
                Fault::diverged(
                    "the released store call answers",
                    self.hub.read(|state| state.describe(client)),
                )
            })?;
        match expected {
            Some(expected) if !answer.ends_with(expected) => Err(Fault::diverged(
                format!("the finalize of client {}: {expected}", client + 1),
                format!("the finalize of client {}: {answer}", client + 1),
            )),
            _ => Ok(()),
        }
    }

    async fn finalize(&mut self, client: usize, result: DbResult) -> Result<(), Fault> {
        let (release, expected) = match result {
            DbResult::Matched => (Release::Run, Some("applied")),
            DbResult::NoRowMatched => (Release::Run, Some("lost")),
            DbResult::Error { committed } => (Release::Fail { committed }, None),
        };
        let id = self.release(client, CallKind::Finalize, release)?;
        if let DbResult::Error { committed: true } = result {
            return self.answered(client, id, None).await;
        }
        if expected.is_some() {
            self.answered(client, id, expected).await?;
        }
        Ok(())
    }

    async fn cancel(
        &mut self,
        client: usize,
        at: AwaitPoint,
        in_flight_commits: bool,
        success: bool,
    ) -> Result<(), Fault> {
        let held = self.hub.read(|state| state.held_of(client));
        self.guards_before_cancel = self.guards_fired();
        if in_flight_commits {
            let id = self.release(client, CallKind::Finalize, Release::CommitThenHang)?;
            self.answered(client, id, None).await?;
        }
        if let Some(connection) = self.connections.remove(&client) {
            connection.abort();
        }
        let gone = match at {
            AwaitPoint::Claim | AwaitPoint::ReplayRead | AwaitPoint::Finalize => {
                let Some((id, _)) = held else {
                    return Err(Fault::diverged(
                        format!("client {} has a store call waiting", client + 1),
                        self.hub.read(|state| state.describe(client)),
                    ));
                };
                self.hub
                    .wait_for(|state| state.dropped.contains(&id).then_some(()))
                    .await
            }
            AwaitPoint::Handler => {
                self.hub
                    .wait_for(|state| state.handlers.get(&client)?.dropped.then_some(()))
                    .await
            }
            AwaitPoint::Capture if !success => {
                self.hub
                    .wait_for(|state| state.handlers.get(&client)?.dropped.then_some(()))
                    .await
            }
            AwaitPoint::Capture | AwaitPoint::Tail => {
                self.hub
                    .wait_for(|state| state.handlers.get(&client)?.body_dropped.then_some(()))
                    .await
            }
        };
        gone.map_err(|()| {
            Fault::diverged(
                format!("the server drops client {}'s request at {at:?}", client + 1),
                self.hub.read(|state| state.describe(client)),
            )
        })
    }

    /// Makes the real code take one step and waits for its effect: one method per model action;
    /// after a client's step, until the real side shows the stage the model's client reaches.
    async fn perform_step(&mut self, step: Step<'_, IdempotencyModel>) -> Result<(), Fault> {
        let client = match *step.action {
            Action::ClientSends {
                client,
                fingerprint,
            } => self.client_sends(client, fingerprint).map(|()| client)?,
            Action::MiddlewareClaims { client } => {
                // SQLite's claim call also reads the row it did not take: released at the read.
                if !matches!(step.after.clients[client].stage, Stage::Reading { .. }) {
                    self.release(client, CallKind::Claim, Release::Run)?;
                }
                client
            }
            Action::MiddlewareReadsRow { client } => self
                .release(client, CallKind::Claim, Release::Run)
                .map(|_| client)?,
            Action::MiddlewareClaimFails { client, committed } => self
                .middleware_claim_fails(client, committed)
                .await
                .map(|()| client)?,
            Action::HandlerResponds { client, outcome } => {
                self.handler_responds(client, outcome).map(|()| client)?
            }
            Action::MiddlewareCaptures { client } => {
                self.middleware_captures(client).map(|()| client)?
            }
            Action::MiddlewareFinalizes { client, result }
            | Action::DropGuardFinalizes { client, result } => {
                self.finalize(client, result).await.map(|()| client)?
            }
            Action::TailStreams { client } => self.tail_streams(client).map(|()| client)?,
            Action::ClientCancels {
                client,
                at,
                in_flight_commits,
            } => self
                .client_cancels(step.before, client, at, in_flight_commits)
                .await
                .map(|()| client)?,
            Action::ClockTicks => return self.clock_ticks(step.before, step.after).await,
            Action::CleanupPurges => return self.cleanup_purges().await,
            Action::ReconcilerResolves { applied } => return self.reconcile(applied).await,
            Action::ProcessStalls { client } => {
                self.hub.stalls(client);
                client
            }
            Action::ProcessDies { client } => {
                self.process_dies(client);
                client
            }
        };
        let stage = step.after.clients[client].stage;
        self.settle(client, stage, step.after).await
    }

    /// The client opens its connection and sends its request with the key.
    fn client_sends(&mut self, client: usize, fingerprint: Fingerprint) -> Result<(), Fault> {
        self.hub.update(|state| state.claimant = Some(client));
        let address = self.server.as_ref().map(|server| server.address);
        let address = address.ok_or_else(|| Fault::Environment("no server".into()))?;
        self.connections.insert(
            client,
            server::send(address, self.hub.clone(), client, fingerprint),
        );
        Ok(())
    }

    async fn middleware_claim_fails(
        &mut self,
        client: usize,
        committed: bool,
    ) -> Result<(), Fault> {
        let id = self.release(client, CallKind::Claim, Release::Fail { committed })?;
        if committed {
            self.answered(client, id, None).await?;
        }
        Ok(())
    }

    /// The scripted handler answers the outcome the trace names.
    fn handler_responds(&mut self, client: usize, outcome: Outcome) -> Result<(), Fault> {
        self.outcomes.insert(client, outcome);
        if !self.hub.respond(client, outcome) {
            return Err(Fault::diverged(
                format!("client {}'s handler waits for its outcome", client + 1),
                self.hub.read(|state| state.describe(client)),
            ));
        }
        Ok(())
    }

    /// The handler's body frames up to what the layer captures are released (a failure's
    /// capture gate opened instead).
    fn middleware_captures(&mut self, client: usize) -> Result<(), Fault> {
        let pre_fix = self.behaviour == LayerBehaviour::PreFix;
        let outcome = self
            .outcomes
            .get(&client)
            .copied()
            .unwrap_or(Outcome::OkUnder);
        let released = if outcome.is_success() {
            let (capture, tail) = server::body_of(outcome);
            let server = self
                .server
                .as_ref()
                .ok_or_else(|| Fault::Environment("no server".into()))?;
            // The fixed capture stops at the frame crossing the cap: the rest is the tail,
            // released by its own step. The pre-fix capture reads to the end.
            let streams_tail = !pre_fix && outcome.overflows();
            if streams_tail {
                server.send_frames(client, capture, false)
            } else {
                server.send_frames(client, capture.into_iter().chain(tail).collect(), true)
            }
        } else {
            self.hub.open_capture_gate(client)
        };
        if !released {
            return Err(Fault::diverged(
                format!("client {}'s response is being captured", client + 1),
                self.hub.read(|state| state.describe(client)),
            ));
        }
        Ok(())
    }

    /// The body's frames past the cap, released after the finalize.
    fn tail_streams(&mut self, client: usize) -> Result<(), Fault> {
        let outcome = self
            .outcomes
            .get(&client)
            .copied()
            .unwrap_or(Outcome::OkUnder);
        let (_, tail) = server::body_of(outcome);
        let server = self
            .server
            .as_ref()
            .ok_or_else(|| Fault::Environment("no server".into()))?;
        if !server.send_frames(client, tail, true) {
            return Err(Fault::diverged(
                format!("client {}'s tail is streaming", client + 1),
                self.hub.read(|state| state.describe(client)),
            ));
        }
        Ok(())
    }

    async fn client_cancels(
        &mut self,
        before: &IdempotencyState,
        client: usize,
        at: AwaitPoint,
        in_flight_commits: bool,
    ) -> Result<(), Fault> {
        let success = match before.clients[client].stage {
            Stage::Capturing { outcome, .. } | Stage::Finalizing { outcome, .. } => {
                outcome.is_success()
            }
            _ => true,
        };
        self.cancel(client, at, in_flight_commits, success).await
    }

    /// The client's process dies with its request, its finalizers and its heartbeat. The replay
    /// cannot kill its own process, so it kills what the database and the client can see of it:
    /// every store call of that process is kept from the database from now on (the hub releases
    /// them `Dead`, the drop guard's finalize too), and the client's connection closes.
    fn process_dies(&mut self, client: usize) {
        self.hub.dies(client);
        if let Some(connection) = self.connections.remove(&client) {
            connection.abort();
        }
    }

    /// The layer's clock moves a lease; the heartbeat's renewals the model makes are waited for.
    async fn clock_ticks(
        &mut self,
        before: &IdempotencyState,
        after: &IdempotencyState,
    ) -> Result<(), Fault> {
        self.clock.advance_secs(LEASE_SECS as i64);
        self.renewals(before, after).await
    }

    /// The cleanup job purges the expired rows at the layer's clock.
    async fn cleanup_purges(&mut self) -> Result<(), Fault> {
        let now = oncecheck_idempotency::Clock::now_millis(&self.clock);
        let purged = match &self.database {
            Some(TraceDatabase::Sqlite(store)) => store.purge_expired(now).await,
            Some(TraceDatabase::Postgres { store, .. }) => store.purge_expired(now).await,
            // `applicable` refuses the cleanup step on the memory store, which has no job.
            Some(TraceDatabase::Memory(_)) => unreachable!("a cleanup step on the memory store"),
            None => return Err(Fault::Environment("no database".into())),
        };
        purged
            .map(|_| ())
            .map_err(|error| Fault::Environment(format!("cleanup: {error}")))
    }

    /// Waits for the heartbeat renewal a tick makes in the model: the row's claim renewed to its
    /// new lease (on the layer's clock the heartbeat beats when the tick moves it).
    async fn renewals(
        &self,
        before: &oncecheck_model::idempotency::IdempotencyState,
        after: &oncecheck_model::idempotency::IdempotencyState,
    ) -> Result<(), Fault> {
        let (Some(old), Some(new)) = (before.row, after.row) else {
            return Ok(());
        };
        if new.lease_expires_at == old.lease_expires_at {
            return Ok(());
        }
        let real_generation = self.view_of(after).row.map_or(0, |row| row.generation);
        let lease_millis = LEASE_SECS as i64 * 1000;
        let lease_ends = CLOCK_START_MILLIS + i64::from(new.lease_expires_at) * lease_millis;
        self.hub
            .wait_for(|state| {
                state
                    .renewals
                    .contains(&(real_generation, lease_ends, true))
                    .then_some(())
            })
            .await
            .map_err(|()| {
                Fault::diverged(
                    format!(
                        "the heartbeat renews generation {real_generation}'s lease to tick {}",
                        new.lease_expires_at
                    ),
                    format!(
                        "renewals (generation, lease ends, renewed): {:?}",
                        self.hub.read(|state| state.renewals.clone())
                    ),
                )
            })
    }

    /// The row is at `generation`: every earlier claim of a stalled process has been taken
    /// over, and its heartbeat's renewal goes to the database now
    /// ([`super::hub::RenewalPath::AfterTakeover`]). Waits for each that was asked: the store
    /// must refuse it (the renewal of a claim taken over changes nothing).
    //= specs/idempotency-middleware.md#3. The row and its lifecycle
    //# A renewal that matches no row means the claim was taken over: the heartbeat stops and the
    //# finalize is fenced as usual.
    async fn stalled_claims_taken_over(&self, generation: i64) -> Result<(), Fault> {
        for claim in self.hub.taken_over_by(generation) {
            // A renewal not yet asked is let through when it is (and counted then); one dropped
            // with its heartbeat never answers.
            let answered = self
                .hub
                .wait_for(|state| match state.renewed_after_takeover.get(&claim) {
                    Some(matched) => Some(Some(*matched)),
                    None if !state.renewals_in_flight.contains(&claim) => Some(None),
                    None => None,
                })
                .await;
            let actual = match answered {
                Ok(None | Some(false)) => continue,
                Ok(Some(true)) => "the lease renewed".to_string(),
                Err(()) => format!("no answer within {} ms", super::hub::WAIT_MILLIS_MAX),
            };
            return Err(Fault::diverged(
                format!("the renewal of claim {claim}, taken over by claim {generation}, refused"),
                actual,
            ));
        }
        Ok(())
    }

    /// The layer counts a lost lease for every renewal the store refused (`lease_lost`): a
    /// heartbeat that finds its claim gone (taken over, or finalized by a statement whose answer
    /// its layer did not hear) says so, for its operator, and stops. The heartbeat counts just
    /// after its renewal returns, so the count may trail the answers by
    /// `GUARD_FIRED_GRACE_MILLIS` at most.
    async fn lost_leases_counted(&self) -> Result<(), Fault> {
        let counted = || {
            self.layer
                .as_ref()
                .map_or(0, |layer| layer.stats().lease_lost)
        };
        let agreed = self
            .hub
            .wait_for_within(GUARD_FIRED_GRACE_MILLIS, |state| {
                (counted() == state.renewals_refused).then_some(())
            })
            .await;
        agreed.map_err(|()| {
            Fault::diverged(
                format!(
                    "{} lost leases counted (`lease_lost`), one per renewal the store refused",
                    self.hub.read(|state| state.renewals_refused)
                ),
                format!("{}", counted()),
            )
        })
    }

    async fn observe_now(&mut self) -> Result<MiddlewareView, Fault> {
        let repeated = self.hub.read(|state| state.repeated_renewals.clone());
        if let Some((generation, now_millis)) = repeated.first() {
            return Err(Fault::diverged(
                "one heartbeat renewal per claim per clock reading",
                format!(
                    "generation {generation} asked to renew twice at {now_millis} ms ({} repeats)",
                    repeated.len()
                ),
            ));
        }
        let row = self.read_row().await?;
        if let Some(row) = &row {
            self.stalled_claims_taken_over(row.generation).await?;
        }
        self.lost_leases_counted().await?;
        let (handler_runs, waiting) = self.hub.read(|state| {
            let waiting = (0..self.clients)
                .map(|client| state.held_of(client).map(|(_, kind)| kind.word()))
                .collect();
            (state.handler_runs, waiting)
        });
        let effects = self.effects().await?;
        Ok(MiddlewareView {
            row,
            handler_runs,
            waiting,
            effects,
        })
    }
}

/// `atomic`: the table the scripted handler's effects go to, one row per committed effect.
const EFFECTS_TABLE_SQL: &str = "CREATE TABLE replay_effects (client BIGINT NOT NULL)";
const EFFECTS_SQL: &str = "SELECT COUNT(*) FROM replay_effects";
const EFFECT_SQL: &str = "INSERT INTO replay_effects (client) VALUES ($1)";

/// `atomic`: the scripted handler's effect, one row naming its client, in its transaction.
macro_rules! effect_writer {
    ($name:ident, $effect:ty) => {
        fn $name(
            transaction: &mut $effect,
            client: usize,
        ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), String>> + Send + '_>> {
            Box::pin(async move {
                sqlx::query(EFFECT_SQL)
                    .bind(client as i64)
                    .execute(&mut **transaction)
                    .await
                    .map(|_| ())
                    .map_err(|error| error.to_string())
            })
        }
    };
}
effect_writer!(sqlite_effect, oncecheck_idempotency::store::SqliteEffect);
effect_writer!(
    postgres_effect,
    oncecheck_idempotency::store::PostgresEffect
);

/// A real time as a model tick from the clock's start, if it is a whole one.
fn tick_of(millis: i64) -> Option<i64> {
    let lease_millis = LEASE_SECS as i64 * 1000;
    let since = millis - CLOCK_START_MILLIS;
    (since % lease_millis == 0).then_some(since / lease_millis)
}

/// The real fingerprint of a model fingerprint's request.
pub fn real_fingerprint(fingerprint: Fingerprint) -> RealFingerprint {
    RealFingerprint::of(
        &http::Method::POST,
        server::ROUTE,
        server::request_body(fingerprint),
    )
}

/// A schema name no other replay uses.
fn fresh_schema() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|since| since.as_nanos())
        .unwrap_or(0);
    format!(
        "oncecheck_replay_{}_{}_{nanos}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

impl ReplayTarget for MiddlewareTarget {
    type Model = IdempotencyModel;
    type View = MiddlewareView;

    fn applicable(&self, trace: &LoadedTrace<IdempotencyModel>) -> Result<(), String> {
        applicable(&trace.model, &trace.path, self.context.database).map(|_| ())
    }

    fn expected_view(
        &self,
        _trace: &LoadedTrace<IdempotencyModel>,
        state: &IdempotencyState,
    ) -> MiddlewareView {
        self.view_of(state)
    }

    async fn set_up(&mut self, trace: &LoadedTrace<IdempotencyModel>) -> Result<(), Fault> {
        self.generation_offsets = generation_offsets(&trace.path);
        self.effects = oncecheck_model::check::ModelSpec::variant(&trace.model) == "atomic";
        self.clients = trace.path[0].0.clients.len();
        let variant = applicable(&trace.model, &trace.path, self.context.database)
            .map_err(Fault::Environment)?;
        self.behaviour = self.context.config.behaviour.unwrap_or(variant);
        self.open_database().await.map_err(Fault::Environment)?;
        let started = match &self.database {
            Some(TraceDatabase::Sqlite(store)) => {
                let effect: Option<
                    server::EffectWriter<oncecheck_idempotency::store::SqliteEffect>,
                > = self
                    .atomic()
                    .then(|| std::sync::Arc::new(sqlite_effect) as server::EffectWriter<_>);
                let layer = self.layer(store.clone());
                self.keep_handles(&layer);
                Server::start(layer, self.hub.clone(), effect).await
            }
            Some(TraceDatabase::Postgres { store, .. }) => {
                let effect: Option<
                    server::EffectWriter<oncecheck_idempotency::store::PostgresEffect>,
                > = self
                    .atomic()
                    .then(|| std::sync::Arc::new(postgres_effect) as server::EffectWriter<_>);
                let layer = self.layer(store.clone());
                self.keep_handles(&layer);
                Server::start(layer, self.hub.clone(), effect).await
            }
            Some(TraceDatabase::Memory(store)) => {
                let layer = self.layer(store.clone());
                self.keep_handles(&layer);
                Server::start(layer, self.hub.clone(), None).await
            }
            None => unreachable!("the database was just opened"),
        };
        self.server =
            Some(started.map_err(|error| Fault::Environment(format!("server: {error}")))?);
        Ok(())
    }

    async fn perform(
        &mut self,
        _trace: &LoadedTrace<IdempotencyModel>,
        step: Step<'_, IdempotencyModel>,
    ) -> Result<(), Fault> {
        self.index = step.index + 1;
        let after = step.after;
        match self.perform_step(step).await {
            // What the client received differs: show the state beside it, where the cause
            // usually is (the row the finalize wrote).
            Err(Fault::Diverged {
                action,
                expected,
                actual,
            }) => {
                let observed = match self.observe_now().await {
                    Ok(view) => format!("{view:?}"),
                    Err(fault) => format!("{fault:?}"),
                };
                Err(Fault::Diverged {
                    action,
                    expected: format!("{expected}; state {:?}", self.view_of(after)),
                    actual: format!("{actual}; state {observed}"),
                })
            }
            other => other,
        }
    }

    async fn observe(&mut self) -> Result<MiddlewareView, Fault> {
        self.observe_now().await
    }

    async fn finish(&mut self, trace: &LoadedTrace<IdempotencyModel>) -> Result<(), Fault> {
        // A store call no client owns (usize::MAX) is one the model does not have.
        let surplus = self
            .hub
            .read(|state| state.held.values().any(|call| call.client >= self.clients));
        if surplus {
            return Err(Fault::diverged(
                "no store call waiting at the end",
                "a store call of no client waits",
            ));
        }
        // Requests the layer must refuse (specs/idempotency-middleware.md, the HTTP contract: an
        // empty key, one over 255 characters or outside visible ASCII is 400 `invalid-key`;
        // credentials naming no one are 401 `empty-principal`): the model's stutter (a refused
        // request changes nothing), taken after the last step; the state must still be the
        // trace's last.
        let address = self.server.as_ref().map(|server| server.address);
        let address = address.ok_or_else(|| Fault::Environment("no server".into()))?;
        for refused in server::refused_requests() {
            let answered = server::send_refused(address, &refused, Fingerprint::A).await;
            let problem = format!("#{}\"", refused.problem);
            let as_expected = matches!(&answered, Ok((status, body)) if *status == refused.status && body.contains(&problem));
            if !as_expected {
                return Err(Fault::Diverged {
                    action: Some(format!("the layer refuses {}", refused.what)),
                    expected: format!("{}, the `{}` problem", refused.status, refused.problem),
                    actual: format!("{answered:?}"),
                });
            }
        }
        // The resolutions a race between the layer's listing of the held keys and its
        // resolution would make (`running_layer::race_resolutions_refused`): each refused, so
        // again the model's stutter.
        let layer = self.layer.clone();
        let layer = layer.ok_or_else(|| Fault::Environment("no layer".into()))?;
        let now_millis = oncecheck_idempotency::Clock::now_millis(&self.clock);
        let now = tick_of(now_millis)
            .ok_or_else(|| Fault::Environment(format!("the clock at {now_millis} ms")))?;
        let row = self.read_row().await?;
        let write_lock_held = self.atomic()
            && matches!(self.database, Some(TraceDatabase::Sqlite(_)))
            && row.as_ref().is_some_and(|row| row.status == "processing");
        running_layer::race_resolutions_refused(
            layer.as_ref(),
            row.as_ref(),
            now,
            now_millis,
            write_lock_held,
        )
        .await?;
        let last = &trace.path[trace.path.len() - 1].0;
        compare(self, trace, last).await.map(|_| ())
    }

    async fn tear_down(mut self) {
        for (_, connection) in std::mem::take(&mut self.connections) {
            connection.abort();
        }
        if let Some(server) = self.server.take() {
            server.stop();
        }
        match self.database.take() {
            Some(TraceDatabase::Sqlite(store)) => {
                store.pool().close().await;
                if let Some(path) = self.sqlite_file.take() {
                    for suffix in ["", "-wal", "-shm"] {
                        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
                    }
                }
            }
            Some(TraceDatabase::Postgres { store, schema }) => {
                store.pool().close().await;
                if let Some((_, admin)) = &self.context.postgres {
                    let _ = sqlx::query(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
                        .execute(admin)
                        .await;
                }
            }
            Some(TraceDatabase::Memory(_)) | None => {}
        }
    }

    fn command_flags(&self) -> String {
        format!("{}{}", self.context.target, self.context.config.flags())
    }

    fn counts(&self) -> (usize, usize) {
        (self.requests, self.lost_responses)
    }
}

/// A row as the SQL stores' `idempotency_keys` table holds it: key, status, generation,
/// fingerprint, response body, body-too-large flag, lease end and expiry (milliseconds).
type RowColumns = (
    String,
    String,
    i64,
    Vec<u8>,
    Option<Vec<u8>>,
    bool,
    i64,
    i64,
);

/// A memory store row in the columns a SQL store would hold it in.
fn memory_columns(
    (key, row): (
        oncecheck_idempotency::CacheKey,
        oncecheck_idempotency::store::memory::MemoryRow,
    ),
) -> RowColumns {
    use oncecheck_idempotency::store::StoredBody;
    let (body, too_large) = match row.response.map(|response| response.body) {
        Some(StoredBody::Full(data)) => (Some(data.to_vec()), false),
        Some(StoredBody::TooLarge) => (None, true),
        None => (None, false),
    };
    (
        key.key,
        row.status.to_string(),
        row.generation,
        row.fingerprint.0.to_vec(),
        body,
        too_large,
        row.lease_expires_at,
        row.expires_at,
    )
}

/// The view of the rows a database holds: none, or exactly one, of the trace's key.
fn view_of_rows(rows: Vec<RowColumns>) -> Result<Option<RowView>, Fault> {
    let Some((key, status, generation, fingerprint, body, too_large, lease_ends, expires)) =
        rows.first().cloned()
    else {
        return Ok(None);
    };
    if rows.len() > 1 {
        return Err(Fault::diverged("one row", format!("{} rows", rows.len())));
    }
    // Every client wrote the key its own way (`server::KEY_ENCODINGS`): the row holds it
    // as parsed.
    if key != server::KEY {
        return Err(Fault::diverged(
            format!("the row of key {:?}", server::KEY),
            format!("the row of key {key:?}"),
        ));
    }
    let status = match status.as_str() {
        "processing" => "processing",
        "succeeded" => "succeeded",
        "failed" => "failed",
        other => {
            return Err(Fault::diverged(
                "a known status",
                format!("status `{other}`"),
            ))
        }
    };
    let fingerprint = [Fingerprint::A, Fingerprint::B]
        .into_iter()
        .find(|candidate| real_fingerprint(*candidate).0[..] == fingerprint[..])
        .ok_or_else(|| Fault::diverged("fingerprint A or B", "another fingerprint"))?;
    let body = (status == "succeeded").then(|| {
        if too_large {
            BodyKind::Sentinel
        } else if body.is_none_or(|body| body.is_empty()) {
            BodyKind::Empty
        } else {
            BodyKind::Full
        }
    });
    Ok(Some(RowView {
        status,
        generation,
        fingerprint,
        body,
        lease_ends: tick_of(lease_ends),
        expires: tick_of(expires),
    }))
}
