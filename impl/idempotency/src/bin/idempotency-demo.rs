//! A demo: POST /transfers moves an amount between two accounts in a SQLite database, behind
//! the Idempotency-Key layer whose cache lives in the same database. Try it with curl:
//!
//! ```text
//! cargo run -p oncecheck-idempotency --features demo --bin idempotency-demo -- --listen 127.0.0.1:3000
//! curl -i -X POST localhost:3000/transfers -H 'Idempotency-Key: t-1' -H 'Authorization: Bearer alice' \
//!      -H 'content-type: application/json' -d '{"from":"alice","to":"bob","amount":5}'
//! # the same again: a replay (idempotency-replayed: true), the money moved once
//! curl localhost:3000/accounts
//! ```
//!
//! The bearer token stands in for authentication: it becomes the request's `Principal`, so two
//! callers using the same key never see each other's responses.

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use oncecheck_idempotency::store::SqliteStore;
use oncecheck_idempotency::{IdempotencyLayer, Principal};
use serde::Deserialize;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions};

#[derive(Deserialize)]
struct Transfer {
    from: String,
    to: String,
    amount: i64,
}

fn argument(name: &str, default: &str) -> String {
    let arguments: Vec<String> = std::env::args().collect();
    arguments
        .iter()
        .position(|argument| argument == name)
        .and_then(|index| arguments.get(index + 1).cloned())
        .unwrap_or_else(|| default.to_string())
}

async fn transfer(State(pool): State<SqlitePool>, Json(transfer): Json<Transfer>) -> Response {
    if transfer.amount <= 0 || transfer.from == transfer.to {
        return (
            StatusCode::UNPROCESSABLE_ENTITY,
            "amount must be positive between two accounts",
        )
            .into_response();
    }
    let result: Result<Response, sqlx::Error> = async {
        let mut transaction = pool.begin().await?;
        let debited = sqlx::query("UPDATE accounts SET balance = balance - $1 WHERE id = $2 AND balance >= $1")
            .bind(transfer.amount)
            .bind(&transfer.from)
            .execute(&mut *transaction)
            .await?;
        if debited.rows_affected() == 0 {
            return Ok((StatusCode::CONFLICT, "unknown account or insufficient funds").into_response());
        }
        let credited = sqlx::query("UPDATE accounts SET balance = balance + $1 WHERE id = $2")
            .bind(transfer.amount)
            .bind(&transfer.to)
            .execute(&mut *transaction)
            .await?;
        if credited.rows_affected() == 0 {
            return Ok((StatusCode::NOT_FOUND, "unknown destination account").into_response());
        }
        transaction.commit().await?;
        let body = serde_json::json!({"from": transfer.from, "to": transfer.to, "amount": transfer.amount, "status": "moved"});
        Ok((StatusCode::CREATED, Json(body)).into_response())
    }
    .await;
    result.unwrap_or_else(|error| {
        (StatusCode::INTERNAL_SERVER_ERROR, error.to_string()).into_response()
    })
}

async fn accounts(State(pool): State<SqlitePool>) -> Response {
    match sqlx::query_as::<_, (String, i64)>("SELECT id, balance FROM accounts ORDER BY id")
        .fetch_all(&pool)
        .await
    {
        Ok(rows) => Json(
            rows.into_iter()
                .collect::<std::collections::BTreeMap<_, _>>(),
        )
        .into_response(),
        Err(error) => (StatusCode::INTERNAL_SERVER_ERROR, error.to_string()).into_response(),
    }
}

/// Stand-in authentication: `Authorization: Bearer NAME` makes NAME the principal.
async fn authenticate(mut request: Request, next: Next) -> Response {
    let principal = request
        .headers()
        .get("authorization")
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "))
        .map(str::to_string);
    if let Some(principal) = principal {
        request.extensions_mut().insert(Principal(principal));
    }
    next.run(request).await
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let database = argument("--database", "idempotency-demo.db");
    let listen = argument("--listen", "127.0.0.1:3000");
    let options = SqliteConnectOptions::new()
        .filename(&database)
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal);
    let pool = SqlitePoolOptions::new()
        .max_connections(4)
        .connect_with(options)
        .await?;
    sqlx::raw_sql(
        "CREATE TABLE IF NOT EXISTS accounts (id TEXT PRIMARY KEY, balance INTEGER NOT NULL CHECK (balance >= 0));
         INSERT OR IGNORE INTO accounts (id, balance) VALUES ('alice', 100), ('bob', 100);",
    )
    .execute(&pool)
    .await?;
    let store = SqliteStore::new(pool.clone());
    store.migrate().await?;
    let app = Router::new()
        .route("/transfers", post(transfer))
        .route("/accounts", get(accounts))
        .with_state(pool)
        .layer(IdempotencyLayer::builder(store).build())
        // Outermost, so it runs first and the principal is there when the cache key is built.
        .layer(axum::middleware::from_fn(authenticate));
    let listener = tokio::net::TcpListener::bind(&listen).await?;
    println!(
        "idempotency-demo on http://{listen} (database {database}); POST /transfers, GET /accounts"
    );
    axum::serve(listener, app).await?;
    Ok(())
}
