//! What one `oncecheck replay` run keeps across its traces, and which target replays a trace:
//! the store of a logical target (memory, SQLite), the DynamoDB server and the store
//! configuration, or (token-model traces) the DynamoDB server the reliable-write client writes
//! to through the proxy's token table.
//!
//! Invariants: every trace replays on a stream of its own (`replay::fresh_stream`), and on
//! DynamoDB on a table and a proxy of its own, so traces never see each other's items and can
//! run concurrently whichever target they share; a session is opened only against a server that
//! answered.

use crate::proxy::Proxy;
use crate::replay::driver::{drive, fresh_stream, load_for, ReplayError, ReplayStats, Target};
use crate::replay::dynamodb::{DynamoContext, DynamoTarget, StoreConfig};
use crate::replay::log::LogTarget;
use crate::replay::token::{TokenContext, TokenTarget};
use oncecheck_model::relay::RelayModel;
use oncecheck_model::token::TokenModel;
use oncecheck_model::trace::LoadedTrace;
use oncecheck_store::{DynamoDbStore, MemoryStore, OpStore, SqliteStore};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// What a run keeps across its traces, for one model's targets: how a file is loaded as a trace
/// of the target's model, and how one trace is replayed on a database (table, stream) of its own.
pub trait ReplaySession: Send + Sync + 'static {
    type Trace: Send + Sync + 'static + crate::replay::transitions::Covered;
    /// Reads a trace of the model this session's target serves.
    fn load(&self, file: &Path) -> Result<Self::Trace, ReplayError>;
    /// Replays one loaded trace.
    fn replay(
        &self,
        file: &Path,
        trace: &Self::Trace,
    ) -> impl Future<Output = Result<ReplayStats, ReplayError>> + Send;
    /// Releases what the session holds (files, pools).
    fn close(self) -> impl Future<Output = ()> + Send;
    /// What a successful replay of `trace` shows beyond "no divergence" (a counterexample
    /// reproduced on the real system), printed on its `ok` line.
    fn reproduction(&self, _trace: &Self::Trace) -> Option<String> {
        None
    }
}

/// A trace loaded for this session's target: a relay trace, or a token trace for
/// `tokened-dynamodb`.
pub enum SessionTrace {
    Relay(LoadedTrace<RelayModel>),
    Token(LoadedTrace<TokenModel>),
}

impl SessionTrace {
    /// What a successful replay of this trace shows beyond "no divergence": a counterexample of
    /// the token model reproduced on the real table.
    pub fn reproduction(&self) -> Option<String> {
        match self {
            SessionTrace::Relay(_) => None,
            SessionTrace::Token(trace) => crate::replay::token::reproduces(trace),
        }
    }
}

impl crate::replay::transitions::Covered for SessionTrace {
    fn group(&self) -> crate::replay::transitions::Group {
        match self {
            SessionTrace::Relay(trace) => trace.group(),
            SessionTrace::Token(trace) => trace.group(),
        }
    }

    fn transitions(&self) -> std::collections::BTreeSet<String> {
        match self {
            SessionTrace::Relay(trace) => trace.transitions(),
            SessionTrace::Token(trace) => trace.transitions(),
        }
    }

    fn reachable(&self) -> std::collections::BTreeSet<String> {
        match self {
            SessionTrace::Relay(trace) => trace.reachable(),
            SessionTrace::Token(trace) => trace.reachable(),
        }
    }
}

pub enum Session {
    /// A locked log shared by every trace of the run: `memory` or `sqlite`.
    Log {
        store: Arc<dyn OpStore>,
        name: &'static str,
        sqlite_file: Option<PathBuf>,
    },
    Dynamodb(Arc<DynamoContext>),
    Token(Arc<TokenContext>),
}

impl Session {
    pub async fn open(target: &Target) -> Result<Session, String> {
        Self::open_with(target, StoreConfig::default()).await
    }

    /// Opens the target; an error is one line naming what is missing or unreachable.
    pub async fn open_with(target: &Target, config: StoreConfig) -> Result<Session, String> {
        match target {
            Target::Memory => Ok(Session::Log {
                store: Arc::new(MemoryStore::new()),
                name: "memory",
                sqlite_file: None,
            }),
            Target::Sqlite => {
                use std::sync::atomic::{AtomicU64, Ordering};
                static NEXT: AtomicU64 = AtomicU64::new(0);
                let file = std::env::temp_dir().join(format!(
                    "oncecheck-replay-{}-{}.sqlite",
                    std::process::id(),
                    NEXT.fetch_add(1, Ordering::Relaxed)
                ));
                let store = SqliteStore::open(&file.to_string_lossy())
                    .await
                    .map_err(|error| {
                        format!("cannot open SQLite at {}: {error}", file.display())
                    })?;
                Ok(Session::Log {
                    store: Arc::new(store),
                    name: "sqlite",
                    sqlite_file: Some(file),
                })
            }
            Target::TokenedDynamodb(url) => {
                let upstream = endpoint_of("tokened-dynamodb", url)?;
                let template = checked_template(&upstream).await?;
                Ok(Session::Token(Arc::new(TokenContext {
                    upstream,
                    target: target.to_string(),
                    token_table: true,
                    template,
                })))
            }
            Target::MiddlewareSqlite | Target::MiddlewarePostgres(_) => Err(format!(
                "target `{target}` replays idempotency traces (crate::replay::middleware::target)"
            )),
            Target::Dynamodb(url) => {
                let upstream = endpoint_of("dynamodb", url)?;
                let template = checked_template(&upstream).await?;
                Ok(Session::Dynamodb(Arc::new(DynamoContext {
                    upstream,
                    template,
                    target: target.to_string(),
                    config,
                })))
            }
        }
    }

    fn target_name(&self) -> &str {
        match self {
            Session::Log { name, .. } => name,
            Session::Dynamodb(context) => &context.target,
            Session::Token(context) => &context.target,
        }
    }

    /// Reads a trace of the model this session's target serves.
    pub fn load(&self, file: &Path) -> Result<SessionTrace, ReplayError> {
        match self {
            Session::Token(_) => {
                load_for::<TokenModel>(file, self.target_name()).map(SessionTrace::Token)
            }
            _ => load_for::<RelayModel>(file, self.target_name()).map(SessionTrace::Relay),
        }
    }

    /// Replays one loaded trace on a stream (and, on DynamoDB, a table and proxy) of its own.
    pub async fn replay(
        &self,
        file: &Path,
        trace: &SessionTrace,
    ) -> Result<ReplayStats, ReplayError> {
        match (self, trace) {
            (Session::Log { store, name, .. }, SessionTrace::Relay(trace)) => {
                drive(
                    file,
                    trace,
                    LogTarget::new(store.clone(), name, fresh_stream(file)),
                )
                .await
            }
            (Session::Dynamodb(context), SessionTrace::Relay(trace)) => {
                drive(file, trace, DynamoTarget::new(context.clone(), file)).await
            }
            (Session::Token(context), SessionTrace::Token(trace)) => {
                drive(file, trace, TokenTarget::new(context.clone())).await
            }
            // `load` answers the trace of the session's own model.
            _ => unreachable!("a trace loaded by another session"),
        }
    }

    /// Loads and replays one file.
    pub async fn replay_file(&self, file: &Path) -> Result<ReplayStats, ReplayError> {
        let trace = self.load(file)?;
        self.replay(file, &trace).await
    }

    pub async fn close(self) {
        if let Session::Log {
            store,
            sqlite_file: Some(file),
            ..
        } = self
        {
            drop(store);
            for suffix in ["", "-wal", "-shm"] {
                let _ = std::fs::remove_file(format!("{}{suffix}", file.display()));
            }
        }
    }
}

/// The endpoint of a DynamoDB target: the URL given, or ONCECHECK_DDB_ENDPOINT.
fn endpoint_of(kind: &str, url: &Option<String>) -> Result<String, String> {
    let upstream = match url {
        Some(url) => url.clone(),
        None => std::env::var("ONCECHECK_DDB_ENDPOINT").map_err(|_| {
            format!("no endpoint: pass --target {kind}=URL or set ONCECHECK_DDB_ENDPOINT")
        })?,
    };
    crate::replay::driver::check_endpoint(&upstream)?;
    Ok(upstream)
}

/// Fails early, with the endpoint named, when the server is not there (through a proxy, as every
/// request of a replay); answers the template every actor's client is derived from, its
/// endpoint replaced by a proxy listener's for each actor.
async fn checked_template(upstream: &str) -> Result<aws_sdk_dynamodb::Client, String> {
    let proxy = Proxy::start(upstream, 1)
        .await
        .map_err(|error| format!("DynamoDB at {upstream}: {error}"))?;
    proxy
        .check_upstream()
        .await
        .map_err(|error| format!("DynamoDB at {upstream} does not answer: {error}"))?;
    Ok(
        DynamoDbStore::connect("template", Some(&proxy.set_up_endpoint()))
            .await
            .client()
            .clone(),
    )
}

impl ReplaySession for Session {
    type Trace = SessionTrace;

    fn load(&self, file: &Path) -> Result<SessionTrace, ReplayError> {
        Session::load(self, file)
    }

    async fn replay(&self, file: &Path, trace: &SessionTrace) -> Result<ReplayStats, ReplayError> {
        Session::replay(self, file, trace).await
    }

    async fn close(self) {
        Session::close(self).await
    }

    fn reproduction(&self, trace: &SessionTrace) -> Option<String> {
        trace.reproduction()
    }
}
