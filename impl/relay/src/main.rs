//! The `relay` binary: serves push and pull over the chosen store until ctrl-c or SIGTERM.
//!
//! The DynamoDB endpoint comes from ONCECHECK_DDB_ENDPOINT (unset: the SDK's default), the push
//! deadline from ONCECHECK_RELAY_PUSH_DEADLINE_SECS (unset: 20 s). This binary never enables the
//! store's test seams.

use std::net::SocketAddr;

use clap::Parser;
use oncecheck_relay::{
    open_store, push_deadline_secs_from, router, shutdown_signal, Limits, ProblemListener,
    StoreSpec, DDB_ENDPOINT_ENV,
};
use oncecheck_store::PUSH_DEADLINE_ENV;

#[derive(Debug, Parser)]
#[command(
    name = "relay",
    about = "Push and pull of op batches over an oncecheck store"
)]
struct Args {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// The store: memory, sqlite:PATH or dynamodb:TABLE.
    #[arg(long, default_value = "sqlite:relay.sqlite")]
    store: StoreSpec,
    /// Create the DynamoDB table (pay-per-request) if it does not exist.
    #[arg(long)]
    create_table: bool,
    /// Largest push body, in bytes.
    #[arg(long, default_value_t = Limits::default().body_bytes_max)]
    body_bytes_max: usize,
    /// Most ops per push.
    #[arg(long, default_value_t = Limits::default().ops_per_push_max)]
    ops_per_push_max: usize,
    /// Longest op_id, in bytes.
    #[arg(long, default_value_t = Limits::default().op_id_bytes_max)]
    op_id_bytes_max: usize,
    /// Largest pull limit.
    #[arg(long, default_value_t = Limits::default().pull_limit_max)]
    pull_limit_max: usize,
    /// Time a pull may spend retrying transient store errors before it answers 503, in seconds.
    #[arg(long, default_value_t = Limits::default().pull_deadline_secs, value_parser = clap::value_parser!(u64).range(1..))]
    pull_deadline_secs: u64,
}

impl Args {
    /// The limits the binary serves with: every flag, and the push deadline from the
    /// environment. A function of its own so that a test sees each flag arrive (a flag dropped
    /// here serves the default, which no test through the binary can tell apart by time alone).
    fn limits(&self, push_deadline_secs: u64) -> Limits {
        Limits {
            body_bytes_max: self.body_bytes_max,
            ops_per_push_max: self.ops_per_push_max,
            op_id_bytes_max: self.op_id_bytes_max,
            pull_limit_max: self.pull_limit_max,
            push_deadline_secs,
            pull_deadline_secs: self.pull_deadline_secs,
            ..Limits::default()
        }
    }
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let args = Args::parse();
    let push_deadline_secs =
        match push_deadline_secs_from(std::env::var(PUSH_DEADLINE_ENV).ok().as_deref()) {
            Ok(secs) => secs,
            Err(message) => {
                eprintln!("relay: {message}");
                return std::process::ExitCode::from(2);
            }
        };
    let limits = args.limits(push_deadline_secs);
    let endpoint = std::env::var(DDB_ENDPOINT_ENV)
        .ok()
        .filter(|url| !url.is_empty());
    let store = match open_store(&args.store, endpoint.as_deref(), args.create_table).await {
        Ok(store) => store,
        Err(error) => {
            eprintln!("relay: cannot open store {:?}: {error}", args.store);
            return std::process::ExitCode::FAILURE;
        }
    };
    let listener = match tokio::net::TcpListener::bind(args.listen).await {
        Ok(listener) => listener,
        Err(error) => {
            eprintln!("relay: cannot listen on {}: {error}", args.listen);
            return std::process::ExitCode::FAILURE;
        }
    };
    tracing::info!(listen = %args.listen, store = ?args.store, ?limits, "relay serving");
    let served = axum::serve(ProblemListener::new(listener), router(store, limits))
        .with_graceful_shutdown(shutdown_signal())
        .await;
    match served {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("relay: server failed: {error}");
            std::process::ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_limit_flag_and_the_push_deadline_reach_the_served_limits() {
        let args = Args::parse_from([
            "relay",
            "--body-bytes-max",
            "1001",
            "--ops-per-push-max",
            "7",
            "--op-id-bytes-max",
            "33",
            "--pull-limit-max",
            "44",
            "--pull-deadline-secs",
            "5",
        ]);
        let limits = args.limits(9);
        let defaults = Limits::default();
        assert_eq!(limits.body_bytes_max, 1001);
        assert_eq!(limits.ops_per_push_max, 7);
        assert_eq!(limits.op_id_bytes_max, 33);
        assert_eq!(limits.pull_limit_max, 44);
        assert_eq!(limits.pull_deadline_secs, 5);
        assert_eq!(limits.push_deadline_secs, 9);
        // Each value differs from its default, so a flag dropped would show.
        assert_ne!(defaults.pull_deadline_secs, 5);
        assert_ne!(defaults.push_deadline_secs, 9);
        assert_ne!(defaults.body_bytes_max, 1001);
    }
}
