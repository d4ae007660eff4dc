//! How a SQLite store is named and opened: `--db` is a path or a
//! PostgreSQL string, nothing else; the store's directory is judged; what
//! SQLite opens is what was checked; a start that fails (a full disk)
//! leaves nothing behind, and `clear-locks --all` removes lock files of no
//! pass that a crash or an earlier jobrun left. The writers' line beside
//! the store orders writers and never stops one; a renewal held up in it
//! is shown late while its lease holds.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, SystemTime};

use crate::support::{hold_the_line, text, wait_until, Jobrun, TempUser, TestEnv};
use jobrun::model::SlotStatus;

const WAIT: Duration = Duration::from_secs(10);

fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// Scenario 7: a SQLite URI or `:memory:` is refused with one line, exit
/// 125, before anything is made (a `file:` name made jobrun judge and
/// create one path while SQLite opened another).
#[test]
fn a_sqlite_uri_or_memory_is_not_a_store() {
    let env = TestEnv::sqlite();
    let cwd = env.path("cwd");
    fs::create_dir(&cwd).unwrap();
    let elsewhere = env.path("elsewhere.db");
    let uri = format!("file:{}?mode=rwc", elsewhere.display());
    for db in ["file:jobs.db", &uri, "file:x.db?vfs=unix-none", ":memory:"] {
        for args in [
            &["run", "j", "--", "touch", "ran"][..],
            &["status"],
            &["pause", "--new", "j"],
        ] {
            for by_flag in [false, true] {
                let mut c = env.cmd(&[]);
                if by_flag {
                    c.args(["--db", db]);
                } else {
                    c.env("JOBRUN_DB", db);
                }
                let out = c.args(args).current_dir(&cwd).output().unwrap();
                let err = text(&out.stderr);
                assert_eq!(out.status.code(), Some(125), "{db} {args:?}: {err}");
                assert_eq!(err.lines().count(), 1, "{db} {args:?}: {err}");
                assert!(err.contains("invalid --db/JOBRUN_DB"), "{db}: {err}");
            }
        }
    }
    assert_eq!(entries(&cwd), Vec::<String>::new(), "junk left behind");
    assert!(!elsewhere.exists(), "SQLite opened the URI's path");
}

/// Scenario 6: the store is opened once, by descriptor. The test seam
/// `JOBRUN_TEST_OPEN_PAUSE` holds jobrun between checking the store's files
/// and SQLite's open; another user's store renamed over root's in that
/// moment is refused, not read.
#[test]
fn a_store_replaced_between_its_check_and_its_open_is_refused() {
    let Some(user) = TempUser::create("o") else {
        return;
    };
    let env = TestEnv::sqlite();
    let evil = env.path("evil.db");
    Jobrun::new(&env)
        .env("JOBRUN_DB", &evil)
        .args(["pause", "--new", "planted"])
        .any_stderr("a new store is announced")
        .run();
    for suffix in ["", "-wal", "-shm"] {
        let p = PathBuf::from(format!("{}{suffix}", evil.display()));
        if p.exists() {
            user.owns(&p);
        }
    }
    let fifo = env.path("pause.fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let pid = env.start_with(
        "status",
        &["status"],
        &[("JOBRUN_TEST_OPEN_PAUSE", fifo.to_str().unwrap())],
    );
    // The FIFO has a reader once jobrun checked the store and paused.
    let mut writer = None;
    assert!(
        wait_until(WAIT, || {
            writer = nix::fcntl::open(
                &fifo,
                nix::fcntl::OFlag::O_WRONLY | nix::fcntl::OFlag::O_NONBLOCK,
                nix::sys::stat::Mode::empty(),
            )
            .ok();
            writer.is_some()
        }),
        "jobrun never paused: {}",
        env.stderr_of("status")
    );
    fs::rename(&evil, &env.db).unwrap();
    drop(writer);
    assert_eq!(
        env.wait_exit(pid, WAIT),
        Some(125),
        "{}{}",
        env.stdout_of("status"),
        env.stderr_of("status")
    );
    let err = env.stderr_of("status");
    assert!(
        err.contains("replaced between its check and SQLite's open"),
        "{err}"
    );
    assert!(!env.stdout_of("status").contains("planted"));
}

/// Scenario 6: the store's directory is judged as OpenSSH judges the
/// directories above its keys: owned by root, the caller or the store's
/// owner, and writable by no one beyond the store's group unless sticky.
#[test]
fn a_store_in_a_directory_others_may_replace_it_in_is_refused() {
    let Some(user) = TempUser::create("d") else {
        return;
    };
    let env = TestEnv::sqlite_not_made();
    fs::set_permissions(env.dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let dir = env.path("d");
    fs::create_dir(&dir).unwrap();
    let db = dir.join("store.db");
    let shown = dir.display().to_string();
    let at = |args: &[&str]| Jobrun::new(&env).env("JOBRUN_DB", &db).args(args.to_vec());
    let chmod = |mode: u32| fs::set_permissions(&dir, fs::Permissions::from_mode(mode)).unwrap();

    chmod(0o777);
    at(&["run", "j", "--", "touch", "ran"])
        .refused()
        .stderr_contains_all(&[&shown, "writable by anyone without the sticky bit"])
        .run();
    assert!(!db.exists() && !env.path("ran").exists());
    // Sticky, as /tmp: only a file's owner may rename or remove it.
    chmod(0o1777);
    at(&["run", "j", "--", "true"])
        .any_stderr("the new store is announced")
        .run();
    // Writable by a group that is not the store's.
    chmod(0o775);
    std::os::unix::fs::chown(&dir, None, Some(user.gid)).unwrap();
    at(&["status"])
        .refused()
        .stderr_contains_all(&[&shown, "writable by its group, which is not the store's"])
        .run();
    // ... and by the store's own group: its members may write rows anyway.
    std::os::unix::fs::chown(&db, None, Some(user.gid)).unwrap();
    at(&["status"]).run();
    // Another user's directory, for a store of root's.
    chmod(0o755);
    user.owns(&dir);
    at(&["status"])
        .refused()
        .stderr_contains_all(&[&shown, &user.name, "owned by neither root"])
        .run();
}

/// A tmpfs mounted for one test, unmounted when dropped (even on failure).
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(at: PathBuf, size: &str) -> Option<Tmpfs> {
        fs::create_dir_all(&at).unwrap();
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&at)
            .output()
            .unwrap();
        if !out.status.success() {
            eprintln!("skipped: cannot mount a tmpfs: {}", text(&out.stderr));
            return None;
        }
        Some(Tmpfs(at))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).output();
    }
}

/// Scenario 12: a pass that cannot write its holder lock (ENOSPC) exits
/// 125 and leaves no `<pass>.lock` behind; once there is room again the
/// store works as before (nothing lost).
#[test]
fn a_start_that_fails_on_a_full_disk_leaves_no_lock_file() {
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: mounting a small tmpfs needs root");
        return;
    }
    let mut env = TestEnv::sqlite_not_made();
    let Some(disk) = Tmpfs::mount(env.path("disk"), "1m") else {
        return;
    };
    env.db = disk.0.join("store.db").to_string_lossy().into_owned();
    Jobrun::new(&env)
        .args(["run", "j", "--", "true"])
        .any_stderr("the new store is announced")
        .run();
    let holders = PathBuf::from(format!("{}.holders", env.db));
    let filler = disk.0.join("filler");
    {
        use std::io::Write;
        let mut f = fs::File::create(&filler).unwrap();
        while f.write_all(&[0u8; 4096]).is_ok() {}
    }
    for _ in 0..3 {
        Jobrun::new(&env)
            .args(["run", "j", "--", "touch", "ran"])
            .refused()
            .stderr_contains("No space left on device")
            .run();
    }
    assert!(!env.path("ran").exists());
    assert_eq!(
        entries(&holders),
        Vec::<String>::new(),
        "litter in the holders directory"
    );
    fs::remove_file(&filler).unwrap();
    Jobrun::new(&env)
        .args(["run", "j", "--", "touch", "ran"])
        .run();
    assert!(env.path("ran").exists());
    assert_eq!(env.history("j").len(), 2);
}

/// Scenario 12: `clear-locks --all` removes lock files that belong to no
/// row and that nobody holds, once unchanged for a minute (a pass takes its
/// lock a moment before its row commits); never a locked one, a recent one,
/// or a file not named as jobrun names them. `--dry-run` only says so; a
/// clear-locks of named jobs leaves them (they belong to no job).
#[test]
fn clear_locks_removes_stray_lock_files_of_no_pass() {
    let env = TestEnv::sqlite();
    Jobrun::new(&env).args(["run", "j", "--", "true"]).run();
    let holders = PathBuf::from(format!("{}.holders", env.db));
    let old = SystemTime::now() - Duration::from_secs(120);
    let make = |name: &str, aged: bool| {
        let p = holders.join(name);
        fs::write(&p, "4242 1\n").unwrap();
        if aged {
            fs::File::options()
                .write(true)
                .open(&p)
                .unwrap()
                .set_modified(old)
                .unwrap();
        }
        p
    };
    let stray = make("0123456789ab.lock", true);
    let fresh = make("0123456789ac.lock", false);
    let locked = make("0123456789ad.lock", true);
    let other = make("not-a-pass.lock", true);
    let held = fs::File::open(&locked).unwrap();
    // SAFETY: flock on a descriptor this test owns; released when dropped.
    assert_eq!(
        unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&held), libc::LOCK_EX) },
        0
    );

    Jobrun::new(&env)
        .args(["clear-locks", "j"])
        .stdout_lacks("stray")
        .run();
    assert!(stray.exists());
    Jobrun::new(&env)
        .args(["clear-locks", "--all", "--dry-run"])
        .stdout_contains("would remove 1 stray lock file(s)")
        .run();
    assert!(stray.exists());
    Jobrun::new(&env)
        .args(["clear-locks", "--all"])
        .stdout_contains("removed 1 stray lock file(s)")
        .run();
    assert!(!stray.exists());
    for kept in [&fresh, &locked, &other] {
        assert!(kept.exists(), "{} was removed", kept.display());
    }
    drop(held);
}

/// The writers' line only orders jobrun's writers: a holder killed in its
/// turn loses it with its life, so the next pass writes at once; one that
/// never lets go costs each write its patience (five seconds), then
/// SQLite's own lock decides, and the write is made.
#[test]
fn a_killed_or_stuck_holder_of_the_writers_line_stops_no_write() {
    let env = TestEnv::sqlite();
    Jobrun::new(&env).args(["run", "j", "--", "true"]).run();
    let mut killed = hold_the_line(&env, "killed");
    crate::support::kill(-(killed.id() as i32), libc::SIGKILL);
    killed.wait().unwrap();
    let t = std::time::Instant::now();
    Jobrun::new(&env).args(["run", "j", "--", "true"]).run();
    assert!(t.elapsed() < Duration::from_secs(4), "{:?}", t.elapsed());

    let mut stuck = hold_the_line(&env, "stuck");
    let t = std::time::Instant::now();
    let paused = env.run(&["pause", "j"]);
    let waited = t.elapsed();
    crate::support::kill(-(stuck.id() as i32), libc::SIGKILL);
    stuck.wait().unwrap();
    assert_eq!(paused.status.code(), Some(0), "{}", text(&paused.stderr));
    assert!(
        waited >= Duration::from_secs(4) && waited < Duration::from_secs(30),
        "{waited:?}"
    );
    assert!(env.job("j").paused.is_some(), "the pause was written");
}

/// Past the knee of a busy store, renewals come late: a renewal waiting in
/// the writers' line shows in `status` (`renewal_late`, "renewal late
/// (store busy)") while the lease still holds, lands inside its window,
/// and the pass says so once, with no loss.
#[test]
fn a_renewal_held_up_in_line_is_shown_late_and_keeps_the_lease() {
    let env = TestEnv::sqlite();
    let pass = crate::support::start_pass(&env, "j", "pass", "3s", &[]);
    let mut line = hold_the_line(&env, "line");
    let late = wait_until(WAIT, || env.slot("j").renewal_late);
    let shown = text(&env.run(&["status"]).stdout);
    crate::support::kill(-(line.id() as i32), libc::SIGKILL);
    line.wait().unwrap();
    assert!(
        late,
        "status never showed the renewal late: {:?}",
        env.slot("j")
    );
    assert!(shown.contains("renewal late (store busy)"), "{shown}");
    // One renewal more lands in line: the late one is behind it. A
    // renewal's time into the hold (`held_ms - renewed_ago_ms`, one read)
    // only grows, however soon after a renewal status is read.
    let renewed_at = |s: &SlotStatus| s.held_ms - s.renewed_ago_ms;
    let before = renewed_at(&env.slot("j"));
    assert!(
        wait_until(WAIT, || renewed_at(&env.slot("j")) > before),
        "no renewal after the line was free"
    );
    fs::write(env.path("pass.stop"), "").unwrap();
    assert_eq!(env.wait_exit(pass.wrapper, WAIT), Some(0));
    let said = env.stderr_of("pass");
    assert!(
        said.contains("warning: renewed") && said.contains("the lease holds"),
        "{said}"
    );
    assert!(!said.contains("lease lost"), "{said}");
}

/// Every place at the starters' gate of the store held by this test, as
/// jobrun holds one: a byte-range lock (`F_OFD_SETLK`) per CPU, past the
/// renewals board in `<store>-writers`. Dropped (the file closed), the
/// gate is free.
fn hold_the_gate(env: &TestEnv) -> fs::File {
    // Past the board: 36 KiB of states, then 8,192 places of 512 bytes.
    const AT: i64 = 36 * 1024 + 8192 * 512;
    let file = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(format!("{}-writers", env.db))
        .unwrap();
    let places = cpus();
    for place in 0..places as i64 {
        // SAFETY: a zeroed flock is valid; fcntl reads it.
        let held = unsafe {
            let mut fl: libc::flock = std::mem::zeroed();
            fl.l_type = libc::F_WRLCK as libc::c_short;
            fl.l_whence = libc::SEEK_SET as libc::c_short;
            fl.l_start = AT + place;
            fl.l_len = 1;
            libc::fcntl(
                std::os::fd::AsRawFd::as_raw_fd(&file),
                libc::F_OFD_SETLK,
                &mut fl,
            ) == 0
        };
        assert!(held, "place {place} of the gate is taken");
    }
    file
}

/// The CPUs this process may run on, as jobrun counts the gate's places.
fn cpus() -> usize {
    // SAFETY: a zeroed cpu_set_t is valid; sched_getaffinity fills it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        assert_eq!(
            libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set),
            0
        );
        libc::CPU_COUNT(&set) as usize
    }
}

/// How many of `pids` sleep at the starters' gate: their main thread is
/// in a futex wait on a word of the store's `<store>-writers` mapping (the
/// gate's bell).
fn waiting_at_the_gate(env: &TestEnv, pids: &[u32]) -> usize {
    let side = format!("{}-writers", env.db);
    pids.iter()
        .filter(|pid| {
            let syscall = fs::read_to_string(format!("/proc/{pid}/syscall")).unwrap_or_default();
            let mut fields = syscall.split_whitespace();
            let number = fields.next().and_then(|n| n.parse::<i64>().ok());
            let addr = fields
                .next()
                .and_then(|a| u64::from_str_radix(a.trim_start_matches("0x"), 16).ok());
            let (Some(libc::SYS_futex), Some(addr)) = (number, addr) else {
                return false;
            };
            let maps = fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
            maps.lines().filter(|l| l.ends_with(&side)).any(|l| {
                let range = l.split_whitespace().next().unwrap_or_default();
                let (from, to) = range.split_once('-').unwrap_or_default();
                let from = u64::from_str_radix(from, 16).unwrap_or(u64::MAX);
                let to = u64::from_str_radix(to, 16).unwrap_or(0);
                (from..to).contains(&addr)
            })
        })
        .count()
}

/// Passes of one store start a few at a time: while every place at the
/// starters' gate is taken, a pass waits there, taking nothing; it starts
/// once a place is left; and a TERM while it waits ends it at once (143)
/// with nothing taken or recorded.
#[test]
fn a_pass_waits_among_the_starters_and_term_ends_its_wait() {
    let env = TestEnv::sqlite();
    Jobrun::new(&env).args(["run", "first", "--", "true"]).run();
    let gate = hold_the_gate(&env);
    let waiting = env.start("waiting", &["run", "j", "--", "touch", "ran"]);
    let stopped = env.start("stopped", &["run", "k", "--", "touch", "ran-k"]);
    assert!(
        wait_until(WAIT, || waiting_at_the_gate(&env, &[waiting, stopped]) == 2),
        "the passes never waited at the gate: {} {}",
        env.stderr_of("waiting"),
        env.stderr_of("stopped")
    );
    let sent = std::time::Instant::now();
    crate::support::kill(stopped as i32, libc::SIGTERM);
    assert_eq!(
        env.wait_exit(stopped, WAIT),
        Some(143),
        "{}",
        env.stderr_of("stopped")
    );
    assert!(
        sent.elapsed() < Duration::from_secs(3),
        "{:?}",
        sent.elapsed()
    );
    let err = env.stderr_of("stopped");
    assert!(
        err.contains(
            "k: stopped by signal 15 before trying for a slot (waiting among the store's \
             starters); nothing was taken"
        ),
        "{err}"
    );
    assert!(!env.path("ran-k").exists());
    assert!(env.find_job("k").is_none(), "the stopped pass was recorded");
    // The other still waits, and has taken nothing.
    assert!(crate::support::alive(waiting as i32));
    assert!(!env.path("ran").exists());
    assert!(env.find_job("j").is_none());
    drop(gate);
    assert_eq!(
        env.wait_exit(waiting, WAIT),
        Some(0),
        "{}",
        env.stderr_of("waiting")
    );
    assert!(env.path("ran").exists());
}

/// A pass leaves the starters' gate once it holds its slot: more passes
/// than there are places at the gate all run at once, and each ends as
/// its command does.
#[test]
fn a_pass_leaves_the_gate_once_it_holds_its_slot() {
    let env = TestEnv::sqlite();
    Jobrun::new(&env).args(["run", "first", "--", "true"]).run();
    let places = cpus();
    let passes: Vec<_> = (0..=places)
        .map(|i| crate::support::start_pass(&env, &format!("j{i}"), &format!("p{i}"), "3s", &[]))
        .collect();
    let wrappers: Vec<u32> = passes.iter().map(|p| p.wrapper).collect();
    assert_eq!(waiting_at_the_gate(&env, &wrappers), 0);
    for (i, pass) in passes.iter().enumerate() {
        fs::write(env.path(&format!("p{i}.stop")), "").unwrap();
        assert_eq!(env.wait_exit(pass.wrapper, WAIT), Some(0));
    }
}
