//! What every page shares, laid out from the clap definitions: title and
//! NAME (clap_mangen's), the synopsis, the description, the arguments and
//! options (each with the variable it also reads), and SEE ALSO.

use anyhow::Result;
use clap::{Arg, ArgAction, Command};
use roff::{bold, italic, roman, Inline, Roff};

use super::text::{heading, help_text, item, page_name, para, prose, sentence, subcommands};
use super::{guide, man_date, reference};

fn assemble(cmd: Command, title: &str, sections: &Roff) -> Result<Vec<u8>> {
    let preamble = Roff::new().render();
    let man = clap_mangen::Man::new(cmd)
        .title(title.to_uppercase())
        .date(man_date())
        .source(format!("jobrun {}", env!("CARGO_PKG_VERSION")))
        .manual("User Commands");
    let mut out = Vec::new();
    man.render_title(&mut out)?;
    let mut name = Vec::new();
    man.render_name_section(&mut name)?;
    let rest = sections.render();
    for part in [String::from_utf8_lossy(&name).as_ref(), rest.as_str()] {
        out.extend_from_slice(part.strip_prefix(&preamble).unwrap_or(part).as_bytes());
    }
    Ok(out)
}

/// jobrun(1): the synopsis of every command, and the reference.
pub fn main_page(root: &Command) -> Result<Vec<u8>> {
    let mut r = Roff::new();
    heading(&mut r, "SYNOPSIS");
    let globals = synopsis_globals(root);
    r.text([
        bold("jobrun"),
        roman(" ["),
        bold("-h"),
        roman("|"),
        bold("--version"),
        roman("]"),
    ]);
    for sub in subcommands(root) {
        let mut line = vec![bold("jobrun")];
        line.extend(globals.iter().cloned());
        line.extend([roman(" "), bold(sub.get_name())]);
        let (positional, options) = own_args(sub);
        if !options.is_empty() {
            line.extend([roman(" ["), italic("OPTIONS"), roman("]")]);
        }
        for a in positional {
            line.push(roman(" "));
            line.extend(synopsis_arg(a));
        }
        r.control("br", []);
        r.text(line);
    }
    heading(&mut r, "DESCRIPTION");
    r.text(help_text(crate::cli::INTRO));
    para(&mut r, guide::MAIN_DESCRIPTION);
    options(&mut r, root, None);
    heading(&mut r, "COMMANDS");
    for sub in subcommands(root) {
        let about = sub.get_about().map(|a| a.to_string()).unwrap_or_default();
        item(
            &mut r,
            vec![bold(page_name(sub)), roman("(1)")],
            help_text(&about),
        );
    }
    reference::exit_status(&mut r, None);
    reference::environment(&mut r, root);
    reference::files(&mut r);
    reference::signals(&mut r, root);
    reference::outcomes(&mut r);
    reference::logs(&mut r);
    guide::json_output(&mut r);
    guide::main_examples(&mut r);
    see_also(&mut r, root, "jobrun");
    assemble(root.clone(), "jobrun", &r)
}

/// jobrun-SUB(1).
pub fn sub_page(root: &Command, sub: &Command) -> Result<Vec<u8>> {
    let name = page_name(sub);
    let mut r = Roff::new();
    heading(&mut r, "SYNOPSIS");
    r.text(synopsis(root, sub));
    heading(&mut r, "DESCRIPTION");
    let long = sub.get_long_about().or_else(|| sub.get_about());
    let long = long.map(|a| a.to_string()).unwrap_or_default();
    // The first paragraph is the NAME line; the page goes on from there.
    for (i, p) in long.split("\n\n").skip(1).enumerate() {
        if i > 0 {
            r.control("PP", []);
        }
        r.text(help_text(&p.replace('\n', " ")));
    }
    let sub_name = sub.get_name();
    options(&mut r, sub, reference::db_mode_for(sub_name));
    reference::exit_status(&mut r, Some(sub_name));
    if sub_name == "run" {
        reference::signals(&mut r, root);
        reference::hooks(&mut r);
    }
    if sub_name == "history" {
        reference::outcomes(&mut r);
    }
    guide::sub_examples(&mut r, sub_name);
    see_also(&mut r, root, &name);
    let shown = sub.clone().display_name(name.clone());
    assemble(shown, &name, &r)
}

/// The subcommand's own arguments (not the global ones), split into
/// positional and options, in the order clap keeps them.
fn own_args(sub: &Command) -> (Vec<&Arg>, Vec<&Arg>) {
    sub.get_arguments()
        .filter(|a| !a.is_global_set() && shown(a))
        .partition(|a| a.is_positional())
}

/// Whether an argument appears in a synopsis (help and version do not).
fn shown(a: &Arg) -> bool {
    !a.is_hide_set()
        && !matches!(
            a.get_action(),
            ArgAction::Help | ArgAction::HelpLong | ArgAction::HelpShort | ArgAction::Version
        )
}

fn value_name(a: &Arg) -> String {
    a.get_value_names()
        .and_then(|v| v.first())
        .map(|v| v.to_string())
        .unwrap_or_else(|| a.get_id().to_string().to_uppercase())
}

/// One argument as a synopsis shows it.
fn synopsis_arg(a: &Arg) -> Vec<Inline> {
    let value = value_name(a);
    let optional = !a.is_required_set();
    let mut out = Vec::new();
    if a.is_positional() {
        if a.is_last_set() {
            return vec![
                bold("--"),
                roman(" "),
                italic(value),
                roman(" ["),
                italic("ARGS"),
                roman("...]"),
            ];
        }
        let many = a.get_num_args().is_some_and(|n| n.max_values() > 1);
        if optional {
            out.push(roman("["));
        }
        out.push(italic(value));
        if many {
            out.push(roman("..."));
        }
        if optional {
            out.push(roman("]"));
        }
        return out;
    }
    if optional {
        out.push(roman("["));
    }
    if let Some(s) = a.get_short() {
        out.push(bold(format!("-{s}")));
        if a.get_long().is_some() {
            out.push(roman("|"));
        }
    }
    if let Some(l) = a.get_long() {
        out.push(bold(format!("--{l}")));
    }
    if a.get_action().takes_values() {
        out.extend([roman(" "), italic(value)]);
    }
    if optional {
        out.push(roman("]"));
    }
    out
}

/// ` [--db PATH|URL] [--db-mode MODE]`: the global options, each after a
/// space.
fn synopsis_globals(root: &Command) -> Vec<Inline> {
    let mut out = Vec::new();
    for a in root
        .get_arguments()
        .filter(|a| a.is_global_set() && shown(a))
    {
        out.push(roman(" "));
        out.extend(synopsis_arg(a));
    }
    out
}

/// `jobrun [global options] SUB [options] args`.
fn synopsis(root: &Command, sub: &Command) -> Vec<Inline> {
    let mut line = vec![bold("jobrun")];
    line.extend(synopsis_globals(root));
    line.extend([roman(" "), bold(sub.get_name())]);
    let (positional, options) = own_args(sub);
    for a in options.into_iter().chain(positional) {
        line.push(roman(" "));
        line.extend(synopsis_arg(a));
    }
    line
}

/// The tag of an argument in ARGUMENTS or OPTIONS: `-E, --conflict-exit-code
/// CODE (default: 0)`.
fn tag(a: &Arg) -> Vec<Inline> {
    let mut tag = Vec::new();
    if a.is_positional() {
        tag.extend(synopsis_arg(a));
    } else {
        if let Some(s) = a.get_short() {
            tag.push(bold(format!("-{s}")));
            if a.get_long().is_some() {
                tag.push(roman(", "));
            }
        }
        if let Some(l) = a.get_long() {
            tag.push(bold(format!("--{l}")));
        }
        if a.get_action().takes_values() {
            tag.extend([roman(" "), italic(value_name(a))]);
        }
    }
    let defaults: Vec<String> = a
        .get_default_values()
        .iter()
        .map(|d| d.to_string_lossy().into_owned())
        .collect();
    if a.get_action().takes_values() && !defaults.is_empty() && !a.is_hide_default_value_set() {
        tag.push(roman(format!(" (default: {})", defaults.join(","))));
    }
    tag
}

/// ARGUMENTS and OPTIONS of `cmd`: its own first, then the global ones,
/// then help and version. `db_mode` replaces the help of `--db-mode` on
/// pages where it means something else than "the mode of files created".
fn options(r: &mut Roff, cmd: &Command, db_mode: Option<&str>) {
    let args: Vec<&Arg> = cmd.get_arguments().filter(|a| !a.is_hide_set()).collect();
    let positional: Vec<&Arg> = args.iter().copied().filter(|a| a.is_positional()).collect();
    if !positional.is_empty() {
        heading(r, "ARGUMENTS");
        for a in positional {
            option(r, a, None);
        }
    }
    heading(r, "OPTIONS");
    let rank = |a: &Arg| match (a.is_global_set(), shown(a)) {
        (false, true) => 0,
        (true, true) => 1,
        (_, false) => 2,
    };
    let mut named: Vec<&Arg> = args.into_iter().filter(|a| !a.is_positional()).collect();
    named.sort_by_key(|a| rank(a));
    for a in named {
        let text = (a.get_id() == "db_mode").then_some(db_mode).flatten();
        option(r, a, text);
    }
}

fn option(r: &mut Roff, a: &Arg, help: Option<&str>) {
    let text = help.map(str::to_string).unwrap_or_else(|| {
        a.get_long_help()
            .or_else(|| a.get_help())
            .map(|h| h.to_string())
            .unwrap_or_default()
    });
    let body = help_text(&sentence(&text.replace("\n\n", " ").replace('\n', " ")));
    item(r, tag(a), body);
    if let Some(env) = a.get_env().filter(|_| !a.is_hide_env_set()) {
        r.control("br", []);
        r.text([
            roman("Environment: "),
            bold(env.to_string_lossy().into_owned()),
            roman("."),
        ]);
    }
    let values: Vec<_> = a
        .get_possible_values()
        .into_iter()
        .filter(|v| !v.is_hide_set())
        .collect();
    // A value list of its own only where the values say what they do; a
    // plain list is in the synopsis of the option's values.
    if values.iter().any(|v| v.get_help().is_some()) {
        r.control("RS", []);
        for v in &values {
            let help = v.get_help().map(|h| h.to_string()).unwrap_or_default();
            item(r, vec![bold(v.get_name())], help_text(&sentence(&help)));
        }
        r.control("RE", []);
    } else if !values.is_empty() && a.get_action().takes_values() {
        let names: Vec<&str> = values.iter().map(|v| v.get_name()).collect();
        r.control("br", []);
        r.text(prose(&format!("One of: {}.", names.join(", "))));
    }
}

/// SEE ALSO: every other page of jobrun.
fn see_also(r: &mut Roff, root: &Command, this: &str) {
    heading(r, "SEE ALSO");
    let mut pages = vec!["jobrun".to_string()];
    pages.extend(subcommands(root).map(page_name));
    let mut refs = Vec::new();
    for p in pages.into_iter().filter(|p| p != this) {
        if !refs.is_empty() {
            refs.push(roman(", "));
        }
        refs.extend([bold(p), roman("(1)")]);
    }
    r.text(refs);
}
