//! The operator's commands on top of the evidence: clear-locks, stop-due,
//! pause and resume, and the example upgrade script that strings them
//! together.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use jobrun::model::{Outcome, State};

use crate::support::{
    alive, both_stores, dump_store, kill, kill_pass, script, start_pass, text, wait_until, TestEnv,
    BIN, WEB2,
};

/// A line of clear-locks output without what may move between two runs:
/// how long an unknown holder's lease still runs, and whether a dead
/// child's zombie has been reaped meanwhile.
fn steady(line: &str) -> String {
    let line = line.replace(" has exited", " is gone");
    match line.split_once("lease still valid for ") {
        Some((head, tail)) => {
            let rest = tail.split_once(" (holder unknown)").map_or("", |(_, r)| r);
            format!("{head}lease still valid for ... (holder unknown){rest}")
        }
        None => line,
    }
}

fn clear_locks(env: &TestEnv, args: &[&str]) -> (String, String) {
    let mut all = vec!["clear-locks"];
    all.extend_from_slice(args);
    let out = env.run(&all);
    let (said, err) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "clear-locks {args:?}: {said}{err}");
    (said, err)
}

/// clear-locks clears a dead holder, keeps a live one (and an unknown one
/// within its lease) unless forced, and with --dry-run prints exactly that
/// and changes nothing at all.
fn clear_locks_clears_dead_keeps_alive_and_dry_run_changes_nothing(env: &TestEnv) {
    // Leases of an hour: nothing renews while the store is compared.
    let live = start_pass(env, "alive", "alive", "1h", &[]);
    let dead = start_pass(env, "dead", "dead", "1h", &[]);
    start_pass(env, "remote", "remote", "1h", &WEB2);
    kill_pass(env, dead);

    let before = dump_store(env);
    let (dry, _) = clear_locks(env, &["--all", "--dry-run"]);
    assert_eq!(before, dump_store(env), "--dry-run changed the store");
    assert_eq!(
        (env.held("alive"), env.held("dead"), env.held("remote")),
        (1, 1, 1)
    );
    let line = |out: &str, job: &str| {
        out.lines()
            .find(|l| l.starts_with(&format!("{job} slot 0 ")))
            .unwrap_or_else(|| panic!("no line for {job} in:\n{out}"))
            .to_string()
    };
    assert!(
        line(&dry, "dead").contains(&format!("(dead: pid {} is gone", dead.wrapper))
            && line(&dry, "dead").ends_with(": would clear: holder is dead"),
        "{dry}"
    );
    assert!(
        line(&dry, "alive").contains(&format!("(alive: pid {} is running", live.wrapper))
            && line(&dry, "alive").ends_with(": kept: holder is alive (--force clears it)"),
        "{dry}"
    );
    assert!(
        line(&dry, "remote").contains("(unknown: other host web2): kept: lease still valid"),
        "{dry}"
    );
    assert_eq!(
        dry.lines().last(),
        Some("would clear 1, keep 2 (1 alive, 1 unknown within lease)"),
        "{dry}"
    );

    // The real run does what the dry run printed, word for word.
    let (real, _) = clear_locks(env, &["--all"]);
    let predicted: Vec<String> = dry
        .replace(": would clear: ", ": cleared: ")
        .replace("would clear ", "cleared ")
        .replace(", keep ", ", kept ")
        .lines()
        .map(steady)
        .collect();
    let done: Vec<String> = real.lines().map(steady).collect();
    assert_eq!(predicted, done);
    assert_eq!(
        (env.held("alive"), env.held("dead"), env.held("remote")),
        (1, 0, 1)
    );
    let (again, _) = clear_locks(env, &["--all"]);
    assert_eq!(
        again.lines().last(),
        Some("cleared 0, kept 2 (1 alive, 1 unknown within lease)"),
        "{again}"
    );

    // --force: previewed without effect, then the operator's override.
    let before = dump_store(env);
    let (dry, _) = clear_locks(env, &["alive", "--force", "--dry-run"]);
    assert_eq!(
        before,
        dump_store(env),
        "--dry-run --force changed the store"
    );
    assert_eq!(dry.lines().last(), Some("would clear 1, keep 0"), "{dry}");
    let (forced, err) = clear_locks(env, &["alive", "--force"]);
    assert_eq!(forced.lines().last(), Some("cleared 1, kept 0"), "{forced}");
    assert!(
        line(&forced, "alive").ends_with("cleared: forced over a live holder (operator override)"),
        "{forced}"
    );
    assert!(
        err.contains("cleared by --force over a live holder"),
        "the override is not logged: {err}"
    );
    assert_eq!((env.held("alive"), env.held("remote")), (0, 1));
    assert!(alive(live.child), "clear-locks signals nothing");
}

/// stop-due TERMs every pass it can verify: each child's TERM handler runs,
/// each wrapper releases and records the pass as stopped, and --wait
/// returns once the locks are released. A holder recorded under another
/// host identity is listed and never signalled; --dry-run signals nothing.
fn stop_due_stops_verified_passes_and_waits_for_releases(env: &TestEnv) {
    let a = start_pass(env, "a", "a", "60s", &[]);
    let b = start_pass(env, "b", "b", "60s", &[]);
    let r = start_pass(env, "remote", "remote", "60s", &WEB2);

    let out = env.run(&["stop-due", "--all", "--dry-run"]);
    let dry = text(&out.stdout);
    assert!(out.status.success(), "{dry}{}", text(&out.stderr));
    let token = |job: &str| env.slot(job).token;
    for (job, p) in [("a", a), ("b", b)] {
        assert!(
            dry.contains(&format!("{job} slot 0 token {} held by ", token(job)))
                && dry.contains(&format!(": would signal wrapper pid {} (TERM)", p.wrapper)),
            "{dry}"
        );
    }
    assert!(
        dry.contains("would signal 2 in-flight job process(es)"),
        "{dry}"
    );
    // A TERM would have ended a wrapper well within this bound.
    assert_eq!(
        env.wait_exit(a.wrapper, Duration::from_secs(1)),
        None,
        "--dry-run signalled"
    );
    for name in ["a", "b", "remote"] {
        assert!(
            !env.path(&format!("{name}.termed")).exists(),
            "--dry-run signalled {name}"
        );
    }
    assert_eq!((env.held("a"), env.held("b")), (1, 1));

    let remote_token = token("remote");
    let out = env.run(&["stop-due", "--all", "--wait", "20s"]);
    let said = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{said}{}", text(&out.stderr));
    assert!(
        said.contains("signalled 2 in-flight job process(es)"),
        "{said}"
    );
    assert!(
        said.contains(&format!(
            "remote slot 0 token {remote_token} held by web2:{}: not signalled: recorded on another \
             host or boot (web2)",
            r.wrapper
        )),
        "{said}"
    );
    assert!(
        said.contains("all 2 signalled pass(es) released their locks"),
        "{said}"
    );
    // --wait returned after the releases: nothing left to wait for.
    assert_eq!((env.held("a"), env.held("b")), (0, 0));
    for (job, p) in [("a", a), ("b", b)] {
        assert!(
            env.path(&format!("{job}.termed")).exists(),
            "{job}'s TERM handler did not run"
        );
        assert_eq!(env.wait_exit(p.wrapper, Duration::from_secs(5)), Some(0));
        assert!(
            wait_until(Duration::from_secs(5), || env
                .history(job)
                .first()
                // Its TERM handler exited 0: the outcome follows that.
                .is_some_and(|h| h.outcome == Outcome::Ok)),
            "{job}: {:?}",
            env.history(job)
        );
    }
    assert_eq!(env.held("remote"), 1);
    assert!(!env.path("remote.termed").exists());
    assert!(alive(r.child));
    assert_eq!(env.slot("remote").state, State::Running);
}

/// Pause holds new passes with the conflict code and a line saying why and
/// since when; resume lets them run again. `pause --all` also holds a job
/// the store has never seen.
fn pause_resume_round_trip(env: &TestEnv) {
    let run = |job: &str, ran: &str| {
        let out = env.run(&["run", "-E", "75", job, "--", "touch", ran]);
        (out.status.code(), text(&out.stderr))
    };
    let out = env.run(&["pause", "--new", "j", "--reason", "disk repair"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let (code, err) = run("j", "j1.ran");
    assert_eq!(code, Some(75), "{err}");
    assert!(!env.path("j1.ran").exists());
    assert!(
        err.contains("jobrun: j: paused (disk repair, since 20") && err.contains("; skipping"),
        "{err}"
    );
    let j = env.job("j");
    assert_eq!(j.state, State::Paused, "{j:?}");
    let paused = j.paused.as_ref().expect("paused");
    assert_eq!(paused.reason.as_deref(), Some("disk repair"), "{j:?}");
    assert!(!paused.all, "{j:?}");

    let out = env.run(&["resume", "j"]);
    assert!(
        text(&out.stderr).contains("j: resumed"),
        "{}",
        text(&out.stderr)
    );
    let (code, err) = run("j", "j2.ran");
    assert_eq!(code, Some(0), "{err}");
    assert!(env.path("j2.ran").exists());
    assert_eq!(env.job("j").state, State::Free);

    let new = "never.seen.before";
    assert!(env.find_job(new).is_none());
    let out = env.run(&["pause", "--all", "--reason", "upgrade"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let (code, err) = run(new, "n1.ran");
    assert_eq!(code, Some(75), "{err}");
    assert!(!env.path("n1.ran").exists());
    assert!(
        err.contains(&format!("{new}: paused (pause --all) (upgrade, since 20")),
        "{err}"
    );
    let n = env.job(new);
    assert_eq!(n.state, State::Paused, "{n:?}");
    let paused = n.paused.as_ref().expect("paused");
    assert_eq!(paused.reason.as_deref(), Some("upgrade"), "{n:?}");
    assert!(paused.all, "{n:?}");
    // Resuming one job does not lift the pause over all of them.
    let out = env.run(&["resume", new]);
    assert!(
        text(&out.stderr).contains("still paused by pause --all"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(run(new, "n2.ran").0, Some(75));

    let out = env.run(&["resume", "--all"]);
    assert!(text(&out.stderr).contains("resumed all jobs"));
    let (code, err) = run(new, "n3.ran");
    assert_eq!(code, Some(0), "{err}");
    assert!(env.path("n3.ran").exists());
    assert_eq!(env.job(new).state, State::Free);
}

fn upgrade_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/upgrade.sh")
}

/// `git checkout` can replace scripts/upgrade.sh while it runs, and a shell
/// reads its script as it goes: the whole body must sit in functions, and
/// the last line must call the main one (so the shell has read everything
/// before anything runs).
#[test]
fn upgrade_script_runs_from_a_function_called_on_its_last_line() {
    let body = fs::read_to_string(upgrade_script()).unwrap();
    let mut functions = vec![];
    let mut depth = 0;
    let mut statements = vec![];
    for line in body.lines() {
        let t = line.trim();
        if t.is_empty() || t.starts_with('#') {
            continue;
        }
        if depth == 0 {
            if let Some(name) = t.split_once("() {").map(|(n, _)| n) {
                assert!(
                    name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
                    "not a function definition: {line}"
                );
                functions.push(name.to_string());
                if !t.ends_with('}') {
                    depth = 1;
                }
                continue;
            }
            statements.push(t.to_string());
        } else if line == "}" {
            depth = 0;
        }
    }
    assert_eq!(depth, 0, "a function is not closed");
    let (last, before) = statements.split_last().expect("no call at the end");
    for s in before {
        assert!(
            s.starts_with("set "),
            "top-level statement before the final call: {s:?}"
        );
    }
    let name = last
        .strip_suffix(" \"$@\"")
        .unwrap_or_else(|| panic!("the last line must call a function with \"$@\": {last:?}"));
    assert!(
        functions.contains(&name.to_string()),
        "{name} is not defined"
    );
    let last_line = body
        .lines()
        .map(str::trim)
        .rfind(|l| !l.is_empty() && !l.starts_with('#'))
        .unwrap();
    assert_eq!(last_line, last.as_str());
}

/// A deployment like the README's, in a temp dir: a git checkout cloned
/// from an upstream with a tag (each commit carries the real install
/// script, man pages, completions and examples), a `cargo` that "builds" by
/// copying the real binary with a mark of its own at the end, an `install`
/// that fails on demand, and jobrun installed under a prefix of its own.
struct Deployment {
    bin: PathBuf,
    prefix: PathBuf,
    checkout: PathBuf,
    path: String,
}

/// The binary the fake cargo "builds": the real one, marked, so that a
/// test tells the installed build from the one before.
fn built() -> Vec<u8> {
    let mut b = fs::read(BIN).unwrap();
    b.extend_from_slice(b"\njobrun-upgrade-test-build\n");
    b
}

/// Copy the files `scripts/install.sh` installs from into `to`.
fn copy_installables(to: &Path) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for dir in ["man", "completions", "scripts/examples"] {
        fs::create_dir_all(to.join(dir)).unwrap();
        for e in fs::read_dir(root.join(dir)).unwrap() {
            let e = e.unwrap();
            fs::copy(e.path(), to.join(dir).join(e.file_name())).unwrap();
        }
    }
    for f in [
        "scripts/install.sh",
        "scripts/build-release",
        "LICENSE-MIT",
        "LICENSE-APACHE",
    ] {
        fs::copy(root.join(f), to.join(f)).unwrap();
    }
}

fn git(dir: &Path, args: &[&str]) {
    let out = Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
        .args(args)
        .current_dir(dir)
        .output()
        .expect("git");
    assert!(out.status.success(), "git {args:?}: {}", text(&out.stderr));
}

fn deployment(env: &TestEnv) -> Deployment {
    let upstream = env.path("upstream");
    fs::create_dir(&upstream).unwrap();
    git(&upstream, &["init", "-q"]);
    fs::write(upstream.join("VERSION"), "1\n").unwrap();
    copy_installables(&upstream);
    git(&upstream, &["add", "-A"]);
    git(&upstream, &["commit", "-q", "-m", "one"]);
    git(&upstream, &["tag", "v1.0.0"]);
    fs::write(upstream.join("VERSION"), "2\n").unwrap();
    git(&upstream, &["commit", "-q", "-am", "two"]);
    git(&upstream, &["tag", "v1.10.0"]);
    // A branch, and the default branch moving on past the tags.
    git(&upstream, &["checkout", "-q", "-b", "next"]);
    fs::write(upstream.join("VERSION"), "next\n").unwrap();
    git(&upstream, &["commit", "-q", "-am", "next"]);
    git(&upstream, &["checkout", "-q", "-"]);
    fs::write(upstream.join("VERSION"), "main\n").unwrap();
    git(&upstream, &["commit", "-q", "-am", "main"]);
    git(env.dir.path(), &["clone", "-q", "upstream", "checkout"]);
    let checkout = env.path("checkout");
    git(&checkout, &["checkout", "-q", "v1.0.0"]);

    // A jobrun built without the PostgreSQL store comes with the jobrun-pg
    // it hands that store to (scripts/build-release): built and installed
    // with it.
    let pg = Path::new(BIN).with_file_name("jobrun-pg");
    let pg = pg.exists().then_some(pg);
    let pg_too = match &pg {
        Some(pg) => format!("cp '{}' target/release/jobrun-pg", pg.display()),
        None => String::new(),
    };
    let fake = env.path("fakebin");
    fs::create_dir(&fake).unwrap();
    let cargo = script(
        env,
        "fakebin/cargo",
        &format!(
            "echo \"cargo $*\" >> ../cargo.log\n\
             '{BIN}' status --json > ../status-at-build.json 2>&1\n\
             [ -e ../cargo.fail ] && {{ echo 'error: could not compile' >&2; exit 101; }}\n\
             mkdir -p target/release && cp '{BIN}' target/release/jobrun\n\
             printf '\\njobrun-upgrade-test-build\\n' >> target/release/jobrun\n\
             {pg_too}"
        ),
    );
    assert!(cargo.ends_with("fakebin/cargo"));
    script(
        env,
        "fakebin/install",
        "[ -e ../install.fail ] && { echo 'install: No space left on device' >&2; exit 1; }\n\
         exec /usr/bin/install \"$@\"",
    );
    let prefix = env.path("installed");
    let bin = prefix.join("bin/jobrun");
    fs::create_dir_all(prefix.join("bin")).unwrap();
    fs::copy(BIN, &bin).unwrap();
    if let Some(pg) = &pg {
        fs::copy(pg, prefix.join("bin/jobrun-pg")).unwrap();
    }
    let path = format!(
        "{}:{}",
        fake.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    Deployment {
        bin,
        prefix,
        checkout,
        path,
    }
}

fn run_upgrade(env: &TestEnv, d: &Deployment, args: &[&str]) -> (Option<i32>, String) {
    run_upgrade_waiting(env, d, args, "20s")
}

fn run_upgrade_waiting(
    env: &TestEnv,
    d: &Deployment,
    args: &[&str],
    wait: &str,
) -> (Option<i32>, String) {
    let mut c = Command::new("bash");
    for (k, _) in std::env::vars() {
        if k.starts_with("JOBRUN_") || k.starts_with("UPGRADE_") {
            c.env_remove(k);
        }
    }
    let out = c
        .arg(upgrade_script())
        .args(args)
        .env("JOBRUN_DB", &env.db)
        .env("UPGRADE_SRC", &d.checkout)
        .env("UPGRADE_BIN", &d.bin)
        .env("UPGRADE_WAIT", wait)
        .env("PATH", &d.path)
        .current_dir(env.dir.path())
        .output()
        .expect("run upgrade.sh");
    (out.status.code(), text(&out.stdout) + &text(&out.stderr))
}

/// The upgrade script checks out the newest tag and builds it while the
/// jobs run on; then pauses, stops what is in flight and waits for it,
/// installs the binary with its man pages and completions, and lifts its
/// own pause only: an operator's earlier pause stands. It prints the
/// version before and after, and says the checkout is on a detached HEAD.
fn upgrade_script_stops_rebuilds_and_resumes(env: &TestEnv) {
    let d = deployment(env);
    let out = env.run(&[
        "pause",
        "--new",
        "db.vacuum",
        "--reason",
        "disk maintenance",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let p = start_pass(env, "feeds.poll", "feeds", "60s", &[]);
    let (code, said) = run_upgrade(env, &d, &[]);
    assert_eq!(code, Some(0), "{said}");
    let version = text(&Command::new(BIN).arg("--version").output().unwrap().stdout);
    let installed = format!("upgrade: installed: {}", version.trim());
    assert_eq!(
        said.matches(&installed).count(),
        2,
        "{installed} not before and after: {said}"
    );
    assert!(said.contains("upgrading to v1.10.0 ("), "{said}");
    // The operator's pause survived, untouched.
    let db = env.job("db.vacuum");
    assert_eq!(db.state, State::Paused, "{said}");
    let pauses = &db.pauses;
    assert_eq!(pauses.len(), 1, "{db:?}");
    assert_eq!(
        pauses[0].reason.as_deref(),
        Some("disk maintenance"),
        "{db:?}"
    );
    assert_eq!(pauses[0].owner, None, "{db:?}");
    let out = env.run(&["run", "-E", "75", "db.vacuum", "--", "true"]);
    assert_eq!(out.status.code(), Some(75), "{}", text(&out.stderr));
    assert!(
        env.path("feeds.termed").exists(),
        "the pass was not stopped: {said}"
    );
    assert_eq!(env.wait_exit(p.wrapper, Duration::from_secs(5)), Some(0));
    // The command handled the TERM and exited 0.
    assert_eq!(env.history("feeds.poll")[0].outcome, Outcome::Ok);
    // The newest tag by version, not by name.
    assert_eq!(
        fs::read_to_string(d.checkout.join("VERSION")).unwrap(),
        "2\n",
        "{said}"
    );
    assert!(
        fs::read_to_string(env.path("cargo.log"))
            .unwrap()
            .contains("build --release"),
        "{said}"
    );
    // Built before anything was paused: the store had no upgrade pause then.
    let at_build = fs::read_to_string(env.path("status-at-build.json")).unwrap();
    assert!(at_build.contains("disk maintenance"), "{at_build}");
    assert!(
        !at_build.contains("\"upgrade\""),
        "paused before building: {at_build}"
    );
    assert!(fs::read(&d.bin).unwrap() == built(), "not installed");
    for f in [
        "share/man/man1/jobrun.1",
        "share/man/man1/jobrun-run.1",
        "share/bash-completion/completions/jobrun",
        "share/zsh/site-functions/_jobrun",
        "share/fish/vendor_completions.d/jobrun.fish",
    ] {
        assert!(d.prefix.join(f).is_file(), "{f} not installed: {said}");
    }
    assert!(
        said.contains("is left on a detached HEAD at v1.10.0 ("),
        "the detached HEAD is not said: {said}"
    );
    // Resumed: nothing paused, the next pass runs.
    assert_eq!(env.job("feeds.poll").state, State::Free, "{said}");
    let out = env.run(&["run", "-E", "75", "feeds.poll", "--", "true"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}

/// A tag that does not exist, or a build that fails, stops the upgrade
/// before any job is paused; a step that fails once the jobs are paused
/// (installing, here) says so and leaves the pause standing.
fn upgrade_script_failure_leaves_the_pause_and_says_so(env: &TestEnv) {
    let d = deployment(env);
    let (code, said) = run_upgrade(env, &d, &["v9.9.9"]);
    assert_eq!(code, Some(1), "{said}");
    assert!(
        said.contains("FAILED: no tag, branch or commit v9.9.9")
            && said.contains("this run paused nothing"),
        "{said}"
    );
    let out = env.run(&["run", "-E", "75", "feeds.poll", "--", "true"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));

    fs::write(env.path("cargo.fail"), "").unwrap();
    let (code, said) = run_upgrade(env, &d, &["v1.10.0"]);
    assert_eq!(code, Some(1), "{said}");
    assert!(
        said.contains("FAILED: scripts/build-release --locked")
            && said.contains("this run paused nothing"),
        "the failed step is not named: {said}"
    );
    assert!(said.contains("is left on a detached HEAD"), "{said}");
    let out = env.run(&["run", "-E", "75", "feeds.poll", "--", "true"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));

    fs::remove_file(env.path("cargo.fail")).unwrap();
    fs::write(env.path("install.fail"), "").unwrap();
    let (code, said) = run_upgrade(env, &d, &["v1.10.0"]);
    assert_eq!(code, Some(1), "{said}");
    assert!(
        said.contains("FAILED: scripts/install.sh"),
        "the failed step is not named: {said}"
    );
    assert!(fs::read(&d.bin).unwrap() == fs::read(BIN).unwrap());
    assert!(
        said.contains("jobs stay paused") && said.contains("resume --all --as upgrade"),
        "{said}"
    );
    let out = env.run(&["run", "-E", "75", "feeds.poll", "--", "true"]);
    assert_eq!(out.status.code(), Some(75), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("(upgrade, since"),
        "{}",
        text(&out.stderr)
    );
}

/// The upgrade takes a branch or a commit as well as a tag, and without an
/// argument in a repository with no tag, the upstream's default branch.
fn upgrade_script_takes_a_branch_a_commit_or_the_default_branch(env: &TestEnv) {
    let d = deployment(env);
    let version = || fs::read_to_string(d.checkout.join("VERSION")).unwrap();
    let (code, said) = run_upgrade(env, &d, &["next"]);
    assert_eq!(code, Some(0), "{said}");
    assert_eq!(version(), "next\n", "{said}");
    let sha = {
        let out = Command::new("git")
            .args(["rev-parse", "v1.0.0^{commit}"])
            .current_dir(&d.checkout)
            .output()
            .unwrap();
        text(&out.stdout).trim().to_string()
    };
    let (code, said) = run_upgrade(env, &d, &[&sha[..10]]);
    assert_eq!(code, Some(0), "{said}");
    assert_eq!(version(), "1\n", "{said}");
    for dir in [env.path("upstream"), d.checkout.clone()] {
        git(&dir, &["tag", "-d", "v1.0.0", "v1.10.0"]);
    }
    let (code, said) = run_upgrade(env, &d, &[]);
    assert_eq!(code, Some(0), "{said}");
    assert_eq!(version(), "main\n", "{said}");
    assert_eq!(env.find_job("feeds.poll"), None);
    let out = env.run(&["run", "-E", "75", "feeds.poll", "--", "true"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}

/// A pass that does not release within the wait stops the upgrade before
/// anything is installed (the build, done first, stays in the checkout),
/// and the pause stands.
fn upgrade_script_stops_when_a_pass_holds_on(env: &TestEnv) {
    let d = deployment(env);
    // A child that notes TERM and carries on.
    let child = script(
        env,
        "stubborn.sh",
        "trap 'touch stubborn.termed' TERM\n\
         echo $$ > stubborn.pid.tmp && mv stubborn.pid.tmp stubborn.pid\n\
         while [ ! -e stubborn.stop ]; do sleep 0.05; done",
    );
    env.start(
        "stubborn",
        &["run", "--kill-after", "1h", "feeds.poll", "--", &child],
    );
    assert!(env.wait_for_file("stubborn.pid", Duration::from_secs(10)));
    let (code, said) = run_upgrade_waiting(env, &d, &[], "1s");
    assert_eq!(code, Some(1), "{said}");
    assert!(env.path("stubborn.termed").exists(), "{said}");
    assert!(
        said.contains("still held after 1s: feeds.poll slot 0")
            && said.contains("FAILED: jobrun stop-due --all --wait 1s")
            && said.contains("jobs stay paused"),
        "{said}"
    );
    assert!(env.path("cargo.log").exists(), "not built first: {said}");
    assert!(
        fs::read(&d.bin).unwrap() == fs::read(BIN).unwrap(),
        "installed anyway: {said}"
    );
    assert!(said.contains("is left on a detached HEAD"), "{said}");
    assert_eq!(
        env.job("feeds.poll")
            .paused
            .and_then(|p| p.reason)
            .as_deref(),
        Some("upgrade")
    );
}

/// An orphaned pass (wrapper SIGKILLed, command running on) has nobody to
/// release its lock: stop-due stops the command and, once its holder is
/// dead, frees the lock itself, so --wait returns instead of timing out.
fn stop_due_wait_frees_an_orphaned_pass(env: &TestEnv) {
    let p = start_pass(env, "j", "orphan", "60s", &[]);
    kill(p.wrapper as i32, libc::SIGKILL);
    assert!(wait_until(Duration::from_secs(5), || !alive(
        p.wrapper as i32
    )));
    assert!(alive(p.child), "the command should run on");
    assert_eq!(env.slot("j").state, State::Orphaned);
    let out = env.run(&["stop-due", "--all", "--wait", "10s"]);
    let said = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{said}{}", text(&out.stderr));
    assert!(
        said.contains(&format!("of orphaned process group {}", p.child)),
        "{said}"
    );
    assert!(said.contains("freed, its holder is dead"), "{said}");
    assert!(
        env.path("orphan.termed").exists(),
        "TERM never reached the command"
    );
    assert_eq!(env.held("j"), 0);
}

both_stores!(
    stop_due_wait_frees_an_orphaned_pass,
    clear_locks_clears_dead_keeps_alive_and_dry_run_changes_nothing,
    stop_due_stops_verified_passes_and_waits_for_releases,
    pause_resume_round_trip,
    upgrade_script_stops_rebuilds_and_resumes,
    upgrade_script_failure_leaves_the_pause_and_says_so,
    upgrade_script_stops_when_a_pass_holds_on,
    upgrade_script_takes_a_branch_a_commit_or_the_default_branch,
);
