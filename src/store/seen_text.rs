//! The two JSON texts `check` and `metrics` parse once per job, read
//! without serde's generic machinery (which spent a third of a `metrics`
//! run on them):
//! - a job's latest passes as `job_recent` stores them, serde_json's text
//!   of `Seen`'s tuples, `[[id,attempted_ms,"host","outcome",held,
//!   duration_ms,ended_at_ms,exit_code,signal],...]` (`read`; a thousand
//!   jobs hold six megabytes of it, and every release reads its job's);
//! - a job's duration sketch as `job_stats` stores it,
//!   `[[bucket,passes],...]` (`pairs`).
//!
//! The invariant: each reads what serde_json reads, for every text. The
//! quick reader takes only the text serde_json writes (no whitespace, no
//! escape in a string, integers that fit their field) and hands anything
//! else, a row someone else wrote included, to serde_json itself.

use std::sync::Arc;

use crate::policy::outcome::{Outcome, Seen, RECENT};

/// The passes the text holds, or `None` if it does not read as
/// `Vec<Seen>`.
pub fn read(text: &str) -> Option<Vec<Seen>> {
    Quick::new(text)
        .list()
        .or_else(|| serde_json::from_str(text).ok())
}

/// A duration sketch as `job_stats` stores it, `[[bucket,passes],...]`,
/// or `None` if it does not read as `Vec<[i64; 2]>`; read the same way,
/// with the same invariant (`check` and `metrics` read one per job).
pub fn pairs(text: &str) -> Option<Vec<[i64; 2]>> {
    Quick::new(text)
        .pairs()
        .or_else(|| serde_json::from_str(text).ok())
}

/// The text of `seen`, as `read` takes it back.
pub fn write(seen: &[Seen]) -> String {
    serde_json::to_string(seen).unwrap_or_else(|_| "[]".into())
}

/// One entry as the text holds it, its host borrowed.
struct Entry<'a> {
    id: i64,
    attempted_ms: i64,
    host: &'a str,
    outcome: Outcome,
    held: bool,
    duration_ms: i64,
    ended_at_ms: i64,
    exit_code: Option<i32>,
    signal: Option<i32>,
}

impl Entry<'_> {
    fn owned(self, host: Arc<str>) -> Seen {
        Seen {
            id: self.id,
            attempted_ms: self.attempted_ms,
            host,
            outcome: self.outcome,
            held: self.held,
            duration_ms: self.duration_ms,
            ended_at_ms: self.ended_at_ms,
            exit_code: self.exit_code,
            signal: self.signal,
        }
    }
}

/// `text` with `newer` kept in it (`Seen::keep`, each in turn), worked on
/// the text: what `write` gives for the list `read` gives with them kept,
/// at a release's cost of one walk of the text and one entry written,
/// where reading the list and writing it again was 6% of the
/// instructions of a whole pass. `None` where it cannot be done so: nothing to add, the
/// text does not take the quick way, `newer` is not in row order, its
/// first is not after every entry the text holds, or it alone fills
/// `RECENT` (the caller reads the list then).
pub fn append(text: &str, newer: &[Seen]) -> Option<String> {
    let in_order = newer.windows(2).all(|w| w[0].id < w[1].id);
    if newer.is_empty() || !in_order || newer.len() >= RECENT {
        return None;
    }
    let mut starts = Vec::with_capacity(RECENT);
    let mut top = i64::MIN;
    Quick::new(text).entries(|at, e| {
        starts.push(at);
        top = top.max(e.id);
    })?;
    if !starts.is_empty() && newer[0].id <= top {
        return None;
    }
    let drop = (starts.len() + newer.len()).saturating_sub(RECENT);
    let added = write(newer);
    let added = &added[1..added.len() - 1];
    let mut out = String::with_capacity(text.len() + added.len() + 1);
    out.push('[');
    if let Some(&from) = starts.get(drop) {
        out.push_str(&text[from..text.len() - 1]);
        if !added.is_empty() {
            out.push(',');
        }
    }
    out.push_str(added);
    out.push(']');
    Some(out)
}

/// A cursor over the text; every step gives `None` on anything but the
/// exact shape serde_json writes.
struct Quick<'a> {
    text: &'a str,
    at: usize,
}

impl<'a> Quick<'a> {
    fn new(text: &'a str) -> Quick<'a> {
        Quick { text, at: 0 }
    }

    fn list(self) -> Option<Vec<Seen>> {
        let mut out = Vec::with_capacity(RECENT);
        let mut host: Arc<str> = Arc::from("");
        self.entries(|_, e| {
            if *host != *e.host {
                host = e.host.into();
            }
            out.push(e.owned(host.clone()));
        })?;
        Some(out)
    }

    fn pairs(self) -> Option<Vec<[i64; 2]>> {
        let mut out = Vec::new();
        self.items(Self::pair, |_, p| out.push(p))?;
        Some(out)
    }

    /// Walk the whole text, handing each entry and where it starts to
    /// `each`; `None` unless all of it takes the quick way.
    fn entries(self, each: impl FnMut(usize, Entry<'a>)) -> Option<()> {
        self.items(Self::entry, each)
    }

    /// Walk the whole text as a list of what `item` reads, handing each
    /// and where it starts to `each`.
    fn items<T>(
        mut self,
        item: impl Fn(&mut Self) -> Option<T>,
        mut each: impl FnMut(usize, T),
    ) -> Option<()> {
        self.byte(b'[')?;
        if self.peek() == Some(b']') {
            self.at += 1;
        } else {
            loop {
                let start = self.at;
                each(start, item(&mut self)?);
                match self.next()? {
                    b',' => continue,
                    b']' => break,
                    _ => return None,
                }
            }
        }
        (self.at == self.text.len()).then_some(())
    }

    fn entry(&mut self) -> Option<Entry<'a>> {
        self.byte(b'[')?;
        let id = self.int()?;
        self.byte(b',')?;
        let attempted_ms = self.int()?;
        self.byte(b',')?;
        let host = self.string()?;
        self.byte(b',')?;
        let outcome = self.string()?;
        // Its own names only (an earlier jobrun's is serde_json's to read),
        // matched on constants: no call to `memcmp` per entry.
        let outcome =
            Outcome::parse(outcome).filter(|_| outcome != Outcome::WAIT_EXPIRED_BEFORE)?;
        self.byte(b',')?;
        let held = self.bool()?;
        self.byte(b',')?;
        let duration_ms = self.int()?;
        self.byte(b',')?;
        let ended_at_ms = self.int()?;
        self.byte(b',')?;
        let exit_code = self.opt_i32()?;
        self.byte(b',')?;
        let signal = self.opt_i32()?;
        self.byte(b']')?;
        Some(Entry {
            id,
            attempted_ms,
            host,
            outcome,
            held,
            duration_ms,
            ended_at_ms,
            exit_code,
            signal,
        })
    }

    fn pair(&mut self) -> Option<[i64; 2]> {
        self.byte(b'[')?;
        let bucket = self.int()?;
        self.byte(b',')?;
        let passes = self.int()?;
        self.byte(b']')?;
        Some([bucket, passes])
    }

    fn peek(&self) -> Option<u8> {
        self.text.as_bytes().get(self.at).copied()
    }

    fn next(&mut self) -> Option<u8> {
        let b = self.peek()?;
        self.at += 1;
        Some(b)
    }

    fn byte(&mut self, want: u8) -> Option<()> {
        (self.next()? == want).then_some(())
    }

    /// The fixed word `word` next (compared as one array, without a call
    /// to `memcmp`).
    fn word<const N: usize>(&mut self, word: &[u8; N]) -> bool {
        let next = self.text.as_bytes().get(self.at..self.at + N);
        let found = next.and_then(|s| <&[u8; N]>::try_from(s).ok()) == Some(word);
        if found {
            self.at += N;
        }
        found
    }

    /// `-?(0|[1-9][0-9]*)` within i64, and not `-0` (serde_json reads it
    /// as a float). A fraction or an exponent after it fails at the byte
    /// the caller expects next. One walk of the digits, added up as u64
    /// (19 digits cannot overflow it; more cannot fit an i64): this was
    /// the costliest step of a `metrics` run.
    fn int(&mut self) -> Option<i64> {
        let bytes = self.text.as_bytes();
        let negative = bytes.get(self.at) == Some(&b'-');
        let start = self.at + usize::from(negative);
        let mut at = start;
        let mut magnitude: u64 = 0;
        while let Some(&b) = bytes.get(at) {
            let d = b.wrapping_sub(b'0');
            if d > 9 {
                break;
            }
            magnitude = magnitude.wrapping_mul(10).wrapping_add(u64::from(d));
            at += 1;
        }
        let digits = at - start;
        if digits == 0 || digits > 19 || (digits > 1 && bytes[start] == b'0') {
            return None;
        }
        let value = if negative {
            if magnitude == 0 || magnitude > i64::MIN.unsigned_abs() {
                return None;
            }
            (magnitude as i64).wrapping_neg()
        } else {
            i64::try_from(magnitude).ok()?
        };
        self.at = at;
        Some(value)
    }

    fn opt_i32(&mut self) -> Option<Option<i32>> {
        if self.word(b"null") {
            return Some(None);
        }
        i32::try_from(self.int()?).ok().map(Some)
    }

    fn bool(&mut self) -> Option<bool> {
        if self.word(b"true") {
            Some(true)
        } else if self.word(b"false") {
            Some(false)
        } else {
            None
        }
    }

    /// A string without escapes or control characters: the text between
    /// its quotes as it stands.
    fn string(&mut self) -> Option<&'a str> {
        self.byte(b'"')?;
        let start = self.at;
        let rest = &self.text.as_bytes()[start..];
        let len = rest
            .iter()
            .position(|&b| b == b'"' || b == b'\\' || b < 0x20)?;
        if rest[len] != b'"' {
            return None;
        }
        self.at = start + len + 1;
        Some(&self.text[start..start + len])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn serde(text: &str) -> Option<Vec<Seen>> {
        serde_json::from_str(text).ok()
    }

    /// A small deterministic generator (xorshift), so that a failure
    /// replays.
    struct Draw(u64);

    impl Draw {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }

        fn pick<T: Copy>(&mut self, from: &[T]) -> T {
            from[(self.next() % from.len() as u64) as usize]
        }
    }

    const INTS: [i64; 13] = [
        0,
        1,
        -1,
        9,
        10,
        1_796_217_209_338,
        999_999_999_999_999_999,
        -999_999_999_999_999_999,
        1_000_000_000_000_000_000,
        i64::MAX,
        i64::MIN,
        i64::MIN + 1,
        -42,
    ];
    const SMALL: [Option<i32>; 6] = [
        None,
        Some(0),
        Some(1),
        Some(-1),
        Some(i32::MAX),
        Some(i32::MIN),
    ];
    const HOSTS: [&str; 7] = [
        "vm",
        "",
        "db-1.example",
        "quote\"d",
        "back\\slash",
        "tab\there",
        "hôte-é",
    ];

    fn one(d: &mut Draw, id: i64) -> Seen {
        Seen {
            id,
            attempted_ms: d.pick(&INTS),
            host: d.pick(&HOSTS).into(),
            outcome: d.pick(&Outcome::ALL),
            held: d.pick(&[true, false]),
            duration_ms: d.pick(&INTS),
            ended_at_ms: d.pick(&INTS),
            exit_code: d.pick(&SMALL),
            signal: d.pick(&SMALL),
        }
    }

    fn list(d: &mut Draw) -> Vec<Seen> {
        (0..d.next() % 5)
            .map(|_| {
                let id = d.pick(&INTS);
                one(d, id)
            })
            .collect()
    }

    /// `append`'s answer the long way: the list read, each kept in turn.
    fn kept_in_list(text: &str, newer: &[Seen]) -> Option<String> {
        let mut kept = read(text)?;
        for s in newer {
            Seen::keep(&mut kept, s.clone());
        }
        Some(write(&kept))
    }

    #[test]
    fn a_pass_added_to_the_text_reads_as_one_kept_in_the_list() {
        let mut d = Draw(0x5851_f42d_4c95_7f2d);
        let (mut on_text, mut in_list) = (0, 0);
        let sizes = [0, 1, 2, 5, RECENT - 1, RECENT, RECENT + 2];
        for round in 0..600 {
            let len = d.pick(&sizes);
            let mut ids: Vec<i64> = (0..len as i64).map(|i| 10 + 3 * i).collect();
            if round % 5 == 0 {
                ids.reverse();
            }
            let mut kept: Vec<Seen> = ids.iter().map(|&id| one(&mut d, id)).collect();
            if round % 4 != 0 {
                // Escapes only now and then: a text with one is read in full.
                for s in kept
                    .iter_mut()
                    .filter(|s| s.host.contains(['"', '\\', '\t']))
                {
                    s.host = "vm".into();
                }
            }
            let mut text = write(&kept);
            if round % 3 == 0 && text.is_char_boundary(round % text.len()) {
                // Someone else's text: one byte changed or one cut short.
                let at = round % text.len();
                if text.as_bytes()[at].is_ascii() && round % 2 == 0 {
                    text.replace_range(at..at + 1, &char::from(d.pick(b",]0-x\\ ")).to_string());
                } else {
                    text.truncate(at);
                }
            }
            let top = ids.iter().copied().max().unwrap_or(0);
            let first = top + d.pick(&[-3, 0, 1, 7]);
            let mut newer: Vec<Seen> = (0..d.pick(&[0, 1, 2, 3]))
                .map(|i| one(&mut d, first + 2 * i))
                .collect();
            if round % 7 == 0 {
                newer.reverse();
            }
            match append(&text, &newer) {
                Some(t) => {
                    assert_eq!(Some(t), kept_in_list(&text, &newer), "{text}");
                    on_text += 1;
                }
                None => in_list += 1,
            }
        }
        assert!(on_text > 100 && in_list > 100, "{on_text} {in_list}");
    }

    #[test]
    fn what_jobrun_writes_reads_back_without_serde() {
        let mut d = Draw(0x9e37_79b9_7f4a_7c15);
        let mut quick = 0;
        for _ in 0..500 {
            let seen = list(&mut d);
            let text = write(&seen);
            assert_eq!(read(&text), Some(seen.clone()), "{text}");
            let plain = seen.iter().all(|s| !s.host.contains(['"', '\\', '\t']));
            if plain {
                assert_eq!(Quick::new(&text).list(), Some(seen), "{text}");
                quick += 1;
            }
        }
        assert!(quick > 100, "only {quick} lists took the quick way");
    }

    /// `text` cut short at every byte, and with each byte changed to one
    /// of `swaps` and dropped: the texts a reader must hand to serde_json.
    fn altered(d: &mut Draw, text: &str) -> Vec<String> {
        let swaps = [
            b' ', b'"', b'\\', b',', b'[', b']', b'0', b'1', b'9', b'-', b'.', b'e', b'n', b't',
            b'f', b'x', b'\n',
        ];
        let bytes = text.as_bytes();
        let mut variants = vec![format!("{text} ")];
        for at in 0..bytes.len() {
            if text.is_char_boundary(at) {
                variants.push(text[..at].to_string());
            }
            if bytes[at].is_ascii() {
                let mut changed = bytes.to_vec();
                changed[at] = d.pick(&swaps);
                variants.push(String::from_utf8(changed).unwrap());
                let mut dropped = bytes.to_vec();
                dropped.remove(at);
                variants.push(String::from_utf8(dropped).unwrap());
            }
        }
        variants
    }

    #[test]
    fn every_text_reads_as_serde_json_reads_it() {
        let mut d = Draw(0x2545_f491_4f6c_dd1d);
        let mut checked = 0;
        for _ in 0..300 {
            let text = write(&list(&mut d));
            assert_eq!(read(&text), serde(&text), "{text}");
            for v in altered(&mut d, &text) {
                assert_eq!(read(&v), serde(&v), "{v}");
                checked += 1;
            }
        }
        assert!(checked > 10_000, "{checked}");
        for v in [
            "[]",
            "[ ]",
            "",
            "[[1,2,\"h\",\"timed-out\",true,3,4,null,null]]",
            "[[1,2,\"h\",\"ok\",true,3,4,2147483648,null]]",
            "[[1,2,\"h\",\"ok\",true,3,4,-0,null]]",
            "[[01,2,\"h\",\"ok\",true,3,4,0,null]]",
            "[[1,2,\"h\",\"ok\",true,3,4,1.0,null]]",
            "[[1,2,\"h\",\"ok\",true,3,9223372036854775808,1,null]]",
            "[[1,2,\"h\",\"ok\",true,3,-9223372036854775809,1,null]]",
            "[[1,2,\"h\",\"ok\",true,3,4,1,null,5]]",
        ] {
            assert_eq!(read(v), serde(v), "{v}");
        }
    }

    #[test]
    fn every_sketch_reads_as_serde_json_reads_it() {
        let serde = |t: &str| serde_json::from_str::<Vec<[i64; 2]>>(t).ok();
        let mut d = Draw(0x9e37_79b9_7f4a_7c15);
        let mut checked = 0;
        for _ in 0..300 {
            let sketch: Vec<[i64; 2]> = (0..d.next() % 6)
                .map(|_| [d.pick(&INTS), d.pick(&INTS)])
                .collect();
            let text = serde_json::to_string(&sketch).unwrap();
            assert_eq!(pairs(&text), Some(sketch), "{text}");
            for v in altered(&mut d, &text) {
                assert_eq!(pairs(&v), serde(&v), "{v}");
                checked += 1;
            }
        }
        assert!(checked > 5_000, "{checked}");
        for v in [
            "[]",
            "[[1,2]]",
            "[[1,2,3]]",
            "[[1]]",
            "[1,2]",
            "[[-0,1]]",
            "[[1,2],]",
        ] {
            assert_eq!(pairs(v), serde(v), "{v}");
        }
    }
}
