//! What one `oncecheck replay` run keeps across its traces, and which target replays a trace:
//! the store of a logical target (memory, SQLite), or the DynamoDB server and the store
//! configuration.
//!
//! Invariants: every trace replays on a stream of its own (`replay::fresh_stream`), and on
//! DynamoDB on a table and a proxy of its own, so traces never see each other's items and can
//! run concurrently whichever target they share; a session is opened only against a server that
//! answered.

use crate::proxy::Proxy;
use crate::replay::{drive, fresh_stream, load_for, ReplayError, ReplayStats, Target};
use crate::replay_command::ReplaySession;
use crate::replay_dynamodb::{DynamoContext, DynamoTarget, StoreConfig};
use crate::replay_log::LogTarget;
use oncecheck_model::relay::RelayModel;
use oncecheck_model::trace::LoadedTrace;
use oncecheck_store::{DynamoDbStore, MemoryStore, OpStore, SqliteStore};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A trace loaded for this session's target.
pub type SessionTrace = LoadedTrace<RelayModel>;

pub enum Session {
    /// A locked log shared by every trace of the run: `memory` or `sqlite`.
    Log {
        store: Arc<dyn OpStore>,
        name: &'static str,
        sqlite_file: Option<PathBuf>,
    },
    Dynamodb(Arc<DynamoContext>),
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
            Target::MiddlewareSqlite | Target::MiddlewarePostgres(_) => Err(format!(
                "target `{target}` replays idempotency traces (crate::replay_middleware::target)"
            )),
            Target::Dynamodb(url) => {
                let upstream = match url {
                    Some(url) => url.clone(),
                    None => std::env::var("ONCECHECK_DDB_ENDPOINT").map_err(|_| {
                        "no endpoint: pass --target dynamodb=URL or set ONCECHECK_DDB_ENDPOINT"
                            .to_string()
                    })?,
                };
                crate::replay::check_endpoint(&upstream)?;
                // Fail early, with the endpoint named, when the server is not there; through a
                // proxy, as every request of a replay.
                let proxy = Proxy::start(&upstream, 1)
                    .await
                    .map_err(|error| format!("DynamoDB at {upstream}: {error}"))?;
                proxy
                    .check_upstream()
                    .await
                    .map_err(|error| format!("DynamoDB at {upstream} does not answer: {error}"))?;
                // The template every actor's client is derived from; its endpoint is replaced by
                // a proxy listener's for each actor.
                let template = DynamoDbStore::connect("template", Some(&proxy.set_up_endpoint()))
                    .await
                    .client()
                    .clone();
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
        }
    }

    /// Reads a trace of the model this session's target serves.
    pub fn load(&self, file: &Path) -> Result<SessionTrace, ReplayError> {
        load_for::<RelayModel>(file, self.target_name())
    }

    /// Replays one loaded trace on a stream (and, on DynamoDB, a table and proxy) of its own.
    pub async fn replay(
        &self,
        file: &Path,
        trace: &SessionTrace,
    ) -> Result<ReplayStats, ReplayError> {
        match self {
            Session::Log { store, name, .. } => {
                drive(
                    file,
                    trace,
                    LogTarget::new(store.clone(), name, fresh_stream(file)),
                )
                .await
            }
            Session::Dynamodb(context) => {
                drive(file, trace, DynamoTarget::new(context.clone(), file)).await
            }
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
}
