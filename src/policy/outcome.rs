//! How a pass ended: the outcomes history records, and what each means for
//! the summaries and the status line.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::lease::{FreeReason, LeaseRow, WaiterRow};

/// How a pass ended, as recorded in history.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Outcome {
    Ok,
    Failed,
    Skipped,
    LostLease,
    SpawnFailed,
    Killed,
    Stopped,
    Coalesced,
    WaitExpired,
    Timeout,
    Done,
    Abandoned,
}

impl Outcome {
    pub const ALL: [Outcome; 12] = [
        Outcome::Ok,
        Outcome::Failed,
        Outcome::Skipped,
        Outcome::LostLease,
        Outcome::SpawnFailed,
        Outcome::Killed,
        Outcome::Stopped,
        Outcome::Coalesced,
        Outcome::WaitExpired,
        Outcome::Timeout,
        Outcome::Done,
        Outcome::Abandoned,
    ];

    /// The name earlier jobruns gave `wait-expired`: rows they write into
    /// a shared store still carry it, and `history --outcome` takes it.
    pub const WAIT_EXPIRED_BEFORE: &'static str = "timed-out";

    /// The pass ran its command (whatever became of it): its duration is
    /// how long a pass of the job takes, and counts in the summary.
    pub fn ran_command(self) -> bool {
        matches!(
            self,
            Outcome::Ok
                | Outcome::Failed
                | Outcome::LostLease
                | Outcome::Killed
                | Outcome::Stopped
                | Outcome::Timeout
        )
    }

    /// The pass took a slot, whether or not its command could start: the
    /// job's last outcome as status shows it.
    pub fn took_slot(self) -> bool {
        self.ran_command() || self == Outcome::SpawnFailed
    }

    /// The pass ended badly: what `check` counts as failing and the failure
    /// hook fires on (a `--timeout` included). Never a pass whose command never ran (skipped,
    /// coalesced, a wait that ran out) and never an operator's `stopped`.
    pub fn ended_badly(self) -> bool {
        matches!(
            self,
            Outcome::Failed
                | Outcome::Killed
                | Outcome::LostLease
                | Outcome::SpawnFailed
                | Outcome::Abandoned
                | Outcome::Timeout
        )
    }

    /// Whether a pass whose output was captured (`--output
    /// quiet-unless-failed`) prints it: whenever it did not end ok, like
    /// chronic, so cron mails only what went wrong (an operator's `stopped`
    /// included: the output says how far it got).
    pub fn prints_captured_output(self) -> bool {
        self != Outcome::Ok
    }

    /// What the outcome says about the pass, for the man pages.
    pub fn meaning(self) -> &'static str {
        match self {
            Outcome::Ok => "The command ran and exited 0.",
            Outcome::Failed => "The command ran and exited with another code.",
            Outcome::Skipped => {
                "Every slot was held, or the job was paused, and the pass did not wait \
                 (or lost its place in the queue); the command did not run."
            }
            Outcome::LostLease => {
                "The pass lost its lease while the command ran (a whole window went \
                 unrenewed, its row was taken, or it reached its max hold); the command ended \
                 on its own, or was stopped by --on-lost term."
            }
            Outcome::SpawnFailed => {
                "The pass took a slot but its command could not be started (not found, \
                 or not executable)."
            }
            Outcome::Killed => {
                "The command died of a signal jobrun did not forward to stop it (the \
                 kernel's OOM killer, a kill from elsewhere, a crash)."
            }
            Outcome::Stopped => {
                "The pass was told to stop (a signal to jobrun, stop-due) and the command \
                 died of the forwarded signal or of the KILL after it; or the command never \
                 started because the stop came first."
            }
            Outcome::Coalesced => {
                "The pass joined an identical queued pass (--coalesce) and ran nothing \
                 itself."
            }
            Outcome::WaitExpired => {
                "The pass queued (--wait) and no slot came free in time; the command never \
                 ran (earlier jobruns called it timed-out; history --outcome takes either name)."
            }
            Outcome::Timeout => {
                "The command ran past --timeout: its process group got TERM, then KILL after \
                 --kill-after, and the pass exited 124 (as timeout(1)) whatever the command \
                 did then."
            }
            Outcome::Done => {
                "A windowed pass (--once-per, --window) found its window done: a pass of the \
                 job had ended ok in it, on this host or another; the command did not run."
            }
            Outcome::Abandoned => {
                "The pass died without ending itself (its wrapper was killed without \
                 unwinding, its machine rebooted), or was evicted: whoever freed its slot, or \
                 removed its queue row, recorded it, with the last renewal as its end. A pass \
                 that was queued never ran its command; a holder that later reaches its own \
                 end replaces this with how it really ended."
            }
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Failed => "failed",
            Outcome::Skipped => "skipped",
            Outcome::LostLease => "lost-lease",
            Outcome::SpawnFailed => "spawn-failed",
            Outcome::Killed => "killed",
            Outcome::Stopped => "stopped",
            Outcome::Coalesced => "coalesced",
            Outcome::WaitExpired => "wait-expired",
            Outcome::Timeout => "timeout",
            Outcome::Done => "done",
            Outcome::Abandoned => "abandoned",
        }
    }

    /// The name a pass ended `name` is counted under: this jobrun's name
    /// for an outcome it reads (an earlier jobrun's `timed-out` counts as
    /// `wait-expired`), any other name as it stands.
    pub fn counted_name(name: &str) -> &str {
        Outcome::parse(name).map_or(name, |o| o.as_str())
    }

    pub fn parse(s: &str) -> Option<Outcome> {
        Some(match s {
            "ok" => Outcome::Ok,
            "failed" => Outcome::Failed,
            "skipped" => Outcome::Skipped,
            "lost-lease" => Outcome::LostLease,
            "spawn-failed" => Outcome::SpawnFailed,
            "killed" => Outcome::Killed,
            "stopped" => Outcome::Stopped,
            "coalesced" => Outcome::Coalesced,
            "wait-expired" | Outcome::WAIT_EXPIRED_BEFORE => Outcome::WaitExpired,
            "timeout" => Outcome::Timeout,
            "done" => Outcome::Done,
            "abandoned" => Outcome::Abandoned,
            _ => return None,
        })
    }
}

/// How a command that ran came to an end, as its wrapper saw it: the
/// facts `Outcome::of` decides on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Ending {
    /// The command could not be executed (not found, not executable).
    pub exec_failed: bool,
    /// Its exit code, when it exited.
    pub code: Option<i32>,
    /// The signal it died of, when it did.
    pub signal: Option<i32>,
    /// The terminating signal the wrapper received and forwarded, if any.
    pub stopped_by: Option<i32>,
    /// The wrapper had to KILL it after its grace period.
    pub killed: bool,
    /// The lease was lost (or max hold reached) while it ran.
    pub lease_lost: bool,
    /// It ran past `--timeout` and the wrapper told it to stop.
    pub timed_out: bool,
}

impl Outcome {
    /// How a pass whose command was started ended: the one rule.
    ///
    /// `stopped` only when the command died of the terminating signal the
    /// wrapper forwarded, or of a KILL after it (the wrapper's
    /// `--kill-after`, or stop-due's); a command that handled the signal and
    /// exited is judged by its exit code like any other. A command that ran
    /// past its timeout is `timeout` however it then ended (as
    /// `timeout(1)`), unless a stop came first. Then a lost lease, then any
    /// other death by signal (`killed`), then the exit code.
    pub fn of(e: &Ending) -> Outcome {
        let died_of_stop =
            e.stopped_by.is_some() && (e.signal == e.stopped_by || e.signal == Some(libc::SIGKILL));
        if e.exec_failed {
            Outcome::SpawnFailed
        } else if e.timed_out && !died_of_stop {
            Outcome::Timeout
        } else if died_of_stop {
            Outcome::Stopped
        } else if e.lease_lost {
            Outcome::LostLease
        } else if e.killed || e.signal.is_some() {
            Outcome::Killed
        } else if e.code == Some(0) {
            Outcome::Ok
        } else {
            Outcome::Failed
        }
    }
}

/// One pass as history keeps it, and as `history --json` prints it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PassRecord {
    pub job: String,
    pub pass_id: String,
    /// The fencing token, when the pass took a slot.
    pub token: Option<i64>,
    pub slot: Option<u32>,
    pub host: String,
    pub pid: i32,
    /// When the pass began (the wrapper started).
    pub started_at_ms: i64,
    pub ended_at_ms: i64,
    /// How long the command ran: from its release to exec to its end; 0
    /// when it never ran.
    pub duration_ms: i64,
    /// How long the pass waited before its command started (taking the
    /// slot, queueing); the whole pass when the command never ran. `None`
    /// for passes recorded before jobrun kept it.
    pub waited_ms: Option<i64>,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub outcome: Outcome,
    /// Who freed the pass's slot or removed its queue row, and why, when
    /// someone other than the pass did (`abandoned`, or a holder evicted
    /// while it lived that later recorded how it really ended).
    pub freed: Option<Freed>,
    /// The window of a windowed pass (`--once-per`: its start in Unix
    /// seconds; `--window`: its key): the one it claimed, or found done or
    /// given up.
    #[serde(default)]
    pub window: Option<String>,
}

/// Someone other than a pass freed it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Freed {
    /// Why: `dead`, `lapsed-unknown`, `forfeited` or `forced`
    /// (`FreeReason::key`).
    pub reason: String,
    /// Who: the command and where it ran, e.g. `clear-locks on web1 (pid 42)`.
    pub by: String,
    /// The verdict the holder was freed on, naming the evidence asked
    /// (`dead: no process (...), no container with its label`); `None` for
    /// a ghost waiter, or a pass an earlier jobrun freed.
    #[serde(default)]
    pub evidence: Option<String>,
}

/// `PassRecord::ran`, of a pass that ended with `outcome`, holding a slot
/// or not.
fn ran(outcome: Outcome, held: bool) -> bool {
    outcome.ran_command() || (outcome == Outcome::Abandoned && held)
}

/// `PassRecord::ended_badly`.
fn ended_badly(outcome: Outcome, held: bool) -> bool {
    outcome.ended_badly() && (outcome != Outcome::Abandoned || held)
}

/// `PassRecord::took_slot`.
fn took_slot(outcome: Outcome, held: bool) -> bool {
    outcome.took_slot() || (outcome == Outcome::Abandoned && held)
}

/// What `check` needs of one of a job's latest passes, kept per job beside
/// its figures (the last `RECENT` of them) so that it reads one row per
/// job, not a hundred: when it was attempted and where, how it ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(
    from = "(i64, i64, String, Outcome, bool, i64, i64, Option<i32>, Option<i32>)",
    into = "(i64, i64, String, Outcome, bool, i64, i64, Option<i32>, Option<i32>)"
)]
pub struct Seen {
    /// Its history row's id: a row updated in place replaces its entry.
    pub id: i64,
    /// `PassRecord::attempted_ms`.
    pub attempted_ms: i64,
    /// Shared by a list's entries from the same host: a read of every
    /// job's latest passes allocates one per run of a host, not one per
    /// pass.
    pub host: Arc<str>,
    pub outcome: Outcome,
    /// It held a slot (its record has a token).
    pub held: bool,
    pub duration_ms: i64,
    pub ended_at_ms: i64,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
}

/// How many of a job's latest passes are kept as `Seen`: enough for 20
/// ticks on a few hosts, the failing window and a p95.
pub const RECENT: usize = 100;

type SeenTuple = (
    i64,
    i64,
    String,
    Outcome,
    bool,
    i64,
    i64,
    Option<i32>,
    Option<i32>,
);

impl From<SeenTuple> for Seen {
    fn from(t: SeenTuple) -> Seen {
        let (id, attempted_ms, host, outcome, held, duration_ms, ended_at_ms, exit_code, signal) =
            t;
        Seen {
            id,
            attempted_ms,
            host: host.into(),
            outcome,
            held,
            duration_ms,
            ended_at_ms,
            exit_code,
            signal,
        }
    }
}

impl From<Seen> for SeenTuple {
    fn from(s: Seen) -> SeenTuple {
        (
            s.id,
            s.attempted_ms,
            s.host.to_string(),
            s.outcome,
            s.held,
            s.duration_ms,
            s.ended_at_ms,
            s.exit_code,
            s.signal,
        )
    }
}

impl Seen {
    /// `PassRecord::ran`.
    pub fn ran(&self) -> bool {
        ran(self.outcome, self.held)
    }

    /// `PassRecord::ended_badly`.
    pub fn ended_badly(&self) -> bool {
        ended_badly(self.outcome, self.held)
    }

    /// `PassRecord::took_slot`.
    pub fn took_slot(&self) -> bool {
        took_slot(self.outcome, self.held)
    }

    /// Add `seen` to `kept` (in row order, newest last): an entry of the
    /// same row is replaced where it stands, a new one goes in its row's
    /// place, the oldest go past `RECENT`.
    pub fn keep(kept: &mut Vec<Seen>, seen: Seen) {
        match kept.iter_mut().find(|k| k.id == seen.id) {
            Some(k) => *k = seen,
            None => {
                let at = kept.partition_point(|k| k.id < seen.id);
                kept.insert(at, seen);
            }
        }
        if kept.len() > RECENT {
            kept.drain(..kept.len() - RECENT);
        }
    }
}

impl PassRecord {
    /// The pass ran its command: its duration counts in the summary. An
    /// abandoned pass ran it only if it held a slot (a queued one never
    /// did).
    pub fn ran(&self) -> bool {
        ran(self.outcome, self.token.is_some())
    }

    /// The pass ended badly (`Outcome::ended_badly`); an abandoned pass
    /// only if it held a slot (a ghost waiter never ran its command).
    pub fn ended_badly(&self) -> bool {
        ended_badly(self.outcome, self.token.is_some())
    }

    /// The pass tried to run its command: it took a slot (a `failing`
    /// verdict counts these, and only these).
    pub fn took_slot(&self) -> bool {
        took_slot(self.outcome, self.token.is_some())
    }

    /// When the scheduler fired it: its wrapper's start, before any wait.
    pub fn attempted_ms(&self) -> i64 {
        self.started_at_ms - self.waited_ms.unwrap_or(0).max(0)
    }

    /// What a job's latest passes keep of it (`Seen`), as history row `id`.
    pub fn seen(&self, id: i64) -> Seen {
        Seen {
            id,
            attempted_ms: self.attempted_ms(),
            host: self.host.as_str().into(),
            outcome: self.outcome,
            held: self.token.is_some(),
            duration_ms: self.duration_ms,
            ended_at_ms: self.ended_at_ms,
            exit_code: self.exit_code,
            signal: self.signal,
        }
    }

    /// The record of a holder someone else freed: from the lease row as
    /// read in the freeing transaction, ending at its last renewal.
    pub fn abandoned_holder(
        row: &LeaseRow,
        reason: FreeReason,
        evidence: Option<&str>,
        by: &str,
        now_ms: i64,
    ) -> PassRecord {
        let ended = now_ms.saturating_sub(row.renewed_ago_ms.max(0));
        PassRecord {
            job: row.job.clone(),
            pass_id: row.pass_id.clone(),
            token: Some(row.token),
            slot: Some(row.slot),
            host: row.holder.host.clone(),
            pid: row.holder.wrapper.pid,
            started_at_ms: row.acquired_at_ms,
            ended_at_ms: ended,
            duration_ms: row.held_ms.saturating_sub(row.renewed_ago_ms).max(0),
            waited_ms: None,
            exit_code: None,
            signal: None,
            outcome: Outcome::Abandoned,
            freed: Some(Freed {
                reason: reason.key().into(),
                by: by.into(),
                evidence: evidence.map(str::to_string),
            }),
            window: None,
        }
    }

    /// The record of a queued pass removed as a ghost: it never ran, and
    /// waited until its last renewal.
    pub fn abandoned_waiter(
        row: &WaiterRow,
        reason: FreeReason,
        by: &str,
        now_ms: i64,
    ) -> PassRecord {
        let renewed_ago = row.stamps.lease_ms.saturating_sub(row.expires_in_ms).max(0);
        let ended = now_ms.saturating_sub(renewed_ago);
        PassRecord {
            job: row.job.clone(),
            pass_id: row.pass_id.clone(),
            token: None,
            slot: None,
            host: row.holder.host.clone(),
            pid: row.holder.wrapper.pid,
            started_at_ms: row.arrived_at_ms,
            ended_at_ms: ended,
            duration_ms: 0,
            waited_ms: Some(ended.saturating_sub(row.arrived_at_ms).max(0)),
            exit_code: None,
            signal: None,
            outcome: Outcome::Abandoned,
            freed: Some(Freed {
                reason: reason.key().into(),
                by: by.into(),
                evidence: None,
            }),
            window: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(id: i64) -> Seen {
        Seen {
            id,
            attempted_ms: id,
            host: "h".into(),
            outcome: Outcome::Ok,
            held: true,
            duration_ms: id,
            ended_at_ms: id,
            exit_code: Some(0),
            signal: None,
        }
    }

    fn ids(kept: &[Seen]) -> Vec<i64> {
        kept.iter().map(|s| s.id).collect()
    }

    #[test]
    fn the_latest_passes_stay_in_row_order() {
        // A row folded late goes in its place, not at the end.
        let mut kept = vec![seen(1), seen(3)];
        Seen::keep(&mut kept, seen(2));
        assert_eq!(ids(&kept), [1, 2, 3]);
        // A row updated in place replaces its entry where it stands.
        let mut failed = seen(2);
        failed.outcome = Outcome::Failed;
        Seen::keep(&mut kept, failed);
        assert_eq!(ids(&kept), [1, 2, 3]);
        assert_eq!(kept[1].outcome, Outcome::Failed);
        // Full: a row older than all of them is the one that goes.
        let mut full: Vec<Seen> = (10..10 + RECENT as i64).map(seen).collect();
        Seen::keep(&mut full, seen(5));
        assert_eq!(full.len(), RECENT);
        assert_eq!(full[0].id, 10);
        Seen::keep(&mut full, seen(500));
        assert_eq!(
            (full.len(), full[0].id, full[RECENT - 1].id),
            (RECENT, 11, 500)
        );
    }

    #[test]
    fn captured_output_is_printed_unless_the_pass_ended_ok() {
        let printed: Vec<Outcome> = Outcome::ALL
            .into_iter()
            .filter(|o| !o.prints_captured_output())
            .collect();
        assert_eq!(printed, [Outcome::Ok]);
        // Every pass that ended badly prints what it kept.
        assert!(Outcome::ALL
            .into_iter()
            .all(|o| !o.ended_badly() || o.prints_captured_output()));
    }

    #[test]
    fn how_a_command_ended_decides_its_outcome() {
        const TERM: Option<i32> = Some(libc::SIGTERM);
        const KILL: Option<i32> = Some(libc::SIGKILL);
        let e = |code, signal, stopped_by, killed, lease_lost| Ending {
            exec_failed: false,
            code,
            signal,
            stopped_by,
            killed,
            lease_lost,
            timed_out: false,
        };
        let timed_out = |ending: Ending| Ending {
            timed_out: true,
            ..ending
        };
        let table = [
            (e(Some(0), None, None, false, false), Outcome::Ok),
            (e(Some(3), None, None, false, false), Outcome::Failed),
            // It handled the forwarded TERM and exited: judged by its code.
            (e(Some(0), None, TERM, false, false), Outcome::Ok),
            (e(Some(1), None, TERM, false, false), Outcome::Failed),
            (e(None, TERM, TERM, false, false), Outcome::Stopped),
            (e(None, KILL, TERM, true, false), Outcome::Stopped),
            (e(None, KILL, TERM, false, true), Outcome::Stopped),
            (e(None, TERM, None, false, false), Outcome::Killed),
            (
                e(None, Some(libc::SIGSEGV), TERM, false, false),
                Outcome::Killed,
            ),
            (e(None, KILL, None, false, true), Outcome::LostLease),
            (e(Some(0), None, None, false, true), Outcome::LostLease),
            (e(None, KILL, None, true, false), Outcome::Killed),
            // Past its timeout: however it then ended, unless stopped first.
            (
                timed_out(e(None, TERM, None, false, false)),
                Outcome::Timeout,
            ),
            (
                timed_out(e(None, KILL, None, true, false)),
                Outcome::Timeout,
            ),
            (
                timed_out(e(Some(0), None, None, false, false)),
                Outcome::Timeout,
            ),
            (
                timed_out(e(None, KILL, None, false, true)),
                Outcome::Timeout,
            ),
            (
                timed_out(e(None, TERM, TERM, false, false)),
                Outcome::Stopped,
            ),
        ];
        for (ending, want) in table {
            assert_eq!(Outcome::of(&ending), want, "{ending:?}");
        }
        let failed = Ending {
            exec_failed: true,
            code: Some(127),
            ..Ending::default()
        };
        assert_eq!(Outcome::of(&failed), Outcome::SpawnFailed);
    }

    #[test]
    fn which_passes_ended_badly() {
        use Outcome::*;
        let bad: Vec<Outcome> = Outcome::ALL
            .into_iter()
            .filter(|o| o.ended_badly())
            .collect();
        assert_eq!(
            bad,
            [Failed, LostLease, SpawnFailed, Killed, Timeout, Abandoned]
        );
        let pass = |outcome, token| PassRecord {
            job: "j".into(),
            pass_id: "p".into(),
            token,
            slot: None,
            host: "h".into(),
            pid: 1,
            started_at_ms: 0,
            ended_at_ms: 0,
            duration_ms: 0,
            waited_ms: None,
            exit_code: None,
            signal: None,
            outcome,
            freed: None,
            window: None,
        };
        // A holder freed as abandoned ended badly; a ghost waiter never ran.
        assert!(pass(Abandoned, Some(3)).ended_badly());
        assert!(pass(Abandoned, Some(3)).took_slot());
        assert!(!pass(Abandoned, None).ended_badly());
        assert!(!pass(Abandoned, None).took_slot());
        assert!(pass(SpawnFailed, None).took_slot());
        assert!(!pass(Stopped, Some(1)).ended_badly());
    }

    #[test]
    fn outcomes_round_trip() {
        for o in Outcome::ALL {
            assert_eq!(Outcome::parse(o.as_str()), Some(o));
        }
        // What earlier jobruns wrote still reads as what it meant.
        assert_eq!(Outcome::parse("timed-out"), Some(Outcome::WaitExpired));
    }
}
