//! A pass's captured output (`--output quiet-unless-failed`): where its
//! spool lives, and the one place where its life ends.
//!
//! Where: `$XDG_RUNTIME_DIR/jobrun-output.d/` when that is an absolute
//! directory of the caller's with mode 0700; otherwise beside a SQLite
//! store (`<store>.output-<uid>/`); otherwise (PostgreSQL)
//! `<tmp>/jobrun-<uid>/output.d/`. Each is a 0700 directory jobrun makes
//! and judges, and each spool in it is `<pass id>.out`, mode 0600.
//!
//! A spool is removed when its pass is over (`end`). A wrapper killed by
//! SIGKILL cannot remove its own: the next capturing pass in the same
//! directory removes every spool no wrapper holds (`files::sweep_spools`).

use std::path::PathBuf;

use anyhow::{Context, Result};

use super::Ctx;
use crate::capture::{Capture, Spooled};
use crate::files::{self, sweep_spools, Spool};
use crate::policy::outcome::Outcome;
use crate::say;
use crate::settings::OutputSettings;
use crate::store::StoreSpec;

/// The spool directory in `$XDG_RUNTIME_DIR`.
pub const RUNTIME_OUTPUT_DIR: &str = "jobrun-output.d";
/// Beside a SQLite store: `<store>.output-<uid>`.
pub const STORE_OUTPUT_INFIX: &str = ".output-";
/// Without either: `<tmp>/jobrun-<uid>/output.d`.
pub const TMP_OUTPUT_DIR: &str = "output.d";

/// The directory the spools of `spec`'s passes go to, made ready.
pub fn spool_dir(spec: &StoreSpec) -> Result<PathBuf, String> {
    let uid = nix::unistd::geteuid();
    if let Some(runtime) = files::runtime_dir() {
        let d = runtime.join(RUNTIME_OUTPUT_DIR);
        files::private_dir(&d)?;
        return Ok(d);
    }
    if let StoreSpec::Sqlite(store, _) = spec {
        let mut name = store.as_os_str().to_owned();
        name.push(format!("{STORE_OUTPUT_INFIX}{uid}"));
        let d = PathBuf::from(name);
        files::private_dir(&d)?;
        return Ok(d);
    }
    let base = std::env::temp_dir().join(format!("{}{uid}", super::wake::TMP_DIR_PREFIX));
    files::private_dir(&base)?;
    let d = base.join(TMP_OUTPUT_DIR);
    files::private_dir(&d)?;
    Ok(d)
}

/// The capture of pass `pass_id`: the stale spools of killed wrappers
/// swept, its own spool created.
pub fn prepare(spec: &StoreSpec, pass_id: &str, out: &OutputSettings) -> Result<Capture> {
    let made = spool_dir(spec).and_then(|dir| {
        sweep_spools(&dir);
        Spool::create(&dir, pass_id)
    });
    let spool = made
        .map_err(anyhow::Error::msg)
        .context("--output quiet-unless-failed: cannot create the output spool")?;
    Capture::new(spool, out.limit).context("cannot create the output pipe")
}

impl Ctx {
    /// The pass is over and recorded with `outcome`: print its output
    /// unless it ended ok, and keep its tail with its history row if it
    /// ended badly. The spool itself goes in `Ctx::end`, after the end
    /// hooks (the failure hook gets its path).
    pub(super) fn show_output(&mut self, spooled: &Spooled, outcome: Outcome) {
        let Some(out) = self.settings.output else {
            return;
        };
        let label = self.label();
        if let Some(e) = &spooled.written.error {
            say!(warning, "{label}: the output spool is incomplete: {e}");
        }
        if outcome.prints_captured_output() {
            let stdout = std::io::stdout();
            if let Err(e) = spooled.copy_to(&mut stdout.lock()) {
                say!(warning, "{label}: cannot print the command's output: {e}");
            }
        }
        if outcome.ended_badly() && out.keep > 0 {
            let kept = spooled
                .tail(out.keep)
                .map_err(anyhow::Error::from)
                .and_then(|tail| {
                    let (job, pass) = (&self.settings.job, &self.req.pass_id);
                    Ok(self
                        .store
                        .with_retries(|s| s.keep_output(job, pass, &tail, out.keep_total))?)
                });
            if let Err(e) = kept {
                say!(warning, "{label}: the output was not kept in history: {e}");
            }
        }
    }
}
