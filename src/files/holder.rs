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

use nix::fcntl::{Flock, FlockArg, OFlag};

use super::{make_dir, open, open_dir, valid_pass_id, Holders, HOLDER_LOCK_SUFFIX};
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
    use std::os::unix::fs::MetadataExt;
    if !valid_pass_id(pass_id) {
        return;
    }
    let Ok(dir) = open_dir(&holders.dir, holders.db_mode) else {
        return;
    };
    let name = format!("{pass_id}{HOLDER_LOCK_SUFFIX}");
    let Some(file) = open_lock(Some(&dir), Path::new(&name)) else {
        return;
    };
    let Ok(meta) = file.metadata() else { return };
    if meta.uid() != nix::unistd::geteuid().as_raw() {
        return;
    }
    if let Ok(_locked) = Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        let _ = nix::unistd::unlinkat(&dir, name.as_str(), nix::unistd::UnlinkatFlags::NoRemoveDir);
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
    /// directory modes. The directory is made if missing, and used only as
    /// `files::judge` allows.
    pub fn take(dir: &Path, pass_id: &str, modes: (u32, u32)) -> std::io::Result<HolderLock> {
        let refused = |why: String| std::io::Error::new(std::io::ErrorKind::PermissionDenied, why);
        if !valid_pass_id(pass_id) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("invalid pass id {pass_id:?}"),
            ));
        }
        // Its mode past the umask: other users sharing the store probe these.
        make_dir(dir, modes.1, false).map_err(std::io::Error::other)?;
        let d = open_dir(dir, modes.0).map_err(refused)?;
        let name = format!("{pass_id}{HOLDER_LOCK_SUFFIX}");
        // A fresh name: a file already there was not made by this pass.
        let file = open(
            Some(&d),
            Path::new(&name),
            OFlag::O_RDWR | OFlag::O_CREAT | OFlag::O_EXCL,
            modes.0,
        )?;
        nix::sys::stat::fchmod(
            &file,
            nix::sys::stat::Mode::from_bits_truncate(modes.0 as libc::mode_t),
        )?;
        let file = Flock::lock(file, FlockArg::LockExclusiveNonblock).map_err(|(_, e)| e)?;
        // Who holds it, for a judge to compare with the row: read, never
        // trusted alone (the file must also be held, and be its holder's).
        let me = this_process();
        (&*file).write_all(format!("{} {}\n", me.pid, me.start).as_bytes())?;
        Ok(HolderLock { dir: d, name, file })
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
