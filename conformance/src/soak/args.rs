//! The arguments of `oncecheck soak`, parsed in every build (the runs themselves need `replay`).
//! Every fault and the whole run are bounded: counts here, time by `--seconds-max`.

use std::path::PathBuf;

/// `oncecheck soak relay|layer`.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum SoakCommand {
    /// The relay binary under N pushers and pullers, SIGKILLed and restarted, its backend
    /// stalled; then every stream checked: 0 lost, 0 duplicated, 0 gaps.
    Relay(RelayArgs),
    /// The idempotency layer on PostgreSQL under N clients, the database restarted; then every
    /// key checked: its effect ran exactly once.
    Layer(LayerArgs),
}

#[derive(Debug, Clone, clap::Args)]
pub struct RelayArgs {
    /// The backend: sqlite (a file of the run's own) or dynamodb (ONCECHECK_DDB_ENDPOINT, an
    /// emulator such as moto: requests reach it through the soak's serialising stall proxy).
    #[arg(long, default_value = "sqlite", value_parser = ["sqlite", "dynamodb"])]
    pub store: String,
    /// Ops pushed in all.
    #[arg(long, default_value_t = 2_000)]
    pub ops: u64,
    /// Concurrent pushers; each re-pushes a batch until it is answered, as a client does.
    #[arg(long, default_value_t = 4)]
    pub pushers: usize,
    /// Concurrent pullers; each follows every stream from seq 0 while the pushers run.
    #[arg(long, default_value_t = 2)]
    pub pullers: usize,
    /// Streams the pushers share.
    #[arg(long, default_value_t = 2)]
    pub streams: usize,
    /// Most ops in one push (each push takes 1 to this many).
    #[arg(long, default_value_t = 20)]
    pub batch_ops_max: usize,
    /// SIGKILLs of the relay process, each followed by a restart, spread over the run.
    #[arg(long, default_value_t = 2)]
    pub kills: u32,
    /// Stalls of the backend spread over the run (SQLite: another connection holds the write
    /// lock; DynamoDB: the proxy holds every request).
    #[arg(long, default_value_t = 1)]
    pub stalls: u32,
    /// How long one stall lasts, in milliseconds.
    #[arg(long, default_value_t = 3_000)]
    pub stall_millis: u64,
    /// The relay's push deadline (ONCECHECK_RELAY_PUSH_DEADLINE_SECS), below a stall so that a
    /// stall is answered 503 and re-pushed.
    #[arg(long, default_value_t = 2)]
    pub push_deadline_secs: u64,
    /// DynamoDB only: a fresh table after this many ops, the old one checked and deleted, so an
    /// emulator that keeps every table version (moto) stays bounded in memory.
    #[arg(long, default_value_t = 500)]
    pub table_ops_max: u64,
    /// Give up after this many seconds (exit 1).
    #[arg(long, default_value_t = 600)]
    pub seconds_max: u64,
    /// Seed of the fault schedule, batch sizes and streams, printed; the same seed gives the same
    /// schedule [default: the clock].
    #[arg(long)]
    pub seed: Option<u64>,
    /// The relay binary [default: `relay` beside this oncecheck, as cargo builds them].
    #[arg(long, value_name = "PATH")]
    pub relay_bin: Option<PathBuf>,
}

#[derive(Debug, Clone, clap::Args)]
pub struct LayerArgs {
    /// Keys, each sent until it is answered 2xx; its effect must run exactly once.
    #[arg(long, default_value_t = 2_000)]
    pub keys: u64,
    /// Concurrent clients.
    #[arg(long, default_value_t = 8)]
    pub clients: usize,
    /// Every this many keys, a second client sends the same key at once (0: never).
    #[arg(long, default_value_t = 10)]
    pub duplicate_every: u64,
    /// Restarts of the database (a fast shutdown, then a start), spread over the run.
    #[arg(long, default_value_t = 2)]
    pub restarts: u32,
    /// How long the database stays down at each restart, in milliseconds.
    #[arg(long, default_value_t = 500)]
    pub down_millis: u64,
    /// The handler behind the layer: `external` (its effect commits in its own transaction,
    /// before the layer's finalize) or `atomic` (in the request's effect transaction, committed
    /// by the layer with the cached response).
    #[arg(long, default_value = "external", value_parser = ["external", "atomic"])]
    pub handler: String,
    /// Give up after this many seconds (exit 1).
    #[arg(long, default_value_t = 600)]
    pub seconds_max: u64,
    /// Seed of the restart schedule and the duplicates, printed [default: the clock].
    #[arg(long)]
    pub seed: Option<u64>,
    /// PostgreSQL's server programs (initdb, pg_ctl) [default: the newest
    /// /usr/lib/postgresql/*/bin]. The soak runs a server of its own, which it restarts.
    #[arg(long, value_name = "DIR")]
    pub postgres_bin: Option<PathBuf>,
}
