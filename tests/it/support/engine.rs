//! A real container engine for a test: podman with a storage, a runtime
//! directory and a configuration of the test's own (`CONTAINERS_CONF`,
//! `CONTAINERS_STORAGE_CONF` in its temp dir), and no image: containers
//! run a busybox-static tree the test builds (`--rootfs`). Every container
//! a test starts lives in that storage, and all of them are removed when
//! the `Podman` is dropped, even when the test fails; the drop then waits
//! for the engine's own processes of that storage to end, so that none
//! writes into the test's directory once it is removed.
//!
//! This kernel's hybrid cgroups need runc (crun refuses them), cgroupfs
//! and small ulimits; the configuration carries those, so the command a
//! pass runs is the plain `podman run` an operator would write.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use super::env::{wait_until, TestEnv};

/// The static busybox Debian's busybox-static installs.
const BUSYBOX: &str = "/bin/busybox";

/// The engine of one test.
pub struct Podman {
    root: PathBuf,
    /// Bound into every container as /w: the test's directory.
    work: PathBuf,
}

/// Why no engine can run here, found once per test binary.
fn unavailable() -> &'static Option<String> {
    static WHY: OnceLock<Option<String>> = OnceLock::new();
    WHY.get_or_init(|| {
        let dir = tempfile::tempdir().expect("tempdir");
        let probe = Podman::at(dir.path().join("podman"), dir.path().to_path_buf());
        let why = match probe.as_ref() {
            Err(why) => Some(why.clone()),
            Ok(p) => {
                let out = p
                    .podman(["run", "--rm", "--rootfs"])
                    .arg(p.rootfs())
                    .arg("true")
                    .output();
                match out {
                    Ok(o) if o.status.success() => None,
                    Ok(o) => Some(format!(
                        "podman cannot run a container here: {}",
                        String::from_utf8_lossy(&o.stderr).trim()
                    )),
                    Err(e) => Some(format!("podman cannot be run: {e}")),
                }
            }
        };
        drop(probe);
        why
    })
}

impl Podman {
    /// The engine of `env`'s test, or `None` (with the reason printed)
    /// where no engine can run at all.
    pub fn new(env: &TestEnv) -> Option<Podman> {
        if let Some(why) = unavailable() {
            eprintln!("skipped: no container engine can run here: {why}");
            return None;
        }
        Some(Podman::at(env.path("podman"), env.dir.path().to_path_buf()).expect("podman"))
    }

    fn at(root: PathBuf, work: PathBuf) -> Result<Podman, String> {
        let found = std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
            .any(|d| d.join("podman").is_file());
        if !found {
            return Err("podman is not installed (scripts/test installs Debian's podman)".into());
        }
        if !Path::new(BUSYBOX).is_file() {
            return Err(format!(
                "{BUSYBOX} is missing (scripts/test installs Debian's busybox-static)"
            ));
        }
        let p = Podman { root, work };
        let bin = p.rootfs().join("bin");
        fs::create_dir_all(&bin).unwrap();
        fs::copy(BUSYBOX, bin.join("busybox")).unwrap();
        for tool in ["sh", "sleep", "touch", "true"] {
            std::os::unix::fs::symlink("busybox", bin.join(tool)).unwrap();
        }
        let r = p.root.display();
        fs::write(
            p.root.join("containers.conf"),
            format!(
                "[containers]\n\
                 default_ulimits = [\"nofile=1024:1024\", \"nproc=1024:1024\"]\n\
                 netns = \"none\"\n\
                 [engine]\n\
                 runtime = \"runc\"\n\
                 cgroup_manager = \"cgroupfs\"\n\
                 events_logger = \"file\"\n\
                 tmp_dir = \"{r}/tmp\"\n"
            ),
        )
        .unwrap();
        fs::write(
            p.root.join("storage.conf"),
            format!(
                "[storage]\ndriver = \"vfs\"\ngraphroot = \"{r}/graph\"\nrunroot = \"{r}/run\"\n"
            ),
        )
        .unwrap();
        Ok(p)
    }

    fn rootfs(&self) -> PathBuf {
        self.root.join("rootfs")
    }

    /// The variables that make `podman` (jobrun's, a pass's, the test's)
    /// use this engine.
    pub fn vars(&self) -> Vec<(&'static str, String)> {
        vec![
            (
                "CONTAINERS_CONF",
                self.root.join("containers.conf").display().to_string(),
            ),
            (
                "CONTAINERS_STORAGE_CONF",
                self.root.join("storage.conf").display().to_string(),
            ),
        ]
    }

    /// `vars` as `TestEnv::start_with` takes them.
    pub fn var_refs<'a>(vars: &'a [(&'static str, String)]) -> Vec<(&'static str, &'a str)> {
        vars.iter().map(|(k, v)| (*k, v.as_str())).collect()
    }

    /// A `podman` command of this engine.
    pub fn podman<const N: usize>(&self, args: [&str; N]) -> Command {
        let mut c = Command::new("podman");
        c.envs(self.vars()).args(args).stdin(Stdio::null());
        c
    }

    fn run(&self, c: &mut Command) -> Output {
        let out = c.output().expect("run podman");
        assert!(
            out.status.success(),
            "{c:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }

    /// What a container of the test runs: it touches `/w/<name>.ready`, and
    /// ends on TERM or once the test creates `<name>.stop`.
    fn payload(name: &str) -> String {
        format!(
            "trap \"exit 0\" TERM; touch /w/{name}.ready; \
             while [ ! -e /w/{name}.stop ]; do sleep 0.1; done"
        )
    }

    /// A pass's command: `podman run` labelled with `$JOBRUN_LABEL`, as an
    /// operator writes it (`detach`: `run -d`, which returns at once).
    pub fn pass_command(&self, name: &str, detach: bool) -> Vec<String> {
        let d = if detach { "-d " } else { "" };
        vec![
            "sh".into(),
            "-c".into(),
            format!(
                "exec podman run {d}--rm --label \"$JOBRUN_LABEL\" -v {}:/w --rootfs {} sh -c '{}'",
                self.work.display(),
                self.rootfs().display(),
                Podman::payload(name)
            ),
        ]
    }

    /// Start a container labelled `label` (`key=value`) directly, detached;
    /// its id once it runs.
    pub fn start_labelled(&self, name: &str, label: &str) -> String {
        let out = self.run(
            self.podman(["run", "-d", "--rm", "--label", label, "-v"])
                .arg(format!("{}:/w", self.work.display()))
                .arg("--rootfs")
                .arg(self.rootfs())
                .args(["sh", "-c", &Podman::payload(name)]),
        );
        assert!(self.ready(name), "container {name} never ran");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// Wait for the container `name` to run its payload.
    pub fn ready(&self, name: &str) -> bool {
        let ready = self.work.join(format!("{name}.ready"));
        wait_until(Duration::from_secs(30), || ready.exists())
    }

    /// Let the container `name` end by itself.
    pub fn finish(&self, name: &str) {
        fs::write(self.work.join(format!("{name}.stop")), "").unwrap();
    }

    /// The ids of the running containers labelled `label` (`key=value`).
    pub fn running(&self, label: &str) -> Vec<String> {
        let out = self.run(
            self.podman(["ps", "--no-trunc", "--format", "{{.ID}}", "--filter"])
                .arg(format!("label={label}")),
        );
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| l.trim().to_string())
            .filter(|l| !l.is_empty())
            .collect()
    }

    /// The ids of every running container of this engine.
    pub fn all_running(&self) -> Vec<String> {
        let out = self.run(&mut self.podman(["ps", "--no-trunc", "--format", "{{.ID}}"]));
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| l.trim().to_string())
            .filter(|l| !l.is_empty())
            .collect()
    }

    /// Whether a process still names this engine's root in its command
    /// line (conmon, `podman container cleanup`).
    fn lingering(&self) -> bool {
        use std::os::unix::ffi::OsStrExt;
        let root = self.root.as_os_str().as_bytes();
        let Ok(procs) = fs::read_dir("/proc") else {
            return false;
        };
        procs.flatten().any(|p| {
            fs::read(p.path().join("cmdline"))
                .is_ok_and(|c| c.windows(root.len()).any(|w| w == root))
        })
    }

    /// Wait until no container labelled `label` runs.
    pub fn gone(&self, label: &str) -> bool {
        wait_until(Duration::from_secs(30), || self.running(label).is_empty())
    }
}

impl Drop for Podman {
    fn drop(&mut self) {
        let _ = self
            .podman(["rm", "--all", "--force", "--time", "0"])
            .output();
        // A container's monitor (conmon) and the cleanup it runs once the
        // container ends write under the root on their own time, after
        // `rm` returns: the test's directory, removed meanwhile, would be
        // made again and left behind. Wait for them, signalling nothing.
        if !wait_until(Duration::from_secs(30), || !self.lingering()) {
            eprintln!(
                "podman processes still use {} after 30 s",
                self.root.display()
            );
        }
    }
}
