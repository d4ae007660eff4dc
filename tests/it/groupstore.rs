//! Group-shared stores (`--db-mode 0660`) as the README sets them up: the
//! group's main user makes the store in a directory of the group, another
//! member and root use it. Real throwaway users in a real throwaway group,
//! removed even when a test fails.

use std::fs;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use crate::support::{
    alive, both_stores, start_pass, text, wait_until, Jobrun, TempGroup, TempUser, TestEnv, WEB2,
};

const WAIT: Duration = Duration::from_secs(10);

/// A store shared by a group: `dir` (owned by the group's main user and the
/// group, mode `dir_mode`), the store `store.db` in it not made yet. Users
/// are removed before their group (fields drop in order).
struct Shared {
    env: TestEnv,
    owner: TempUser,
    member: TempUser,
    group: TempGroup,
    dir: PathBuf,
}

impl Shared {
    fn new(tag: &str, dir_mode: u32) -> Option<Shared> {
        let group = TempGroup::create(tag)?;
        let owner = TempUser::create(&format!("{tag}a"))?;
        let member = TempUser::create(&format!("{tag}b"))?;
        let mut env = TestEnv::sqlite_not_made();
        fs::set_permissions(env.dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
        let dir = env.path("shared");
        fs::create_dir(&dir).unwrap();
        std::os::unix::fs::chown(&dir, Some(owner.uid), Some(group.gid)).unwrap();
        fs::set_permissions(&dir, fs::Permissions::from_mode(dir_mode)).unwrap();
        env.db = dir.join("store.db").to_string_lossy().into_owned();
        Some(Shared {
            env,
            owner,
            member,
            group,
            dir,
        })
    }

    fn db(&self) -> &Path {
        Path::new(&self.env.db)
    }

    fn holders(&self) -> PathBuf {
        PathBuf::from(format!("{}.holders", self.env.db))
    }

    /// jobrun as `who`, a member of the group.
    fn as_user(&self, who: &TempUser, args: &[&str]) -> Output {
        who.jobrun(&self.group, self.db(), &self.dir)
            .args(args)
            .output()
            .unwrap()
    }

    /// The group's main user makes the store, `--db-mode 0660`, with a
    /// first pass.
    fn make_store(&self) {
        let out = self.as_user(
            &self.owner,
            &["--db-mode", "0660", "run", "j", "--", "true"],
        );
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    }
}

/// Mode (with the setgid bit) and group of a file.
fn mode_and_group(p: &Path) -> (u32, u32) {
    let md = fs::symlink_metadata(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    (md.mode() & 0o7777, md.gid())
}

fn code_and_out(out: &Output) -> (Option<i32>, String, String) {
    (out.status.code(), text(&out.stdout), text(&out.stderr))
}

/// Issue 20: readers and writers, root included, use a group store as its
/// owner made it, without repeating `--db-mode`; a store file that others
/// may write is still refused, by everyone. The holders directory made in
/// the group's setgid directory keeps the setgid bit and the group.
#[test]
fn a_group_store_is_read_by_a_member_and_by_root_without_db_mode() {
    let Some(s) = Shared::new("r", 0o2770) else {
        return;
    };
    s.make_store();
    assert_eq!(mode_and_group(s.db()), (0o660, s.group.gid));
    assert_eq!(mode_and_group(&s.holders()), (0o2770, s.group.gid));
    for args in [
        &["status"][..],
        &["history", "j"],
        &["run", "k", "--", "true"],
    ] {
        let (code, out, err) = code_and_out(&s.as_user(&s.member, args));
        assert_eq!(code, Some(0), "member {args:?}: {err}");
        assert!(err.is_empty(), "member {args:?}: {err}");
        if args == ["status"] {
            assert!(out.contains('j'), "{out}");
        }
    }
    Jobrun::new(&s.env)
        .args(["status"])
        .stdout_contains("k")
        .run();
    Jobrun::new(&s.env).args(["run", "r", "--", "true"]).run();
    Jobrun::new(&s.env).args(["history", "r"]).run();
    // Looser than 0660: refused by the member and by root alike.
    fs::set_permissions(s.db(), fs::Permissions::from_mode(0o666)).unwrap();
    let (code, _, err) = code_and_out(&s.as_user(&s.member, &["status"]));
    assert_eq!(code, Some(125), "{err}");
    assert!(err.contains("writable by anyone"), "{err}");
    Jobrun::new(&s.env)
        .args(["status"])
        .refused()
        .stderr_contains_all(&[&s.env.db, "writable by anyone"])
        .run();
}

/// Issue 18, scenario 3: the files root makes beside a group store (lock
/// files, a waiter's wake FIFO) carry the store's group and the mode
/// `--db-mode` implies, even where nothing would inherit the group; a
/// member then tells root's live pass and waiter alive, and one who cannot
/// (lock files an earlier jobrun made with root's group, 0600) keeps them
/// as unknown. A member's stop-due cannot signal root's pass: exit 1, and
/// the pass runs on.
#[test]
fn files_beside_a_group_store_carry_its_group_and_a_member_keeps_roots_passes() {
    let Some(s) = Shared::new("f", 0o750) else {
        return;
    };
    // Made by the main user, then given to the group, beside a holders
    // directory an earlier jobrun made without the setgid bit: nothing
    // made in it inherits the group.
    let out = s.as_user(&s.owner, &["--db-mode", "0660", "pause", "--new", "j"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    std::os::unix::fs::chown(s.db(), None, Some(s.group.gid)).unwrap();
    let holders = s.holders();
    fs::create_dir(&holders).unwrap();
    std::os::unix::fs::chown(&holders, Some(s.owner.uid), Some(s.group.gid)).unwrap();
    fs::set_permissions(&holders, fs::Permissions::from_mode(0o770)).unwrap();
    let pass = start_pass(&s.env, "hold", "hold", "60s", &[]);
    let waiter = s
        .env
        .start("waiter", &["run", "--wait", "60s", "hold", "--", "true"]);
    assert!(
        wait_until(WAIT, || s.env.job("hold").queue.length == 1),
        "the waiter never queued: {}",
        s.env.stderr_of("waiter")
    );
    let held = s.env.slot("hold").pass_id;
    let queued = s.env.job("hold").queue.waiters[0].pass_id.clone();
    let locks = [
        holders.join(format!("{held}.lock")),
        holders.join(format!("{queued}.lock")),
    ];
    for lock in &locks {
        assert_eq!(
            mode_and_group(lock),
            (0o660, s.group.gid),
            "{}",
            lock.display()
        );
    }
    let wake = holders.join(format!("{queued}.wake"));
    assert!(wait_until(WAIT, || wake.exists()), "no wake FIFO");
    assert!(fs::symlink_metadata(&wake).unwrap().file_type().is_fifo());
    assert_eq!(mode_and_group(&wake), (0o660, s.group.gid));

    let member_keeps_everything = |when: &str| {
        let (code, out, err) = code_and_out(&s.as_user(&s.member, &["clear-locks", "--all"]));
        assert_eq!(code, Some(0), "{when}: {err}");
        assert!(!out.contains("removed from the queue"), "{when}: {out}");
        assert!(out.contains("cleared 0"), "{when}: {out}");
        assert_eq!(s.env.job("hold").queue.length, 1, "{when}: {out}");
        let (code, out, err) = code_and_out(&s.as_user(&s.member, &["stop-due", "hold"]));
        assert_eq!(code, Some(1), "{when}: stop-due: {out}{err}");
        assert!(out.contains("could not signal"), "{when}: {out}");
        assert!(alive(pass.child) && alive(waiter as i32), "{when}");
    };
    member_keeps_everything("lock files of the group");
    for lock in &locks {
        fs::set_permissions(lock, fs::Permissions::from_mode(0o600)).unwrap();
        std::os::unix::fs::chown(lock, None, Some(0)).unwrap();
    }
    member_keeps_everything("lock files the member cannot read");

    fs::write(s.env.path("hold.stop"), "").unwrap();
    assert_eq!(s.env.wait_exit(pass.wrapper, WAIT), Some(0));
    assert_eq!(
        s.env.wait_exit(waiter, WAIT),
        Some(0),
        "{}",
        s.env.stderr_of("waiter")
    );
}

/// stop-due fails (exit 1) only for passes of this host and boot it could
/// not signal; a pass recorded on another host of the store is reported
/// and is no failure, so an upgrade script stopping one host of a fleet
/// succeeds.
fn stop_due_reports_passes_of_other_hosts_without_failing(env: &TestEnv) {
    let pass = start_pass(env, "far", "far", "60s", &WEB2);
    Jobrun::new(env)
        .args(["stop-due", "--all"])
        .stdout_contains("not signalled")
        .stdout_contains("signalled 0 in-flight")
        .run();
    assert!(alive(pass.child));
    fs::write(env.path("far.stop"), "").unwrap();
    assert_eq!(env.wait_exit(pass.wrapper, WAIT), Some(0));
}

both_stores!(stop_due_reports_passes_of_other_hosts_without_failing);
