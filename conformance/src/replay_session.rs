//! What one `oncecheck replay` run keeps across its traces: the store of a logical target, or
//! the DynamoDB table and a direct client for set-up.
//!
//! Invariant: every trace replays on a stream of its own (`replay::fresh_stream`), so traces never
//! see each other's items, whichever target they share.

use crate::replay::{ReplayError, ReplayStats, Target};
use crate::replay_dynamodb::{DynamoContext, StoreConfig};
use crate::traces::Loaded;
use oncecheck_store::{DynamoDbStore, MemoryStore, OpStore, SqliteStore};
use std::path::{Path, PathBuf};

pub struct Session {
    memory: Option<MemoryStore>,
    sqlite: Option<(SqliteStore, PathBuf)>,
    dynamo: Option<DynamoContext>,
    target: Target,
}

impl Session {
    pub async fn open(target: &Target) -> Result<Session, String> {
        Self::open_with(target, StoreConfig::default()).await
    }

    pub async fn open_with(target: &Target, config: StoreConfig) -> Result<Session, String> {
        let mut session = Session { memory: None, sqlite: None, dynamo: None, target: target.clone() };
        match target {
            Target::Memory => session.memory = Some(MemoryStore::new()),
            Target::Sqlite => {
                let file = std::env::temp_dir().join(format!("oncecheck-replay-{}.sqlite", std::process::id()));
                let store = SqliteStore::open(&file.to_string_lossy()).await.map_err(|error| error.to_string())?;
                session.sqlite = Some((store, file));
            }
            Target::Dynamodb(url) => {
                let upstream = match url {
                    Some(url) => url.clone(),
                    None => std::env::var("ONCECHECK_DDB_ENDPOINT")
                        .map_err(|_| "no endpoint: pass --target dynamodb=URL or set ONCECHECK_DDB_ENDPOINT".to_string())?,
                };
                // Fail early, with the endpoint named, when the server is not there.
                let probe = DynamoDbStore::connect("oncecheck-replay-probe", Some(&upstream)).await;
                probe
                    .client()
                    .list_tables()
                    .limit(1)
                    .send()
                    .await
                    .map_err(|error| format!("DynamoDB at {upstream} does not answer: {error:?}"))?;
                session.dynamo = Some(DynamoContext { upstream, config });
            }
        }
        Ok(session)
    }

    pub fn logical_store(&self) -> &dyn OpStore {
        match (&self.memory, &self.sqlite) {
            (Some(memory), _) => memory,
            (_, Some((sqlite, _))) => sqlite,
            _ => panic!("a logical store is asked for only on a memory or sqlite target"),
        }
    }

    pub async fn replay_dynamodb(&mut self, file: &Path) -> Result<ReplayStats, ReplayError> {
        let loaded = crate::traces::load(file).map_err(ReplayError::Load)?;
        let context = self.dynamo.as_ref().expect("a dynamodb session has a context");
        match &loaded {
            Loaded::Relay(trace) => crate::replay_dynamodb::replay(file, trace, context, &self.target).await,
        }
    }

    pub async fn close(self) {
        if let Some((store, file)) = self.sqlite {
            drop(store);
            for suffix in ["", "-wal", "-shm"] {
                let _ = std::fs::remove_file(format!("{}{suffix}", file.display()));
            }
        }
    }
}
