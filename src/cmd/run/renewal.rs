//! The renewer of a pass: made when the pass holds a slot (or a place in
//! the queue), its thread started only when the first renewal is due, so a
//! command that ends before costs no thread.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use super::Ctx;
use crate::events::{Event, EventSender};
use crate::policy::lease::renew_interval;
use crate::renewer::{Log, Renewer, RenewerConfig, RenewerExit};
use crate::say;
use crate::store::{Held, StoreHandle, StoreLease};

impl Ctx {
    /// Renew `held` on `store` from now until stopped; a lost lease or max
    /// hold reaches the pass as an event.
    pub(super) fn start_renewer(
        &self,
        held: Held,
        label: &str,
        taken: Instant,
        store: StoreHandle,
    ) -> Result<Renewer<StoreLease>> {
        let mut renewer = self.renewer(held, label, taken, store);
        renewer.start().context("cannot start the renewer")?;
        Ok(renewer)
    }

    /// The renewer of `held`, its thread not started yet (`Renewer::start`).
    pub(super) fn renewer(
        &self,
        held: Held,
        label: &str,
        taken: Instant,
        store: StoreHandle,
    ) -> Renewer<StoreLease> {
        let events = self.sender.clone();
        // Max hold bounds a running pass; a waiter is bounded by --wait.
        let max_hold = match held {
            Held::Lease(_) => self.settings.max_hold,
            Held::Waiter { .. } => Duration::MAX,
        };
        let held_kind = matches!(held, Held::Lease(_));
        let mut lease = StoreLease::new(store, held, self.settings.lease, Arc::clone(&self.pin));
        if held_kind && self.settings.max_idle.is_some() {
            lease = lease.watching_progress();
        }
        let cfg = RenewerConfig {
            label: label.to_string(),
            interval: renew_interval(self.settings.lease),
            lease: self.settings.lease,
            max_hold,
            taken,
            max_idle: match held_kind {
                true => self.settings.max_idle,
                false => None,
            },
            log: Log::stderr(),
        };
        Renewer::deferred(lease, cfg, move |exit| {
            let _ = events.send(match exit {
                RenewerExit::MaxHold | RenewerExit::MaxIdle => Event::MaxHold,
                _ => Event::LeaseLost,
            });
        })
    }
}

/// Start `renewer`'s thread now, if it is not running: when its first
/// renewal is due, or when the lease must outlive the command (its
/// containers run on). A thread that cannot be made is said once, and the
/// pass hears of it as of a lost lease: nothing will renew it.
pub(super) fn start_late(renewer: &mut Renewer<StoreLease>, label: &str, events: &EventSender) {
    if let Err(e) = renewer.start() {
        say!(
            error,
            "{label}: cannot start the renewer: {e}; the lease will lapse"
        );
        let _ = events.send(Event::LeaseLost);
    }
}
