//! A PostgreSQL server of the layer soak's own, on a loopback port, in a directory of its own:
//! the soak restarts it, which it must never do to a server other tests share. Set up as
//! `scripts/services.sh` sets up the test command's server (initdb with trust authentication,
//! no fsync, run as the `postgres` user when the soak runs as root, which PostgreSQL refuses).
//!
//! Invariants: the server is stopped and its directory removed when this value drops; every
//! start and stop waits (bounded, `pg_ctl -w -t`) until the server is up or down.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// How long `pg_ctl` may wait for a start or a stop.
const PG_CTL_WAIT_SECS: u32 = 60;

pub struct PostgresServer {
    bin: PathBuf,
    data: PathBuf,
    directory: PathBuf,
    port: u16,
    as_postgres: bool,
}

/// How a restart stops the server.
#[derive(Debug, Clone, Copy)]
pub enum StopMode {
    /// Clients disconnected, a checkpoint, a clean shutdown.
    Fast,
    /// Killed at once: the next start recovers from the write-ahead log.
    Immediate,
}

/// The newest `/usr/lib/postgresql/*/bin` holding initdb.
fn default_bin() -> Result<PathBuf, String> {
    let mut candidates: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .map_err(|_| "no PostgreSQL under /usr/lib/postgresql: install it (scripts/services.sh does) or pass --postgres-bin".to_string())?
        .filter_map(|entry| entry.ok().map(|entry| entry.path().join("bin")))
        .filter(|bin| bin.join("initdb").is_file())
        .collect();
    candidates.sort_by_key(|bin| {
        bin.parent()
            .and_then(|version| version.file_name())
            .and_then(|name| name.to_str())
            .and_then(|name| name.parse::<u32>().ok())
            .unwrap_or(0)
    });
    candidates
        .pop()
        .ok_or_else(|| "no initdb under /usr/lib/postgresql/*/bin".to_string())
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|output| String::from_utf8_lossy(&output.stdout).trim() == "0")
        .unwrap_or(false)
}

impl PostgresServer {
    /// initdb and start in a fresh directory under `scratch`.
    pub fn start(bin: Option<&Path>, scratch: &Path) -> Result<PostgresServer, String> {
        let bin = match bin {
            Some(bin) => bin.to_path_buf(),
            None => default_bin()?,
        };
        let directory = scratch.join("postgres");
        let data = directory.join("data");
        std::fs::create_dir_all(&data)
            .map_err(|error| format!("creating {}: {error}", data.display()))?;
        let as_postgres = is_root();
        if as_postgres {
            let exists = Command::new("id")
                .args(["-u", "postgres"])
                .output()
                .is_ok_and(|output| output.status.success());
            if !exists {
                run(Command::new("useradd").args(["--system", "--no-create-home", "postgres"]))?;
            }
            for path in [scratch, directory.as_path()] {
                run(Command::new("chmod").arg("755").arg(path))?;
            }
            run(Command::new("chown")
                .arg("-R")
                .arg("postgres")
                .arg(&directory))?;
        }
        let port = super::relay_process::free_port()?;
        let server = PostgresServer {
            bin,
            data,
            directory,
            port,
            as_postgres,
        };
        let initdb = server.bin.join("initdb");
        server.run_as(&initdb, &["-U", "oncecheck", "--auth=trust", "-D"], true)?;
        server.pg_ctl_start()?;
        Ok(server)
    }

    pub fn url(&self) -> String {
        format!("postgres://oncecheck@127.0.0.1:{}/postgres", self.port)
    }

    /// Stops the server, keeps it down for `down`, starts it again. Blocks the calling thread
    /// (pg_ctl waits for the server): call it where blocking is allowed.
    pub fn restart(&self, mode: StopMode, down: Duration) -> Result<(), String> {
        self.pg_ctl_stop(mode)?;
        std::thread::sleep(down);
        self.pg_ctl_start()
    }

    fn pg_ctl_start(&self) -> Result<(), String> {
        let options = format!(
            "-h 127.0.0.1 -p {} -k '' -c max_connections=200 -c fsync=off",
            self.port
        );
        let log = self.directory.join("server.log");
        let pg_ctl = self.bin.join("pg_ctl");
        let wait = PG_CTL_WAIT_SECS.to_string();
        let log = log.to_string_lossy().into_owned();
        self.run_as(
            &pg_ctl,
            &["-w", "-t", &wait, "-l", &log, "-o", &options, "start", "-D"],
            true,
        )
    }

    fn pg_ctl_stop(&self, mode: StopMode) -> Result<(), String> {
        let mode = match mode {
            StopMode::Fast => "fast",
            StopMode::Immediate => "immediate",
        };
        let wait = PG_CTL_WAIT_SECS.to_string();
        self.run_as(
            &self.bin.join("pg_ctl"),
            &["-w", "-t", &wait, "-m", mode, "stop", "-D"],
            true,
        )
    }

    /// Runs `program arguments... DATA` (as postgres when root).
    fn run_as(&self, program: &Path, arguments: &[&str], with_data: bool) -> Result<(), String> {
        let mut command = if self.as_postgres {
            let mut command = Command::new("runuser");
            command.args(["-u", "postgres", "--"]).arg(program);
            command
        } else {
            Command::new(program)
        };
        command.args(arguments);
        if with_data {
            command.arg(&self.data);
        }
        run(&mut command)
    }
}

impl Drop for PostgresServer {
    fn drop(&mut self) {
        let _ = self.pg_ctl_stop(StopMode::Immediate);
        let _ = std::fs::remove_dir_all(&self.directory);
    }
}

fn run(command: &mut Command) -> Result<(), String> {
    let output = command
        .output()
        .map_err(|error| format!("running {command:?}: {error}"))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{command:?} failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        ))
    }
}
