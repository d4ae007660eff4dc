//! The README is a front page: its first screen says what jobrun is, the
//! problem it solves and how to see it work; the demo it names shows a
//! pass, a second pass skipping, `status` and `history`; the comparison
//! cites the other tools' documentation; the limits name the kernel the
//! code needs; every link between the README and `docs/` leads somewhere;
//! and the PostgreSQL URLs an operator copies check the server.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::{text, without_jobrun_env, BIN};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn readme() -> String {
    fs::read_to_string(root().join("README.md")).unwrap()
}

/// The lines of the `## NAME...` section of a Markdown text.
fn section<'a>(body: &'a str, heading: &str) -> &'a str {
    let start = body
        .find(&format!("\n## {heading}"))
        .unwrap_or_else(|| panic!("no section {heading}"));
    let rest = &body[start + 1..];
    let end = rest[3..].find("\n## ").map_or(rest.len(), |e| e + 4);
    &rest[..end]
}

#[test]
fn readme_first_screen_says_what_it_is_why_and_how_to_see_it() {
    let body = readme();
    let screen: Vec<&str> = body.lines().take(40).collect();
    let screen = screen.join("\n");
    // What it is, in one sentence, right under the title.
    let first = body
        .split("\n\n")
        .nth(1)
        .expect("no paragraph under the title");
    assert!(first.starts_with("jobrun is "), "{first}");
    assert_eq!(
        first.matches(". ").count(),
        0,
        "more than one sentence: {first}"
    );
    for want in ["The problem it solves", "SIGKILL", "flock", "scripts/demo"] {
        assert!(screen.contains(want), "the first 40 lines lack {want:?}");
    }
}

#[test]
fn readme_is_a_front_page() {
    let body = readme();
    let lines = body.lines().count();
    assert!(
        lines <= 200,
        "README.md has {lines} lines: move long sections to docs/ and keep a paragraph and a link"
    );
    let mut at = 0;
    for heading in [
        "## Try it",
        "## Quick start",
        "## Install",
        "## Use it",
        "## Why not flock, run-one or a systemd timer?",
        "## Limits",
        "## When not to use jobrun",
        "## FAQ",
    ] {
        let found = body[at..]
            .find(&format!("\n{heading}"))
            .unwrap_or_else(|| panic!("no {heading} after byte {at}"));
        at += found + 1;
    }
    // The two set-up commands; the test command is exactly what CI runs.
    let try_it = section(&body, "Try it");
    assert!(try_it.contains("    scripts/demo "), "{try_it}");
    assert!(try_it.contains("    scripts/test "), "{try_it}");
    let ci = fs::read_to_string(root().join(".ci/run")).unwrap();
    assert_eq!(ci.lines().last(), Some("scripts/test"));
    // A crontab in a minute: five lines at most.
    let quick = section(&body, "Quick start");
    let code: Vec<&str> = quick.lines().filter(|l| l.starts_with("    ")).collect();
    assert!(!code.is_empty() && code.len() <= 5, "{quick}");
    assert!(code.iter().any(|l| l.contains("* jobrun run ")), "{quick}");
    let faq = section(&body, "FAQ");
    for q in [
        "Why didn't my job run?",
        "Why don't root and I see the same jobs?",
        "I typo'd `--db`.",
    ] {
        assert!(faq.contains(&format!("**{q}**")), "the FAQ lacks {q}");
    }
    assert!(faq.contains("man jobrun"), "{faq}");
    // The 3 a.m. troubleshooting it points to exists in the page.
    let page = fs::read_to_string(root().join("man/jobrun.1")).unwrap();
    assert!(page.contains(".SS 3 a.m.: a job is not running"));
    assert!(faq.contains("3 a.m.: a job is not running"), "{faq}");
    // What bash-completion really finds.
    let install = section(&body, "Install");
    for want in [
        "`~/.local`",
        "`/usr/local`",
        "`/usr`",
        "`~/.bash_completion`",
    ] {
        assert!(
            install.contains(want),
            "the completion paragraph lacks {want}"
        );
    }
}

#[test]
fn comparison_table_covers_each_tool_and_cites_its_documentation() {
    let body = readme();
    let table = section(&body, "Why not flock, run-one or a systemd timer?");
    let rows: Vec<&str> = table.lines().filter(|l| l.starts_with('|')).collect();
    let header = rows.first().expect("no table");
    let columns = header.matches('|').count() - 1;
    assert_eq!(columns, 7, "{header}");
    for tool in [
        "flock -n",
        "run-one",
        "systemd timer",
        "RuntimeMaxSec=",
        "consul lock",
        "etcdctl lock",
        "jobrun",
    ] {
        assert!(header.contains(tool), "no column for {tool}");
    }
    for row in [
        "overlap",
        "dead holder freed",
        "across hosts",
        "history",
        "queue and slots",
        "pause and stop for deploys",
        "monitoring",
    ] {
        let line = rows
            .iter()
            .find(|r| r.starts_with(&format!("| {row} |")))
            .unwrap_or_else(|| panic!("no row {row}"));
        assert_eq!(line.matches('|').count() - 1, columns, "{line}");
    }
    // Every tool but jobrun is linked to its documentation.
    let refs: Vec<(&str, &str)> = table
        .lines()
        .filter_map(|l| l.strip_prefix('['))
        .filter_map(|l| l.split_once("]: "))
        .collect();
    for cell in header
        .split('|')
        .skip(2)
        .filter(|c| !c.trim().is_empty() && !c.contains("jobrun"))
    {
        let label = cell
            .split("][")
            .nth(1)
            .and_then(|l| l.split(']').next())
            .unwrap_or_else(|| panic!("{cell} cites nothing"));
        let url = refs
            .iter()
            .find(|(l, _)| *l == label)
            .unwrap_or_else(|| panic!("no link for [{label}]"))
            .1;
        assert!(url.starts_with("https://"), "{label}: {url}");
    }
    // Every reference used in the table is defined.
    for (i, _) in table.match_indices("][") {
        let label = table[i + 2..].split(']').next().unwrap();
        assert!(refs.iter().any(|(l, _)| *l == label), "[{label}] undefined");
    }
}

/// The Limits section names the oldest kernel whose pidfd calls the code
/// makes (pidfd_send_signal came with Linux 5.1, pidfd_open with 5.3).
#[test]
fn limits_name_the_kernel_the_code_needs() {
    let mut calls = BTreeSet::new();
    let mut dirs = vec![root().join("src")];
    while let Some(d) = dirs.pop() {
        for e in fs::read_dir(d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                dirs.push(p);
            } else if let Ok(body) = fs::read_to_string(&p) {
                // Raw syscalls, or rustix's wrappers of them.
                for (call, names) in [
                    ("pidfd_open", ["SYS_pidfd_open", "process::pidfd_open"]),
                    (
                        "pidfd_send_signal",
                        ["SYS_pidfd_send_signal", "process::pidfd_send_signal"],
                    ),
                    ("pidfd_getfd", ["SYS_pidfd_getfd", "process::pidfd_getfd"]),
                ] {
                    if names.iter().any(|n| body.contains(n)) {
                        calls.insert(call);
                    }
                }
            }
        }
    }
    let needed = calls
        .iter()
        .map(|c| match *c {
            "pidfd_send_signal" => (5, 1),
            "pidfd_open" => (5, 3),
            _ => (5, 6),
        })
        .max()
        .expect("the code makes no pidfd call: say what Linux it needs instead");
    let body = readme();
    let limits = section(&body, "Limits");
    assert!(
        limits.contains(&format!("Linux {}.{} or newer", needed.0, needed.1)),
        "Limits must name Linux {}.{}: {limits}",
        needed.0,
        needed.1
    );
    for want in [
        "/proc",
        "setsid",
        "store per user",
        "lease",
        "PgBouncer",
        "LISTEN",
        "network filesystems",
    ] {
        assert!(limits.contains(want), "Limits lacks {want}");
    }
}

/// A heading's anchor, as GitHub makes it.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            '-' | '_' => Some(c),
            c if c.is_alphanumeric() => Some(c.to_ascii_lowercase()),
            _ => None,
        })
        .collect()
}

fn anchors(body: &str) -> BTreeSet<String> {
    body.lines()
        .filter(|l| l.starts_with('#'))
        .map(|l| slug(l.trim_start_matches('#')))
        .collect()
}

/// The README, the pages under docs/ and the links among them: every
/// relative link names a file that exists, and an anchor a heading of it.
#[test]
fn links_between_the_readme_and_docs_resolve() {
    let mut pages: Vec<PathBuf> = vec![root().join("README.md")];
    for e in fs::read_dir(root().join("docs")).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "md") {
            pages.push(p);
        }
    }
    let mut checked = 0;
    for page in &pages {
        let body = fs::read_to_string(page).unwrap();
        let mut targets = vec![];
        for (i, _) in body.match_indices("](") {
            targets.push(body[i + 2..].split(')').next().unwrap().to_string());
        }
        for l in body.lines() {
            if let Some((_, t)) = l.strip_prefix('[').and_then(|l| l.split_once("]: ")) {
                targets.push(t.to_string());
            }
        }
        for t in targets {
            if t.starts_with("https://") || t.starts_with("http://") {
                continue;
            }
            let (file, anchor) = t.split_once('#').unwrap_or((&t, ""));
            let target = if file.is_empty() {
                page.clone()
            } else {
                page.parent().unwrap().join(file)
            };
            assert!(
                target.exists(),
                "{}: link to {t}: no such file",
                page.display()
            );
            if !anchor.is_empty() {
                let there = fs::read_to_string(&target).unwrap();
                assert!(
                    anchors(&there).contains(anchor),
                    "{}: link to {t}: no such heading",
                    page.display()
                );
            }
            checked += 1;
        }
    }
    assert!(checked >= 15, "only {checked} links");
    // Each page under docs/ is reachable from the README, directly or
    // through the docs index.
    let readme = readme();
    let index = fs::read_to_string(root().join("docs/README.md")).unwrap();
    for page in &pages[1..] {
        let name = page.file_name().unwrap().to_string_lossy();
        if name == "README.md" {
            continue;
        }
        assert!(
            readme.contains(&format!("(docs/{name}")) && index.contains(&format!("({name})")),
            "docs/{name} is not linked from the README and docs/README.md"
        );
    }
}

/// The sections that left the README live on in docs/, under their names.
#[test]
fn moved_sections_live_in_docs() {
    for (page, heading) in [
        ("design.md", "## The rules jobrun keeps"),
        ("design.md", "## Choices where the contract is silent"),
        ("security.md", "# Security model"),
        ("postgres.md", "# A fleet on PostgreSQL"),
        ("architecture.md", "# Architecture"),
        ("benchmarks.md", "# Benchmarks"),
        ("usage.md", "## Settings"),
        ("usage.md", "## Exit codes"),
        ("usage.md", "## Operator commands"),
        ("usage.md", "## Outcomes"),
        ("usage.md", "## status --json"),
        ("usage.md", "## Upgrading"),
    ] {
        let body = fs::read_to_string(root().join("docs").join(page)).unwrap();
        assert!(
            body.lines().any(|l| l == heading),
            "docs/{page} lacks {heading}"
        );
    }
}

/// `scripts/demo` shows the core feature on a throwaway SQLite store: a
/// pass, a second pass skipping while the first holds, `status` naming
/// the live holder, then `history` with both. It waits on FIFOs, not
/// sleeps, and leaves nothing behind.
#[test]
fn demo_shows_a_pass_a_skip_status_and_history() {
    let tmp = tempfile::tempdir().unwrap();
    let mut c = without_jobrun_env(root().join("scripts/demo"));
    let mut child = c
        .args(["--bin", BIN])
        .env("TMPDIR", tmp.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            child.kill().unwrap();
            panic!("scripts/demo did not finish within 60s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    let said = text(&out.stdout);
    assert!(out.status.success(), "{said}{}", text(&out.stderr));
    assert!(out.stderr.is_empty(), "{}", text(&out.stderr));
    let step = |n: &str| {
        said.find(&format!("\n== {n}"))
            .unwrap_or_else(|| panic!("no step {n}: {said}"))
    };
    let (skip, status, history) = (step("2."), step("3."), step("5."));
    assert!(skip < status && status < history, "{said}");
    assert!(
        said[skip..status].contains("demo.report: already running; skipping: held by "),
        "{said}"
    );
    assert!(!said.contains("this line never prints\n"), "{said}");
    let shown = &said[status..history];
    assert!(
        shown.contains("running") && shown.contains("alive: "),
        "{shown}"
    );
    let history = &said[history..];
    for outcome in [" ok ", " skipped "] {
        assert!(history.contains(outcome), "{history}");
    }
    assert!(said.contains("the next pass runs\n"), "{said}");
    assert_eq!(
        fs::read_dir(tmp.path()).unwrap().count(),
        0,
        "the demo left files behind"
    );
    // The scripts/test lint covers scripts/*.sh; the demo is checked here.
    if Command::new("shellcheck").arg("--version").output().is_ok() {
        let out = Command::new("shellcheck")
            .arg(root().join("scripts/demo"))
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", text(&out.stdout));
    }
}

/// Every PostgreSQL URL an operator may copy from the examples or the
/// README checks the server's certificate and name.
#[test]
fn example_postgres_urls_verify_the_server() {
    let mut found = 0;
    let mut bodies = vec![fs::read_to_string(root().join("README.md")).unwrap()];
    for e in fs::read_dir(root().join("scripts/examples")).unwrap() {
        bodies.push(fs::read_to_string(e.unwrap().path()).unwrap());
    }
    for body in &bodies {
        for (i, _) in body.match_indices("postgres://") {
            let url: String = body[i..]
                .chars()
                .take_while(|c| !c.is_whitespace() && !"'\"`".contains(*c))
                .collect();
            if url == "postgres://..." {
                continue;
            }
            found += 1;
            assert!(url.contains("sslmode=verify-full"), "{url}");
        }
    }
    assert!(found >= 1, "no example URL");
}
