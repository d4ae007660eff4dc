//! Another user for the tests that need one: to own files planted beside a
//! store, as a second user of a shared machine could.

use std::process::Command;

use super::text;

/// Whether the tests run as root (they need to, to create users).
fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// A throwaway unprivileged user, removed when dropped (even when the test
/// fails). `None` (with the reason printed) when not root.
pub struct TempUser {
    pub name: String,
    pub uid: u32,
}

impl TempUser {
    pub fn create(tag: &str) -> Option<TempUser> {
        if !is_root() {
            eprintln!("skipped: creating a second user to own planted files needs root");
            return None;
        }
        let name = format!("jrt{}{tag}", std::process::id());
        let out = Command::new("useradd")
            .args(["-M", "-N", "-s", "/usr/sbin/nologin", &name])
            .output()
            .expect("run useradd");
        assert!(out.status.success(), "useradd: {}", text(&out.stderr));
        let mut user = TempUser { name, uid: 0 };
        let id = Command::new("id")
            .args(["-u", &user.name])
            .output()
            .unwrap();
        user.uid = String::from_utf8_lossy(&id.stdout).trim().parse().unwrap();
        Some(user)
    }

    /// Give `p` (not following a symlink) to this user.
    pub fn owns(&self, p: &std::path::Path) {
        let st = Command::new("chown")
            .args(["-h", &self.name])
            .arg(p)
            .status()
            .unwrap();
        assert!(st.success(), "chown {}", p.display());
    }
}

impl Drop for TempUser {
    fn drop(&mut self) {
        let _ = Command::new("userdel").arg(&self.name).output();
    }
}
