//! What one `oncecheck replay` run keeps across its traces, one session type per target family:
//! `RelaySession` (the store of a logical target — memory, SQLite — or the DynamoDB server and
//! the store configuration), `TokenSession` (the DynamoDB server the reliable-write client
//! writes to through the proxy's token table), and the middleware's `MiddlewareSession`
//! (`replay/middleware/target.rs`). [`open`] is the one front door: it opens the family the
//! run's configuration names (`flags::ReplayFlags::configure` decided it from `--target`).
//!
//! Invariants: every trace replays on a stream of its own (`driver::fresh_stream`), and on
//! DynamoDB on a table and a proxy of its own, so traces never see each other's items and can
//! run concurrently whichever target they share; a session is opened only against a server that
//! answered; a session loads only traces of its family's model, so it replays every trace it
//! loaded.

use crate::proxy::Proxy;
use crate::replay::driver::{drive, fresh_stream, load_for, ReplayError, ReplayStats, Target};
use crate::replay::dynamodb::{DynamoContext, DynamoTarget, StoreConfig};
use crate::replay::flags::TargetConfig;
use crate::replay::log::LogTarget;
use crate::replay::middleware::target::MiddlewareSession;
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

/// The session of a run, of the family its target belongs to.
pub enum Session {
    Relay(RelaySession),
    Token(TokenSession),
    Middleware(MiddlewareSession),
}

/// Opens the run's target, of the family its configuration names; an error is one line naming
/// what is missing or unreachable.
pub async fn open(target: &Target, config: TargetConfig) -> Result<Session, String> {
    match config {
        TargetConfig::Relay(config) => RelaySession::open(target, config).await.map(Session::Relay),
        TargetConfig::Token => TokenSession::open(target).await.map(Session::Token),
        TargetConfig::Middleware(config) => MiddlewareSession::open(target, config)
            .await
            .map(Session::Middleware),
    }
}

/// The relay family: `memory`, `sqlite`, `dynamodb[=URL]`.
pub enum RelaySession {
    /// A locked log shared by every trace of the run: `memory` or `sqlite`.
    Log {
        store: Arc<dyn OpStore>,
        name: &'static str,
        sqlite_file: Option<PathBuf>,
    },
    Dynamodb(Arc<DynamoContext>),
}

impl RelaySession {
    /// Opens a relay target with the store configuration of `--store-variant`,
    /// `--store-mutation` and `--lose-by`.
    pub async fn open(target: &Target, config: StoreConfig) -> Result<RelaySession, String> {
        match target {
            Target::Memory => Ok(RelaySession::Log {
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
                Ok(RelaySession::Log {
                    store: Arc::new(store),
                    name: "sqlite",
                    sqlite_file: Some(file),
                })
            }
            Target::Dynamodb(url) => {
                let upstream = endpoint_of("dynamodb", url)?;
                let template = checked_template(&upstream).await?;
                Ok(RelaySession::Dynamodb(Arc::new(DynamoContext {
                    upstream,
                    template,
                    target: target.to_string(),
                    config,
                })))
            }
            other => Err(format!("target `{other}` does not replay relay traces")),
        }
    }

    fn target_name(&self) -> &str {
        match self {
            RelaySession::Log { name, .. } => name,
            RelaySession::Dynamodb(context) => &context.target,
        }
    }
}

impl ReplaySession for RelaySession {
    type Trace = LoadedTrace<RelayModel>;

    fn load(&self, file: &Path) -> Result<Self::Trace, ReplayError> {
        load_for::<RelayModel>(file, self.target_name())
    }

    /// Replays one trace on a stream (and, on DynamoDB, a table and proxy) of its own.
    async fn replay(&self, file: &Path, trace: &Self::Trace) -> Result<ReplayStats, ReplayError> {
        match self {
            RelaySession::Log { store, name, .. } => {
                drive(
                    file,
                    trace,
                    LogTarget::new(store.clone(), name, fresh_stream(file)),
                )
                .await
            }
            RelaySession::Dynamodb(context) => {
                drive(file, trace, DynamoTarget::new(context.clone(), file)).await
            }
        }
    }

    async fn close(self) {
        if let RelaySession::Log {
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

/// The token family: `tokened-dynamodb[=URL]`, token-model traces on the reliable-write client
/// through the proxy's token table.
pub struct TokenSession(pub Arc<TokenContext>);

impl TokenSession {
    pub async fn open(target: &Target) -> Result<TokenSession, String> {
        let Target::TokenedDynamodb(url) = target else {
            return Err(format!("target `{target}` does not replay token traces"));
        };
        let upstream = endpoint_of("tokened-dynamodb", url)?;
        let template = checked_template(&upstream).await?;
        Ok(TokenSession(Arc::new(TokenContext {
            upstream,
            target: target.to_string(),
            token_table: true,
            template,
        })))
    }
}

impl ReplaySession for TokenSession {
    type Trace = LoadedTrace<TokenModel>;

    fn load(&self, file: &Path) -> Result<Self::Trace, ReplayError> {
        load_for::<TokenModel>(file, &self.0.target)
    }

    async fn replay(&self, file: &Path, trace: &Self::Trace) -> Result<ReplayStats, ReplayError> {
        drive(file, trace, TokenTarget::new(self.0.clone())).await
    }

    async fn close(self) {}

    /// A counterexample of the token model reproduced on the real table.
    fn reproduction(&self, trace: &Self::Trace) -> Option<String> {
        crate::replay::token::reproduces(trace)
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
