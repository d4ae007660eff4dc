//! The kernel lock each wrapper holds on `<store>.holders/<pass id>.lock`
//! for its whole life: evidence that every process sharing the kernel can
//! probe, across PID namespaces.
//!
//! The invariant this module keeps: a lock file is named by a pass id of
//! jobrun's own form only, opened without following a symlink and without
//! blocking, probed only when it is a regular file, and unlinked (relative
//! to the judged holders directory) only when it is a regular file of the
//! caller's that nobody holds. A probe never blocks the holder.

use std::fs::File;
use std::io::Write;
use std::path::Path;
use std::time::Duration;

use nix::fcntl::{Flock, FlockArg, OFlag};

use nix::unistd::UnlinkatFlags;

use super::{give_group, make_dir, open, open_dir, valid_pass_id, Holders, HOLDER_LOCK_SUFFIX};
use crate::process::this_process;

/// Open a lock file for reading, only when it is a regular file.
pub fn open_lock(dir: Option<&File>, path: &Path) -> Option<File> {
    let file = open(dir, path, OFlag::O_RDONLY, 0).ok()?;
    file.metadata().ok()?.is_file().then_some(file)
}

/// `file` back when someone holds its lock; `None` when it is free. The
/// probe takes a shared lock for an instant and drops it, so it never
/// blocks the holder.
pub fn still_held(file: File) -> Option<File> {
    match Flock::lock(file, FlockArg::LockSharedNonblock) {
        Ok(free) => {
            drop(free);
            None
        }
        Err((file, _)) => Some(file),
    }
}

/// What probing a holder's lock file says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockProbe {
    Held,
    Free,
    Missing,
}

/// Probe a holder's lock file: held means its wrapper lives.
pub fn probe_lock(path: &Path) -> LockProbe {
    match open_lock(None, path).map(still_held) {
        None => LockProbe::Missing,
        Some(Some(_)) => LockProbe::Held,
        Some(None) => LockProbe::Free,
    }
}

/// Remove the lock file of a pass that is gone, if nothing holds it: the
/// file is locked while removed, so a live holder's file is never touched.
/// Only a regular file of this user in the store's holders directory, named
/// for a valid pass id, is ever unlinked; a row names nothing here.
pub fn remove_stale_lock(holders: &Holders, pass_id: &str) {
    if !valid_pass_id(pass_id) {
        return;
    }
    let Ok(dir) = open_dir(&holders.dir, holders.db_mode) else {
        return;
    };
    let name = format!("{pass_id}{HOLDER_LOCK_SUFFIX}");
    remove_if_unlocked(&dir, &name, Duration::ZERO, false);
}

/// How old a lock file without a row must be before it is a stray: a pass
/// takes its lock a moment before its row commits (and holds it from then
/// on); only the instant between creating its file and locking it is
/// unguarded, and this covers it many times over.
pub const STRAY_AGE: Duration = Duration::from_secs(60);

/// Remove (or with `dry_run` count) the lock files in the store's holders
/// directory that belong to no pass in `known` (the pass ids of every
/// lease and queue row) and that nobody holds: left by a start that failed
/// before this jobrun removed what it made, or by a pass killed whose row
/// was freed by a pass reconciling. Only this user's regular files named
/// for a valid pass id, unchanged for `STRAY_AGE`, are touched; a locked
/// one is its live pass's, row or not. How many went.
pub fn remove_stray_locks(holders: &Holders, known: &[String], dry_run: bool) -> usize {
    let Ok(dir) = open_dir(&holders.dir, holders.db_mode) else {
        return 0;
    };
    let Ok(entries) = std::fs::read_dir(&holders.dir) else {
        return 0;
    };
    let mut removed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let Some(pass_id) = name.strip_suffix(HOLDER_LOCK_SUFFIX) else {
            continue;
        };
        if !valid_pass_id(pass_id) || known.iter().any(|k| k == pass_id) {
            continue;
        }
        if remove_if_unlocked(&dir, name, STRAY_AGE, dry_run) {
            removed += 1;
        }
    }
    removed
}

/// Unlink `name` in `dir` if it is a regular file of this user, unchanged
/// for at least `min_age`, that nobody holds (it is locked while removed).
fn remove_if_unlocked(dir: &File, name: &str, min_age: Duration, dry_run: bool) -> bool {
    use std::os::unix::fs::MetadataExt;
    let Some(file) = open_lock(Some(dir), Path::new(name)) else {
        return false;
    };
    let Ok(meta) = file.metadata() else {
        return false;
    };
    if meta.uid() != nix::unistd::geteuid().as_raw() {
        return false;
    }
    let age = meta
        .modified()
        .ok()
        .and_then(|m| m.elapsed().ok())
        .unwrap_or_default();
    if age < min_age {
        return false;
    }
    match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(_locked) if dry_run => true,
        Ok(_locked) => nix::unistd::unlinkat(dir, name, UnlinkatFlags::NoRemoveDir).is_ok(),
        Err(_) => false,
    }
}

/// The lock a live wrapper holds on its file beside the store. The file is
/// opened close-on-exec, so the command does not inherit the lock: it proves
/// the wrapper alive, nothing else. Dropping it unlocks and removes the file.
pub struct HolderLock {
    dir: File,
    name: String,
    file: Flock<File>,
}

impl HolderLock {
    /// Create and lock `<dir>/<pass_id>.lock`, with the store's file and
    /// directory modes and, for a group-shared store, its `group` (the
    /// directory then also gets the setgid bit, so what any member makes in
    /// it carries the group). The directory is made if missing, and used
    /// only as `files::judge` allows. A lock that cannot be completed (a
    /// full disk) is removed: a failed start leaves nothing behind.
    pub fn take(
        dir: &Path,
        pass_id: &str,
        modes: (u32, u32),
        group: Option<u32>,
    ) -> std::io::Result<HolderLock> {
        let refused = |why: String| std::io::Error::new(std::io::ErrorKind::PermissionDenied, why);
        if !valid_pass_id(pass_id) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("invalid pass id {pass_id:?}"),
            ));
        }
        // Its mode past the umask: other users sharing the store probe these.
        let dir_mode = match group {
            Some(_) => modes.1 | libc::S_ISGID,
            None => modes.1,
        };
        make_dir(dir, dir_mode, false, group).map_err(std::io::Error::other)?;
        let d = open_dir(dir, modes.0).map_err(refused)?;
        let name = format!("{pass_id}{HOLDER_LOCK_SUFFIX}");
        // A fresh name: a file already there was not made by this pass.
        let file = open(
            Some(&d),
            Path::new(&name),
            OFlag::O_RDWR | OFlag::O_CREAT | OFlag::O_EXCL,
            modes.0,
        )?;
        // Locked at once: from here on the file is this pass's, and is
        // removed with it (`Drop`) whatever fails next.
        let file = match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(file) => file,
            Err((_, e)) => {
                let _ = nix::unistd::unlinkat(&d, name.as_str(), UnlinkatFlags::NoRemoveDir);
                return Err(e.into());
            }
        };
        let lock = HolderLock { dir: d, name, file };
        give_group(&lock.file, group).map_err(std::io::Error::other)?;
        nix::sys::stat::fchmod(
            &*lock.file,
            nix::sys::stat::Mode::from_bits_truncate(modes.0 as libc::mode_t),
        )?;
        // Who holds it, for a judge to compare with the row: read, never
        // trusted alone (the file must also be held, and be its holder's).
        let me = this_process();
        (&*lock.file).write_all(format!("{} {}\n", me.pid, me.start).as_bytes())?;
        Ok(lock)
    }
}

impl Drop for HolderLock {
    fn drop(&mut self) {
        use std::os::unix::fs::MetadataExt;
        // Unlink only the entry that is still our file.
        let ours = self.file.metadata().ok().map(|m| (m.dev(), m.ino()));
        let there = nix::sys::stat::fstatat(
            &self.dir,
            self.name.as_str(),
            nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
        )
        .ok()
        .map(|s| (s.st_dev, s.st_ino));
        if ours.is_some() && ours == there {
            let _ = nix::unistd::unlinkat(
                &self.dir,
                self.name.as_str(),
                nix::unistd::UnlinkatFlags::NoRemoveDir,
            );
        }
    }
}
