//! From `git clone` to a tool an operator trusts: the install script puts
//! every file where bash-completion, zsh, fish and man look for it; the
//! pages pass `mandoc -T lint`; the Debian package holds the same tree; the
//! man pages name only pages that exist and document every variable and
//! JSON field; the examples work as written; the version names its
//! revision; `rust-version` is the locked tree's true minimum.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::support::{start_pass, text, wait_until, TestEnv, BIN};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn have(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Stage `scripts/install.sh --prefix PREFIX` under a temp destdir.
fn staged(prefix: &str) -> (tempfile::TempDir, PathBuf) {
    let dest = tempfile::tempdir().unwrap();
    let out = Command::new(root().join("scripts/install.sh"))
        .args(["--bin", BIN, "--prefix", prefix, "--destdir"])
        .arg(dest.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let tree = dest.path().join(prefix.trim_start_matches('/'));
    (dest, tree)
}

/// The man pages as `jobrun generate` writes them now (the committed ones
/// equal these: see `generated`).
fn fresh_man() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(BIN)
        .args(["generate", "--man"])
        .arg(dir.path().join("man"))
        .arg("--completions")
        .arg(dir.path().join("completions"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    dir
}

fn read_page(dir: &tempfile::TempDir, page: &str) -> String {
    fs::read_to_string(dir.path().join("man").join(page)).unwrap()
}

fn man_pages() -> Vec<String> {
    let mut pages: Vec<String> = fs::read_dir(root().join("man"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    pages.sort();
    pages
}

#[test]
fn install_puts_every_file_where_the_tools_look() {
    let (_dest, tree) = staged("/usr/local");
    let bin = tree.join("bin/jobrun");
    let out = Command::new(&bin).arg("--version").output().unwrap();
    assert!(text(&out.stdout).starts_with("jobrun "), "{bin:?}");
    let pages = man_pages();
    assert!(pages.len() >= 9, "{pages:?}");
    for p in &pages {
        assert!(tree.join("share/man/man1").join(p).is_file(), "{p}");
    }
    // bash-completion loads completions/<command> on demand; zsh autoloads
    // _<command> from its site-functions; fish reads vendor_completions.d.
    let bash = tree.join("share/bash-completion/completions/jobrun");
    let zsh = tree.join("share/zsh/site-functions/_jobrun");
    let fish = tree.join("share/fish/vendor_completions.d/jobrun.fish");
    assert!(fs::read_to_string(&bash)
        .unwrap()
        .contains("complete -F _jobrun"));
    assert!(fs::read_to_string(&zsh)
        .unwrap()
        .starts_with("#compdef jobrun"));
    assert!(fs::read_to_string(&fish)
        .unwrap()
        .contains("complete -c jobrun"));
    for ex in ["crontab", "feeds-poll.service", "feeds-poll.timer"] {
        assert!(
            tree.join("share/doc/jobrun/examples").join(ex).is_file(),
            "{ex}"
        );
    }

    let share = tree.join("share");
    let loader = Path::new("/usr/share/bash-completion/bash_completion");
    if loader.exists() {
        // A new shell's on-demand loading finds it (no user dir in the way).
        let out = Command::new("bash")
            .args([
                "-c",
                &format!(
                    "source {}; __load_completion jobrun && complete -p jobrun",
                    loader.display()
                ),
            ])
            .env("XDG_DATA_DIRS", &share)
            .env("BASH_COMPLETION_USER_DIR", "/nonexistent")
            .env("PATH", "/usr/bin:/bin")
            .output()
            .unwrap();
        assert!(
            text(&out.stdout).contains("-F _jobrun jobrun"),
            "bash-completion did not load it: {}{}",
            text(&out.stdout),
            text(&out.stderr)
        );
    } else {
        eprintln!(
            "skipped: bash-completion is not installed ({} missing)",
            loader.display()
        );
    }
    if have("man") {
        for page in ["jobrun", "jobrun-run"] {
            let out = Command::new("man")
                .args(["-w", page])
                .env("MANPATH", share.join("man"))
                .output()
                .unwrap();
            assert!(
                text(&out.stdout)
                    .trim_end()
                    .ends_with(&format!("man1/{page}.1")),
                "man -w {page}: {}{}",
                text(&out.stdout),
                text(&out.stderr)
            );
        }
    } else {
        eprintln!("skipped: man is not installed");
    }
    // mandoc (Debian's `mandoc`; scripts/test installs it) finds nothing
    // to warn of in the installed pages either.
    assert!(
        have("mandoc"),
        "mandoc is missing: install Debian's mandoc (scripts/test does)"
    );
    for p in &pages {
        let out = Command::new("mandoc")
            .args(["-T", "lint", "-W", "warning"])
            .arg(tree.join("share/man/man1").join(p))
            .output()
            .unwrap();
        assert!(
            out.status.success() && out.stdout.is_empty(),
            "mandoc -T lint {p}: {}{}",
            text(&out.stdout),
            text(&out.stderr)
        );
    }
}

/// Installing into a user's prefix needs no root and lands the same tree.
#[test]
fn install_into_a_user_prefix() {
    let home = tempfile::tempdir().unwrap();
    let prefix = home.path().join(".local");
    let out = Command::new(root().join("scripts/install.sh"))
        .args(["--bin", BIN, "--prefix"])
        .arg(&prefix)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(prefix.join("bin/jobrun").is_file());
    assert!(prefix.join("share/man/man1/jobrun-run.1").is_file());
    assert!(prefix
        .join("share/bash-completion/completions/jobrun")
        .is_file());
    // It says how zsh and fish find the completions there.
    let said = text(&out.stderr);
    assert!(
        said.contains("fpath") && said.contains("fish_complete_path"),
        "{said}"
    );
    let out = Command::new(root().join("scripts/install.sh"))
        .args(["--prefix", "relative"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn debian_package_holds_the_installed_tree() {
    if !have("dpkg-deb") {
        eprintln!("skipped: dpkg-deb is not installed (not a Debian system)");
        return;
    }
    let out_dir = tempfile::tempdir().unwrap();
    let out = Command::new(root().join("scripts/package-deb"))
        .args(["--bin", BIN, "--compress", "none", "--out"])
        .arg(out_dir.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let deb = text(&out.stdout).trim().to_string();
    assert!(deb.ends_with(".deb") && Path::new(&deb).is_file(), "{deb}");
    let list = Command::new("dpkg-deb")
        .args(["-c", &deb])
        .output()
        .unwrap();
    let list = text(&list.stdout);
    for path in [
        "./usr/bin/jobrun",
        "./usr/share/man/man1/jobrun.1.gz",
        "./usr/share/man/man1/jobrun-run.1.gz",
        "./usr/share/bash-completion/completions/jobrun",
        // Debian's zsh reads packages' completions from vendor-completions.
        "./usr/share/zsh/vendor-completions/_jobrun",
        "./usr/share/fish/vendor_completions.d/jobrun.fish",
        "./usr/share/doc/jobrun/examples/crontab",
        "./usr/share/doc/jobrun/examples/feeds-poll.service",
        "./usr/share/doc/jobrun/examples/feeds-poll.timer",
    ] {
        assert!(
            list.lines().any(|l| l.ends_with(&format!(" {path}"))),
            "{path} not in the package:\n{list}"
        );
    }
    let var = list
        .lines()
        .find(|l| l.ends_with(" ./var/lib/jobrun/"))
        .unwrap_or_else(|| panic!("no /var/lib/jobrun:\n{list}"));
    assert!(var.starts_with("drwx------ root/root "), "{var}");
    assert!(
        list.lines().all(|l| l.contains(" root/root ")),
        "not owned by root:\n{list}"
    );
    let field = |f: &str| {
        let o = Command::new("dpkg-deb")
            .args(["-f", &deb, f])
            .output()
            .unwrap();
        text(&o.stdout).trim().to_string()
    };
    assert_eq!(field("Package"), "jobrun");
    let version = field("Version");
    assert!(
        version.starts_with(&format!("{}+git", env!("CARGO_PKG_VERSION"))),
        "{version}"
    );
    if let Some(rev) = git_rev() {
        assert!(version.ends_with(&rev), "{version} does not name {rev}");
    }
}

fn git_rev() -> Option<String> {
    let out = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(root())
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| text(&out.stdout).trim().to_string())
}

#[test]
fn version_names_the_git_revision() {
    let out = Command::new(BIN).arg("--version").output().unwrap();
    let said = text(&out.stdout);
    assert!(
        said.starts_with(&format!("jobrun {}", env!("CARGO_PKG_VERSION"))),
        "{said}"
    );
    match git_rev() {
        Some(rev) => assert!(said.contains(&format!("(git {rev})")), "{said} lacks {rev}"),
        None => eprintln!("skipped: not built from a git checkout"),
    }
}

/// The text of one `.SH` section of a page.
fn section<'a>(page: &'a str, name: &str) -> &'a str {
    let start = page
        .find(&format!(".SH {name}\n"))
        .unwrap_or_else(|| panic!("no {name} section"));
    let rest = &page[start + 5 + name.len()..];
    &rest[..rest.find("\n.SH ").map_or(rest.len(), |e| e + 1)]
}

#[test]
fn man_pages_name_only_pages_that_exist_and_show_the_real_synopsis() {
    let man = fresh_man();
    let pages = man_pages();
    for p in &pages {
        let body = read_page(&man, p);
        // Every jobrun page referred to exists.
        for (i, _) in body.match_indices("jobrun\\-") {
            let name: String = body[i..]
                .replace("\\-", "-")
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                .collect();
            let after = &body[i..];
            if after.contains('(') && after.split('(').next().unwrap().ends_with("\\fR") {
                let page = format!("{name}.1");
                assert!(
                    pages.contains(&page),
                    "{p} refers to {name}, which has no page"
                );
            }
        }
        assert!(!body.contains("jobrun\\-help"), "{p} names jobrun-help");
        let synopsis = section(&body, "SYNOPSIS");
        assert!(
            synopsis.contains("\\fB\\-\\-db\\fR \\fIPATH|URL\\fR"),
            "{p}: {synopsis}"
        );
        assert!(body.contains(".SH SEE ALSO"), "{p}");
    }
    let run = read_page(&man, "jobrun-run.1");
    let synopsis = section(&run, "SYNOPSIS");
    for want in [
        "\\fBrun\\fR",
        "[\\fB\\-\\-lease\\fR \\fIDURATION\\fR]",
        "[\\fB\\-E\\fR|\\fB\\-\\-conflict\\-exit\\-code\\fR \\fICODE\\fR]",
        "\\fINAME\\fR \\fB\\-\\-\\fR \\fICOMMAND\\fR [\\fIARGS\\fR...]",
    ] {
        assert!(synopsis.contains(want), "{want} not in {synopsis}");
    }
    let status = read_page(&man, "jobrun-status.1");
    assert!(
        !status.contains("README"),
        "an installed system has no README"
    );
}

/// Every `JOBRUN_*` variable the code reads or sets, from the source.
fn variables_in_source() -> BTreeSet<String> {
    let mut vars = BTreeSet::new();
    let mut dirs = vec![root().join("src")];
    while let Some(d) = dirs.pop() {
        for e in fs::read_dir(d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                dirs.push(p);
                continue;
            }
            let body = fs::read_to_string(&p).unwrap();
            for (i, _) in body.match_indices("\"JOBRUN_") {
                let name: String = body[i + 1..]
                    .chars()
                    .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
                    .collect();
                // JOBRUN_TEST_*: the test suite's servers, not the binary's.
                if body[i + 1 + name.len()..].starts_with('"')
                    && name.len() > 7
                    && !name.starts_with("JOBRUN_TEST_")
                {
                    vars.insert(name);
                }
            }
        }
    }
    vars
}

#[test]
fn jobrun_1_documents_exit_status_environment_files_signals_and_examples() {
    let page = read_page(&fresh_man(), "jobrun.1");
    let env = section(&page, "ENVIRONMENT");
    let vars = variables_in_source();
    assert!(vars.len() >= 15, "{vars:?}");
    for v in &vars {
        assert!(env.contains(&format!(".B {v}\n")), "ENVIRONMENT lacks {v}");
    }
    let exit = section(&page, "EXIT STATUS");
    for code in ["128+N", "\n1\n", "125", "126", "127"] {
        assert!(exit.contains(code), "EXIT STATUS lacks {code:?}");
    }
    let files = section(&page, "FILES");
    for f in [
        "/var/lib/jobrun/jobrun.db",
        "XDG_STATE_HOME",
        "holders",
        ".wake",
    ] {
        assert!(files.contains(f), "FILES lacks {f}");
    }
    let signals = section(&page, "SIGNALS");
    for s in [
        "TERM",
        "INT",
        "HUP",
        "QUIT",
        "USR1",
        "USR2",
        "KILL",
        "\\-\\-kill\\-after",
    ] {
        assert!(signals.contains(s), "SIGNALS lacks {s}");
    }
    let examples = section(&page, "EXAMPLES");
    for e in [
        "PATH=/usr/local/bin:/usr/bin:/bin",
        "\\\\%", // `\%`, with its backslash escaped
        "KillMode=mixed",
        "Wants=network\\-online.target",
        "OnCalendar=",
        "\\-\\-as upgrade",
        "a job is not running",
    ] {
        assert!(examples.contains(e), "EXAMPLES lacks {e}");
    }
}

/// Every key of a JSON document, at any depth.
fn keys(v: &Value, out: &mut BTreeSet<String>) {
    match v {
        Value::Object(m) => {
            for (k, v) in m {
                out.insert(k.clone());
                keys(v, out);
            }
        }
        Value::Array(a) => a.iter().for_each(|v| keys(v, out)),
        _ => {}
    }
}

/// The JSON OUTPUT section of jobrun(1) names every field `status --json`
/// and `history --json` print.
#[test]
fn jobrun_1_documents_every_json_field() {
    let env = TestEnv::sqlite();
    let _pass = start_pass(&env, "held", "held", "60s", &[]);
    assert!(env
        .run(&["pause", "held", "--as", "t", "--reason", "r"])
        .status
        .success());
    assert!(env.run(&["run", "done", "--", "true"]).status.success());
    env.start("waiter", &["run", "--wait", "60s", "held", "--", "true"]);
    assert!(wait_until(std::time::Duration::from_secs(10), || env
        .find_job("held")
        .is_some_and(|j| j.queue.length == 1)));
    let mut fields = BTreeSet::new();
    // As printed, not as the models read it: a field they lack counts too.
    for args in [["status", "--json"], ["history", "--json"]] {
        let out = env.run(&args);
        keys(&serde_json::from_slice(&out.stdout).unwrap(), &mut fields);
    }
    let page = read_page(&fresh_man(), "jobrun.1");
    let doc = section(&page, "JSON OUTPUT").replace("\\-", "-");
    for f in &fields {
        if f == "done" || f == "held" || f == "ok" || f == "skipped" {
            continue; // values used as keys (job names, outcome counts)
        }
        assert!(doc.contains(&format!("\"{f}\"")), "JSON OUTPUT lacks {f}");
    }
}

#[test]
fn systemd_units_verify() {
    let ex = root().join("scripts/examples");
    let service = fs::read_to_string(ex.join("feeds-poll.service")).unwrap();
    // network-online.target is reached only when something wants it.
    assert!(service.contains("After=network-online.target"));
    assert!(service.contains("Wants=network-online.target"), "{service}");
    if !have("systemd-analyze") {
        eprintln!("skipped: systemd-analyze is not installed; the units were not verified");
        return;
    }
    // Verified as installed, with jobrun where the unit names it.
    let dir = tempfile::tempdir().unwrap();
    let exec = service
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .unwrap()
        .split(' ')
        .next()
        .unwrap()
        .to_string();
    fs::write(
        dir.path().join("feeds-poll.service"),
        service.replace(&exec, BIN),
    )
    .unwrap();
    fs::copy(
        ex.join("feeds-poll.timer"),
        dir.path().join("feeds-poll.timer"),
    )
    .unwrap();
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(dir.path().join("feeds-poll.service"))
        .arg(dir.path().join("feeds-poll.timer"))
        .output()
        .unwrap();
    let said = text(&out.stdout) + &text(&out.stderr);
    assert!(out.status.success(), "{said}");
    assert!(!said.contains("feeds-poll"), "{said}");
}

/// Cron's PATH is /usr/bin:/bin: every cron line of the README and of the
/// example crontab follows a PATH setting, and both say where the skip line
/// goes and what `%` does.
#[test]
fn cron_examples_set_path_and_say_where_the_skip_line_goes() {
    let is_cron_line = |l: &str| {
        let f: Vec<&str> = l.split_whitespace().collect();
        f.len() > 6
            && f[..5]
                .iter()
                .all(|w| w.chars().all(|c| c.is_ascii_digit() || "*/,-".contains(c)))
            && l.contains("jobrun")
    };
    let crontab = fs::read_to_string(root().join("scripts/examples/crontab")).unwrap();
    let readme = fs::read_to_string(root().join("README.md")).unwrap();
    for (what, body) in [("crontab", &crontab), ("README", &readme)] {
        let mut path_set = false;
        let mut lines = 0;
        for l in body.lines() {
            let l = l.trim();
            if l.is_empty() {
                // A README code block ends at a blank line only when the
                // next is prose; keep PATH for the block.
                continue;
            }
            if l.starts_with("PATH=") && l.contains("/usr/local/bin") {
                path_set = true;
            } else if !l.starts_with('#') && !l.contains('=') && !is_cron_line(l) {
                path_set = false;
            }
            if is_cron_line(l) {
                lines += 1;
                assert!(path_set, "{what}: no PATH before {l}");
            }
        }
        assert!(lines >= 1, "{what}: no cron line");
        for needed in ["-q", "-E", "mail", "%"] {
            assert!(body.contains(needed), "{what} does not mention {needed}");
        }
    }
}

#[test]
fn readme_says_how_to_install_and_package() {
    let readme = fs::read_to_string(root().join("README.md")).unwrap();
    assert!(readme.contains("scripts/install.sh"));
    assert!(readme.contains("scripts/package-deb"));
}

/// `rust-version` is the largest `rust-version` among the locked crates
/// this build compiles (their sources are in cargo's registry once built),
/// and the README states it.
#[test]
fn rust_version_is_the_locked_minimum() {
    let manifest = fs::read_to_string(root().join("Cargo.toml")).unwrap();
    let declared = rust_version_of(&manifest).expect("no rust-version in Cargo.toml");
    let home = std::env::var("CARGO_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from(std::env::var("HOME").unwrap()).join(".cargo"));
    let lock = fs::read_to_string(root().join("Cargo.lock")).unwrap();
    let mut needed = (0, 0, 0);
    let mut found = 0;
    let registries: Vec<PathBuf> = fs::read_dir(home.join("registry/src"))
        .map(|d| d.map(|e| e.unwrap().path()).collect())
        .unwrap_or_default();
    for pkg in lock.split("[[package]]").skip(1) {
        let field = |k: &str| {
            pkg.lines()
                .find_map(|l| l.strip_prefix(&format!("{k} = \"")))
                .map(|v| v.trim_end_matches('"').to_string())
        };
        let (Some(name), Some(version)) = (field("name"), field("version")) else {
            continue;
        };
        for reg in &registries {
            let toml = reg.join(format!("{name}-{version}/Cargo.toml"));
            if let Ok(body) = fs::read_to_string(&toml) {
                found += 1;
                if let Some(v) = rust_version_of(&body) {
                    needed = needed.max(v);
                }
                break;
            }
        }
    }
    assert!(
        found > 20,
        "only {found} locked crates found under {}",
        home.display()
    );
    assert_eq!(
        declared, needed,
        "Cargo.toml says rust-version {declared:?}; the locked crates need {needed:?}"
    );
    let readme = fs::read_to_string(root().join("README.md")).unwrap();
    let stated = format!("Rust {}.{}", needed.0, needed.1);
    assert!(readme.contains(&stated), "the README does not say {stated}");
}

fn rust_version_of(manifest: &str) -> Option<(u32, u32, u32)> {
    let v = manifest
        .lines()
        .find_map(|l| l.trim().strip_prefix("rust-version = \""))?
        .trim_end_matches('"');
    let mut parts = v.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    Some((
        parts.next().unwrap_or(0),
        parts.next().unwrap_or(0),
        parts.next().unwrap_or(0),
    ))
}
