//! Files beside the store: how they are opened, how their directories are
//! made, and the one rule that says whether one may be used.
//!
//! jobrun often runs as root, and others may write where its store lives (a
//! group-shared directory, a world-writable one), so every file and
//! directory there is treated as input:
//!
//! - it is opened by `open` only: never following a symlink at its last
//!   component, never blocking (a FIFO planted there opens at once, then is
//!   refused), close-on-exec, by name relative to a directory descriptor
//!   where the directory was judged first;
//! - a directory jobrun makes is made by `make_dir` only: `mkdir` (which
//!   never follows a symlink planted in its place), then given its mode
//!   through its own descriptor, past the umask;
//! - whether it may be used is decided by `judge` only, as ssh judges its
//!   keys: it is the kind of file expected (never a symlink), owned by the
//!   caller or root, writable by no one beyond what `--db-mode` allows, and
//!   not hard-linked. A group-shared mode (group write in `--db-mode`) also
//!   accepts a file or directory whose group is one of the caller's (any
//!   member may create the shared files, and can write rows anyway), and
//!   root accepts the files of any member;
//! - a file or directory jobrun makes beside a group-shared store is given
//!   the store's group by `give_group` (the holders directory also the
//!   setgid bit), so members can probe each other's locks.
//!
//! `holder` keeps the holders' kernel lock files on top of these.

mod holder;
mod spool;

use std::fs::{File, Metadata};
use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use nix::fcntl::OFlag;
use nix::sys::stat::Mode;

pub use holder::{
    open_lock, probe_lock, remove_stale_lock, remove_stray_locks, still_held, HolderLock,
    LockProbe, STRAY_AGE,
};
pub use spool::{sweep_spools, Spool, SPOOL_SUFFIX};

/// A holder's kernel lock: `<pass id>.lock` in the store's holders directory.
pub const HOLDER_LOCK_SUFFIX: &str = ".lock";

/// Open `path` with `flags`, relative to the directory `dir` when given
/// (then `path` is a bare name), without following a symlink at its last
/// component and without blocking. `mode` is used when `flags` creates the
/// file (narrowed by the umask). The descriptor keeps `O_NONBLOCK`, which
/// changes nothing for regular files and directories.
pub fn open(dir: Option<&File>, path: &Path, flags: OFlag, mode: u32) -> io::Result<File> {
    let flags = flags | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC;
    let mode = Mode::from_bits_truncate(mode as libc::mode_t);
    let fd = match dir {
        Some(d) => nix::fcntl::openat(d, path, flags, mode),
        None => nix::fcntl::openat(nix::fcntl::AT_FDCWD, path, flags, mode),
    }?;
    Ok(File::from(fd))
}

/// Make the directory `dir` with `mode`, past the umask: `mkdir` (which
/// never follows a symlink planted in its place), then `fchmod` through a
/// descriptor opened without following one. With `parents`, missing parents
/// are made first as `mkdir -p` would (with `mode`, narrowed by the umask).
/// `Ok(false)` when `dir` was there already: its mode is its maker's
/// affair, and whoever uses it judges it.
///
/// With `group` (a group-shared store's group), the directory is given
/// that group before its mode, so a setgid bit in `mode` holds: what is
/// made in it then carries the group too.
pub fn make_dir(dir: &Path, mode: u32, parents: bool, group: Option<u32>) -> Result<bool, String> {
    use std::os::unix::fs::DirBuilderExt;
    if let Some(parent) = dir
        .parent()
        .filter(|p| parents && !p.as_os_str().is_empty())
    {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(mode)
            .create(parent)
            .map_err(|e| format!("cannot create directory {}: {e}", parent.display()))?;
    }
    let bits = Mode::from_bits_truncate(mode as libc::mode_t);
    match nix::unistd::mkdir(dir, bits) {
        Ok(()) => {}
        Err(nix::errno::Errno::EEXIST) => return Ok(false),
        Err(e) => {
            return Err(format!(
                "cannot create directory {}: {}",
                dir.display(),
                io::Error::from(e)
            ))
        }
    }
    let made = open(None, dir, OFlag::O_RDONLY | OFlag::O_DIRECTORY, 0)
        .map_err(|e| format!("cannot open directory {}: {e}", dir.display()))?;
    give_group(&made, group).map_err(|e| format!("{}: {e}", dir.display()))?;
    nix::sys::stat::fchmod(&made, bits)
        .map_err(|e| format!("cannot set the mode of {}: {e}", dir.display()))?;
    Ok(true)
}

/// Give a file jobrun just made the group-shared store's `group` (through
/// its descriptor), so every member can probe and wake it whatever its
/// maker's primary group: a member may give its files any of its groups,
/// root any group. Nothing to do without a group, or when it has it.
pub fn give_group(file: &File, group: Option<u32>) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    let Some(gid) = group else { return Ok(()) };
    if file.metadata().is_ok_and(|md| md.gid() == gid) {
        return Ok(());
    }
    nix::unistd::fchown(file, None, Some(nix::unistd::Gid::from_raw(gid)))
        .map_err(|e| format!("cannot give it the store's group (gid {gid}): {e}"))
}

/// What a file beside the store is expected to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The store, its `-wal` and `-shm`.
    Regular,
    /// A waiter's wake file.
    Fifo,
    /// The holders directory; the per-user directories of wake files.
    Dir,
}

/// What a file is, as a refusal names it.
fn kind_name(md: &Metadata) -> &'static str {
    let ft = md.file_type();
    if ft.is_symlink() {
        "symbolic link"
    } else if ft.is_dir() {
        "directory"
    } else if ft.is_fifo() {
        "FIFO"
    } else if ft.is_socket() {
        "socket"
    } else if ft.is_block_device() || ft.is_char_device() {
        "device"
    } else {
        "regular file"
    }
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Regular => "regular file",
            Kind::Fifo => "FIFO",
            Kind::Dir => "directory",
        }
    }

    fn is(self, md: &Metadata) -> bool {
        kind_name(md) == self.name()
    }
}

/// The user as messages name it: `name (uid N)`, or `uid N`.
pub fn user_name(uid: u32) -> String {
    match nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid)) {
        Ok(Some(u)) => format!("{} (uid {uid})", u.name),
        _ => format!("uid {uid}"),
    }
}

/// What a refused file is: one line naming it, its owner and mode, and why.
fn refusal(path: &Path, md: &Metadata, why: &str) -> String {
    format!(
        "{} (owner {}, mode {:04o}) {why}",
        path.display(),
        user_name(md.uid()),
        md.mode() & 0o7777
    )
}

/// Whether `gid` is the caller's group or one of its supplementary groups.
fn in_callers_groups(gid: u32) -> bool {
    if nix::unistd::getegid().as_raw() == gid {
        return true;
    }
    nix::unistd::getgroups()
        .map(|gs| gs.iter().any(|g| g.as_raw() == gid))
        .unwrap_or(false)
}

/// The one rule for a file or directory beside the store, judged from its
/// `fstat` (or `lstat`) metadata: it is of `kind` (never a symlink), owned
/// by the caller or root (or, when `db_mode` shares the store with a group,
/// its group is one of the caller's, or the caller is root), writable by no one beyond `db_mode`
/// (the configured `--db-mode`; a directory's mode differs from it only in
/// search bits), and, unless a directory, not hard-linked. Err: one line
/// naming the file, its owner and mode, and what is wrong with it.
pub fn judge(path: &Path, md: &Metadata, kind: Kind, db_mode: u32) -> Result<(), String> {
    if !kind.is(md) {
        let what = kind_name(md);
        let why = if what == "symbolic link" {
            "is a symbolic link".to_string()
        } else {
            format!("is a {what}, not a {}", kind.name())
        };
        return Err(refusal(path, md, &why));
    }
    let me = nix::unistd::geteuid().as_raw();
    let group_shared = db_mode & 0o020 != 0;
    // Root shares a group store with members whatever its own groups: it
    // reads and writes such a store as its owner made it.
    let owner_ok = md.uid() == me
        || md.uid() == 0
        || (group_shared && (me == 0 || in_callers_groups(md.gid())));
    if !owner_ok {
        let why = if me == 0 {
            "is not owned by root".to_string()
        } else {
            format!("is owned by neither {} nor root", user_name(me))
        };
        return Err(refusal(path, md, &why));
    }
    let wider = md.mode() & 0o022 & !db_mode;
    if wider != 0 {
        let why = if wider & 0o002 != 0 {
            "is writable by anyone, which no --db-mode allows".to_string()
        } else {
            format!("is writable by its group, more than --db-mode {db_mode:04o} allows")
        };
        return Err(refusal(path, md, &why));
    }
    if kind != Kind::Dir && md.nlink() > 1 {
        return Err(refusal(
            path,
            md,
            &format!("has {} hard links (one is expected)", md.nlink()),
        ));
    }
    Ok(())
}

/// `judge` a path that may not exist, without following a symlink: Ok when
/// it is absent.
pub fn judge_if_present(path: &Path, kind: Kind, db_mode: u32) -> Result<(), String> {
    match std::fs::symlink_metadata(path) {
        Ok(md) => judge(path, &md, kind, db_mode),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(format!("{}: cannot inspect it: {e}", path.display())),
    }
}

/// The store's directory, judged before anything in it is used: whoever
/// may rename files in it could swap the store between the checks and
/// SQLite's open, or plant its `-wal`. It must be owned by root, the
/// caller, or the store file's own owner (a group's main user owning both
/// keeps a group store working), and be writable by no one beyond the
/// store's group unless it has the sticky bit (as `/tmp`: then only a
/// file's owner may rename or remove it), as OpenSSH judges the directories
/// above its keys.
pub fn judge_store_dir(dir: &Path, store: &Path) -> Result<(), String> {
    let md = match std::fs::metadata(dir) {
        Ok(md) => md,
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => return Err(denied(dir)),
        Err(e) => {
            return Err(format!(
                "cannot inspect the store's directory {}: {e}",
                dir.display()
            ))
        }
    };
    let me = nix::unistd::geteuid().as_raw();
    let store_md = std::fs::symlink_metadata(store)
        .ok()
        .filter(|m| m.is_file());
    let store_owner = store_md.as_ref().map_or(me, |m| m.uid());
    // The group a store file has, or will have when this caller makes it.
    let store_group = store_md.as_ref().map_or_else(
        || {
            if md.mode() & libc::S_ISGID != 0 {
                md.gid()
            } else {
                nix::unistd::getegid().as_raw()
            }
        },
        |m| m.gid(),
    );
    let said = |why: String| {
        format!(
            "{} (owner {}, group {}, mode {:04o}), the store's directory, {why}",
            dir.display(),
            user_name(md.uid()),
            md.gid(),
            md.mode() & 0o7777
        )
    };
    if ![0, me, store_owner].contains(&md.uid()) {
        let caller = if me == 0 {
            String::new()
        } else {
            format!(", {}", user_name(me))
        };
        return Err(said(format!(
            "is owned by neither root{caller} nor the store's owner ({}): its owner could \
             replace the store",
            user_name(store_owner)
        )));
    }
    if md.mode() & libc::S_ISVTX == 0 {
        if md.mode() & 0o002 != 0 {
            return Err(said(
                "is writable by anyone without the sticky bit: anyone could replace the store"
                    .into(),
            ));
        }
        if md.mode() & 0o020 != 0 && md.gid() != store_group {
            return Err(said(format!(
                "is writable by its group, which is not the store's (gid {store_group}), \
                 without the sticky bit: that group could replace the store"
            )));
        }
    }
    Ok(())
}

/// "permission denied", naming the owner and mode of `path`, or of the
/// nearest directory above it that can be inspected when `path` itself
/// cannot (a directory the caller may not enter).
pub fn denied(path: &Path) -> String {
    let mut at = Some(path);
    while let Some(p) = at {
        if let Ok(md) = std::fs::symlink_metadata(p) {
            let who = user_name(nix::unistd::geteuid().as_raw());
            let (owner, mode) = (user_name(md.uid()), md.mode() & 0o7777);
            return if p == path {
                format!(
                    "permission denied: {} (owner {owner}, mode {mode:04o}) cannot be opened by \
                     {who}",
                    path.display()
                )
            } else {
                format!(
                    "permission denied: directory {} (owner {owner}, mode {mode:04o}) cannot be \
                     entered by {who}, so {} cannot be opened",
                    p.display(),
                    path.display()
                )
            };
        }
        at = p.parent().filter(|d| !d.as_os_str().is_empty());
    }
    format!("permission denied: {}", path.display())
}

/// Why an `open` failed, as one line naming the file.
pub fn open_failure(path: &Path, e: &io::Error) -> String {
    if e.kind() == io::ErrorKind::PermissionDenied {
        return denied(path);
    }
    if e.raw_os_error() == Some(libc::ELOOP) {
        match std::fs::symlink_metadata(path) {
            Ok(md) => refusal(path, &md, "is a symbolic link"),
            Err(_) => format!("{} is a symbolic link", path.display()),
        }
    } else {
        format!("cannot open {}: {e}", path.display())
    }
}

/// Open a regular file beside the store for reading and `judge` it
/// through its descriptor.
pub fn open_judged(path: &Path, db_mode: u32) -> Result<File, String> {
    let file = open(None, path, OFlag::O_RDONLY, 0).map_err(|e| open_failure(path, &e))?;
    let md = file
        .metadata()
        .map_err(|e| format!("cannot inspect {}: {e}", path.display()))?;
    judge(path, &md, Kind::Regular, db_mode)?;
    Ok(file)
}

/// Open the directory `dir` without following a symlink and `judge` it
/// through its descriptor: the descriptor that names files in it by
/// `open` and `unlinkat`.
pub fn open_dir(dir: &Path, db_mode: u32) -> Result<File, String> {
    let file = open(None, dir, OFlag::O_RDONLY | OFlag::O_DIRECTORY, 0).map_err(|e| {
        // A symlink or a file in its place is named as `judge` names it.
        match std::fs::symlink_metadata(dir) {
            Ok(md) if !Kind::Dir.is(&md) => judge(dir, &md, Kind::Dir, db_mode)
                .err()
                .unwrap_or_else(|| open_failure(dir, &e)),
            _ => open_failure(dir, &e),
        }
    })?;
    let md = file
        .metadata()
        .map_err(|e| format!("cannot inspect {}: {e}", dir.display()))?;
    judge(dir, &md, Kind::Dir, db_mode)?;
    Ok(file)
}

/// `$XDG_RUNTIME_DIR` when it is set, absolute, and a directory owned by
/// the caller that no one else may enter.
pub fn runtime_dir() -> Option<PathBuf> {
    let dir = PathBuf::from(std::env::var_os("XDG_RUNTIME_DIR")?);
    if !dir.is_absolute() {
        return None;
    }
    let md = std::fs::symlink_metadata(&dir).ok()?;
    let ours = md.uid() == nix::unistd::geteuid().as_raw();
    (md.is_dir() && ours && md.mode() & 0o077 == 0).then_some(dir)
}

/// The mode a private directory is made with, and judged by: only its
/// user may write it.
pub const PRIVATE: u32 = 0o700;

/// Create `dir` with mode 0700 if it is missing, then judge it as a
/// directory of the caller's that no one else may write.
pub fn private_dir(dir: &Path) -> Result<(), String> {
    make_dir(dir, PRIVATE, false, None)?;
    judge_if_present(dir, Kind::Dir, PRIVATE)
}

/// A pass id as jobrun makes them: 12 lowercase hex digits. Anything else
/// read from a row names no file.
pub fn valid_pass_id(id: &str) -> bool {
    id.len() == 12 && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// The holders directory of a SQLite store (`<store>.holders`), where each
/// wrapper keeps its kernel lock and each waiter its wake file, with the
/// store's `--db-mode` that judges it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holders {
    pub dir: PathBuf,
    pub db_mode: u32,
}

impl Holders {
    pub fn new(dir: PathBuf, db_mode: u32) -> Holders {
        Holders { dir, db_mode }
    }

    /// The kernel lock of pass `pass_id`, if the id is one jobrun could
    /// have made.
    pub fn lock_of(&self, pass_id: &str) -> Option<PathBuf> {
        valid_pass_id(pass_id).then(|| self.dir.join(format!("{pass_id}{HOLDER_LOCK_SUFFIX}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn pass_ids_name_files_only_in_jobruns_format() {
        assert!(valid_pass_id("0123456789ab"));
        for bad in [
            "",
            "0123456789a",
            "0123456789AB",
            "../../etc/pw",
            "0123456789ab/",
        ] {
            assert!(!valid_pass_id(bad), "{bad}");
        }
    }

    #[test]
    fn the_rule_takes_the_kind_the_mode_and_the_links() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        std::fs::write(&file, b"").unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o660)).unwrap();
        let md = std::fs::symlink_metadata(&file).unwrap();
        assert!(judge(&file, &md, Kind::Regular, 0o660).is_ok());
        let e = judge(&file, &md, Kind::Regular, 0o600).unwrap_err();
        assert!(e.contains("writable by its group"), "{e}");
        let e = judge(&file, &md, Kind::Fifo, 0o660).unwrap_err();
        assert!(e.contains("is a regular file, not a FIFO"), "{e}");
        std::fs::hard_link(&file, dir.path().join("g")).unwrap();
        let md = std::fs::symlink_metadata(&file).unwrap();
        let e = judge(&file, &md, Kind::Regular, 0o660).unwrap_err();
        assert!(e.contains("2 hard links"), "{e}");
        let link = dir.path().join("l");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        let md = std::fs::symlink_metadata(&link).unwrap();
        let e = judge(&link, &md, Kind::Regular, 0o660).unwrap_err();
        assert!(e.contains("is a symbolic link"), "{e}");
        // A directory has links of its own: only kind, owner and mode count.
        std::fs::create_dir(dir.path().join("d/")).unwrap();
        std::fs::create_dir(dir.path().join("d/e")).unwrap();
        let d = dir.path().join("d");
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o770)).unwrap();
        let md = std::fs::symlink_metadata(&d).unwrap();
        assert!(judge(&d, &md, Kind::Dir, 0o660).is_ok());
        assert!(judge(&d, &md, Kind::Dir, 0o600).is_err());
    }

    #[test]
    fn a_made_directory_has_its_mode_past_the_umask_and_a_symlink_is_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let made = dir.path().join("a/b/c");
        assert_eq!(make_dir(&made, 0o770, true, None), Ok(true));
        let mode = std::fs::metadata(&made).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o770);
        assert_eq!(make_dir(&made, 0o700, false, None), Ok(false));
        let target = dir.path().join("target");
        std::fs::create_dir(&target).unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        assert_eq!(make_dir(&link, 0o700, false, None), Ok(false));
        let e = open_dir(&link, 0o600).unwrap_err();
        assert!(e.contains("is a symbolic link"), "{e}");
    }
}
