//! From `git clone` to a tool an operator trusts: the install script puts
//! every file where bash-completion, zsh, fish and man look for it, says
//! what each installed shell still needs, and its `--uninstall` takes back
//! exactly what it put there; the pages pass `mandoc -T lint`; the man
//! pages name only pages that exist and document every variable and JSON
//! field; the examples work as shipped; the version names its revision,
//! and `upgrade.sh` to that revision touches nothing; `rust-version` is
//! the locked tree's true minimum. (The Debian package: `package`.)

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
    for licence in ["LICENSE-MIT", "LICENSE-APACHE"] {
        assert_eq!(
            fs::read(tree.join("share/doc/jobrun").join(licence)).unwrap(),
            fs::read(root().join(licence)).unwrap(),
            "{licence}"
        );
    }
    // A staged tree (for a package) carries no record of an install.
    assert!(!tree.join("share/jobrun").exists());

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

/// Run `scripts/install.sh ARGS` with HOME at `home` and PATH as given;
/// bash-completion's own settings are left out, as in a new login.
fn install_sh(home: &Path, path: &str, args: &[&str]) -> std::process::Output {
    Command::new(root().join("scripts/install.sh"))
        .args(args)
        .env("HOME", home)
        .env("PATH", path)
        .env_remove("XDG_DATA_HOME")
        .env_remove("XDG_DATA_DIRS")
        .env_remove("BASH_COMPLETION_USER_DIR")
        .output()
        .unwrap()
}

/// A PATH with this machine's tools and, first, `dir`.
fn path_with(dir: &Path) -> String {
    format!(
        "{}:{}",
        dir.display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

/// Installing into a user's prefix needs no root and lands the same tree;
/// the hints name only shells that are installed, and only what they do
/// not find by themselves.
#[test]
fn install_into_a_user_prefix() {
    let home = tempfile::tempdir().unwrap();
    let prefix = home.path().join(".local");
    let prefix_s = prefix.to_str().unwrap();
    // Shells that do not find what was installed (they answer "no").
    let shells = tempfile::tempdir().unwrap();
    for shell in ["zsh", "fish"] {
        let p = shells.path().join(shell);
        fs::write(&p, "#!/bin/sh\nexit 1\n").unwrap();
        fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    }
    let out = install_sh(
        home.path(),
        &path_with(shells.path()),
        &["--bin", BIN, "--prefix", prefix_s],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(prefix.join("bin/jobrun").is_file());
    assert!(prefix.join("share/man/man1/jobrun-run.1").is_file());
    assert!(prefix
        .join("share/bash-completion/completions/jobrun")
        .is_file());
    let said = text(&out.stderr);
    assert!(
        said.contains("zsh: add fpath+=(") && said.contains("fish: add set -p fish_complete_path"),
        "{said}"
    );
    if Path::new("/usr/share/bash-completion/bash_completion").exists() {
        // bash-completion looks in ~/.local/share by itself.
        assert!(!said.contains("bash:"), "{said}");
    }

    // Without zsh and fish on PATH, nothing is said about them.
    let bare = format!("{}/bin:/usr/bin:/bin", prefix.display());
    if !["/usr/bin/zsh", "/bin/zsh", "/usr/bin/fish", "/bin/fish"]
        .iter()
        .any(|p| Path::new(p).exists())
    {
        let out = install_sh(home.path(), &bare, &["--bin", BIN, "--prefix", prefix_s]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let said = text(&out.stderr);
        assert!(!said.contains("zsh") && !said.contains("fish"), "{said}");
    }

    let out = Command::new(root().join("scripts/install.sh"))
        .args(["--prefix", "relative"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
}

/// bash-completion (Debian 12's 2.11) finds completions under ~/.local,
/// /usr/local and /usr only: for another prefix the install names the
/// line that makes bash find them, and that line works.
#[test]
fn install_under_another_prefix_says_how_bash_finds_the_completion() {
    let loader = Path::new("/usr/share/bash-completion/bash_completion");
    if !loader.exists() {
        eprintln!("skipped: bash-completion is not installed");
        return;
    }
    let home = tempfile::tempdir().unwrap();
    let prefix = home.path().join("opt/jobrun");
    let out = install_sh(
        home.path(),
        &std::env::var("PATH").unwrap_or_default(),
        &["--bin", BIN, "--prefix", prefix.to_str().unwrap()],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let said = text(&out.stderr);
    let want = format!(
        "bash: add this line to ~/.bash_completion: . {}/share/bash-completion/completions/jobrun",
        prefix.display()
    );
    assert!(said.contains(&want), "{said}");
    // Without the line, a new shell does not find it, whatever PATH says
    // (the README used to claim otherwise); with it, it does.
    let new_shell = |extra: &str| {
        let out = Command::new("bash")
            .args([
                "--norc",
                "-c",
                &format!(
                    "source {}; {extra} __load_completion jobrun; complete -p jobrun",
                    loader.display()
                ),
            ])
            .env("HOME", home.path())
            .env("PATH", format!("{}/bin:/usr/bin:/bin", prefix.display()))
            .env_remove("XDG_DATA_DIRS")
            .env_remove("BASH_COMPLETION_USER_DIR")
            .output()
            .unwrap();
        text(&out.stdout)
    };
    assert!(!new_shell("").contains("_jobrun"), "found without the line");
    let line = want.rsplit_once(": ").unwrap().1;
    assert!(new_shell(&format!("{line};")).contains("-F _jobrun jobrun"));
}

/// Without cargo, and without a built binary to install, the script says
/// which Rust to install, read from Cargo.toml.
#[test]
fn install_without_cargo_names_the_rust_it_needs() {
    if ["/usr/bin/cargo", "/bin/cargo"]
        .iter()
        .any(|p| Path::new(p).exists())
    {
        eprintln!("skipped: cargo is installed system-wide here");
        return;
    }
    let home = tempfile::tempdir().unwrap();
    let prefix = home.path().join("p");
    let out = install_sh(
        home.path(),
        "/usr/bin:/bin",
        &["--prefix", prefix.to_str().unwrap()],
    );
    let manifest = fs::read_to_string(root().join("Cargo.toml")).unwrap();
    let (a, b, _) = rust_version_of(&manifest).unwrap();
    let said = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(
        said.contains(&format!(
            "no cargo: install Rust {a}.{b} or newer, or pass --bin FILE"
        )),
        "{said}"
    );
    assert!(!prefix.exists(), "installed something anyway: {said}");
}

/// Every path under `dir` with its kind and content.
fn tree_of(dir: &Path) -> BTreeSet<String> {
    let mut all = BTreeSet::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let rel = p.strip_prefix(dir).unwrap().display().to_string();
            if p.is_dir() {
                dirs.push(p);
                all.insert(format!("{rel}/"));
            } else {
                all.insert(format!("{rel} {:?}", fs::read(&p).unwrap()));
            }
        }
    }
    all
}

/// `--uninstall` removes exactly what the installs under a prefix put
/// there: every file and every directory they created, and nothing that
/// was there before (a shared bin/ and man1/, a file of someone else's in
/// them) or added since.
#[test]
fn uninstall_removes_exactly_what_the_install_put_there() {
    let home = tempfile::tempdir().unwrap();
    let path = std::env::var("PATH").unwrap_or_default();
    let top = home.path().join("top");
    // A prefix already in use by other software.
    let shared = top.join("shared");
    fs::create_dir_all(shared.join("bin")).unwrap();
    fs::create_dir_all(shared.join("share/man/man1")).unwrap();
    fs::write(shared.join("bin/other"), "other\n").unwrap();
    fs::write(shared.join("share/man/man1/other.1"), ".TH other 1\n").unwrap();
    // A prefix whose very directory does not exist yet, two levels down.
    let fresh = top.join("new/prefix");
    let before = tree_of(&top);

    for prefix in [&shared, &fresh] {
        let p = prefix.to_str().unwrap();
        for _ in 0..2 {
            // Installed twice: a re-install keeps the record exact.
            let out = install_sh(home.path(), &path, &["--bin", BIN, "--prefix", p]);
            assert!(out.status.success(), "{}", text(&out.stderr));
        }
        assert!(prefix.join("bin/jobrun").is_file());
        assert!(prefix.join("share/jobrun/installed-files").is_file());
    }
    // Something added by hand under a directory the install created stays,
    // and so does its directory.
    let added = fresh.join("share/doc/jobrun/notes.txt");
    fs::write(&added, "mine\n").unwrap();

    for prefix in [&shared, &fresh] {
        let out = install_sh(
            home.path(),
            &path,
            &["--uninstall", "--prefix", prefix.to_str().unwrap()],
        );
        assert!(out.status.success(), "{}", text(&out.stderr));
    }
    let mut after = tree_of(&top);
    assert!(after.remove(&format!(
        "new/prefix/share/doc/jobrun/notes.txt {:?}",
        b"mine\n"
    )));
    for d in [
        "new/",
        "new/prefix/",
        "new/prefix/share/",
        "new/prefix/share/doc/",
        "new/prefix/share/doc/jobrun/",
    ] {
        assert!(after.remove(d), "{d} should stay, holding notes.txt");
    }
    assert_eq!(after, before, "uninstall left files behind or took others");
    fs::remove_file(&added).unwrap();

    // With nothing recorded there, nothing is removed, and it says why.
    let out = install_sh(
        home.path(),
        &path,
        &["--uninstall", "--prefix", shared.to_str().unwrap()],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("no record of an install under"));
    assert!(shared.join("bin/other").is_file());
}

/// A jobrun built without the PostgreSQL store comes with the jobrun-pg
/// beside it (scripts/build-release): the install takes the two, refuses
/// a jobrun-pg of another build, and refuses such a jobrun alone. A
/// jobrun that serves both stores itself may come alone: the install then
/// takes away the jobrun-pg an earlier one left.
#[test]
fn install_brings_jobrun_pg_along_and_keeps_the_pair_of_one_build() {
    use std::os::unix::fs::PermissionsExt;
    let home = tempfile::tempdir().unwrap();
    let path = std::env::var("PATH").unwrap_or_default();
    let shown = text(&Command::new(BIN).arg("--version").output().unwrap().stdout);
    let shown = shown.trim_end();
    let own = shown.trim_end_matches("; PostgreSQL stores by jobrun-pg");
    let lean = own != shown;
    // A stand-in for jobrun-pg: what --version says is all install.sh asks.
    let dir_with = |name: &str, pg_says: Option<&str>| {
        let d = home.path().join(name);
        fs::create_dir(&d).unwrap();
        fs::copy(BIN, d.join("jobrun")).unwrap();
        if let Some(says) = pg_says {
            fs::write(d.join("jobrun-pg"), format!("#!/bin/sh\necho '{says}'\n")).unwrap();
            fs::set_permissions(d.join("jobrun-pg"), fs::Permissions::from_mode(0o755)).unwrap();
        }
        d.join("jobrun")
    };
    let pair = dir_with("pair", Some(own));
    let odd = dir_with("odd", Some("jobrun 0.0.1 (git 000000000000)"));
    let alone = dir_with("alone", None);
    let prefix = home.path().join("prefix");
    let p = prefix.to_str().unwrap();
    let install = |bin: &Path| {
        install_sh(
            home.path(),
            &path,
            &["--bin", bin.to_str().unwrap(), "--prefix", p],
        )
    };

    let out = install(&pair);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let installed = prefix.join("bin/jobrun-pg");
    let pg_text = fs::read_to_string(pair.with_file_name("jobrun-pg")).unwrap();
    assert_eq!(fs::read_to_string(&installed).unwrap(), pg_text);
    assert_eq!(
        fs::metadata(&installed).unwrap().permissions().mode() & 0o777,
        0o755
    );

    let out = install(&odd);
    let said = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(said.contains("is not of the build of"), "{said}");
    assert_eq!(fs::read_to_string(&installed).unwrap(), pg_text, "{said}");

    let out = install(&alone);
    let said = text(&out.stderr);
    if lean {
        assert_eq!(out.status.code(), Some(1), "{said}");
        assert!(
            said.contains("hands PostgreSQL stores to a jobrun-pg beside it, and there is none"),
            "{said}"
        );
        assert_eq!(fs::read_to_string(&installed).unwrap(), pg_text, "{said}");
    } else {
        assert!(out.status.success(), "{said}");
        assert!(!installed.exists(), "{said}");
        assert!(
            said.contains(&format!(
                "removed {} (installed before, no longer part of jobrun)",
                installed.display()
            )),
            "{said}"
        );
    }
    assert!(prefix.join("bin/jobrun").is_file());
}

/// `upgrade.sh` to the revision the installed jobrun was built from
/// builds nothing, pauses nothing, and leaves the checkout as it was.
#[test]
fn upgrade_to_the_installed_revision_pauses_nothing_and_builds_nothing() {
    let Some(rev) = git_rev() else {
        eprintln!("skipped: not built from a git checkout");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // A checkout of this very tree, with this tree as its upstream.
    let out = Command::new("git")
        .args(["clone", "--quiet", "--shared"])
        .arg(root())
        .arg(d.join("checkout"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let head = |dir: &Path| {
        let o = Command::new("git")
            .args(["rev-parse", "HEAD"])
            .current_dir(dir)
            .output()
            .unwrap();
        text(&o.stdout).trim().to_string()
    };
    let commit = head(root());
    assert!(commit.starts_with(&rev));
    let checkout_head = head(&d.join("checkout"));
    // The installed jobrun, built from that commit.
    fs::create_dir_all(d.join("prefix/bin")).unwrap();
    let bin = d.join("prefix/bin/jobrun");
    fs::copy(BIN, &bin).unwrap();
    // A cargo that notes it was called.
    fs::create_dir(d.join("fakebin")).unwrap();
    let cargo = d.join("fakebin/cargo");
    fs::write(
        &cargo,
        format!(
            "#!/bin/sh\necho \"cargo $*\" >> {}/cargo.log\nexit 101\n",
            d.display()
        ),
    )
    .unwrap();
    fs::set_permissions(&cargo, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    // A store that does not exist: pausing anything would create it.
    let store = d.join("store/jobrun.db");
    let mut c = Command::new("bash");
    for (k, _) in std::env::vars() {
        if k.starts_with("JOBRUN_") || k.starts_with("UPGRADE_") {
            c.env_remove(k);
        }
    }
    let out = c
        .arg(root().join("scripts/upgrade.sh"))
        .arg(&commit)
        .env("UPGRADE_SRC", d.join("checkout"))
        .env("UPGRADE_BIN", &bin)
        .env("JOBRUN_DB", &store)
        .env("PATH", path_with(&d.join("fakebin")))
        .output()
        .unwrap();
    let said = text(&out.stdout) + &text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{said}");
    assert!(
        said.contains(&format!(
            "already at {commit} ({}): nothing to build, nothing paused",
            &commit[..12]
        )),
        "{said}"
    );
    assert!(!d.join("cargo.log").exists(), "built anyway: {said}");
    assert!(
        !store.parent().unwrap().exists(),
        "touched the store: {said}"
    );
    assert_eq!(head(&d.join("checkout")), checkout_head, "{said}");
    assert!(fs::read(&bin).unwrap() == fs::read(BIN).unwrap());
    assert!(!said.contains("detached"), "{said}");
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

/// The example units pass `systemd-analyze verify` exactly as shipped:
/// `/usr/bin/env` finds jobrun on the service's PATH wherever it was
/// installed. The example store is reached over TLS with the server's
/// certificate and host name checked.
#[test]
fn systemd_units_verify_as_shipped() {
    let ex = root().join("scripts/examples");
    let service = fs::read_to_string(ex.join("feeds-poll.service")).unwrap();
    // network-online.target is reached only when something wants it.
    assert!(service.contains("After=network-online.target"));
    assert!(service.contains("Wants=network-online.target"), "{service}");
    assert!(
        service.contains("\nExecStart=/usr/bin/env jobrun run "),
        "{service}"
    );
    if !have("systemd-analyze") {
        eprintln!("skipped: systemd-analyze is not installed; the units were not verified");
        return;
    }
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(ex.join("feeds-poll.service"))
        .arg(ex.join("feeds-poll.timer"))
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
