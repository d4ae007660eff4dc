//! Another user for the tests that need one: to own files planted beside a
//! store, as a second user of a shared machine could; a group to share a
//! store with, and jobrun run as one of its members.

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
    /// Its primary group.
    pub gid: u32,
}

impl TempUser {
    pub fn create(tag: &str) -> Option<TempUser> {
        if !is_root() {
            eprintln!("skipped: creating a second user to own planted files needs root");
            return None;
        }
        let name = format!("jrt{}{tag}", std::process::id());
        // Tests create users in parallel: useradd may find /etc/passwd
        // locked by another for a moment (exit 10), and is tried again.
        let mut out = None;
        super::wait_until(std::time::Duration::from_secs(20), || {
            let o = Command::new("useradd")
                .args(["-M", "-N", "-s", "/usr/sbin/nologin", &name])
                .output()
                .expect("run useradd");
            let done = o.status.code() != Some(10);
            out = Some(o);
            done
        });
        let out = out.unwrap();
        assert!(out.status.success(), "useradd: {}", text(&out.stderr));
        let mut user = TempUser {
            name,
            uid: 0,
            gid: 0,
        };
        let id = |flag: &str| -> u32 {
            let out = Command::new("id")
                .args([flag, &user.name])
                .output()
                .unwrap();
            String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
        };
        let (uid, gid) = (id("-u"), id("-g"));
        (user.uid, user.gid) = (uid, gid);
        Some(user)
    }

    /// jobrun as this user, with `group` as its one supplementary group,
    /// against the store `db`, in `dir`, with no JOBRUN_* setting of the
    /// caller's leaking in.
    pub fn jobrun(
        &self,
        group: &TempGroup,
        db: &std::path::Path,
        dir: &std::path::Path,
    ) -> Command {
        let mut c = Command::new("setpriv");
        c.arg(format!("--reuid={}", self.uid))
            .arg(format!("--regid={}", self.gid))
            .arg(format!("--groups={}", group.gid))
            .arg(super::BIN)
            .env("JOBRUN_DB", db)
            .env("HOME", "/nonexistent")
            .current_dir(dir);
        for (k, _) in std::env::vars() {
            if k.starts_with("JOBRUN_") && k != "JOBRUN_DB" {
                c.env_remove(k);
            }
        }
        c
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

/// A throwaway group, removed when dropped (even when the test fails):
/// declare it before its users, so they are removed first.
pub struct TempGroup {
    pub name: String,
    pub gid: u32,
}

impl TempGroup {
    /// `None` (with the reason printed) when not root.
    pub fn create(tag: &str) -> Option<TempGroup> {
        if !is_root() {
            eprintln!("skipped: creating a group needs root");
            return None;
        }
        let name = format!("jrg{}{tag}", std::process::id());
        let mut out = None;
        super::wait_until(std::time::Duration::from_secs(20), || {
            let o = Command::new("groupadd").arg(&name).output().unwrap();
            let done = o.status.code() != Some(10);
            out = Some(o);
            done
        });
        let out = out.unwrap();
        assert!(out.status.success(), "groupadd: {}", text(&out.stderr));
        let out = Command::new("getent")
            .args(["group", &name])
            .output()
            .unwrap();
        let line = text(&out.stdout);
        let gid = line.split(':').nth(2).and_then(|g| g.parse().ok());
        Some(TempGroup {
            name,
            gid: gid.unwrap_or_else(|| panic!("no gid for the new group: {line}")),
        })
    }
}

impl Drop for TempGroup {
    fn drop(&mut self) {
        let _ = Command::new("groupdel").arg(&self.name).output();
    }
}
