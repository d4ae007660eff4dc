//! PostgreSQL servers a test owns: its own server to stop and start
//! (outages, restarts) without disturbing the other tests, with TLS or a
//! PgBouncer in front when the test needs one. Like every PostgreSQL test,
//! these are skipped when `JOBRUN_TEST_PG` is unset (a bare `cargo test`),
//! and fail when it is set and the server cannot be started.

use std::process::Command;

use super::env::pg_server;
use super::text;

/// A PostgreSQL server of this test's own, so it can be stopped and started
/// without disturbing the other tests. Stopped and removed on drop.
pub struct OwnServer {
    pub url: String,
    pub dir: String,
}

fn pg_script() -> String {
    format!("{}/scripts/pg-test-server", env!("CARGO_MANIFEST_DIR"))
}

impl OwnServer {
    /// `None` (skip the test) when the PostgreSQL tests do not run.
    pub fn start() -> Option<OwnServer> {
        OwnServer::start_with(&[])
    }

    /// `--tls`: TLS with the server's own CA in `DIR/tls`, and the roles
    /// `jobrun_pw` (password) and `jobrun_cert` (client certificate).
    pub fn start_with(args: &[&str]) -> Option<OwnServer> {
        OwnServer::launch(args, &[])
    }

    /// With `vars` for the script, e.g. `PG_MAX_CONNECTIONS`.
    pub fn start_with_env(vars: &[(&str, &str)]) -> Option<OwnServer> {
        OwnServer::launch(&[], vars)
    }

    fn launch(args: &[&str], vars: &[(&str, &str)]) -> Option<OwnServer> {
        pg_server()?;
        let out = Command::new(pg_script())
            .arg("start")
            .args(args)
            .envs(vars.iter().copied())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "scripts/pg-test-server start {}: {}",
            args.join(" "),
            text(&out.stderr)
        );
        let text = String::from_utf8_lossy(&out.stdout);
        let value = |key: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(&format!("export {key}=")))
                .unwrap_or_else(|| panic!("no {key} in {text}"))
                .to_string()
        };
        Some(OwnServer {
            url: value("JOBRUN_TEST_PG"),
            dir: value("JOBRUN_TEST_PGDIR"),
        })
    }

    /// A PgBouncer in transaction mode in front of this server, with a pool
    /// of `pool` server connections: its URL.
    pub fn bouncer(&self, pool: u32) -> String {
        let out = Command::new(pg_script())
            .args(["bouncer", &self.dir])
            .env("PGBOUNCER_POOL", pool.to_string())
            .output()
            .unwrap();
        let said = text(&out.stdout);
        assert!(
            out.status.success(),
            "scripts/pg-test-server bouncer: {said}{}",
            text(&out.stderr)
        );
        said.trim()
            .strip_prefix("export JOBRUN_TEST_PGBOUNCER=")
            .unwrap_or_else(|| panic!("no PgBouncer URL in {said}"))
            .to_string()
    }

    /// Stop and start this server's PgBouncer.
    pub fn restart_bouncer(&self) {
        self.script("bouncer-restart");
    }

    /// What the server has logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(format!("{}/server.log", self.dir)).unwrap_or_default()
    }

    /// Stop the server, keeping its data (an outage).
    pub fn halt(&self) {
        self.script("halt");
    }

    /// Start it again on the same port.
    pub fn restart(&self) {
        self.script("restart");
    }

    fn script(&self, verb: &str) {
        let out = Command::new(pg_script())
            .args([verb, &self.dir])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "scripts/pg-test-server {verb}: {}",
            text(&out.stderr)
        );
    }
}

impl Drop for OwnServer {
    fn drop(&mut self) {
        let _ = Command::new(pg_script()).args(["stop", &self.dir]).output();
    }
}
