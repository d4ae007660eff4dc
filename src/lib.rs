//! jobrun: run scheduled passes under a renewed lease, so that no two passes
//! of a job overlap, a pass that dies without unwinding never blocks its job
//! for long, and an operator can always see who holds what.
//!
//! `main` parses the command line, resolves settings and hands over to one
//! module per subcommand; every failure of jobrun itself becomes one line on
//! stderr and exit code 125.

#![deny(clippy::undocumented_unsafe_blocks)]

pub(crate) mod capture;
pub(crate) mod cli;
pub(crate) mod clock;
pub(crate) mod cmd;
pub(crate) mod cron_log;
pub(crate) mod engine;
pub(crate) mod events;
pub(crate) mod evidence;
pub(crate) mod exit;
pub(crate) mod files;
pub(crate) mod heap;
pub(crate) mod hook;
pub mod model;
pub(crate) mod policy;
pub(crate) mod process;
pub(crate) mod random;
pub(crate) mod renewer;
pub(crate) mod report;
pub(crate) mod schedule;
pub(crate) mod settings;
pub(crate) mod signal;
pub(crate) mod spawn;
pub(crate) mod store;
pub(crate) mod supervise;
pub(crate) mod trace;

use clap::Parser;

/// See `heap`: a pass's many small allocations, served in fewer
/// instructions than `malloc`'s.
#[global_allocator]
static HEAP: heap::Heap = heap::Heap;

/// `jobrun --version`: the crate's version and, when built from a git
/// checkout, the revision (see build.rs), so an upgrade can be confirmed.
pub const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), env!("BUILD_VERSION_SUFFIX"));

/// What `--version` prints after the name: `VERSION`; in a jobrun built
/// without the PostgreSQL store, followed by where that store is served
/// (`store::elsewhere`), so that an install can tell it needs `jobrun-pg`.
#[cfg(feature = "postgres")]
pub const SHOWN_VERSION: &str = VERSION;
#[cfg(not(feature = "postgres"))]
pub const SHOWN_VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    env!("BUILD_VERSION_SUFFIX"),
    "; PostgreSQL stores by jobrun-pg"
);

use crate::cli::{Cli, Command};

/// The C `main` of a binary (`src/main.rs`, `src/bin/jobrun-pg.rs`, each
/// with `#![no_main]` outside tests): `c_main`.
#[macro_export]
macro_rules! entry_point {
    () => {
        #[cfg(not(test))]
        #[no_mangle]
        extern "C" fn main(
            _argc: std::ffi::c_int,
            _argv: *const *const std::ffi::c_char,
        ) -> std::ffi::c_int {
            $crate::c_main()
        }
    };
}

/// The binaries' entry point: `start`, then `main`. A panic ends jobrun
/// with 101, after its message, as under Rust's start.
pub fn c_main() -> std::ffi::c_int {
    start();
    let code = std::panic::catch_unwind(main).unwrap_or(101);
    std::process::exit(code)
}

/// What the binaries' entry point does before `main`, in place
/// of Rust's own start, which also reads `/proc/self/maps` for the main
/// thread's stack and sets up stack-overflow handlers on a signal stack of
/// their own: about 20 system calls and 100,000 instructions a pass.
///
/// Kept: a standard descriptor that is closed is opened on /dev/null, so
/// that no file jobrun opens takes its number and receives what is said on
/// stderr, and the command finds it open (where /dev/null cannot be
/// opened, jobrun refuses to start, 125, where Rust's start aborted);
/// SIGPIPE is ignored, as Rust's start leaves it (operator commands
/// restore it in `main`; a held command gets its default back). Without
/// the handlers a stack overflow still ends jobrun (SIGSEGV), without
/// Rust's one-line message.
pub fn start() {
    let mut fds = [0, 1, 2].map(|fd| libc::pollfd {
        fd,
        events: 0,
        revents: 0,
    });
    // SAFETY: poll only writes the `revents` of the three entries given.
    let polled = unsafe { libc::poll(fds.as_mut_ptr(), 3, 0) } >= 0;
    for p in fds {
        let closed = if polled {
            p.revents & libc::POLLNVAL != 0
        } else {
            // SAFETY: F_GETFD reads the descriptor's flags; no memory.
            unsafe { libc::fcntl(p.fd, libc::F_GETFD) == -1 }
        };
        // The lowest free number: this one, as the lower ones are open.
        // SAFETY: a NUL-terminated path; the descriptor is kept open.
        if closed && unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDWR) } != p.fd {
            // Refused, as Rust's start refuses (it aborts): a store file
            // could take the number.
            eprintln!(
                "jobrun: descriptor {} is closed and /dev/null cannot take it",
                p.fd
            );
            std::process::exit(exit::JOBRUN_FAILED);
        }
    }
    // SAFETY: SIG_IGN installs no handler.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
}

/// Run jobrun with the process's arguments; returns the exit code.
pub fn main() -> i32 {
    trace::mark("exec");
    let code = run_main();
    trace::print();
    code
}

/// The command line: a plain `jobrun run NAME -- COMMAND...` read without
/// clap (`cli::plain_run`); any other `jobrun run ...` through `RunOnly`,
/// which builds only `run`'s parser; anything else, and every error, as
/// `Cli` has it.
fn parse() -> Result<Cli, clap::Error> {
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    if let Some(cli) = cli::plain_run(&args, |v| std::env::var_os(v)) {
        return Ok(cli);
    }
    if args.first().is_some_and(|a| a == "run") {
        if let Ok(r) = cli::RunOnly::try_parse() {
            return Ok(r.into());
        }
    }
    Cli::try_parse()
}

fn run_main() -> i32 {
    // One malloc arena: the wrapper's few threads (the renewer, a waiter's
    // watchers) allocate little, and an arena each would add to the resident memory
    // of every pass for the whole of its run.
    // SAFETY: mallopt only tunes the allocator; called before any thread.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
    }
    heap::install();
    let cli = match parse() {
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
            say!(error, "{e:#}");
            exit::JOBRUN_FAILED
        }
    }
}

/// `--help` and `--version` print and exit 0; any other usage error is one
/// line and exit 125.
fn usage_error(e: clap::Error) -> i32 {
    use clap::error::ErrorKind;
    let help = matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion);
    if !help && typed_command().as_deref() == Some("check") {
        // A monitoring plugin's bad usage is UNKNOWN (exit 3), on stdout
        // where the monitoring system reads the plugin's answer.
        let text = e.render().to_string();
        let first = text
            .lines()
            .map(str::trim)
            .find(|l| !l.is_empty())
            .unwrap_or("invalid usage")
            .trim_start_matches("error: ");
        let hints = hints(&e)
            .into_iter()
            .map(|h| format!("; {h}"))
            .collect::<String>();
        return cmd::check::unknown(&format!("{first}{hints} (see jobrun check --help)"));
    }
    match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
            let _ = e.print();
            exit::OK
        }
        ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            say!(
                error,
                "a command is required: run, status, clear-locks, stop-due, pause, resume, \
                 history, timeline, forget, check, metrics or touch (see jobrun --help)"
            );
            exit::JOBRUN_FAILED
        }
        ErrorKind::MissingRequiredArgument if targets_command(&e).is_some() => {
            let sub = targets_command(&e).unwrap_or_default();
            say!(
                error,
                "{sub} needs NAME... or --all (see jobrun {sub} --help)"
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
            if let Some(var) = blamed_variable(&e) {
                first = first.replace(
                    &format!("for '{}'", var.arg),
                    &format!(
                        "in {} (from the environment; it sets {})",
                        var.name, var.flag
                    ),
                );
            }
            if first.ends_with("value was not a boolean") {
                first.push_str(": it takes 1/0, true/false, yes/no or on/off");
            }
            for hint in hints(&e) {
                first = format!("{first}; {hint}");
            }
            match run_without_separator(&e) {
                Some(hint) => say!(error, "{first}; put -- before the command: {hint}"),
                None => say!(error, "{first} (see jobrun --help)"),
            }
            exit::JOBRUN_FAILED
        }
    }
}

/// The subcommand typed: the first word that is neither an option nor the
/// value of a global option.
fn typed_command() -> Option<String> {
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        if a == "--db" || a == "--db-mode" {
            args.next();
        } else if !a.starts_with('-') {
            return Some(a);
        }
    }
    None
}

/// The subcommand of a usage error when it acts on NAME... or --all.
fn targets_command(e: &clap::Error) -> Option<String> {
    use clap::error::{ContextKind, ContextValue};
    let missing = match e.get(ContextKind::InvalidArg) {
        Some(ContextValue::Strings(v)) => v.clone(),
        Some(ContextValue::String(v)) => vec![v.clone()],
        _ => return None,
    };
    if !missing.iter().any(|m| m.starts_with("<NAME>")) {
        return None;
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    ["clear-locks", "stop-due", "pause", "resume"]
        .into_iter()
        .find(|c| args.iter().any(|a| a == c))
        .map(str::to_string)
}

/// What clap knows the user probably meant: a similar subcommand or
/// option, or the values an option takes.
fn hints(e: &clap::Error) -> Vec<String> {
    use clap::error::{ContextKind, ContextValue};
    let mut out = vec![];
    for kind in [ContextKind::SuggestedSubcommand, ContextKind::SuggestedArg] {
        match e.get(kind) {
            Some(ContextValue::String(s)) => out.push(format!("did you mean `{s}`?")),
            Some(ContextValue::Strings(v)) if !v.is_empty() => {
                out.push(format!("did you mean `{}`?", v.join("` or `")))
            }
            _ => {}
        }
    }
    if let Some(ContextValue::Strings(v)) = e.get(ContextKind::ValidValue) {
        if !v.is_empty() {
            out.push(format!("it takes {}", v.join(", ")));
        }
    }
    out
}

/// An option whose bad value came from its environment variable.
struct Blamed {
    /// As clap names it (`--slots <N>`), the flag alone, the variable.
    arg: String,
    flag: String,
    name: String,
}

/// When a bad value came from a `JOBRUN_*` variable (the option was not on
/// the command line), the variable, so the message blames what the user
/// wrote.
fn blamed_variable(e: &clap::Error) -> Option<Blamed> {
    use clap::error::{ContextKind, ContextValue};
    use clap::CommandFactory;
    let Some(ContextValue::String(arg)) = e.get(ContextKind::InvalidArg) else {
        return None;
    };
    let flag = arg.split_whitespace().next()?.to_string();
    let long = flag.strip_prefix("--")?;
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args
        .iter()
        .any(|a| a == &flag || a.starts_with(&format!("{flag}=")))
    {
        return None;
    }
    let root = Cli::command();
    let commands = std::iter::once(&root).chain(root.get_subcommands());
    for c in commands {
        for a in c.get_arguments() {
            if a.get_long() == Some(long) {
                if let Some(env) = a.get_env() {
                    if std::env::var_os(env).is_some() {
                        return Some(Blamed {
                            arg: arg.clone(),
                            flag: flag.clone(),
                            name: env.to_string_lossy().into_owned(),
                        });
                    }
                }
            }
        }
    }
    None
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

/// The store a command works on, once the clock is sane, served by this
/// binary (a PostgreSQL store may be handed to `jobrun-pg` here, and this
/// process then runs that instead: `store::elsewhere`).
fn choose_store(cli: &Cli) -> anyhow::Result<settings::StoreChoice> {
    clock::check_skew()?;
    let choice = settings::store(cli.store.db.as_deref(), cli.store.db_mode.as_deref())?;
    store::elsewhere::serve(&choice)?;
    Ok(choice)
}

fn dispatch(cli: Cli) -> anyhow::Result<i32> {
    if let Command::Generate(g) = &cli.command {
        return cmd::generate::run(g);
    }
    let choice = choose_store(&cli);
    if let Command::Check(a) = cli.command {
        // A plugin answers UNKNOWN, on stdout, for whatever keeps it from
        // judging.
        return Ok(match choice {
            Ok(choice) => cmd::check::run(&choice, a),
            Err(e) => cmd::check::unknown(&format!("{e:#}")),
        });
    }
    let choice = choice?;
    let spec = choice.spec.clone();
    match cli.command {
        Command::Run(a) => {
            let settings = settings::RunSettings::resolve(&a)?;
            trace::mark("args");
            cmd::run::run(&choice, settings)
        }
        Command::Status(a) => cmd::status::run(&choice, a),
        Command::ClearLocks(a) => cmd::clear_locks::run(spec, a),
        Command::StopDue(a) => cmd::stop_due::run(spec, a),
        Command::Pause(a) => cmd::pause::pause(&choice, a),
        Command::Resume(a) => cmd::pause::resume(spec, a),
        Command::History(a) => cmd::history::run(&choice, a),
        Command::Timeline(a) => cmd::timeline::run(&choice, a),
        Command::Metrics(a) => cmd::metrics::run(&choice, a),
        Command::Touch => cmd::touch::run(&choice),
        Command::Forget(a) => cmd::forget::run(spec, a),
        Command::Generate(_) | Command::Check(_) => unreachable!("handled above"),
    }
}
