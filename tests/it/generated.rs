//! The committed man pages and completions match what the clap definitions
//! generate now: a flag added without regenerating fails here. The pages
//! are also lint-clean for mandoc at warning level. (That they describe
//! only what the code does is checked in the crate, against its tables:
//! `src/cmd/generate/tests.rs`.)

use std::path::Path;
use std::process::Command;

use crate::support::{text, BIN};

#[test]
fn man_pages_and_completions_are_current() {
    let fresh = tempfile::tempdir().unwrap();
    let man = fresh.path().join("man");
    let comp = fresh.path().join("completions");
    let out = std::process::Command::new(BIN)
        .args(["generate", "--man"])
        .arg(&man)
        .arg("--completions")
        .arg(&comp)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut compared = 0;
    for (dir, committed) in [(&man, root.join("man")), (&comp, root.join("completions"))] {
        for entry in std::fs::read_dir(dir).unwrap() {
            let entry = entry.unwrap();
            let name = entry.file_name();
            let want = std::fs::read(entry.path()).unwrap();
            let have = std::fs::read(committed.join(&name)).unwrap_or_default();
            assert!(
                want == have,
                "{} is stale: run `cargo run -- generate` and commit the result",
                committed.join(&name).display()
            );
            compared += 1;
        }
        // Nothing committed that the generator no longer writes.
        for entry in std::fs::read_dir(&committed).unwrap() {
            let name = entry.unwrap().file_name();
            assert!(
                dir.join(&name).exists(),
                "{} is no longer generated: remove it",
                committed.join(&name).display()
            );
        }
    }
    assert!(compared >= 10, "only {compared} generated files");
}

/// `mandoc -T lint -W warning man/*.1` prints nothing: no unparsable date,
/// no empty paragraph, no macro in the wrong place.
#[test]
fn man_pages_are_lint_clean() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut pages: Vec<_> = std::fs::read_dir(root.join("man"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    pages.sort();
    assert!(pages.len() >= 2, "{pages:?}");
    let out = Command::new("mandoc")
        .args(["-T", "lint", "-W", "warning"])
        .args(&pages)
        .output()
        .expect("mandoc is missing: install Debian's mandoc (scripts/test does)");
    assert!(
        out.status.success() && out.stdout.is_empty() && out.stderr.is_empty(),
        "mandoc -T lint -W warning: {}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
}
