//! A private PostgreSQL cluster for the tests that stop the database (`outage.rs`,
//! `finalize_outage.rs`): initdb into a temporary directory with the server binaries
//! scripts/services.sh installs, so stopping it disturbs no other test.
//!
//! Invariant: the cluster is stopped (immediate mode) and its directory removed when the value
//! drops, whatever the test did, a panic included.

use std::path::PathBuf;
use std::process::Command;

/// A private PostgreSQL cluster: started by `start`, stopped and removed on drop.
pub struct PrivatePostgres {
    bin: PathBuf,
    data: PathBuf,
    port: u16,
    /// `runuser -u postgres --` when the test runs as root (PostgreSQL refuses root).
    as_user: Vec<String>,
}

impl PrivatePostgres {
    pub fn start() -> PrivatePostgres {
        let bin = std::fs::read_dir("/usr/lib/postgresql")
            .ok()
            .into_iter()
            .flatten()
            .map(|entry| entry.unwrap().path().join("bin"))
            .find(|bin| bin.join("initdb").exists())
            .expect("PostgreSQL's server binaries under /usr/lib/postgresql/*/bin (scripts/services.sh installs them)");
        let data = std::env::temp_dir().join(super::unique_name("oncecheck-private-postgres"));
        let _ = std::fs::remove_dir_all(&data);
        std::fs::create_dir_all(&data).unwrap();
        let mut as_user = Vec::new();
        // PostgreSQL refuses to run as root: as scripts/services.sh does, run it as `postgres`.
        if Command::new("id").arg("-u").output().unwrap().stdout == b"0\n" {
            let exists = Command::new("id")
                .args(["-u", "postgres"])
                .output()
                .unwrap();
            if !exists.status.success() {
                run(Command::new("useradd").args(["--system", "--no-create-home", "postgres"]));
            }
            run(Command::new("chown").args(["-R", "postgres"]).arg(&data));
            as_user = ["runuser", "-u", "postgres", "--"]
                .map(String::from)
                .to_vec();
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let cluster = PrivatePostgres {
            bin,
            data,
            port,
            as_user,
        };
        let mut initdb = cluster.command("initdb");
        // --no-sync: a throwaway cluster (run with fsync=off) needs no flush to disk; the flush
        // cost about 3 s here, and as much again when the directory was removed.
        initdb.arg("-D").arg(cluster.data.join("db")).args([
            "-U",
            "oncecheck",
            "--auth=trust",
            "--no-sync",
        ]);
        run(&mut initdb);
        cluster.pg_ctl_start();
        cluster
    }

    fn command(&self, program: &str) -> Command {
        let path = self.bin.join(program);
        match self.as_user.split_first() {
            Some((first, rest)) => {
                let mut command = Command::new(first);
                command.args(rest).arg(path);
                command
            }
            None => Command::new(path),
        }
    }

    /// Starts the server and waits until it accepts connections.
    pub fn pg_ctl_start(&self) {
        let mut start = self.command("pg_ctl");
        start
            .arg("-D")
            .arg(self.data.join("db"))
            .arg("-l")
            .arg(self.data.join("db/server.log"))
            .args(["-w", "-t", "60", "-o"])
            .arg(format!("-h 127.0.0.1 -p {} -k '' -c fsync=off", self.port))
            .arg("start");
        run(&mut start);
    }

    /// Stops the server in `mode` (`fast`: every session is terminated, its open transaction
    /// rolled back) and waits until it is down.
    pub fn pg_ctl_stop(&self, mode: &str) {
        let mut stop = self.command("pg_ctl");
        stop.arg("-D")
            .arg(self.data.join("db"))
            .args(["-m", mode, "-w", "stop"]);
        run(&mut stop);
    }

    /// The cluster's `postgres` database.
    pub fn url(&self) -> String {
        self.database_url("postgres")
    }

    pub fn database_url(&self, database: &str) -> String {
        format!("postgres://oncecheck@127.0.0.1:{}/{database}", self.port)
    }

    /// Creates the database `name`; returns its URL.
    pub async fn create_database(&self, name: &str) -> String {
        let admin = sqlx::PgPool::connect(&self.url()).await.unwrap();
        sqlx::raw_sql(&format!("CREATE DATABASE {name}"))
            .execute(&admin)
            .await
            .unwrap();
        admin.close().await;
        self.database_url(name)
    }
}

impl Drop for PrivatePostgres {
    fn drop(&mut self) {
        let _ = self
            .command("pg_ctl")
            .arg("-D")
            .arg(self.data.join("db"))
            .args(["-m", "immediate", "-w", "stop"])
            .output();
        let _ = std::fs::remove_dir_all(&self.data);
    }
}

fn run(command: &mut Command) {
    let output = command.output().unwrap();
    assert!(
        output.status.success(),
        "{command:?}: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}
