//! The line most ticks of most jobs run, `jobrun run NAME -- COMMAND
//! [ARGS...]` with no option typed and none of `run`'s variables set,
//! read without building clap's parser: building it costs a pass about as
//! much as its whole take transaction (some fifty page faults in clap's
//! code, its argument tables and a deep stack). Such a line takes every
//! option's default, so the result is clap's to the field (tests compare
//! the two); every other line, and every line clap would refuse, goes to
//! clap as before.

use std::ffi::OsString;

use super::{Cli, Command, OnLostArg, OutputArg, RunArgs, StoreArgs};

/// The store's variables, which a plain line takes as `--db` and
/// `--db-mode` would be taken.
const STORE_ENV: [&str; 2] = ["JOBRUN_DB", "JOBRUN_DB_MODE"];

/// The variables of `run`'s own options: with any of them set (even
/// empty), the line goes to clap.
const RUN_ENV: &[&str] = &[
    "JOBRUN_LEASE",
    "JOBRUN_MAX_HOLD",
    "JOBRUN_TIMEOUT",
    "JOBRUN_JITTER",
    "JOBRUN_SPREAD",
    "JOBRUN_MAX_IDLE",
    "JOBRUN_KILL_AFTER",
    "JOBRUN_ON_LOST",
    "JOBRUN_CONFLICT_EXIT_CODE",
    "JOBRUN_QUIET",
    "JOBRUN_SLOTS",
    "JOBRUN_WAIT",
    "JOBRUN_COALESCE",
    "JOBRUN_COALESCED_EXIT_CODE",
    "JOBRUN_CONTAINERS",
    "JOBRUN_ONCE_PER",
    "JOBRUN_WINDOW_KEY",
    "JOBRUN_WINDOW_ATTEMPTS",
    "JOBRUN_ON_START",
    "JOBRUN_ON_SUCCESS",
    "JOBRUN_ON_FAILURE",
    "JOBRUN_HOOK_TIMEOUT",
    "JOBRUN_SYSLOG",
    "JOBRUN_EVERY",
    "JOBRUN_SCHEDULE",
    "JOBRUN_TZ",
    "JOBRUN_KEEP_HISTORY",
    "JOBRUN_KEEP_HISTORY_FOR",
    "JOBRUN_OUTPUT",
    "JOBRUN_OUTPUT_LIMIT",
    "JOBRUN_KEEP_OUTPUT",
    "JOBRUN_KEEP_OUTPUT_TOTAL",
];

/// `args` (the words after the program's name) as clap would parse them,
/// when they are exactly `run NAME -- COMMAND [ARGS...]` with NAME UTF-8
/// and not an option, and `var` (the environment) sets none of `RUN_ENV`
/// and the store's variables only to non-empty UTF-8; `None` for any other
/// line.
pub fn plain_run(args: &[OsString], var: impl Fn(&str) -> Option<OsString>) -> Option<Cli> {
    let [run, name, dashes, command @ ..] = args else {
        return None;
    };
    if run != "run" || dashes != "--" || command.is_empty() {
        return None;
    }
    let name = name.to_str().filter(|n| !n.starts_with('-'))?;
    if RUN_ENV.iter().any(|v| var(v).is_some()) {
        return None;
    }
    let [db, db_mode] = STORE_ENV.map(|v| match var(v) {
        None => Some(None),
        Some(s) => s.into_string().ok().filter(|s| !s.is_empty()).map(Some),
    });
    Some(Cli {
        store: StoreArgs {
            db: db?,
            db_mode: db_mode?,
        },
        command: Command::Run(RunArgs::defaults(name.to_owned(), command.to_vec())),
    })
}

impl RunArgs {
    /// NAME and COMMAND with every option at the default its `#[arg]`
    /// gives (`plain_run`'s tests hold the two together).
    fn defaults(name: String, command: Vec<OsString>) -> RunArgs {
        RunArgs {
            name,
            command,
            lease: "5m".into(),
            max_hold: "24h".into(),
            timeout: None,
            jitter: None,
            spread: None,
            max_idle: None,
            kill_after: "10s".into(),
            on_lost: OnLostArg::Continue,
            conflict_exit_code: crate::exit::CONFLICT_DEFAULT,
            quiet: false,
            slots: 1,
            wait: "0".into(),
            coalesce: false,
            coalesced_exit_code: 0,
            containers: None,
            once_per: None,
            window: None,
            window_attempts: 3,
            on_start: None,
            on_success: None,
            on_failure: None,
            hook_timeout: "10s".into(),
            syslog: false,
            every: None,
            schedule: None,
            tz: None,
            keep_history: 1000,
            keep_history_for: None,
            output: OutputArg::Inherit,
            output_limit: "10MiB".into(),
            keep_output: "64KiB".into(),
            keep_output_total: "64MiB".into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::RunOnly;
    use clap::{CommandFactory, FromArgMatches};
    use std::collections::{BTreeSet, HashMap};

    fn words(line: &[&str]) -> Vec<OsString> {
        line.iter().map(OsString::from).collect()
    }

    fn env(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<OsString> {
        let vars: HashMap<String, OsString> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), OsString::from(v)))
            .collect();
        move |k| vars.get(k).cloned()
    }

    /// `run`'s parser as `RunOnly` builds it, reading no variable: what
    /// clap makes of a line typed with no environment at all.
    fn clap_alone(line: &[&str]) -> Result<Cli, clap::Error> {
        let cmd = RunOnly::command()
            .mut_args(|a| a.env(None::<&str>))
            .mut_subcommand("run", |s| s.mut_args(|a| a.env(None::<&str>)));
        let argv = std::iter::once("jobrun").chain(line.iter().copied());
        let matches = cmd.try_get_matches_from(argv)?;
        RunOnly::from_arg_matches(&matches).map(Cli::from)
    }

    /// A plain line, with or without the store's variables, is read to
    /// what clap reads of it (the variables as the flags they stand for);
    /// any other line is left to clap.
    #[test]
    fn a_plain_run_line_is_read_as_clap_reads_it() {
        let plain: &[&[&str]] = &[
            &["run", "x", "--", "true"],
            &["run", "feeds.poll", "--", "sh", "-c", "exit 3"],
            &["run", "x", "--", "a", "--b", "-c", "--"],
            &["run", "run", "--", "run"],
            &["run", "x", "--", ""],
            &["run", "", "--", "true"],
            &["run", "x y", "--", "true"],
        ];
        for line in plain {
            let read = plain_run(&words(line), env(&[])).expect("a plain line");
            let clap = clap_alone(line).unwrap_or_else(|e| panic!("{line:?}: {e}"));
            assert_eq!(format!("{read:?}"), format!("{clap:?}"), "{line:?}");
            // The store's variables, as the flags they stand for.
            let read = plain_run(
                &words(line),
                env(&[("JOBRUN_DB", "/srv/s.db"), ("JOBRUN_DB_MODE", "0660")]),
            )
            .expect("a plain line with the store's variables");
            let flagged: Vec<&str> = ["--db", "/srv/s.db", "--db-mode", "0660"]
                .into_iter()
                .chain(line.iter().copied())
                .collect();
            let clap = clap_alone(&flagged).unwrap_or_else(|e| panic!("{line:?}: {e}"));
            assert_eq!(format!("{read:?}"), format!("{clap:?}"), "{line:?}");
        }
        let other: &[&[&str]] = &[
            &["run", "x", "--"],
            &["run", "x", "true"],
            &["run", "x"],
            &["run"],
            &[],
            &["run", "-x", "--", "true"],
            &["run", "--db", "/s.db", "x", "--", "true"],
            &["run", "x", "--lease", "1m", "--", "true"],
            &["run", "--help"],
            &["--version"],
            &["status", "x", "--", "true"],
            &["--db", "/s.db", "run", "x", "--", "true"],
        ];
        for line in other {
            assert!(plain_run(&words(line), env(&[])).is_none(), "{line:?}");
        }
    }

    /// Every variable of `run`'s options sends the line to clap, even set
    /// empty; the store's go to clap when empty or not UTF-8.
    #[test]
    fn a_line_whose_options_come_from_the_environment_goes_to_clap() {
        let line = words(&["run", "x", "--", "true"]);
        for v in RUN_ENV {
            for value in ["1", ""] {
                assert!(
                    plain_run(&line, env(&[(v, value)])).is_none(),
                    "{v}={value}"
                );
            }
        }
        for v in STORE_ENV {
            assert!(plain_run(&line, env(&[(v, "")])).is_none(), "{v} empty");
            let not_utf8 = |k: &str| {
                use std::os::unix::ffi::OsStringExt;
                (k == v).then(|| OsString::from_vec(vec![0x66, 0xff]))
            };
            assert!(plain_run(&line, not_utf8).is_none(), "{v} not UTF-8");
        }
        // A name that is not UTF-8 is clap's to refuse.
        let mut odd = line.clone();
        odd[1] = {
            use std::os::unix::ffi::OsStringExt;
            OsString::from_vec(vec![0x78, 0xff])
        };
        assert!(plain_run(&odd, env(&[])).is_none());
    }

    /// `RUN_ENV` and `STORE_ENV` are every variable `run`'s parser reads:
    /// an option added with a variable of its own must be listed, or a
    /// plain line would miss what it sets.
    #[test]
    fn the_plain_reader_knows_every_variable_run_reads() {
        let cmd = RunOnly::command();
        let run = cmd.find_subcommand("run").expect("run");
        let read: BTreeSet<String> = cmd
            .get_arguments()
            .chain(run.get_arguments())
            .filter_map(|a| a.get_env())
            .map(|e| e.to_string_lossy().into_owned())
            .collect();
        let known: BTreeSet<String> = RUN_ENV
            .iter()
            .chain(STORE_ENV.iter())
            .map(|v| v.to_string())
            .collect();
        assert_eq!(read, known);
    }
}
