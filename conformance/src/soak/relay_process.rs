//! The relay as a user runs it: the `relay` binary in a process of its own, so that a kill is a
//! real SIGKILL (no destructor, no graceful shutdown, whatever was in flight cut) and a restart
//! a new process on the same port and store.
//!
//! Invariants: at most one relay process of a run is alive; it is killed when this value drops;
//! a start returns only once `/healthz` answers (bounded), or with the reason and the log's tail.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use bytes::Bytes;
use http::Method;
use tokio::process::{Child, Command};

use super::http::HttpClient;

/// How long a started relay may take to answer `/healthz`.
const READY_MILLIS_MAX: u64 = 15_000;
/// Starts tried before a restart is given up (a port still held a moment after the kill).
const STARTS_MAX: u32 = 5;

pub struct RelayProcess {
    binary: PathBuf,
    arguments: Vec<String>,
    environment: Vec<(String, String)>,
    log: PathBuf,
    port: u16,
    child: Option<Child>,
    client: HttpClient,
}

/// The relay binary beside the running oncecheck (cargo puts both in one target directory).
pub fn default_binary() -> Result<PathBuf, String> {
    let here = std::env::current_exe().map_err(|error| format!("locating oncecheck: {error}"))?;
    let directory = here
        .parent()
        .ok_or("oncecheck has no directory")?
        .to_path_buf();
    // A test binary lives in target/debug/deps; the binaries one level up.
    for candidate in [directory.join("relay"), directory.join("../relay")] {
        if candidate.is_file() {
            return Ok(candidate);
        }
    }
    Err(format!(
        "no relay binary beside {}: build it (cargo build -p oncecheck-relay) or pass --relay-bin",
        here.display()
    ))
}

/// A loopback port nothing listens on now.
pub fn free_port() -> Result<u16, String> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")
        .map_err(|error| format!("no free loopback port: {error}"))?;
    listener
        .local_addr()
        .map(|address| address.port())
        .map_err(|error| error.to_string())
}

impl RelayProcess {
    /// Starts `binary --listen 127.0.0.1:PORT ARGUMENTS`, its output appended to `log`.
    pub async fn start(
        binary: &Path,
        arguments: Vec<String>,
        environment: Vec<(String, String)>,
        log: PathBuf,
    ) -> Result<RelayProcess, String> {
        let mut relay = RelayProcess {
            binary: binary.to_path_buf(),
            arguments,
            environment,
            log,
            port: free_port()?,
            child: None,
            client: HttpClient::default(),
        };
        relay.spawn_until_ready().await?;
        Ok(relay)
    }

    pub fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// SIGKILL, then a new process on the same port and store.
    pub async fn kill_and_restart(&mut self) -> Result<(), String> {
        self.kill().await;
        self.spawn_until_ready().await
    }

    /// Points the next start at other arguments (a fresh table), then restarts.
    pub async fn restart_with(&mut self, arguments: Vec<String>) -> Result<(), String> {
        self.arguments = arguments;
        self.kill_and_restart().await
    }

    pub async fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            // std's and tokio's kill is SIGKILL on Unix.
            let _ = child.kill().await;
        }
    }

    async fn spawn_until_ready(&mut self) -> Result<(), String> {
        let mut last_error = String::new();
        for _attempt in 0..STARTS_MAX {
            let log = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&self.log)
                .map_err(|error| format!("opening {}: {error}", self.log.display()))?;
            let log_for_stderr = log
                .try_clone()
                .map_err(|error| format!("opening {}: {error}", self.log.display()))?;
            let mut command = Command::new(&self.binary);
            command
                .arg("--listen")
                .arg(format!("127.0.0.1:{}", self.port))
                .args(&self.arguments)
                .envs(self.environment.iter().map(|(name, value)| (name, value)))
                .stdin(Stdio::null())
                .stdout(Stdio::from(log))
                .stderr(Stdio::from(log_for_stderr))
                .kill_on_drop(true);
            let child = command
                .spawn()
                .map_err(|error| format!("starting {}: {error}", self.binary.display()))?;
            self.child = Some(child);
            match self.wait_ready().await {
                Ok(()) => return Ok(()),
                Err(error) => {
                    last_error = error;
                    self.kill().await;
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        }
        Err(format!(
            "the relay did not start: {last_error}; its log ends: {}",
            log_tail(&self.log)
        ))
    }

    async fn wait_ready(&mut self) -> Result<(), String> {
        let url = format!("{}/healthz", self.base_url());
        let deadline = tokio::time::Instant::now() + Duration::from_millis(READY_MILLIS_MAX);
        while tokio::time::Instant::now() < deadline {
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    return Err(format!("it exited with {status}"));
                }
            }
            if let Ok(answer) = self.client.send(Method::GET, &url, &[], Bytes::new()).await {
                if answer.status.is_success() {
                    return Ok(());
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Err(format!("no answer on {url} within {READY_MILLIS_MAX} ms"))
    }
}

/// The last lines of a log, on one line, for an error message.
pub fn log_tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().rev().take(5).collect();
    lines.into_iter().rev().collect::<Vec<_>>().join(" | ")
}
