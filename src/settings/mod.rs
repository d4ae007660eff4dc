//! What the user typed, turned into resolved, validated settings.
//!
//! Every check that can fail at startup lives here, and each message says
//! what was wrong and why, so a bad cron line fails on its first run with
//! one line an operator can act on.

use std::ffi::OsStr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Result};

use crate::policy::names;
use crate::policy::pause::PauseScope;
use crate::policy::watch::Declared;
use crate::store::StoreSpec;

mod run;
pub use run::*;

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

/// A job name: 1-200 printable characters, no control characters, nothing
/// that cannot be seen for what it is (`policy::names::hidden`: bidi and
/// zero-width characters, which reorder or hide text, every other
/// default-ignorable code point, unassigned and private-use code points;
/// they make one name look like another), no whitespace at either end.
pub fn job_name(name: &str) -> Result<String> {
    if let Some(c) = name.chars().find(|&c| names::hidden(c).is_some()) {
        bail!(
            "invalid job name \"{}\": it contains U+{:04X}, {}",
            crate::report::escape(name),
            c as u32,
            names::hidden(c).map(|h| h.what()).unwrap_or_default()
        );
    }
    name_as_stored(name)
}

/// The rules of `job_name` a name the store already holds still keeps:
/// all but the characters `policy::names::hidden` refuses, so that a job
/// stored under such a name (by an older jobrun, or by a writer of the
/// store) can still be shown, escaped, and forgotten.
fn name_as_stored(name: &str) -> Result<String> {
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
        bail!(
            "invalid job name \"{}\": it contains a control character",
            crate::report::escape(name)
        );
    }
    if name.trim() != name {
        bail!(
            "invalid job name \"{}\": it starts or ends with whitespace",
            crate::report::escape(name)
        );
    }
    if name == PauseScope::ALL_KEY {
        bail!("`*` is not a job name: it means all jobs; use --all");
    }
    Ok(name.to_string())
}

/// The name of a job the store may already hold, to look it up (status,
/// history, forget): the rules of `job_name`, except those made after a
/// store could have taken the name (`*`, now the "all jobs" scope, and the
/// invisible, unassigned and private-use characters), so that such a job
/// can still be shown and forgotten. Lookups bind the name as a value and
/// every output escapes it.
pub fn stored_job_name(name: &str) -> Result<String> {
    if name == PauseScope::ALL_KEY {
        return Ok(name.to_string());
    }
    name_as_stored(name)
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
            "invalid --as \"{}\": a tag is 1-64 ASCII letters, digits, '.', '_', '-' or ':' \
             (e.g. --as upgrade)",
            crate::report::escape(tag)
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
    match mode_fault(m) {
        Some(why) => bail!("invalid --db-mode/JOBRUN_DB_MODE '{text}': {why}"),
        None => Ok(m),
    }
}

/// What is wrong with `m` as the mode of a store's files, if anything.
fn mode_fault(m: u32) -> Option<&'static str> {
    if m & !0o666 != 0 || m & 0o600 != 0o600 {
        return Some(
            "the owner needs read and write (0600) and files take no execute or special \
             bits; e.g. 0660 for a group-shared store",
        );
    }
    if m & 0o002 != 0 {
        return Some(
            "it lets every user write the store (and its directory); share it with a group \
             instead, e.g. 0660",
        );
    }
    None
}

/// A SQLite store that exists, used with the mode its owner gave its file
/// when no `--db-mode` was given: only the file's owner can change its mode
/// (any member of a group store can write its rows), so a group store made
/// with `--db-mode 0660` is read and written as such by every member, and
/// by root, without repeating it. A file every user may write is used with
/// that write bit taken away, so `files::judge` refuses it, naming its
/// mode; a mode `--db-mode` would refuse otherwise (execute or special
/// bits) is not adopted: the default stands. Read from the
/// file's own inode (`lstat`: a symlink is not followed, and is refused
/// when the store is opened).
fn with_owners_mode(spec: StoreSpec) -> StoreSpec {
    use std::os::unix::fs::MetadataExt;
    let StoreSpec::Sqlite(path, default) = spec else {
        return spec;
    };
    let mode = std::fs::symlink_metadata(&path)
        .ok()
        .filter(|md| md.is_file())
        .map(|md| md.mode() & 0o7777 & !0o002)
        .filter(|m| mode_fault(*m).is_none())
        .unwrap_or(default);
    StoreSpec::Sqlite(path, mode)
}

/// `--db` is a file path or a PostgreSQL connection string, nothing else:
/// a SQLite URI (`file:...`) or `:memory:` would have jobrun judge and
/// create one path while SQLite opened another (or none), so both are
/// refused before anything is made.
fn not_a_sqlite_uri(db: &str) -> Result<()> {
    let shown = crate::report::escape(db);
    if db.starts_with("file:") {
        bail!(
            "invalid --db/JOBRUN_DB '{shown}': SQLite URIs are not accepted; give the store's \
             file path (e.g. /srv/app/jobrun.db) or a PostgreSQL URL (postgres://user@host/db)"
        );
    }
    if db == ":memory:" {
        bail!(
            "invalid --db/JOBRUN_DB ':memory:': an in-memory database keeps no lock between \
             passes; give the store's file path (e.g. /srv/app/jobrun.db)"
        );
    }
    Ok(())
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
    let given = mode.is_some();
    let mode = file_mode(mode)?;
    // Without --db-mode, a SQLite store that exists is used as its owner
    // made it (`with_owners_mode`).
    let adopt = |spec: StoreSpec| if given { spec } else { with_owners_mode(spec) };
    if let Some(db) = db {
        if db.trim().is_empty() {
            bail!(
                "invalid --db/JOBRUN_DB: it is empty; give a file path or postgres://user@host/db"
            );
        }
        not_a_sqlite_uri(db)?;
        return Ok(explicit(adopt(StoreSpec::parse(db, mode))));
    }
    if nix::unistd::geteuid().is_root() {
        return Ok(default(adopt(StoreSpec::Sqlite(
            PathBuf::from(DEFAULT_ROOT_DB),
            mode,
        ))));
    }
    // The XDG spec: a relative XDG_STATE_HOME is invalid and ignored.
    let state = std::env::var_os("XDG_STATE_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(STATE_HOME_DEFAULT)));
    match state {
        Some(dir) => Ok(default(adopt(StoreSpec::Sqlite(dir.join(USER_DB), mode)))),
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

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
        // Invisible, unassigned and private-use characters: refused in a
        // new name, found in a stored one.
        for name in [
            "deploy\u{fe00}",
            "a\u{ad}b",
            "a\u{e0041}",
            "a\u{378}",
            "a\u{e000}",
        ] {
            let e = job_name(name).unwrap_err().to_string();
            assert!(e.contains("U+") && !e.contains(name), "{e}");
            assert_eq!(stored_job_name(name).unwrap(), name);
        }
        assert!(stored_job_name("a\nb").is_err());
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
    fn db_is_a_path_or_a_postgres_string_and_an_existing_store_keeps_its_mode() {
        for bad in ["file:x.db", "file:/srv/a.db?mode=ro", ":memory:"] {
            let e = store(Some(bad), None).unwrap_err().to_string();
            assert!(e.starts_with("invalid --db/JOBRUN_DB"), "{bad}: {e}");
        }
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("file:a.db");
        let mode_of =
            |mode: Option<&str>| match store(Some(db.to_str().unwrap()), mode).unwrap().spec {
                StoreSpec::Sqlite(_, m) => m,
                other => panic!("{other:?}"),
            };
        assert_eq!(mode_of(None), 0o600, "no store yet: the default");
        std::fs::write(&db, b"").unwrap();
        for (file, used) in [
            (0o660, 0o660),
            (0o640, 0o640),
            (0o666, 0o664),
            (0o760, 0o600),
        ] {
            std::fs::set_permissions(&db, std::fs::Permissions::from_mode(file)).unwrap();
            assert_eq!(mode_of(None), used, "file {file:o}");
            assert_eq!(mode_of(Some("0600")), 0o600, "an explicit --db-mode stands");
        }
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
    fn sizes_take_units_and_say_how_when_wrong() {
        assert_eq!(size("--x", "0").unwrap(), 0);
        assert_eq!(size("--x", "64KiB").unwrap(), 65536);
        assert_eq!(size("--x", "64 k").unwrap(), 65536);
        assert_eq!(size("--x", "10MiB").unwrap(), 10 << 20);
        assert_eq!(size("--x", "2kB").unwrap(), 2000);
        assert_eq!(size("--x", "1G").unwrap(), 1 << 30);
        for bad in [
            "",
            "ten",
            "10 parsecs",
            "-1",
            "2TiB",
            "99999999999999999999",
        ] {
            let e = size("--x", bad).unwrap_err().to_string();
            assert!(e.starts_with("--x: "), "{e}");
        }
        let e = size("--x", "ten").unwrap_err().to_string();
        assert!(e.contains("like 64KiB, 10MiB or 0"), "{e}");
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
