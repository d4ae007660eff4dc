//! `jobrun generate`: write the man pages and shell completions from the
//! clap definitions and the code's own tables, so that no page can describe
//! a flag, file, signal, variable, exit code or outcome the binary does not
//! have. The output is committed; a test regenerates it and fails on any
//! difference, and `tests.rs` reads the pages back against those tables.
//!
//! Every page is a `roff::Roff` document, so escaping is the crate's job:
//! `page` lays out what each page shares (clap_mangen's title and NAME, a
//! synopsis of our own, the description, the options with the variable
//! each reads), `reference` builds the sections that restate code (exit
//! status, environment, files, signals, outcomes) from the constants the
//! code uses, and `guide` holds the prose only a page carries (JSON output,
//! examples, troubleshooting). Every page names only pages that exist.

mod guide;
mod page;
mod reference;
#[cfg(test)]
mod tests;
mod text;
mod variables;

use std::fs;
use std::path::Path;

use anyhow::{Context, Result};
use clap::{Command, CommandFactory};
use clap_complete::Shell;

use crate::cli::{Cli, GenerateArgs};

pub fn run(args: &GenerateArgs) -> Result<i32> {
    write_all(&args.man, &args.completions)?;
    Ok(crate::exit::OK)
}

/// The CLI as the man pages show it: the crate's version alone (a page
/// must not change with every commit) and no `help` subcommand (it has no
/// page).
fn documented() -> Command {
    let mut cmd = Cli::command()
        .version(env!("CARGO_PKG_VERSION"))
        .disable_help_subcommand(true);
    cmd.build();
    cmd
}

/// The date every page carries in `.TH`: `man-date` in Cargo.toml's
/// `[package.metadata.jobrun]`, kept beside the version and changed with
/// it, so that the pages stay the same from one build to the next.
fn man_date() -> &'static str {
    const MANIFEST: &str = include_str!("../../../Cargo.toml");
    let mut in_table = false;
    for line in MANIFEST.lines().map(str::trim) {
        if line.starts_with('[') {
            in_table = line == "[package.metadata.jobrun]";
        } else if let Some(value) = line.strip_prefix("man-date").filter(|_| in_table) {
            let value = value.trim_start().trim_start_matches('=').trim();
            return value.trim_matches('"');
        }
    }
    panic!("Cargo.toml has no man-date in [package.metadata.jobrun]")
}

/// Every generated file as (relative name, contents).
pub fn generated() -> Result<Vec<(String, Vec<u8>)>> {
    let root = documented();
    let mut out = vec![("man/jobrun.1".to_string(), page::main_page(&root)?)];
    for sub in text::subcommands(&root) {
        out.push((
            format!("man/{}.1", text::page_name(sub)),
            page::sub_page(&root, sub)?,
        ));
    }
    for (shell, file) in [
        (Shell::Bash, "jobrun.bash"),
        (Shell::Zsh, "_jobrun"),
        (Shell::Fish, "jobrun.fish"),
    ] {
        let mut buf = Vec::new();
        clap_complete::generate(shell, &mut Cli::command(), "jobrun", &mut buf);
        out.push((format!("completions/{file}"), buf));
    }
    Ok(out)
}

fn write_all(man: &Path, completions: &Path) -> Result<()> {
    fs::create_dir_all(man).with_context(|| format!("cannot create {}", man.display()))?;
    fs::create_dir_all(completions)
        .with_context(|| format!("cannot create {}", completions.display()))?;
    for (name, bytes) in generated()? {
        let path = match name.split_once('/') {
            Some(("man", file)) => man.join(file),
            Some((_, file)) => completions.join(file),
            None => continue,
        };
        fs::write(&path, bytes).with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(())
}
