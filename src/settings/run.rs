//! `run`'s settings (RunSettings, OutputSettings, sizes, the window it
//! asks for), moved out of `settings/mod.rs` to keep it under the 600-line
//! rule; `settings` re-exports them.

use std::ffi::OsString;
use std::time::Duration;

use anyhow::{bail, Result};

use super::{
    arg_text, duration, duration_at_most, every_interval, job_name, millis_of, schedule, MAX_LEASE,
};
use crate::cli::RunArgs;
use crate::hook::Hooks;
use crate::policy::containers::Engine;
use crate::policy::lease::MIN_LEASE;
use crate::policy::watch::Declared;
use crate::policy::window::{WindowAsk, WindowSpec};
use crate::store::Keep;
use crate::supervise::OnLost;

/// Everything `run` needs, validated.
#[derive(Debug, Clone)]
pub struct RunSettings {
    pub job: String,
    /// The command, byte for byte as given.
    pub argv: Vec<OsString>,
    /// The command as the store keeps it (shown by status, compared by
    /// `--coalesce`): UTF-8 as it is, each byte that is not UTF-8 as `\xNN`.
    pub argv_text: Vec<String>,
    /// Every argument is UTF-8: only then may the pass coalesce, so two
    /// commands that differ in bytes the text form hides never join.
    pub argv_exact: bool,
    pub lease: Duration,
    pub max_hold: Duration,
    pub kill_after: Duration,
    /// `--timeout`: how long the command may run, from its start.
    pub timeout: Option<Duration>,
    /// `--jitter`: a fresh random wait in [0, D) before the pass.
    pub jitter: Option<Duration>,
    /// `--spread`: a stable wait in [0, D) from the host and the job.
    pub spread: Option<Duration>,
    pub on_lost: OnLost,
    pub conflict_exit_code: i32,
    pub quiet: bool,
    pub slots: u32,
    /// `None`: do not wait.
    pub wait: Option<Duration>,
    pub coalesce: bool,
    pub coalesced_exit_code: i32,
    pub keep_history: Keep,
    /// The container engine the command hands its work to.
    pub containers: Option<Engine>,
    /// `--once-per` or `--window`, with `--window-attempts`.
    pub window: Option<WindowAsk>,
    /// `None`: `--output inherit`.
    pub output: Option<OutputSettings>,
    /// `--on-start`, `--on-success`, `--on-failure`, `--hook-timeout`.
    pub hooks: Hooks,
    /// `--syslog`: each pass's outcome line to syslog too.
    pub syslog: bool,
    /// The cadence declared for the job (`--every`, `--schedule`).
    pub declared: Option<Declared>,
    /// `--max-idle`: hung once it has not touched for this long.
    pub max_idle: Option<Duration>,
}

/// `--output quiet-unless-failed` and its bounds, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutputSettings {
    pub limit: u64,
    /// The tail kept with a pass that ended badly (0: none).
    pub keep: u64,
    /// The most kept output the store holds.
    pub keep_total: u64,
}

/// A size as typed: a number of bytes, with an optional unit (`K`/`KiB`,
/// `M`/`MiB`, `G`/`GiB` count in 1024s; `KB`, `MB`, `GB` in 1000s).
pub fn size(flag: &str, text: &str) -> Result<u64> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, unit) = t.split_at(split);
    let unit = unit.trim().to_ascii_lowercase();
    let scale: u64 = match unit.as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        "kb" => 1000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        _ => bail!("{flag}: invalid size {t:?}: use a number of bytes with an optional unit, like 64KiB, 10MiB or 0"),
    };
    let n: u64 = digits
        .parse()
        .map_err(|_| anyhow::anyhow!("{flag}: invalid size {t:?}: use a number of bytes with an optional unit, like 64KiB, 10MiB or 0"))?;
    n.checked_mul(scale)
        .filter(|b| *b <= MAX_SIZE)
        .ok_or_else(|| anyhow::anyhow!("{flag}: {t} is more than the most allowed, 1TiB"))
}

/// The largest size any flag takes.
const MAX_SIZE: u64 = 1 << 40;

impl OutputSettings {
    fn resolve(a: &RunArgs) -> Result<Option<OutputSettings>> {
        let limit = size("--output-limit/JOBRUN_OUTPUT_LIMIT", &a.output_limit)?;
        let keep = size("--keep-output/JOBRUN_KEEP_OUTPUT", &a.keep_output)?;
        let keep_total = size(
            "--keep-output-total/JOBRUN_KEEP_OUTPUT_TOTAL",
            &a.keep_output_total,
        )?;
        if limit < crate::capture::MIN_LIMIT {
            bail!(
                "--output-limit {} is too small: a spool keeps a head, a tail and the line                  marking the cut; use 1KiB or more",
                a.output_limit.trim()
            );
        }
        Ok(match a.output {
            crate::cli::OutputArg::Inherit => None,
            crate::cli::OutputArg::QuietUnlessFailed => Some(OutputSettings {
                limit,
                keep: keep.min(keep_total),
                keep_total,
            }),
        })
    }
}

impl RunSettings {
    pub fn resolve(a: &RunArgs) -> Result<RunSettings> {
        let job = job_name(&a.name)?;
        if a.command.is_empty() || a.command[0].is_empty() {
            bail!("missing command: usage is jobrun run NAME -- COMMAND [ARGS...]");
        }
        let lease = duration_at_most("--lease/JOBRUN_LEASE", &a.lease, MAX_LEASE, "30 days")?;
        let max_hold = duration("--max-hold/JOBRUN_MAX_HOLD", &a.max_hold)?;
        let kill_after = duration("--kill-after/JOBRUN_KILL_AFTER", &a.kill_after)?;
        let wait = duration("--wait/JOBRUN_WAIT", &a.wait)?;
        let timeout = a
            .timeout
            .as_deref()
            .map(|t| duration("--timeout/JOBRUN_TIMEOUT", t))
            .transpose()?
            .filter(|t| !t.is_zero());
        let delay = |flag: &str, value: &Option<String>| {
            value
                .as_deref()
                .map(|v| duration(flag, v))
                .transpose()
                .map(|d| d.filter(|d| !d.is_zero()))
        };
        let jitter = delay("--jitter/JOBRUN_JITTER", &a.jitter)?;
        let spread = delay("--spread/JOBRUN_SPREAD", &a.spread)?;
        let window = window_ask(a)?;
        if let Some(w) = &window {
            let flag = match w.spec {
                WindowSpec::Every(_) => "--once-per",
                WindowSpec::Key(_) => "--window",
            };
            if a.slots > 1 {
                bail!(
                    "{flag} runs one pass per window: it cannot be given --slots {} (two passes \
                     of one window would run at once)",
                    a.slots
                );
            }
            if a.coalesce {
                bail!(
                    "{flag} cannot be given --coalesce: a pass joined into another would end \
                     with that pass's window, not its own"
                );
            }
        }
        let hook_timeout = duration("--hook-timeout/JOBRUN_HOOK_TIMEOUT", &a.hook_timeout)?;
        if lease < MIN_LEASE {
            bail!(
                "--lease {} is too short: the lease is renewed every third of it (at least every \
                 1s), so a lease under 3s lapses between renewals; use 3s or more",
                a.lease.trim()
            );
        }
        if max_hold < lease {
            bail!(
                "--max-hold {} is shorter than --lease {}: the backstop must be at least one \
                 lease window",
                a.max_hold.trim(),
                a.lease.trim()
            );
        }
        let declared = match (&a.every, &a.schedule) {
            (Some(every), _) => Some(Declared::Every {
                interval_ms: millis_of(every_interval("--every/JOBRUN_EVERY", every)?),
            }),
            (None, Some(expr)) => Some(schedule(
                "--schedule/JOBRUN_SCHEDULE",
                expr,
                a.tz.as_deref(),
            )?),
            (None, None) => None,
        };
        let max_idle = a
            .max_idle
            .as_deref()
            .map(|v| duration("--max-idle/JOBRUN_MAX_IDLE", v))
            .transpose()?;
        if max_idle.is_some_and(|m| m < lease) {
            bail!(
                "--max-idle {} is shorter than --lease {}: a touch is seen at the next renewal, \
                 so the idle limit must be at least one lease window",
                a.max_idle.as_deref().unwrap_or_default().trim(),
                a.lease.trim()
            );
        }
        let age = a
            .keep_history_for
            .as_deref()
            .map(|v| duration("--keep-history-for/JOBRUN_KEEP_HISTORY_FOR", v))
            .transpose()?;
        if age.is_some_and(|d| d.is_zero()) {
            bail!(
                "--keep-history-for 0: the age limit must be longer than 0 (for the newest pass \
                 only, use --keep-history 1)"
            );
        }
        Ok(RunSettings {
            max_idle,
            declared,
            job,
            argv: a.command.clone(),
            argv_text: a.command.iter().map(|a| arg_text(a)).collect(),
            argv_exact: a.command.iter().all(|a| a.to_str().is_some()),
            lease,
            max_hold,
            kill_after,
            timeout,
            jitter,
            spread,
            // A windowed pass that lost its lease is stopped before anyone
            // can claim its window again.
            on_lost: match a.on_lost {
                _ if window.is_some() => OnLost::Term,
                crate::cli::OnLostArg::Continue => OnLost::Continue,
                crate::cli::OnLostArg::Term => OnLost::Term,
            },
            conflict_exit_code: a.conflict_exit_code,
            quiet: a.quiet,
            slots: a.slots,
            wait: (!wait.is_zero()).then_some(wait),
            coalesce: a.coalesce,
            coalesced_exit_code: a.coalesced_exit_code,
            keep_history: Keep {
                passes: a.keep_history,
                age,
            },
            containers: a.containers.map(|c| match c {
                crate::cli::ContainersArg::Docker => Engine::Docker,
                crate::cli::ContainersArg::Podman => Engine::Podman,
            }),
            output: OutputSettings::resolve(a)?,
            window,
            hooks: Hooks {
                on_start: a.on_start.clone(),
                on_success: a.on_success.clone(),
                on_failure: a.on_failure.clone(),
                timeout: hook_timeout,
            },
            syslog: a.syslog,
        })
    }
}

/// `--once-per D` or `--window KEY` (clap refuses both), with
/// `--window-attempts`.
fn window_ask(a: &RunArgs) -> Result<Option<WindowAsk>> {
    let spec = match (&a.once_per, &a.window) {
        (Some(d), _) => {
            let every = duration("--once-per/JOBRUN_ONCE_PER", d)?;
            let Some(spec) = WindowSpec::every(every) else {
                bail!(
                    "invalid --once-per/JOBRUN_ONCE_PER '{}': windows are whole seconds, at \
                     least 1s, e.g. 5m or 1h",
                    d.trim()
                );
            };
            spec
        }
        (None, Some(key)) => WindowSpec::Key(window_key(key)?),
        (None, None) => return Ok(None),
    };
    Ok(Some(WindowAsk {
        spec,
        attempts: a.window_attempts,
    }))
}

/// A `--window` key: the rules of a job name.
pub fn window_key(key: &str) -> Result<String> {
    job_name(key).map_err(|e| {
        anyhow::anyhow!(
            "invalid --window/JOBRUN_WINDOW_KEY: {}",
            e.to_string()
                .replace("invalid job name", "the key")
                .replace("a job name", "a window key")
                .replace("e.g. feeds.poll", "e.g. 2026-12-01")
        )
    })
}
