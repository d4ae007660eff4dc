//! `jobrun timeline`: a store made of passes at fixed times in the past
//! (through the `JOBRUN_CLOCK_SKEW` seam), drawn at a fixed width, without
//! a terminal, on one (a pty from `script`), and with `NO_COLOR`.

use std::process::{Command, Stdio};

use crate::support::{Jobrun, TestEnv, BIN};

/// A pass of `job` that ran (or skipped) `ago` in the past.
fn pass_at(env: &TestEnv, ago: &str, args: &[&str], code: i32) {
    Jobrun::new(env)
        .env("JOBRUN_CLOCK_SKEW", format!("-{ago}"))
        .args(["run"])
        .args(args)
        .code(code)
        .any_stderr("a paused pass says it skips")
        .run();
}

/// 60 columns: a name column of 3, then 54 cells of 26m40s over 24h. The
/// passes sit mid-cell, so the seconds the test takes cannot move them.
fn fixed_store() -> TestEnv {
    let env = TestEnv::sqlite();
    pass_at(&env, "11h 48m", &["j", "--", "true"], 0); // cell 27
    pass_at(&env, "5h 40m", &["j", "--", "false"], 1); // cell 41
    Jobrun::new(&env)
        .args(["pause", "j"])
        .any_stderr("says paused")
        .run();
    pass_at(&env, "2h", &["-E", "3", "j", "--", "true"], 3); // cell 49
    Jobrun::new(&env)
        .args(["resume", "j"])
        .any_stderr("says resumed")
        .run();
    env
}

const ROW: &str = "j   |···························█·············X·······|····|";

#[test]
fn without_a_terminal_the_picture_is_plain_at_the_width_asked() {
    let env = fixed_store();
    let out = Jobrun::new(&env)
        .env("COLUMNS", "60")
        .args(["timeline", "--since", "24h"])
        .run()
        .stdout;
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "{out}");
    assert_eq!(lines[1], ROW, "{out}");
    assert_eq!(lines[1].chars().count(), 60);
    assert!(!out.contains('\x1b'), "{out:?}");
    assert!(lines[2].contains("X ended badly"), "{out}");
    // A name the store does not know is refused, as by history.
    Jobrun::new(&env)
        .args(["timeline", "nosuch"])
        .code(1)
        .stderr_contains("nosuch: store")
        .run();
}

/// `jobrun timeline` on a pty (`script`): its output, `\r\n` made `\n`.
/// `None` when `script` is not installed.
fn on_a_terminal(env: &TestEnv, no_color: Option<&str>) -> Option<String> {
    let mut c = Command::new("script");
    c.args(["-qec", &format!("{BIN} timeline"), "/dev/null"])
        .env("JOBRUN_DB", &env.db)
        .env("COLUMNS", "60")
        .env_remove("NO_COLOR")
        .stdin(Stdio::null());
    if let Some(v) = no_color {
        c.env("NO_COLOR", v);
    }
    let out = match c.output() {
        Ok(o) => o,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            eprintln!("skipped: script(1) is not installed");
            return None;
        }
        Err(e) => panic!("script: {e}"),
    };
    assert!(out.status.success(), "{out:?}");
    Some(String::from_utf8_lossy(&out.stdout).replace("\r\n", "\n"))
}

#[test]
fn on_a_terminal_in_colour_unless_no_color() {
    let env = fixed_store();
    let Some(coloured) = on_a_terminal(&env, None) else {
        return;
    };
    let row = coloured.lines().nth(1).unwrap();
    assert!(row.contains("\x1b[32m█\x1b[0m"), "{row:?}");
    assert!(row.contains("\x1b[1;31mX\x1b[0m"), "{row:?}");
    // Without the colours, the same picture.
    let stripped: String = {
        let mut s = String::new();
        let mut esc = false;
        for c in row.chars() {
            match (esc, c) {
                (false, '\x1b') => esc = true,
                (true, 'm') => esc = false,
                (true, _) => {}
                (false, c) => s.push(c),
            }
        }
        s
    };
    assert_eq!(stripped, ROW);
    let plain = on_a_terminal(&env, Some("1")).unwrap();
    assert!(!plain.contains('\x1b'), "{plain:?}");
    assert_eq!(plain.lines().nth(1), Some(ROW));
}

#[test]
fn a_pass_holding_a_slot_now_runs_to_the_right_edge() {
    let env = TestEnv::sqlite();
    let holder = crate::support::start_pass(&env, "held", "holder", "30s", &[]);
    let out = Jobrun::new(&env)
        .env("COLUMNS", "40")
        .args(["timeline", "held"])
        .run()
        .stdout;
    let row = out.lines().nth(1).unwrap();
    assert!(row.starts_with("held |") && row.ends_with("=|"), "{out}");
    assert!(out.contains("= running"), "{out}");
    std::fs::write(env.path("holder.stop"), "").unwrap();
    assert!(env
        .wait_exit(holder.wrapper, std::time::Duration::from_secs(10))
        .is_some());
}

#[test]
fn a_pass_queued_now_is_shaded_to_the_right_edge() {
    let env = TestEnv::sqlite();
    Jobrun::new(&env)
        .args(["pause", "--new", "q"])
        .any_stderr("says paused")
        .run();
    let waiter = env.start("waiter", &["run", "--wait", "1m", "q", "--", "true"]);
    assert!(
        crate::support::wait_until(std::time::Duration::from_secs(10), || env
            .find_job("q")
            .is_some_and(|j| j.queue.length > 0)),
        "the waiter never queued: {}",
        env.stderr_of("waiter")
    );
    let out = Jobrun::new(&env)
        .env("COLUMNS", "40")
        .args(["timeline", "q"])
        .run()
        .stdout;
    let row = out.lines().nth(1).unwrap();
    assert!(row.starts_with("q   |") && row.ends_with("░|"), "{out}");
    Jobrun::new(&env)
        .args(["resume", "q"])
        .any_stderr("says resumed")
        .run();
    assert_eq!(
        env.wait_exit(waiter, std::time::Duration::from_secs(30)),
        Some(0)
    );
}
