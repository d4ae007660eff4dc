//! The committed man pages and completions match what the clap definitions
//! generate now: a flag added without regenerating fails here.

use std::path::Path;

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
