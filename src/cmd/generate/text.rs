//! Roff text as every page writes it: prose with light markup, clap's help
//! text, headings, paragraphs, tagged items and literal blocks. The pages
//! and their generated sections all build on these, and on nothing of
//! each other's.

use clap::Command;
use roff::{bold, italic, roman, Inline, Roff};

/// The subcommands that have a page.
pub fn subcommands(root: &Command) -> impl Iterator<Item = &Command> {
    root.get_subcommands().filter(|s| !s.is_hide_set())
}

pub fn page_name(sub: &Command) -> String {
    format!("jobrun-{}", sub.get_name())
}

/// Text with light markup, for the prose the pages add: `` `--flag` `` in
/// bold, `{PLACEHOLDER}` in italic, the rest as it is (the roff crate
/// escapes it).
pub fn prose(s: &str) -> Vec<Inline> {
    let mut out = Vec::new();
    let mut plain = String::new();
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        let (end, font): (char, fn(String) -> Inline) = match c {
            '`' => ('`', |t| bold(t)),
            '{' => ('}', |t| italic(t)),
            _ => {
                plain.push(c);
                continue;
            }
        };
        if !plain.is_empty() {
            out.push(roman(std::mem::take(&mut plain)));
        }
        let marked: String = chars.by_ref().take_while(|&x| x != end).collect();
        out.push(font(marked));
    }
    if !plain.is_empty() {
        out.push(roman(plain));
    }
    out
}

/// Text from the clap definitions (plain, as `--help` prints it), with the
/// options it names set in bold as the rest of the pages set them.
pub fn help_text(s: &str) -> Vec<Inline> {
    let mut out = Vec::new();
    let mut plain = String::new();
    for (i, word) in s.split(' ').enumerate() {
        if i > 0 {
            plain.push(' ');
        }
        let start = word.find(|c| c != '(').unwrap_or(word.len());
        let (open, rest) = word.split_at(start);
        let end = rest
            .rfind(|c: char| c.is_ascii_alphanumeric())
            .map_or(0, |e| e + 1);
        let (flag, close) = rest.split_at(end);
        let is_flag = flag.starts_with("--") && flag.len() > 2
            || flag.len() == 2
                && flag.starts_with('-')
                && flag[1..].chars().all(char::is_alphabetic);
        if is_flag {
            plain.push_str(open);
            out.push(roman(std::mem::take(&mut plain)));
            out.push(bold(flag));
            plain.push_str(close);
        } else {
            plain.push_str(word);
        }
    }
    if !plain.is_empty() {
        out.push(roman(plain));
    }
    out.retain(|i| !matches!(i, Inline::Roman(t) if t.is_empty()));
    out
}

/// `.SH NAME`, its words unquoted as man(7) writes them.
pub fn heading(r: &mut Roff, name: &str) {
    r.control("SH", name.split(' '));
}

/// `.SS NAME`.
pub fn subheading(r: &mut Roff, name: &str) {
    r.control("SS", name.split(' '));
}

/// A paragraph of prose; the first of a section needs no `.PP`.
pub fn para(r: &mut Roff, s: &str) {
    r.control("PP", []);
    r.text(prose(s));
}

/// A tagged paragraph: `.TP`, the tag, the body.
pub fn item(r: &mut Roff, tag: Vec<Inline>, body: Vec<Inline>) {
    r.control("TP", []);
    r.text(tag);
    r.text(body);
}

/// Lines shown as they are (commands, files, JSON), indented.
pub fn literal(r: &mut Roff, lines: &str) {
    r.control("RS", ["4"]);
    r.control("nf", []);
    for l in lines.lines() {
        r.text([roman(l)]);
    }
    r.control("fi", []);
    r.control("RE", []);
}

/// Title and NAME, as clap_mangen writes them, then our own `sections`,
/// with the roff preamble once.
/// Help text as a sentence: clap's ends without its period.
pub fn sentence(s: &str) -> String {
    if s.is_empty() || s.ends_with('.') {
        s.to_string()
    } else {
        format!("{s}.")
    }
}
