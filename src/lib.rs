//! jobrun: run scheduled passes under a renewed lease, so that no two passes
//! of a job overlap, a pass that dies without unwinding never blocks its job
//! for long, and an operator can always see who holds what.
//!
//! `main` parses the command line, resolves settings and hands over to one
//! module per subcommand; every failure of jobrun itself becomes one line on
//! stderr and exit code 125.

pub mod cli;
pub mod clock;
pub mod cmd;
pub mod exit;
pub mod lease;
pub mod liveness;
pub mod notify;
pub mod renewer;
pub mod report;
pub mod settings;
pub mod spawn;
pub mod store;
pub mod supervise;
pub mod trust;
pub mod wake;

use clap::Parser;

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
                "a command is required: run, status, clear-locks, stop-due, pause, resume or \
                 history (see jobrun --help)"
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
            say!("{first} (see jobrun --help)");
            exit::JOBRUN_FAILED
        }
    }
}

fn dispatch(cli: Cli) -> anyhow::Result<i32> {
    if let Command::Generate(g) = &cli.command {
        return cmd::generate::run(g);
    }
    let spec = settings::store(cli.db.as_deref(), cli.db_mode.as_deref())?;
    match cli.command {
        Command::Run(a) => cmd::run::run(spec, settings::RunSettings::resolve(&a)?),
        Command::Status(a) => cmd::status::run(spec, a),
        Command::ClearLocks(a) => cmd::clear_locks::run(spec, a),
        Command::StopDue(a) => cmd::stop_due::run(spec, a),
        Command::Pause(a) => cmd::pause::pause(spec, a),
        Command::Resume(a) => cmd::pause::resume(spec, a),
        Command::History(a) => cmd::history::run(spec, a),
        Command::Generate(_) => unreachable!("handled above"),
    }
}
