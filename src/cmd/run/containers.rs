//! A pass that declared `--containers ENGINE` is not over when its command
//! is: the command is only the engine's client, and the containers it
//! started may run on after it (a client killed, a detached `run -d`, a
//! container's PID 1 that ignores the TERM its client forwarded). They are
//! the pass's work, so the wrapper keeps its slot, renewed, until the
//! engine says that none labelled with the pass's id runs.
//!
//! A stop of the pass (TERM, INT, HUP, QUIT; a lost lease with
//! `--on-lost term`) stops them through the engine, by label, with the
//! pass's `--kill-after`. An engine that cannot answer keeps the slot, as
//! unknown evidence does everywhere, until it answers or the pass is asked
//! to stop: then the wrapper releases, saying that its containers may
//! still run.

use std::sync::mpsc::RecvTimeoutError;
use std::time::Duration;

use super::Ctx;
use crate::engine::{self, Seen, Stopping, ENGINE_TIMEOUT};
use crate::events::Event;
use crate::policy::containers::Engine;
use crate::say;
use crate::supervise::{classify, Ended, OnLost, SignalKind};

/// The longest wait between two looks at the engine.
const MAX_POLL: Duration = Duration::from_secs(5);

impl Ctx {
    /// Once the command's group is gone (`ended`): wait until no container
    /// of the pass runs, stopping them when the pass is stopped.
    pub(super) fn outlast_containers(&mut self, engine: Engine, label: &str, ended: &Ended) {
        let name = engine.as_str();
        let pass_id = self.req.pass_id.clone();
        let kill_after = self.settings.kill_after;
        let mut stop = ended.stopped_by.is_some()
            || (ended.lease_lost && self.settings.on_lost == OnLost::Term);
        let mut poll = Duration::from_millis(100);
        // Each state is said once, not at every look.
        let mut said = String::new();
        let say_once = |said: &mut String, line: String| {
            if line != *said {
                say!(info, "{label}: {line}");
                *said = line;
            }
        };
        loop {
            match engine::running(engine, &pass_id, ENGINE_TIMEOUT) {
                Seen::NoneRunning => {
                    if !said.is_empty() {
                        say!(info, "{label}: no container of the pass runs any more");
                    }
                    return;
                }
                Seen::Running(ids) if stop => {
                    let shown: Vec<&str> = ids.iter().map(|i| i.short()).collect();
                    say!(
                        notice,
                        "{label}: stopping container(s) {} by label {} ({name} stop -t {})",
                        shown.join(", "),
                        engine::label(&pass_id).unwrap_or_default(),
                        engine::stop_seconds(kill_after)
                    );
                    if let Err(why) = Stopping::start(engine, &pass_id, ids, kill_after).finish() {
                        say!(
                            warning,
                            "{label}: {why}; releasing the slot as asked: they may still run"
                        );
                        return;
                    }
                    // Look again at once: none should run now.
                    poll = Duration::from_millis(100);
                    continue;
                }
                Seen::Running(ids) => {
                    let shown: Vec<&str> = ids.iter().map(|i| i.short()).collect();
                    say_once(
                        &mut said,
                        format!(
                            "the command ended, but container(s) {} of the pass run on; \
                             keeping the slot until they end",
                            shown.join(", ")
                        ),
                    );
                }
                Seen::NoAnswer(why) if stop => {
                    say!(
                        warning,
                        "{label}: {why}; releasing the slot as asked: the pass's containers may \
                         still run"
                    );
                    return;
                }
                Seen::NoAnswer(why) => say_once(
                    &mut said,
                    format!("the command ended; {why}: keeping the slot until {name} answers"),
                ),
            }
            match self.events.recv_timeout(poll) {
                Ok(Event::Signal(s)) if classify(s) != SignalKind::ForwardOnly => stop = true,
                Ok(Event::LeaseLost) if self.settings.on_lost == OnLost::Term => stop = true,
                Ok(_) | Err(RecvTimeoutError::Timeout) => poll = (poll * 3 / 2).min(MAX_POLL),
                Err(RecvTimeoutError::Disconnected) => return,
            }
        }
    }
}
