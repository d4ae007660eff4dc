//! The spool of a pass whose output is captured (`--output
//! quiet-unless-failed`): `<pass id>.out` in a private directory, mode 0600
//! whatever `--db-mode` says (a command's output is its user's alone).
//!
//! The invariant this module keeps: a spool is created only new (never
//! over anything there, never through a symlink), locked by its wrapper for
//! as long as the wrapper lives, and removed only by its wrapper or, once
//! no one holds its lock (the wrapper was killed), by the next pass that
//! spools in the same directory. A spool is named by a pass id of
//! jobrun's own form only.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use nix::fcntl::{Flock, FlockArg, OFlag};

use super::{open, open_dir, valid_pass_id, Kind, PRIVATE};

/// A spool: `<pass id>.out`.
pub const SPOOL_SUFFIX: &str = ".out";
/// A spool being made, before it is locked and renamed to its name.
const NEW_SUFFIX: &str = ".out-new";
/// A spool being made is left alone this long: its maker is between
/// creating and locking it.
const MAKING: Duration = Duration::from_secs(60);

/// A pass's spool, locked and removed when dropped.
pub struct Spool {
    path: PathBuf,
    file: Flock<File>,
}

impl Spool {
    /// Create the spool of pass `pass_id` in `dir` (a private directory
    /// the caller made and judged): created new under a temporary name,
    /// given mode 0600, locked, then renamed to `<pass id>.out`, so a sweep
    /// never sees an unlocked spool of a live pass.
    pub fn create(dir: &Path, pass_id: &str) -> Result<Spool, String> {
        use std::os::unix::fs::PermissionsExt;
        if !valid_pass_id(pass_id) {
            return Err(format!("invalid pass id {pass_id:?}"));
        }
        let dir_fd = open_dir(dir, PRIVATE)?;
        let new = format!("{pass_id}{NEW_SUFFIX}");
        let name = format!("{pass_id}{SPOOL_SUFFIX}");
        let made = dir.join(&new);
        let flags = OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_RDWR;
        let file = open(Some(&dir_fd), Path::new(&new), flags, 0o600)
            .map_err(|e| super::open_failure(&made, &e))?;
        let cleanup = |e: String| {
            let _ = nix::unistd::unlinkat(
                &dir_fd,
                new.as_str(),
                nix::unistd::UnlinkatFlags::NoRemoveDir,
            );
            e
        };
        file.set_permissions(std::fs::Permissions::from_mode(0o600))
            .map_err(|e| cleanup(format!("cannot set the mode of {}: {e}", made.display())))?;
        let file = Flock::lock(file, FlockArg::LockExclusiveNonblock)
            .map_err(|(_, e)| cleanup(format!("cannot lock {}: {e}", made.display())))?;
        nix::fcntl::renameat2(
            &dir_fd,
            new.as_str(),
            &dir_fd,
            name.as_str(),
            nix::fcntl::RenameFlags::RENAME_NOREPLACE,
        )
        .map_err(|e| cleanup(format!("cannot rename {}: {e}", made.display())))?;
        Ok(Spool {
            path: dir.join(name),
            file,
        })
    }

    /// Where the spool is: what a failure hook gets in `JOBRUN_OUTPUT_FILE`.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The spool's file (its descriptor shares the lock).
    pub fn file(&self) -> &File {
        &self.file
    }
}

impl Drop for Spool {
    fn drop(&mut self) {
        use std::os::unix::fs::MetadataExt;
        // Only our own file: nothing else that took its name.
        if let (Ok(ours), Ok(there)) = (self.file.metadata(), std::fs::symlink_metadata(&self.path))
        {
            if ours.dev() == there.dev() && ours.ino() == there.ino() {
                let _ = std::fs::remove_file(&self.path);
            }
        }
    }
}

/// Remove the spools in `dir` that no wrapper holds any more (their
/// wrapper was killed before it could remove them): regular files of the
/// caller's named for a pass id, removed while locked, so a live pass's
/// spool is never touched. A spool still being made is left for a minute.
/// The number removed.
pub fn sweep_spools(dir: &Path) -> usize {
    use std::os::unix::fs::MetadataExt;
    let Ok(dir_fd) = open_dir(dir, PRIVATE) else {
        return 0;
    };
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    let me = nix::unistd::geteuid().as_raw();
    let mut removed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let (id, making) = match (
            name.strip_suffix(SPOOL_SUFFIX),
            name.strip_suffix(NEW_SUFFIX),
        ) {
            (Some(id), _) => (id, false),
            (_, Some(id)) => (id, true),
            _ => continue,
        };
        if !valid_pass_id(id) {
            continue;
        }
        let Ok(file) = open(Some(&dir_fd), Path::new(name), OFlag::O_RDONLY, 0) else {
            continue;
        };
        let Ok(md) = file.metadata() else { continue };
        if !Kind::Regular.is(&md) || md.uid() != me {
            continue;
        }
        let young = md
            .modified()
            .ok()
            .and_then(|m| SystemTime::now().duration_since(m).ok())
            .is_none_or(|age| age < MAKING);
        if making && young {
            continue;
        }
        if let Ok(_locked) = Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            if nix::unistd::unlinkat(&dir_fd, name, nix::unistd::UnlinkatFlags::NoRemoveDir).is_ok()
            {
                removed += 1;
            }
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_spool_is_private_locked_and_removed_and_only_an_unheld_one_is_swept() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("spool");
        crate::files::private_dir(&dir).unwrap();
        let spool = Spool::create(&dir, "0123456789ab").unwrap();
        let mode = std::fs::metadata(spool.path())
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        // Never over an existing one.
        assert!(Spool::create(&dir, "0123456789ab").is_err());
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
        // Held: a sweep leaves it.
        assert_eq!(sweep_spools(&dir), 0);
        assert!(spool.path().exists());
        let path = spool.path().to_path_buf();
        drop(spool);
        assert!(!path.exists());
        // A spool whose wrapper is gone (nobody holds it) is swept.
        std::fs::write(&path, b"left").unwrap();
        std::fs::write(dir.join("not-a-spool"), b"x").unwrap();
        assert_eq!(sweep_spools(&dir), 1);
        assert!(!path.exists());
        assert!(dir.join("not-a-spool").exists());
        assert!(Spool::create(&dir, "../etc").is_err());
    }
}
