//! PostgreSQL servers a test owns: its own server to stop and start
//! (outages, restarts) without disturbing the other tests.

use std::process::Command;

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
    pub fn start() -> OwnServer {
        OwnServer::start_with(&[])
    }

    /// `--tls`: TLS with the server's own CA in `DIR/tls`, and the roles
    /// `jobrun_pw` (password) and `jobrun_cert` (client certificate).
    pub fn start_with(args: &[&str]) -> OwnServer {
        OwnServer::launch(args, &[])
    }

    /// With `vars` for the script, e.g. `PG_MAX_CONNECTIONS`.
    pub fn start_with_env(vars: &[(&str, &str)]) -> OwnServer {
        OwnServer::launch(&[], vars)
    }

    fn launch(args: &[&str], vars: &[(&str, &str)]) -> OwnServer {
        let out = Command::new(pg_script())
            .arg("start")
            .args(args)
            .envs(vars.iter().copied())
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", text(&out.stderr));
        let text = String::from_utf8_lossy(&out.stdout);
        let value = |key: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(&format!("export {key}=")))
                .unwrap_or_else(|| panic!("no {key} in {text}"))
                .to_string()
        };
        OwnServer {
            url: value("JOBRUN_TEST_PG"),
            dir: value("JOBRUN_TEST_PGDIR"),
        }
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
        let s = Command::new(pg_script())
            .args([verb, &self.dir])
            .status()
            .unwrap();
        assert!(s.success(), "{verb} failed");
    }
}

impl Drop for OwnServer {
    fn drop(&mut self) {
        let _ = Command::new(pg_script()).args(["stop", &self.dir]).status();
    }
}
