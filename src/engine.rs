//! Asking a container engine about a pass's containers, and stopping them,
//! by the pass's label and nothing else.
//!
//! A pass that declares `--containers ENGINE` labels its containers
//! `jobrun.pass=<pass id>`. Whoever judges or stops it runs its own
//! `docker` or `podman` (found in its own PATH, talking to the daemon its
//! own environment names) with that label as the one value taken from the
//! store, and only once the pass id is one jobrun could have made (12
//! lowercase hex digits): a row can name neither a command, nor a path, nor
//! another filter. Containers are stopped by the ids the engine itself just
//! listed for that label, never by a pid.
//!
//! The invariant this module keeps: an engine that cannot answer (missing,
//! its daemon unreachable, slower than `ENGINE_TIMEOUT`, or answering in a
//! form this module does not know) is reported as no answer, never as "no
//! container". Engines are run outside any store transaction, in a process
//! group of their own that is KILLed at the deadline, so a hung engine
//! costs a judge a few seconds, never a hang, and leaves nothing behind.

use std::collections::HashMap;
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::files::valid_pass_id;
use crate::policy::containers::Engine;

/// The label a pass's containers carry: `jobrun.pass=<pass id>`.
pub const LABEL_KEY: &str = "jobrun.pass";
/// What the command finds in its environment with `--containers`: the
/// label ready for `--label`.
pub const LABEL_ENV: &str = "JOBRUN_LABEL";
/// How long a judge waits for the engine's answer.
pub const ENGINE_TIMEOUT: Duration = Duration::from_secs(5);
/// How long `stop-due` lets a container stop before the engine KILLs it,
/// when it is given no `--kill-after`: `run --kill-after`'s default.
pub const STOP_GRACE: Duration = Duration::from_secs(10);
/// How long an engine that did not answer in time is not asked again by
/// the same process: a judge of many passes (status, clear-locks) then
/// waits for a hung engine once, not once per pass.
const SILENT_FOR: Duration = Duration::from_secs(60);
/// The most of an engine's output that is kept.
const OUTPUT_CAP: u64 = 64 * 1024;
/// How long the output of an engine that has exited may take to be read.
const READ_GRACE: Duration = Duration::from_millis(200);
/// The stack of a thread that reads an engine's output: a wrapper that
/// watches its containers stays within a few MiB.
const READER_STACK: usize = 64 * 1024;

/// The label of pass `pass_id`, when the id is one jobrun could have made.
pub fn label(pass_id: &str) -> Option<String> {
    valid_pass_id(pass_id).then(|| format!("{LABEL_KEY}={pass_id}"))
}

/// A container id as an engine lists it: lowercase hex.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerId(String);

impl ContainerId {
    /// An id as the engine printed it; anything but 12 to 64 lowercase hex
    /// digits is not an id.
    pub fn parse(line: &str) -> Option<ContainerId> {
        let ok = (12..=64).contains(&line.len())
            && line.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
        ok.then(|| ContainerId(line.to_string()))
    }

    /// The 12 digits engines show.
    pub fn short(&self) -> &str {
        &self.0[..12]
    }
}

/// What the engine said of the containers labelled with a pass's id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seen {
    /// These run (at least one).
    Running(Vec<ContainerId>),
    /// The engine answered: none runs.
    NoneRunning,
    /// No answer to trust, and why.
    NoAnswer(String),
}

/// Engines that did not answer in time, and when: asked again only after
/// `SILENT_FOR`.
static SILENT: Mutex<Option<HashMap<Engine, Instant>>> = Mutex::new(None);

fn silent_since(engine: Engine) -> Option<Instant> {
    let silent = SILENT.lock().unwrap_or_else(|e| e.into_inner());
    silent
        .as_ref()?
        .get(&engine)
        .copied()
        .filter(|at| at.elapsed() < SILENT_FOR)
}

fn mark_silent(engine: Engine) {
    let mut silent = SILENT.lock().unwrap_or_else(|e| e.into_inner());
    silent
        .get_or_insert_with(HashMap::new)
        .insert(engine, Instant::now());
}

/// Which containers labelled with pass `pass_id` `engine` runs, asked with
/// the engine's own `ps` and a deadline of `timeout`.
pub fn running(engine: Engine, pass_id: &str, timeout: Duration) -> Seen {
    let Some(label) = label(pass_id) else {
        return Seen::NoAnswer(format!(
            "its pass id is not one jobrun makes, so {} is not asked",
            engine.as_str()
        ));
    };
    if let Some(at) = silent_since(engine) {
        return Seen::NoAnswer(format!(
            "{} did not answer within {} (asked {}s ago)",
            engine.as_str(),
            humantime::format_duration(timeout),
            at.elapsed().as_secs()
        ));
    }
    let args = [
        "ps",
        "--no-trunc",
        "--filter",
        &format!("label={label}"),
        "--format",
        "{{.ID}}",
    ];
    match run(engine, &args, timeout) {
        Ok(out) => {
            let mut ids = vec![];
            for line in out.lines().map(str::trim).filter(|l| !l.is_empty()) {
                match ContainerId::parse(line) {
                    Some(id) => ids.push(id),
                    None => {
                        return Seen::NoAnswer(format!(
                            "{} ps answered something that is not a container id: {}",
                            engine.as_str(),
                            first_line(line)
                        ))
                    }
                }
            }
            if ids.is_empty() {
                Seen::NoneRunning
            } else {
                Seen::Running(ids)
            }
        }
        Err(Failure::TimedOut) => {
            mark_silent(engine);
            Seen::NoAnswer(format!(
                "{} did not answer within {}",
                engine.as_str(),
                humantime::format_duration(timeout)
            ))
        }
        Err(Failure::Other(why)) => Seen::NoAnswer(why),
    }
}

/// A stop of a pass's containers under way: `ENGINE stop -t SECONDS ID...`
/// with the ids the engine listed for the pass's label a moment before.
/// Several run at once; `finish` waits for one.
pub struct Stopping {
    engine: Engine,
    pass_id: String,
    ids: Vec<ContainerId>,
    started: Result<Running, String>,
    deadline: Duration,
}

impl Stopping {
    /// Ask `engine` to stop `ids`, the containers it listed for pass
    /// `pass_id`, sending TERM (or the container's stop signal) and KILL
    /// after `grace`.
    pub fn start(
        engine: Engine,
        pass_id: &str,
        ids: Vec<ContainerId>,
        grace: Duration,
    ) -> Stopping {
        let mut args = vec![
            "stop".to_string(),
            "-t".to_string(),
            stop_seconds(grace).to_string(),
        ];
        args.extend(ids.iter().map(|i| i.0.clone()));
        Stopping {
            engine,
            pass_id: pass_id.to_string(),
            started: Running::spawn(engine, &args),
            ids,
            // The engine waits `grace` before its KILL, then for the
            // container to go.
            deadline: grace + ENGINE_TIMEOUT,
        }
    }

    /// Wait for the engine: the containers it stopped (short ids), or why
    /// it could not. A stop that failed because the containers ended
    /// meanwhile (a `--rm` container gone before the engine got to it) is
    /// a stop: the engine is asked again which of them still run.
    pub fn finish(self) -> Result<String, String> {
        let name = self.engine.as_str();
        let shown = self
            .ids
            .iter()
            .map(ContainerId::short)
            .collect::<Vec<_>>()
            .join(", ");
        let stopped = self.started.and_then(|r| match r.wait(self.deadline) {
            Err(Failure::TimedOut) => Err(format!(
                "{name} stop did not end within {}",
                humantime::format_duration(self.deadline)
            )),
            Err(Failure::Other(why)) => Err(why),
            Ok(_) => Ok(()),
        });
        let Err(why) = stopped else {
            return Ok(shown);
        };
        match running(self.engine, &self.pass_id, ENGINE_TIMEOUT) {
            Seen::NoneRunning => Ok(shown),
            Seen::Running(now) if !now.iter().any(|i| self.ids.contains(i)) => Ok(shown),
            _ => Err(format!("cannot stop container(s) {shown}: {why}")),
        }
    }
}

/// A grace period as `stop -t` takes it: whole seconds, rounded up.
pub fn stop_seconds(grace: Duration) -> u64 {
    grace.as_secs() + u64::from(grace.subsec_nanos() > 0)
}

/// Whether `engine` is a file in this process's PATH that it may run.
pub fn installed(engine: Engine) -> bool {
    use std::os::unix::fs::PermissionsExt;
    let Some(path) = std::env::var_os("PATH") else {
        return false;
    };
    std::env::split_paths(&path).any(|dir| {
        std::fs::metadata(dir.join(engine.as_str()))
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    })
}

/// Why an engine gave no answer.
#[derive(Debug)]
enum Failure {
    TimedOut,
    Other(String),
}

/// Run `engine` with `args` and wait for it: its standard output when it
/// exits 0.
fn run(engine: Engine, args: &[&str], timeout: Duration) -> Result<String, Failure> {
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    Running::spawn(engine, &args)
        .map_err(Failure::Other)?
        .wait(timeout)
}

/// An engine command started in a process group of its own, its output
/// read by two threads.
struct Running {
    engine: Engine,
    child: Child,
    /// Dropped after the child is reaped (`process::spawn_helper`).
    _helper: crate::process::Helper,
    stdout: Receiver<Vec<u8>>,
    stderr: Receiver<Vec<u8>>,
}

impl Running {
    fn spawn(engine: Engine, args: &[String]) -> Result<Running, String> {
        let name = engine.as_str();
        let (mut child, helper) = crate::process::spawn_helper(
            Command::new(name)
                .args(args)
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .process_group(0),
        )
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => format!("{name} is not installed (not in PATH)"),
            _ => format!("cannot run {name}: {e}"),
        })?;
        let stdout = reader(child.stdout.take());
        let stderr = reader(child.stderr.take());
        Ok(Running {
            engine,
            child,
            _helper: helper,
            stdout,
            stderr,
        })
    }

    /// Wait until the engine exits and its output is read, or `timeout`
    /// passes: then its whole group is KILLed and reaped.
    fn wait(mut self, timeout: Duration) -> Result<String, Failure> {
        let deadline = Instant::now() + timeout;
        let name = self.engine.as_str();
        let status = loop {
            match self.child.try_wait() {
                Ok(Some(status)) => break status,
                Ok(None) if Instant::now() >= deadline => {
                    // Unreaped, the leader keeps its group id from being
                    // reused: the KILL reaches the engine's group only.
                    // SAFETY: killpg(2) on the group of our unreaped child.
                    unsafe {
                        libc::killpg(self.child.id() as i32, libc::SIGKILL);
                    }
                    let _ = self.child.wait();
                    return Err(Failure::TimedOut);
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(10)),
                Err(e) => return Err(Failure::Other(format!("cannot wait for {name}: {e}"))),
            }
        };
        // Output still open after the engine exited (something it left
        // behind holds it) counts against the same deadline, with a moment
        // for the readers to hand over what they read.
        let left = || {
            deadline
                .saturating_duration_since(Instant::now())
                .max(READ_GRACE)
        };
        let out = self
            .stdout
            .recv_timeout(left())
            .map_err(|_| Failure::TimedOut)?;
        let err = self.stderr.recv_timeout(left()).unwrap_or_default();
        if status.success() {
            return Ok(String::from_utf8_lossy(&out).into_owned());
        }
        let err = String::from_utf8_lossy(&err);
        let why = err
            .lines()
            .map(str::trim)
            .find(|l| !l.is_empty())
            .map(first_line)
            .unwrap_or_else(|| status.to_string());
        Err(Failure::Other(format!("{name} cannot answer: {why}")))
    }
}

/// A thread that reads `pipe` to its end (keeping the first `OUTPUT_CAP`
/// bytes) and sends what it read.
fn reader(pipe: Option<impl Read + Send + 'static>) -> Receiver<Vec<u8>> {
    let (tx, rx) = mpsc::channel();
    match pipe {
        Some(mut pipe) => {
            // Without a thread the receiver is disconnected, which reads as
            // an engine that did not answer.
            let _ = std::thread::Builder::new()
                .name("engine output".into())
                .stack_size(READER_STACK)
                .spawn(move || {
                    let mut kept = vec![];
                    let _ = (&mut pipe).take(OUTPUT_CAP).read_to_end(&mut kept);
                    let _ = std::io::copy(&mut pipe, &mut std::io::sink());
                    let _ = tx.send(kept);
                });
        }
        None => {
            let _ = tx.send(vec![]);
        }
    }
    rx
}

/// One line of an engine's text, short enough for a verdict (escaped where
/// it is shown, like all text jobrun did not write).
fn first_line(text: &str) -> String {
    let line = text.lines().next().unwrap_or_default().trim();
    if line.chars().count() > 120 {
        let mut cut: String = line.chars().take(119).collect();
        cut.push('~');
        cut
    } else {
        line.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_pass_id_jobrun_makes_becomes_a_label() {
        assert_eq!(
            label("0123456789ab").as_deref(),
            Some("jobrun.pass=0123456789ab")
        );
        for bad in [
            "",
            "0123456789AB",
            "0123456789abc",
            "0123456789a",
            "*",
            "0123456789a,",
            "0123456789ab\n",
            "--all",
        ] {
            assert_eq!(label(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn container_ids_are_hex_as_engines_print_them() {
        let full = "e2f83bcd02d9aebe7d4e146c566d77e96d5ce201528ae0bd705b68116b2ed6a5";
        assert_eq!(ContainerId::parse(full).unwrap().short(), "e2f83bcd02d9");
        assert!(ContainerId::parse("e2f83bcd02d9").is_some());
        for bad in [
            "",
            "e2f83bcd02d",
            "E2F83BCD02D9",
            "e2f83bcd02d9 x",
            "-a",
            "warning: x",
        ] {
            assert_eq!(ContainerId::parse(bad), None, "{bad:?}");
        }
    }
}
