//! The floor a pass is measured against (`scripts/bench.sh`): the same
//! durable work as `jobrun run JOB -- COMMAND` on a SQLite store and
//! nothing else. Open the store (WAL, synchronous=NORMAL), take a lease row
//! in one write transaction, run the command, then delete the row and
//! append a history row in a second one.
//!
//!     floor DB JOB COMMAND [ARGS...]

use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rusqlite::{Connection, TransactionBehavior::Immediate};

fn now_ms() -> i64 {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    now.as_millis() as i64
}

fn main() -> rusqlite::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (db, job, argv) = (&args[0], &args[1], &args[2..]);
    let mut c = Connection::open(db)?;
    c.busy_timeout(Duration::from_secs(5))?;
    c.execute_batch(
        "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;
         CREATE TABLE IF NOT EXISTS lease (job TEXT PRIMARY KEY, pid INTEGER, expires_ms INTEGER);
         CREATE TABLE IF NOT EXISTS history (id INTEGER PRIMARY KEY, job TEXT,
             started_ms INTEGER, ended_ms INTEGER, code INTEGER);",
    )?;
    let started = now_ms();
    let tx = c.transaction_with_behavior(Immediate)?;
    let sql = "INSERT INTO lease VALUES (?1, ?2, ?3) ON CONFLICT DO NOTHING";
    let taken = tx.execute(sql, (job, std::process::id(), started + 300_000))? == 1;
    tx.commit()?;
    if !taken {
        return Ok(()); // held: skip, as `jobrun run` does by default
    }
    let status = Command::new(&argv[0]).args(&argv[1..]).status();
    let code = status.map_or(127, |s| s.code().unwrap_or(128));
    let tx = c.transaction_with_behavior(Immediate)?;
    tx.execute("DELETE FROM lease WHERE job = ?1", [job])?;
    let sql = "INSERT INTO history (job, started_ms, ended_ms, code) VALUES (?1, ?2, ?3, ?4)";
    tx.execute(sql, (job, started, now_ms(), code))?;
    tx.commit()?;
    drop(c);
    std::process::exit(code)
}
