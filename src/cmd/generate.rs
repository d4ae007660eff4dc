//! `jobrun generate`: write the man pages and shell completions from the
//! clap definitions, so they can never describe flags that do not exist. The
//! output is committed; a test regenerates it and fails on any difference.

use std::fs;
use std::path::Path;

use anyhow::{Context, Result};
use clap::CommandFactory;
use clap_complete::Shell;

use crate::cli::{Cli, GenerateArgs};

pub fn run(args: &GenerateArgs) -> Result<i32> {
    write_all(&args.man, &args.completions)?;
    Ok(crate::exit::OK)
}

/// Every generated file as (relative name, contents).
pub fn generated() -> Result<Vec<(String, Vec<u8>)>> {
    let mut out = Vec::new();
    let cmd = Cli::command();
    let mut page = Vec::new();
    clap_mangen::Man::new(cmd.clone()).render(&mut page)?;
    out.push(("man/jobrun.1".to_string(), page));
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        let name = format!("jobrun-{}", sub.get_name());
        let sub = sub
            .clone()
            .name(clap::builder::Str::from(name.clone().leak() as &'static str));
        let mut page = Vec::new();
        clap_mangen::Man::new(sub).render(&mut page)?;
        out.push((format!("man/{name}.1"), page));
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
