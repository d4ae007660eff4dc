//! libpq's password file (`PGPASSFILE`, default `~/.pgpass`): where a
//! fleet's password lives when its connection strings carry none.
//!
//! Invariant, as in libpq: a file that group or others may read is never
//! used, and the warning that says so names the file, never its contents.
//! (Read only to connect: unused in a build without the PostgreSQL store.)
#![cfg_attr(not(feature = "postgres"), allow(dead_code))]

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// The password `file` holds for `want` (host, port, database, user), if
/// the file exists, is private, and has a matching line. A file open to
/// group or others is not used, and `warn` says so.
pub fn password(file: &Path, want: &[String; 4], warn: &mut dyn FnMut(String)) -> Option<String> {
    let meta = std::fs::metadata(file).ok()?;
    if !meta.is_file() {
        return None;
    }
    if meta.permissions().mode() & 0o077 != 0 {
        warn(format!(
            "warning: password file {} has group or world access (mode {:04o}); it is not \
             used: chmod 0600 it",
            file.display(),
            meta.permissions().mode() & 0o7777
        ));
        return None;
    }
    let text = std::fs::read_to_string(file).ok()?;
    lookup(&text, want)
}

/// The password of the first `.pgpass` line matching `want` (host, port,
/// database, user; `*` matches anything; `\:` and `\\` are escapes).
fn lookup(text: &str, want: &[String; 4]) -> Option<String> {
    for line in text.lines() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let mut fields = vec![String::new()];
        let mut chars = line.chars();
        while let Some(c) = chars.next() {
            match c {
                '\\' => {
                    if let Some(n) = chars.next() {
                        fields.last_mut()?.push(n);
                    }
                }
                ':' if fields.len() < 5 => fields.push(String::new()),
                c => fields.last_mut()?.push(c),
            }
        }
        if fields.len() != 5 {
            continue;
        }
        if fields[..4]
            .iter()
            .zip(want)
            .all(|(f, w)| f == "*" || f == w)
        {
            return Some(fields[4].clone());
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pgpass_lines_match_like_libpq() {
        let text = "# comment\ndb1:5432:*:jobrun:first\n*:*:jobs:*:a\\:b\\\\c\n";
        let want = |h: &str, d: &str, u: &str| {
            [
                h.to_string(),
                "5432".to_string(),
                d.to_string(),
                u.to_string(),
            ]
        };
        assert_eq!(
            lookup(text, &want("db1", "x", "jobrun")).as_deref(),
            Some("first")
        );
        assert_eq!(
            lookup(text, &want("db2", "jobs", "u")).as_deref(),
            Some("a:b\\c")
        );
        assert_eq!(lookup(text, &want("db2", "other", "u")), None);
    }
}
