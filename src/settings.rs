//! What the user typed, turned into resolved, validated settings.
//!
//! Every check that can fail at startup lives here, and each message says
//! what was wrong and why, so a bad cron line fails on its first run with
//! one line an operator can act on.

use std::ffi::{OsStr, OsString};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Result};

use crate::cli::RunArgs;
use crate::policy::containers::Engine;
use crate::policy::lease::MIN_LEASE;
use crate::policy::pause::PauseScope;
use crate::policy::watch::Declared;
use crate::store::StoreSpec;
use crate::supervise::OnLost;

pub const DEFAULT_ROOT_DB: &str = "/var/lib/jobrun/jobrun.db";
/// Any other user's default store, below `$XDG_STATE_HOME`.
pub const USER_DB: &str = "jobrun/jobrun.db";
/// `$XDG_STATE_HOME` when it is unset (or relative), below `$HOME`.
pub const STATE_HOME_DEFAULT: &str = ".local/state";
pub const MAX_NAME_LEN: usize = 200;

/// The longest `--lease`: a lease is renewed every third of it, so a longer
/// one only delays noticing a lost holder.
pub const MAX_LEASE: Duration = Duration::from_secs(30 * 86_400);
pub use crate::clock::MAX_DURATION;

/// Parse a humantime duration of at most `MAX_DURATION`, failing with an
/// example of a valid one.
pub fn duration(flag: &str, value: &str) -> Result<Duration> {
    duration_at_most(flag, value, MAX_DURATION, "100 years")
}

/// Parse a humantime duration of at most `max` (`max_text` as the user
/// reads it).
pub fn duration_at_most(
    flag: &str,
    value: &str,
    max: Duration,
    max_text: &str,
) -> Result<Duration> {
    let d = humantime::parse_duration(value.trim()).map_err(|e| {
        // humantime's own words name offsets into the text ("expected
        // number at 0"): said only when they help (an unknown unit).
        let why = match e {
            humantime::DurationError::UnknownUnit { unit, .. } => {
                format!(": '{unit}' is not a unit of time")
            }
            humantime::DurationError::NumberOverflow => ": it is too large".to_string(),
            _ => String::new(),
        };
        let ago = if flag == "--since" {
            " (how long ago: --since 2h, 7d; not a date)"
        } else {
            ""
        };
        anyhow::anyhow!(
            "invalid {flag} '{value}'{why}; expected a duration like 90s, 5m or 1h 30m{ago}"
        )
    })?;
    if d > max {
        bail!("invalid {flag} '{value}': it is longer than the most allowed, {max_text}");
    }
    Ok(d)
}

/// A job name: 1-200 printable characters, no control characters, no
/// bidirectional-override or zero-width characters (they make one name look
/// like another, or reorder the line it is shown in), no whitespace at
/// either end.
pub fn job_name(name: &str) -> Result<String> {
    if name.is_empty() {
        bail!("invalid job name: it is empty; use 1-{MAX_NAME_LEN} printable characters, e.g. feeds.poll");
    }
    if name.chars().count() > MAX_NAME_LEN {
        bail!(
            "invalid job name: {} characters is more than {MAX_NAME_LEN}",
            name.chars().count()
        );
    }
    if name.chars().any(char::is_control) {
        bail!("invalid job name {name:?}: it contains a control character");
    }
    if let Some(c) = name
        .chars()
        .find(|&c| crate::report::is_invisible_or_bidi(c))
    {
        bail!(
            "invalid job name \"{}\": it contains U+{:04X}, a bidirectional or zero-width \
             character that hides or reorders text",
            crate::report::escape(name),
            c as u32
        );
    }
    if name.trim() != name {
        bail!("invalid job name {name:?}: it starts or ends with whitespace");
    }
    if name == PauseScope::ALL_KEY {
        bail!("`*` is not a job name: it means all jobs; use --all");
    }
    Ok(name.to_string())
}

/// The name of a job the store may already hold, to look it up (status,
/// history, forget): the rules of `job_name`, except those made after a
/// store could have taken the name (`*`, now the "all jobs" scope), so that
/// such a job can still be shown and forgotten. Lookups bind the name as a
/// value and every output escapes it.
pub fn stored_job_name(name: &str) -> Result<String> {
    if name == PauseScope::ALL_KEY {
        return Ok(name.to_string());
    }
    job_name(name)
}

/// The owner tag of a pause (`--as TAG`): 1-64 ASCII letters, digits and
/// `.`, `_`, `-`, `:` (a tag is a name scripts agree on, never free text).
pub fn pause_owner(tag: &str) -> Result<String> {
    let ok = (1..=64).contains(&tag.len())
        && tag
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | ':'));
    if !ok {
        bail!(
            "invalid --as {tag:?}: a tag is 1-64 ASCII letters, digits, '.', '_', '-' or ':' \
             (e.g. --as upgrade)"
        );
    }
    Ok(tag.to_string())
}

/// Every name an operator command was given, each checked before any is
/// acted on: one bad name changes nothing.
pub fn job_names(names: &[String]) -> Result<Vec<String>> {
    names.iter().map(|n| job_name(n)).collect()
}

/// As `job_names`, for names looked up in the store (`stored_job_name`).
pub fn stored_job_names(names: &[String]) -> Result<Vec<String>> {
    names.iter().map(|n| stored_job_name(n)).collect()
}

/// What `pause` and `resume` were asked, validated: the scopes (all jobs
/// with `--all`, else each named job) and the owner tag.
#[derive(Debug, Clone)]
pub struct PauseSettings {
    pub scopes: Vec<PauseScope>,
    pub owner: Option<String>,
}

impl PauseSettings {
    pub fn resolve(targets: &crate::cli::Targets, owner: Option<&str>) -> Result<PauseSettings> {
        let scopes = if targets.all {
            vec![PauseScope::All]
        } else {
            job_names(&targets.names)?
                .into_iter()
                .map(PauseScope::Job)
                .collect()
        };
        Ok(PauseSettings {
            owner: owner.map(pause_owner).transpose()?,
            scopes,
        })
    }
}

/// What `stop-due` was asked, validated.
#[derive(Debug, Clone)]
pub struct StopSettings {
    pub names: Vec<String>,
    pub wait: Option<Duration>,
    pub kill_after: Option<Duration>,
    pub dry_run: bool,
}

impl StopSettings {
    pub fn resolve(a: &crate::cli::StopArgs) -> Result<StopSettings> {
        let names = stored_job_names(&a.targets.names)?;
        let wait = a
            .wait
            .as_deref()
            .map(|w| duration("--wait", w))
            .transpose()?;
        let kill_after = a
            .kill_after
            .as_deref()
            .map(|k| duration("--kill-after", k))
            .transpose()?;
        if kill_after.is_some() && wait.is_none() {
            bail!("--kill-after needs --wait: it escalates only while waiting for releases");
        }
        Ok(StopSettings {
            names,
            wait,
            kill_after,
            dry_run: a.dry_run,
        })
    }
}

/// The mode of files jobrun creates beside a SQLite store: octal, owner
/// read and write at least, no execute bits.
pub fn file_mode(mode: Option<&str>) -> Result<u32> {
    let Some(text) = mode else {
        return Ok(crate::store::DEFAULT_FILE_MODE);
    };
    let m = u32::from_str_radix(text.trim().trim_start_matches("0o"), 8).map_err(|_| {
        anyhow::anyhow!(
            "invalid --db-mode/JOBRUN_DB_MODE '{text}': expected an octal mode like 0600 or 0660"
        )
    })?;
    if m & !0o666 != 0 || m & 0o600 != 0o600 {
        bail!(
            "invalid --db-mode/JOBRUN_DB_MODE '{text}': the owner needs read and write (0600) and \
             files take no execute or special bits; e.g. 0660 for a group-shared store"
        );
    }
    if m & 0o002 != 0 {
        bail!(
            "invalid --db-mode/JOBRUN_DB_MODE '{text}': it lets every user write the store (and \
             its directory); share it with a group instead, e.g. 0660"
        );
    }
    Ok(m)
}

/// Which store a command uses, and whether the user named it (`--db` or
/// `JOBRUN_DB`) or it is this user's default: only the default location's
/// directory is ever created, and only the default store may be missing
/// without that being an error to a reader.
#[derive(Debug, Clone)]
pub struct StoreChoice {
    pub spec: StoreSpec,
    pub explicit: bool,
}

/// Where the store is: `--db`/`JOBRUN_DB`, or the default for this user.
pub fn store(db: Option<&str>, mode: Option<&str>) -> Result<StoreChoice> {
    let explicit = |spec| StoreChoice {
        spec,
        explicit: true,
    };
    let default = |spec| StoreChoice {
        spec,
        explicit: false,
    };
    let mode = file_mode(mode)?;
    if let Some(db) = db {
        if db.trim().is_empty() {
            bail!(
                "invalid --db/JOBRUN_DB: it is empty; give a file path or postgres://user@host/db"
            );
        }
        return Ok(explicit(StoreSpec::parse(db, mode)));
    }
    if nix::unistd::geteuid().is_root() {
        return Ok(default(StoreSpec::Sqlite(
            PathBuf::from(DEFAULT_ROOT_DB),
            mode,
        )));
    }
    // The XDG spec: a relative XDG_STATE_HOME is invalid and ignored.
    let state = std::env::var_os("XDG_STATE_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(STATE_HOME_DEFAULT)));
    match state {
        Some(dir) => Ok(default(StoreSpec::Sqlite(dir.join(USER_DB), mode))),
        None => bail!("no store given and neither XDG_STATE_HOME nor HOME is set; pass --db PATH"),
    }
}

/// An argument as text: UTF-8 as it is, every other byte as `\xNN`.
pub fn arg_text(arg: &OsStr) -> String {
    use std::fmt::Write;
    use std::os::unix::ffi::OsStrExt;
    let mut out = String::new();
    for chunk in arg.as_bytes().utf8_chunks() {
        out.push_str(chunk.valid());
        for b in chunk.invalid() {
            let _ = write!(out, "\\x{b:02x}");
        }
    }
    out
}

/// A job's declared interval: a duration of at least a second.
pub fn every_interval(flag: &str, value: &str) -> Result<Duration> {
    let d = duration(flag, value)?;
    if d < Duration::from_secs(1) {
        bail!(
            "{} {} is too short: a job's interval is at least 1s (e.g. 5m, 1h, 1d)",
            flag.split('/').next().unwrap_or(flag),
            value.trim()
        );
    }
    Ok(d)
}

/// A cron schedule and its zone, checked against the system's zoneinfo.
pub fn schedule(flag: &str, expr: &str, tz: Option<&str>) -> Result<Declared> {
    crate::schedule::Schedule::parse(expr, tz)
        .map_err(|e| anyhow::anyhow!("{}: {e}", flag.split('/').next().unwrap_or(flag)))?;
    Ok(Declared::Schedule {
        expr: expr.trim().to_string(),
        tz: tz.map(str::to_string),
    })
}

/// A duration in whole milliseconds, as the store keeps it.
pub fn millis_of(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

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
    pub on_lost: OnLost,
    pub conflict_exit_code: i32,
    pub quiet: bool,
    pub slots: u32,
    /// `None`: do not wait.
    pub wait: Option<Duration>,
    pub coalesce: bool,
    pub coalesced_exit_code: i32,
    pub keep_history: u32,
    /// The container engine the command hands its work to.
    pub containers: Option<Engine>,
    /// The cadence declared for the job (`--every`, `--schedule`).
    pub declared: Option<Declared>,
    /// `--max-idle`: hung once it has not touched for this long.
    pub max_idle: Option<Duration>,
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
            on_lost: match a.on_lost {
                crate::cli::OnLostArg::Continue => OnLost::Continue,
                crate::cli::OnLostArg::Term => OnLost::Term,
            },
            conflict_exit_code: a.conflict_exit_code,
            quiet: a.quiet,
            slots: a.slots,
            wait: (!wait.is_zero()).then_some(wait),
            coalesce: a.coalesce,
            coalesced_exit_code: a.coalesced_exit_code,
            keep_history: a.keep_history,
            containers: a.containers.map(|c| match c {
                crate::cli::ContainersArg::Docker => Engine::Docker,
                crate::cli::ContainersArg::Podman => Engine::Podman,
            }),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_rules() {
        assert!(job_name("feeds.poll").is_ok());
        assert!(job_name("digest.flush:2026-11-29T10").is_ok());
        assert!(job_name("").is_err());
        assert!(job_name(" lead").is_err());
        assert!(job_name("trail ").is_err());
        assert!(job_name("a\nb").is_err());
        assert!(job_name("a\u{202e}b").is_err());
        assert!(job_name("a\u{2066}b").is_err());
        assert!(job_name("a\u{200b}b").is_err());
        assert!(job_name("a\u{feff}b").is_err());
        assert!(job_name("a\u{061c}b").is_err());
        assert!(job_name("a\u{200e}b").is_err());
        assert!(job_name("caf\u{e9}.poll").is_ok());
        assert!(job_name(&"x".repeat(200)).is_ok());
        assert!(job_name(&"x".repeat(201)).is_err());
        // `*` is the "all jobs" scope of pauses, never a job.
        let e = job_name("*").unwrap_err().to_string();
        assert!(e.contains("--all"), "{e}");
        assert!(job_name("a*").is_ok());
        // A job stored under a name now refused can still be looked up.
        assert!(stored_job_name("*").is_ok());
        assert!(stored_job_name("").is_err());
        assert!(stored_job_name(" j").is_err());
    }

    #[test]
    fn arguments_that_are_not_utf8_show_their_bytes() {
        use std::os::unix::ffi::OsStrExt;
        assert_eq!(arg_text(OsStr::new("caf\u{e9}")), "caf\u{e9}");
        assert_eq!(arg_text(OsStr::from_bytes(b"a\xff\xe9b")), "a\\xff\\xe9b");
    }

    #[test]
    fn file_modes_keep_the_owner_and_refuse_exec_bits() {
        assert_eq!(file_mode(None).unwrap(), 0o600);
        assert_eq!(file_mode(Some("0660")).unwrap(), 0o660);
        assert!(file_mode(Some("0400")).is_err());
        assert!(file_mode(Some("0666")).is_err());
        assert!(file_mode(Some("0602")).is_err());
        assert_eq!(file_mode(Some("0640")).unwrap(), 0o640);
        assert!(file_mode(Some("0700")).is_err());
        assert!(file_mode(Some("rw")).is_err());
    }

    #[test]
    fn bad_durations_show_an_example() {
        let e = duration("--lease", "5 minutes please")
            .unwrap_err()
            .to_string();
        assert!(e.contains("like 90s, 5m or 1h 30m"), "{e}");
        assert_eq!(
            duration("--lease", "1h 30m").unwrap(),
            Duration::from_secs(5400)
        );
    }

    #[test]
    fn durations_are_bounded() {
        let e = duration("--wait", "18446744073709551615s")
            .unwrap_err()
            .to_string();
        assert!(e.contains("longer than the most allowed, 100 years"), "{e}");
        assert!(duration("--wait", "36500days").is_ok());
        assert!(duration_at_most("--lease", "31days", MAX_LEASE, "30 days").is_err());
        assert!(duration_at_most("--lease", "30days", MAX_LEASE, "30 days").is_ok());
    }
}
