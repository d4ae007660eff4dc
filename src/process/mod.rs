//! What `/proc` says about processes: their state, parent, group and start
//! time, what they run, what their environment carries, who holds a file
//! lock.
//!
//! The invariant this module keeps: it reports, it never concludes. A pid
//! is read together with its start time, so "gone" means no process with
//! that pid and start time exists, and anything `/proc` will not tell
//! (another user's process under `hidepid`, an unreadable entry) is
//! reported as such rather than guessed. The judgement over these readings
//! lives in `evidence`; acting on them in `signal`.
//!
//! The parser is a hand-written reader of the few fields jobrun needs
//! rather than the `procfs` crate: a renewing wrapper must stay within a few
//! MiB of resident memory, and these reads are a handful of lines.

pub mod identity;

use std::fs;
use std::sync::OnceLock;

use crate::policy::lease::Proc;

pub use identity::Identity;

/// What one read of `/proc/PID/stat` says: state letter, parent, process
/// group, session and start time (clock ticks since boot, on the reader's
/// time namespace's boot clock).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    pub state: char,
    pub ppid: i32,
    pub pgrp: i32,
    pub session: i32,
    pub start: u64,
}

impl Stat {
    /// Exited, waiting for its parent to reap it.
    pub fn exited(&self) -> bool {
        matches!(self.state, 'Z' | 'X')
    }
}

/// Parse `/proc/PID/stat`. The command name (field 2) may contain spaces
/// and parentheses, so fields are counted after the last `)`.
pub fn parse_stat(stat: &str) -> Option<Stat> {
    let mut fields = stat[stat.rfind(')')? + 1..].split_whitespace();
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    let pgrp = fields.next()?.parse().ok()?;
    let session = fields.next()?.parse().ok()?;
    let start = fields.nth(15)?.parse().ok()?;
    Some(Stat {
        state,
        ppid,
        pgrp,
        session,
        start,
    })
}

/// A small `/proc` file as text: one read of a 1 KiB buffer, and one more
/// to see its end. `fs::read_to_string` asks for the size first (0 for
/// every `/proc` file) and then reads in growing steps, and the kernel
/// writes a process's whole stat line again for each step: six reads and
/// a stat where two reads do.
pub fn read_small(path: impl AsRef<std::path::Path>) -> std::io::Result<String> {
    use std::io::Read;
    let mut file = fs::File::open(path)?;
    let mut buf = [0u8; 1024];
    let mut out = Vec::new();
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        out.extend_from_slice(&buf[..n]);
    }
    String::from_utf8(out).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}

/// `/proc/PID/stat` of `pid`, parsed; `None` when it cannot be read.
pub fn stat(pid: i32) -> Option<Stat> {
    parse_stat(&read_small(format!("/proc/{pid}/stat")).ok()?)
}

/// The start time of `pid` in clock ticks since boot, or `None` when no
/// such process exists (or `/proc` cannot tell).
pub fn start_time(pid: i32) -> Option<u64> {
    stat(pid).map(|s| s.start)
}

/// This process as evidence.
pub fn this_process() -> Proc {
    // Its start time is read once per process (a pass records it in its
    // holder lock and in its row); a forked child reads its own.
    static ME: OnceLock<Proc> = OnceLock::new();
    let pid = std::process::id() as i32;
    let read = || Proc {
        pid,
        start: start_time(pid).unwrap_or(0),
    };
    match ME.get() {
        Some(me) if me.pid == pid => *me,
        Some(_) => read(),
        None => {
            let me = read();
            if me.start != 0 {
                let _ = ME.set(me);
            }
            me
        }
    }
}

/// Whether a process with pid `pid` exists at all, as the kernel says
/// (signal 0 delivers nothing: it only asks). `false` only on ESRCH.
fn exists(pid: nix::unistd::Pid) -> bool {
    !matches!(
        nix::sys::signal::kill(pid, None),
        Err(nix::errno::Errno::ESRCH)
    )
}

/// What `/proc` says of a recorded process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State {
    Running,
    /// Exited, not yet reaped: its pid (and group id) are not reusable yet.
    Exited,
    Gone,
    /// The pid now belongs to another process.
    Reused,
    /// It may exist, but this process cannot read it (hidepid, EACCES).
    Unreadable(String),
}

/// Read the state of recorded process `p`: its pid with its start time.
pub fn read(p: Proc) -> State {
    match read_small(format!("/proc/{}/stat", p.pid)) {
        Ok(text) => match parse_stat(&text) {
            Some(s) if s.start != p.start => State::Reused,
            Some(s) if s.exited() => State::Exited,
            Some(_) => State::Running,
            None => State::Unreadable("unparsable /proc stat".into()),
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            // /proc mounted with hidepid=2 hides other users' processes;
            // the kernel still answers whether the pid exists.
            if exists(nix::unistd::Pid::from_raw(p.pid)) {
                State::Unreadable("hidden in /proc".into())
            } else {
                State::Gone
            }
        }
        Err(e) => State::Unreadable(e.to_string()),
    }
}

/// The processes of group `pgid` that have not exited, as far as `/proc`
/// shows them, and whether any exited member (a zombie) was seen. `None`
/// when `/proc` cannot be listed. Each listed process is asked its group
/// with getpgid(2) first, a system call that formats nothing: only the few
/// in `pgid` have their `stat` read, so a scan costs little more than
/// listing `/proc`, however many processes the machine runs (the wrapper
/// scans once at the end of every pass).
fn group_scan(pgid: i32) -> Option<(Vec<i32>, bool)> {
    use nix::unistd::{getpgid, Pid};
    let mut live = vec![];
    let mut zombies = false;
    for e in fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        if getpgid(Some(Pid::from_raw(pid))).is_ok_and(|g| g.as_raw() != pgid) {
            continue;
        }
        match stat(pid) {
            Some(s) if s.pgrp == pgid && s.exited() => zombies = true,
            Some(s) if s.pgrp == pgid => live.push(pid),
            _ => {}
        }
    }
    live.sort_unstable();
    Some((live, zombies))
}

/// What is left of process group `pgid`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Group {
    /// Members that have not exited, lowest pid first.
    Runs(Vec<i32>),
    /// No member runs (exited members waiting to be reaped count as gone).
    Empty,
    /// The kernel says the group has members this process cannot see.
    Hidden,
}

/// Whether a process of group `pgid` still runs. Members that have exited
/// but wait for a slow init to reap them count as gone.
pub fn group(pgid: i32) -> Group {
    // Asking the kernel first spares reading every process's /proc entry.
    if !exists(nix::unistd::Pid::from_raw(-pgid)) {
        return Group::Empty;
    }
    let scan = group_scan(pgid);
    if let Some((live, _)) = &scan {
        if !live.is_empty() {
            return Group::Runs(live.clone());
        }
    }
    match scan {
        Some((_, true)) => Group::Empty,
        _ => Group::Hidden,
    }
}

/// Whether this process adopts the orphans of its descendants
/// (`become_subreaper`).
static SUBREAPER: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Make this process the reaper of its descendants' orphans
/// (`PR_SET_CHILD_SUBREAPER`): a process the command leaves behind is then
/// re-parented to this process, not to init, so its group's survivors are
/// found among this process's descendants (`own_group`) without listing
/// every process on the machine. Whether it could.
pub fn become_subreaper() -> bool {
    // SAFETY: prctl with an integer argument changes only this process.
    let done = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) } == 0;
    SUBREAPER.store(done, std::sync::atomic::Ordering::SeqCst);
    done
}

/// The children of `pid` (`self` for this process), every thread's, as
/// the kernel lists them. `None` where it does not (a kernel without
/// `/proc/PID/task/TID/children`) or the process is gone. A thread that
/// ends meanwhile is skipped (its children were another thread's).
fn children_of(pid: &str) -> Option<Vec<i32>> {
    let mut out = vec![];
    let mut listed = false;
    for task in fs::read_dir(format!("/proc/{pid}/task")).ok()?.flatten() {
        let Ok(text) = read_small(task.path().join("children")) else {
            continue;
        };
        listed = true;
        out.extend(
            text.split_whitespace()
                .filter_map(|p| p.parse::<i32>().ok()),
        );
    }
    listed.then_some(out)
}

/// One walk of this process's descendants: every pid seen, and those of
/// group `pgid` that have not exited. `None` where children cannot be
/// listed.
fn walk_descendants(pgid: i32) -> Option<(Vec<i32>, Vec<i32>)> {
    let (mut seen, mut live) = (vec![], vec![]);
    let mut todo = children_of("self")?;
    while let Some(pid) = todo.pop() {
        seen.push(pid);
        if stat(pid).is_some_and(|s| s.pgrp == pgid && !s.exited()) {
            live.push(pid);
        }
        // One that ended meanwhile has no children left: they were
        // re-parented to this process, and the next walk sees them.
        todo.extend(children_of(&pid.to_string()).unwrap_or_default());
    }
    seen.sort_unstable();
    live.sort_unstable();
    Some((seen, live))
}

/// What is left of group `pgid`, the group of this process's child: as
/// `group`, but where this process is a subreaper (`become_subreaper`) from
/// its descendants alone. Every member of the group descends from this
/// process then: its leader is this process's child, whatever a member
/// forks descends from it, and a member orphaned is re-parented here. (A
/// process outside this process's descendants can join the group only
/// from the same session, by its own deliberate `setpgid`; it is not
/// looked for.) Walks repeat until two see the same processes, so one
/// that forks and exits during a walk is not missed (one walk that finds
/// the ended leader alone is enough); where they keep changing, or
/// children cannot be listed, every process is scanned.
pub fn own_group(pgid: i32) -> Group {
    if !SUBREAPER.load(std::sync::atomic::Ordering::SeqCst) {
        return group(pgid);
    }
    let mut last = None;
    for _ in 0..4 {
        let Some((seen, live)) = walk_descendants(pgid) else {
            return group(pgid);
        };
        if !live.is_empty() {
            return Group::Runs(live);
        }
        // Only the leader, ended: its children came to this process when
        // it ended, before this walk listed them, so none was missed.
        if last.as_ref() == Some(&seen) || seen == [pgid] {
            return Group::Empty;
        }
        last = Some(seen);
    }
    group(pgid)
}

/// This process's own helpers (hooks, container engine commands): each
/// is reaped by the thread that waits for it, never by `reap_adopted`.
static HELPERS: std::sync::Mutex<Vec<i32>> = std::sync::Mutex::new(Vec::new());

fn helpers() -> std::sync::MutexGuard<'static, Vec<i32>> {
    HELPERS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A helper of this process, spawned by `spawn_helper`: known as one until
/// dropped, after its owner has reaped it.
#[derive(Debug)]
pub struct Helper(i32);

impl Drop for Helper {
    fn drop(&mut self) {
        // One entry: a pid reused by a newer helper stays registered.
        let mut helpers = helpers();
        if let Some(at) = helpers.iter().position(|p| *p == self.0) {
            helpers.swap_remove(at);
        }
    }
}

/// Spawn `command` as a helper of this process: `reap_adopted` cannot run
/// between its start and its registration, so it never takes the helper's
/// exit from the thread that waits for it.
pub fn spawn_helper(
    command: &mut std::process::Command,
) -> std::io::Result<(std::process::Child, Helper)> {
    let mut helpers = helpers();
    let child = command.spawn()?;
    let pid = child.id() as i32;
    helpers.push(pid);
    Ok((child, Helper(pid)))
}

/// Reap this process's children that have exited (`become_subreaper`: the
/// orphans it adopted), except the leader of group `pgid` (which its
/// owner reaps last, so the group's id stays its own until then) and this
/// process's own helpers (`spawn_helper`).
pub fn reap_adopted(pgid: i32) {
    if !SUBREAPER.load(std::sync::atomic::Ordering::SeqCst) {
        return;
    }
    let helpers = helpers();
    for pid in children_of("self").unwrap_or_default() {
        if pid == pgid || helpers.contains(&pid) {
            continue;
        }
        // Our child: reaped if it has exited (its pid cannot be reused
        // before this), left alone if it runs.
        let _ = nix::sys::wait::waitpid(
            nix::unistd::Pid::from_raw(pid),
            Some(nix::sys::wait::WaitPidFlag::WNOHANG),
        );
    }
}

/// Whether `pid` runs a jobrun binary: its executable is named `jobrun`
/// (or `jobrun-*`), or is the very file this process runs. Where the
/// executable cannot be read (another user's process, without root), its
/// command name says the same. `None` when neither can be read.
pub fn runs_jobrun(pid: i32) -> Option<bool> {
    use std::os::unix::fs::MetadataExt;
    let named = |name: &str| name == "jobrun" || name.starts_with("jobrun-");
    let Ok(exe) = fs::read_link(format!("/proc/{pid}/exe")) else {
        let comm = fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
        return Some(named(comm.trim_end()));
    };
    let name = exe.file_name()?.to_string_lossy().into_owned();
    if named(name.trim_end_matches(" (deleted)")) {
        return Some(true);
    }
    let theirs = fs::metadata(format!("/proc/{pid}/exe")).ok()?;
    let ours = fs::metadata("/proc/self/exe").ok()?;
    Some(theirs.dev() == ours.dev() && theirs.ino() == ours.ino())
}

/// Whether the environment of `pid` holds the entry `entry` (`NAME=value`,
/// whole). `None` when it cannot be read (another user's process).
pub fn environment_has(pid: i32, entry: &str) -> Option<bool> {
    let env = fs::read(format!("/proc/{pid}/environ")).ok()?;
    Some(env.split(|b| *b == 0).any(|v| v == entry.as_bytes()))
}

/// The value of the variable `name` in the environment of `pid`: `None`
/// when it cannot be read (another user's process), `Some(None)` when it
/// has no such variable.
pub fn environment_var(pid: i32, name: &str) -> Option<Option<Vec<u8>>> {
    let env = fs::read(format!("/proc/{pid}/environ")).ok()?;
    let prefix = format!("{name}=");
    Some(
        env.split(|b| *b == 0)
            .find_map(|v| v.strip_prefix(prefix.as_bytes()))
            .map(<[u8]>::to_vec),
    )
}

/// The user `pid` runs as, from its `/proc` entry.
pub fn uid_of(pid: i32) -> Option<u32> {
    use std::os::unix::fs::MetadataExt;
    fs::metadata(format!("/proc/{pid}")).map(|m| m.uid()).ok()
}

/// The pids that hold an flock on the file `(dev, ino)`, from
/// `/proc/locks`. `None` when `/proc/locks` cannot be read. Reading it
/// stalls every file lock on the machine for a moment: only for a lock
/// file that names nobody.
pub fn flock_holders(dev: u64, ino: u64) -> Option<Vec<i32>> {
    let id = format!("{:02x}:{:02x}:{}", libc::major(dev), libc::minor(dev), ino);
    let locks = fs::read_to_string("/proc/locks").ok()?;
    Some(
        locks
            .lines()
            .filter(|l| !l.contains("->"))
            .filter_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                (f.get(1) == Some(&"FLOCK") && f.get(5) == Some(&id.as_str()))
                    .then(|| f.get(4)?.parse().ok())
                    .flatten()
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A member of a group is found below a descendant that is not in it:
    /// here a job control shell (this test's child) and its job, which
    /// leads a group of its own.
    #[test]
    fn a_member_below_a_process_of_another_group_is_found() {
        use std::io::BufRead;
        use std::os::unix::process::CommandExt;
        let mut shell = std::process::Command::new("bash")
            .args(["-c", "set -m; sleep 60 & echo $!; wait"])
            .process_group(0)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("bash");
        let mut line = String::new();
        std::io::BufReader::new(shell.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let job: i32 = line.trim().parse().unwrap();
        let walked = walk_descendants(job);
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(job), nix::sys::signal::SIGKILL);
        let _ = shell.wait();
        let (seen, live) = walked.expect("this kernel lists children");
        assert!(seen.contains(&(shell.id() as i32)), "{seen:?}");
        assert_eq!(live, [job]);
    }

    #[test]
    fn a_proc_file_is_read_whole_past_the_buffer() {
        // Longer than one read's buffer: this process's maps (the binary,
        // its libraries, the heap, the stack: dozens of lines).
        let whole = fs::read_to_string("/proc/self/maps").unwrap();
        assert!(whole.len() > 1024, "{} bytes", whole.len());
        let read = read_small("/proc/self/maps").unwrap();
        // The two reads may see a mapping come or go between them; the
        // first line (the binary) and the last (vsyscall or the stack)
        // stay.
        assert_eq!(read.lines().next(), whole.lines().next());
        assert_eq!(read.lines().last(), whole.lines().last());
        assert!(read.len() > 1024);
        let stat = read_small(format!("/proc/{}/stat", std::process::id())).unwrap();
        assert_eq!(
            parse_stat(&stat).unwrap().start,
            start_time(std::process::id() as i32).unwrap()
        );
    }

    #[test]
    fn stat_parses_names_with_spaces_and_parens() {
        let stat = "42 (a (b) c) S 1 40 42 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 98765 0 0";
        let s = parse_stat(stat).unwrap();
        assert_eq!(
            (s.state, s.ppid, s.pgrp, s.session, s.start),
            ('S', 1, 40, 42, 98765)
        );
    }
}
