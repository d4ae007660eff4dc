//! Hearing releases on a PostgreSQL store (LISTEN/NOTIFY), so that a
//! waiter on any host looks again at once instead of at its next poll.
//!
//! A release notifies `jobrun_release` inside its own transaction
//! (`Conn::notify_waiters`), so a rolled-back one is never heard. What is
//! heard is only a reason to look: nothing depends on it for correctness,
//! and the listening thread lives in `cmd/run/notify.rs`.

use std::time::Duration;

use postgres::fallible_iterator::FallibleIterator;

use super::pgerr::map_err;
use super::postgres::{PgBackend, PgStore};
use super::{Result, StoreError};

impl PgStore {
    /// The backend, for what only PostgreSQL has (LISTEN/NOTIFY).
    pub fn backend(&mut self) -> &mut PgBackend {
        &mut self.backend
    }
}

impl PgBackend {
    /// Start hearing releases on this connection (`LISTEN`).
    pub fn listen_releases(&mut self) -> Result<()> {
        let shown = self.shown.clone();
        self.client
            .batch_execute("LISTEN jobrun_release")
            .map_err(|e| map_err(&shown, e))
    }

    /// Wait up to `timeout` for a release notification: the job it names,
    /// or `None` when none came.
    pub fn next_release(&mut self, timeout: Duration) -> Result<Option<String>> {
        let shown = self.shown.clone();
        let got = self.client.notifications().timeout_iter(timeout).next();
        match got {
            Ok(Some(n)) => Ok(Some(n.payload().to_string())),
            Ok(None) if self.client.is_closed() => {
                Err(StoreError::Unreachable(shown, "connection closed".into()))
            }
            Ok(None) => Ok(None),
            Err(e) => Err(map_err(&shown, e)),
        }
    }
}
