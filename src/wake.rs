//! The wake file: a release on this machine touches it so that waiters
//! queued here look again at once instead of at their next poll.
//!
//! It exists apart from `run` because it is a file others may plant: beside
//! a SQLite store (in a directory a group, or anyone, may write), or for a
//! PostgreSQL store in a directory only its user can write. It is opened
//! without following a symlink and without blocking, and used only when it
//! is a regular file that `trust::check` accepts. Nothing depends on it for
//! correctness (waiters also poll with a bounded interval), so a refused
//! wake file costs one warning line and prompt wake-ups, never a pass or a
//! wait: a FIFO planted in its place must not hang anyone.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::mpsc::Sender;

use crate::say;
use crate::store::StoreSpec;
use crate::supervise::Event;
use crate::trust;

/// Where the wake file of `spec` lives, with its directory made ready.
///
/// SQLite: `<store>.wake`, beside the store. PostgreSQL (not tied to a
/// file): `$XDG_RUNTIME_DIR/jobrun-postgres.wake` when that is an absolute
/// directory owned by the caller with mode 0700; otherwise
/// `<tmp>/jobrun-<uid>/postgres.wake` in a 0700 directory jobrun creates and
/// checks.
pub fn path(spec: &StoreSpec) -> Result<PathBuf, String> {
    match spec {
        StoreSpec::Sqlite(p, _) => {
            let mut s = p.as_os_str().to_owned();
            s.push(".wake");
            Ok(PathBuf::from(s))
        }
        StoreSpec::Postgres(_) => {
            if let Some(dir) = runtime_dir() {
                return Ok(dir.join("jobrun-postgres.wake"));
            }
            let uid = nix::unistd::geteuid();
            let dir = std::env::temp_dir().join(format!("jobrun-{uid}"));
            private_dir(&dir)?;
            Ok(dir.join("postgres.wake"))
        }
    }
}

/// `$XDG_RUNTIME_DIR` when it is set, absolute, and a directory owned by
/// the caller that no one else may enter.
fn runtime_dir() -> Option<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let dir = PathBuf::from(std::env::var_os("XDG_RUNTIME_DIR")?);
    if !dir.is_absolute() {
        return None;
    }
    let md = std::fs::symlink_metadata(&dir).ok()?;
    let ours = md.uid() == nix::unistd::geteuid().as_raw();
    (md.is_dir() && ours && md.mode() & 0o077 == 0).then_some(dir)
}

/// Create `dir` with mode 0700 if it is missing, then check it.
fn private_dir(dir: &Path) -> Result<(), String> {
    use std::os::unix::fs::DirBuilderExt;
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(format!("cannot create {}: {e}", dir.display())),
    }
    trust::check_private_dir(dir)
}

/// Open (creating if needed) the wake file and check it.
fn open(spec: &StoreSpec, path: &Path) -> Result<File, String> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let mode = spec.modes().0;
    let file = trust::open_checked(path, true, mode)?;
    // Past the umask, and only on our own file.
    if let Ok(md) = file.metadata() {
        if md.uid() == nix::unistd::geteuid().as_raw() && md.mode() & 0o777 != mode {
            let _ = file.set_permissions(std::fs::Permissions::from_mode(mode));
        }
    }
    Ok(file)
}

fn open_or_warn(spec: &StoreSpec) -> Option<(PathBuf, File)> {
    let opened = path(spec).and_then(|p| open(spec, &p).map(|f| (p, f)));
    match opened {
        Ok(x) => Some(x),
        Err(why) => {
            say!("warning: not using the wake file (waiters here fall back to polling): {why}");
            None
        }
    }
}

/// Touch the wake file so waiters on this machine look at once.
pub fn wake_waiters(spec: &StoreSpec) {
    use nix::sys::stat::futimens;
    use nix::sys::time::TimeSpec;
    let Some((_, file)) = open_or_warn(spec) else {
        return;
    };
    // "Now" needs only write permission, not ownership: a group-shared
    // wake file created by another member is touched too.
    let _ = futimens(file.as_raw_fd(), &TimeSpec::UTIME_NOW, &TimeSpec::UTIME_NOW);
}

/// Forward changes of the wake file to `events` as `Event::Wake`, through
/// a thread blocked on inotify.
pub fn watch(spec: &StoreSpec, events: Sender<Event>) {
    use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
    let Some((path, _file)) = open_or_warn(spec) else {
        return;
    };
    let Ok(inotify) = Inotify::init(InitFlags::IN_CLOEXEC) else {
        return;
    };
    let flags = AddWatchFlags::IN_ATTRIB | AddWatchFlags::IN_MODIFY | AddWatchFlags::IN_DONT_FOLLOW;
    if inotify.add_watch(&path, flags).is_err() {
        return;
    }
    let _ = std::thread::Builder::new()
        .name("jobrun-wake".into())
        .spawn(move || {
            while inotify.read_events().is_ok() {
                if events.send(Event::Wake).is_err() {
                    break;
                }
            }
        });
}
