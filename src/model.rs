//! The documents `status --json` and `history --json` print, as types.
//!
//! A command builds its document once; its table and its JSON both read it,
//! and the integration tests deserialize it, so no reader picks fields out
//! of JSON by name. The documents are stable: fields are only ever added
//! (README, "status --json"; jobrun(1), JSON OUTPUT).
//!
//! Keys print in alphabetical order at every level, as they always have:
//! `to_json` goes through `serde_json::Value`, whose objects keep their keys
//! sorted. The fields here are declared in the order the documentation
//! lists them, and that order never reaches the output.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub use crate::policy::outcome::{Outcome, PassRecord};
pub use crate::policy::watch::{Basis, Severity};
pub use crate::policy::window::WindowState;
pub use crate::policy::Liveness;

/// A document as `--json` prints it: pretty, keys sorted at every level.
pub fn to_json<T: Serialize>(doc: &T) -> serde_json::Result<String> {
    serde_json::to_string_pretty(&serde_json::to_value(doc)?)
}

/// `jobrun status --json`: every job the store knows that was asked for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusReport {
    /// The store read (a URL without its password).
    pub store: String,
    pub jobs: Vec<JobStatus>,
}

impl StatusReport {
    /// The entry of job `name`, if the store knows it.
    pub fn job(&self, name: &str) -> Option<&JobStatus> {
        self.jobs.iter().find(|j| j.name == name)
    }
}

/// One job: its state, the pauses on it, its held slots, its queue and how
/// its last pass ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobStatus {
    pub name: String,
    /// The state of its first held slot; else paused, queued or free.
    pub state: State,
    /// The first of `pauses`.
    pub paused: Option<PauseStatus>,
    /// Every pause standing on the job: its own, then those on all jobs.
    pub pauses: Vec<PauseStatus>,
    pub slots: Vec<SlotStatus>,
    pub queue: QueueStatus,
    /// `None` until a pass of the job has taken a slot.
    pub last: Option<LastPass>,
    /// The last pass of the job of any kind, skips included (a skip shows
    /// the scheduler fired); `None` before the first.
    pub last_attempt: Option<LastAttempt>,
    /// The window a windowed pass (`--once-per`, `--window`) claimed last;
    /// `None` for a job that never ran windowed.
    #[serde(default)]
    pub window: Option<WindowStatus>,
}

/// The latest window of a job: its key, its state and its latest claim.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WindowStatus {
    /// `--once-per`: the window's start in Unix seconds; `--window`: its key.
    pub key: String,
    /// claimed (its claimer has not ended), done, failed (it may be claimed
    /// again) or given-up.
    pub state: WindowState,
    pub attempts: u32,
    pub max_attempts: u32,
    /// The latest claim: its pass, host, and when it was made and ended.
    pub pass_id: String,
    pub host: String,
    pub claimed: String,
    pub ended: Option<String>,
    /// How its latest claimer ended (`None` while it runs).
    pub outcome: Option<String>,
}

/// The last attempt at a job: its outcome and when it ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LastAttempt {
    pub outcome: String,
    pub ended_ago_ms: Option<i64>,
}

/// What `status` says of a job or of one held slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum State {
    Free,
    Running,
    /// The wrapper on this machine is stopped (SIGSTOP, a debugger).
    Stopped,
    Queued,
    Paused,
    /// The wrapper is gone, the command runs on.
    Orphaned,
    /// Nothing here can judge the holder, and its lease has lapsed.
    Stale,
    Dead,
}

impl State {
    pub const ALL: [State; 8] = [
        State::Free,
        State::Running,
        State::Stopped,
        State::Queued,
        State::Paused,
        State::Orphaned,
        State::Stale,
        State::Dead,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            State::Free => "free",
            State::Running => "running",
            State::Stopped => "stopped",
            State::Queued => "queued",
            State::Paused => "paused",
            State::Orphaned => "orphaned",
            State::Stale => "stale",
            State::Dead => "dead",
        }
    }
}

/// One pause standing on a job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PauseStatus {
    /// The tag of `pause --as TAG`; `None` for a bare pause.
    pub owner: Option<String>,
    pub reason: Option<String>,
    /// UTC, RFC 3339.
    pub since: String,
    /// A `pause --all`.
    pub all: bool,
}

/// One held slot and the verdict on its holder.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlotStatus {
    pub slot: u32,
    pub state: State,
    /// The fencing token the slot was taken under.
    pub token: i64,
    pub pass_id: String,
    pub holder: SlotHolder,
    pub verdict: VerdictStatus,
    /// When the slot was taken: UTC, RFC 3339.
    pub since: String,
    pub held_ms: i64,
    /// Never negative (a renewal stamped by a clock ahead of ours is 0).
    pub renewed_ago_ms: i64,
    /// Zero or negative once the lease has lapsed.
    pub expires_in_ms: i64,
    /// The last renewal came more than half the lease after the one
    /// before, or none has come for that long (`policy::lease::renewal_late`):
    /// the store serves renewals slower than its passes ask.
    #[serde(default)]
    pub renewal_late: bool,
    pub max_hold_ms: i64,
    pub command: Vec<String>,
    /// The container engine the pass declared (`run --containers`), whose
    /// answer about the pass's label is part of the verdict.
    #[serde(default)]
    pub containers: Option<String>,
}

/// Who holds a slot: the wrapper's host and pid, and the command's pid
/// once it is on record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlotHolder {
    pub host: String,
    pub pid: i32,
    pub child_pid: Option<i32>,
}

/// The evidence's judgement on a holder or a waiter.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VerdictStatus {
    pub liveness: Liveness,
    pub reason: String,
}

/// The passes waiting for a slot of a job, in the order they will get one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueStatus {
    pub length: usize,
    /// How long the head has waited; `None` when nobody waits.
    pub head_waited_ms: Option<i64>,
    pub waiters: Vec<WaiterStatus>,
}

/// One queued pass.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WaiterStatus {
    /// 1 for the head of the queue.
    pub position: usize,
    pub pass_id: String,
    pub holder: WaiterHolder,
    pub verdict: VerdictStatus,
    pub waited_ms: i64,
    pub command: Vec<String>,
}

/// Who waits: the wrapper's host and pid (a waiter has no command yet).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WaiterHolder {
    pub host: String,
    pub pid: i32,
}

/// How the last pass that took a slot of a job ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LastPass {
    /// As the store recorded it (an outcome name).
    pub outcome: String,
    pub duration_ms: Option<i64>,
    pub ended_ago_ms: Option<i64>,
}

/// `jobrun history --json`: the passes asked for and a summary per job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryReport {
    /// The store read (a URL without its password).
    pub store: String,
    /// Newest start first (`--reverse`: oldest first).
    pub passes: Vec<PassRecord>,
    /// One per job with history (within `--since`), whatever the listing
    /// kept.
    pub summary: Vec<Summary>,
}

/// Duration figures over the passes of a job that ran a command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Summary {
    pub job: String,
    pub count: usize,
    pub mean_ms: i64,
    pub p50_ms: i64,
    pub p95_ms: i64,
    pub max_ms: i64,
    /// Passes by outcome, all of them (those that ran nothing too).
    pub outcomes: BTreeMap<String, usize>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verdict(reason: &str) -> VerdictStatus {
        VerdictStatus {
            liveness: Liveness::Alive,
            reason: reason.into(),
        }
    }

    fn status() -> StatusReport {
        let pause = PauseStatus {
            owner: None,
            reason: Some("disk".into()),
            since: "2026-11-29T10:00:00Z".into(),
            all: false,
        };
        StatusReport {
            store: "/var/lib/jobrun/jobrun.db".into(),
            jobs: vec![JobStatus {
                name: "feeds.poll".into(),
                state: State::Running,
                paused: Some(pause.clone()),
                pauses: vec![pause],
                slots: vec![SlotStatus {
                    slot: 0,
                    state: State::Running,
                    token: 1764410400000001,
                    pass_id: "3f2a9c0b11de".into(),
                    holder: SlotHolder {
                        host: "web1".into(),
                        pid: 4242,
                        child_pid: None,
                    },
                    verdict: verdict("pid 4242 is running"),
                    since: "2026-11-29T10:00:00Z".into(),
                    held_ms: 12000,
                    renewed_ago_ms: 2000,
                    expires_in_ms: 298000,
                    renewal_late: false,
                    max_hold_ms: 86400000,
                    command: vec!["./poll".into()],
                    containers: Some("podman".into()),
                }],
                queue: QueueStatus {
                    length: 1,
                    head_waited_ms: Some(5000),
                    waiters: vec![WaiterStatus {
                        position: 1,
                        pass_id: "9e1f00c3a2b4".into(),
                        holder: WaiterHolder {
                            host: "web1".into(),
                            pid: 4301,
                        },
                        verdict: verdict("pid 4301 is running"),
                        waited_ms: 5000,
                        command: vec!["./poll".into()],
                    }],
                },
                last: Some(LastPass {
                    outcome: "ok".into(),
                    duration_ms: Some(3100),
                    ended_ago_ms: None,
                }),
                last_attempt: Some(LastAttempt {
                    outcome: "skipped".into(),
                    ended_ago_ms: Some(120000),
                }),
                window: None,
            }],
        }
    }

    fn history() -> HistoryReport {
        HistoryReport {
            store: "/var/lib/jobrun/jobrun.db".into(),
            passes: vec![PassRecord {
                job: "feeds.poll".into(),
                pass_id: "3f2a9c0b11de".into(),
                token: None,
                slot: None,
                host: "web1".into(),
                pid: 4242,
                started_at_ms: 1764410400000,
                ended_at_ms: 1764410400001,
                duration_ms: 0,
                waited_ms: Some(1),
                exit_code: None,
                signal: None,
                outcome: Outcome::Skipped,
                freed: None,
                window: None,
            }],
            summary: vec![Summary {
                job: "feeds.poll".into(),
                count: 0,
                mean_ms: 0,
                p50_ms: 0,
                p95_ms: 0,
                max_ms: 0,
                outcomes: BTreeMap::from([("skipped".into(), 1)]),
            }],
        }
    }

    /// Byte for byte what jobrun has always printed: sorted keys, two
    /// spaces, `null` for what is unknown, nothing left out.
    #[test]
    fn documents_print_as_they_always_have() {
        assert_eq!(
            to_json(&status()).unwrap(),
            r#"{
  "jobs": [
    {
      "last": {
        "duration_ms": 3100,
        "ended_ago_ms": null,
        "outcome": "ok"
      },
      "last_attempt": {
        "ended_ago_ms": 120000,
        "outcome": "skipped"
      },
      "name": "feeds.poll",
      "paused": {
        "all": false,
        "owner": null,
        "reason": "disk",
        "since": "2026-11-29T10:00:00Z"
      },
      "pauses": [
        {
          "all": false,
          "owner": null,
          "reason": "disk",
          "since": "2026-11-29T10:00:00Z"
        }
      ],
      "queue": {
        "head_waited_ms": 5000,
        "length": 1,
        "waiters": [
          {
            "command": [
              "./poll"
            ],
            "holder": {
              "host": "web1",
              "pid": 4301
            },
            "pass_id": "9e1f00c3a2b4",
            "position": 1,
            "verdict": {
              "liveness": "alive",
              "reason": "pid 4301 is running"
            },
            "waited_ms": 5000
          }
        ]
      },
      "slots": [
        {
          "command": [
            "./poll"
          ],
          "containers": "podman",
          "expires_in_ms": 298000,
          "held_ms": 12000,
          "holder": {
            "child_pid": null,
            "host": "web1",
            "pid": 4242
          },
          "max_hold_ms": 86400000,
          "pass_id": "3f2a9c0b11de",
          "renewal_late": false,
          "renewed_ago_ms": 2000,
          "since": "2026-11-29T10:00:00Z",
          "slot": 0,
          "state": "running",
          "token": 1764410400000001,
          "verdict": {
            "liveness": "alive",
            "reason": "pid 4242 is running"
          }
        }
      ],
      "state": "running",
      "window": null
    }
  ],
  "store": "/var/lib/jobrun/jobrun.db"
}"#
        );
        assert_eq!(
            to_json(&history()).unwrap(),
            r#"{
  "passes": [
    {
      "duration_ms": 0,
      "ended_at_ms": 1764410400001,
      "exit_code": null,
      "freed": null,
      "host": "web1",
      "job": "feeds.poll",
      "outcome": "skipped",
      "pass_id": "3f2a9c0b11de",
      "pid": 4242,
      "signal": null,
      "slot": null,
      "started_at_ms": 1764410400000,
      "token": null,
      "waited_ms": 1,
      "window": null
    }
  ],
  "store": "/var/lib/jobrun/jobrun.db",
  "summary": [
    {
      "count": 0,
      "job": "feeds.poll",
      "max_ms": 0,
      "mean_ms": 0,
      "outcomes": {
        "skipped": 1
      },
      "p50_ms": 0,
      "p95_ms": 0
    }
  ]
}"#
        );
    }

    /// The table and the JSON name a state alike.
    #[test]
    fn states_print_as_the_table_shows_them() {
        for s in State::ALL {
            assert_eq!(serde_json::to_value(s).unwrap(), s.as_str());
        }
    }

    #[test]
    fn documents_read_back_as_printed() {
        let s = status();
        assert_eq!(
            serde_json::from_str::<StatusReport>(&to_json(&s).unwrap()).unwrap(),
            s
        );
        let h = history();
        assert_eq!(
            serde_json::from_str::<HistoryReport>(&to_json(&h).unwrap()).unwrap(),
            h
        );
    }
}

/// `jobrun check --json`: the verdict on every job checked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckReport {
    /// The store read (a URL without its password).
    pub store: String,
    /// The worst of the jobs' (`ok` when none was checked).
    pub status: Severity,
    /// The exit code: 0 ok, 1 warning, 2 critical, 3 unknown.
    pub code: i32,
    /// The plugin's first line, perfdata included.
    pub summary: String,
    /// How many jobs have each verdict (`late`, `failing`, `stuck`,
    /// `dead_holder`, `long_queue`, `old_pause`), and `jobs` checked.
    pub counts: BTreeMap<String, usize>,
    pub jobs: Vec<JobCheck>,
}

impl CheckReport {
    /// The entry of job `name`, if it was checked.
    pub fn job(&self, name: &str) -> Option<&JobCheck> {
        self.jobs.iter().find(|j| j.name == name)
    }
}

/// One job's verdicts, and what its lateness is judged on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobCheck {
    pub name: String,
    pub status: Severity,
    /// Every verdict that is not OK, worst first.
    pub findings: Vec<Finding>,
    pub lateness: LatenessBasis,
}

/// A verdict that is not OK, with its reason in words.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Finding {
    /// `late`, `failing`, `stuck`, `dead_holder`, `long_queue` or
    /// `old_pause`.
    pub verdict: String,
    pub severity: Severity,
    pub reason: String,
}

/// What a job's lateness is judged on, or why it has no lateness verdict.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LatenessBasis {
    /// Declared (`every`, `schedule`) or `learned`; `None` when there is
    /// no lateness verdict.
    pub basis: Option<Basis>,
    /// Why there is no lateness verdict (too few attempts).
    pub no_verdict: Option<String>,
    /// The last attempt (any pass, skips included; attempts of several
    /// hosts for one tick count once), UTC.
    pub last_attempt: Option<String>,
    /// When the next attempt was due, UTC.
    pub due: Option<String>,
    pub interval_ms: Option<i64>,
    pub grace_ms: Option<i64>,
}
