//! The Debian package an operator installs with `dpkg -i`: it holds the
//! installed tree with a stripped binary, `Depends` computed from the
//! binary's libraries, a changelog, the licences and a copyright file;
//! lintian finds no error or warning in it; and installed, removed and
//! purged in a scratch root with a dpkg database of its own (never this
//! machine's `/usr`), it leaves the system as the README says: the store
//! directory made on install, kept on remove, gone on purge. On a host
//! where dpkg knows jobrun, `upgrade.sh` refuses and names the way.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::{text, BIN};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn have(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Whether this machine can build the package; says why not otherwise.
fn can_package() -> bool {
    for (tool, package) in [("dpkg-deb", "dpkg"), ("dpkg-shlibdeps", "dpkg-dev")] {
        if !have(tool) {
            eprintln!("skipped: {tool} is not installed (Debian's {package} package)");
            return false;
        }
    }
    true
}

/// `scripts/package-deb` of the binary under test, into a temp dir.
fn package() -> (tempfile::TempDir, String) {
    let out_dir = tempfile::tempdir().unwrap();
    let out = Command::new(root().join("scripts/package-deb"))
        .args(["--bin", BIN, "--compress", "gzip", "--out"])
        .arg(out_dir.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let deb = text(&out.stdout).trim().to_string();
    assert!(deb.ends_with(".deb") && Path::new(&deb).is_file(), "{deb}");
    (out_dir, deb)
}

fn field(deb: &str, name: &str) -> String {
    let o = Command::new("dpkg-deb")
        .args(["-f", deb, name])
        .output()
        .unwrap();
    text(&o.stdout).trim().to_string()
}

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .args(args)
        .current_dir(root())
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| text(&out.stdout).trim().to_string())
}

#[test]
fn debian_package_holds_the_installed_tree() {
    if !can_package() {
        return;
    }
    let (_out, deb) = package();
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
        "./usr/share/doc/jobrun/copyright",
        "./usr/share/doc/jobrun/changelog.Debian.gz",
        "./usr/share/doc/jobrun/LICENSE-MIT",
        "./usr/share/doc/jobrun/LICENSE-APACHE",
    ] {
        assert!(
            list.lines().any(|l| l.ends_with(&format!(" {path}"))),
            "{path} not in the package:\n{list}"
        );
    }
    // jobrun built without the PostgreSQL store ships the jobrun-pg it
    // hands that store to, with jobrun's page as its own.
    if Path::new(BIN).with_file_name("jobrun-pg").exists() {
        for path in [
            "./usr/bin/jobrun-pg",
            "./usr/share/man/man1/jobrun-pg.1.gz -> jobrun.1.gz",
        ] {
            assert!(
                list.lines().any(|l| l.ends_with(&format!(" {path}"))),
                "{path} not in the package:\n{list}"
            );
        }
    }
    // /var/lib/jobrun is made by the postinst (see below), so that dpkg
    // neither resets a mode the administrator chose nor warns on remove.
    assert!(!list.contains("./var/"), "{list}");
    assert!(
        list.lines().all(|l| l.contains(" root/root ")),
        "not owned by root:\n{list}"
    );
    assert_eq!(field(&deb, "Package"), "jobrun");
    let version = field(&deb, "Version");
    match (
        git(&["rev-parse", "--short=12", "HEAD"]),
        git(&["rev-list", "--count", "HEAD"]),
    ) {
        (Some(rev), Some(count)) => assert_eq!(
            version,
            format!("{}+git{count}.{rev}-1", env!("CARGO_PKG_VERSION")),
        ),
        _ => assert_eq!(version, format!("{}-1", env!("CARGO_PKG_VERSION"))),
    }
    // Depends as dpkg-shlibdeps computes it: Rust's unwinder needs libgcc_s.
    let depends = field(&deb, "Depends");
    for lib in ["libc6 (>= ", "libgcc-s1"] {
        assert!(depends.contains(lib), "Depends lacks {lib}: {depends}");
    }

    let tree = tempfile::tempdir().unwrap();
    let out = Command::new("dpkg-deb")
        .args(["-x", &deb])
        .arg(tree.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let exe = tree.path().join("usr/bin/jobrun");
    if have("readelf") {
        let out = Command::new("readelf")
            .arg("-S")
            .arg(&exe)
            .output()
            .unwrap();
        let sections = text(&out.stdout);
        for s in [".symtab", ".debug_info", ".comment"] {
            assert!(!sections.contains(s), "{s} left in the binary");
        }
    }
    let run = Command::new(&exe).arg("--version").output().unwrap();
    assert!(text(&run.stdout).starts_with("jobrun "), "stripped too far");
    let doc = tree.path().join("usr/share/doc/jobrun");
    for licence in ["LICENSE-MIT", "LICENSE-APACHE"] {
        assert_eq!(
            fs::read(doc.join(licence)).unwrap(),
            fs::read(root().join(licence)).unwrap(),
            "{licence}"
        );
    }
    let copyright = fs::read_to_string(doc.join("copyright")).unwrap();
    assert!(
        copyright.contains("License: MIT or Apache-2.0")
            && copyright.contains("The jobrun authors"),
        "{copyright}"
    );
    let changelog = Command::new("zcat")
        .arg(doc.join("changelog.Debian.gz"))
        .output()
        .unwrap();
    let changelog = text(&changelog.stdout);
    assert!(
        changelog.starts_with(&format!("jobrun ({version}) ")),
        "{changelog}"
    );
    if have("dpkg-parsechangelog") {
        let file = tree.path().join("changelog");
        fs::write(&file, &changelog).unwrap();
        let out = Command::new("dpkg-parsechangelog")
            .arg("-l")
            .arg(&file)
            .arg("-SVersion")
            .output()
            .unwrap();
        assert_eq!(text(&out.stdout).trim(), version, "{}", text(&out.stderr));
    }

    // lintian reports no error and no warning; its informational tags are
    // explained where the package is built.
    if !have("lintian") {
        eprintln!("skipped: lintian is not installed (Debian's lintian package)");
        return;
    }
    let out = Command::new("lintian")
        .args(["--fail-on", "error,warning", &deb])
        .output()
        .unwrap();
    let said = text(&out.stdout);
    assert!(
        out.status.success()
            && !said
                .lines()
                .any(|l| l.starts_with("E:") || l.starts_with("W:")),
        "lintian:\n{said}{}",
        text(&out.stderr)
    );
}

/// A root of its own for dpkg: an empty dpkg database that knows the
/// packages the binary depends on (as this machine has them), and the
/// few programs the maintainer scripts run in it (dpkg runs them
/// chrooted there).
fn scratch_root(deb: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let r = dir.path();
    for d in [
        "var/lib/dpkg/info",
        "var/lib/dpkg/updates",
        "var/lib/dpkg/triggers",
        "tmp",
    ] {
        fs::create_dir_all(r.join(d)).unwrap();
    }
    fs::write(r.join("var/lib/dpkg/available"), "").unwrap();
    let depends = field(deb, "Depends");
    let names: Vec<&str> = depends
        .split(',')
        .map(|d| d.split_whitespace().next().unwrap())
        .collect();
    let out = Command::new("dpkg-query")
        .arg("-s")
        .args(&names)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    fs::write(r.join("var/lib/dpkg/status"), &out.stdout).unwrap();
    let arch = text(
        &Command::new("dpkg")
            .arg("--print-architecture")
            .output()
            .unwrap()
            .stdout,
    );
    for n in &names {
        // An empty file list: dpkg then knows they own nothing here.
        fs::write(
            r.join(format!("var/lib/dpkg/info/{n}:{}.list", arch.trim())),
            "",
        )
        .unwrap();
    }
    for tool in ["sh", "mkdir", "rm"] {
        let path = PathBuf::from(format!("/bin/{tool}"));
        copy_into(r, &path);
        let ldd = Command::new("ldd").arg(&path).output().unwrap();
        for lib in text(&ldd.stdout)
            .split_whitespace()
            .filter(|w| w.starts_with('/'))
        {
            copy_into(r, Path::new(lib));
        }
    }
    dir
}

/// Copy `path` (a file of this machine) to the same path under `root`, as
/// a real directory chain (this machine's `/bin` may be a link to `usr/bin`;
/// the scratch root's `/usr` is the package's alone).
fn copy_into(root: &Path, path: &Path) {
    let to = root.join(path.strip_prefix("/").unwrap());
    fs::create_dir_all(to.parent().unwrap()).unwrap();
    if !to.exists() {
        fs::copy(path, &to).unwrap();
    }
}

/// Every path under `root` (but dpkg's own database) with its type and
/// mode, owner and, for files, content length.
fn snapshot(root: &Path) -> BTreeMap<String, String> {
    let mut all = BTreeMap::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
            if rel == "var/lib/dpkg" {
                continue;
            }
            let m = fs::symlink_metadata(&p).unwrap();
            let kind = if m.is_dir() {
                dirs.push(p.clone());
                "dir".to_string()
            } else {
                format!("{} bytes", m.len())
            };
            all.insert(
                rel,
                format!("{kind} {:o} {}:{}", m.mode() & 0o7777, m.uid(), m.gid()),
            );
        }
    }
    all
}

fn dpkg(root: &Path, args: &[&str]) -> String {
    let out = Command::new("dpkg")
        .arg(format!("--root={}", root.display()))
        .args(args)
        .env_remove("DPKG_ADMINDIR")
        .output()
        .unwrap();
    let said = text(&out.stdout) + &text(&out.stderr);
    assert!(out.status.success(), "dpkg {args:?}: {said}");
    said
}

fn status_of(root: &Path) -> String {
    let out = Command::new("dpkg-query")
        .arg(format!(
            "--admindir={}",
            root.join("var/lib/dpkg").display()
        ))
        .args(["-W", "-f=${Status}", "jobrun"])
        .output()
        .unwrap();
    text(&out.stdout).trim().to_string()
}

#[test]
fn debian_package_installs_removes_and_purges_as_documented() {
    if !can_package() {
        return;
    }
    // dpkg --root chroots into the scratch root to run the maintainer
    // scripts, which only root may do.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: installing into a scratch root needs root (dpkg chroots there)");
        return;
    }
    let (_out, deb) = package();
    let scratch = scratch_root(&deb);
    let r = scratch.path();
    let before = snapshot(r);

    let said = dpkg(r, &["-i", &deb]);
    assert!(!said.contains("warning"), "{said}");
    assert_eq!(status_of(r), "install ok installed");
    let exe = r.join("usr/bin/jobrun");
    let run = Command::new(&exe).arg("--version").output().unwrap();
    assert!(
        text(&run.stdout).starts_with("jobrun "),
        "{}",
        text(&run.stderr)
    );
    for f in [
        "usr/share/man/man1/jobrun.1.gz",
        "usr/share/doc/jobrun/copyright",
    ] {
        assert!(r.join(f).is_file(), "{f}");
    }
    // root's store directory: made by the postinst, 0700, root's.
    let var = r.join("var/lib/jobrun");
    let m = fs::metadata(&var).unwrap();
    assert!(
        m.is_dir() && m.uid() == 0 && m.mode() & 0o7777 == 0o700,
        "{m:?}"
    );
    // A store in it, as root's passes leave one.
    let store = var.join("jobrun.db");
    let out = Command::new(&exe)
        .arg("--db")
        .arg(&store)
        .args(["run", "feeds.poll", "--", "true"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));

    // Reinstalling (an upgrade does the same) keeps the store and the mode
    // the administrator gave the directory.
    fs::set_permissions(&var, fs::Permissions::from_mode(0o750)).unwrap();
    dpkg(r, &["-i", &deb]);
    assert_eq!(fs::metadata(&var).unwrap().mode() & 0o7777, 0o750);
    assert!(store.is_file());

    // upgrade.sh refuses a jobrun that dpkg knows, in one line naming the
    // way, before it touches anything.
    let nowhere = scratch.path().join("tmp/no-store/jobrun.db");
    let out = Command::new("bash")
        .arg(root().join("scripts/upgrade.sh"))
        .env("DPKG_ADMINDIR", r.join("var/lib/dpkg"))
        .env("UPGRADE_BIN", &exe)
        .env("UPGRADE_SRC", root())
        .env("JOBRUN_DB", &nowhere)
        .output()
        .unwrap();
    let said = text(&out.stdout) + &text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert_eq!(said.lines().count(), 1, "{said}");
    assert!(
        said.contains("scripts/package-deb") && said.contains("dpkg -i"),
        "{said}"
    );
    assert!(!nowhere.parent().unwrap().exists(), "{said}");

    // Remove: the package's files go, the store stays.
    dpkg(r, &["-r", "jobrun"]);
    assert_eq!(status_of(r), "deinstall ok config-files");
    let mut kept = snapshot(r);
    let stores: Vec<String> = kept
        .keys()
        .filter(|k| k.starts_with("var/lib/jobrun"))
        .cloned()
        .collect();
    assert!(
        stores.contains(&"var/lib/jobrun/jobrun.db".to_string()),
        "{stores:?}"
    );
    for k in &stores {
        kept.remove(k);
    }
    assert_eq!(
        kept, before,
        "remove left something behind, or took too much"
    );

    // Purge: the store directory goes too, and nothing else is left.
    dpkg(r, &["-P", "jobrun"]);
    assert_eq!(snapshot(r), before, "purge left something behind");
    assert!(status_of(r).is_empty() || status_of(r).ends_with("not-installed"));
}
