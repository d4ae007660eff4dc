//! What `scripts/bench.sh` measures with, so that it needs nothing the
//! machine may lack (no hyperfine):
//!
//!     bench-runner time RUNS WARMUP LABEL [VAR=VALUE...] CMD... [::: LABEL ...]...
//!         runs the commands round-robin (A, B, C, A, B, C, ...), RUNS timed
//!         runs each after WARMUP untimed rounds, each with its own
//!         VAR=VALUE in its environment; prints per label the median, 10th
//!         and 90th percentile, min and max wall time in ms
//!     bench-runner phases RUNS CMD...
//!         runs a jobrun command RUNS times with JOBRUN_TRACE_PHASES set to
//!         the moment of its spawn; prints the median of each phase in µs
//!     bench-runner seed DB PASSES
//!         gives every job of a jobrun store PASSES history rows, copies
//!         of its latest one, spread back in time
//!     bench-runner spawn N DIR CMD...
//!         starts N copies of CMD at once ({} in it stands for 1..N), each
//!         with its stderr in DIR/I.err; waits for all and writes each exit
//!         code (128+N for signal N) to DIR/I.rc; prints the seconds it took
//!         to start them all
//!     bench-runner lost DB DIR JOB_PREFIX
//!         of the passes spawned into DIR, how many lost their lease while
//!         passes were starting, while all ran, once they began to end, and
//!         at a time their stderr does not tell
//!     bench-runner leases DB
//!         prints how many leases the store holds now
//!     bench-runner watch DB STOPFILE
//!         counts the store's leases every 250 ms until STOPFILE exists;
//!         prints the largest count seen

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn usage() -> ! {
    eprintln!(
        "usage: bench-runner time|phases|seed|spawn|lost|leases|watch ... (see benches/runner.rs)"
    );
    std::process::exit(2)
}

/// Nearest-rank percentile of sorted values.
fn pct(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil().max(1.0) as usize;
    sorted[rank.min(sorted.len()) - 1]
}

fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes only into `ts`.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// `VAR=VALUE... CMD ARGS...` as a command with those variables set.
fn command(argv: &[String]) -> Command {
    let is_var = |a: &String| {
        a.split_once('=').is_some_and(|(k, _)| {
            !k.is_empty() && k.chars().all(|c| c.is_ascii_uppercase() || c == '_')
        })
    };
    let vars = argv.iter().take_while(|a| is_var(a)).count();
    let mut c = Command::new(&argv[vars]);
    for v in &argv[..vars] {
        if let Some((k, val)) = v.split_once('=') {
            c.env(k, val);
        }
    }
    c.args(&argv[vars + 1..])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    c
}

fn time(args: &[String]) {
    let runs: usize = args
        .first()
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| usage());
    let warmup: usize = args
        .get(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| usage());
    let cmds: Vec<(&String, &[String])> = args[2..]
        .split(|a| a == ":::")
        .filter(|c| c.len() >= 2)
        .map(|c| (&c[0], &c[1..]))
        .collect();
    let mut took: Vec<Vec<f64>> = vec![vec![]; cmds.len()];
    for round in 0..warmup + runs {
        for (i, (_, argv)) in cmds.iter().enumerate() {
            let mut c = command(argv);
            let t = Instant::now();
            let ok = c.status().is_ok_and(|s| s.success());
            let ms = t.elapsed().as_secs_f64() * 1000.0;
            if !ok {
                eprintln!("bench-runner: {} failed", argv.join(" "));
                std::process::exit(1);
            }
            if round >= warmup {
                took[i].push(ms);
            }
        }
    }
    for ((label, _), mut t) in cmds.iter().zip(took) {
        t.sort_by(f64::total_cmp);
        println!(
            "{label} {:.3} {:.3} {:.3} {:.3} {:.3} {}",
            pct(&t, 50.0),
            pct(&t, 10.0),
            pct(&t, 90.0),
            t[0],
            t[t.len() - 1],
            t.len()
        );
    }
}

fn phases(args: &[String]) {
    let runs: usize = args
        .first()
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| usage());
    let argv = &args[1..];
    let mut order: Vec<String> = vec![];
    let mut took: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for _ in 0..runs {
        let mut c = command(argv);
        c.stderr(Stdio::piped());
        let t0 = monotonic_ns();
        c.env("JOBRUN_TRACE_PHASES", t0.to_string());
        let out = c.output().expect("cannot run the command");
        let end = monotonic_ns();
        let mut last = t0;
        let mut names = vec![];
        for line in String::from_utf8_lossy(&out.stderr).lines() {
            let mut f = line.split_whitespace();
            let (Some("jobrun-phase"), Some(name), Some(at)) = (f.next(), f.next(), f.next())
            else {
                continue;
            };
            let at: u64 = at.parse().unwrap_or(last);
            took.entry(name.to_string())
                .or_default()
                .push(at.saturating_sub(last) as f64 / 1000.0);
            names.push(name.to_string());
            last = at;
        }
        took.entry("exit".into())
            .or_default()
            .push(end.saturating_sub(last) as f64 / 1000.0);
        took.entry("total".into())
            .or_default()
            .push((end - t0) as f64 / 1000.0);
        if names.len() > order.len() {
            order = names;
        }
    }
    order.push("exit".into());
    order.push("total".into());
    for name in order {
        let mut t = took.remove(&name).unwrap_or_default();
        t.sort_by(f64::total_cmp);
        println!(
            "{name} {:.0} {:.0} {:.0} {}",
            pct(&t, 50.0),
            pct(&t, 10.0),
            pct(&t, 90.0),
            t.len()
        );
    }
}

fn seed(args: &[String]) -> rusqlite::Result<()> {
    let (Some(db), Some(passes)) = (
        args.first(),
        args.get(1).and_then(|p| p.parse::<i64>().ok()),
    ) else {
        usage()
    };
    let c = rusqlite::Connection::open(db)?;
    c.busy_timeout(Duration::from_secs(30))?;
    // Each copy starts a minute before the next; pass ids stay unique.
    let sql = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?1)
        INSERT INTO history (job, pass_id, token, slot, host, pid, started_ms, ended_ms,
            duration_ms, exit_code, signal, outcome, waited_ms)
        SELECT h.job, printf('%s%06d', h.pass_id, n.i), h.token - n.i, h.slot, h.host, h.pid,
            h.started_ms - n.i * 60000, h.ended_ms - n.i * 60000,
            h.duration_ms + (n.i % 97), h.exit_code, h.signal,
            CASE WHEN n.i % 50 = 0 THEN 'failed' ELSE h.outcome END, h.waited_ms
        FROM history h, n
        WHERE h.id IN (SELECT MAX(id) FROM history GROUP BY job)";
    c.execute_batch("BEGIN IMMEDIATE")?;
    let n = c.execute(sql, [passes - 1])?;
    c.execute_batch("COMMIT")?;
    println!("{n}");
    Ok(())
}

/// The leases the store holds now; 0 when it cannot be read.
fn leases(db: &str) -> i64 {
    rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
        .and_then(|c| {
            c.busy_timeout(Duration::from_millis(50))?;
            c.query_row("SELECT count(*) FROM leases", [], |r| r.get::<_, i64>(0))
        })
        .unwrap_or(0)
}

fn watch(args: &[String]) -> rusqlite::Result<()> {
    let (Some(db), Some(stop)) = (args.first(), args.get(1)) else {
        usage()
    };
    // One connection for the whole watch, read every 250 ms: opening and
    // closing one at each sample would be load the passes do not make.
    let c = rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)?;
    c.busy_timeout(Duration::from_millis(50))?;
    let mut peak = 0i64;
    while !std::path::Path::new(stop).exists() {
        let n = c
            .query_row("SELECT count(*) FROM leases", [], |r| r.get::<_, i64>(0))
            .unwrap_or(0);
        peak = peak.max(n);
        std::thread::sleep(Duration::from_millis(250));
    }
    println!("{peak}");
    Ok(())
}

fn spawn(args: &[String]) {
    let n: usize = args
        .first()
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| usage());
    let dir = std::path::PathBuf::from(args.get(1).unwrap_or_else(|| usage()));
    let argv = &args[2..];
    let t = Instant::now();
    // Every stderr file is made before the first pass starts (and closed:
    // thousands held open would pass a common limit on open files), and
    // the exit codes are written once all have ended: files made while the
    // passes start or end would be load the passes themselves do not make.
    let err_of = |i: usize| dir.join(format!("{i}.err"));
    for i in 1..=n {
        std::fs::File::create(err_of(i)).expect("cannot write DIR");
    }
    let mut children = vec![];
    let mut codes = vec![];
    for i in 1..=n {
        let argv: Vec<String> = argv
            .iter()
            .map(|a| a.replace("{}", &i.to_string()))
            .collect();
        let mut c = command(&argv);
        let err = std::fs::OpenOptions::new()
            .write(true)
            .open(err_of(i))
            .expect("cannot write DIR");
        c.stderr(err);
        match c.spawn() {
            Ok(child) => children.push((i, child)),
            Err(e) => {
                let _ = std::fs::write(err_of(i), format!("spawn: {e}\n"));
                codes.push((i, 127));
            }
        }
    }
    println!("{:.1}", t.elapsed().as_secs_f64());
    for (i, mut child) in children {
        use std::os::unix::process::ExitStatusExt;
        let code = match child.wait() {
            Ok(s) => s.code().unwrap_or(128 + s.signal().unwrap_or(0)),
            Err(_) => 255,
        };
        codes.push((i, code));
    }
    for (i, code) in codes {
        let _ = std::fs::write(dir.join(format!("{i}.rc")), format!("{code}\n"));
    }
}

/// When the passes spawned into DIR lost their leases: while passes were
/// still starting (before the last one's start), while all of them ran, or
/// once they had begun to end (from the first one's end). The starts and
/// ends are the store's history rows of the jobs named JOB_PREFIX...; a
/// loss is dated by its pass's stderr file when the "lease lost" line is
/// its last line (a pass says nothing more until its command ends), and
/// counted as undated otherwise. Prints the four counts, then "overlap"
/// when the last start came after the first end (the commands did not
/// outlive the start-up, so the phases are not apart), or "none" alone when
/// the store has no such passes.
fn lost(args: &[String]) -> rusqlite::Result<()> {
    let (Some(db), Some(dir), Some(prefix)) = (args.first(), args.get(1), args.get(2)) else {
        usage()
    };
    let c = rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)?;
    let span: (Option<i64>, Option<i64>) = c.query_row(
        "SELECT max(started_ms), min(ended_ms) FROM history \
         WHERE substr(job, 1, length(?1)) = ?1",
        [prefix],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    let (Some(last_start), Some(first_end)) = span else {
        println!("none");
        return Ok(());
    };
    let (mut starting, mut running, mut ending, mut undated) = (0, 0, 0, 0);
    for e in std::fs::read_dir(dir).expect("cannot read DIR").flatten() {
        let path = e.path();
        if path.extension().is_none_or(|x| x != "err") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        if !text.contains("lease lost") {
            continue;
        }
        let last = text.lines().last().unwrap_or_default();
        let at = e
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map(|d| d.as_millis() as i64);
        match at.filter(|_| last.contains("lease lost")) {
            None => undated += 1,
            Some(at) if at < last_start => starting += 1,
            Some(at) if at < first_end => running += 1,
            Some(_) => ending += 1,
        }
    }
    let overlap = if last_start > first_end {
        " overlap"
    } else {
        ""
    };
    println!("{starting} {running} {ending} {undated}{overlap}");
    Ok(())
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let rest = args.get(1..).unwrap_or_default();
    let done = match args.first().map(String::as_str) {
        Some("time") => {
            time(rest);
            Ok(())
        }
        Some("phases") => {
            phases(rest);
            Ok(())
        }
        Some("seed") => seed(rest),
        Some("watch") => watch(rest),
        Some("spawn") => {
            spawn(rest);
            Ok(())
        }
        Some("lost") => lost(rest),
        Some("leases") => {
            println!("{}", leases(rest.first().unwrap_or_else(|| usage())));
            Ok(())
        }
        _ => usage(),
    };
    if let Err(e) = done {
        eprintln!("bench-runner: {e}");
        std::process::exit(1);
    }
}
