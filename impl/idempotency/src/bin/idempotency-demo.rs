//! A demo: POST /transfers moves an amount between two accounts, behind the Idempotency-Key
//! layer whose cache lives in the same database, PostgreSQL or SQLite. Try it with curl:
//!
//! ```text
//! cargo run -p oncecheck-idempotency --features demo --bin idempotency-demo -- \
//!     --database-url sqlite:idempotency-demo.db --listen 127.0.0.1:3000
//! # or --database-url postgres://user@127.0.0.1:5432/dbname
//! curl -i -X POST localhost:3000/transfers -H 'Idempotency-Key: t-1' -H 'Authorization: Bearer alice' \
//!      -H 'content-type: application/json' -d '{"from":"alice","to":"bob","amount":5}'
//! # the same again: a replay (idempotency-replayed: true), the money moved once
//! curl localhost:3000/accounts
//! ```
//!
//! A transfer's effects (the two account updates) run in the request's effect transaction and
//! commit together with its cached response (atomic effects): an outage between the transfer
//! and the finalize can no longer make a retry move the money twice.
//!
//! The bearer token stands in for authentication: it becomes the request's `Principal`, so two
//! callers using the same key never see each other's responses. A request without an
//! `Authorization` header is anonymous; one whose credentials are malformed (another scheme, an
//! empty or non-token68 token) is answered 401 and never reaches the layer or the handler.
//!
//! Routing runs before the layer (`route_layer`): an unknown route is 404 and a wrong method 405,
//! whether or not the request carries a key.
//!
//! The first line on stdout is `listening on http://ADDRESS` (with the port the OS chose for
//! `--listen 127.0.0.1:0`). Bad arguments exit 2 with one line on stderr.

use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use clap::Parser;
use oncecheck_idempotency::store::{PostgresEffect, PostgresStore, SqliteEffect, SqliteStore};
use oncecheck_idempotency::{EffectScope, IdempotencyLayer, Principal};
use serde::Deserialize;
use sqlx::postgres::{PgPool, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions};
use std::str::FromStr;

#[derive(Parser)]
#[command(about = "POST /transfers behind the Idempotency-Key layer; GET /accounts")]
struct Arguments {
    /// `postgres://user@host:port/database` or `sqlite:PATH` (created if missing).
    #[arg(long, default_value = "sqlite:idempotency-demo.db")]
    database_url: String,
    /// Address to listen on; port 0 picks a free one (printed on the first line).
    #[arg(long, default_value = "127.0.0.1:3000")]
    listen: String,
}

#[derive(Deserialize)]
struct Transfer {
    from: String,
    to: String,
    amount: i64,
}

/// The schema and the two accounts, in SQL both databases accept.
const SETUP_SQL: &str = "
CREATE TABLE IF NOT EXISTS accounts (id TEXT PRIMARY KEY, balance BIGINT NOT NULL CHECK (balance >= 0));
INSERT INTO accounts (id, balance) VALUES ('alice', 100), ('bob', 100) ON CONFLICT (id) DO NOTHING;";
const DEBIT_SQL: &str =
    "UPDATE accounts SET balance = balance - $1 WHERE id = $2 AND balance >= $1";
const CREDIT_SQL: &str = "UPDATE accounts SET balance = balance + $1 WHERE id = $2";
const ACCOUNTS_SQL: &str = "SELECT id, balance FROM accounts ORDER BY id";

/// One application over either database: the handlers and the layer's store share its pool.
macro_rules! demo_app {
    ($pool_type:ty, $store:ident, $effect:ty) => {
        /// The transfer's two updates run in the request's effect transaction and are not
        /// committed here: the layer commits them with the cached 201, or rolls them back.
        async fn transfer(
            Extension(effects): Extension<EffectScope<$effect>>,
            Json(transfer): Json<Transfer>,
        ) -> Response {
            if transfer.amount <= 0 || transfer.from == transfer.to {
                return (StatusCode::UNPROCESSABLE_ENTITY, "amount must be positive between two accounts")
                    .into_response();
            }
            let result: Result<Response, Box<dyn std::error::Error + Send + Sync>> = async {
                let mut transaction = effects.transaction().await?;
                let debited =
                    sqlx::query(DEBIT_SQL).bind(transfer.amount).bind(&transfer.from).execute(&mut **transaction).await?;
                if debited.rows_affected() == 0 {
                    return Ok((StatusCode::CONFLICT, "unknown account or insufficient funds").into_response());
                }
                let credited =
                    sqlx::query(CREDIT_SQL).bind(transfer.amount).bind(&transfer.to).execute(&mut **transaction).await?;
                if credited.rows_affected() == 0 {
                    return Ok((StatusCode::NOT_FOUND, "unknown destination account").into_response());
                }
                let body = serde_json::json!({
                    "from": transfer.from, "to": transfer.to, "amount": transfer.amount, "status": "moved"
                });
                Ok((StatusCode::CREATED, Json(body)).into_response())
            }
            .await;
            result.unwrap_or_else(|error| {
                tracing::error!(%error, "transfer failed");
                (StatusCode::INTERNAL_SERVER_ERROR, "the transfer failed; see the server log").into_response()
            })
        }

        async fn accounts(State(pool): State<$pool_type>) -> Response {
            match sqlx::query_as::<_, (String, i64)>(ACCOUNTS_SQL).fetch_all(&pool).await {
                Ok(rows) => Json(rows.into_iter().collect::<std::collections::BTreeMap<_, _>>()).into_response(),
                Err(error) => {
                    tracing::error!(%error, "reading accounts failed");
                    (StatusCode::INTERNAL_SERVER_ERROR, "reading accounts failed").into_response()
                }
            }
        }

        pub async fn app(pool: $pool_type) -> Result<Router, Box<dyn std::error::Error>> {
            sqlx::raw_sql(SETUP_SQL).execute(&pool).await?;
            let store = $store::new(pool.clone());
            store.migrate().await?;
            Ok(Router::new()
                .route("/transfers", post(transfer))
                .route("/accounts", get(accounts))
                .with_state(pool)
                // route_layer: only requests that matched a route reach the layer, so an unknown
                // route is 404 (not 400 missing-key) and a wrong method 405.
                .route_layer(IdempotencyLayer::builder(store).build())
                // Outermost, so it runs first and the principal is there when the cache key is built.
                .layer(axum::middleware::from_fn(authenticate)))
        }
    };
}

mod postgres {
    use super::*;
    demo_app!(PgPool, PostgresStore, PostgresEffect);
}

mod sqlite {
    use super::*;
    demo_app!(SqlitePool, SqliteStore, SqliteEffect);
}

/// What the `Authorization` header says about the caller.
#[derive(Debug, PartialEq, Eq)]
enum Credentials {
    Anonymous,
    Bearer(String),
    Malformed(&'static str),
}

/// `Bearer <token68>` (RFC 6750 section 2.1; the scheme is case-insensitive); no header is
/// anonymous; anything else is malformed. An empty token never falls back to anonymous.
fn credentials(header: Option<&HeaderValue>) -> Credentials {
    let Some(header) = header else {
        return Credentials::Anonymous;
    };
    let Ok(text) = header.to_str() else {
        return Credentials::Malformed("the Authorization header is not ASCII");
    };
    let Some((scheme, token)) = text.split_once(' ') else {
        return Credentials::Malformed("expected `Authorization: Bearer <token>`");
    };
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Credentials::Malformed("only the Bearer scheme is accepted");
    }
    let token = token.trim_matches(' ');
    let body = token.trim_end_matches('=');
    let token68 = |byte: u8| byte.is_ascii_alphanumeric() || b"-._~+/".contains(&byte);
    if body.is_empty() || !body.bytes().all(token68) {
        return Credentials::Malformed("the bearer token is empty or not a token68 string");
    }
    Credentials::Bearer(token.to_string())
}

fn unauthorized(detail: &str) -> Response {
    let document = serde_json::json!({
        "type": "https://oncecheck.dev/problems/idempotency-demo#invalid-credentials",
        "title": "Invalid credentials",
        "status": 401,
        "detail": detail,
    });
    let mut response = (StatusCode::UNAUTHORIZED, document.to_string()).into_response();
    let headers = response.headers_mut();
    headers.insert(
        "content-type",
        HeaderValue::from_static("application/problem+json"),
    );
    headers.insert(
        "www-authenticate",
        HeaderValue::from_static("Bearer error=\"invalid_token\""),
    );
    response
}

/// Stand-in authentication: `Authorization: Bearer NAME` makes NAME the principal.
async fn authenticate(mut request: Request, next: Next) -> Response {
    match credentials(request.headers().get("authorization")) {
        Credentials::Anonymous => {}
        Credentials::Bearer(name) => {
            request.extensions_mut().insert(Principal(name));
        }
        Credentials::Malformed(detail) => return unauthorized(detail),
    }
    next.run(request).await
}

/// The router for a database URL, or a one-line reason it cannot be used.
async fn app_for(database_url: &str) -> Result<Router, String> {
    let connect_error =
        |error: &dyn std::fmt::Display| format!("cannot open {database_url}: {error}");
    if database_url.starts_with("postgres://") || database_url.starts_with("postgresql://") {
        let pool = PgPoolOptions::new()
            .max_connections(8)
            .acquire_timeout(std::time::Duration::from_secs(2))
            .connect(database_url)
            .await
            .map_err(|error| connect_error(&error))?;
        postgres::app(pool)
            .await
            .map_err(|error| connect_error(&error))
    } else if database_url.starts_with("sqlite:") {
        let options = SqliteConnectOptions::from_str(database_url)
            .map_err(|error| connect_error(&error))?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal);
        let pool = SqlitePoolOptions::new()
            .max_connections(4)
            .connect_with(options)
            .await
            .map_err(|error| connect_error(&error))?;
        sqlite::app(pool)
            .await
            .map_err(|error| connect_error(&error))
    } else {
        Err(format!(
            "--database-url {database_url:?}: expected postgres://... or sqlite:PATH"
        ))
    }
}

#[tokio::main]
async fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let arguments = Arguments::parse();
    let fail = |message: String| -> ! {
        eprintln!("idempotency-demo: {message}");
        std::process::exit(2)
    };
    let app = app_for(&arguments.database_url)
        .await
        .unwrap_or_else(|message| fail(message));
    let listener = tokio::net::TcpListener::bind(&arguments.listen)
        .await
        .unwrap_or_else(|error| fail(format!("cannot listen on {}: {error}", arguments.listen)));
    let address = listener
        .local_addr()
        .unwrap_or_else(|error| fail(format!("no local address: {error}")));
    println!("listening on http://{address}");
    eprintln!(
        "idempotency-demo on http://{address} ({}); POST /transfers, GET /accounts",
        arguments.database_url
    );
    if let Err(error) = axum::serve(listener, app).await {
        fail(format!("server error: {error}"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_are_bearer_tokens_or_anonymous_and_nothing_else_is_accepted() {
        let value = |text: &str| HeaderValue::from_str(text).unwrap();
        assert_eq!(credentials(None), Credentials::Anonymous);
        assert_eq!(
            credentials(Some(&value("Bearer alice"))),
            Credentials::Bearer("alice".into())
        );
        assert_eq!(
            credentials(Some(&value("bearer a.b-c~d+e/f=="))),
            Credentials::Bearer("a.b-c~d+e/f==".into())
        );
        for malformed in [
            "Bearer ",
            "Bearer",
            "Bearer  ",
            "Bearer ==",
            "Basic YWxpY2U6",
            "Bearer a b",
            "alice",
        ] {
            assert!(
                matches!(
                    credentials(Some(&value(malformed))),
                    Credentials::Malformed(_)
                ),
                "{malformed:?}"
            );
        }
    }
}
