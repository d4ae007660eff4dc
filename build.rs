//! Stamp `jobrun --version` with the git revision it was built from, so an
//! upgrade can be confirmed: `jobrun 0.1.0 (git 1a2b3c4d5e6f)`. Outside a
//! git checkout of jobrun itself (a source tarball, a vendored copy inside
//! another repository) the version is the crate's alone.

use std::path::Path;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (out.status.success() && !text.is_empty()).then_some(text)
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let here = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_default();
    let ours = git(&["rev-parse", "--show-toplevel"])
        .and_then(|top| Path::new(&top).canonicalize().ok())
        .zip(Path::new(&here).canonicalize().ok())
        .is_some_and(|(top, here)| top == here);
    let rev = if ours {
        git(&["rev-parse", "--short=12", "HEAD"])
    } else {
        None
    };
    if ours {
        // Build again when HEAD moves: a new commit, a checkout, a pull.
        let watch = [
            git(&["rev-parse", "--git-path", "HEAD"]),
            git(&["rev-parse", "--symbolic-full-name", "HEAD"])
                .and_then(|r| git(&["rev-parse", "--git-path", &r])),
            git(&["rev-parse", "--git-path", "packed-refs"]),
        ];
        for path in watch.into_iter().flatten() {
            if Path::new(&path).exists() {
                println!("cargo:rerun-if-changed={path}");
            }
        }
    }
    let suffix = rev.map(|r| format!(" (git {r})")).unwrap_or_default();
    println!("cargo:rustc-env=BUILD_VERSION_SUFFIX={suffix}");
}
