//! The committed pages, read back as a reader sees them, against the code's
//! own tables: every exit code, variable, file, signal and outcome a page
//! names anywhere (not only in its own section) must be one the code has,
//! and each section must list all of them. The drift test in
//! `tests/it/generated.rs` keeps the committed pages equal to what the
//! generator writes now, so between them a page cannot describe what the
//! binary does not do.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use clap::Command;

use super::reference::{
    file_entries, option_variables, signal_groups, signal_name, COMMAND_VARIABLES, HOOK_VARIABLES,
    PASS, READERS, SETTING_VARIABLES, STORE,
};
use super::text::{page_name, subcommands};
use super::{documented, man_date};
use crate::exit::{self, Status, TABLE};
use crate::model::State;
use crate::policy::outcome::Outcome;
use crate::spawn::{takes_over, FORWARDED};
use crate::supervise::{classify, SignalKind};

/// What a failure may only need.
const REGENERATE: &str = " (if the page is only stale: cargo run -- generate)";

/// A `.TP` entry: its tag and body, as text.
#[derive(Debug, Clone)]
struct Entry {
    tag: String,
    body: String,
}

/// A `.SH` section: its entries, and all its text.
#[derive(Debug, Clone, Default)]
struct Section {
    name: String,
    entries: Vec<Entry>,
    text: String,
}

/// A page as a reader sees it: its sections, unescaped.
#[derive(Debug)]
struct Page {
    file: String,
    th: String,
    sections: Vec<Section>,
}

impl Page {
    fn section(&self, name: &str) -> &Section {
        self.sections
            .iter()
            .find(|s| s.name == name)
            .unwrap_or_else(|| panic!("{} has no {name} section", self.file))
    }

    fn text(&self) -> String {
        self.sections
            .iter()
            .map(|s| s.text.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// Roff text as printed: escapes resolved, fonts dropped.
fn unescape(line: &str) -> String {
    let mut out = String::new();
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('f') => {
                chars.next();
            }
            Some('&') => {}
            Some('e') | Some('\\') => out.push('\\'),
            Some('*') => {
                let name: String = chars.by_ref().skip(1).take(2).collect();
                assert_eq!(name, "Aq", "unknown string \\*({name} in {line:?}");
                out.push('\'');
            }
            Some('(') => {
                let glyph: String = chars.by_ref().take(2).collect();
                out.push_str(if glyph == "bu" { "*" } else { "?" });
            }
            Some(other) => out.push(other),
            None => {}
        }
    }
    out
}

/// The arguments of a control line, unquoted.
fn control_args(rest: &str) -> String {
    unescape(rest.trim().trim_matches('"'))
}

fn parse(file: &str, roff: &str) -> Page {
    let mut sections: Vec<Section> = Vec::new();
    let mut th = String::new();
    // Where text lines go: the tag of a fresh `.TP`, its body, or the
    // section's running text.
    #[derive(PartialEq)]
    enum At {
        Text,
        Tag,
        Body,
    }
    let mut at = At::Text;
    for line in roff.lines() {
        if let Some(control) = line.strip_prefix('.') {
            let (name, rest) = control.split_once(' ').unwrap_or((control, ""));
            match name {
                "TH" => th = rest.to_string(),
                "SH" => {
                    sections.push(Section {
                        name: control_args(rest),
                        ..Section::default()
                    });
                    at = At::Text;
                }
                "TP" => at = At::Tag,
                "B" | "I" if at == At::Tag => {
                    let s = sections.last_mut().expect("text before .SH");
                    let tag = control_args(rest);
                    s.text.push_str(&format!("{tag}\n"));
                    s.entries.push(Entry {
                        tag,
                        body: String::new(),
                    });
                    at = At::Body;
                }
                "br" => {}
                _ => at = At::Text,
            }
            continue;
        }
        let Some(s) = sections.last_mut() else {
            continue;
        };
        let text = unescape(line);
        s.text.push_str(&text);
        s.text.push('\n');
        match at {
            At::Tag => {
                s.entries.push(Entry {
                    tag: text,
                    body: String::new(),
                });
                at = At::Body;
            }
            At::Body => {
                let e = s.entries.last_mut().unwrap();
                if !e.body.is_empty() {
                    e.body.push(' ');
                }
                e.body.push_str(&text);
            }
            At::Text => {}
        }
    }
    Page {
        file: file.to_string(),
        th,
        sections,
    }
}

fn man_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("man")
}

/// Every committed page.
fn pages() -> Vec<Page> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(man_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    files
        .iter()
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            parse(&name, &std::fs::read_to_string(p).unwrap())
        })
        .collect()
}

fn page(name: &str) -> Page {
    let file = format!("{name}.1");
    parse(
        &file,
        &std::fs::read_to_string(man_dir().join(&file)).unwrap(),
    )
}

/// The words of a text, split at whitespace, without the punctuation
/// around them.
fn words(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| c.is_whitespace() || "(),;\"'[]".contains(c))
        .map(|w| w.trim_end_matches(['.', ':']))
        .filter(|w| !w.is_empty())
}

#[test]
fn every_page_there_is_and_no_other() {
    let root = documented();
    let mut want: Vec<String> = vec!["jobrun.1".into()];
    want.extend(subcommands(&root).map(|s| format!("{}.1", page_name(s))));
    want.sort();
    let have: Vec<String> = pages().into_iter().map(|p| p.file).collect();
    assert_eq!(have, want);
}

/// `.TH` carries the fixed date of Cargo.toml, a real one.
#[test]
fn every_page_carries_the_fixed_date() {
    let date = man_date();
    let parts: Vec<u32> = date.split('-').map(|p| p.parse().unwrap()).collect();
    let [year, month, day] = parts[..] else {
        panic!("man-date {date:?} is not YYYY-MM-DD")
    };
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let days = [
        31,
        if leap { 29 } else { 28 },
        31,
        30,
        31,
        30,
        31,
        31,
        30,
        31,
        30,
        31,
    ];
    assert!(
        (2024..3000).contains(&year)
            && (1..=12).contains(&month)
            && (1..=days[month as usize - 1]).contains(&day),
        "man-date {date:?} is not a date"
    );
    for p in pages() {
        let fields: Vec<&str> = p.th.split(' ').collect();
        assert_eq!(fields.get(2), Some(&date), "{}: .TH {}", p.file, p.th);
    }
}

/// EXIT STATUS of jobrun(1) is `exit::TABLE`, whole and in order; a
/// command's page lists only statuses of the table; and wherever a page
/// says "exit N" or "exits N", N is a code jobrun can return.
#[test]
fn exit_codes_are_the_exit_table() {
    let main = page("jobrun");
    let listed: Vec<(String, String)> = main
        .section("EXIT STATUS")
        .entries
        .iter()
        .map(|e| (e.tag.clone(), e.body.clone()))
        .collect();
    let table: Vec<(String, String)> = TABLE
        .iter()
        .map(|(s, when)| (s.label(), format!("When {when}.")))
        .collect();
    assert_eq!(
        listed, table,
        "EXIT STATUS of jobrun(1) is not exit::TABLE{REGENERATE}"
    );
    // The table holds every code of its own.
    let codes: BTreeSet<i32> = TABLE
        .iter()
        .filter_map(|(s, _)| match s {
            Status::Code(c) => Some(*c),
            _ => None,
        })
        .collect();
    for c in [
        exit::OK,
        exit::INCOMPLETE,
        exit::JOBRUN_FAILED,
        exit::CANNOT_EXECUTE,
        exit::NOT_FOUND,
    ] {
        assert!(codes.contains(&c), "exit::TABLE lacks {c}");
    }
    let labels: Vec<String> = TABLE.iter().map(|(s, _)| s.label()).collect();
    let root = documented();
    for sub in subcommands(&root) {
        let p = page(&page_name(sub));
        let entries = &p.section("EXIT STATUS").entries;
        assert!(!entries.is_empty(), "{}", p.file);
        for e in entries {
            assert!(
                labels.contains(&e.tag),
                "{}: exit status {:?}",
                p.file,
                e.tag
            );
        }
    }
    // Codes jobrun returns: its own, and 128+N for the signals it
    // forwards, sends (KILL) or dies of (PIPE, operator commands).
    let mut allowed: BTreeSet<String> = codes.iter().map(|c| c.to_string()).collect();
    allowed.insert(exit::CONFLICT_DEFAULT.to_string());
    allowed.insert(format!("{}+N", exit::SIGNAL_BASE));
    for s in FORWARDED.iter().chain(&[libc::SIGKILL, libc::SIGPIPE]) {
        allowed.insert((exit::SIGNAL_BASE + s).to_string());
    }
    for p in pages() {
        let text = p.text();
        let w: Vec<&str> = words(&text).collect();
        for pair in w.windows(2) {
            let said = matches!(pair[0], "exit" | "exits" | "exited" | "Exit");
            let code = pair[1];
            if said && code.starts_with(|c: char| c.is_ascii_digit()) {
                assert!(
                    allowed.contains(code),
                    "{}: {} {code} is no code of jobrun",
                    p.file,
                    pair[0]
                );
            }
        }
    }
}

/// Every variable jobrun reads or sets, from the clap definitions and the
/// constants the code reads them with.
fn variables(root: &Command) -> Vec<String> {
    let mut vars: Vec<String> = option_variables(root).into_iter().map(|(e, _)| e).collect();
    vars.extend(SETTING_VARIABLES.iter().map(|(e, _)| e.to_string()));
    vars.extend(COMMAND_VARIABLES.iter().map(|(e, _)| e.to_string()));
    vars.extend(HOOK_VARIABLES.iter().map(|(e, _)| e.to_string()));
    vars
}

/// LOGS in jobrun(1) lists every level with its journal priority.
#[test]
fn logs_are_report_levels() {
    let have: Vec<(String, String)> = page("jobrun")
        .section("LOGS")
        .entries
        .iter()
        .map(|e| (e.tag.clone(), e.body.clone()))
        .collect();
    let want: Vec<(String, String)> = crate::report::Level::ALL
        .iter()
        .map(|l| {
            (
                format!("{} <{}>", l.as_str(), l.priority()),
                l.meaning().to_string(),
            )
        })
        .collect();
    assert_eq!(have, want, "LOGS is not report::Level::ALL{REGENERATE}");
}

/// HOOKS in jobrun-run(1) lists what a hook sees, and which outcomes fire
/// which hook, from `Outcome::ended_badly`.
#[test]
fn hooks_are_what_the_hook_module_does() {
    let hooks = page("jobrun-run").section("HOOKS").clone();
    let tags: Vec<&str> = hooks.entries.iter().map(|e| e.tag.as_str()).collect();
    let want: Vec<&str> = HOOK_VARIABLES.iter().map(|(e, _)| *e).collect();
    assert_eq!(tags, want, "HOOKS{REGENERATE}");
    let text = hooks.text.replace('\n', " ");
    let bad = text.split("after one that ended ").nth(1).unwrap();
    let bad = &bad[..bad.find('.').unwrap()];
    for o in Outcome::ALL {
        assert_eq!(
            words(bad).any(|w| w == o.as_str()),
            o.ended_badly(),
            "HOOKS: {o:?}{REGENERATE}"
        );
    }
}

/// ENVIRONMENT lists every variable, once; every `JOBRUN_*` any page names
/// is one of them; and each option's entry names its variable.
#[test]
fn environment_is_every_variable_jobrun_reads_or_sets() {
    let root = documented();
    let vars = variables(&root);
    // The clap definitions, walked apart from the generator's own walk.
    let mut from_clap = BTreeSet::new();
    let mut cmds = vec![&root];
    while let Some(c) = cmds.pop() {
        cmds.extend(c.get_subcommands());
        for a in c.get_arguments() {
            if let Some(e) = a.get_env() {
                from_clap.insert(e.to_string_lossy().into_owned());
            }
        }
    }
    let listed: Vec<String> = page("jobrun")
        .section("ENVIRONMENT")
        .entries
        .iter()
        .map(|e| e.tag.clone())
        .collect();
    assert_eq!(
        listed, vars,
        "ENVIRONMENT of jobrun(1) is not what the code reads and sets{REGENERATE}"
    );
    let unique: BTreeSet<&String> = vars.iter().collect();
    assert_eq!(unique.len(), vars.len(), "a variable twice: {vars:?}");
    for e in &from_clap {
        assert!(vars.contains(e), "ENVIRONMENT lacks {e}");
    }
    for p in pages() {
        for w in words(&p.text()) {
            let name = w.split('=').next().unwrap();
            if name.starts_with("JOBRUN_") {
                assert!(
                    vars.iter().any(|v| v == name),
                    "{}: {name} is read by nothing",
                    p.file
                );
            }
        }
    }
    // Every option says which variable sets it (clap_mangen 0.3 stopped).
    for sub in subcommands(&root) {
        let p = page(&page_name(sub));
        let options = p.section("OPTIONS");
        for a in sub.get_arguments().filter(|a| !a.is_positional()) {
            let Some(env) = a.get_env() else { continue };
            let long = format!("--{}", a.get_long().unwrap());
            let entry = options
                .entries
                .iter()
                .find(|e| e.tag.split([' ', ',']).any(|w| w == long))
                .unwrap_or_else(|| panic!("{}: no {long}", p.file));
            let want = format!("Environment: {}.", env.to_string_lossy());
            assert!(
                entry.body.contains(&want),
                "{}: {long}: {}",
                p.file,
                entry.body
            );
        }
    }
}

/// A FILES path with its stand-ins replaced.
fn instance(pattern: &str, store: &str, pass: &str) -> String {
    pattern.replace(STORE, store).replace(PASS, pass)
}

/// FILES lists the paths the code builds: each pattern, filled in, is what
/// the code itself makes of a store and a pass id; and any page naming a
/// store, lock, wake or SQLite file names one of them.
#[test]
fn files_are_the_paths_the_code_builds() {
    use crate::store::StoreSpec;
    let entries = file_entries();
    let listed: Vec<String> = page("jobrun")
        .section("FILES")
        .entries
        .iter()
        .map(|e| e.tag.clone())
        .collect();
    let patterns: Vec<String> = entries.iter().map(|(p, _)| p.join(", ")).collect();
    assert_eq!(
        listed, patterns,
        "FILES of jobrun(1) is not the paths the code builds{REGENERATE}"
    );
    let all: Vec<&String> = entries.iter().flat_map(|(p, _)| p).collect();
    let find = |end: &str| {
        all.iter()
            .find(|p| p.starts_with(STORE) && p.ends_with(end))
            .unwrap_or_else(|| panic!("FILES has no STORE...{end}"))
            .to_string()
    };
    // What the code makes of a store at /srv/s.db and pass 3f2a9c0b11de.
    let (store, pass) = ("/srv/s.db", "3f2a9c0b11de");
    let spec = StoreSpec::Sqlite(PathBuf::from(store), 0o600);
    let holders = spec.lock_dir().unwrap();
    assert_eq!(
        format!("{}/", holders.display()),
        instance(&find("/"), store, pass)
    );
    let lock = crate::cmd::evidence(&spec).lock_of(pass).unwrap();
    assert_eq!(
        lock.display().to_string(),
        instance(&find(crate::files::HOLDER_LOCK_SUFFIX), store, pass)
    );
    let wake_dir = crate::cmd::run::wake::dir(&spec).unwrap();
    let wake = crate::cmd::run::wake::file_of(&wake_dir, pass).unwrap();
    assert_eq!(
        wake.display().to_string(),
        instance(
            &find(&format!(
                "holders/{PASS}{}",
                crate::cmd::run::wake::WAKE_SUFFIX
            )),
            store,
            pass
        )
    );
    for side in crate::store::sqlite::SIDE_FILES {
        assert!(
            all.contains(&&format!("{STORE}{side}")),
            "FILES lacks {side}"
        );
    }
    // This user's default store is one FILES names.
    let default = crate::settings::store(None, None).unwrap().spec;
    let StoreSpec::Sqlite(default, _) = default else {
        panic!("the default store is SQLite")
    };
    let home = std::env::var("HOME").unwrap_or_default();
    let state_home = std::env::var("XDG_STATE_HOME")
        .ok()
        .filter(|d| d.starts_with('/'))
        .unwrap_or(format!("{home}/{}", crate::settings::STATE_HOME_DEFAULT));
    let named = all
        .iter()
        .any(|p| Path::new(&p.replace("$XDG_STATE_HOME", &state_home)) == default);
    assert!(named, "FILES does not name {}", default.display());
    // Anywhere in the pages: a file of a store, a lock, a wake file or a
    // wake directory is a FILES path (a default store, as it is or with
    // its fallback), or one of SQLite's suffixes alone.
    let mut known: BTreeSet<String> = all.iter().map(|p| p.to_string()).collect();
    known.extend(
        crate::store::sqlite::SIDE_FILES
            .iter()
            .map(|s| s.to_string()),
    );
    known.insert(format!(
        "~/{}/{}",
        crate::settings::STATE_HOME_DEFAULT,
        crate::settings::USER_DB
    ));
    let kinds = [
        ".db", ".lock", ".wake", ".holders", "wake.d", "-wal", "-shm",
    ];
    for p in pages() {
        for w in words(&p.text()) {
            let path = w.split_once('=').map_or(w, |(_, v)| v);
            if kinds.iter().any(|k| path.contains(k)) && !path.starts_with("--") {
                assert!(
                    known.contains(path),
                    "{}: {path} is no file jobrun makes or uses",
                    p.file
                );
            }
        }
    }
}

/// SIGNALS says, for every signal `supervise` forwards, what `classify`
/// makes of it; no page names a signal jobrun neither handles nor sends.
#[test]
fn signals_are_what_supervise_does() {
    let forwarded: BTreeSet<String> = FORWARDED.iter().map(|s| signal_name(*s)).collect();
    let kill = signal_name(libc::SIGKILL);
    let pipe = signal_name(libc::SIGPIPE);
    for name in ["jobrun", "jobrun-run"] {
        let p = page(name);
        let signals = p.section("SIGNALS");
        let mut documented = BTreeSet::new();
        for e in &signals.entries {
            let sigs: Vec<&str> = e.tag.split(", ").collect();
            if sigs == [kill.as_str()] {
                continue;
            }
            let kinds: BTreeSet<String> = sigs
                .iter()
                .map(|n| {
                    let s = FORWARDED
                        .iter()
                        .find(|s| signal_name(**s) == *n)
                        .unwrap_or_else(|| panic!("{}: {n} is not forwarded", p.file));
                    format!("{:?}", classify(*s))
                })
                .collect();
            assert_eq!(kinds.len(), 1, "{}: {} mixes kinds", p.file, e.tag);
            let s = FORWARDED
                .iter()
                .find(|s| signal_name(**s) == sigs[0])
                .unwrap();
            let kind = classify(*s);
            let says = |w: &str| e.body.contains(w);
            assert_eq!(
                says("--kill-after"),
                kind == SignalKind::Stop { grace: true },
                "{}: {}: {}",
                p.file,
                e.tag,
                e.body
            );
            assert_eq!(
                says("Stops the pass"),
                matches!(kind, SignalKind::Stop { .. }),
                "{}: {}",
                p.file,
                e.tag
            );
            // Without a KILL to follow, a command that handles the signal
            // keeps its pass going: the page must not promise a stop.
            assert_eq!(
                says("handles it and runs on"),
                kind == SignalKind::Stop { grace: false },
                "{}: {}: {}",
                p.file,
                e.tag,
                e.body
            );
            assert!(says("Forwarded"), "{}: {}", p.file, e.tag);
            documented.extend(sigs.iter().map(|s| s.to_string()));
        }
        assert_eq!(
            documented, forwarded,
            "{}: SIGNALS is not spawn::FORWARDED{REGENERATE}",
            p.file
        );
        assert!(
            signals.entries.iter().any(|e| e.tag == kill),
            "{}: no {kill}",
            p.file
        );
        // The outcome follows how the command ended (pass::run_child): a
        // handled stop is judged by its exit status.
        let text = signals.text.replace('\n', " ");
        for o in [Outcome::Ok, Outcome::Failed, Outcome::Stopped] {
            assert!(text.contains(o.as_str()), "{}: SIGNALS lacks {o:?}", p.file);
        }
        assert!(text.contains("handles it and exits is recorded by its exit status"));
        assert!(text.contains("only when the command dies of the forwarded signal"));
        // The one exception (spawn::takes_over): what the caller ignored
        // stays ignored, but TERM.
        let exception = text
            .split("One exception: ")
            .nth(1)
            .and_then(|t| t.split(" stays ignored").next())
            .unwrap_or_else(|| panic!("{}: SIGNALS lacks the exception", p.file));
        for s in FORWARDED {
            let n = signal_name(s);
            assert_eq!(
                exception.contains(&n),
                !takes_over(s, true),
                "{}: {n} in {exception:?}",
                p.file
            );
            if takes_over(s, true) {
                assert!(text.contains(&format!("{n} is always handled and forwarded")));
            }
        }
    }
    assert_eq!(
        page("jobrun").section("SIGNALS").text,
        page("jobrun-run").section("SIGNALS").text
    );
    // No page names any other signal.
    let mut named = forwarded.clone();
    named.insert(kill);
    named.insert(pipe);
    let every: Vec<String> = nix::sys::signal::Signal::iterator()
        .map(|s| s.as_str().trim_start_matches("SIG").to_string())
        .collect();
    for p in pages() {
        for w in words(&p.text()) {
            let bare = w.trim_start_matches("SIG");
            if every.iter().any(|s| s == bare) && (w.starts_with("SIG") || w == bare) {
                assert!(named.contains(bare), "{}: names signal {w}", p.file);
            }
        }
    }
    // And the groups cover FORWARDED exactly once.
    let grouped: Vec<i32> = signal_groups().into_iter().flat_map(|(_, s)| s).collect();
    assert_eq!(grouped.len(), FORWARDED.len());
}

/// OUTCOMES is `Outcome::ALL` with each meaning, on jobrun(1) and
/// jobrun-history(1); JSON OUTPUT and `history --outcome` list them all.
#[test]
fn outcomes_are_outcome_all() {
    let want: Vec<(String, String)> = Outcome::ALL
        .iter()
        .map(|o| (o.as_str().to_string(), o.meaning().to_string()))
        .collect();
    for name in ["jobrun", "jobrun-history"] {
        let have: Vec<(String, String)> = page(name)
            .section("OUTCOMES")
            .entries
            .iter()
            .map(|e| (e.tag.clone(), e.body.clone()))
            .collect();
        assert_eq!(
            have, want,
            "{name}: OUTCOMES is not Outcome::ALL{REGENERATE}"
        );
    }
    let json = page("jobrun")
        .section("JSON OUTPUT")
        .text
        .replace('\n', " ");
    let states = json.split("state is ").nth(1).unwrap();
    let states = &states[..states.find(';').unwrap()];
    for s in State::ALL {
        assert!(
            words(states).any(|w| w == s.as_str()),
            "JSON OUTPUT lacks state {s:?}"
        );
    }
    let outcomes = json.split("outcome is ").nth(1).unwrap();
    let outcomes = &outcomes[..outcomes.find('(').unwrap()];
    let listed: Vec<&str> = words(outcomes).filter(|w| *w != "or").collect();
    let all: Vec<&str> = Outcome::ALL.iter().map(|o| o.as_str()).collect();
    assert_eq!(listed, all);
    let history = page("jobrun-history");
    let option = history
        .section("OPTIONS")
        .entries
        .iter()
        .find(|e| e.tag.starts_with("--outcome"))
        .expect("history --outcome")
        .body
        .clone();
    let values = option.split("One of: ").nth(1).expect("--outcome values");
    let values: Vec<&str> = words(&values[..values.find('.').unwrap()]).collect();
    assert_eq!(
        values, all,
        "history --outcome takes other values than Outcome::ALL"
    );
}

/// Each command's page describes it in sentences of its own, and the
/// pages of commands that only read say what `--db-mode` means for them.
#[test]
fn command_pages_have_their_own_description() {
    let root = documented();
    for name in READERS {
        assert!(root.find_subcommand(name).is_some(), "no command {name}");
    }
    for sub in subcommands(&root) {
        let p = page(&page_name(sub));
        let about = sub.get_about().unwrap().to_string();
        let description = p.section("DESCRIPTION").text.replace('\n', " ");
        assert!(
            description.len() > 2 * about.len() && !description.contains(&about),
            "{}: DESCRIPTION repeats the summary: {description:?}",
            p.file
        );
        assert!(description.matches(". ").count() >= 2, "{}", p.file);
        let db_mode = p
            .section("OPTIONS")
            .entries
            .iter()
            .find(|e| e.tag.starts_with("--db-mode"))
            .unwrap_or_else(|| panic!("{}: no --db-mode", p.file))
            .body
            .clone();
        let reader = READERS.contains(&sub.get_name());
        assert_eq!(
            db_mode.contains("expects"),
            reader,
            "{}: --db-mode: {db_mode}",
            p.file
        );
        assert_eq!(db_mode.contains("creates for"), !reader, "{}", p.file);
    }
}
