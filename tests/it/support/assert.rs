//! One jobrun command and what must come of it, as just's `Test` has it:
//! the arguments, then the expectations (exit code, what stdout and stderr
//! hold), then `run`, which runs the command once, checks every
//! expectation, and on a miss panics with the whole picture (the command,
//! every miss, both streams) instead of one field of it. It returns what
//! the command did, for the checks a test makes of its own.
//!
//! Unless a test says otherwise, the command must exit 0 and say nothing on
//! stderr: a line nobody expected (a warning, a retry, a panic) fails the
//! test that caused it. A test that expects more says what: `.code(n)`,
//! `.stderr_contains(..)`, `.refused()`. `.any_code(why)` and
//! `.any_stderr(why)` waive a check, and name why in the test.

use std::ffi::{OsStr, OsString};
use std::fmt::Write as _;
use std::process::{Output, Stdio};

use serde::de::DeserializeOwned;

use super::env::TestEnv;
use super::text;

/// A jobrun command against a TestEnv's store (`TestEnv::cmd`), with what
/// it must do.
#[must_use = "nothing runs until .run()"]
pub struct Jobrun<'a> {
    env: &'a TestEnv,
    args: Vec<OsString>,
    vars: Vec<(OsString, OsString)>,
    /// The exit code it must have; `None` once waived.
    code: Option<i32>,
    /// Why the exit code was waived, for a failure message.
    any_code: Option<&'static str>,
    stderr: Stderr,
    checks: Vec<Check>,
}

/// What a test said about stderr as a whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stderr {
    /// Nothing: it must be empty.
    Silent,
    /// What it holds (a check that needs a line there).
    Described,
    /// Anything: the check is waived, for this reason.
    Any(&'static str),
}

#[derive(Debug, Clone, Copy)]
enum Stream {
    Stdout,
    Stderr,
}

/// One expectation on one stream.
#[derive(Debug)]
enum Check {
    StartsWith(Stream, String),
    Contains(Stream, String),
    Lacks(Stream, String),
    Empty(Stream),
    Lines(Stream, usize),
}

/// What a command did.
#[derive(Debug)]
pub struct Ran {
    /// `None` when a signal ended it.
    pub code: Option<i32>,
    /// The streams as text (not UTF-8: replaced, as `text` does).
    pub stdout: String,
    pub stderr: String,
    /// The streams as they came.
    pub output: Output,
}

impl Ran {
    /// Stdout as a JSON document (`status --json`: a `StatusReport`).
    pub fn json<T: DeserializeOwned>(&self) -> T {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout is not the document asked for: {e}\n{self:?}"))
    }

    fn stream(&self, s: Stream) -> &str {
        match s {
            Stream::Stdout => &self.stdout,
            Stream::Stderr => &self.stderr,
        }
    }
}

impl<'a> Jobrun<'a> {
    pub fn new(env: &'a TestEnv) -> Jobrun<'a> {
        Jobrun {
            env,
            args: vec![],
            vars: vec![],
            code: Some(0),
            any_code: None,
            stderr: Stderr::Silent,
            checks: vec![],
        }
    }

    pub fn arg(mut self, arg: impl AsRef<OsStr>) -> Self {
        self.args.push(arg.as_ref().to_owned());
        self
    }

    pub fn args<I>(mut self, args: I) -> Self
    where
        I: IntoIterator,
        I::Item: AsRef<OsStr>,
    {
        self.args
            .extend(args.into_iter().map(|a| a.as_ref().to_owned()));
        self
    }

    /// Set an environment variable (`JOBRUN_DB` too: it replaces the
    /// env's store).
    pub fn env(mut self, key: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> Self {
        let (k, v) = (key.as_ref().to_owned(), value.as_ref().to_owned());
        self.vars.push((k, v));
        self
    }

    pub fn envs<K, V>(self, vars: impl IntoIterator<Item = (K, V)>) -> Self
    where
        K: AsRef<OsStr>,
        V: AsRef<OsStr>,
    {
        vars.into_iter().fold(self, |c, (k, v)| c.env(k, v))
    }

    /// It must exit with `code` (not be ended by a signal); 0 unless said.
    pub fn code(mut self, code: i32) -> Self {
        self.code = Some(code);
        self
    }

    /// Any exit, or none (a signal): for a command whose ending is not
    /// what the test is about. `why` says so where the test reads.
    pub fn any_code(mut self, why: &'static str) -> Self {
        assert!(
            !why.is_empty(),
            "any_code: say why the exit does not matter"
        );
        self.code = None;
        self.any_code = Some(why);
        self
    }

    /// Stderr may hold anything: for lines that come or not by timing the
    /// test does not control. `why` says so where the test reads.
    pub fn any_stderr(mut self, why: &'static str) -> Self {
        assert!(!why.is_empty(), "any_stderr: say why stderr is not checked");
        self.stderr = Stderr::Any(why);
        self
    }

    /// jobrun's own refusal: exit 125 and one line on stderr, `jobrun: ...`.
    pub fn refused(self) -> Self {
        self.code(125)
            .stderr_lines(1)
            .check(Check::StartsWith(Stream::Stderr, "jobrun: ".into()))
    }

    pub fn stdout_contains(self, text: impl Into<String>) -> Self {
        self.check(Check::Contains(Stream::Stdout, text.into()))
    }

    pub fn stderr_contains(self, text: impl Into<String>) -> Self {
        self.check(Check::Contains(Stream::Stderr, text.into()))
    }

    pub fn stdout_lacks(self, text: impl Into<String>) -> Self {
        self.check(Check::Lacks(Stream::Stdout, text.into()))
    }

    pub fn stderr_contains_all<T: AsRef<str>>(self, texts: &[T]) -> Self {
        texts
            .iter()
            .fold(self, |c, t| c.stderr_contains(t.as_ref()))
    }

    pub fn stderr_lacks(self, text: impl Into<String>) -> Self {
        self.check(Check::Lacks(Stream::Stderr, text.into()))
    }

    pub fn stdout_empty(self) -> Self {
        self.check(Check::Empty(Stream::Stdout))
    }

    /// Nothing on stderr: the default, for a test whose point it is.
    pub fn stderr_empty(self) -> Self {
        self.check(Check::Empty(Stream::Stderr))
    }

    /// Stderr is exactly `n` lines (jobrun's refusals are one).
    pub fn stderr_lines(self, n: usize) -> Self {
        self.check(Check::Lines(Stream::Stderr, n))
    }

    fn check(mut self, c: Check) -> Self {
        // A check that needs a line on stderr says what stderr holds.
        let needs_a_line = match &c {
            Check::StartsWith(Stream::Stderr, _) | Check::Contains(Stream::Stderr, _) => true,
            Check::Lines(Stream::Stderr, n) => *n > 0,
            _ => false,
        };
        if needs_a_line && self.stderr == Stderr::Silent {
            self.stderr = Stderr::Described;
        }
        self.checks.push(c);
        self
    }

    /// Run it to its end with stdin closed, and check every expectation.
    pub fn run(self) -> Ran {
        let mut cmd = self.env.cmd(&[]);
        cmd.args(&self.args)
            .envs(self.vars.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null());
        let out = cmd.output().expect("run jobrun");
        let ran = Ran {
            code: out.status.code(),
            stdout: text(&out.stdout),
            stderr: text(&out.stderr),
            output: out,
        };
        let mut misses = String::new();
        if self.code.is_some() && ran.code != self.code {
            let _ = writeln!(
                misses,
                "  exit code {:?}, expected {:?}",
                ran.code, self.code
            );
        }
        if self.stderr == Stderr::Silent && !ran.stderr.is_empty() {
            let _ = writeln!(
                misses,
                "  stderr is not empty (say what it holds, e.g. .stderr_contains(..))"
            );
        }
        for c in &self.checks {
            let met = match c {
                Check::StartsWith(s, t) => ran.stream(*s).starts_with(t.as_str()),
                Check::Contains(s, t) => ran.stream(*s).contains(t.as_str()),
                Check::Lacks(s, t) => !ran.stream(*s).contains(t.as_str()),
                Check::Empty(s) => ran.stream(*s).is_empty(),
                Check::Lines(s, n) => ran.stream(*s).lines().count() == *n,
            };
            if !met {
                let _ = writeln!(misses, "  not met: {c:?}");
            }
        }
        if !misses.is_empty() {
            if let Some(why) = self.any_code {
                let _ = writeln!(misses, "  (any exit code: {why})");
            }
            if let Stderr::Any(why) = self.stderr {
                let _ = writeln!(misses, "  (any stderr: {why})");
            }
            panic!(
                "{}:\n{misses}--- stdout\n{}--- stderr\n{}",
                self.shown(),
                ran.stdout,
                ran.stderr
            );
        }
        ran
    }

    /// Run it (as `run`) and read stdout as a JSON document.
    pub fn json<T: DeserializeOwned>(self) -> T {
        self.run().json()
    }

    /// The command line as a message shows it: `VAR=value jobrun ARGS`.
    fn shown(&self) -> String {
        let words = self
            .vars
            .iter()
            .map(|(k, v)| format!("{}={}", k.to_string_lossy(), v.to_string_lossy()))
            .chain(std::iter::once("jobrun".to_string()))
            .chain(
                self.args
                    .iter()
                    .map(|a| format!("{:?}", a.to_string_lossy())),
            );
        words.collect::<Vec<_>>().join(" ")
    }
}

/// Run jobrun to its end: it must exit `code` and say nothing on stderr.
pub fn exits(env: &TestEnv, code: i32, args: &[&str]) -> Ran {
    Jobrun::new(env).args(args).code(code).run()
}

/// A missed expectation fails the test, naming what was missed.
#[test]
#[should_panic(expected = "exit code Some(0), expected Some(3)")]
fn a_missed_expectation_fails_the_test() {
    let env = TestEnv::sqlite();
    Jobrun::new(&env)
        .args(["--version"])
        .code(3)
        .stdout_contains("jobrun")
        .run();
}

/// Unless told otherwise, a command must exit 0 ...
#[test]
#[should_panic(expected = "exit code Some(1), expected Some(0)")]
fn a_command_must_exit_0_unless_told() {
    let env = TestEnv::sqlite();
    Jobrun::new(&env).args(["run", "j", "--", "false"]).run();
}

/// ... and say nothing on stderr (here its command says something there).
#[test]
#[should_panic(expected = "stderr is not empty")]
fn a_command_must_say_nothing_on_stderr_unless_told() {
    let env = TestEnv::sqlite();
    Jobrun::new(&env)
        .args(["run", "j", "--", "sh", "-c", "echo surprise >&2"])
        .run();
}

/// A test that says what to expect gets it; a waiver waives.
#[test]
fn what_a_test_says_replaces_the_defaults() {
    let env = TestEnv::sqlite();
    let noisy = ["run", "j", "--", "sh", "-c", "echo surprise >&2; exit 3"];
    Jobrun::new(&env)
        .args(noisy)
        .code(3)
        .stderr_contains("surprise")
        .run();
    Jobrun::new(&env).args(noisy).code(3).stderr_lines(1).run();
    Jobrun::new(&env)
        .args(noisy)
        .any_code("the self-test of the waiver")
        .any_stderr("the self-test of the waiver")
        .run();
    // Saying only what stderr lacks still expects it empty.
    let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        Jobrun::new(&env)
            .args(noisy)
            .code(3)
            .stderr_lacks("jobrun:")
            .run()
    }));
    assert!(ran.is_err(), "a surprise on stderr went unnoticed");
}
