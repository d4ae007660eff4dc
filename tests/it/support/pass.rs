//! A pass the operator tests can act on: its child loops until told to
//! stop, leaves its pid in a file and a marker when TERM reaches it, and
//! is on record in the store before the test goes on.

use std::time::Duration;

use super::env::{alive, kill, script, wait_until, TestEnv};

/// The identity of a second machine, through the evidence test seam.
pub const WEB2: [(&str, &str); 2] = [("JOBRUN_HOST", "web2"), ("JOBRUN_BOOT_ID", "web2-boot")];

const START: Duration = Duration::from_secs(10);

/// A pass in flight: its wrapper (`jobrun run`) and its child.
#[derive(Debug, Clone, Copy)]
pub struct Pass {
    pub wrapper: u32,
    pub child: i32,
}

/// Start `jobrun run --lease LEASE JOB -- <child>` in the background, where
/// the child writes its pid to `<name>.pid`, touches `<name>.termed` when
/// TERM reaches it, and otherwise runs until `<name>.stop` appears. Returns
/// once the store has recorded the child.
pub fn start_pass(
    env: &TestEnv,
    job: &str,
    name: &str,
    lease: &str,
    identity: &[(&str, &str)],
) -> Pass {
    let child = script(
        env,
        &format!("{name}.sh"),
        &format!(
            "trap 'touch {name}.termed; exit 0' TERM\n\
             echo $$ > {name}.pid.tmp && mv {name}.pid.tmp {name}.pid\n\
             while [ ! -e {name}.stop ]; do sleep 0.05; done"
        ),
    );
    let wrapper = env.start_with(
        name,
        &["run", "--lease", lease, job, "--", &child],
        identity,
    );
    let pid_file = format!("{name}.pid");
    assert!(
        env.wait_for_file(&pid_file, START),
        "{name}: the child never started: {}",
        env.stderr_of(name)
    );
    let child = env.pid_in(&pid_file);
    assert!(
        wait_until(START, || env
            .find_slot(job)
            .is_some_and(|s| s.holder.child_pid == Some(child))),
        "{name}: the store never recorded child pid {child}: {:?}",
        env.find_slot(job)
    );
    Pass { wrapper, child }
}

/// SIGKILL a pass's wrapper and its whole process group (the child and
/// anything it started: no unwinding, no release) and wait until both are
/// gone.
pub fn kill_pass(env: &TestEnv, p: Pass) {
    kill(p.wrapper as i32, libc::SIGKILL);
    kill(-p.child, libc::SIGKILL);
    assert!(
        env.wait_exit(p.wrapper, START).is_some(),
        "wrapper survived SIGKILL"
    );
    assert!(
        wait_until(START, || !alive(p.child)),
        "child survived SIGKILL"
    );
}
