//! Whether a file beside the store may be used, judged as ssh judges its
//! keys.
//!
//! jobrun often runs as root, and others may write where its store lives (a
//! group-shared directory, a world-writable one). A file there is used only
//! when it is a regular file (never a symlink, FIFO or device, so opening it
//! neither follows a planted link nor blocks), owned by the caller or root,
//! and writable by no one beyond what the configured `--db-mode` allows. A
//! group-shared mode (group write in `--db-mode`) also accepts a file of
//! another member of one of the caller's groups: any member may create the
//! shared files, and can write rows anyway.

use std::fs::{File, Metadata, OpenOptions};
use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::Path;

/// Open `path` without following a symlink at its last component and
/// without blocking (a FIFO opens at once and is then refused by `check`).
/// `create` makes a missing file with `mode` (narrowed by the umask).
pub fn open_nofollow(path: &Path, create: bool, mode: u32) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .create(create)
        // O_CREAT needs a writable open on some systems' libc wrappers;
        // appending changes nothing until something is written.
        .append(create)
        .mode(mode)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
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
pub fn in_callers_groups(gid: u32) -> bool {
    if nix::unistd::getegid().as_raw() == gid {
        return true;
    }
    nix::unistd::getgroups()
        .map(|gs| gs.iter().any(|g| g.as_raw() == gid))
        .unwrap_or(false)
}

/// Judge a file jobrun is about to use, from its `fstat` (or `lstat`)
/// metadata. `mode` is the configured `--db-mode`. Err: one line naming
/// the file, its owner and mode, and what is wrong with it.
pub fn check(path: &Path, md: &Metadata, mode: u32) -> Result<(), String> {
    let ft = md.file_type();
    let kind = if ft.is_symlink() {
        Some("is a symbolic link")
    } else if ft.is_fifo() {
        Some("is a FIFO, not a regular file")
    } else if ft.is_socket() {
        Some("is a socket, not a regular file")
    } else if ft.is_block_device() || ft.is_char_device() {
        Some("is a device, not a regular file")
    } else if ft.is_dir() {
        Some("is a directory, not a regular file")
    } else {
        None
    };
    if let Some(kind) = kind {
        return Err(refusal(path, md, kind));
    }
    let me = nix::unistd::geteuid().as_raw();
    let group_shared = mode & 0o020 != 0;
    let owner_ok = md.uid() == me || md.uid() == 0 || (group_shared && in_callers_groups(md.gid()));
    if !owner_ok {
        return Err(refusal(
            path,
            md,
            &if me == 0 {
                "is not owned by root".to_string()
            } else {
                format!("is owned by neither {} nor root", user_name(me))
            },
        ));
    }
    let wider = md.mode() & 0o022 & !mode;
    if wider != 0 {
        let who = if wider & 0o002 != 0 {
            "anyone"
        } else {
            "its group"
        };
        return Err(refusal(
            path,
            md,
            &format!("is writable by {who}, more than --db-mode {mode:04o} allows"),
        ));
    }
    if md.nlink() > 1 {
        return Err(refusal(
            path,
            md,
            &format!("has {} hard links (one is expected)", md.nlink()),
        ));
    }
    Ok(())
}

/// `check` a path that may not exist, without following a symlink: Ok when
/// it is absent.
pub fn check_if_present(path: &Path, mode: u32) -> Result<(), String> {
    match std::fs::symlink_metadata(path) {
        Ok(md) => check(path, &md, mode),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(format!("{}: cannot inspect it: {e}", path.display())),
    }
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

/// Why an `open_nofollow` failed, as one line naming the file.
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

/// Open (optionally creating) a file beside the store and `check` it.
pub fn open_checked(path: &Path, create: bool, mode: u32) -> Result<File, String> {
    let file = open_nofollow(path, create, mode).map_err(|e| open_failure(path, &e))?;
    let md = file
        .metadata()
        .map_err(|e| format!("cannot inspect {}: {e}", path.display()))?;
    check(path, &md, mode)?;
    Ok(file)
}

/// Check that a directory only its user (and root) can write is what it
/// claims: not a symlink, a directory, owned by the caller, and writable by
/// no one else. Used for the per-user directory of the PostgreSQL wake file.
pub fn check_private_dir(path: &Path) -> Result<(), String> {
    let md = std::fs::symlink_metadata(path)
        .map_err(|e| format!("cannot inspect {}: {e}", path.display()))?;
    let me = nix::unistd::geteuid().as_raw();
    let why = if md.file_type().is_symlink() {
        Some("is a symbolic link".to_string())
    } else if !md.is_dir() {
        Some("is not a directory".to_string())
    } else if md.uid() != me {
        Some(format!("is not owned by {}", user_name(me)))
    } else if md.mode() & 0o022 != 0 {
        Some("is writable by others".to_string())
    } else {
        None
    };
    match why {
        Some(why) => Err(refusal(path, &md, &why)),
        None => Ok(()),
    }
}
