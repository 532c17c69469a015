//! The write journal: one row per intent, on SQLite, written before the first submission.
//!
//! Invariants: an intent's row (token, the exact request, the first-submission time) is durable
//! (WAL, `synchronous = FULL`) before the request is sent, so a write that could not be journaled
//! is never sent; the token is the primary key, so one token names one request for ever; the
//! request text is never updated; a row's outcome goes from open (NULL) to one final outcome and
//! never changes again (`finish` matches only open rows).

use std::path::Path;
use std::str::FromStr;

use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use sqlx::Row;

/// The journal cannot be opened, read or written.
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    #[error("journal {path}: cannot open: {source}")]
    Open { path: String, source: sqlx::Error },
    #[error("journal: cannot write: {0}")]
    Write(sqlx::Error),
    #[error("journal: cannot read: {0}")]
    Read(sqlx::Error),
    #[error("journal: token {token} already names a journaled intent")]
    TokenTaken { token: String },
    #[error("journal: no intent with token {token}")]
    Unknown { token: String },
    #[error("journal: intent {token} already ended ({outcome}); nothing was changed")]
    AlreadyFinished { token: String, outcome: String },
    /// The row is not as this client writes it (edited or damaged on disk): resending it could
    /// apply a write under a token it was never journaled with.
    #[error("journal: intent {token} is not as it was written: {detail}; nothing was sent")]
    Inconsistent { token: String, detail: String },
}

/// One intent as the journal holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub token: String,
    /// The exact TransactWriteItems request, as DynamoDB's JSON (see `wire`).
    pub request: String,
    /// The receipt item's table and key as JSON, when the intent carries a receipt.
    pub receipt: Option<String>,
    /// When the first submission was made (recorded just before it), ms since the epoch: the
    /// start of the window.
    pub first_sent_at_millis: i64,
    /// Submissions made so far (recorded before each resend).
    pub attempts: u32,
    /// The final outcome, `None` while the intent is open.
    pub outcome: Option<String>,
    pub detail: Option<String>,
    pub finished_at_millis: Option<i64>,
}

/// The SQLite journal. Cloning shares the pool.
#[derive(Clone, Debug)]
pub struct Journal {
    pool: SqlitePool,
}

const SCHEMA: &str = "CREATE TABLE IF NOT EXISTS intents (
    token TEXT PRIMARY KEY NOT NULL,
    request TEXT NOT NULL,
    receipt TEXT,
    first_sent_at_millis INTEGER NOT NULL,
    attempts INTEGER NOT NULL,
    outcome TEXT,
    detail TEXT,
    finished_at_millis INTEGER
)";

impl Journal {
    /// Opens (creating if needed) the journal file at `path`.
    pub async fn open(path: &Path) -> Result<Journal, JournalError> {
        let display = path.display().to_string();
        let opened = async {
            let options = SqliteConnectOptions::from_str(&format!("sqlite://{display}"))?
                .create_if_missing(true)
                .journal_mode(SqliteJournalMode::Wal)
                // FULL: the row survives a power loss once `record_intent` returns, which is the
                // promise the client builds on.
                .synchronous(SqliteSynchronous::Full)
                .busy_timeout(std::time::Duration::from_secs(5));
            let pool = SqlitePoolOptions::new()
                .max_connections(4)
                .connect_with(options)
                .await?;
            sqlx::query(SCHEMA).execute(&pool).await?;
            Ok::<_, sqlx::Error>(pool)
        };
        let pool = opened.await.map_err(|source| JournalError::Open {
            path: display,
            source,
        })?;
        Ok(Journal { pool })
    }

    /// Records a new intent, open, with its first submission about to be made.
    pub async fn record_intent(
        &self,
        token: &str,
        request: &str,
        receipt: Option<&str>,
        first_sent_at_millis: i64,
    ) -> Result<(), JournalError> {
        let inserted = sqlx::query(
            "INSERT INTO intents (token, request, receipt, first_sent_at_millis, attempts) \
             VALUES (?1, ?2, ?3, ?4, 1) ON CONFLICT (token) DO NOTHING",
        )
        .bind(token)
        .bind(request)
        .bind(receipt)
        .bind(first_sent_at_millis)
        .execute(&self.pool)
        .await
        .map_err(JournalError::Write)?;
        if inserted.rows_affected() == 0 {
            return Err(JournalError::TokenTaken {
                token: token.to_owned(),
            });
        }
        Ok(())
    }

    /// Records that submission number `attempts` is about to be made.
    pub async fn record_attempt(&self, token: &str, attempts: u32) -> Result<(), JournalError> {
        let updated =
            sqlx::query("UPDATE intents SET attempts = ?2 WHERE token = ?1 AND outcome IS NULL")
                .bind(token)
                .bind(attempts)
                .execute(&self.pool)
                .await
                .map_err(JournalError::Write)?;
        self.one_open_row(token, updated.rows_affected()).await
    }

    /// Ends an open intent with its final outcome.
    pub async fn finish(
        &self,
        token: &str,
        outcome: &str,
        detail: &str,
        finished_at_millis: i64,
    ) -> Result<(), JournalError> {
        let updated = sqlx::query(
            "UPDATE intents SET outcome = ?2, detail = ?3, finished_at_millis = ?4 \
             WHERE token = ?1 AND outcome IS NULL",
        )
        .bind(token)
        .bind(outcome)
        .bind(detail)
        .bind(finished_at_millis)
        .execute(&self.pool)
        .await
        .map_err(JournalError::Write)?;
        self.one_open_row(token, updated.rows_affected()).await
    }

    async fn one_open_row(&self, token: &str, rows: u64) -> Result<(), JournalError> {
        if rows == 1 {
            return Ok(());
        }
        match self.entry(token).await? {
            Some(Entry {
                outcome: Some(outcome),
                ..
            }) => Err(JournalError::AlreadyFinished {
                token: token.to_owned(),
                outcome,
            }),
            _ => Err(JournalError::Unknown {
                token: token.to_owned(),
            }),
        }
    }

    /// The intent named by `token`.
    pub async fn entry(&self, token: &str) -> Result<Option<Entry>, JournalError> {
        let row = sqlx::query("SELECT * FROM intents WHERE token = ?1")
            .bind(token)
            .fetch_optional(&self.pool)
            .await
            .map_err(JournalError::Read)?;
        row.map(|row| entry_of(&row)).transpose()
    }

    /// The intents still open (no final outcome), oldest first: what a restarted process resumes.
    pub async fn open_entries(&self) -> Result<Vec<Entry>, JournalError> {
        let rows = sqlx::query(
            "SELECT * FROM intents WHERE outcome IS NULL ORDER BY first_sent_at_millis, token",
        )
        .fetch_all(&self.pool)
        .await
        .map_err(JournalError::Read)?;
        rows.iter().map(entry_of).collect()
    }
}

fn entry_of(row: &sqlx::sqlite::SqliteRow) -> Result<Entry, JournalError> {
    let read = || -> Result<Entry, sqlx::Error> {
        Ok(Entry {
            token: row.try_get("token")?,
            request: row.try_get("request")?,
            receipt: row.try_get("receipt")?,
            first_sent_at_millis: row.try_get("first_sent_at_millis")?,
            attempts: row.try_get("attempts")?,
            outcome: row.try_get("outcome")?,
            detail: row.try_get("detail")?,
            finished_at_millis: row.try_get("finished_at_millis")?,
        })
    };
    read().map_err(JournalError::Read)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_intent_is_recorded_once_and_finished_once() {
        let directory = tempfile::tempdir().unwrap();
        let journal = Journal::open(&directory.path().join("journal.sqlite"))
            .await
            .unwrap();
        journal
            .record_intent("t1", "{}", None, 1_000)
            .await
            .unwrap();
        assert!(matches!(
            journal
                .record_intent("t1", "{\"other\":1}", None, 2_000)
                .await,
            Err(JournalError::TokenTaken { .. })
        ));
        journal.record_attempt("t1", 2).await.unwrap();
        assert_eq!(journal.open_entries().await.unwrap().len(), 1);
        journal.finish("t1", "applied", "", 3_000).await.unwrap();
        assert!(matches!(
            journal.finish("t1", "cancelled", "", 4_000).await,
            Err(JournalError::AlreadyFinished { .. })
        ));
        assert!(matches!(
            journal.record_attempt("t9", 2).await,
            Err(JournalError::Unknown { .. })
        ));
        let entry = journal.entry("t1").await.unwrap().unwrap();
        assert_eq!(entry.request, "{}", "the first request stays");
        assert_eq!(entry.attempts, 2);
        assert_eq!(entry.outcome.as_deref(), Some("applied"));
        assert_eq!(entry.finished_at_millis, Some(3_000));
        assert!(journal.open_entries().await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn a_journal_in_a_missing_directory_is_an_open_error() {
        let directory = tempfile::tempdir().unwrap();
        let path = directory.path().join("missing").join("journal.sqlite");
        assert!(matches!(
            Journal::open(&path).await,
            Err(JournalError::Open { .. })
        ));
    }
}
