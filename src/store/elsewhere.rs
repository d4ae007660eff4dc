//! Which binary serves a PostgreSQL store. `scripts/build-release` builds
//! jobrun twice: `jobrun` without the PostgreSQL store (its client, TLS and
//! async stacks are a third of the code and half the data the loader
//! relocates, paid by every SQLite pass), and `jobrun-pg` with it. `jobrun`
//! given a PostgreSQL store executes the `jobrun-pg` beside its own file in
//! its place, before it does anything on the store: the same process (pid,
//! descriptors, signal dispositions and mask), the same arguments and
//! environment, plus `HANDED_ENV` naming the version that handed over.
//! `jobrun-pg` takes the variable out of its environment, so the command
//! never sees it, and warns when it names another version (a pair
//! installed from two builds, or caught between two renames by an
//! upgrade): it serves anyway, as any jobrun serves a store an older or
//! newer one shares. A `jobrun` built with the store (`cargo build`'s
//! default) serves both itself.

use anyhow::Result;

use crate::say;
use crate::settings::StoreChoice;

/// Set by `jobrun` for the `jobrun-pg` it hands a command to: its version.
pub const HANDED_ENV: &str = "JOBRUN_HANDED_OVER";

/// The program `jobrun` hands a PostgreSQL store's commands to, beside its
/// own executable.
pub const PG_PROGRAM: &str = "jobrun-pg";

/// Serve `choice` in this process, or hand the command over: returns only
/// when this binary serves it, or with the one line that says why neither
/// can.
pub fn serve(choice: &StoreChoice) -> Result<()> {
    let handed = std::env::var_os(HANDED_ENV);
    if let Some(from) = &handed {
        // Before any thread: the environment is this thread's alone.
        std::env::remove_var(HANDED_ENV);
        if cfg!(feature = "postgres") && from.as_encoded_bytes() != crate::VERSION.as_bytes() {
            say!(
                warning,
                "{PG_PROGRAM} {} serves the PostgreSQL store for jobrun {}: install the two from \
                 one build (scripts/build-release, then scripts/install.sh)",
                crate::VERSION,
                crate::settings::arg_text(from)
            );
        }
    }
    if cfg!(feature = "postgres") || !matches!(choice.spec, super::StoreSpec::Postgres(_)) {
        return Ok(());
    }
    hand_over(handed.is_some())
}

/// Execute `jobrun-pg` in this process's place, by execv(3) itself:
/// `std::process::Command` would empty the signal mask and give SIGPIPE
/// its default back first, which a started jobrun does not see.
fn hand_over(handed: bool) -> Result<()> {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStringExt;
    let me = std::env::current_exe()
        .map_err(|e| anyhow::anyhow!("cannot find jobrun's own file to find {PG_PROGRAM}: {e}"))?;
    // Never hand over again: a jobrun handed this command is built
    // without the store too (a `jobrun-pg` that is a copy of, a link to or
    // a script running `jobrun`).
    if handed || me.file_name().is_some_and(|n| n == PG_PROGRAM) {
        anyhow::bail!(
            "{} is built without the PostgreSQL store, and so is the {PG_PROGRAM} beside \
             jobrun: build the two with scripts/build-release",
            me.display()
        );
    }
    let pg = me.with_file_name(PG_PROGRAM);
    let path = CString::new(pg.clone().into_os_string().into_vec())?;
    // Arguments hold no NUL: they came as C strings.
    let args: Vec<CString> = std::env::args_os()
        .filter_map(|a| CString::new(a.into_vec()).ok())
        .collect();
    // Before any thread: the environment is this thread's alone.
    std::env::set_var(HANDED_ENV, crate::VERSION);
    let err = nix::unistd::execv(&path, &args).unwrap_err();
    std::env::remove_var(HANDED_ENV);
    if err == nix::errno::Errno::ENOENT {
        anyhow::bail!(
            "this jobrun ({}) is built without the PostgreSQL store and finds no {PG_PROGRAM} \
             beside it: build the two with scripts/build-release and install them together, \
             or build jobrun with cargo's default features",
            me.display()
        );
    }
    anyhow::bail!(
        "cannot execute {} for the PostgreSQL store: {err}",
        pg.display()
    )
}

/// A PostgreSQL store reached in a build without it, by a way around
/// `serve` (none today: every command on a store passes it first).
#[cfg(not(feature = "postgres"))]
pub(super) fn unserved(url: &str) -> super::StoreError {
    super::StoreError::Other(
        super::pgconn::redact(url),
        "this jobrun is built without the PostgreSQL store".into(),
    )
}
