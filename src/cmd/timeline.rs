//! `jobrun timeline [NAME...] [--since 24h]`: when things ran, as a picture
//! for the operator who would rather look than read. One row per job, time
//! across the terminal's width; passes are bars (those that ended badly
//! marked apart from ok ones), skips are ticks, queue waits are shaded.
//!
//! `render` is pure: the rows, the window, the width and whether to colour
//! in, out comes the text; the command only gathers those. Colour only on a
//! terminal, and never with `NO_COLOR`.

use std::io::IsTerminal;

use anyhow::Result;

use crate::cli::TimelineArgs;
use crate::clock::now_ms;
use crate::cmd::{all_known, open_to_read};
use crate::exit;
use crate::policy::outcome::{Outcome, PassRecord};
use crate::report::{escape, utc_ms};
use crate::settings::{self, StoreChoice};
use crate::store::HistoryQuery;

/// The width when neither `COLUMNS` nor a terminal says.
pub const DEFAULT_WIDTH: usize = 100;
/// The narrowest picture drawn, whatever the width says.
const MIN_CELLS: usize = 10;
/// The widest name column; longer names are cut.
const MAX_NAME: usize = 24;

/// What a cell shows, weakest first: where marks meet in a cell the
/// strongest wins, so a failure is never hidden by an ok pass beside it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Mark {
    Empty,
    /// Queued for a slot (`--wait`).
    Wait,
    /// A pass that did not run its command: skipped or coalesced.
    Skip,
    /// The command ran and was stopped by the operator.
    Stopped,
    /// A pass holding a slot now.
    Running,
    /// The command ran and ended ok.
    Ok,
    /// A wait that ran out (`wait-expired`).
    GaveUp,
    /// The pass ended badly (`Outcome::ended_badly`).
    Bad,
}

impl Mark {
    pub const LEGEND: [Mark; 7] = [
        Mark::Running,
        Mark::Ok,
        Mark::Bad,
        Mark::Stopped,
        Mark::Wait,
        Mark::GaveUp,
        Mark::Skip,
    ];

    pub fn glyph(self) -> char {
        match self {
            Mark::Empty => '·',
            Mark::Wait => '░',
            Mark::Skip => '|',
            Mark::Stopped => '▒',
            Mark::Running => '=',
            Mark::Ok => '█',
            Mark::GaveUp => '!',
            Mark::Bad => 'X',
        }
    }

    pub fn meaning(self) -> &'static str {
        match self {
            Mark::Empty => "nothing",
            Mark::Wait => "queued",
            Mark::Skip => "skipped",
            Mark::Stopped => "stopped",
            Mark::Running => "running",
            Mark::Ok => "ok",
            Mark::GaveUp => "gave up waiting",
            Mark::Bad => "ended badly",
        }
    }

    /// The ANSI colour a terminal shows it in.
    fn colour(self) -> &'static str {
        match self {
            Mark::Empty | Mark::Wait => "\x1b[2m",
            Mark::Skip => "\x1b[33m",
            Mark::Stopped => "\x1b[36m",
            Mark::Ok | Mark::Running => "\x1b[32m",
            Mark::GaveUp | Mark::Bad => "\x1b[1;31m",
        }
    }
}

/// The span of time drawn: `since_ms` to `now_ms`, wall clock.
#[derive(Debug, Clone, Copy)]
pub struct Window {
    pub since_ms: i64,
    pub now_ms: i64,
}

/// One job's row: its name, its passes in the window, when each pass
/// holding a slot now took it, and when each pass queued now arrived.
#[derive(Debug, Clone)]
pub struct Row {
    pub job: String,
    pub passes: Vec<PassRecord>,
    pub running_since_ms: Vec<i64>,
    pub queued_since_ms: Vec<i64>,
}

/// How wide to draw: `COLUMNS` when it is a number, else the terminal's
/// width, else `DEFAULT_WIDTH`.
pub fn width(columns: Option<&str>, terminal: Option<usize>) -> usize {
    columns
        .and_then(|c| c.trim().parse::<usize>().ok())
        .filter(|&c| c > 0)
        .or(terminal)
        .unwrap_or(DEFAULT_WIDTH)
}

/// Whether to colour in: on a terminal, and never with `NO_COLOR` set to
/// anything but the empty string (no-color.org).
pub fn colour(terminal: bool, no_color: Option<&str>) -> bool {
    terminal && no_color.is_none_or(str::is_empty)
}

/// The cells a pass marks, as (from, to, mark) in wall-clock ms.
fn segments(p: &PassRecord) -> Vec<(i64, i64, Mark)> {
    let waited = p.waited_ms.unwrap_or(0).max(0);
    let began = p.started_at_ms.saturating_add(waited);
    let mut out = Vec::new();
    match p.outcome {
        Outcome::Skipped | Outcome::Coalesced | Outcome::Done => {
            out.push((p.started_at_ms, p.started_at_ms, Mark::Skip))
        }
        Outcome::WaitExpired => {
            out.push((p.started_at_ms, p.ended_at_ms, Mark::Wait));
            out.push((p.ended_at_ms, p.ended_at_ms, Mark::GaveUp));
        }
        o => {
            if waited > 0 {
                out.push((p.started_at_ms, began, Mark::Wait));
            }
            let end = began
                .saturating_add(p.duration_ms.max(0))
                .max(p.ended_at_ms);
            let mark = if o == Outcome::Ok {
                Mark::Ok
            } else if o.ended_badly() {
                Mark::Bad
            } else {
                Mark::Stopped
            };
            out.push((began, end, mark));
        }
    }
    out
}

/// The row's cells: each pass's segments, the strongest mark per cell.
pub fn cells(passes: &[PassRecord], w: Window, n: usize) -> Vec<Mark> {
    let mut cells = vec![Mark::Empty; n];
    let span = (w.now_ms - w.since_ms).max(1) as i128;
    let index = |t: i64| -> Option<usize> {
        if t < w.since_ms || t > w.now_ms {
            return None;
        }
        let i = (t - w.since_ms) as i128 * n as i128 / span;
        Some((i as usize).min(n - 1))
    };
    for p in passes {
        for (from, to, mark) in segments(p) {
            let (from, to) = (from.max(w.since_ms), to.min(w.now_ms));
            let (Some(a), Some(b)) = (index(from), index(to.max(from))) else {
                continue;
            };
            for c in &mut cells[a..=b] {
                *c = (*c).max(mark);
            }
        }
    }
    cells
}

/// The cells of a pass that has been in `mark` (holding a slot, queued)
/// from `since_ms` until now.
fn until_now(since_ms: i64, mark: Mark, w: Window, n: usize) -> Vec<Mark> {
    let mut marks = vec![Mark::Empty; n];
    let span = (w.now_ms - w.since_ms).max(1) as i128;
    let from = (since_ms.clamp(w.since_ms, w.now_ms) - w.since_ms) as i128 * n as i128 / span;
    for m in &mut marks[(from as usize).min(n - 1)..] {
        *m = mark;
    }
    marks
}

/// Text cut to `n` characters (with `…` when cut), padded to `n`.
fn fit(s: &str, n: usize) -> String {
    let count = s.chars().count();
    if count <= n {
        format!("{s}{}", " ".repeat(n - count))
    } else {
        let mut t: String = s.chars().take(n.saturating_sub(1)).collect();
        t.push('…');
        t
    }
}

/// Marks as text, coloured by runs when asked.
fn paint(marks: &[Mark], colour: bool) -> String {
    let mut out = String::new();
    let mut last = None;
    for &m in marks {
        if colour && last != Some(m) {
            if last.is_some() {
                out.push_str("\x1b[0m");
            }
            out.push_str(m.colour());
        }
        out.push(m.glyph());
        last = Some(m);
    }
    if colour && last.is_some() {
        out.push_str("\x1b[0m");
    }
    out
}

/// The picture: a header with the window's ends, one row per job, a legend.
pub fn render(rows: &[Row], w: Window, width: usize, colour: bool) -> String {
    let names: Vec<String> = rows.iter().map(|r| escape(&r.job)).collect();
    let name_w = names
        .iter()
        .map(|n| n.chars().count())
        .max()
        .unwrap_or(0)
        .clamp(3, MAX_NAME);
    // "NAME |cells|"
    let n = width.saturating_sub(name_w + 3).max(MIN_CELLS);
    let (from, to) = (utc_ms(w.since_ms), utc_ms(w.now_ms));
    let gap = (n + 2).saturating_sub(from.chars().count() + to.chars().count());
    let mut out = format!(
        "{} {from}{}{to}\n",
        " ".repeat(name_w),
        " ".repeat(gap.max(1))
    );
    for (row, name) in rows.iter().zip(&names) {
        let mut marks = cells(&row.passes, w, n);
        let open = row
            .running_since_ms
            .iter()
            .map(|&s| (s, Mark::Running))
            .chain(row.queued_since_ms.iter().map(|&s| (s, Mark::Wait)));
        for (since, mark) in open {
            let held = until_now(since, mark, w, n);
            for (m, h) in marks.iter_mut().zip(held) {
                *m = (*m).max(h);
            }
        }
        out.push_str(&format!(
            "{} |{}|\n",
            fit(name, name_w),
            paint(&marks, colour)
        ));
    }
    let legend: Vec<String> = Mark::LEGEND
        .iter()
        .map(|&m| format!("{} {}", paint(&[m], colour), m.meaning()))
        .collect();
    out.push_str(&format!("{} {}\n", " ".repeat(name_w), legend.join("  ")));
    out
}

pub fn run(choice: &StoreChoice, a: TimelineArgs) -> Result<i32> {
    let names = settings::stored_job_names(&a.names)?;
    let since = settings::duration("--since", &a.since)?;
    let Some(mut store) = open_to_read(choice)? else {
        return Ok(if names.is_empty() {
            exit::OK
        } else {
            exit::INCOMPLETE
        });
    };
    if !all_known(store.as_mut(), &names, &choice.spec, "")? {
        return Ok(exit::INCOMPLETE);
    }
    let now = now_ms();
    let since_ms = now.saturating_sub(i64::try_from(since.as_millis()).unwrap_or(i64::MAX));
    let mut rows = Vec::new();
    for job in store.jobs(&names)? {
        let passes = store.history(&HistoryQuery {
            job: Some(job.name.clone()),
            since: Some(since),
            outcome: None,
            limit: u32::MAX / 2,
        })?;
        let running_since_ms = store
            .leases(std::slice::from_ref(&job.name))?
            .iter()
            .map(|l| now.saturating_sub(l.held_ms))
            .collect();
        let queued_since_ms = store
            .waiters(std::slice::from_ref(&job.name))?
            .iter()
            .map(|q| now.saturating_sub(q.waited_ms))
            .collect();
        rows.push(Row {
            job: job.name,
            passes,
            running_since_ms,
            queued_since_ms,
        });
    }
    let stdout = std::io::stdout();
    let terminal = stdout.is_terminal();
    let tty_width = terminal
        .then(|| terminal_size::terminal_size_of(&stdout))
        .flatten()
        .map(|(w, _)| usize::from(w.0));
    let columns = std::env::var("COLUMNS").ok();
    let no_color = std::env::var("NO_COLOR").ok();
    let text = render(
        &rows,
        Window {
            since_ms,
            now_ms: now,
        },
        width(columns.as_deref(), tty_width),
        colour(terminal, no_color.as_deref()),
    );
    print!("{text}");
    Ok(exit::OK)
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR: i64 = 3_600_000;
    /// 2026-12-01T00:00:00Z.
    const NOW: i64 = 1_796_083_200_000;

    fn pass(job: &str, start_h: f64, waited_m: i64, ran_m: i64, outcome: Outcome) -> PassRecord {
        let started = NOW - (start_h * HOUR as f64) as i64;
        let (waited, ran) = (waited_m * 60_000, ran_m * 60_000);
        PassRecord {
            job: job.into(),
            pass_id: "p".into(),
            token: Some(1),
            slot: Some(0),
            host: "h".into(),
            pid: 1,
            started_at_ms: started,
            ended_at_ms: started + waited + ran,
            duration_ms: ran,
            waited_ms: Some(waited),
            exit_code: None,
            signal: None,
            outcome,
            freed: None,
            window: None,
        }
    }

    fn fixed() -> (Vec<Row>, Window) {
        let rows = vec![
            Row {
                job: "feeds.poll".into(),
                passes: vec![
                    pass("feeds.poll", 22.5, 0, 60, Outcome::Ok),
                    pass("feeds.poll", 16.5, 0, 90, Outcome::Failed),
                    pass("feeds.poll", 10.5, 0, 5, Outcome::Skipped),
                    pass("feeds.poll", 4.5, 60, 60, Outcome::Ok),
                ],
                running_since_ms: vec![],
                queued_since_ms: vec![],
            },
            Row {
                job: "digest.flush-with-a-very-long-name".into(),
                passes: vec![
                    pass("d", 20.5, 0, 30, Outcome::Abandoned),
                    pass("d", 12.5, 120, 0, Outcome::WaitExpired),
                    pass("d", 2.5, 0, 30, Outcome::Stopped),
                ],
                running_since_ms: vec![NOW - HOUR],
                queued_since_ms: vec![NOW - 2 * HOUR],
            },
            Row {
                job: "idle".into(),
                passes: vec![],
                running_since_ms: vec![],
                queued_since_ms: vec![],
            },
        ];
        let w = Window {
            since_ms: NOW - 24 * HOUR,
            now_ms: NOW,
        };
        (rows, w)
    }

    #[test]
    fn snapshot_without_colour() {
        let (rows, w) = fixed();
        // 45 cells of 32 minutes after a name column of 24.
        let want = [
            "                         2026-11-30T00:00:00Z       2026-12-01T00:00:00Z",
            "feeds.poll               |··███·········XXX········|··········░░███····|",
            "digest.flush-with-a-ver… |······XX·············░░░░!··············▒▒░==|",
            "idle                     |·············································|",
            "                         = running  █ ok  X ended badly  ▒ stopped  ░ queued  ! \
             gave up waiting  | skipped",
            "",
        ]
        .join("\n");
        assert_eq!(render(&rows, w, 72, false), want);
    }

    #[test]
    fn snapshot_in_colour() {
        let (rows, w) = fixed();
        let text = render(&rows[..1], w, 40, true);
        let row = text.lines().nth(1).unwrap();
        let (dim, ok, bad, skip, end) =
            ("\x1b[2m", "\x1b[32m", "\x1b[1;31m", "\x1b[33m", "\x1b[0m");
        let want = format!(
            "feeds.poll |{dim}·{end}{ok}██{end}{dim}·····{end}{bad}XXX{end}{dim}····{end}\
             {skip}|{end}{dim}·····{end}{dim}░░{end}{ok}██{end}{dim}··{end}|"
        );
        assert_eq!(row, want);
        // Without colour the same cells, plain.
        let plain = render(&rows[..1], w, 40, false);
        assert_eq!(
            plain.lines().nth(1).unwrap(),
            "feeds.poll |·██·····XXX····|·····░░██··|"
        );
    }

    #[test]
    fn colour_only_on_a_terminal_and_never_with_no_color() {
        assert!(colour(true, None));
        assert!(colour(true, Some("")));
        assert!(!colour(true, Some("1")));
        assert!(!colour(false, None));
    }

    #[test]
    fn width_comes_from_columns_then_the_terminal() {
        assert_eq!(width(Some("120"), Some(80)), 120);
        assert_eq!(width(Some("x"), Some(80)), 80);
        assert_eq!(width(None, Some(80)), 80);
        assert_eq!(width(None, None), DEFAULT_WIDTH);
    }

    #[test]
    fn a_failure_beside_an_ok_pass_stays_visible() {
        let w = Window {
            since_ms: NOW - 24 * HOUR,
            now_ms: NOW,
        };
        let passes = [
            pass("j", 12.0, 0, 1, Outcome::Ok),
            pass("j", 11.99, 0, 1, Outcome::Failed),
        ];
        assert!(cells(&passes, w, 10).contains(&Mark::Bad));
    }
}
