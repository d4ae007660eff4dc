//! The store is opened once, by descriptor: its files are judged before
//! SQLite opens them (`check_files`), and the file SQLite opened must be
//! the one that was checked (`same_file`): a store renamed over the path in
//! between is refused, never read. `JOBRUN_TEST_OPEN_PAUSE` is the test
//! seam between the two.

use std::fs;
use std::path::Path;

use rusqlite::Connection;

use super::{Result, StoreError};
use crate::files::Kind;

/// SQLite's write-ahead log and its index, beside the store file.
pub const SIDE_FILES: [&str; 2] = ["-wal", "-shm"];

/// `JOBRUN_TEST_OPEN_PAUSE`, a test seam like `JOBRUN_CLOCK_SKEW`: the path
/// of a FIFO which jobrun, once the store's files are checked and before
/// SQLite opens the store, opens and reads to its end. A test replaces the
/// store in that moment and sees that what SQLite opened is compared with
/// what was checked (`same_file`), without racing for it. Anything but a
/// FIFO there is ignored.
pub const OPEN_PAUSE_ENV: &str = "JOBRUN_TEST_OPEN_PAUSE";

pub(super) fn open_pause() {
    let Some(fifo) = std::env::var_os(OPEN_PAUSE_ENV) else {
        return;
    };
    use std::os::unix::fs::FileTypeExt;
    if !fs::symlink_metadata(&fifo).is_ok_and(|md| md.file_type().is_fifo()) {
        return;
    }
    if let Ok(mut f) = fs::File::open(&fifo) {
        let _ = std::io::copy(&mut f, &mut std::io::sink());
    }
}

/// The descriptor SQLite's unix VFS holds on the main database, read
/// through `SQLITE_FCNTL_FILE_POINTER`: the unix VFS's file object starts
/// with its methods, its VFS, its inode record and then the descriptor (a
/// layout SQLite has kept since 3.7; the bundled SQLite is pinned by
/// Cargo.lock). `None` when the VFS is not a unix one.
fn sqlite_fd(conn: &Connection) -> Option<std::os::fd::RawFd> {
    use rusqlite::ffi;
    use std::ffi::{c_int, c_void, CStr};
    #[repr(C)]
    struct UnixFileHead {
        methods: *const c_void,
        vfs: *const ffi::sqlite3_vfs,
        inode: *const c_void,
        fd: c_int,
    }
    let mut file: *mut ffi::sqlite3_file = std::ptr::null_mut();
    // SAFETY: the handle is this open connection's; FILE_POINTER writes a
    // `sqlite3_file *` for the named database into `file`.
    let rc = unsafe {
        ffi::sqlite3_file_control(
            conn.handle(),
            c"main".as_ptr(),
            ffi::SQLITE_FCNTL_FILE_POINTER,
            (&mut file as *mut *mut ffi::sqlite3_file).cast(),
        )
    };
    if rc != ffi::SQLITE_OK || file.is_null() {
        return None;
    }
    // SAFETY: `file` is the connection's open database file, alive while
    // `conn` is; its VFS is checked to be a unix one before its head is
    // read as the unix VFS lays it out.
    unsafe {
        let head = &*(file as *const UnixFileHead);
        if head.vfs.is_null() || (*head.vfs).zName.is_null() {
            return None;
        }
        let vfs = CStr::from_ptr((*head.vfs).zName).to_bytes();
        (vfs == b"unix" || vfs.starts_with(b"unix-")).then_some(head.fd)
    }
}

/// The store is opened once, by descriptor: the file SQLite opened must be
/// the file that was checked (same device and inode), or the store was
/// replaced between the check and the open and nothing is used.
pub(super) fn same_file(conn: &Connection, checked: &fs::File, path: &Path) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    let id = |dev: u64, ino: u64| (dev, ino);
    let want = checked.metadata().map(|m| id(m.dev(), m.ino())).ok();
    let got = sqlite_fd(conn).filter(|fd| *fd >= 0).and_then(|fd| {
        // SAFETY: SQLite keeps this descriptor open while `conn` lives,
        // and it is only borrowed for this fstat.
        let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
        nix::sys::stat::fstat(fd)
            .ok()
            .map(|st| id(st.st_dev, st.st_ino))
    });
    match (want, got) {
        (Some(w), Some(g)) if w == g => Ok(()),
        (_, None) => Err(StoreError::Other(
            path.display().to_string(),
            "cannot tell which file SQLite opened; refusing it".into(),
        )),
        _ => Err(StoreError::Refused(format!(
            "{} was replaced between its check and SQLite's open: the file SQLite opened is \
             not the one checked; nothing was read or written",
            path.display()
        ))),
    }
}

/// Judge the store file and its `-wal` and `-shm` before SQLite opens them:
/// none may be a symlink, another user's file, or writable beyond `mode`.
/// The store file's descriptor, which what SQLite opens is compared with,
/// and whether its header already says WAL (its file format versions,
/// bytes 18 and 19, are 2), which spares the open switching it.
pub(super) fn check_files(path: &Path, mode: u32) -> Result<(fs::File, bool)> {
    use std::io::Read;
    let mut file = crate::files::open_judged(path, mode).map_err(StoreError::Refused)?;
    // An empty file becomes a new store; anything else must already be a
    // SQLite database (SQLite would take a short file for an empty one and
    // write over it).
    let mut head = [0u8; 20];
    let mut got = 0;
    while got < head.len() {
        match file.read(&mut head[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => {
                return Err(StoreError::Other(
                    path.display().to_string(),
                    format!("cannot read: {e}"),
                ))
            }
        }
    }
    if got > 0 && (got < 16 || head[..16] != *b"SQLite format 3\0") {
        return Err(StoreError::Corrupt {
            path: path.display().to_string(),
            detail: "it is not a SQLite database; leaving it untouched".into(),
        });
    }
    for suffix in SIDE_FILES {
        let mut p = path.as_os_str().to_owned();
        p.push(suffix);
        crate::files::judge_if_present(Path::new(&p), Kind::Regular, mode)
            .map_err(StoreError::Refused)?;
    }
    Ok((file, got == head.len() && head[18] == 2 && head[19] == 2))
}
