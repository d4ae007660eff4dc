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
    link_order(&here);
}

/// In a release build linked by rust-lld (x86_64 Linux, Rust 1.90 and
/// later, no linker of the builder's own), place the functions a pass runs
/// (`link/pass-symbols.txt`, written by `scripts/gen-link-order`) side by
/// side: the kernel maps 64 KiB around each page of code a wrapper
/// touches, so packed code costs each wrapper ~2 MiB less resident memory.
/// Names the list holds that the build lacks are skipped silently (the
/// list is `jobrun`'s, built without the PostgreSQL store: `jobrun-pg`
/// matches what it shares with it). Both binaries get the same flags.
fn link_order(here: &str) {
    let list = Path::new(here).join("link/pass-symbols.txt");
    println!("cargo:rerun-if-changed={}", list.display());
    for var in [
        "RUSTC",
        "RUSTC_LINKER",
        "CARGO_ENCODED_RUSTFLAGS",
        "CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_LINKER",
    ] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    let var = |k: &str| std::env::var(k).unwrap_or_default();
    // A linker of the builder's own: named for the target, for rustc, or
    // chosen by flag (`-C linker=`, `-C link-arg=-fuse-ld=...`).
    let flags = var("CARGO_ENCODED_RUSTFLAGS");
    let own_linker = flags.contains("linker")
        || flags.contains("fuse-ld")
        || !var("RUSTC_LINKER").is_empty()
        || !var("CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_LINKER").is_empty();
    let minor = Command::new(var("RUSTC"))
        .arg("-V")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|v| {
            v.split(['.', ' '])
                .nth(2)
                .and_then(|m| m.parse::<u32>().ok())
        })
        .unwrap_or(0);
    let lld = var("TARGET") == "x86_64-unknown-linux-gnu" && minor >= 90 && !own_linker;
    if var("PROFILE") == "release" && lld && list.exists() {
        println!(
            "cargo:rustc-link-arg-bins=-Wl,--symbol-ordering-file={}",
            list.display()
        );
        println!("cargo:rustc-link-arg-bins=-Wl,--no-warn-symbol-ordering");
    }
    // Relative relocations packed (DT_RELR): the loader reads ~2 KB of them
    // before main instead of 140 KB of RELA entries (6,000 of them), and
    // the executable keeps its randomised address. glibc applies them from
    // 2.36 on; an older loader would refuse the binary, so older build
    // hosts (and cross builds, whose loader is unknown here) link as before.
    let native = var("HOST") == var("TARGET");
    if var("PROFILE") == "release" && lld && native && glibc_at_least(2, 36) {
        println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
}

/// Whether the build host's C library is glibc `major.minor` or later
/// (`getconf GNU_LIBC_VERSION`: "glibc 2.36").
fn glibc_at_least(major: u32, minor: u32) -> bool {
    let Ok(out) = Command::new("getconf").arg("GNU_LIBC_VERSION").output() else {
        return false;
    };
    let text = String::from_utf8_lossy(&out.stdout);
    let Some(version) = text.trim().strip_prefix("glibc ") else {
        return false;
    };
    let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    let found = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    found >= (major, minor)
}
