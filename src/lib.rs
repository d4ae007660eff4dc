//! jobrun: run scheduled passes under a renewed lease, so that no two passes
//! of a job overlap, a pass that dies without unwinding never blocks its job
//! for long, and an operator can always see who holds what.
//!
//! `main` parses the command line, resolves settings and hands over to one
//! module per subcommand; every failure of jobrun itself becomes one line on
//! stderr and exit code 125.

#![deny(clippy::undocumented_unsafe_blocks)]

pub(crate) mod cli;
pub(crate) mod clock;
pub(crate) mod cmd;
pub(crate) mod evidence;
pub(crate) mod exit;
pub(crate) mod files;
pub mod model;
pub(crate) mod policy;
pub(crate) mod process;
pub(crate) mod renewer;
pub(crate) mod report;
pub(crate) mod settings;
pub(crate) mod signal;
pub(crate) mod spawn;
pub(crate) mod store;
pub(crate) mod supervise;

use clap::Parser;

/// `jobrun --version`: the crate's version and, when built from a git
/// checkout, the revision (see build.rs), so an upgrade can be confirmed.
pub const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), env!("BUILD_VERSION_SUFFIX"));

use crate::cli::{Cli, Command};

/// Run jobrun with the process's arguments; returns the exit code.
pub fn main() -> i32 {
    // One malloc arena: the wrapper's few threads (signals, child, renewer)
    // allocate little, and an arena each would add to the resident memory
    // of every pass for the whole of its run.
    // SAFETY: mallopt only tunes the allocator; called before any thread.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
    }
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return usage_error(e),
    };
    if !matches!(cli.command, Command::Run(_)) {
        // An operator command whose reader went away (`jobrun status |
        // head -1`) ends at once, killed by SIGPIPE as `ls` and `flock`
        // are (the shell shows 141). The wrapper keeps SIGPIPE ignored: a
        // lost stderr must never end a pass (see `say!`).
        // SAFETY: restores the default disposition; no handler runs.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        }
    }
    match dispatch(cli) {
        Ok(code) => code,
        Err(e) => {
            say!("{e:#}");
            exit::JOBRUN_FAILED
        }
    }
}

/// `--help` and `--version` print and exit 0; any other usage error is one
/// line and exit 125.
fn usage_error(e: clap::Error) -> i32 {
    use clap::error::ErrorKind;
    match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
            let _ = e.print();
            exit::OK
        }
        ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            say!(
                "a command is required: run, status, clear-locks, stop-due, pause, resume, \
                 history or forget (see jobrun --help)"
            );
            exit::JOBRUN_FAILED
        }
        _ => {
            let text = e.render().to_string();
            let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
            let mut first = lines
                .next()
                .unwrap_or("invalid usage")
                .trim_start_matches("error: ")
                .to_string();
            // "the following required arguments were not provided:" lists
            // them on the next line; keep the message on one line.
            if first.ends_with(':') {
                if let Some(next) = lines.next() {
                    first = format!("{first} {next}");
                }
            }
            match run_without_separator(&e) {
                Some(hint) => say!("{first}; put -- before the command: {hint}"),
                None => say!("{first} (see jobrun --help)"),
            }
            exit::JOBRUN_FAILED
        }
    }
}

/// For `jobrun run foo true` (a command given without `--`): the same
/// command line with `--` where the command starts, as a hint.
fn run_without_separator(e: &clap::Error) -> Option<String> {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    if e.kind() != ErrorKind::UnknownArgument {
        return None;
    }
    let Some(ContextValue::String(extra)) = e.get(ContextKind::InvalidArg) else {
        return None;
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    let run = args.iter().position(|a| a == "run")?;
    if args.iter().any(|a| a == "--") || extra.starts_with('-') {
        return None;
    }
    let at = run + 1 + args[run + 1..].iter().position(|a| a == extra)?;
    let mut line = vec!["jobrun".to_string()];
    line.extend(args[..at].iter().map(|a| shell_word(a)));
    line.push("--".into());
    line.extend(args[at..].iter().map(|a| shell_word(a)));
    Some(line.join(" "))
}

/// `s` as one shell word: as it is when that is safe, else single-quoted.
fn shell_word(s: &str) -> String {
    let plain = !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./:=@%+,".contains(c));
    if plain {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

fn dispatch(cli: Cli) -> anyhow::Result<i32> {
    if let Command::Generate(g) = &cli.command {
        return cmd::generate::run(g);
    }
    clock::check_skew()?;
    let spec = settings::store(cli.db.as_deref(), cli.db_mode.as_deref())?;
    match cli.command {
        Command::Run(a) => cmd::run::run(spec, settings::RunSettings::resolve(&a)?),
        Command::Status(a) => cmd::status::run(spec, a),
        Command::ClearLocks(a) => cmd::clear_locks::run(spec, a),
        Command::StopDue(a) => cmd::stop_due::run(spec, a),
        Command::Pause(a) => cmd::pause::pause(spec, a),
        Command::Resume(a) => cmd::pause::resume(spec, a),
        Command::History(a) => cmd::history::run(spec, a),
        Command::Forget(a) => cmd::forget::run(spec, a),
        Command::Generate(_) => unreachable!("handled above"),
    }
}
